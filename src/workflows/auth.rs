//! Sessions and tokens.
//!
//! - Access token: JWT HS256 carrying the user and the session (`session_id`, the client's
//!   `X-Session-ID`, and `sid`, the stored session). Each request also checks that the stored
//!   session is live, so logout, a password reset or eviction over the session cap end it at
//!   once.
//! - Refresh token: an opaque random value, stored only as a hash on its session and rotated on
//!   every use; a rotated or logged-out token is also blacklisted in the shared cache.

use chrono::{DateTime, Utc};

use crate::domain::access_token::revoke_reason;
use crate::domain::access_token::{Bearer, TokenRejection};
use crate::domain::token::{constant_time_eq, hash_token, random_token};
use crate::domain::user::Role;
use crate::integrations::cache::{CacheError, fresh_token, token_or_fresh};
use crate::state::AppState;
use crate::store::sessions::{self, NewSession, Session};
use crate::store::users::User;
use crate::store::{LockScope, StoreError, session_cache, users};

pub use crate::domain::access_token::AccessClaims;

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
    #[error("account suspended")]
    Suspended,
    #[error("account inactive")]
    Inactive,
}

/// Refuses a session of an account that is no longer active (suspended or deactivated).
fn check_standing(user: &User, now: DateTime<Utc>) -> Result<(), AuthError> {
    if user.is_active {
        return Ok(());
    }
    Err(match user.refusal(now) {
        Some(users::Refusal::Suspended) => AuthError::Suspended,
        _ => AuthError::Inactive,
    })
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

const BLACKLIST_PREFIX: &str = "auth:refresh-blacklist:";

impl From<TokenRejection> for AuthError {
    fn from(rejection: TokenRejection) -> Self {
        match rejection {
            TokenRejection::Invalid => AuthError::Invalid,
            TokenRejection::Expired => AuthError::Expired,
        }
    }
}

/// Opens a session for a user who just proved who they are. Over the session cap, the
/// oldest sessions are ended (companies have no cap).
pub async fn start_session(
    state: &AppState,
    user: &User,
    client_session_id: Option<&str>,
    cookie_flavour: bool,
    client: &ClientInfo,
) -> Result<Issued, SessionError> {
    let now = state.clock.now();
    let client_session_id = client_session_id
        .map(str::to_owned)
        .unwrap_or_else(|| format!("sess_{}", random_token(16)));
    let refresh_token = random_token(32);
    let max_sessions = state.settings.max_concurrent_sessions as usize;

    let mut tx = state.db.begin().await?;
    // Concurrent logins of one user queue here, so the cap holds under a burst.
    tx.lock(LockScope::User, user.id).await?;
    let mut excess = 0;
    if user.active_role != Role::Empresa {
        let live = sessions::live_of_user(tx.exec(), user.id, now).await?;
        excess = (live.len() + 1).saturating_sub(max_sessions);
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
            expires_at: now + state.tokens.refresh_ttl,
            user_agent: client.user_agent.as_deref(),
            ip_address: client.ip.as_deref(),
        },
        now,
    )
    .await?;
    users::touch_login(tx.exec(), user.id, now).await?;
    tx.commit().await?;
    if excess > 0 {
        sessions_ended(state, user.id).await?;
    }

    let (access_token, claims) = sign_access(state, user, &client_session_id, sid, cookie_flavour)?;
    Ok(Issued {
        access_token,
        refresh_token,
        claims,
    })
}

/// Issues a new access token for a live session.
pub fn sign_access(
    state: &AppState,
    user: &User,
    client_session_id: &str,
    sid: i64,
    cookie_flavour: bool,
) -> Result<(String, AccessClaims), SessionError> {
    let bearer = Bearer {
        user_id: user.id,
        email: &user.email,
        username: &user.username,
        role: user.active_role,
        client_session_id,
        sid,
        cookie_flavour,
    };
    Ok(state.tokens.issue(&bearer, state.clock.now())?)
}

/// Checks an access token and its session; gives the claims, the session and the user.
pub async fn authenticate(
    state: &AppState,
    token: &str,
) -> Result<(AccessClaims, Session, User), SessionError> {
    let now = state.clock.now();
    let claims = state.tokens.read(token, now).map_err(AuthError::from)?;
    let user_id = claims.user_id().ok_or(AuthError::Invalid)?;
    let (session, user) = session_with_user(state, claims.sid)
        .await?
        .filter(|(s, _)| s.user_id == user_id)
        .ok_or(AuthError::Invalid)?;
    check_live(&session, now)?;
    check_standing(&user, now)?;
    Ok((claims, session, user))
}

