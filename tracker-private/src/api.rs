//! The site API of UNIT3D-Announce (`/announce/{apikey}/...`), parsed
//! without I/O: UNIT3D drives its external tracker through these calls,
//! so answering them the same way lets a site switch trackers by
//! configuration alone.
//!
//! Differences: every malformed request is a 400 with a message naming
//! the field (UNIT3D-Announce's axum answers 415 or 422 for some);
//! `config/reload` is refused (501), since this tracker's configuration
//! is its own file, read at start. Error messages never carry a passkey,
//! nor any string value the request held.

pub use crate::api_error::{status_of, ApiError};
use crate::change::SiteChange;
use crate::site::{Group, GroupId, Passkey, Torrent, TorrentId, TorrentStatus, User, UserId};
use serde::Deserialize;
use tracker_proto::InfoHash;

/// The longest slug or blacklisted prefix accepted (`varchar(255)`).
pub const MAX_TEXT: usize = 255;

/// A parsed site API request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApiRequest {
    /// A PUT or DELETE: apply it with [`crate::Site::apply`].
    Change(SiteChange),
    /// GET `users/{id}`.
    GetUser(UserId),
    /// GET `torrents/{id}`.
    GetTorrent(TorrentId),
    /// GET `stats`.
    GetStats,
}

/// serde's message with every double-quoted string blanked: a body's
/// string values may be passkeys.
fn redact(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut quoted = false;
    let mut escaped = false;
    for c in message.chars() {
        if quoted {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                quoted = false;
                out.push_str("…\"");
            }
        } else {
            out.push(c);
            quoted = c == '"';
        }
    }
    out
}

fn json<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::Json(redact(&e.to_string())))
}

fn passkey(field: &'static str, text: &str) -> Result<Passkey, ApiError> {
    Passkey::parse(text.as_bytes()).ok_or(ApiError::Invalid {
        field,
        why: "not 32 ASCII letters and digits",
    })
}

/// A path's id: decimal digits only, within u32.
fn path_id(segment: &[u8]) -> Result<u32, ApiError> {
    let invalid = ApiError::Invalid {
        field: "id",
        why: "not a decimal number within u32",
    };
    if segment.is_empty() || !segment.iter().all(u8::is_ascii_digit) {
        return Err(invalid);
    }
    std::str::from_utf8(segment)
        .ok()
        .and_then(|text| text.parse().ok())
        .ok_or(invalid)
}

#[derive(Deserialize)]
struct PutTorrent {
    id: TorrentId,
    status: i16,
    info_hash: String,
    is_deleted: bool,
    #[allow(dead_code)]
    seeders: u32,
    #[allow(dead_code)]
    leechers: u32,
    #[allow(dead_code)]
    times_completed: u32,
    download_factor: u8,
    upload_factor: u8,
}

#[derive(Deserialize)]
struct TorrentIdBody {
    id: TorrentId,
}

/// `num_seeding` and `num_leeching` are required, as in UNIT3D-Announce,
/// but not kept: each worker counts its own torrents' peers.
#[derive(Deserialize)]
struct PutUser {
    id: UserId,
    group_id: GroupId,
    passkey: String,
    new_passkey: Option<String>,
    can_download: bool,
    #[allow(dead_code)]
    num_seeding: u32,
    #[allow(dead_code)]
    num_leeching: u32,
    is_donor: bool,
    is_lifetime: bool,
}

#[derive(Deserialize)]
struct DeleteUser {
    id: UserId,
    passkey: String,
}

#[derive(Deserialize)]
struct PutGroup {
    id: GroupId,
    slug: String,
    download_slots: Option<u32>,
    is_immune: bool,
    is_freeleech: bool,
    is_double_upload: bool,
}

#[derive(Deserialize)]
struct GroupIdBody {
    id: GroupId,
}

/// A prefix as serde_bytes reads it: a JSON string (its UTF-8 bytes) or an
/// array of bytes.
#[derive(Deserialize)]
#[serde(untagged)]
enum Bytes {
    Text(String),
    Array(Vec<u8>),
}

#[derive(Deserialize)]
struct Blacklisted {
    peer_id_prefix: Bytes,
}

#[derive(Deserialize)]
struct Token {
    user_id: UserId,
    torrent_id: TorrentId,
}

#[derive(Deserialize)]
struct UserIdBody {
    user_id: UserId,
}

