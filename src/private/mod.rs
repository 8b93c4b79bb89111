//! Private mode's process-wide parts: the site's records loaded from its
//! database at start, the database thread that writes the workers' batches,
//! and the file that keeps what it could not write at a stop (read back by
//! the next start, or by the successor of a hand-over); the site API's
//! meaning (`site_api`) and the request rates it reports (`rates`).

mod rates;
mod site_api;

pub use rates::RequestRates;
pub use site_api::SiteApiHandler;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::{info, warn};
use tracker_db::{DbConfig, FlusherConfig, FlusherHandle, Leftover};
use tracker_private::lists::{ListLimits, ListRates};
use tracker_private::quota::UnregisteredQuota;
use tracker_private::slots::LeechingCounts;
use tracker_private::{Batch, LedgerConfig, PeerKey, PeerRow, Site};
use tracker_runtime::metrics::{
    MetricSource, Sample, PRIVATE_CREDITED_BYTES, PRIVATE_DATABASE_UP, PRIVATE_ENTRIES_DROPPED,
    PRIVATE_FLUSHES, PRIVATE_LAST_FLUSH, PRIVATE_PEERS_SUPERSEDED, PRIVATE_PENDING_ROWS,
    PRIVATE_ROWS_SKIPPED, PRIVATE_ROWS_WRITTEN, PRIVATE_SEEDTIME,
};
use tracker_runtime::owner::Owners;
use tracker_runtime::private_config::PrivateConfig;
use tracker_runtime::reloadable::Reloadable;
use tracker_runtime::shard::BatchSink;
use tracker_runtime::state_file;

use crate::config::Config;

/// A worker's peers to restore into its ledger.
pub type RestoredPeers = Vec<(PeerKey, PeerRow)>;

/// What every worker of a private tracker shares.
pub struct PrivateMode {
    /// The site's view, replaced whole by each change of the site API.
    pub site: Arc<Reloadable<Site>>,
    pub ledger: LedgerConfig,
    pub flush_interval: Duration,
    /// The database thread, while it runs.
    pub sink: Arc<FlusherSink>,
    /// Each user's leeching peers, for the download slots: one table per
    /// serve, filled by its workers' restores and announces.
    slots: Mutex<Arc<LeechingCounts>>,
    /// Each user's peer lists received, for their limits: kept for the
    /// process's life, as UNIT3D-Announce keeps them (in memory only).
    pub lists: Arc<ListRates>,
    /// Each user's unregistered info-hashes noted this hour.
    pub quota: Arc<UnregisteredQuota>,
    config: PrivateConfig,
    pending_path: Option<PathBuf>,
}

/// The workers' way to the database thread (absent between a stop and the
/// next serve).
#[derive(Default)]
pub struct FlusherSink(Mutex<Option<FlusherHandle>>);

impl BatchSink for FlusherSink {
    fn submit(&self, batch: Batch) {
        let handle = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match handle.as_ref() {
            Some(handle) => handle.submit(batch),
            // Only between serves, when no worker runs.
            None => warn!("private: a batch came with no database thread: its rows are lost"),
        }
    }
}

impl FlusherSink {
    pub fn stats(&self) -> Option<tracker_db::FlusherStats> {
        let handle = self.0.lock().unwrap_or_else(|e| e.into_inner());
        handle.as_ref().map(FlusherHandle::stats)
    }
}

/// The database thread's figures, for worker 0's metrics.
pub struct FlusherMetrics(pub Arc<FlusherSink>);

impl MetricSource for FlusherMetrics {
    fn samples(&self, out: &mut Vec<Sample>) {
        let Some(s) = self.0.stats() else {
            return;
        };
        for (labels, value) in [
            (&[("outcome", "applied")], s.flushes_applied),
            (&[("outcome", "already_applied")], s.flushes_already_applied),
            (&[("outcome", "failed")], s.failures),
            (&[("outcome", "refused")], s.refused),
        ] {
            out.push(Sample::new(&PRIVATE_FLUSHES, labels, value));
        }
        let c = &s.credited;
        for (labels, value) in [
            (&[("direction", "uploaded")], c.uploaded),
            (&[("direction", "downloaded")], c.downloaded),
            (&[("direction", "actual_uploaded")], c.actual_uploaded),
            (&[("direction", "actual_downloaded")], c.actual_downloaded),
        ] {
            out.push(Sample::new(&PRIVATE_CREDITED_BYTES, labels, value));
        }
        out.push(Sample::new(&PRIVATE_SEEDTIME, &[], c.seedtime));
        out.push(Sample::new(
            &PRIVATE_PEERS_SUPERSEDED,
            &[],
            s.peers_superseded,
        ));
        out.push(Sample::new(
            &PRIVATE_ENTRIES_DROPPED,
            &[],
            s.entries_dropped,
        ));
        out.push(Sample::new(&PRIVATE_ROWS_WRITTEN, &[], s.rows_written));
        out.push(Sample::new(&PRIVATE_ROWS_SKIPPED, &[], s.rows_skipped));
        out.push(Sample::new(&PRIVATE_PENDING_ROWS, &[], s.pending_rows));
        out.push(Sample::new(&PRIVATE_LAST_FLUSH, &[], s.last_success_unix));
        out.push(Sample::new(
            &PRIVATE_DATABASE_UP,
            &[],
            u64::from(s.reachable),
        ));
    }
}

