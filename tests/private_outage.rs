//! Private mode through a long database outage with one client churning
//! peer ids and made-up info-hashes (the audit's 2,000 peer ids a second):
//! what waits for the database is bounded (private.max_pending_entries and
//! its per-user share), so the tracker's memory stays flat past the bound
//! however long the outage lasts, and the accounting resumes after it.
//!
//! The outage lasts 10 minutes (TRACKER_TEST_OUTAGE_SECS shortens it when
//! running this by hand). It stops the tests' shared MariaDB server, so it
//! is a test binary of its own: cargo runs test binaries one at a time.

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use support::private::API_KEY;
use support::site_db::{info_hash, passkey, server_start, server_stop, SiteDb};
use support::tempfile_path::TempPath;
use support::{free_port, Tracker};
use tracker_proto::udp::{
    AnnounceOptions, AnnounceRequest, ConnectionId, IpFamily, Request, Response, TransactionId,
};
use tracker_proto::{AnnounceEvent, InfoHash, PeerId};

/// A UDP client that announces with a passkey in BEP 41's URLData and any
/// peer id, reconnecting as the connection id ages.
struct Churner {
    sock: std::net::UdpSocket,
    target: SocketAddr,
    connection_id: ConnectionId,
    connected_at: Instant,
    txid: i32,
    url: String,
    packet: Vec<u8>,
    answer: Vec<u8>,
}

impl Churner {
    fn new(target: SocketAddr, user: u32) -> Churner {
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let mut churner = Churner {
            sock,
            target,
            connection_id: ConnectionId(0),
            connected_at: Instant::now(),
            txid: 0,
            url: format!("/announce/{}", passkey(user)),
            packet: Vec::with_capacity(256),
            answer: vec![0; 2048],
        };
        churner.connect();
        churner
    }

    fn exchange(&mut self) -> Response<'_> {
        self.sock.send_to(&self.packet, self.target).unwrap();
        let (n, _) = self.sock.recv_from(&mut self.answer).expect("an answer");
        Response::parse(&self.answer[..n], IpFamily::V4).expect("a response")
    }

    fn connect(&mut self) {
        self.txid += 1;
        self.packet = support::wire::udp_connect_packet(TransactionId(self.txid));
        match self.exchange() {
            Response::Connect { connection_id, .. } => self.connection_id = connection_id,
            other => panic!("{other:?}"),
        }
        self.connected_at = Instant::now();
    }

    /// One announce of peer `peer_id` on `info_hash`, having uploaded
    /// `uploaded`; whether it was answered as an announce (an unknown
    /// info-hash gets an error).
    fn announce(
        &mut self,
        info_hash: InfoHash,
        peer_id: u64,
        uploaded: u64,
        event: AnnounceEvent,
    ) -> bool {
        if self.connected_at.elapsed() > Duration::from_secs(60) {
            self.connect();
        }
        self.txid += 1;
        let mut id = *b"-qB4500-000000000000";
        id[12..].copy_from_slice(&peer_id.to_be_bytes());
        self.packet.clear();
        Request::Announce(AnnounceRequest {
            connection_id: self.connection_id,
            transaction_id: TransactionId(self.txid),
            info_hash,
            peer_id: PeerId(id),
            downloaded: 0,
            left: 1000,
            uploaded,
            event,
            ip_address: 0,
            key: 0,
            num_want: 0,
            port: 6881,
            options: AnnounceOptions::EMPTY,
        })
        .write(&mut self.packet);
        let url = std::mem::take(&mut self.url);
        AnnounceOptions::write_url_data(&mut self.packet, url.as_bytes());
        self.url = url;
        matches!(self.exchange(), Response::Announce { .. })
    }
}

