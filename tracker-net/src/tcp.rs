//! TCP listeners that every worker binds to the same address.

use std::io;
use std::net::SocketAddr;

/// Binds a TCP listener that other workers can bind too (`SO_REUSEPORT`: the
/// kernel spreads connections among them). IPv6 listeners are IPv6-only, so
/// `[::]` and `0.0.0.0` can be served side by side. `SO_REUSEADDR` lets a
/// restarted tracker bind while old connections linger in TIME_WAIT.
pub fn bind_reuseport(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let domain = if addr.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    let socket = Socket::new(domain, Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    // The kernel caps the backlog at net.core.somaxconn.
    socket.listen(4096)?;
    Ok(socket.into())
}
