//! Authentication extractors, the CSRF double submit and the session cookies.
//!
//! - [`AuthUser`]: a valid access token (`Authorization: Bearer …`) of a live session.
//! - [`CsrfChecked`]: the same, plus the CSRF check for mutating requests on the protected set.
//! - [`AdminUser`]: an authenticated user holding the `admin` role.

use actix_web::cookie::{Cookie, SameSite, time::Duration as CookieDuration};
use actix_web::dev::Payload;
use actix_web::http::header::AUTHORIZATION;
use actix_web::{FromRequest, HttpMessage as _, HttpRequest, web};
use futures_util::future::LocalBoxFuture;

use super::error::ApiError;
use crate::domain::token::constant_time_eq;
use crate::domain::user::Role;
use crate::state::AppState;
use crate::store::sessions::Session;
use crate::store::users::User;
use crate::workflows::auth::{AccessClaims, AuthError, ClientInfo, SessionError};

pub const REFRESH_COOKIE: &str = "refresh_token";
pub const CSRF_COOKIE: &str = "csrf_token";
pub const CSRF_HEADER: &str = "X-CSRF-Token";
pub const SESSION_HEADER: &str = "X-Session-ID";

/// The caller, authenticated by an access token of a live session.
pub struct AuthUser {
    pub user: User,
    pub claims: AccessClaims,
    pub session: Session,
}

impl AuthUser {
    pub fn id(&self) -> i64 {
        self.user.id
    }

    pub fn has_role(&self, role: Role) -> bool {
        self.user.roles.contains(&role)
    }
}

impl From<AuthError> for ApiError {
    fn from(err: AuthError) -> Self {
        let (code, detail) = match err {
            AuthError::Missing => ("NOT_AUTHENTICATED", "Authentication required"),
            AuthError::Invalid => ("INVALID_TOKEN", "The token is invalid"),
            AuthError::Expired => ("TOKEN_EXPIRED", "The token has expired; refresh it"),
            AuthError::SessionExpired => {
                ("SESSION_EXPIRED", "This session has expired; sign in again")
            }
            AuthError::Revoked => ("TOKEN_REVOKED", "This token is no longer valid"),
            AuthError::SessionMismatch => (
                "SESSION_MISMATCH",
                "The session id does not match this session",
            ),
            AuthError::Suspended => ("ACCOUNT_SUSPENDED", "This account is suspended"),
            AuthError::Inactive => ("ACCOUNT_INACTIVE", "This account is inactive"),
        };
        ApiError::unauthorized(code, detail)
    }
}

impl From<SessionError> for ApiError {
    fn from(err: SessionError) -> Self {
        match err {
            SessionError::Auth(auth) => auth.into(),
            SessionError::Store(store) => store.into(),
            SessionError::Cache(cache) => cache.into(),
            SessionError::Sign(sign) => ApiError::internal(sign),
        }
    }
}

fn state_of(req: &HttpRequest) -> Result<web::Data<AppState>, ApiError> {
    req.app_data::<web::Data<AppState>>()
        .cloned()
        .ok_or_else(|| ApiError::internal(anyhow::anyhow!("application state missing")))
}

/// The bearer token of a request, if any.
pub fn bearer_token(req: &HttpRequest) -> Option<String> {
    let value = req.headers().get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim().to_owned())
        .filter(|t| !t.is_empty())
}

/// A caller authenticated earlier in the same request (by `http::idempotency`, which must
/// know whose key it holds), handed to [`AuthUser`] so the token is checked once. Only the
/// service's own middleware puts it in the request's extensions.
pub(crate) struct Authenticated(pub AuthUser);

impl FromRequest for AuthUser {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Self, Self::Error>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let known = req.extensions_mut().remove::<Authenticated>();
        let req = req.clone();
        Box::pin(async move {
            if let Some(Authenticated(auth)) = known {
                return Ok(auth);
            }
            let state = state_of(&req)?;
            let token = bearer_token(&req).ok_or(AuthError::Missing)?;
            let (claims, session, user) =
                crate::workflows::auth::authenticate(&state, &token).await?;
            Ok(AuthUser {
                user,
                claims,
                session,
            })
        })
    }
}

/// An authenticated caller whose mutating request passed the CSRF double submit: for cookie
/// sessions (and whenever a `csrf_token` cookie is sent), the `X-CSRF-Token` header must be
/// the value its cookie holds, and that value one made for this session
/// (`AccessTokens::csrf_verifies`), both compared in constant time; otherwise 403.
/// Bearer-only sessions carry no ambient credential a browser would attach, so they need no
/// CSRF token.
pub struct CsrfChecked(pub AuthUser);

