//! Process-wide metrics for every registry, hub and periodic job, grouped by
//! the `kind` name each was created with.
//!
//! Components share one set of counters per (category, kind): two registries
//! created with the same kind add up. The service renders the text exposition
//! format itself from [`snapshot`], so this crate carries no metrics library.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Category name of [`crate::registry::Registry`] metrics.
pub const CATEGORY_REGISTRY: &str = "registry";
/// Category name of [`crate::hub::Hub`] metrics.
pub const CATEGORY_HUB: &str = "hub";
/// Category name of [`crate::periodic::PeriodicJob`] metrics.
pub const CATEGORY_PERIODIC: &str = "periodic";

/// Metrics of one kind of component at the time of [`snapshot`].
#[derive(Debug, Clone, PartialEq)]
pub struct KindMetrics {
    /// The name the component was created with (e.g. `"account"`).
    pub kind: &'static str,
    /// `"registry"`, `"hub"` or `"periodic"`.
    pub category: &'static str,
    /// The numbers, by category.
    pub values: KindValues,
}

/// The numbers of a [`KindMetrics`], one variant per category.
#[derive(Debug, Clone, PartialEq)]
pub enum KindValues {
    /// Keyed actor registry.
    Registry(RegistryValues),
    /// Rooms hub.
    Hub(HubValues),
    /// Supervised periodic job.
    Periodic(PeriodicValues),
}

/// Numbers of a keyed actor registry.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RegistryValues {
    /// Actors alive now.
    pub live: u64,
    /// Jobs waiting in the kind's mailboxes now (called, not started).
    pub mailbox_depth: u64,
    /// Actors started since the process began (restarts excluded).
    pub started: u64,
    /// Jobs run to completion (including panicked ones).
    pub messages_handled: u64,
    /// Sum of job run times, in seconds.
    pub handling_seconds_total: f64,
    /// Longest job run time, in seconds.
    pub handling_seconds_max: f64,
    /// Sum of the times jobs waited from `call` until they started, in seconds.
    pub mailbox_wait_seconds_total: f64,
    /// Actor restarts after a panicking job.
    pub restarts: u64,
}

/// Numbers of a rooms hub.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HubValues {
    /// Rooms with at least one member now.
    pub rooms: u64,
    /// Memberships now (a member in two rooms counts twice).
    pub members: u64,
    /// Broadcasts sent.
    pub broadcasts: u64,
    /// Members dropped because their channel was full.
    pub dropped_slow_members: u64,
}

/// Numbers of a supervised periodic job.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PeriodicValues {
    /// Runs finished (successful, failed or panicked).
    pub runs: u64,
    /// Runs that returned an error or panicked.
    pub failures: u64,
    /// Runs that panicked (the job was restarted).
    pub restarts: u64,
    /// Unix time of the last successful run in seconds, 0 if none yet.
    pub last_success_unix_seconds: f64,
    /// Back-off currently in force in seconds, 0 when the last run succeeded.
    pub backoff_seconds: f64,
    /// Unix time of the last run (any outcome), 0 if none yet.
    pub last_run_unix_seconds: f64,
    /// Unix time of the next run planned, 0 before the first run.
    pub next_run_unix_seconds: f64,
    /// Unix time of the last failed run, 0 if none.
    pub last_failure_unix_seconds: f64,
    /// Message of the last failed run (at most 500 characters).
    pub last_error: Option<String>,
}

impl KindMetrics {
    /// The numbers as `(metric name suffix, value)` pairs, so a renderer can
    /// emit them generically, e.g. as `actors_{category}_{suffix}{kind="…"}`.
    /// Suffixes ending in `_total` are counters, the others gauges.
    pub fn samples(&self) -> Vec<(&'static str, f64)> {
        match &self.values {
            KindValues::Registry(v) => vec![
                ("live", v.live as f64),
                ("mailbox_depth", v.mailbox_depth as f64),
                ("started_total", v.started as f64),
                ("messages_handled_total", v.messages_handled as f64),
                ("handling_seconds_total", v.handling_seconds_total),
                ("handling_seconds_max", v.handling_seconds_max),
                ("mailbox_wait_seconds_total", v.mailbox_wait_seconds_total),
                ("restarts_total", v.restarts as f64),
            ],
            KindValues::Hub(v) => vec![
                ("rooms", v.rooms as f64),
                ("members", v.members as f64),
                ("broadcasts_total", v.broadcasts as f64),
                ("dropped_slow_members_total", v.dropped_slow_members as f64),
            ],
            KindValues::Periodic(v) => vec![
                ("runs_total", v.runs as f64),
                ("failures_total", v.failures as f64),
                ("restarts_total", v.restarts as f64),
                ("last_success_unix_seconds", v.last_success_unix_seconds),
                ("backoff_seconds", v.backoff_seconds),
                ("last_run_unix_seconds", v.last_run_unix_seconds),
                ("next_run_unix_seconds", v.next_run_unix_seconds),
                ("last_failure_unix_seconds", v.last_failure_unix_seconds),
            ],
        }
    }
}

