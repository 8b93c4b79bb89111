//! One connection: its requests read within their deadlines, answered in
//! order (pipelined ones too), and written back whole within the write
//! timeout; then its end: a graceful close after a last answer, lingering so
//! that the answer gets through, or a reset when it was cut (see
//! `crate::linger`).

use super::answer::Scratch;
use super::*;
use std::os::fd::AsRawFd;

/// The first size of a connection's read buffer; it doubles up to
/// `http.max_request_head_bytes` for clients that send long heads.
const INITIAL_READ_BUFFER: usize = 2048;
/// Answers to pipelined requests are gathered up to this many bytes before
/// they are written.
const WRITE_BATCH: usize = 64 << 10;
/// How long a connection closed by the tracker keeps reading (and dropping)
/// what the client still sends, so that the kernel does not answer that data
/// with a reset that could destroy the last answer before the client read it.
const LINGER: Duration = Duration::from_secs(1);
/// How long a connection with no request answered yet waits for its first
/// at a stop. A client sends it within a round trip of connecting (or of its
/// TLS handshake); one silent for longer is idle (a browser's preconnect),
/// and must not hold the stop.
const FIRST_REQUEST_AT_STOP: Duration = Duration::from_secs(1);
/// Bytes read at most while lingering.
const LINGER_BYTES: usize = 64 << 10;

/// A connection's buffers and scratch space, reused for each of its requests.
#[derive(Default)]
struct ConnectionState {
    /// Bytes received; `buf[start..end]` is not yet answered.
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Answers not yet written.
    out: Vec<u8>,
    served: usize,
    hashes: Vec<InfoHash>,
    stats: Vec<ScrapeStats>,
    files: Vec<(InfoHash, ScrapeStats)>,
}

impl ConnectionState {
    /// Makes room after `end` in the read buffer: moves the unanswered part to
    /// the front, or grows the buffer up to `max` bytes. False when the buffer
    /// is one incomplete head of `max` bytes.
    fn make_room(&mut self, max: usize) -> bool {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            return true;
        }
        if self.buf.len() >= max {
            return false;
        }
        // Not `clamp`: the limit may be below the initial size.
        let len = (self.buf.len() * 2).max(INITIAL_READ_BUFFER).min(max);
        self.buf.resize(len, 0);
        true
    }
}

/// How a connection ends.
enum End {
    /// Gracefully, lingering: after the tracker's last answer, or once the
    /// client closed its side, so that what the kernel still queues reaches
    /// it.
    Closed,
    /// Reset: a deadline passed, a limit or an eviction cut it, or it
    /// failed. The kernel keeps nothing for it (see `crate::linger`).
    Cut,
    /// Upgraded to a WebSocket (its 101 answer sent): served by the
    /// WebSocket service from here, for the client at this address.
    Upgraded(IpAddr),
}

impl tracker_ws::ConnectionSlot for Slot {
    type Evicted<'a> = crate::connections::Evicted<'a>;
    fn set_idle(&self, idle: bool) {
        Slot::set_idle(self, idle)
    }
    fn evicted(&self) -> Self::Evicted<'_> {
        Slot::evicted(self)
    }
}

/// A stream the server speaks HTTP over: plain TCP or TLS on TCP. The TCP
/// stream underneath carries the deadlines.
trait Transport: AsyncRead + AsyncWrite + Unpin {
    /// HTTPS: which of `HttpService::traffic` counts it.
    const TLS: bool;
    fn tcp(&mut self) -> &mut DeadlineStream;
}

impl Transport for DeadlineStream {
    const TLS: bool = false;
    fn tcp(&mut self) -> &mut DeadlineStream {
        self
    }
}

impl Transport for TlsStream<DeadlineStream> {
    const TLS: bool = true;
    fn tcp(&mut self) -> &mut DeadlineStream {
        self.get_mut().0
    }
}

/// What a connection waits for when it reads, and so which deadline holds.
#[derive(Clone, Copy)]
enum Waiting {
    /// The first byte of a request, since this moment.
    Idle(Instant),
    /// The rest of a request head begun at this moment.
    Head(Instant),
}

