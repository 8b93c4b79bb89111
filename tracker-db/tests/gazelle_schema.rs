//! Gazelle's schema (deploy/gazelle/schema.sql and whitelist-seed.sql) on a
//! real MariaDB server (tests/mariadb.sh runs one; TRACKER_TEST_MYSQL_URL
//! names it), loaded under Gazelle's sql_mode, and Ocelot 2.1.3's own
//! statements run on it as a user with exactly
//! deploy/gazelle/ocelot-grants.sql: its start, its four loads and its five
//! flushes, each in the form src/db.cpp builds it, with the rows they leave.
//! Then the pitfalls a replacement writing these tables must avoid, pinned:
//! what the strict sql_mode and the foreign keys refuse, and that one
//! refused row fails its whole multi-row statement.
//!
//! This is the ground a Gazelle adapter (issue 43) stands on: if a statement
//! here fails, Ocelot's would fail on that site too.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use mysql::prelude::{FromRow, Queryable};
use mysql::Conn;
use support::gazelle::{gazelle_conn, gazelle_db, hex, repo_file, Login, GAZELLE_SQL_MODE};
use support::TestDb;

const ER_NO_DEFAULT_FOR_FIELD: u16 = 1364;
const ER_DATA_TOO_LONG: u16 = 1406;
const ER_NO_REFERENCED_ROW_2: u16 = 1452;

/// The clock the flushes write (db.cpp writes time(NULL)).
const NOW: i64 = 1_700_000_000;

// Ocelot's statements, word for word from src/db.cpp (d4aaff7); the flushes'
// VALUES lists are the records src/worker.cpp makes, joined by ','.
const TRUNCATE_PEERS: &str = "TRUNCATE xbt_files_users;";
const ZERO_COUNTS: &str = "UPDATE torrents_leech_stats SET Seeders = 0, Leechers = 0;";
const LOAD_TORRENTS: &str = "SELECT t.ID, t.info_hash, t.freetorrent, tls.Snatched FROM torrents t INNER JOIN torrents_leech_stats tls ON (tls.TorrentID = t.ID) ORDER BY t.ID";
const LOAD_USERS: &str = "SELECT ID, can_leech, torrent_pass, (Visible='0' OR IP='127.0.0.1') AS Protected FROM users_main WHERE Enabled='1';";
const LOAD_TOKENS: &str = "SELECT uf.UserID, t.info_hash FROM users_freeleeches AS uf INNER JOIN torrents AS t ON t.ID = uf.TorrentID WHERE uf.Expired = '0';";
const LOAD_WHITELIST: &str = "SELECT peer_id FROM xbt_client_whitelist;";
const DELETE_RELIC: &str = "DELETE FROM torrents WHERE info_hash = ''";

fn flush_users(records: &str) -> String {
    format!(
        "INSERT INTO users_leech_stats (UserID, Uploaded, Downloaded) VALUES {records} \
         ON DUPLICATE KEY UPDATE Uploaded = Uploaded + VALUES(Uploaded), \
         Downloaded = Downloaded + VALUES(Downloaded)"
    )
}

fn flush_torrents(records: &str) -> String {
    format!(
        "INSERT INTO torrents_leech_stats (TorrentID,Seeders,Leechers,Snatched,Balance) \
         VALUES {records} ON DUPLICATE KEY UPDATE Seeders=VALUES(Seeders), \
         Leechers=VALUES(Leechers), Snatched=Snatched+VALUES(Snatched), \
         Balance=VALUES(Balance), last_action = IF(VALUES(Seeders) > 0, NOW(), last_action)"
    )
}

fn flush_snatches(records: &str) -> String {
    format!("INSERT IGNORE INTO xbt_snatched (uid, fid, tstamp, IP) VALUES {records}")
}

fn flush_heavy_peers(records: &str) -> String {
    format!(
        "INSERT INTO xbt_files_users (uid,fid,active,uploaded,downloaded,upspeed,downspeed,\
         remaining,corrupt,timespent,announced,ip,peer_id,useragent,mtime) VALUES {records} \
         ON DUPLICATE KEY UPDATE active=VALUES(active), uploaded=VALUES(uploaded), \
         downloaded=VALUES(downloaded), upspeed=VALUES(upspeed), \
         downspeed=VALUES(downspeed), remaining=VALUES(remaining), \
         corrupt=VALUES(corrupt), timespent=VALUES(timespent), \
         announced=VALUES(announced), mtime=VALUES(mtime)"
    )
}

fn flush_light_peers(records: &str) -> String {
    format!(
        "INSERT INTO xbt_files_users (uid,fid,timespent,announced,peer_id,mtime) VALUES {records} \
         ON DUPLICATE KEY UPDATE upspeed=0, downspeed=0, timespent=VALUES(timespent), \
         announced=VALUES(announced), mtime=VALUES(mtime)"
    )
}

