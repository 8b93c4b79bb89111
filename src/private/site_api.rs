//! The site API's meaning: changes to the site's view, published to every
//! worker at once (each announce after the answer sees them), and the
//! request rates.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;

use tracker_http::site_api::{ApiAnswer, SiteApi};
use tracker_private::answer::stats_json;
use tracker_private::Site;
use tracker_runtime::reloadable::Reloadable;

use super::{PrivateMode, RequestRates};

pub struct SiteApiHandler {
    site: Arc<Reloadable<Site>>,
    rates: Rc<RequestRates>,
}

impl SiteApiHandler {
    pub fn new(private: &PrivateMode, rates: Rc<RequestRates>) -> SiteApiHandler {
        SiteApiHandler {
            site: private.site.clone(),
            rates,
        }
    }

    fn answer(&self, method: &[u8], path: &[u8], body: &[u8]) -> ApiAnswer {
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
            // The counts these answers carry (a user's seeding and leeching
            // peers, a torrent's peers and snatches) live on every worker,
            // and snatches only in the database: not gathered, so refused
            // rather than answered with zeros.
            Ok(ApiRequest::GetUser(_) | ApiRequest::GetTorrent(_)) => ApiAnswer {
                status: 501,
                body: String::new(),
            },
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
        let answer = self.answer(method, path, body);
        Box::pin(std::future::ready(answer))
    }
}