impl HttpService {
    pub(super) async fn connection(
        &self,
        stream: TcpStream,
        peer_ip: IpAddr,
        acceptor: Option<TlsAcceptor>,
        slot: &Slot,
    ) {
        // Each answer is written whole; do not let Nagle hold back its tail.
        let _ = stream.set_nodelay(true);
        let mut stream = DeadlineStream::new(stream);
        let Some(acceptor) = acceptor else {
            return self.serve_connection(stream, peer_ip, slot).await;
        };
        let deadline = Instant::now() + self.handshake_timeout;
        stream.set_read_deadline(Some(deadline));
        stream.set_write_deadline(Some(deadline));
        // An eviction drops a handshake: it has no request yet to answer. A
        // stop lets it finish (within its deadline), as the client connected
        // to send a request, which it then gets answered (see `requests`).
        let handshake =
            futures_lite::future::or(async { Some(acceptor.accept(stream).await) }, async {
                slot.evicted().await;
                None
            });
        let (Some(handshake), _) = waited(handshake).await else {
            return;
        };
        match handshake {
            Ok(stream) => {
                self.stats.tls_handshakes.inc();
                self.serve_connection(stream, peer_ip, slot).await;
            }
            Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                self.stats.tls_handshake_timeouts.inc()
            }
            Err(e) => {
                self.stats.tls_handshake_failures.inc();
                debug!("https {peer_ip}: handshake failed: {e}");
            }
        }
    }

    async fn serve_connection<S: Transport>(&self, mut stream: S, peer_ip: IpAddr, slot: &Slot) {
        let mut state = ConnectionState::default();
        let end = self.requests(&mut stream, peer_ip, slot, &mut state).await;
        match end {
            End::Closed => self.close(&mut stream, &mut state.buf).await,
            End::Cut => {}
            End::Upgraded(client_ip) => {
                let Some(ws) = &self.ws else {
                    return;
                };
                // The WebSocket keeps its own time: no HTTP deadline holds.
                stream.tcp().set_read_deadline(None);
                stream.tcp().set_write_deadline(None);
                let fd = stream.tcp().socket().as_raw_fd();
                let send_buffer = ws.send_buffer_bytes();
                if send_buffer > 0
                    && crate::send_buffer::limit_send_buffer(&fd, send_buffer).is_err()
                {
                    return;
                }
                // A close frame is followed by a graceful close, so that it
                // reaches the browser (a reset would drop what the kernel
                // still queues); the descriptor stays open while `serve`
                // runs, which is when this is called.
                let graceful = move || {
                    let _ = crate::linger::end_gracefully(&fd);
                };
                let read_ahead = state
                    .buf
                    .get(state.start..state.end)
                    .unwrap_or_default()
                    .to_vec();
                ws.serve(stream, read_ahead, client_ip, S::TLS, slot, graceful)
                    .await;
            }
        }
        // Dropped: a cut one resets, as its listener set it to.
    }

    /// Answers the requests of one connection until it ends.
    async fn requests<S: Transport>(
        &self,
        stream: &mut S,
        peer_ip: IpAddr,
        slot: &Slot,
        c: &mut ConnectionState,
    ) -> End {
        let real_ip = match self.config.real_ip_header() {
            None => RealIp::Off,
            Some(name) if self.is_trusted_proxy(peer_ip) => RealIp::Required(name),
            Some(name) => RealIp::Ignored(name),
        };
        let mut waiting = Waiting::Idle(Instant::now());
        let mut quantum = Quantum::default();
        loop {
            // Answer every complete request already received, in order.
            loop {
                // start <= end <= buf.len() always; a broken invariant ends
                // the connection rather than the worker.
                let Some(unanswered) = c.buf.get(c.start..c.end) else {
                    return End::Cut;
                };
                match parse_head(unanswered, real_ip) {
                    Ok(Parsed::Partial) => break,
                    Ok(Parsed::Complete { request, consumed }) => {
                        if request.real_ip_ignored {
                            self.stats.untrusted_real_ip.inc();
                        }
                        let client_ip = request.real_ip.map_or(peer_ip, canonical_ip);
                        if let (Endpoint::WebSocket, Some(key)) =
                            (request.endpoint, request.websocket_key)
                        {
                            if self.ws.is_none() {
                                self.stats.not_found.inc();
                                return self
                                    .fail_and_close(stream, &mut c.out, RequestError::NotFound)
                                    .await;
                            }
                            tracker_ws::write_upgrade_response(&mut c.out, key);
                            c.start += consumed;
                            return match self.flush(stream, &mut c.out).await {
                                Ok(()) => End::Upgraded(client_ip),
                                Err(()) => End::Cut,
                            };
                        }
                        let (requests, responses) = self.traffic_of(S::TLS).of(request.endpoint);
                        requests.inc(client_ip);
                        c.served += 1;
                        let last = c.served >= self.config.max_requests_per_connection
                            || !request.connection.keep_alive()
                            || self.stop.is_fired();
                        let connection = if last {
                            Connection::Close
                        } else {
                            request.connection
                        };
                        let answered_from = c.out.len();
                        let scratch = Scratch {
                            out: &mut c.out,
                            hashes: &mut c.hashes,
                            stats: &mut c.stats,
                            files: &mut c.files,
                        };
                        let traffic = self.traffic_of(S::TLS);
                        let answer = self.answer(&request, connection, peer_ip, traffic, scratch);
                        if Contained::new(&self.stats.panics, answer).await.is_none() {
                            // Contained: the half-written answer is replaced
                            // by a 500, and the connection ends, as nothing
                            // it carries is to be trusted after this.
                            c.out.truncate(answered_from);
                            return self
                                .answer_and_close(stream, &mut c.out, 500, INTERNAL_ERROR)
                                .await;
                        }
                        responses.inc(client_ip);
                        c.start += consumed;
                        if last {
                            return match self.flush(stream, &mut c.out).await {
                                Ok(()) => End::Closed,
                                Err(()) => End::Cut,
                            };
                        }
                        if c.out.len() >= WRITE_BATCH
                            && self.flush(stream, &mut c.out).await.is_err()
                        {
                            return End::Cut;
                        }
                    }
                    Err(error) => {
                        // The position in the stream is lost: answer and close.
                        match error {
                            RequestError::NotFound => self.stats.not_found.inc(),
                            RequestError::HeadTooLarge => self.stats.head_too_large.inc(),
                            _ => self.stats.bad_request.inc(),
                        }
                        return self.fail_and_close(stream, &mut c.out, error).await;
                    }
                }
            }
            if !c.out.is_empty() {
                if self.flush(stream, &mut c.out).await.is_err() {
                    return End::Cut;
                }
                // The client has its answers: it waits for its next request,
                // or has sent part of it already (pipelining), whose head
                // then counts from now.
                let now = Instant::now();
                if c.start == c.end {
                    waiting = Waiting::Idle(now);
                    slot.set_idle(true);
                } else {
                    waiting = Waiting::Head(now);
                }
                // Reads and writes that find the socket ready return at once,
                // so a client that keeps the pipeline full would never let the
                // executor run anything else (other connections, other
                // workers' requests on the mesh).
                quantum.yield_now().await;
            }
            if c.start == c.end {
                (c.start, c.end) = (0, 0);
            }
            if c.end == c.buf.len() && !c.make_room(self.config.max_request_head_bytes) {
                self.stats.head_too_large.inc();
                return self
                    .fail_and_close(stream, &mut c.out, RequestError::HeadTooLarge)
                    .await;
            }
            // At a stop, every complete request received has been answered
            // (pipelined ones too). A connection that has answered one and
            // waits for the next closes, lingering so that the answers get
            // through: its client knows to send again on a new connection.
            // One that is receiving a request gets it answered within its
            // request timeout. One that has not had its first request yet
            // (it was accepted, or its handshake finished, as the stop came)
            // waits `FIRST_REQUEST_AT_STOP` for it: its client never saw the
            // tracker close anything, and may not send it again.
            let stopping = self.stop.is_fired();
            let deadline = match waiting {
                Waiting::Idle(_) if stopping && c.served > 0 => return End::Closed,
                Waiting::Idle(since) if stopping => {
                    since + FIRST_REQUEST_AT_STOP.min(self.request_timeout)
                }
                Waiting::Idle(since) => since + self.idle_timeout,
                Waiting::Head(since) => since + self.request_timeout,
            };
            if Instant::now() >= deadline {
                if stopping {
                    return End::Closed;
                }
                self.count_read_timeout(waiting);
                return End::Cut;
            }
            stream.tcp().set_read_deadline(Some(deadline));
            let Some(free) = c.buf.get_mut(c.end..) else {
                return End::Cut;
            };
            let read = futures_lite::future::or(async { Some(stream.read(free).await) }, async {
                if stopping {
                    slot.evicted().await;
                } else {
                    futures_lite::future::or(self.stop.wait(), slot.evicted()).await;
                }
                None
            });
            let Some(read) = quantum.wait(read).await else {
                // Evicted while idle (counted when the newcomer was admitted):
                // nothing to answer. A stop is seen at the top of the loop.
                if slot.is_evicted() {
                    return End::Cut;
                }
                continue;
            };
            match read {
                // The client is done: its answers are in the kernel, on
                // their way.
                Ok(0) => return End::Closed,
                Ok(n) => {
                    self.traffic_of(S::TLS).bytes_in.add(n as u64);
                    c.end += n;
                    if let Waiting::Idle(_) = waiting {
                        waiting = Waiting::Head(Instant::now());
                        slot.set_idle(false);
                    }
                }
                Err(e) => {
                    if e.kind() == io::ErrorKind::TimedOut {
                        self.count_read_timeout(waiting);
                    }
                    return End::Cut;
                }
            }
        }
    }

    fn count_read_timeout(&self, waiting: Waiting) {
        match waiting {
            Waiting::Idle(_) => self.stats.idle_timeouts.inc(),
            Waiting::Head(_) => self.stats.request_timeouts.inc(),
        }
    }

    /// Answers an error that leaves the stream position unknown, then ends
    /// the connection.
    async fn fail_and_close<S: Transport>(
        &self,
        stream: &mut S,
        out: &mut Vec<u8>,
        error: RequestError,
    ) -> End {
        let end = self
            .answer_and_close(stream, out, error.status(), error.reason())
            .await;
        // A head past the limit is a limit reached: what more it sends is
        // not worth lingering for.
        match error {
            RequestError::HeadTooLarge => End::Cut,
            _ => end,
        }
    }

    /// Answers with a failure reason, then ends the connection.
    async fn answer_and_close<S: Transport>(
        &self,
        stream: &mut S,
        out: &mut Vec<u8>,
        status: u16,
        reason: &str,
    ) -> End {
        self.fail(out, status, Connection::Close, reason);
        match self.flush(stream, out).await {
            Ok(()) => End::Closed,
            Err(()) => End::Cut,
        }
    }

    /// Writes out all gathered answers; Err when the client is gone or does
    /// not take them whole within the write timeout.
    async fn flush<S: Transport>(&self, stream: &mut S, out: &mut Vec<u8>) -> Result<(), ()> {
        stream
            .tcp()
            .set_write_deadline(Some(Instant::now() + self.write_timeout));
        let written = async {
            stream.write_all(out).await?;
            // TLS holds records until flushed; plain TCP flushes at once.
            stream.flush().await
        }
        .await;
        match written {
            Ok(()) => {
                self.traffic_of(S::TLS).bytes_out.add(out.len() as u64);
                out.clear();
                Ok(())
            }
            Err(e) => {
                if e.kind() == io::ErrorKind::TimedOut {
                    self.stats.write_timeouts.inc();
                }
                Err(())
            }
        }
    }

    /// Ends a connection gracefully: says so (TLS close_notify and a TCP
    /// FIN), then reads and drops what the client still sends for a moment,
    /// so that unread data does not make the kernel reset the connection
    /// under the last answer.
    async fn close<S: Transport>(&self, stream: &mut S, buf: &mut Vec<u8>) {
        // Otherwise the close resets, and the kernel drops what it queues.
        if stream.tcp().close_gracefully().is_err() {
            return;
        }
        let deadline = Instant::now() + LINGER;
        stream.tcp().set_write_deadline(Some(deadline));
        stream.tcp().set_read_deadline(Some(deadline));
        if stream.close().await.is_err() {
            return;
        }
        if buf.is_empty() {
            buf.resize(INITIAL_READ_BUFFER, 0);
        }
        let mut drained = 0;
        while drained < LINGER_BYTES {
            match stream.read(buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => drained += n,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(buf: &[u8], start: usize) -> ConnectionState {
        ConnectionState {
            buf: buf.to_vec(),
            start,
            end: buf.len(),
            ..ConnectionState::default()
        }
    }

    #[test]
    fn room_is_made_by_moving_then_by_growing_up_to_the_limit() {
        let mut c = state(b"answeredGET /a", 8);
        assert!(c.make_room(4096));
        assert_eq!((&c.buf[..c.end], c.start), (&b"GET /a"[..], 0));
        assert_eq!(c.buf.len(), 14, "moving does not grow");

        let mut c = state(b"", 0);
        assert!(c.make_room(4096));
        assert_eq!(c.buf.len(), INITIAL_READ_BUFFER);
        c.end = c.buf.len();
        assert!(c.make_room(4096));
        assert_eq!(c.buf.len(), 4096);
        c.end = c.buf.len();
        assert!(
            !c.make_room(4096),
            "a full buffer at the limit is a head too large"
        );
    }

    #[test]
    fn a_limit_below_the_initial_size_is_kept() {
        let mut c = state(b"", 0);
        assert!(c.make_room(512));
        assert_eq!(c.buf.len(), 512);
        c.end = 512;
        assert!(!c.make_room(512));
    }
}
