//! The UDP tracker over AF_XDP: the same request handling as the socket
//! path (`server.rs`), fed from an AF_XDP socket's RX ring, its answers
//! written into UMEM frames and put on the TX ring.
//!
//! The XDP program hands this worker the datagrams that arrive on its
//! queue, so an announce lands where the NIC's hash put it, not at its
//! torrent's owner: announces for other workers cross the mesh as they do
//! without steering (`announces_routed{route="forwarded"}` says how many).
//!
//! What the kernel's stack would drop is dropped here too, or never gets
//! here: the program passes frames to another MAC address, VLAN-tagged
//! frames and martian sources to the kernel; this loop drops what fails
//! the checksums (`frame::parse`) and datagrams from clients the routing
//! table does not send back out of the socket's interface (no route, a
//! blackhole, the host's own or a broadcast address, another interface),
//! each counted by its kind.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::rc::{Rc, Weak};
use std::time::Instant;

use tracing::warn;
use tracker_net::udp::{BATCH, MAX_DATAGRAM};
use tracker_net::xdp::frame::{
    answer_header_len, parse, write_answer, Datagram, FrameError, FrameHeaders,
};
use tracker_net::xdp::route::{self, RouteView};
use tracker_net::xdp::xsk::{Descriptor, XdpStatistics, Xsk};
use tracker_runtime::counters;
use tracker_runtime::metrics::{Label, MetricSource, Sample, UDP_ERRORS};
use tracker_runtime::quantum::Quantum;
use tracker_runtime::ready::readable;
use tracker_runtime::throttle::LogThrottle;
use tracker_runtime::workers;

use crate::coalesce::Coalesce;
use crate::server::{Answers, Forwards, Path, UdpService, UdpStats};

/// Wakeups of the kernel to transmit in one flush, at most: each sends up
/// to 32 frames in copy mode (the kernel's budget), so a full batch of
/// answers needs two or three.
const MAX_WAKEUPS_PER_FLUSH: usize = 8;
/// How long the loop sleeps, instead of waiting for frames, while answers
/// it queued are still on the TX ring (a zero-copy driver sends them later).
const TX_PENDING_WAIT: std::time::Duration = std::time::Duration::from_micros(50);

/// Receive batches answered after a stop: the RX ring's size (at most
/// 32768 descriptors, `udp.xdp.frames` / 2) in batches of BATCH.
const DRAIN_BATCHES: usize = 32768 / BATCH;

counters! {
    /// What the AF_XDP path counts besides requests, exported with
    /// `protocol="udp"`, `path="xdp"`.
    pub struct FrameStats {
        /// Frames the XDP program took that hold no datagram we answer (bad
        /// lengths, a bad IPv4 header checksum, a zero source port):
        /// dropped. What the program does not take passes to the kernel,
        /// so these are malformed or hostile.
        pub bad_frames: Counter => UDP_ERRORS { kind = "bad_frame" },
        /// Datagrams whose UDP checksum is wrong, or missing over IPv6:
        /// dropped, as the kernel drops them.
        pub bad_udp_checksums: Counter => UDP_ERRORS { kind = "bad_udp_checksum" },
        /// Datagrams from a client the routing table does not send back out
        /// of the interface they came in by (no route, a blackhole,
        /// unreachable or prohibit route, the host's own or a broadcast
        /// address, a route by another interface): dropped, as the kernel's
        /// sockets could not answer them there.
        pub no_route: Counter => UDP_ERRORS { kind = "no_route" },
    }
}

/// Answers gathered for an AF_XDP socket: each payload and the frame it
/// answers; headers are written when they go into UMEM.
pub(crate) struct XdpBatch {
    replies: Vec<FrameHeaders>,
    /// Payload buffers, reused from batch to batch.
    bufs: Vec<Vec<u8>>,
    len: usize,
}

impl Default for XdpBatch {
    fn default() -> Self {
        XdpBatch {
            replies: Vec::with_capacity(BATCH),
            bufs: (0..BATCH)
                .map(|_| Vec::with_capacity(MAX_DATAGRAM))
                .collect(),
            len: 0,
        }
    }
}

