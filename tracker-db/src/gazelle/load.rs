//! Reading a Gazelle site's records at start, as Ocelot 2.1.3 reads them
//! (src/db.cpp:89-247): the enabled users of `users_main`; the torrents
//! that have a `torrents_leech_stats` row (an inner join: Ocelot serves no
//! other), in id order; the unexpired `users_freeleeches` tokens on those
//! torrents; the `xbt_client_whitelist` prefixes. One read-only
//! transaction with a consistent snapshot, rows streamed off the
//! connection into the records as they arrive, as the UNIT3D loader
//! ([`mod@crate::load`]) does.
//!
//! What Ocelot would load but no announce could reach is left out and
//! counted in [`LoadReport`], never a reason to fail the load.

use crate::error::DbError;
use crate::load::{column, each_row, flag, snapshot};
use mysql::Conn;
use tracker_private::gazelle::site::MAX_WHITELIST;
use tracker_private::gazelle::{GazelleRecords, GazelleTorrent, GazelleUser, LeechType};
use tracker_private::Passkey;
use tracker_proto::InfoHash;

/// What [`load_with_report`] left out, by rule. The passkeys are secrets:
/// only their number is ever told.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// Enabled users whose `torrent_pass` is not 32 ASCII letters and
    /// digits (Gazelle makes them so): no announce can name them.
    pub bad_passkeys: usize,
    /// Enabled users whose passkey an enabled user of a lower id has too
    /// (`torrent_pass` has no unique key): the lowest id keeps it, as
    /// Ocelot keeps the first it reads.
    pub shared_passkeys: usize,
    /// Torrents whose `info_hash` is not 20 bytes. Gazelle's `binary(20)`
    /// (since 2024) holds nothing else; the `blob` it had before could.
    pub bad_info_hashes: usize,
    /// Unexpired tokens on a torrent that is not served (no
    /// `torrents_leech_stats` row, or a bad info-hash): Ocelot drops them
    /// too.
    pub unserved_tokens: usize,
    /// Whitelist rows whose `peer_id` is NULL, empty, or longer than a
    /// peer id's 20 bytes (`varchar(20)` counts characters, not bytes).
    pub bad_whitelist: usize,
    /// Whitelist prefixes past the [`MAX_WHITELIST`] the site's view
    /// keeps.
    pub whitelist_over_limit: usize,
}

impl LoadReport {
    /// Whether nothing was left out.
    pub fn is_empty(&self) -> bool {
        *self == LoadReport::default()
    }
}

/// `users_main`: Ocelot's query (db.cpp:158), in id order.
const USERS: &str = "SELECT ID, torrent_pass, can_leech, (Visible = '0' OR IP = '127.0.0.1') \
                     FROM users_main WHERE Enabled = '1' ORDER BY ID";

/// Ocelot's query (db.cpp:90), with a negative `Snatched` read as 0.
const TORRENTS: &str = "SELECT t.ID, t.info_hash, t.FreeTorrent, GREATEST(tls.Snatched, 0) \
                        FROM torrents t INNER JOIN torrents_leech_stats tls \
                        ON tls.TorrentID = t.ID ORDER BY t.ID";

/// Ocelot's query (db.cpp:202), by torrent id rather than info-hash: the
/// join is on the id, and `info_hash` is unique.
const TOKENS: &str = "SELECT uf.UserID, uf.TorrentID FROM users_freeleeches uf \
                      INNER JOIN torrents t ON t.ID = uf.TorrentID \
                      WHERE uf.Expired = '0' ORDER BY uf.UserID, uf.TorrentID";

/// Ocelot's query (db.cpp:227), in the table's order.
const WHITELIST: &str = "SELECT peer_id FROM xbt_client_whitelist ORDER BY id";

/// The longest whitelist prefix that can start a peer id.
const PEER_ID_LEN: usize = 20;

/// Reads the site's records (see [`load_with_report`]), and logs what it
/// left out.
pub fn load(conn: &mut Conn) -> Result<GazelleRecords, DbError> {
    let (records, report) = load_with_report(conn)?;
    let LoadReport {
        bad_passkeys,
        shared_passkeys,
        bad_info_hashes,
        unserved_tokens,
        bad_whitelist,
        whitelist_over_limit,
    } = report;
    if bad_passkeys > 0 {
        tracing::warn!(
            users = bad_passkeys,
            "users left out: their passkey is not 32 ASCII letters and digits"
        );
    }
    if shared_passkeys > 0 {
        tracing::warn!(
            users = shared_passkeys,
            "users left out: an enabled user of a lower id has the same passkey"
        );
    }
    if bad_info_hashes > 0 {
        tracing::warn!(
            torrents = bad_info_hashes,
            "torrents left out: their info_hash is not 20 bytes"
        );
    }
    if unserved_tokens > 0 {
        tracing::info!(
            tokens = unserved_tokens,
            "freeleech tokens left out: their torrent is not served \
             (no torrents_leech_stats row)"
        );
    }
    if bad_whitelist > 0 {
        tracing::warn!(
            prefixes = bad_whitelist,
            "client whitelist rows left out: their peer_id is NULL, empty or \
             longer than 20 bytes"
        );
    }
    if whitelist_over_limit > 0 {
        tracing::warn!(
            prefixes = whitelist_over_limit,
            limit = MAX_WHITELIST,
            "client whitelist rows left out: past the most the tracker keeps"
        );
    }
    Ok(records)
}

