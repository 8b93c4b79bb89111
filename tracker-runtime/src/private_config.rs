//! The `[private]` section: private mode (passkeys, accounting into a
//! UNIT3D site's database). Off by default; the public tracker pays nothing
//! for it.

use crate::config::{api_key, at_most, positive, within, ConfigError};
use documented::{Documented, DocumentedFields};
use serde::{Deserialize, Serialize};
use std::fmt;
use tracker_private::lists::ListLimits;
use tracker_private::{FactorOverrides, GlobalFactors};

/// Private mode: announces need a user's passkey in the URL
/// (`/announce/{passkey}` or `/{passkey}/announce` over HTTP and HTTPS; the
/// same path in BEP 41's URLData over UDP), only the site's registered
/// torrents are served, and every announce's bytes are credited into the
/// site's database (UNIT3D's tables, as UNIT3D-Announce writes them). A
/// passkey in an http:// or udp:// URL travels in clear text: give users
/// https:// announce URLs where that matters.
#[derive(Clone, PartialEq, Deserialize, Serialize, Documented, DocumentedFields)]
#[serde(default, deny_unknown_fields)]
pub struct PrivateConfig {
    /// Serve as a private tracker. Off: public, and nothing below is read.
    pub enabled: bool,
    /// The site's MySQL or MariaDB database:
    /// mysql://USER:PASSWORD@HOST:PORT/DATABASE. Read at start (users,
    /// groups, torrents, tokens, freeleech, the client blacklist) and
    /// written by one thread every flush_interval_ms. A secret: never
    /// logged.
    pub database_url: String,
    /// This tracker's name in the table tracker_flushes, where each flush's
    /// sequence number is written in the flush's own transaction, so that a
    /// flush retried after a lost acknowledgement is never counted twice.
    /// Trackers that share a database need names of their own; empty: the
    /// host name.
    pub tracker_id: String,
    /// Milliseconds between flushes (UNIT3D-Announce: 3000). What a kill -9
    /// can lose is at most this much of the accounting.
    pub flush_interval_ms: u32,
    /// Milliseconds before the first retry of a failed flush; each further
    /// failure doubles it, up to flush_retry_max_ms. The deltas keep
    /// merging meanwhile, one entry per active (user, torrent) and peer.
    pub flush_retry_min_ms: u32,
    /// The longest wait between retries.
    pub flush_retry_max_ms: u32,
    /// Rows in one INSERT at most (each statement also stays under MySQL's
    /// 65,535 placeholders).
    pub max_rows_per_statement: usize,
    /// Where the site's API listens (UNIT3D-Announce's routes under
    /// /announce/{api_key}/: users, groups, torrents, tokens, personal
    /// freeleech, featured torrents, the client blacklist), so that the
    /// site changes what the tracker serves without a restart. Plain HTTP:
    /// keep it on loopback or a private network. Empty: no API.
    pub api_listen: String,
    /// The API's key, at least 32 characters (UNIT3D's TRACKER_KEY),
    /// compared in constant time. A secret: never logged.
    pub api_key: String,
    /// Percent of uploaded bytes credited to everyone (200: double upload
    /// for the whole site); a group's or torrent's higher factor wins.
    pub upload_factor: u8,
    /// Percent of downloaded bytes counted for everyone (0: freeleech for
    /// the whole site); a group's or torrent's lower factor wins.
    pub download_factor: u8,
    /// Hit-and-run immunity of donors (users.is_donor, not is_lifetime),
    /// whatever their group's (UNIT3D-Announce's DONOR_IMMUNITY_OVERRIDE).
    /// Unset: their group's.
    pub donor_immunity_override: Option<bool>,
    /// Percent of uploaded bytes credited to donors at least
    /// (DONOR_UPLOAD_FACTOR_OVERRIDE): a higher factor of the site, group
    /// or torrent still wins. Unset: no override.
    pub donor_upload_factor_override: Option<u8>,
    /// Percent of downloaded bytes counted for donors at most, 0 to 100
    /// (DONOR_DOWNLOAD_FACTOR_OVERRIDE): a lower factor still wins. Unset:
    /// no override.
    pub donor_download_factor_override: Option<u8>,
    /// The same for lifetime donors (users.is_lifetime), in place of the
    /// donors' (LIFETIME_DONOR_IMMUNITY_OVERRIDE).
    pub lifetime_donor_immunity_override: Option<bool>,
    /// LIFETIME_DONOR_UPLOAD_FACTOR_OVERRIDE.
    pub lifetime_donor_upload_factor_override: Option<u8>,
    /// LIFETIME_DONOR_DOWNLOAD_FACTOR_OVERRIDE.
    pub lifetime_donor_download_factor_override: Option<u8>,
    /// Peers one user may have on one torrent (UNIT3D-Announce: 3); a new
    /// one past it is refused. Bounds what one passkey can make the
    /// tracker keep.
    pub max_peers_per_torrent_per_user: u32,
    /// Seconds after which a peer that stopped announcing counts as gone
    /// (UNIT3D-Announce's ACTIVE_PEER_TTL): forgotten in memory, its row
    /// made inactive and taken off its torrent's counts; also the most
    /// seedtime one interval between two announces can add.
    pub active_peer_ttl_secs: u32,
    /// Seconds a peer's row in the database is still credited from
    /// (UNIT3D-Announce's INACTIVE_PEER_TTL, 21 days): a peer back after a
    /// silence longer than active_peer_ttl_secs (or after a tracker outage
    /// that long) is credited every byte since its row, with nothing of it
    /// held in memory meanwhile; after longer it counts as new.
    pub inactive_peer_ttl_secs: u32,
    /// Bytes per second of upload one peer's announce may imply over the
    /// time since its previous one (in microseconds, so announcing fast
    /// gains nothing), after what the user's other peers on the torrent
    /// were credited; past it the upload is flagged (counted, not
    /// credited), the usual guard against clients that report invented
    /// uploads. 0: off. The default, 10 Gbit/s, leaves seedboxes alone.
    pub max_upload_rate: u64,
    /// Percent of swarm.announce_interval_secs a peer must let pass
    /// between two announces (UNIT3D-Announce's ANNOUNCE_MIN_ENFORCED,
    /// 1740 s of its 1800: 96): one sooner is still accounted but gets no
    /// peers and zero counts, so that announcing in a loop harvests no peer
    /// lists. Under 100 leaves room for clients that announce a little
    /// early. A peer's first completed is never held back. 0: off.
    pub min_announce_interval_percent: u8,
    /// Seed lists one user may receive (UNIT3D-Announce's
    /// USER_RECEIVE_SEED_LIST_RATE_LIMITS), as WINDOW_SECONDS=MOST;...:
    /// each window's count decays exponentially, and past any window's
    /// most the user's answers carry no seeders and `complete` 0, so that
    /// no one harvests every swarm's seeders. Counted across every worker,
    /// in memory only. Empty: no limit.
    pub seed_list_limits: String,
    /// The same for leech lists (USER_RECEIVE_LEECH_LIST_RATE_LIMITS);
    /// past it, answers carry no leechers and `incomplete` 0.
    pub leech_list_limits: String,
    /// Rows of unregistered_info_hashes (a user's client announcing a
    /// torrent the site does not serve, which UNIT3D shows the user) that
    /// one worker queues per flush at most; past it they are dropped and
    /// counted, so that a passkey announcing made-up info-hashes grows
    /// neither memory nor the table without bound. Where the site's
    /// database has no such table (UNIT3D has it), none are written and the
    /// start says so. 0: none are written.
    pub max_unregistered_per_flush: u32,
    /// Rows of unregistered_info_hashes one user may have noted per hour,
    /// counted across every worker: with the database up, a passkey
    /// announcing made-up info-hashes would otherwise add rows to the
    /// site's table without end. A client with many torrents the site
    /// removed is still noted, a few hundred an hour. 0: no limit.
    pub max_unregistered_per_user_per_hour: u32,
    /// Entries (a peer's announces, a user's history on a torrent, an
    /// unregistered info-hash) the database thread holds for the next
    /// flush at most, while the database is down; past it new ones are
    /// dropped and counted (tracker_private_entries_dropped_total). A
    /// dropped peer is credited at its next announce from its row, so
    /// little is lost; the bound keeps an outage from growing memory
    /// without end (about 500 bytes an entry).
    pub max_pending_entries: u32,
    /// Entries of one user held at most: one passkey churning peer ids
    /// during an outage is stopped here, before it crowds out the others.
    pub max_pending_entries_per_user: u32,
    /// Where the accounting not yet written is kept when the database is
    /// unreachable at a stop, for the next start to write (replaced
    /// atomically). Empty: next to the state file, with `.pending` added.
    pub pending_file: String,
}