fn flush_tokens(records: &str) -> String {
    format!(
        "INSERT INTO users_freeleeches (UserID, TorrentID, Downloaded) VALUES {records} \
         ON DUPLICATE KEY UPDATE Downloaded = Downloaded + VALUES(Downloaded)"
    )
}

/// A string as mysql++'s `quote` writes it into a query: in single quotes,
/// escaped as mysql_real_escape_string escapes.
fn quote(text: &str) -> String {
    let mut quoted = String::from("'");
    for c in text.chars() {
        match c {
            '\0' => quoted.push_str("\\0"),
            '\n' => quoted.push_str("\\n"),
            '\r' => quoted.push_str("\\r"),
            '\\' => quoted.push_str("\\\\"),
            '\'' => quoted.push_str("\\'"),
            '"' => quoted.push_str("\\\""),
            '\u{1a}' => quoted.push_str("\\Z"),
            other => quoted.push(other),
        }
    }
    quoted.push('\'');
    quoted
}

/// One peer's xbt_files_users record, as worker.cpp:580-595 and
/// db.cpp:271-288 make it.
struct PeerRecord<'a> {
    uid: u32,
    fid: u32,
    active: u8,
    uploaded: u64,
    downloaded: u64,
    upspeed: u64,
    downspeed: u64,
    left: u64,
    corrupt: u64,
    timespent: i64,
    announces: u32,
    /// '' for a protected user.
    ip: &'a str,
    /// Already a SQL literal: `quote(..)` as mysql++ writes it, or a hex
    /// literal for bytes that are not UTF-8 (this crate's text queries are
    /// strings; Ocelot's are raw bytes).
    peer_id: String,
    useragent: &'a str,
}

impl PeerRecord<'_> {
    /// The record of a changed peer (the "heavy" form).
    fn heavy(&self) -> String {
        format!(
            "({},{},{},{},{},{},{},{},{},{},{},{},{},{},{NOW})",
            self.uid,
            self.fid,
            self.active,
            self.uploaded,
            self.downloaded,
            self.upspeed,
            self.downspeed,
            self.left,
            self.corrupt,
            self.timespent,
            self.announces,
            quote(self.ip),
            self.peer_id,
            quote(self.useragent)
        )
    }

    /// The record of an unchanged peer (the "light" form).
    fn light(&self) -> String {
        format!(
            "({},{},{},{},{},{NOW})",
            self.uid, self.fid, self.timespent, self.announces, self.peer_id
        )
    }
}

/// Ocelot's grants, and the login they name.
const OCELOT_GRANTS: &str = "deploy/gazelle/ocelot-grants.sql";
const OCELOT: &str = "'ocelot'@'localhost'";

/// A Gazelle database (schema.sql and whitelist-seed.sql, loaded under
/// Gazelle's sql_mode) and a login with exactly ocelot-grants.sql on it;
/// both dropped at the end.
struct Site {
    db: TestDb,
    ocelot: Login,
}

impl Site {
    fn new() -> Site {
        let db = gazelle_db();
        let ocelot = Login::new(&db, "o", OCELOT_GRANTS, OCELOT, None);
        Site { db, ocelot }
    }

    /// The site's own login (all privileges), under Gazelle's sql_mode.
    fn admin(&self) -> Conn {
        gazelle_conn(&self.db.url)
    }

    /// A login with exactly ocelot-grants.sql, under Gazelle's sql_mode.
    fn ocelot(&self) -> Conn {
        gazelle_conn(&self.ocelot.url)
    }

    fn rows<T: FromRow>(&self, sql: &str) -> Vec<T> {
        self.admin().query(sql).unwrap()
    }

    fn count(&self, table: &str) -> u64 {
        self.rows::<u64>(&format!("SELECT COUNT(*) FROM {table}"))[0]
    }

    /// User `id`, enabled, seen from 192.0.2.`id`.
    fn user(&self, id: u32) {
        self.admin()
            .query_drop(format!(
                "INSERT INTO users_main (ID, Username, Email, PassHash, IP, Enabled, \
                 PermissionID, torrent_pass, auth_key, stylesheet_id) VALUES \
                 ({id}, 'user{id}', 'user{id}@example.test', 'x', '192.0.2.{id}', '1', 2, \
                 '{}', 'auth{id}', 1)",
                passkey(id)
            ))
            .unwrap();
    }

