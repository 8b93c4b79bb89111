//! The socket on a veth pair between two namespaces (root only): opened,
//! refused with reasons, sending, and receiving through the steering
//! program.

use super::*;
use crate::xdp::link::index_of;
use crate::xdp::link::testnet::{ip, mac_of, Netns};
use std::collections::HashSet;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// Two namespaces joined by a veth pair: va (10.199.0.1) in `a`, vb
/// (10.199.0.2) in `b`.
struct Pair {
    a: Netns,
    b: Netns,
}

fn veth_pair() -> Pair {
    let a = Netns::new("xa");
    let b = Netns::new("xb");
    ip(&[
        "-n", &a.name, "link", "add", "name", "va", "type", "veth", "peer", "name", "vb", "netns",
        &b.name,
    ]);
    ip(&["-n", &a.name, "addr", "add", "10.199.0.1/24", "dev", "va"]);
    ip(&["-n", &b.name, "addr", "add", "10.199.0.2/24", "dev", "vb"]);
    ip(&["-n", &a.name, "link", "set", "va", "up"]);
    ip(&["-n", &b.name, "link", "set", "vb", "up"]);
    Pair { a, b }
}

fn config(ifindex: u32) -> XskConfig {
    XskConfig {
        ifindex,
        queue: 0,
        frames: 64,
        frame_size: 2048,
        zero_copy: false,
    }
}

fn open_err(config: &XskConfig) -> io::Error {
    match Xsk::open(config) {
        Ok(_) => panic!("{config:?} opened"),
        Err(err) => err,
    }
}

/// The Internet checksum of `data`, starting from `sum`.
fn checksum(data: &[u8], mut sum: u32) -> u16 {
    for pair in data.chunks(2) {
        let word = u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]);
        sum += u32::from(word);
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Ethernet + IPv4 + UDP, checksums filled in.
fn udp_frame(
    macs: ([u8; 6], [u8; 6]),
    from: (Ipv4Addr, u16),
    to: (Ipv4Addr, u16),
    payload: &[u8],
) -> Vec<u8> {
    let udp_len = 8 + payload.len();
    let ip_len = 20 + udp_len;
    let mut f = Vec::with_capacity(14 + ip_len);
    f.extend_from_slice(&macs.1); // destination
    f.extend_from_slice(&macs.0);
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    let ip_start = f.len();
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&(ip_len as u16).to_be_bytes());
    f.extend_from_slice(&[0x12, 0x34, 0x40, 0]); // id, DF
    f.extend_from_slice(&[64, 17, 0, 0]); // TTL, UDP, checksum
    f.extend_from_slice(&from.0.octets());
    f.extend_from_slice(&to.0.octets());
    let sum = checksum(&f[ip_start..ip_start + 20], 0);
    f[ip_start + 10..ip_start + 12].copy_from_slice(&sum.to_be_bytes());
    let udp_start = f.len();
    f.extend_from_slice(&from.1.to_be_bytes());
    f.extend_from_slice(&to.1.to_be_bytes());
    f.extend_from_slice(&(udp_len as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(payload);
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(&from.0.octets());
    pseudo.extend_from_slice(&to.0.octets());
    pseudo.extend_from_slice(&[0, 17]);
    pseudo.extend_from_slice(&(udp_len as u16).to_be_bytes());
    let pseudo_sum = u32::from(!checksum(&pseudo, 0));
    let mut sum = checksum(&f[udp_start..], pseudo_sum);
    if sum == 0 {
        sum = 0xffff;
    }
    f[udp_start + 6..udp_start + 8].copy_from_slice(&sum.to_be_bytes());
    f
}

#[test]
fn checksums_match_known_values() {
    // RFC 1071's example bytes.
    assert_eq!(
        checksum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7], 0),
        !0xddf2
    );
    let f = udp_frame(
        ([2; 6], [4; 6]),
        ("10.0.0.1".parse().unwrap(), 1),
        ("10.0.0.2".parse().unwrap(), 2),
        b"abc",
    );
    // Summing a header or segment with its checksum in gives 0.
    assert_eq!(checksum(&f[14..34], 0), 0);
    let mut pseudo = vec![10, 0, 0, 1, 10, 0, 0, 2, 0, 17, 0, 11];
    pseudo.extend_from_slice(&f[34..]);
    assert_eq!(checksum(&pseudo, 0), 0);
}

