//! `load-test http` against a tiny scripted HTTP server on 127.0.0.1 that
//! closes keep-alive connections in the ways a tracker may: a request that
//! crossed a close before any byte of its answer is sent again on a new
//! connection (RFC 9112 9.3.1) and is not invalid; one lost again, or lost
//! after part of its answer, is.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use load_test::config::Config;
use load_test::stats::Summary;

/// What the server does on one connection: answer `answers` requests, then
/// read one more and end as `then` says.
#[derive(Clone, Copy, Debug)]
struct Script {
    answers: usize,
    then: End,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    /// Answer every request until the client closes.
    Serve,
    /// Close (FIN) without a byte of answer.
    Close,
    /// Reset (RST) without a byte of answer.
    Reset,
    /// Send the start of the answer's head, then close.
    Partial,
    /// Answer with `Connection: close`, then close.
    AnswerAndClose,
}

const SERVE: Script = Script {
    answers: 0,
    then: End::Serve,
};

/// An announce answer that load-test accepts: no peers, one seeder.
const BODY: &[u8] = b"d8:completei1e10:incompletei0e8:intervali1800e5:peers0:e";

/// Every request the server read, as (connection, bytes).
type Log = Mutex<Vec<(usize, Vec<u8>)>>;

/// Accepts on 127.0.0.1, connection `i` following `script[i]` (later ones
/// are served), and logs every request as (connection, bytes).
struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    log: Arc<Log>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    fn start(script: Vec<Script>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(Vec::new()));
        let thread = std::thread::spawn({
            let (stop, log) = (stop.clone(), log.clone());
            move || {
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((stream, _)) => {
                            let plan = script.get(i).copied().unwrap_or(SERVE);
                            let log = log.clone();
                            std::thread::spawn(move || handle(stream, i, plan, &log));
                            i += 1;
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_millis(2));
                        }
                        Err(e) => panic!("accept: {e}"),
                    }
                }
            }
        });
        Server {
            addr,
            stop,
            log,
            thread: Some(thread),
        }
    }

    fn requests(&self) -> Vec<(usize, Vec<u8>)> {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn handle(mut stream: TcpStream, i: usize, plan: Script, log: &Log) {
    stream.set_nonblocking(false).unwrap();
    // Ends the thread should the client go quiet.
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut buf = Vec::new();
    let mut answered = 0;
    while let Some(request) = read_request(&mut stream, &mut buf) {
        log.lock().unwrap().push((i, request));
        if answered < plan.answers || plan.then == End::Serve {
            if stream.write_all(&answer("")).is_err() {
                return;
            }
            answered += 1;
            continue;
        }
        match plan.then {
            End::Serve | End::Close => {}
            End::Reset => {
                // Linger 0: the close sends a RST.
                socket2::SockRef::from(&stream)
                    .set_linger(Some(Duration::ZERO))
                    .unwrap();
            }
            End::Partial => {
                let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5");
            }
            End::AnswerAndClose => {
                let _ = stream.write_all(&answer("Connection: close\r\n"));
            }
        }
        return;
    }
}

/// The next whole request head (load-test's requests have no body).
fn read_request(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Vec<u8>> {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return Some(buf.drain(..end + 4).collect());
        }
        let mut chunk = [0u8; 4096];
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

fn answer(headers: &str) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 200 OK\r\n{headers}Content-Length: {}\r\n\r\n",
        BODY.len()
    )
    .into_bytes();
    out.extend_from_slice(BODY);
    out
}

/// Half a second of announces over one connection, closed loop.
fn run(server: &Server) -> Summary {
    let mut config = Config {
        target: Some(format!("http://{}/announce", server.addr)),
        duration_secs: 0.5,
        workers: Some(1),
        progress: false,
        timeout_ms: 5000,
        ..Default::default()
    };
    config.traffic.torrents = 100;
    config.traffic.peers = 1000;
    config.http.connections_per_worker = 1;
    config.http.mix.announce = 1;
    config.http.mix.scrape = 0;
    load_test::http::run(&config).expect("load-test http")
}

#[test]
fn a_request_lost_before_any_answer_is_retried() {
    let server = Server::start(vec![Script {
        answers: 0,
        then: End::Close,
    }]);
    let summary = run(&server);
    let text = summary.to_text();
    assert_eq!(summary.retried, 1, "{text}");
    assert_eq!(summary.invalid, 0, "{text}");
    assert_eq!(summary.timeouts, 0, "{text}");
    assert_eq!(summary.connections, 2, "{text}");
    assert!(summary.ok > 10, "{text}");
    assert_eq!(summary.requests_sent, summary.ok, "{text}");
    assert!(text.contains("retried on a new connection 1"), "{text}");
    // The same request, on the second connection.
    let requests = server.requests();
    assert_eq!(requests[0].0, 0);
    assert_eq!(requests[1], (1, requests[0].1.clone()));
}

#[test]
fn losses_after_a_retry_or_mid_answer_are_invalid() {
    let script = |answers, then| Script { answers, then };
    let server = Server::start(vec![
        // Lost before any answer: retried.
        script(0, End::Close),
        // The retry answered; the next request reset: retried.
        script(1, End::Reset),
        // That retry lost too: connection_lost.
        script(0, End::Close),
        // Part of an answer, then closed: connection_lost.
        script(0, End::Partial),
        // Answered, `Connection: close`: reconnect, nothing counted.
        script(0, End::AnswerAndClose),
    ]);
    let summary = run(&server);
    let text = summary.to_text();
    assert_eq!(summary.retried, 2, "{text}");
    assert_eq!(summary.invalid, 2, "{text}");
    assert_eq!(summary.invalid_by_reason["connection_lost"], 2, "{text}");
    assert_eq!(summary.timeouts, 0, "{text}");
    assert_eq!(summary.connections, 6, "{text}");
    assert!(summary.ok > 10, "{text}");
    // Every request counted once: answered, or invalid.
    assert_eq!(
        summary.requests_sent,
        summary.ok + summary.invalid,
        "{text}"
    );
    let requests = server.requests();
    let on = |c: usize| -> Vec<&Vec<u8>> {
        requests
            .iter()
            .filter(|(i, _)| *i == c)
            .map(|(_, r)| r)
            .collect()
    };
    assert_eq!(on(1)[0], on(0)[0]);
    assert_eq!(on(2), [on(1)[1]]);
    assert_ne!(on(3)[0], on(2)[0]);
}
