//! The running tracker's side of a hand-over: its control socket, the
//! sockets it offers, the swarms it sends; and the successor SIGUSR2 starts.

use std::io::{self, BufReader, Write};
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tracing::{info, warn};
use tracker_net::fd_pass::{peer_credentials, peer_pidfd, pidfd_signal, send_with_fds, MAX_FDS};
use tracker_runtime::shutdown::Shutdown;
use tracker_swarm::state::{Framed, Section};

use crate::start::bind::WorkerSockets;
use crate::start::xdp::{Attached, Taken};

use super::{
    distribute, link_label, peer_pid, queue_label, read_line, write_manifest, ControlFile, Handed,
    Kind, Manifest, STEP_TIMEOUT, VERSION,
};

/// Copies of every socket a hand-over gives away (its own descriptors, so
/// that the workers keep theirs); the control socket's with the id of its
/// file, for the successor to remove it at its stop.
pub fn copies(
    sockets: &[WorkerSockets],
    control: &UnixListener,
    control_file: &ControlFile,
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
            (Kind::SiteApi, &s.site_api),
        ] {
            for listener in listeners {
                push(kind, worker, listener.local_addr(), dup(listener))?;
            }
        }
    }
    handed.push(Handed {
        kind: Kind::Control,
        worker: 0,
        addr: control_file.id(),
        fd: dup(control)?,
    });
    Ok(handed)
}

/// AF_XDP's part of what a hand-over gives away, where the kernel lets a
/// successor take the sockets over (`Attached::handable`): each queue's
/// socket and its UMEM's memfd, each interface's link, program and map of
/// sockets. Apart from `copies`, as the stop empties it (`XdpCopies`).
pub fn xdp_copies(sockets: &[WorkerSockets], attached: &Attached) -> io::Result<Vec<Handed>> {
    let mut handed = Vec::new();
    if !attached.handable() {
        return Ok(handed);
    }
    for (worker, s) in sockets.iter().enumerate() {
        for xsk in &s.xdp {
            let name = attached
                .interface_name(xsk.ifindex())
                .ok_or_else(|| io::Error::other("an AF_XDP socket of no attached interface"))?;
            let label = queue_label(name, &xsk.config());
            handed.push(Handed {
                kind: Kind::Xsk,
                worker,
                addr: label.clone(),
                fd: dup(&xsk.fd())?,
            });
            handed.push(Handed {
                kind: Kind::Umem,
                worker,
                addr: label,
                fd: dup(&xsk.umem_fd())?,
            });
        }
    }
    for p in attached.copies()? {
        let label = link_label(&p.name, p.ifindex, p.generic);
        for (kind, addr, fd) in [
            (Kind::XdpLink, label, p.link),
            (Kind::XdpProgram, p.name.clone(), p.program),
            (Kind::XdpMap, p.name, p.map),
        ] {
            handed.push(Handed {
                kind,
                worker: 0,
                addr,
                fd,
            });
        }
    }
    Ok(handed)
}

/// The AF_XDP copies a hand-over gives away, held apart from the other
/// sockets' so that a stop that is not a hand-over closes them: the
/// program detaches only once no descriptor holds its link.
#[derive(Clone, Default)]
pub struct XdpCopies(Arc<Mutex<Vec<Handed>>>);
impl XdpCopies {
    pub fn new(handed: Vec<Handed>) -> XdpCopies {
        XdpCopies(Arc::new(Mutex::new(handed)))
    }

