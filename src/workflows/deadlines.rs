//! The deadlines the timer job (`workflows::timers`) keeps, as the workflows that set them
//! see them: the job's name and the wake after a nearer deadline, the review clock of a
//! submitted delivery, and the clocks a dispute stopped. It sits below every workflow that
//! sets a deadline (deliveries, escrow, disputes, selection), so none of them imports the job
//! that fires them, which calls back into them.

use chrono::{DateTime, Utc};

use crate::state::AppState;
use crate::store::deliveries::ReviewClock;
use crate::store::timers;
use crate::workflows::error::FlowResult;

/// The timer job's name in `state.jobs`.
pub const TIMERS: &str = "timers";

/// Tells the timer job a nearer deadline may exist (it recomputes its sleep).
pub fn wake(state: &AppState) {
    state.jobs.wake(TIMERS);
}

/// The review clock of a delivery submitted at `now`: approved by the service after
/// `AUTO_APPROVE_DAYS`, the company first reminded at half of it.
pub fn review_clock(state: &AppState, now: DateTime<Utc>) -> ReviewClock {
    let window = state.settings.auto_approve_after;
    ReviewClock {
        auto_approve_at: now + window,
        remind_at: now + window / 2,
    }
}

/// A dispute stopped the review clocks of the project's submitted deliveries from `since`
/// until `now`: they restart with the time they had left. Called where the dispute is decided
/// and the project goes back to work.
pub async fn resume_review_clocks(
    tx: &mut crate::store::Tx,
    project_id: i64,
    since: DateTime<Utc>,
    now: DateTime<Utc>,
) -> FlowResult<()> {
    let stopped = now - since;
    if stopped <= chrono::Duration::zero() {
        return Ok(());
    }
    for (id, auto_approve_at, remind_at) in
        timers::review_clocks_of_project(tx.exec(), project_id).await?
    {
        let remind_at = remind_at.map(|at| at + stopped);
        timers::set_review_clock(tx.exec(), id, auto_approve_at + stopped, remind_at).await?;
    }
    Ok(())
}
