//! Outgoing user webhook deliveries: one row per (event, user, type), its attempts and its
//! state, so retries survive a restart; and the endpoint's run of failures in
//! `webhook_configs.failing_since`.

use chrono::{DateTime, Utc};

use super::listing::{self, Sql};
use super::queue::{Claimed, Queue, Table};
use super::{Exec, StoreResult};
use crate::domain::webhook_rules::WebhookDeliveryState;
use crate::on_exec;

/// A delivery as its owner's log shows it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Delivery {
    pub id: i64,
    pub message_id: String,
    pub user_id: i64,
    pub event_id: Option<i64>,
    pub event_type: String,
    pub body: String,
    pub state: WebhookDeliveryState,
    pub attempts: i64,
    pub failures: i64,
    pub last_status_code: Option<i64>,
    pub last_error: Option<String>,
    pub last_attempt_at: Option<DateTime<Utc>>,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub delivered_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl Claimed for Delivery {
    fn id(&self) -> i64 {
        self.id
    }
}

/// The deliveries as a leased queue, for the lease only. Which delivery may go depends on its
/// endpoint (enabled, with a URL: [`due`] joins `webhook_configs`) and on room for its host in
/// this instance, so the dispatcher picks deliveries one by one and claims each with
/// [`Queue::claim_row`]; an attempt's outcome moves the delivery's state, its run of failures
/// and its endpoint's together ([`record_attempt`]), not the engine's done and failed marks.
pub static QUEUE: Queue<Delivery> = Queue::new(Table {
    name: "webhook_deliveries",
    due: "next_attempt_at",
    pending: Some("state = 'pending'"),
    order: "next_attempt_at, id",
    columns: "id, message_id, user_id, event_id, event_type, body, state, attempts, failures, \
              last_status_code, last_error, last_attempt_at, next_attempt_at, delivered_at, \
              created_at, updated_at",
    done: None,
    failures: None,
});

macro_rules! select_deliveries {
    ($filter:literal) => {
        concat!(
            "SELECT id, message_id, user_id, event_id, event_type, body, state, attempts, ",
            "failures, last_status_code, last_error, last_attempt_at, next_attempt_at, ",
            "delivered_at, created_at, updated_at FROM webhook_deliveries ",
            $filter
        )
    };
}

/// What the consumer writes for one recipient.
#[derive(Debug, Clone)]
pub struct NewDelivery<'a> {
    pub message_id: &'a str,
    pub user_id: i64,
    pub event_id: Option<i64>,
    pub event_type: &'a str,
    pub body: &'a str,
    /// `pending` (due at once) or `failed`/`delivered` for a test sent on the spot.
    pub state: WebhookDeliveryState,
}

/// Stores a delivery; `None` when its `message_id` exists already (a replayed event).
pub async fn insert(
    ex: Exec<'_>,
    d: &NewDelivery<'_>,
    now: DateTime<Utc>,
) -> StoreResult<Option<i64>> {
    let next = (d.state == WebhookDeliveryState::Pending).then_some(now);
    Ok(on_exec!(ex, c => sqlx::query_scalar::<_, i64>(
        "INSERT INTO webhook_deliveries (message_id, user_id, event_id, event_type, body, state,
             attempts, failures, next_attempt_at, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, 0, 0, $7, $8, $8)
         ON CONFLICT (message_id) DO NOTHING RETURNING id",
    )
    .bind(d.message_id)
    .bind(d.user_id)
    .bind(d.event_id)
    .bind(d.event_type)
    .bind(d.body)
    .bind(d.state)
    .bind(next)
    .bind(now)
    .fetch_optional(c)
    .await)?)
}

/// A due delivery with its endpoint's configuration.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Due {
    pub id: i64,
    pub message_id: String,
    pub user_id: i64,
    pub event_type: String,
    pub body: String,
    pub failures: i64,
    pub next_attempt_at: DateTime<Utc>,
    pub url: String,
    pub auth_method: String,
    pub secret: String,
}

/// Pending deliveries due by `now` whose endpoint is enabled, oldest first, past the first
/// `skip` (those a dispatcher pass left waiting).
pub async fn due(ex: Exec<'_>, now: DateTime<Utc>, limit: i64, skip: i64) -> StoreResult<Vec<Due>> {
    Ok(on_exec!(ex, c => sqlx::query_as::<_, Due>(
        "SELECT d.id, d.message_id, d.user_id, d.event_type, d.body, d.failures,
                d.next_attempt_at, w.url, w.auth_method, w.secret
         FROM webhook_deliveries d JOIN webhook_configs w ON w.user_id = d.user_id
         WHERE d.state = 'pending' AND d.next_attempt_at <= $1
           AND w.enabled = TRUE AND w.url IS NOT NULL
         ORDER BY d.next_attempt_at, d.id LIMIT $2 OFFSET $3",
    )
    .bind(now)
    .bind(limit)
    .bind(skip)
    .fetch_all(c)
    .await)?)
}

