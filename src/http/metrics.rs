//! HTTP request metrics and the Prometheus text rendering of everything `/metrics` shows.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

/// Upper bounds of the request-duration histogram, in seconds.
const BUCKETS: [f64; 11] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

#[derive(Default)]
struct RouteStats {
    count: u64,
    sum_seconds: f64,
    buckets: [u64; BUCKETS.len()],
}

/// Requests by method, matched route pattern and status, with a duration histogram by route.
#[derive(Default)]
pub struct HttpMetrics {
    // Keyed by the route *pattern* (`/api/users/{id}`), never the raw path, so the number of
    // series stays bounded whatever clients send.
    requests: Mutex<BTreeMap<(String, String, u16), u64>>,
    durations: Mutex<BTreeMap<(String, String), RouteStats>>,
}

/// The method as a label: one of the standard methods, anything else `other`, so clients
/// cannot grow the number of series by inventing methods.
fn method_label(method: &str) -> &'static str {
    const KNOWN: [&str; 9] = [
        "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE",
    ];
    KNOWN.into_iter().find(|m| *m == method).unwrap_or("other")
}

impl HttpMetrics {
    pub fn observe(&self, method: &str, route: &str, status: u16, elapsed: Duration) {
        let method = method_label(method);
        let seconds = elapsed.as_secs_f64();
        if let Ok(mut requests) = self.requests.lock() {
            *requests
                .entry((method.to_owned(), route.to_owned(), status))
                .or_default() += 1;
        }
        if let Ok(mut durations) = self.durations.lock() {
            let stats = durations
                .entry((method.to_owned(), route.to_owned()))
                .or_default();
            stats.count += 1;
            stats.sum_seconds += seconds;
            for (bucket, bound) in stats.buckets.iter_mut().zip(BUCKETS) {
                if seconds <= bound {
                    *bucket += 1;
                }
            }
        }
    }

    /// Appends the HTTP series in Prometheus text format.
    pub fn render(&self, out: &mut String) {
        out.push_str("# HELP http_requests_total HTTP requests by method, route and status.\n");
        out.push_str("# TYPE http_requests_total counter\n");
        if let Ok(requests) = self.requests.lock() {
            for ((method, route, status), count) in requests.iter() {
                let _ = writeln!(
                    out,
                    "http_requests_total{{method=\"{method}\",route=\"{}\",status=\"{status}\"}} {count}",
                    escape(route)
                );
            }
        }
        out.push_str("# HELP http_request_duration_seconds Time to answer a request.\n");
        out.push_str("# TYPE http_request_duration_seconds histogram\n");
        if let Ok(durations) = self.durations.lock() {
            for ((method, route), stats) in durations.iter() {
                let labels = format!("method=\"{method}\",route=\"{}\"", escape(route));
                for (bound, count) in BUCKETS.iter().zip(stats.buckets) {
                    let _ = writeln!(
                        out,
                        "http_request_duration_seconds_bucket{{{labels},le=\"{bound}\"}} {count}"
                    );
                }
                let _ = writeln!(
                    out,
                    "http_request_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {}",
                    stats.count
                );
                let _ = writeln!(
                    out,
                    "http_request_duration_seconds_sum{{{labels}}} {}",
                    stats.sum_seconds
                );
                let _ = writeln!(
                    out,
                    "http_request_duration_seconds_count{{{labels}}} {}",
                    stats.count
                );
            }
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
        let _ = writeln!(out, "# TYPE {name} {kind}");
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
}
