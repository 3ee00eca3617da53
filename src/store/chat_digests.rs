//! When each participant last got a new-chat-message e-mail for a room: the once-per-window
//! rule, kept by the database so every instance agrees.

use chrono::{DateTime, Utc};

use super::{Exec, StoreResult};
use crate::on_exec;

/// Takes the right to e-mail `user_id` about room `project_id` at `now`: true when no e-mail
/// went out after `window_start`. One conditional upsert, so of two concurrent posts (on any
/// instances) only one wins.
pub async fn claim(
    ex: Exec<'_>,
    project_id: i64,
    user_id: i64,
    now: DateTime<Utc>,
    window_start: DateTime<Utc>,
) -> StoreResult<bool> {
    let done = on_exec!(ex, c => sqlx::query(
        "INSERT INTO chat_email_digests (project_id, user_id, last_sent_at) VALUES ($1, $2, $3)
         ON CONFLICT (project_id, user_id) DO UPDATE SET last_sent_at = excluded.last_sent_at
         WHERE chat_email_digests.last_sent_at <= $4",
    )
    .bind(project_id)
    .bind(user_id)
    .bind(now)
    .bind(window_start)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}
