//! The sockets below the protocols, shared by the tracker's servers and the
//! load generator: `SO_REUSEPORT` binding, so that every worker has a socket
//! of its own on each address, and UDP I/O in batches (recvmmsg/sendmmsg)
//! that keep each datagram's destination address (IP_PKTINFO). Plain
//! syscalls on file descriptors: no async runtime and no protocol. And the
//! classic BPF programs that steer a datagram to one socket of its group,
//! and sockets passed to another process (`SCM_RIGHTS`) for a hand-over.

pub mod cbpf;
pub mod fd_pass;
pub mod tcp;
// Its arrays are indexed by counts below `BATCH` that the kernel returns
// (recvmmsg and sendmmsg never report more than they were given).
#[allow(clippy::indexing_slicing)]
pub mod udp;
// Its rings and frames are indexed by masks of power-of-two sizes and by
// offsets checked against the frame's length.
pub mod xdp;