#[test]
fn transmits_udp_on_veth_in_copy_mode() {
    let pair = veth_pair();
    let macs = (mac_of(&pair.a, "va"), mac_of(&pair.b, "vb"));
    let listener = pair.b.run(|| {
        let socket = UdpSocket::bind("10.199.0.2:4242").unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        socket
    });
    let from = ("10.199.0.1".parse().unwrap(), 5353);
    let to = ("10.199.0.2".parse().unwrap(), 4242);

    let (counters, stats) = pair.a.run(|| {
        let mut xsk = Xsk::open(&config(index_of("va").unwrap())).unwrap();
        assert!(!xsk.is_zero_copy());
        assert_eq!((xsk.frames(), xsk.frame_size()), (64, 2048));
        assert_eq!(xsk.free_frames(), 32);

        // Bounds, on a frame taken and given back.
        let addr = xsk.take_free().unwrap();
        assert_eq!(addr % 2048, 0);
        assert_eq!(xsk.free_frames(), 31);
        let start = xsk.frame_mut(addr).as_ptr();
        assert_eq!(xsk.frame_mut(addr + 300).as_ptr(), start);
        assert_eq!(xsk.frame_mut(addr + 2047).len(), 2048);
        assert!(xsk.frame_mut(64 * 2048).is_empty());
        assert!(!xsk.send(addr, 0));
        assert!(!xsk.send(addr, 2049));
        assert!(!xsk.send(addr + 2000, 100));
        assert!(!xsk.send(64 * 2048, 60));
        let d = Descriptor {
            addr: addr + 10,
            len: 20,
        };
        xsk.frame_mut(addr)[10..30].fill(7);
        assert_eq!(xsk.frame(d), &[7; 20]);
        assert!(xsk
            .frame(Descriptor {
                addr: addr + 2040,
                len: 20
            })
            .is_empty());
        xsk.recycle(addr); // onto the fill ring
        assert_eq!(xsk.free_frames(), 31);

        // More datagrams than the free list holds and than copy mode
        // sends per wakeup (32): later ones reuse completed frames.
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut sent = 0;
        while sent < 80 {
            if let Some(addr) = xsk.take_free() {
                let payload = format!("datagram {sent}");
                let frame = udp_frame(macs, from, to, payload.as_bytes());
                xsk.frame_mut(addr)[..frame.len()].copy_from_slice(&frame);
                assert!(xsk.send(addr, frame.len() as u32));
                sent += 1;
                if sent % 50 != 0 {
                    continue; // a batch of sends, then one flush
                }
            }
            xsk.flush().unwrap();
            assert!(Instant::now() < deadline, "stuck after {sent} sent");
        }
        while xsk.tx_pending() > 0 || xsk.free_frames() < 31 {
            xsk.flush().unwrap();
            assert!(Instant::now() < deadline, "frames not completed");
            std::thread::sleep(Duration::from_millis(1));
        }
        (xsk.counters(), xsk.statistics().unwrap())
    });

    let mut got = HashSet::new();
    let mut buf = [0u8; 2048];
    for _ in 0..80 {
        let (n, sender) = listener.recv_from(&mut buf).unwrap();
        assert_eq!(sender, SocketAddr::from(from));
        got.insert(String::from_utf8(buf[..n].to_vec()).unwrap());
    }
    assert_eq!(got.len(), 80);
    assert!(got.contains("datagram 0") && got.contains("datagram 79"));

    assert!(counters.tx_wakeups > 0, "{counters:?}");
    assert_eq!((counters.bad_descs, counters.refused), (0, 0));
    assert_eq!(stats.tx_invalid_descs, 0, "{stats:?}");
    assert!(stats.tx_ring_empty_descs.is_some(), "{stats:?}");
}

