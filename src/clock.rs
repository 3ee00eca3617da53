//! The service's clock. Every stored time comes from here, never from SQL's `now()`: SQLite
//! compares timestamps as text, which is only right when every value is written the same way.
//! Tests move it forward to reach expiry without waiting.

use chrono::{DateTime, Duration, DurationRound as _, TimeDelta, Utc};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

#[derive(Clone, Default)]
pub struct Clock {
    offset_micros: Arc<AtomicI64>,
}

impl Clock {
    pub fn system() -> Self {
        Self::default()
    }

    /// Now, truncated to microseconds: the precision PostgreSQL keeps, so a value read back
    /// equals the value written on both engines.
    pub fn now(&self) -> DateTime<Utc> {
        let now = Utc::now() + Duration::microseconds(self.offset_micros.load(Ordering::Relaxed));
        now.duration_trunc(TimeDelta::microseconds(1))
            .unwrap_or(now)
    }

    /// Moves this clock (and every clone of it) forward.
    pub fn advance(&self, by: Duration) {
        let micros = by.num_microseconds().unwrap_or(i64::MAX);
        self.offset_micros.fetch_add(micros, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Clock(offset={}µs)",
            self.offset_micros.load(Ordering::Relaxed)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advance_moves_every_clone() {
        let clock = Clock::system();
        let other = clock.clone();
        let before = other.now();
        clock.advance(Duration::hours(49));
        assert!(other.now() - before >= Duration::hours(49));
        assert_eq!(other.now().timestamp_subsec_nanos() % 1000, 0);
    }
}
