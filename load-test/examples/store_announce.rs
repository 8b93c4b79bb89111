//! The swarm work of a UDP announce without the sockets: replays the load
//! generator's announces (its traffic model, default 1M torrents and 2M peers)
//! into one `SwarmStore` and writes each answer as the UDP tracker does, then
//! prints the time per announce, what the store holds, what its structures
//! take and the process's resident size. Kernel time and machine noise drop
//! out, so this shows what a change to the store or the codec does to the
//! tracker's user time; under `valgrind --tool=callgrind` it counts
//! instructions.
//!
//! Announces are served in batches of `PREFETCH` (default 32, about the
//! announces in one receive batch of the UDP worker), each batch's torrents
//! and peers prefetched first as the worker does; `PREFETCH=0` serves them one by one.
//! `PER_ADDRESS=N` turns on the cap of N peers per address per torrent (off
//! by default: the model's peers share a few dozen addresses; a cap above
//! what any torrent reaches shows what keeping the counts costs).
//! `PEER_IDS=1` keeps peer ids, as `swarm.store_peer_ids` does. `SIZES=1`
//! also prints how many torrents, and peers in them, each swarm size holds
//! (in powers of two).
//!
//!     taskset -c 0 cargo run --release -p load-test --example store_announce -- [ANNOUNCES] [TORRENTS] [PEERS]

use std::net::SocketAddr;
use std::time::Instant;

use load_test::config::TrafficConfig;
use load_test::model::{min_sources, Rng, TrafficModel};
use load_test::udp::source_ip;
use tracker_proto::udp::{write_announce_response, TransactionId};
use tracker_proto::{Announce, AnswerPeers};
use tracker_swarm::{StoreLimits, SwarmStore};

/// Announces made ahead of each timed run.
const CHUNK: usize = 4096;

fn arg(n: usize, default: u64) -> u64 {
    match std::env::args().nth(n).map(|a| a.parse()) {
        None => default,
        Some(Ok(v)) => v,
        Some(Err(e)) => {
            eprintln!("store_announce [ANNOUNCES] [TORRENTS] [PEERS]: argument {n}: {e}");
            std::process::exit(2);
        }
    }
}

fn main() {
    let announces = arg(1, 4_000_000);
    let traffic = TrafficConfig {
        torrents: arg(2, 1_000_000),
        peers: arg(3, 2_000_000) as u32,
        ..TrafficConfig::default()
    };
    let prefetch_batch = std::env::var("PREFETCH")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(32usize);
    let sources = min_sources(traffic.peers).max(32);
    let model = match TrafficModel::new(&traffic, sources, 1) {
        Ok(model) => model,
        Err(e) => {
            eprintln!("store_announce: {e}");
            std::process::exit(2);
        }
    };
    let target: SocketAddr = ([127, 0, 0, 1], 6969).into();
    let limits = StoreLimits {
        peer_timeout_secs: 1800,
        max_torrents: usize::MAX,
        max_peers_per_torrent: usize::MAX,
        max_peers: usize::MAX,
        max_peers_per_address: std::env::var("PER_ADDRESS")
            .ok()
            .and_then(|v| v.parse().ok()),
        max_peers_per_network: None,
        new_torrents_per_minute: [0; 3],
        peer_ids: std::env::var_os("PEER_IDS").is_some(),
    };
    let resident_before = resident();
    let mut store = SwarmStore::new(limits, 1);
    let mut rng = Rng::new(1);
    let mut peers = AnswerPeers::default();
    let mut out = Vec::with_capacity(2048);
    let (mut answered, mut bytes) = (0u64, 0usize);
    let mut elapsed = std::time::Duration::ZERO;
    // Requests are made a chunk at a time, outside the timed part.
    let mut chunk = Vec::with_capacity(CHUNK);
    let mut hashes = Vec::new();
    for first in (0..announces).step_by(CHUNK) {
        chunk.clear();
        for n in first..announces.min(first + CHUNK as u64) {
            let source = (n % u64::from(sources)) as u32;
            let plan = model.announce(&mut rng, source);
            chunk.push(Announce {
                info_hash: plan.info_hash,
                peer_id: plan.peer.peer_id,
                peer_addr: SocketAddr::new(source_ip(target, source), plan.peer.port),
                event: plan.event,
                left: plan.left,
                numwant: plan.numwant.max(0) as u32,
                peer_ids: false,
            });
        }
        let now = 1 + (first / 200_000) as u32;
        let started = Instant::now();
        for (i, req) in chunk.iter().enumerate() {
            if prefetch_batch > 0 && i % prefetch_batch == 0 {
                let ahead = chunk[i..].iter().take(prefetch_batch);
                hashes.clear();
                hashes.extend(ahead.map(|req| (req.info_hash, req.peer_addr)));
                store.prefetch(&hashes);
            }
            if let Ok(counts) = store.announce(req, now, &mut peers) {
                out.clear();
                let txid = TransactionId(i as i32);
                write_announce_response(
                    &mut out,
                    txid,
                    1800,
                    counts.leechers,
                    counts.seeders,
                    peers.compact(),
                );
                answered += peers.len() as u64;
                bytes += out.len();
            }
        }
        elapsed += started.elapsed();
    }
    println!(
        "{announces} announces in {:.0} ms: {:.0} ns each, {:.1} peers per answer ({bytes} bytes)",
        elapsed.as_secs_f64() * 1e3,
        elapsed.as_nanos() as f64 / announces as f64,
        answered as f64 / announces as f64,
    );
    let held = store.peer_count();
    println!(
        "held {} torrents, {} peers; resident {} ({} before the store)",
        store.torrent_count(),
        held.seeders + held.leechers,
        resident().unwrap_or_else(|| "unknown".into()),
        resident_before.unwrap_or_else(|| "unknown".into()),
    );
    if std::env::var_os("SIZES").is_some() {
        print_sizes(&store);
    }
    let memory = store.memory_use();
    let mb = |bytes: usize| bytes as f64 / 1e6;
    println!(
        "structures: torrents {:.1} MB, peers {:.1} MB, indexes {:.1} MB (capacity, before malloc's overhead)",
        mb(memory.torrents),
        mb(memory.peers),
        mb(memory.indexes),
    );
}

/// The process's resident size, as Linux reports it.
fn resident() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    Some(line.trim_start_matches("VmRSS:").trim().to_string())
}

/// Torrents and their peers by swarm size, in powers of two.
fn print_sizes(store: &SwarmStore) {
    let mut all = Vec::new();
    store.scrape_some(usize::MAX, &mut all);
    // Bucket b: swarms of 2^(b-1) to 2^b - 1 peers.
    let mut buckets = [(0usize, 0usize); 33];
    for (_, stats) in &all {
        let n = stats.seeders + stats.leechers;
        let bucket = &mut buckets[(u32::BITS - n.leading_zeros()) as usize];
        bucket.0 += 1;
        bucket.1 += n as usize;
    }
    for (b, (torrents, peers)) in buckets.iter().enumerate().filter(|(_, t)| t.0 > 0) {
        let least = (1u64 << b) / 2;
        println!(
            "swarms of {least} to {}: {torrents} torrents, {peers} peers",
            (1u64 << b) - 1
        );
    }
}
