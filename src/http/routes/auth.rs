//! `/api/auth/*`: registration, the standard and secure login flavours, e-mail verification,
//! password recovery, roles and admin-invitation acceptance.

use actix_web::{HttpRequest, HttpResponse, get, post, web};
use serde::{Deserialize, Serialize};
use std::time::Duration;
use utoipa::ToSchema;

use super::views::{Message, SessionUser, UserView};
use crate::domain::user::{EmailAddress, Role, Username, check_password_policy};
use crate::http::auth::{
    AuthUser, CSRF_COOKIE, CookieJar, CsrfChecked, REFRESH_COOKIE, bearer_token, check_csrf,
    client_info, client_session_id,
};
use crate::http::client_ip::client_key;
use crate::http::error::{ApiError, ApiResult, FieldError};
use crate::http::rate_limit;
use crate::state::AppState;
use crate::store::users::{self, User};
use crate::workflows::accounts::{self, AccountError};
use crate::workflows::auth::{self as sessions, AuthError, Issued};
use crate::workflows::passwords;
use crate::workflows::user_admin;

impl From<AccountError> for ApiError {
    fn from(err: AccountError) -> Self {
        match err {
            AccountError::EmailTaken => {
                ApiError::conflict("EMAIL_EXISTS", "An account with this e-mail already exists")
            }
            AccountError::UsernameTaken => {
                ApiError::conflict("USERNAME_EXISTS", "This username is taken")
            }
            AccountError::InvalidToken => {
                ApiError::bad_request("INVALID_TOKEN", "The token is invalid")
            }
            AccountError::ExpiredToken => {
                ApiError::bad_request("TOKEN_EXPIRED", "The token has expired")
            }
            AccountError::UsedToken => {
                ApiError::bad_request("TOKEN_USED", "The token has already been used")
            }
            AccountError::WrongPassword => {
                ApiError::bad_request("INVALID_PASSWORD", "The current password is not correct")
            }
            AccountError::Store(e) => e.into(),
            AccountError::Other(e) => ApiError::internal(e),
        }
    }
}

#[derive(Deserialize, ToSchema)]
pub struct RegisterRequest {
    pub email: String,
    pub username: String,
    pub password: String,
    /// `["empresa"]`, `["experto"]` or both; the first becomes the active role.
    pub roles: Vec<String>,
    #[serde(default)]
    pub accept_marketing: bool,
    pub source: Option<String>,
}

#[derive(Deserialize, ToSchema)]
pub struct LoginRequest {
    /// Username or e-mail.
    pub username: String,
    pub password: String,
}

/// Body of `login_secure` (and of registration).
#[derive(Serialize, ToSchema)]
pub struct SecureLoginResponse {
    pub access_token: String,
    pub csrf_token: String,
    pub user: SessionUser,
}

/// Body of the standard login.
#[derive(Serialize, ToSchema)]
pub struct LoginResponse {
    pub access_token: String,
    pub refresh_token: String,
    pub token_type: &'static str,
    pub user: UserView,
}

#[derive(Deserialize, ToSchema)]
pub struct RefreshRequest {
    pub refresh_token: String,
}

#[derive(Serialize, ToSchema)]
pub struct RefreshResponse {
    pub access_token: String,
    pub refresh_token: String,
    pub token_type: &'static str,
}

#[derive(Serialize, ToSchema)]
pub struct SecureRefreshResponse {
    pub access_token: String,
    pub csrf_token: String,
}

#[derive(Serialize, ToSchema)]
pub struct VerifySecureResponse {
    pub valid: bool,
    pub authenticated: bool,
    pub user: SessionUser,
    pub access_token: String,
    pub csrf_token: String,
}

#[derive(Serialize, ToSchema)]
pub struct VerifyResponse {
    pub valid: bool,
    pub user: UserView,
}

#[derive(Deserialize, ToSchema, Default)]
pub struct LogoutRequest {
    pub refresh_token: Option<String>,
}

