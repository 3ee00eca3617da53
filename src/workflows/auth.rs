//! Sessions and tokens.
//!
//! - Access token: JWT HS256 carrying the user and the session (`session_id`, the client's
//!   `X-Session-ID`, and `sid`, the stored session). Each request also checks that the stored
//!   session is live, so logout, a password reset or eviction over the session cap end it at
//!   once.
//! - Refresh token: an opaque random value, stored only as a hash on its session and rotated on
//!   every use; a rotated or logged-out token is also blacklisted in the shared cache.

use chrono::{DateTime, Duration, Utc};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

use crate::clock::Clock;
use crate::config::Settings;
use crate::domain::token::{constant_time_eq, hash_token, random_token};
use crate::domain::user::Role;
use crate::integrations::cache::Cache;
use crate::store::sessions::{self, NewSession, Session};
use crate::store::users::User;
use crate::store::{Db, LockScope, StoreError, users};

/// Why a session was ended; the reason decides what its next request hears.
pub mod revoke_reason {
    pub const LOGOUT: &str = "logout";
    pub const SESSION_LIMIT: &str = "session_limit";
    pub const PASSWORD_CHANGED: &str = "password_changed";
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AccessClaims {
    /// The user id, as text (JWT convention).
    pub sub: String,
    pub email: String,
    pub username: String,
    pub role: Role,
    /// The client's session id (`sess_…`).
    pub session_id: String,
    /// The stored session.
    pub sid: i64,
    /// Whether the session lives in cookies (secure flavour): then mutating requests on the
    /// protected set must carry the CSRF header.
    pub csrf: bool,
    pub iat: i64,
    pub exp: i64,
    pub jti: String,
    pub typ: String,
}

impl AccessClaims {
    pub fn user_id(&self) -> Option<i64> {
        self.sub.parse().ok()
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AuthError {
    #[error("not authenticated")]
    Missing,
    #[error("invalid token")]
    Invalid,
    #[error("token expired")]
    Expired,
    #[error("session expired")]
    SessionExpired,
    #[error("session revoked")]
    Revoked,
    #[error("session id mismatch")]
    SessionMismatch,
    #[error("account disabled")]
    Disabled,
}

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(transparent)]
    Auth(#[from] AuthError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Cache(#[from] crate::integrations::cache::CacheError),
    #[error("cannot sign token: {0}")]
    Sign(#[from] jsonwebtoken::errors::Error),
}

/// What a login or a refresh hands out.
pub struct Issued {
    pub access_token: String,
    pub refresh_token: String,
    pub claims: AccessClaims,
}

/// Request metadata kept with a session.
#[derive(Default, Clone)]
pub struct ClientInfo {
    pub user_agent: Option<String>,
    pub ip: Option<String>,
}

pub struct AuthService {
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
    access_ttl: Duration,
    refresh_ttl: Duration,
    max_sessions: usize,
    db: Db,
    cache: Arc<dyn Cache>,
    clock: Clock,
}

const BLACKLIST_PREFIX: &str = "auth:refresh-blacklist:";

impl AuthService {
    pub fn new(settings: &Settings, db: Db, cache: Arc<dyn Cache>, clock: Clock) -> Self {
        let secret = settings
            .jwt_secret
            .as_ref()
            .map(|s| s.expose().as_bytes().to_vec())
            .unwrap_or_default();
        // Only HS256 is accepted: a token naming another algorithm (`none` included) fails.
        let mut validation = Validation::new(Algorithm::HS256);
        // Expiry is checked against the service clock below, not the system clock.
        validation.validate_exp = false;
        validation.leeway = 0;
        validation.set_required_spec_claims(&["exp", "sub"]);
        Self {
            encoding: EncodingKey::from_secret(&secret),
            decoding: DecodingKey::from_secret(&secret),
            validation,
            access_ttl: Duration::minutes(i64::from(settings.jwt_access_expire_minutes)),
            refresh_ttl: Duration::days(i64::from(settings.jwt_refresh_expire_days)),
            max_sessions: settings.max_concurrent_sessions as usize,
            db,
            cache,
            clock,
        }
    }

    pub fn access_ttl(&self) -> Duration {
        self.access_ttl
    }

    pub fn refresh_ttl(&self) -> Duration {
        self.refresh_ttl
    }

    /// Opens a session for a user who just proved who they are. Over the session cap, the
    /// oldest sessions are ended (companies have no cap).
    pub async fn start_session(
        &self,
        user: &User,
        client_session_id: Option<&str>,
        cookie_flavour: bool,
        client: &ClientInfo,
    ) -> Result<Issued, SessionError> {
        let now = self.clock.now();
        let client_session_id = client_session_id
            .map(str::to_owned)
            .unwrap_or_else(|| format!("sess_{}", random_token(16)));
        let refresh_token = random_token(32);

        let mut tx = self.db.begin().await?;
        // Concurrent logins of one user queue here, so the cap holds under a burst.
        tx.lock(LockScope::User, user.id).await?;
        if user.active_role != Role::Empresa {
            let live = sessions::live_of_user(tx.exec(), user.id, now).await?;
            let excess = (live.len() + 1).saturating_sub(self.max_sessions);
            for old in live.iter().take(excess) {
                sessions::revoke(tx.exec(), old.id, revoke_reason::SESSION_LIMIT, now).await?;
            }
        }
        let sid = sessions::insert(
            tx.exec(),
            &NewSession {
                user_id: user.id,
                client_session_id: &client_session_id,
                refresh_token_hash: &hash_token(&refresh_token),
                expires_at: now + self.refresh_ttl,
                user_agent: client.user_agent.as_deref(),
                ip_address: client.ip.as_deref(),
            },
            now,
        )
        .await?;
        users::touch_login(tx.exec(), user.id, now).await?;
        tx.commit().await?;

        let (access_token, claims) =
            self.sign_access(user, &client_session_id, sid, cookie_flavour)?;
        Ok(Issued {
            access_token,
            refresh_token,
            claims,
        })
    }

    /// Issues a new access token for a live session.
    pub fn sign_access(
        &self,
        user: &User,
        client_session_id: &str,
        sid: i64,
        cookie_flavour: bool,
    ) -> Result<(String, AccessClaims), SessionError> {
        let now = self.clock.now();
        let claims = AccessClaims {
            sub: user.id.to_string(),
            email: user.email.clone(),
            username: user.username.clone(),
            role: user.active_role,
            session_id: client_session_id.to_owned(),
            sid,
            csrf: cookie_flavour,
            iat: now.timestamp(),
            exp: (now + self.access_ttl).timestamp(),
            jti: random_token(12),
            typ: "access".into(),
        };
        let token = jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)?;
        Ok((token, claims))
    }

    /// Checks an access token and its session; gives the claims, the session and the user.
    pub async fn authenticate(
        &self,
        token: &str,
    ) -> Result<(AccessClaims, Session, User), SessionError> {
        let claims = jsonwebtoken::decode::<AccessClaims>(token, &self.decoding, &self.validation)
            .map_err(|_| AuthError::Invalid)?
            .claims;
        if claims.typ != "access" {
            return Err(AuthError::Invalid.into());
        }
        let now = self.clock.now();
        if claims.exp <= now.timestamp() {
            return Err(AuthError::Expired.into());
        }
        let user_id = claims.user_id().ok_or(AuthError::Invalid)?;
        let mut conn = self.db.conn().await?;
        let session = sessions::find(conn.exec(), claims.sid)
            .await?
            .filter(|s| s.user_id == user_id)
            .ok_or(AuthError::Invalid)?;
        check_live(&session, now)?;
        let user = users::find(conn.exec(), user_id)
            .await?
            .ok_or(AuthError::Invalid)?;
        if !user.is_active {
            return Err(AuthError::Disabled.into());
        }
        Ok((claims, session, user))
    }

    /// The live session a refresh token belongs to, checked against the client's session id
    /// when one is required.
    pub async fn session_of_refresh(
        &self,
        refresh_token: &str,
        client_session_id: Option<&str>,
    ) -> Result<(Session, User), SessionError> {
        let hash = hash_token(refresh_token);
        if self.cache.get(&blacklist_key(&hash)).await?.is_some() {
            return Err(AuthError::Revoked.into());
        }
        let mut conn = self.db.conn().await?;
        let session = sessions::find_by_refresh_hash(conn.exec(), &hash)
            .await?
            .ok_or(AuthError::Invalid)?;
        check_live(&session, self.clock.now())?;
        if let Some(expected) = client_session_id {
            let stored = session.client_session_id.as_deref().unwrap_or_default();
            if !constant_time_eq(stored.as_bytes(), expected.as_bytes()) {
                return Err(AuthError::SessionMismatch.into());
            }
        }
        let user = users::find(conn.exec(), session.user_id)
            .await?
            .ok_or(AuthError::Invalid)?;
        if !user.is_active {
            return Err(AuthError::Disabled.into());
        }
        Ok((session, user))
    }

    /// Rotates a refresh token: the old one is dead from now on (and blacklisted), the new
    /// one comes with a fresh access token.
    pub async fn refresh(
        &self,
        refresh_token: &str,
        client_session_id: Option<&str>,
        cookie_flavour: bool,
    ) -> Result<Issued, SessionError> {
        let (session, user) = self
            .session_of_refresh(refresh_token, client_session_id)
            .await?;
        let now = self.clock.now();
        let old_hash = hash_token(refresh_token);
        let new_token = random_token(32);
        let mut conn = self.db.conn().await?;
        let rotated = sessions::rotate(
            conn.exec(),
            session.id,
            &old_hash,
            &hash_token(&new_token),
            now + self.refresh_ttl,
            now,
        )
        .await?;
        if !rotated {
            // Someone else used this token first.
            return Err(AuthError::Revoked.into());
        }
        self.blacklist(&old_hash).await?;
        let client_session = session.client_session_id.clone().unwrap_or_default();
        let (access_token, claims) =
            self.sign_access(&user, &client_session, session.id, cookie_flavour)?;
        Ok(Issued {
            access_token,
            refresh_token: new_token,
            claims,
        })
    }

    /// Ends a session; its access tokens stop working at once and its refresh token is
    /// blacklisted.
    pub async fn end_session(
        &self,
        session_id: i64,
        refresh_token: Option<&str>,
    ) -> Result<(), SessionError> {
        let mut conn = self.db.conn().await?;
        sessions::revoke(
            conn.exec(),
            session_id,
            revoke_reason::LOGOUT,
            self.clock.now(),
        )
        .await?;
        if let Some(token) = refresh_token {
            self.blacklist(&hash_token(token)).await?;
        }
        Ok(())
    }

    /// Ends a session found by its refresh token (standard logout with a body token).
    pub async fn end_session_of_refresh(&self, refresh_token: &str) -> Result<(), SessionError> {
        let hash = hash_token(refresh_token);
        let mut conn = self.db.conn().await?;
        if let Some(session) = sessions::find_by_refresh_hash(conn.exec(), &hash).await? {
            sessions::revoke(
                conn.exec(),
                session.id,
                revoke_reason::LOGOUT,
                self.clock.now(),
            )
            .await?;
        }
        self.blacklist(&hash).await?;
        Ok(())
    }

    async fn blacklist(&self, refresh_hash: &str) -> Result<(), SessionError> {
        let ttl = self
            .refresh_ttl
            .to_std()
            .unwrap_or(std::time::Duration::from_secs(7 * 86_400));
        self.cache
            .set(&blacklist_key(refresh_hash), "1", ttl)
            .await?;
        Ok(())
    }
}

fn blacklist_key(refresh_hash: &str) -> String {
    format!("{BLACKLIST_PREFIX}{refresh_hash}")
}

fn check_live(session: &Session, now: DateTime<Utc>) -> Result<(), AuthError> {
    match session.revoked_reason.as_deref() {
        _ if session.revoked_at.is_none() && session.expires_at > now => Ok(()),
        Some(revoke_reason::SESSION_LIMIT) => Err(AuthError::SessionExpired),
        Some(_) => Err(AuthError::Revoked),
        None => Err(AuthError::SessionExpired),
    }
}
