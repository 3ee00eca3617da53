//! Disputes: raised by a project's company or expert, or opened by the card holder's bank
//! (a chargeback, with `processor_dispute_id`). At most one `open` or `in_review` dispute per
//! project (a partial unique index).

use chrono::{DateTime, Utc};

use super::listing::{self, Keyed, ListQuery, Order, Seek, Sql, Tier, Total};
use super::tallies::{self, Tally};
use super::{Exec, StoreResult};
use crate::domain::cursor::Cursor;
use crate::domain::dispute::DisputeStatus;
use crate::on_exec;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Dispute {
    pub id: i64,
    pub project_id: i64,
    pub payment_id: Option<i64>,
    pub raised_by: Option<i64>,
    pub status: DisputeStatus,
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
    /// Raised by the expert: the company's reply is due by then, or it is escalated.
    pub response_due_at: Option<DateTime<Utc>>,
    /// When it was escalated to the administrators for priority mediation.
    pub escalated_at: Option<DateTime<Utc>>,
}

/// The columns of [`Dispute`], over `disputes d`.
macro_rules! dispute_columns {
    () => {
        concat!(
            "d.id, d.project_id, d.payment_id, d.raised_by, d.status, d.reason, ",
            "d.description, d.title, d.dispute_type, d.priority, d.contact_preference, ",
            "d.evidence, d.requested_resolution, d.resolution, d.resolution_action, ",
            "d.resolved_by, d.resolved_at, d.mediation_notes, d.mediated_by, d.mediated_at, ",
            "d.processor_dispute_id, d.processor_dispute_status, d.evidence_details, ",
            "d.created_at, d.updated_at, d.response_due_at, d.escalated_at"
        )
    };
}

macro_rules! select_disputes {
    ($($rest:expr),* $(,)?) => {
        concat!("SELECT ", dispute_columns!(), " FROM disputes d ", $($rest),*)
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
    from: [DisputeStatus; 2],
    to: DisputeStatus,
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

/// A dispute raised by the project's company or expert.
#[derive(Debug, Clone)]
pub struct NewDispute<'a> {
    pub project_id: i64,
    pub payment_id: Option<i64>,
    pub raised_by: i64,
    pub title: Option<&'a str>,
    pub reason: &'a str,
    pub description: Option<&'a str>,
    pub dispute_type: Option<&'a str>,
    pub priority: Option<&'a str>,
    pub evidence: Option<&'a str>,
    pub requested_resolution: Option<&'a str>,
    pub contact_preference: Option<&'a str>,
}

/// Records an `open` dispute. A unique violation means the project has an active one.
pub async fn insert(ex: Exec<'_>, d: &NewDispute<'_>, now: DateTime<Utc>) -> StoreResult<i64> {
    Ok(on_exec!(ex, conn => sqlx::query_scalar(
        "INSERT INTO disputes (project_id, payment_id, raised_by, status, title, reason,
             description, dispute_type, priority, evidence, requested_resolution,
             contact_preference, created_at, updated_at)
         VALUES ($1, $2, $3, 'open', $4, $5, $6, $7, $8, $9, $10, $11, $12, $12)
         RETURNING id",
    )
    .bind(d.project_id)
    .bind(d.payment_id)
    .bind(d.raised_by)
    .bind(d.title)
    .bind(d.reason)
    .bind(d.description)
    .bind(d.dispute_type)
    .bind(d.priority)
    .bind(d.evidence)
    .bind(d.requested_resolution)
    .bind(d.contact_preference)
    .bind(now)
    .fetch_one(conn)
    .await)?)
}

/// Every dispute of the project, oldest first.
pub async fn of_project(ex: Exec<'_>, project_id: i64) -> StoreResult<Vec<Dispute>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, Dispute>(select_disputes!(
        "WHERE d.project_id = $1 ORDER BY d.created_at, d.id"
    ))
    .bind(project_id)
    .fetch_all(c)
    .await)?,
    )
}

/// The project's most recent dispute, whatever its state.
pub async fn latest_of_project(ex: Exec<'_>, project_id: i64) -> StoreResult<Option<Dispute>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, Dispute>(select_disputes!(
        "WHERE d.project_id = $1 ORDER BY d.created_at DESC, d.id DESC LIMIT 1"
    ))
    .bind(project_id)
    .fetch_optional(c)
    .await)?,
    )
}

