//! A UNIT3D site's database for the private-mode tests: a database of its
//! own on the MariaDB server tests/mariadb.sh runs (TRACKER_TEST_MYSQL_URL),
//! with UNIT3D's schema (deploy/unit3d/schema.sql), seeded with groups,
//! users and torrents, read back row by row, and dropped at the end.

use mysql::prelude::{FromRow, Queryable};
use mysql::{Conn, Opts, OptsBuilder};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The server's URL (no database), from tests/mariadb.sh.
pub fn server_url() -> String {
    match std::env::var("TRACKER_TEST_MYSQL_URL") {
        Ok(url) if !url.is_empty() => url.trim_end_matches('/').to_owned(),
        _ => panic!(
            "TRACKER_TEST_MYSQL_URL is not set: private mode's tests need a MariaDB \
             server. Run tests/run.sh, or `eval \"$(tests/mariadb.sh setup \
             /tmp/tracker-mariadb)\"` and run cargo test in that shell"
        ),
    }
}

fn connect(url: &str) -> Conn {
    let opts = Opts::from_url(url).expect("TRACKER_TEST_MYSQL_URL parses");
    Conn::new(OptsBuilder::from_opts(opts).prefer_socket(false)).expect("the test server answers")
}

/// User `id`'s passkey: 32 hex digits, as UNIT3D makes them.
pub fn passkey(id: u32) -> String {
    format!("{:032x}", 0xfeed_0000_0000u64 + u64::from(id))
}

/// Torrent `id`'s info-hash.
pub fn info_hash(id: u32) -> tracker_proto::InfoHash {
    let mut hash = [0x5a; 20];
    hash[..4].copy_from_slice(&id.to_be_bytes());
    tracker_proto::InfoHash(hash)
}

pub struct SiteDb {
    pub name: String,
    /// mysql://...@127.0.0.1:PORT/NAME, for `private.database_url`.
    pub url: String,
    conn: Mutex<Option<Conn>>,
}

impl SiteDb {
    /// A new database with UNIT3D's tables and two groups: 1 `user` and 2
    /// `vip` (double upload, immune); 3 `banned`.
    pub fn new() -> SiteDb {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let server = server_url();
        let name = format!(
            "tracker_site_{}_{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        );
        let mut admin = connect(&server);
        admin
            .query_drop(format!(
                "DROP DATABASE IF EXISTS {name}; CREATE DATABASE {name}"
            ))
            .unwrap();
        let url = format!("{server}/{name}");
        let mut conn = connect(&url);
        let schema =
            std::fs::read_to_string(super::repo_root().join("deploy/unit3d/schema.sql")).unwrap();
        conn.query_drop(schema).unwrap();
        let db = SiteDb {
            name,
            url,
            conn: Mutex::new(Some(conn)),
        };
        for (id, slug, double, immune) in [(1, "user", 0, 0), (2, "vip", 1, 1), (3, "banned", 0, 0)]
        {
            db.exec(&format!(
                "INSERT INTO `groups` (id, name, slug, position, color, icon, can_chat, \
                 can_comment, can_invite, can_request, is_double_upload, is_immune) \
                 VALUES ({id}, '{slug}', '{slug}', {id}, '#fff', 'i', 1, 1, 1, 1, {double}, \
                 {immune})"
            ));
        }
        db
    }

    /// Runs `sql` (reconnecting once, as the server may have been restarted).
    pub fn exec(&self, sql: &str) {
        self.with(|c| c.query_drop(sql)).unwrap();
    }

    pub fn rows<T: FromRow>(&self, sql: &str) -> Vec<T> {
        self.with(|c| c.query(sql)).unwrap()
    }

    pub fn one<T: FromRow>(&self, sql: &str) -> T {
        let mut rows = self.rows(sql);
        assert_eq!(rows.len(), 1, "{sql}");
        rows.remove(0)
    }

    fn with<R>(&self, f: impl Fn(&mut Conn) -> mysql::Result<R>) -> mysql::Result<R> {
        let mut conn = self.conn.lock().unwrap();
        if let Some(c) = conn.as_mut() {
            if let Ok(r) = f(c) {
                return Ok(r);
            }
        }
        let mut fresh = connect(&self.url);
        let r = f(&mut fresh);
        *conn = Some(fresh);
        r
    }

    pub fn user(&self, id: u32, group: i32) {
        self.exec(&format!(
            "INSERT INTO users (id, username, email, password, passkey, group_id, rsskey) \
             VALUES ({id}, 'user{id}', 'u{id}@example.test', 'x', '{}', {group}, 'rss{id}')",
            passkey(id)
        ));
    }

    /// A torrent (of user 1, who must exist), approved unless `status` says.
    pub fn torrent(&self, id: u32, free: u8, status: u8) {
        self.exec(&format!(
            "INSERT INTO torrents (id, name, description, file_name, num_file, size, user_id, \
             status, free, info_hash) VALUES ({id}, 't{id}', '', 'f', 1, 1, 1, {status}, \
             {free}, UNHEX('{}'))",
            super::wire::hex(&info_hash(id))
        ));
    }

    /// Polls `sql` until it gives `want` (flushes come every interval).
    pub fn wait_for<T: FromRow + PartialEq + std::fmt::Debug>(&self, sql: &str, want: T) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let got: Vec<T> = self.rows(sql);
            if got.len() == 1 && got[0] == want {
                return;
            }
            assert!(Instant::now() < deadline, "{sql}: {got:?}, want {want:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for SiteDb {
    fn drop(&mut self) {
        let name = self.name.clone();
        let _ = self.with(|c| c.query_drop(format!("DROP DATABASE IF EXISTS {name}")));
    }
}

/// Stops and starts the test server (tests/mariadb.sh), for outages.
pub fn server_stop() {
    mariadb_ctl(&["stop", &env("TRACKER_TEST_MARIADB_DATADIR")]);
}

pub fn server_start() {
    let (dir, port) = (
        env("TRACKER_TEST_MARIADB_DATADIR"),
        env("TRACKER_TEST_MARIADB_PORT"),
    );
    mariadb_ctl(&["start", &dir, &port]);
}

fn env(key: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| panic!("{key} is not set (see tests/mariadb.sh)"))
}

fn mariadb_ctl(args: &[&str]) {
    let status = std::process::Command::new(env("TRACKER_TEST_MARIADB_CTL"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "tests/mariadb.sh {args:?}");
}
