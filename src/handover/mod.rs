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
//!             metrics listeners, the control socket (with its file's id);
//!             with AF_XDP, each queue's socket and its UMEM's memfd, and
//!             each interface's BPF link, program and map of sockets
//! new -> old  go          once everything that can fail at its start has
//! old         stops as on SIGTERM: no more reading, answers what it took
//! old -> new  state LEN   and LEN bytes: the swarms, as a state file
//! new -> old  ok          and the old one exits 0
//! ```
//!
//! The sockets are the same open sockets in both processes, so a datagram
//! or a connection that arrives while neither reads waits in its queue. So
//! do AF_XDP's: the program stays attached, and what arrives waits on the
//! RX rings; the new tracker maps each socket's rings and UMEM again and
//! finds its frames where the old one's table in the UMEM left them, once
//! the old one has stopped (`crate::start::xdp`). It needs no capability
//! for any of it. A new one whose config asks for other interfaces or
//! queues is refused before the `go`, as one asking for other addresses. Up
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
pub use give::{
    copies, serve_control, start_successor, xdp_copies, Handing, Pending, Reclaimed, Successors,
    XdpCopies,
};
pub use pid_file::{MainPid, PidFile};
pub use take::{TakeOver, Taking};

use std::io::{self, BufRead, Read};
use std::net::{TcpListener, UdpSocket};
use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::Duration;

use tracker_net::fd_pass::peer_credentials;
use tracker_net::xdp::xsk::XskConfig;
use tracker_proto::{decode_hex, Hex};