// Passwords in database_url and the API key stay out of debug output.
impl fmt::Debug for PrivateConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PrivateConfig")
            .field("enabled", &self.enabled)
            .field("tracker_id", &self.tracker_id)
            .field("api_listen", &self.api_listen)
            .finish_non_exhaustive()
    }
}

impl Default for PrivateConfig {
    fn default() -> Self {
        PrivateConfig {
            enabled: false,
            database_url: String::new(),
            tracker_id: String::new(),
            flush_interval_ms: 3000,
            flush_retry_min_ms: 1000,
            flush_retry_max_ms: 60_000,
            max_rows_per_statement: 5000,
            api_listen: "127.0.0.1:6971".into(),
            api_key: String::new(),
            upload_factor: 100,
            download_factor: 100,
            donor_immunity_override: None,
            donor_upload_factor_override: None,
            donor_download_factor_override: None,
            lifetime_donor_immunity_override: None,
            lifetime_donor_upload_factor_override: None,
            lifetime_donor_download_factor_override: None,
            max_peers_per_torrent_per_user: 3,
            active_peer_ttl_secs: 7200,
            inactive_peer_ttl_secs: 1_814_400,
            max_upload_rate: 1_250_000_000,
            min_announce_interval_percent: 96,
            seed_list_limits: "60=10;900=25;7200=125;86400=500;604800=2500".into(),
            leech_list_limits: "60=20;900=50;7200=250;86400=1000;604800=5000".into(),
            max_unregistered_per_flush: 10_000,
            max_unregistered_per_user_per_hour: 1000,
            max_pending_entries: 1_000_000,
            max_pending_entries_per_user: 20_000,
            pending_file: String::new(),
        }
    }
}

