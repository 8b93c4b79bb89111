//! The site API's meaning: changes to the site's view, published to every
//! worker at once (each announce after the answer sees them), and the
//! request rates.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;

use tracker_http::site_api::{ApiAnswer, SiteApi};
use tracker_private::answer::{stats_json, torrent_json, user_json, TorrentCounts, UserCounts};
use tracker_private::lists::{ListKind, ListRates};
use tracker_private::Site;
use tracker_runtime::clock;
use tracker_runtime::reloadable::Reloadable;
use tracker_runtime::shard::{PrivateAnswer, Shard};

use super::{PrivateMode, RequestRates};

pub struct SiteApiHandler {
    site: Arc<Reloadable<Site>>,
    rates: Rc<RequestRates>,
    /// Every user's peer lists received, for `GET users/{id}`.
    lists: Arc<ListRates>,
    /// Worker 0's shard: the reads gather from the workers' ledgers.
    shard: Rc<Shard>,
}

impl SiteApiHandler {
    pub fn new(private: &PrivateMode, rates: Rc<RequestRates>, shard: Rc<Shard>) -> SiteApiHandler {
        SiteApiHandler {
            site: private.site.clone(),
            rates,
            lists: private.lists.clone(),
            shard,
        }
    }

    async fn answer(&self, method: &[u8], path: &[u8], body: &[u8]) -> ApiAnswer {
        use tracker_private::api::{parse_api_request, ApiRequest};
        let error = |e: tracker_private::api::ApiError| ApiAnswer {
            status: e.status(),
            body: String::new(),
        };
        match parse_api_request(method, path, body) {
            Err(e) => error(e),
            Ok(ApiRequest::Change(change)) => {
                // No await from the load to the store: the executor runs no
                // other change in between.
                let mut site = Site::clone(&self.site.load().0);
                match site.apply(change) {
                    Ok(()) => {
                        self.site.store(Arc::new(site));
                        ApiAnswer {
                            status: 200,
                            body: String::new(),
                        }
                    }
                    Err(e) => error(e),
                }
            }
            Ok(ApiRequest::GetStats) => ApiAnswer {
                status: 200,
                body: String::from_utf8_lossy(&stats_json(&self.rates.stats())).into_owned(),
            },
            Ok(ApiRequest::GetUser(id)) => {
                let Some(user) = self.site.load().0.user(id).cloned() else {
                    return error(tracker_private::api::ApiError::UnknownUser(id));
                };
                let Ok((num_seeding, num_leeching)) = self.shard.private_user(id).await else {
                    return unavailable();
                };
                let now = clock::unix_secs();
                json(user_json(
                    &user,
                    UserCounts {
                        num_seeding,
                        num_leeching,
                        seed_lists: self.lists.windows(id, ListKind::Seeders, now),
                        leech_lists: self.lists.windows(id, ListKind::Leechers, now),
                    },
                ))
            }
            Ok(ApiRequest::GetTorrent(id)) => {
                let Some(torrent) = self.site.load().0.torrent_by_id(id).cloned() else {
                    return error(tracker_private::api::ApiError::UnknownTorrent(id));
                };
                match self.shard.private_torrent(id, &torrent.info_hash).await {
                    Ok(PrivateAnswer::Torrent {
                        seeders,
                        leechers,
                        snatches,
                        peers,
                    }) => {
                        let counts = TorrentCounts {
                            seeders,
                            leechers,
                            times_completed: torrent.times_completed.saturating_add(snatches),
                        };
                        json(torrent_json(&torrent, counts, peers))
                    }
                    Ok(PrivateAnswer::User { .. }) | Err(_) => unavailable(),
                }
            }
        }
    }
}

impl SiteApi for SiteApiHandler {
    fn handle<'a>(
        &'a self,
        method: &'a [u8],
        path: &'a [u8],
        body: &'a [u8],
    ) -> Pin<Box<dyn Future<Output = ApiAnswer> + 'a>> {
        Box::pin(self.answer(method, path, body))
    }
}

fn json(body: Vec<u8>) -> ApiAnswer {
    ApiAnswer {
        status: 200,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

/// A worker did not answer (overloaded, or stopping): the site retries.
fn unavailable() -> ApiAnswer {
    ApiAnswer {
        status: 503,
        body: String::new(),
    }
}