impl PrivateMode {
    /// Loads the site from its database, when private mode is on.
    pub fn load(config: &Config) -> Result<Option<Arc<PrivateMode>>, String> {
        let private = &config.private;
        if !private.enabled {
            return Ok(None);
        }
        let db = DbConfig::new(private.database_url.clone());
        let started = Instant::now();
        let mut conn = db
            .connect()
            .map_err(|e| format!("private.database_url: {e}"))?;
        let records = tracker_db::load(&mut conn)
            .map_err(|e| format!("private.database_url: loading the site: {e}"))?;
        // Every statement the flushes will make, tried now on no rows: a
        // grant or a column missing stops the start, naming it, rather than
        // failing every flush while announces are answered.
        let want_unregistered = private.max_unregistered_per_flush > 0;
        tracker_db::create_tracker_table(&mut conn)
            .map_err(|e| format!("private.database_url: {e}"))?;
        let unregistered =
            tracker_db::check_privileges(&mut conn, want_unregistered).map_err(|e| {
                format!(
                    "private.database_url: the database user may not do what the flushes need \
                 (grant what deploy/unit3d/grants.sql lists): {e}"
                )
            })?;
        let mut max_unregistered = private.max_unregistered_per_flush as usize;
        if unregistered == Some(tracker_db::UnregisteredTable::Missing) {
            warn!(
                "private: the site's database has no table unregistered_info_hashes (UNIT3D's \
                 is in deploy/unit3d/schema.sql): announces of torrents the site does not serve \
                 are not recorded; create it and restart, or set \
                 private.max_unregistered_per_flush = 0 to say so"
            );
            max_unregistered = 0;
        }
        drop(conn);
        let site = Site::from_records(records, private.factors());
        info!(
            "private: {} users and {} torrents loaded from {} in {} ms",
            site.users_len(),
            site.torrents_len(),
            db.redacted_url(),
            started.elapsed().as_millis()
        );
        let pending_path = match (&private.pending_file, config.state.path()) {
            (file, _) if !file.is_empty() => Some(PathBuf::from(file)),
            (_, Some(state)) => Some(with_suffix(state, ".pending")),
            (_, None) => None,
        };
        Ok(Some(Arc::new(PrivateMode {
            site: Arc::new(Reloadable::new(Arc::new(site))),
            ledger: LedgerConfig {
                max_peers_per_torrent_per_user: private
                    .max_peers_per_torrent_per_user
                    .try_into()
                    .unwrap_or(u16::MAX),
                max_peers_per_torrent: config.swarm.max_peers_per_torrent,
                max_peers: config.swarm.max_peers_per_worker,
                active_peer_ttl: private.active_peer_ttl_secs.into(),
                inactive_peer_ttl: private.inactive_peer_ttl_secs.into(),
                max_upload_rate: private.max_upload_rate,
                min_announce_interval: u64::from(config.swarm.announce_interval_secs)
                    * u64::from(private.min_announce_interval_percent)
                    / 100,
                max_unregistered_per_batch: max_unregistered,
            },
            flush_interval: Duration::from_millis(private.flush_interval_ms.into()),
            sink: Arc::new(FlusherSink::default()),
            slots: Mutex::new(Arc::new(LeechingCounts::default())),
            lists: Arc::new(ListRates::new(
                ListLimits::parse(&private.seed_list_limits)
                    .map_err(|e| format!("private.seed_list_limits: {e}"))?,
                ListLimits::parse(&private.leech_list_limits)
                    .map_err(|e| format!("private.leech_list_limits: {e}"))?,
            )),
            quota: Arc::new(UnregisteredQuota::new(
                private.max_unregistered_per_user_per_hour,
            )),
            config: private.clone(),
            pending_path,
        })))
    }

