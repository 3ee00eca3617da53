//! The e-mail queue: the messages the outbox's events ask for, each sent at least once by the
//! mail sender at the mail server's pace (`workflows::emails`).

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;

use super::queue::{Claimed, Done, Failures, Queue, Table};
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

impl Claimed for QueuedMail {
    fn id(&self) -> i64 {
        self.id
    }
}

/// The queue: messages due oldest first, stamped `sent_at` once the mail server took them; a
/// failed message waits as the outbox's events do ([`super::events::RETRY`]).
pub static QUEUE: Queue<QueuedMail> = Queue::new(Table {
    name: "mail_queue",
    due: "available_at",
    pending: Some("sent_at IS NULL"),
    order: "available_at, id",
    columns: "id, recipient, template, context, idempotency_key, attempts",
    done: Some(Done::Stamped("sent_at")),
    failures: Some(Failures {
        attempts: "attempts",
        last_error: "last_error",
        backoff: super::events::RETRY,
    }),
});

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