/// The administrators' list: filters and order.
#[derive(Debug, Clone, Default)]
pub struct DisputeFilter<'a> {
    pub status: Option<DisputeStatus>,
    /// Matched case-insensitively in the dispute's title, reason and description and the
    /// project's title.
    pub search: Option<&'a str>,
    pub order: DisputeOrder,
}

/// `sort_by` × `sort_order` of the administrators' list (ties broken by creation, same way);
/// statuses sort in lifecycle order (`open`, `in_review`, `resolved`, `closed`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum DisputeOrder {
    #[default]
    CreatedDesc,
    CreatedAsc,
    StatusDesc,
    StatusAsc,
}

/// What the administrators' list reads: disputes with their project (its title is searched).
const LISTED_FROM: &str = "disputes d JOIN projects p ON p.id = d.project_id";

/// Statuses in the order a dispute lives through them.
const STATUS_RANK: &str = "CASE d.status WHEN 'open' THEN 0 WHEN 'in_review' THEN 1 \
     WHEN 'resolved' THEN 2 ELSE 3 END";

/// Each status's rank (as `STATUS_RANK` gives it).
const STATUS_TIERS: [(i64, DisputeStatus); 4] = [
    (0, DisputeStatus::Open),
    (1, DisputeStatus::InReview),
    (2, DisputeStatus::Resolved),
    (3, DisputeStatus::Closed),
];

/// How many disputes in `statuses` pass `filter`: without a search, from the disputes by
/// status the writes keep (`Tally::Disputes`, migration 0036); with one, counted.
fn total(
    f: &DisputeFilter<'_>,
    statuses: &[DisputeStatus],
    filter: &[String],
    args: &Sql,
) -> Total {
    if searched(f).is_some() {
        return listing::count_rows(LISTED_FROM, filter, args);
    }
    let shown: Vec<DisputeStatus> = statuses
        .iter()
        .copied()
        .filter(|s| f.status.is_none_or(|only| only == *s))
        .collect();
    tallies::total_of(Tally::Disputes, |sql| {
        shown.iter().map(|s| sql.arg(s.as_str())).collect()
    })
}

fn searched<'a>(f: &DisputeFilter<'a>) -> Option<&'a str> {
    f.search.map(str::trim).filter(|s| !s.is_empty())
}

/// The conditions of the filters `f` has, their values bound.
fn conditions(f: &DisputeFilter<'_>) -> (Vec<String>, Sql) {
    let mut sql = Sql::default();
    let mut filter = Vec::new();
    if let Some(status) = f.status {
        filter.push(format!("d.status = {}", sql.arg(status.as_str())));
    }
    if let Some(search) = searched(f) {
        let p = sql.arg(format!("%{}%", super::escape_like(&search.to_lowercase())));
        filter.push(format!(
            "(LOWER(COALESCE(d.title, '')) LIKE {p} ESCAPE '\\'
              OR LOWER(d.reason) LIKE {p} ESCAPE '\\'
              OR LOWER(COALESCE(d.description, '')) LIKE {p} ESCAPE '\\'
              OR LOWER(p.title) LIKE {p} ESCAPE '\\')"
        ));
    }
    (filter, sql)
}

/// A dispute as the list reads it, with its status's rank when the list is by status.
#[derive(sqlx::FromRow)]
struct Listed {
    #[sqlx(flatten)]
    dispute: Dispute,
    list_rank: i64,
}

impl Keyed for Listed {
    fn cursor(&self) -> Cursor {
        Cursor {
            rank: self.list_rank,
            at: self.dispute.created_at,
            id: self.dispute.id,
        }
    }
}

