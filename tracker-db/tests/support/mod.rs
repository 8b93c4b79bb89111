//! The tests' database and network fixtures: a fresh database per test on
//! the server tests/mariadb.sh runs, rows to seed it with, and a TCP proxy
//! that can cut the server off or swallow a COMMIT's acknowledgement.

#![allow(dead_code)]

pub mod gazelle;

use mysql::prelude::{FromRow, Queryable};
use mysql::{Conn, Opts, OptsBuilder};
use std::io::{Read, Write};
use std::net::{IpAddr, Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tracker_db::DbConfig;
use tracker_private::{Agent, Batch, HistoryRow, PeerKey, PeerRow, TorrentRow, UserRow};
use tracker_proto::{InfoHash, PeerId};

/// The server's URL without a database, from tests/mariadb.sh.
pub fn server_url() -> String {
    match std::env::var("TRACKER_TEST_MYSQL_URL") {
        Ok(url) if !url.is_empty() => url.trim_end_matches('/').to_owned(),
        _ => panic!(
            "TRACKER_TEST_MYSQL_URL is not set: these tests need a MariaDB server. \
             Run tests/run.sh, or start one with \
             `eval \"$(tests/mariadb.sh setup /tmp/tracker-mariadb)\"` and run \
             `cargo test -p tracker-db` in that shell \
             (`tests/mariadb.sh stop /tmp/tracker-mariadb/data` stops it)"
        ),
    }
}

fn plain_conn(url: &str) -> Conn {
    let opts = Opts::from_url(url).expect("TRACKER_TEST_MYSQL_URL parses");
    Conn::new(OptsBuilder::from_opts(opts).prefer_socket(false))
        .expect("connect to the test server")
}

/// A database of its own, with UNIT3D's schema and tracker_flushes loaded,
/// dropped when the test ends.
pub struct TestDb {
    pub name: String,
    /// The URL of this database.
    pub url: String,
}

impl TestDb {
    /// UNIT3D's tables as deploy/unit3d/schema.sql has them, and
    /// tracker_flushes.
    pub fn new() -> TestDb {
        let db = TestDb::empty();
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/unit3d/");
        for file in ["schema.sql", "tracker.sql"] {
            db.exec(&std::fs::read_to_string(format!("{root}{file}")).unwrap());
        }
        db
    }

    /// A database with no tables.
    pub fn empty() -> TestDb {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let server = server_url();
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let name = format!(
            "tracker_db_test_{}_{}_{nanos}",
            std::process::id(),
            COUNTER.fetch_add(1, SeqCst)
        );
        let mut admin = plain_conn(&server);
        admin
            .query_drop(format!("DROP DATABASE IF EXISTS {name}"))
            .unwrap();
        admin.query_drop(format!("CREATE DATABASE {name}")).unwrap();
        let url = format!("{server}/{name}");
        TestDb { name, url }
    }

    pub fn config(&self) -> DbConfig {
        let mut config = DbConfig::new(&self.url);
        config.connect_timeout = Duration::from_secs(2);
        config.io_timeout = Duration::from_secs(10);
        config
    }

    /// A connection as the tracker makes them.
    pub fn conn(&self) -> Conn {
        self.config().connect().unwrap()
    }

    /// Runs `sql` on a new connection (one made before a server restart
    /// would be gone).
    pub fn exec(&self, sql: &str) {
        plain_conn(&self.url).query_drop(sql).unwrap();
    }

    pub fn rows<T: FromRow>(&self, sql: &str) -> Vec<T> {
        plain_conn(&self.url).query(sql).unwrap()
    }

    pub fn one<T: FromRow>(&self, sql: &str) -> T {
        let mut rows = self.rows(sql);
        assert_eq!(rows.len(), 1, "{sql}");
        rows.remove(0)
    }

    /// A user in group 1 with a valid passkey.
    pub fn user(&self, id: u32) {
        self.exec(&format!(
            "INSERT INTO users (id, username, email, password, passkey, group_id, rsskey) \
             VALUES ({id}, 'user{id}', 'u{id}@example.test', 'x', '{}', 1, 'rss{id}')",
            passkey(id)
        ));
    }

    /// A torrent of user 1 (who must exist), approved, not free.
    pub fn torrent(&self, id: u32) {
        self.exec(&format!(
            "INSERT INTO torrents (id, name, description, file_name, num_file, size, user_id, \
             status, info_hash) VALUES ({id}, 't{id}', '', 'f', 1, 1, 1, 1, UNHEX('{}'))",
            hex(&info_hash(id))
        ));
    }

    /// Users 1..=users and torrents 1..=torrents.
    pub fn seed(&self, users: u32, torrents: u32) {
        for id in 1..=users {
            self.user(id);
        }
        for id in 1..=torrents {
            self.torrent(id);
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let Ok(opts) = Opts::from_url(&server_url()) else {
            return;
        };
        if let Ok(mut admin) = Conn::new(OptsBuilder::from_opts(opts).prefer_socket(false)) {
            let _ = admin.query_drop(format!("DROP DATABASE IF EXISTS {}", self.name));
        }
    }
}

/// A database user of its own, with exactly the grants of
/// deploy/unit3d/grants.sql on `db`, dropped with this value.
pub struct GrantedUser {
    /// The account, `'name'@'host'`.
    pub name: String,
    pub url: String,
}

impl GrantedUser {
    pub fn new(db: &TestDb) -> GrantedUser {
        let name = format!("g{}", &db.name[db.name.len().saturating_sub(12)..]);
        let opts = Opts::from_url(&server_url()).unwrap();
        let host = opts.get_ip_or_hostname().to_string();
        let account = format!("'{name}'@'{host}'");
        db.exec(&format!("DROP USER IF EXISTS {account}"));
        db.exec(&format!("CREATE USER {account} IDENTIFIED BY 'pw'"));
        let grants = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../deploy/unit3d/grants.sql"
        ))
        .unwrap();
        let grants = grants
            .replace("`unit3d`", &format!("`{}`", db.name))
            .replace("'tracker'@'localhost'", &account);
        db.exec(&grants);
        let url = format!(
            "mysql://{name}:pw@{host}:{}/{}",
            opts.get_tcp_port(),
            db.name
        );
        GrantedUser { name: account, url }
    }
}

