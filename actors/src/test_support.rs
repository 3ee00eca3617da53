//! Helpers shared by the unit tests.

use std::time::Duration;

use tokio::time::Instant;

/// How long a test waits for something that should happen promptly.
pub(crate) const DEADLINE: Duration = Duration::from_secs(5);

/// Polls `condition` every few milliseconds until it holds; fails the test
/// if it still does not after [`DEADLINE`].
pub(crate) async fn eventually(what: &str, condition: impl Fn() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