#[test]
fn memory_stays_flat_through_an_outage_with_a_client_churning_peer_ids() {
    let outage = Duration::from_secs(
        std::env::var("TRACKER_TEST_OUTAGE_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(600),
    );
    let db = SiteDb::new();
    db.user(1, 1);
    db.user(2, 1);
    for id in 1..=4 {
        db.torrent(id, 0, 1);
    }
    let state = TempPath::new("tracker-test-outage", "state");
    // A bound small enough to reach within the first minute; retries as
    // an operator's (a line of log each: the test reads the log only at
    // the end, and a full pipe would hold up the thread that writes it).
    let config = format!(
        "[private]\nenabled = true\ndatabase_url = \"{}\"\ntracker_id = \"outage\"\n\
         flush_interval_ms = 1000\nflush_retry_min_ms = 1000\nflush_retry_max_ms = 10000\n\
         api_listen = \"127.0.0.1:{}\"\napi_key = \"{API_KEY}\"\nmax_upload_rate = 0\n\
         max_pending_entries = 60000\nmax_pending_entries_per_user = 20000\n\
         [runtime]\nexempt_networks = [\"127.0.0.0/8\"]\n",
        db.url,
        free_port()
    );
    let tracker = Tracker::builder()
        .http(None)
        .udp(None)
        .runtime_args(&["--workers", "2", "--no-pin"])
        .config(&config)
        .state_file(&state.0)
        .metrics()
        .start();
    let mut honest = Churner::new(tracker.udp[0], 2);
    assert!(honest.announce(info_hash(1), 1, 0, AnnounceEvent::Started));
    db.wait_for("SELECT COUNT(*) FROM peers", 1u32);

    server_stop();
    // The server back whatever happens here: the tests after this one
    // need it.
    struct Restart;
    impl Drop for Restart {
        fn drop(&mut self) {
            server_start();
        }
    }
    let restart = Restart;
    let mut churner = Churner::new(tracker.udp[0], 1);
    let started = Instant::now();
    let (mut peer, mut samples) = (0u64, Vec::new());
    let mut next_sample = Duration::from_secs(30);
    while started.elapsed() < outage {
        // A new peer id each time, started and stopped, on the site's
        // torrents in turn; and a made-up info-hash.
        for _ in 0..100 {
            peer += 1;
            let torrent = info_hash(1 + (peer % 4) as u32);
            assert!(churner.announce(torrent, peer, 0, AnnounceEvent::Started));
            assert!(churner.announce(torrent, peer, 10, AnnounceEvent::Stopped));
            let mut made_up = [0x42; 20];
            made_up[..8].copy_from_slice(&peer.to_be_bytes());
            churner.announce(InfoHash(made_up), peer, 0, AnnounceEvent::Started);
        }
        if started.elapsed() >= next_sample {
            samples.push((started.elapsed().as_secs(), tracker.rss_kib()));
            next_sample += Duration::from_secs(30);
        }
    }
    let dropped = tracker.metric("tracker_private_entries_dropped_total", &[]);
    let pending = tracker.metric("tracker_private_pending_rows", &[]);
    eprintln!("{peer} peer ids churned in {outage:?}; RSS (s, KiB): {samples:?}; {dropped} dropped, {pending} pending");
    assert!(dropped > 0, "the bound was never reached");
    // The next flush's entries, the one in flight, and what waits to be
    // taken: each at most the bound.
    assert!(pending <= 3 * 60_000, "{pending} entries held");
    // Flat past the bound: from the first sample after a minute to the end,
    // less than a megabyte a minute (a churn unbounded grows by about 465
    // bytes a peer id: hundreds of megabytes here).
    let (from, to) = (
        samples.iter().find(|(s, _)| *s >= 60).copied().unwrap(),
        *samples.last().unwrap(),
    );
    let minutes = (to.0 - from.0) as f64 / 60.0;
    let grown = to.1.saturating_sub(from.1) as f64;
    assert!(
        grown <= 1024.0 * minutes.max(1.0),
        "RSS grew {grown} KiB in {minutes} minutes: {samples:?}"
    );

    drop(restart);
    // The honest user's peer is still credited when the database is back.
    assert!(honest.announce(info_hash(1), 1, 700, AnnounceEvent::None));
    db.wait_for("SELECT uploaded FROM users WHERE id = 2", 700u64);
    tracker.stop();
}
