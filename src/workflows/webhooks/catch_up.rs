//! The event log a receiver catches up from (`GET /api/users/me/events`): every delivery row
//! of an event, sent or not, kept [`KEPT_DAYS`] and then pruned by [`PRUNE_JOB`].

use crate::state::AppState;
use crate::store::webhook_deliveries;
use crate::workflows::error::FlowResult;

/// How long an event stays in its user's log: long enough for a receiver down over a long
/// weekend, past the three days after which its endpoint is disabled.
pub const KEPT_DAYS: i64 = 30;
/// The pruning job's name, in `/metrics`.
pub const PRUNE_JOB: &str = "webhook_log_prune";
/// Rows deleted per statement: the pruning never holds a large delete open.
const PRUNE_BATCH: i64 = 1_000;

/// Deletes the deliveries older than [`KEPT_DAYS`] that are no longer due; how many.
pub async fn prune(state: &AppState) -> FlowResult<u64> {
    let before = state.clock.now() - chrono::Duration::days(KEPT_DAYS);
    let mut pruned = 0;
    loop {
        let mut conn = state.db.conn().await?;
        let batch = webhook_deliveries::prune(conn.exec(), before, PRUNE_BATCH).await?;
        pruned += batch;
        if batch < PRUNE_BATCH as u64 {
            return Ok(pruned);
        }
    }
}
