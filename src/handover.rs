//! Upgrades without a gap: a new tracker, started with `--take-over`, takes
//! the running one's sockets and swarms.
//!
//! The running tracker listens on a Unix socket (`runtime.control_socket`),
//! mode 0600 and owned by the user it serves as; a peer of any other user
//! than that one or root is refused (`SO_PEERCRED`). The exchange, in lines
//! of text:
//!
//! ```text
//! new -> old  take-over 1
//! old -> new  workers N / KIND WORKER ADDR ... / end     with every socket
//!             (SCM_RIGHTS): each worker's UDP sockets and listeners, the
//!             metrics listeners, the instance locks, the control socket
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

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tracing::{info, warn};
use tracker_net::fd_pass::{peer_credentials, recv_with_fds, send_with_fds, MAX_FDS};
use tracker_proto::{decode_hex, Hex};
use tracker_runtime::shutdown::Shutdown;
use tracker_swarm::state::{Framed, Section, StateFile};

use crate::config::Config;
use crate::start::bind::WorkerSockets;
use crate::start::instance::InstanceLock;

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

/// Copies of every socket a hand-over gives away (its own descriptors, so
/// that the workers keep theirs).
pub fn copies(
    sockets: &[WorkerSockets],
    locks: &InstanceLock,
    control: &UnixListener,
) -> io::Result<Vec<Handed>> {
    let mut handed = Vec::new();
    let mut push = |kind, worker, addr: io::Result<SocketAddr>, fd: io::Result<OwnedFd>| {
        handed.push(Handed {
            kind,
            worker,
            addr: addr?.to_string(),
            fd: fd?,
        });
        Ok::<(), io::Error>(())
    };
    for (worker, s) in sockets.iter().enumerate() {
        for udp in &s.udp {
            push(Kind::Udp, worker, udp.local_addr(), dup(udp))?;
        }
        for (kind, listeners) in [
            (Kind::Http, &s.http),
            (Kind::Https, &s.https),
            (Kind::Metrics, &s.metrics),
        ] {
            for listener in listeners {
                push(kind, worker, listener.local_addr(), dup(listener))?;
            }
        }
    }
    for lock in locks.fds() {
        handed.push(Handed {
            kind: Kind::Lock,
            worker: 0,
            addr: "-".into(),
            fd: dup(lock)?,
        });
    }
    handed.push(Handed {
        kind: Kind::Control,
        worker: 0,
        addr: "-".into(),
        fd: dup(control)?,
    });
    Ok(handed)
}

fn dup(fd: &impl AsFd) -> io::Result<OwnedFd> {
    fd.as_fd().try_clone_to_owned()
}

/// The control socket at `path`, for the user the tracker will serve as
/// (`owner`, when it drops root): None when another tracker holds it (its
/// own hand-overs go on; this one has none).
pub fn bind_control(
    path: &Path,
    owner: Option<(libc::uid_t, libc::gid_t)>,
) -> Result<Option<UnixListener>, String> {
    let fail = |e: io::Error| format!("control socket {}: {e}", path.display());
    match UnixStream::connect(path) {
        Ok(_) => {
            warn!(
                "control socket {}: another tracker listens there; this one takes no \
                 hand-over (set runtime.control_socket to a path of its own)",
                path.display()
            );
            return Ok(None);
        }
        // A socket left by a tracker that is gone, or no file at all.
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
            std::fs::remove_file(path).map_err(fail)?;
        }
        Err(_) => {}
    }
    let listener = UnixListener::bind(path).map_err(fail)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(fail)?;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(path, Some(uid), Some(gid)).map_err(fail)?;
    }
    Ok(Some(listener))
}

/// What a hand-over tells the new tracker besides its sockets.
pub struct Manifest {
    pub workers: usize,
    /// Keys the UDP connection ids: the new tracker takes it when its config
    /// sets none, so that clients' ids stay valid across the hand-over.
    pub secret: [u8; 16],
}

