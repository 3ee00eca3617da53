//! Redis-backed cache shared by several instances.

use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, RedisError, Value};

use super::{Cache, CacheError, LeaseAnswer, Rate, Take, WindowCount, whole_millis};

/// Limit for opening a connection (commands and each subscription).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Limit for one command's answer.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
/// Reconnection attempts of the command connection before a command fails.
const RECONNECT_ATTEMPTS: usize = 3;

/// Counts a hit and starts the window on the first one, in one atomic step (a Lua
/// script runs without interruption). Sent with `EVAL`, which Redis caches by digest.
///
/// Returns `{count, milliseconds left}`. A counter found without expiry (written by
/// something else) gets the window too, so it can never stick forever.
const HIT_SCRIPT: &str = r"
local count = redis.call('INCR', KEYS[1])
if count == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
local left = redis.call('PTTL', KEYS[1])
if left < 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  left = tonumber(ARGV[1])
end
return {count, left}
";

/// One take from a token bucket kept as the time it is full again (`domain::realtime_limits::
/// Rate::take`, the same arithmetic), in one atomic step. The times are the service's clock
/// (milliseconds, passed in), so every instance and a test's moved clock agree; the key
/// expires when the bucket would be full again, which loses nothing.
///
/// ARGV: now, interval, burst. Returns `{1, full_at}` when taken, `{0, retry_after}` when not.
const TAKE_SCRIPT: &str = r"
local now = tonumber(ARGV[1])
local interval = tonumber(ARGV[2])
local span = interval * tonumber(ARGV[3])
local full_at = tonumber(redis.call('GET', KEYS[1]) or ARGV[1])
if full_at < now then
  full_at = now
end
local next = full_at + interval
local over = next - now - span
if over > 0 then
  return {0, over}
end
redis.call('SET', KEYS[1], string.format('%d', next), 'PX', string.format('%d', next - now))
return {1, next}
";

/// Adds a member to every given sorted set (score: its lease's expiry on the service's clock)
/// if each holds fewer than its cap of unexpired members, after dropping the expired ones;
/// all or none, in one atomic step.
///
/// KEYS: the sets. ARGV: member, now, until, keep (milliseconds a set lives untouched), then
/// one cap per set. Returns 0 when added, else the (1-based) index of the first full set.
const LEASE_ACQUIRE_SCRIPT: &str = r"
for i, key in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', key, '-inf', ARGV[2])
  if redis.call('ZCARD', key) >= tonumber(ARGV[4 + i]) then
    return i
  end
end
for _, key in ipairs(KEYS) do
  redis.call('ZADD', key, ARGV[3], ARGV[1])
  redis.call('PEXPIRE', key, ARGV[4])
end
return 0
";

/// Moves a member's lease in every given set (adding it again if it had lapsed).
/// KEYS: the sets. ARGV: member, until, keep.
const LEASE_RENEW_SCRIPT: &str = r"
for _, key in ipairs(KEYS) do
  redis.call('ZADD', key, ARGV[2], ARGV[1])
  redis.call('PEXPIRE', key, ARGV[3])
end
return 0
";

/// Cache in a Redis server: commands share one self-healing [`ConnectionManager`], and
/// each subscription has a dedicated connection.
pub struct RedisCache {
    client: Client,
    commands: ConnectionManager,
}

impl RedisCache {
    /// Connects to the Redis at `url` (`redis://[user:password@]host[:port][/db]`) and
    /// checks that it answers.
    pub async fn connect(url: &str) -> Result<Self, CacheError> {
        let client = Client::open(url).map_err(|error| connect_error(&error))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_number_of_retries(RECONNECT_ATTEMPTS);
        let commands = client
            .get_connection_manager_with_config(config)
            .await
            .map_err(|error| connect_error(&error))?;
        let cache = Self { client, commands };
        cache.ping().await?;
        Ok(cache)
    }

    async fn query<T: redis::FromRedisValue>(
        &self,
        operation: &'static str,
        command: &redis::Cmd,
    ) -> Result<T, CacheError> {
        // Clones share the underlying multiplexed connection.
        let mut connection = self.commands.clone();
        command
            .query_async(&mut connection)
            .await
            .map_err(|error| operation_error(operation, &error))
    }
}

/// Redis errors name the failure and the server's answer, never the command's
/// arguments, so their text is safe to keep.
fn connect_error(error: &RedisError) -> CacheError {
    CacheError::Connect(error.to_string())
}

fn operation_error(operation: &'static str, error: &RedisError) -> CacheError {
    if error.is_io_error()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || error.is_timeout()
    {
        return CacheError::Unavailable(operation);
    }
    CacheError::Operation {
        operation,
        detail: error.to_string(),
    }
}

/// Milliseconds for `PX`/`PEXPIRE`; `whole_millis` bounds the value far below `u64::MAX`.
fn millis(duration: Duration) -> Result<u64, CacheError> {
    let duration = whole_millis(duration)?;
    Ok(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX))
}

#[async_trait::async_trait]
impl Cache for RedisCache {
    async fn get(&self, key: &str) -> Result<Option<String>, CacheError> {
        self.query("get", redis::cmd("GET").arg(key)).await
    }