    /// Torrent `id` of user 1 in group 1 (both must exist), with its
    /// torrents_leech_stats row unless `stats` is None.
    fn torrent(&self, id: u32, free: &str, stats: Option<(u32, &str)>) {
        let mut admin = self.admin();
        admin
            .query_drop(format!(
                "INSERT INTO torrents (ID, GroupID, UserID, info_hash, FileCount, FileList, \
                 Size, FreeTorrent) VALUES ({id}, 1, 1, X'{}', 1, 'f', 1000, '{free}')",
                hex(&info_hash(id))
            ))
            .unwrap();
        if let Some((snatched, last_action)) = stats {
            admin
                .query_drop(format!(
                    "INSERT INTO torrents_leech_stats (TorrentID, Seeders, Leechers, Snatched, \
                     Balance, last_action) VALUES ({id}, 3, 4, {snatched}, 999, {last_action})"
                ))
                .unwrap();
        }
    }

    /// A torrent group for the torrents.
    fn group(&self) {
        self.admin()
            .query_drop(
                "INSERT INTO torrents_group (ID, CategoryID, Name, WikiBody, WikiImage) \
                 VALUES (1, 1, 'Group', '', '')",
            )
            .unwrap();
    }
}

/// User `id`'s passkey: 32 characters, as Gazelle's torrent_pass.
fn passkey(id: u32) -> String {
    format!("pk{id:030}")
}

fn info_hash(id: u32) -> [u8; 20] {
    let mut hash = [0xc3; 20];
    hash[..4].copy_from_slice(&id.to_be_bytes());
    hash
}

/// The MySQL error `sql` is refused with; panics if it is not refused.
fn refused(conn: &mut Conn, sql: &str) -> u16 {
    match conn.query_drop(sql) {
        Err(mysql::Error::MySqlError(e)) => e.code,
        Err(e) => panic!("{sql}: not a server's refusal: {e}"),
        Ok(()) => panic!("{sql}: accepted"),
    }
}

/// The schema loads whole: every table and foreign key Gazelle has for
/// them, and the seeded whitelist.
#[test]
fn the_schema_and_the_whitelist_load_under_gazelles_sql_mode() {
    let site = Site::new();
    let tables: Vec<String> = site.rows(&format!(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = '{}' \
         ORDER BY table_name",
        site.db.name
    ));
    assert_eq!(
        tables,
        [
            "torrents",
            "torrents_group",
            "torrents_leech_stats",
            "users_freeleeches",
            "users_leech_stats",
            "users_main",
            "xbt_client_whitelist",
            "xbt_files_users",
            "xbt_snatched"
        ]
    );
    let keys: Vec<(String, String, String, String)> = site.rows(&format!(
        "SELECT table_name, referenced_table_name, update_rule, delete_rule \
         FROM information_schema.referential_constraints WHERE constraint_schema = '{}' \
         ORDER BY table_name, referenced_table_name",
        site.db.name
    ));
    let keys: Vec<(&str, &str, &str, &str)> = keys
        .iter()
        .map(|(a, b, c, d)| (a.as_str(), b.as_str(), c.as_str(), d.as_str()))
        .collect();
    assert_eq!(
        keys,
        [
            ("torrents", "torrents_group", "RESTRICT", "RESTRICT"),
            ("torrents", "users_main", "RESTRICT", "RESTRICT"),
            ("torrents_leech_stats", "torrents", "RESTRICT", "RESTRICT"),
            ("users_leech_stats", "users_main", "CASCADE", "CASCADE"),
        ]
    );
    // The columns a tracker's writes run into: lengths, and NOT NULL
    // without a default (COLUMN_DEFAULT is NULL for no default).
    let columns: Vec<(String, String, String, String, Option<String>)> = site.rows(&format!(
        "SELECT table_name, column_name, column_type, is_nullable, column_default \
         FROM information_schema.columns WHERE table_schema = '{}' AND \
         (table_name, column_name) IN (('xbt_files_users', 'ip'), \
         ('xbt_files_users', 'useragent'), ('xbt_files_users', 'peer_id'), \
         ('xbt_snatched', 'IP'), ('users_freeleeches', 'Time'), ('torrents', 'info_hash')) \
         ORDER BY table_name, column_name",
        site.db.name
    ));
    let column = |t: &str, c: &str, ty: &str, default: Option<&str>| {
        (
            t.to_owned(),
            c.to_owned(),
            ty.to_owned(),
            "NO".to_owned(),
            default.map(str::to_owned),
        )
    };
    assert_eq!(
        columns,
        [
            column("torrents", "info_hash", "binary(20)", None),
            column("users_freeleeches", "Time", "datetime", None),
            column("xbt_files_users", "ip", "varchar(15)", Some("''")),
            column(
                "xbt_files_users",
                "peer_id",
                "binary(20)",
                Some(format!("'{}'", "\\0".repeat(20)).as_str())
            ),
            column("xbt_files_users", "useragent", "varchar(51)", Some("''")),
            column("xbt_snatched", "IP", "varchar(15)", None),
        ]
    );
    // Every table in MariaDB's stand-in for utf8mb4_0900_ai_ci.
    let collations: Vec<String> = site.rows(&format!(
        "SELECT DISTINCT table_collation FROM information_schema.tables \
         WHERE table_schema = '{}'",
        site.db.name
    ));
    assert_eq!(collations, ["utf8mb4_uca1400_nopad_ai_ci"]);

    assert_eq!(site.count("xbt_client_whitelist"), 32);
    let first_last: Vec<(u32, String, String)> = site.rows(
        "SELECT id, peer_id, vstring FROM xbt_client_whitelist WHERE id IN (1, 32) ORDER BY id",
    );
    assert_eq!(
        first_last,
        [
            (1, "-DE12".to_owned(), "Deluge 1.2.x".to_owned()),
            (32, "-UM18".to_owned(), "uTorrent Mac 1.8.x".to_owned())
        ]
    );
}

