//! Stored notifications, one row per recipient. A notification produced by an event carries
//! the event's id: `UNIQUE (user_id, type, event_id)` plus `ON CONFLICT DO NOTHING` make a
//! replayed event store nothing twice. Notifications written without an event (`event_id`
//! NULL) are never deduplicated.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;

use super::{Exec, StoreResult};
use crate::on_exec;

/// A notification as stored.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Notification {
    pub id: i64,
    pub user_id: i64,
    #[sqlx(rename = "type")]
    pub kind: String,
    pub title: String,
    pub message: String,
    pub data: Json<Value>,
    pub is_read: bool,
    pub read_at: Option<DateTime<Utc>>,
    pub event_id: Option<i64>,
    pub created_at: DateTime<Utc>,
}

/// `SELECT <notification columns> FROM notifications <filter>` as one static string.
macro_rules! select_notifications {
    ($filter:literal) => {
        concat!(
            "SELECT id, user_id, type, title, message, data, is_read, read_at, event_id, ",
            "created_at FROM notifications ",
            $filter
        )
    };
}

/// What is stored for one recipient.
#[derive(Debug, Clone)]
pub struct NewNotification<'a> {
    pub user_id: i64,
    /// The notification type (`payment_held`, `EXPERT_PAYOUT_PAID`, `test`, …).
    pub kind: &'a str,
    pub title: &'a str,
    pub message: &'a str,
    pub data: &'a Value,
    /// The event that produced it; `None` for notifications written directly.
    pub event_id: Option<i64>,
}

/// Stores a notification; `None` when it already exists for this `(user, type, event)` or
/// when the user no longer exists (a deleted recipient is skipped, not an error).
pub async fn insert(
    ex: Exec<'_>,
    n: &NewNotification<'_>,
    now: DateTime<Utc>,
) -> StoreResult<Option<i64>> {
    Ok(insert_all(ex, std::slice::from_ref(n), now)
        .await?
        .first()
        .map(|stored| stored.id))
}

/// A notification [`insert_all`] stored.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Stored {
    pub id: i64,
    pub user_id: i64,
    #[sqlx(rename = "type")]
    pub kind: String,
    pub event_id: Option<i64>,
}

