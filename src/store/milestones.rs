//! Milestones of a project: sequential (by `position`), each paid through its own payment.

use chrono::{DateTime, Utc};

use super::{Exec, StoreResult};
use crate::domain::milestone::MilestoneStatus;
use crate::on_exec;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Milestone {
    pub id: i64,
    pub project_id: i64,
    pub position: i64,
    pub title: String,
    pub description: Option<String>,
    pub amount_minor: i64,
    pub currency: String,
    pub due_date: Option<DateTime<Utc>>,
    pub status: MilestoneStatus,
    pub rejection_count: i64,
    pub started_at: Option<DateTime<Utc>>,
    pub approved_at: Option<DateTime<Utc>>,
    pub completed_at: Option<DateTime<Utc>>,
    pub cancelled_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Since when it waits for its payment (the last time it became `awaiting_payment`).
    pub awaiting_payment_at: Option<DateTime<Utc>>,
    /// While `awaiting_payment`: when the company is reminded to fund it.
    pub funding_due_at: Option<DateTime<Utc>>,
}

macro_rules! select_milestones {
    ($($rest:expr),* $(,)?) => {
        concat!(
            "SELECT m.id, m.project_id, m.position, m.title, m.description, m.amount_minor, ",
            "m.currency, m.due_date, m.status, m.rejection_count, m.started_at, m.approved_at, ",
            "m.completed_at, m.cancelled_at, m.created_at, m.updated_at, m.awaiting_payment_at, ",
            "m.funding_due_at FROM milestones m ",
            $($rest),*
        )
    };
}

/// A milestone to create.
#[derive(Debug, Clone)]
pub struct NewMilestone<'a> {
    pub project_id: i64,
    pub position: i64,
    pub title: &'a str,
    pub description: Option<&'a str>,
    pub amount_minor: i64,
    pub currency: &'a str,
    pub due_date: Option<DateTime<Utc>>,
    pub status: MilestoneStatus,
}

pub async fn insert(ex: Exec<'_>, m: &NewMilestone<'_>, now: DateTime<Utc>) -> StoreResult<i64> {
    Ok(on_exec!(ex, c => sqlx::query_scalar(
        "INSERT INTO milestones (project_id, position, title, description, amount_minor, currency,
             due_date, status, rejection_count, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 0, $9, $9) RETURNING id",
    )
    .bind(m.project_id)
    .bind(m.position)
    .bind(m.title)
    .bind(m.description)
    .bind(m.amount_minor)
    .bind(m.currency)
    .bind(m.due_date)
    .bind(m.status)
    .bind(now)
    .fetch_one(c)
    .await)?)
}

pub async fn find(ex: Exec<'_>, id: i64) -> StoreResult<Option<Milestone>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, Milestone>(select_milestones!("WHERE m.id = $1"))
        .bind(id)
        .fetch_optional(c)
        .await)?,
    )
}

/// The project's milestones that are not cancelled, in order.
pub async fn active_of_project(ex: Exec<'_>, project_id: i64) -> StoreResult<Vec<Milestone>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, Milestone>(select_milestones!(
        "WHERE m.project_id = $1 AND m.status <> 'cancelled' ORDER BY m.position"
    ))
    .bind(project_id)
    .fetch_all(c)
    .await)?,
    )
}

/// One page of a project's milestones (all of them, cancelled included), in order.
pub async fn list_for_project(
    mut ex: Exec<'_>,
    project_id: i64,
    limit: i64,
    offset: i64,
) -> StoreResult<(Vec<Milestone>, i64)> {
    let items = on_exec!(ex.re(), c => sqlx::query_as::<_, Milestone>(select_milestones!(
        "WHERE m.project_id = $1 ORDER BY m.position LIMIT $2 OFFSET $3"
    ))
    .bind(project_id)
    .bind(limit)
    .bind(offset)
    .fetch_all(c)
    .await)?;
    let total: i64 = on_exec!(ex, c => sqlx::query_scalar(
        "SELECT COUNT(*) FROM milestones WHERE project_id = $1",
    )
    .bind(project_id)
    .fetch_one(c)
    .await)?;
    Ok((items, total))
}

/// The next free position at the end of the project's plan.
pub async fn next_position(ex: Exec<'_>, project_id: i64) -> StoreResult<i64> {
    let max: Option<i64> = on_exec!(ex, c => sqlx::query_scalar(
        "SELECT MAX(position) FROM milestones WHERE project_id = $1",
    )
    .bind(project_id)
    .fetch_one(c)
    .await)?;
    Ok(max.unwrap_or(0) + 1)
}

/// Moves a milestone from `from` to `to`.
pub async fn transition(
    ex: Exec<'_>,
    id: i64,
    from: MilestoneStatus,
    to: MilestoneStatus,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    Ok(transition_all(ex, &[id], from, to, now).await? == 1)
}

