//! How long the worker can be held by one large swarm: grows one swarm to N
//! peers an announce at a time, then cleans it with half of them expired, and
//! prints the slowest single announce and the slowest clean step. Every request
//! of a worker waits behind its slowest step, so these are its stalls.
//!
//!     taskset -c 0 cargo run --release -p tracker-swarm --example large_swarm -- 1000000

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use tracker_proto::{Announce, AnnounceEvent, AnswerPeers, InfoHash, PeerId};
use tracker_swarm::{StoreLimits, SwarmStore};

const TIMEOUT: u32 = 3600;

fn main() {
    let peers: u32 = match std::env::args().nth(1).map(|n| n.parse()) {
        None => 1_000_000,
        Some(Ok(n)) => n,
        Some(Err(e)) => {
            eprintln!("large_swarm [PEERS]: {e}");
            std::process::exit(2);
        }
    };
    let limits = StoreLimits {
        peer_timeout_secs: TIMEOUT,
        max_torrents: 1,
        max_peers_per_torrent: usize::MAX,
        max_peers: usize::MAX,
        max_peers_per_address: None,
        max_peers_per_network: None,
        new_torrents_per_minute: [0; 3],
        peer_ids: false,
    };
    let mut store = SwarmStore::new(limits, 1);
    let mut answer = AnswerPeers::default();
    let mut slowest = Slowest::default();
    let started = Instant::now();
    for n in 0..peers {
        let req = Announce {
            info_hash: InfoHash([7; 20]),
            peer_id: PeerId([1; 20]),
            peer_addr: SocketAddr::from((
                Ipv4Addr::from(0x0a00_0000 + n / 60_000),
                1 + (n % 60_000) as u16,
            )),
            event: AnnounceEvent::Started,
            left: u64::from(n % 4),
            numwant: 50,
            peer_ids: false,
        };
        // Every other peer announces 100 s later, and outlives the clean below.
        let now = 1 + (n % 2) * 100;
        let t = Instant::now();
        if store.announce(&req, now, &mut answer).is_err() {
            eprintln!("announce refused");
            std::process::exit(1);
        }
        slowest.note(t.elapsed(), n);
    }
    println!(
        "{peers} announces in {:.0} ms; slowest {:.3} ms (at peer {})",
        started.elapsed().as_secs_f64() * 1e3,
        slowest.time.as_secs_f64() * 1e3,
        slowest.at
    );

    let now = 1 + TIMEOUT + 50;
    let mut slowest = Slowest::default();
    let mut steps = 0;
    let started = Instant::now();
    let mut timed = |step: &mut dyn FnMut()| {
        let t = Instant::now();
        step();
        slowest.note(t.elapsed(), steps);
        steps += 1;
    };
    for segment in 0..SwarmStore::SEGMENTS {
        timed(&mut || {
            store.clean_segment(segment, now);
        });
        while store.cleaning() {
            timed(&mut || {
                store.clean_more(now);
            });
        }
    }
    println!(
        "clean with half expired: {steps} steps in {:.1} ms; slowest {:.3} ms; {} peers left",
        started.elapsed().as_secs_f64() * 1e3,
        slowest.time.as_secs_f64() * 1e3,
        store.peer_count().seeders + store.peer_count().leechers
    );
}

#[derive(Default)]
struct Slowest {
    time: Duration,
    at: u32,
}

impl Slowest {
    fn note(&mut self, time: Duration, at: u32) {
        if time > self.time {
            *self = Slowest { time, at };
        }
    }
}
