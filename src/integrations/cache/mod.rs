//! Shared cache store: refresh-token blacklist, rate-limit counters shared by several
//! instances, "at most once per interval" guards and pub/sub between instances.
//!
//! Two backends implement [`Cache`]: [`MemoryCache`] for a single instance (the default)
//! and [`RedisCache`] when several instances share state. Keys are used as given; callers
//! namespace them. Keys may hold token hashes, so they never appear in errors or logs.

mod error;
mod guarded;
mod memory;
mod prefixed;
mod redis;

use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::BoxStream;

pub use self::error::CacheError;
pub use self::guarded::Guarded;
pub use self::memory::MemoryCache;
pub use self::prefixed::Prefixed;
pub use self::redis::RedisCache;
pub use crate::domain::realtime_limits::{Rate, Take};

/// The state of a fixed-window counter right after a [`Cache::hit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowCount {
    /// Hits counted in the current window, this one included.
    pub count: u64,
    /// Time until the window ends and the count starts again from zero.
    pub resets_in: Duration,
}

/// The answer of [`Cache::lease_acquire`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseAnswer {
    /// The member was added to every set.
    Taken,
    /// The set at this index of the call's list was at its cap; nothing was added anywhere.
    Full(usize),
}

/// A shared key-value store with expiring entries, window counters and pub/sub.
///
/// Every operation is atomic with respect to concurrent callers, also across instances
/// sharing one Redis. Durations (TTL, window) must be at least one millisecond; they are
/// rounded up to whole milliseconds.
#[async_trait::async_trait]
pub trait Cache: Send + Sync + 'static {
    /// The value stored under `key`, or `None` when absent or expired.
    async fn get(&self, key: &str) -> Result<Option<String>, CacheError>;

    /// The values of `keys`, in their order (`None` where absent or expired), in one round
    /// trip.
    async fn get_all(&self, keys: &[String]) -> Result<Vec<Option<String>>, CacheError>;

    /// Stores `value` under `key` for `ttl`, replacing any previous value and TTL.
    async fn set(&self, key: &str, value: &str, ttl: Duration) -> Result<(), CacheError>;

    /// Sets only when absent; true when this call set it. Atomic.
    async fn set_if_absent(
        &self,
        key: &str,
        value: &str,
        ttl: Duration,
    ) -> Result<bool, CacheError>;

    /// Removes `key`; removing an absent key is not an error.
    async fn delete(&self, key: &str) -> Result<(), CacheError>;

    /// Removes every key starting with `prefix` (the end-to-end reset); how many.
    async fn delete_prefix(&self, prefix: &str) -> Result<u64, CacheError>;

    /// Counts one hit in a fixed window that starts at the first hit of the key; atomic.
    ///
    /// The counter lives under `key` itself (as a decimal string), so `get` reads it and
    /// `delete` resets it.
    async fn hit(&self, key: &str, window: Duration) -> Result<WindowCount, CacheError>;

    /// Takes one token from the bucket under `key` (a [`Rate`], its state a number under the
    /// key) at `now_ms`, a time of the service's clock; atomic. The key is forgotten once the
    /// bucket would be full again.
    async fn take_token(&self, key: &str, rate: Rate, now_ms: i64) -> Result<Take, CacheError>;

    /// Adds `member` to every one of `sets`, leased until `until_ms`, if each holds fewer
    /// members than its cap whose lease runs past `now_ms` (lapsed members are dropped
    /// first); atomic, all sets or none. Times are the service's clock, in milliseconds; a
    /// set nobody touches for `keep` is forgotten altogether.
    async fn lease_acquire(
        &self,
        sets: &[(&str, u64)],
        member: &str,
        now_ms: i64,
        until_ms: i64,
        keep: Duration,
    ) -> Result<LeaseAnswer, CacheError>;

    /// Moves the lease of `member` in every one of `sets` to `until_ms` (adding it again if it
    /// had lapsed: the member is alive).
    async fn lease_renew(
        &self,
        sets: &[&str],
        member: &str,
        until_ms: i64,
        keep: Duration,
    ) -> Result<(), CacheError>;

    /// Removes `member` from every one of `sets`.
    async fn lease_release(&self, sets: &[&str], member: &str) -> Result<(), CacheError>;

    /// Members of `set` whose lease runs past `now_ms`.
    async fn lease_count(&self, set: &str, now_ms: i64) -> Result<u64, CacheError>;

    /// Sends `payload` to every current subscriber of `channel` (none is fine).
    async fn publish(&self, channel: &str, payload: &str) -> Result<(), CacheError>;

    /// Every message published on `channel` after this call returns, in order.
    ///
    /// The stream ends if the backend connection is lost; the caller may subscribe again.
    async fn subscribe(&self, channel: &str) -> Result<BoxStream<'static, String>, CacheError>;

    /// Checks that the backend answers.
    async fn ping(&self) -> Result<(), CacheError>;

    /// `"memory"` or `"redis"`, for health output and logs.
    fn backend(&self) -> &'static str;

    /// Whether the backend answers, as its probe last found ([`Guarded`]); `None` for a
    /// backend in this process, which cannot go away.
    fn availability(&self) -> Option<&Arc<crate::availability::Availability>> {
        None
    }
}

/// Opens the cache the configuration asks for: Redis when `redis_url` is given (behind
/// [`Guarded`], so its outages are answered, not waited on), memory otherwise.
pub async fn connect(redis_url: Option<&str>) -> Result<Arc<dyn Cache>, CacheError> {
    let cache: Arc<dyn Cache> = match redis_url {
        Some(url) => Arc::new(Guarded::new(Arc::new(RedisCache::connect(url).await?))),
        None => Arc::new(MemoryCache::new()),
    };
    Ok(cache)
}

/// [`connect`], with every key and channel under `prefix`.
pub async fn connect_prefixed(
    redis_url: Option<&str>,
    prefix: &str,
) -> Result<Arc<dyn Cache>, CacheError> {
    let cache: Arc<dyn Cache> = Arc::new(Prefixed::new(connect(redis_url).await?, prefix));
    // The URL may carry a password: only the backend name is logged.
    tracing::info!(backend = cache.backend(), "cache ready");
    Ok(cache)
}

/// A new random token for a key that stamps what instances keep (96 bits).
pub fn fresh_token() -> String {
    crate::domain::token::random_token(12)
}

/// The token under `key` (`found`, as just read there), or a fresh one set there when none
/// was: a key expired or lost with the cache never reads as a value something was kept under.
pub async fn token_or_fresh(
    cache: &dyn Cache,
    key: &str,
    found: Option<String>,
    ttl: Duration,
) -> Result<String, CacheError> {
    if let Some(token) = found {
        return Ok(token);
    }
    let fresh = fresh_token();
    if cache.set_if_absent(key, &fresh, ttl).await? {
        return Ok(fresh);
    }
    // Another caller set one between the two calls: that one.
    Ok(cache.get(key).await?.unwrap_or(fresh))
}

/// Longest TTL or window accepted; longer ones are shortened to it so that deadline
/// arithmetic cannot overflow.
const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);

/// Validates a TTL or window and rounds it up to whole milliseconds, the unit of Redis.
fn whole_millis(duration: Duration) -> Result<Duration, CacheError> {
    if duration.is_zero() {
        return Err(CacheError::InvalidDuration);
    }
    let duration = duration.min(MAX_DURATION);
    let millis = duration.as_nanos().div_ceil(1_000_000);
    let millis = u64::try_from(millis).unwrap_or(u64::MAX);
    Ok(Duration::from_millis(millis))
}

#[cfg(test)]
mod tests;
