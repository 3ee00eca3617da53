//! The bounds on WebSockets and their frames (issue #31), as pure rules: how many sockets an
//! account, an address and a process may hold, the budget that chat messages spend whether
//! they come over REST or a socket, the typing frames' own small rate, and when a client that
//! keeps sending refused messages is closed.
//!
//! Times are milliseconds of the service's clock (Unix epoch), never the wall clock read here.

use std::time::Duration;

/// Live sockets per account, both kinds together (`WS_MAX_SOCKETS_PER_USER`): a person's
/// browser tabs and devices, with room to spare.
pub const DEFAULT_SOCKETS_PER_ACCOUNT: u32 = 10;

/// Live sockets per client address, as a multiple of the per-account cap
/// (`WS_MAX_SOCKETS_PER_ADDRESS` defaults to ten times `WS_MAX_SOCKETS_PER_USER`, 100): many
/// people behind one NAT or office proxy still connect, one host cannot hold thousands.
pub const ADDRESS_CAP_PER_ACCOUNT_CAP: u32 = 10;

/// The highest process-wide cap derived from the file-descriptor limit: past this, memory
/// (a few KiB a socket) and the fan-out, not descriptors, are what runs out.
pub const MAX_DERIVED_PROCESS_SOCKETS: u32 = 50_000;

/// The process-wide socket cap when `WS_MAX_SOCKETS` is unset: half the soft limit of open
/// files (the other half for HTTP connections, the database pool, files and the cache), at
/// least one and at most [`MAX_DERIVED_PROCESS_SOCKETS`]. `None` (the limit is unknown) gives
/// that maximum.
pub fn default_process_cap(soft_open_files_limit: Option<u64>) -> u32 {
    match soft_open_files_limit {
        None => MAX_DERIVED_PROCESS_SOCKETS,
        Some(limit) => u32::try_from(limit / 2)
            .unwrap_or(u32::MAX)
            .clamp(1, MAX_DERIVED_PROCESS_SOCKETS),
    }
}

/// How long a socket's registration lasts without being renewed: three ping intervals (the
/// socket renews it at every ping, and is closed after three intervals without a pong), so
/// the sockets of an instance that died stop counting after that.
pub fn socket_lease(ping_interval: Duration) -> Duration {
    ping_interval * 3
}

/// Which registration of a socket (`lease`, in milliseconds of the service's clock) still
/// counts at `now_ms`.
pub fn lease_counts(expires_ms: i64, now_ms: i64) -> bool {
    expires_ms > now_ms
}

/// A token bucket: `burst` tokens, one more every `interval_ms`. Kept as its "theoretical
/// arrival time" (GCRA), one number per bucket: the time at which the bucket would be full
/// again. A take is allowed while that time, moved on by one interval, stays within `burst`
/// intervals of now; so a full bucket gives `burst` takes at once, then one per interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub burst: u32,
    pub interval_ms: i64,
}

/// The answer of [`Rate::take`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// Taken: store `full_at_ms` as the bucket's new state.
    Allowed { full_at_ms: i64 },
    /// Refused: the next token comes in `retry_after_ms`; the state is unchanged.
    Refused { retry_after_ms: i64 },
}

impl Rate {
    /// `n` a minute, all of them at once if the bucket is full (`n` at least 1).
    pub fn per_minute(n: u32) -> Self {
        Self::per(n, 60_000)
    }

    /// `n` a second (`n` at least 1).
    pub fn per_second(n: u32) -> Self {
        Self::per(n, 1_000)
    }

    fn per(n: u32, period_ms: i64) -> Self {
        let n = n.max(1);
        Self {
            burst: n,
            interval_ms: (period_ms / i64::from(n)).max(1),
        }
    }

    /// How long a bucket may hold state: from empty to full.
    pub fn span_ms(self) -> i64 {
        self.interval_ms.saturating_mul(i64::from(self.burst))
    }

    /// Takes one token at `now_ms` from the bucket whose state is `full_at_ms` (`None`: a
    /// bucket never used, or forgotten once full).
    pub fn take(self, full_at_ms: Option<i64>, now_ms: i64) -> Take {
        let from = full_at_ms.unwrap_or(now_ms).max(now_ms);
        let next = from.saturating_add(self.interval_ms);
        let over = next - now_ms - self.span_ms();
        if over > 0 {
            Take::Refused {
                retry_after_ms: over,
            }
        } else {
            Take::Allowed { full_at_ms: next }
        }
    }
}

/// Typing frames of one socket: a few a second are relayed, the rest dropped without an
/// answer (an indicator that comes again in a moment needs no error, and an error frame for
/// each would itself be the traffic the limit stops).
pub const TYPING_RATE: Rate = Rate {
    burst: 3,
    interval_ms: 333,
};

