//! The query of an announce or a scrape, as sent: `parse_announce` and
//! `parse_scrape` must never panic; what they accept must survive the load
//! generator's writer (`write_announce_target`, `write_scrape_target`) and parse
//! back equal.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tracker_proto::http::{
    parse_announce, parse_scrape, write_announce_target, write_scrape_target,
};

/// The server's cap (the UDP one); and a small one, to reach the error.
const MAX_SCRAPE: [usize; 2] = [74, 2];

fuzz_target!(|query: &[u8]| {
    match parse_announce(query) {
        Ok(announce) => {
            assert_ne!(announce.port, 0);
            let mut target = Vec::new();
            write_announce_target(&mut target, &announce);
            let again = target
                .strip_prefix(b"/announce?")
                .expect("announce target prefix");
            assert_eq!(parse_announce(again), Ok(announce), "announce round trip");
        }
        Err(error) => {
            let _ = (error.status(), error.reason());
        }
    }

    let mut info_hashes = Vec::new();
    for max in MAX_SCRAPE {
        match parse_scrape(query, max, &mut info_hashes) {
            Ok(()) => {
                assert!(info_hashes.len() <= max);
                let mut target = Vec::new();
                write_scrape_target(&mut target, &info_hashes);
                let again = target
                    .strip_prefix(b"/scrape")
                    .expect("scrape target prefix");
                let again = again.strip_prefix(b"?").unwrap_or(again);
                let mut reparsed = Vec::new();
                assert_eq!(parse_scrape(again, max, &mut reparsed), Ok(()));
                assert_eq!(reparsed, info_hashes, "scrape round trip");
            }
            Err(error) => {
                let _ = (error.status(), error.reason());
            }
        }
    }
});
