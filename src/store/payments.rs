//! Payments: one per funded milestone, held in escrow at the processor (manual capture) and
//! released to the expert on approval. Rows are never deleted.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;

use super::listing::{self, Sql};
use super::tallies::{self, Tally};
use super::{Exec, StoreResult};
use crate::domain::payment::{PaymentStatus, PayoutStatus};
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
    pub status: PaymentStatus,
    pub commission_minor: Option<i64>,
    pub expert_level_used: Option<String>,
    pub application_fee_minor: Option<i64>,
    pub expert_amount_minor: Option<i64>,
    pub processor_transfer_id: Option<String>,
    pub payout_status: PayoutStatus,
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

macro_rules! payment_columns {
    () => {
        concat!(
            "y.id, y.project_id, y.milestone_id, y.company_id, y.expert_id, y.amount_minor, ",
            "y.currency, y.processor_payment_intent_id, y.processor_charge_id, y.status, ",
            "y.commission_minor, y.expert_level_used, y.application_fee_minor, ",
            "y.expert_amount_minor, y.processor_transfer_id, y.payout_status, y.held_at, ",
            "y.released_at, y.refunded_at, y.payment_metadata, y.transfer_attempt_at, ",
            "y.capture_before, y.processor_refund_id, y.refund_reason, y.failure_reason, ",
            "y.receipt_url, y.created_at, y.updated_at"
        )
    };
}

macro_rules! select_payments {
    ($($rest:expr),* $(,)?) => {
        concat!(
            "SELECT ",
            payment_columns!(),
            " FROM payments y ",
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

/// The payments of `ids` that exist, in no particular order.
pub async fn find_many(ex: Exec<'_>, ids: &[i64]) -> StoreResult<Vec<Payment>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let sql = select_payments!("WHERE y.id IN ({})")
        .replace("{}", &super::placeholders(1, super::list_len(ids.len())));
    Ok(on_exec!(ex, c => {
        let mut query = sqlx::query_as::<_, Payment>(sqlx::AssertSqlSafe(sql.as_str()));
        for id in super::padded(ids) {
            query = query.bind(*id);
        }
        query.fetch_all(c).await
    })?)
}

/// What the notices of a held payment name: the project's and milestone's titles and the
/// expert (name from the expert profile, else the username).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct HoldNotice {
    pub payment_id: i64,
    pub project_title: String,
    pub milestone_title: Option<String>,
    pub expert_id: Option<i64>,
    pub expert_email: Option<String>,
    pub expert_name: Option<String>,
}

/// The [`HoldNotice`]s of payments `ids`, in one query, in no particular order; a payment
/// whose project is gone has none.
pub async fn hold_notices(ex: Exec<'_>, ids: &[i64]) -> StoreResult<Vec<HoldNotice>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT y.id AS payment_id, p.title AS project_title, m.title AS milestone_title,
             u.id AS expert_id, u.email AS expert_email,
             CASE WHEN u.id IS NULL THEN NULL ELSE COALESCE(
                 (SELECT COALESCE(NULLIF(f.company_name, ''), NULLIF(f.full_name, ''))
                  FROM profiles f WHERE f.user_id = u.id AND f.profile_type = 'experto'),
                 u.username) END AS expert_name
         FROM payments y
         JOIN projects p ON p.id = y.project_id
         LEFT JOIN milestones m ON m.id = y.milestone_id
         LEFT JOIN users u ON u.id = y.expert_id
         WHERE y.id IN ({})",
        super::placeholders(1, super::list_len(ids.len()))
    );
    Ok(on_exec!(ex, c => {
        // Placeholders only: the ids are bound.
        let mut query = sqlx::query_as::<_, HoldNotice>(sqlx::AssertSqlSafe(sql.as_str()));
        for id in super::padded(ids) {
            query = query.bind(*id);
        }
        query.fetch_all(c).await
    })?)
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

/// What `expert_id` received from released payments and holds in escrow: `(released,
/// held)`, summed by the writes (`Tally::ExpertMoney`, migration 0037).
pub async fn expert_totals(ex: Exec<'_>, expert_id: i64) -> StoreResult<(i64, i64)> {
    let (released, held) = (PaymentStatus::Released, PaymentStatus::Held);
    let keys = tallies::state_keys("", &[released, held], PaymentStatus::as_str);
    let kept = tallies::of_user(ex, Tally::ExpertMoney, expert_id, &keys).await?;
    let sum = |status: PaymentStatus| {
        kept.iter()
            .find(|k| k.key == status.as_str())
            .map_or(0, |k| k.total)
    };
    Ok((sum(released), sum(held)))
}

/// Runs a conditional `UPDATE payments …` and tells whether it changed the row.
macro_rules! changed {
    ($ex:expr, $query:expr) => {{
        let done = on_exec!($ex, c => $query.execute(c).await.map(|r| r.rows_affected()))?;
        Ok(done == 1)
    }};
}

/// Replaces the payment's metadata (callers run in the payment's actor, which serialises
/// every read-modify-write of it).
pub async fn set_metadata(
    ex: Exec<'_>,
    id: i64,
    metadata: &Value,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    changed!(
        ex,
        sqlx::query("UPDATE payments SET payment_metadata = $1, updated_at = $2 WHERE id = $3")
            .bind(Json(metadata))
            .bind(now)
            .bind(id)
    )
}

/// What the processor said when the money was authorised.
#[derive(Debug, Clone, Default)]
pub struct Authorisation<'a> {
    pub charge_id: Option<&'a str>,
    pub capture_before: Option<DateTime<Utc>>,
    pub receipt_url: Option<&'a str>,
}

/// A payment to hold, with its authorisation and its metadata as they are to be stored.
#[derive(Debug, Clone)]
pub struct ToHold<'a> {
    pub id: i64,
    pub auth: Authorisation<'a>,
    pub metadata: &'a Value,
}

