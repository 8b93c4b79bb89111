//! tracker-db on UNIT3D's real schema, as a site has it: when
//! UNIT3D_CE_SRC names a UNIT3D-Community-Edition checkout, its
//! database/schema/mysql-schema.sql is loaded, then the later migrations
//! (deploy/unit3d/later-migrations.sql), and the start and a flush run as
//! a user with exactly deploy/unit3d/grants.sql. Without the variable the
//! test says it was skipped: UNIT3D's source is not part of this
//! repository.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use std::path::{Path, PathBuf};
use support::*;
use tracker_db::{
    check_privileges, create_tracker_table, flush, last_sequence, load_active_peers,
    load_with_report, DbConfig, FlushOutcome, UnregisteredTable,
};
use tracker_private::CreditRules;

const RULES: CreditRules = CreditRules {
    max_seedtime_step: 7200,
    inactive_peer_ttl: 1_814_400,
    max_upload_rate: 0,
};

/// The checkout UNIT3D_CE_SRC names, or None (told) when it is unset.
fn unit3d_source() -> Option<PathBuf> {
    match std::env::var_os("UNIT3D_CE_SRC") {
        Some(dir) if !dir.is_empty() => Some(PathBuf::from(dir)),
        _ => {
            println!(
                "skipped: UNIT3D_CE_SRC is not set. It names a checkout of \
                 UNIT3D-Community-Edition (github.com/HDInnovations/UNIT3D-Community-Edition), \
                 whose database/ holds the real schema; this repository does not carry it"
            );
            None
        }
    }
}

/// The last migration the dump records as run.
fn dump_last_migration(dump: &str) -> String {
    dump.lines()
        .filter(|line| line.starts_with("INSERT INTO `migrations`"))
        .filter_map(|line| line.split('\'').nth(1))
        .max()
        .expect("the dump records its migrations")
        .to_owned()
}

/// later-migrations.sql's sections: (migration, its SQL).
fn later_migrations() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/unit3d/later-migrations.sql"
    ))
    .unwrap();
    let mut sections: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        if let Some(name) = line.strip_prefix("-- migration: ") {
            sections.push((name.trim().to_owned(), String::new()));
        } else if let Some((_, sql)) = sections.last_mut() {
            if !line.starts_with("--") {
                sql.push_str(line);
                sql.push('\n');
            }
        }
    }
    sections
}

/// The checkout's migrations after `last`, by name.
fn migrations_after(source: &Path, last: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(source.join("database/migrations"))
        .unwrap()
        .filter_map(|entry| {
            let name = entry.unwrap().file_name().into_string().ok()?;
            Some(name.strip_suffix(".php")?.to_owned())
        })
        .filter(|name| name.as_str() > last)
        .collect();
    names.sort();
    names
}

/// A database with the checkout's schema, brought up to its last
/// migration for the tracker's tables, and tracker_flushes.
fn real_schema(source: &Path) -> TestDb {
    let dump = std::fs::read_to_string(source.join("database/schema/mysql-schema.sql"))
        .expect("database/schema/mysql-schema.sql in UNIT3D_CE_SRC");
    let last = dump_last_migration(&dump);
    let sections = later_migrations();
    let listed: Vec<&str> = sections.iter().map(|(name, _)| name.as_str()).collect();
    for migration in migrations_after(source, &last) {
        assert!(
            listed.contains(&migration.as_str()),
            "UNIT3D's migration {migration} comes after the dump and is not in \
             deploy/unit3d/later-migrations.sql: read it and add its section"
        );
    }
    let db = TestDb::empty();
    db.exec(&dump);
    for (migration, sql) in &sections {
        if migration.as_str() > last.as_str() && !sql.trim().is_empty() {
            db.exec(sql);
        }
    }
    db.exec(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../deploy/unit3d/tracker.sql"
        ))
        .unwrap(),
    );
    db
}

