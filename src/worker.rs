//! One worker's wiring: its store restored, its shard joined to the others,
//! its services on its sockets, until it is asked to stop; then its swarms,
//! for the state file.

use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::{info, warn};
use tracker_http::metrics_endpoint;
use tracker_http::server::HttpService;
use tracker_http::site_api::SiteApiServer;
use tracker_runtime::access::AccessList;
use tracker_runtime::clock;
use tracker_runtime::config::ExemptNetworks;
use tracker_runtime::mesh::Meshes;
use tracker_runtime::owner::Owners;
use tracker_runtime::shard::Shard;
use tracker_runtime::shutdown::{self, Shutdown};
use tracker_runtime::snapshot::Snapshots;
use tracker_runtime::workers;
use tracker_swarm::state::{Section, StateFile};
use tracker_swarm::{Restored, SwarmStore};
use tracker_udp::cookie::ConnectionCookies;
use tracker_udp::server::UdpService;
use tracker_ws::{Closing, FullScrape, WsService};

use crate::config::Config;
use crate::private::PrivateMode;
use crate::signals::Reloaded;
use crate::start::bind::WorkerSockets;

/// What a worker needs to restore its swarms at start and stop on request.
pub struct WorkerState {
    pub shutdown: Arc<Shutdown>,
    /// The state file, checked, when there is one to load.
    pub bytes: Option<Arc<Vec<u8>>>,
    pub restore: Arc<Mutex<RestoreProgress>>,
    /// Its part of the snapshots, when they are taken.
    pub snapshots: Option<Snapshots>,
}

/// The workers' restores added up, logged by the last to finish.
pub struct RestoreProgress {
    restored: Restored,
    workers_done: usize,
    started: Option<Instant>,
    /// Where the swarms came from, for the log: the state file, or the
    /// tracker this one took over from.
    source: String,
}

impl RestoreProgress {
    pub fn new(source: String) -> RestoreProgress {
        RestoreProgress {
            restored: Restored::default(),
            workers_done: 0,
            started: None,
            source,
        }
    }
}

/// One worker: what it is handed before its executor starts.
pub struct Worker {
    pub index: usize,
    pub config: Config,
    pub meshes: Meshes,
    /// Its own socket for every address.
    pub sockets: WorkerSockets,
    pub reloaded: Reloaded,
    /// Keys the UDP connection ids (the same on every worker).
    pub secret: [u8; 16],
    /// Which worker owns each torrent (the same on every worker).
    pub owners: Owners,
    /// Seeds its store's peer selection.
    pub seed: u64,
    pub state: WorkerState,
    /// Private mode's shared parts, when on.
    pub private: Option<Arc<PrivateMode>>,
    /// The peers of its torrents that were active at the last stop.
    pub restored_peers: crate::private::RestoredPeers,
}