/// Ocelot's start and loads, as the user with exactly ocelot-grants.sql:
/// the TRUNCATE and the zeroed counts, then the users, torrents, tokens
/// and whitelist it reads, with the rows each leaves out.
#[test]
fn ocelots_start_and_loads_run_with_the_documented_grants() {
    let site = Site::new();
    site.group();
    for id in 1..=6 {
        site.user(id);
    }
    let mut admin = site.admin();
    // 2 is invisible and 3 was last seen from 127.0.0.1: both protected
    // (Ocelot writes '' for their IPs); 3 may not leech; 4 is disabled,
    // 5 unconfirmed, 6 banned: not loaded.
    admin
        .query_drop(
            "UPDATE users_main SET Visible = '0' WHERE ID = 2; \
             UPDATE users_main SET IP = '127.0.0.1', can_leech = 0 WHERE ID = 3; \
             UPDATE users_main SET Enabled = '2' WHERE ID = 4; \
             UPDATE users_main SET Enabled = '0' WHERE ID = 5; \
             UPDATE users_main SET Enabled = 'banned' WHERE ID = 6",
        )
        .unwrap();
    // 1 normal, 2 free, 3 neutral; 4 has no torrents_leech_stats row and
    // is not served.
    site.torrent(1, "0", Some((7, "NULL")));
    site.torrent(2, "1", Some((0, "NULL")));
    site.torrent(3, "2", Some((2, "NULL")));
    site.torrent(4, "0", None);
    // Tokens: user 1 on torrent 1 (live), user 2 on torrent 2 (expired),
    // user 3 on torrent 4 (live, but an unserved torrent: Ocelot drops it).
    admin
        .query_drop(
            "INSERT INTO users_freeleeches (UserID, TorrentID, Time, Expired) VALUES \
             (1, 1, NOW(), 0), (2, 2, NOW(), 1), (3, 4, NOW(), 0)",
        )
        .unwrap();
    admin
        .query_drop(
            "INSERT INTO xbt_files_users (uid, fid, peer_id, mtime) VALUES \
             (1, 1, '-qB4250-000000000001', 5), (2, 2, '-qB4250-000000000002', 5)",
        )
        .unwrap();

    let mut ocelot = site.ocelot();
    // The start (mysql::clear_peer_data).
    ocelot.query_drop(TRUNCATE_PEERS).unwrap();
    ocelot.query_drop(ZERO_COUNTS).unwrap();
    assert_eq!(site.count("xbt_files_users"), 0);
    let counts: Vec<(u32, i32, i32, i32, i64)> = site.rows(
        "SELECT TorrentID, Seeders, Leechers, Snatched, Balance FROM torrents_leech_stats \
         ORDER BY TorrentID",
    );
    assert_eq!(
        counts,
        [(1, 0, 0, 7, 999), (2, 0, 0, 0, 999), (3, 0, 0, 2, 999)]
    );

    // The loads.
    let mut users: Vec<(u32, i64, String, i64)> = ocelot.query(LOAD_USERS).unwrap();
    users.sort();
    assert_eq!(
        users,
        [
            (1, 1, passkey(1), 0),
            (2, 1, passkey(2), 1),
            (3, 0, passkey(3), 1)
        ]
    );
    let torrents: Vec<(u32, Vec<u8>, String, i32)> = ocelot.query(LOAD_TORRENTS).unwrap();
    assert_eq!(
        torrents,
        [
            (1, info_hash(1).to_vec(), "0".to_owned(), 7),
            (2, info_hash(2).to_vec(), "1".to_owned(), 0),
            (3, info_hash(3).to_vec(), "2".to_owned(), 2)
        ]
    );
    let mut tokens: Vec<(u32, Vec<u8>)> = ocelot.query(LOAD_TOKENS).unwrap();
    tokens.sort();
    assert_eq!(
        tokens,
        [(1, info_hash(1).to_vec()), (3, info_hash(4).to_vec())]
    );
    let whitelist: Vec<Vec<u8>> = ocelot.query(LOAD_WHITELIST).unwrap();
    assert_eq!(whitelist.len(), 32);
    for prefix in ["-qB42", "-TR30", "-lt0D", "M"] {
        assert!(
            whitelist.iter().any(|p| p == prefix.as_bytes()),
            "{prefix} is in the whitelist"
        );
    }
}

