//! Deliveries: the work an expert hands in for a milestone, and the company's review of it.

use chrono::{DateTime, Utc};
use sqlx::types::Json;

use super::{Exec, StoreResult};
use crate::domain::delivery::DeliveryStatus;
use crate::on_exec;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Delivery {
    pub id: i64,
    pub milestone_id: i64,
    pub project_id: i64,
    pub expert_id: Option<i64>,
    pub description: String,
    pub attachments: Json<Vec<String>>,
    pub status: DeliveryStatus,
    pub feedback: Option<String>,
    pub reviewed_at: Option<DateTime<Utc>>,
    pub reviewed_by: Option<i64>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// While `submitted`: when the service approves it if the company has not reviewed it.
    pub auto_approve_at: Option<DateTime<Utc>>,
    /// The service approved it at `auto_approve_at` (`reviewed_by` is then empty).
    pub auto_approved: bool,
}

macro_rules! select_deliveries {
    ($($rest:expr),* $(,)?) => {
        concat!(
            "SELECT d.id, d.milestone_id, d.project_id, d.expert_id, d.description, ",
            "d.attachments, d.status, d.feedback, d.reviewed_at, d.reviewed_by, d.created_at, ",
            "d.updated_at, d.auto_approve_at, d.auto_approved FROM deliveries d ",
            $($rest),*
        )
    };
}

/// When a delivery under review is approved by the service, and when its company is reminded
/// first.
#[derive(Debug, Clone, Copy)]
pub struct ReviewClock {
    pub auto_approve_at: DateTime<Utc>,
    pub remind_at: DateTime<Utc>,
}

/// Inserts a `submitted` delivery.
#[allow(clippy::too_many_arguments)]
pub async fn insert(
    ex: Exec<'_>,
    milestone_id: i64,
    project_id: i64,
    expert_id: i64,
    description: &str,
    attachments: &[String],
    clock: ReviewClock,
    now: DateTime<Utc>,
) -> StoreResult<i64> {
    Ok(on_exec!(ex, c => sqlx::query_scalar(
        "INSERT INTO deliveries (milestone_id, project_id, expert_id, description, attachments,
             status, created_at, updated_at, auto_approve_at, remind_at)
         VALUES ($1, $2, $3, $4, $5, 'submitted', $6, $6, $7, $8) RETURNING id",
    )
    .bind(milestone_id)
    .bind(project_id)
    .bind(expert_id)
    .bind(description)
    .bind(Json(attachments))
    .bind(now)
    .bind(clock.auto_approve_at)
    .bind(clock.remind_at)
    .fetch_one(c)
    .await)?)
}

pub async fn find(ex: Exec<'_>, id: i64) -> StoreResult<Option<Delivery>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, Delivery>(select_deliveries!("WHERE d.id = $1"))
        .bind(id)
        .fetch_optional(c)
        .await)?,
    )
}

/// The milestone's delivery waiting for review, if any.
pub async fn submitted_of(ex: Exec<'_>, milestone_id: i64) -> StoreResult<Option<Delivery>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, Delivery>(select_deliveries!(
        "WHERE d.milestone_id = $1 AND d.status = 'submitted' ORDER BY d.id LIMIT 1"
    ))
    .bind(milestone_id)
    .fetch_optional(c)
    .await)?,
    )
}

/// Which column a list filters on.
#[derive(Debug, Clone, Copy)]
pub enum Of {
    Milestone(i64),
    Project(i64),
    Expert(i64),
}

/// One page of deliveries of a milestone, a project or an expert, newest first.
pub async fn list(
    mut ex: Exec<'_>,
    of: Of,
    limit: i64,
    offset: i64,
) -> StoreResult<(Vec<Delivery>, i64)> {
    // Three fixed query texts: sqlx 0.9 takes only `'static` SQL.
    macro_rules! page {
        ($column:literal, $id:expr) => {{
            let items = on_exec!(ex.re(), c => sqlx::query_as::<_, Delivery>(select_deliveries!(
                "WHERE d.", $column, " = $1 ORDER BY d.created_at DESC, d.id DESC LIMIT $2 OFFSET $3"
            ))
            .bind($id)
            .bind(limit)
            .bind(offset)
            .fetch_all(c)
            .await)?;
            let total: i64 = on_exec!(ex, c => sqlx::query_scalar(concat!(
                "SELECT COUNT(*) FROM deliveries WHERE ", $column, " = $1"
            ))
            .bind($id)
            .fetch_one(c)
            .await)?;
            Ok((items, total))
        }};
    }
    match of {
        Of::Milestone(id) => page!("milestone_id", id),
        Of::Project(id) => page!("project_id", id),
        Of::Expert(id) => page!("expert_id", id),
    }
}

/// A review: `from` → `to` with the reviewer's feedback (the conditional update every review
/// is guarded by).
pub async fn transition(
    ex: Exec<'_>,
    id: i64,
    from: DeliveryStatus,
    to: DeliveryStatus,
    feedback: Option<&str>,
    reviewed_by: Option<i64>,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let done = on_exec!(ex, c => sqlx::query(
        "UPDATE deliveries SET status = $1, feedback = $2, reviewed_by = $3, reviewed_at = $4,
             updated_at = $4
         WHERE id = $5 AND status = $6",
    )
    .bind(to)
    .bind(feedback)
    .bind(reviewed_by)
    .bind(now)
    .bind(id)
    .bind(from)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}

/// The expert's new version of a delivery sent back for revision: `needs_revision` →
/// `submitted` (the feedback stays, as the record of what was asked), its review clock
/// started again.
pub async fn resubmit(
    ex: Exec<'_>,
    id: i64,
    description: &str,
    attachments: &[String],
    clock: ReviewClock,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let done = on_exec!(ex, c => sqlx::query(
        "UPDATE deliveries SET status = 'submitted', description = $1, attachments = $2,
             updated_at = $3, auto_approve_at = $5, remind_at = $6, reminders_sent = 0
         WHERE id = $4 AND status = 'needs_revision'",
    )
    .bind(description)
    .bind(Json(attachments))
    .bind(now)
    .bind(id)
    .bind(clock.auto_approve_at)
    .bind(clock.remind_at)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}
