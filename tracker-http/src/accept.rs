//! What a failed accept means, for every TCP listener of the tracker.

use tracker_runtime::throttle::LogThrottle;

/// Decides what a failed accept on a `protocol` listener at `local` means:
/// most failures concern one connection or are passing shortages (out of file
/// descriptors), after which the loop pauses briefly rather than spin (Ok); a
/// listener that is no longer a listener ends the worker (Err).
pub async fn accept_failed(
    protocol: &str,
    local: std::net::SocketAddr,
    e: glommio::GlommioError<()>,
) -> Result<(), String> {
    let glommio::GlommioError::IoError(e) = e else {
        return Err(format!("{protocol} {local}: accept failed: {e}"));
    };
    match e.raw_os_error() {
        Some(libc::EBADF | libc::EINVAL | libc::ENOTSOCK | libc::EOPNOTSUPP) => {
            Err(format!("{protocol} {local}: accept failed: {e}"))
        }
        Some(libc::ECONNABORTED | libc::EINTR | libc::EAGAIN) => Ok(()),
        _ => {
            // Clients can cause these (out of descriptors while connections
            // flood in): logged once a minute at most.
            static THROTTLE: LogThrottle = LogThrottle::new();
            if let Some(left_out) = THROTTLE.allow() {
                tracing::warn!(
                    "{protocol} {local}: accept failed: {e}; pausing accepts for 100 ms \
                     ({left_out} more failures since the last such line)"
                );
            }
            glommio::timer::sleep(std::time::Duration::from_millis(100)).await;
            Ok(())
        }
    }
}
