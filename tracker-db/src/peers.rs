//! The peers that were active when the tracker last stopped: their rows in
//! `peers`, read at each start, however old, so that the ledgers count them
//! for their users' limits and expire those silent past the active TTL
//! (see `tracker_private::Ledger::restore`).

use crate::error::DbError;
use crate::load::{column, flag};
use mysql::prelude::Queryable;
use mysql::Conn;
use std::net::IpAddr;
use tracker_private::{Agent, PeerKey, PeerRow};
use tracker_proto::PeerId;

pub(crate) const ACTIVE_PEERS: &str =
    "SELECT user_id, torrent_id, peer_id, ip, port, agent, uploaded, \
     downloaded, `left`, seeder, visible, connectable, UNIX_TIMESTAMP(created_at), \
     UNIX_TIMESTAMP(updated_at) FROM peers WHERE active";

/// Every active peer, handed to `f` as it comes off the connection; rows
/// that cannot be a peer (an address or peer id of the wrong length) are
/// skipped and counted. A row without `updated_at` reads as of 1970: the
/// first expiry takes it.
pub fn load_active_peers(
    conn: &mut Conn,
    mut f: impl FnMut(PeerKey, PeerRow),
) -> Result<usize, DbError> {
    let doing = "loading the active peers";
    let rows = conn
        .exec_iter(ACTIVE_PEERS, ())
        .map_err(|e| DbError::from_mysql(doing, e))?;
    let mut skipped = 0;
    for row in rows {
        let mut row = row.map_err(|e| DbError::from_mysql(doing, e))?;
        let r = &mut row;
        let user_id: u32 = column(r, 0, "peers.user_id")?;
        let torrent_id: u32 = column(r, 1, "peers.torrent_id")?;
        let peer_id: Vec<u8> = column(r, 2, "peers.peer_id")?;
        let ip: Vec<u8> = column(r, 3, "peers.ip")?;
        let port: u16 = column(r, 4, "peers.port")?;
        let agent: Option<Vec<u8>> = column(r, 5, "peers.agent")?;
        let uploaded: u64 = column(r, 6, "peers.uploaded")?;
        let downloaded: u64 = column(r, 7, "peers.downloaded")?;
        let left: u64 = column(r, 8, "peers.left")?;
        let seeder = flag(r, 9, "peers.seeder")?;
        let visible = flag(r, 10, "peers.visible")?;
        let connectable = flag(r, 11, "peers.connectable")?;
        let created_at: Option<u64> = column(r, 12, "peers.created_at")?;
        let updated_at: Option<u64> = column(r, 13, "peers.updated_at")?;
        let (Ok(peer_id), Some(ip)) = (<[u8; 20]>::try_from(peer_id.as_slice()), ip_of(&ip)) else {
            skipped += 1;
            continue;
        };
        let updated_at = updated_at.unwrap_or(0);
        let key = PeerKey {
            user_id,
            torrent_id,
            peer_id: PeerId(peer_id),
        };
        f(
            key,
            PeerRow {
                ip,
                port,
                agent: Agent::new(agent.as_deref().unwrap_or_default()),
                uploaded,
                downloaded,
                left,
                active: true,
                seeder,
                visible,
                connectable,
                created_at: created_at.unwrap_or(updated_at),
                updated_at,
            },
        );
    }
    Ok(skipped)
}

/// `peers.ip`: 4 or 16 raw bytes.
fn ip_of(bytes: &[u8]) -> Option<IpAddr> {
    match bytes.len() {
        4 => <[u8; 4]>::try_from(bytes).ok().map(IpAddr::from),
        16 => <[u8; 16]>::try_from(bytes).ok().map(IpAddr::from),
        _ => None,
    }
}
