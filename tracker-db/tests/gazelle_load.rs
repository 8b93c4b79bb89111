//! The Gazelle loader (tracker_db::gazelle::load) on a real MariaDB server
//! (tests/mariadb.sh runs one; TRACKER_TEST_MYSQL_URL names it), on a fresh
//! database of Gazelle's schema (deploy/gazelle/schema.sql and
//! whitelist-seed.sql, loaded under Gazelle's sql_mode), read as a user
//! with exactly deploy/gazelle/grants.sql: every rule of Ocelot 2.1.3's
//! loads (src/db.cpp:89-247) and what the loader leaves out and counts,
//! the records checked whole; every granted column needed; the `blob`
//! info_hash Gazelle had before 2024; the whitelist's bound.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use mysql::prelude::Queryable;
use mysql::Conn;
use support::gazelle::{gazelle_conn, gazelle_db, hex, repo_file, Login};
use support::TestDb;
use tracker_db::gazelle::{load, load_with_report, LoadReport};
use tracker_db::DbErrorKind;
use tracker_private::gazelle::site::MAX_WHITELIST;
use tracker_private::gazelle::{GazelleRecords, GazelleTorrent, GazelleUser, LeechType};
use tracker_private::Passkey;
use tracker_proto::InfoHash;

/// This tracker's grants for a Gazelle site, and the login they name.
const GRANTS: &str = "deploy/gazelle/grants.sql";
const TRACKER: &str = "'tracker'@'localhost'";

/// A Gazelle database (schema.sql and whitelist-seed.sql, loaded under
/// Gazelle's sql_mode, with torrent group 1) and a login with exactly
/// grants.sql on it; both dropped at the end.
struct Site {
    db: TestDb,
    tracker: Login,
}

/// A users_main row's columns that the load reads.
struct UserRow<'a> {
    id: u32,
    passkey: &'a str,
    enabled: &'a str,
    visible: &'a str,
    ip: &'a str,
    can_leech: u8,
}

/// User `id`: enabled, visible, seen from 192.0.2.`id`, may leech.
fn plain(id: u32, passkey: &str) -> UserRow<'_> {
    UserRow {
        id,
        passkey,
        enabled: "1",
        visible: "1",
        ip: "",
        can_leech: 1,
    }
}

impl Site {
    fn new() -> Site {
        let db = gazelle_db();
        let mut admin = gazelle_conn(&db.url);
        admin
            .query_drop(
                "INSERT INTO torrents_group (ID, CategoryID, Name, WikiBody, WikiImage) \
                 VALUES (1, 1, 'Group', '', '')",
            )
            .unwrap();
        let tracker = Login::new(&db, "t", GRANTS, TRACKER, None);
        Site { db, tracker }
    }

    /// The site's own login (all privileges), under Gazelle's sql_mode.
    fn admin(&self) -> Conn {
        gazelle_conn(&self.db.url)
    }

    /// A login with exactly grants.sql, under Gazelle's sql_mode.
    fn tracker(&self) -> Conn {
        gazelle_conn(&self.tracker.url)
    }

    fn exec(&self, sql: &str) {
        self.admin().query_drop(sql).unwrap();
    }

    fn user(&self, user: UserRow<'_>) {
        let UserRow {
            id,
            passkey,
            enabled,
            visible,
            ip,
            can_leech,
        } = user;
        let ip = if ip.is_empty() {
            format!("192.0.2.{id}")
        } else {
            ip.to_owned()
        };
        self.exec(&format!(
            "INSERT INTO users_main (ID, Username, Email, PassHash, IP, Enabled, Visible, \
             can_leech, PermissionID, torrent_pass, auth_key, stylesheet_id) VALUES \
             ({id}, 'user{id}', 'user{id}@example.test', 'x', '{ip}', '{enabled}', \
             '{visible}', {can_leech}, 2, '{passkey}', 'auth{id}', 1)"
        ));
    }

    /// Torrent `id` of user 1 (who must exist) with `info_hash`, and its
    /// torrents_leech_stats row with `snatched` unless None.
    fn torrent_with_hash(&self, id: u32, info_hash: &[u8], free: &str, snatched: Option<i32>) {
        self.exec(&format!(
            "INSERT INTO torrents (ID, GroupID, UserID, info_hash, FileCount, FileList, \
             Size, FreeTorrent) VALUES ({id}, 1, 1, X'{}', 1, 'f', 1000, '{free}')",
            hex(info_hash)
        ));
        if let Some(snatched) = snatched {
            self.exec(&format!(
                "INSERT INTO torrents_leech_stats (TorrentID, Seeders, Leechers, Snatched, \
                 Balance) VALUES ({id}, 3, 4, {snatched}, 999)"
            ));
        }
    }

