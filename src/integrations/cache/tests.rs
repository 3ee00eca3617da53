//! One set of behaviour tests, run against every backend: always against
//! [`MemoryCache`], and against [`RedisCache`] when `REDIS_URL` names a server.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::future::join_all;
use futures_util::stream::BoxStream;

use super::{Cache, LeaseAnswer, MemoryCache, Rate, RedisCache, Take, connect};

/// How long a test waits for something that should happen soon.
const PATIENCE: Duration = Duration::from_secs(5);
const POLL: Duration = Duration::from_millis(10);
const LONG_TTL: Duration = Duration::from_secs(60);

/// A key or channel name no other test run uses.
fn unique(what: &str) -> String {
    format!("test:cache:{what}:{:016x}", rand::random::<u64>())
}

async fn next_message(stream: &mut BoxStream<'static, String>) -> String {
    tokio::time::timeout(PATIENCE, stream.next())
        .await
        .expect("a message within the deadline")
        .expect("the stream is still open")
}

/// The behaviours every backend must show, each a function over `&dyn Cache`.
mod behaviour {
    use super::*;

    pub async fn set_then_get_returns_the_value(cache: &dyn Cache) {
        let key = unique("set-get");
        assert_eq!(cache.get(&key).await.expect("get"), None);

        cache.set(&key, "first", LONG_TTL).await.expect("set");
        assert_eq!(
            cache.get(&key).await.expect("get").as_deref(),
            Some("first")
        );

        cache
            .set(&key, "second", LONG_TTL)
            .await
            .expect("set again");
        assert_eq!(
            cache.get(&key).await.expect("get").as_deref(),
            Some("second")
        );
        cache.delete(&key).await.expect("delete");
    }

    pub async fn get_all_answers_each_key_in_order(cache: &dyn Cache) {
        let (a, b, absent) = (unique("all-a"), unique("all-b"), unique("all-absent"));
        cache.set(&a, "one", LONG_TTL).await.expect("set a");
        cache.set(&b, "two", LONG_TTL).await.expect("set b");
        let keys = [b.clone(), absent, a.clone(), b.clone()];
        assert_eq!(
            cache.get_all(&keys).await.expect("get_all"),
            [Some("two"), None, Some("one"), Some("two")].map(|v| v.map(str::to_owned))
        );
        assert!(cache.get_all(&[]).await.expect("none").is_empty());
        cache.delete(&a).await.expect("delete a");
        cache.delete(&b).await.expect("delete b");
    }

    pub async fn entries_expire_after_their_ttl(cache: &dyn Cache) {
        let short = unique("expiry-short");
        let long = unique("expiry-long");
        cache
            .set(&short, "v", Duration::from_millis(50))
            .await
            .expect("set");
        cache.set(&long, "v", LONG_TTL).await.expect("set");

        let deadline = Instant::now() + PATIENCE;
        while cache.get(&short).await.expect("get").is_some() {
            assert!(Instant::now() < deadline, "the entry never expired");
            tokio::time::sleep(POLL).await;
        }
        assert_eq!(cache.get(&long).await.expect("get").as_deref(), Some("v"));
        cache.delete(&long).await.expect("delete");
    }

    pub async fn set_if_absent_sets_only_when_absent(cache: &dyn Cache) {
        let key = unique("nx");
        let ttl = Duration::from_millis(50);
        assert!(cache.set_if_absent(&key, "a", ttl).await.expect("first"));
        assert!(!cache.set_if_absent(&key, "b", ttl).await.expect("second"));
        assert_eq!(cache.get(&key).await.expect("get").as_deref(), Some("a"));

        // Once the first value has expired the key is free again.
        let deadline = Instant::now() + PATIENCE;
        while !cache
            .set_if_absent(&key, "c", LONG_TTL)
            .await
            .expect("retry")
        {
            assert!(Instant::now() < deadline, "the key never became free");
            tokio::time::sleep(POLL).await;
        }
        assert_eq!(cache.get(&key).await.expect("get").as_deref(), Some("c"));
        cache.delete(&key).await.expect("delete");
    }

    pub async fn set_if_absent_has_exactly_one_winner_among_20_callers(cache: &dyn Cache) {
        let key = unique("nx-race");
        let attempts = (0..20).map(|caller| {
            let key = key.clone();
            async move {
                cache
                    .set_if_absent(&key, &caller.to_string(), LONG_TTL)
                    .await
                    .expect("set_if_absent")
            }
        });
        let outcomes = join_all(attempts).await;

        let winners: Vec<usize> = (0..outcomes.len()).filter(|&i| outcomes[i]).collect();
        assert_eq!(winners.len(), 1, "outcomes: {outcomes:?}");
        let stored = cache.get(&key).await.expect("get");
        assert_eq!(stored, Some(winners[0].to_string()));
        cache.delete(&key).await.expect("delete");
    }

