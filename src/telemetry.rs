//! Logging: human-readable by default, JSON lines with `LOG_FORMAT=json`; level from
//! `RUST_LOG` (default `info`). Secrets never reach a log line: handlers log ids, not tokens,
//! and the request span carries the path without its query string.

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,actix_server=warn"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    // try_init: a second call (tests) keeps the first subscriber.
    let _ = match format {
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
        LogFormat::Pretty => builder.try_init(),
    };
}

/// Panics go to the log as one error line with their location (the service answers the
/// request 500 and keeps serving), instead of a bare message on standard error.
pub fn log_panics() {
    std::panic::set_hook(Box::new(|info| {
        tracing::error!(panic = %info, "a task panicked");
    }));
}