    fn torrent(&self, id: u32, free: &str, snatched: Option<i32>) {
        self.torrent_with_hash(id, &info_hash(id), free, snatched);
    }

    fn token(&self, user: u32, torrent: u32, expired: u8) {
        self.exec(&format!(
            "INSERT INTO users_freeleeches (UserID, TorrentID, Time, Expired) VALUES \
             ({user}, {torrent}, '2025-01-01 00:00:00', {expired})"
        ));
    }
}

/// User `id`'s passkey: 32 ASCII letters and digits, as Gazelle's
/// randomString(32) makes them (both cases).
fn passkey(id: u32) -> String {
    format!("Pk{id:030}")
}

fn key(id: u32) -> Passkey {
    Passkey::parse(passkey(id).as_bytes()).unwrap()
}

fn info_hash(id: u32) -> [u8; 20] {
    let mut hash = [0xc3; 20];
    hash[..4].copy_from_slice(&id.to_be_bytes());
    hash
}

fn gazelle_user(id: u32, passkey: Passkey, can_leech: bool, protected: bool) -> GazelleUser {
    GazelleUser {
        id,
        passkey,
        can_leech,
        protected,
    }
}

fn gazelle_torrent(id: u32, leech: LeechType, snatched: u32) -> GazelleTorrent {
    GazelleTorrent {
        id,
        info_hash: InfoHash(info_hash(id)),
        leech,
        snatched,
    }
}

/// The peer_id prefixes whitelist-seed.sql inserts, in its order, read
/// from the file (`('-DE12', 'Deluge 1.2.x'),` lines).
fn seeded_whitelist() -> Vec<Vec<u8>> {
    let seed = repo_file("deploy/gazelle/whitelist-seed.sql");
    let prefixes: Vec<Vec<u8>> = seed
        .lines()
        .filter_map(|line| line.trim().strip_prefix("('"))
        .map(|rest| rest.split_once("', '").unwrap().0.as_bytes().to_vec())
        .collect();
    assert_eq!(prefixes.len(), 32);
    prefixes
}