/// One page (from 1) of disputes and the total.
pub async fn list(
    ex: Exec<'_>,
    f: &DisputeFilter<'_>,
    page: i64,
    size: i64,
) -> StoreResult<(Vec<Dispute>, i64)> {
    let (filter, args) = conditions(f);
    let all = total(f, &DisputeStatus::ALL, &filter, &args);
    let rank = match f.order {
        DisputeOrder::CreatedDesc => None,
        DisputeOrder::StatusDesc => Some(STATUS_RANK),
        DisputeOrder::CreatedAsc => return oldest(ex, filter, args, all, "", page, size).await,
        DisputeOrder::StatusAsc => {
            let by_status = format!("{STATUS_RANK} ASC, ");
            return oldest(ex, filter, args, all, &by_status, page, size).await;
        }
    };
    // By status: one tier per status, latest in the lifecycle first, each counted but the
    // last (`open`), which holds what the total leaves.
    let tiers = match rank {
        None => Vec::new(),
        Some(_) => STATUS_TIERS
            .iter()
            .rev()
            .map(|&(rank, status)| {
                let condition = format!("d.status = '{}'", status.as_str());
                let mut tier = filter.clone();
                tier.push(condition.clone());
                Tier {
                    rank,
                    condition,
                    total: (rank > 0).then(|| total(f, &[status], &tier, &args)),
                }
            })
            .collect(),
    };
    let query = ListQuery {
        columns: format!(
            "{}, CAST({} AS BIGINT) AS list_rank",
            dispute_columns!(),
            rank.unwrap_or("0")
        ),
        from: LISTED_FROM,
        total: all,
        filter,
        args,
        order: Order {
            tiers,
            ..Order::newest("d.created_at", "d.id")
        },
    };
    let (window, total) = query.run::<Listed>(ex, Seek::Page(page), size).await?;
    Ok((window.items.into_iter().map(|l| l.dispute).collect(), total))
}

/// A page of the list oldest first (after `first`, an order that comes before creation),
/// read by offset: no `listing::Order` reads oldest first.
async fn oldest(
    mut ex: Exec<'_>,
    filter: Vec<String>,
    mut sql: Sql,
    total: Total,
    first: &str,
    page: i64,
    size: i64,
) -> StoreResult<(Vec<Dispute>, i64)> {
    let filter = listing::where_clause(&filter);
    let total = total.read(ex.re()).await?;
    let offset = sql.arg((page - 1).saturating_mul(size));
    let limit = sql.arg(size);
    let items = sql
        .with_text(&format!(
            "SELECT {} FROM {LISTED_FROM} {filter}
             ORDER BY {first}d.created_at ASC, d.id ASC LIMIT {limit} OFFSET {offset}",
            dispute_columns!()
        ))
        .fetch_all(ex)
        .await?;
    Ok((items, total))
}

/// `open` → `in_review` with the mediator's notes.
pub async fn mediate(
    ex: Exec<'_>,
    id: i64,
    admin_id: i64,
    notes: &str,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let done = on_exec!(ex, conn => sqlx::query(
        "UPDATE disputes SET status = 'in_review', mediation_notes = $1, mediated_by = $2,
             mediated_at = $3, updated_at = $3
         WHERE id = $4 AND status = 'open'",
    )
    .bind(notes)
    .bind(admin_id)
    .bind(now)
    .bind(id)
    .execute(conn)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}

/// Claims the decision of an `open` or `in_review` dispute for `action` before any money
/// moves, so a second decision (another instance, or a restarted actor) cannot move it the
/// other way; the same action may claim again (a retry finishing what it began, after a
/// crash or a processor failure), another action not while the dispute is open.
pub async fn claim_decision(
    ex: Exec<'_>,
    id: i64,
    action: &str,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let done = on_exec!(ex, conn => sqlx::query(
        "UPDATE disputes SET resolution_action = $1, updated_at = $2
         WHERE id = $3 AND status IN ('open', 'in_review')
           AND (resolution_action IS NULL OR resolution_action = $1)",
    )
    .bind(action)
    .bind(now)
    .bind(id)
    .execute(conn)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}

/// `open` or `in_review` → `resolved` by an administrator.
pub async fn resolve(
    ex: Exec<'_>,
    id: i64,
    admin_id: i64,
    resolution: &str,
    action: &str,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let done = on_exec!(ex, conn => sqlx::query(
        "UPDATE disputes SET status = 'resolved', resolution = $1, resolution_action = $2,
             resolved_by = $3, resolved_at = $4, updated_at = $4
         WHERE id = $5 AND status IN ('open', 'in_review')",
    )
    .bind(resolution)
    .bind(action)
    .bind(admin_id)
    .bind(now)
    .bind(id)
    .execute(conn)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}
