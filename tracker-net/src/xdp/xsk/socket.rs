//! The socket's setup: socket(AF_XDP), the UMEM registered, the rings
//! sized and mapped, the bind to a queue; and the socket options read back
//! (zero-copy or not, the kernel's counters).

use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use super::mmap::annotate;
use super::ring::{ConsRing, ProdRing};
use super::umem::{Owner, Umem};
use super::{XdpStatistics, Xsk, XskConfig, XskCounters};

const _: () = assert!(size_of::<libc::sockaddr_xdp>() == 16);
const _: () = assert!(size_of::<libc::xdp_desc>() == 16);
const _: () = assert!(size_of::<libc::xdp_ring_offset>() == 32);
const _: () = assert!(size_of::<libc::xdp_mmap_offsets>() == 128);
// addr, len, chunk_size, headroom, flags and (since 6.8, in what was tail
// padding) tx_metadata_len, left 0.
const _: () = assert!(size_of::<libc::xdp_umem_reg>() == 32);
const _: () = assert!(size_of::<libc::xdp_statistics>() == 48);
const _: () = assert!(size_of::<libc::xdp_statistics_v1>() == 24);

impl Xsk {
    /// Opens an AF_XDP socket on `config.queue` of `config.ifindex`:
    /// socket(AF_XDP), UMEM (a memfd mapped shared, populated) registered with
    /// XDP_UMEM_REG (headroom 0, aligned frames), fill and completion rings
    /// of `frames` entries, RX and TX rings of `frames / 2`, all mapped,
    /// then bound with XDP_USE_NEED_WAKEUP and XDP_COPY or XDP_ZEROCOPY.
    /// Half the frames go on the fill ring at once; the other half are the
    /// free list, for answers ([`Xsk::take_free`]).
    ///
    /// Each error names the step that failed. Receiving needs an XDP
    /// program on the interface that redirects to this socket through an
    /// XSKMAP; sending does not.
    pub fn open(config: &XskConfig) -> io::Result<Xsk> {
        let umem_len = validate(config)?;
        let frames = config.frames;
        let half = frames / 2;

        // SAFETY: plain socket(2).
        let raw = unsafe {
            libc::socket(
                libc::AF_XDP,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
                0,
            )
        };
        if raw < 0 {
            return Err(os_error("socket(AF_XDP)"));
        }
        // SAFETY: a fresh fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };

        let reserve = usize::try_from(half).unwrap_or(usize::MAX);
        let umem = Umem::new(frames, config.frame_size, umem_len, reserve).map_err(|err| {
            annotate(
                err,
                &format!(
                    "UMEM of {frames} frames of {} bytes: mmap",
                    config.frame_size
                ),
            )
        })?;

        // SAFETY: all-zero is a valid xdp_umem_reg (flags 0, no metadata).
        let mut reg: libc::xdp_umem_reg = unsafe { zeroed() };
        (reg.addr, reg.len) = umem.region();
        reg.chunk_size = config.frame_size;
        reg.headroom = 0;
        setsockopt(fd.as_fd(), libc::XDP_UMEM_REG, &reg).map_err(|err| {
            let hint = if err.raw_os_error() == Some(libc::ENOBUFS) {
                " (over RLIMIT_MEMLOCK without CAP_IPC_LOCK?)"
            } else {
                ""
            };
            annotate(err, &format!("register the UMEM (XDP_UMEM_REG){hint}"))
        })?;

        for (option, entries, name) in [
            (libc::XDP_UMEM_FILL_RING, frames, "fill"),
            (libc::XDP_UMEM_COMPLETION_RING, frames, "completion"),
            (libc::XDP_RX_RING, half, "RX"),
            (libc::XDP_TX_RING, half, "TX"),
        ] {
            let entries = libc::c_int::try_from(entries).unwrap_or(libc::c_int::MAX);
            setsockopt(fd.as_fd(), option, &entries)
                .map_err(|err| annotate(err, &format!("size the {name} ring ({entries})")))?;
        }

        let (fill, completion, rx, tx) = map_rings(fd.as_fd(), frames)?;

        let mut xsk = Xsk {
            fill,
            completion,
            rx,
            tx,
            fd,
            umem,
            ifindex: config.ifindex,
            queue: config.queue,
            tx_unpublished: false,
            zero_copy: config.zero_copy,
            counters: XskCounters::default(),
        };
        // The first half on the fill ring (before bind, so that a
        // zero-copy driver finds frames when it sets the queue up), the
        // second half free, pushed from the top so that the lowest is
        // handed out first.
        let frame_size = u64::from(config.frame_size);
        for index in 0..half {
            let addr = u64::from(index) * frame_size;
            if xsk.fill.push(addr) {
                xsk.umem.set_owner(addr, Owner::Kernel);
            } else {
                xsk.umem.push_free(addr);
            }
        }
        for index in (half..frames).rev() {
            xsk.umem.push_free(u64::from(index) * frame_size);
        }
        xsk.fill.submit();

        xsk.bind(config)?;
        xsk.zero_copy = xsk.options_zero_copy().unwrap_or(config.zero_copy);
        Ok(xsk)
    }

