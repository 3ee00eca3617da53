//! `/api/users/*`: the caller's account, public user views and the outgoing webhook
//! configuration.

use actix_web::{HttpResponse, get, post, put, web};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::views::{Message, PublicUser, UserView};
use crate::domain::user::{EmailAddress, Username, check_password_policy};
use crate::http::auth::{AuthUser, CsrfChecked};
use crate::http::error::{ApiError, ApiResult, FieldError};
use crate::http::rate_limit;
use crate::state::AppState;
use crate::store::{users, webhooks};
use crate::workflows::{accounts, webhook_config};

#[derive(Deserialize, ToSchema)]
pub struct UpdateMeRequest {
    pub username: Option<String>,
    pub is_active: Option<bool>,
}

#[derive(Deserialize, ToSchema)]
pub struct ChangePasswordRequest {
    pub current_password: String,
    pub new_password: String,
}

#[derive(Deserialize, ToSchema)]
pub struct ChangeEmailRequest {
    pub new_email: String,
    pub current_password: String,
}

#[derive(Deserialize, ToSchema)]
pub struct WebhookConfigRequest {
    /// HTTPS only.
    pub url: Option<String>,
    pub enabled: bool,
    /// `JWT` (HS256 with the secret) or `none`.
    pub auth_method: String,
}

/// The webhook configuration; the secret is read on its own route.
#[derive(Serialize, ToSchema)]
pub struct WebhookConfigView {
    pub url: Option<String>,
    pub enabled: bool,
    pub auth_method: String,
    pub has_secret: bool,
    /// While the secret replaced by the last regeneration still signs deliveries beside the
    /// current one (each delivery's `webhook-signature` then carries both), when it stops
    /// (RFC 3339); null when there is none.
    pub previous_secret_expires_at: Option<chrono::DateTime<chrono::Utc>>,
    pub updated_at: Option<chrono::DateTime<chrono::Utc>>,
}

#[derive(Serialize, ToSchema)]
pub struct WebhookSecret {
    pub secret: String,
}

/// The new signing secret, and how long the one it replaced still signs beside it.
#[derive(Serialize, ToSchema)]
pub struct RegeneratedWebhookSecret {
    /// The new secret: it signs every delivery from now on, and alone signs the JWT (whose
    /// header's `kid` is the first 16 hex digits of the SHA-256 of the secret).
    pub secret: String,
    /// Until when the replaced secret's signature is sent too (RFC 3339, the
    /// `WEBHOOK_SECRET_ROTATION_HOURS` window); null when the window is zero.
    pub previous_secret_expires_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// The caller's account.
#[utoipa::path(tag = "users", security(("bearer" = [])), responses((status = 200, body = UserView), (status = 401, body = crate::http::error::ErrorBody)))]
#[get("/api/users/me")]
pub async fn me(auth: AuthUser) -> HttpResponse {
    HttpResponse::Ok().json(UserView::from(&auth.user))
}

/// Updates username and/or `is_active` (CSRF protected).
#[utoipa::path(
    tag = "users",
    request_body = UpdateMeRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, body = UserView),
        (status = 403, body = crate::http::error::ErrorBody, description = "CSRF check failed"),
        (status = 409, body = crate::http::error::ErrorBody, description = "Username taken"),
    )
)]
#[put("/api/users/me")]
pub async fn update_me(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    body: web::Json<UpdateMeRequest>,
) -> ApiResult<HttpResponse> {
    let username = body
        .username
        .as_deref()
        .map(Username::parse)
        .transpose()
        .map_err(|m| ApiError::invalid_field("username", m))?;
    let user =
        accounts::update_own_account(&state, &auth.user, username.as_ref(), body.is_active).await?;
    Ok(HttpResponse::Ok().json(UserView::from(&user)))
}