impl Worker {
    /// Runs the worker: its shard of the swarms (restored from the state file),
    /// the clean-up, and its sockets, served until they fail (Err) or the
    /// process is asked to stop: then its swarms, for the state file, when one
    /// is configured.
    pub async fn run(self) -> Result<Option<Section>, String> {
        let Worker {
            index,
            config,
            meshes,
            sockets,
            reloaded,
            secret,
            owners,
            seed,
            state,
            private,
            restored_peers,
        } = self;
        let mut store = SwarmStore::new(config.swarm.store_limits(), seed);
        let exempt = config.runtime.exempt_networks();
        if let Some(bytes) = state.bytes {
            let access = reloaded.access.as_ref().map(|shared| shared.load().0);
            restore_shard(
                &mut store,
                &bytes,
                index,
                &state.restore,
                &owners,
                access.as_deref(),
                &exempt,
            );
        }
        let shard = Shard::join(
            index,
            meshes,
            owners,
            store,
            config.runtime.max_forwarded,
            reloaded.access.clone(),
            exempt.clone(),
        )
        .await?;
        if let Some(private) = &private {
            shard.set_private(
                private.site.clone(),
                private.ledger,
                private.slots(),
                private.lists.clone(),
                private.quota.clone(),
                private.sink.clone(),
            );
            shard.restore_private(restored_peers);
            let interval = private.flush_interval;
            glommio::spawn_local(shard.clone().flush_private_forever(interval)).detach();
        }
        let period = Duration::from_secs(config.swarm.cleanup_interval_secs.into());
        glommio::spawn_local(shard.clone().clean_forever(period)).detach();
        glommio::spawn_local(shard.clone().enforce_access_forever()).detach();
        if let Some(snapshots) = state.snapshots {
            glommio::spawn_local(snapshots.take_forever(shard.clone())).detach();
        }

        let udp = UdpService::new(
            shard.clone(),
            ConnectionCookies::new(secret),
            config.swarm.clone(),
            &config.udp,
            exempt.clone(),
        );
        let ws = config.websocket.serves(config.private.enabled).then(|| {
            let full_scrape = FullScrape {
                enabled: config.http.full_scrape,
                max_torrents: config.http.full_scrape_max_torrents,
            };
            WsService::new(shard.clone(), &config.websocket, full_scrape)
        });
        let http = HttpService::new(
            shard.clone(),
            config.swarm.clone(),
            &config.http,
            reloaded.tls,
            exempt,
            ws.clone(),
        );
        let shutdown = state.shutdown;
        {
            let (shutdown, udp, http) = (shutdown.clone(), udp.clone(), http.clone());
            glommio::spawn_local(async move {
                shutdown.requested().await;
                udp.stop();
                http.stop();
                // Browsers reconnect on a close frame; WebRTC peers are not
                // handed over (their connections cannot be), only the
                // completed counts of their torrents are.
                if let Some(ws) = ws {
                    ws.stop(if shutdown.is_hand_over() {
                        Closing::HandOver
                    } else {
                        Closing::Stop
                    });
                }
            })
            .detach();
        }
        let mut servers: Vec<_> = sockets
            .udp
            .into_iter()
            .map(|socket| glommio::spawn_local(Rc::clone(&udp).serve(socket)))
            .collect();
        if !sockets.xdp.is_empty() {
            servers.push(glommio::spawn_local(Rc::clone(&udp).serve_xdp(sockets.xdp)));
        }
        for (listeners, tls) in [(sockets.http, false), (sockets.https, true)] {
            servers.extend(
                listeners
                    .into_iter()
                    .map(|listener| glommio::spawn_local(Rc::clone(&http).serve(listener, tls))),
            );
        }
        let mut endpoints = Vec::new();
        // Worker 0 reports the database thread's figures (its samples are
        // every worker's, gathered).
        let _flusher_metrics = match (&private, index) {
            (Some(private), 0) => {
                let metrics = Rc::new(crate::private::FlusherMetrics(private.sink.clone()));
                let source: std::rc::Weak<dyn tracker_runtime::metrics::MetricSource> =
                    Rc::downgrade(&metrics) as _;
                shard.add_metric_source(source);
                Some(metrics)
            }
            _ => None,
        };
        if !sockets.site_api.is_empty() {
            // Private mode's site API, or a public tracker's access API.
            let (handler, key): (Rc<dyn tracker_http::site_api::SiteApi>, &str) =
                match (&private, &reloaded.access) {
                    (Some(private), _) => {
                        let rates = crate::private::RequestRates::new();
                        glommio::spawn_local(rates.clone().record_forever(shard.clone())).detach();
                        (
                            Rc::new(crate::private::SiteApiHandler::new(
                                private,
                                rates,
                                shard.clone(),
                            )),
                            &config.private.api_key,
                        )
                    }
                    (None, Some(list)) => (
                        Rc::new(crate::access_api::AccessApi::new(
                            list.clone(),
                            config
                                .access
                                .list()
                                .ok_or("an access API with no access list")?,
                        )),
                        &config.access.api_key,
                    ),
                    (None, None) => return Err("an API listener with no API to serve".into()),
                };
            let api = SiteApiServer::new(&shard, key, handler);
            endpoints.extend(
                sockets
                    .site_api
                    .into_iter()
                    .map(|listener| glommio::spawn_local(Rc::clone(&api).serve(listener))),
            );
        }
        if !sockets.metrics.is_empty() {
            let endpoint = metrics_endpoint::Endpoint::new(shard.clone(), &config.metrics);
            endpoints.extend(
                sockets
                    .metrics
                    .into_iter()
                    .map(|listener| glommio::spawn_local(Rc::clone(&endpoint).serve(listener))),
            );
        }
        // The metrics endpoint serves until the process ends: only its failure
        // ends the worker early.
        let endpoint_failed = async {
            workers::all_or_first_error(endpoints).await?;
            std::future::pending().await
        };
        // Servers run until they fail or stop; the first failure ends the
        // worker, and so the process.
        futures_lite::future::or(workers::all_or_first_error(servers), endpoint_failed).await?;
        if !shutdown.is_requested() {
            return Err("its servers stopped unasked".into());
        }
        // Answer what was taken, then wait for the other workers to do the same
        // (their requests may wait on this shard), all within one deadline; only
        // then is the store complete.
        let deadline = Instant::now() + Duration::from_secs(config.state.drain_timeout_secs.into());
        let busy = || udp.in_flight() + http.open_connections();
        shutdown::until(deadline, || busy() == 0).await;
        shutdown.drained();
        shutdown::until(deadline, || shutdown.all_drained()).await;
        if busy() > 0 || !shutdown.all_drained() {
            warn!(
                "worker {index}: state.drain_timeout_secs passed with {} UDP requests and {} HTTP \
             connections unanswered here, or on other workers",
                udp.in_flight(),
                http.open_connections()
            );
        }
        // The accounting of every announce answered, for the database
        // thread's last flush.
        shard.flush_private();
        if config.state.path().is_none() && !shutdown.is_hand_over() {
            return Ok(None);
        }
        let mut section = Section::with_capacity(64 << 10);
        shard.with_store(|store| store.save(clock::now_secs(), clock::unix_secs(), &mut section));
        Ok(Some(section))
    }
}