/// The help line of each sample [`KindMetrics::samples`] names.
pub fn help(sample: &str) -> &'static str {
    match sample {
        "live" => "Keyed actors alive now.",
        "mailbox_depth" => "Jobs waiting in the kind's mailboxes, not started yet.",
        "started_total" => "Keyed actors started (restarts excluded).",
        "messages_handled_total" => "Jobs a kind's actors ran to completion.",
        "handling_seconds_total" => "Time the kind's actors spent running jobs.",
        "handling_seconds_max" => "Longest job a kind's actor ran.",
        "mailbox_wait_seconds_total" => "Time jobs waited in a mailbox before they started.",
        "restarts_total" => "Actors or jobs restarted by their supervisor after a panic.",
        "rooms" => "Rooms of a hub with at least one member.",
        "members" => "Memberships of a hub's rooms.",
        "broadcasts_total" => "Messages a hub broadcast to a room.",
        "dropped_slow_members_total" => "Members dropped because they did not keep up.",
        "runs_total" => "Runs of a periodic job.",
        "failures_total" => "Runs of a periodic job that failed.",
        "last_success_unix_seconds" => "When a periodic job last succeeded (0: not yet).",
        "backoff_seconds" => "The back-off a failing periodic job waits before its next run.",
        "last_run_unix_seconds" => "When a periodic job last ran (0: not yet).",
        "next_run_unix_seconds" => "When a periodic job runs next.",
        "last_failure_unix_seconds" => "When a periodic job last failed (0: never).",
        _ => "An actor metric.",
    }
}

/// Metrics of every kind registered so far, sorted by category then kind.
pub fn snapshot() -> Vec<KindMetrics> {
    let kinds = lock_kinds();
    let mut out: Vec<KindMetrics> = kinds
        .iter()
        .map(|(kind, counters)| match counters {
            Counters::Registry(c) => KindMetrics {
                kind,
                category: CATEGORY_REGISTRY,
                values: KindValues::Registry(c.values()),
            },
            Counters::Hub(c) => KindMetrics {
                kind,
                category: CATEGORY_HUB,
                values: KindValues::Hub(c.values()),
            },
            Counters::Periodic(c) => KindMetrics {
                kind,
                category: CATEGORY_PERIODIC,
                values: KindValues::Periodic(c.values()),
            },
        })
        .collect();
    out.sort_by(|a, b| (a.category, a.kind).cmp(&(b.category, b.kind)));
    out
}

/// Counters of one registry kind; updated by the registry and its actors.
#[derive(Debug, Default)]
pub(crate) struct RegistryCounters {
    pub(crate) live: Gauge,
    /// Jobs in mailboxes, not started yet.
    pub(crate) queued: Gauge,
    pub(crate) started: AtomicU64,
    pub(crate) messages_handled: AtomicU64,
    handling_nanos_total: AtomicU64,
    handling_nanos_max: AtomicU64,
    mailbox_wait_nanos_total: AtomicU64,
    pub(crate) restarts: AtomicU64,
}

impl RegistryCounters {
    pub(crate) fn record_handled(&self, handling: Duration) {
        let nanos = duration_nanos(handling);
        self.messages_handled.fetch_add(1, Ordering::Relaxed);
        self.handling_nanos_total
            .fetch_add(nanos, Ordering::Relaxed);
        self.handling_nanos_max.fetch_max(nanos, Ordering::Relaxed);
    }

    pub(crate) fn record_mailbox_wait(&self, wait: Duration) {
        self.mailbox_wait_nanos_total
            .fetch_add(duration_nanos(wait), Ordering::Relaxed);
    }