#[derive(Deserialize)]
struct TorrentIdField {
    torrent_id: TorrentId,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Method {
    Get,
    Put,
    Delete,
    Post,
}

fn torrent_change(put: bool, body: &[u8]) -> Result<SiteChange, ApiError> {
    if !put {
        return Ok(SiteChange::DeleteTorrent(json::<TorrentIdBody>(body)?.id));
    }
    let t: PutTorrent = json(body)?;
    let info_hash = InfoHash::from_hex(t.info_hash.as_bytes()).ok_or(ApiError::Invalid {
        field: "info_hash",
        why: "not 40 hex digits",
    })?;
    Ok(SiteChange::PutTorrent(Torrent {
        id: t.id,
        info_hash,
        status: TorrentStatus::from_db(t.status),
        is_deleted: t.is_deleted,
        download_factor: t.download_factor,
        upload_factor: t.upload_factor,
        times_completed: t.times_completed,
    }))
}

fn user_change(put: bool, body: &[u8]) -> Result<SiteChange, ApiError> {
    if !put {
        let u: DeleteUser = json(body)?;
        return Ok(SiteChange::DeleteUser {
            id: u.id,
            passkey: passkey("passkey", &u.passkey)?,
        });
    }
    let u: PutUser = json(body)?;
    let current = passkey("passkey", &u.passkey)?;
    let new = u
        .new_passkey
        .as_deref()
        .map(|key| passkey("new_passkey", key))
        .transpose()?;
    Ok(SiteChange::PutUser {
        user: User {
            id: u.id,
            group_id: u.group_id,
            passkey: new.unwrap_or(current),
            can_download: u.can_download,
            is_donor: u.is_donor,
            is_lifetime: u.is_lifetime,
        },
        replaced: new.map(|_| current),
    })
}

fn group_change(put: bool, body: &[u8]) -> Result<SiteChange, ApiError> {
    if !put {
        return Ok(SiteChange::DeleteGroup(json::<GroupIdBody>(body)?.id));
    }
    let g: PutGroup = json(body)?;
    if g.slug.is_empty() || g.slug.len() > MAX_TEXT {
        return Err(ApiError::Invalid {
            field: "slug",
            why: "empty or longer than 255 bytes",
        });
    }
    Ok(SiteChange::PutGroup(Group {
        id: g.id,
        slug: g.slug,
        download_slots: g.download_slots,
        is_immune: g.is_immune,
        is_freeleech: g.is_freeleech,
        is_double_upload: g.is_double_upload,
    }))
}

fn blacklist_change(put: bool, body: &[u8]) -> Result<SiteChange, ApiError> {
    let prefix = match json::<Blacklisted>(body)?.peer_id_prefix {
        Bytes::Text(text) => text.into_bytes(),
        Bytes::Array(bytes) => bytes,
    };
    if prefix.len() > MAX_TEXT {
        return Err(ApiError::Invalid {
            field: "peer_id_prefix",
            why: "longer than 255 bytes",
        });
    }
    Ok(if put {
        SiteChange::PutBlacklist(prefix)
    } else {
        SiteChange::DeleteBlacklist(prefix)
    })
}

/// Parses one request to the site API. `method` is the HTTP method,
/// `path_after_key` what follows `/announce/{apikey}` (`/users/5`; the
/// leading slash may be left out, the query string must be), `body` the
/// request body, bounded by the caller.
pub fn parse_api_request(
    method: &[u8],
    path_after_key: &[u8],
    body: &[u8],
) -> Result<ApiRequest, ApiError> {
    let path = path_after_key.strip_prefix(b"/").unwrap_or(path_after_key);
    let mut segments = path.split(|&b| b == b'/');
    let first = segments.next().unwrap_or_default();
    let second = segments.next();
    if segments.next().is_some() {
        return Err(ApiError::NoRoute);
    }
    let method = match method {
        b"GET" => Method::Get,
        b"PUT" => Method::Put,
        b"DELETE" => Method::Delete,
        b"POST" => Method::Post,
        _ => return Err(ApiError::MethodNotAllowed),
    };
    let change: fn(bool, &[u8]) -> Result<SiteChange, ApiError> = match (first, second) {
        (b"torrents", Some(id)) | (b"users", Some(id)) => {
            if method != Method::Get {
                return Err(ApiError::MethodNotAllowed);
            }
            let id = path_id(id)?;
            return Ok(if first == b"users" {
                ApiRequest::GetUser(id)
            } else {
                ApiRequest::GetTorrent(id)
            });
        }
        (b"stats", None) => {
            return match method {
                Method::Get => Ok(ApiRequest::GetStats),
                _ => Err(ApiError::MethodNotAllowed),
            }
        }
        (b"config", Some(b"reload")) => {
            return match method {
                Method::Post => Err(ApiError::Unsupported(
                    "Config reload is not supported: this tracker reads its configuration file at start.",
                )),
                _ => Err(ApiError::MethodNotAllowed),
            }
        }
        (b"torrents", None) => torrent_change,
        (b"users", None) => user_change,
        (b"groups", None) => group_change,
        (b"blacklisted-agents", None) => blacklist_change,
        (b"freeleech-tokens", None) => |put, body| {
            let Token {
                user_id,
                torrent_id,
            } = json(body)?;
            Ok(if put {
                SiteChange::PutToken {
                    user_id,
                    torrent_id,
                }
            } else {
                SiteChange::DeleteToken {
                    user_id,
                    torrent_id,
                }
            })
        },
        (b"personal-freeleech", None) => |put, body| {
            let user = json::<UserIdBody>(body)?.user_id;
            Ok(if put {
                SiteChange::PutPersonalFreeleech(user)
            } else {
                SiteChange::DeletePersonalFreeleech(user)
            })
        },
        (b"featured-torrents", None) => |put, body| {
            let torrent = json::<TorrentIdField>(body)?.torrent_id;
            Ok(if put {
                SiteChange::PutFeatured(torrent)
            } else {
                SiteChange::DeleteFeatured(torrent)
            })
        },
        _ => return Err(ApiError::NoRoute),
    };
    match method {
        Method::Put => change(true, body).map(ApiRequest::Change),
        Method::Delete => change(false, body).map(ApiRequest::Change),
        Method::Get | Method::Post => Err(ApiError::MethodNotAllowed),
    }
}

#[cfg(test)]
#[path = "api_tests.rs"]
mod tests;
