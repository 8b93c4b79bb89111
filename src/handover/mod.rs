//! Upgrades without a gap: a new tracker, started with `--take-over`, takes
//! the running one's sockets and swarms.
//!
//! The running tracker listens on a Unix socket (`runtime.control_socket`),
//! mode 0600 and owned by the user it serves as; it lets in root, and the
//! successor it started itself on SIGUSR2 (`SO_PEERCRED`, `SO_PEERPIDFD`),
//! and refuses any other process, of its own user too. The exchange, in
//! lines of text:
//!
//! ```text
//! new -> old  take-over 1
//! old -> new  workers N / KIND WORKER ADDR ... / end     with every socket
//!             (SCM_RIGHTS): each worker's UDP sockets and listeners, the
//!             metrics listeners, the control socket (with its file's id)
//! new -> old  go          once everything that can fail at its start has
//! old         stops as on SIGTERM: no more reading, answers what it took
//! old -> new  state LEN   and LEN bytes: the swarms, as a state file
//! new -> old  ok          and the old one exits 0
//! ```
//!
//! The sockets are the same open sockets in both processes, so a datagram
//! or a connection that arrives while neither reads waits in its queue. Up
//! to `go` the old tracker serves as before: a new one that fails or goes
//! away leaves it serving. After `go` it waits on the new one at most
//! `runtime.handover_timeout_secs` at each step; a new one that goes away
//! or falls silent before `ok` is killed (it holds every socket), and the
//! old one serves again from the copies of the sockets and the swarms it
//! still holds. Only one it cannot kill makes it save its state file and
//! exit 1, for a restart.
//!
//! Under systemd, the PID file (`pid_file`) names the process that serves:
//! the old one names its successor as it exits, and systemd, reading it
//! then, supervises the successor as its own child.
//!
//! `give` is the running tracker's side (and how SIGUSR2 starts a
//! successor), `take` the new one's; the manifest and the checks both sides
//! make are here.

mod control;
mod give;
mod pid_file;
mod take;

pub use control::{bind_control, ControlFile};
pub use give::{copies, serve_control, start_successor, Handing, Pending, Successors};
pub use pid_file::{MainPid, PidFile};
pub use take::TakeOver;

use std::io::{self, BufRead, Read};
use std::net::{TcpListener, UdpSocket};
use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::Duration;

use tracker_net::fd_pass::peer_credentials;
use tracker_proto::{decode_hex, Hex};

use crate::start::bind::WorkerSockets;

/// The version of the exchange; both ends must speak the same.
const VERSION: u32 = 1;
/// How long either end waits for the other at each step before the
/// `go` (after it, the old one waits `runtime.handover_timeout_secs`).
const STEP_TIMEOUT: Duration = Duration::from_secs(60);
/// The longest manifest: a line per socket, at most `MAX_FDS` of them.
const MAX_MANIFEST: usize = 64 << 10;

/// One socket handed over, with what it serves.
pub struct Handed {
    pub kind: Kind,
    pub worker: usize,
    pub addr: String,
    pub fd: OwnedFd,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Udp,
    Http,
    Https,
    Metrics,
    /// The private site API's listener.
    SiteApi,
    /// A port's lock, which trackers of earlier versions send: dropped.
    Lock,
    Control,
}
impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Udp => "udp",
            Kind::Http => "http",
            Kind::Https => "https",
            Kind::Metrics => "metrics",
            Kind::SiteApi => "site_api",
            Kind::Lock => "lock",
            Kind::Control => "control",
        }
    }

    fn parse(name: &str) -> Option<Kind> {
        [
            Kind::Udp,
            Kind::Http,
            Kind::Https,
            Kind::Metrics,
            Kind::SiteApi,
            Kind::Lock,
            Kind::Control,
        ]
        .into_iter()
        .find(|k| k.name() == name)
    }
}

/// What a hand-over tells the new tracker besides its sockets.
pub struct Manifest {
    pub workers: usize,
    /// Keys the UDP connection ids: the new tracker takes it when its config
    /// sets none, so that clients' ids stay valid across the hand-over.
    pub secret: [u8; 16],
}

/// The manifest's text: the worker count, the secret, a line per socket in
/// the order of their descriptors (what `parse_manifest` reads).
fn write_manifest(manifest: &Manifest, handed: &[Handed]) -> String {
    let mut text = format!(
        "workers {}\nsecret {}\n",
        manifest.workers,
        Hex(&manifest.secret)
    );
    for h in handed {
        text.push_str(&format!("{} {} {}\n", h.kind.name(), h.worker, h.addr));
    }
    text.push_str("end\n");
    text
}

