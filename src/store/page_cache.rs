//! Answers of a list kept in memory under a count of the writes they depend on, so a list
//! many ask for (the public projects, issue #32) is read from the database once per change
//! instead of once per request.
//!
//! The count only grows: each committed write adds one, and folding its tally keeps the sum
//! (`Tally::ProjectWrites`, migration 0043). A request reads the count first, in a statement of
//! its own, and is served a kept answer only if that answer was kept under the very same
//! count: then no write has committed since the count the answer's request read, and that
//! request read its page after its count, so the page holds every write the count covers. An
//! answer kept under another count is never served, so a write forgets nothing here; the
//! bounds start the cache over (a bound, not an eviction policy, as in `session_cache`).
//!
//! The count is the default stamp. Another may stand in its place: the tokens of
//! `workflows::kept_projects`, which are equal or not and never older or newer (their
//! `partial_cmp` is `None` unless equal), so there the last answer kept stays.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Answers kept at most, and their bytes at most.
const MAX_ENTRIES: usize = 1_024;
const MAX_BYTES: usize = 32 << 20;

/// An answer larger than this is not kept: a few such would fill the cache.
const MAX_ANSWER_BYTES: usize = MAX_BYTES / 64;

pub struct PageCache<K, V, S = i64> {
    inner: Mutex<Inner<K, V, S>>,
    max_entries: usize,
    hits: AtomicU64,
    misses: AtomicU64,
}

struct Inner<K, V, S> {
    entries: HashMap<K, Entry<V, S>>,
    bytes: usize,
}

struct Entry<V, S> {
    writes: S,
    answer: V,
    bytes: usize,
}

impl<K, V, S> Default for PageCache<K, V, S> {
    fn default() -> Self {
        Self::holding(MAX_ENTRIES)
    }
}

impl<K, V, S> PageCache<K, V, S> {
    /// A cache of `max_entries` answers at most (and `MAX_BYTES` in all, as every one).
    pub fn holding(max_entries: usize) -> Self {
        Self {
            inner: Mutex::new(Inner {
                entries: HashMap::new(),
                bytes: 0,
            }),
            max_entries,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }
}

impl<K: Hash + Eq, V: Clone, S: PartialOrd> PageCache<K, V, S> {
    /// The answer to `key` kept under `writes`, the count read before this call.
    pub fn get(&self, key: &K, writes: &S) -> Option<V> {
        let found = self
            .lock()
            .entries
            .get(key)
            .filter(|e| e.writes == *writes)
            .map(|e| e.answer.clone());
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// Keeps `answer` (of `bytes` bytes) to `key`, read after the count `writes` was read. An
    /// answer kept under a higher count stays: it is the one later requests will ask for.
    pub fn put(&self, key: K, writes: S, answer: V, bytes: usize) {
        if bytes > MAX_ANSWER_BYTES {
            return;
        }
        let mut inner = self.lock();
        if let Some(kept) = inner.entries.get(&key) {
            if kept.writes > writes {
                return;
            }
            let freed = kept.bytes;
            inner.bytes -= freed;
        } else if inner.entries.len() >= self.max_entries || inner.bytes + bytes > MAX_BYTES {
            inner.entries.clear();
            inner.bytes = 0;
        }
        inner.bytes += bytes;
        inner.entries.insert(
            key,
            Entry {
                writes,
                answer,
                bytes,
            },
        );
    }

    /// The answer to `key` kept under `writes`, the count read before this call; otherwise
    /// the one `read` gives, kept under that count (`size_of` its bytes).
    pub async fn get_or_read<E>(
        &self,
        key: K,
        writes: S,
        size_of: impl FnOnce(&V) -> usize,
        read: impl Future<Output = Result<V, E>>,
    ) -> Result<V, E> {
        if let Some(kept) = self.get(&key, &writes) {
            return Ok(kept);
        }
        let answer = read.await?;
        let bytes = size_of(&answer);
        self.put(key, writes, answer.clone(), bytes);
        Ok(answer)
    }

    /// Forgets the answer to `key`.
    pub fn forget(&self, key: &K) {
        let mut inner = self.lock();
        if let Some(entry) = inner.entries.remove(key) {
            inner.bytes -= entry.bytes;
        }
    }

    /// Forgets every answer.
    pub fn clear(&self) {
        let mut inner = self.lock();
        inner.entries.clear();
        inner.bytes = 0;
    }

    /// Answers served from the cache and answers not found there, since the start.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<K, V, S>> {
        // A panic while holding the lock leaves whole entries only: use them.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_served_under_its_own_count_only() {
        let cache = PageCache::<&str, u32>::default();
        assert_eq!(cache.get(&"p1", &7), None);
        cache.put("p1", 7, 1, 10);
        assert_eq!(cache.get(&"p1", &7), Some(1));
        assert_eq!(cache.get(&"p1", &8), None, "a write committed since");
        cache.put("p1", 8, 2, 10);
        cache.put("p1", 7, 3, 10);
        assert_eq!(
            cache.get(&"p1", &8),
            Some(2),
            "a slower request keeps no older answer"
        );
        assert_eq!(cache.get(&"p1", &7), None);
        assert_eq!(cache.counts(), (2, 3));
    }

    #[test]
    fn the_bounds_start_the_cache_over() {
        let cache = PageCache::<usize, u32>::default();
        for key in 0..MAX_ENTRIES {
            cache.put(key, 1, 0, 1);
        }
        assert_eq!(cache.get(&0, &1), Some(0));
        cache.put(MAX_ENTRIES, 1, 0, 1);
        assert_eq!(cache.get(&0, &1), None);
        assert_eq!(cache.get(&MAX_ENTRIES, &1), Some(0));
        cache.put(1, 1, 0, MAX_ANSWER_BYTES + 1);
        assert_eq!(cache.get(&1, &1), None, "too large to keep");
        let cache = PageCache::<usize, u32>::default();
        for key in 0..64 {
            cache.put(key, 1, 0, MAX_ANSWER_BYTES);
        }
        assert_eq!(cache.lock().bytes, MAX_BYTES);
        cache.put(64, 1, 0, 1);
        assert_eq!(cache.lock().entries.len(), 1, "past the bytes");
    }
}
