//! Errors of the cache store.

/// A cache operation that did not complete.
///
/// Never carries keys or values: keys may contain token hashes.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// A TTL or window of zero was given.
    #[error("cache TTL and window must be at least one millisecond")]
    InvalidDuration,
    /// The backend could not be reached or the URL is invalid.
    #[error("could not connect to the cache: {0}")]
    Connect(String),
    /// The backend refused or failed an operation.
    #[error("cache operation `{operation}` failed: {detail}")]
    Operation {
        /// The [`Cache`](super::Cache) method that failed, e.g. `"hit"`.
        operation: &'static str,
        /// What went wrong, without keys or values.
        detail: String,
    },
}