fn parse_manifest(text: &str, fds: Vec<OwnedFd>) -> Result<(Manifest, Vec<Handed>), String> {
    let mut lines = text.lines();
    let workers = lines
        .next()
        .and_then(|l| l.strip_prefix("workers "))
        .and_then(|n| n.parse::<usize>().ok())
        .ok_or("a manifest without its worker count")?;
    let hex = lines
        .next()
        .and_then(|l| l.strip_prefix("secret "))
        .ok_or("a manifest without its secret")?;
    let secret = decode_hex(hex.as_bytes()).ok_or("a secret that is not hex")?;
    let mut fds = fds.into_iter();
    let mut handed = Vec::new();
    for line in lines.take_while(|l| *l != "end") {
        let mut words = line.split(' ');
        let (Some(kind), Some(worker), Some(addr)) = (
            words.next().and_then(Kind::parse),
            words.next().and_then(|w| w.parse().ok()),
            words.next(),
        ) else {
            return Err(format!("a manifest line `{line}`"));
        };
        let fd = fds.next().ok_or("fewer sockets than the manifest lists")?;
        handed.push(Handed {
            kind,
            worker,
            addr: addr.to_string(),
            fd,
        });
    }
    if fds.next().is_some() {
        return Err("more sockets than the manifest lists".into());
    }
    Ok((Manifest { workers, secret }, handed))
}

/// The control socket handed over, and the id of its file.
type HandedControl = (UnixListener, String);

/// The sockets handed over, as the workers take them: worker `i`'s to
/// worker `i`, each kind in the order of the manifest, so that every
/// `SO_REUSEPORT` group keeps its order; and the control socket, with its
/// file's id.
fn distribute(
    handed: Vec<Handed>,
    workers: usize,
) -> Result<(Vec<WorkerSockets>, Option<HandedControl>), String> {
    let mut per_worker: Vec<WorkerSockets> =
        (0..workers).map(|_| WorkerSockets::default()).collect();
    let mut control = None;
    for h in handed {
        match h.kind {
            // The lock of a port, from a tracker of an earlier version: no
            // longer used (see `crate::start::instance`).
            Kind::Lock => drop(h.fd),
            Kind::Control => control = Some((UnixListener::from(h.fd), h.addr)),
            kind => {
                let sockets = per_worker
                    .get_mut(h.worker)
                    .ok_or_else(|| format!("a socket of worker {}", h.worker))?;
                match kind {
                    Kind::Udp => sockets.udp.push(UdpSocket::from(h.fd)),
                    Kind::Http => sockets.http.push(TcpListener::from(h.fd)),
                    Kind::Https => sockets.https.push(TcpListener::from(h.fd)),
                    Kind::SiteApi => sockets.site_api.push(TcpListener::from(h.fd)),
                    _ => sockets.metrics.push(TcpListener::from(h.fd)),
                }
            }
        }
    }
    Ok((per_worker, control))
}

/// One line, without its newline; at most 256 bytes.
fn read_line(reader: &mut impl BufRead) -> io::Result<String> {
    let mut line = String::new();
    reader.take(256).read_line(&mut line)?;
    if !line.ends_with('\n') {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    line.pop();
    Ok(line)
}

/// The new tracker's check of the old one: refuses a peer that runs as
/// another user than ours, root, or `also` (the user a new tracker started
/// as root will become: the old one runs as it). The old one's check of the
/// new one is stricter (`give::admit`).
fn check_peer(stream: &UnixStream, also: Option<libc::uid_t>) -> io::Result<()> {
    let cred = peer_credentials(stream)?;
    // SAFETY: geteuid cannot fail.
    let euid = unsafe { libc::geteuid() };
    if cred.uid != euid && cred.uid != 0 && Some(cred.uid) != also {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("its peer runs as uid {}, not {euid} or root", cred.uid),
        ));
    }
    Ok(())
}

fn peer_pid(stream: &UnixStream) -> i32 {
    peer_credentials(stream).map_or(0, |c| c.pid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    const SECRET: &str = "00112233445566778899aabbccddeeff";

    #[test]
    fn a_manifest_names_each_socket_in_order() {
        let fds: Vec<OwnedFd> = (0..3)
            .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap().into())
            .collect();
        let (manifest, handed) = parse_manifest(
            &format!(
                "workers 2\nsecret {SECRET}\nudp 0 127.0.0.1:1\nudp 1 127.0.0.1:1\nlock 0 -\nend\n"
            ),
            fds,
        )
        .unwrap();
        assert_eq!(manifest.workers, 2);
        assert_eq!(manifest.secret[..2], [0x00, 0x11]);
        let kinds: Vec<(Kind, usize)> = handed.iter().map(|h| (h.kind, h.worker)).collect();
        assert_eq!(kinds, [(Kind::Udp, 0), (Kind::Udp, 1), (Kind::Lock, 0)]);
    }

    #[test]
    fn a_manifest_and_its_sockets_must_agree() {
        let fds = || -> Vec<OwnedFd> { vec![UdpSocket::bind("127.0.0.1:0").unwrap().into()] };
        let with = |body: &str| format!("workers 1\nsecret {SECRET}\n{body}end\n");
        assert!(parse_manifest(&with(""), fds()).is_err());
        assert!(parse_manifest(&with("udp 0 a\nudp 0 b\n"), fds()).is_err());
        assert!(parse_manifest(&with("teapot 0 a\n"), fds()).is_err());
        assert!(parse_manifest("workers 1\nudp 0 a\nend\n", fds()).is_err());
        assert!(parse_manifest("workers 1\nsecret 00\nudp 0 a\nend\n", fds()).is_err());
        assert!(parse_manifest(&with("udp 0 a\n"), fds()).is_ok());
    }
}
