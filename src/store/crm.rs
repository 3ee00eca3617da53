//! CRM synchronisation records: the sync log, inbound CRM webhooks, the contact state the
//! CRM reports, opportunities, and the user facts a contact is derived from.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;

use super::listing::{self, Keyed, ListQuery, Order, Seek, Sql};
use super::queue::{Claimed, Done, Queue, Table};
use super::{Exec, StoreResult};
use crate::domain::crm::{ProfileFacts, SyncStatus, UserFacts};
use crate::domain::cursor::Cursor;
use crate::on_exec;

#[derive(sqlx::FromRow)]
struct UserRow {
    id: i64,
    email: String,
    username: String,
    crm_id: Option<String>,
    accept_marketing: bool,
    source: Option<String>,
    deletion_requested_at: Option<DateTime<Utc>>,
    deletion_confirmed_at: Option<DateTime<Utc>>,
}

#[derive(sqlx::FromRow)]
struct ProfileRow {
    profile_type: String,
    expert_level: String,
    full_name: Option<String>,
    phone: Option<String>,
    location: Option<String>,
    company_name: Option<String>,
    company_website: Option<String>,
    contact_person: Option<String>,
    company_type: Option<String>,
    industry: Option<String>,
    company_size: Option<String>,
    preferred_language: Option<String>,
    company_email: Option<String>,
    main_area: Option<String>,
    work_language: Option<String>,
    experience_years: Option<i64>,
    portfolio_url: Option<String>,
    linkedin_url: Option<String>,
    hourly_rate_minor: Option<i64>,
    internal_rating: Option<f64>,
}

/// The user as the CRM sees it; `None` when no such user.
pub async fn user_facts(mut ex: Exec<'_>, user_id: i64) -> StoreResult<Option<UserFacts>> {
    let row: Option<UserRow> = on_exec!(ex.re(), c => sqlx::query_as(
        "SELECT id, email, username, crm_id, accept_marketing, source, deletion_requested_at,
                deletion_confirmed_at
         FROM users WHERE id = $1",
    )
    .bind(user_id)
    .fetch_optional(c)
    .await)?;
    let Some(row) = row else { return Ok(None) };
    let roles: Vec<String> = on_exec!(ex.re(), c => sqlx::query_scalar(
        "SELECT role FROM user_roles WHERE user_id = $1 AND role <> 'admin' ORDER BY created_at, role",
    )
    .bind(user_id)
    .fetch_all(c)
    .await)?;
    let profiles: Vec<ProfileRow> = on_exec!(ex, c => sqlx::query_as(
        "SELECT profile_type, expert_level, full_name, phone, location, company_name,
                company_website, contact_person, company_type, industry, company_size,
                preferred_language, company_email, main_area, work_language, experience_years,
                portfolio_url, linkedin_url, hourly_rate_minor, internal_rating
         FROM profiles WHERE user_id = $1 AND profile_type <> 'admin' ORDER BY id",
    )
    .bind(user_id)
    .fetch_all(c)
    .await)?;
    Ok(Some(UserFacts {
        user_id: row.id,
        email: row.email,
        username: row.username,
        roles,
        accept_marketing: row.accept_marketing,
        source: row.source,
        crm_id: row.crm_id,
        deletion_requested: row.deletion_requested_at.is_some(),
        deletion_confirmed: row.deletion_confirmed_at.is_some(),
        profiles: profiles
            .into_iter()
            .map(|p| ProfileFacts {
                profile_type: p.profile_type,
                expert_level: p.expert_level,
                full_name: p.full_name,
                phone: p.phone,
                location: p.location,
                company_name: p.company_name,
                company_website: p.company_website,
                contact_person: p.contact_person,
                company_type: p.company_type,
                industry: p.industry,
                company_size: p.company_size,
                preferred_language: p.preferred_language,
                company_email: p.company_email,
                main_area: p.main_area,
                work_language: p.work_language,
                experience_years: p.experience_years,
                portfolio_url: p.portfolio_url,
                linkedin_url: p.linkedin_url,
                hourly_rate_minor: p.hourly_rate_minor,
                internal_rating: p.internal_rating,
            })
            .collect(),
    }))
}

