//! Payments: one per funded milestone, held in escrow at the processor (manual capture) and
//! released to the expert on approval. Rows are never deleted.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;

use super::{Exec, StoreResult};
use crate::on_exec;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Payment {
    pub id: i64,
    pub project_id: i64,
    pub milestone_id: Option<i64>,
    pub company_id: Option<i64>,
    pub expert_id: Option<i64>,
    pub amount_minor: i64,
    pub currency: String,
    pub processor_payment_intent_id: Option<String>,
    pub processor_charge_id: Option<String>,
    pub status: String,
    pub commission_minor: Option<i64>,
    pub expert_level_used: Option<String>,
    pub application_fee_minor: Option<i64>,
    pub expert_amount_minor: Option<i64>,
    pub processor_transfer_id: Option<String>,
    pub payout_status: String,
    pub held_at: Option<DateTime<Utc>>,
    pub released_at: Option<DateTime<Utc>>,
    pub refunded_at: Option<DateTime<Utc>>,
    pub payment_metadata: Json<Value>,
    pub transfer_attempt_at: Option<DateTime<Utc>>,
    pub capture_before: Option<DateTime<Utc>>,
    pub processor_refund_id: Option<String>,
    pub refund_reason: Option<String>,
    pub failure_reason: Option<String>,
    pub receipt_url: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

macro_rules! select_payments {
    ($($rest:expr),* $(,)?) => {
        concat!(
            "SELECT y.id, y.project_id, y.milestone_id, y.company_id, y.expert_id, y.amount_minor, ",
            "y.currency, y.processor_payment_intent_id, y.processor_charge_id, y.status, ",
            "y.commission_minor, y.expert_level_used, y.application_fee_minor, ",
            "y.expert_amount_minor, y.processor_transfer_id, y.payout_status, y.held_at, ",
            "y.released_at, y.refunded_at, y.payment_metadata, y.transfer_attempt_at, ",
            "y.capture_before, y.processor_refund_id, y.refund_reason, y.failure_reason, ",
            "y.receipt_url, y.created_at, y.updated_at FROM payments y ",
            $($rest),*
        )
    };
}

/// A payment to create, `pending` with payout `pending`.
#[derive(Debug, Clone)]
pub struct NewPayment<'a> {
    pub project_id: i64,
    pub milestone_id: Option<i64>,
    pub company_id: Option<i64>,
    pub expert_id: Option<i64>,
    pub amount_minor: i64,
    pub currency: &'a str,
}

/// Inserts a `pending` payment. A milestone with a payment already `pending` or `held`
/// refuses a second one (unique violation).
pub async fn insert_pending(
    ex: Exec<'_>,
    p: &NewPayment<'_>,
    now: DateTime<Utc>,
) -> StoreResult<i64> {
    Ok(on_exec!(ex, c => sqlx::query_scalar(
        "INSERT INTO payments (project_id, milestone_id, company_id, expert_id, amount_minor,
             currency, status, payout_status, payment_metadata, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, 'pending', 'pending', '{}', $7, $7) RETURNING id",
    )
    .bind(p.project_id)
    .bind(p.milestone_id)
    .bind(p.company_id)
    .bind(p.expert_id)
    .bind(p.amount_minor)
    .bind(p.currency)
    .bind(now)
    .fetch_one(c)
    .await)?)
}

pub async fn find(ex: Exec<'_>, id: i64) -> StoreResult<Option<Payment>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, Payment>(select_payments!("WHERE y.id = $1"))
        .bind(id)
        .fetch_optional(c)
        .await)?,
    )
}

pub async fn find_by_intent(ex: Exec<'_>, intent_id: &str) -> StoreResult<Option<Payment>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, Payment>(select_payments!(
        "WHERE y.processor_payment_intent_id = $1"
    ))
    .bind(intent_id)
    .fetch_optional(c)
    .await)?,
    )
}

/// The project's payments, oldest first.
pub async fn list_for_project(ex: Exec<'_>, project_id: i64) -> StoreResult<Vec<Payment>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, Payment>(select_payments!(
        "WHERE y.project_id = $1 ORDER BY y.id"
    ))
    .bind(project_id)
    .fetch_all(c)
    .await)?,
    )
}

/// Records the processor's payment intent of a payment that has none yet.
pub async fn set_intent(
    ex: Exec<'_>,
    id: i64,
    intent_id: &str,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let done = on_exec!(ex, c => sqlx::query(
        "UPDATE payments SET processor_payment_intent_id = $1, updated_at = $2
         WHERE id = $3 AND processor_payment_intent_id IS NULL",
    )
    .bind(intent_id)
    .bind(now)
    .bind(id)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}

/// `pending` → `failed` with a reason (the money was never authorised).
pub async fn fail_pending(
    ex: Exec<'_>,
    id: i64,
    reason: &str,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let done = on_exec!(ex, c => sqlx::query(
        "UPDATE payments SET status = 'failed', failure_reason = $1, updated_at = $2
         WHERE id = $3 AND status = 'pending'",
    )
    .bind(reason)
    .bind(now)
    .bind(id)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}

/// Sums of an expert's payments: released to them (their amounts after commission) and held
/// in escrow for them.
pub async fn expert_totals(ex: Exec<'_>, expert_id: i64) -> StoreResult<(i64, i64)> {
    let (released, held): (Option<i64>, Option<i64>) = on_exec!(ex, c => sqlx::query_as(
        "SELECT
             CAST(SUM(CASE WHEN status = 'released' THEN COALESCE(expert_amount_minor, 0) END) AS BIGINT),
             CAST(SUM(CASE WHEN status = 'held' THEN amount_minor END) AS BIGINT)
         FROM payments WHERE expert_id = $1",
    )
    .bind(expert_id)
    .fetch_one(c)
    .await)?;
    Ok((released.unwrap_or(0), held.unwrap_or(0)))
}