/// Starts this tracker's successor: the binary at the path this one was
/// started from (a new version installed there, typically), with the same
/// arguments and `--take-over`. It inherits the environment, the output,
/// the user and (under systemd) the unit. A thread reports its exit if it
/// fails; once it has taken over, this process is gone.
pub fn start_successor() -> io::Result<u32> {
    let mut args = std::env::args_os();
    let started_as = args.next().map(PathBuf::from);
    // The path, not /proc/self/exe: that is the old binary, even once a new
    // one has replaced it on disk.
    let binary = match started_as {
        Some(path) if path.is_absolute() => path,
        _ => std::env::current_exe()?,
    };
    let mut child = std::process::Command::new(&binary)
        .args(args.filter(|a| a != "--take-over"))
        .arg("--take-over")
        .stdin(std::process::Stdio::null())
        .spawn()?;
    let pid = child.id();
    std::thread::Builder::new()
        .name("successor".into())
        .spawn(move || {
            if let Ok(status) = child.wait() {
                warn!(
                    "the new tracker (pid {pid}) exited ({status}) without taking over; this \
                     one serves on (its log says why)"
                );
            }
        })?;
    Ok(pid)
}

/// Tells the service manager that started the tracker (systemd, through
/// `$NOTIFY_SOCKET`, with `NotifyAccess=all`) that this process is now the
/// service's main one, before the old one exits.
fn notify_main_pid() {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr as UnixAddr, UnixDatagram};
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let path = path.as_encoded_bytes();
    let addr = match path.strip_prefix(b"@") {
        Some(name) => UnixAddr::from_abstract_name(name),
        None => UnixAddr::from_pathname(Path::new(std::ffi::OsStr::from_bytes(path))),
    };
    let message = format!("MAINPID={}\n", std::process::id());
    let sent = UnixDatagram::unbound()
        .and_then(|socket| addr.and_then(|addr| socket.send_to_addr(message.as_bytes(), &addr)));
    if let Err(e) = sent {
        warn!("cannot tell the service manager this is the main process now: {e}");
    }
}

/// Where the old tracker keeps the connection of a hand-over under way, for
/// the swarms once its workers have stopped.
#[derive(Default)]
pub struct Pending(Mutex<Option<UnixStream>>);

impl Pending {
    pub fn take(&self) -> Option<UnixStream> {
        self.0.lock().ok().and_then(|mut s| s.take())
    }
}

/// Serves hand-over requests on `listener` until one goes ahead; its
/// connection is then in `pending` and the workers are stopping.
pub fn serve_control(
    listener: UnixListener,
    handed: Vec<Handed>,
    manifest: Manifest,
    shutdown: Arc<Shutdown>,
    pending: Arc<Pending>,
) -> io::Result<()> {
    std::thread::Builder::new()
        .name("control".into())
        .spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let peer = peer_pid(&stream);
                match offer(&stream, &handed, &manifest) {
                    Ok(true) => {
                        if !shutdown.hand_over() {
                            warn!("hand-over to pid {peer}: refused, the tracker is stopping");
                            continue;
                        }
                        info!(
                            "handing over to pid {peer}: answering requests in flight, then \
                             sending the swarms"
                        );
                        if let Ok(mut slot) = pending.0.lock() {
                            *slot = Some(stream);
                        }
                        return;
                    }
                    Ok(false) => info!("hand-over to pid {peer} abandoned by it: still serving"),
                    Err(e) => warn!("hand-over to pid {peer} refused: {e}; still serving"),
                }
            }
        })?;
    Ok(())
}

/// One request on the control socket: the sockets sent, then whether the
/// new tracker said `go`.
fn offer(stream: &UnixStream, handed: &[Handed], manifest: &Manifest) -> io::Result<bool> {
    check_peer(stream, None)?;
    stream.set_read_timeout(Some(STEP_TIMEOUT))?;
    stream.set_write_timeout(Some(STEP_TIMEOUT))?;
    let mut reader = BufReader::new(stream);
    let request = read_line(&mut reader)?;
    if request != format!("take-over {VERSION}") {
        return Err(io::Error::other(format!("asked `{request}`")));
    }
    if handed.len() > MAX_FDS {
        return Err(io::Error::other(format!(
            "{} sockets, more than one message carries ({MAX_FDS})",
            handed.len()
        )));
    }
    let mut manifest = format!(
        "workers {}\nsecret {}\n",
        manifest.workers,
        Hex(&manifest.secret)
    );
    for h in handed {
        manifest.push_str(&format!("{} {} {}\n", h.kind.name(), h.worker, h.addr));
    }
    manifest.push_str("end\n");
    let fds: Vec<RawFd> = handed.iter().map(|h| h.fd.as_raw_fd()).collect();
    send_with_fds(stream, manifest.as_bytes(), &fds)?;
    match read_line(&mut reader) {
        Ok(line) if line == "go" => Ok(true),
        Ok(line) => Err(io::Error::other(format!("said `{line}`"))),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(e),
    }
}