impl PrivateConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !self.enabled {
            return Ok(());
        }
        if !self.database_url.starts_with("mysql://") {
            return Err(ConfigError::key(
                "private.database_url",
                "must be a mysql://USER:PASSWORD@HOST:PORT/DATABASE URL",
            ));
        }
        if self.tracker_id.len() > 64 {
            return Err(ConfigError::key(
                "private.tracker_id",
                "at most 64 characters (the column is VARCHAR(64))",
            ));
        }
        within(
            "private.flush_interval_ms",
            self.flush_interval_ms as usize,
            100,
            600_000,
        )?;
        positive(
            "private.flush_retry_min_ms",
            self.flush_retry_min_ms as usize,
        )?;
        if self.flush_retry_max_ms < self.flush_retry_min_ms {
            return Err(ConfigError::key(
                "private.flush_retry_max_ms",
                "must be at least private.flush_retry_min_ms",
            ));
        }
        within(
            "private.max_rows_per_statement",
            self.max_rows_per_statement,
            1,
            65_535,
        )?;
        if !self.api_listen.is_empty() {
            if self.api_listen.parse::<std::net::SocketAddr>().is_err() {
                return Err(ConfigError::key(
                    "private.api_listen",
                    format!("`{}` is not an address and port", self.api_listen),
                ));
            }
            api_key("private.api_key", &self.api_key, "private.api_listen")?;
        }
        at_most("private.download_factor", self.download_factor.into(), 100)?;
        for (key, factor) in [
            (
                "private.donor_download_factor_override",
                self.donor_download_factor_override,
            ),
            (
                "private.lifetime_donor_download_factor_override",
                self.lifetime_donor_download_factor_override,
            ),
        ] {
            if let Some(factor) = factor {
                at_most(key, factor.into(), 100)?;
            }
        }
        at_most(
            "private.min_announce_interval_percent",
            self.min_announce_interval_percent.into(),
            100,
        )?;
        for (key, limits) in [
            ("private.seed_list_limits", &self.seed_list_limits),
            ("private.leech_list_limits", &self.leech_list_limits),
        ] {
            ListLimits::parse(limits).map_err(|e| ConfigError::key(key, e.to_string()))?;
        }
        positive(
            "private.max_peers_per_torrent_per_user",
            self.max_peers_per_torrent_per_user as usize,
        )?;
        positive(
            "private.active_peer_ttl_secs",
            self.active_peer_ttl_secs as usize,
        )?;
        if self.inactive_peer_ttl_secs < self.active_peer_ttl_secs {
            return Err(ConfigError::key(
                "private.inactive_peer_ttl_secs",
                "must be at least private.active_peer_ttl_secs",
            ));
        }
        if self.max_pending_entries_per_user > self.max_pending_entries
            && self.max_pending_entries != 0
        {
            return Err(ConfigError::key(
                "private.max_pending_entries_per_user",
                "must be at most private.max_pending_entries",
            ));
        }
        Ok(())
    }

    /// The crediting factors every announce reads: the site's, and the
    /// donors' overrides.
    pub fn factors(&self) -> GlobalFactors {
        GlobalFactors {
            upload: self.upload_factor,
            download: self.download_factor,
            donor: FactorOverrides {
                upload: self.donor_upload_factor_override,
                download: self.donor_download_factor_override,
                immune: self.donor_immunity_override,
            },
            lifetime: FactorOverrides {
                upload: self.lifetime_donor_upload_factor_override,
                download: self.lifetime_donor_download_factor_override,
                immune: self.lifetime_donor_immunity_override,
            },
        }
    }

    /// The tracker's name in tracker_flushes.
    pub fn tracker_id(&self) -> String {
        if !self.tracker_id.is_empty() {
            return self.tracker_id.clone();
        }
        let mut name = [0u8; 256];
        // SAFETY: the buffer is ours and its length is passed.
        let rc = unsafe { libc::gethostname(name.as_mut_ptr().cast(), name.len()) };
        let len = name.iter().position(|&b| b == 0).unwrap_or(0);
        match (rc, name.get(..len.min(64))) {
            (0, Some(host)) if !host.is_empty() => String::from_utf8_lossy(host).into_owned(),
            _ => "tracker".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enabled() -> PrivateConfig {
        PrivateConfig {
            enabled: true,
            database_url: "mysql://u:p@127.0.0.1:3306/site".into(),
            api_listen: String::new(),
            ..PrivateConfig::default()
        }
    }

    #[test]
    fn the_defaults_of_an_enabled_config_pass_and_bad_values_name_their_key() {
        enabled().validate().unwrap();
        PrivateConfig::default().validate().unwrap();
        type Edit = fn(&mut PrivateConfig);
        let cases: [(Edit, &str); 10] = [
            (
                |c| c.database_url = "postgres://x".into(),
                "private.database_url",
            ),
            (|c| c.download_factor = 101, "private.download_factor"),
            (
                |c| c.donor_download_factor_override = Some(101),
                "private.donor_download_factor_override",
            ),
            (
                |c| c.lifetime_donor_download_factor_override = Some(200),
                "private.lifetime_donor_download_factor_override",
            ),
            (
                |c| c.min_announce_interval_percent = 101,
                "private.min_announce_interval_percent",
            ),
            (|c| c.flush_retry_max_ms = 10, "private.flush_retry_max_ms"),
            (
                |c| c.seed_list_limits = "60".into(),
                "private.seed_list_limits",
            ),
            (
                |c| c.leech_list_limits = "60=0".into(),
                "private.leech_list_limits",
            ),
            (
                |c| c.inactive_peer_ttl_secs = c.active_peer_ttl_secs - 1,
                "private.inactive_peer_ttl_secs",
            ),
            (
                |c| c.max_pending_entries_per_user = c.max_pending_entries + 1,
                "private.max_pending_entries_per_user",
            ),
        ];
        for (edit, key) in cases {
            let mut c = enabled();
            edit(&mut c);
            let err = c.validate().unwrap_err().to_string();
            assert!(err.contains(key), "{key}: {err}");
        }
    }

    #[test]
    fn the_donor_overrides_take_unit3d_announces_names() {
        let text = "enabled = true\n\
                    database_url = \"mysql://u:p@127.0.0.1:3306/site\"\n\
                    api_listen = \"\"\n\
                    donor_upload_factor_override = 150\n\
                    donor_download_factor_override = 50\n\
                    lifetime_donor_immunity_override = true\n\
                    lifetime_donor_upload_factor_override = 255\n";
        let config: PrivateConfig = toml::from_str(text).unwrap();
        config.validate().unwrap();
        let factors = config.factors();
        let (donor, lifetime) = (factors.donor, factors.lifetime);
        assert_eq!(
            (donor.upload, donor.download, donor.immune),
            (Some(150), Some(50), None)
        );
        assert_eq!(
            (lifetime.upload, lifetime.download, lifetime.immune),
            (Some(255), None, Some(true))
        );
        assert_eq!(
            PrivateConfig::default().factors(),
            GlobalFactors::default(),
            "unset: no override"
        );
    }
}