/// Restores this worker's torrents (those it owns now, whatever the worker
/// count was when the file was written) from a checked state file; the last
/// worker to finish logs the totals.
fn restore_shard(
    store: &mut SwarmStore,
    bytes: &[u8],
    index: usize,
    progress: &Mutex<RestoreProgress>,
    owners: &Owners,
    access: Option<&AccessList>,
    exempt: &ExemptNetworks,
) {
    let started = Instant::now();
    let keep = |hash: &tracker_proto::InfoHash| {
        owners.of(hash) == index && access.is_none_or(|list| list.allows(hash))
    };
    // A peer of an exempt network is kept as its announces would be.
    let quota = |ip| exempt.quota(ip);
    let (now, now_unix) = (clock::now_secs(), clock::unix_secs());
    let restored = StateFile::reopen(bytes)
        .map_err(|e| (e, Restored::default()))
        .and_then(|file| store.restore_file_as(&file, now, now_unix, keep, quota))
        .unwrap_or_else(|(e, restored)| {
            // Cannot happen to a checked file; keep what was read.
            warn!("worker {index}: state file: {e}");
            restored
        });
    let mut progress = progress.lock().unwrap_or_else(|e| e.into_inner());
    progress.restored.add(restored);
    progress.workers_done += 1;
    let first_start = progress.started.map_or(started, |s| s.min(started));
    progress.started = Some(first_start);
    if progress.workers_done == owners.workers() {
        let r = progress.restored;
        info!(
            "restored {} torrents and {} peers from {} in {} ms ({} peers had expired; {} \
             over swarm.max_torrents_per_worker, max_peers_per_torrent, max_peers_per_worker, \
             max_peers_per_address_per_torrent or max_peers_per_network; {} dropped as \
             invalid: port 0, no single host's address, or an IPv4-mapped one among the \
             IPv6 peers; and the \
             completed counts of {} WebRTC torrents)",
            r.torrents,
            r.peers,
            progress.source,
            first_start.elapsed().as_millis(),
            r.expired,
            r.refused,
            r.invalid,
            r.rtc_torrents
        );
    }
}
