//! A connection's queue of outgoing messages, emptied by its writer, in two
//! lanes that share its bounds half and half: the answers to the
//! connection's own messages, sent first, and the offers and answers other
//! peers relay to it. Memory never grows past the bounds.
//!
//! - A relay that finds its lane full is dropped (WebTorrent makes new
//!   offers), so that no one can have a browser cut by flooding it with
//!   offers.
//! - The connection's next message is read only once its own lane has room
//!   ([`Queue::room`]): a client that sends faster than it reads is held
//!   back by TCP's flow control, not buffered, and one that does not read
//!   at all is cut by the writer's timeout. Sent first, its answers never
//!   wait behind relays, however many offers come its way.
//! - A pong counts in the lane of its own answers as an answer does: the
//!   frame layer queues it in its write buffer when it reads the ping,
//!   where nothing else would count it or watch it being taken, so each
//!   ping read queues a [`Outgoing::Pong`] of its bytes, which the writer
//!   takes by flushing the frame layer under its deadline.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::poll_fn;
use std::task::{Poll, Waker};

/// What the writer sends.
pub(crate) enum Outgoing {
    Text(Vec<u8>),
    /// The pong to a ping read, of this many bytes as a frame: already in
    /// the frame layer's write buffer, or about to be, so it only needs a
    /// flush.
    Pong(usize),
    /// A close frame with this code and reason; the last thing sent.
    Close(u16, &'static str),
}

impl Outgoing {
    /// The bytes it counts for in its lane.
    fn bytes(&self) -> usize {
        match self {
            Outgoing::Text(text) => text.len(),
            Outgoing::Pong(bytes) => *bytes,
            Outgoing::Close(..) => 0,
        }
    }
}

/// One lane: its messages and their bytes, under half the queue's bounds.
#[derive(Default)]
struct Lane {
    items: VecDeque<Outgoing>,
    bytes: usize,
}

impl Lane {
    fn try_push(&mut self, item: Outgoing, max_items: usize, max_bytes: usize) -> bool {
        let bytes = item.bytes();
        if self.items.len() >= max_items || self.bytes + bytes > max_bytes {
            return false;
        }
        self.bytes += bytes;
        self.items.push_back(item);
        true
    }

    fn pop(&mut self) -> Option<Outgoing> {
        let item = self.items.pop_front()?;
        self.bytes -= item.bytes();
        Some(item)
    }
}

pub(crate) struct Queue {
    own: RefCell<Lane>,
    relays: RefCell<Lane>,
    /// Each lane's bounds: half the queue's.
    max_items: usize,
    max_bytes: usize,
    close: Cell<Option<(u16, &'static str)>>,
    writer: RefCell<Option<Waker>>,
    /// The reader, waiting for room in the lane of its own answers.
    reader: RefCell<Option<Waker>>,
    /// Overflowed or closed: nothing more is taken.
    shut: Cell<bool>,
}

impl Queue {
    /// A queue of at most `max_items` messages and `max_bytes` bytes.
    pub(crate) fn new(max_items: usize, max_bytes: usize) -> Self {
        Queue {
            own: RefCell::default(),
            relays: RefCell::default(),
            max_items: (max_items / 2).max(1),
            max_bytes: max_bytes / 2,
            close: Cell::new(None),
            writer: RefCell::new(None),
            reader: RefCell::new(None),
            shut: Cell::new(false),
        }
    }

