//! The events outbox (DESIGN §4): a transition writes its domain events in the same
//! transaction as its state change; the dispatcher delivers them afterwards.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;

use super::queue::{Claimed, Done, Failures, Queue, Table};
use super::{Exec, StoreResult};
use crate::domain::backoff::Backoff;
use crate::on_exec;

/// A stored domain event.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Event {
    pub id: i64,
    pub kind: String,
    pub aggregate: String,
    pub aggregate_id: Option<i64>,
    pub payload: Json<Value>,
    pub created_at: DateTime<Utc>,
    pub available_at: DateTime<Utc>,
    pub attempts: i64,
}

impl Claimed for Event {
    fn id(&self) -> i64 {
        self.id
    }
}

/// The wait before an event some consumer failed on is dispatched again: 1 s, doubling, at
/// most an hour.
pub const RETRY: Backoff = Backoff::Exponential {
    first: chrono::Duration::seconds(1),
    factor: 2,
    max: chrono::Duration::hours(1),
};

/// The outbox as a leased queue: events due oldest first, stamped `dispatched_at` once every
/// consumer handled them.
pub static OUTBOX: Queue<Event> = Queue::new(Table {
    name: "events",
    due: "available_at",
    pending: Some("dispatched_at IS NULL"),
    order: "id",
    columns: "id, kind, aggregate, aggregate_id, payload, created_at, available_at, attempts",
    done: Some(Done::Stamped("dispatched_at")),
    failures: Some(Failures {
        attempts: "attempts",
        last_error: "last_error",
        backoff: RETRY,
    }),
});

/// What a transition records; `kind` names it (`payment.held`, `user.registered`, …).
#[derive(Debug, Clone)]
pub struct NewEvent<'a> {
    pub kind: &'a str,
    pub aggregate: &'a str,
    pub aggregate_id: Option<i64>,
    pub payload: Value,
}

impl<'a> NewEvent<'a> {
    /// An event of user `user_id`'s account (aggregate `user`).
    pub fn of_user(kind: &'a str, user_id: i64, payload: Value) -> Self {
        Self {
            kind,
            aggregate: "user",
            aggregate_id: Some(user_id),
            payload,
        }
    }
}

/// Writes an event; it is delivered only if the surrounding transaction commits.
pub async fn record(mut ex: Exec<'_>, event: NewEvent<'_>, now: DateTime<Utc>) -> StoreResult<i64> {
    let id: i64 = on_exec!(ex.re(), c => sqlx::query_scalar(
        "INSERT INTO events (kind, aggregate, aggregate_id, payload, created_at, available_at, attempts)
         VALUES ($1, $2, $3, $4, $5, $5, 0) RETURNING id",
    )
    .bind(event.kind)
    .bind(event.aggregate)
    .bind(event.aggregate_id)
    .bind(Json(&event.payload))
    .bind(now)
    .fetch_one(c)
    .await)?;
    Ok(id)
}

/// Writes events in one statement, in the order given (their ids increase in that order).
pub async fn record_all(
    ex: Exec<'_>,
    events: &[NewEvent<'_>],
    now: DateTime<Utc>,
) -> StoreResult<()> {
    if events.is_empty() {
        return Ok(());
    }
    // Selected from `VALUES` (column1, … on both engines) in the order of their position; the
    // list is padded to a power of two with rows the statement leaves out (no position), so a
    // handful of texts stay prepared whatever the number of events (`super::list_len`).
    let sql = format!(
        "INSERT INTO events (kind, aggregate, aggregate_id, payload, created_at, available_at, attempts)
         SELECT v.column2, v.column3, v.column4, v.column5, $1, $1, 0 FROM (VALUES {}) AS v
         WHERE v.column1 IS NOT NULL ORDER BY v.column1",
        super::value_rows(2, super::list_len(events.len()), 5)
    );
    on_exec!(ex, c => {
        // Placeholders only: the values are bound.
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql.as_str())).bind(now);
        for position in 0..super::list_len(events.len()) {
            let event = events.get(position);
            query = query
                .bind(event.map(|_| position as i64))
                .bind(event.map(|e| e.kind))
                .bind(event.map(|e| e.aggregate))
                .bind(event.and_then(|e| e.aggregate_id))
                .bind(event.map(|e| Json(&e.payload)));
        }
        query.execute(c).await.map(|_| ())
    })?;
    Ok(())
}

/// The consumers that already handled events with ids in `first..=last` (only events some
/// consumer failed on have any): `(event id, consumer)`.
pub async fn delivered_between(
    ex: Exec<'_>,
    first: i64,
    last: i64,
) -> StoreResult<Vec<(i64, String)>> {
    Ok(on_exec!(ex, c => sqlx::query_as(
        "SELECT event_id, consumer FROM event_deliveries WHERE event_id BETWEEN $1 AND $2",
    )
    .bind(first)
    .bind(last)
    .fetch_all(c)
    .await)?)
}

pub async fn mark_delivered(
    ex: Exec<'_>,
    event_id: i64,
    consumer: &str,
    now: DateTime<Utc>,
) -> StoreResult<()> {
    on_exec!(ex, c => sqlx::query(
        "INSERT INTO event_deliveries (event_id, consumer, delivered_at) VALUES ($1, $2, $3)
         ON CONFLICT DO NOTHING",
    )
    .bind(event_id)
    .bind(consumer)
    .bind(now)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(())
}

/// How many events of `kind` were recorded for one aggregate.
pub async fn count_of(
    ex: Exec<'_>,
    kind: &str,
    aggregate: &str,
    aggregate_id: i64,
) -> StoreResult<i64> {
    Ok(on_exec!(ex, c => sqlx::query_scalar(
        "SELECT COUNT(*) FROM events WHERE kind = $1 AND aggregate = $2 AND aggregate_id = $3",
    )
    .bind(kind)
    .bind(aggregate)
    .bind(aggregate_id)
    .fetch_one(c)
    .await)?)
}

/// Deletes up to `limit` of the oldest events created before `before` that every consumer
/// has had (`dispatched_at`) and whose e-mails are all sent; how many.
pub async fn prune_dispatched(ex: Exec<'_>, before: DateTime<Utc>, limit: i64) -> StoreResult<u64> {
    Ok(on_exec!(ex, c => sqlx::query(
        "DELETE FROM events WHERE id IN (
             SELECT e.id FROM events e
              WHERE e.dispatched_at IS NOT NULL AND e.created_at < $1
                AND NOT EXISTS (SELECT 1 FROM mail_queue q
                                 WHERE q.event_id = e.id AND q.sent_at IS NULL)
              ORDER BY e.created_at LIMIT $2)",
    )
    .bind(before)
    .bind(limit)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?)
}