/// Reads the site's records in one read-only transaction with a
/// consistent snapshot, and tells what it left out. Users come in id
/// order, torrents in id order, tokens in (user, torrent) order, the
/// whitelist in the table's id order.
pub fn load_with_report(conn: &mut Conn) -> Result<(GazelleRecords, LoadReport), DbError> {
    let mut tx = snapshot(conn)?;
    let mut records = GazelleRecords::default();
    let mut report = LoadReport::default();

    each_row(&mut tx, USERS, "users_main", |row| {
        let passkey: Vec<u8> = column(row, 1, "users_main.torrent_pass")?;
        match Passkey::parse(&passkey) {
            Some(passkey) => records.users.push(GazelleUser {
                id: column(row, 0, "users_main.ID")?,
                passkey,
                can_leech: flag(row, 2, "users_main.can_leech")?,
                protected: flag(row, 3, "users_main.Visible and IP")?,
            }),
            None => report.bad_passkeys += 1,
        }
        Ok(())
    })?;
    report.shared_passkeys = keep_first_of_each_passkey(&mut records.users);

    each_row(&mut tx, TORRENTS, "torrents", |row| {
        let hash: Vec<u8> = column(row, 1, "torrents.info_hash")?;
        let Ok(hash) = <[u8; 20]>::try_from(hash.as_slice()) else {
            report.bad_info_hashes += 1;
            return Ok(());
        };
        let leech: Vec<u8> = column(row, 2, "torrents.FreeTorrent")?;
        records.torrents.push(GazelleTorrent {
            id: column(row, 0, "torrents.ID")?,
            info_hash: InfoHash(hash),
            leech: LeechType::from_column(&leech),
            snatched: column(row, 3, "torrents_leech_stats.Snatched")?,
        });
        Ok(())
    })?;

    // The torrents are in id order (and ids are unique): a token's torrent
    // is found by bisection, with nothing more held.
    let torrents = &records.torrents;
    let tokens = &mut records.tokens;
    each_row(&mut tx, TOKENS, "users_freeleeches", |row| {
        let user = column(row, 0, "users_freeleeches.UserID")?;
        let torrent = column(row, 1, "users_freeleeches.TorrentID")?;
        if torrents.binary_search_by_key(&torrent, |t| t.id).is_ok() {
            tokens.push((user, torrent));
        } else {
            report.unserved_tokens += 1;
        }
        Ok(())
    })?;

    each_row(&mut tx, WHITELIST, "xbt_client_whitelist", |row| {
        let prefix: Option<Vec<u8>> = column(row, 0, "xbt_client_whitelist.peer_id")?;
        match prefix {
            Some(prefix) if !prefix.is_empty() && prefix.len() <= PEER_ID_LEN => {
                if records.whitelist.len() < MAX_WHITELIST {
                    records.whitelist.push(prefix);
                } else {
                    report.whitelist_over_limit += 1;
                }
            }
            _ => report.bad_whitelist += 1,
        }
        Ok(())
    })?;

    tx.commit()
        .map_err(|e| DbError::from_mysql("ending the load's transaction", e))?;
    Ok((records, report))
}

/// Leaves one user per passkey, the lowest id, keeping `users` in id
/// order (as read); returns how many it removed.
fn keep_first_of_each_passkey(users: &mut Vec<GazelleUser>) -> usize {
    let before = users.len();
    users.sort_unstable_by(|a, b| a.passkey.0.cmp(&b.passkey.0).then(a.id.cmp(&b.id)));
    users.dedup_by(|later, first| later.passkey == first.passkey);
    users.sort_unstable_by_key(|user| user.id);
    before - users.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(id: u32, key: u8) -> GazelleUser {
        GazelleUser {
            id,
            passkey: Passkey([key; 32]),
            can_leech: true,
            protected: false,
        }
    }

    #[test]
    fn a_shared_passkey_stays_with_the_lowest_id_and_the_order_is_kept() {
        let mut users = vec![
            user(1, b'b'),
            user(2, b'a'),
            user(3, b'b'),
            user(4, b'c'),
            user(5, b'a'),
            user(6, b'b'),
        ];
        assert_eq!(keep_first_of_each_passkey(&mut users), 3);
        assert_eq!(users, [user(1, b'b'), user(2, b'a'), user(4, b'c')]);
        let mut none: Vec<GazelleUser> = Vec::new();
        assert_eq!(keep_first_of_each_passkey(&mut none), 0);
    }
}