    pub async fn delete_removes_the_key(cache: &dyn Cache) {
        let key = unique("delete");
        cache.set(&key, "v", LONG_TTL).await.expect("set");
        cache.delete(&key).await.expect("delete");
        assert_eq!(cache.get(&key).await.expect("get"), None);
        cache
            .delete(&key)
            .await
            .expect("deleting an absent key is fine");
        assert!(cache.set_if_absent(&key, "w", LONG_TTL).await.expect("nx"));
        cache.delete(&key).await.expect("delete");
    }

    pub async fn hit_counts_within_the_window(cache: &dyn Cache) {
        let key = unique("hits");
        let window = Duration::from_secs(30);
        for expected in 1..=3 {
            let counted = cache.hit(&key, window).await.expect("hit");
            assert_eq!(counted.count, expected);
            assert!(counted.resets_in <= window, "{counted:?}");
            assert!(counted.resets_in > Duration::from_secs(20), "{counted:?}");
        }
        // The counter is a plain value under the key.
        assert_eq!(cache.get(&key).await.expect("get").as_deref(), Some("3"));
        cache.delete(&key).await.expect("delete");
        assert_eq!(cache.hit(&key, window).await.expect("hit").count, 1);
        cache.delete(&key).await.expect("delete");
    }

    pub async fn hit_window_starts_at_the_first_hit_and_resets(cache: &dyn Cache) {
        let key = unique("window");
        let window = Duration::from_millis(300);
        let first = cache.hit(&key, window).await.expect("hit");
        assert_eq!(first.count, 1);
        tokio::time::sleep(Duration::from_millis(50)).await;
        let second = cache.hit(&key, window).await.expect("hit");
        assert_eq!(second.count, 2);
        // Later hits do not extend the window.
        assert!(
            second.resets_in < first.resets_in,
            "{first:?} then {second:?}"
        );

        let deadline = Instant::now() + PATIENCE;
        loop {
            tokio::time::sleep(POLL).await;
            let counted = cache.hit(&key, window).await.expect("hit");
            if counted.count == 1 {
                break;
            }
            assert!(Instant::now() < deadline, "the window never reset");
        }
        cache.delete(&key).await.expect("delete");
    }

    pub async fn zero_durations_are_rejected(cache: &dyn Cache) {
        let key = unique("zero");
        assert!(cache.set(&key, "v", Duration::ZERO).await.is_err());
        assert!(
            cache
                .set_if_absent(&key, "v", Duration::ZERO)
                .await
                .is_err()
        );
        assert!(cache.hit(&key, Duration::ZERO).await.is_err());
        assert_eq!(cache.get(&key).await.expect("get"), None);
    }

    pub async fn publish_reaches_every_subscriber_in_order(cache: &dyn Cache) {
        let channel = unique("channel");
        let other = unique("other-channel");
        let mut first = cache.subscribe(&channel).await.expect("subscribe");
        let mut second = cache.subscribe(&channel).await.expect("subscribe");
        let mut elsewhere = cache.subscribe(&other).await.expect("subscribe");

        let sent = ["one", "two", "three", "{\"type\":\"json\"}"];
        for payload in sent {
            cache.publish(&channel, payload).await.expect("publish");
        }
        cache.publish(&other, "elsewhere").await.expect("publish");

        for subscriber in [&mut first, &mut second] {
            for payload in sent {
                assert_eq!(next_message(subscriber).await, payload);
            }
        }
        // Only what was published on its own channel reaches a subscriber.
        assert_eq!(next_message(&mut elsewhere).await, "elsewhere");
    }

    pub async fn publish_without_subscribers_succeeds(cache: &dyn Cache) {
        cache
            .publish(&unique("empty-channel"), "nobody listens")
            .await
            .expect("publish");
    }

    pub async fn token_buckets_give_their_burst_and_refill_on_the_given_clock(cache: &dyn Cache) {
        let key = unique("bucket");
        let rate = Rate::per_minute(3);
        let now = 1_800_000_000_000i64;
        for _ in 0..3 {
            assert!(matches!(
                cache.take_token(&key, rate, now).await.expect("take"),
                Take::Allowed { .. }
            ));
        }
        assert_eq!(
            cache.take_token(&key, rate, now).await.expect("take"),
            Take::Refused {
                retry_after_ms: 20_000
            }
        );
        // The clock passed in, not the wall clock, refills it.
        assert!(matches!(
            cache
                .take_token(&key, rate, now + 20_000)
                .await
                .expect("take"),
            Take::Allowed { .. }
        ));
        assert!(matches!(
            cache
                .take_token(&key, rate, now + 20_000)
                .await
                .expect("take"),
            Take::Refused { .. }
        ));
        let other = unique("bucket");
        assert!(matches!(
            cache.take_token(&other, rate, now).await.expect("take"),
            Take::Allowed { .. }
        ));
        cache.delete(&key).await.expect("delete");
        cache.delete(&other).await.expect("delete");
    }

