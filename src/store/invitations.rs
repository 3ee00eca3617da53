//! Admin invitations; the token is kept only as a hash.

use chrono::{DateTime, Utc};

use super::{Exec, StoreResult};
use crate::domain::user::InvitationStatus;
use crate::on_exec;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Invitation {
    pub id: i64,
    pub email: String,
    pub invited_by: Option<i64>,
    pub inviter_username: Option<String>,
    pub message: Option<String>,
    pub expires_at: DateTime<Utc>,
    pub used: bool,
    pub used_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

macro_rules! select_invitations {
    ($filter:literal) => {
        concat!(
            "SELECT i.id, i.email, i.invited_by, u.username AS inviter_username, i.message, ",
            "i.expires_at, i.used, i.used_at, i.created_at ",
            "FROM admin_invitations i LEFT JOIN users u ON u.id = i.invited_by ",
            $filter
        )
    };
}

pub struct NewInvitation<'a> {
    pub email: &'a str,
    pub invited_by: i64,
    pub message: Option<&'a str>,
    pub token_hash: &'a str,
    pub expires_at: DateTime<Utc>,
}

pub async fn insert(ex: Exec<'_>, new: &NewInvitation<'_>, now: DateTime<Utc>) -> StoreResult<i64> {
    Ok(on_exec!(ex, c => sqlx::query_scalar(
        "INSERT INTO admin_invitations (email, invited_by, message, token_hash, expires_at, used, created_at)
         VALUES ($1, $2, $3, $4, $5, FALSE, $6) RETURNING id",
    )
    .bind(new.email)
    .bind(new.invited_by)
    .bind(new.message)
    .bind(new.token_hash)
    .bind(new.expires_at)
    .bind(now)
    .fetch_one(c)
    .await)?)
}

pub async fn find(ex: Exec<'_>, id: i64) -> StoreResult<Option<Invitation>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, Invitation>(select_invitations!("WHERE i.id = $1"))
        .bind(id)
        .fetch_optional(c)
        .await)?,
    )
}

pub async fn find_by_token_hash(ex: Exec<'_>, hash: &str) -> StoreResult<Option<Invitation>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, Invitation>(select_invitations!("WHERE i.token_hash = $1"))
        .bind(hash)
        .fetch_optional(c)
        .await)?,
    )
}

/// Spends the invitation once: true only for the caller that marked it. Concurrent accepts
/// queue on the row, and all but the first find it used.
pub async fn claim(ex: Exec<'_>, id: i64, now: DateTime<Utc>) -> StoreResult<bool> {
    let rows = on_exec!(ex, c => sqlx::query(
        "UPDATE admin_invitations SET used = TRUE, used_at = $1
         WHERE id = $2 AND used = FALSE AND expires_at > $1",
    )
    .bind(now)
    .bind(id)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(rows == 1)
}

/// Records which account a claimed invitation created.
pub async fn set_used_by(ex: Exec<'_>, id: i64, user_id: i64) -> StoreResult<()> {
    on_exec!(ex, c => sqlx::query("UPDATE admin_invitations SET used_by = $1 WHERE id = $2")
        .bind(user_id)
        .bind(id)
        .execute(c)
        .await
        .map(|_| ()))?;
    Ok(())
}

pub async fn delete(ex: Exec<'_>, id: i64) -> StoreResult<bool> {
    let rows = on_exec!(ex, c => sqlx::query("DELETE FROM admin_invitations WHERE id = $1")
        .bind(id)
        .execute(c)
        .await
        .map(|r| r.rows_affected()))?;
    Ok(rows == 1)
}

/// One page of invitations, newest first, with the total that matched.
pub async fn list(
    mut ex: Exec<'_>,
    status: Option<InvitationStatus>,
    search: Option<&str>,
    now: DateTime<Utc>,
    limit: i64,
    offset: i64,
) -> StoreResult<(Vec<Invitation>, i64)> {
    // One static text for every filter: each condition switches itself off by its flag.
    const FILTER: &str = "WHERE ($1 = 'all'
            OR ($1 = 'pending' AND i.used = FALSE AND i.expires_at > $2)
            OR ($1 = 'used' AND i.used = TRUE)
            OR ($1 = 'expired' AND i.used = FALSE AND i.expires_at <= $2))
          AND ($3 = '' OR LOWER(i.email) LIKE $3 ESCAPE '\\')";
    let status = status.map_or("all", InvitationStatus::as_str);
    let pattern = search
        .map(|s| format!("%{}%", super::escape_like(&s.trim().to_lowercase())))
        .filter(|p| p != "%%")
        .unwrap_or_default();
    let items = on_exec!(ex.re(), c => sqlx::query_as::<_, Invitation>(sqlx::AssertSqlSafe(format!(
        "{} {FILTER} ORDER BY i.created_at DESC, i.id DESC LIMIT $4 OFFSET $5",
        select_invitations!("")
    )))
    .bind(status)
    .bind(now)
    .bind(&pattern)
    .bind(limit)
    .bind(offset)
    .fetch_all(c)
    .await)?;
    let total: i64 = on_exec!(ex, c => sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT COUNT(*) FROM admin_invitations i {FILTER}"
    )))
    .bind(status)
    .bind(now)
    .bind(&pattern)
    .fetch_one(c)
    .await)?;
    Ok((items, total))
}
