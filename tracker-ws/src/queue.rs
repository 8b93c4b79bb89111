//! A connection's queue of outgoing messages: bounded in messages and bytes,
//! filled by whatever has something for the connection (its own answers,
//! relays from any peer) and emptied by its writer. Memory never grows past
//! the bounds. A relay that finds it full is dropped (WebTorrent makes new
//! offers), so that no one can have a browser cut by flooding it with
//! offers; an answer to the connection's own message that finds it full
//! means the client sends but does not read, and cuts it.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::poll_fn;
use std::task::{Poll, Waker};

/// What the writer sends.
pub(crate) enum Outgoing {
    Text(Vec<u8>),
    /// A close frame with this code and reason; the last thing sent.
    Close(u16, &'static str),
}

pub(crate) struct Queue {
    items: RefCell<VecDeque<Outgoing>>,
    bytes: Cell<usize>,
    max_items: usize,
    max_bytes: usize,
    writer: RefCell<Option<Waker>>,
    /// Overflowed or closed: nothing more is taken.
    shut: Cell<bool>,
}

impl Queue {
    pub(crate) fn new(max_items: usize, max_bytes: usize) -> Self {
        Queue {
            items: RefCell::new(VecDeque::new()),
            bytes: Cell::new(0),
            max_items,
            max_bytes,
            writer: RefCell::new(None),
            shut: Cell::new(false),
        }
    }

    /// Queues an answer to the connection's own message; false when the
    /// queue was full (it is then shut, and the connection must end) or
    /// already shut.
    pub(crate) fn push(&self, text: Vec<u8>) -> bool {
        if self.shut.get() {
            return false;
        }
        if !self.has_room(text.len()) {
            self.shut();
            return false;
        }
        self.add(text);
        true
    }

    /// Queues a relay from another peer; false, and nothing else happens,
    /// when the queue is full or shut.
    pub(crate) fn push_relay(&self, text: Vec<u8>) -> bool {
        if self.shut.get() || !self.has_room(text.len()) {
            return false;
        }
        self.add(text);
        true
    }

    fn has_room(&self, bytes: usize) -> bool {
        self.items.borrow().len() < self.max_items && self.bytes.get() + bytes <= self.max_bytes
    }

    fn add(&self, text: Vec<u8>) {
        let bytes = self.bytes.get() + text.len();
        let mut items = self.items.borrow_mut();
        self.bytes.set(bytes);
        items.push_back(Outgoing::Text(text));
        drop(items);
        self.wake();
    }

    /// Queues the close frame, after what is queued; nothing is taken after
    /// it.
    pub(crate) fn close(&self, code: u16, reason: &'static str) {
        if self.shut.replace(true) {
            return;
        }
        self.items
            .borrow_mut()
            .push_back(Outgoing::Close(code, reason));
        self.wake();
    }

    /// Shuts the queue at once: the writer stops after what it is sending.
    pub(crate) fn shut(&self) {
        self.shut.set(true);
        self.items
            .borrow_mut()
            .retain(|item| matches!(item, Outgoing::Close(..)));
        self.wake();
    }

    pub(crate) fn is_shut(&self) -> bool {
        self.shut.get()
    }

    fn wake(&self) {
        if let Some(waker) = self.writer.borrow_mut().take() {
            waker.wake();
        }
    }

    /// The next message to send; None once shut and empty.
    pub(crate) async fn next(&self) -> Option<Outgoing> {
        poll_fn(|cx| {
            if let Some(item) = self.items.borrow_mut().pop_front() {
                if let Outgoing::Text(text) = &item {
                    self.bytes.set(self.bytes.get().saturating_sub(text.len()));
                }
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_queue_shuts_and_keeps_only_a_close() {
        let queue = Queue::new(2, 100);
        assert!(queue.push(vec![0; 10]));
        assert!(queue.push(vec![0; 10]));
        assert!(!queue.push(vec![0; 10]), "past the count");
        assert!(queue.is_shut());
        assert!(!queue.push(vec![0; 1]), "shut for good");
        let next = futures_lite::future::block_on(queue.next());
        assert!(next.is_none(), "what was queued is dropped");

        let queue = Queue::new(10, 15);
        assert!(queue.push(vec![0; 10]));
        assert!(!queue.push(vec![0; 10]), "past the bytes");
    }

    #[test]
    fn a_relay_that_finds_the_queue_full_is_dropped_and_the_queue_stays_open() {
        let queue = Queue::new(1, 100);
        assert!(queue.push_relay(b"offer".to_vec()));
        assert!(!queue.push_relay(b"offer".to_vec()), "full: dropped");
        assert!(!queue.is_shut());
        let first = futures_lite::future::block_on(queue.next());
        assert!(matches!(first, Some(Outgoing::Text(t)) if t == b"offer"));
        assert!(queue.push(b"answer".to_vec()), "room again");
        assert!(
            !queue.push(b"answer".to_vec()),
            "an own answer past it cuts"
        );
        assert!(queue.is_shut());
    }

    #[test]
    fn a_close_goes_after_what_is_queued() {
        let queue = Queue::new(10, 100);
        assert!(queue.push(b"a".to_vec()));
        queue.close(1001, "bye");
        assert!(!queue.push(b"b".to_vec()));
        let a = futures_lite::future::block_on(queue.next());
        assert!(matches!(a, Some(Outgoing::Text(t)) if t == b"a"));
        let close = futures_lite::future::block_on(queue.next());
        assert!(matches!(close, Some(Outgoing::Close(1001, "bye"))));
        assert!(futures_lite::future::block_on(queue.next()).is_none());
    }
}