impl FromRequest for CsrfChecked {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Self, Self::Error>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let auth = AuthUser::from_request(req, payload);
        let req = req.clone();
        Box::pin(async move {
            let auth = auth.await?;
            if csrf_applies(&auth, &req) {
                check_csrf(&req, auth.claims.sid)?;
            }
            Ok(CsrfChecked(auth))
        })
    }
}

/// Whether a request of this session needs the double submit: cookie sessions, and any
/// request that carries a `csrf_token` cookie.
fn csrf_applies(auth: &AuthUser, req: &HttpRequest) -> bool {
    auth.claims.csrf || req.cookie(CSRF_COOKIE).is_some()
}

/// The double-submit check of session `sid`: the `csrf_token` cookie and the header carry
/// the same value, and it is one made for this session (any of them: a refresh without the
/// cookie makes another). A pair of the client's choosing, or another session's, fails.
pub fn check_csrf(req: &HttpRequest, sid: i64) -> Result<(), ApiError> {
    let cookie = req.cookie(CSRF_COOKIE);
    let header = req.headers().get(CSRF_HEADER).and_then(|v| v.to_str().ok());
    let tokens = req
        .app_data::<web::Data<AppState>>()
        .map(|state| state.tokens.clone());
    match (cookie, header, tokens) {
        (Some(cookie), Some(header), Some(tokens))
            if constant_time_eq(cookie.value().as_bytes(), header.as_bytes())
                && tokens.csrf_verifies(sid, cookie.value()) =>
        {
            Ok(())
        }
        _ => Err(ApiError::new(
            actix_web::http::StatusCode::FORBIDDEN,
            "CSRF_FAILED",
            "Missing or invalid CSRF token",
        )),
    }
}

/// An authenticated administrator; mutating requests pass the CSRF check of [`CsrfChecked`].
pub struct AdminUser(pub AuthUser);

impl FromRequest for AdminUser {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Self, Self::Error>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let auth = AuthUser::from_request(req, payload);
        let req = req.clone();
        Box::pin(async move {
            let auth = auth.await?;
            if !auth.has_role(Role::Admin) {
                return Err(ApiError::forbidden("Administrators only"));
            }
            // Administrators' mutations get the same CSRF double submit as everyone's.
            let mutating = !matches!(req.method().as_str(), "GET" | "HEAD" | "OPTIONS");
            if mutating && csrf_applies(&auth, &req) {
                check_csrf(&req, auth.claims.sid)?;
            }
            Ok(AdminUser(auth))
        })
    }
}

/// The `X-Session-ID` header, when it has the `sess_<random>` shape.
pub fn client_session_id(req: &HttpRequest) -> Option<String> {
    req.headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| {
            v.len() > 5
                && v.len() <= 128
                && v.starts_with("sess_")
                && v.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        })
        .map(str::to_owned)
}

/// User agent and peer address of the request, kept with a new session.
pub fn client_info(req: &HttpRequest) -> ClientInfo {
    ClientInfo {
        user_agent: req
            .headers()
            .get(actix_web::http::header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.chars().take(256).collect()),
        ip: peer_ip(req),
    }
}

/// The client's address (forwarding headers only from `TRUSTED_PROXIES`).
pub fn peer_ip(req: &HttpRequest) -> Option<String> {
    super::client_ip::client_ip(req).map(|ip| ip.to_string())
}

/// Builds the session cookies with the attributes of the specification's table:
/// development omits the domain and `Secure`; production sets both. Always HttpOnly and
/// SameSite=Strict.
pub struct CookieJar<'a> {
    state: &'a AppState,
}

impl<'a> CookieJar<'a> {
    pub fn new(state: &'a AppState) -> Self {
        Self { state }
    }

    fn build(&self, name: &'static str, value: String, max_age: CookieDuration) -> Cookie<'static> {
        let mut cookie = Cookie::build(name, value)
            .path("/")
            .http_only(true)
            .same_site(SameSite::Strict)
            .secure(self.state.settings.is_production())
            .max_age(max_age)
            .finish();
        if self.state.settings.is_production()
            && let Some(domain) = &self.state.settings.cookie_domain
        {
            cookie.set_domain(domain.clone());
        }
        cookie
    }

    pub fn refresh(&self, token: &str) -> Cookie<'static> {
        let ttl = self.state.tokens.refresh_ttl;
        self.build(
            REFRESH_COOKIE,
            token.to_owned(),
            CookieDuration::seconds(ttl.num_seconds()),
        )
    }

    pub fn csrf(&self, token: &str) -> Cookie<'static> {
        let ttl = self.state.tokens.access_ttl;
        self.build(
            CSRF_COOKIE,
            token.to_owned(),
            CookieDuration::seconds(ttl.num_seconds()),
        )
    }

    /// A cookie that makes the browser forget `name`.
    pub fn removal(&self, name: &'static str) -> Cookie<'static> {
        self.build(name, String::new(), CookieDuration::ZERO)
    }
}
