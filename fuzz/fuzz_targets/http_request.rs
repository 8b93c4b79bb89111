//! Bytes on an HTTP connection: `parse_head` (with no real-IP header, with one
//! read from a trusted proxy, and with one ignored), then the query parsers on each complete head, must never panic;
//! pipelined requests are consumed within the buffer; and a head that parses
//! whole parses the same when it arrives in two pieces (what the server sees
//! reading from a socket).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tracker_proto::http::{parse_announce, parse_head, parse_scrape, Endpoint, Parsed, RealIp};

const REAL_IP_HEADERS: [RealIp<'static>; 3] = [
    RealIp::Off,
    RealIp::Required("X-Forwarded-For"),
    RealIp::Ignored("X-Forwarded-For"),
];
const MAX_SCRAPE: usize = 74;
/// The most pipelined requests looked at per input.
const MAX_PIPELINED: usize = 64;

fuzz_target!(|data: &[u8]| {
    let mut info_hashes = Vec::new();
    for real_ip_header in REAL_IP_HEADERS {
        let mut buf = data;
        for _ in 0..MAX_PIPELINED {
            let parsed = parse_head(buf, real_ip_header);
            let (request, consumed) = match parsed {
                Ok(Parsed::Complete { request, consumed }) => (request, consumed),
                Ok(Parsed::Partial) => break,
                Err(error) => {
                    let _ = (error.status(), error.reason());
                    break;
                }
            };
            assert!(consumed > 0, "a complete head consumed nothing");
            assert!(consumed <= buf.len(), "consumed past the buffer");
            let head = &buf[..consumed];
            // The query borrows from the head.
            let query = request.query.as_ptr_range();
            let head_range = head.as_ptr_range();
            assert!(
                request.query.is_empty()
                    || (query.start >= head_range.start && query.end <= head_range.end)
            );
            assert_eq!(
                request.real_ip.is_some(),
                matches!(real_ip_header, RealIp::Required(_))
            );
            assert!(!request.real_ip_ignored || matches!(real_ip_header, RealIp::Ignored(_)));

            // The same head arriving in pieces: partial until its last byte.
            assert_eq!(parse_head(head, real_ip_header), parsed);
            for cut in [consumed - 1, consumed / 2] {
                assert_eq!(
                    parse_head(&head[..cut], real_ip_header),
                    Ok(Parsed::Partial),
                    "a prefix of {cut} of a {consumed}-byte head is not partial"
                );
            }

            match request.endpoint {
                Endpoint::Announce => {
                    if let Err(error) = parse_announce(request.query) {
                        let _ = (error.status(), error.reason());
                    }
                }
                Endpoint::Scrape => match parse_scrape(request.query, MAX_SCRAPE, &mut info_hashes)
                {
                    Ok(()) => assert!(info_hashes.len() <= MAX_SCRAPE),
                    Err(error) => {
                        let _ = (error.status(), error.reason());
                    }
                },
                // An upgrade carries its key, 24 characters (RFC 6455).
                Endpoint::WebSocket => {
                    assert_eq!(request.websocket_key.map(<[u8]>::len), Some(24));
                }
            }
            if request.endpoint != Endpoint::WebSocket {
                assert_eq!(request.websocket_key, None);
            }
            buf = &buf[consumed..];
        }
    }
});