/// Whether session `session_id` of `user_id` is still live and its user in good standing: a
/// long-lived connection (a WebSocket) asks again from time to time.
pub async fn still_valid(
    state: &AppState,
    session_id: i64,
    user_id: i64,
) -> Result<User, SessionError> {
    let (session, user) = session_with_user(state, session_id)
        .await?
        .filter(|(s, _)| s.user_id == user_id)
        .ok_or(AuthError::Invalid)?;
    let now = state.clock.now();
    check_live(&session, now)?;
    check_standing(&user, now)?;
    Ok(user)
}

/// A session with its user and roles: from memory when this instance holds it, else in one
/// round trip (then kept, unless a change was announced meanwhile). Liveness and standing are
/// the caller's to check, against the clock, either way.
async fn session_with_user(
    state: &AppState,
    session_id: i64,
) -> Result<Option<(Session, User)>, SessionError> {
    let mut held = None;
    // `None` while the cache is not listening: then nothing is served or kept.
    // Nor while the shared cache is unavailable: without the epoch an entry may be one whose
    // session ended, so the database answers (it holds every end).
    if let Some(start) = state.sessions.read_start()
        && let Some(epoch) = sessions_epoch(state).await?
    {
        if let Some(found) = state.sessions.get(session_id, &epoch) {
            return Ok(Some(found));
        }
        held = Some((start, epoch));
    }
    let found = {
        let mut conn = state.db.conn().await?;
        users::find_by_session(conn.exec(), session_id).await?
    };
    if let (Some((start, epoch)), Some((session, user))) = (held, &found) {
        state
            .sessions
            .store(start, epoch, session.clone(), user.clone());
    }
    Ok(found)
}

/// The sessions' current epoch, or `None` while the shared cache is unavailable.
async fn sessions_epoch(state: &AppState) -> Result<Option<String>, CacheError> {
    let key = session_cache::EPOCH_KEY;
    let epoch = match state.cache.get(key).await {
        Ok(found) => token_or_fresh(&*state.cache, key, found, session_cache::EPOCH_TTL).await,
        Err(error) => Err(error),
    };
    match epoch {
        Ok(epoch) => Ok(Some(epoch)),
        Err(error) if error.is_unavailable() => Ok(None),
        Err(error) => Err(error),
    }
}

/// After the commit of a change to `user_id` that ends no session (a role added, an address
/// verified or changed): this instance forgets the user's cached sessions at once, so the
/// caller's next request reads the change back; other instances hear of it through the
/// database's `auth_changed` announcement.
pub fn user_changed(state: &AppState, user_id: i64) {
    state.sessions.forget_user(user_id);
}

/// After the commit that ended sessions of `user_id` (or cut its rights), before answering:
/// no instance serves a session it read before from memory any more (the epoch changes), and
/// this one forgets the user's sessions at once.
pub async fn sessions_ended(state: &AppState, user_id: i64) -> Result<(), CacheError> {
    state.sessions.forget_user(user_id);
    new_epoch(state).await
}

/// [`sessions_ended`] for one session.
pub async fn session_ended(state: &AppState, session_id: i64) -> Result<(), CacheError> {
    state.sessions.forget_session(session_id);
    new_epoch(state).await
}

/// Replaces the sessions' epoch. While the shared cache is unavailable the end still holds:
/// no instance serves a session from memory without reading the epoch, each reads the session
/// (ended in the database) instead, and the database's `auth_changed` announcement of the end
/// makes every instance forget the user's sessions held from before.
async fn new_epoch(state: &AppState) -> Result<(), CacheError> {
    let epoch = fresh_token();
    match state
        .cache
        .set(session_cache::EPOCH_KEY, &epoch, session_cache::EPOCH_TTL)
        .await
    {
        Err(error) if error.is_unavailable() => {
            tracing::warn!(%error, "the sessions' epoch was not replaced: the cache is unavailable");
            Ok(())
        }
        replaced => replaced,
    }
}