/// Links an unlinked user to a contact (a user keeps the first contact linked). A contact
/// linked to another user is a unique violation the caller reports.
pub async fn link_contact(
    ex: Exec<'_>,
    user_id: i64,
    contact_id: &str,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let done = on_exec!(ex, c => sqlx::query(
        "UPDATE users SET crm_id = $1, updated_at = $2
         WHERE id = $3 AND crm_id IS NULL",
    )
    .bind(contact_id)
    .bind(now)
    .bind(user_id)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}

pub async fn user_by_contact(ex: Exec<'_>, contact_id: &str) -> StoreResult<Option<i64>> {
    Ok(
        on_exec!(ex, c => sqlx::query_scalar("SELECT id FROM users WHERE crm_id = $1")
        .bind(contact_id)
        .fetch_optional(c)
        .await)?,
    )
}

pub async fn user_by_email(ex: Exec<'_>, email: &str) -> StoreResult<Option<i64>> {
    Ok(
        on_exec!(ex, c => sqlx::query_scalar("SELECT id FROM users WHERE email = $1")
        .bind(email.to_lowercase())
        .fetch_optional(c)
        .await)?,
    )
}

/// Marketing consent off (the contact asked the CRM for no e-mail).
pub async fn withdraw_marketing(
    ex: Exec<'_>,
    user_id: i64,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let done = on_exec!(ex, c => sqlx::query(
        "UPDATE users SET accept_marketing = FALSE, updated_at = $1
         WHERE id = $2 AND accept_marketing = TRUE",
    )
    .bind(now)
    .bind(user_id)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}

/// The project an opportunity is about: title, budget (minor units), company.
pub async fn project_brief(
    ex: Exec<'_>,
    project_id: i64,
) -> StoreResult<Option<(String, i64, Option<i64>)>> {
    Ok(on_exec!(ex, c => sqlx::query_as(
        "SELECT title, budget_minor, company_id FROM projects WHERE id = $1",
    )
    .bind(project_id)
    .fetch_optional(c)
    .await)?)
}

// ------------------------------------------------------------------------------------------
// Sync log
// ------------------------------------------------------------------------------------------

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SyncEntry {
    pub id: i64,
    pub user_id: Option<i64>,
    pub crm_contact_id: Option<String>,
    pub event_type: String,
    pub status: SyncStatus,
    pub payload: Json<Value>,
    pub response: Option<Json<Value>>,
    pub response_status: Option<i64>,
    pub error: Option<String>,
    pub retry_count: i64,
    pub exhausted_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// The columns of [`SyncEntry`].
macro_rules! entry_columns {
    () => {
        concat!(
            "id, user_id, crm_contact_id, event_type, status, payload, response, ",
            "response_status, error, retry_count, exhausted_at, created_at, updated_at"
        )
    };
}

/// `SELECT <entry columns> FROM crm_sync_log <rest>` as one static string.
macro_rules! select_entries {
    ($rest:literal) => {
        concat!("SELECT ", entry_columns!(), " FROM crm_sync_log ", $rest)
    };
}

/// What one CRM call did.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub status: SyncStatus,
    pub crm_contact_id: Option<String>,
    pub response: Option<Value>,
    pub response_status: Option<i64>,
    pub error: Option<String>,
}

/// Writes an entry; a user deleted meanwhile is recorded as none (the entry outlives them).
pub async fn insert_log(
    ex: Exec<'_>,
    user_id: Option<i64>,
    event_type: &str,
    payload: &Value,
    outcome: &Outcome,
    now: DateTime<Utc>,
) -> StoreResult<i64> {
    Ok(on_exec!(ex, c => sqlx::query_scalar(
        "INSERT INTO crm_sync_log (user_id, crm_contact_id, event_type, status, payload, response,
                                   response_status, error, retry_count, created_at, updated_at)
         VALUES ((SELECT id FROM users WHERE id = $1), $2, $3, $4, $5, $6, $7, $8, 0, $9, $9)
         RETURNING id",
    )
    .bind(user_id)
    .bind(outcome.crm_contact_id.as_deref())
    .bind(event_type)
    .bind(outcome.status)
    .bind(Json(payload))
    .bind(outcome.response.as_ref().map(Json))
    .bind(outcome.response_status)
    .bind(outcome.error.as_deref())
    .bind(now)
    .fetch_one(c)
    .await)?)
}

/// Records a retry of a failed entry: counted, and marked exhausted when `exhausted`. A
/// conditional update: only a still-failed entry with the expected count moves, so two
/// schedulers (instances) never count one attempt twice.
pub async fn record_retry(
    ex: Exec<'_>,
    entry: &SyncEntry,
    outcome: &Outcome,
    exhausted: bool,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let done = on_exec!(ex, c => sqlx::query(
        "UPDATE crm_sync_log SET status = $1, crm_contact_id = COALESCE($2, crm_contact_id),
                response = $3, response_status = $4, error = $5, retry_count = retry_count + 1,
                exhausted_at = $6, updated_at = $7
         WHERE id = $8 AND status = 'failed' AND retry_count = $9 AND exhausted_at IS NULL",
    )
    .bind(outcome.status)
    .bind(outcome.crm_contact_id.as_deref())
    .bind(outcome.response.as_ref().map(Json))
    .bind(outcome.response_status)
    .bind(outcome.error.as_deref())
    .bind(exhausted.then_some(now))
    .bind(now)
    .bind(entry.id)
    .bind(entry.retry_count)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}

/// Failed entries not given up on, oldest first.
pub async fn due_failed(ex: Exec<'_>, limit: i64) -> StoreResult<Vec<SyncEntry>> {
    Ok(on_exec!(ex, c => sqlx::query_as(select_entries!(
        "WHERE status = 'failed' AND exhausted_at IS NULL ORDER BY created_at, id LIMIT $1"
    ))
    .bind(limit)
    .fetch_all(c)
    .await)?)
}

pub async fn find_log(ex: Exec<'_>, id: i64) -> StoreResult<Option<SyncEntry>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as(select_entries!("WHERE id = $1"))
    .bind(id)
    .fetch_optional(c)
    .await)?,
    )
}