    /// Starts the database thread, with what the last stop left in the
    /// pending file (its numbered batches already in the database are
    /// dropped there: never written twice), and gives each worker the peers
    /// that were active at the last stop (see `Ledger::restore`): their
    /// rows in the database, then the newer ones of the pending file. Called
    /// once the predecessor, if any, has stopped and written its own.
    pub fn start_flusher(&self, owners: &Owners) -> Result<Vec<RestoredPeers>, String> {
        let leftover = self.read_pending()?;
        // The workers of this serve count from nothing, their restores first.
        *self.slots.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(LeechingCounts::default());
        let site = self.site.load().0;
        let mut per_worker: Vec<RestoredPeers> = vec![Vec::new(); owners.workers()];
        let mut place = |key: PeerKey, row: PeerRow| {
            if let Some(torrent) = site.torrent_by_id(key.torrent_id) {
                if let Some(peers) = per_worker.get_mut(owners.of(&torrent.info_hash)) {
                    peers.push((key, row));
                }
            }
        };
        let db = DbConfig::new(self.config.database_url.clone());
        // Every active row, however old: those silent past the active TTL
        // (a crash, a long stop) are expired by the first flushes, made
        // inactive and taken off their torrents' counts, rather than left
        // active and counted for ever.
        let tracker_id = self.config.tracker_id();
        // Nothing writes as this tracker between here and the spawn below
        // (a predecessor has stopped): `last` stays what the database has.
        let (last, skipped) = db
            .connect()
            .and_then(|mut conn| {
                tracker_db::create_tracker_table(&mut conn)?;
                let last = tracker_db::last_sequence(&mut conn, &tracker_id)?;
                let skipped = tracker_db::load_active_peers(&mut conn, &mut place)?;
                Ok((last, skipped))
            })
            .map_err(|e| format!("private.database_url: {e}"))?;
        if skipped > 0 {
            warn!("private: {skipped} rows of peers were not peers (a bad address or peer id)");
        }
        // The pending file's rows are newer than the database's, unless
        // their batch is in the database already (its number at most the
        // last one written: the file outlives a kill -9 after that write).
        for (number, batch) in &leftover {
            if number.is_some_and(|n| n <= last) {
                continue;
            }
            for (key, entry) in &batch.peers {
                place(*key, entry.row);
            }
            for (key, row) in &batch.settled.peers {
                place(*key, *row);
            }
        }
        let private = &self.config;
        let mut config = FlusherConfig::new(private.database_url.clone(), private.tracker_id());
        config.interval = self.flush_interval;
        config.backoff_min = Duration::from_millis(private.flush_retry_min_ms.into());
        config.backoff_max = Duration::from_millis(private.flush_retry_max_ms.into());
        config.max_rows_per_statement = private.max_rows_per_statement;
        config.rules = self.ledger.credit_rules();
        config.max_pending_entries = private.max_pending_entries as usize;
        config.max_pending_entries_per_user = private.max_pending_entries_per_user as usize;
        let handle = tracker_db::Flusher::spawn(config, leftover)
            .map_err(|e| format!("private.database_url: starting the database thread: {e}"))?;
        *self.sink.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(handle);
        Ok(per_worker)
    }

    /// The leeching counts of this serve's workers.
    pub fn slots(&self) -> Arc<LeechingCounts> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Stops the database thread once the workers handed in their last
    /// batches: it writes what it holds until `deadline`; the rest goes into
    /// the pending file, every batch numbered, so that the next start writes
    /// each exactly once.
    pub fn stop_flusher(&self, deadline: Instant) -> Result<(), String> {
        let handle = self.sink.0.lock().unwrap_or_else(|e| e.into_inner()).take();
        let Some(handle) = handle else {
            return Ok(());
        };
        self.write_pending(&handle.stop(deadline))
    }

    fn read_pending(&self) -> Result<Leftover, String> {
        let Some(path) = &self.pending_path else {
            return Ok(Vec::new());
        };
        let bytes = match tracker_runtime::files::open_regular(path) {
            Ok((mut file, _)) => {
                let mut bytes = Vec::new();
                std::io::Read::read_to_end(&mut file, &mut bytes)
                    .map_err(|e| format!("private.pending_file {}: {e}", path.display()))?;
                bytes
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(format!("private.pending_file {}: {e}", path.display())),
        };
        let pending = tracker_private::codec::decode_pending(&bytes).map_err(|e| {
            format!(
                "private.pending_file {}: {e}; it holds accounting not yet in the database: \
                 move it away to start without it",
                path.display()
            )
        })?;
        info!(
            "private: {} batches of accounting from {} to write",
            pending.len(),
            path.display()
        );
        Ok(pending)
    }

    fn write_pending(&self, leftover: &Leftover) -> Result<(), String> {
        let rows: usize = leftover.iter().map(|(_, b)| b.rows()).sum();
        let Some(path) = &self.pending_path else {
            if rows > 0 {
                warn!(
                    "private: {rows} rows of accounting could not be written to the database \
                     and are lost: set state.file or private.pending_file to keep them"
                );
            }
            return Ok(());
        };
        if rows == 0 {
            return match std::fs::remove_file(path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    Err(format!("private.pending_file {}: {e}", path.display()))
                }
                _ => Ok(()),
            };
        }
        let refs: Vec<(Option<u64>, &Batch)> = leftover.iter().map(|(n, b)| (*n, b)).collect();
        let mut bytes = Vec::new();
        tracker_private::codec::encode_pending(&refs, &mut bytes);
        state_file::write_atomic(path, &[&bytes])
            .map_err(|e| format!("private.pending_file {}: {e}", path.display()))?;
        warn!(
            "private: the database was unreachable: {rows} rows of accounting kept in {} for \
             the next start",
            path.display()
        );
        Ok(())
    }
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(suffix);
    PathBuf::from(name)
}
