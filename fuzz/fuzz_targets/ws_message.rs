//! A WebTorrent message, as sent: `parse_client_message` must never panic;
//! what it accepts stays within its limits and survives the client's writer
//! (`write_announce_request`, `write_scrape_request`), parsing back equal;
//! `parse_server_message` must never panic either.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tracker_proto::ws::{
    parse_client_message, parse_server_message, write_announce_request, write_scrape_request,
    ClientMessage, MessageLimits,
};

fuzz_target!(|text: &[u8]| {
    // The tracker's defaults, and small ones, to reach the errors.
    for limits in [
        MessageLimits::default(),
        MessageLimits {
            max_offers: 1,
            max_sdp_bytes: 16,
            max_scrape_hashes: 1,
        },
    ] {
        match parse_client_message(text, &limits) {
            Ok(ClientMessage::Announce(announce)) => {
                assert!(announce.offers.len() <= limits.max_offers);
                for offer in &announce.offers {
                    assert!(offer.offer.len() <= limits.max_sdp_bytes);
                }
                let mut again = Vec::new();
                write_announce_request(&mut again, &announce);
                assert_eq!(
                    parse_client_message(&again, &limits),
                    Ok(ClientMessage::Announce(announce)),
                    "announce round trip"
                );
            }
            Ok(ClientMessage::Scrape(scrape)) => {
                assert!(scrape.info_hashes.len() <= limits.max_scrape_hashes);
                let mut again = Vec::new();
                write_scrape_request(&mut again, &scrape.info_hashes);
                assert_eq!(
                    parse_client_message(&again, &limits),
                    Ok(ClientMessage::Scrape(scrape)),
                    "scrape round trip"
                );
            }
            Err(error) => {
                let _ = (error.kind.reason(), error.kind.as_str());
            }
        }
    }
    let _ = parse_server_message(text);
});
