//! A value per user id shared by every worker: chunks of 65,536 users
//! allocated on first use, so that a table for every u32 id costs 8 bytes
//! per chunk until users appear, and a lookup takes no lock.

use crate::site::UserId;
use std::sync::OnceLock;

/// Users per chunk.
const CHUNK: usize = 1 << 16;
/// Chunks: enough for every u32 user id.
const CHUNKS: usize = (u32::MAX as usize >> 16) + 1;

pub(crate) struct UserTable<T> {
    chunks: Box<[OnceLock<Box<[T]>>]>,
}

impl<T: Default> Default for UserTable<T> {
    fn default() -> UserTable<T> {
        UserTable {
            chunks: (0..CHUNKS).map(|_| OnceLock::new()).collect(),
        }
    }
}

impl<T: Default> UserTable<T> {
    /// The user's value, its chunk allocated if this is its first use.
    pub(crate) fn slot(&self, user: UserId) -> Option<&T> {
        let user = user as usize;
        let chunk = self.chunks.get(user / CHUNK)?;
        chunk
            .get_or_init(|| (0..CHUNK).map(|_| T::default()).collect())
            .get(user % CHUNK)
    }

    /// The user's value if its chunk exists: a read allocates nothing.
    pub(crate) fn peek(&self, user: UserId) -> Option<&T> {
        let user = user as usize;
        self.chunks
            .get(user / CHUNK)
            .and_then(OnceLock::get)
            .and_then(|chunk| chunk.get(user % CHUNK))
    }

    /// Chunks allocated.
    pub(crate) fn chunks_used(&self) -> usize {
        self.chunks.iter().filter(|c| c.get().is_some()).count()
    }
}