/// Each of Ocelot's five flushes, as the user with exactly
/// ocelot-grants.sql, in the form db.cpp builds it, and the rows it
/// leaves.
#[test]
fn ocelots_flushes_run_with_the_documented_grants_and_leave_these_rows() {
    let site = Site::new();
    site.group();
    for id in 1..=3 {
        site.user(id);
    }
    site.torrent(1, "0", Some((7, "NULL")));
    site.torrent(2, "1", Some((0, "'2024-01-02 03:04:05'")));
    let mut admin = site.admin();
    admin
        .query_drop(
            "INSERT INTO users_leech_stats (UserID, Uploaded, Downloaded) VALUES \
             (1, 1000, 2000), (2, 0, 0)",
        )
        .unwrap();
    let mut ocelot = site.ocelot();

    // users_leech_stats: added to, a user twice in one batch counted
    // twice, a user without a row given one.
    ocelot
        .query_drop(flush_users("(1,700,100),(2,50,0),(1,10,20),(3,5,6)"))
        .unwrap();
    let users: Vec<(u32, i64, i64)> =
        site.rows("SELECT UserID, Uploaded, Downloaded FROM users_leech_stats ORDER BY UserID");
    assert_eq!(users, [(1, 1710, 2120), (2, 50, 0), (3, 5, 6)]);

    // torrents_leech_stats, then the relic that shares its queue: counts
    // replaced, Snatched added to, Balance replaced, last_action set only
    // with seeders. The relic deletes nothing, not even a torrent whose
    // info_hash was written as '' (a binary(20) stores 20 zero bytes).
    admin
        .query_drop(
            "INSERT INTO torrents (ID, GroupID, UserID, info_hash, FileCount, FileList, Size) \
             VALUES (3, 1, 1, '', 1, 'f', 0)",
        )
        .unwrap();
    ocelot
        .query_drop(flush_torrents("(1,2,1,1,500),(2,0,0,0,-30)"))
        .unwrap();
    ocelot.query_drop(DELETE_RELIC).unwrap();
    assert_eq!(ocelot.affected_rows(), 0);
    assert_eq!(
        site.rows::<Vec<u8>>("SELECT info_hash FROM torrents WHERE ID = 3"),
        [[0u8; 20]]
    );
    let torrents: Vec<(u32, i32, i32, i32, i64, Option<String>)> = site.rows(
        "SELECT TorrentID, Seeders, Leechers, Snatched, Balance, \
         CAST(last_action AS CHAR) FROM torrents_leech_stats ORDER BY TorrentID",
    );
    assert_eq!(torrents.len(), 2);
    let (id, seeders, leechers, snatched, balance, _) = &torrents[0];
    assert_eq!(
        (*id, *seeders, *leechers, *snatched, *balance),
        (1, 2, 1, 8, 500)
    );
    assert!(torrents[0].5.is_some(), "a torrent with seeders is active");
    assert_eq!(
        torrents[1],
        (2, 0, 0, 0, -30, Some("2024-01-02 03:04:05".to_owned()))
    );

    // xbt_snatched: every completion is a row, duplicates included; a
    // protected user's IP is ''.
    ocelot
        .query_drop(flush_snatches(&format!(
            "(1,1,{NOW},'192.0.2.1'),(1,1,{NOW},'192.0.2.1'),(2,1,{},'')",
            NOW + 1
        )))
        .unwrap();
    let snatches: Vec<(u32, u32, u32, i64, String, i64)> = site.rows(
        "SELECT xbt_snatched_id, uid, fid, tstamp, IP, seedtime FROM xbt_snatched \
         ORDER BY xbt_snatched_id",
    );
    assert_eq!(
        snatches,
        [
            (1, 1, 1, NOW, "192.0.2.1".to_owned(), 0),
            (2, 1, 1, NOW, "192.0.2.1".to_owned(), 0),
            (3, 2, 1, NOW + 1, String::new(), 0)
        ]
    );

    // xbt_files_users, heavy form: three new peers. peer_ids are 20 raw
    // bytes; one has a quote and a backslash (escaped as mysql++ does),
    // one bytes that are not UTF-8 (a hex literal here).
    let mut alice = PeerRecord {
        uid: 1,
        fid: 1,
        active: 1,
        uploaded: 1000,
        downloaded: 500,
        upspeed: 10,
        downspeed: 5,
        left: 300,
        corrupt: 0,
        timespent: 60,
        announces: 2,
        ip: "192.0.2.1",
        peer_id: quote("-qB4250-ab'cd\\efghij"),
        useragent: "qBittorrent/4.2.5",
    };
    let bob = PeerRecord {
        uid: 2,
        fid: 1,
        active: 1,
        uploaded: 0,
        downloaded: 0,
        upspeed: 0,
        downspeed: 0,
        left: 0,
        corrupt: 0,
        timespent: 0,
        announces: 1,
        ip: "",
        peer_id: quote("-TR3000-000000000002"),
        useragent: "Transmission/3.00",
    };
    let carol = PeerRecord {
        uid: 3,
        fid: 2,
        peer_id: format!(
            "X'{}'",
            hex(b"-DE13-\x00\xff\x80\x7f\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a")
        ),
        ip: "198.51.100.7",
        useragent: "Deluge 1.3.15",
        ..bob
    };
    let heavy = [alice.heavy(), bob.heavy(), carol.heavy()].join(",");
    ocelot.query_drop(flush_heavy_peers(&heavy)).unwrap();
    type PeerRow = (
        u32,
        u32,
        Vec<u8>,
        i64,
        i64,
        i64,
        i64,
        i64,
        String,
        String,
        i64,
    );
    let peers = |site: &Site| -> Vec<PeerRow> {
        site.rows(
            "SELECT uid, fid, peer_id, active, uploaded, upspeed, remaining, timespent, ip, \
             useragent, mtime FROM xbt_files_users ORDER BY uid",
        )
    };
    let rows = peers(&site);
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[0].2, b"-qB4250-ab'cd\\efghij");
    assert_eq!(
        rows[0],
        (
            1,
            1,
            b"-qB4250-ab'cd\\efghij".to_vec(),
            1,
            1000,
            10,
            300,
            60,
            "192.0.2.1".to_owned(),
            "qBittorrent/4.2.5".to_owned(),
            NOW
        )
    );
    assert_eq!(
        (rows[1].8.as_str(), rows[1].9.as_str()),
        ("", "Transmission/3.00")
    );
    assert_eq!(
        rows[2].2,
        b"-DE13-\x00\xff\x80\x7f\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a"
    );
    // The columns Ocelot never writes keep their defaults.
    let never: Vec<(i64, i64)> = site.rows("SELECT completed, connectable FROM xbt_files_users");
    assert!(never.iter().all(|&row| row == (0, 1)), "{never:?}");

    // The same peer again (heavy): every counter replaced, but ip,
    // useragent and peer_id stay as first written.
    alice.ip = "203.0.113.9";
    alice.useragent = "qBittorrent/4.3.0";
    alice.active = 0;
    alice.uploaded = 2000;
    alice.left = 0;
    alice.timespent = 120;
    ocelot
        .query_drop(flush_heavy_peers(&alice.heavy()))
        .unwrap();
    let rows = peers(&site);
    assert_eq!(rows.len(), 3);
    assert_eq!(
        (rows[0].3, rows[0].4, rows[0].6, rows[0].7),
        (0, 2000, 0, 120)
    );
    assert_eq!(
        (rows[0].8.as_str(), rows[0].9.as_str()),
        ("192.0.2.1", "qBittorrent/4.2.5")
    );

    // Light form: an unchanged peer's speeds zeroed and its times moved;
    // a peer the table lacks (its heavy statement dropped from Ocelot's
    // capped queue) is inserted with the defaults: active, no IP, no agent.
    alice.timespent = 180;
    alice.announces = 5;
    let dave = PeerRecord {
        uid: 3,
        fid: 1,
        timespent: 30,
        announces: 3,
        peer_id: quote("-lt0D60-000000000004"),
        ..bob
    };
    ocelot
        .query_drop(flush_light_peers(&[alice.light(), dave.light()].join(",")))
        .unwrap();
    type LightRow = (u32, u32, i64, i64, i64, i64, i64, String, String);
    let light: Vec<LightRow> = site.rows(
        "SELECT uid, fid, active, upspeed, timespent, announced, uploaded, ip, useragent \
         FROM xbt_files_users WHERE fid = 1 ORDER BY uid",
    );
    assert_eq!(light.len(), 3);
    assert_eq!(
        light[0],
        (
            1,
            1,
            0,
            0,
            180,
            5,
            2000,
            "192.0.2.1".to_owned(),
            "qBittorrent/4.2.5".to_owned()
        )
    );
    assert_eq!(
        light[2],
        (3, 1, 1, 0, 30, 3, 0, String::new(), String::new())
    );

    // users_freeleeches: Ocelot's statement names no Time, which is NOT
    // NULL with no default. Under Gazelle's sql_mode MariaDB refuses it
    // even when every row exists already (the check is the statement's,
    // before any duplicate is found): Ocelot's token accounting never
    // lands on such a site, and its statement is retried forever.
    admin
        .query_drop(
            "INSERT INTO users_freeleeches (UserID, TorrentID, Time) VALUES \
             (1, 1, '2025-01-01 00:00:00')",
        )
        .unwrap();
    assert_eq!(
        refused(&mut ocelot, &flush_tokens("(1,1,100)")),
        ER_NO_DEFAULT_FOR_FIELD
    );
    // Without the strict mode the same statement adds to the row...
    ocelot.query_drop("SET SESSION sql_mode = ''").unwrap();
    ocelot.query_drop(flush_tokens("(1,1,100)")).unwrap();
    ocelot
        .query_drop(format!("SET SESSION sql_mode = '{GAZELLE_SQL_MODE}'"))
        .unwrap();
    // ...and what a replacement can send under it, with the same grants,
    // is an UPDATE of the row.
    ocelot
        .query_drop(
            "UPDATE users_freeleeches SET Downloaded = Downloaded + 50 \
             WHERE UserID = 1 AND TorrentID = 1",
        )
        .unwrap();
    let tokens: Vec<(u32, u32, String, i64)> = site
        .rows("SELECT UserID, TorrentID, CAST(Time AS CHAR), Downloaded FROM users_freeleeches");
    assert_eq!(tokens, [(1, 1, "2025-01-01 00:00:00".to_owned(), 150)]);
}

