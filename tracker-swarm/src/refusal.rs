//! What a client may do and why an announce is refused: shared by both
//! kinds of peer (BitTorrent's in `store`, WebRTC's in `rtc`), so that
//! neither imports the other for them.

use std::fmt;

use tracker_proto::BlockLevel;

/// Whether a client's announces count against the limits per client (the
/// budgets of new torrents, the cap on its peers in a torrent). Which
/// clients are exempt is the caller's to say (the runtime's
/// `runtime.exempt_networks`): the store does not know which networks are
/// exempt. The limits in total hold for all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quota {
    Counted,
    Exempt,
}

/// Why an announce was not served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnnounceRefused {
    /// The store holds `max_torrents`, the announce would create another one,
    /// and none of the torrents drawn could be dropped for it; torrents
    /// already stored are still served.
    TorrentLimit,
    /// The access list does not allow the torrent (decided by the shard before
    /// the store is asked: the store itself knows no lists).
    NotAllowed,
    /// A block the announcing address is in (at this width) has created its
    /// budget of torrents this minute (`new_torrents_per_minute`).
    AddressBudget(BlockLevel),
}

impl AnnounceRefused {
    /// What the client is told (UDP's error message, HTTP's failure reason).
    pub fn reason(self) -> &'static str {
        match self {
            AnnounceRefused::TorrentLimit => "tracker is full: torrent not stored",
            AnnounceRefused::NotAllowed => "torrent not allowed",
            AnnounceRefused::AddressBudget(BlockLevel::Address) => {
                "too many new torrents from this address: try again later"
            }
            AnnounceRefused::AddressBudget(BlockLevel::Subnet) => {
                "too many new torrents from this subnet: try again later"
            }
            AnnounceRefused::AddressBudget(BlockLevel::Network) => {
                "too many new torrents from this network: try again later"
            }
        }
    }
}

impl fmt::Display for AnnounceRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.reason())
    }
}

impl std::error::Error for AnnounceRefused {}