    /// Whether [`Xsk::adopt`] would take `socket` and `umem` over, without
    /// writing to either, so that the process that serves them may go on
    /// meanwhile: an AF_XDP socket, a memfd of the size and header of
    /// `config`'s UMEM, and rings that map again (mapped, then unmapped).
    pub fn probe(
        socket: BorrowedFd<'_>,
        umem: BorrowedFd<'_>,
        config: &XskConfig,
    ) -> io::Result<()> {
        let umem_len = validate(config)?;
        check_domain(socket)?;
        Umem::probe(umem, config.frames, config.frame_size, umem_len)
            .map_err(|err| annotate(err, "the UMEM handed over"))?;
        map_rings(socket, config.frames)
            .map(drop)
            .map_err(|err| remap_error(err, "the socket handed over"))
    }

    /// Takes over a socket that another process opened and bound (a
    /// predecessor in a hand-over: `socket` and `umem` are its descriptors,
    /// passed over a Unix socket; `config` what it opened them with),
    /// without a call that needs a privilege: the UMEM's memfd is mapped
    /// again, and so are the four rings, from the socket (Linux 6.4+: see
    /// [`Xsk::check_remap`]). Each frame is where the UMEM's table says
    /// (free, or with the kernel), except that one a ring shows the kernel
    /// has is the kernel's whatever the table says
    /// ([`XskCounters::table_repairs`]); the rings go on from their shared
    /// indices. The table is written as the frames are found, so the
    /// process before must have stopped receiving, sending and recycling;
    /// [`Xsk::probe`] tries the same while it still does.
    pub fn adopt(socket: OwnedFd, umem: OwnedFd, config: &XskConfig) -> io::Result<Xsk> {
        let umem_len = validate(config)?;
        let frames = config.frames;
        let reserve = usize::try_from(frames / 2).unwrap_or(usize::MAX);
        check_domain(socket.as_fd())?;
        let umem = Umem::adopt(umem, frames, config.frame_size, umem_len, reserve)
            .map_err(|err| annotate(err, "the UMEM handed over"))?;
        let (fill, completion, rx, tx) = map_rings(socket.as_fd(), frames)
            .map_err(|err| remap_error(err, "the socket handed over"))?;
        let mut xsk = Xsk {
            fill,
            completion,
            rx,
            tx,
            fd: socket,
            umem,
            ifindex: config.ifindex,
            queue: config.queue,
            tx_unpublished: false,
            zero_copy: config.zero_copy,
            counters: XskCounters::default(),
        };
        xsk.zero_copy = xsk.options_zero_copy().unwrap_or(config.zero_copy);
        // What the rings hold is the kernel's: the fill and TX rings'
        // entries not yet taken, the RX and completion rings' not yet read.
        let mut held: Vec<u64> = xsk.fill.pending();
        held.extend(xsk.completion.peek_all());
        held.extend(xsk.rx.peek_all().iter().map(|d| d.addr));
        held.extend(xsk.tx.pending().iter().map(|d| d.addr));
        for addr in held {
            let base = xsk.umem.base(addr);
            if xsk.umem.with_kernel(base) {
                xsk.counters.table_repairs += 1;
            }
        }
        Ok(xsk)
    }

    /// Whether another process could take this socket over
    /// ([`Xsk::adopt`]): the kernel maps a bound socket's rings again only
    /// since Linux 6.4 (before, every mmap of a bound socket fails with
    /// EBUSY). Tried on the fill ring, which is mapped again and unmapped.
    pub fn check_remap(&self) -> io::Result<()> {
        let offsets = mmap_offsets(self.fd.as_fd())?;
        ProdRing::<u64>::map(
            self.fd.as_fd(),
            &offsets.fr,
            self.umem.frames(),
            libc::XDP_UMEM_PGOFF_FILL_RING,
            "fill",
        )
        .map(drop)
        .map_err(|err| {
            let hint = if err.raw_os_error() == Some(libc::EBUSY) {
                "; Linux 6.4 and later allow it"
            } else {
                ""
            };
            annotate(
                err,
                &format!("mapping a bound AF_XDP socket's rings again{hint}"),
            )
        })
    }