/// User 1's leecher number `n` on torrent 1, just started.
fn leecher<'a>(n: u32, ip: &'a str, useragent: &'a str) -> PeerRecord<'a> {
    PeerRecord {
        uid: 1,
        fid: 1,
        active: 1,
        uploaded: 0,
        downloaded: 0,
        upspeed: 0,
        downspeed: 0,
        left: 100,
        corrupt: 0,
        timespent: 0,
        announces: 1,
        ip,
        peer_id: quote(&format!("-qB4250-{n:012}")),
        useragent,
    }
}

/// What the schema refuses: the strict sql_mode's lengths and missing
/// defaults, and the foreign keys without cascade. Each fails the whole
/// multi-row statement (no row of it is written), which in Ocelot blocks
/// that table's queue; only xbt_snatched's INSERT IGNORE writes the row
/// anyway, with the value cut.
#[test]
fn the_pitfalls_a_replacement_must_avoid_fail_the_whole_statement() {
    let site = Site::new();
    site.group();
    site.user(1);
    site.torrent(1, "0", Some((0, "NULL")));
    let mut ocelot = site.ocelot();
    let ua51 = "A".repeat(51);
    let ua52 = "A".repeat(52);
    let (ua51, ua52) = (ua51.as_str(), ua52.as_str());

    // xbt_files_users.useragent is varchar(51): 51 characters fit, 52 fail
    // the statement, and the good row beside the long one is not written.
    ocelot
        .query_drop(flush_heavy_peers(&leecher(1, "192.0.2.1", ua51).heavy()))
        .unwrap();
    let batch = [
        leecher(2, "192.0.2.1", "ok").heavy(),
        leecher(3, "192.0.2.1", ua52).heavy(),
    ]
    .join(",");
    assert_eq!(
        refused(&mut ocelot, &flush_heavy_peers(&batch)),
        ER_DATA_TOO_LONG
    );
    assert_eq!(site.count("xbt_files_users"), 1);

    // xbt_files_users.ip is varchar(15): an IPv6 address longer than 15
    // characters fails the statement. (A short one, 2001:db8::1, fits: the
    // column's length is no IPv6 filter.)
    let batch = [
        leecher(4, "192.0.2.1", "ok").heavy(),
        leecher(5, "2001:db8:85a3::8a2e:370:7334", "ok").heavy(),
    ]
    .join(",");
    assert_eq!(
        refused(&mut ocelot, &flush_heavy_peers(&batch)),
        ER_DATA_TOO_LONG
    );
    assert_eq!(site.count("xbt_files_users"), 1);
    ocelot
        .query_drop(flush_heavy_peers(&leecher(6, "2001:db8::1", "ok").heavy()))
        .unwrap();
    assert_eq!(site.count("xbt_files_users"), 2);

    // xbt_snatched.IP is varchar(15) too, but Ocelot's INSERT IGNORE turns
    // the refusal into a warning: the row is written with the address cut.
    ocelot
        .query_drop(flush_snatches(&format!(
            "(1,1,{NOW},'2001:db8:85a3::8a2e:370:7334')"
        )))
        .unwrap();
    let cut: Vec<String> = site.rows("SELECT IP FROM xbt_snatched");
    assert_eq!(cut, ["2001:db8:85a3::"]);

    // users_freeleeches.Time has no default: a token row a tracker inserts
    // (as Ocelot's flush would for a token Gazelle has not written yet)
    // fails, and takes the existing row's credit with it.
    site.admin()
        .query_drop("INSERT INTO users_freeleeches (UserID, TorrentID, Time) VALUES (1, 1, NOW())")
        .unwrap();
    site.torrent(2, "0", Some((0, "NULL")));
    assert_eq!(
        refused(&mut ocelot, &flush_tokens("(1,1,10),(1,2,20)")),
        ER_NO_DEFAULT_FOR_FIELD
    );
    assert_eq!(
        site.rows::<(u32, i64)>("SELECT TorrentID, Downloaded FROM users_freeleeches"),
        [(1, 0)]
    );

    // torrents_leech_stats.TorrentID references torrents(ID) without
    // cascade: a row for a torrent not in torrents (deleted on the site)
    // fails the statement, and the live torrent's row beside it is not
    // written.
    assert_eq!(
        refused(&mut ocelot, &flush_torrents("(1,5,5,1,0),(99,1,0,0,0)")),
        ER_NO_REFERENCED_ROW_2
    );
    assert_eq!(
        site.rows::<(u32, i32, i32)>(
            "SELECT TorrentID, Seeders, Snatched FROM torrents_leech_stats ORDER BY TorrentID"
        ),
        [(1, 3, 0), (2, 3, 0)]
    );

    // users_leech_stats.UserID references users_main(ID): the same for a
    // user not in users_main.
    assert_eq!(
        refused(&mut ocelot, &flush_users("(1,10,10),(99,10,10)")),
        ER_NO_REFERENCED_ROW_2
    );
    assert_eq!(site.count("users_leech_stats"), 0);
}

