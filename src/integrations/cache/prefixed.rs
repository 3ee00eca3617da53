//! A namespace over a shared cache: every key and channel gets a prefix, so deployments (or
//! test servers) sharing one Redis never see each other's entries.

use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::BoxStream;

use super::{Cache, CacheError, LeaseAnswer, Rate, Take, WindowCount};

pub struct Prefixed {
    inner: Arc<dyn Cache>,
    prefix: String,
}

impl Prefixed {
    pub fn new(inner: Arc<dyn Cache>, prefix: impl Into<String>) -> Self {
        Self {
            inner,
            prefix: prefix.into(),
        }
    }

    fn key(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    fn keys(&self, keys: &[&str]) -> Vec<String> {
        keys.iter().map(|k| self.key(k)).collect()
    }
}

#[async_trait::async_trait]
impl Cache for Prefixed {
    async fn get(&self, key: &str) -> Result<Option<String>, CacheError> {
        self.inner.get(&self.key(key)).await
    }
    async fn get_all(&self, keys: &[String]) -> Result<Vec<Option<String>>, CacheError> {
        let keys: Vec<String> = keys.iter().map(|k| self.key(k)).collect();
        self.inner.get_all(&keys).await
    }
    async fn set(&self, key: &str, value: &str, ttl: Duration) -> Result<(), CacheError> {
        self.inner.set(&self.key(key), value, ttl).await
    }
    async fn set_if_absent(
        &self,
        key: &str,
        value: &str,
        ttl: Duration,
    ) -> Result<bool, CacheError> {
        self.inner.set_if_absent(&self.key(key), value, ttl).await
    }
    async fn delete(&self, key: &str) -> Result<(), CacheError> {
        self.inner.delete(&self.key(key)).await
    }
    async fn delete_prefix(&self, prefix: &str) -> Result<u64, CacheError> {
        self.inner.delete_prefix(&self.key(prefix)).await
    }
    async fn hit(&self, key: &str, window: Duration) -> Result<WindowCount, CacheError> {
        self.inner.hit(&self.key(key), window).await
    }
    async fn take_token(&self, key: &str, rate: Rate, now_ms: i64) -> Result<Take, CacheError> {
        self.inner.take_token(&self.key(key), rate, now_ms).await
    }
    async fn lease_acquire(
        &self,
        sets: &[(&str, u64)],
        member: &str,
        now_ms: i64,
        until_ms: i64,
        keep: Duration,
    ) -> Result<LeaseAnswer, CacheError> {
        let keys: Vec<(String, u64)> = sets.iter().map(|(s, cap)| (self.key(s), *cap)).collect();
        let keys: Vec<(&str, u64)> = keys.iter().map(|(s, cap)| (s.as_str(), *cap)).collect();
        self.inner
            .lease_acquire(&keys, member, now_ms, until_ms, keep)
            .await
    }
    async fn lease_renew(
        &self,
        sets: &[&str],
        member: &str,
        until_ms: i64,
        keep: Duration,
    ) -> Result<(), CacheError> {
        let keys = self.keys(sets);
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        self.inner.lease_renew(&keys, member, until_ms, keep).await
    }
    async fn lease_release(&self, sets: &[&str], member: &str) -> Result<(), CacheError> {
        let keys = self.keys(sets);
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        self.inner.lease_release(&keys, member).await
    }
    async fn lease_count(&self, set: &str, now_ms: i64) -> Result<u64, CacheError> {
        self.inner.lease_count(&self.key(set), now_ms).await
    }
    async fn publish(&self, channel: &str, payload: &str) -> Result<(), CacheError> {
        self.inner.publish(&self.key(channel), payload).await
    }
    async fn subscribe(&self, channel: &str) -> Result<BoxStream<'static, String>, CacheError> {
        self.inner.subscribe(&self.key(channel)).await
    }
    async fn ping(&self) -> Result<(), CacheError> {
        self.inner.ping().await
    }
    fn availability(&self) -> Option<&Arc<crate::availability::Availability>> {
        self.inner.availability()
    }
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::integrations::cache::MemoryCache;

    #[tokio::test]
    async fn namespaces_do_not_see_each_other() {
        let shared: Arc<dyn Cache> = Arc::new(MemoryCache::new());
        let a = Prefixed::new(shared.clone(), "a:");
        let b = Prefixed::new(shared.clone(), "b:");
        a.set("k", "1", Duration::from_secs(5)).await.unwrap();
        assert_eq!(a.get("k").await.unwrap().as_deref(), Some("1"));
        assert_eq!(b.get("k").await.unwrap(), None);
        assert_eq!(shared.get("a:k").await.unwrap().as_deref(), Some("1"));
        assert_eq!(a.hit("n", Duration::from_secs(5)).await.unwrap().count, 1);
        assert_eq!(b.hit("n", Duration::from_secs(5)).await.unwrap().count, 1);
    }
}