impl Answers<FrameHeaders> for XdpBatch {
    fn push(&mut self, reply: FrameHeaders) -> &mut Vec<u8> {
        // Callers check `is_full` first; past it, the last answer is
        // replaced rather than the worker panicking.
        if self.len < BATCH {
            self.len += 1;
            self.replies.push(reply);
        } else if let Some(last) = self.replies.last_mut() {
            *last = reply;
        }
        // `bufs` holds BATCH buffers (`default`) and 1 <= len <= BATCH.
        #[allow(clippy::indexing_slicing)]
        let buf = &mut self.bufs[self.len - 1];
        buf.clear();
        buf
    }

    fn is_full(&self) -> bool {
        self.len >= BATCH
    }

    fn len(&self) -> usize {
        self.len
    }

    fn truncate(&mut self, len: usize) {
        if len < self.len {
            self.len = len;
            self.replies.truncate(len);
        }
    }
}

/// A worker's AF_XDP counters, shared by its sockets: a metric source of
/// their own, with `path="xdp"`.
#[derive(Default)]
struct XdpCounters {
    stats: UdpStats,
    frames: FrameStats,
    /// The worker's sockets, for the kernel's counts of drops.
    sockets: RefCell<Vec<Weak<XdpPath>>>,
}

impl MetricSource for XdpCounters {
    fn samples(&self, out: &mut Vec<Sample>) {
        const SCOPE: &[Label] = &[("protocol", "udp"), ("path", "xdp")];
        self.stats.samples(SCOPE, out);
        self.frames.samples(SCOPE, out);
        kernel_drop_samples(&self.sockets.borrow(), out);
    }
}

/// The datagram a received frame holds, if the kernel's stack would have
/// let it through: counted by its kind where not.
fn admit<'a>(
    frame: &'a [u8],
    routes: &RouteView,
    ifindex: u32,
    frames: &FrameStats,
) -> Option<Datagram<'a>> {
    let datagram = match parse(frame) {
        Ok(datagram) => datagram,
        Err(FrameError::BadUdpChecksum | FrameError::NoUdpChecksum) => {
            frames.bad_udp_checksums.inc();
            return None;
        }
        Err(_) => {
            frames.bad_frames.inc();
            return None;
        }
    };
    let client = datagram.headers.client.ip();
    if !routes.table().leads_out_of(client, ifindex) {
        frames.no_route.inc();
        return None;
    }
    Some(datagram)
}

/// One AF_XDP socket, shared by its receive loop and the tasks that answer
/// forwarded requests.
pub(crate) struct XdpPath {
    xsk: RefCell<Xsk>,
    forwarded: RefCell<XdpBatch>,
    counters: Rc<XdpCounters>,
}

impl XdpPath {
    /// Writes one answer into a free frame and queues it on the TX ring:
    /// false when no frame or no room was free (the answer is dropped).
    fn queue(xsk: &mut Xsk, asked: &FrameHeaders, payload: &[u8]) -> bool {
        let Some(addr) = xsk.take_free() else {
            return false;
        };
        let header = answer_header_len(asked);
        let frame = xsk.frame_mut(addr);
        let written = match frame.get_mut(header..header + payload.len()) {
            Some(room) => {
                room.copy_from_slice(payload);
                write_answer(frame, asked, payload.len())
            }
            None => None,
        };
        match written.and_then(|len| u32::try_from(len).ok()) {
            Some(len) if xsk.send(addr, len) => true,
            _ => {
                xsk.recycle(addr);
                false
            }
        }
    }

    /// Publishes the queued answers to the kernel. Copy mode transmits a
    /// few dozen frames per wakeup, so the kernel is woken again while it
    /// makes progress; what it leaves is sent at the next flush, or before
    /// the loop waits.
    fn publish(xsk: &mut Xsk, stats: &UdpStats) {
        let mut pending = u32::MAX;
        for _ in 0..MAX_WAKEUPS_PER_FLUSH {
            if let Err(e) = xsk.flush() {
                stats.send_errors.inc();
                static THROTTLE: LogThrottle = LogThrottle::new();
                if let Some(left_out) = THROTTLE.allow() {
                    warn!("AF_XDP: send failed: {e} ({left_out} more since the last such line)");
                }
                return;
            }
            let left = xsk.tx_pending();
            if left == 0 || left >= pending {
                return;
            }
            pending = left;
        }
    }

    /// The kernel's counts of what it dropped on this socket.
    fn kernel_drops(&self) -> Option<XdpStatistics> {
        self.xsk.try_borrow().ok()?.statistics().ok()
    }
}

