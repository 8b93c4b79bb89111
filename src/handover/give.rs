//! The running tracker's side of a hand-over: its control socket, the
//! sockets it offers, the swarms it sends; and the successor SIGUSR2 starts.

use std::io::{self, BufReader, Write};
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tracing::{info, warn};
use tracker_net::fd_pass::{send_with_fds, MAX_FDS};
use tracker_runtime::shutdown::Shutdown;
use tracker_swarm::state::{Framed, Section};

use crate::start::bind::WorkerSockets;
use crate::start::instance::InstanceLock;

use super::{
    check_peer, peer_pid, read_line, write_manifest, ControlFile, Handed, Kind, Manifest,
    STEP_TIMEOUT, VERSION,
};

/// Copies of every socket a hand-over gives away (its own descriptors, so
/// that the workers keep theirs); the control socket's with the id of its
/// file, for the successor to remove it at its stop.
pub fn copies(
    sockets: &[WorkerSockets],
    locks: &InstanceLock,
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
        addr: control_file.id(),
        fd: dup(control)?,
    });
    Ok(handed)
}

fn dup(fd: &impl AsFd) -> io::Result<OwnedFd> {
    fd.as_fd().try_clone_to_owned()
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
    let fds: Vec<RawFd> = handed.iter().map(|h| h.fd.as_raw_fd()).collect();
    send_with_fds(stream, write_manifest(manifest, handed).as_bytes(), &fds)?;
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
