//! Whether a dependency (PostgreSQL, Redis) answers, as one flag per dependency: a request
//! reads it before it waits on the dependency, so while one is away the request is refused at
//! once (503 `SERVICE_UNAVAILABLE` with `Retry-After`) or served without it, instead of each
//! request finding out by waiting for its own timeout.
//!
//! Only a probe changes the flag (`background`'s `postgres_probe` and `cache_probe` jobs, a
//! trivial query every [`PROBE_INTERVAL`] on a connection of their own): requests never serve
//! as trial calls, so while the dependency is away none of them waits on it, and it is let
//! back in as soon as one probe succeeds. A failure seen by a request is answered 503 but does
//! not flip the flag: one broken connection is not an outage.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::watch;

/// How often the probes run, so an outage is noticed and a recovery taken within about this.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(250);

/// How long PostgreSQL's probe query may take; two probes in a row past it count the database
/// as away (Redis's probe is held to a cache call's own timeout).
pub const PROBE_TIMEOUT: Duration = Duration::from_millis(1000);

/// The probes' job names (`background`).
pub const POSTGRES_PROBE: &str = "postgres_probe";
pub const CACHE_PROBE: &str = "cache_probe";

/// What `Retry-After` says while a dependency is away: a few probes' time.
pub const RETRY_AFTER_SECS: u64 = 2;

/// One dependency's flag, with what `/metrics` reports of it.
#[derive(Debug)]
pub struct Availability {
    name: &'static str,
    away: watch::Sender<bool>,
    /// Times the probe found it away after it had answered.
    outages: AtomicU64,
    /// Requests refused (or served without it) because it was away.
    refusals: AtomicU64,
}

impl Availability {
    /// A dependency taken to answer until a probe says otherwise.
    pub fn new(name: &'static str) -> Self {
        Self {
            name,
            away: watch::Sender::new(false),
            outages: AtomicU64::new(0),
            refusals: AtomicU64::new(0),
        }
    }

    /// `"postgres"` or `"redis"`: the label on `/metrics`.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Whether the last probe found the dependency away.
    pub fn is_away(&self) -> bool {
        *self.away.borrow()
    }

    /// Records a request turned away (or served without the dependency) while it was away.
    pub fn refused(&self) {
        self.refusals.fetch_add(1, Ordering::Relaxed);
    }

    /// A probe's answer: `true` when the dependency answered.
    pub fn probed(&self, answered: bool) {
        let changed = self.away.send_if_modified(|away| {
            let was = *away;
            *away = !answered;
            was != *away
        });
        if changed {
            if answered {
                tracing::info!(dependency = self.name, "dependency answers again");
            } else {
                self.outages.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    dependency = self.name,
                    "dependency away: requests that need it are refused"
                );
            }
        }
    }

    /// Resolves when a probe finds the dependency away (at once if it is): a request waiting
    /// for a connection stops waiting then.
    pub async fn gone(&self) {
        let mut watching = self.away.subscribe();
        // The sender lives as long as `self`, so the wait ends only by the flag.
        let _ = watching.wait_for(|away| *away).await;
    }

    /// Resolves when a probe finds the dependency answering (at once if it does).
    pub async fn back(&self) {
        let mut watching = self.away.subscribe();
        let _ = watching.wait_for(|away| !*away).await;
    }

    /// `(outages, refusals)` so far, for `/metrics`.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.outages.load(Ordering::Relaxed),
            self.refusals.load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_probe_flips_the_flag_and_wakes_whoever_waits_for_the_outage() {
        let db = std::sync::Arc::new(Availability::new("postgres"));
        assert!(!db.is_away());
        let waiting = tokio::spawn({
            let db = db.clone();
            async move { db.gone().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        db.probed(false);
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("woken by the outage")
            .unwrap();
        assert!(db.is_away());
        // Only a change counts as an outage.
        db.probed(false);
        db.probed(true);
        assert!(!db.is_away());
        db.refused();
        assert_eq!(db.counts(), (1, 1));
    }
}