/// Refused chat messages a socket may send in [`REFUSAL_WINDOW_MS`] before it is closed
/// with 1008 (policy): a client that ignores its `error` frames is not listening.
pub const REFUSALS_BEFORE_CLOSE: u32 = 10;

/// The window of [`REFUSALS_BEFORE_CLOSE`]: the chat budget's minute.
pub const REFUSAL_WINDOW_MS: i64 = 60_000;

/// The refused messages of one socket in its current window (a fixed window that starts at
/// the first refusal).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RefusedFrames {
    window_start_ms: Option<i64>,
    count: u32,
}

impl RefusedFrames {
    /// Counts one refusal at `now_ms`; true when the socket has now had
    /// [`REFUSALS_BEFORE_CLOSE`] in its window and is to be closed.
    pub fn record(&mut self, now_ms: i64) -> bool {
        match self.window_start_ms {
            Some(start) if now_ms - start < REFUSAL_WINDOW_MS => self.count += 1,
            _ => {
                self.window_start_ms = Some(now_ms);
                self.count = 1;
            }
        }
        self.count >= REFUSALS_BEFORE_CLOSE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn takes(rate: Rate, times: &[i64]) -> Vec<bool> {
        let mut state = None;
        times
            .iter()
            .map(|&now| match rate.take(state, now) {
                Take::Allowed { full_at_ms } => {
                    state = Some(full_at_ms);
                    true
                }
                Take::Refused { .. } => false,
            })
            .collect()
    }

    #[test]
    fn a_full_bucket_gives_its_burst_then_one_per_interval() {
        let rate = Rate::per_minute(5);
        assert_eq!(rate.interval_ms, 12_000);
        let now = 1_800_000_000_000;
        assert_eq!(
            takes(rate, &[now; 7]),
            [true, true, true, true, true, false, false]
        );
        // One interval later, one more; a minute later, the whole budget.
        let mut state = None;
        for _ in 0..5 {
            let Take::Allowed { full_at_ms } = rate.take(state, now) else {
                panic!("allowed")
            };
            state = Some(full_at_ms);
        }
        assert_eq!(
            rate.take(state, now),
            Take::Refused {
                retry_after_ms: 12_000
            }
        );
        assert!(matches!(
            rate.take(state, now + 12_000),
            Take::Allowed { .. }
        ));
        assert_eq!(state, Some(now + 60_000));
        assert!(matches!(
            rate.take(state, now + 60_000),
            Take::Allowed { full_at_ms } if full_at_ms == now + 60_000 + 12_000
        ));
    }

    #[test]
    fn the_process_cap_is_half_the_descriptors_within_bounds() {
        assert_eq!(default_process_cap(Some(1024)), 512);
        assert_eq!(default_process_cap(Some(20_000)), 10_000);
        assert_eq!(default_process_cap(Some(1)), 1);
        assert_eq!(
            default_process_cap(Some(u64::MAX)),
            MAX_DERIVED_PROCESS_SOCKETS
        );
        assert_eq!(default_process_cap(None), MAX_DERIVED_PROCESS_SOCKETS);
    }

    #[test]
    fn leases_lapse_at_their_expiry() {
        assert_eq!(
            socket_lease(Duration::from_secs(10)),
            Duration::from_secs(30)
        );
        assert!(lease_counts(1_001, 1_000));
        assert!(!lease_counts(1_000, 1_000));
    }

    #[test]
    fn the_tenth_refusal_in_a_minute_closes() {
        let mut refused = RefusedFrames::default();
        for i in 0..9 {
            assert!(!refused.record(1_000 + i), "{i}");
        }
        assert!(refused.record(2_000));
        // Spread over more than a window, refusals never add up to a close.
        let mut refused = RefusedFrames::default();
        for i in 0..30 {
            assert!(!refused.record(i * 7_000), "{i}");
        }
    }

    proptest! {
        /// Over any span, a bucket never allows more than its burst plus one per interval.
        #[test]
        fn never_more_than_burst_plus_refill(
            per_minute in 1u32..200,
            gaps in proptest::collection::vec(0i64..5_000, 1..300),
        ) {
            let rate = Rate::per_minute(per_minute);
            let start = 1_700_000_000_000i64;
            let mut now = start;
            let mut times = Vec::new();
            for gap in gaps {
                now += gap;
                times.push(now);
            }
            let allowed = takes(rate, &times).into_iter().filter(|a| *a).count() as i64;
            let bound = i64::from(rate.burst) + (now - start) / rate.interval_ms;
            prop_assert!(allowed <= bound, "{allowed} > {bound}");
        }
    }
}
