//! Values that a SIGHUP replaces while the workers run (the TLS configuration,
//! the access list), read on the request path without locking.
//!
//! A [`Reloadable`] is a value behind a mutex with a generation counter
//! beside it. A worker keeps its own [`LocalCopy`] and only looks at the
//! counter (one relaxed atomic load) on its hot path; it takes the mutex only
//! in the rare case that the value changed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A value replaced now and then (on SIGHUP) and read by every worker.
///
/// Readers poll [`generation`](Self::generation), which is cheap, and call
/// [`load`](Self::load) only when it moved; [`LocalCopy`] does that for them.
pub struct Reloadable<T> {
    current: Mutex<Arc<T>>,
    generation: AtomicU64,
}

impl<T> Reloadable<T> {
    pub fn new(value: Arc<T>) -> Self {
        Reloadable {
            current: Mutex::new(value),
            generation: AtomicU64::new(0),
        }
    }

    /// Publishes `value` for every reader's next look.
    pub fn store(&self, value: Arc<T>) {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        *current = value;
        // Bumped under the lock, so a reader that sees the new generation and
        // then locks finds the new value (or a later one).
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Changes each time a value is stored.
    #[inline]
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }

    /// The current value and its generation.
    pub fn load(&self) -> (Arc<T>, u64) {
        let current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        (current.clone(), self.generation.load(Ordering::Acquire))
    }
}

/// One worker's copy of a [`Reloadable`] value.
pub struct LocalCopy<T> {
    shared: Arc<Reloadable<T>>,
    value: Arc<T>,
    generation: u64,
}

impl<T> LocalCopy<T> {
    pub fn new(shared: Arc<Reloadable<T>>) -> Self {
        let (value, generation) = shared.load();
        LocalCopy {
            shared,
            value,
            generation,
        }
    }

    /// The newest value: the one held, unless a newer one was published since.
    #[inline]
    pub fn get(&mut self) -> &Arc<T> {
        if self.shared.generation() != self.generation {
            (self.value, self.generation) = self.shared.load();
        }
        &self.value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_copies_follow_the_published_value() {
        let shared = Arc::new(Reloadable::new(Arc::new(1)));
        let mut a = LocalCopy::new(shared.clone());
        let mut b = LocalCopy::new(shared.clone());
        assert_eq!(**a.get(), 1);
        let before = shared.generation();
        shared.store(Arc::new(2));
        assert_ne!(shared.generation(), before);
        assert_eq!((**a.get(), **b.get()), (2, 2));
        let held = a.get().clone();
        shared.store(Arc::new(3));
        assert_eq!(**a.get(), 3);
        assert_eq!(*held, 2, "a value taken earlier is untouched");
    }
}
