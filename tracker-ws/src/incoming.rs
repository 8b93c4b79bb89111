//! What a client is in the middle of sending, told from the frame headers
//! of the bytes it sends: whether a data message is under way, since when,
//! and how many of its bytes have come. The frame layer reads the same
//! bytes and keeps an unfinished message whole until its last fragment,
//! returning nothing meanwhile but the control frames between fragments:
//! this is what lets the reader hold such a message to a deadline, and
//! count its bytes, however many pings come with it.
//!
//! Pure: [`Incoming::observe`] takes bytes as they are read; [`Watched`]
//! is the stream that feeds it.

use std::cell::RefCell;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Instant;

use futures_lite::{AsyncRead, AsyncWrite};

/// The longest frame header: 2 bytes, 8 of extended length, 4 of mask.
const MAX_HEADER: usize = 14;

/// The reading of a client's frames so far.
#[derive(Debug, Default)]
pub(crate) struct Incoming {
    header: [u8; MAX_HEADER],
    /// Bytes of the next frame's header gathered (0 while in a payload).
    have: usize,
    /// Payload bytes of the current frame still to come.
    left: u64,
    /// The current frame's kind: data (text, binary, continuation) or
    /// control, and whether it ends its message.
    data: bool,
    fin: bool,
    /// When the first byte of the data message under way came.
    started: Option<Instant>,
    /// Payload bytes of the data message under way, its current frame's
    /// included.
    unfinished: usize,
}

impl Incoming {
    /// When the data message under way began (its first frame's first
    /// byte); None between messages.
    pub(crate) fn started(&self) -> Option<Instant> {
        self.started
    }

    /// Payload bytes of the data message under way so far.
    pub(crate) fn unfinished(&self) -> usize {
        self.unfinished
    }

    /// Takes `bytes`, the next ones the client sent, read at `now`.
    pub(crate) fn observe(&mut self, mut bytes: &[u8], now: Instant) {
        while !bytes.is_empty() {
            if self.left > 0 {
                let n =
                    usize::try_from(self.left).map_or(bytes.len(), |left| left.min(bytes.len()));
                if self.data {
                    self.unfinished = self.unfinished.saturating_add(n);
                }
                self.left -= n as u64;
                bytes = bytes.get(n..).unwrap_or_default();
                if self.left == 0 {
                    self.frame_ended();
                }
                continue;
            }
            let need = self.header_len();
            let n = (need - self.have).min(bytes.len());
            if let (Some(to), Some(from)) = (
                self.header.get_mut(self.have..self.have + n),
                bytes.get(..n),
            ) {
                to.copy_from_slice(from);
            }
            if self.have == 0 {
                self.frame_began(now);
            }
            self.have += n;
            bytes = bytes.get(n..).unwrap_or_default();
            // The second byte tells how long the header is.
            if self.have == need && self.header_len() == need {
                self.have = 0;
                self.left = self.payload_len();
                if self.left == 0 {
                    self.frame_ended();
                }
            }
        }
    }

    /// The first byte of a frame's header is in.
    fn frame_began(&mut self, now: Instant) {
        let [first, ..] = self.header;
        // Opcodes 0 to 7 are data (continuation, text, binary, reserved),
        // 8 to 15 control.
        self.data = first & 0x0f < 8;
        self.fin = first & 0x80 != 0;
        if self.data && self.started.is_none() {
            self.started = Some(now);
        }
    }

    fn frame_ended(&mut self) {
        if self.data && self.fin {
            self.started = None;
            self.unfinished = 0;
        }
    }

    /// The length of the header being gathered, as far as its bytes in
    /// tell: 2 until the second is in.
    fn header_len(&self) -> usize {
        if self.have < 2 {
            return 2;
        }
        let [_, second, ..] = self.header;
        let extended = match second & 0x7f {
            126 => 2,
            127 => 8,
            _ => 0,
        };
        let mask = if second & 0x80 != 0 { 4 } else { 0 };
        2 + extended + mask
    }

