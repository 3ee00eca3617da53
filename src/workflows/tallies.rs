//! Folding the tallies' deltas into their totals (`store::tallies`), so that a read of a
//! figure adds only the few deltas written since the last run.

use crate::state::AppState;
use crate::store::tallies;
use crate::workflows::error::FlowResult;
use crate::workflows::retention::in_batches;

/// The folding job's name, in `/metrics`.
pub const FOLD_JOB: &str = "tally_fold";

/// Folds every delta written so far, a batch per transaction; how many.
pub async fn fold(state: &AppState) -> FlowResult<u64> {
    in_batches(|limit| async move { tallies::fold(&state.db, limit).await }).await
}