    fn bind(&self, config: &XskConfig) -> io::Result<()> {
        // SAFETY: all-zero is a valid sockaddr_xdp.
        let mut sxdp: libc::sockaddr_xdp = unsafe { zeroed() };
        sxdp.sxdp_family = libc::AF_XDP as u16;
        sxdp.sxdp_flags = libc::XDP_USE_NEED_WAKEUP
            | if config.zero_copy {
                libc::XDP_ZEROCOPY
            } else {
                libc::XDP_COPY
            };
        sxdp.sxdp_ifindex = config.ifindex;
        sxdp.sxdp_queue_id = config.queue;
        // SAFETY: a sockaddr_xdp of the size given, alive for the call.
        let rc = unsafe {
            libc::bind(
                self.fd.as_raw_fd(),
                &sxdp as *const libc::sockaddr_xdp as *const libc::sockaddr,
                size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        let (queue, ifindex) = (config.queue, config.ifindex);
        let mode = if config.zero_copy {
            "zero-copy"
        } else {
            "copy mode"
        };
        let hint = match err.raw_os_error() {
            Some(libc::ENODEV) => format!(": no interface has index {ifindex}"),
            Some(libc::EOPNOTSUPP) if config.zero_copy => {
                ": the driver has no zero-copy mode for AF_XDP; open in copy mode".to_string()
            }
            Some(libc::EINVAL) if config.zero_copy => format!(
                ": no queue {queue} on the interface, or the driver refused zero-copy \
                 mode (it may have none; copy mode works everywhere)"
            ),
            Some(libc::EINVAL) => format!(": no queue {queue} on the interface?"),
            Some(libc::EBUSY) => format!(": another AF_XDP socket holds queue {queue}"),
            _ => String::new(),
        };
        Err(io::Error::new(
            err.kind(),
            format!("bind to queue {queue} of ifindex {ifindex} ({mode}): {err}{hint}"),
        ))
    }

    /// XDP_OPTIONS (Linux 5.3+): whether the kernel bound in zero-copy mode.
    fn options_zero_copy(&self) -> Option<bool> {
        // SAFETY: all-zero is a valid xdp_options.
        let mut options: libc::xdp_options = unsafe { zeroed() };
        let len = getsockopt(self.fd.as_fd(), libc::XDP_OPTIONS, &mut options).ok()?;
        (len >= size_of::<libc::xdp_options>())
            .then_some(options.flags & libc::XDP_OPTIONS_ZEROCOPY != 0)
    }

    /// The kernel's counters for the socket (XDP_STATISTICS).
    pub fn statistics(&self) -> io::Result<XdpStatistics> {
        // SAFETY: all-zero is a valid xdp_statistics.
        let mut stats: libc::xdp_statistics = unsafe { zeroed() };
        let len = getsockopt(self.fd.as_fd(), libc::XDP_STATISTICS, &mut stats)
            .map_err(|err| annotate(err, "XDP_STATISTICS"))?;
        let extra = len >= size_of::<libc::xdp_statistics>();
        Ok(XdpStatistics {
            rx_dropped: stats.rx_dropped,
            rx_invalid_descs: stats.rx_invalid_descs,
            tx_invalid_descs: stats.tx_invalid_descs,
            rx_ring_full: extra.then_some(stats.rx_ring_full),
            rx_fill_ring_empty_descs: extra.then_some(stats.rx_fill_ring_empty_descs),
            tx_ring_empty_descs: extra.then_some(stats.tx_ring_empty_descs),
        })
    }
}

/// Checks the configuration; returns the UMEM's length.
/// Refuses a descriptor handed over that is not an AF_XDP socket.
fn check_domain(socket: BorrowedFd<'_>) -> io::Result<()> {
    let mut domain: libc::c_int = 0;
    let len = getsockopt_at(socket, libc::SOL_SOCKET, libc::SO_DOMAIN, &mut domain)
        .map_err(|err| annotate(err, "the socket handed over (SO_DOMAIN)"))?;
    if len != size_of::<libc::c_int>() || domain != libc::AF_XDP {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the socket handed over is not an AF_XDP socket",
        ));
    }
    Ok(())
}

/// A failure to map a bound socket's rings again, with the kernel's rule
/// where it is the cause.
fn remap_error(err: io::Error, what: &str) -> io::Error {
    let hint = if err.raw_os_error() == Some(libc::EBUSY) {
        " (the kernel maps a bound socket's rings only once before Linux 6.4)"
    } else {
        ""
    };
    annotate(err, &format!("{what}{hint}"))
}