/// The live session a refresh token belongs to, checked against the client's session id
/// when one is required.
pub async fn session_of_refresh(
    state: &AppState,
    refresh_token: &str,
    client_session_id: Option<&str>,
) -> Result<(Session, User), SessionError> {
    let hash = hash_token(refresh_token);
    if let Some(entry) = state.cache.get(&blacklist_key(&hash)).await? {
        // A rotated token names the session it was rotated in: its reuse ends that session,
        // so the newer token a thief (or the owner) holds stops working too.
        if let Ok(session_id) = entry.parse::<i64>() {
            let mut conn = state.db.conn().await?;
            sessions::revoke(
                conn.exec(),
                session_id,
                revoke_reason::REFRESH_REUSED,
                state.clock.now(),
            )
            .await?;
            session_ended(state, session_id).await?;
        }
        return Err(AuthError::Revoked.into());
    }
    let mut conn = state.db.conn().await?;
    let session = sessions::find_by_refresh_hash(conn.exec(), &hash)
        .await?
        .ok_or(AuthError::Invalid)?;
    check_live(&session, state.clock.now())?;
    if let Some(expected) = client_session_id {
        let stored = session.client_session_id.as_deref().unwrap_or_default();
        if !constant_time_eq(stored.as_bytes(), expected.as_bytes()) {
            return Err(AuthError::SessionMismatch.into());
        }
    }
    let user = users::find(conn.exec(), session.user_id)
        .await?
        .ok_or(AuthError::Invalid)?;
    check_standing(&user, state.clock.now())?;
    Ok((session, user))
}

/// Rotates a refresh token: the old one is dead from now on (and blacklisted), the new
/// one comes with a fresh access token.
pub async fn refresh(
    state: &AppState,
    refresh_token: &str,
    client_session_id: Option<&str>,
    cookie_flavour: bool,
) -> Result<Issued, SessionError> {
    let (session, user) = session_of_refresh(state, refresh_token, client_session_id).await?;
    let now = state.clock.now();
    let old_hash = hash_token(refresh_token);
    let new_token = random_token(32);
    let mut conn = state.db.conn().await?;
    let rotated = sessions::rotate(
        conn.exec(),
        session.id,
        &old_hash,
        &hash_token(&new_token),
        now + state.tokens.refresh_ttl,
        now,
    )
    .await?;
    if !rotated {
        // Someone else used this token first.
        return Err(AuthError::Revoked.into());
    }
    blacklist(state, &old_hash, Some(session.id)).await?;
    let client_session = session.client_session_id.clone().unwrap_or_default();
    let (access_token, claims) =
        sign_access(state, &user, &client_session, session.id, cookie_flavour)?;
    Ok(Issued {
        access_token,
        refresh_token: new_token,
        claims,
    })
}

/// Ends a session; its access tokens stop working at once and its refresh token is
/// blacklisted.
pub async fn end_session(
    state: &AppState,
    session_id: i64,
    refresh_token: Option<&str>,
) -> Result<(), SessionError> {
    let mut conn = state.db.conn().await?;
    sessions::revoke(
        conn.exec(),
        session_id,
        revoke_reason::LOGOUT,
        state.clock.now(),
    )
    .await?;
    session_ended(state, session_id).await?;
    if let Some(token) = refresh_token {
        blacklist(state, &hash_token(token), None).await?;
    }
    Ok(())
}

/// Ends a session found by its refresh token (standard logout with a body token).
pub async fn end_session_of_refresh(
    state: &AppState,
    refresh_token: &str,
) -> Result<(), SessionError> {
    let hash = hash_token(refresh_token);
    let mut conn = state.db.conn().await?;
    if let Some(session) = sessions::find_by_refresh_hash(conn.exec(), &hash).await? {
        sessions::revoke(
            conn.exec(),
            session.id,
            revoke_reason::LOGOUT,
            state.clock.now(),
        )
        .await?;
        session_ended(state, session.id).await?;
    }
    blacklist(state, &hash, None).await?;
    Ok(())
}

/// Refuses a refresh token from now on; a rotated one remembers its session (`rotated_in`)
/// so that its reuse ends the session.
async fn blacklist(
    state: &AppState,
    refresh_hash: &str,
    rotated_in: Option<i64>,
) -> Result<(), SessionError> {
    let ttl = state
        .tokens
        .refresh_ttl
        .to_std()
        .unwrap_or(std::time::Duration::from_secs(7 * 86_400));
    state
        .cache
        .set(
            &blacklist_key(refresh_hash),
            &rotated_in.map_or_else(|| "ended".to_owned(), |id| id.to_string()),
            ttl,
        )
        .await?;
    Ok(())
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