/// Moves the milestones of `ids` that are `from` to `to`, in one statement; how many moved.
pub async fn transition_all(
    ex: Exec<'_>,
    ids: &[i64],
    from: MilestoneStatus,
    to: MilestoneStatus,
    now: DateTime<Utc>,
) -> StoreResult<u64> {
    super::transition_rows(
        ex,
        "UPDATE milestones SET status = $1, updated_at = $2,
             started_at = CASE WHEN $1 = 'in_progress' AND started_at IS NULL THEN $2 ELSE started_at END,
             approved_at = CASE WHEN $1 = 'approved' THEN $2 ELSE approved_at END,
             completed_at = CASE WHEN $1 = 'completed' THEN $2 ELSE completed_at END,
             cancelled_at = CASE WHEN $1 = 'cancelled' THEN $2 ELSE cancelled_at END,
             awaiting_payment_at = CASE WHEN $1 = 'awaiting_payment' THEN $2 ELSE awaiting_payment_at END,
             funding_reminded_at = CASE WHEN $1 = 'awaiting_payment' THEN NULL ELSE funding_reminded_at END
         WHERE status = $3 AND id IN ({})",
        ids,
        from,
        to,
        now,
    )
    .await
}

/// Starts the funding clock of a milestone that just became `awaiting_payment`: the company
/// is reminded at `due`.
pub async fn start_funding_clock(ex: Exec<'_>, id: i64, due: DateTime<Utc>) -> StoreResult<()> {
    on_exec!(ex, c => sqlx::query(
        "UPDATE milestones SET funding_due_at = $1, funding_reminded_at = NULL
         WHERE id = $2 AND status = 'awaiting_payment'",
    )
    .bind(due)
    .bind(id)
    .execute(c)
    .await
    .map(drop))?;
    Ok(())
}

/// Cancels every milestone of the project that is not approved yet.
pub async fn cancel_open_of_project(
    ex: Exec<'_>,
    project_id: i64,
    now: DateTime<Utc>,
) -> StoreResult<u64> {
    Ok(on_exec!(ex, c => sqlx::query(
        "UPDATE milestones SET status = 'cancelled', cancelled_at = $1, updated_at = $1
         WHERE project_id = $2 AND status IN ('awaiting_payment', 'pending')",
    )
    .bind(now)
    .bind(project_id)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?)
}

/// Cancels one milestone unless it is approved (its payment was refunded on a dispute).
pub async fn cancel_unapproved(ex: Exec<'_>, id: i64, now: DateTime<Utc>) -> StoreResult<bool> {
    let done = on_exec!(ex, c => sqlx::query(
        "UPDATE milestones SET status = 'cancelled', cancelled_at = $1, updated_at = $1
         WHERE id = $2
           AND status IN ('awaiting_payment', 'pending', 'in_progress', 'completed')",
    )
    .bind(now)
    .bind(id)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}

/// The first milestone after `position` that waits its turn (`pending`), if any.
pub async fn next_after(
    ex: Exec<'_>,
    project_id: i64,
    position: i64,
) -> StoreResult<Option<Milestone>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, Milestone>(select_milestones!(
        "WHERE m.project_id = $1 AND m.position > $2 AND m.status <> 'cancelled'
         ORDER BY m.position LIMIT 1"
    ))
    .bind(project_id)
    .bind(position)
    .fetch_optional(c)
    .await)?,
    )
}