/// When the next pending delivery of an enabled endpoint is due.
pub async fn next_due_at(ex: Exec<'_>) -> StoreResult<Option<DateTime<Utc>>> {
    Ok(
        on_exec!(ex, c => sqlx::query_scalar::<_, Option<DateTime<Utc>>>(
        "SELECT MIN(d.next_attempt_at) FROM webhook_deliveries d
         JOIN webhook_configs w ON w.user_id = d.user_id
         WHERE d.state = 'pending' AND w.enabled = TRUE AND w.url IS NOT NULL",
    )
    .fetch_one(c)
    .await)?,
    )
}

/// The outcome of one attempt.
#[derive(Debug, Clone)]
pub struct Attempt<'a> {
    pub status_code: Option<i64>,
    pub error: Option<&'a str>,
    /// `delivered`, `pending` (retry at `next_attempt_at`) or `failed`.
    pub state: WebhookDeliveryState,
    pub next_attempt_at: Option<DateTime<Utc>>,
}

pub async fn record_attempt(
    ex: Exec<'_>,
    id: i64,
    a: &Attempt<'_>,
    now: DateTime<Utc>,
) -> StoreResult<()> {
    let delivered = a.state == WebhookDeliveryState::Delivered;
    on_exec!(ex, c => sqlx::query(
        "UPDATE webhook_deliveries SET attempts = attempts + 1,
             failures = CASE WHEN $1 THEN 0 ELSE failures + 1 END,
             state = $2, last_status_code = $3, last_error = $4, last_attempt_at = $5,
             next_attempt_at = $6, delivered_at = CASE WHEN $1 THEN $5 ELSE delivered_at END,
             updated_at = $5
         WHERE id = $7",
    )
    .bind(delivered)
    .bind(a.state)
    .bind(a.status_code)
    .bind(a.error)
    .bind(now)
    .bind(a.next_attempt_at)
    .bind(id)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(())
}

/// A user's deliveries, newest first.
pub async fn list_for_user(
    ex: Exec<'_>,
    user_id: i64,
    limit: i64,
    offset: i64,
) -> StoreResult<Vec<Delivery>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, Delivery>(select_deliveries!(
        "WHERE user_id = $1 ORDER BY id DESC LIMIT $2 OFFSET $3"
    ))
    .bind(user_id)
    .bind(limit)
    .bind(offset)
    .fetch_all(c)
    .await)?,
    )
}

pub async fn count_for_user(ex: Exec<'_>, user_id: i64) -> StoreResult<i64> {
    Ok(on_exec!(ex, c => sqlx::query_scalar::<_, i64>(
        "SELECT COUNT(*) FROM webhook_deliveries WHERE user_id = $1",
    )
    .bind(user_id)
    .fetch_one(c)
    .await)?)
}

/// One of a user's deliveries (`None` for another user's).
pub async fn find_for_user(ex: Exec<'_>, id: i64, user_id: i64) -> StoreResult<Option<Delivery>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, Delivery>(select_deliveries!(
        "WHERE id = $1 AND user_id = $2"
    ))
    .bind(id)
    .bind(user_id)
    .fetch_optional(c)
    .await)?,
    )
}

