//! A user's outgoing-webhook configuration: URL, whether enabled, authentication method,
//! and the signing secret (created on first read, replaced on demand; the replaced one keeps
//! signing beside it for `WEBHOOK_SECRET_ROTATION_HOURS`).

use crate::domain::token::random_token;
use crate::domain::webhook_rules;
use crate::state::AppState;
use crate::store::webhooks::{self, WebhookConfig};
use crate::workflows::error::{FlowError, FlowResult};

/// Saves the configuration (a secret is created with it when there is none). The URL must
/// pass the server-side request forgery guard's checks that need no resolver: HTTPS, no
/// credentials, no literal private or reserved address, no `localhost` name. A host name is
/// not resolved now: whether it resolves, and where, would be told by the answer; every
/// delivery checks its addresses when it connects.
pub async fn configure(
    state: &AppState,
    user_id: i64,
    url: Option<&str>,
    enabled: bool,
    auth_method: &str,
) -> FlowResult<Option<WebhookConfig>> {
    if let Some(url) = url
        && let Err(reason) = state.webhook_http.check(url)
    {
        return Err(FlowError::invalid("url", reason));
    }
    let mut conn = state.db.conn().await?;
    webhooks::upsert(
        conn.exec(),
        user_id,
        url,
        enabled,
        auth_method,
        &random_token(32),
        state.clock.now(),
    )
    .await?;
    Ok(webhooks::find(conn.exec(), user_id).await?)
}

/// The user's signing secret, created on the first read.
pub async fn secret(state: &AppState, user_id: i64) -> FlowResult<String> {
    let mut conn = state.db.conn().await?;
    if let Some(config) = webhooks::find(conn.exec(), user_id).await? {
        return Ok(config.secret);
    }
    // A concurrent first read may have created one meanwhile: keep it, answer the stored value.
    webhooks::insert_secret_if_absent(conn.exec(), user_id, &random_token(32), state.clock.now())
        .await?;
    webhooks::find(conn.exec(), user_id)
        .await?
        .map(|config| config.secret)
        .ok_or_else(|| FlowError::not_found("Webhook configuration not found"))
}

/// Replaces the signing secret and answers the configuration as stored. The secret it
/// replaces keeps signing deliveries beside the new one until the rotation window
/// (`WEBHOOK_SECRET_ROTATION_HOURS`, on the service's clock) ends; with a zero window the next
/// delivery is signed with the new one only. A second regeneration within the window keeps
/// the secret it replaces, not the older one.
pub async fn regenerate_secret(state: &AppState, user_id: i64) -> FlowResult<WebhookConfig> {
    let secret = random_token(32);
    let now = state.clock.now();
    let until = webhook_rules::previous_secret_until(now, state.settings.webhook_secret_rotation);
    let mut conn = state.db.conn().await?;
    Ok(webhooks::set_secret(conn.exec(), user_id, &secret, until, now).await?)
}

/// The secrets signing a delivery of this configuration at `now`: the current one first, the
/// previous one beside it while its window lasts.
pub fn signing_secrets(config: &WebhookConfig, now: chrono::DateTime<chrono::Utc>) -> Vec<&str> {
    webhook_rules::signing_secrets(
        &config.secret,
        config.previous_secret.as_deref(),
        config.previous_secret_until,
        now,
    )
}

/// When the previous secret stops signing, as seen at `now` (`None` when it no longer does).
pub fn previous_secret_expires_at(
    config: &WebhookConfig,
    now: chrono::DateTime<chrono::Utc>,
) -> Option<chrono::DateTime<chrono::Utc>> {
    webhook_rules::previous_secret_expires_at(
        config.previous_secret.as_deref(),
        config.previous_secret_until,
        now,
    )
}
