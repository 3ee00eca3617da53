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
    /// The backend is away (its probe says so), its connection broke, or it did not answer in
    /// time: nothing is known of the operation's effect. Answered 503, never 500.
    #[error("the cache is unavailable ({0})")]
    Unavailable(&'static str),
    /// The backend refused or failed an operation.
    #[error("cache operation `{operation}` failed: {detail}")]
    Operation {
        /// The [`Cache`](super::Cache) method that failed, e.g. `"hit"`.
        operation: &'static str,
        /// What went wrong, without keys or values.
        detail: String,
    },
}

impl CacheError {
    /// The backend could not be reached (see [`CacheError::Unavailable`]).
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Self::Unavailable(_) | Self::Connect(_))
    }
}