#[test]
fn open_errors_say_what_failed() {
    let pair = veth_pair();
    pair.a.run(|| {
        let ifindex = index_of("va").unwrap();
        let base = config(ifindex);

        let err = open_err(&XskConfig {
            zero_copy: true,
            ..base
        });
        let text = err.to_string();
        assert!(text.contains("zero-copy"), "{text}");
        assert!(
            text.contains(&format!("queue 0 of ifindex {ifindex}")),
            "{text}"
        );

        let err = open_err(&XskConfig { queue: 5, ..base });
        assert!(err.to_string().contains("queue 5"), "{err}");

        let err = open_err(&XskConfig {
            ifindex: 999_999,
            ..base
        });
        assert!(err.to_string().contains("ifindex 999999"), "{err}");

        // One socket per queue; the queue is free again once dropped.
        let first = Xsk::open(&base).unwrap();
        let err = open_err(&base);
        assert!(err.to_string().contains("queue 0"), "{err}");
        drop(first);
        // The kernel frees the queue from a work item after close:
        // binding it again may see EBUSY for a moment.
        let deadline = Instant::now() + Duration::from_secs(5);
        let again = loop {
            match Xsk::open(&base) {
                Ok(xsk) => break xsk,
                Err(err) if err.kind() == io::ErrorKind::ResourceBusy => {
                    assert!(Instant::now() < deadline, "{err}");
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(err) => panic!("{err}"),
            }
        };
        assert_eq!(again.statistics().unwrap(), {
            XdpStatistics {
                rx_ring_full: Some(0),
                rx_fill_ring_empty_descs: Some(0),
                tx_ring_empty_descs: Some(0),
                ..XdpStatistics::default()
            }
        });
    });
}

/// Waits up to `timeout` for POLLIN on the socket.
fn wait_readable(xsk: &Xsk, timeout: Duration) -> bool {
    let mut pfd = libc::pollfd {
        fd: xsk.fd().as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd, alive for the call.
    let n = unsafe { libc::poll(&mut pfd, 1, timeout.as_millis() as i32) };
    n == 1 && pfd.revents & libc::POLLIN != 0
}

/// RX with the steering program of `ebpf`, loaded and attached with
/// `bpf`, in native (veth's driver) and generic mode: datagrams sent
/// from the peer's stack arrive on the RX ring, 256 bytes into their
/// frame, and an answer written over a request goes back out.
#[test]
fn receives_and_answers_on_veth_with_the_steering_program() {
    use super::super::bpf::{attach_xdp, create_xsk_map, load_xdp, map_set, AttachMode};
    use super::super::ebpf::{steering_program, Fallback, Steering, Target};

    let pair = veth_pair();
    let macs = (mac_of(&pair.a, "va"), mac_of(&pair.b, "vb"));
    let mac_text = |mac: [u8; 6]| {
        mac.iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":")
    };
    // Static neighbours: no ARP needed either way.
    ip(&[
        "-n",
        &pair.b.name,
        "neigh",
        "add",
        "10.199.0.1",
        "lladdr",
        &mac_text(macs.0),
        "dev",
        "vb",
    ]);
    let client = pair.b.run(|| {
        let socket = UdpSocket::bind("10.199.0.2:7000").unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        socket
    });
    let tracker = ("10.199.0.1".parse::<Ipv4Addr>().unwrap(), 6969);

    // One socket for both modes (the kernel frees a queue a moment
    // after its socket closes).
    let ifindex = pair.a.run(|| index_of("va").unwrap());
    let mut xsk = pair.a.run(|| Xsk::open(&config(ifindex)).unwrap());
    for mode in [AttachMode::Native, AttachMode::Generic] {
        pair.a.run(|| {
            let xsk = &mut xsk;
            let map = create_xsk_map(1).unwrap();
            map_set(map.as_fd(), 0, xsk.fd().as_raw_fd()).unwrap();
            let target = Target {
                ip: tracker.0.into(),
                port: tracker.1,
            };
            let program = steering_program(&Steering {
                targets: &[target],
                mac: macs.0,
                loopback_is_martian: true,
                xsk_map_fd: map.as_raw_fd(),
                fallback: Fallback::Pass,
            })
            .unwrap();
            let program = load_xdp(&program, "xsk_test").unwrap();
            let _link = attach_xdp(program.as_fd(), ifindex, mode)
                .unwrap_or_else(|e| panic!("{mode:?}: {e}"));

            for round in 0..3u32 {
                let request = format!("request {round} {mode:?}");
                client.send_to(request.as_bytes(), tracker).unwrap();
                assert!(
                    wait_readable(xsk, Duration::from_secs(5)),
                    "{mode:?}: no POLLIN; {:?}",
                    xsk.statistics()
                );
                let mut got = Vec::new();
                assert_eq!(xsk.receive(&mut got, 16), 1, "{mode:?}");
                let d = got[0];
                assert_eq!(d.addr % 2048, u64::from(XDP_PACKET_HEADROOM), "{mode:?}");
                let bytes = xsk.frame(d);
                assert_eq!(bytes.len(), 14 + 20 + 8 + request.len());
                assert_eq!(&bytes[0..6], &macs.0);
                assert_eq!(&bytes[6..12], &macs.1);
                assert_eq!(&bytes[42..], request.as_bytes());

                // The answer over its request, from the frame's start.
                let answer = format!("answer {round}");
                let frame = udp_frame(
                    macs,
                    tracker,
                    ("10.199.0.2".parse().unwrap(), 7000),
                    answer.as_bytes(),
                );
                xsk.frame_mut(d.addr)[..frame.len()].copy_from_slice(&frame);
                assert!(xsk.send(d.addr - u64::from(XDP_PACKET_HEADROOM), frame.len() as u32));
                xsk.flush().unwrap();
                let mut buf = [0u8; 256];
                let (n, from) = client.recv_from(&mut buf).unwrap();
                assert_eq!(&buf[..n], answer.as_bytes(), "{mode:?}");
                assert_eq!(from, SocketAddr::from(tracker));
            }
            // A datagram to another port passes to the stack.
            client
                .send_to(b"elsewhere", (tracker.0, tracker.1 + 1))
                .unwrap();
            assert!(!wait_readable(xsk, Duration::from_millis(50)));
            let stats = xsk.statistics().unwrap();
            assert_eq!(
                (stats.rx_dropped, stats.rx_invalid_descs),
                (0, 0),
                "{stats:?}"
            );
        });
    }
}

#[cfg(debug_assertions)]
#[test]
#[should_panic(expected = "does not hold it")]
fn debug_builds_catch_a_frame_given_back_twice() {
    let pair = veth_pair();
    pair.a.run(|| {
        let mut xsk = Xsk::open(&config(index_of("va").unwrap())).unwrap();
        let addr = xsk.take_free().unwrap();
        xsk.recycle(addr);
        xsk.recycle(addr);
    });
}

/// A socket handed to a new owner (as a successor in a hand-over takes
/// it: its descriptor and its UMEM's, the first owner's dropped) serves on
/// where the first left it, under the same program and map: datagrams
/// that came while no one read are on its RX ring, answers the first
/// queued and never flushed go out, and the frames are where the first
/// left them, none lost or found twice. A table that calls free a frame
/// on a ring is overruled by the ring.
#[test]
fn a_socket_taken_over_serves_on_where_the_first_left_it() {
    use super::super::bpf::{attach_xdp, create_xsk_map, load_xdp, map_set, AttachMode};
    use super::super::ebpf::{steering_program, Fallback, Steering, Target};

    let pair = veth_pair();
    let macs = (mac_of(&pair.a, "va"), mac_of(&pair.b, "vb"));
    let mac_text = macs
        .0
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":");
    ip(&[
        "-n",
        &pair.b.name,
        "neigh",
        "add",
        "10.199.0.1",
        "lladdr",
        &mac_text,
        "dev",
        "vb",
    ]);
    let client = pair.b.run(|| {
        let socket = UdpSocket::bind("10.199.0.2:7001").unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        socket
    });
    let tracker = ("10.199.0.1".parse::<Ipv4Addr>().unwrap(), 6970);
    let to_client = ("10.199.0.2".parse::<Ipv4Addr>().unwrap(), 7001);
    let ifindex = pair.a.run(|| index_of("va").unwrap());
    let mut first = pair.a.run(|| Xsk::open(&config(ifindex)).unwrap());
    first
        .check_remap()
        .expect("this kernel maps a bound socket's rings again");
    let first_fd = first.fd().as_raw_fd();
    let (map, _program, _link) = pair.a.run(|| {
        let map = create_xsk_map(1).unwrap();
        map_set(map.as_fd(), 0, first_fd).unwrap();
        let program = steering_program(&Steering {
            targets: &[Target {
                ip: tracker.0.into(),
                port: tracker.1,
            }],
            mac: macs.0,
            loopback_is_martian: true,
            xsk_map_fd: map.as_raw_fd(),
            fallback: Fallback::Pass,
        })
        .unwrap();
        let program = load_xdp(&program, "xsk_adopt").unwrap();
        let link = attach_xdp(program.as_fd(), ifindex, AttachMode::Native).unwrap();
        (map, program, link)
    });
    let answer = |xsk: &mut Xsk, text: &str, flush: bool| {
        let addr = xsk.take_free().unwrap();
        let frame = udp_frame(macs, tracker, to_client, text.as_bytes());
        xsk.frame_mut(addr)[..frame.len()].copy_from_slice(&frame);
        assert!(xsk.send(addr, frame.len() as u32));
        if flush {
            xsk.flush().unwrap();
        }
    };
    let receive_one = |xsk: &mut Xsk| -> String {
        assert!(wait_readable(xsk, Duration::from_secs(5)), "no POLLIN");
        let mut got = Vec::new();
        assert_eq!(xsk.receive(&mut got, 1), 1);
        let text = String::from_utf8(xsk.frame(got[0])[42..].to_vec()).unwrap();
        xsk.recycle(got[0].addr);
        text
    };

    // The first owner serves a request, then queues an answer it never
    // flushes, and stops; two requests come while no one reads.
    client.send_to(b"before", tracker).unwrap();
    assert_eq!(receive_one(&mut first), "before");
    answer(&mut first, "answered before", true);
    let mut buf = [0u8; 256];
    let (n, _) = client.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"answered before");
    // A successor's trial (`Xsk::probe`) while the first still serves
    // writes nothing the two share: the table still says that the frame
    // the first holds is the first's, and it queues an answer in it.
    let held = first.take_free().unwrap();
    let table = |xsk: &Xsk| {
        let mut bytes = [0u8; 16 + 64];
        // SAFETY: a read into a buffer of the length given.
        let n = unsafe {
            libc::pread(
                xsk.umem_fd().as_raw_fd(),
                bytes.as_mut_ptr().cast(),
                bytes.len(),
                64 * 2048,
            )
        };
        assert_eq!(n, bytes.len() as isize);
        bytes
    };
    let before = table(&first);
    Xsk::probe(first.fd(), first.umem_fd(), &first.config()).unwrap();
    assert_eq!(table(&first), before);
    let wrong = XskConfig {
        frames: 128,
        ..first.config()
    };
    let refused = Xsk::probe(first.fd(), first.umem_fd(), &wrong).unwrap_err();
    assert!(
        refused.to_string().contains("UMEM handed over"),
        "{refused}"
    );
    let frame = udp_frame(macs, tracker, to_client, b"queued by the first");
    first.frame_mut(held)[..frame.len()].copy_from_slice(&frame);
    assert!(first.send(held, frame.len() as u32));
    assert_eq!(first.counters().refused, 0);
    let (socket, umem) = (
        first.fd().try_clone_to_owned().unwrap(),
        first.umem_fd().try_clone_to_owned().unwrap(),
    );
    let handed = first.config();
    assert_eq!((handed.queue, handed.frames), (0, 64));
    let free = first.free_frames();
    drop(first);
    client.send_to(b"while no one reads 1", tracker).unwrap();
    client.send_to(b"while no one reads 2", tracker).unwrap();
    std::thread::sleep(Duration::from_millis(50));

    let mut taken = pair.a.run(|| Xsk::adopt(socket, umem, &handed).unwrap());
    assert_eq!(taken.counters().table_repairs, 0);
    assert_eq!(taken.free_frames(), free);
    assert_eq!(taken.config(), handed);
    // The answer queued by the first goes out at the new owner's flush.
    taken.flush().unwrap();
    let (n, _) = client.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"queued by the first");
    assert_eq!(receive_one(&mut taken), "while no one reads 1");
    assert_eq!(receive_one(&mut taken), "while no one reads 2");
    answer(&mut taken, "answered by the second", true);
    let (n, _) = client.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"answered by the second");
    // More requests than there are frames: none lost on the way.
    for round in 0..100 {
        let text = format!("round {round}");
        client.send_to(text.as_bytes(), tracker).unwrap();
        assert_eq!(receive_one(&mut taken), text);
    }
    // Every frame sent comes back: the free list is whole again (half
    // the frames), the first owner's unflushed answer's frame too.
    let deadline = Instant::now() + Duration::from_secs(5);
    while taken.free_frames() < 32 {
        taken.flush().unwrap();
        assert!(Instant::now() < deadline, "frames not completed");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!((free, taken.free_frames()), (31, 32));
    let stats = taken.statistics().unwrap();
    assert_eq!(
        (stats.rx_dropped, stats.rx_invalid_descs),
        (0, 0),
        "{stats:?}"
    );
    assert_eq!(taken.counters().refused, 0);

    // A third owner, whose table says a frame on the fill ring is free
    // (as if the one before had stopped between the two): the ring wins.
    let (socket, umem) = (
        taken.fd().try_clone_to_owned().unwrap(),
        taken.umem_fd().try_clone_to_owned().unwrap(),
    );
    let on_fill = taken.fill.pending()[0] / 2048;
    drop(taken);
    // Its byte in the table follows the frames and a 16-byte header.
    let free_byte = [3u8];
    // SAFETY: a write of one byte to the memfd, at that frame's entry.
    let rc = unsafe {
        libc::pwrite(
            umem.as_raw_fd(),
            free_byte.as_ptr().cast(),
            1,
            (64 * 2048 + 16 + on_fill) as libc::off_t,
        )
    };
    assert_eq!(rc, 1);
    let third = pair.a.run(|| Xsk::adopt(socket, umem, &handed).unwrap());
    assert_eq!(third.counters().table_repairs, 1);
    assert_eq!(third.free_frames(), 32);
    drop(map);
}
