//! Bytes from a client before and into a TLS handshake, as the HTTPS listener
//! sees them: a `rustls::ServerConnection` with the tracker's own configuration
//! (`tracker_http::tls::self_signed`: ring, tickets, ALPN) must never panic on
//! them, whether they arrive at once or dribbled in small pieces.
#![no_main]

use std::io::Read;
use std::sync::{Arc, LazyLock};

use libfuzzer_sys::fuzz_target;
use rustls::{ServerConfig, ServerConnection};

/// Made once per process: generating a key per input would drown the fuzzer.
static CONFIG: LazyLock<Arc<ServerConfig>> = LazyLock::new(|| {
    let (loaded, _pem) = tracker_http::tls::self_signed(&["localhost".into()])
        .expect("self-signed TLS configuration");
    Arc::new(loaded.config)
});

/// Feeds `data` to a fresh server connection `chunk` bytes at a time, answering
/// as a server loop would, until the bytes run out or the connection fails.
fn feed(data: &[u8], chunk: usize) {
    let mut conn = ServerConnection::new(CONFIG.clone()).expect("server connection");
    let mut sink = Vec::new();
    let mut plaintext = [0; 4096];
    for piece in data.chunks(chunk) {
        let mut piece = piece;
        while !piece.is_empty() {
            match conn.read_tls(&mut piece) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            let state = conn.process_new_packets();
            // Send what the server has to say (the alert, after an error).
            while conn.wants_write() {
                sink.clear();
                if conn.write_tls(&mut sink).is_err() {
                    return;
                }
            }
            let Ok(state) = state else { return };
            if state.plaintext_bytes_to_read() > 0 {
                let _ = conn.reader().read(&mut plaintext);
            }
            if state.peer_has_closed() {
                return;
            }
        }
    }
    let _ = (
        conn.is_handshaking(),
        conn.server_name(),
        conn.alpn_protocol(),
    );
}

fuzz_target!(|data: &[u8]| {
    feed(data, data.len().max(1));
    // One or a few bytes at a time, the way a slow client sends them.
    feed(data, data.len() % 7 + 1);
});
