//! The accept loop of worker 0's small endpoints (the metrics endpoint, the
//! site API): one listener, connections admitted under their own caps, each
//! served by a task within a deadline; refused, evicted and timed-out ones
//! are reset (see `crate::linger`).

use std::future::Future;
use std::os::fd::{FromRawFd, IntoRawFd};
use std::rc::Rc;
use std::time::Duration;

use glommio::net::{TcpListener, TcpStream};
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

/// Serves `listener` until it fails for good.
pub(crate) async fn serve<E: SmallEndpoint>(
    endpoint: Rc<E>,
    listener: std::net::TcpListener,
) -> Result<(), String> {
    let name = E::NAME;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    crate::linger::reset_on_close(&listener, true)
        .map_err(|e| format!("{name} {local}: SO_LINGER: {e}"))?;
    // SAFETY: the fd comes from a listening socket we own and hand over whole.
    let listener = unsafe { TcpListener::from_raw_fd(listener.into_raw_fd()) };
    loop {
        let stream = match listener.accept().await {
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
