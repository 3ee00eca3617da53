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

/// Deletes the deliveries older than [`KEPT_DAYS`] that are no longer due; how many.
pub async fn prune(state: &AppState) -> FlowResult<u64> {
    let before = state.clock.now() - chrono::Duration::days(KEPT_DAYS);
    crate::workflows::retention::in_batches(|limit| async move {
        let mut conn = state.db.conn().await?;
        webhook_deliveries::prune(conn.exec(), before, limit).await
    })
    .await
}
