//! A UDP response packet, as the load generator and tests read them, for both
//! address families: `Response::parse` must never panic, and whatever it accepts
//! must write back to the same bytes and parse back equal.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tracker_proto::udp::{IpFamily, Response};

fuzz_target!(|data: &[u8]| {
    for family in [IpFamily::V4, IpFamily::V6] {
        let response = match Response::parse(data, family) {
            Ok(response) => response,
            Err(error) => {
                let _ = error.message();
                assert_eq!(error.connection_id, None);
                assert_eq!(error.transaction_id.is_some(), data.len() >= 8);
                continue;
            }
        };
        let mut out = Vec::new();
        response.write(&mut out);
        assert_eq!(
            Response::parse(&out, family),
            Ok(response),
            "re-parse differs"
        );
        match response {
            // A connect response may carry trailing bytes, which are dropped.
            Response::Connect { .. } => assert_eq!(out, data.get(..16).unwrap_or_default()),
            Response::Announce { peers, .. } => {
                assert_eq!(out, data);
                assert_eq!(peers.family(), family);
                assert_eq!(peers.iter().count(), peers.len());
                assert_eq!(peers.len() * family.peer_len(), peers.as_bytes().len());
            }
            Response::Scrape { stats, .. } => {
                assert_eq!(out, data);
                assert_eq!(stats.iter().count(), stats.len());
            }
            Response::Error { .. } => assert_eq!(out, data),
        }
    }
});