fn validate(config: &XskConfig) -> io::Result<usize> {
    let invalid = |what: String| io::Error::new(io::ErrorKind::InvalidInput, what);
    if !config.frames.is_power_of_two() || !(64..=1 << 24).contains(&config.frames) {
        return Err(invalid(format!(
            "AF_XDP frames: {} is not a power of two from 64 to 2^24",
            config.frames
        )));
    }
    if config.frame_size != 2048 && config.frame_size != 4096 {
        return Err(invalid(format!(
            "AF_XDP frame size: {} is neither 2048 nor 4096",
            config.frame_size
        )));
    }
    usize::try_from(u64::from(config.frames) * u64::from(config.frame_size))
        .map_err(|_| invalid("AF_XDP UMEM larger than the address space".to_string()))
}

fn os_error(what: &str) -> io::Error {
    annotate(io::Error::last_os_error(), what)
}

fn setsockopt<T>(fd: BorrowedFd<'_>, option: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: `value` is a T of the size given, alive for the call; every
    // T used here is the plain struct or int the option takes.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            option,
            value as *const T as *const libc::c_void,
            size_of::<T>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// getsockopt of SOL_XDP into `value`; returns the length the kernel
/// wrote.
fn getsockopt<T>(fd: BorrowedFd<'_>, option: libc::c_int, value: &mut T) -> io::Result<usize> {
    getsockopt_at(fd, libc::SOL_XDP, option, value)
}

/// getsockopt of `level` into `value`; returns the length the kernel
/// wrote.
fn getsockopt_at<T>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    option: libc::c_int,
    value: &mut T,
) -> io::Result<usize> {
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: `value` is a writable T of the size given, alive for the
    // call; the kernel writes at most `len` bytes.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            option,
            value as *mut T as *mut libc::c_void,
            &mut len,
        )
    };
    if rc == 0 {
        Ok(len as usize)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The four rings of a socket with `frames` frames, mapped: fill and
/// completion of `frames` entries, RX and TX of half as many.
#[allow(clippy::type_complexity)]
fn map_rings(
    fd: BorrowedFd<'_>,
    frames: u32,
) -> io::Result<(
    ProdRing<u64>,
    ConsRing<u64>,
    ConsRing<libc::xdp_desc>,
    ProdRing<libc::xdp_desc>,
)> {
    let half = frames / 2;
    let offsets = mmap_offsets(fd)?;
    let fill = ProdRing::map(
        fd,
        &offsets.fr,
        frames,
        libc::XDP_UMEM_PGOFF_FILL_RING,
        "fill",
    )?;
    let completion = ConsRing::map(
        fd,
        &offsets.cr,
        frames,
        libc::XDP_UMEM_PGOFF_COMPLETION_RING,
        "completion",
    )?;
    let rx = ConsRing::map(fd, &offsets.rx, half, libc::XDP_PGOFF_RX_RING as u64, "RX")?;
    let tx = ProdRing::map(fd, &offsets.tx, half, libc::XDP_PGOFF_TX_RING as u64, "TX")?;
    Ok((fill, completion, rx, tx))
}

/// XDP_MMAP_OFFSETS, with the flags field (Linux 5.4+, as need_wakeup).
fn mmap_offsets(fd: BorrowedFd<'_>) -> io::Result<libc::xdp_mmap_offsets> {
    // SAFETY: all-zero is a valid xdp_mmap_offsets.
    let mut offsets: libc::xdp_mmap_offsets = unsafe { zeroed() };
    let len = getsockopt(fd, libc::XDP_MMAP_OFFSETS, &mut offsets)
        .map_err(|err| annotate(err, "ring offsets (XDP_MMAP_OFFSETS)"))?;
    if len < size_of::<libc::xdp_mmap_offsets>() {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "ring offsets (XDP_MMAP_OFFSETS): no flags field; need_wakeup needs Linux 5.4+",
        ));
    }
    Ok(offsets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_is_checked() {
        let good = XskConfig {
            ifindex: 1,
            queue: 0,
            frames: 64,
            frame_size: 2048,
            zero_copy: false,
        };
        assert_eq!(validate(&good).unwrap(), 64 * 2048);
        for bad in [
            XskConfig { frames: 32, ..good },
            XskConfig {
                frames: 100,
                ..good
            },
            XskConfig { frames: 0, ..good },
            XskConfig {
                frame_size: 1024,
                ..good
            },
            XskConfig {
                frame_size: 3000,
                ..good
            },
        ] {
            let err = validate(&bad).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{bad:?}");
            assert!(matches!(Xsk::open(&bad), Err(e) if e.kind() == io::ErrorKind::InvalidInput));
        }
    }
}
