//! The accept loop of worker 0's small endpoints (the metrics endpoint, the
//! site API): one listener, connections admitted under their own caps, each
//! served by a task within a deadline; refused, evicted and timed-out ones
//! are reset (see `crate::linger`).

use std::future::Future;
use std::rc::Rc;
use std::time::Duration;

use futures_lite::AsyncReadExt;
use glommio::net::TcpStream;
use glommio::GlommioError;
use tracing::debug;
use tracker_proto::canonical_ip;

use crate::connections::{AdmissionCounters, ConnectionTable, Slot};

/// One of worker 0's small endpoints.
pub(crate) trait SmallEndpoint: 'static {
    /// Its name in log lines (`metrics`, `site API`).
    const NAME: &'static str;
    fn connections(&self) -> &Rc<ConnectionTable>;
    /// Where a refused connection is counted.
    fn admission_counters(&self) -> AdmissionCounters<'_>;
    /// How long one connection may take, request and answer.
    fn timeout(&self) -> Duration;
    fn count_timeout(&self);
    /// Serves one connection, which may be evicted until its request is
    /// read (see `Slot`).
    fn connection<'a>(
        &'a self,
        stream: TcpStream,
        slot: &'a Slot,
    ) -> impl Future<Output = Result<(), GlommioError<()>>> + 'a;
}

/// How reading a request head into a buffer ended.
pub(crate) enum Head {
    /// The head is the first `head` of the first `received` bytes.
    Complete { head: usize, received: usize },
    /// The buffer filled before the head ended.
    TooLarge,
    /// The client closed, or the connection was evicted for another.
    Gone,
}

/// The method and the path (its query cut off) of a head's request line;
/// None unless it is `METHOD /TARGET HTTP/1.x`.
pub(crate) fn request_line(head: &[u8]) -> Option<(&[u8], &[u8])> {
    let line = head.split(|&b| b == b'\n').next()?.trim_ascii_end();
    let mut parts = line.split(|&b| b == b' ');
    let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || !version.starts_with(b"HTTP/1.") || !target.starts_with(b"/") {
        return None;
    }
    let path = target.split(|&b| b == b'?').next().unwrap_or_default();
    Some((method, path))
}

/// The end of a request head (after the blank line) in `buf`, if complete.
pub(crate) fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// Reads into `buf` until a whole request head has come (it may be evicted
/// meanwhile), then marks the slot busy.
pub(crate) async fn read_head(
    stream: &mut TcpStream,
    buf: &mut [u8],
    slot: &Slot,
) -> Result<Head, GlommioError<()>> {
    let mut len = 0;
    loop {
        let received = buf.get(..len).unwrap_or_default();
        if let Some(head) = head_end(received) {
            slot.set_idle(false);
            return Ok(Head::Complete {
                head,
                received: len,
            });
        }
        let Some(free) = buf.get_mut(len..).filter(|free| !free.is_empty()) else {
            return Ok(Head::TooLarge);
        };
        let read = futures_lite::future::or(async { Some(stream.read(free).await) }, async {
            slot.evicted().await;
            None
        });
        match read.await {
            None | Some(Ok(0)) => return Ok(Head::Gone),
            Some(Ok(n)) => len += n,
            Some(Err(e)) => return Err(e.into()),
        }
    }
}

/// Serves `listener` (from `tracker_net::tcp::bind_exclusive`, so that a
/// connection dropped without a graceful end is reset) until it fails for
/// good.
pub(crate) async fn serve<E: SmallEndpoint>(
    endpoint: Rc<E>,
    listener: std::net::TcpListener,
) -> Result<(), String> {
    let name = E::NAME;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    loop {
        let stream = match crate::accept::accept(&listener).await {
            Ok(stream) => stream,
            Err(e) => {
                crate::accept::accept_failed(name, local, e).await?;
                continue;
            }
        };
        let Ok(peer) = stream.peer_addr() else {
            continue;
        };
        let admission = endpoint.connections().admit(canonical_ip(peer.ip()), false);
        let Some(slot) = admission.counted(endpoint.admission_counters()) else {
            continue;
        };
        let endpoint = endpoint.clone();
        glommio::spawn_local(async move {
            let served = endpoint.connection(stream, &slot);
            match glommio::timer::timeout(endpoint.timeout(), served).await {
                Err(GlommioError::TimedOut(_)) => endpoint.count_timeout(),
                Err(e) => debug!("{name} {local}: {e}"),
                Ok(()) => {}
            }
            drop(slot);
        })
        .detach();
    }
}
