//! The access API of a public tracker: torrents added to its access list
//! or taken off it over HTTP, on every worker at once, and written to the
//! list's file so that restarts and SIGHUP reloads keep them.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use glommio::sync::Semaphore;
use tracing::warn;
use tracker_http::site_api::{ApiAnswer, SiteApi};
use tracker_proto::InfoHash;
use tracker_runtime::access::AccessList;
use tracker_runtime::reloadable::Reloadable;

pub struct AccessApi {
    list: Arc<Reloadable<AccessList>>,
    file: PathBuf,
    /// One change at a time, its file written before the next begins.
    one_at_a_time: Semaphore,
}

impl AccessApi {
    pub fn new(list: Arc<Reloadable<AccessList>>, file: PathBuf) -> AccessApi {
        AccessApi {
            list,
            file,
            one_at_a_time: Semaphore::new(1),
        }
    }

    async fn answer(&self, method: &[u8], path: &[u8], body: &[u8]) -> ApiAnswer {
        let answer = |status: u16, body: &str| ApiAnswer {
            status,
            body: body.into(),
        };
        if path != b"/access-list" {
            return answer(404, "");
        }
        let listed = match method {
            b"PUT" => true,
            b"DELETE" => false,
            _ => return answer(405, ""),
        };
        let Some(info_hash) = parse_body(body) else {
            return answer(
                400,
                r#"{"error":"the body must be {\"info_hash\": \"40 hex digits\"}"}"#,
            );
        };
        let Ok(_turn) = self.one_at_a_time.acquire_permit(1).await else {
            return answer(503, "");
        };
        // The copy, the sorted file and its write take a while for a long
        // list: off worker 0, which also serves announces.
        let (current, file) = (self.list.load().0, self.file.clone());
        let changed = glommio::executor()
            .spawn_blocking(move || {
                let Some(changed) = current.with(info_hash, listed) else {
                    return Ok(None);
                };
                tracker_runtime::state_file::write_atomic(&file, &[&changed.to_file()])
                    .map(|()| Some(changed))
            })
            .await;
        match changed {
            Ok(None) => answer(200, ""),
            Ok(Some(changed)) => {
                self.list.store(Arc::new(changed));
                answer(200, "")
            }
            Err(e) => {
                warn!(
                    "access API: cannot write {}: {e}; the list is unchanged",
                    self.file.display()
                );
                answer(500, "")
            }
        }
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
