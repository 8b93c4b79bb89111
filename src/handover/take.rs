//! The new tracker's side of a hand-over: the sockets taken, checked
//! against its config, then the swarms.

use std::io::{self, BufReader, Read, Write};
use std::net::SocketAddr;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use tracing::{info, warn};
use tracker_net::fd_pass::recv_with_fds;
use tracker_swarm::state::StateFile;

use crate::config::Config;
use crate::start::bind::WorkerSockets;
use crate::start::xdp::Taken;

use super::{
    check_peer, distribute, parse_manifest, read_line, ControlFile, Handed, Kind, Manifest,
    PidFile, MAX_MANIFEST, STEP_TIMEOUT, VERSION,
};

/// What the new tracker takes from the old one's sockets.
pub struct Taking {
    /// Each worker's, as its predecessor had them.
    pub sockets: Vec<WorkerSockets>,
    /// The control socket, with its file.
    pub control: (UnixListener, ControlFile),
    /// AF_XDP's sockets and programs, checked (empty when none came).
    pub xdp: Taken,
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
    /// alike. And its control socket, with its file; and its AF_XDP
    /// sockets and programs, checked against `config` too (taken over
    /// once it has stopped: `crate::start::xdp::adopt`).
    pub fn sockets(&mut self, config: &Config, workers: usize) -> Result<Taking, String> {
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
            (Kind::SiteApi, &config.site_api_listen()),
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
        let (per_worker, control, xdp) = distribute(std::mem::take(&mut self.handed), workers)
            .map_err(|e| format!("cannot take over: {e}"))?;
        let (control, id) =
            control.ok_or_else(|| "cannot take over: no control socket came".to_string())?;
        xdp.check(&config.udp.xdp)?;
        Ok(Taking {
            sockets: per_worker,
            control: (control, ControlFile::taken(&self.path, &id)),
            xdp,
        })
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
    /// `before_ok` runs once the old tracker has stopped, before it is told
    /// to exit: its failure leaves the old tracker to serve again.
    /// `pid_file`: the service's PID file, which the old tracker names this
    /// one in as it exits, unless it does not keep one (see `pid_file`).
    pub fn swarms(
        mut self,
        pid_file: Option<&PidFile>,
        before_ok: impl FnOnce() -> Result<(), String>,
    ) -> Result<(Vec<u8>, Predecessor), String> {
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
        if let Err(e) = before_ok() {
            // Told, so that its log says why (it kills this one at once).
            let _ = (&self.stream).write_all(format!("failed {}\n", one_line(&e)).as_bytes());
            return Err(e);
        }
        if let Some(file) = pid_file {
            name_self_unless_kept(file);
        }
        (&self.stream).write_all(b"ok\n").map_err(fail)?;
        Ok((bytes, Predecessor(self.stream)))
    }
}

/// Before the `ok` that makes the predecessor exit: a predecessor that
/// keeps the PID file, which then names it (or, for a moment after a
/// hand-over of its own, the tracker before it, still writing its state
/// file), names this one as it exits. One that does not (a tracker of an
/// earlier version, which told systemd `MAINPID=` instead, and whose unit
/// made no file) leaves it to this one, now, so that systemd finds it there
/// when the predecessor exits. (Not by the predecessor's pid: the control
/// socket's `SO_PEERCRED` names the tracker that first listened on it.)
fn name_self_unless_kept(file: &PidFile) {
    if file.named().is_some_and(is_alive) {
        return;
    }
    match file.write(std::process::id()) {
        Ok(()) => info!(
            "PID file {}: this process (the tracker it takes over from keeps none)",
            file.path().display()
        ),
        Err(e) => warn!(
            "cannot write the PID file {}: {e}; systemd (PIDFile=) may take the old \
             tracker's exit for the service's",
            file.path().display()
        ),
    }
}

/// `text` on one line that the other side's `read_line` takes whole: line
/// breaks as spaces, within 240 bytes (cut at a character's boundary).
fn one_line(text: &str) -> String {
    let mut line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if line.len() > 240 {
        let mut end = 240;
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        line.truncate(end);
    }
    line
}

/// Whether a process `pid` runs (of any user).
fn is_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks that the process exists.
    pid > 0
        && (unsafe { libc::kill(pid, 0) } == 0
            || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM))
}

/// The old tracker after a hand-over: it writes its swarms to its state
/// file, then exits.
pub struct Predecessor(UnixStream);
impl Predecessor {
    /// Waits (a minute at most) until the old tracker has exited, and so is
    /// done with the state file, which this one then writes alone.
    pub fn wait_gone(self) {
        let _ = self.0.set_read_timeout(Some(STEP_TIMEOUT));
        // A signal (a stop and a continue) must not end the wait early.
        while let Err(e) = (&self.0).read(&mut [0u8; 1]) {
            if e.kind() != io::ErrorKind::Interrupted {
                break;
            }
        }
    }
}
