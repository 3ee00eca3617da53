//! What operators read about the CRM on `/metrics`: syncs by outcome, retries, 429s waited
//! out, and the latency of every call.

use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::domain::crm::SyncStatus;

const BUCKETS: [f64; 8] = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0];

#[derive(Debug, Default)]
pub struct CrmMetrics {
    successes: AtomicU64,
    failures: AtomicU64,
    skipped: AtomicU64,
    retries: AtomicU64,
    rate_limited: AtomicU64,
    latency: Mutex<(u64, f64, [u64; BUCKETS.len()])>,
}

impl CrmMetrics {
    pub fn sync_outcome(&self, status: SyncStatus) {
        let counter = match status {
            SyncStatus::Success => &self.successes,
            SyncStatus::Failed => &self.failures,
            SyncStatus::Skipped => &self.skipped,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn retried(&self) {
        self.retries.fetch_add(1, Ordering::Relaxed);
    }

    pub fn rate_limited(&self) {
        self.rate_limited.fetch_add(1, Ordering::Relaxed);
    }

    pub fn observe_latency(&self, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        if let Ok(mut l) = self.latency.lock() {
            l.0 += 1;
            l.1 += seconds;
            for (bucket, bound) in l.2.iter_mut().zip(BUCKETS) {
                if seconds <= bound {
                    *bucket += 1;
                }
            }
        }
    }

    /// Appends the series in Prometheus text format.
    pub fn render(&self, out: &mut String) {
        let counter = |out: &mut String, name: &str, help: &str, value: &AtomicU64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                value.load(Ordering::Relaxed)
            );
        };
        out.push_str("# HELP crm_syncs_total CRM synchronisations by outcome.\n# TYPE crm_syncs_total counter\n");
        for (status, value) in [
            (SyncStatus::Success, &self.successes),
            (SyncStatus::Failed, &self.failures),
            (SyncStatus::Skipped, &self.skipped),
        ] {
            let _ = writeln!(
                out,
                "crm_syncs_total{{status=\"{status}\"}} {}",
                value.load(Ordering::Relaxed)
            );
        }
        counter(
            out,
            "crm_sync_retries_total",
            "Failed synchronisations replayed by the retry scheduler.",
            &self.retries,
        );
        counter(
            out,
            "crm_rate_limited_total",
            "Answers 429 of the CRM waited out.",
            &self.rate_limited,
        );
        out.push_str("# HELP crm_request_duration_seconds Latency of CRM calls.\n# TYPE crm_request_duration_seconds histogram\n");
        if let Ok(l) = self.latency.lock() {
            for (bound, count) in BUCKETS.iter().zip(l.2) {
                let _ = writeln!(
                    out,
                    "crm_request_duration_seconds_bucket{{le=\"{bound}\"}} {count}"
                );
            }
            let _ = writeln!(
                out,
                "crm_request_duration_seconds_bucket{{le=\"+Inf\"}} {}",
                l.0
            );
            let _ = writeln!(out, "crm_request_duration_seconds_sum {}", l.1);
            let _ = writeln!(out, "crm_request_duration_seconds_count {}", l.0);
        }
    }
}
