//! Starting the real `tracker` binary for integration tests.
#![allow(dead_code)] // each test file uses its own part of this module

pub mod netns;
pub mod private;
pub mod private_peer;
pub mod site_db;
pub mod udp_client;
pub mod wire;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running tracker process, killed when dropped.
pub struct Tracker {
    child: Child,
    /// The UDP addresses it serves, in the order they were given.
    pub udp: Vec<SocketAddr>,
    /// The plain HTTP addresses it serves, in the order they were given.
    pub http: Vec<SocketAddr>,
    /// The HTTPS addresses it serves, in the order they were given.
    pub https: Vec<SocketAddr>,
    /// The certificate HTTPS serves (with `https`), and the files it came from.
    pub tls: Option<TlsFiles>,
    /// The state file it saves to and loads from.
    pub state: PathBuf,
    /// Its Prometheus endpoint, when the builder asked for one.
    pub metrics: Option<SocketAddr>,
    _config: tempfile_path::TempPath,
    /// The builder's own state file, removed with the tracker.
    _state: Option<tempfile_path::TempPath>,
}

/// A test certificate for localhost, 127.0.0.1 and ::1: signed by its own
/// key ([`TestCert::new`]) or by a test CA ([`TestCert::signed_by_test_ca`]).
#[derive(Clone)]
pub struct TestCert {
    pub cert_pem: String,
    pub key_pem: String,
    /// The certificate a client is to trust: `cert_pem` itself when it is
    /// self-signed, else the test CA's.
    pub root_pem: String,
}

const TEST_CERT_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

impl TestCert {
    pub fn new() -> TestCert {
        let names: Vec<String> = TEST_CERT_NAMES.iter().map(|n| n.to_string()).collect();
        let certified = rcgen::generate_simple_self_signed(names).expect("rcgen");
        let cert_pem = certified.cert.pem();
        TestCert {
            root_pem: cert_pem.clone(),
            cert_pem,
            key_pem: certified.key_pair.serialize_pem(),
        }
    }

    /// A server certificate signed by a CA made for it alone (`root_pem`):
    /// for clients that trust a CA but refuse a self-signed server
    /// certificate as its own root, such as browsers.
    pub fn signed_by_test_ca() -> TestCert {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
            KeyUsagePurpose,
        };
        let ca_key = KeyPair::generate().expect("rcgen: CA key");
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("rcgen: CA");
        ca.distinguished_name
            .push(DnType::CommonName, "tracker tests' CA");
        ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_cert = ca.self_signed(&ca_key).expect("rcgen: CA certificate");

        let key = KeyPair::generate().expect("rcgen: server key");
        let names: Vec<String> = TEST_CERT_NAMES.iter().map(|n| n.to_string()).collect();
        let mut leaf = CertificateParams::new(names).expect("rcgen: server");
        leaf.distinguished_name
            .push(DnType::CommonName, "localhost");
        leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        leaf.use_authority_key_identifier_extension = true;
        let cert = leaf
            .signed_by(&key, &ca_cert, &ca_key)
            .expect("rcgen: server certificate");
        TestCert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            root_pem: ca_cert.pem(),
        }
    }

    /// A rustls client configuration that trusts `root_pem` only.
    pub fn client_config(&self) -> std::sync::Arc<rustls::ClientConfig> {
        use rustls::pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        let cert = rustls::pki_types::CertificateDer::from_pem_slice(self.root_pem.as_bytes())
            .expect("certificate PEM");
        roots.add(cert).expect("a usable root");
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        std::sync::Arc::new(config)
    }
}

/// A certificate and key written to files the tracker reads (and rereads on
/// SIGHUP).
pub struct TlsFiles {
    pub cert: TestCert,
    pub cert_file: tempfile_path::TempPath,
    pub key_file: tempfile_path::TempPath,
}

