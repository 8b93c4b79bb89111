//! Reading the site's records at start: the same rows UNIT3D-Announce
//! reads (users not soft-deleted, groups, one torrent per info-hash, the
//! freeleech sets, the client blacklist), all from one consistent snapshot.
//! Rows are streamed off the connection into the records as they arrive
//! (a site has about a million torrents: they are never held twice).

use crate::error::{DbError, DbErrorKind};
use mysql::prelude::{FromValue, Queryable};
use mysql::{AccessMode, Conn, IsolationLevel, Row, Transaction, TxOpts};
use tracker_private::{Group, Passkey, SiteRecords, Torrent, TorrentStatus, User};
use tracker_proto::InfoHash;

/// What [`load_with_report`] left out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// Users whose passkey is not 32 ASCII letters and digits: no
    /// announce can name them, so they are left out. The passkeys are
    /// secrets: only their number is ever told.
    pub bad_passkeys: usize,
}

const USERS: &str = "SELECT id, group_id, passkey, can_download, is_donor, is_lifetime \
                     FROM users WHERE deleted_at IS NULL";

const GROUPS: &str = "SELECT id, slug, download_slots, is_immune, is_freeleech, \
                      is_double_upload FROM `groups`";

/// One torrent per info-hash, chosen as UNIT3D-Announce chooses: the
/// lowest id among the approved, not deleted ones; else among the not
/// deleted ones; else among all. The factors: download is
/// `100 - LEAST(free, 100)` (with a negative `free` read as 0, which
/// UNIT3D-Announce would fail to load), upload is 200 with `doubleup`.
const TORRENTS: &str = "SELECT t.id, t.info_hash, t.status, \
       100 - LEAST(GREATEST(t.free, 0), 100), IF(t.doubleup, 200, 100), \
       t.deleted_at IS NOT NULL, GREATEST(t.times_completed, 0) \
     FROM torrents t JOIN ( \
       SELECT COALESCE( \
         MIN(CASE WHEN deleted_at IS NULL AND status = 1 THEN id END), \
         MIN(CASE WHEN deleted_at IS NULL THEN id END), \
         MIN(id)) AS id \
       FROM torrents GROUP BY info_hash) chosen ON chosen.id = t.id";

const FEATURED: &str = "SELECT torrent_id FROM featured_torrents";
const TOKENS: &str = "SELECT user_id, torrent_id FROM freeleech_tokens";
const PERSONAL: &str = "SELECT user_id FROM personal_freeleeches";
const BLACKLIST: &str = "SELECT peer_id_prefix FROM blacklist_clients";

/// Whether the connection's database has a table of this name.
pub fn has_table(conn: &mut Conn, table: &str) -> Result<bool, DbError> {
    let found: Option<u8> = conn
        .exec_first(
            "SELECT 1 FROM information_schema.tables \
             WHERE table_schema = DATABASE() AND table_name = ?",
            (table,),
        )
        .map_err(|e| DbError::from_mysql(format!("looking for the table {table}"), e))?;
    Ok(found.is_some())
}

/// Reads the site's records (see [`load_with_report`]); users with a bad
/// passkey are left out and their number logged.
pub fn load(conn: &mut Conn) -> Result<SiteRecords, DbError> {
    let (records, report) = load_with_report(conn)?;
    if report.bad_passkeys > 0 {
        tracing::warn!(
            users = report.bad_passkeys,
            "users left out: their passkey is not 32 ASCII letters and digits"
        );
    }
    Ok(records)
}