/// The (privilege, table) pairs ocelot-grants.sql grants.
fn documented_grants() -> Vec<(String, String)> {
    let text: Vec<String> = repo_file("deploy/gazelle/ocelot-grants.sql")
        .lines()
        .filter(|line| !line.trim_start().starts_with("--"))
        .map(str::to_owned)
        .collect();
    let mut pairs = Vec::new();
    for statement in text.join(" ").split(';') {
        let Some(rest) = statement.trim().strip_prefix("GRANT ") else {
            continue;
        };
        let (privileges, rest) = rest.split_once(" ON ").unwrap();
        let table = rest
            .split_whitespace()
            .next()
            .unwrap()
            .rsplit('.')
            .next()
            .unwrap()
            .trim_matches('`');
        for privilege in privileges.split(',') {
            pairs.push((privilege.trim().to_owned(), table.to_owned()));
        }
    }
    pairs
}

/// Every statement Ocelot sends, once each, on a site seeded for them;
/// the first error ends it. The token flush runs without the strict mode,
/// the only way it passes (see the flushes' test).
fn every_statement(conn: &mut Conn) -> Result<(), mysql::Error> {
    conn.query_drop(TRUNCATE_PEERS)?;
    conn.query_drop(ZERO_COUNTS)?;
    for load in [LOAD_USERS, LOAD_TORRENTS, LOAD_TOKENS, LOAD_WHITELIST] {
        conn.query_drop(load)?;
    }
    conn.query_drop(flush_users("(1,10,20)"))?;
    conn.query_drop(flush_torrents("(1,1,0,1,10)"))?;
    conn.query_drop(DELETE_RELIC)?;
    conn.query_drop(flush_snatches(&format!("(1,1,{NOW},'192.0.2.1')")))?;
    let peer = leecher(1, "192.0.2.1", "qBittorrent/4.2.5");
    conn.query_drop(flush_heavy_peers(&peer.heavy()))?;
    conn.query_drop(flush_light_peers(&peer.light()))?;
    conn.query_drop("SET SESSION sql_mode = ''")?;
    conn.query_drop(flush_tokens("(1,1,100)"))?;
    conn.query_drop(format!("SET SESSION sql_mode = '{GAZELLE_SQL_MODE}'"))
}