/// Filters of the sync-log list.
#[derive(Debug, Clone, Default)]
pub struct LogFilter {
    pub user_id: Option<i64>,
    pub event_type: Option<String>,
    pub status: Option<SyncStatus>,
    pub contact_id: Option<String>,
}

/// The conditions of the filters `f` has, their values bound.
fn log_conditions(f: &LogFilter) -> (Vec<String>, Sql) {
    let mut sql = Sql::default();
    let mut filter = Vec::new();
    if let Some(user) = f.user_id {
        filter.push(format!("user_id = {}", sql.arg(user)));
    }
    if let Some(kind) = &f.event_type {
        filter.push(format!("event_type = {}", sql.arg(kind.as_str())));
    }
    if let Some(status) = f.status {
        filter.push(format!("status = {}", sql.arg(status.as_str())));
    }
    if let Some(contact) = &f.contact_id {
        filter.push(format!("crm_contact_id = {}", sql.arg(contact.as_str())));
    }
    (filter, sql)
}

impl Keyed for SyncEntry {
    fn cursor(&self) -> Cursor {
        Cursor {
            rank: 0,
            at: self.created_at,
            id: self.id,
        }
    }
}

/// A page (from 1) of entries, newest first, and the total.
pub async fn list_logs(
    ex: Exec<'_>,
    f: &LogFilter,
    page: i64,
    size: i64,
) -> StoreResult<(Vec<SyncEntry>, i64)> {
    let (filter, args) = log_conditions(f);
    let query = ListQuery {
        columns: entry_columns!().to_owned(),
        from: "crm_sync_log",
        total: listing::count_rows("crm_sync_log", &filter, &args),
        filter,
        args,
        order: Order::newest("created_at", "id"),
    };
    let (window, total) = query.run(ex, Seek::Page(page), size).await?;
    Ok((window.items, total))
}

/// The contact id the sync log last recorded for a user.
pub async fn contact_from_log(ex: Exec<'_>, user_id: i64) -> StoreResult<Option<String>> {
    Ok(on_exec!(ex, c => sqlx::query_scalar(
        "SELECT crm_contact_id FROM crm_sync_log
         WHERE user_id = $1 AND crm_contact_id IS NOT NULL ORDER BY created_at DESC, id DESC LIMIT 1",
    )
    .bind(user_id)
    .fetch_optional(c)
    .await)?)
}

/// Statuses of the last `n` entries.
pub async fn recent_statuses(ex: Exec<'_>, n: i64) -> StoreResult<Vec<SyncStatus>> {
    Ok(on_exec!(ex, c => sqlx::query_scalar(
        "SELECT status FROM crm_sync_log ORDER BY created_at DESC, id DESC LIMIT $1",
    )
    .bind(n)
    .fetch_all(c)
    .await)?)
}

/// When the last successful sync happened.
pub async fn last_success(ex: Exec<'_>) -> StoreResult<Option<DateTime<Utc>>> {
    Ok(on_exec!(ex, c => sqlx::query_scalar(
        "SELECT updated_at FROM crm_sync_log WHERE status = 'success' ORDER BY updated_at DESC LIMIT 1",
    )
    .fetch_optional(c)
    .await)?)
}

/// Users linked to a contact, most recently updated first (health check samples).
pub async fn linked_users(ex: Exec<'_>, n: i64) -> StoreResult<Vec<i64>> {
    Ok(on_exec!(ex, c => sqlx::query_scalar(
        "SELECT id FROM users WHERE crm_id IS NOT NULL ORDER BY updated_at DESC, id DESC LIMIT $1",
    )
    .bind(n)
    .fetch_all(c)
    .await)?)
}