#[derive(Deserialize, ToSchema)]
pub struct TokenRequest {
    pub token: String,
}

#[derive(Deserialize, ToSchema, utoipa::IntoParams)]
pub struct TokenQuery {
    pub token: Option<String>,
}

#[derive(Deserialize, ToSchema)]
pub struct EmailRequest {
    pub email: String,
}

#[derive(Deserialize, ToSchema)]
pub struct ResetPasswordRequest {
    pub token: String,
    pub new_password: String,
}

#[derive(Deserialize, ToSchema)]
pub struct RoleRequest {
    pub role: String,
}

#[derive(Deserialize, ToSchema)]
pub struct AcceptInvitationRequest {
    pub token: String,
    pub username: String,
    pub password: String,
}

#[derive(Serialize, ToSchema)]
pub struct AcceptInvitationResponse {
    pub message: String,
    pub user: UserView,
}

/// Sets the refresh and CSRF cookies of a cookie session and answers `status` with `body`.
fn with_session_cookies<T: Serialize>(
    state: &AppState,
    status: actix_web::http::StatusCode,
    issued: &Issued,
    csrf: &str,
    body: &T,
) -> HttpResponse {
    let jar = CookieJar::new(state);
    HttpResponse::build(status)
        .cookie(jar.refresh(&issued.refresh_token))
        .cookie(jar.csrf(csrf))
        .json(body)
}

/// A new CSRF value for session `sid` (a new session: no cookie can be its own yet). Bound to
/// the session, so worthless for another.
fn fresh_csrf(state: &AppState, sid: i64) -> String {
    state.tokens.new_csrf_token(sid)
}

/// The CSRF value for session `sid` on refresh and verify: the `csrf_token` cookie's own
/// value when it was made for this session (re-setting the cookie renews its max age), else
/// a new one, never a foreign value echoed back.
fn renewed_csrf(state: &AppState, req: &HttpRequest, sid: i64) -> String {
    let held = req.cookie(CSRF_COOKIE);
    state
        .tokens
        .csrf_token_renewed(sid, held.as_ref().map(|c| c.value()))
}

fn parse_roles(raw: &[String]) -> Result<Vec<Role>, FieldError> {
    if raw.is_empty() {
        return Err(FieldError::new("roles", "choose empresa, experto or both"));
    }
    let mut roles = Vec::new();
    for name in raw {
        match Role::parse(name) {
            Some(role) if role.self_selectable() => {
                if !roles.contains(&role) {
                    roles.push(role);
                }
            }
            _ => {
                return Err(FieldError::new(
                    "roles",
                    "only empresa and experto can be chosen",
                ));
            }
        }
    }
    Ok(roles)
}

