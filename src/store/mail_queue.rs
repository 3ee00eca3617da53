//! The e-mail queue: the messages the outbox's events ask for, each sent at least once by the
//! mail sender at the mail server's pace (`workflows::emails`).

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;

use super::{Exec, StoreResult};
use crate::on_exec;

/// A message to queue: entry `position` of event `event_id`'s `email` list.
#[derive(Debug, Clone)]
pub struct NewMail<'a> {
    pub event_id: i64,
    pub position: i64,
    pub recipient: &'a str,
    pub template: &'a str,
    pub context: &'a Value,
    /// Names the message on every attempt (the file outbox writes one file per key).
    pub idempotency_key: String,
}

/// A queued message, claimed for sending.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct QueuedMail {
    pub id: i64,
    pub recipient: String,
    pub template: String,
    pub context: Json<Value>,
    pub idempotency_key: String,
    /// Attempts before this one.
    pub attempts: i64,
}

/// Messages written by one statement at most (seven values each, under SQLite's limit on
/// bound values).
const QUEUED_TOGETHER: usize = 1_000;

/// Queues `mails`, due at once. A message queued already (same event and position: the
/// outbox ran the event again after a crash) is left as it is. Answers how many were new.
/// (`WHERE true`: SQLite reads `ON CONFLICT` after a bare `SELECT … FROM` as a join's.)
pub async fn enqueue_all(
    mut ex: Exec<'_>,
    mails: &[NewMail<'_>],
    now: DateTime<Utc>,
) -> StoreResult<u64> {
    let mut queued = 0;
    for chunk in mails.chunks(QUEUED_TOGETHER) {
        let sql = format!(
            "INSERT INTO mail_queue
                 (event_id, position, recipient, template, context, idempotency_key, available_at)
             SELECT v.column1, v.column2, v.column3, v.column4, v.column5, v.column6, $1
             FROM (VALUES {}) AS v WHERE true
             ON CONFLICT (event_id, position) DO NOTHING",
            super::value_rows(2, chunk.len(), 6)
        );
        queued += on_exec!(ex.re(), c => {
            // Placeholders only: the values are bound.
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql.as_str())).bind(now);
            for mail in chunk {
                query = query
                    .bind(mail.event_id)
                    .bind(mail.position)
                    .bind(mail.recipient)
                    .bind(mail.template)
                    .bind(Json(mail.context))
                    .bind(&mail.idempotency_key);
            }
            query.execute(c).await.map(|r| r.rows_affected())
        })?;
    }
    Ok(queued)
}

/// Claims up to `limit` due messages, oldest first, until `lease_until`, in one statement.
/// The update checks again that each is due, so of several senders (other instances)
/// exactly one claims each attempt.
pub async fn claim_due(
    ex: Exec<'_>,
    now: DateTime<Utc>,
    lease_until: DateTime<Utc>,
    limit: i64,
) -> StoreResult<Vec<QueuedMail>> {
    let mut claimed = on_exec!(ex, c => sqlx::query_as::<_, QueuedMail>(
        "UPDATE mail_queue SET available_at = $1
         WHERE id IN (SELECT id FROM mail_queue WHERE sent_at IS NULL AND available_at <= $2
                      ORDER BY available_at, id LIMIT $3)
           AND sent_at IS NULL AND available_at <= $2
         RETURNING id, recipient, template, context, idempotency_key, attempts",
    )
    .bind(lease_until)
    .bind(now)
    .bind(limit)
    .fetch_all(c)
    .await)?;
    claimed.sort_by_key(|m| m.id);
    Ok(claimed)
}

/// Marks messages sent, in one statement.
pub async fn mark_sent(ex: Exec<'_>, ids: &[i64], now: DateTime<Utc>) -> StoreResult<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let sql = format!(
        "UPDATE mail_queue SET sent_at = $1 WHERE id IN ({})",
        super::placeholders(2, super::list_len(ids.len()))
    );
    on_exec!(ex, c => {
        // Placeholders only: the values are bound.
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql.as_str())).bind(now);
        for id in super::padded(ids) {
            query = query.bind(*id);
        }
        query.execute(c).await.map(|r| r.rows_affected())
    })?;
    Ok(())
}

/// Records a failed attempt and when to try again.
pub async fn mark_failed(
    ex: Exec<'_>,
    id: i64,
    error: &str,
    retry_at: DateTime<Utc>,
) -> StoreResult<()> {
    on_exec!(ex, c => sqlx::query(
        "UPDATE mail_queue SET attempts = attempts + 1, last_error = $1, available_at = $2
         WHERE id = $3",
    )
    .bind(error)
    .bind(retry_at)
    .bind(id)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(())
}

/// Messages queued and not sent yet, for `/metrics`.
pub async fn unsent_count(ex: Exec<'_>) -> StoreResult<i64> {
    Ok(on_exec!(ex, c => sqlx::query_scalar(
        "SELECT COUNT(*) FROM mail_queue WHERE sent_at IS NULL",
    )
    .fetch_one(c)
    .await)?)
}
