//! A request to the private site API, as the network delivers it: the
//! method, the path after the key and the body, split from the input at its
//! first two NUL bytes. `parse_api_request` must never panic, and a change
//! it accepts must apply to a site view without panicking, whatever the
//! view holds already.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tracker_private::api::{parse_api_request, ApiRequest};
use tracker_private::{GlobalFactors, Site, SiteRecords};

fuzz_target!(|input: &[u8]| {
    let mut parts = input.splitn(3, |&b| b == 0);
    let (Some(method), Some(path), Some(body)) = (parts.next(), parts.next(), parts.next()) else {
        return;
    };
    let Ok(request) = parse_api_request(method, path, body) else {
        return;
    };
    if let ApiRequest::Change(change) = request {
        let mut site = Site::from_records(SiteRecords::default(), GlobalFactors::default());
        // Twice: the second meets what the first left.
        let _ = site.apply(change.clone());
        let _ = site.apply(change);
    }
});
