//! Single-use tokens sent by e-mail (verification, password reset, the undo of an e-mail
//! change), kept only as hashes.

use chrono::{DateTime, Utc};

use super::{Exec, StoreResult};
use crate::on_exec;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Purpose {
    VerifyEmail,
    ResetPassword,
    /// Sent to the previous address of an e-mail change; its `email` is that address.
    UndoEmailChange,
}

impl Purpose {
    fn as_str(self) -> &'static str {
        match self {
            Purpose::VerifyEmail => "verify_email",
            Purpose::ResetPassword => "reset_password",
            Purpose::UndoEmailChange => "undo_email_change",
        }
    }
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct OneTimeToken {
    pub id: i64,
    pub user_id: i64,
    pub email: String,
    pub expires_at: DateTime<Utc>,
    pub used_at: Option<DateTime<Utc>>,
}

pub async fn insert(
    ex: Exec<'_>,
    user_id: i64,
    purpose: Purpose,
    token_hash: &str,
    email: &str,
    expires_at: DateTime<Utc>,
    now: DateTime<Utc>,
) -> StoreResult<()> {
    on_exec!(ex, c => sqlx::query(
        "INSERT INTO one_time_tokens (user_id, purpose, token_hash, email, expires_at, created_at)
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(user_id)
    .bind(purpose.as_str())
    .bind(token_hash)
    .bind(email)
    .bind(expires_at)
    .bind(now)
    .execute(c)
    .await
    .map(|_| ()))?;
    Ok(())
}

pub async fn find(
    ex: Exec<'_>,
    purpose: Purpose,
    token_hash: &str,
) -> StoreResult<Option<OneTimeToken>> {
    Ok(on_exec!(ex, c => sqlx::query_as::<_, OneTimeToken>(
        "SELECT id, user_id, email, expires_at, used_at FROM one_time_tokens
         WHERE token_hash = $1 AND purpose = $2",
    )
    .bind(token_hash)
    .bind(purpose.as_str())
    .fetch_optional(c)
    .await)?)
}

/// Spends a token once: true only for the caller that marked it used.
pub async fn consume(ex: Exec<'_>, id: i64, now: DateTime<Utc>) -> StoreResult<bool> {
    let rows = on_exec!(ex, c => sqlx::query(
        "UPDATE one_time_tokens SET used_at = $1 WHERE id = $2 AND used_at IS NULL AND expires_at > $1",
    )
    .bind(now)
    .bind(id)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(rows == 1)
}

/// Spends every open token of a purpose for a user (a new one replaces them).
pub async fn consume_all(
    ex: Exec<'_>,
    user_id: i64,
    purpose: Purpose,
    now: DateTime<Utc>,
) -> StoreResult<()> {
    on_exec!(ex, c => sqlx::query(
        "UPDATE one_time_tokens SET used_at = $1 WHERE user_id = $2 AND purpose = $3 AND used_at IS NULL",
    )
    .bind(now)
    .bind(user_id)
    .bind(purpose.as_str())
    .execute(c)
    .await
    .map(|_| ()))?;
    Ok(())
}

/// Spends every open verification and reset token of a user: the credentials or the address
/// they were mailed for changed, so a link read in an old mailbox must not work any more.
pub async fn retire_credential_links(
    mut ex: Exec<'_>,
    user_id: i64,
    now: DateTime<Utc>,
) -> StoreResult<()> {
    for purpose in [Purpose::VerifyEmail, Purpose::ResetPassword] {
        consume_all(ex.re(), user_id, purpose, now).await?;
    }
    Ok(())
}

/// Spends the open undo links of a user issued after token `after` (the e-mail changes that
/// followed the one being undone); the earlier ones stay valid, so undoing a later change
/// never takes the owner's link to undo an earlier one.
pub async fn retire_later_undos(
    ex: Exec<'_>,
    user_id: i64,
    after: i64,
    now: DateTime<Utc>,
) -> StoreResult<()> {
    on_exec!(ex, c => sqlx::query(
        "UPDATE one_time_tokens SET used_at = $1
         WHERE user_id = $2 AND purpose = $3 AND id > $4 AND used_at IS NULL",
    )
    .bind(now)
    .bind(user_id)
    .bind(Purpose::UndoEmailChange.as_str())
    .bind(after)
    .execute(c)
    .await
    .map(|_| ()))?;
    Ok(())
}

/// The account an open, unexpired undo link would give `email` back to, if any: the address
/// is kept for it until the link is spent or lapses.
pub async fn undo_holder(
    ex: Exec<'_>,
    email: &str,
    now: DateTime<Utc>,
) -> StoreResult<Option<i64>> {
    Ok(on_exec!(ex, c => sqlx::query_scalar(
        "SELECT user_id FROM one_time_tokens
         WHERE email = $1 AND purpose = $2 AND used_at IS NULL AND expires_at > $3
         ORDER BY id LIMIT 1",
    )
    .bind(email)
    .bind(Purpose::UndoEmailChange.as_str())
    .bind(now)
    .fetch_optional(c)
    .await)?)
}