impl Path for XdpPath {
    type Reply = FrameHeaders;
    type Batch = XdpBatch;

    fn stats<'a>(&'a self, _: &'a UdpService) -> &'a UdpStats {
        &self.counters.stats
    }

    fn client(reply: &FrameHeaders) -> SocketAddr {
        reply.client
    }

    fn flush(&self, batch: &mut XdpBatch, stats: &UdpStats) {
        if batch.len == 0 {
            return;
        }
        // Never borrowed across an await; a flush from inside the receive
        // loop's borrow (it cannot happen: a batch of BATCH frames fills
        // at most one batch of answers) drops the answers, counted.
        let Ok(mut xsk) = self.xsk.try_borrow_mut() else {
            stats.send_errors.add(batch.len as u64);
            batch.truncate(0);
            return;
        };
        for (asked, payload) in batch.replies.iter().zip(&batch.bufs) {
            if Self::queue(&mut xsk, asked, payload) {
                stats.bytes_out.add(payload.len() as u64);
            } else {
                stats.send_errors.inc();
            }
        }
        batch.truncate(0);
        Self::publish(&mut xsk, stats);
    }

    fn send_now(&self, data: &[u8], reply: FrameHeaders, stats: &UdpStats) {
        let Ok(mut xsk) = self.xsk.try_borrow_mut() else {
            stats.send_errors.inc();
            return;
        };
        if Self::queue(&mut xsk, &reply, data) {
            stats.bytes_out.add(data.len() as u64);
            Self::publish(&mut xsk, stats);
        } else {
            stats.send_errors.inc();
        }
    }

    fn forwarded(&self) -> &RefCell<XdpBatch> {
        &self.forwarded
    }
}

impl UdpService {
    /// Serves a worker's AF_XDP sockets (a queue each) until
    /// [`stop`](Self::stop) is called (Ok).
    pub async fn serve_xdp(self: Rc<Self>, sockets: Vec<Xsk>) -> Result<(), String> {
        if sockets.is_empty() {
            return Ok(());
        }
        let counters = Rc::new(XdpCounters::default());
        let source: Weak<dyn MetricSource> = Rc::downgrade(&counters) as _;
        self.shard.add_metric_source(source);
        let loops = sockets
            .into_iter()
            .map(|xsk| glommio::spawn_local(self.clone().serve_socket(xsk, counters.clone())))
            .collect();
        workers::all_or_first_error(loops).await
    }

