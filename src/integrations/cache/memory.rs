//! In-process cache for a single instance.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::stream::{self, BoxStream};
use tokio::sync::broadcast;

use super::{Cache, CacheError, LeaseAnswer, Rate, Take, WindowCount, whole_millis};
use crate::domain::realtime_limits::lease_counts;

/// How often, at most, a write scans the whole map for expired entries.
const SWEEP_INTERVAL: Duration = Duration::from_secs(30);
/// Below this size the map is only swept on the interval, never for growth.
const SWEEP_MIN_LEN: usize = 1024;
/// Messages a slow subscriber may fall behind before it loses the oldest ones.
const CHANNEL_CAPACITY: usize = 256;

/// Cache held in this process's memory: the default when no Redis is configured.
///
/// Entries expire lazily on read; writes also sweep the whole map from time to time (on
/// an interval, or when it has doubled since the last sweep) so that keys that are never
/// read again do not pile up. Pub/sub uses one broadcast channel per channel name. Lease sets
/// (the live sockets per account and address) are maps of member to expiry, pruned whenever
/// they are counted and dropped once empty.
pub struct MemoryCache {
    entries: Mutex<Entries>,
    channels: Mutex<HashMap<String, broadcast::Sender<String>>>,
    leases: Mutex<HashMap<String, HashMap<String, i64>>>,
}

struct Entry {
    value: String,
    expires_at: Instant,
}

struct Entries {
    map: HashMap<String, Entry>,
    next_sweep: Instant,
    len_after_sweep: usize,
}

impl Entries {
    /// The entry under `key` if it has not expired; an expired one is dropped.
    fn live_mut(&mut self, key: &str, now: Instant) -> Option<&mut Entry> {
        let expired = self
            .map
            .get(key)
            .is_some_and(|entry| entry.expires_at <= now);
        if expired {
            self.map.remove(key);
        }
        self.map.get_mut(key)
    }

    fn insert(&mut self, key: &str, value: String, ttl: Duration, now: Instant) {
        self.sweep_if_due(now);
        let expires_at = deadline(now, ttl);
        self.map.insert(key.to_owned(), Entry { value, expires_at });
    }

    fn sweep_if_due(&mut self, now: Instant) {
        let grown = self.map.len() >= SWEEP_MIN_LEN.max(2 * self.len_after_sweep);
        if now >= self.next_sweep || grown {
            self.map.retain(|_, entry| entry.expires_at > now);
            self.len_after_sweep = self.map.len();
            self.next_sweep = now + SWEEP_INTERVAL;
        }
    }
}

/// `now + ttl`; `ttl` is bounded by `whole_millis`, the fallback only guards the arithmetic.
fn deadline(now: Instant, ttl: Duration) -> Instant {
    now.checked_add(ttl)
        .unwrap_or(now + super::MAX_DURATION / 4)
}

/// The maps are only touched by code that cannot panic midway, so a poisoned lock
/// still guards consistent data.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl MemoryCache {
    /// An empty cache.
    #[must_use]
    pub fn new() -> Self {
        Self {
            entries: Mutex::new(Entries {
                map: HashMap::new(),
                next_sweep: Instant::now() + SWEEP_INTERVAL,
                len_after_sweep: 0,
            }),
            channels: Mutex::new(HashMap::new()),
            leases: Mutex::new(HashMap::new()),
        }
    }

    /// Entries currently held, expired ones not yet swept included.
    #[cfg(test)]
    fn stored_len(&self) -> usize {
        lock(&self.entries).map.len()
    }

    #[cfg(test)]
    fn force_sweep(&self) {
        let mut entries = lock(&self.entries);
        entries.next_sweep = Instant::now();
        entries.sweep_if_due(Instant::now());
    }
}

impl Default for MemoryCache {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait::async_trait]
impl Cache for MemoryCache {
    async fn get(&self, key: &str) -> Result<Option<String>, CacheError> {
        let mut entries = lock(&self.entries);
        Ok(entries
            .live_mut(key, Instant::now())
            .map(|entry| entry.value.clone()))
    }

