//! The shared cache as requests use it when it lives in another process (Redis): while its
//! probe finds it away, no call waits on it. Rate limits count in this instance's own buckets
//! instead (a limit still holds, per instance); every other call is refused at once with
//! [`CacheError::Unavailable`], which callers answer 503 or serve without (ARCHITECTURE.md,
//! "When a dependency is away"). While it answers, a call that takes longer than
//! [`CALL_TIMEOUT`] is cut off the same way, so a stalled Redis costs a request that much.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::BoxStream;

use super::{Cache, CacheError, LeaseAnswer, MemoryCache, Rate, Take, WindowCount};
use crate::availability::Availability;

/// The longest a request waits for one cache call (Redis answers in well under a millisecond).
pub const CALL_TIMEOUT: Duration = Duration::from_millis(250);

pub struct Guarded {
    shared: Arc<dyn Cache>,
    /// Where rate limits count while the shared cache is away.
    local: MemoryCache,
    availability: Arc<Availability>,
}

impl Guarded {
    pub fn new(shared: Arc<dyn Cache>) -> Self {
        Self {
            shared,
            local: MemoryCache::new(),
            availability: Arc::new(Availability::new("redis")),
        }
    }

    /// Runs `call` unless the cache is away, within [`CALL_TIMEOUT`].
    async fn guard<T>(
        &self,
        call: impl Future<Output = Result<T, CacheError>>,
    ) -> Result<T, CacheError> {
        if self.availability.is_away() {
            self.availability.refused();
            return Err(CacheError::Unavailable("away"));
        }
        tokio::time::timeout(CALL_TIMEOUT, call)
            .await
            .unwrap_or(Err(CacheError::Unavailable("timed out")))
    }

    /// A rate limit's call: the shared bucket, or this instance's own one when the shared cache
    /// is away or does not answer.
    async fn limit<T, Shared, Local>(&self, shared: Shared, local: Local) -> Result<T, CacheError>
    where
        Shared: Future<Output = Result<T, CacheError>>,
        Local: Future<Output = Result<T, CacheError>>,
    {
        match self.guard(shared).await {
            Err(CacheError::Unavailable(_)) => local.await,
            answered => answered,
        }
    }
}

#[async_trait::async_trait]
impl Cache for Guarded {
    async fn get(&self, key: &str) -> Result<Option<String>, CacheError> {
        self.guard(self.shared.get(key)).await
    }
    async fn get_all(&self, keys: &[String]) -> Result<Vec<Option<String>>, CacheError> {
        self.guard(self.shared.get_all(keys)).await
    }
    async fn set(&self, key: &str, value: &str, ttl: Duration) -> Result<(), CacheError> {
        self.guard(self.shared.set(key, value, ttl)).await
    }
    async fn set_if_absent(
        &self,
        key: &str,
        value: &str,
        ttl: Duration,
    ) -> Result<bool, CacheError> {
        self.guard(self.shared.set_if_absent(key, value, ttl)).await
    }
    async fn delete(&self, key: &str) -> Result<(), CacheError> {
        self.guard(self.shared.delete(key)).await
    }
    async fn delete_prefix(&self, prefix: &str) -> Result<u64, CacheError> {
        // A walk over the whole keyspace (the reset): not a request's call, no timeout.
        if self.availability.is_away() {
            return Err(CacheError::Unavailable("away"));
        }
        self.local.delete_prefix(prefix).await?;
        self.shared.delete_prefix(prefix).await
    }
    async fn hit(&self, key: &str, window: Duration) -> Result<WindowCount, CacheError> {
        self.limit(self.shared.hit(key, window), self.local.hit(key, window))
            .await
    }
    async fn take_token(&self, key: &str, rate: Rate, now_ms: i64) -> Result<Take, CacheError> {
        self.limit(
            self.shared.take_token(key, rate, now_ms),
            self.local.take_token(key, rate, now_ms),
        )
        .await
    }
    async fn lease_acquire(
        &self,
        sets: &[(&str, u64)],
        member: &str,
        now_ms: i64,
        until_ms: i64,
        keep: Duration,
    ) -> Result<LeaseAnswer, CacheError> {
        self.guard(
            self.shared
                .lease_acquire(sets, member, now_ms, until_ms, keep),
        )
        .await
    }
    async fn lease_renew(
        &self,
        sets: &[&str],
        member: &str,
        until_ms: i64,
        keep: Duration,
    ) -> Result<(), CacheError> {
        self.guard(self.shared.lease_renew(sets, member, until_ms, keep))
            .await
    }
    async fn lease_release(&self, sets: &[&str], member: &str) -> Result<(), CacheError> {
        self.guard(self.shared.lease_release(sets, member)).await
    }
    async fn lease_count(&self, set: &str, now_ms: i64) -> Result<u64, CacheError> {
        self.guard(self.shared.lease_count(set, now_ms)).await
    }
    async fn publish(&self, channel: &str, payload: &str) -> Result<(), CacheError> {
        self.guard(self.shared.publish(channel, payload)).await
    }
    async fn subscribe(&self, channel: &str) -> Result<BoxStream<'static, String>, CacheError> {
        // Opening a subscription has its own connection timeout; only the flag is checked.
        if self.availability.is_away() {
            return Err(CacheError::Unavailable("away"));
        }
        self.shared.subscribe(channel).await
    }
    /// The probe: asks the shared cache itself, whatever the flag says, and records the answer.
    /// A PING is held to a request's [`CALL_TIMEOUT`]: one that a request could not wait for
    /// is an outage to it.
    async fn ping(&self) -> Result<(), CacheError> {
        let answered = tokio::time::timeout(CALL_TIMEOUT, self.shared.ping())
            .await
            .unwrap_or(Err(CacheError::Unavailable("timed out")));
        self.availability.probed(answered.is_ok());
        answered
    }
    fn backend(&self) -> &'static str {
        self.shared.backend()
    }
    fn availability(&self) -> Option<&Arc<Availability>> {
        Some(&self.availability)
    }
}