/// A milestone whose payment is released: `approved` from any state of work, and its
/// submitted deliveries (only `delivery_id` when given) approved by `reviewer`. `false` when
/// the milestone is not in a state of work or the named delivery is not `submitted`.
pub async fn approve_with_delivery(
    mut ex: Exec<'_>,
    id: i64,
    delivery_id: Option<i64>,
    reviewer: Option<i64>,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let approved = on_exec!(ex.re(), c => sqlx::query(
        "UPDATE milestones SET status = 'approved', approved_at = $1, updated_at = $1
         WHERE id = $2 AND status IN ('pending', 'in_progress', 'completed')",
    )
    .bind(now)
    .bind(id)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    if approved != 1 {
        return Ok(false);
    }
    let deliveries = on_exec!(ex, c => sqlx::query(
        "UPDATE deliveries SET status = 'approved', reviewed_at = $1, reviewed_by = $2,
             updated_at = $1, auto_approved = ($2 IS NULL)
         WHERE milestone_id = $3 AND status = 'submitted' AND ($4 IS NULL OR id = $4)",
    )
    .bind(now)
    .bind(reviewer)
    .bind(id)
    .bind(delivery_id)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(delivery_id.is_none() || deliveries == 1)
}

/// After a failed transfer: the milestone `approved` → `in_progress` and its latest approved
/// delivery back to `submitted`, so the company reviews it again (without a review clock:
/// approving again would only retry the transfer, which the retry job does).
pub async fn reopen_after_failed_transfer(
    mut ex: Exec<'_>,
    id: i64,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let reopened = on_exec!(ex.re(), c => sqlx::query(
        "UPDATE milestones SET status = 'in_progress', approved_at = NULL, updated_at = $1
         WHERE id = $2 AND status = 'approved'",
    )
    .bind(now)
    .bind(id)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    on_exec!(ex, c => sqlx::query(
        "UPDATE deliveries SET status = 'submitted', reviewed_at = NULL, updated_at = $1,
             auto_approve_at = NULL, remind_at = NULL, auto_approved = FALSE
         WHERE id = (SELECT MAX(id) FROM deliveries WHERE milestone_id = $2 AND status = 'approved')",
    )
    .bind(now)
    .bind(id)
    .execute(c)
    .await
    .map(drop))?;
    Ok(reopened == 1)
}

/// Changes to a milestone; `None` keeps the value.
#[derive(Debug, Clone, Default)]
pub struct MilestoneChanges<'a> {
    pub title: Option<&'a str>,
    pub description: Option<&'a str>,
    pub amount_minor: Option<i64>,
    pub due_date: Option<DateTime<Utc>>,
}

/// Edits a milestone while it is `pending` and no payment was ever made for it (a funded
/// milestone keeps the amount its money was authorised for).
pub async fn update_pending(
    ex: Exec<'_>,
    id: i64,
    ch: &MilestoneChanges<'_>,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let done = on_exec!(ex, c => sqlx::query(
        "UPDATE milestones SET title = COALESCE($1, title),
             description = COALESCE($2, description),
             amount_minor = COALESCE($3, amount_minor), due_date = COALESCE($4, due_date),
             updated_at = $5
         WHERE id = $6 AND status = 'pending'
           AND NOT EXISTS (SELECT 1 FROM payments y WHERE y.milestone_id = $6)",
    )
    .bind(ch.title)
    .bind(ch.description)
    .bind(ch.amount_minor)
    .bind(ch.due_date)
    .bind(now)
    .bind(id)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}

/// Deletes a milestone while it is `pending` and without any payment.
pub async fn delete_pending(ex: Exec<'_>, id: i64) -> StoreResult<bool> {
    let done = on_exec!(ex, c => sqlx::query(
        "DELETE FROM milestones WHERE id = $1 AND status = 'pending'
           AND NOT EXISTS (SELECT 1 FROM payments y WHERE y.milestone_id = $1)",
    )
    .bind(id)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}

/// Counts one rejection and moves the milestone `from` → `to` in the same update, only while
/// it still has `count` rejections: two concurrent rejections cannot both count as the same one.
pub async fn add_rejection(
    ex: Exec<'_>,
    id: i64,
    from: MilestoneStatus,
    count: i64,
    to: MilestoneStatus,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let done = on_exec!(ex, c => sqlx::query(
        "UPDATE milestones SET rejection_count = rejection_count + 1, status = $1, updated_at = $2,
             cancelled_at = CASE WHEN $1 = 'cancelled' THEN $2 ELSE cancelled_at END
         WHERE id = $3 AND status = $4 AND rejection_count = $5",
    )
    .bind(to)
    .bind(now)
    .bind(id)
    .bind(from)
    .bind(count)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}

/// Cancels the project's milestones after `position` that are not finished.
pub async fn cancel_after(
    ex: Exec<'_>,
    project_id: i64,
    position: i64,
    now: DateTime<Utc>,
) -> StoreResult<u64> {
    Ok(on_exec!(ex, c => sqlx::query(
        "UPDATE milestones SET status = 'cancelled', cancelled_at = $1, updated_at = $1
         WHERE project_id = $2 AND position > $3
           AND status IN ('awaiting_payment', 'pending', 'in_progress', 'completed')",
    )
    .bind(now)
    .bind(project_id)
    .bind(position)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?)
}

/// The id of the milestone's payment held in escrow, if it is funded.
pub async fn held_payment(ex: Exec<'_>, milestone_id: i64) -> StoreResult<Option<i64>> {
    Ok(on_exec!(ex, c => sqlx::query_scalar(
        "SELECT id FROM payments WHERE milestone_id = $1 AND status = 'held' ORDER BY id LIMIT 1",
    )
    .bind(milestone_id)
    .fetch_optional(c)
    .await)?)
}

/// Whether some milestone of the project is still to be approved.
pub async fn has_unfinished(ex: Exec<'_>, project_id: i64) -> StoreResult<bool> {
    Ok(on_exec!(ex, c => sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM milestones
             WHERE project_id = $1 AND status NOT IN ('approved', 'cancelled'))",
    )
    .bind(project_id)
    .fetch_one(c)
    .await)?)
}
