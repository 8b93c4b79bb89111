//! `load-test http`: keep-alive HTTP/1.1 connections (TLS with rustls and the
//! ring provider for https), many per worker, each bound to its own loopback
//! address so that it carries its own set of peers. One request in flight per
//! connection; the protocol work is in [`crate::http_session`].

use std::cell::RefCell;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{FromRawFd, IntoRawFd};
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use futures_lite::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use futures_rustls::TlsConnector;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use crate::config::Config;
use crate::http_session::{frame, HttpSession, HttpTarget};
use crate::model::{min_sources, Kind, Rng, TrafficModel, Weighted, PORTS_PER_SOURCE};
use crate::runner::{self, WorkerEnv};
use crate::stats::{Invalid, RunInfo, Stats, Summary};
use crate::udp::source_ip;

const KINDS: [Kind; 2] = [Kind::Announce, Kind::Scrape];
/// The system's CA bundle (Debian), trusted when no `--ca` is given.
const SYSTEM_CAS: &str = "/etc/ssl/certs/ca-certificates.crt";
/// Pause after a failed connection attempt.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

struct Plan {
    target: HttpTarget,
    tls: Option<TlsConnector>,
    model: TrafficModel,
    mix: Weighted<2>,
    workers: u32,
    connections: u32,
    /// Open loop: requests per second over all connections.
    rate: Option<f64>,
    duration_ns: u64,
    timeout: Duration,
    seed: u64,
    /// Private: `/{passkey}/announce` rather than `/announce/{passkey}`.
    passkey_first: bool,
}

pub fn run(config: &Config) -> Result<Summary, String> {
    let target = HttpTarget::parse(config.target.as_deref().ok_or("--target is required")?)?;
    let placements = runner::placements(config.workers, config.cpus.as_deref())?;
    let workers = placements.len() as u32;
    let mut traffic = config.traffic.clone();
    if target.addr.is_ipv6() && traffic.peers > PORTS_PER_SOURCE {
        eprintln!(
            "load-test: IPv6 loopback has one address; using {PORTS_PER_SOURCE} peers instead of {}",
            traffic.peers
        );
        traffic.peers = PORTS_PER_SOURCE;
    }
    let connections = (config.http.connections_per_worker * workers)
        .max(min_sources(traffic.peers))
        .next_multiple_of(workers);
    let identities = if target.addr.is_ipv6() {
        1
    } else {
        connections
    };
    let lists = crate::private::Lists::load(&traffic)?;
    let model = TrafficModel::with_lists(&traffic, identities, config.seed, lists)?;
    let mix = Weighted::new(config.http.mix.as_array()).map_err(|e| format!("--mix: {e}"))?;
    let tls = if target.tls {
        Some(TlsConnector::from(Arc::new(tls_config(
            config.http.insecure,
            config.http.ca.as_deref(),
        )?)))
    } else {
        None
    };
    let plan = Arc::new(Plan {
        target: target.clone(),
        tls,
        model,
        mix,
        workers,
        connections,
        rate: config.rate,
        duration_ns: (config.duration_secs * 1e9) as u64,
        timeout: Duration::from_millis(config.timeout_ms),
        seed: config.seed,
        passkey_first: config.http.passkey_first,
    });
    let url = config.target.clone().unwrap_or_default();
    let mode = match config.rate {
        Some(rate) => format!("open loop, {rate} req/s"),
        None => "closed loop, 1 in flight per connection".to_string(),
    };
    eprintln!(
        "load-test: http {url}, {workers} worker(s) on {placements:?}, {connections} connections, {mode}, {} s",
        config.duration_secs
    );
    let deadline =
        Duration::from_secs_f64(config.duration_secs + 2.0 * config.timeout_ms as f64 / 1e3 + 10.0);
    let stats = runner::run(placements, config.progress, deadline, &KINDS, {
        let plan = plan.clone();
        move |env| worker(plan.clone(), env)
    })?;
    let info = RunInfo {
        protocol: if target.tls { "https" } else { "http" },
        target: &url,
        mode,
        workers: workers as usize,
        sockets: connections,
        sources: connections,
        kinds: &KINDS,
    };
    Ok(Summary::new(&stats, &info, config.duration_secs))
}

/// rustls with the ring provider; `insecure` accepts any certificate, else
/// the CAs of `ca` (default: the system's) are trusted. The WebSocket load
/// (wss) shares it.
pub(crate) fn tls_config(insecure: bool, ca: Option<&Path>) -> Result<ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS set-up: {e}"))?;
    if insecure {
        return Ok(builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(provider)))
            .with_no_client_auth());
    }
    let path = ca.map_or_else(|| SYSTEM_CAS.into(), Path::to_path_buf);
    let mut roots = RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(&path)
        .map_err(|e| format!("cannot read CAs from {}: {e}", path.display()))?;
    for cert in certs {
        let cert = cert.map_err(|e| format!("{}: {e}", path.display()))?;
        roots
            .add(cert)
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(builder.with_root_certificates(roots).with_no_client_auth())
}