/// Sends the swarms to the new tracker and waits for its `ok`.
pub fn send_swarms(stream: UnixStream, sections: &[Section], now_unix: u64) -> io::Result<u64> {
    stream.set_write_timeout(Some(STEP_TIMEOUT))?;
    stream.set_read_timeout(Some(STEP_TIMEOUT))?;
    let file = Framed::new(sections, now_unix);
    let mut out = io::BufWriter::with_capacity(1 << 20, &stream);
    writeln!(out, "state {}", file.byte_len())?;
    for part in file.parts() {
        out.write_all(part)?;
    }
    out.flush()?;
    drop(out);
    let answer = read_line(&mut BufReader::new(&stream))?;
    if answer != "ok" {
        return Err(io::Error::other(format!("the new tracker said `{answer}`")));
    }
    Ok(peer_pid(&stream) as u64)
}

/// The new tracker's side: connected, with the old one's sockets.
pub struct TakeOver {
    stream: UnixStream,
    reader: BufReader<UnixStream>,
    manifest: Manifest,
    handed: Vec<Handed>,
    path: PathBuf,
}

impl TakeOver {
    /// Asks the tracker at `path` for its sockets; `serves_as`: the user
    /// this one will serve as, when it drops root (the old one's, then).
    pub fn connect(path: &Path, serves_as: Option<libc::uid_t>) -> Result<TakeOver, String> {
        let fail = |e: io::Error| {
            format!(
                "cannot take over from the tracker at control socket {}: {e}",
                path.display()
            )
        };
        let stream = UnixStream::connect(path).map_err(fail)?;
        stream.set_read_timeout(Some(STEP_TIMEOUT)).map_err(fail)?;
        stream.set_write_timeout(Some(STEP_TIMEOUT)).map_err(fail)?;
        check_peer(&stream, serves_as).map_err(fail)?;
        (&stream)
            .write_all(format!("take-over {VERSION}\n").as_bytes())
            .map_err(fail)?;
        let mut bytes = vec![0u8; MAX_MANIFEST];
        let mut fds = Vec::new();
        let mut len = 0;
        // The descriptors come with the first bytes; the rest may follow.
        while !bytes[..len].ends_with(b"end\n") {
            if len == bytes.len() {
                return Err(fail(io::Error::other("a manifest past its bound")));
            }
            let n = recv_with_fds(&stream, &mut bytes[len..], &mut fds).map_err(fail)?;
            if n == 0 {
                return Err(fail(io::Error::other(
                    "it closed the connection (see its log for why)",
                )));
            }
            len += n;
        }
        let text = std::str::from_utf8(&bytes[..len])
            .map_err(|_| fail(io::Error::other("a manifest that is not text")))?;
        let (manifest, handed) =
            parse_manifest(text, fds).map_err(|e| fail(io::Error::other(e)))?;
        let reader = BufReader::new(stream.try_clone().map_err(fail)?);
        Ok(TakeOver {
            stream,
            reader,
            manifest,
            handed,
            path: path.to_path_buf(),
        })
    }