/// `pending` → `held` for each of `payments`, in one statement: the company's money is
/// authorised and waits in escrow. Answers the ids of those held (a payment no longer
/// `pending` is left as it is), in no particular order.
pub async fn mark_all_held(
    ex: Exec<'_>,
    payments: &[ToHold<'_>],
    now: DateTime<Utc>,
) -> StoreResult<Vec<i64>> {
    if payments.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "UPDATE payments SET status = 'held', held_at = $1, updated_at = $1,
             processor_charge_id = COALESCE(v.column2, processor_charge_id),
             capture_before = COALESCE(v.column3, capture_before),
             receipt_url = COALESCE(v.column4, receipt_url), payment_metadata = v.column5
         FROM (VALUES {}) AS v
         WHERE payments.id = v.column1 AND payments.status = 'pending'
         RETURNING id",
        super::value_rows(2, super::list_len(payments.len()), 5)
    );
    Ok(on_exec!(ex, c => {
        // Placeholders only: the values are bound.
        let mut query = sqlx::query_scalar(sqlx::AssertSqlSafe(sql.as_str())).bind(now);
        for y in super::padded(payments) {
            query = query
                .bind(y.id)
                .bind(y.auth.charge_id)
                .bind(y.auth.capture_before)
                .bind(y.auth.receipt_url)
                .bind(Json(y.metadata));
        }
        query.fetch_all(c).await
    })?)
}

/// A payment frozen by a dispute before it was funded was authorised meanwhile: the
/// authorisation is kept (`held_at`, charge, expiry) and the payment stays `disputed`, its
/// money now in escrow for the administrator's decision.
pub async fn record_authorisation_while_disputed(
    ex: Exec<'_>,
    id: i64,
    auth: &Authorisation<'_>,
    metadata: &Value,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    changed!(
        ex,
        sqlx::query(
            "UPDATE payments SET held_at = $1, updated_at = $1,
                 processor_charge_id = COALESCE($2, processor_charge_id),
                 capture_before = COALESCE($3, capture_before),
                 receipt_url = COALESCE($4, receipt_url), payment_metadata = $5
             WHERE id = $6 AND status = 'disputed' AND held_at IS NULL",
        )
        .bind(now)
        .bind(auth.charge_id)
        .bind(auth.capture_before)
        .bind(auth.receipt_url)
        .bind(Json(metadata))
        .bind(id)
    )
}

/// The split saved when a payment is released.
#[derive(Debug, Clone)]
pub struct Split<'a> {
    pub expert_level: &'a str,
    pub commission_minor: i64,
    pub expert_amount_minor: i64,
}

