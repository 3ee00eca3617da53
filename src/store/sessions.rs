//! Login sessions: one row per refresh token family, rotated in place.

use chrono::{DateTime, Utc};

use super::{Exec, StoreResult};
use crate::on_exec;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Session {
    pub id: i64,
    pub user_id: i64,
    pub client_session_id: Option<String>,
    pub created_at: DateTime<Utc>,
    pub last_used_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
    pub revoked_reason: Option<String>,
}

macro_rules! select_sessions {
    ($filter:literal) => {
        concat!(
            "SELECT id, user_id, client_session_id, created_at, last_used_at, expires_at, ",
            "revoked_at, revoked_reason FROM auth_sessions ",
            $filter
        )
    };
}

pub struct NewSession<'a> {
    pub user_id: i64,
    pub client_session_id: &'a str,
    pub refresh_token_hash: &'a str,
    pub expires_at: DateTime<Utc>,
    pub user_agent: Option<&'a str>,
    pub ip_address: Option<&'a str>,
}

pub async fn insert(ex: Exec<'_>, s: &NewSession<'_>, now: DateTime<Utc>) -> StoreResult<i64> {
    Ok(on_exec!(ex, c => sqlx::query_scalar(
        "INSERT INTO auth_sessions (user_id, client_session_id, refresh_token_hash, created_at,
                                    last_used_at, expires_at, user_agent, ip_address)
         VALUES ($1, $2, $3, $4, $4, $5, $6, $7) RETURNING id",
    )
    .bind(s.user_id)
    .bind(s.client_session_id)
    .bind(s.refresh_token_hash)
    .bind(now)
    .bind(s.expires_at)
    .bind(s.user_agent)
    .bind(s.ip_address)
    .fetch_one(c)
    .await)?)
}

pub async fn find(ex: Exec<'_>, id: i64) -> StoreResult<Option<Session>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, Session>(select_sessions!("WHERE id = $1"))
        .bind(id)
        .fetch_optional(c)
        .await)?,
    )
}

pub async fn find_by_refresh_hash(ex: Exec<'_>, hash: &str) -> StoreResult<Option<Session>> {
    Ok(on_exec!(ex, c => sqlx::query_as::<_, Session>(
        select_sessions!("WHERE refresh_token_hash = $1"),
    )
    .bind(hash)
    .fetch_optional(c)
    .await)?)
}

/// Replaces the refresh token of a live session, only if `old_hash` is still its current
/// one: of two refreshes racing with the same token, exactly one wins.
pub async fn rotate(
    ex: Exec<'_>,
    id: i64,
    old_hash: &str,
    new_hash: &str,
    expires_at: DateTime<Utc>,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let rows = on_exec!(ex, c => sqlx::query(
        "UPDATE auth_sessions SET refresh_token_hash = $1, expires_at = $2, last_used_at = $3
         WHERE id = $4 AND refresh_token_hash = $5 AND revoked_at IS NULL AND expires_at > $3",
    )
    .bind(new_hash)
    .bind(expires_at)
    .bind(now)
    .bind(id)
    .bind(old_hash)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(rows == 1)
}

pub async fn revoke(ex: Exec<'_>, id: i64, reason: &str, now: DateTime<Utc>) -> StoreResult<bool> {
    let rows = on_exec!(ex, c => sqlx::query(
        "UPDATE auth_sessions SET revoked_at = $1, revoked_reason = $2 WHERE id = $3 AND revoked_at IS NULL",
    )
    .bind(now)
    .bind(reason)
    .bind(id)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(rows == 1)
}

/// Revokes every live session of a user except `keep` (password change or reset).
pub async fn revoke_all_of_user(
    ex: Exec<'_>,
    user_id: i64,
    keep: Option<i64>,
    reason: &str,
    now: DateTime<Utc>,
) -> StoreResult<u64> {
    Ok(on_exec!(ex, c => sqlx::query(
        "UPDATE auth_sessions SET revoked_at = $1, revoked_reason = $2
         WHERE user_id = $3 AND revoked_at IS NULL AND id <> $4",
    )
    .bind(now)
    .bind(reason)
    .bind(user_id)
    .bind(keep.unwrap_or(-1))
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?)
}

/// Live sessions of a user, oldest first.
pub async fn live_of_user(
    ex: Exec<'_>,
    user_id: i64,
    now: DateTime<Utc>,
) -> StoreResult<Vec<Session>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, Session>(select_sessions!(
        "WHERE user_id = $1 AND revoked_at IS NULL AND expires_at > $2 ORDER BY created_at, id"
    ))
    .bind(user_id)
    .bind(now)
    .fetch_all(c)
    .await)?,
    )
}
