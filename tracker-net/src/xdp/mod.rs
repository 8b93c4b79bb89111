//! AF_XDP: UDP datagrams taken from a NIC's queue before the kernel's stack,
//! and answers put straight on its transmit ring.
//!
//! - `frame`: Ethernet (one optional VLAN tag), IPv4/IPv6 and UDP headers,
//!   parsed and written in place (pure).
//! - `ebpf`: the XDP program that sends the tracker's datagrams to the
//!   queue's AF_XDP socket, written as eBPF instructions (pure).
//! - `bpf`: bpf(2): maps, loading, BPF links, test runs.
//! - `xsk`: one AF_XDP socket, its UMEM and its four rings.
//! - `link`: what the host says of an interface (index, queues,
//!   addresses, MAC address).
//! - `route`: the kernel's routing table, followed as it changes: which
//!   clients an answer may go back to through the interface.

pub mod bpf;
pub mod ebpf;
pub mod frame;
pub mod link;
pub mod route;
pub mod xsk;