/// Makes a delivery due now again, with the same message id and body.
pub async fn requeue(ex: Exec<'_>, id: i64, user_id: i64, now: DateTime<Utc>) -> StoreResult<bool> {
    let n = on_exec!(ex, c => sqlx::query(
        "UPDATE webhook_deliveries SET state = 'pending', failures = 0, next_attempt_at = $1,
             updated_at = $1
         WHERE id = $2 AND user_id = $3",
    )
    .bind(now)
    .bind(id)
    .bind(user_id)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(n == 1)
}

/// Marks every pending delivery of a disabled endpoint `disabled`.
pub async fn disable_pending(ex: Exec<'_>, user_id: i64, now: DateTime<Utc>) -> StoreResult<u64> {
    Ok(on_exec!(ex, c => sqlx::query(
        "UPDATE webhook_deliveries SET state = 'disabled', next_attempt_at = NULL, updated_at = $1
         WHERE user_id = $2 AND state = 'pending'",
    )
    .bind(now)
    .bind(user_id)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?)
}

/// Notes a failed attempt on the endpoint; answers since when it has been failing.
pub async fn endpoint_failed(
    ex: Exec<'_>,
    user_id: i64,
    now: DateTime<Utc>,
) -> StoreResult<Option<DateTime<Utc>>> {
    let mut ex = ex;
    on_exec!(ex.re(), c => sqlx::query(
        "UPDATE webhook_configs SET failing_since = COALESCE(failing_since, $1) WHERE user_id = $2",
    )
    .bind(now)
    .bind(user_id)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(
        on_exec!(ex, c => sqlx::query_scalar::<_, Option<DateTime<Utc>>>(
        "SELECT failing_since FROM webhook_configs WHERE user_id = $1",
    )
    .bind(user_id)
    .fetch_optional(c)
    .await)?
        .flatten(),
    )
}

/// A success ends the endpoint's run of failures.
pub async fn endpoint_succeeded(ex: Exec<'_>, user_id: i64) -> StoreResult<()> {
    on_exec!(ex, c => sqlx::query(
        "UPDATE webhook_configs SET failing_since = NULL
         WHERE user_id = $1 AND failing_since IS NOT NULL",
    )
    .bind(user_id)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(())
}

/// Disables an enabled endpoint; `false` when it was not enabled (another instance did it).
pub async fn disable_endpoint(ex: Exec<'_>, user_id: i64, now: DateTime<Utc>) -> StoreResult<bool> {
    let n = on_exec!(ex, c => sqlx::query(
        "UPDATE webhook_configs SET enabled = FALSE, failing_since = NULL, updated_at = $1
         WHERE user_id = $2 AND enabled = TRUE",
    )
    .bind(now)
    .bind(user_id)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(n == 1)
}

/// Which of a user's events a catch-up reads (`GET /api/users/me/events`): those recorded
/// after the row `after`, of `event_type`, recorded at or after `since`. Test deliveries are
/// not events.
#[derive(Debug, Clone, Copy)]
pub struct FeedFilter<'a> {
    pub user_id: i64,
    pub after: Option<i64>,
    pub event_type: Option<&'a str>,
    pub since: Option<DateTime<Utc>>,
}

/// The conditions of the filters `f` has, their values bound, as a `WHERE`.
fn feed_where(f: FeedFilter<'_>) -> (String, Sql) {
    let mut sql = Sql::default();
    let mut filter = vec![
        format!("user_id = {}", sql.arg(f.user_id)),
        "event_id IS NOT NULL".to_owned(),
    ];
    if let Some(after) = f.after {
        filter.push(format!("id > {}", sql.arg(after)));
    }
    if let Some(kind) = f.event_type {
        filter.push(format!("event_type = {}", sql.arg(kind)));
    }
    if let Some(since) = f.since {
        filter.push(format!("created_at >= {}", sql.arg(since)));
    }
    (listing::where_clause(&filter), sql)
}

/// The bodies of a user's events as the filter picks them, oldest first: each exactly the
/// body its webhook carries (`{id, type, created_at, data}`). (Oldest first is no
/// `listing::Order`: the page is read by offset, its filter assembled all the same.)
pub async fn feed(
    ex: Exec<'_>,
    f: FeedFilter<'_>,
    limit: i64,
    offset: i64,
) -> StoreResult<Vec<String>> {
    let (filter, mut sql) = feed_where(f);
    let (limit, offset) = (sql.arg(limit), sql.arg(offset));
    let bodies: Vec<(String,)> = sql
        .with_text(&format!(
            "SELECT body FROM webhook_deliveries {filter} ORDER BY id LIMIT {limit} OFFSET {offset}"
        ))
        .fetch_all(ex)
        .await?;
    Ok(bodies.into_iter().map(|(body,)| body).collect())
}

pub async fn feed_count(ex: Exec<'_>, f: FeedFilter<'_>) -> StoreResult<i64> {
    let (filter, sql) = feed_where(f);
    sql.with_text(&format!("SELECT COUNT(*) FROM webhook_deliveries {filter}"))
        .fetch_count(ex)
        .await
}

/// The row of the user's event `message_id` (the `id` its webhook carried).
pub async fn row_of_message(
    ex: Exec<'_>,
    user_id: i64,
    message_id: &str,
) -> StoreResult<Option<i64>> {
    Ok(on_exec!(ex, c => sqlx::query_scalar::<_, i64>(
        "SELECT id FROM webhook_deliveries WHERE user_id = $1 AND message_id = $2",
    )
    .bind(user_id)
    .bind(message_id)
    .fetch_optional(c)
    .await)?)
}

/// Deletes up to `limit` deliveries recorded before `before` that are no longer due (a
/// pending one is kept until it is delivered or gives up); how many.
pub async fn prune(ex: Exec<'_>, before: DateTime<Utc>, limit: i64) -> StoreResult<u64> {
    Ok(on_exec!(ex, c => sqlx::query(
        "DELETE FROM webhook_deliveries WHERE id IN (
             SELECT id FROM webhook_deliveries
             WHERE created_at < $1 AND state <> 'pending' ORDER BY id LIMIT $2)",
    )
    .bind(before)
    .bind(limit)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?)
}