    pub async fn leases_are_capped_per_set_and_lapse(cache: &dyn Cache) {
        let account = unique("leases-account");
        let address = unique("leases-address");
        let now = 1_800_000_000_000i64;
        let until = now + 30_000;
        let sets = [(account.as_str(), 2), (address.as_str(), 3)];
        for member in ["a", "b"] {
            assert_eq!(
                cache
                    .lease_acquire(&sets, member, now, until, LONG_TTL)
                    .await
                    .expect("acquire"),
                LeaseAnswer::Taken
            );
        }
        assert_eq!(
            cache
                .lease_acquire(&sets, "c", now, until, LONG_TTL)
                .await
                .expect("acquire"),
            LeaseAnswer::Full(0)
        );
        // All or none: the refused member took no place in the address's set.
        assert_eq!(cache.lease_count(&address, now).await.expect("count"), 2);
        let other = unique("leases-other");
        let elsewhere = [(other.as_str(), 2), (address.as_str(), 3)];
        assert_eq!(
            cache
                .lease_acquire(&elsewhere, "d", now, until, LONG_TTL)
                .await
                .expect("acquire"),
            LeaseAnswer::Taken
        );
        assert_eq!(
            cache
                .lease_acquire(&elsewhere, "e", now, until, LONG_TTL)
                .await
                .expect("acquire"),
            LeaseAnswer::Full(1)
        );
        // A release frees a place.
        cache
            .lease_release(&[&account, &address], "a")
            .await
            .expect("release");
        assert_eq!(cache.lease_count(&account, now).await.expect("count"), 1);
        assert_eq!(
            cache
                .lease_acquire(&sets, "c", now, until, LONG_TTL)
                .await
                .expect("acquire"),
            LeaseAnswer::Taken
        );
        // Past their leases, members no longer count, unless renewed.
        cache
            .lease_renew(&[&account, &address], "b", until + 60_000, LONG_TTL)
            .await
            .expect("renew");
        let later = until + 1;
        assert_eq!(cache.lease_count(&account, later).await.expect("count"), 1);
        assert_eq!(cache.lease_count(&address, later).await.expect("count"), 1);
        assert_eq!(
            cache
                .lease_acquire(&sets, "f", later, later + 30_000, LONG_TTL)
                .await
                .expect("acquire"),
            LeaseAnswer::Taken
        );
        for set in [&account, &address, &other] {
            cache.delete(set).await.expect("delete");
        }
    }

    pub async fn ping_answers(cache: &dyn Cache) {
        cache.ping().await.expect("ping");
    }
}

/// The Redis named by `REDIS_URL`, or `None` (test skipped) when it is not set.
async fn redis_from_env() -> Option<RedisCache> {
    let Ok(url) = std::env::var("REDIS_URL") else {
        eprintln!("REDIS_URL is not set: Redis cache test skipped");
        return None;
    };
    Some(
        RedisCache::connect(&url)
            .await
            .expect("REDIS_URL is set, so Redis must be reachable"),
    )
}

/// Runs each behaviour against memory (`memory::name`) and Redis (`redis::name`).
macro_rules! for_every_backend {
    ($($behaviour:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $behaviour() {
                    let cache = super::MemoryCache::new();
                    assert_eq!(super::Cache::backend(&cache), "memory");
                    super::behaviour::$behaviour(&cache).await;
                }
            )*
        }

        mod redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $behaviour() {
                    let Some(cache) = super::redis_from_env().await else { return };
                    assert_eq!(super::Cache::backend(&cache), "redis");
                    super::behaviour::$behaviour(&cache).await;
                }
            )*
        }
    };
}

for_every_backend!(
    set_then_get_returns_the_value,
    get_all_answers_each_key_in_order,
    entries_expire_after_their_ttl,
    set_if_absent_sets_only_when_absent,
    set_if_absent_has_exactly_one_winner_among_20_callers,
    delete_removes_the_key,
    hit_counts_within_the_window,
    hit_window_starts_at_the_first_hit_and_resets,
    zero_durations_are_rejected,
    publish_reaches_every_subscriber_in_order,
    publish_without_subscribers_succeeds,
    token_buckets_give_their_burst_and_refill_on_the_given_clock,
    leases_are_capped_per_set_and_lapse,
    ping_answers,
);

#[tokio::test]
async fn connect_without_url_gives_memory() {
    let cache = connect(None).await.expect("connect");
    assert_eq!(cache.backend(), "memory");
}

#[tokio::test]
async fn connect_errors_do_not_reveal_the_password() {
    // Nothing listens on port 1: the connection is refused at once.
    let error = match connect(Some("redis://user:s3cr3t-pw@127.0.0.1:1/0")).await {
        Ok(_) => panic!("connected to a closed port"),
        Err(error) => error.to_string(),
    };
    assert!(!error.contains("s3cr3t-pw"), "{error}");
}

#[tokio::test]
async fn invalid_redis_url_is_a_connect_error() {
    let result = connect(Some("not a url")).await;
    assert!(matches!(result, Err(super::CacheError::Connect(_))));
}