/// `from` (`held`, or `disputed` when a dispute is decided for the expert) → `released` with
/// its commission; the transfer attempt is stamped `now`, payout `pending` until a transfer is
/// made.
pub async fn mark_released(
    ex: Exec<'_>,
    id: i64,
    from: ReleasedFrom,
    split: &Split<'_>,
    charge_id: Option<&str>,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    changed!(
        ex,
        sqlx::query(
            "UPDATE payments SET status = 'released', released_at = $1, updated_at = $1,
                 transfer_attempt_at = $1, payout_status = 'pending',
                 expert_level_used = $2, commission_minor = $3, application_fee_minor = $3,
                 expert_amount_minor = $4,
                 processor_charge_id = COALESCE($5, processor_charge_id)
             WHERE id = $6 AND status = $7",
        )
        .bind(now)
        .bind(split.expert_level)
        .bind(split.commission_minor)
        .bind(split.expert_amount_minor)
        .bind(charge_id)
        .bind(id)
        .bind(from.status())
    )
}

/// The states a release starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleasedFrom {
    /// The company approved the work.
    Held,
    /// An administrator decided a dispute for the expert.
    Disputed,
}

impl ReleasedFrom {
    pub fn status(self) -> PaymentStatus {
        match self {
            Self::Held => PaymentStatus::Held,
            Self::Disputed => PaymentStatus::Disputed,
        }
    }
}

/// A released payment's transfer was made: payout `transferred`.
pub async fn mark_transferred(
    ex: Exec<'_>,
    id: i64,
    transfer_id: &str,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    changed!(
        ex,
        sqlx::query(
            "UPDATE payments SET payout_status = 'transferred', processor_transfer_id = $1,
                 updated_at = $2
             WHERE id = $3 AND status = 'released' AND payout_status <> 'transferred'",
        )
        .bind(transfer_id)
        .bind(now)
        .bind(id)
    )
}

/// Stamps a new transfer attempt (its time names the idempotency key), unless another one
/// began since `previous` was read (another instance): false then, and that attempt stands.
pub async fn begin_transfer_attempt(
    ex: Exec<'_>,
    id: i64,
    previous: Option<DateTime<Utc>>,
    at: DateTime<Utc>,
) -> StoreResult<bool> {
    changed!(
        ex,
        sqlx::query(
            "UPDATE payments SET transfer_attempt_at = $1, updated_at = $1
             WHERE id = $2 AND status = 'released' AND payout_status = 'pending'
               AND (transfer_attempt_at = $3 OR ($3 IS NULL AND transfer_attempt_at IS NULL))",
        )
        .bind(at)
        .bind(id)
        .bind(previous)
    )
}

/// The transfer `transfer_id` failed: the money is back in escrow (`held`, captured), payout
/// `failed`, the transfer forgotten and the expert's amount recomputed.
pub async fn mark_transfer_failed(
    ex: Exec<'_>,
    id: i64,
    transfer_id: &str,
    expert_amount_minor: i64,
    metadata: &Value,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    changed!(
        ex,
        sqlx::query(
            "UPDATE payments SET status = 'held', payout_status = 'failed',
                 processor_transfer_id = NULL, expert_amount_minor = $1,
                 payment_metadata = $2, updated_at = $3
             WHERE id = $4 AND status = 'released'
               AND (processor_transfer_id = $5 OR processor_transfer_id IS NULL)",
        )
        .bind(expert_amount_minor)
        .bind(Json(metadata))
        .bind(now)
        .bind(id)
        .bind(transfer_id)
    )
}

/// → `refunded` from `held`, `released` or `disputed`; payout back to `pending` (nothing
/// stays with the expert).
pub async fn mark_refunded(
    ex: Exec<'_>,
    id: i64,
    refund_id: Option<&str>,
    reason: Option<&str>,
    metadata: &Value,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    changed!(
        ex,
        sqlx::query(
            "UPDATE payments SET status = 'refunded', payout_status = 'pending',
                 refunded_at = $1, updated_at = $1,
                 processor_refund_id = COALESCE($2, processor_refund_id),
                 refund_reason = COALESCE($3, refund_reason), payment_metadata = $4
             WHERE id = $5 AND status IN ('held', 'released', 'disputed')",
        )
        .bind(now)
        .bind(refund_id)
        .bind(reason)
        .bind(Json(metadata))
        .bind(id)
    )
}

/// Every `pending` or `held` payment of the project → `disputed` (a dispute was raised);
/// answers their ids.
pub async fn dispute_open_of_project(
    ex: Exec<'_>,
    project_id: i64,
    now: DateTime<Utc>,
) -> StoreResult<Vec<i64>> {
    Ok(on_exec!(ex, c => sqlx::query_scalar(
        "UPDATE payments SET status = 'disputed', updated_at = $1
         WHERE project_id = $2 AND status IN ('pending', 'held')
         RETURNING id",
    )
    .bind(now)
    .bind(project_id)
    .fetch_all(c)
    .await)?)
}

