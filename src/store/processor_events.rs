//! The processor's webhook events, stored by their id before anything is applied: a
//! repeated delivery finds its id taken and changes nothing (DESIGN §4).

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;

use super::{Exec, StoreResult};
use crate::on_exec;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StoredEvent {
    pub id: String,
    #[sqlx(rename = "type")]
    pub kind: String,
    pub payload: Json<Value>,
    pub payment_id: Option<i64>,
    pub received_at: DateTime<Utc>,
    pub processed_at: Option<DateTime<Utc>>,
    pub error: Option<String>,
}

macro_rules! select_events {
    ($rest:expr) => {
        concat!(
            "SELECT id, type, payload, payment_id, received_at, processed_at, error ",
            "FROM processor_events ",
            $rest
        )
    };
}

/// A processor event as received, before it is stored.
#[derive(Debug, Clone)]
pub struct NewEvent {
    pub id: String,
    pub kind: String,
    pub payload: Value,
    /// When the processor created it (the event's `created`).
    pub created: Option<DateTime<Utc>>,
}

/// Stores, in one statement, each of `events` whose id is not known yet; answers the ids
/// stored now. An id twice in `events` is stored once (and answered once).
pub async fn insert_all_new(
    ex: Exec<'_>,
    events: &[NewEvent],
    now: DateTime<Utc>,
) -> StoreResult<Vec<String>> {
    if events.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "INSERT INTO processor_events (id, type, payload, processor_created_at, received_at)
         VALUES {} ON CONFLICT (id) DO NOTHING RETURNING id",
        super::value_rows(1, super::list_len(events.len()), 5)
    );
    Ok(on_exec!(ex, c => {
        // Placeholders only: the values are bound.
        let mut query = sqlx::query_scalar(sqlx::AssertSqlSafe(sql.as_str()));
        for event in super::padded(events) {
            query = query
                .bind(event.id.as_str())
                .bind(event.kind.as_str())
                .bind(Json(&event.payload))
                .bind(event.created)
                .bind(now);
        }
        query.fetch_all(c).await
    })?)
}

/// Marks the event applied (once: only while it is not). `error` keeps why an event changed
/// nothing when that is worth knowing; the event is not retried.
pub async fn mark_processed(
    ex: Exec<'_>,
    id: &str,
    payment_id: Option<i64>,
    error: Option<&str>,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let done = on_exec!(ex, c => sqlx::query(
        "UPDATE processor_events SET processed_at = $1, payment_id = $2, error = $3
         WHERE id = $4 AND processed_at IS NULL",
    )
    .bind(now)
    .bind(payment_id)
    .bind(error)
    .bind(id)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}

/// Which of the events `ids` are applied already.
pub async fn processed_among(ex: Exec<'_>, ids: &[&str]) -> StoreResult<Vec<String>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT id FROM processor_events WHERE processed_at IS NOT NULL AND id IN ({})",
        super::placeholders(1, super::list_len(ids.len()))
    );
    Ok(on_exec!(ex, c => {
        let mut query = sqlx::query_scalar(sqlx::AssertSqlSafe(sql.as_str()));
        for id in super::padded(ids) {
            query = query.bind(*id);
        }
        query.fetch_all(c).await
    })?)
}

/// Marks the events `claims` (each with the payment it concerns) applied, in one statement,
/// before their effects are written in the same transaction; answers the ids marked now.
/// An event marked already (applied meanwhile elsewhere) is left as it is and not answered.
pub async fn claim_all(
    ex: Exec<'_>,
    claims: &[(&str, i64)],
    now: DateTime<Utc>,
) -> StoreResult<Vec<String>> {
    if claims.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "UPDATE processor_events SET processed_at = $1, payment_id = v.column2
         FROM (VALUES {}) AS v
         WHERE processor_events.id = v.column1 AND processor_events.processed_at IS NULL
         RETURNING processor_events.id",
        super::value_rows(2, super::list_len(claims.len()), 2)
    );
    Ok(on_exec!(ex, c => {
        // Placeholders only: the values are bound.
        let mut query = sqlx::query_scalar(sqlx::AssertSqlSafe(sql.as_str())).bind(now);
        for (event_id, payment_id) in super::padded(claims) {
            query = query.bind(*event_id).bind(*payment_id);
        }
        query.fetch_all(c).await
    })?)
}

/// Keeps, on claimed events that changed nothing worth knowing why, the reason (`notes`:
/// event id and reason), in one statement.
pub async fn note_all(ex: Exec<'_>, notes: &[(&str, &str)]) -> StoreResult<()> {
    if notes.is_empty() {
        return Ok(());
    }
    let sql = format!(
        "UPDATE processor_events SET error = v.column2
         FROM (VALUES {}) AS v
         WHERE processor_events.id = v.column1",
        super::value_rows(1, super::list_len(notes.len()), 2)
    );
    on_exec!(ex, c => {
        // Placeholders only: the values are bound.
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql.as_str()));
        for (event_id, note) in super::padded(notes) {
            query = query.bind(*event_id).bind(*note);
        }
        query.execute(c).await.map(drop)
    })?;
    Ok(())
}

/// Events received before `before` and not applied yet, oldest first.
pub async fn unprocessed(
    ex: Exec<'_>,
    before: DateTime<Utc>,
    limit: i64,
) -> StoreResult<Vec<StoredEvent>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, StoredEvent>(select_events!(
        "WHERE processed_at IS NULL AND received_at <= $1 ORDER BY received_at, id LIMIT $2"
    ))
    .bind(before)
    .bind(limit)
    .fetch_all(c)
    .await)?,
    )
}

/// How many stored events are not applied yet, and when the oldest of them arrived: what an
/// operator is alerted on (`idx_processor_events_unprocessed` answers both).
pub async fn unapplied(ex: Exec<'_>) -> StoreResult<(i64, Option<DateTime<Utc>>)> {
    Ok(on_exec!(ex, c => sqlx::query_as(
        "SELECT COUNT(*), MIN(received_at) FROM processor_events WHERE processed_at IS NULL"
    )
    .fetch_one(c)
    .await)?)
}