/// Register with one or both roles; logged in at once (secure flavour) and sent a
/// verification e-mail. A refusal for a taken e-mail or username spends one attempt of the
/// address's login budget (`LOGIN_RATE_LIMIT_MAX_ATTEMPTS_PER_IP` a window, shared with
/// logins); once it is spent, every registration from the address answers 429 until the
/// window ends.
#[utoipa::path(
    tag = "auth",
    request_body = RegisterRequest,
    params(("X-Session-ID" = Option<String>, Header, description = "Client session id `sess_…`")),
    responses(
        (status = 201, body = SecureLoginResponse, description = "Registered and logged in; sets `refresh_token` and `csrf_token` cookies"),
        (status = 409, body = crate::http::error::ErrorBody, description = "EMAIL_EXISTS or USERNAME_EXISTS; counts in the address's login budget"),
        (status = 422, body = crate::http::error::ErrorBody, description = "Invalid fields"),
        (status = 429, body = crate::http::error::ErrorBody, description = "RATE_LIMITED: the address's login budget is spent; see Retry-After"),
    )
)]
#[post("/api/auth/register")]
pub async fn register(
    state: web::Data<AppState>,
    req: HttpRequest,
    body: web::Json<RegisterRequest>,
) -> ApiResult<HttpResponse> {
    let mut errors = Vec::new();
    let email = EmailAddress::parse(&body.email)
        .map_err(|m| errors.push(FieldError::new("email", m)))
        .ok();
    let username = Username::parse(&body.username)
        .map_err(|m| errors.push(FieldError::new("username", m)))
        .ok();
    if let Err(m) = check_password_policy(&body.password) {
        errors.push(FieldError::new("password", m));
    }
    let roles = parse_roles(&body.roles).map_err(|e| errors.push(e)).ok();
    let source = body
        .source
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty());
    if source.is_some_and(|s| s.len() > 100) {
        errors.push(FieldError::new("source", "must be at most 100 characters"));
    }
    let (Some(email), Some(username), Some(roles), true) =
        (email, username, roles, errors.is_empty())
    else {
        return Err(ApiError::validation(errors));
    };

    // Refusals for a taken e-mail or username spend the address's login budget, and past it
    // every registration answers 429 as a login does: no mass probing of who has an account.
    let client = client_key(&req);
    rate_limit::login_address_spent(&state, client).await?;
    let registered = accounts::register(
        &state,
        &email,
        &username,
        &body.password,
        &roles,
        body.accept_marketing,
        source,
    )
    .await;
    let user = match registered {
        Ok(user) => user,
        Err(refusal @ (AccountError::EmailTaken | AccountError::UsernameTaken)) => {
            rate_limit::login_address(&state, client).await?;
            return Err(refusal.into());
        }
        Err(other) => return Err(other.into()),
    };
    let issued = sessions::start_session(
        &state,
        &user,
        client_session_id(&req).as_deref(),
        true,
        &client_info(&req),
    )
    .await?;
    let csrf = fresh_csrf(&state, issued.claims.sid);
    let body = SecureLoginResponse {
        access_token: issued.access_token.clone(),
        csrf_token: csrf.clone(),
        user: SessionUser::from(&user),
    };
    Ok(with_session_cookies(
        &state,
        actix_web::http::StatusCode::CREATED,
        &issued,
        &csrf,
        &body,
    ))
}

/// Checks the login limits and the credentials; the user on success.
async fn authenticate_credentials(
    state: &AppState,
    req: &HttpRequest,
    credentials: &LoginRequest,
) -> ApiResult<User> {
    let client = client_key(req);
    let name = credentials.username.trim().to_lowercase();
    rate_limit::login_address(state, client).await?;

    let invalid =
        || ApiError::unauthorized("INVALID_CREDENTIALS", "Incorrect username or password");
    if credentials.password.is_empty() || credentials.password.len() > 1024 || name.is_empty() {
        return Err(invalid());
    }
    let mut conn = state.db.conn().await?;
    let found = users::find_by_login(conn.exec(), &credentials.username).await?;
    drop(conn);
    // The per-user limit counts attempts on the account, however it was named; names of no
    // account get a bucket of their own, so probing them is limited the same way.
    let attempt = match &found {
        Some(user) => Some(rate_limit::login_account(state, user.id).await?),
        None => {
            rate_limit::login_unknown_name(state, &name).await?;
            None
        }
    };
    let (Some(user), Some(attempt)) = (found, attempt) else {
        passwords::verify_nothing(credentials.password.clone(), state.settings.bcrypt_cost).await;
        return Err(invalid());
    };
    if !passwords::verify(credentials.password.clone(), user.password_hash.clone())
        .await
        .map_err(ApiError::internal)?
    {
        // Its owner hears of a lock-out by e-mail; the answer stays the same.
        accounts::password_refused(state, &user, attempt).await;
        return Err(invalid());
    }
    match user.refusal(state.clock.now()) {
        Some(users::Refusal::Suspended) => Err(ApiError::new(
            actix_web::http::StatusCode::FORBIDDEN,
            "ACCOUNT_SUSPENDED",
            "This account is suspended",
        )),
        Some(users::Refusal::Inactive) => Err(ApiError::new(
            actix_web::http::StatusCode::FORBIDDEN,
            "ACCOUNT_INACTIVE",
            "This account is inactive",
        )),
        None if !user.is_active => Ok(user_admin::lift_lapsed_suspension(state, user).await?),
        None => Ok(user),
    }
}

