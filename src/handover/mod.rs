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
//! away leaves it serving. After `go` the old one's swarms go to its state
//! file too, so a new one that dies before `ok` loses nothing but the time
//! a restart takes.
//!
//! `give` is the running tracker's side (and how SIGUSR2 starts a
//! successor), `take` the new one's; the manifest and the checks both sides
//! make are here.

mod control;
mod give;
mod take;

pub use control::{bind_control, ControlFile};
pub use give::{copies, send_swarms, serve_control, start_successor, Pending, Successors};
pub use take::TakeOver;

use std::io::{self, BufRead, Read};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use tracker_net::fd_pass::peer_credentials;
use tracker_proto::{decode_hex, Hex};

/// The version of the exchange; both ends must speak the same.
const VERSION: u32 = 1;
/// How long either end waits for the other at each step before the
/// `go` (after it, the old one waits this long for `ok`).
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
