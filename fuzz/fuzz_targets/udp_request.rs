//! A UDP request packet from anyone: `Request::parse` must never panic, and
//! whatever it accepts must write back to the same bytes and parse back equal;
//! the batch prefetch's peek at an announce's info-hash and port must agree
//! with it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tracker_proto::udp::{AnnouncePeek, Request, ANNOUNCE_REQUEST_LEN, MAX_SCRAPE_INFO_HASHES};

fuzz_target!(|data: &[u8]| {
    let peeked = Request::peek_announce(data);
    let request = match Request::parse(data) {
        Ok(request) => request,
        Err(error) => {
            // What the tracker does with a refused packet: read the ids it got
            // and the message for the error response.
            let _ = error.message();
            assert_eq!(error.connection_id.is_some(), data.len() >= 8);
            if error.transaction_id.is_some() {
                assert!(data.len() >= 16);
            }
            return;
        }
    };
    let mut out = Vec::new();
    request.write(&mut out);
    assert_eq!(Request::parse(&out), Ok(request), "re-parse differs");
    match request {
        // A connect may carry trailing bytes, which are dropped.
        Request::Connect(_) => {
            assert_eq!(out, data.get(..16).unwrap_or_default());
            assert_eq!(peeked, None);
        }
        Request::Announce(announce) => {
            assert_eq!(out, data, "announce does not write back as read");
            assert!(data.len() >= ANNOUNCE_REQUEST_LEN);
            let info_hash = announce.info_hash;
            assert_eq!(peeked, Some(AnnouncePeek { info_hash, port: announce.port }));
            let url_len: usize = announce.url_data().map(<[u8]>::len).sum();
            assert!(url_len <= announce.options.as_bytes().len());
        }
        Request::Scrape(scrape) => {
            assert_eq!(out, data, "scrape does not write back as read");
            assert_eq!(peeked, None);
            let n = scrape.info_hashes.len();
            assert!((1..=MAX_SCRAPE_INFO_HASHES).contains(&n));
            assert_eq!(scrape.info_hashes.iter().count(), n);
        }
    }
});
