//! Access tokens: HS256 JWTs naming the user and the session. Signing and reading are pure;
//! whether the session behind a token is still live is the sessions workflow's question.

use base64::Engine as _;
use chrono::{DateTime, Duration, Utc};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

use crate::domain::token::{constant_time_eq, random_token};

/// HMAC-SHA256 of `message` under `key`.
fn mac(key: &[u8], message: &[u8]) -> [u8; 32] {
    use hmac::Mac as _;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).expect("any key length");
    mac.update(message);
    mac.finalize().into_bytes().into()
}
use crate::domain::user::Role;

/// Why a session was ended (`auth_sessions.revoked_reason`); the reason decides what its
/// next request hears.
pub mod revoke_reason {
    pub const LOGOUT: &str = "logout";
    pub const SESSION_LIMIT: &str = "session_limit";
    pub const PASSWORD_CHANGED: &str = "password_changed";
    /// A refresh token was presented again after it had been rotated: someone else holds a
    /// copy, so the whole session (every token descended from it) ends.
    pub const REFRESH_REUSED: &str = "refresh_reused";
    pub const SUSPENDED: &str = "suspended";
    pub const DEACTIVATED: &str = "deactivated";
    pub const PASSWORD_SET_BY_ADMIN: &str = "password_set_by_admin";
    pub const DELETION_CONFIRMED: &str = "deletion_confirmed";
    /// An e-mail change was undone from the previous address's mailbox: whoever made it may
    /// hold any of the sessions.
    pub const EMAIL_CHANGE_UNDONE: &str = "email_change_undone";
    /// The session sent a login budget's worth of wrong current passwords (password or
    /// e-mail change) in one window.
    pub const PASSWORD_CHECKS_FAILED: &str = "password_checks_failed";
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

/// Who and which session a token is issued for.
pub struct Bearer<'a> {
    pub user_id: i64,
    pub email: &'a str,
    pub username: &'a str,
    pub role: Role,
    pub client_session_id: &'a str,
    pub sid: i64,
    pub cookie_flavour: bool,
}

/// Why a token was not accepted.
#[derive(Debug, PartialEq, Eq)]
pub enum TokenRejection {
    Invalid,
    Expired,
}

/// The signing key and lifetimes of access and refresh tokens.
pub struct AccessTokens {
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
    pub access_ttl: Duration,
    pub refresh_ttl: Duration,
    /// Derives each session's CSRF token (a key of its own, from the signing secret).
    csrf_key: [u8; 32],
}

impl AccessTokens {
    pub fn new(secret: &[u8], access_ttl: Duration, refresh_ttl: Duration) -> Self {
        super::jwt_hmac::install();
        // Only HS256 is accepted: a token naming another algorithm (`none` included) fails.
        let mut validation = Validation::new(Algorithm::HS256);
        // Expiry is checked against the service clock in `read`, not the system clock.
        validation.validate_exp = false;
        validation.leeway = 0;
        validation.set_required_spec_claims(&["exp", "sub"]);
        Self {
            encoding: EncodingKey::from_secret(secret),
            decoding: DecodingKey::from_secret(secret),
            validation,
            access_ttl,
            refresh_ttl,
            csrf_key: mac(secret, b"csrf token key"),
        }
    }

    /// The CSRF token of session `sid`: derived from it under a server key, so a client can
    /// neither choose it nor carry one from a session to another (the double submit is bound
    /// to the session). Stable for the session's life, renewed with its cookie.
    pub fn csrf_token(&self, sid: i64) -> String {
        let tag = mac(&self.csrf_key, &sid.to_be_bytes());
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(tag)
    }

    /// Whether `presented` is session `sid`'s CSRF token, compared in constant time.
    pub fn csrf_matches(&self, sid: i64, presented: &str) -> bool {
        constant_time_eq(self.csrf_token(sid).as_bytes(), presented.as_bytes())
    }

    /// Signs an access token valid for `access_ttl` from `now`.
    pub fn issue(
        &self,
        bearer: &Bearer<'_>,
        now: DateTime<Utc>,
    ) -> Result<(String, AccessClaims), jsonwebtoken::errors::Error> {
        let claims = AccessClaims {
            sub: bearer.user_id.to_string(),
            email: bearer.email.to_owned(),
            username: bearer.username.to_owned(),
            role: bearer.role,
            session_id: bearer.client_session_id.to_owned(),
            sid: bearer.sid,
            csrf: bearer.cookie_flavour,
            iat: now.timestamp(),
            exp: (now + self.access_ttl).timestamp(),
            jti: random_token(12),
            typ: "access".into(),
        };
        let token = jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)?;
        Ok((token, claims))
    }

    /// The claims of a well-signed access token that has not expired at `now`.
    pub fn read(&self, token: &str, now: DateTime<Utc>) -> Result<AccessClaims, TokenRejection> {
        let claims = jsonwebtoken::decode::<AccessClaims>(token, &self.decoding, &self.validation)
            .map_err(|_| TokenRejection::Invalid)?
            .claims;
        if claims.typ != "access" || claims.user_id().is_none() {
            return Err(TokenRejection::Invalid);
        }
        if claims.exp <= now.timestamp() {
            return Err(TokenRejection::Expired);
        }
        Ok(claims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(secret: &[u8]) -> AccessTokens {
        AccessTokens::new(secret, Duration::minutes(15), Duration::days(7))
    }

    fn bearer() -> Bearer<'static> {
        Bearer {
            user_id: 7,
            email: "a@example.com",
            username: "alice",
            role: Role::Experto,
            client_session_id: "sess_1",
            sid: 3,
            cookie_flavour: true,
        }
    }

    #[test]
    fn a_token_reads_back_until_it_expires() {
        let keys = tokens(b"0123456789abcdef0123456789abcdef");
        let now = Utc::now();
        let (token, issued) = keys.issue(&bearer(), now).unwrap();
        let read = keys.read(&token, now).unwrap();
        assert_eq!((read.user_id(), read.sid, read.csrf), (Some(7), 3, true));
        assert_eq!(read.jti, issued.jti);
        assert_eq!(
            keys.read(&token, now + Duration::minutes(15)).unwrap_err(),
            TokenRejection::Expired
        );
    }

    #[test]
    fn another_key_or_a_changed_token_is_invalid() {
        let now = Utc::now();
        let (token, _) = tokens(b"0123456789abcdef0123456789abcdef")
            .issue(&bearer(), now)
            .unwrap();
        let other = tokens(b"fedcba9876543210fedcba9876543210");
        assert_eq!(
            other.read(&token, now).unwrap_err(),
            TokenRejection::Invalid
        );
        let mut changed = token.clone();
        changed.pop();
        let same = tokens(b"0123456789abcdef0123456789abcdef");
        assert_eq!(
            same.read(&changed, now).unwrap_err(),
            TokenRejection::Invalid
        );
    }
}