/// Standard login: tokens in the body.
#[utoipa::path(
    tag = "auth",
    request_body = LoginRequest,
    responses(
        (status = 200, body = LoginResponse),
        (status = 401, body = crate::http::error::ErrorBody, description = "Wrong credentials"),
        (status = 429, body = crate::http::error::ErrorBody, description = "Too many attempts; see Retry-After"),
    )
)]
#[post("/api/auth/login")]
pub async fn login(
    state: web::Data<AppState>,
    req: HttpRequest,
    body: web::Json<LoginRequest>,
) -> ApiResult<HttpResponse> {
    let user = authenticate_credentials(&state, &req, &body).await?;
    let issued = sessions::start_session(
        &state,
        &user,
        client_session_id(&req).as_deref(),
        false,
        &client_info(&req),
    )
    .await?;
    Ok(HttpResponse::Ok().json(LoginResponse {
        access_token: issued.access_token,
        refresh_token: issued.refresh_token,
        token_type: "bearer",
        user: UserView::from(&user),
    }))
}

/// Secure login: the refresh token and CSRF token go in HttpOnly cookies; the access token
/// carries the `X-Session-ID` of the browser window.
#[utoipa::path(
    tag = "auth",
    request_body = LoginRequest,
    params(("X-Session-ID" = String, Header, description = "Client session id `sess_…`")),
    responses(
        (status = 200, body = SecureLoginResponse, description = "Sets `refresh_token` and `csrf_token` cookies"),
        (status = 401, body = crate::http::error::ErrorBody),
        (status = 422, body = crate::http::error::ErrorBody, description = "X-Session-ID missing"),
        (status = 429, body = crate::http::error::ErrorBody),
    )
)]
#[post("/api/auth/login_secure")]
pub async fn login_secure(
    state: web::Data<AppState>,
    req: HttpRequest,
    body: web::Json<LoginRequest>,
) -> ApiResult<HttpResponse> {
    let session_id = client_session_id(&req).ok_or_else(|| {
        ApiError::invalid_field("X-Session-ID", "header required, of the form sess_<random>")
    })?;
    let user = authenticate_credentials(&state, &req, &body).await?;
    let issued =
        sessions::start_session(&state, &user, Some(&session_id), true, &client_info(&req)).await?;
    let csrf = fresh_csrf(&state, issued.claims.sid);
    let body = SecureLoginResponse {
        access_token: issued.access_token.clone(),
        csrf_token: csrf.clone(),
        user: SessionUser::from(&user),
    };
    Ok(with_session_cookies(
        &state,
        actix_web::http::StatusCode::OK,
        &issued,
        &csrf,
        &body,
    ))
}

/// Standard refresh: rotates the refresh token.
#[utoipa::path(
    tag = "auth",
    request_body = RefreshRequest,
    responses((status = 200, body = RefreshResponse), (status = 401, body = crate::http::error::ErrorBody))
)]
#[post("/api/auth/refresh")]
pub async fn refresh(
    state: web::Data<AppState>,
    body: web::Json<RefreshRequest>,
) -> ApiResult<HttpResponse> {
    let issued = sessions::refresh(&state, &body.refresh_token, None, false).await?;
    Ok(HttpResponse::Ok().json(RefreshResponse {
        access_token: issued.access_token,
        refresh_token: issued.refresh_token,
        token_type: "bearer",
    }))
}