/// Every rule of Ocelot's four loads, and what the loader leaves out, on
/// one site read as the user with exactly grants.sql.
#[test]
fn the_load_reads_what_ocelot_reads_and_counts_what_it_leaves_out() {
    let site = Site::new();
    let pk: Vec<String> = (0..=12).map(passkey).collect();
    // 1 plain; 2 invisible and 3 last seen from 127.0.0.1: both protected;
    // 4 may not leech; 8 is Visible 'no', which Ocelot does not read as
    // protected (only '0').
    site.user(plain(1, &pk[1]));
    site.user(UserRow {
        visible: "0",
        ..plain(2, &pk[2])
    });
    site.user(UserRow {
        ip: "127.0.0.1",
        ..plain(3, &pk[3])
    });
    site.user(UserRow {
        can_leech: 0,
        ..plain(4, &pk[4])
    });
    // Not enabled: '0' (unconfirmed), '2' (disabled), and 'enabled', which
    // the enum allows but Ocelot does not read as enabled. 6 has user 1's
    // passkey: a disabled user shares nothing.
    site.user(UserRow {
        enabled: "0",
        ..plain(5, &pk[5])
    });
    site.user(UserRow {
        enabled: "2",
        ..plain(6, &pk[1])
    });
    site.user(UserRow {
        enabled: "enabled",
        ..plain(7, &pk[7])
    });
    site.user(UserRow {
        visible: "no",
        ..plain(8, &pk[8])
    });
    // Bad passkeys: one with a character no passkey has, one short (a
    // char(32) keeps what it is given).
    let dashed = format!("Pk-{:029}", 9);
    assert_eq!(dashed.len(), 32);
    site.user(plain(9, &dashed));
    site.user(plain(10, &pk[10][..31]));
    // 12 has 11's passkey (torrent_pass has no unique key): 11 keeps it.
    site.user(plain(11, &pk[11]));
    site.user(UserRow {
        visible: "0",
        ..plain(12, &pk[11])
    });

    // Each leech type; 4 has no torrents_leech_stats row: not served; 5 was
    // given 19 bytes, which binary(20) pads with a zero (under the strict
    // sql_mode too): a 20-byte info-hash; 6's Snatched is negative, read as
    // 0.
    site.torrent(1, "0", Some(5));
    site.torrent(2, "1", Some(0));
    site.torrent(3, "2", Some(7));
    site.torrent(4, "1", None);
    let short = &info_hash(5)[..19];
    site.torrent_with_hash(5, short, "0", Some(1));
    site.torrent(6, "0", Some(-3));

    // Tokens: 2's on 1 expired; 3's on 4, whose torrent is not served; 2's
    // on 99, a torrent that is not there (the join drops it).
    site.token(1, 1, 0);
    site.token(1, 2, 0);
    site.token(2, 1, 1);
    site.token(4, 3, 0);
    site.token(3, 4, 0);
    site.token(2, 99, 0);

    // Whitelist: the seed, then two NULLs and an empty prefix (the unique
    // key allows one), 11 characters that are 21 bytes (varchar(20) counts
    // characters), and a prefix of exactly 20 bytes.
    site.exec(
        "INSERT INTO xbt_client_whitelist (peer_id, vstring) VALUES \
         (NULL, 'null'), (NULL, 'null again'), ('', 'empty'), \
         ('-ÉÉÉÉÉÉÉÉÉÉ', 'too long'), ('-XX2000-000000000000', 'whole peer id')",
    );

    let (records, report) = load_with_report(&mut site.tracker()).unwrap();

    let mut padded = [0; 20];
    padded[..19].copy_from_slice(short);
    let mut whitelist = seeded_whitelist();
    whitelist.push(b"-XX2000-000000000000".to_vec());
    let expected = GazelleRecords {
        users: vec![
            gazelle_user(1, key(1), true, false),
            gazelle_user(2, key(2), true, true),
            gazelle_user(3, key(3), true, true),
            gazelle_user(4, key(4), false, false),
            gazelle_user(8, key(8), true, false),
            gazelle_user(11, key(11), true, false),
        ],
        torrents: vec![
            gazelle_torrent(1, LeechType::Normal, 5),
            gazelle_torrent(2, LeechType::Free, 0),
            gazelle_torrent(3, LeechType::Neutral, 7),
            GazelleTorrent {
                info_hash: InfoHash(padded),
                ..gazelle_torrent(5, LeechType::Normal, 1)
            },
            gazelle_torrent(6, LeechType::Normal, 0),
        ],
        tokens: vec![(1, 1), (1, 2), (4, 3)],
        whitelist,
    };
    assert_eq!(records.users, expected.users);
    assert_eq!(records.torrents, expected.torrents);
    assert_eq!(records.tokens, expected.tokens);
    assert_eq!(records.whitelist, expected.whitelist);
    assert_eq!(records, expected);
    assert_eq!(
        report,
        LoadReport {
            bad_passkeys: 2,
            shared_passkeys: 1,
            bad_info_hashes: 0,
            unserved_tokens: 1,
            bad_whitelist: 4,
            whitelist_over_limit: 0,
        }
    );
    assert!(!report.is_empty());

    // load() gives the same records (and logs the report).
    assert_eq!(load(&mut site.tracker()).unwrap(), expected);
}

/// A site with nothing but the seeded whitelist loads empty but for it;
/// a site without one of the tables is a schema error, never an empty
/// load.
#[test]
fn an_empty_site_loads_empty_and_a_missing_table_fails_the_load() {
    let site = Site::new();
    let (records, report) = load_with_report(&mut site.tracker()).unwrap();
    assert_eq!(
        records,
        GazelleRecords {
            whitelist: seeded_whitelist(),
            ..GazelleRecords::default()
        }
    );
    assert!(report.is_empty());

    site.exec("DELETE FROM xbt_client_whitelist");
    let (records, report) = load_with_report(&mut site.tracker()).unwrap();
    assert_eq!(records, GazelleRecords::default());
    assert!(report.is_empty());

    for table in [
        "xbt_client_whitelist",
        "users_freeleeches",
        "torrents_leech_stats",
    ] {
        site.exec(&format!("DROP TABLE {table}"));
        let err = load_with_report(&mut site.admin()).unwrap_err();
        assert_eq!(err.kind(), DbErrorKind::Schema, "without {table}: {err}");
        assert!(!err.is_retryable());
    }
}

