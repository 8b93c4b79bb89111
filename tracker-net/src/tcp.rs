//! TCP listeners: the ones every worker binds to the same address, and the
//! ones worker 0 alone serves.
//!
//! Every listener is made to reset the connections accepted from it when
//! they are dropped (`SO_LINGER` on, zero timeout, set before `listen`, so
//! that no connection is accepted without it): a connection the tracker
//! cuts must not be left for the kernel to keep feeding (FIN_WAIT1), and a
//! server turns it off on the one socket it closes gracefully
//! (`tracker_http::linger`).

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};

/// Binds a TCP listener that other workers can bind too (`SO_REUSEPORT`: the
/// kernel spreads connections among them). IPv6 listeners are IPv6-only, so
/// `[::]` and `0.0.0.0` can be served side by side. `SO_REUSEADDR` lets a
/// restarted tracker bind while old connections linger in TIME_WAIT.
pub fn bind_reuseport(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    // The kernel caps the backlog at net.core.somaxconn.
    bind(addr, true, 4096)
}

/// Binds a listener of its own, served by one worker: without
/// `SO_REUSEPORT`, another process on the port is an error rather than a
/// silent share of the connections. Its backlog is small: such endpoints
/// (metrics, the site API) have a few known clients.
pub fn bind_exclusive(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    bind(addr, false, 128)
}

fn bind(addr: SocketAddr, reuse_port: bool, backlog: i32) -> io::Result<std::net::TcpListener> {
    let domain = if addr.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    let socket = Socket::new(domain, Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    if reuse_port {
        socket.set_reuse_port(true)?;
    }
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_linger(Some(Duration::ZERO))?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(backlog)?;
    Ok(socket.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{ErrorKind, Read};
    use std::net::TcpStream;

    /// A connection made before anything serves the listener, and dropped
    /// once accepted, is reset: the setting was there before `listen`.
    #[test]
    fn a_connection_accepted_from_either_listener_resets_when_dropped() {
        let local: SocketAddr = "127.0.0.1:0".parse().unwrap();
        for listener in [bind_reuseport(local), bind_exclusive(local)] {
            let listener = listener.unwrap();
            listener.set_nonblocking(false).unwrap();
            let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            drop(listener.accept().unwrap());
            client
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let mut buf = [0u8; 8];
            let err = client.read(&mut buf).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::ConnectionReset);
        }
    }

    #[test]
    fn an_exclusive_listener_is_not_shared() {
        let first = bind_exclusive("127.0.0.1:0".parse().unwrap()).unwrap();
        let taken = bind_exclusive(first.local_addr().unwrap()).unwrap_err();
        assert_eq!(taken.kind(), ErrorKind::AddrInUse);
    }
}
