//! Which torrent a full store drops to make room for a new one.
//!
//! Refusing every new torrent once the store holds `max_torrents` let a few
//! networks lock honest torrents out: theirs filled it, and kept it full
//! with an announce per torrent and peer time-out (issue 28). Instead a
//! new torrent takes the place of the one worth least among a few drawn at
//! random (`SAMPLES`), so the cost per announce is bounded whatever the
//! store holds. Worth, as the store can judge it from what it holds:
//!
//! - Only a torrent whose peers, at most `MAX_PEERS`, all come from one
//!   network (`BlockLevel::Network`: an IPv4 /16, an IPv6 /48) may go: one
//!   client, as far as the tracker can tell, which the tracker serves no
//!   one else by holding (a lone peer is handed no peer at all), and which
//!   it holds again at that client's next announce. An attacker's torrents
//!   are such, unless it spends peers of other networks on each; a torrent
//!   that two networks share is never dropped. What bounds those is each
//!   network's cap of peers in the store (`network_peers`): each holds a
//!   peer of two networks, so two networks hold no more of them than one
//!   network's cap.
//! - First one no live peer holds (left for the cleaner): it is worth
//!   nothing.
//! - Then one of the network seen most often among those drawn: a network
//!   holding a large share of the store shows up more than once, so its
//!   torrents go before those of a client that holds a few (an honest one
//!   creating torrents in a store an attacker filled keeps its own).
//! - Then, among networks seen as often, one of the creator's own: a client
//!   that creates torrents past the store's size displaces its own first,
//!   so an attacker that holds a small share displaces others only while
//!   none of its own is among those drawn.
//! - Then one whose first peer's address spent most of its new-torrent
//!   budget this minute (`NewTorrentBudgets::spent`): the heaviest
//!   creators, even spread over many networks.
//! - Then fewer peers, then fewer completed downloads.

use std::cmp::Reverse;

/// Torrents drawn for one eviction: 8 entries (a cache line each) and the
/// peers of those with a few. If a share `p` of the store may go, 8 draws
/// find none with probability (1 - p)^8: 0.4% at p = 1/2.
pub(crate) const SAMPLES: usize = 8;

/// A torrent of more peers than this is never dropped, so that judging one
/// reads a cache line or two of peers at most.
pub(crate) const MAX_PEERS: usize = 4;

/// A torrent that may be dropped, as `least_worth` weighs it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Candidate {
    /// Whether a peer of it is live.
    pub live: bool,
    /// The network all its peers are in (`tracker_proto::block_key`); None
    /// for a torrent without peers.
    pub network: Option<u128>,
    /// Peers stored, live or not.
    pub peers: usize,
    pub completed: u32,
    /// How much of its budget of new torrents the address of its first
    /// peer spent this minute, in quarters (0 to 4).
    pub spent: u32,
}

/// How `least_worth` orders candidates: the greatest goes.
pub(crate) type Rank = (bool, usize, bool, u32, Reverse<usize>, Reverse<u32>);

/// The rank of `c`, one of `all` drawn for a new torrent from network
/// `creator` (see the module's comment).
pub(crate) fn rank(c: &Candidate, all: &[Candidate], creator: u128) -> Rank {
    let seen = all
        .iter()
        .filter(|other| c.network.is_some() && other.network == c.network)
        .count();
    (
        !c.live,
        seen,
        c.network == Some(creator),
        c.spent,
        Reverse(c.peers),
        Reverse(c.completed),
    )
}

/// The one of `candidates` to drop for a new torrent from network
/// `creator`: the greatest `rank`, the first of equals (they were drawn at
/// random); None if there are none.
pub(crate) fn least_worth(candidates: &[Candidate], creator: u128) -> Option<usize> {
    let mut best: Option<(usize, Rank)> = None;
    for (i, c) in candidates.iter().enumerate() {
        let r = rank(c, candidates, creator);
        if best.as_ref().is_none_or(|(_, b)| r > *b) {
            best = Some((i, r));
        }
    }
    best.map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: u128 = 1;
    const B: u128 = 2;
    const C: u128 = 3;

    fn lone(network: u128) -> Candidate {
        Candidate {
            live: true,
            network: Some(network),
            peers: 1,
            completed: 0,
            spent: 0,
        }
    }

    #[test]
    fn none_from_none() {
        assert_eq!(least_worth(&[], A), None);
    }

    #[test]
    fn a_torrent_no_live_peer_holds_goes_first() {
        let dead = Candidate {
            live: false,
            ..lone(B)
        };
        let empty = Candidate {
            live: false,
            network: None,
            peers: 0,
            ..lone(B)
        };
        assert_eq!(least_worth(&[lone(A), lone(A), dead], A), Some(2));
        assert_eq!(least_worth(&[lone(A), empty], A), Some(1));
    }

    #[test]
    fn then_the_network_seen_most_then_the_creators_own() {
        // A creator that holds few keeps its own while another network
        // shows up more often ...
        assert_eq!(least_worth(&[lone(B), lone(B), lone(A)], A), Some(0));
        assert_eq!(least_worth(&[lone(C), lone(B), lone(B)], A), Some(1));
        // ... and among networks seen as often, displaces its own.
        assert_eq!(least_worth(&[lone(B), lone(C), lone(A)], A), Some(2));
        assert_eq!(
            least_worth(&[lone(B), lone(A), lone(A), lone(B)], A),
            Some(1)
        );
    }

    #[test]
    fn then_the_heaviest_creator_then_fewer_peers_then_fewer_downloads() {
        let heavy = Candidate {
            spent: 4,
            ..lone(C)
        };
        assert_eq!(least_worth(&[lone(B), heavy], A), Some(1));
        let two = Candidate {
            peers: 2,
            ..lone(C)
        };
        assert_eq!(least_worth(&[two, lone(B)], A), Some(1));
        let downloaded = Candidate {
            completed: 9,
            ..lone(C)
        };
        assert_eq!(least_worth(&[downloaded, lone(B)], A), Some(1));
        // Equals: the first drawn.
        assert_eq!(least_worth(&[lone(B), lone(C)], A), Some(0));
    }
}