impl Drop for GrantedUser {
    fn drop(&mut self) {
        if let Ok(opts) = Opts::from_url(&server_url()) {
            if let Ok(mut admin) = Conn::new(OptsBuilder::from_opts(opts).prefer_socket(false)) {
                let _ = admin.query_drop(format!("DROP USER IF EXISTS {}", self.name));
            }
        }
    }
}

/// A batch of every kind of row, made by a ledger from real announces: a
/// new peer, its credited announce, a completion, a stop, and a torrent
/// the site does not serve.
pub fn every_kind_of_row(db: &TestDb) -> Batch {
    use tracker_private::{Ledger, LedgerConfig, Passkey, PrivateAnnounce, Site};
    use tracker_proto::AnnounceEvent;
    db.exec(
        "INSERT INTO `groups` (id, name, slug, position, color, icon, can_chat, can_comment, \
         can_invite, can_request) VALUES (1, 'user', 'user', 1, '#fff', 'i', 1, 1, 1, 1)",
    );
    let records = tracker_db::load(&mut db.conn()).unwrap();
    let site = Site::from_records(records, tracker_private::GlobalFactors::default());
    let mut ledger = Ledger::new(LedgerConfig {
        max_unregistered_per_batch: 10,
        ..LedgerConfig::default()
    });
    let mut a = PrivateAnnounce {
        info_hash: InfoHash(info_hash(1)),
        peer_id: peer_id(1),
        passkey: Passkey::parse(passkey(1).as_bytes()).unwrap(),
        ip: "192.0.2.1".parse().unwrap(),
        port: 51413,
        event: AnnounceEvent::Started,
        uploaded: 0,
        downloaded: 0,
        left: 100,
        agent: Agent::new(b"qBittorrent/4.5.0"),
        numwant: 50,
    };
    let at = |secs: u64| secs * 1_000_000;
    // The answers' peers, which this batch does not need.
    let mut answer = tracker_proto::AnswerPeers::default();
    ledger.announce(&site, &a, at(T0), &mut answer).unwrap();
    (a.event, a.uploaded, a.downloaded) = (AnnounceEvent::None, 700, 100);
    ledger
        .announce(&site, &a, at(T0 + 60), &mut answer)
        .unwrap();
    (a.event, a.left) = (AnnounceEvent::Completed, 0);
    ledger
        .announce(&site, &a, at(T0 + 120), &mut answer)
        .unwrap();
    a.event = AnnounceEvent::Stopped;
    ledger
        .announce(&site, &a, at(T0 + 180), &mut answer)
        .unwrap();
    let mut unknown = a;
    unknown.info_hash = InfoHash([0x77; 20]);
    assert!(ledger
        .announce(&site, &unknown, at(T0 + 200), &mut answer)
        .is_err());
    let batch = ledger.take_batch();
    assert!(!batch.peers.is_empty() && !batch.history.is_empty());
    assert!(!batch.unregistered.is_empty());
    batch
}