    async fn get_all(&self, keys: &[String]) -> Result<Vec<Option<String>>, CacheError> {
        let mut entries = lock(&self.entries);
        let now = Instant::now();
        Ok(keys
            .iter()
            .map(|key| entries.live_mut(key, now).map(|entry| entry.value.clone()))
            .collect())
    }

    async fn set(&self, key: &str, value: &str, ttl: Duration) -> Result<(), CacheError> {
        let ttl = whole_millis(ttl)?;
        let now = Instant::now();
        lock(&self.entries).insert(key, value.to_owned(), ttl, now);
        Ok(())
    }

    async fn set_if_absent(
        &self,
        key: &str,
        value: &str,
        ttl: Duration,
    ) -> Result<bool, CacheError> {
        let ttl = whole_millis(ttl)?;
        let now = Instant::now();
        let mut entries = lock(&self.entries);
        if entries.live_mut(key, now).is_some() {
            return Ok(false);
        }
        entries.insert(key, value.to_owned(), ttl, now);
        Ok(true)
    }

    async fn delete(&self, key: &str) -> Result<(), CacheError> {
        lock(&self.entries).map.remove(key);
        lock(&self.leases).remove(key);
        Ok(())
    }

    async fn delete_prefix(&self, prefix: &str) -> Result<u64, CacheError> {
        let mut entries = lock(&self.entries);
        let before = entries.map.len();
        entries.map.retain(|key, _| !key.starts_with(prefix));
        let mut leases = lock(&self.leases);
        let sets_before = leases.len();
        leases.retain(|key, _| !key.starts_with(prefix));
        Ok((before - entries.map.len() + sets_before - leases.len()) as u64)
    }

    async fn hit(&self, key: &str, window: Duration) -> Result<WindowCount, CacheError> {
        let window = whole_millis(window)?;
        let now = Instant::now();
        let mut entries = lock(&self.entries);
        if let Some(entry) = entries.live_mut(key, now) {
            let count = entry
                .value
                .parse::<u64>()
                .ok()
                .and_then(|count| count.checked_add(1))
                .ok_or_else(|| CacheError::Operation {
                    operation: "hit",
                    detail: "the key holds a value that is not a counter".to_owned(),
                })?;
            entry.value = count.to_string();
            return Ok(WindowCount {
                count,
                resets_in: entry.expires_at.saturating_duration_since(now),
            });
        }
        entries.insert(key, "1".to_owned(), window, now);
        Ok(WindowCount {
            count: 1,
            resets_in: window,
        })
    }

    async fn take_token(&self, key: &str, rate: Rate, now_ms: i64) -> Result<Take, CacheError> {
        let now = Instant::now();
        let mut entries = lock(&self.entries);
        let state = match entries.live_mut(key, now) {
            Some(entry) => Some(
                entry
                    .value
                    .parse::<i64>()
                    .map_err(|_| CacheError::Operation {
                        operation: "take_token",
                        detail: "the key holds a value that is not a bucket".to_owned(),
                    })?,
            ),
            None => None,
        };
        let take = rate.take(state, now_ms);
        if let Take::Allowed { full_at_ms } = take {
            // Full again by then on the service's clock, which runs at least as fast as this
            // one: forgetting the key then loses nothing.
            let ttl = Duration::from_millis(u64::try_from(full_at_ms - now_ms).unwrap_or(1));
            entries.insert(key, full_at_ms.to_string(), whole_millis(ttl)?, now);
        }
        Ok(take)
    }

    async fn lease_acquire(
        &self,
        sets: &[(&str, u64)],
        member: &str,
        now_ms: i64,
        until_ms: i64,
        _keep: Duration,
    ) -> Result<LeaseAnswer, CacheError> {
        let mut leases = lock(&self.leases);
        for (index, (set, cap)) in sets.iter().enumerate() {
            let live = leases.get_mut(*set).map_or(0, |members| {
                members.retain(|_, expires| lease_counts(*expires, now_ms));
                members.len()
            });
            if live as u64 >= *cap {
                return Ok(LeaseAnswer::Full(index));
            }
        }
        for (set, _) in sets {
            leases
                .entry((*set).to_owned())
                .or_default()
                .insert(member.to_owned(), until_ms);
        }
        leases.retain(|_, members| !members.is_empty());
        Ok(LeaseAnswer::Taken)
    }