/// Stores notifications in one statement (atomic without a transaction); those already
/// stored for their `(user, type, event)` and those of users that no longer exist are left
/// out of the answer, in no particular order.
pub async fn insert_all(
    ex: Exec<'_>,
    all: &[NewNotification<'_>],
    now: DateTime<Utc>,
) -> StoreResult<Vec<Stored>> {
    if all.is_empty() {
        return Ok(Vec::new());
    }
    // The WHERE clause also lets SQLite parse `ON CONFLICT` after an `INSERT … SELECT`.
    let sql = format!(
        "INSERT INTO notifications (user_id, type, title, message, data, is_read, event_id, created_at)
         SELECT v.column1, v.column2, v.column3, v.column4, v.column5, FALSE, v.column6, $1
         FROM (VALUES {}) AS v
         WHERE EXISTS (SELECT 1 FROM users WHERE users.id = v.column1)
         ON CONFLICT DO NOTHING RETURNING id, user_id, type, event_id",
        super::value_rows(2, all.len(), 6)
    );
    Ok(on_exec!(ex, c => {
        // Placeholders only: the values are bound.
        let mut query = sqlx::query_as::<_, Stored>(sqlx::AssertSqlSafe(sql.as_str())).bind(now);
        for n in all {
            query = query
                .bind(n.user_id)
                .bind(n.kind)
                .bind(n.title)
                .bind(n.message)
                .bind(Json(n.data))
                .bind(n.event_id);
        }
        query.fetch_all(c).await
    })?)
}

/// One notification of `user_id` (another user's is not found).
pub async fn find_for_user(
    ex: Exec<'_>,
    user_id: i64,
    id: i64,
) -> StoreResult<Option<Notification>> {
    Ok(on_exec!(ex, c => sqlx::query_as::<_, Notification>(
        select_notifications!("WHERE id = $1 AND user_id = $2"),
    )
    .bind(id)
    .bind(user_id)
    .fetch_optional(c)
    .await)?)
}

/// A page of the user's notifications, newest first, and the total matching: the user's
/// counts kept by migration 0020's triggers, never a count of their rows.
pub async fn list_for_user(
    mut ex: Exec<'_>,
    user_id: i64,
    unread_only: bool,
    limit: i64,
    offset: i64,
) -> StoreResult<(Vec<Notification>, i64)> {
    let items = on_exec!(ex.re(), c => sqlx::query_as::<_, Notification>(
        select_notifications!(
            "WHERE user_id = $1 AND ($2 = FALSE OR is_read = FALSE)
             ORDER BY created_at DESC, id DESC LIMIT $3 OFFSET $4"
        ),
    )
    .bind(user_id)
    .bind(unread_only)
    .bind(limit)
    .bind(offset)
    .fetch_all(c)
    .await)?;
    let (total, unread) = counts(ex, user_id).await?;
    Ok((items, if unread_only { unread } else { total }))
}

/// Marks one of the user's notifications read. `false` when it is not the user's (or does not
/// exist); marking an already read one again keeps its first `read_at` and answers `true`.
pub async fn mark_read(
    ex: Exec<'_>,
    user_id: i64,
    id: i64,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let rows = on_exec!(ex, c => sqlx::query(
        "UPDATE notifications SET is_read = TRUE, read_at = COALESCE(read_at, $3)
         WHERE id = $1 AND user_id = $2",
    )
    .bind(id)
    .bind(user_id)
    .bind(now)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(rows == 1)
}

/// Marks every unread notification of the user read; how many changed.
pub async fn mark_all_read(ex: Exec<'_>, user_id: i64, now: DateTime<Utc>) -> StoreResult<i64> {
    let rows = on_exec!(ex, c => sqlx::query(
        "UPDATE notifications SET is_read = TRUE, read_at = $2
         WHERE user_id = $1 AND is_read = FALSE",
    )
    .bind(user_id)
    .bind(now)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(i64::try_from(rows).unwrap_or(i64::MAX))
}

pub async fn unread_count(ex: Exec<'_>, user_id: i64) -> StoreResult<i64> {
    Ok(counts(ex, user_id).await?.1)
}

/// The user's notifications, all and unread, as the triggers keep them.
async fn counts(ex: Exec<'_>, user_id: i64) -> StoreResult<(i64, i64)> {
    let counts: Option<(i64, i64)> = on_exec!(ex, c => sqlx::query_as(
        "SELECT total, unread FROM notification_counts WHERE user_id = $1",
    )
    .bind(user_id)
    .fetch_optional(c)
    .await)?;
    Ok(counts.unwrap_or((0, 0)))
}

/// Ids of the active administrators (users holding the `admin` role), for fan-out.
pub async fn administrator_ids(ex: Exec<'_>) -> StoreResult<Vec<i64>> {
    Ok(on_exec!(ex, c => sqlx::query_scalar(
        "SELECT u.id FROM users u JOIN user_roles r ON r.user_id = u.id
         WHERE r.role = 'admin' AND u.is_active = TRUE ORDER BY u.id",
    )
    .fetch_all(c)
    .await)?)
}

/// Deletes at most `limit` notifications read before `before`; how many.
pub async fn prune_read(ex: Exec<'_>, before: DateTime<Utc>, limit: i64) -> StoreResult<u64> {
    Ok(on_exec!(ex, c => sqlx::query(
        "DELETE FROM notifications WHERE id IN (
             SELECT id FROM notifications WHERE is_read = TRUE AND read_at < $1
             ORDER BY read_at LIMIT $2)",
    )
    .bind(before)
    .bind(limit)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?)
}