    fn edit<R>(&self, f: impl FnOnce(&mut Vec<Handed>) -> R) -> R {
        f(&mut self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Closes them all (a stop that is not a hand-over).
    pub fn close(&self) {
        drop(self.edit(std::mem::take));
    }

    fn take(&self) -> Vec<Handed> {
        self.edit(std::mem::take)
    }
}

fn dup(fd: &impl AsFd) -> io::Result<OwnedFd> {
    fd.as_fd().try_clone_to_owned()
}

/// The successors this tracker started on SIGUSR2 and has not reaped: the
/// only processes of its own user (not root) it lets take over. Listed until
/// reaped, so that no other process can have the pid meanwhile.
#[derive(Default)]
pub struct Successors(Mutex<Vec<u32>>);
impl Successors {
    fn edit<R>(&self, f: impl FnOnce(&mut Vec<u32>) -> R) -> R {
        f(&mut self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn contains(&self, pid: u32) -> bool {
        self.edit(|pids| pids.contains(&pid))
    }

    /// The one under way, if any.
    pub fn under_way(&self) -> Option<u32> {
        self.edit(|pids| pids.first().copied())
    }
}

/// Starts this tracker's successor: the binary at the path this one was
/// started from (a new version installed there, typically), with the same
/// arguments and `--take-over`, listed in `successors` until it exits. It
/// inherits the environment, the output, the user and (under systemd) the
/// unit. A thread reports its exit if it fails; once it has taken over,
/// this process is gone.
pub fn start_successor(successors: &Arc<Successors>) -> io::Result<u32> {
    let mut args = std::env::args_os();
    let started_as = args.next().map(PathBuf::from);
    // The path, not /proc/self/exe: that is the old binary, even once a new
    // one has replaced it on disk.
    let binary = match started_as {
        Some(path) if path.is_absolute() => path,
        _ => std::env::current_exe()?,
    };
    let mut command = std::process::Command::new(&binary);
    command
        .args(args.filter(|a| a != "--take-over"))
        .arg("--take-over")
        .stdin(std::process::Stdio::null());
    // Listed under the lock it is spawned under: the child can reach the
    // control socket before `spawn` returns here, and `admit` waits on
    // the same lock, so it never finds the list without it.
    let mut child = successors.edit(|pids| {
        let child = command.spawn()?;
        pids.push(child.id());
        io::Result::Ok(child)
    })?;
    let pid = child.id();
    let successors = successors.clone();
    std::thread::Builder::new()
        .name("successor".into())
        .spawn(move || {
            wait_exited(pid);
            successors.edit(|pids| pids.retain(|&p| p != pid));
            if let Ok(status) = child.wait() {
                warn!(
                    "the new tracker (pid {pid}) exited ({status}) without taking over; this \
                     one serves on (its log says why)"
                );
            }
        })?;
    Ok(pid)
}

/// Waits until the child `pid` has exited, without reaping it.
fn wait_exited(pid: u32) {
    loop {
        // SAFETY: siginfo_t is plain data that waitid fills.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: a child's pid and a siginfo_t to fill.
        let rc =
            unsafe { libc::waitid(libc::P_PID, pid, &mut info, libc::WEXITED | libc::WNOWAIT) };
        if rc == 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return;
        }
    }
}

/// A hand-over under way: the connection, for the swarms once the workers
/// have stopped; the new tracker's process; and this one's copies of the
/// sockets it was sent, to serve again should it be lost.
pub struct Handing {
    stream: UnixStream,
    successor: OwnedFd,
    handed: Vec<Handed>,
}

/// Where the old tracker keeps the hand-over under way.
#[derive(Default)]
pub struct Pending(Mutex<Option<Handing>>);
impl Pending {
    pub fn take(&self) -> Option<Handing> {
        self.0.lock().ok().and_then(|mut s| s.take())
    }
}

/// Serves hand-over requests on `listener` until one goes ahead; its
/// connection is then in `pending` and the workers are stopping.
pub fn serve_control(
    listener: UnixListener,
    handed: Vec<Handed>,
    xdp: XdpCopies,
    manifest: Manifest,
    successors: Arc<Successors>,
    shutdown: Arc<Shutdown>,
    pending: Arc<Pending>,
) -> io::Result<()> {
    std::thread::Builder::new()
        .name("control".into())
        .spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let peer = peer_pid(&stream);
                let offered = admit(&stream, &successors).and_then(|successor| {
                    let went = xdp.edit(|xdp| offer(&stream, &handed, xdp, &manifest))?;
                    Ok(went.then_some(successor))
                });
                match offered {
                    Ok(Some(successor)) => {
                        if !shutdown.hand_over() {
                            warn!("hand-over to pid {peer}: refused, the tracker is stopping");
                            continue;
                        }
                        info!(
                            "handing over to pid {peer}: answering requests in flight, then \
                             sending the swarms"
                        );
                        // Kept until the successor has the swarms, to
                        // serve again on should it fail.
                        let mut handed = handed;
                        handed.extend(xdp.take());
                        if let Ok(mut slot) = pending.0.lock() {
                            *slot = Some(Handing {
                                stream,
                                successor,
                                handed,
                            });
                        }
                        return;
                    }
                    Ok(None) => info!("hand-over to pid {peer} abandoned by it: still serving"),
                    Err(e) => warn!("hand-over to pid {peer} refused: {e}; still serving"),
                }
            }
        })?;
    Ok(())
}

/// Lets in root, and a successor this tracker started itself (the process
/// that connected, alive: not one that had its pid before); its pidfd. Any
/// other process, of this tracker's own user too, is refused: under a user
/// that other programs share, any of them could otherwise take the sockets,
/// the swarms and the connection-id key.
fn admit(stream: &UnixStream, successors: &Successors) -> io::Result<OwnedFd> {
    let cred = peer_credentials(stream)?;
    let pidfd = peer_pidfd(stream)?;
    let started_here = || {
        u32::try_from(cred.pid).is_ok_and(|pid| successors.contains(pid))
            && pidfd_signal(&pidfd, 0).is_ok()
    };
    if cred.uid != 0 && !started_here() {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "it runs as uid {}, and is neither root nor the tracker this one started on \
                 SIGUSR2",
                cred.uid
            ),
        ));
    }
    Ok(pidfd)
}

