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

/// Stores the event unless its id is known. `true` when it is new.
pub async fn insert_new(
    ex: Exec<'_>,
    id: &str,
    kind: &str,
    payload: &Value,
    created: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let done = on_exec!(ex, c => sqlx::query(
        "INSERT INTO processor_events (id, type, payload, received_at, processor_created_at)
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT (id) DO NOTHING",
    )
    .bind(id)
    .bind(kind)
    .bind(Json(payload))
    .bind(now)
    .bind(created)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}

pub async fn find(ex: Exec<'_>, id: &str) -> StoreResult<Option<StoredEvent>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, StoredEvent>(select_events!("WHERE id = $1"))
        .bind(id)
        .fetch_optional(c)
        .await)?,
    )
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
