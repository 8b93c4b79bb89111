//! A worker that a UDP flood keeps busy still serves its HTTP listener
//! promptly: its UDP loop never runs out of datagrams, and glommio would take
//! in the HTTP connections only at its 100 ms preemption timer were the loop
//! not to hand the worker to the reactor itself (`Quantum`).

mod support;

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::wire::{http_announce_target, http_get, udp_connect_packet};
use support::{free_port, Tracker};
use tracker_proto::udp::TransactionId;
use tracker_proto::InfoHash;

/// Threads sending connects as fast as they can: more than one worker answers.
const FLOODERS: usize = 2;

#[test]
fn http_is_answered_while_udp_floods_the_same_worker() {
    let udp: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let http: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let tracker = Tracker::builder()
        .runtime_args(&["--workers", "1", "--no-pin"])
        .udp(Some(udp))
        .http(Some(http))
        .start();

    let stop = Arc::new(AtomicBool::new(false));
    let flooders: Vec<_> = (0..FLOODERS)
        .map(|n| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
                sock.connect(udp).unwrap();
                let packet = udp_connect_packet(TransactionId(n as i32));
                let mut sent = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    // Errors (a full buffer) only mean the flood is working.
                    sent += u64::from(sock.send(&packet).is_ok());
                }
                sent
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));

    let mut took: Vec<Duration> = (0..30u8)
        .map(|n| {
            let asked = Instant::now();
            let target = http_announce_target(InfoHash([n; 20]), 6881);
            let answer = http_get(http, &target, Duration::from_secs(5));
            assert!(matches!(answer, Some((200, _))), "{answer:?}");
            asked.elapsed()
        })
        .collect();
    stop.store(true, Ordering::Relaxed);
    let sent: u64 = flooders.into_iter().map(|f| f.join().unwrap()).sum();
    took.sort();
    // Each request is a new connection: accepted, read, answered. Without
    // turns of the reactor each waits for the preemption timer (tens of ms);
    // with them, for a 500 µs quantum or two.
    let median = took[took.len() / 2];
    assert!(
        median < Duration::from_millis(20),
        "median {median:?} over {took:?} ({sent} datagrams sent)"
    );
    drop(tracker);
}