// ------------------------------------------------------------------------------------------
// Inbound webhooks, contact state, opportunities
// ------------------------------------------------------------------------------------------

/// Stores an inbound event by its `webhookId`; false when it was stored already.
pub async fn insert_webhook(
    ex: Exec<'_>,
    webhook_id: &str,
    event_type: &str,
    location_id: Option<&str>,
    contact_id: Option<&str>,
    payload: &Value,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let done = on_exec!(ex, c => sqlx::query(
        "INSERT INTO crm_webhook_events (webhook_id, event_type, location_id, contact_id, payload, received_at)
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (webhook_id) DO NOTHING",
    )
    .bind(webhook_id)
    .bind(event_type)
    .bind(location_id)
    .bind(contact_id)
    .bind(Json(payload))
    .bind(now)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}

/// Marks a stored event processed with its outcome; false when it was already.
pub async fn finish_webhook(
    ex: Exec<'_>,
    webhook_id: &str,
    outcome: &str,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let done = on_exec!(ex, c => sqlx::query(
        "UPDATE crm_webhook_events SET processed_at = $1, outcome = $2
         WHERE webhook_id = $3 AND processed_at IS NULL",
    )
    .bind(now)
    .bind(outcome)
    .bind(webhook_id)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}

/// Stored events not applied yet, received before `before` (a crash between storing and
/// applying), oldest first.
pub async fn unprocessed_webhooks(
    ex: Exec<'_>,
    before: DateTime<Utc>,
    limit: i64,
) -> StoreResult<Vec<(String, Json<Value>)>> {
    Ok(on_exec!(ex, c => sqlx::query_as(
        "SELECT webhook_id, payload FROM crm_webhook_events
         WHERE processed_at IS NULL AND received_at < $1 ORDER BY received_at LIMIT $2",
    )
    .bind(before)
    .bind(limit)
    .fetch_all(c)
    .await)?)
}

/// Event types received since `since`, with counts.
pub async fn webhook_types_since(
    ex: Exec<'_>,
    since: DateTime<Utc>,
) -> StoreResult<Vec<(String, i64)>> {
    Ok(on_exec!(ex, c => sqlx::query_as(
        "SELECT event_type, COUNT(*) FROM crm_webhook_events WHERE received_at >= $1
         GROUP BY event_type ORDER BY event_type",
    )
    .bind(since)
    .fetch_all(c)
    .await)?)
}

/// What the CRM last reported about a contact.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ContactState {
    pub contact_id: String,
    pub user_id: Option<i64>,
    pub tags: Option<Json<Vec<String>>>,
    pub email_dnd: bool,
    pub updated_at: DateTime<Utc>,
}

/// Records reported tags (when given) and e-mail DND (when given) of a contact.
pub async fn save_contact_state(
    ex: Exec<'_>,
    contact_id: &str,
    user_id: Option<i64>,
    tags: Option<&[String]>,
    email_dnd: Option<bool>,
    now: DateTime<Utc>,
) -> StoreResult<()> {
    on_exec!(ex, c => sqlx::query(
        "INSERT INTO crm_contacts (contact_id, user_id, tags, email_dnd, updated_at)
         VALUES ($1, $2, $3, COALESCE($4, FALSE), $5)
         ON CONFLICT (contact_id) DO UPDATE SET
            user_id = COALESCE(excluded.user_id, crm_contacts.user_id),
            tags = COALESCE(excluded.tags, crm_contacts.tags),
            email_dnd = COALESCE($4, crm_contacts.email_dnd),
            updated_at = excluded.updated_at",
    )
    .bind(contact_id)
    .bind(user_id)
    .bind(tags.map(Json))
    .bind(email_dnd)
    .bind(now)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(())
}

pub async fn contact_state(ex: Exec<'_>, contact_id: &str) -> StoreResult<Option<ContactState>> {
    Ok(on_exec!(ex, c => sqlx::query_as(
        "SELECT contact_id, user_id, tags, email_dnd, updated_at FROM crm_contacts WHERE contact_id = $1",
    )
    .bind(contact_id)
    .fetch_optional(c)
    .await)?)
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct OpportunityRecord {
    pub id: String,
    pub contact_id: Option<String>,
    pub user_id: Option<i64>,
    pub project_id: Option<i64>,
    pub name: Option<String>,
    pub status: String,
    pub monetary_value_minor: Option<i64>,
    pub pipeline_id: Option<String>,
    pub pipeline_stage_id: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Inserts or updates an opportunity; absent values keep what is stored.
pub async fn save_opportunity(ex: Exec<'_>, o: &OpportunityRecord) -> StoreResult<()> {
    on_exec!(ex, c => sqlx::query(
        "INSERT INTO crm_opportunities (id, contact_id, user_id, project_id, name, status,
                monetary_value_minor, pipeline_id, pipeline_stage_id, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
         ON CONFLICT (id) DO UPDATE SET
            contact_id = COALESCE(excluded.contact_id, crm_opportunities.contact_id),
            user_id = COALESCE(excluded.user_id, crm_opportunities.user_id),
            project_id = COALESCE(excluded.project_id, crm_opportunities.project_id),
            name = COALESCE(excluded.name, crm_opportunities.name),
            status = excluded.status,
            monetary_value_minor = COALESCE(excluded.monetary_value_minor, crm_opportunities.monetary_value_minor),
            pipeline_id = COALESCE(excluded.pipeline_id, crm_opportunities.pipeline_id),
            pipeline_stage_id = COALESCE(excluded.pipeline_stage_id, crm_opportunities.pipeline_stage_id),
            updated_at = excluded.updated_at",
    )
    .bind(&o.id)
    .bind(o.contact_id.as_deref())
    .bind(o.user_id)
    .bind(o.project_id)
    .bind(o.name.as_deref())
    .bind(&o.status)
    .bind(o.monetary_value_minor)
    .bind(o.pipeline_id.as_deref())
    .bind(o.pipeline_stage_id.as_deref())
    .bind(o.created_at)
    .bind(o.updated_at)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(())
}

pub async fn opportunities_of_contact(
    ex: Exec<'_>,
    contact_id: &str,
) -> StoreResult<Vec<OpportunityRecord>> {
    Ok(on_exec!(ex, c => sqlx::query_as(
        "SELECT id, contact_id, user_id, project_id, name, status, monetary_value_minor,
                pipeline_id, pipeline_stage_id, created_at, updated_at
         FROM crm_opportunities WHERE contact_id = $1 ORDER BY created_at DESC, id",
    )
    .bind(contact_id)
    .fetch_all(c)
    .await)?)
}

// ------------------------------------------------------------------------------------------
// The CRM queue
// ------------------------------------------------------------------------------------------

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct QueueItem {
    pub id: i64,
    pub user_id: Option<i64>,
    pub op: Json<Value>,
    pub available_at: DateTime<Utc>,
}

impl Claimed for QueueItem {
    fn id(&self) -> i64 {
        self.id
    }
}

/// The queue: syncs due in the order they were recorded, deleted once performed. A sync that
/// fails is logged in the sync log (for the retry scheduler), not retried here.
pub static QUEUE: Queue<QueueItem> = Queue::new(Table {
    name: "crm_queue",
    due: "available_at",
    pending: None,
    order: "id",
    columns: "id, user_id, op, available_at",
    done: Some(Done::Deleted),
    failures: None,
});

/// Records a sync to perform; once per outbox event (false when recorded already).
pub async fn enqueue(
    ex: Exec<'_>,
    event_id: Option<i64>,
    user_id: Option<i64>,
    op: &Value,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let done = on_exec!(ex, c => sqlx::query(
        "INSERT INTO crm_queue (event_id, user_id, op, available_at, created_at)
         VALUES ($1, $2, $3, $4, $4) ON CONFLICT (event_id) DO NOTHING",
    )
    .bind(event_id)
    .bind(user_id)
    .bind(Json(op))
    .bind(now)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}

/// Deletes up to `limit` of the oldest sync log entries created before `before`, except those
/// the retry scheduler still owes a try and each user's newest entry naming their contact (the
/// contact's id falls back on it); how many.
pub async fn prune_log(ex: Exec<'_>, before: DateTime<Utc>, limit: i64) -> StoreResult<u64> {
    Ok(on_exec!(ex, c => sqlx::query(
        "DELETE FROM crm_sync_log WHERE id IN (
             SELECT l.id FROM crm_sync_log l
              WHERE l.created_at < $1
                AND NOT (l.status = 'failed' AND l.exhausted_at IS NULL)
                AND (l.user_id IS NULL OR l.crm_contact_id IS NULL
                     OR EXISTS (SELECT 1 FROM crm_sync_log n
                                 WHERE n.user_id = l.user_id AND n.crm_contact_id IS NOT NULL
                                   AND (n.created_at > l.created_at
                                        OR (n.created_at = l.created_at AND n.id > l.id))))
              ORDER BY l.created_at LIMIT $2)",
    )
    .bind(before)
    .bind(limit)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?)
}
