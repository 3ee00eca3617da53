//! Disputes: raised by a project's company or expert, or opened by the card holder's bank
//! (a chargeback, with `processor_dispute_id`). At most one `open` or `in_review` dispute per
//! project (a partial unique index).

use chrono::{DateTime, Utc};

use super::{Exec, StoreResult};
use crate::on_exec;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Dispute {
    pub id: i64,
    pub project_id: i64,
    pub payment_id: Option<i64>,
    pub raised_by: Option<i64>,
    pub status: String,
    pub reason: String,
    pub description: Option<String>,
    pub title: Option<String>,
    pub dispute_type: Option<String>,
    pub priority: Option<String>,
    pub contact_preference: Option<String>,
    pub evidence: Option<String>,
    pub requested_resolution: Option<String>,
    pub resolution: Option<String>,
    pub resolution_action: Option<String>,
    pub resolved_by: Option<i64>,
    pub resolved_at: Option<DateTime<Utc>>,
    pub mediation_notes: Option<String>,
    pub mediated_by: Option<i64>,
    pub mediated_at: Option<DateTime<Utc>>,
    pub processor_dispute_id: Option<String>,
    pub processor_dispute_status: Option<String>,
    pub evidence_details: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

macro_rules! select_disputes {
    ($($rest:expr),* $(,)?) => {
        concat!(
            "SELECT d.id, d.project_id, d.payment_id, d.raised_by, d.status, d.reason, ",
            "d.description, d.title, d.dispute_type, d.priority, d.contact_preference, ",
            "d.evidence, d.requested_resolution, d.resolution, d.resolution_action, ",
            "d.resolved_by, d.resolved_at, d.mediation_notes, d.mediated_by, d.mediated_at, ",
            "d.processor_dispute_id, d.processor_dispute_status, d.evidence_details, ",
            "d.created_at, d.updated_at FROM disputes d ",
            $($rest),*
        )
    };
}

pub async fn find(ex: Exec<'_>, id: i64) -> StoreResult<Option<Dispute>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, Dispute>(select_disputes!("WHERE d.id = $1"))
        .bind(id)
        .fetch_optional(c)
        .await)?,
    )
}

pub async fn find_by_processor_id(
    ex: Exec<'_>,
    processor_id: &str,
) -> StoreResult<Option<Dispute>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, Dispute>(select_disputes!(
        "WHERE d.processor_dispute_id = $1"
    ))
    .bind(processor_id)
    .fetch_optional(c)
    .await)?,
    )
}

/// The project's `open` or `in_review` dispute.
pub async fn active_of_project(ex: Exec<'_>, project_id: i64) -> StoreResult<Option<Dispute>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, Dispute>(select_disputes!(
        "WHERE d.project_id = $1 AND d.status IN ('open', 'in_review')"
    ))
    .bind(project_id)
    .fetch_optional(c)
    .await)?,
    )
}

/// A chargeback the processor reported.
#[derive(Debug, Clone)]
pub struct Chargeback<'a> {
    pub project_id: i64,
    pub payment_id: i64,
    pub processor_dispute_id: &'a str,
    pub processor_status: &'a str,
    pub reason: &'a str,
    pub evidence_details: Option<&'a str>,
}

/// Records a chargeback as an `open` dispute. A unique violation means the project already
/// has an active dispute (or this chargeback is known).
pub async fn insert_chargeback(
    ex: Exec<'_>,
    c: &Chargeback<'_>,
    now: DateTime<Utc>,
) -> StoreResult<i64> {
    Ok(on_exec!(ex, conn => sqlx::query_scalar(
        "INSERT INTO disputes (project_id, payment_id, status, reason, title, dispute_type,
             processor_dispute_id, processor_dispute_status, evidence_details, created_at,
             updated_at)
         VALUES ($1, $2, 'open', $3, 'Chargeback', 'chargeback', $4, $5, $6, $7, $7)
         RETURNING id",
    )
    .bind(c.project_id)
    .bind(c.payment_id)
    .bind(c.reason)
    .bind(c.processor_dispute_id)
    .bind(c.processor_status)
    .bind(c.evidence_details)
    .bind(now)
    .fetch_one(conn)
    .await)?)
}

/// Ties a chargeback to the project's dispute already under way (which had none).
pub async fn attach_chargeback(
    ex: Exec<'_>,
    id: i64,
    c: &Chargeback<'_>,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let done = on_exec!(ex, conn => sqlx::query(
        "UPDATE disputes SET processor_dispute_id = $1, processor_dispute_status = $2,
             evidence_details = $3, payment_id = COALESCE(payment_id, $4), updated_at = $5
         WHERE id = $6 AND processor_dispute_id IS NULL",
    )
    .bind(c.processor_dispute_id)
    .bind(c.processor_status)
    .bind(c.evidence_details)
    .bind(c.payment_id)
    .bind(now)
    .bind(id)
    .execute(conn)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}

/// Follows the processor's status of a chargeback: to `to` only from one of `from` (a
/// resolved or closed dispute never moves back).
pub async fn follow_processor(
    ex: Exec<'_>,
    id: i64,
    from: [&str; 2],
    to: &str,
    processor_status: &str,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let done = on_exec!(ex, conn => sqlx::query(
        "UPDATE disputes SET status = $1, processor_dispute_status = $2, updated_at = $3
         WHERE id = $4 AND status IN ($5, $6)",
    )
    .bind(to)
    .bind(processor_status)
    .bind(now)
    .bind(id)
    .bind(from[0])
    .bind(from[1])
    .execute(conn)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}

/// Records the processor's latest status without moving ours.
pub async fn set_processor_status(
    ex: Exec<'_>,
    id: i64,
    processor_status: &str,
    now: DateTime<Utc>,
) -> StoreResult<()> {
    on_exec!(ex, conn => sqlx::query(
        "UPDATE disputes SET processor_dispute_status = $1, updated_at = $2 WHERE id = $3",
    )
    .bind(processor_status)
    .bind(now)
    .bind(id)
    .execute(conn)
    .await
    .map(drop))?;
    Ok(())
}

/// Resolves an active dispute on the processor's decision (no administrator involved).
pub async fn resolve_by_processor(
    ex: Exec<'_>,
    id: i64,
    resolution: &str,
    action: &str,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let done = on_exec!(ex, conn => sqlx::query(
        "UPDATE disputes SET status = 'resolved', resolution = $1, resolution_action = $2,
             resolved_at = $3, updated_at = $3
         WHERE id = $4 AND status IN ('open', 'in_review')",
    )
    .bind(resolution)
    .bind(action)
    .bind(now)
    .bind(id)
    .execute(conn)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}
