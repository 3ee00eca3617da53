//! Counters of outgoing user webhooks for `/metrics`.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

/// Deliveries sent (2xx), failed attempts, attempts scheduled again, endpoints disabled.
#[derive(Default)]
pub struct WebhookMetrics {
    pub sent: AtomicU64,
    pub failed: AtomicU64,
    pub retried: AtomicU64,
    pub disabled: AtomicU64,
}

static METRICS: WebhookMetrics = WebhookMetrics {
    sent: AtomicU64::new(0),
    failed: AtomicU64::new(0),
    retried: AtomicU64::new(0),
    disabled: AtomicU64::new(0),
};

/// The process's webhook counters.
pub fn metrics() -> &'static WebhookMetrics {
    &METRICS
}

impl WebhookMetrics {
    pub(super) fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Appends the series in Prometheus text format.
    pub fn render(&self, out: &mut String) {
        for (name, help, counter) in [
            (
                "webhook_deliveries_sent_total",
                "Outgoing user webhook deliveries answered with 2xx.",
                &self.sent,
            ),
            (
                "webhook_deliveries_failed_total",
                "Outgoing user webhook attempts that failed (non-2xx, timeout, refused, error).",
                &self.failed,
            ),
            (
                "webhook_deliveries_retried_total",
                "Failed outgoing user webhook deliveries scheduled for another attempt.",
                &self.retried,
            ),
            (
                "webhook_endpoints_disabled_total",
                "User webhook endpoints disabled after three days of failures.",
                &self.disabled,
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                counter.load(Ordering::Relaxed)
            );
        }
    }
}