    /// Resolves once the lane of its own answers has room for one more (or
    /// the queue is shut): wait on it before reading the next message.
    pub(crate) async fn room(&self) {
        poll_fn(|cx| {
            let own = self.own.borrow();
            if self.shut.get() || (own.items.len() < self.max_items && own.bytes < self.max_bytes) {
                return Poll::Ready(());
            }
            *self.reader.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }

    /// Queues an answer to the connection's own message, read when `room`
    /// said there was room: its bytes may pass the bound by this one
    /// answer. False when the lane was full all the same (the queue is then
    /// shut, and the connection must end) or the queue already shut.
    pub(crate) fn push(&self, text: Vec<u8>) -> bool {
        self.push_own(Outgoing::Text(text))
    }

    /// Queues the pong to a ping just read (`bytes` as a frame), as `push`
    /// does an answer: the frame layer holds it until the writer flushes.
    pub(crate) fn push_pong(&self, bytes: usize) -> bool {
        self.push_own(Outgoing::Pong(bytes))
    }

    fn push_own(&self, item: Outgoing) -> bool {
        if self.shut.get() {
            return false;
        }
        if !self
            .own
            .borrow_mut()
            .try_push(item, self.max_items, usize::MAX)
        {
            self.shut();
            return false;
        }
        self.wake();
        true
    }

    /// Whether a relay of `bytes` would be taken now.
    pub(crate) fn relay_has_room(&self, bytes: usize) -> bool {
        let relays = self.relays.borrow();
        !self.shut.get()
            && relays.items.len() < self.max_items
            && relays.bytes + bytes <= self.max_bytes
    }

    /// Queues a relay from another peer; false, and nothing else happens,
    /// when its lane is full or the queue shut.
    pub(crate) fn push_relay(&self, text: Vec<u8>) -> bool {
        if self.shut.get()
            || !self.relays.borrow_mut().try_push(
                Outgoing::Text(text),
                self.max_items,
                self.max_bytes,
            )
        {
            return false;
        }
        self.wake();
        true
    }

    /// Queues the close frame, after the answers of its own already queued
    /// (relays not yet sent are dropped); nothing is taken after it.
    pub(crate) fn close(&self, code: u16, reason: &'static str) {
        if self.shut.replace(true) {
            return;
        }
        self.relays.replace(Lane::default());
        self.close.set(Some((code, reason)));
        self.wake();
    }

    /// Shuts the queue at once: the writer stops after what it is sending.
    pub(crate) fn shut(&self) {
        self.shut.set(true);
        self.own.replace(Lane::default());
        self.relays.replace(Lane::default());
        self.wake();
    }

    pub(crate) fn is_shut(&self) -> bool {
        self.shut.get()
    }

    fn wake(&self) {
        if let Some(waker) = self.writer.borrow_mut().take() {
            waker.wake();
        }
        // A shut queue frees the reader too.
        if self.shut.get() {
            self.wake_reader();
        }
    }

    fn wake_reader(&self) {
        if let Some(waker) = self.reader.borrow_mut().take() {
            waker.wake();
        }
    }

    /// The next message to send: an answer of its own first, then a relay,
    /// then the close frame; None once shut and empty.
    pub(crate) async fn next(&self) -> Option<Outgoing> {
        poll_fn(|cx| {
            if let Some(item) = self.try_next() {
                return Poll::Ready(Some(item));
            }
            if self.shut.get() {
                return Poll::Ready(None);
            }
            *self.writer.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }

    /// The next message to send if one is queued now, in `next`'s order.
    pub(crate) fn try_next(&self) -> Option<Outgoing> {
        let own = self.own.borrow_mut().pop();
        if let Some(item) = own {
            self.wake_reader();
            return Some(item);
        }
        if let Some(item) = self.relays.borrow_mut().pop() {
            return Some(item);
        }
        self.close
            .take()
            .map(|(code, reason)| Outgoing::Close(code, reason))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_lite::future::block_on;

    fn text(item: Option<Outgoing>) -> Vec<u8> {
        match item {
            Some(Outgoing::Text(text)) => text,
            _ => panic!("expected a message"),
        }
    }

    #[test]
    fn the_next_message_is_read_only_with_room_for_its_answer() {
        let queue = Queue::new(4, 100);
        block_on(queue.room());
        assert!(queue.push(vec![0; 10]));
        block_on(queue.room());
        assert!(queue.push(vec![0; 10]));
        let room = futures_lite::future::poll_once(queue.room());
        assert!(block_on(room).is_none(), "half the count: wait");
        let _ = block_on(queue.next());
        block_on(queue.room());

        let queue = Queue::new(100, 30);
        assert!(queue.push(vec![0; 20]), "one answer may pass the bytes");
        let room = futures_lite::future::poll_once(queue.room());
        assert!(block_on(room).is_none(), "half the bytes: wait");
    }

    #[test]
    fn own_answers_past_their_half_shut_the_queue() {
        let queue = Queue::new(4, 100);
        assert!(queue.push(vec![0; 10]));
        assert!(queue.push(vec![0; 10]));
        assert!(!queue.push(vec![0; 10]), "past half the count");
        assert!(queue.is_shut());
        assert!(!queue.push(vec![0; 1]), "shut for good");
        assert!(!queue.push_relay(vec![0; 1]));
        assert!(
            block_on(queue.next()).is_none(),
            "what was queued is dropped"
        );
        block_on(queue.room());
    }

    /// What a writer batches: everything queued now, in `next`'s order,
    /// the close last, and nothing when empty.
    #[test]
    fn what_is_queued_now_is_taken_in_order_without_waiting() {
        let queue = Queue::new(8, 100);
        assert!(queue.try_next().is_none());
        assert!(queue.push_relay(b"offer".to_vec()));
        assert!(queue.push(b"answer".to_vec()));
        assert_eq!(text(queue.try_next()), b"answer");
        assert_eq!(text(queue.try_next()), b"offer");
        assert!(queue.try_next().is_none());
        assert!(queue.push(b"last answer".to_vec()));
        queue.close(1001, "going away");
        assert_eq!(text(queue.try_next()), b"last answer");
        assert!(matches!(
            queue.try_next(),
            Some(Outgoing::Close(1001, "going away"))
        ));
        assert!(queue.try_next().is_none());
        assert!(block_on(queue.next()).is_none(), "shut and empty");
    }

    #[test]
    fn relays_past_their_half_are_dropped_and_never_delay_own_answers() {
        let queue = Queue::new(4, 100);
        assert!(queue.push_relay(b"offer 1".to_vec()));
        assert!(queue.push_relay(b"offer 2".to_vec()));
        assert!(!queue.push_relay(b"offer 3".to_vec()), "dropped");
        assert!(!queue.is_shut(), "a flood of offers cuts no one");
        assert!(queue.push(b"answer".to_vec()));
        assert_eq!(text(block_on(queue.next())), b"answer", "own answers first");
        assert_eq!(text(block_on(queue.next())), b"offer 1");
        assert!(queue.push_relay(b"offer 4".to_vec()), "room again");
    }

    /// A client that pings faster than it reads is held back as one that
    /// sends messages is: each pong waits in its lane.
    #[test]
    fn pongs_count_as_own_answers() {
        let queue = Queue::new(4, 100);
        assert!(queue.push_pong(12));
        assert!(queue.push_relay(b"offer".to_vec()));
        assert!(queue.push_pong(12));
        let room = futures_lite::future::poll_once(queue.room());
        assert!(block_on(room).is_none(), "half the count: wait");
        assert!(matches!(block_on(queue.next()), Some(Outgoing::Pong(12))));
        block_on(queue.room());
        let queue = Queue::new(100, 40);
        assert!(queue.push_pong(20));
        let room = futures_lite::future::poll_once(queue.room());
        assert!(block_on(room).is_none(), "half the bytes: wait");
    }

    #[test]
    fn a_close_goes_after_own_answers() {
        let queue = Queue::new(10, 100);
        assert!(queue.push(b"a".to_vec()));
        assert!(queue.push_relay(b"offer".to_vec()));
        queue.close(1001, "bye");
        assert!(!queue.push(b"b".to_vec()));
        assert_eq!(text(block_on(queue.next())), b"a");
        let close = block_on(queue.next());
        assert!(matches!(close, Some(Outgoing::Close(1001, "bye"))));
        assert!(block_on(queue.next()).is_none());
    }
}