fn refresh_cookie(req: &HttpRequest) -> ApiResult<String> {
    req.cookie(REFRESH_COOKIE)
        .map(|c| c.value().to_owned())
        .filter(|v| !v.is_empty())
        .ok_or_else(|| AuthError::Missing.into())
}

fn required_session_id(req: &HttpRequest) -> ApiResult<String> {
    client_session_id(req).ok_or_else(|| AuthError::SessionMismatch.into())
}

/// Secure refresh: the `refresh_token` cookie is rotated; `X-Session-ID` must match the
/// session's. The `csrf_token` cookie's value is kept when it is this session's, else a new
/// one is made.
#[utoipa::path(
    tag = "auth",
    params(("X-Session-ID" = String, Header, description = "Must equal the session's id")),
    responses(
        (status = 200, body = SecureRefreshResponse, description = "Rotates the `refresh_token` cookie. `csrf_token`: the cookie's value when it is this session's (its max age renewed), else a new one"),
        (status = 401, body = crate::http::error::ErrorBody, description = "No or invalid refresh cookie, or SESSION_MISMATCH"),
    )
)]
#[post("/api/auth/refresh_secure")]
pub async fn refresh_secure(
    state: web::Data<AppState>,
    req: HttpRequest,
) -> ApiResult<HttpResponse> {
    let token = refresh_cookie(&req)?;
    let session_id = required_session_id(&req)?;
    let issued = sessions::refresh(&state, &token, Some(&session_id), true).await?;
    let csrf = renewed_csrf(&state, &req, issued.claims.sid);
    let body = SecureRefreshResponse {
        access_token: issued.access_token.clone(),
        csrf_token: csrf.clone(),
    };
    Ok(with_session_cookies(
        &state,
        actix_web::http::StatusCode::OK,
        &issued,
        &csrf,
        &body,
    ))
}

/// Secure session check: the refresh cookie's session, a fresh access token and the CSRF
/// token (the cookie's value when it is this session's, else a new one; its cookie renewed).
#[utoipa::path(
    tag = "auth",
    params(("X-Session-ID" = String, Header, description = "Must equal the session's id")),
    responses(
        (status = 200, body = VerifySecureResponse, description = "Renews the `csrf_token` cookie: its value when it is this session's, else a new one"),
        (status = 401, body = crate::http::error::ErrorBody),
    )
)]
#[get("/api/auth/verify_secure")]
pub async fn verify_secure(
    state: web::Data<AppState>,
    req: HttpRequest,
) -> ApiResult<HttpResponse> {
    let token = refresh_cookie(&req)?;
    let session_id = required_session_id(&req)?;
    let (session, user) = sessions::session_of_refresh(&state, &token, Some(&session_id)).await?;
    let (access_token, _) = sessions::sign_access(&state, &user, &session_id, session.id, true)?;
    let csrf = renewed_csrf(&state, &req, session.id);
    Ok(HttpResponse::Ok()
        .cookie(CookieJar::new(&state).csrf(&csrf))
        .json(VerifySecureResponse {
            valid: true,
            authenticated: true,
            user: SessionUser::from(&user),
            access_token,
            csrf_token: csrf,
        }))
}

/// Secure logout: needs `X-CSRF-Token` and the matching `X-Session-ID`; blacklists the
/// refresh token and removes both cookies.
#[utoipa::path(
    tag = "auth",
    params(
        ("X-Session-ID" = String, Header, description = "Must equal the session's id"),
        ("X-CSRF-Token" = String, Header, description = "The session's CSRF token (the `csrf_token` cookie's value)"),
    ),
    responses(
        (status = 200, body = Message),
        (status = 401, body = crate::http::error::ErrorBody),
        (status = 403, body = crate::http::error::ErrorBody, description = "CSRF check failed"),
    )
)]
#[post("/api/auth/logout_secure")]
pub async fn logout_secure(
    state: web::Data<AppState>,
    req: HttpRequest,
) -> ApiResult<HttpResponse> {
    let token = refresh_cookie(&req)?;
    let session_id = required_session_id(&req)?;
    let (session, _) = sessions::session_of_refresh(&state, &token, Some(&session_id)).await?;
    check_csrf(&req, session.id)?;
    sessions::end_session(&state, session.id, Some(&token)).await?;
    let jar = CookieJar::new(&state);
    Ok(HttpResponse::Ok()
        .cookie(jar.removal(REFRESH_COOKIE))
        .cookie(jar.removal(CSRF_COOKIE))
        .json(Message::new("Logged out")))
}