    fn values(&self) -> RegistryValues {
        RegistryValues {
            live: self.live.get(),
            mailbox_depth: self.queued.get(),
            started: self.started.load(Ordering::Relaxed),
            messages_handled: self.messages_handled.load(Ordering::Relaxed),
            handling_seconds_total: nanos_to_seconds(&self.handling_nanos_total),
            handling_seconds_max: nanos_to_seconds(&self.handling_nanos_max),
            mailbox_wait_seconds_total: nanos_to_seconds(&self.mailbox_wait_nanos_total),
            restarts: self.restarts.load(Ordering::Relaxed),
        }
    }
}

/// Counters of one hub kind.
#[derive(Debug, Default)]
pub(crate) struct HubCounters {
    pub(crate) rooms: Gauge,
    pub(crate) members: Gauge,
    pub(crate) broadcasts: AtomicU64,
    pub(crate) dropped_slow_members: AtomicU64,
}

impl HubCounters {
    fn values(&self) -> HubValues {
        HubValues {
            rooms: self.rooms.get(),
            members: self.members.get(),
            broadcasts: self.broadcasts.load(Ordering::Relaxed),
            dropped_slow_members: self.dropped_slow_members.load(Ordering::Relaxed),
        }
    }
}

/// Counters of one periodic job kind.
#[derive(Debug, Default)]
pub(crate) struct PeriodicCounters {
    pub(crate) runs: AtomicU64,
    pub(crate) failures: AtomicU64,
    pub(crate) restarts: AtomicU64,
    last_success_unix_millis: AtomicU64,
    backoff_nanos: AtomicU64,
    last_run_unix_millis: AtomicU64,
    next_run_unix_millis: AtomicU64,
    last_failure_unix_millis: AtomicU64,
    last_error: Mutex<Option<String>>,
}

fn unix_millis(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).map_or(0, |since| {
        u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
    })
}

/// Longest failure message kept for operators.
const MAX_ERROR_CHARS: usize = 500;

impl PeriodicCounters {
    pub(crate) fn record_success_now(&self) {
        self.last_success_unix_millis
            .store(unix_millis(SystemTime::now()), Ordering::Relaxed);
    }

    /// A run ended now; the next is planned `wait` from now.
    pub(crate) fn record_run(&self, wait: Duration) {
        let now = SystemTime::now();
        self.last_run_unix_millis
            .store(unix_millis(now), Ordering::Relaxed);
        self.next_run_unix_millis
            .store(unix_millis(now + wait), Ordering::Relaxed);
    }

    pub(crate) fn record_failure(&self, error: &str) {
        self.last_failure_unix_millis
            .store(unix_millis(SystemTime::now()), Ordering::Relaxed);
        let kept: String = error.chars().take(MAX_ERROR_CHARS).collect();
        *self
            .last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(kept);
    }

    pub(crate) fn set_backoff(&self, backoff: Duration) {
        self.backoff_nanos
            .store(duration_nanos(backoff), Ordering::Relaxed);
    }

    fn values(&self) -> PeriodicValues {
        PeriodicValues {
            runs: self.runs.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            restarts: self.restarts.load(Ordering::Relaxed),
            last_success_unix_seconds: self.last_success_unix_millis.load(Ordering::Relaxed) as f64
                / 1_000.0,
            backoff_seconds: nanos_to_seconds(&self.backoff_nanos),
            last_run_unix_seconds: self.last_run_unix_millis.load(Ordering::Relaxed) as f64
                / 1_000.0,
            next_run_unix_seconds: self.next_run_unix_millis.load(Ordering::Relaxed) as f64
                / 1_000.0,
            last_failure_unix_seconds: self.last_failure_unix_millis.load(Ordering::Relaxed) as f64
                / 1_000.0,
            last_error: self
                .last_error
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        }
    }
}

/// A value that goes up and down; shared by every instance of one kind, so
/// each instance adds and removes only its own share.
#[derive(Debug, Default)]
pub(crate) struct Gauge(AtomicU64);

impl Gauge {
    pub(crate) fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn sub(&self, n: u64) {
        // Saturating: a bookkeeping slip must not wrap to 2^64.
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(v.saturating_sub(n))
            });
    }

    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

pub(crate) fn registry_counters(kind: &'static str) -> Arc<RegistryCounters> {
    counters_for(
        kind,
        |c| match c {
            Counters::Registry(c) => Some(Arc::clone(c)),
            _ => None,
        },
        Counters::Registry,
    )
}

pub(crate) fn hub_counters(kind: &'static str) -> Arc<HubCounters> {
    counters_for(
        kind,
        |c| match c {
            Counters::Hub(c) => Some(Arc::clone(c)),
            _ => None,
        },
        Counters::Hub,
    )
}