    async fn lease_renew(
        &self,
        sets: &[&str],
        member: &str,
        until_ms: i64,
        _keep: Duration,
    ) -> Result<(), CacheError> {
        let mut leases = lock(&self.leases);
        for set in sets {
            leases
                .entry((*set).to_owned())
                .or_default()
                .insert(member.to_owned(), until_ms);
        }
        Ok(())
    }

    async fn lease_release(&self, sets: &[&str], member: &str) -> Result<(), CacheError> {
        let mut leases = lock(&self.leases);
        for set in sets {
            if let Some(members) = leases.get_mut(*set) {
                members.remove(member);
                if members.is_empty() {
                    leases.remove(*set);
                }
            }
        }
        Ok(())
    }

    async fn lease_count(&self, set: &str, now_ms: i64) -> Result<u64, CacheError> {
        let leases = lock(&self.leases);
        Ok(leases.get(set).map_or(0, |members| {
            members
                .values()
                .filter(|expires| lease_counts(**expires, now_ms))
                .count() as u64
        }))
    }

    async fn publish(&self, channel: &str, payload: &str) -> Result<(), CacheError> {
        let mut channels = lock(&self.channels);
        if let Some(sender) = channels.get(channel)
            && sender.send(payload.to_owned()).is_err()
        {
            // Every subscriber is gone: forget the channel.
            channels.remove(channel);
        }
        Ok(())
    }

    async fn subscribe(&self, channel: &str) -> Result<BoxStream<'static, String>, CacheError> {
        let receiver = {
            let mut channels = lock(&self.channels);
            channels.retain(|_, sender| sender.receiver_count() > 0);
            channels
                .entry(channel.to_owned())
                .or_insert_with(|| broadcast::channel(CHANNEL_CAPACITY).0)
                .subscribe()
        };
        Ok(receiver_stream(receiver))
    }

    async fn ping(&self) -> Result<(), CacheError> {
        Ok(())
    }

    fn backend(&self) -> &'static str {
        "memory"
    }
}

fn receiver_stream(receiver: broadcast::Receiver<String>) -> BoxStream<'static, String> {
    stream::unfold(receiver, |mut receiver| async move {
        loop {
            match receiver.recv().await {
                Ok(message) => return Some((message, receiver)),
                Err(broadcast::error::RecvError::Lagged(skipped)) => {
                    tracing::warn!(skipped, "cache subscriber fell behind; messages lost");
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn sweep_drops_expired_entries_that_are_never_read() {
        let cache = MemoryCache::new();
        for i in 0..100 {
            cache
                .set(&format!("short-{i}"), "x", Duration::from_millis(1))
                .await
                .expect("set");
        }
        cache
            .set("long", "kept", Duration::from_secs(60))
            .await
            .expect("set");
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(cache.stored_len(), 101);

        cache.force_sweep();

        assert_eq!(cache.stored_len(), 1);
        assert_eq!(
            cache.get("long").await.expect("get").as_deref(),
            Some("kept")
        );
    }

    #[tokio::test]
    async fn growth_triggers_a_sweep_before_the_interval() {
        let cache = MemoryCache::new();
        for i in 0..SWEEP_MIN_LEN {
            cache
                .set(&format!("short-{i}"), "x", Duration::from_millis(1))
                .await
                .expect("set");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        cache
            .set("one-more", "x", Duration::from_secs(60))
            .await
            .expect("set");
        assert_eq!(cache.stored_len(), 1);
    }

    #[tokio::test]
    async fn channels_without_subscribers_are_forgotten() {
        let cache = MemoryCache::new();
        let stream = cache.subscribe("room").await.expect("subscribe");
        drop(stream);
        cache
            .publish("room", "nobody listens")
            .await
            .expect("publish");
        assert!(lock(&cache.channels).is_empty());
    }
}