impl TlsFiles {
    fn write(cert: TestCert) -> TlsFiles {
        let files = TlsFiles {
            cert,
            cert_file: tempfile_path::TempPath::new("tracker-test-cert", "pem"),
            key_file: tempfile_path::TempPath::new("tracker-test-key", "pem"),
        };
        files.replace(&files.cert.cert_pem, &files.cert.key_pem);
        files
    }

    /// Overwrites the files (for a reload).
    pub fn replace(&self, cert_pem: &str, key_pem: &str) {
        std::fs::write(&self.cert_file.0, cert_pem).unwrap();
        std::fs::write(&self.key_file.0, key_pem).unwrap();
    }
}

/// True when the server closed `tcp` (EOF or reset) within `wait`; bytes
/// that arrive meanwhile (a TLS session ticket, say) are read and dropped.
pub fn closed(tcp: &mut TcpStream, wait: Duration) -> bool {
    let deadline = Instant::now() + wait;
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        tcp.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .unwrap();
        match tcp.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) if Instant::now() < deadline => continue,
            Ok(_) => return false,
            Err(e) => {
                return !matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                )
            }
        }
    }
}

/// A TCP connection to `to` from the address `from` (such as 127.0.0.2, so
/// that a test can be several clients on loopback).
pub fn tcp_from(from: std::net::IpAddr, to: SocketAddr) -> TcpStream {
    let domain = socket2::Domain::for_address(to);
    let socket = socket2::Socket::new(domain, socket2::Type::STREAM, None).expect("socket");
    socket
        .bind(&SocketAddr::new(from, 0).into())
        .expect("bind the source address");
    socket.connect(&to.into()).expect("connect");
    socket.into()
}

