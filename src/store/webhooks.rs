//! Per-user outgoing webhook configuration, with the secret a regeneration replaced while it
//! still signs (migration 0015).

use chrono::{DateTime, Utc};

use super::{Exec, StoreResult};
use crate::on_exec;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct WebhookConfig {
    pub user_id: i64,
    pub url: Option<String>,
    pub enabled: bool,
    pub auth_method: String,
    pub secret: String,
    /// The secret the last regeneration replaced, signing beside `secret` until
    /// `previous_secret_until` (`domain::webhook_rules::signing_secrets`).
    pub previous_secret: Option<String>,
    pub previous_secret_until: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// The columns of [`WebhookConfig`], in its order.
macro_rules! columns {
    () => {
        "user_id, url, enabled, auth_method, secret, previous_secret, previous_secret_until, \
         created_at, updated_at"
    };
}

pub async fn find(ex: Exec<'_>, user_id: i64) -> StoreResult<Option<WebhookConfig>> {
    const SQL: &str = concat!(
        "SELECT ",
        columns!(),
        " FROM webhook_configs WHERE user_id = $1"
    );
    Ok(on_exec!(ex, c => sqlx::query_as::<_, WebhookConfig>(SQL)
    .bind(user_id)
    .fetch_optional(c)
    .await)?)
}

/// Creates or replaces the configuration; `new_secret` is used only when none exists yet.
pub async fn upsert(
    ex: Exec<'_>,
    user_id: i64,
    url: Option<&str>,
    enabled: bool,
    auth_method: &str,
    new_secret: &str,
    now: DateTime<Utc>,
) -> StoreResult<()> {
    on_exec!(ex, c => sqlx::query(
        "INSERT INTO webhook_configs (user_id, url, enabled, auth_method, secret, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, $6)
         ON CONFLICT (user_id) DO UPDATE SET url = excluded.url, enabled = excluded.enabled,
             auth_method = excluded.auth_method, updated_at = excluded.updated_at",
    )
    .bind(user_id)
    .bind(url)
    .bind(enabled)
    .bind(auth_method)
    .bind(new_secret)
    .bind(now)
    .execute(c)
    .await
    .map(|_| ()))?;
    Ok(())
}

/// Replaces the secret, creating a disabled configuration when there is none, and answers
/// the configuration as stored. The secret it replaces becomes the previous one until
/// `previous_until` (with `None`, no previous secret is kept): a second regeneration within
/// the window thus puts the secret it replaces there, one old secret at a time.
pub async fn set_secret(
    ex: Exec<'_>,
    user_id: i64,
    secret: &str,
    previous_until: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> StoreResult<WebhookConfig> {
    const SQL: &str = concat!(
        "INSERT INTO webhook_configs (user_id, url, enabled, auth_method, secret, created_at, updated_at)
         VALUES ($1, NULL, FALSE, 'JWT', $2, $3, $3)
         ON CONFLICT (user_id) DO UPDATE SET secret = excluded.secret,
             previous_secret = CASE WHEN $4 IS NULL THEN NULL ELSE webhook_configs.secret END,
             previous_secret_until = $4,
             updated_at = excluded.updated_at
         RETURNING ",
        columns!()
    );
    Ok(on_exec!(ex, c => sqlx::query_as::<_, WebhookConfig>(SQL)
    .bind(user_id)
    .bind(secret)
    .bind(now)
    .bind(previous_until)
    .fetch_one(c)
    .await)?)
}

/// Creates a disabled configuration with `secret` unless one exists; the existing secret is
/// left alone, so concurrent first reads all end up with the one stored value.
pub async fn insert_secret_if_absent(
    ex: Exec<'_>,
    user_id: i64,
    secret: &str,
    now: DateTime<Utc>,
) -> StoreResult<()> {
    on_exec!(ex, c => sqlx::query(
        "INSERT INTO webhook_configs (user_id, url, enabled, auth_method, secret, created_at, updated_at)
         VALUES ($1, NULL, FALSE, 'JWT', $2, $3, $3)
         ON CONFLICT (user_id) DO NOTHING",
    )
    .bind(user_id)
    .bind(secret)
    .bind(now)
    .execute(c)
    .await
    .map(|_| ()))?;
    Ok(())
}

/// Whether any user has a webhook address, enabled or not.
pub async fn any_configured(ex: Exec<'_>) -> StoreResult<bool> {
    Ok(on_exec!(ex, c => sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM webhook_configs WHERE url IS NOT NULL)",
    )
    .fetch_one(c)
    .await)?)
}

/// Of `user_ids`, those with a webhook address, each with whether it is enabled, in one query.
pub async fn configured_among(ex: Exec<'_>, user_ids: &[i64]) -> StoreResult<Vec<(i64, bool)>> {
    if user_ids.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT user_id, enabled FROM webhook_configs
         WHERE url IS NOT NULL AND user_id IN ({})",
        super::placeholders(1, super::list_len(user_ids.len()))
    );
    Ok(on_exec!(ex, c => {
        // Placeholders only: the ids are bound.
        let mut query = sqlx::query_as(sqlx::AssertSqlSafe(sql.as_str()));
        for id in super::padded(user_ids) {
            query = query.bind(*id);
        }
        query.fetch_all(c).await
    })?)
}
