//! Starting the real `tracker` binary for integration tests.
#![allow(dead_code)] // each test file uses its own part of this module

use std::io::Write;
use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running tracker process, killed when dropped.
pub struct Tracker {
    child: Child,
    /// The UDP addresses it serves, in the order they were given.
    pub udp: Vec<SocketAddr>,
    _config: Option<tempfile_path::TempPath>,
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
    config: Option<String>,
}

impl Tracker {
    pub fn builder() -> TrackerBuilder {
        TrackerBuilder {
            args: vec!["--workers".into(), "2".into(), "--no-pin".into()],
            udp: Vec::new(),
            config: None,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the process to exit on its own (for start-up error tests).
    pub fn wait_exit(mut self, timeout: Duration) -> (Option<i32>, String) {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                let mut err = String::new();
                use std::io::Read;
                if let Some(mut s) = self.child.stderr.take() {
                    let _ = s.read_to_string(&mut err);
                }
                return (status.code(), err);
            }
            assert!(start.elapsed() < timeout, "tracker did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// True while the process has not exited.
    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
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

    /// Serve UDP on this address (a free port on 127.0.0.1 if `None`).
    pub fn udp(mut self, addr: Option<SocketAddr>) -> Self {
        let addr = addr.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], free_port())));
        self.udp.push(addr);
        self
    }

    /// TOML written to a file and passed with `-c`.
    pub fn config(mut self, toml: &str) -> Self {
        self.config = Some(toml.into());
        self
    }

    /// Starts the tracker without waiting for it to answer.
    pub fn spawn(self) -> Tracker {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tracker"));
        cmd.args(&self.args);
        for addr in &self.udp {
            cmd.arg("--udp").arg(addr.to_string());
        }
        let config = self.config.map(|text| {
            let path = tempfile_path::TempPath::new("tracker-test", "toml");
            std::fs::File::create(&path.0)
                .unwrap()
                .write_all(text.as_bytes())
                .unwrap();
            cmd.arg("-c").arg(&path.0);
            path
        });
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
            _config: config,
        }
    }

    /// Starts the tracker and waits until every UDP address answers a connect.
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
                assert!(tracker.is_running(), "tracker exited during start-up");
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
        tracker
    }
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
    tracker_common::runtime::allowed_cpus().unwrap().len()
}
