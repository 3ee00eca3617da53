//! The events outbox (DESIGN §4): a transition writes its domain events in the same
//! transaction as its state change; the dispatcher delivers them afterwards.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;

use super::{Exec, StoreResult};
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

/// What a transition records; `kind` names it (`payment.held`, `user.registered`, …).
#[derive(Debug, Clone)]
pub struct NewEvent<'a> {
    pub kind: &'a str,
    pub aggregate: &'a str,
    pub aggregate_id: Option<i64>,
    pub payload: Value,
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
    // Selected from `VALUES` (column1, … on both engines), in the order given.
    let sql = format!(
        "INSERT INTO events (kind, aggregate, aggregate_id, payload, created_at, available_at, attempts)
         SELECT v.column1, v.column2, v.column3, v.column4, $1, $1, 0 FROM (VALUES {}) AS v",
        super::value_rows(2, events.len(), 4)
    );
    on_exec!(ex, c => {
        // Placeholders only: the values are bound.
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql.as_str())).bind(now);
        for event in events {
            query = query
                .bind(event.kind)
                .bind(event.aggregate)
                .bind(event.aggregate_id)
                .bind(Json(&event.payload));
        }
        query.execute(c).await.map(|_| ())
    })?;
    Ok(())
}

/// Claims up to `limit` due events, oldest first, until `lease_until`, in one statement. The
/// update checks again that each event is due, so of several dispatchers (other instances)
/// exactly one claims each attempt.
pub async fn claim_due(
    ex: Exec<'_>,
    now: DateTime<Utc>,
    lease_until: DateTime<Utc>,
    limit: i64,
) -> StoreResult<Vec<Event>> {
    let mut claimed = on_exec!(ex, c => sqlx::query_as::<_, Event>(
        "UPDATE events SET available_at = $1
         WHERE id IN (SELECT id FROM events WHERE dispatched_at IS NULL AND available_at <= $2
                      ORDER BY id LIMIT $3)
           AND dispatched_at IS NULL AND available_at <= $2
         RETURNING id, kind, aggregate, aggregate_id, payload, created_at, available_at, attempts",
    )
    .bind(lease_until)
    .bind(now)
    .bind(limit)
    .fetch_all(c)
    .await)?;
    claimed.sort_by_key(|e| e.id);
    Ok(claimed)
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

/// Marks the events every consumer handled, in one statement.
pub async fn mark_dispatched(
    ex: Exec<'_>,
    event_ids: &[i64],
    now: DateTime<Utc>,
) -> StoreResult<()> {
    if event_ids.is_empty() {
        return Ok(());
    }
    let sql = format!(
        "UPDATE events SET dispatched_at = $1 WHERE id IN ({})",
        super::placeholders(2, super::list_len(event_ids.len()))
    );
    on_exec!(ex, c => {
        // Placeholders only: the values are bound.
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql.as_str())).bind(now);
        for id in super::padded(event_ids) {
            query = query.bind(*id);
        }
        query.execute(c).await.map(|r| r.rows_affected())
    })?;
    Ok(())
}

/// Records a failed attempt and when to try again.
pub async fn mark_failed(
    ex: Exec<'_>,
    event_id: i64,
    error: &str,
    retry_at: DateTime<Utc>,
) -> StoreResult<()> {
    on_exec!(ex, c => sqlx::query(
        "UPDATE events SET attempts = attempts + 1, last_error = $1, available_at = $2 WHERE id = $3",
    )
    .bind(error)
    .bind(retry_at)
    .bind(event_id)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(())
}

/// Number of events still waiting, for `/metrics`.
pub async fn pending_count(ex: Exec<'_>) -> StoreResult<i64> {
    Ok(on_exec!(ex, c => sqlx::query_scalar(
        "SELECT COUNT(*) FROM events WHERE dispatched_at IS NULL",
    )
    .fetch_one(c)
    .await)?)
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
