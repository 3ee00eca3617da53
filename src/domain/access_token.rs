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

/// Random bytes in a CSRF value: a value made afresh differs from every earlier one.
const CSRF_NONCE_LEN: usize = 16;
/// Raw lengths of a CSRF value: the current `nonce · tag`, and the previous releases' `tag`.
const CURRENT_CSRF_LEN: usize = CSRF_NONCE_LEN + 32;
const PREVIOUS_CSRF_LEN: usize = 32;

/// The signing key and lifetimes of access and refresh tokens.
pub struct AccessTokens {
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
    pub access_ttl: Duration,
    pub refresh_ttl: Duration,
    /// Tags each session's CSRF values (a key of its own, from the signing secret).
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

    /// A new CSRF value for session `sid`: a random nonce and its tag for the session, so a
    /// client can neither choose one nor carry one from a session to another (the double
    /// submit is bound to the session), and a value made afresh is never the one before.
    pub fn new_csrf_token(&self, sid: i64) -> String {
        let mut nonce = [0u8; CSRF_NONCE_LEN];
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut nonce);
        self.csrf_token_with(sid, &nonce)
    }

    /// The CSRF value of session `sid` carrying `nonce`: `nonce · MAC(key, sid · nonce)`,
    /// URL-safe base64 without padding.
    fn csrf_token_with(&self, sid: i64, nonce: &[u8; CSRF_NONCE_LEN]) -> String {
        let mut value = nonce.to_vec();
        value.extend_from_slice(&self.csrf_tag(sid, nonce));
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(value)
    }

    /// The tag binding `nonce` to session `sid` (both fixed-length, so no two pairs share a
    /// message).
    fn csrf_tag(&self, sid: i64, nonce: &[u8]) -> [u8; 32] {
        let mut message = sid.to_be_bytes().to_vec();
        message.extend_from_slice(nonce);
        mac(&self.csrf_key, &message)
    }

    /// Whether `presented` is a CSRF value made for session `sid`: its tag is checked in
    /// constant time. Any value the session was given verifies for its whole life.
    ///
    /// The releases before this one gave a session one value, `MAC(key, sid)`: it verifies
    /// too, so the sessions they signed in keep writing through a rolling upgrade (and after
    /// it, for their life). It is as bound to the session and as unforgeable as the current
    /// form; it is only never made afresh.
    pub fn csrf_verifies(&self, sid: i64, presented: &str) -> bool {
        let Ok(raw) = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(presented) else {
            return false;
        };
        match raw.len() {
            PREVIOUS_CSRF_LEN => constant_time_eq(&mac(&self.csrf_key, &sid.to_be_bytes()), &raw),
            CURRENT_CSRF_LEN => {
                let (nonce, tag) = raw.split_at(CSRF_NONCE_LEN);
                constant_time_eq(&self.csrf_tag(sid, nonce), tag)
            }
            _ => false,
        }
    }

    /// The CSRF value to hand session `sid` when the client may hold one (refresh, verify):
    /// the `held` value itself when it is this session's, so only its cookie's max age is
    /// renewed; otherwise (none, or another session's or forged) a new one.
    pub fn csrf_token_renewed(&self, sid: i64, held: Option<&str>) -> String {
        match held {
            Some(value) if self.csrf_verifies(sid, value) => value.to_owned(),
            _ => self.new_csrf_token(sid),
        }
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

    fn csrf_keys() -> AccessTokens {
        tokens(b"0123456789abcdef0123456789abcdef")
    }

    /// `value` with its byte `at` (of the decoded value) changed.
    fn flipped(value: &str, at: usize) -> String {
        let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let mut raw = engine.decode(value).unwrap();
        raw[at] ^= 0x01;
        engine.encode(raw)
    }

    #[test]
    fn fresh_csrf_values_differ_and_verify_for_their_session_only() {
        let keys = csrf_keys();
        let (a, b) = (keys.new_csrf_token(3), keys.new_csrf_token(3));
        assert_ne!(a, b, "each value has a nonce of its own");
        assert!(keys.csrf_verifies(3, &a) && keys.csrf_verifies(3, &b));
        assert!(!keys.csrf_verifies(4, &a), "another session's value");
        assert!(
            !tokens(b"fedcba9876543210fedcba9876543210").csrf_verifies(3, &a),
            "another key's value"
        );
        assert!(
            a.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
            "URL-safe, unpadded: {a}"
        );
    }

    #[test]
    fn a_changed_or_malformed_csrf_value_fails() {
        let keys = csrf_keys();
        let value = keys.new_csrf_token(3);
        let cases = [
            (flipped(&value, 0), "nonce changed"),
            (
                flipped(&value, CSRF_NONCE_LEN - 1),
                "nonce's last byte changed",
            ),
            (flipped(&value, CSRF_NONCE_LEN), "tag changed"),
            (
                flipped(&value, CSRF_NONCE_LEN + 31),
                "tag's last byte changed",
            ),
            (value[..value.len() - 2].to_owned(), "truncated"),
            (format!("{value}AA"), "extended"),
            (format!("{value}="), "padded"),
            (value.replace(['-', '_'], "+"), "standard alphabet"),
            (String::new(), "empty"),
            ("attackerchosen1234".to_owned(), "chosen by the client"),
        ];
        for (presented, case) in cases {
            if presented != value {
                assert!(!keys.csrf_verifies(3, &presented), "{case}: {presented}");
            }
        }
    }

    /// The value the previous releases gave a session, `MAC(key, sid)`, made as they made it.
    fn previous_release_value(keys: &AccessTokens, sid: i64) -> String {
        let tag = mac(&keys.csrf_key, &sid.to_be_bytes());
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(tag)
    }

    #[test]
    fn a_previous_release_value_verifies_for_its_session_only() {
        let keys = csrf_keys();
        let held = previous_release_value(&keys, 3);
        assert!(
            keys.csrf_verifies(3, &held),
            "a session signed in before the upgrade"
        );
        assert!(!keys.csrf_verifies(4, &held), "another session");
        assert!(!keys.csrf_verifies(3, &flipped(&held, 0)), "changed");
        assert_eq!(keys.csrf_token_renewed(3, Some(&held)), held, "kept");
        // A current value's tag alone is not a previous-release value.
        let current = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(keys.new_csrf_token(3))
            .unwrap();
        let tag_alone =
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&current[CSRF_NONCE_LEN..]);
        assert!(!keys.csrf_verifies(3, &tag_alone));
    }

    #[test]
    fn a_held_csrf_value_is_kept_only_for_its_own_session() {
        let keys = csrf_keys();
        let held = keys.new_csrf_token(3);
        assert_eq!(
            keys.csrf_token_renewed(3, Some(&held)),
            held,
            "its own kept"
        );
        // None held, a forged one, or another session's: a new value of this session.
        for (sid, presented) in [(3, None), (3, Some("forged")), (4, Some(held.as_str()))] {
            let made = keys.csrf_token_renewed(sid, presented);
            assert_ne!(made, held);
            assert_ne!(Some(made.as_str()), presented);
            assert!(keys.csrf_verifies(sid, &made));
        }
    }

    proptest::proptest! {
        /// A value verifies for the session it was made for and no other, and changing any
        /// byte of its nonce or tag makes it fail.
        #[test]
        fn a_csrf_value_verifies_only_for_its_session_and_unchanged(
            sid in proptest::num::i64::ANY,
            other in proptest::num::i64::ANY,
            nonce in proptest::array::uniform16(proptest::num::u8::ANY),
            at in 0..CSRF_NONCE_LEN + 32,
        ) {
            let keys = csrf_keys();
            let value = keys.csrf_token_with(sid, &nonce);
            proptest::prop_assert!(keys.csrf_verifies(sid, &value));
            proptest::prop_assert_eq!(keys.csrf_verifies(other, &value), other == sid);
            proptest::prop_assert!(!keys.csrf_verifies(sid, &flipped(&value, at)));
        }
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
