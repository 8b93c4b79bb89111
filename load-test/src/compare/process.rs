//! The processes of a comparison: a tracker started from its command with
//! its output in a log, waited for until it serves the target, and killed
//! when dropped.

use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub(super) enum Proto {
    Udp(SocketAddr),
    /// HTTP, or HTTPS when `true`.
    Http(SocketAddr, bool),
    /// WebSocket, or over TLS when `true`.
    Ws(SocketAddr, bool),
}

impl Proto {
    /// Whether something serves the target: a UDP connect is answered, or a
    /// TCP connection taken.
    pub(super) fn answers(&self) -> bool {
        match *self {
            Proto::Udp(addr) => udp_answers(addr),
            Proto::Http(addr, _) | Proto::Ws(addr, _) => {
                TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok()
            }
        }
    }
}

impl Proto {
    /// Whether nothing serves the target, waiting up to `timeout` for it to
    /// stop: a tracker killed a moment ago may keep its listening socket
    /// for a while after it has been reaped (its io_uring ring, and the
    /// accept the ring holds, are torn down after the process).
    pub(super) fn free_within(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while self.answers() {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        true
    }
}

/// A tracker process, killed when dropped.
pub(super) struct TrackerProcess(Child);

impl TrackerProcess {
    /// Starts `command` with its output in `log`.
    pub(super) fn start(command: &[String], log: std::fs::File) -> Result<Self, String> {
        let (program, args) = command.split_first().ok_or("empty tracker command")?;
        let child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(
                log.try_clone()
                    .map_err(|e| format!("cannot share the log file: {e}"))?,
            )
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start {program}: {e}"))?;
        Ok(TrackerProcess(child))
    }

    /// Waits until the tracker answers a UDP connect or takes a TCP connection.
    pub(super) fn wait_ready(&mut self, proto: &Proto, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.0.try_wait() {
                return Err(format!("the tracker exited ({status})"));
            }
            if proto.answers() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err("the tracker did not answer in time".into())
    }
}

impl Drop for TrackerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn udp_answers(addr: SocketAddr) -> bool {
    let bind: SocketAddr = if addr.is_ipv4() {
        ([127, 0, 0, 1], 0).into()
    } else {
        "[::1]:0".parse().expect("an address")
    };
    let Ok(socket) = UdpSocket::bind(bind) else {
        return false;
    };
    let _ = socket.set_read_timeout(Some(Duration::from_millis(100)));
    let mut connect = Vec::new();
    tracker_proto::udp::Request::Connect(tracker_proto::udp::ConnectRequest {
        transaction_id: tracker_proto::udp::TransactionId(1),
    })
    .write(&mut connect);
    let mut buf = [0u8; 64];
    socket.send_to(&connect, addr).is_ok() && matches!(socket.recv_from(&mut buf), Ok((16, _)))
}
