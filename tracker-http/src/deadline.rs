//! A TCP stream whose reads and writes fail at a deadline, however the bytes
//! trickle in or out.
//!
//! glommio's own timeouts count afresh for each read or write, so a client
//! that sends one byte a second (or takes one a second) never reaches them;
//! a TLS read loops over as many TCP reads as a record needs, so one `read`
//! of plaintext may wait through any number of them; and a timeout armed for
//! a read that ended otherwise stays armed for the next one. Here a read or
//! write that has to wait also waits on a timer of the stream's own, set to
//! the deadline the server chose, so the deadline holds for a whole request
//! head or answer, under TLS as in plain HTTP. The timer is made once per
//! stream and moved when the deadline moves; the cost of a wait is a clock
//! read and a timer update.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use futures_lite::{AsyncRead, AsyncWrite};
use glommio::net::TcpStream;
use glommio::timer::Timer;

/// A TCP stream with a read deadline and a write deadline.
pub struct DeadlineStream {
    stream: TcpStream,
    read: Deadline,
    write: Deadline,
}

impl DeadlineStream {
    pub fn new(stream: TcpStream) -> Self {
        DeadlineStream {
            stream,
            read: Deadline::default(),
            write: Deadline::default(),
        }
    }

    /// Reads fail with `TimedOut` from `deadline` on (`None`: never).
    pub fn set_read_deadline(&mut self, deadline: Option<Instant>) {
        self.read.at = deadline;
    }

    /// Writes fail with `TimedOut` from `deadline` on (`None`: never).
    pub fn set_write_deadline(&mut self, deadline: Option<Instant>) {
        self.write.at = deadline;
    }

    /// The socket underneath, for options set on it.
    pub fn socket(&self) -> &TcpStream {
        &self.stream
    }

    /// Makes its close graceful (it resets otherwise, see `crate::linger`).
    pub fn close_gracefully(&self) -> io::Result<()> {
        crate::linger::end_gracefully(&self.stream)
    }
}

/// One direction's deadline and the timer that wakes a wait at it.
#[derive(Default)]
struct Deadline {
    at: Option<Instant>,
    /// Made at the first wait, and the deadline it is set for.
    timer: Option<(Instant, Timer)>,
}

impl Deadline {
    /// Whether the deadline has passed.
    fn passed(&self) -> bool {
        self.at.is_some_and(|at| Instant::now() >= at)
    }

    /// For an operation that has to wait: true when the deadline has passed,
    /// otherwise arranges to be woken at it.
    fn poll_passed(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(at) = self.at else {
            return false;
        };
        let now = Instant::now();
        let Some(left) = at.checked_duration_since(now).filter(|d| !d.is_zero()) else {
            return true;
        };
        let timer = match &mut self.timer {
            Some((set_for, timer)) => {
                if *set_for != at {
                    timer.reset(left);
                    *set_for = at;
                }
                timer
            }
            None => &mut self.timer.insert((at, Timer::new(left))).1,
        };
        Pin::new(timer).poll(cx).is_ready()
    }
}

fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "the deadline passed")
}

impl AsyncRead for DeadlineStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        if self.read.passed() {
            return Poll::Ready(Err(timed_out()));
        }
        let this = &mut *self;
        match Pin::new(&mut this.stream).poll_read(cx, buf) {
            Poll::Pending if this.read.poll_passed(cx) => Poll::Ready(Err(timed_out())),
            poll => poll,
        }
    }
}

impl AsyncWrite for DeadlineStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.write.passed() {
            return Poll::Ready(Err(timed_out()));
        }
        let this = &mut *self;
        match Pin::new(&mut this.stream).poll_write(cx, buf) {
            Poll::Pending if this.write.poll_passed(cx) => Poll::Ready(Err(timed_out())),
            poll => poll,
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_close(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_deadline_never_passes_and_a_past_one_has() {
        let mut d = Deadline::default();
        assert!(!d.passed());
        d.at = Some(Instant::now());
        assert!(d.passed());
    }
}