/// The start (load, the tracker's table, the grants check, the last
/// sequence, the active peers) and flushes of every kind of row, as a user
/// with exactly grants.sql, on UNIT3D's real schema.
#[test]
fn the_start_and_the_flushes_run_on_unit3ds_real_schema_with_the_documented_grants() {
    let Some(source) = unit3d_source() else {
        return;
    };
    let db = real_schema(&source);
    // What makes the real schema differ from a small one: the site's other
    // tables reference users and torrents, and the grants cover none.
    let cascading: u32 = db.one(&format!(
        "SELECT COUNT(*) FROM information_schema.referential_constraints \
         WHERE constraint_schema = '{}' AND referenced_table_name IN ('users', 'torrents') \
         AND update_rule = 'CASCADE'",
        db.name
    ));
    assert!(cascading > 50, "{cascading}");

    db.seed(2, 2);
    db.exec(&format!(
        "UPDATE torrents SET free = 100, doubleup = 1 WHERE id = 2; \
         INSERT INTO featured_torrents (user_id, torrent_id) VALUES (1, 2); \
         INSERT INTO freeleech_tokens (user_id, torrent_id) VALUES (2, 1); \
         INSERT INTO personal_freeleeches (user_id) VALUES (2); \
         INSERT INTO blacklist_clients (name, peer_id_prefix) VALUES ('Bad', '-BD'); \
         INSERT INTO apikeys (user_id, content) VALUES (1, 'key'); \
         INSERT INTO files (name, size, torrent_id) VALUES ('f', 1, 1); \
         INSERT INTO peers (peer_id, ip, port, agent, uploaded, downloaded, `left`, seeder, \
           created_at, updated_at, torrent_id, user_id, active, visible) VALUES \
           (UNHEX('{}'), 0xc0000202, 6881, 'a', 0, 0, 0, 1, NOW(), NOW(), 2, 2, 1, 1); \
         UPDATE torrents SET seeders = 1 WHERE id = 2",
        hex(&peer_id(2).0)
    ));
    // Adds group 1, and makes the batch from the site as loaded now.
    let batch = every_kind_of_row(&db);

    let user = GrantedUser::new(&db);
    let mut conn = DbConfig::new(&user.url).connect().unwrap();
    let (mut site, report) = load_with_report(&mut conn).unwrap();
    assert_eq!(report.bad_passkeys, 0);
    site.users.sort_by_key(|u| u.id);
    site.torrents.sort_by_key(|t| t.id);
    assert_eq!(site.users.iter().map(|u| u.id).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(
        (site.torrents.iter())
            .map(|t| (t.id, t.download_factor, t.upload_factor))
            .collect::<Vec<_>>(),
        [(1, 100, 100), (2, 0, 200)]
    );
    assert_eq!(site.groups.len(), 1);
    assert_eq!(site.featured, [2]);
    assert_eq!(site.tokens, [(2, 1)]);
    assert_eq!(site.personal_freeleech, [2]);
    assert_eq!(site.blacklist, [b"-BD".to_vec()]);
    create_tracker_table(&mut conn).unwrap();
    assert_eq!(
        check_privileges(&mut conn, true).unwrap(),
        Some(UnregisteredTable::Writable)
    );
    assert_eq!(check_privileges(&mut conn, false).unwrap(), None);
    assert_eq!(last_sequence(&mut conn, "real").unwrap(), 0);
    let mut active = Vec::new();
    let skipped = load_active_peers(&mut conn, |key, row| active.push((key, row))).unwrap();
    assert_eq!(skipped, 0);
    assert_eq!(active.len(), 1);
    assert_eq!((active[0].0.user_id, active[0].0.torrent_id), (2, 2));
    assert_eq!(
        active[0].1.ip,
        "192.0.2.2".parse::<std::net::IpAddr>().unwrap()
    );

    let outcome = flush(&mut conn, "real", 1, &batch, &RULES, 1000).unwrap();
    assert!(
        matches!(outcome, FlushOutcome::Applied { skipped: 0, .. }),
        "{outcome:?}"
    );
    let written: (u64, u64, u32, u64, u64, Option<String>) = db.one(
        "SELECT (SELECT uploaded FROM users WHERE id = 1), \
           (SELECT actual_uploaded FROM history WHERE user_id = 1), \
           (SELECT times_completed FROM torrents WHERE id = 1), \
           (SELECT COUNT(*) FROM peers WHERE NOT active), \
           (SELECT COUNT(*) FROM unregistered_info_hashes), \
           (SELECT deleted_at FROM history WHERE user_id = 1)",
    );
    assert_eq!(written, (700, 700, 1, 1, 1, None));
    // The balance is what UNIT3D's own auto:torrent_balance computes from
    // history, though the column starts NULL in the dump.
    let balance: (Option<i64>, i64) = db.one(
        "SELECT (SELECT balance FROM torrents WHERE id = 1), \
           (SELECT CAST(SUM(actual_uploaded) AS SIGNED) - CAST(SUM(actual_downloaded) AS SIGNED) \
            FROM history WHERE torrent_id = 1)",
    );
    assert_eq!(balance, (Some(600), 600));

    // One row a statement, and several, to both parents.
    let more = credit(&[1, 2], &[1, 2], 10, T0 + 400);
    for (sequence, max_rows) in [(2, 1), (3, 1000)] {
        let outcome = flush(&mut conn, "real", sequence, &more, &RULES, max_rows).unwrap();
        assert!(
            matches!(outcome, FlushOutcome::Applied { skipped: 0, .. }),
            "{outcome:?}"
        );
    }
    assert_eq!(
        flush(&mut conn, "real", 3, &more, &RULES, 1000).unwrap(),
        FlushOutcome::AlreadyApplied
    );
    let users: Vec<(u32, u64, u64)> =
        db.rows("SELECT id, uploaded, downloaded FROM users ORDER BY id");
    assert_eq!(users, [(1, 720, 110), (2, 20, 10)]);
    let torrents: Vec<(u32, Option<i64>, u32, i32)> =
        db.rows("SELECT id, balance, times_completed, seeders FROM torrents ORDER BY id");
    assert_eq!(torrents, [(1, Some(620), 3, 2), (2, Some(20), 2, 3)]);
    assert_eq!(last_sequence(&mut conn, "real").unwrap(), 3);
}