/// Changes the password; the current one is required; other sessions end, and verification
/// and reset links mailed before stop working (CSRF protected). The current-password check
/// counts in the account's login budget (`LOGIN_RATE_LIMIT_MAX_ATTEMPTS_PER_USER` a window,
/// shared with logins): once spent, 429 as a login. A session that sends that many wrong
/// current passwords in a window is ended (its next request: 401 `TOKEN_REVOKED`).
#[utoipa::path(
    tag = "users",
    request_body = ChangePasswordRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, body = Message),
        (status = 400, body = crate::http::error::ErrorBody, description = "INVALID_PASSWORD: current password wrong"),
        (status = 403, body = crate::http::error::ErrorBody, description = "CSRF check failed"),
        (status = 422, body = crate::http::error::ErrorBody, description = "Password policy"),
        (status = 429, body = crate::http::error::ErrorBody, description = "RATE_LIMITED: the account's login budget is spent; see Retry-After"),
    )
)]
#[post("/api/users/me/change-password")]
pub async fn change_password(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    body: web::Json<ChangePasswordRequest>,
) -> ApiResult<HttpResponse> {
    check_password_policy(&body.new_password)
        .map_err(|m| ApiError::invalid_field("new_password", m))?;
    let attempt = rate_limit::login_account(&state, auth.id()).await?;
    accounts::change_password(
        &state,
        &auth.user,
        auth.session.id,
        attempt,
        &body.current_password,
        &body.new_password,
    )
    .await?;
    Ok(HttpResponse::Ok().json(Message::new("Password changed")))
}

/// Changes the e-mail address; it becomes unverified and a verification goes to it (CSRF
/// protected). Verification and reset links mailed before stop working, and the previous
/// address is told, with a link that undoes the change for 7 days
/// (`POST /api/auth/undo-email-change`); until then no other account may take it. The
/// current-password check counts in the account's login budget as on
/// `POST /api/users/me/change-password` (429 once spent; the session ends after that many
/// wrong current passwords in a window).
#[utoipa::path(
    tag = "users",
    request_body = ChangeEmailRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, body = UserView),
        (status = 400, body = crate::http::error::ErrorBody, description = "INVALID_PASSWORD: current password wrong"),
        (status = 403, body = crate::http::error::ErrorBody, description = "CSRF check failed"),
        (status = 409, body = crate::http::error::ErrorBody, description = "E-mail taken"),
        (status = 429, body = crate::http::error::ErrorBody, description = "RATE_LIMITED: the account's login budget is spent; see Retry-After"),
    )
)]
#[put("/api/users/me/email")]
pub async fn change_email(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    body: web::Json<ChangeEmailRequest>,
) -> ApiResult<HttpResponse> {
    let email = EmailAddress::parse(&body.new_email)
        .map_err(|m| ApiError::invalid_field("new_email", m))?;
    let attempt = rate_limit::login_account(&state, auth.id()).await?;
    let user = accounts::change_email(
        &state,
        &auth.user,
        auth.session.id,
        attempt,
        &email,
        &body.current_password,
    )
    .await?;
    Ok(HttpResponse::Ok().json(UserView::from(&user)))
}

fn webhook_view(
    config: Option<webhooks::WebhookConfig>,
    now: chrono::DateTime<chrono::Utc>,
) -> WebhookConfigView {
    match config {
        Some(c) => WebhookConfigView {
            previous_secret_expires_at: webhook_config::previous_secret_expires_at(&c, now),
            url: c.url,
            enabled: c.enabled,
            auth_method: c.auth_method,
            has_secret: !c.secret.is_empty(),
            updated_at: Some(c.updated_at),
        },
        None => WebhookConfigView {
            url: None,
            enabled: false,
            auth_method: "JWT".into(),
            has_secret: false,
            previous_secret_expires_at: None,
            updated_at: None,
        },
    }
}

/// The caller's webhook configuration.
#[utoipa::path(tag = "users", security(("bearer" = [])), responses((status = 200, body = WebhookConfigView)))]
#[get("/api/users/me/webhook")]
pub async fn get_webhook(state: web::Data<AppState>, auth: AuthUser) -> ApiResult<HttpResponse> {
    let mut conn = state.db.conn().await?;
    let config = webhooks::find(conn.exec(), auth.id()).await?;
    Ok(HttpResponse::Ok().json(webhook_view(config, state.clock.now())))
}

