//! Rate limits with counters in the cache store, so several instances share them.

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::{Error, ResponseError as _, web};
use std::time::Duration;

use super::error::{ApiError, ApiResult};
use crate::integrations::cache::{Cache, Rate, Take};
use crate::state::AppState;

/// Counts one hit on `key`; 429 with `Retry-After` once more than `max` fall in the window.
pub async fn hit(cache: &dyn Cache, key: &str, max: u32, window: Duration) -> ApiResult<()> {
    let count = cache.hit(key, window).await?;
    if count.count > u64::from(max) {
        return Err(ApiError::too_many_requests(
            count.resets_in.as_secs().max(1),
        ));
    }
    Ok(())
}

/// Spends one of `user_id`'s chat messages (`CHAT_MESSAGES_PER_MINUTE`): one token bucket per
/// account in the cache, so instances sharing Redis share it, spent alike by
/// `POST /api/chat/{project_id}` and a socket's `message` frame. 429 with `Retry-After` (the
/// wait for the next token) once it is empty; a minute refills it whole. Times are the
/// service's clock.
pub async fn chat_message(state: &AppState, user_id: i64) -> ApiResult<()> {
    let rate = Rate::per_minute(state.settings.chat_messages_per_minute);
    let now = state.clock.now().timestamp_millis();
    let key = format!("budget:chat:{user_id}");
    match state.cache.take_token(&key, rate, now).await? {
        Take::Allowed { .. } => Ok(()),
        Take::Refused { retry_after_ms } => Err(ApiError::too_many_requests(
            u64::try_from(retry_after_ms).unwrap_or(0).div_ceil(1000),
        )),
    }
}

/// The global limit per client address (`RATE_LIMIT_PER_MINUTE`, 0 disables). Health and
/// metrics are exempt so probes never starve real clients or get refused, and so are the
/// processor's webhooks (signed; refusing one would only delay a payment's state).
pub async fn global_limit(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, Error> {
    let state = req.app_data::<web::Data<AppState>>().cloned();
    let limit = state
        .as_ref()
        .map(|s| s.settings.rate_limit_per_minute)
        .unwrap_or(0);
    let exempt = matches!(
        req.path(),
        "/health" | "/metrics" | "/api/payments/webhooks/processor" | "/api/webhooks/crm"
    );
    if let (Some(state), false, false) = (state, limit == 0, exempt) {
        let ip = super::client_ip::client_ip(req.request())
            .map(|ip| ip.to_string())
            .unwrap_or_else(|| "unknown".into());
        let key = format!("ratelimit:ip:{ip}");
        if let Err(err) = hit(state.cache.as_ref(), &key, limit, Duration::from_secs(60)).await {
            let response = err.error_response();
            return Ok(req.into_response(response));
        }
    }
    Ok(next.call(req).await?.map_into_boxed_body())
}