/// For `--insecure`: any certificate is taken, but handshake signatures are
/// still checked.
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

async fn worker(plan: Arc<Plan>, env: WorkerEnv) -> Result<Stats, String> {
    let stats = Rc::new(RefCell::new(Stats::default()));
    let env = Rc::new(env);
    let tasks: Vec<_> = (env.index as u32..plan.connections)
        .step_by(plan.workers as usize)
        .map(|c| glommio::spawn_local(connection_loop(plan.clone(), env.clone(), stats.clone(), c)))
        .collect();
    let (_, stats) = runner::finish_worker(&env, &stats, tasks).await;
    Ok(stats)
}

/// How a connection's use ended.
enum Ended {
    /// The run is over.
    Done,
    /// Open a new connection and go on.
    Reconnect,
}

/// Per-connection state that outlives reconnections.
struct Conn {
    plan: Arc<Plan>,
    env: Rc<WorkerEnv>,
    stats: Rc<RefCell<Stats>>,
    session: HttpSession,
    rng: Rng,
    request: Vec<u8>,
    buf: Vec<u8>,
    /// Open loop: this connection's send times, and requests scheduled so far.
    schedule: Option<Schedule>,
    scheduled: u64,
}

/// One connection's send times in the open loop. The connections take turns,
/// each at its own offset in the period, rather than all send at once.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Schedule {
    /// Nanoseconds between this connection's requests.
    period_ns: f64,
    /// This connection's offset, as a fraction of its period.
    phase: f64,
}

impl Schedule {
    /// Connection `c` of `connections`, which send `rate` requests/s in all.
    pub(crate) fn new(rate: f64, c: u32, connections: u32) -> Self {
        Schedule {
            period_ns: 1e9 * f64::from(connections) / rate,
            phase: f64::from(c) / f64::from(connections),
        }
    }

    /// When request `n` of the connection is due, in ns from the start.
    pub(crate) fn due_ns(&self, n: u64) -> u64 {
        ((n as f64 + self.phase) * self.period_ns).round() as u64
    }
}

/// One connection slot until the end of the run, reconnecting when the
/// server closes or a request times out. A request lost with its connection
/// before any answer goes again on the next one, even just after the end (it
/// was sent in the run), for as long as a time-out.
async fn connection_loop(plan: Arc<Plan>, env: Rc<WorkerEnv>, stats: Rc<RefCell<Stats>>, c: u32) {
    let source = c % plan.model.sources();
    let local_ip = source_ip(plan.target.addr, c);
    let mut conn = Conn {
        session: HttpSession::new(plan.target.clone(), source, local_ip, plan.mix.clone())
            .with_passkey_first(plan.passkey_first),
        rng: Rng::new(plan.seed ^ (u64::from(c) << 32) ^ 0x5a5a),
        request: Vec::with_capacity(1024),
        buf: vec![0; 16 << 10],
        schedule: plan
            .rate
            .map(|rate| Schedule::new(rate, c, plan.connections)),
        scheduled: 0,
        plan,
        env,
        stats,
    };
    let timeout_ns = conn.plan.timeout.as_nanos() as u64;
    loop {
        let now = conn.env.now_ns();
        let end = conn.plan.duration_ns;
        if now >= end && !(conn.session.resend_due() && now < end + timeout_ns) {
            break;
        }
        let stream = match connect(local_ip, conn.plan.target.addr, conn.plan.timeout) {
            Ok(stream) => stream,
            Err(e) => {
                conn.stats
                    .borrow_mut()
                    .failure(format!("connect: {e}").as_bytes());
                glommio::timer::sleep(RETRY_PAUSE).await;
                continue;
            }
        };
        conn.stats.borrow_mut().connections += 1;
        let ended = match &conn.plan.tls {
            None => conn.serve(stream).await,
            Some(connector) => {
                let name = ServerName::IpAddress(conn.plan.target.addr.ip().into());
                match connector.clone().connect(name, stream).await {
                    Ok(tls) => conn.serve(tls).await,
                    Err(e) => {
                        conn.stats
                            .borrow_mut()
                            .failure(format!("TLS handshake: {e}").as_bytes());
                        glommio::timer::sleep(RETRY_PAUSE).await;
                        Ended::Reconnect
                    }
                }
            }
        };
        if let Ended::Done = ended {
            break;
        }
    }
    // A lost request that found no new connection in time.
    conn.session.abandon(false, &mut conn.stats.borrow_mut());
}