/// Standard logout: ends the bearer's session and, if given, blacklists a refresh token.
#[utoipa::path(
    tag = "auth",
    request_body(content = Option<LogoutRequest>),
    security(("bearer" = [])),
    responses((status = 200, body = Message), (status = 401, body = crate::http::error::ErrorBody))
)]
#[post("/api/auth/logout")]
pub async fn logout(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    body: Option<web::Json<LogoutRequest>>,
) -> ApiResult<HttpResponse> {
    let given = body
        .and_then(|b| b.into_inner().refresh_token)
        .filter(|t| !t.is_empty());
    sessions::end_session(&state, auth.session.id, None).await?;
    if let Some(token) = given {
        sessions::end_session_of_refresh(&state, &token).await?;
    }
    Ok(HttpResponse::Ok().json(Message::new("Logged out")))
}

async fn verified(state: &AppState, token: &str) -> ApiResult<HttpResponse> {
    let (_, _, user) = sessions::authenticate(state, token).await?;
    Ok(HttpResponse::Ok().json(VerifyResponse {
        valid: true,
        user: UserView::from(&user),
    }))
}

/// Checks an access token given as `token` query parameter or bearer header.
#[utoipa::path(
    tag = "auth",
    params(TokenQuery),
    responses((status = 200, body = VerifyResponse), (status = 401, body = crate::http::error::ErrorBody))
)]
#[get("/api/auth/verify")]
pub async fn verify(
    state: web::Data<AppState>,
    req: HttpRequest,
    query: web::Query<TokenQuery>,
) -> ApiResult<HttpResponse> {
    let token = query
        .into_inner()
        .token
        .or_else(|| bearer_token(&req))
        .ok_or(AuthError::Missing)?;
    verified(&state, &token).await
}

/// Checks the bearer token.
#[utoipa::path(
    tag = "auth",
    security(("bearer" = [])),
    responses((status = 200, body = VerifyResponse), (status = 401, body = crate::http::error::ErrorBody))
)]
#[get("/api/auth/verify_token")]
pub async fn verify_token(auth: AuthUser) -> ApiResult<HttpResponse> {
    Ok(HttpResponse::Ok().json(VerifyResponse {
        valid: true,
        user: UserView::from(&auth.user),
    }))
}

/// Always answers the same, whether or not the address has an account; a reset link is
/// e-mailed when it does.
#[utoipa::path(
    tag = "auth",
    request_body = EmailRequest,
    responses((status = 200, body = Message))
)]
#[post("/api/auth/forgot-password")]
pub async fn forgot_password(
    state: web::Data<AppState>,
    body: web::Json<EmailRequest>,
) -> ApiResult<HttpResponse> {
    // The work runs after the answer, so its duration reveals nothing.
    let state = state.into_inner();
    let email = body.into_inner().email;
    actix_web::rt::spawn(async move {
        if let Err(err) = accounts::request_password_reset(&state, &email).await {
            tracing::warn!(error = %err, "password reset request failed");
        }
    });
    Ok(HttpResponse::Ok().json(Message::new(
        "If an account exists for this address, a reset link has been sent",
    )))
}