    async fn get_all(&self, keys: &[String]) -> Result<Vec<Option<String>>, CacheError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        self.query("mget", redis::cmd("MGET").arg(keys)).await
    }

    async fn set(&self, key: &str, value: &str, ttl: Duration) -> Result<(), CacheError> {
        let ttl = millis(ttl)?;
        let command = redis::cmd("SET")
            .arg(key)
            .arg(value)
            .arg("PX")
            .arg(ttl)
            .clone();
        self.query::<()>("set", &command).await
    }

    async fn set_if_absent(
        &self,
        key: &str,
        value: &str,
        ttl: Duration,
    ) -> Result<bool, CacheError> {
        let ttl = millis(ttl)?;
        let command = redis::cmd("SET")
            .arg(key)
            .arg(value)
            .arg("NX")
            .arg("PX")
            .arg(ttl)
            .clone();
        // `OK` when set, nil when the key already existed.
        let answer: Value = self.query("set_if_absent", &command).await?;
        Ok(!matches!(answer, Value::Nil))
    }

    async fn delete(&self, key: &str) -> Result<(), CacheError> {
        self.query::<()>("delete", redis::cmd("DEL").arg(key)).await
    }

    async fn delete_prefix(&self, prefix: &str) -> Result<u64, CacheError> {
        // SCAN in steps rather than KEYS, so a large keyspace never blocks Redis.
        let pattern = format!("{}*", glob_escape(prefix));
        let mut cursor: u64 = 0;
        let mut removed = 0;
        loop {
            let command = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(500)
                .clone();
            let (next, keys): (u64, Vec<String>) = self.query("scan", &command).await?;
            if !keys.is_empty() {
                removed += self
                    .query::<u64>("delete", redis::cmd("DEL").arg(&keys))
                    .await?;
            }
            if next == 0 {
                return Ok(removed);
            }
            cursor = next;
        }
    }

    async fn hit(&self, key: &str, window: Duration) -> Result<WindowCount, CacheError> {
        let window = millis(window)?;
        let command = redis::cmd("EVAL")
            .arg(HIT_SCRIPT)
            .arg(1)
            .arg(key)
            .arg(window)
            .clone();
        let (count, left_millis): (u64, u64) = self.query("hit", &command).await?;
        Ok(WindowCount {
            count,
            resets_in: Duration::from_millis(left_millis),
        })
    }

    async fn take_token(&self, key: &str, rate: Rate, now_ms: i64) -> Result<Take, CacheError> {
        let command = redis::cmd("EVAL")
            .arg(TAKE_SCRIPT)
            .arg(1)
            .arg(key)
            .arg(now_ms)
            .arg(rate.interval_ms.max(1))
            .arg(rate.burst.max(1))
            .clone();
        let (taken, value): (i64, i64) = self.query("take_token", &command).await?;
        Ok(if taken == 1 {
            Take::Allowed { full_at_ms: value }
        } else {
            Take::Refused {
                retry_after_ms: value,
            }
        })
    }

    async fn lease_acquire(
        &self,
        sets: &[(&str, u64)],
        member: &str,
        now_ms: i64,
        until_ms: i64,
        keep: Duration,
    ) -> Result<LeaseAnswer, CacheError> {
        let mut command = redis::cmd("EVAL");
        command.arg(LEASE_ACQUIRE_SCRIPT).arg(sets.len());
        for (set, _) in sets {
            command.arg(*set);
        }
        command
            .arg(member)
            .arg(now_ms)
            .arg(until_ms)
            .arg(millis(keep)?);
        for (_, cap) in sets {
            command.arg(*cap);
        }
        let full: usize = self.query("lease_acquire", &command).await?;
        Ok(match full {
            0 => LeaseAnswer::Taken,
            n => LeaseAnswer::Full(n - 1),
        })
    }

    async fn lease_renew(
        &self,
        sets: &[&str],
        member: &str,
        until_ms: i64,
        keep: Duration,
    ) -> Result<(), CacheError> {
        let mut command = redis::cmd("EVAL");
        command.arg(LEASE_RENEW_SCRIPT).arg(sets.len());
        for set in sets {
            command.arg(*set);
        }
        command.arg(member).arg(until_ms).arg(millis(keep)?);
        self.query::<()>("lease_renew", &command).await
    }

    async fn lease_release(&self, sets: &[&str], member: &str) -> Result<(), CacheError> {
        // One set at a time is enough: a member left behind lapses with its lease.
        for set in sets {
            self.query::<()>("lease_release", redis::cmd("ZREM").arg(*set).arg(member))
                .await?;
        }
        Ok(())
    }

    async fn lease_count(&self, set: &str, now_ms: i64) -> Result<u64, CacheError> {
        let command = redis::cmd("ZCOUNT")
            .arg(set)
            .arg(format!("({now_ms}"))
            .arg("+inf")
            .clone();
        self.query("lease_count", &command).await
    }

    async fn publish(&self, channel: &str, payload: &str) -> Result<(), CacheError> {
        let command = redis::cmd("PUBLISH").arg(channel).arg(payload).clone();
        self.query::<()>("publish", &command).await
    }

    async fn subscribe(&self, channel: &str) -> Result<BoxStream<'static, String>, CacheError> {
        // A connection in subscribed mode cannot run other commands: one per subscription.
        let mut pubsub = tokio::time::timeout(CONNECT_TIMEOUT, self.client.get_async_pubsub())
            .await
            .map_err(|_| CacheError::Connect("timed out opening a subscription".to_owned()))?
            .map_err(|error| connect_error(&error))?;
        // Returns once the server has confirmed the subscription.
        pubsub
            .subscribe(channel)
            .await
            .map_err(|error| operation_error("subscribe", &error))?;
        let messages = pubsub.into_on_message().filter_map(|message| async move {
            match message.get_payload::<String>() {
                Ok(payload) => Some(payload),
                Err(_) => {
                    tracing::warn!("dropped a pub/sub message that is not UTF-8");
                    None
                }
            }
        });
        Ok(messages.boxed())
    }

    async fn ping(&self) -> Result<(), CacheError> {
        self.query::<()>("ping", &redis::cmd("PING")).await
    }

    fn backend(&self) -> &'static str {
        "redis"
    }
}

/// Escapes the glob characters of a Redis MATCH pattern.
fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}