    /// Serves one AF_XDP socket until [`stop`](Self::stop) is called (Ok).
    async fn serve_socket(
        self: Rc<Self>,
        xsk: Xsk,
        counters: Rc<XdpCounters>,
    ) -> Result<(), String> {
        let fd = xsk.fd().as_raw_fd();
        // SAFETY: the socket is in `path`, which this loop holds to its end.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        let ifindex = xsk.ifindex();
        // The start read the routes before it opened a socket.
        let mut routes = route::installed()
            .ok_or("AF_XDP: a socket without the routing table to check its clients by")?
            .view();
        let path = Rc::new(XdpPath {
            xsk: RefCell::new(xsk),
            forwarded: RefCell::new(XdpBatch::default()),
            counters,
        });
        path.counters
            .sockets
            .borrow_mut()
            .push(Rc::downgrade(&path));
        let stats = &path.counters.stats;
        let mut received: Vec<Descriptor> = Vec::with_capacity(BATCH);
        let mut tx = XdpBatch::default();
        let mut forwards = Forwards::new(self.shard.workers());
        let mut quantum = Quantum::default();
        let mut coalesce = Coalesce::new(self.coalesce);
        // After the stop, what the RX ring already holds is answered (a
        // ring's worth at most) before the socket closes: the kernel's
        // sockets take what comes after.
        let mut after_stop = DRAIN_BATCHES;
        loop {
            if self.stop.is_fired() {
                if after_stop == 0 {
                    return Ok(());
                }
                after_stop -= 1;
            }
            received.clear();
            let n = path.xsk.borrow_mut().receive(&mut received, BATCH);
            if n == 0 && self.stop.is_fired() {
                return Ok(());
            }
            if n == 0 && path.xsk.borrow_mut().tx_pending() > 0 {
                XdpPath::publish(&mut path.xsk.borrow_mut(), stats);
                quantum.wait(glommio::timer::sleep(TX_PENDING_WAIT)).await;
                continue;
            }
            if n == 0 {
                let woken = futures_lite::future::or(async { Some(readable(fd).await) }, async {
                    self.stop.wait().await;
                    None
                });
                if let Some(Err(e)) = quantum.wait(woken).await {
                    static THROTTLE: LogThrottle = LogThrottle::new();
                    if let Some(left_out) = THROTTLE.allow() {
                        warn!(
                            "AF_XDP: waiting for frames: {e} ({left_out} more since the last \
                             such line)"
                        );
                    }
                    glommio::timer::sleep(std::time::Duration::from_millis(1)).await;
                }
                continue;
            }
            {
                routes.refresh();
                let xsk = path.xsk.borrow();
                self.prefetch(received.iter().filter_map(|&d| {
                    let datagram = parse(xsk.frame(d)).ok()?;
                    Some((datagram.payload, datagram.headers.client))
                }));
                let frames = &path.counters.frames;
                for &d in &received {
                    if let Some(datagram) = admit(xsk.frame(d), &routes, ifindex, frames) {
                        stats.bytes_in.add(datagram.payload.len() as u64);
                        self.handle_contained(
                            datagram.payload,
                            datagram.headers,
                            &path,
                            &mut tx,
                            &mut forwards,
                        );
                    }
                }
            }
            // The requests are answered (or forwarded, with what their
            // answers need copied out): their frames can take new ones.
            {
                let mut xsk = path.xsk.borrow_mut();
                for d in &received {
                    xsk.recycle(d.addr);
                }
                // A zero-copy driver that ran out of frames sleeps until
                // told there are more.
                if xsk.rx_needs_wakeup() {
                    xsk.wake_rx();
                }
            }
            path.flush(&mut tx, stats);
            self.forward(&mut forwards, &path);
            if n < BATCH && coalesce.worth_waiting(n, Instant::now()) {
                // As on the socket path (`udp.coalesce_us`): at half load,
                // let frames gather rather than wake for each.
                let gathered = futures_lite::future::or(
                    glommio::timer::sleep(coalesce.window()),
                    self.stop.wait(),
                );
                quantum.wait(gathered).await;
            } else {
                // Under a flood this loop always has work: let the
                // worker's other tasks have their turn.
                quantum.yield_now().await;
            }
        }
    }
}

/// The kernel's drops on a worker's AF_XDP sockets, added up, as samples
/// of `tracker_udp_errors_total` with `path="xdp"`.
fn kernel_drop_samples(sockets: &[Weak<XdpPath>], out: &mut Vec<Sample>) {
    let mut sum = XdpStatistics::default();
    for socket in sockets.iter().filter_map(Weak::upgrade) {
        if let Some(s) = socket.kernel_drops() {
            sum.rx_dropped += s.rx_dropped;
            sum.rx_invalid_descs += s.rx_invalid_descs + s.tx_invalid_descs;
            sum.rx_ring_full = Some(sum.rx_ring_full.unwrap_or(0) + s.rx_ring_full.unwrap_or(0));
            sum.rx_fill_ring_empty_descs = Some(
                sum.rx_fill_ring_empty_descs.unwrap_or(0) + s.rx_fill_ring_empty_descs.unwrap_or(0),
            );
        }
    }
    const SCOPE: &[Label] = &[("protocol", "udp"), ("path", "xdp")];
    for (labels, value) in [
        // The RX ring was full: the worker did not keep up.
        (
            &[("kind", "xdp_ring_full")][..],
            sum.rx_ring_full.unwrap_or(0),
        ),
        // No frame was on the fill ring to receive into.
        (
            &[("kind", "xdp_no_free_frame")][..],
            sum.rx_fill_ring_empty_descs.unwrap_or(0),
        ),
        // Dropped by the kernel for another reason (a frame too long).
        (&[("kind", "xdp_rx_dropped")][..], sum.rx_dropped),
        (
            &[("kind", "xdp_invalid_descriptor")][..],
            sum.rx_invalid_descs,
        ),
    ] {
        out.push(Sample {
            family: &UDP_ERRORS,
            scope: SCOPE,
            labels,
            value,
        });
    }
}
