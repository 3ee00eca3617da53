//! Rate limits with counters in the cache store, so several instances share them: the global
//! limit per address, and the login budgets (`LOGIN_RATE_LIMIT_*`) per address and per
//! account. "Per address" is per [`ClientKey`]: an IPv4 address or an IPv6 /64.

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::{Error, ResponseError as _, web};
use std::time::Duration;

use super::error::{ApiError, ApiResult};
use crate::domain::client_address::ClientKey;
use crate::integrations::cache::{Cache, Rate, Take};
use crate::state::AppState;
use crate::workflows::accounts::LoginAttempt;

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

/// The login window (`LOGIN_RATE_LIMIT_WINDOW_SECONDS`).
pub fn login_window(state: &AppState) -> Duration {
    Duration::from_secs(u64::from(state.settings.login_window_seconds))
}

/// One attempt on the per-address login budget (`LOGIN_RATE_LIMIT_MAX_ATTEMPTS_PER_IP` a
/// window): logins, and registrations refused because the e-mail or username exists; 429 once
/// it is spent.
pub async fn login_address(state: &AppState, client: ClientKey) -> ApiResult<()> {
    hit(
        state.cache.as_ref(),
        &login_address_key(client),
        state.settings.login_max_attempts_per_ip,
        login_window(state),
    )
    .await
}

/// 429 when the address has spent its login budget in the current window, counting nothing:
/// registration asks before it tries, so past the budget it answers alike whether or not the
/// e-mail or username exists.
pub async fn login_address_spent(state: &AppState, client: ClientKey) -> ApiResult<()> {
    let used = state
        .cache
        .get(&login_address_key(client))
        .await?
        .and_then(|count| count.parse::<u64>().ok())
        .unwrap_or(0);
    if used >= u64::from(state.settings.login_max_attempts_per_ip) {
        // One more attempt is refused and says when the window ends (should it have ended
        // meanwhile, the attempt goes ahead in the new window).
        login_address(state, client).await?;
    }
    Ok(())
}

fn login_address_key(client: ClientKey) -> String {
    format!("login:ip:{client}")
}

/// One attempt on an account's login budget (`LOGIN_RATE_LIMIT_MAX_ATTEMPTS_PER_USER` a
/// window); 429 once it is spent. Logins count here however they name the account (username
/// or e-mail, any case), and so do the current-password checks of a password or e-mail change,
/// so a stolen session cannot guess the password faster than a login could.
/// A wrong password on the attempt that spends the budget locks the account for the rest of
/// the window: the caller hands the attempt to `accounts::password_refused`, which tells the
/// owner.
pub async fn login_account(state: &AppState, user_id: i64) -> ApiResult<LoginAttempt> {
    let max = u64::from(state.settings.login_max_attempts_per_user);
    let count = state
        .cache
        .hit(&format!("login:account:{user_id}"), login_window(state))
        .await?;
    if count.count > max {
        return Err(ApiError::too_many_requests(
            count.resets_in.as_secs().max(1),
        ));
    }
    Ok(LoginAttempt {
        last: count.count == max,
        resets_in: count.resets_in,
    })
}

/// One attempt on the budget of a login name that names no account (lower-cased): probing
/// unknown names is limited as probing an account is.
pub async fn login_unknown_name(state: &AppState, name: &str) -> ApiResult<()> {
    hit(
        state.cache.as_ref(),
        &format!("login:user:{}", crate::domain::token::hash_token(name)),
        state.settings.login_max_attempts_per_user,
        login_window(state),
    )
    .await
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
        "/health"
            | "/ready"
            | "/metrics"
            | "/api/payments/webhooks/processor"
            | "/api/webhooks/crm"
    );
    if let (Some(state), false, false) = (state, limit == 0, exempt) {
        let client = super::client_ip::client_key(req.request());
        let key = format!("ratelimit:ip:{client}");
        if let Err(err) = hit(state.cache.as_ref(), &key, limit, Duration::from_secs(60)).await {
            let response = err.error_response();
            return Ok(req.into_response(response));
        }
    }
    Ok(next.call(req).await?.map_into_boxed_body())
}
