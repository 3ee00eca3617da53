//! HTTP request metrics and the Prometheus text rendering of everything `/metrics` shows.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{OnceLock, PoisonError, RwLock};
use std::time::Duration;

/// Upper bounds of the request-duration histogram, in seconds.
const BUCKETS: [f64; 11] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// The methods a label may name; anything else is `other`, so clients cannot grow the number
/// of series by inventing methods.
const METHODS: [&str; 10] = [
    "GET",
    "HEAD",
    "POST",
    "PUT",
    "DELETE",
    "PATCH",
    "OPTIONS",
    "CONNECT",
    "TRACE",
    OTHER_METHOD,
];

/// The label of every method HTTP does not define.
pub const OTHER_METHOD: &str = "other";

/// Statuses 100–599 are counted in a fixed table per series; a code outside it (HTTP defines
/// none) is timed but not counted by status.
const FIRST_STATUS: u16 = 100;
const STATUSES: usize = 500;

/// One method on one route: every number an atomic, so requests never wait for each other.
struct Series {
    statuses: [AtomicU64; STATUSES],
    /// Requests per histogram bucket (not cumulative; summed when rendered), the last slot
    /// for those slower than every bound.
    buckets: [AtomicU64; BUCKETS.len() + 1],
    sum_nanos: AtomicU64,
}

impl Default for Series {
    fn default() -> Self {
        Self {
            statuses: std::array::from_fn(|_| AtomicU64::new(0)),
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_nanos: AtomicU64::new(0),
        }
    }
}

#[derive(Default)]
struct RouteSeries {
    by_method: [OnceLock<Series>; METHODS.len()],
}

/// Requests by method, matched route pattern and status, with a duration histogram by route.
///
/// Keyed by the route *pattern* (`/api/users/{id}`), never the raw path, so the number of
/// series stays bounded whatever clients send. The map is written once per route (the first
/// request on it); afterwards a request takes a shared read lock and bumps atomics.
#[derive(Default)]
pub struct HttpMetrics {
    routes: RwLock<HashMap<String, Box<RouteSeries>>>,
}

fn method_index(method: &str) -> usize {
    METHODS[..METHODS.len() - 1]
        .iter()
        .position(|m| *m == method)
        .unwrap_or(METHODS.len() - 1)
}

/// A request's method as logs and labels name it: one of HTTP's, else `other` (a client may
/// send any token up to the request line's limit, and must not grow a log line or a series).
pub fn method_label(method: &actix_web::http::Method) -> &'static str {
    METHODS[method_index(method.as_str())]
}

impl HttpMetrics {
    pub fn observe(&self, method: &str, route: &str, status: u16, elapsed: Duration) {
        let record = |route_series: &RouteSeries| {
            let series = route_series.by_method[method_index(method)].get_or_init(Series::default);
            if let Some(slot) = status
                .checked_sub(FIRST_STATUS)
                .and_then(|i| series.statuses.get(usize::from(i)))
            {
                slot.fetch_add(1, Ordering::Relaxed);
            }
            let seconds = elapsed.as_secs_f64();
            let bucket = BUCKETS
                .iter()
                .position(|bound| seconds <= *bound)
                .unwrap_or(BUCKETS.len());
            series.buckets[bucket].fetch_add(1, Ordering::Relaxed);
            let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
            series.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
        };
        {
            let routes = self.routes.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(route_series) = routes.get(route) {
                return record(route_series);
            }
        }
        let mut routes = self.routes.write().unwrap_or_else(PoisonError::into_inner);
        record(routes.entry(route.to_owned()).or_default());
    }