pub(crate) fn periodic_counters(kind: &'static str) -> Arc<PeriodicCounters> {
    counters_for(
        kind,
        |c| match c {
            Counters::Periodic(c) => Some(Arc::clone(c)),
            _ => None,
        },
        Counters::Periodic,
    )
}

enum Counters {
    Registry(Arc<RegistryCounters>),
    Hub(Arc<HubCounters>),
    Periodic(Arc<PeriodicCounters>),
}

/// Every kind registered so far. A handful of entries, so a Vec will do.
static KINDS: Mutex<Vec<(&'static str, Counters)>> = Mutex::new(Vec::new());

fn lock_kinds() -> std::sync::MutexGuard<'static, Vec<(&'static str, Counters)>> {
    // Counters stay consistent even if a holder panicked: just carry on.
    KINDS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Returns the counters of `kind` in the category `pick` matches, creating
/// them with `wrap` on first use.
fn counters_for<C: Default>(
    kind: &'static str,
    pick: impl Fn(&Counters) -> Option<Arc<C>>,
    wrap: impl FnOnce(Arc<C>) -> Counters,
) -> Arc<C> {
    let mut kinds = lock_kinds();
    if let Some(found) = kinds
        .iter()
        .filter(|(k, _)| *k == kind)
        .find_map(|(_, c)| pick(c))
    {
        return found;
    }
    let created = Arc::new(C::default());
    kinds.push((kind, wrap(Arc::clone(&created))));
    created
}

fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn nanos_to_seconds(nanos: &AtomicU64) -> f64 {
    nanos.load(Ordering::Relaxed) as f64 / 1e9
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The metrics of one kind in one category, for assertions.
    pub(crate) fn find(category: &str, kind: &str) -> Option<KindMetrics> {
        snapshot()
            .into_iter()
            .find(|m| m.category == category && m.kind == kind)
    }

    #[test]
    fn every_sample_has_its_own_help_line() {
        registry_counters("metrics-test-help");
        hub_counters("metrics-test-help");
        periodic_counters("metrics-test-help");
        for kind in snapshot()
            .into_iter()
            .filter(|k| k.kind == "metrics-test-help")
        {
            for (sample, _) in kind.samples() {
                assert_ne!(help(sample), help("no such sample"), "{sample}");
            }
        }
    }

    #[test]
    fn same_kind_in_different_categories_is_kept_apart() {
        let registry = registry_counters("metrics-test-shared-name");
        let hub = hub_counters("metrics-test-shared-name");
        registry.started.fetch_add(3, Ordering::Relaxed);
        hub.broadcasts.fetch_add(5, Ordering::Relaxed);
        // Asking again returns the same counters, not fresh ones.
        registry_counters("metrics-test-shared-name")
            .started
            .fetch_add(1, Ordering::Relaxed);

        let Some(KindMetrics {
            values: KindValues::Registry(r),
            ..
        }) = find(CATEGORY_REGISTRY, "metrics-test-shared-name")
        else {
            panic!("registry metrics missing");
        };
        assert_eq!(r.started, 4);
        let Some(KindMetrics {
            values: KindValues::Hub(h),
            ..
        }) = find(CATEGORY_HUB, "metrics-test-shared-name")
        else {
            panic!("hub metrics missing");
        };
        assert_eq!(h.broadcasts, 5);
    }

    #[test]
    fn samples_expose_durations_in_seconds_and_the_maximum() {
        let counters = registry_counters("metrics-test-samples");
        counters.record_handled(Duration::from_millis(250));
        counters.record_handled(Duration::from_millis(750));
        counters.record_mailbox_wait(Duration::from_millis(500));
        let metrics = find(CATEGORY_REGISTRY, "metrics-test-samples").expect("registered");
        let samples = metrics.samples();
        let value = |name: &str| {
            samples
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| *v)
                .expect("sample present")
        };
        assert_eq!(value("messages_handled_total"), 2.0);
        assert!((value("handling_seconds_total") - 1.0).abs() < 1e-9);
        assert!((value("handling_seconds_max") - 0.75).abs() < 1e-9);
        assert!((value("mailbox_wait_seconds_total") - 0.5).abs() < 1e-9);
    }

    #[test]
    fn gauge_never_wraps_below_zero() {
        let gauge = Gauge::default();
        gauge.add(1);
        gauge.sub(2);
        assert_eq!(gauge.get(), 0);
    }
}