/// The project's `disputed` payments, in milestone order.
pub async fn disputed_of_project(ex: Exec<'_>, project_id: i64) -> StoreResult<Vec<Payment>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, Payment>(select_payments!(
        "WHERE y.project_id = $1 AND y.status = 'disputed' ORDER BY y.id"
    ))
    .bind(project_id)
    .fetch_all(c)
    .await)?,
    )
}

/// A disputed payment that was never funded goes back to `pending` (the dispute was decided
/// for the expert, but there is no money to release: the company funds it as before).
pub async fn undispute_unfunded(ex: Exec<'_>, id: i64, now: DateTime<Utc>) -> StoreResult<bool> {
    changed!(
        ex,
        sqlx::query(
            "UPDATE payments SET status = 'pending', updated_at = $1
             WHERE id = $2 AND status = 'disputed' AND held_at IS NULL",
        )
        .bind(now)
        .bind(id)
    )
}

/// `pending` or `held` → `disputed`.
pub async fn mark_disputed(ex: Exec<'_>, id: i64, now: DateTime<Utc>) -> StoreResult<bool> {
    changed!(
        ex,
        sqlx::query(
            "UPDATE payments SET status = 'disputed', updated_at = $1
             WHERE id = $2 AND status IN ('pending', 'held')",
        )
        .bind(now)
        .bind(id)
    )
}

pub async fn find_by_charge(ex: Exec<'_>, charge_id: &str) -> StoreResult<Option<Payment>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, Payment>(select_payments!(
        "WHERE y.processor_charge_id = $1 ORDER BY y.id LIMIT 1"
    ))
    .bind(charge_id)
    .fetch_optional(c)
    .await)?,
    )
}

pub async fn find_by_transfer(ex: Exec<'_>, transfer_id: &str) -> StoreResult<Option<Payment>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, Payment>(select_payments!(
        "WHERE y.processor_transfer_id = $1 ORDER BY y.id LIMIT 1"
    ))
    .bind(transfer_id)
    .fetch_optional(c)
    .await)?,
    )
}

/// The milestone's payment that is still open (`pending`, `held` or `disputed`), if any.
pub async fn open_of_milestone(ex: Exec<'_>, milestone_id: i64) -> StoreResult<Option<Payment>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, Payment>(select_payments!(
        "WHERE y.milestone_id = $1 AND y.status IN ('pending', 'held', 'disputed')
         ORDER BY y.id DESC LIMIT 1"
    ))
    .bind(milestone_id)
    .fetch_optional(c)
    .await)?,
    )
}

/// Released payments whose transfer is still to be made (deferred or blocked), oldest first.
pub async fn awaiting_transfer(ex: Exec<'_>, limit: i64) -> StoreResult<Vec<Payment>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, Payment>(select_payments!(
        "WHERE y.status = 'released' AND y.payout_status = 'pending' ORDER BY y.id LIMIT $1"
    ))
    .bind(limit)
    .fetch_all(c)
    .await)?,
    )
}

/// Held payments (disputed ones too: their money waits for a decision) whose authorisation
/// lapses before `before`.
pub async fn authorisations_expiring(
    ex: Exec<'_>,
    before: DateTime<Utc>,
) -> StoreResult<Vec<Payment>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, Payment>(select_payments!(
        "WHERE y.status IN ('held', 'disputed') AND y.capture_before IS NOT NULL
           AND y.capture_before <= $1
         ORDER BY y.capture_before"
    ))
    .bind(before)
    .fetch_all(c)
    .await)?,
    )
}

/// Payments created or changed in `[from, to)`, oldest first: what the money audit checks.
pub async fn touched_between(
    ex: Exec<'_>,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    limit: i64,
) -> StoreResult<Vec<Payment>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, Payment>(select_payments!(
        "WHERE (y.created_at >= $1 AND y.created_at < $2) OR (y.updated_at >= $1 AND y.updated_at < $2) ",
        "ORDER BY y.id LIMIT $3"
    ))
    .bind(from)
    .bind(to)
    .bind(limit)
    .fetch_all(c)
    .await)?,
    )
}