/// One request on the control socket: the sockets sent, then whether the
/// new tracker said `go`.
fn offer(
    stream: &UnixStream,
    handed: &[Handed],
    xdp: &[Handed],
    manifest: &Manifest,
) -> io::Result<bool> {
    stream.set_read_timeout(Some(STEP_TIMEOUT))?;
    stream.set_write_timeout(Some(STEP_TIMEOUT))?;
    let mut reader = BufReader::new(stream);
    let request = read_line(&mut reader)?;
    if request != format!("take-over {VERSION}") {
        return Err(io::Error::other(format!("asked `{request}`")));
    }
    let all = || handed.iter().chain(xdp);
    let count = handed.len() + xdp.len();
    if count > MAX_FDS {
        return Err(io::Error::other(format!(
            "{count} sockets, more than one message carries ({MAX_FDS})"
        )));
    }
    let fds: Vec<RawFd> = all().map(|h| h.fd.as_raw_fd()).collect();
    send_with_fds(stream, write_manifest(manifest, all()).as_bytes(), &fds)?;
    match read_line(&mut reader) {
        Ok(line) if line == "go" => Ok(true),
        Ok(line) => Err(io::Error::other(format!("said `{line}`"))),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(e),
    }
}

impl Handing {
    /// The new tracker's pid.
    pub fn pid(&self) -> i32 {
        peer_pid(&self.stream)
    }

    /// Sends the swarms to the new tracker and waits for its `ok`, at most
    /// `timeout` for each write and for the `ok`.
    pub fn send_swarms(
        &self,
        sections: &[Section],
        now_unix: u64,
        timeout: Duration,
    ) -> io::Result<()> {
        let stream = &self.stream;
        stream.set_write_timeout(Some(timeout))?;
        stream.set_read_timeout(Some(timeout))?;
        let file = Framed::new(sections, now_unix);
        let mut out = io::BufWriter::with_capacity(1 << 20, stream);
        writeln!(out, "state {}", file.byte_len())?;
        for part in file.parts() {
            out.write_all(part)?;
        }
        out.flush()?;
        drop(out);
        let answer = read_line(&mut BufReader::new(stream))?;
        if answer != "ok" {
            return Err(io::Error::other(format!("the new tracker said `{answer}`")));
        }
        Ok(())
    }

    /// The new tracker, which has the swarms: its pidfd.
    pub fn into_successor(self) -> OwnedFd {
        self.successor
    }

    /// After a hand-over failed past `go`: kills the new tracker, which
    /// holds every socket and must not serve on them beside this one, and
    /// gives the sockets back for this one's workers, with the control
    /// socket. Err when it cannot be killed (it runs as root, this one not).
    pub fn reclaim(self, workers: usize) -> Result<Reclaimed, String> {
        let pid = self.pid();
        // The service manager was told nothing of it: the PID file names
        // it only as this one exits (see `pid_file`).
        match pidfd_signal(&self.successor, libc::SIGKILL) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
            Err(e) => return Err(format!("cannot kill the new tracker (pid {pid}): {e}")),
        }
        if !exits_within(&self.successor, KILL_WAIT) {
            return Err(format!(
                "the new tracker (pid {pid}) has not exited {} s after SIGKILL",
                KILL_WAIT.as_secs()
            ));
        }
        let (sockets, control, xdp) = distribute(self.handed, workers)?;
        let (control, _) = control.ok_or("no copy of the control socket")?;
        Ok(Reclaimed {
            sockets,
            control,
            xdp,
        })
    }
}

/// What a hand-over that failed after the stop gives back: the sockets,
/// the control socket, and AF_XDP as it was handed (still attached).
pub struct Reclaimed {
    pub sockets: Vec<WorkerSockets>,
    pub control: UnixListener,
    pub xdp: Taken,
}

/// How long a killed successor may take to exit (and so to close the
/// sockets it holds): a process killed takes milliseconds, unless stuck in
/// the kernel.
const KILL_WAIT: Duration = Duration::from_secs(5);

/// Whether the process of `pidfd` exits within `wait` (a pidfd reads as
/// ready once it has).
fn exits_within(pidfd: &OwnedFd, wait: Duration) -> bool {
    let mut poll = libc::pollfd {
        fd: pidfd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let deadline = std::time::Instant::now() + wait;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        // SAFETY: one pollfd, alive for the call.
        match unsafe { libc::poll(&mut poll, 1, left.as_millis() as libc::c_int) } {
            n if n > 0 => return true,
            0 => return false,
            _ if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => {}
            _ => return false,
        }
    }
}
