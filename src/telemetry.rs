//! Logging: human-readable by default, JSON lines with `LOG_FORMAT=json`; level from
//! `RUST_LOG` (default `info`). Secrets never reach a log line: handlers log ids, not tokens,
//! and the request span carries the path without its query string.

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

///
/// Lines are written by a background thread (`tracing_appender`), so a request never waits on
/// the terminal or a slow log pipe; the queue blocks rather than drops when full, because
/// operators need every request line. Keep the guard alive until exit: dropping it flushes.
pub fn init(format: LogFormat) -> tracing_appender::non_blocking::WorkerGuard {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,actix_server=warn"));
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .lossy(false)
        .finish(std::io::stdout());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer);
    // try_init: a second call (tests) keeps the first subscriber.
    let _ = match format {
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
        LogFormat::Pretty => builder.try_init(),
    };
    guard
}

/// Panics go to the log as one error line with their location (the service answers the
/// request 500 and keeps serving), instead of a bare message on standard error.
pub fn log_panics() {
    std::panic::set_hook(Box::new(|info| {
        tracing::error!(panic = %info, "a task panicked");
    }));
}