    /// Appends the HTTP series in Prometheus text format, sorted by route and method.
    pub fn render(&self, out: &mut String) {
        let routes = self.routes.read().unwrap_or_else(PoisonError::into_inner);
        let mut sorted: Vec<(&str, &str, &Series)> = routes
            .iter()
            .flat_map(|(route, rs)| {
                rs.by_method
                    .iter()
                    .zip(METHODS)
                    .filter_map(move |(s, m)| s.get().map(|s| (m, route.as_str(), s)))
            })
            .collect();
        sorted.sort_by_key(|(method, route, _)| (*route, *method));

        out.push_str("# HELP http_requests_total HTTP requests by method, route and status.\n");
        out.push_str("# TYPE http_requests_total counter\n");
        for (method, route, series) in &sorted {
            for (i, count) in series.statuses.iter().enumerate() {
                let count = count.load(Ordering::Relaxed);
                if count > 0 {
                    let status = usize::from(FIRST_STATUS) + i;
                    let _ = writeln!(
                        out,
                        "http_requests_total{{method=\"{method}\",route=\"{}\",status=\"{status}\"}} {count}",
                        escape(route)
                    );
                }
            }
        }
        out.push_str("# HELP http_request_duration_seconds Time to answer a request.\n");
        out.push_str("# TYPE http_request_duration_seconds histogram\n");
        for (method, route, series) in &sorted {
            let labels = format!("method=\"{method}\",route=\"{}\"", escape(route));
            let mut cumulative = 0;
            for (bound, count) in BUCKETS.iter().zip(&series.buckets) {
                cumulative += count.load(Ordering::Relaxed);
                let _ = writeln!(
                    out,
                    "http_request_duration_seconds_bucket{{{labels},le=\"{bound}\"}} {cumulative}"
                );
            }
            let total = cumulative + series.buckets[BUCKETS.len()].load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "http_request_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {total}"
            );
            let sum = series.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
            let _ = writeln!(out, "http_request_duration_seconds_sum{{{labels}}} {sum}");
            let _ = writeln!(
                out,
                "http_request_duration_seconds_count{{{labels}}} {total}"
            );
        }
    }
}

/// Appends one gauge or counter with its help and type lines.
pub fn render_single(out: &mut String, name: &str, kind: &str, help: &str, value: f64) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
    );
}

/// Appends one family with a series per value of its one `label`, in the order given.
pub fn render_labeled<'a>(
    out: &mut String,
    name: &str,
    kind: &str,
    help: &str,
    label: &str,
    samples: impl IntoIterator<Item = (&'a str, f64)>,
) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    for (value_of_label, value) in samples {
        let _ = writeln!(out, "{name}{{{label}=\"{value_of_label}\"}} {value}");
    }
}

/// Appends the actor machinery's metrics, one series per kind.
pub fn render_actors(out: &mut String) {
    let mut by_name: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for kind in actors::metrics::snapshot() {
        for (suffix, value) in kind.samples() {
            by_name
                .entry(format!("actor_{suffix}"))
                .or_default()
                .push(format!(
                    "{{kind=\"{}\",category=\"{}\"}} {value}",
                    escape(kind.kind),
                    kind.category
                ));
        }
    }
    for (name, series) in by_name {
        let kind = if name.ends_with("_total") {
            "counter"
        } else {
            "gauge"
        };
        let help = actors::metrics::help(&name["actor_".len()..]);
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for line in series {
            let _ = writeln!(out, "{name}{line}");
        }
    }
}

fn escape(label: &str) -> String {
    label
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counts_and_histogram() {
        let m = HttpMetrics::default();
        m.observe("GET", "/health", 200, Duration::from_millis(2));
        m.observe("GET", "/health", 200, Duration::from_millis(30));
        let mut out = String::new();
        m.render(&mut out);
        assert!(
            out.contains(r#"http_requests_total{method="GET",route="/health",status="200"} 2"#)
        );
        assert!(out.contains(
            r#"http_request_duration_seconds_bucket{method="GET",route="/health",le="0.0025"} 1"#
        ));
        assert!(out.contains(
            r#"http_request_duration_seconds_bucket{method="GET",route="/health",le="+Inf"} 2"#
        ));
        assert!(
            out.contains(r#"http_request_duration_seconds_count{method="GET",route="/health"} 2"#)
        );
    }

    #[test]
    fn concurrent_requests_are_all_counted() {
        let m = std::sync::Arc::new(HttpMetrics::default());
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let m = m.clone();
                std::thread::spawn(move || {
                    for i in 0..5_000 {
                        let route = if i % 2 == 0 { "/a" } else { "/b/{id}" };
                        m.observe(
                            if t % 2 == 0 { "GET" } else { "PUT" },
                            route,
                            200,
                            Duration::from_micros(i),
                        );
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        m.observe("BREW", "/a", 418, Duration::from_secs(9));
        let mut out = String::new();
        m.render(&mut out);
        for line in [
            r#"http_requests_total{method="GET",route="/a",status="200"} 5000"#,
            r#"http_requests_total{method="PUT",route="/b/{id}",status="200"} 5000"#,
            r#"http_requests_total{method="other",route="/a",status="418"} 1"#,
            r#"http_request_duration_seconds_bucket{method="other",route="/a",le="5"} 0"#,
            r#"http_request_duration_seconds_bucket{method="other",route="/a",le="+Inf"} 1"#,
        ] {
            assert!(out.contains(line), "{line} missing from\n{out}");
        }
    }
}