/// `pending` and `held` payments not touched since `before`: candidates for reconciliation.
pub async fn stale(ex: Exec<'_>, before: DateTime<Utc>, limit: i64) -> StoreResult<Vec<Payment>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, Payment>(select_payments!(
        "WHERE y.status IN ('pending', 'held') AND y.updated_at <= $1 ORDER BY y.id LIMIT $2"
    ))
    .bind(before)
    .bind(limit)
    .fetch_all(c)
    .await)?,
    )
}

/// Filters of a payment list; `None` matches everything.
#[derive(Debug, Clone, Default)]
pub struct PaymentFilter {
    pub company_id: Option<i64>,
    pub expert_id: Option<i64>,
    pub project_id: Option<i64>,
    pub status: Option<PaymentStatus>,
    pub payout_status: Option<PayoutStatus>,
}

/// The conditions of the filters `f` has, their values bound.
fn conditions(f: &PaymentFilter) -> (Vec<String>, Sql) {
    let mut sql = Sql::default();
    let mut filter = Vec::new();
    let ids = [
        ("y.company_id", f.company_id),
        ("y.expert_id", f.expert_id),
        ("y.project_id", f.project_id),
    ];
    for (column, id) in ids {
        if let Some(id) = id {
            filter.push(format!("{column} = {}", sql.arg(id)));
        }
    }
    if let Some(status) = f.status {
        filter.push(format!("y.status = {}", sql.arg(status.as_str())));
    }
    if let Some(status) = f.payout_status {
        filter.push(format!("y.payout_status = {}", sql.arg(status.as_str())));
    }
    (filter, sql)
}

/// One page of payments, newest first, and the total. (Newest first is by id alone, no
/// `listing::Order`: the page is read by offset, its filter assembled all the same.)
pub async fn list(
    mut ex: Exec<'_>,
    f: &PaymentFilter,
    limit: i64,
    offset: i64,
) -> StoreResult<(Vec<Payment>, i64)> {
    let (conditions, mut sql) = conditions(f);
    // Every payment, or one status: the count the writes keep (migration 0023; counting
    // 1.5 million payments at L took 43 ms).
    let by_status_only = f.company_id.is_none()
        && f.expert_id.is_none()
        && f.project_id.is_none()
        && f.payout_status.is_none();
    // One party's payments, or theirs of one status: kept per party (migration 0041).
    let party = match (f.company_id, f.expert_id, f.project_id, f.payout_status) {
        (Some(company), None, None, None) => Some(("company:", company)),
        (None, Some(expert), None, None) => Some(("expert:", expert)),
        _ => None,
    };
    let total = if by_status_only {
        tallies::total(Tally::Payments, f.status.map(PaymentStatus::as_str))
    } else if let Some((side, user)) = party {
        let statuses = f.status.map_or(PaymentStatus::ALL.to_vec(), |s| vec![s]);
        let keys = tallies::state_keys(side, &statuses, PaymentStatus::as_str);
        tallies::user_total(Tally::PaymentsByParty, user, &keys)
    } else {
        listing::count_rows("payments y", &conditions, &sql)
    };
    let total = total.read(ex.re()).await?;
    let filter = listing::where_clause(&conditions);
    let (limit, offset) = (sql.arg(limit), sql.arg(offset));
    let items = sql
        .with_text(&format!(
            "{} {filter} ORDER BY y.id DESC LIMIT {limit} OFFSET {offset}",
            select_payments!()
        ))
        .fetch_all(ex)
        .await?;
    Ok((items, total))
}

/// A held payment captured before its authorisation lapsed: no expiry to watch any more.
pub async fn mark_captured_early(
    ex: Exec<'_>,
    id: i64,
    metadata: &Value,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    changed!(
        ex,
        sqlx::query(
            "UPDATE payments SET capture_before = NULL, payment_metadata = $1, updated_at = $2
             WHERE id = $3 AND status IN ('held', 'disputed')",
        )
        .bind(Json(metadata))
        .bind(now)
        .bind(id)
    )
}

/// `held` → `failed`: the authorisation lapsed or was cancelled at the processor before
/// capture, so there is no money left to release.
pub async fn fail_held(
    ex: Exec<'_>,
    id: i64,
    reason: &str,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    changed!(
        ex,
        sqlx::query(
            "UPDATE payments SET status = 'failed', failure_reason = $1, updated_at = $2
             WHERE id = $3 AND status = 'held'",
        )
        .bind(reason)
        .bind(now)
        .bind(id)
    )
}