/// Sets the webhook URL (HTTPS only), whether it is enabled and how deliveries authenticate
/// (CSRF protected). A secret is created with the first configuration.
#[utoipa::path(
    tag = "users",
    request_body = WebhookConfigRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, body = WebhookConfigView),
        (status = 403, body = crate::http::error::ErrorBody, description = "CSRF check failed"),
        (status = 422, body = crate::http::error::ErrorBody, description = "Not an HTTPS URL, or unknown method"),
    )
)]
#[put("/api/users/me/webhook")]
pub async fn put_webhook(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    body: web::Json<WebhookConfigRequest>,
) -> ApiResult<HttpResponse> {
    let mut errors = Vec::new();
    let url = body.url.as_deref().map(str::trim).filter(|u| !u.is_empty());
    if let Some(url) = url {
        match url::Url::parse(url) {
            Ok(parsed)
                if parsed.scheme() == "https"
                    && parsed.host_str().is_some()
                    && url.len() <= 2048 => {}
            _ => errors.push(FieldError::new("url", "must be an HTTPS URL")),
        }
    } else if body.enabled {
        errors.push(FieldError::new(
            "url",
            "required when the webhook is enabled",
        ));
    }
    if !matches!(body.auth_method.as_str(), "JWT" | "none") {
        errors.push(FieldError::new("auth_method", "must be JWT or none"));
    }
    if !errors.is_empty() {
        return Err(ApiError::validation(errors));
    }
    let config =
        webhook_config::configure(&state, auth.id(), url, body.enabled, &body.auth_method).await?;
    Ok(HttpResponse::Ok().json(webhook_view(config, state.clock.now())))
}

/// The caller's current webhook signing secret (created if there is none).
#[utoipa::path(tag = "users", security(("bearer" = [])), responses((status = 200, body = WebhookSecret)))]
#[get("/api/users/me/webhook/secret")]
pub async fn get_webhook_secret(
    state: web::Data<AppState>,
    auth: AuthUser,
) -> ApiResult<HttpResponse> {
    let secret = webhook_config::secret(&state, auth.id()).await?;
    Ok(HttpResponse::Ok().json(WebhookSecret { secret }))
}

/// Replaces the webhook signing secret (CSRF protected). The replaced secret keeps signing
/// deliveries beside the new one until `previous_secret_expires_at`
/// (`WEBHOOK_SECRET_ROTATION_HOURS`, default 24): meanwhile `webhook-signature` carries
/// `v1,<with the new> v1,<with the replaced>`, so a receiver may switch secrets at any time
/// in the window. The JWT is signed with the new secret only and names it in `kid`. A second
/// regeneration within the window keeps only the secret it replaces.
#[utoipa::path(
    tag = "users",
    security(("bearer" = [])),
    responses((status = 200, body = RegeneratedWebhookSecret), (status = 403, body = crate::http::error::ErrorBody))
)]
#[post("/api/users/me/webhook/secret")]
pub async fn regenerate_webhook_secret(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
) -> ApiResult<HttpResponse> {
    let config = webhook_config::regenerate_secret(&state, auth.id()).await?;
    let previous_secret_expires_at =
        webhook_config::previous_secret_expires_at(&config, state.clock.now());
    Ok(HttpResponse::Ok().json(RegeneratedWebhookSecret {
        secret: config.secret,
        previous_secret_expires_at,
    }))
}

/// Another user's public view: no e-mail, no flags.
#[utoipa::path(
    tag = "users",
    params(("id" = i64, Path)),
    security(("bearer" = [])),
    responses((status = 200, body = PublicUser), (status = 404, body = crate::http::error::ErrorBody))
)]
#[get("/api/users/{id}")]
pub async fn public_user(
    state: web::Data<AppState>,
    _auth: AuthUser,
    id: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let mut conn = state.db.conn().await?;
    let user = users::find(conn.exec(), id.into_inner())
        .await?
        .filter(|u| u.is_active)
        .ok_or_else(|| ApiError::not_found("User not found"))?;
    Ok(HttpResponse::Ok().json(PublicUser::from(&user)))
}

/// Mounts the user routes: the `me` paths before `/api/users/{id}`.
pub fn mount(cfg: &mut utoipa_actix_web::service_config::ServiceConfig) {
    cfg.service(me)
        .service(update_me)
        .service(change_password)
        .service(change_email)
        .service(get_webhook)
        .service(put_webhook)
        .service(get_webhook_secret)
        .service(regenerate_webhook_secret)
        .service(public_user);
}