/// Before 20240424000000_torrent_binary_infohash, Gazelle's info_hash was
/// a blob (with a unique key on its first 40 bytes), which holds any
/// length: such rows are left out and counted, and tokens on them too.
/// (Today's binary(20) pads or refuses: it has no other length.)
#[test]
fn a_blob_info_hash_not_20_bytes_long_is_left_out_and_counted() {
    let site = Site::new();
    site.exec(
        "ALTER TABLE torrents DROP KEY InfoHash, MODIFY info_hash blob NOT NULL, \
         ADD UNIQUE KEY InfoHash (info_hash(40))",
    );
    site.user(plain(1, &passkey(1)));
    site.torrent(1, "1", Some(2));
    site.torrent_with_hash(2, &info_hash(2)[..19], "0", Some(0));
    site.torrent_with_hash(3, &[info_hash(3).as_slice(), b"x"].concat(), "0", Some(0));
    site.torrent_with_hash(4, b"", "0", Some(0));
    site.token(1, 1, 0);
    site.token(1, 2, 0);
    let lengths: Vec<(u32, u64)> = site
        .admin()
        .query("SELECT ID, LENGTH(info_hash) FROM torrents ORDER BY ID")
        .unwrap();
    assert_eq!(lengths, [(1, 20), (2, 19), (3, 21), (4, 0)]);

    let (records, report) = load_with_report(&mut site.tracker()).unwrap();
    assert_eq!(records.torrents, [gazelle_torrent(1, LeechType::Free, 2)]);
    assert_eq!(records.tokens, [(1, 1)]);
    assert_eq!(
        report,
        LoadReport {
            bad_info_hashes: 3,
            unserved_tokens: 1,
            ..LoadReport::default()
        }
    );
}

/// The whitelist is read whole, but kept only up to what the site's view
/// keeps (MAX_WHITELIST); the rest is counted.
#[test]
fn the_whitelist_past_its_bound_is_counted_not_kept() {
    let site = Site::new();
    let over = 3;
    let added = MAX_WHITELIST - 32 + over;
    let values: Vec<String> = (0..added).map(|n| format!("('-ZZ{n:05}')")).collect();
    site.exec(&format!(
        "INSERT INTO xbt_client_whitelist (peer_id) VALUES {}",
        values.join(",")
    ));
    let (records, report) = load_with_report(&mut site.tracker()).unwrap();
    assert_eq!(records.whitelist.len(), MAX_WHITELIST);
    assert_eq!(&records.whitelist[..32], seeded_whitelist().as_slice());
    assert_eq!(
        records.whitelist.last().unwrap(),
        format!("-ZZ{:05}", added - over - 1).as_bytes()
    );
    assert_eq!(
        report,
        LoadReport {
            whitelist_over_limit: over,
            ..LoadReport::default()
        }
    );
}

/// The (table, column) pairs grants.sql grants SELECT on; it grants
/// nothing else.
fn granted_columns() -> Vec<(String, String)> {
    let text: Vec<String> = repo_file("deploy/gazelle/grants.sql")
        .lines()
        .filter(|line| !line.trim_start().starts_with("--"))
        .map(str::to_owned)
        .collect();
    let mut pairs = Vec::new();
    for statement in text.join(" ").split(';') {
        let statement = statement.trim();
        if statement.is_empty() {
            continue;
        }
        let rest = statement
            .strip_prefix("GRANT SELECT (")
            .unwrap_or_else(|| panic!("not a column SELECT grant: {statement}"));
        let (columns, rest) = rest.split_once(')').unwrap();
        let on = rest.trim_start().strip_prefix("ON ").unwrap();
        let table = on
            .split_whitespace()
            .next()
            .unwrap()
            .rsplit('.')
            .next()
            .unwrap()
            .trim_matches('`');
        for column in columns.split(',') {
            pairs.push((table.to_owned(), column.trim().trim_matches('`').to_owned()));
        }
    }
    pairs
}

/// grants.sql is exactly enough: the load runs with it (the first test),
/// and without SELECT on any one of its columns it is refused; and the
/// tracker cannot read what it does not need (a password hash).
#[test]
fn every_granted_column_is_needed_by_the_load() {
    let site = Site::new();
    let grants = granted_columns();
    assert_eq!(grants.len(), 16, "{grants:?}");
    assert!(load_with_report(&mut site.tracker()).is_ok());
    for (n, (table, column)) in grants.iter().enumerate() {
        let revoke = format!("REVOKE SELECT (`{column}`) ON `{{db}}`.`{table}`");
        let login = Login::new(&site.db, &format!("r{n}"), GRANTS, TRACKER, Some(&revoke));
        match load_with_report(&mut gazelle_conn(&login.url)) {
            Err(e) if e.kind() == DbErrorKind::AccessDenied => {}
            other => panic!("without SELECT on {table}.{column}: {other:?}"),
        }
    }
    let refused = site
        .tracker()
        .query_drop("SELECT PassHash FROM users_main")
        .unwrap_err();
    match refused {
        // Refused for a column (1143).
        mysql::Error::MySqlError(e) => assert_eq!(e.code, 1143, "{e}"),
        other => panic!("not a server's refusal: {other}"),
    }
}