    /// The old tracker's sockets as this one's workers take them, after
    /// checking that they serve what `config` asks for, `workers` workers
    /// alike; its locks go to `lock`. And its control socket.
    pub fn sockets(
        &mut self,
        config: &Config,
        workers: usize,
        lock: &mut InstanceLock,
    ) -> Result<(Vec<WorkerSockets>, UnixListener), String> {
        if workers != self.manifest.workers {
            return Err(format!(
                "cannot take over: the running tracker has {} workers and this one would have \
                 {workers}; each worker takes its predecessor's sockets, so start this one with \
                 --workers {} (it keeps serving)",
                self.manifest.workers, self.manifest.workers
            ));
        }
        for (kind, wanted) in [
            (Kind::Udp, &config.udp.listen),
            (Kind::Http, &config.http.listen),
            (Kind::Https, &config.http.https_listen),
            (Kind::Metrics, &config.metrics.listen),
        ] {
            let served: Vec<&str> = self
                .handed
                .iter()
                .filter(|h| h.kind == kind && h.worker == 0)
                .map(|h| h.addr.as_str())
                .collect();
            let same = served.len() == wanted.len()
                && served.iter().zip(wanted.iter()).all(|(served, wanted)| {
                    served.parse::<SocketAddr>().is_ok_and(|s| {
                        s == *wanted || (wanted.port() == 0 && s.ip() == wanted.ip())
                    })
                });
            if !same {
                return Err(format!(
                    "cannot take over: the running tracker serves {} on [{}], this config on \
                     [{}]; a hand-over keeps the addresses (it keeps serving)",
                    kind.name(),
                    served.join(", "),
                    wanted
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
        let mut per_worker: Vec<WorkerSockets> =
            (0..workers).map(|_| WorkerSockets::default()).collect();
        let mut control = None;
        for h in self.handed.drain(..) {
            match h.kind {
                Kind::Lock => lock.adopt(h.fd),
                Kind::Control => control = Some(UnixListener::from(h.fd)),
                kind => {
                    let sockets = per_worker.get_mut(h.worker).ok_or_else(|| {
                        format!("cannot take over: a socket of worker {}", h.worker)
                    })?;
                    match kind {
                        Kind::Udp => sockets.udp.push(UdpSocket::from(h.fd)),
                        Kind::Http => sockets.http.push(TcpListener::from(h.fd)),
                        Kind::Https => sockets.https.push(TcpListener::from(h.fd)),
                        _ => sockets.metrics.push(TcpListener::from(h.fd)),
                    }
                }
            }
        }
        let control =
            control.ok_or_else(|| "cannot take over: no control socket came".to_string())?;
        Ok((per_worker, control))
    }

    /// The control socket it came through.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The running tracker's connection-id key.
    pub fn secret(&self) -> [u8; 16] {
        self.manifest.secret
    }

    /// Tells the old tracker to stop and takes its swarms: a state file's
    /// bytes, checked; and what waits for the old tracker to be gone.
    pub fn swarms(mut self) -> Result<(Vec<u8>, Predecessor), String> {
        let fail = |e: io::Error| {
            format!(
                "taking over from the tracker at {}: {e}; it has saved its swarms to its state \
                 file, if it has one",
                self.path.display()
            )
        };
        (&self.stream).write_all(b"go\n").map_err(fail)?;
        // It answers once its requests in flight are answered and its
        // workers have handed in their swarms.
        let line = read_line(&mut self.reader).map_err(fail)?;
        let len: usize = line
            .strip_prefix("state ")
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| fail(io::Error::other(format!("it said `{line}`"))))?;
        let mut bytes = Vec::new();
        bytes
            .try_reserve_exact(len)
            .map_err(|e| fail(io::Error::other(e)))?;
        (&mut self.reader)
            .take(len as u64)
            .read_to_end(&mut bytes)
            .map_err(fail)?;
        if bytes.len() != len {
            return Err(fail(io::ErrorKind::UnexpectedEof.into()));
        }
        StateFile::parse(&bytes).map_err(|e| fail(io::Error::other(e.to_string())))?;
        // Before the old one exits on our `ok`: the service is ours now.
        notify_main_pid();
        (&self.stream).write_all(b"ok\n").map_err(fail)?;
        Ok((bytes, Predecessor(self.stream)))
    }
}

/// The old tracker after a hand-over: it writes its swarms to its state
/// file, then exits.
pub struct Predecessor(UnixStream);

impl Predecessor {
    /// Waits (a minute at most) until the old tracker has exited, and so is
    /// done with the state file, which this one then writes alone.
    pub fn wait_gone(self) {
        let _ = self.0.set_read_timeout(Some(STEP_TIMEOUT));
        let _ = (&self.0).read(&mut [0u8; 1]);
    }
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

/// The peer's credentials; refuses any user but ours and root.
/// Refuses a peer that runs as another user than ours, root, or `also`
/// (the user a new tracker started as root will become: the old one runs
/// as it).
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