/// Reads the site's records in one read-only transaction with a
/// consistent snapshot, and tells what it left out.
pub fn load_with_report(conn: &mut Conn) -> Result<(SiteRecords, LoadReport), DbError> {
    let mut tx = snapshot(conn)?;
    let mut records = SiteRecords::default();
    let mut report = LoadReport::default();

    each_row(&mut tx, USERS, "users", |row| {
        let passkey: Vec<u8> = column(row, 2, "users.passkey")?;
        match Passkey::parse(&passkey) {
            Some(passkey) => records.users.push(User {
                id: column(row, 0, "users.id")?,
                group_id: column(row, 1, "users.group_id")?,
                passkey,
                can_download: flag(row, 3, "users.can_download")?,
                is_donor: flag(row, 4, "users.is_donor")?,
                is_lifetime: flag(row, 5, "users.is_lifetime")?,
            }),
            None => report.bad_passkeys += 1,
        }
        Ok(())
    })?;

    each_row(&mut tx, GROUPS, "groups", |row| {
        let slots: Option<i64> = column(row, 2, "groups.download_slots")?;
        records.groups.push(Group {
            id: column(row, 0, "groups.id")?,
            slug: column(row, 1, "groups.slug")?,
            // A negative number of slots allows nothing.
            download_slots: slots.map(|n| u32::try_from(n.max(0)).unwrap_or(u32::MAX)),
            is_immune: flag(row, 3, "groups.is_immune")?,
            is_freeleech: flag(row, 4, "groups.is_freeleech")?,
            is_double_upload: flag(row, 5, "groups.is_double_upload")?,
        });
        Ok(())
    })?;

    each_row(&mut tx, TORRENTS, "torrents", |row| {
        let hash: Vec<u8> = column(row, 1, "torrents.info_hash")?;
        let info_hash = <[u8; 20]>::try_from(hash.as_slice()).map_err(|_| {
            DbError::new(
                DbErrorKind::Data,
                "loading torrents",
                "torrents.info_hash is not 20 bytes",
            )
        })?;
        records.torrents.push(Torrent {
            id: column(row, 0, "torrents.id")?,
            info_hash: InfoHash(info_hash),
            status: TorrentStatus::from_db(column(row, 2, "torrents.status")?),
            is_deleted: flag(row, 5, "torrents.deleted_at")?,
            download_factor: column(row, 3, "torrents.free")?,
            upload_factor: column(row, 4, "torrents.doubleup")?,
            times_completed: column(row, 6, "torrents.times_completed")?,
        });
        Ok(())
    })?;

    each_row(&mut tx, FEATURED, "featured_torrents", |row| {
        records
            .featured
            .push(column(row, 0, "featured_torrents.torrent_id")?);
        Ok(())
    })?;
    each_row(&mut tx, TOKENS, "freeleech_tokens", |row| {
        records.tokens.push((
            column(row, 0, "freeleech_tokens.user_id")?,
            column(row, 1, "freeleech_tokens.torrent_id")?,
        ));
        Ok(())
    })?;
    each_row(&mut tx, PERSONAL, "personal_freeleeches", |row| {
        records
            .personal_freeleech
            .push(column(row, 0, "personal_freeleeches.user_id")?);
        Ok(())
    })?;
    each_row(&mut tx, BLACKLIST, "blacklist_clients", |row| {
        records
            .blacklist
            .push(column(row, 0, "blacklist_clients.peer_id_prefix")?);
        Ok(())
    })?;
    tx.commit()
        .map_err(|e| DbError::from_mysql("ending the load's transaction", e))?;

    // The three sets and the blacklist may repeat rows (no unique keys).
    for set in [&mut records.featured, &mut records.personal_freeleech] {
        set.sort_unstable();
        set.dedup();
    }
    records.tokens.sort_unstable();
    records.tokens.dedup();
    records.blacklist.sort_unstable();
    records.blacklist.dedup();
    Ok((records, report))
}

/// A read-only transaction with a consistent snapshot: a load reads the
/// site's tables as of one moment.
pub(crate) fn snapshot(conn: &mut Conn) -> Result<Transaction<'_>, DbError> {
    let opts = TxOpts::default()
        .set_with_consistent_snapshot(true)
        .set_isolation_level(Some(IsolationLevel::RepeatableRead))
        .set_access_mode(Some(AccessMode::ReadOnly));
    conn.start_transaction(opts)
        .map_err(|e| DbError::from_mysql("starting the load's transaction", e))
}

/// Runs `query` and hands each row to `f` as it comes off the connection.
pub(crate) fn each_row(
    tx: &mut Transaction<'_>,
    query: &str,
    table: &str,
    mut f: impl FnMut(&mut Row) -> Result<(), DbError>,
) -> Result<(), DbError> {
    let doing = || format!("loading {table}");
    let rows = tx
        .query_iter(query)
        .map_err(|e| DbError::from_mysql(doing(), e))?;
    for row in rows {
        let mut row = row.map_err(|e| DbError::from_mysql(doing(), e))?;
        f(&mut row)?;
    }
    Ok(())
}

/// Column `index` as a `T`. The error names the column, never the value
/// (which may be a passkey).
pub(crate) fn column<T: FromValue>(row: &mut Row, index: usize, name: &str) -> Result<T, DbError> {
    match row.take_opt::<T, usize>(index) {
        Some(Ok(value)) => Ok(value),
        Some(Err(_)) => Err(DbError::new(
            DbErrorKind::Data,
            format!("loading {name}"),
            format!("a value does not fit a {}", std::any::type_name::<T>()),
        )),
        None => Err(DbError::new(
            DbErrorKind::Schema,
            format!("loading {name}"),
            "the column is missing from the result",
        )),
    }
}

/// A `tinyint(1)` (or any integer) as a flag: not zero is true.
pub(crate) fn flag(row: &mut Row, index: usize, name: &str) -> Result<bool, DbError> {
    column::<i64>(row, index, name).map(|v| v != 0)
}