/// ocelot-grants.sql is exactly enough: with it every statement of Ocelot
/// runs, and without any one of its privileges one of them is refused.
#[test]
fn every_documented_grant_is_needed_by_one_of_ocelots_statements() {
    let site = Site::new();
    site.group();
    site.user(1);
    site.torrent(1, "1", Some((0, "NULL")));
    site.admin()
        .query_drop("INSERT INTO users_freeleeches (UserID, TorrentID, Time) VALUES (1, 1, NOW())")
        .unwrap();
    every_statement(&mut site.ocelot()).unwrap();

    let grants = documented_grants();
    assert_eq!(grants.len(), 18, "{grants:?}");
    for (n, (privilege, table)) in grants.iter().enumerate() {
        let revoke = format!("REVOKE {privilege} ON `{{db}}`.`{table}`");
        let login = Login::new(
            &site.db,
            &format!("r{n}"),
            OCELOT_GRANTS,
            OCELOT,
            Some(&revoke),
        );
        match every_statement(&mut gazelle_conn(&login.url)) {
            // Refused for a table (1142) or a column (1143).
            Err(mysql::Error::MySqlError(e)) if e.code == 1142 || e.code == 1143 => {}
            other => panic!("without {privilege} on {table}: {other:?}"),
        }
    }
}
