//! The backfills job (`store::backfills`): fills a new column's rows in batches while the
//! service serves, and tells the readers when they may read it.

use std::time::Duration;

use crate::state::AppState;
use crate::store::backfills;
use crate::workflows::error::FlowResult;

/// The job's name, in `/metrics`.
pub const JOB: &str = "backfills";

/// The wait between two batches while rows are left: the requests' share of the database.
pub const PAUSE: Duration = Duration::from_millis(20);

/// Runs one batch; answers [`PAUSE`] while a batch ran, else nothing (the job's longest
/// wait). Which backfills are finished is read again when one may have changed: after the
/// last batch of this instance's, or when none was left to it (another instance may have
/// run the last); not after each batch of the many in between.
pub async fn run(state: &AppState) -> FlowResult<Option<Duration>> {
    let batch = backfills::run_batch(&state.db, state.clock.now()).await?;
    if let Some(batch) = batch.as_ref().filter(|b| b.finished) {
        tracing::info!(backfill = batch.name, "backfill finished");
    }
    if batch.as_ref().is_none_or(|b| b.finished) {
        let mut conn = state.db.conn().await?;
        state.backfills.refresh(conn.exec()).await?;
    }
    Ok(batch.map(|_| PAUSE))
}