/// A port on loopback that was free a moment ago (UDP and TCP).
pub fn free_port() -> u16 {
    loop {
        let udp = UdpSocket::bind("127.0.0.1:0").expect("bind udp");
        let port = udp.local_addr().unwrap().port();
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

pub struct TrackerBuilder {
    args: Vec<String>,
    udp: Vec<SocketAddr>,
    http: Vec<SocketAddr>,
    https: Vec<SocketAddr>,
    cert: Option<TestCert>,
    config: Option<String>,
    allow_root: bool,
    pre_exec: Option<fn() -> std::io::Result<()>>,
    state: Option<PathBuf>,
    env: Vec<(String, String)>,
    metrics: Option<SocketAddr>,
}

impl Tracker {
    pub fn builder() -> TrackerBuilder {
        TrackerBuilder {
            args: vec!["--workers".into(), "2".into(), "--no-pin".into()],
            udp: Vec::new(),
            http: Vec::new(),
            https: Vec::new(),
            cert: None,
            config: None,
            // The suite runs as root on CI machines; the tests of the refusal
            // turn this off.
            allow_root: true,
            pre_exec: None,
            state: None,
            env: Vec::new(),
            metrics: None,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` (SIGTERM, SIGINT, SIGHUP...) to the tracker.
    pub fn signal(&self, signal: i32) {
        // SAFETY: a signal to our own child process.
        let rc = unsafe { libc::kill(self.pid() as libc::pid_t, signal) };
        assert_eq!(rc, 0, "kill: {}", std::io::Error::last_os_error());
    }

    /// Waits for the process to exit on its own (for start-up error tests).
    pub fn wait_exit(mut self, timeout: Duration) -> (Option<i32>, String) {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return (status.code(), self.exited_stderr());
            }
            assert!(start.elapsed() < timeout, "tracker did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the process (SIGTERM) and returns what it wrote to stderr.
    pub fn stop(self) -> String {
        // SAFETY: kill has no memory preconditions; the pid is our child's.
        unsafe { libc::kill(self.pid() as i32, libc::SIGTERM) };
        self.wait_exit(Duration::from_secs(10)).1
    }

    /// Resident memory of the process in KiB (VmRSS of /proc/PID/status).
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS in /proc/PID/status")
    }

    /// The sum over workers of the samples of metric `name` that carry every
    /// label of `labels` (see [`TrackerBuilder::metrics`]).
    pub fn metric(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        let addr = self.metrics.expect("a tracker started with .metrics()");
        let deadline = Instant::now() + Duration::from_secs(10);
        let text = loop {
            if let Some((200, body)) = wire::http_get(addr, "/metrics", Duration::from_secs(5)) {
                break String::from_utf8(body).expect("UTF-8 metrics");
            }
            assert!(Instant::now() < deadline, "no metrics from {addr}");
            std::thread::sleep(Duration::from_millis(50));
        };
        let wanted: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
        text.lines()
            .filter(|line| !line.starts_with('#'))
            .filter_map(|line| {
                let (series, value) = line.rsplit_once(' ')?;
                let (family, labels) = series.split_once('{')?;
                let labels: Vec<&str> = labels.trim_end_matches('}').split(',').collect();
                (family == name && wanted.iter().all(|w| labels.contains(&w.as_str())))
                    .then(|| value.parse::<u64>().ok())
                    .flatten()
            })
            .sum()
    }

    /// True while the process has not exited.
    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// What an exited tracker wrote to stderr (once: the pipe is taken).
    fn exited_stderr(&mut self) -> String {
        let mut err = String::new();
        if let Some(mut s) = self.child.stderr.take() {
            use std::io::Read;
            let _ = s.read_to_string(&mut err);
        }
        err
    }

    /// Panics, with what the tracker wrote to stderr, if it has exited.
    fn assert_running_at_start(&mut self) {
        if let Some(status) = self.child.try_wait().unwrap() {
            let err = self.exited_stderr();
            panic!("tracker exited during start-up ({status}):\n{err}");
        }
    }
}

impl TrackerBuilder {
    /// Replaces the default `--workers 2 --no-pin`.
    pub fn runtime_args(mut self, args: &[&str]) -> Self {
        self.args = args.iter().map(|s| s.to_string()).collect();
        self
    }

    pub fn arg(mut self, arg: &str) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Sets an environment variable for the tracker process.
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Serve UDP on this address (a free port on 127.0.0.1 if `None`).
    pub fn udp(mut self, addr: Option<SocketAddr>) -> Self {
        let addr = addr.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], free_port())));
        self.udp.push(addr);
        self
    }

    /// Serve plain HTTP on this address (a free port on 127.0.0.1 if `None`).
    pub fn http(mut self, addr: Option<SocketAddr>) -> Self {
        let addr = addr.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], free_port())));
        self.http.push(addr);
        self
    }

    /// Serve HTTPS on this address (a free port on 127.0.0.1 if `None`), with
    /// the certificate of `.tls_cert` or else a new test certificate.
    pub fn https(mut self, addr: Option<SocketAddr>) -> Self {
        let addr = addr.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], free_port())));
        self.https.push(addr);
        self
    }

    /// Serve Prometheus metrics on a free port on 127.0.0.1 (see
    /// [`Tracker::metric`]).
    pub fn metrics(mut self) -> Self {
        self.metrics = Some(SocketAddr::from(([127, 0, 0, 1], free_port())));
        self
    }

    /// Serve Prometheus metrics on `addr`: a successor started with
    /// `--take-over` names its predecessor's (see [`Tracker::metric`]).
    pub fn metrics_on(mut self, addr: SocketAddr) -> Self {
        self.metrics = Some(addr);
        self
    }

    /// Leaves out `--allow-root`, which every tracker otherwise gets.
    pub fn without_allow_root(mut self) -> Self {
        self.allow_root = false;
        self
    }

    /// Runs `f` in the child before it becomes the tracker (to set limits).
    pub fn pre_exec(mut self, f: fn() -> std::io::Result<()>) -> Self {
        self.pre_exec = Some(f);
        self
    }

    /// The certificate for HTTPS.
    pub fn tls_cert(mut self, cert: TestCert) -> Self {
        self.cert = Some(cert);
        self
    }

    /// Save to and load from this state file (`--state`), which the test
    /// owns. Without it every tracker gets a state file of its own in the
    /// temp dir, removed when the tracker is dropped, so that no test shares
    /// or leaves one.
    pub fn state_file(mut self, path: &std::path::Path) -> Self {
        self.state = Some(path.to_path_buf());
        self
    }

    /// TOML written to a file and passed with `-c`. Protocols that the test
    /// does not ask for are turned off in it (so that no test binds the
    /// default ports), unless it names their addresses itself.
    pub fn config(mut self, toml: &str) -> Self {
        self.config = Some(toml.into());
        self
    }

    /// Starts the tracker without waiting for it to answer: this build's, or
    /// the binary `TRACKER_TEST_BIN` names (to run a test against another
    /// build, an older one say).
    pub fn spawn(self) -> Tracker {
        let bin = std::env::var_os("TRACKER_TEST_BIN")
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_tracker").into());
        let mut cmd = Command::new(bin);
        cmd.args(&self.args);
        if self.allow_root {
            cmd.arg("--allow-root");
        }
        if let Some(f) = self.pre_exec {
            use std::os::unix::process::CommandExt;
            // SAFETY: `f` only makes async-signal-safe calls (setrlimit).
            unsafe { cmd.pre_exec(f) };
        }
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        for (flag, addrs) in [
            ("--udp", &self.udp),
            ("--http", &self.http),
            ("--https", &self.https),
        ] {
            for addr in addrs {
                cmd.arg(flag).arg(addr.to_string());
            }
        }
        let tls = (!self.https.is_empty()).then(|| {
            let files = TlsFiles::write(self.cert.unwrap_or_else(TestCert::new));
            cmd.arg("--tls-cert").arg(&files.cert_file.0);
            cmd.arg("--tls-key").arg(&files.key_file.0);
            files
        });
        let text = test_config(
            self.config.as_deref().unwrap_or(""),
            [
                ("udp", "listen", self.udp.is_empty()),
                ("http", "listen", self.http.is_empty()),
                ("http", "https_listen", self.https.is_empty()),
            ],
        );
        let config = tempfile_path::TempPath::new("tracker-test", "toml");
        std::fs::File::create(&config.0)
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        cmd.arg("-c").arg(&config.0);
        let (state, own_state) = match self.state {
            Some(path) => (path, None),
            None => {
                let own = tempfile_path::TempPath::new("tracker-test", "state");
                (own.0.clone(), Some(own))
            }
        };
        cmd.arg("--state").arg(&state);
        if let Some(addr) = self.metrics {
            cmd.arg("--metrics").arg(addr.to_string());
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if std::env::var_os("TRACKER_TEST_LOG").is_some() {
            cmd.stderr(Stdio::inherit());
        }
        let child = cmd.spawn().expect("start target/…/tracker");
        Tracker {
            child,
            udp: self.udp,
            http: self.http,
            https: self.https,
            tls,
            state,
            metrics: self.metrics,
            _config: config,
            _state: own_state,
        }
    }

    /// Starts the tracker and waits until every UDP address answers a connect
    /// and every HTTP and HTTPS address answers on a connection.
    pub fn start(self) -> Tracker {
        let mut tracker = self.spawn();
        let deadline = Instant::now() + Duration::from_secs(20);
        for addr in tracker.udp.clone() {
            let bind: SocketAddr = if addr.is_ipv4() {
                "127.0.0.1:0".parse().unwrap()
            } else {
                "[::1]:0".parse().unwrap()
            };
            let sock = UdpSocket::bind(bind).unwrap();
            sock.set_read_timeout(Some(Duration::from_millis(100)))
                .unwrap();
            let mut connect = [0u8; 16];
            connect[..8].copy_from_slice(&0x41727101980i64.to_be_bytes());
            connect[12..].copy_from_slice(&7i32.to_be_bytes());
            loop {
                tracker.assert_running_at_start();
                assert!(
                    Instant::now() < deadline,
                    "tracker did not answer on {addr}"
                );
                let _ = sock.send_to(&connect, addr);
                let mut buf = [0u8; 64];
                if let Ok((16, _)) = sock.recv_from(&mut buf) {
                    break;
                }
            }
        }
        // A connection answered by a worker: plain HTTP answers a request;
        // HTTPS ends the handshake on bytes that are not TLS. Either shows the
        // listener is served, not merely bound.
        let tcp = tracker
            .http
            .iter()
            .map(|a| (*a, &b"GET /x HTTP/1.1\r\n\r\n"[..]));
        let tls = tracker
            .https
            .iter()
            .map(|a| (*a, &b"\x00\x00\x00\x00\x00\r\n\r\n"[..]));
        // Worker 0 serves the metrics endpoint once it is running; a test
        // may rely on what a served listener does from its first connection.
        let metrics = tracker
            .metrics
            .iter()
            .map(|a| (*a, &b"HEAD /metrics HTTP/1.1\r\n\r\n"[..]));
        for (addr, probe) in tcp.chain(tls).chain(metrics).collect::<Vec<_>>() {
            loop {
                tracker.assert_running_at_start();
                assert!(
                    Instant::now() < deadline,
                    "tracker did not answer on {addr}"
                );
                if probe_tcp(addr, probe) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        tracker
    }
}

/// True when a connection to `addr` that sends `probe` gets an answer or is
/// closed by the other side within a short time.
fn probe_tcp(addr: SocketAddr, probe: &[u8]) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    stream
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    if stream.write_all(probe).is_err() {
        return false;
    }
    let mut buf = [0u8; 64];
    match stream.read(&mut buf) {
        // Bytes or an orderly close: either way a worker took the connection.
        Ok(_n) => true,
        // A reset is an answer too (a TLS listener may close on junk at once).
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

/// The key of the function that gives torrents to workers in every tracker
/// a test starts, so that tests know which worker owns a torrent.
pub const OWNER_KEY: [u8; tracker_runtime::owner::KEY_BYTES] = *b"the tests' own owner key";

/// The worker among `workers` that owns `hash` in a tracker a test starts.
pub fn owner_of(hash: &tracker_proto::InfoHash, workers: usize) -> usize {
    tracker_runtime::owner::Owners::new(workers, OWNER_KEY).of(hash)
}

/// `text` (a TOML config) with `table.key = []` added for each entry whose
/// flag is set, unless the table already has that key, and with
/// [`OWNER_KEY`] unless it names a key of its own.
fn test_config<const N: usize>(text: &str, off: [(&str, &str, bool); N]) -> String {
    let mut config: toml::Table = match text.parse() {
        Ok(config) => config,
        // A test of bad config files gets its file as written.
        Err(_) => return text.to_string(),
    };
    let runtime = config
        .entry("runtime")
        .or_insert_with(|| toml::Value::Table(Default::default()));
    if let toml::Value::Table(runtime) = runtime {
        let hex: String = OWNER_KEY.iter().map(|b| format!("{b:02x}")).collect();
        runtime
            .entry("owner_key")
            .or_insert_with(|| toml::Value::String(hex));
        // Tests run side by side in one working directory: a hand-over test
        // names its own control socket.
        runtime
            .entry("control_socket")
            .or_insert_with(|| toml::Value::String(String::new()));
    }
    for (table, key, turn_off) in off {
        if !turn_off {
            continue;
        }
        let entry = config
            .entry(table)
            .or_insert_with(|| toml::Value::Table(Default::default()));
        if let toml::Value::Table(table) = entry {
            table
                .entry(key)
                .or_insert_with(|| toml::Value::Array(Vec::new()));
        }
    }
    toml::to_string(&config).unwrap()
}

impl Drop for Tracker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A path in the temp dir removed on drop (no extra crate for one file).
pub mod tempfile_path {
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicU32, Ordering};

    pub struct TempPath(pub PathBuf);

    impl TempPath {
        pub fn new(prefix: &str, ext: &str) -> Self {
            static N: AtomicU32 = AtomicU32::new(0);
            let n = N.fetch_add(1, Ordering::Relaxed);
            let name = format!("{prefix}-{}-{n}.{ext}", std::process::id());
            TempPath(std::env::temp_dir().join(name))
        }
    }

    impl Drop for TempPath {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

/// The workspace root (for scripts under tests/).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// CPUs this process may run on.
pub fn online_cpus() -> usize {
    tracker_runtime::workers::allowed_cpus().unwrap().len()
}

/// A small, short load for the load generator run in-process: tests that
/// use it check answers and counters, not speed.
pub fn small_load(target: String) -> load_test::config::Config {
    let mut config = load_test::config::Config {
        target: Some(target),
        duration_secs: 1.0,
        workers: Some(1),
        progress: false,
        // Generous, so that a busy machine does not turn into time-outs.
        timeout_ms: 5000,
        ..Default::default()
    };
    config.traffic.torrents = 10_000;
    config.traffic.peers = 50_000;
    config.udp.sources_per_worker = 4;
    config.udp.in_flight = Some(8);
    config.http.connections_per_worker = 4;
    config
}

/// What a script run by [`run_script`] did.
pub struct ScriptRun {
    /// None: it outlived its time and was killed.
    pub status: Option<std::process::ExitStatus>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl ScriptRun {
    pub fn succeeded(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    /// All it wrote, and how it ended, for a failure message.
    pub fn report(&self, name: &str) -> String {
        let ended = match self.status {
            Some(status) => format!("exited with {status}"),
            None => "was killed".to_string(),
        };
        format!(
            "--- stdout ---\n{}--- stderr ---\n{}--- {name} {ended} after {:.1}s ---\n",
            self.stdout,
            self.stderr,
            self.elapsed.as_secs_f64()
        )
    }
}

/// Runs `cmd` (stdin closed, its output collected) in a process group of
/// its own, which is killed whole if it runs past `kill_after` (a script's
/// browsers or clients with it).
pub fn run_script(mut cmd: Command, kill_after: Duration) -> ScriptRun {
    use std::os::unix::process::CommandExt;
    let mut child = cmd
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {cmd:?}: {e}"));
    let collect = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = pipe.read_to_string(&mut s);
            s
        })
    };
    let stdout = collect(Box::new(child.stdout.take().unwrap()));
    let stderr = collect(Box::new(child.stderr.take().unwrap()));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if start.elapsed() > kill_after {
            // SAFETY: a signal to the process group of our own child.
            unsafe { libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL) };
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    ScriptRun {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
        elapsed: start.elapsed(),
    }
}

/// The Python that has Debian's python3-libtorrent (the end-to-end tests' client).
pub const PYTHON: &str = "/usr/bin/python3";

/// Fails the test unless /usr/bin/python3 can import libtorrent.
pub fn require_libtorrent() {
    let out = Command::new(PYTHON)
        .args(["-c", "import libtorrent; print(libtorrent.__version__)"])
        .stdin(Stdio::null())
        .output();
    match out {
        Ok(out) if out.status.success() => {
            eprintln!(
                "libtorrent {} ({PYTHON})",
                String::from_utf8_lossy(&out.stdout).trim()
            );
        }
        Ok(out) => panic!(
            "{PYTHON} cannot import libtorrent; run `apt-get install python3-libtorrent`\n{}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => {
            panic!("cannot run {PYTHON} ({e}); run `apt-get install python3 python3-libtorrent`")
        }
    }
}