/// Sets a new password with a reset token (1 hour, single use); every session ends, and the
/// other verification and reset links mailed before stop working.
#[utoipa::path(
    tag = "auth",
    request_body = ResetPasswordRequest,
    responses(
        (status = 200, body = Message),
        (status = 400, body = crate::http::error::ErrorBody, description = "Invalid, used or expired token"),
        (status = 422, body = crate::http::error::ErrorBody, description = "Password policy"),
    )
)]
#[post("/api/auth/reset-password")]
pub async fn reset_password(
    state: web::Data<AppState>,
    body: web::Json<ResetPasswordRequest>,
) -> ApiResult<HttpResponse> {
    check_password_policy(&body.new_password)
        .map_err(|m| ApiError::invalid_field("new_password", m))?;
    accounts::reset_password(&state, &body.token, &body.new_password).await?;
    Ok(HttpResponse::Ok().json(Message::new("Password updated")))
}

/// Verifies the e-mail address with the token from the verification e-mail; sends the
/// welcome e-mail.
#[utoipa::path(
    tag = "auth",
    request_body = TokenRequest,
    responses(
        (status = 200, body = Message),
        (status = 400, body = crate::http::error::ErrorBody, description = "Invalid, used or expired token"),
    )
)]
#[post("/api/auth/verify-email")]
pub async fn verify_email(
    state: web::Data<AppState>,
    body: web::Json<TokenRequest>,
) -> ApiResult<HttpResponse> {
    accounts::verify_email(&state, &body.token).await?;
    Ok(HttpResponse::Ok().json(Message::new("E-mail verified")))
}

/// Undoes an e-mail change with the token of the link sent to the previous address (7 days,
/// single use): the account gets that address back, verified; every session of the account
/// ends, and the verification and reset links mailed before, and the undo links of later
/// changes, stop working. No authentication: whoever changed the address may hold every
/// session.
#[utoipa::path(
    tag = "auth",
    request_body = TokenRequest,
    responses(
        (status = 200, body = Message, description = "Address restored; every session ended"),
        (status = 400, body = crate::http::error::ErrorBody, description = "Invalid, used or expired token (INVALID_TOKEN, TOKEN_USED, TOKEN_EXPIRED)"),
        (status = 409, body = crate::http::error::ErrorBody, description = "EMAIL_EXISTS: another account holds the previous address now"),
    )
)]
#[post("/api/auth/undo-email-change")]
pub async fn undo_email_change(
    state: web::Data<AppState>,
    body: web::Json<TokenRequest>,
) -> ApiResult<HttpResponse> {
    accounts::undo_email_change(&state, &body.token).await?;
    Ok(HttpResponse::Ok().json(Message::new(
        "E-mail address restored and every session ended; choose a new password",
    )))
}

/// Sends the verification e-mail again: at most once per two minutes.
#[utoipa::path(
    tag = "auth",
    security(("bearer" = [])),
    responses(
        (status = 200, body = Message),
        (status = 400, body = crate::http::error::ErrorBody, description = "Already verified"),
        (status = 429, body = crate::http::error::ErrorBody, description = "Sent less than two minutes ago; see Retry-After"),
    )
)]
#[post("/api/auth/send-verification-email")]
pub async fn send_verification_email(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
) -> ApiResult<HttpResponse> {
    if auth.user.email_verified {
        return Err(ApiError::bad_request(
            "ALREADY_VERIFIED",
            "This e-mail address is already verified",
        ));
    }
    rate_limit::hit(
        state.cache.as_ref(),
        &accounts::resend_key(auth.id()),
        1,
        Duration::from_secs(120),
    )
    .await?;
    accounts::send_verification(&state, &auth.user).await?;
    Ok(HttpResponse::Ok().json(Message::new("Verification e-mail sent")))
}

fn parse_marketplace_role(raw: &str) -> ApiResult<Role> {
    match Role::parse(raw) {
        Some(role) if role.self_selectable() => Ok(role),
        _ => Err(ApiError::invalid_field(
            "role",
            "must be empresa or experto",
        )),
    }
}