/// A TCP connection from `local_ip` (any port) to `target`. The connect itself
/// blocks the executor briefly; on loopback it completes at once.
fn connect(
    local_ip: std::net::IpAddr,
    target: SocketAddr,
    timeout: Duration,
) -> io::Result<glommio::net::TcpStream> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(
        Domain::for_address(target),
        Type::STREAM,
        Some(Protocol::TCP),
    )?;
    socket.bind(&SocketAddr::new(local_ip, 0).into())?;
    socket.set_tcp_nodelay(true)?;
    socket.connect_timeout(&target.into(), timeout)?;
    socket.set_nonblocking(true)?;
    // SAFETY: the fd comes from a socket we own and hand over whole.
    let stream = unsafe { glommio::net::TcpStream::from_raw_fd(socket.into_raw_fd()) };
    stream
        .set_read_timeout(Some(timeout))
        .map_err(|e| io::Error::other(e.to_string()))?;
    Ok(stream)
}

impl Conn {
    /// Requests and answers on one open connection.
    async fn serve<S: AsyncRead + AsyncWrite + Unpin>(&mut self, mut stream: S) -> Ended {
        loop {
            // `self.request` still holds the bytes of a request to resend.
            if !self.session.resend(&mut self.stats.borrow_mut()) {
                let Some(sent_ns) = self.next_send().await else {
                    return Ended::Done;
                };
                self.request.clear();
                self.session.write_request(
                    &self.plan.model,
                    &mut self.rng,
                    sent_ns,
                    &mut self.request,
                    &mut self.stats.borrow_mut(),
                );
            }
            let written = async {
                stream.write_all(&self.request).await?;
                stream.flush().await
            };
            if written.await.is_err() {
                self.session.lost(false, &mut self.stats.borrow_mut());
                return Ended::Reconnect;
            }
            if !self.read_answer(&mut stream).await {
                return Ended::Reconnect;
            }
        }
    }

    /// When the next request goes (now in the closed loop, on schedule in the
    /// open loop), as the time it counts from; `None` when the run is over.
    async fn next_send(&mut self) -> Option<u64> {
        let end = self.plan.duration_ns;
        let now = self.env.now_ns();
        if now >= end {
            return None;
        }
        let Some(schedule) = self.schedule else {
            return Some(now);
        };
        let timeout_ns = self.plan.timeout.as_nanos() as u64;
        loop {
            let intended = schedule.due_ns(self.scheduled);
            if intended >= end {
                return None;
            }
            // Hopelessly behind: those requests are skipped, not sent late.
            if intended + timeout_ns < now {
                self.scheduled += 1;
                self.stats.borrow_mut().skipped += 1;
                continue;
            }
            self.scheduled += 1;
            if intended > now {
                glommio::timer::sleep(Duration::from_nanos(intended - now)).await;
            }
            // Latency counts from the intended time (no coordinated omission).
            return Some(intended);
        }
    }

    /// Reads and checks one answer. `false` when the connection must be
    /// replaced (closed or reset by the server, a time-out, broken framing).
    async fn read_answer<S: AsyncRead + Unpin>(&mut self, stream: &mut S) -> bool {
        let mut filled = 0;
        loop {
            if filled == self.buf.len() {
                self.buf.resize(self.buf.len() * 2, 0);
            }
            let n = match stream.read(&mut self.buf[filled..]).await {
                Ok(n) => n,
                Err(e) if timed_out(&e) => {
                    self.session.abandon(true, &mut self.stats.borrow_mut());
                    return false;
                }
                // A reset, or TLS without close_notify: as a close.
                Err(_) => 0,
            };
            if n == 0 {
                self.session.lost(filled > 0, &mut self.stats.borrow_mut());
                return false;
            }
            filled += n;
            let mut stats = self.stats.borrow_mut();
            match frame(&self.buf[..filled]) {
                Ok(None) => {}
                Ok(Some(framed)) => {
                    let now = self.env.now_ns();
                    self.session
                        .on_answer(&self.buf[..filled], framed, now, &mut stats);
                    if framed.len != filled {
                        // Bytes after the answer, which nothing asked for.
                        stats.invalid(Invalid::Malformed);
                        return false;
                    }
                    // `Connection: close` (or HTTP/1.0): answered, and the
                    // next request goes on a new connection; nothing counts.
                    return !framed.close;
                }
                Err(why) => {
                    self.session.fail(why, &mut stats);
                    return false;
                }
            }
        }
    }
}

/// A read that ran into the connection's read time-out.
fn timed_out(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
    )
}

#[cfg(test)]
mod tests {
    use super::Schedule;

    #[test]
    fn open_loop_connections_take_turns() {
        // 4 req/s over 4 connections: one request every 250 ms, in turn.
        let due: Vec<Vec<u64>> = (0..4)
            .map(|c| {
                let schedule = Schedule::new(4.0, c, 4);
                (0..3).map(|n| schedule.due_ns(n) / 1_000_000).collect()
            })
            .collect();
        assert_eq!(
            due,
            [
                [0, 1000, 2000],
                [250, 1250, 2250],
                [500, 1500, 2500],
                [750, 1750, 2750]
            ]
        );
    }
}
