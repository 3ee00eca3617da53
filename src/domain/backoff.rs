//! How long a leased queue waits before it tries a failed row again: one policy for every
//! queue (the outbox, the e-mail queue, the CRM queue, webhook deliveries), each queue's
//! numbers a constant of it.

use chrono::Duration;

/// The wait before the next attempt, given the failed attempts before the one that just
/// failed (0 after the first failure).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backoff {
    /// `first`, then `factor` times longer after each further failure, never past `max`.
    Exponential {
        first: Duration,
        factor: i32,
        max: Duration,
    },
    /// A table of waits, its last step repeating (a schedule people read, such as the
    /// webhook receivers' 1 min, 5 min, 30 min, …).
    Steps(&'static [Duration]),
}

impl Backoff {
    /// The wait after a failure with `attempts` failed attempts before it (a negative count
    /// reads as none). Never shrinks as `attempts` grows, never passes the policy's cap, and
    /// never overflows whatever the count.
    pub fn delay(&self, attempts: i64) -> Duration {
        let attempts = attempts.max(0);
        match *self {
            Backoff::Exponential { first, factor, max } => {
                let mut delay = first.min(max);
                // A factor of one or less never grows: no loop over a count that may be huge.
                if factor > 1 {
                    for _ in 0..attempts {
                        if delay >= max {
                            break;
                        }
                        delay = delay.checked_mul(factor).unwrap_or(max).min(max);
                    }
                }
                delay
            }
            Backoff::Steps(steps) => {
                let last = steps.len().saturating_sub(1);
                let index = usize::try_from(attempts).unwrap_or(usize::MAX).min(last);
                steps.get(index).copied().unwrap_or(Duration::zero())
            }
        }
    }
}

/// `delay` spread over ±`fraction` by `jitter` in `[0, 1)` (0 the shortest, towards 1 the
/// longest), so that rows failed together are not all tried again at the same instant.
pub fn spread(delay: Duration, fraction: f64, jitter: f64) -> Duration {
    let factor = 1.0 - fraction + 2.0 * fraction * jitter.clamp(0.0, 0.999_999);
    let seconds = delay.num_milliseconds() as f64 / 1000.0;
    Duration::milliseconds((seconds * factor * 1000.0) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const DOUBLING: Backoff = Backoff::Exponential {
        first: Duration::seconds(1),
        factor: 2,
        max: Duration::hours(1),
    };
    const TABLE: Backoff = Backoff::Steps(&[
        Duration::seconds(60),
        Duration::seconds(300),
        Duration::seconds(1800),
    ]);

    #[test]
    fn exponential_grows_by_its_factor_then_stays_at_its_cap() {
        let seconds: Vec<i64> = (0..14).map(|n| DOUBLING.delay(n).num_seconds()).collect();
        assert_eq!(
            seconds,
            [
                1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 3600, 3600
            ]
        );
        assert_eq!(DOUBLING.delay(-3), Duration::seconds(1));
        assert_eq!(DOUBLING.delay(i64::MAX), Duration::hours(1));
    }

    #[test]
    fn steps_follow_the_table_and_repeat_the_last() {
        let minutes: Vec<i64> = (0..5).map(|n| TABLE.delay(n).num_minutes()).collect();
        assert_eq!(minutes, [1, 5, 30, 30, 30]);
        assert_eq!(TABLE.delay(i64::MAX), Duration::minutes(30));
        assert_eq!(Backoff::Steps(&[]).delay(3), Duration::zero());
    }

    #[test]
    fn spread_stays_within_its_fraction() {
        let minute = Duration::minutes(1);
        assert_eq!(spread(minute, 0.2, 0.0), Duration::seconds(48));
        assert_eq!(spread(minute, 0.2, 0.5), minute);
        assert!(spread(minute, 0.2, 1.0) < Duration::seconds(72));
        assert!(spread(minute, 0.2, 0.99) > Duration::seconds(71));
    }

    fn any_policy() -> impl Strategy<Value = Backoff> {
        (1i64..1_000_000, 1i32..100, 1i64..10_000_000).prop_map(|(first, factor, max)| {
            Backoff::Exponential {
                first: Duration::milliseconds(first),
                factor,
                max: Duration::milliseconds(max),
            }
        })
    }

    proptest! {
        #[test]
        fn delays_never_shrink_and_never_pass_the_cap(
            policy in any_policy(),
            attempts in -5i64..200,
        ) {
            let Backoff::Exponential { max, .. } = policy else { unreachable!() };
            let (now, next) = (policy.delay(attempts), policy.delay(attempts + 1));
            prop_assert!(now <= next);
            prop_assert!(next <= max);
            prop_assert!(now > Duration::zero());
        }

        #[test]
        fn any_count_gives_a_delay(policy in any_policy(), attempts in any::<i64>()) {
            let Backoff::Exponential { max, .. } = policy else { unreachable!() };
            prop_assert!(policy.delay(attempts) <= max);
            prop_assert!(TABLE.delay(attempts) <= Duration::minutes(30));
        }
    }
}
