//! The access API of a public tracker: torrents added to its access list
//! or taken off it over HTTP, on every worker at once, and written to the
//! list's file so that restarts and SIGHUP reloads keep them.
//!
//! The file is the list: each change is made to it as it is on disk (one
//! line added or taken off, comments, owner and mode kept; see
//! `ListSource::edit`) and the list it then holds is served. A change that
//! would make a list a start refuses (an allow list emptied without
//! access.allow_empty, one past access.max_file_bytes), or a link at
//! access.file, is refused with 409 and why; a file that cannot be read or
//! written (or given its old owner) with 500 and why. Either way the file
//! and the list served are as they were.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use glommio::sync::Semaphore;
use tracing::{info, warn};
use tracker_http::site_api::{ApiAnswer, SiteApi};
use tracker_proto::{Hex, InfoHash};
use tracker_runtime::access::{AccessList, EditError, Edited, ListSource};
use tracker_runtime::reloadable::Reloadable;

pub struct AccessApi {
    list: Arc<Reloadable<AccessList>>,
    source: ListSource,
    /// One change at a time, its file written before the next begins.
    one_at_a_time: Semaphore,
}

impl AccessApi {
    pub fn new(list: Arc<Reloadable<AccessList>>, source: ListSource) -> AccessApi {
        if std::fs::symlink_metadata(&source.path).is_ok_and(|meta| meta.is_symlink()) {
            warn!(
                "access API: access.file {} is a symbolic link: changes through the API will be \
                 refused (it neither writes through a link nor replaces one); set access.file \
                 to the file itself",
                source.path.display()
            );
        }
        AccessApi {
            list,
            source,
            one_at_a_time: Semaphore::new(1),
        }
    }

    async fn answer(&self, method: &[u8], path: &[u8], body: &[u8]) -> ApiAnswer {
        let answer = |status: u16, body: String| ApiAnswer { status, body };
        if path != b"/access-list" {
            return answer(404, String::new());
        }
        let listed = match method {
            b"PUT" => true,
            b"DELETE" => false,
            _ => return answer(405, String::new()),
        };
        let Some(info_hash) = parse_body(body) else {
            return answer(
                400,
                r#"{"error":"the body must be {\"info_hash\": \"40 hex digits\"}"}"#.into(),
            );
        };
        let Ok(_turn) = self.one_at_a_time.acquire_permit(1).await else {
            return answer(503, String::new());
        };
        // Reading, parsing and writing a long list takes a while: off
        // worker 0, which also serves announces.
        let source = self.source.clone();
        let edited = glommio::executor()
            .spawn_blocking(move || source.edit(info_hash, listed))
            .await;
        let (status, why) = match edited {
            Ok(Edited { list, written }) => {
                let count = list.len();
                // The file is the list, changed or not (it may have been
                // edited by hand and not reloaded): it is what is served.
                self.list.store(Arc::new(list));
                if written {
                    let change = if listed { "listed" } else { "taken off" };
                    info!(
                        "access API: {} {change}; {} lists {count} info-hashes",
                        Hex(&info_hash.0),
                        self.source.path.display()
                    );
                }
                return answer(200, String::new());
            }
            Err(EditError::Refused(why)) => (409, why),
            Err(EditError::Failed(why)) => (500, why),
        };
        warn!("access API: {why}; the list is unchanged");
        answer(status, serde_json::json!({ "error": why }).to_string())
    }
}

/// `{"info_hash": "40 hex digits"}`.
fn parse_body(body: &[u8]) -> Option<InfoHash> {
    #[derive(serde::Deserialize)]
    struct Body {
        info_hash: String,
    }
    let body: Body = serde_json::from_slice(body).ok()?;
    InfoHash::from_hex(body.info_hash.as_bytes())
}

impl SiteApi for AccessApi {
    fn handle<'a>(
        &'a self,
        method: &'a [u8],
        path: &'a [u8],
        body: &'a [u8],
    ) -> Pin<Box<dyn Future<Output = ApiAnswer> + 'a>> {
        Box::pin(self.answer(method, path, body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_name_one_info_hash() {
        let hex = "0123456789abcdef0123456789ABCDEF01234567";
        let hash = parse_body(format!(r#"{{"info_hash":"{hex}"}}"#).as_bytes()).unwrap();
        assert_eq!(hash.0[0], 0x01);
        assert_eq!(hash.0[19], 0x67);
        for bad in [
            &br#"{"info_hash":"0123"}"#[..],
            br#"{"info_hash":"zz23456789abcdef0123456789abcdef01234567"}"#,
            br#"{"hash":"0123456789abcdef0123456789abcdef01234567"}"#,
            b"not json",
        ] {
            assert_eq!(parse_body(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }
}