/// Adds `empresa` or `experto`; its profile is created afterwards.
#[utoipa::path(
    tag = "auth",
    request_body = RoleRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, body = UserView),
        (status = 409, body = crate::http::error::ErrorBody, description = "Role already held"),
    )
)]
#[post("/api/auth/add-role")]
pub async fn add_role(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    body: web::Json<RoleRequest>,
) -> ApiResult<HttpResponse> {
    let role = parse_marketplace_role(&body.role)?;
    let user = accounts::add_role(&state, auth.id(), role).await?;
    Ok(HttpResponse::Ok().json(UserView::from(&user)))
}

/// Changes the active role to one the user has.
#[utoipa::path(
    tag = "auth",
    request_body = RoleRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, body = UserView),
        (status = 403, body = crate::http::error::ErrorBody, description = "Role not held"),
    )
)]
#[post("/api/auth/switch-role")]
pub async fn switch_role(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    body: web::Json<RoleRequest>,
) -> ApiResult<HttpResponse> {
    let role = Role::parse(&body.role)
        .ok_or_else(|| ApiError::invalid_field("role", "must be empresa, experto or admin"))?;
    let user = accounts::switch_role(&state, &auth.user, role).await?;
    Ok(HttpResponse::Ok().json(UserView::from(&user)))
}

/// Creates an administrator from an invitation token (single use, expiry honoured).
#[utoipa::path(
    tag = "auth",
    request_body = AcceptInvitationRequest,
    responses(
        (status = 201, body = AcceptInvitationResponse),
        (status = 400, body = crate::http::error::ErrorBody, description = "Invalid, used or expired invitation"),
        (status = 409, body = crate::http::error::ErrorBody, description = "E-mail or username exists"),
    )
)]
#[post("/api/auth/accept-admin-invitation")]
pub async fn accept_admin_invitation(
    state: web::Data<AppState>,
    body: web::Json<AcceptInvitationRequest>,
) -> ApiResult<HttpResponse> {
    let mut errors = Vec::new();
    let username = Username::parse(&body.username)
        .map_err(|m| errors.push(FieldError::new("username", m)))
        .ok();
    if body.password.chars().count() < 8 {
        errors.push(FieldError::new("password", "must be at least 8 characters"));
    } else if body.password.len() > 72 {
        errors.push(FieldError::new("password", "must be at most 72 bytes"));
    }
    if body.token.trim().is_empty() {
        errors.push(FieldError::new("token", "required"));
    }
    let (Some(username), true) = (username, errors.is_empty()) else {
        return Err(ApiError::validation(errors));
    };
    let user =
        accounts::accept_admin_invitation(&state, body.token.trim(), &username, &body.password)
            .await
            .map_err(|e| match e {
                AccountError::ExpiredToken => {
                    ApiError::bad_request("INVITATION_EXPIRED", "This invitation has expired")
                }
                AccountError::UsedToken => ApiError::bad_request(
                    "INVITATION_USED",
                    "This invitation has already been used",
                ),
                AccountError::InvalidToken => {
                    ApiError::bad_request("INVALID_INVITATION", "This invitation is not valid")
                }
                other => other.into(),
            })?;
    Ok(HttpResponse::Created().json(AcceptInvitationResponse {
        message: "Administrator account created".into(),
        user: UserView::from(&user),
    }))
}

/// Mounts the account and session routes.
pub fn mount(cfg: &mut utoipa_actix_web::service_config::ServiceConfig) {
    cfg.service(register)
        .service(login)
        .service(login_secure)
        .service(refresh)
        .service(refresh_secure)
        .service(verify)
        .service(verify_secure)
        .service(verify_token)
        .service(logout)
        .service(logout_secure)
        .service(forgot_password)
        .service(reset_password)
        .service(verify_email)
        .service(undo_email_change)
        .service(send_verification_email)
        .service(add_role)
        .service(switch_role)
        .service(accept_admin_invitation);
}
