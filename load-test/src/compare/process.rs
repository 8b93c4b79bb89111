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

impl TrackerProcess {
    /// The CPU time the tracker has used so far, all its threads together
    /// (`/proc/PID/stat`'s utime and stime); None where that is not readable.
    /// A command such as `taskset ... tracker` execs the tracker in place, so
    /// the process started is the tracker's.
    pub(super) fn cpu_time(&self) -> Option<Duration> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.0.id())).ok()?;
        // SAFETY: sysconf only reads a constant of the system.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        cpu_ticks(&stat)
            .zip(u64::try_from(hz).ok().filter(|&hz| hz > 0))
            .map(|(ticks, hz)| {
                Duration::from_secs(ticks / hz)
                    + Duration::from_nanos((ticks % hz) * 1_000_000_000 / hz)
            })
    }
}

/// utime + stime, in clock ticks, from the text of `/proc/PID/stat`: the
/// 14th and 15th fields, counted after the command name's closing
/// parenthesis (the name may hold spaces and parentheses itself).
pub(super) fn cpu_ticks(stat: &str) -> Option<u64> {
    let (_, after_name) = stat.rsplit_once(')')?;
    // After the name: state is field 3, so utime (14) is the 12th here.
    let mut fields = after_name.split_ascii_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_are_read_after_the_command_name() {
        let stat = "4242 (tracker (x) y) S 1 4242 4242 0 -1 4194560 1000 0 0 0 \
                    750 250 0 0 20 0 17 0 12345 1000000 2000 18446744073709551615";
        assert_eq!(cpu_ticks(stat), Some(1000));
        assert_eq!(cpu_ticks("4242 (tracker) S 1 2"), None);
        assert_eq!(cpu_ticks("no name here"), None);
    }

    #[test]
    fn this_process_has_a_cpu_time() {
        let child = Command::new("sleep").arg("1").spawn().unwrap();
        let tracker = TrackerProcess(child);
        assert!(tracker.cpu_time().is_some());
    }
}