/// User `id`'s passkey: 32 lowercase hex digits.
pub fn passkey(id: u32) -> String {
    format!("{id:032x}")
}

pub fn info_hash(id: u32) -> [u8; 20] {
    let mut hash = [0xab; 20];
    hash[..4].copy_from_slice(&id.to_be_bytes());
    hash
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn peer_id(n: u8) -> PeerId {
    let mut id = *b"-TR4060-000000000000";
    id[19] = n;
    PeerId(id)
}

/// Unix seconds: 2023-11-14 22:13:20 UTC.
pub const T0: u64 = 1_700_000_000;

pub fn peer(ip: IpAddr, uploaded: u64, updated_at: u64) -> PeerRow {
    PeerRow {
        ip,
        port: 51413,
        agent: Agent::new(b"Transmission/4.0.6"),
        uploaded,
        downloaded: 0,
        left: 0,
        active: true,
        seeder: true,
        visible: true,
        connectable: false,
        created_at: updated_at,
        updated_at,
    }
}

pub fn history(uploaded: u64, seedtime: u64, updated_at: u64) -> HistoryRow {
    HistoryRow {
        agent: Agent::new(b"Transmission/4.0.6"),
        uploaded,
        downloaded: 0,
        actual_uploaded: uploaded,
        actual_downloaded: 0,
        client_uploaded: uploaded,
        client_downloaded: 0,
        seedtime,
        seeder: true,
        active: true,
        immune: true,
        completed_at: None,
        created_at: updated_at,
        updated_at,
    }
}

/// A batch crediting `bytes` to each user, each torrent's balance, and
/// each (user, torrent) history row, plus one peer per pair.
pub fn credit(users: &[u32], torrents: &[u32], bytes: u64, at: u64) -> Batch {
    let mut batch = Batch::default();
    for &user in users {
        batch.settled.users.insert(
            user,
            UserRow {
                uploaded: bytes,
                downloaded: bytes / 2,
            },
        );
        for &torrent in torrents {
            batch
                .settled
                .history
                .insert((user, torrent), history(bytes, 0, at));
            batch.settled.peers.insert(
                PeerKey {
                    user_id: user,
                    torrent_id: torrent,
                    peer_id: peer_id(1),
                },
                peer("192.0.2.1".parse().unwrap(), bytes, at),
            );
        }
    }
    for &torrent in torrents {
        batch.settled.torrents.insert(
            torrent,
            TorrentRow {
                seeders: 1,
                leechers: 0,
                times_completed: 1,
                balance: bytes as i64,
                updated_at: at,
            },
        );
    }
    batch
}

/// Polls `condition` every 10 ms until it holds; panics after `limit`.
pub fn wait_until(limit: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let end = Instant::now() + limit;
    while !condition() {
        assert!(Instant::now() < end, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A TCP proxy in front of the test server: it can cut every connection
/// and refuse new ones (the database unreachable), and it can forward one
/// COMMIT to the server, wait for the server's answer, and drop the
/// connection instead of passing the answer on (a lost acknowledgement).
pub struct Proxy {
    pub port: u16,
    state: Arc<ProxyState>,
}

#[derive(Default)]
struct ProxyState {
    cut: AtomicBool,
    /// New connections are accepted and held, never answered: a server
    /// that takes connections but does not serve them.
    hang: AtomicBool,
    held: Mutex<Vec<TcpStream>>,
    swallow_commit_ack: AtomicBool,
    swallowed: AtomicU64,
    streams: Mutex<Vec<TcpStream>>,
}

impl Proxy {
    /// A proxy to the server of `TRACKER_TEST_MYSQL_URL`.
    pub fn start() -> Proxy {
        let opts = Opts::from_url(&server_url()).unwrap();
        let upstream = format!("{}:{}", opts.get_ip_or_hostname(), opts.get_tcp_port());
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(ProxyState::default());
        let accept_state = Arc::clone(&state);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if accept_state.cut.load(SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                if accept_state.hang.load(SeqCst) {
                    accept_state.held.lock().unwrap().push(client);
                    continue;
                }
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                relay(&accept_state, client, server);
            }
        });
        Proxy { port, state }
    }

    /// `url` (a test database's) through this proxy.
    pub fn url(&self, url: &str) -> String {
        let opts = Opts::from_url(url).unwrap();
        let host = format!("{}:{}", opts.get_ip_or_hostname(), opts.get_tcp_port());
        url.replacen(&host, &format!("127.0.0.1:{}", self.port), 1)
    }

    /// Closes every connection and refuses new ones.
    pub fn cut(&self) {
        self.state.cut.store(true, SeqCst);
        for stream in self.state.streams.lock().unwrap().drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    pub fn restore(&self) {
        self.state.cut.store(false, SeqCst);
        self.state.hang.store(false, SeqCst);
        self.state.held.lock().unwrap().clear();
    }

    /// Closes every connection, then accepts new ones and answers none:
    /// whoever connects waits out its timeouts.
    pub fn hang(&self) {
        self.state.hang.store(true, SeqCst);
        for stream in self.state.streams.lock().unwrap().drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    /// The next COMMIT reaches the server, its answer does not reach the
    /// client: the connection drops instead.
    pub fn swallow_next_commit_ack(&self) {
        self.state.swallow_commit_ack.store(true, SeqCst);
    }

    /// COMMIT answers swallowed so far.
    pub fn swallowed(&self) -> u64 {
        self.state.swallowed.load(SeqCst)
    }
}

fn relay(state: &Arc<ProxyState>, client: TcpStream, server: TcpStream) {
    let commit_sent = Arc::new(AtomicBool::new(false));
    {
        let mut streams = state.streams.lock().unwrap();
        streams.push(client.try_clone().unwrap());
        streams.push(server.try_clone().unwrap());
    }
    // Client to server: forwarded as is, read packet by packet to spot
    // COM_QUERY "COMMIT" (MySQL packets: 3-byte length, sequence, payload).
    {
        let (mut from, mut to) = (client.try_clone().unwrap(), server.try_clone().unwrap());
        let (state, commit_sent) = (Arc::clone(state), Arc::clone(&commit_sent));
        std::thread::spawn(move || {
            let mut pending: Vec<u8> = Vec::new();
            let mut buf = [0; 16384];
            loop {
                let n = match from.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                pending.extend_from_slice(&buf[..n]);
                while pending.len() >= 4 {
                    let len = usize::from(pending[0])
                        | usize::from(pending[1]) << 8
                        | usize::from(pending[2]) << 16;
                    if pending.len() < 4 + len {
                        break;
                    }
                    let payload = &pending[4..4 + len];
                    let is_commit = payload.first() == Some(&0x03)
                        && payload[1..].eq_ignore_ascii_case(b"COMMIT");
                    if is_commit && state.swallow_commit_ack.swap(false, SeqCst) {
                        commit_sent.store(true, SeqCst);
                    }
                    pending.drain(..4 + len);
                }
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            let _ = to.shutdown(Shutdown::Both);
            let _ = from.shutdown(Shutdown::Both);
        });
    }
    // Server to client: forwarded, but for the answer to a marked COMMIT.
    {
        let (mut from, mut to) = (server, client);
        let state = Arc::clone(state);
        std::thread::spawn(move || {
            let mut buf = [0; 16384];
            loop {
                let n = match from.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                if commit_sent.load(SeqCst) {
                    // The server has committed and answered: the client
                    // never hears of it.
                    state.swallowed.fetch_add(1, SeqCst);
                    break;
                }
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            let _ = to.shutdown(Shutdown::Both);
            let _ = from.shutdown(Shutdown::Both);
        });
    }
}