use crate::start::bind::WorkerSockets;
use crate::start::xdp::{Taken, TakenProgram, TakenQueue};

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
    /// An AF_XDP socket (`NAME:IFINDEX:QUEUE:FRAMES:FRAME_SIZE:MODE`),
    /// followed by its UMEM's memfd (the same label).
    Xsk,
    Umem,
    /// An interface's XDP program: its BPF link (`NAME:IFINDEX:MODE`), the
    /// program and its map of sockets (`NAME`).
    XdpLink,
    XdpProgram,
    XdpMap,
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
            Kind::Xsk => "xsk",
            Kind::Umem => "umem",
            Kind::XdpLink => "xdp_link",
            Kind::XdpProgram => "xdp_prog",
            Kind::XdpMap => "xdp_map",
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
            Kind::Xsk,
            Kind::Umem,
            Kind::XdpLink,
            Kind::XdpProgram,
            Kind::XdpMap,
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
fn write_manifest<'a>(manifest: &Manifest, handed: impl IntoIterator<Item = &'a Handed>) -> String {
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
/// `SO_REUSEPORT` group keeps its order; the control socket, with its
/// file's id; and AF_XDP's sockets and programs.
fn distribute(
    handed: Vec<Handed>,
    workers: usize,
) -> Result<(Vec<WorkerSockets>, Option<HandedControl>, Taken), String> {
    let mut per_worker: Vec<WorkerSockets> =
        (0..workers).map(|_| WorkerSockets::default()).collect();
    let mut control = None;
    let mut xdp = XdpParts::default();
    for h in handed {
        match h.kind {
            // The lock of a port, from a tracker of an earlier version: no
            // longer used (see `crate::start::instance`).
            Kind::Lock => drop(h.fd),
            Kind::Control => control = Some((UnixListener::from(h.fd), h.addr)),
            Kind::Xsk | Kind::Umem | Kind::XdpLink | Kind::XdpProgram | Kind::XdpMap => {
                xdp.add(h)?
            }
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
    if xdp.queues.iter().any(|q| q.worker >= workers) {
        return Err("an AF_XDP socket of a worker past the last".into());
    }
    Ok((per_worker, control, xdp.finish()?))
}

/// AF_XDP's entries of a manifest, as they come: a socket waits for its
/// UMEM, an interface for its program and map.
#[derive(Default)]
struct XdpParts {
    queues: Vec<TakenQueue>,
    socket: Option<(usize, String, OwnedFd)>,
    links: Vec<(String, u32, bool, OwnedFd)>,
    programs: Vec<(String, OwnedFd)>,
    maps: Vec<(String, OwnedFd)>,
}

impl XdpParts {
    fn add(&mut self, h: Handed) -> Result<(), String> {
        let bad = || format!("an AF_XDP entry `{} {}`", h.kind.name(), h.addr);
        match h.kind {
            Kind::Xsk => {
                if self.socket.is_some() {
                    return Err(bad());
                }
                self.socket = Some((h.worker, h.addr, h.fd));
            }
            Kind::Umem => {
                let Some((worker, label, socket)) = self.socket.take() else {
                    return Err(bad());
                };
                let (name, config) = parse_queue_label(&label).ok_or_else(bad)?;
                if label != h.addr {
                    return Err(bad());
                }
                self.queues.push(TakenQueue {
                    worker,
                    name,
                    config,
                    socket,
                    umem: h.fd,
                });
            }
            Kind::XdpLink => {
                let (name, ifindex, generic) = parse_link_label(&h.addr).ok_or_else(bad)?;
                self.links.push((name, ifindex, generic, h.fd));
            }
            Kind::XdpProgram => self.programs.push((h.addr, h.fd)),
            _ => self.maps.push((h.addr, h.fd)),
        }
        Ok(())
    }

    /// Each interface whole, and each socket with its UMEM.
    fn finish(mut self) -> Result<Taken, String> {
        if self.socket.is_some() {
            return Err("an AF_XDP socket without its UMEM".into());
        }
        let mut programs = Vec::new();
        for (name, ifindex, generic, link) in self.links {
            let take = |from: &mut Vec<(String, OwnedFd)>, what: &str| {
                let at = from
                    .iter()
                    .position(|(n, _)| *n == name)
                    .ok_or_else(|| format!("the XDP link of {name} without its {what}"))?;
                Ok::<OwnedFd, String>(from.swap_remove(at).1)
            };
            let program = take(&mut self.programs, "program")?;
            let map = take(&mut self.maps, "map")?;
            programs.push(TakenProgram {
                name,
                ifindex,
                generic,
                link,
                program,
                map,
            });
        }
        if !self.programs.is_empty() || !self.maps.is_empty() {
            return Err("an XDP program or map without its link".into());
        }
        if self
            .queues
            .iter()
            .any(|q| !programs.iter().any(|p| p.name == q.name))
            || (self.queues.is_empty() != programs.is_empty())
        {
            return Err("AF_XDP sockets and programs that do not go together".into());
        }
        Ok(Taken {
            programs,
            queues: self.queues,
        })
    }
}

/// An AF_XDP socket's label in a manifest, from its interface's name and
/// what it was opened with (an interface's name holds no `:`).
fn queue_label(name: &str, config: &XskConfig) -> String {
    format!(
        "{name}:{}:{}:{}:{}:{}",
        config.ifindex,
        config.queue,
        config.frames,
        config.frame_size,
        if config.zero_copy {
            "zero-copy"
        } else {
            "copy"
        }
    )
}

fn parse_queue_label(label: &str) -> Option<(String, XskConfig)> {
    let mut parts = label.split(':');
    let name = parts.next().filter(|n| !n.is_empty())?.to_string();
    let mut number = || parts.next()?.parse::<u32>().ok();
    let (ifindex, queue, frames, frame_size) = (number()?, number()?, number()?, number()?);
    let zero_copy = match parts.next()? {
        "zero-copy" => true,
        "copy" => false,
        _ => return None,
    };
    parts.next().is_none().then_some((
        name,
        XskConfig {
            ifindex,
            queue,
            frames,
            frame_size,
            zero_copy,
        },
    ))
}

/// An XDP link's label: its interface's name and index, and the mode.
fn link_label(name: &str, ifindex: u32, generic: bool) -> String {
    format!(
        "{name}:{ifindex}:{}",
        if generic { "generic" } else { "native" }
    )
}

fn parse_link_label(label: &str) -> Option<(String, u32, bool)> {
    let mut parts = label.split(':');
    let name = parts.next().filter(|n| !n.is_empty())?.to_string();
    let ifindex = parts.next()?.parse().ok()?;
    let generic = match parts.next()? {
        "generic" => true,
        "native" => false,
        _ => return None,
    };
    parts.next().is_none().then_some((name, ifindex, generic))
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

    /// AF_XDP's entries come apart and together again: a socket with the
    /// UMEM after it, an interface's link, program and map by its name.
    #[test]
    fn af_xdp_entries_go_together() {
        let config = XskConfig {
            ifindex: 7,
            queue: 3,
            frames: 4096,
            frame_size: 2048,
            zero_copy: true,
        };
        let label = queue_label("eth0", &config);
        assert_eq!(label, "eth0:7:3:4096:2048:zero-copy");
        assert_eq!(parse_queue_label(&label), Some(("eth0".into(), config)));
        assert_eq!(parse_queue_label("eth0:7:3:4096:2048:fast"), None);
        assert_eq!(parse_queue_label("eth0:7:3:4096:2048:copy:x"), None);
        assert_eq!(parse_queue_label(":7:3:4096:2048:copy"), None);
        assert_eq!(
            parse_link_label(&link_label("eth0", 7, true)),
            Some(("eth0".into(), 7, true))
        );
        assert_eq!(parse_link_label("eth0:7"), None);

        let fd = || -> OwnedFd { UdpSocket::bind("127.0.0.1:0").unwrap().into() };
        let entry = |kind, worker, addr: &str| Handed {
            kind,
            worker,
            addr: addr.to_string(),
            fd: fd(),
        };
        let whole = || {
            vec![
                entry(Kind::Udp, 1, "127.0.0.1:1"),
                entry(Kind::Xsk, 1, &label),
                entry(Kind::Umem, 1, &label),
                entry(Kind::XdpLink, 0, "eth0:7:native"),
                entry(Kind::XdpProgram, 0, "eth0"),
                entry(Kind::XdpMap, 0, "eth0"),
            ]
        };
        let (per_worker, _, taken) = distribute(whole(), 2).unwrap();
        assert_eq!(per_worker[1].udp.len(), 1);
        assert_eq!(taken.queues.len(), 1);
        assert_eq!(
            (taken.queues[0].worker, taken.queues[0].config),
            (1, config)
        );
        assert_eq!(taken.programs.len(), 1);
        assert!(!taken.programs[0].generic);
        // A socket without its UMEM, a program without its map, a socket
        // of a worker past the last, or sockets with no program.
        for broken in [
            |mut h: Vec<Handed>| {
                h.remove(2);
                h
            },
            |mut h: Vec<Handed>| {
                h.remove(5);
                h
            },
            |mut h: Vec<Handed>| {
                h.truncate(3);
                h
            },
        ] {
            assert!(distribute(broken(whole()), 2).is_err());
        }
        assert!(distribute(whole(), 1).is_err());
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