    fn payload_len(&self) -> u64 {
        let [_, second, a, b, c, d, e, f, g, h, ..] = self.header;
        match second & 0x7f {
            126 => u64::from(u16::from_be_bytes([a, b])),
            127 => u64::from_be_bytes([a, b, c, d, e, f, g, h]),
            short => u64::from(short),
        }
    }
}

/// A stream whose reads `Incoming` watches.
pub(crate) struct Watched<S> {
    inner: S,
    incoming: Rc<RefCell<Incoming>>,
}

impl<S> Watched<S> {
    pub(crate) fn new(inner: S, incoming: Rc<RefCell<Incoming>>) -> Self {
        Watched { inner, incoming }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let read = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(n)) = read {
            let bytes = buf.get(..n).unwrap_or_default();
            self.incoming.borrow_mut().observe(bytes, Instant::now());
        }
        read
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_close(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A client's frame: masked (with a zero key, which leaves the payload
    /// as it is), of `opcode`, final or not.
    fn frame(opcode: u8, fin: bool, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![opcode | if fin { 0x80 } else { 0 }];
        match payload.len() {
            n if n < 126 => out.push(0x80 | n as u8),
            n if n < 65536 => {
                out.push(0x80 | 126);
                out.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                out.push(0x80 | 127);
                out.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(payload);
        out
    }

    #[test]
    fn a_message_is_under_way_from_its_first_byte_to_its_last() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(3);
        let mut incoming = Incoming::default();
        let whole = frame(1, true, &[b'x'; 300]);
        incoming.observe(&whole[..1], t0);
        assert_eq!(incoming.started(), Some(t0), "from the header's first byte");
        incoming.observe(&whole[1..100], later);
        assert_eq!(incoming.started(), Some(t0));
        assert_eq!(incoming.unfinished(), 100 - 8);
        incoming.observe(&whole[100..], later);
        assert_eq!((incoming.started(), incoming.unfinished()), (None, 0));
    }

    #[test]
    fn pings_between_fragments_neither_end_nor_restart_a_message() {
        let t0 = Instant::now();
        let mut incoming = Incoming::default();
        incoming.observe(&frame(1, false, &[b'a'; 1000]), t0);
        for i in 1..5 {
            let at = t0 + Duration::from_secs(i);
            incoming.observe(&frame(9, true, b"ping"), at);
            incoming.observe(&frame(0, false, &[b'b'; 70_000]), at);
            assert_eq!(incoming.started(), Some(t0));
        }
        assert_eq!(incoming.unfinished(), 1000 + 4 * 70_000);
        incoming.observe(&frame(0, true, b""), t0 + Duration::from_secs(9));
        assert_eq!((incoming.started(), incoming.unfinished()), (None, 0));
        // Between messages, control frames start nothing.
        incoming.observe(&frame(9, true, b"ping"), t0);
        incoming.observe(&frame(10, true, b""), t0);
        assert_eq!(incoming.started(), None);
    }

    #[test]
    fn any_split_of_the_bytes_reads_the_same() {
        let t0 = Instant::now();
        let mut bytes = frame(1, false, &[1; 200]);
        bytes.extend(frame(9, true, &[2; 125]));
        bytes.extend(frame(0, true, &[3; 5]));
        bytes.extend(frame(2, false, &[4; 40]));
        for step in 1..bytes.len() {
            let mut incoming = Incoming::default();
            for chunk in bytes.chunks(step) {
                incoming.observe(chunk, t0);
            }
            assert_eq!(incoming.unfinished(), 40, "in steps of {step}");
            assert!(incoming.started().is_some());
        }
    }

    #[test]
    fn garbage_never_panics() {
        let mut incoming = Incoming::default();
        let mut x: u32 = 12345;
        let mut bytes = Vec::new();
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            bytes.push(x as u8);
        }
        for chunk in bytes.chunks(7) {
            incoming.observe(chunk, Instant::now());
        }
        // A header claiming 2^64-1 bytes.
        let mut huge = vec![0x01, 0xff];
        huge.extend_from_slice(&[0xff; 12]);
        let mut incoming = Incoming::default();
        incoming.observe(&huge, Instant::now());
        incoming.observe(&[0; 1000], Instant::now());
        assert_eq!(incoming.unfinished(), 1000);
    }
}
