//! Measures the state file with many torrents: fills a store the way
//! announces do (two IPv4 peers per torrent, one a seeder that completed),
//! saves it, writes the file, reads and checks it, and restores it, timing
//! each step; the file is left for a real start to load:
//!
//!     cargo build --release --bin tracker --example state_bench
//!     target/release/examples/state_bench 1000000 /tmp/bench.state
//!     target/release/tracker --state /tmp/bench.state --workers 2 --no-pin \
//!         --udp 127.0.0.1:0 --http 127.0.0.1:0 --https 127.0.0.1:0
//!
//! (the tracker logs how long it took to check and restore the file, and,
//! after SIGTERM, to save it).

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Instant;

use tracker_proto::{Announce, AnnounceEvent, AnswerPeers, InfoHash, PeerId};
use tracker_runtime::clock;
use tracker_runtime::owner::Owners;
use tracker_runtime::state_file as file;
use tracker_swarm::state::{self, Section, StateFile};
use tracker_swarm::{Restored, StoreLimits, SwarmStore};

fn main() {
    let mut args = std::env::args().skip(1);
    let torrents: u32 = args
        .next()
        .map_or(1_000_000, |a| a.parse().expect("a count"));
    let path = PathBuf::from(
        args.next()
            .unwrap_or_else(|| "/tmp/state-bench.state".into()),
    );
    let limits = StoreLimits {
        peer_timeout_secs: 2700,
        max_torrents: usize::MAX,
        max_peers_per_torrent: 100_000,
        max_peers: usize::MAX,
        max_peers_per_address: None,
        max_peers_per_network: None,
        new_torrents_per_minute: [0; 3],
        peer_ids: false,
    };
    let mut store = SwarmStore::new(limits, 1);
    let mut peers = AnswerPeers::default();
    for i in 0..torrents {
        let mut hash = [0u8; 20];
        hash[..4].copy_from_slice(&i.to_le_bytes());
        hash[4..8].copy_from_slice(&i.wrapping_mul(0x9e37_79b9).to_le_bytes());
        for (n, left, event) in [
            (1u8, 0, AnnounceEvent::Completed),
            (2, 1, AnnounceEvent::Started),
        ] {
            let ip = Ipv4Addr::from(i.wrapping_mul(2).wrapping_add(u32::from(n)));
            let req = Announce {
                info_hash: InfoHash(hash),
                peer_id: PeerId([n; 20]),
                peer_addr: SocketAddr::new(ip.into(), 6881),
                event,
                left,
                numwant: 0,
                peer_ids: false,
            };
            store.announce(&req, 0, &mut peers).expect("no limit");
        }
    }
    println!("{torrents} torrents, {:?} peers", store.peer_count());

    let t = Instant::now();
    let mut section = Section::with_capacity(64 << 10);
    store.save(clock::now_secs(), clock::unix_secs(), &mut section);
    let sections = [section];
    let framed = state::Framed::new(&sections, clock::unix_secs());
    let parts: Vec<&[u8]> = framed.parts().collect();
    let save_ms = t.elapsed().as_millis();
    let t = Instant::now();
    file::write_atomic(&path, &parts).expect("written");
    let write_ms = t.elapsed().as_millis();
    drop(store);

    let t = Instant::now();
    let bytes = file::read(&path).expect("read").expect("there");
    let read_ms = t.elapsed().as_millis();
    let t = Instant::now();
    let checked = StateFile::parse(&bytes).expect("a good file");
    let check_ms = t.elapsed().as_millis();
    // What each worker of W does: scan every record, restore its own.
    let workers = 4;
    let owners = Owners::new(workers, [0; 24]);
    let mut slowest = 0;
    let mut total = Restored::default();
    for worker in 0..workers {
        let t = Instant::now();
        let mut store = SwarmStore::new(limits, 2);
        for record in checked.records() {
            let record = record.expect("checked");
            if owners.of(&record.info_hash) == worker {
                total.add(store.restore(&record, clock::now_secs(), clock::unix_secs()));
            }
        }
        slowest = slowest.max(t.elapsed().as_millis());
    }
    println!(
        "file {} bytes; save {save_ms} ms, write+fsync {write_ms} ms, read {read_ms} ms, \
         check {check_ms} ms, restore by the slowest of {workers} workers {slowest} ms \
         ({} torrents, {} peers restored)",
        bytes.len(),
        total.torrents,
        total.peers
    );
}
