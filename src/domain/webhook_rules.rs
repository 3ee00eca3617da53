//! Pure rules of outgoing user webhooks: which destinations are allowed (the server-side
//! request forgery guard), the retry schedule, the signatures receivers verify, and which
//! secrets sign while a regenerated secret's predecessor is still honoured.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use base64::Engine as _;
use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use super::backoff::{self, Backoff};
use super::state::state_enum;

state_enum! {
    /// An outgoing webhook delivery (`webhook_deliveries.state`): waiting for its next
    /// attempt (`pending`), received (`delivered`), given up after the last retry
    /// (`failed`), or dropped because its destination was switched off (`disabled`).
    pub enum WebhookDeliveryState {
        Pending = "pending",
        Delivered = "delivered",
        Failed = "failed",
        Disabled = "disabled",
    }
}

/// How an address stands to the guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressClass {
    /// A routable public address.
    Public,
    /// Loopback, private (RFC 1918), unique-local or carrier-grade NAT: allowed only with
    /// `WEBHOOK_ALLOW_PRIVATE_TARGETS=true`.
    Private,
    /// Link-local, cloud metadata, multicast, unspecified, broadcast or reserved: never.
    Forbidden,
}

/// Classifies an address; IPv4-mapped and IPv4-compatible IPv6 forms are judged as the IPv4
/// address they carry.
pub fn classify(ip: IpAddr) -> AddressClass {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return classify_v4(v4);
            }
            classify_v6(v6)
        }
    }
}

fn classify_v4(ip: Ipv4Addr) -> AddressClass {
    let [a, b, c, _] = ip.octets();
    if ip.is_unspecified()
        || ip.is_link_local()
        || ip.is_multicast()
        || ip.is_broadcast()
        || a == 0
        || a >= 240
        // cloud metadata endpoints outside link-local (Alibaba 100.100.100.200)
        || ip == Ipv4Addr::new(100, 100, 100, 200)
        // IETF protocol assignments (192.0.0.0/24, includes 192.0.0.192 Oracle metadata)
        || (a == 192 && b == 0 && c == 0)
    {
        return AddressClass::Forbidden;
    }
    if ip.is_loopback()
        || ip.is_private()
        || (a == 100 && (64..128).contains(&b))
        || (a == 198 && (b == 18 || b == 19))
    {
        return AddressClass::Private;
    }
    AddressClass::Public
}

fn classify_v6(ip: Ipv6Addr) -> AddressClass {
    let seg = ip.segments();
    if ip.is_unspecified()
        || ip.is_multicast()
        // link-local fe80::/10
        || (seg[0] & 0xffc0) == 0xfe80
        // deprecated site-local fec0::/10
        || (seg[0] & 0xffc0) == 0xfec0
        // AWS IPv6 metadata fd00:ec2::254
        || ip == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)
    {
        return AddressClass::Forbidden;
    }
    // IPv4-compatible (::a.b.c.d, deprecated), NAT64 (64:ff9b::/96) and 6to4 (2002::/16)
    // carry an IPv4 address: judge that one.
    if seg[0..6] == [0, 0, 0, 0, 0, 0] || seg[0..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        let v4 = Ipv4Addr::new(
            (seg[6] >> 8) as u8,
            seg[6] as u8,
            (seg[7] >> 8) as u8,
            seg[7] as u8,
        );
        if ip.is_loopback() {
            return AddressClass::Private;
        }
        return classify_v4(v4);
    }
    if seg[0] == 0x2002 {
        let v4 = Ipv4Addr::new(
            (seg[1] >> 8) as u8,
            seg[1] as u8,
            (seg[2] >> 8) as u8,
            seg[2] as u8,
        );
        return classify_v4(v4);
    }
    if ip.is_loopback() || (seg[0] & 0xfe00) == 0xfc00 {
        return AddressClass::Private;
    }
    AddressClass::Public
}

/// Whether a delivery may connect to `ip`.
pub fn address_allowed(ip: IpAddr, allow_private: bool) -> bool {
    match classify(ip) {
        AddressClass::Public => true,
        AddressClass::Private => allow_private,
        AddressClass::Forbidden => false,
    }
}

/// The one answer for a destination the guard refuses before any lookup: a literal address,
/// or a name that spells one without a resolver (`localhost`, metadata). Names that need a
/// resolver are not looked up when a URL is saved, so saving is no oracle for internal names.
pub const UNUSABLE: &str = "cannot be used as a webhook destination";

/// How a delivery attempt failed, as its owner reads it: coarse on purpose, so a webhook is no
/// scanner of names, ports and certificates (the detail goes to the operators' log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryFailure {
    /// The URL was refused before any call (a destination the guard refuses).
    Refused,
    /// The host's name gave no usable address.
    Dns,
    /// No connection to the address.
    Connect,
    /// The TLS handshake failed (certificate, protocol).
    Tls,
    /// No complete answer within the time limit.
    Timeout,
    /// An answer outside 2xx.
    Http(u16),
    /// Anything else (a redirect, a broken answer).
    Request,
}

impl std::fmt::Display for DeliveryFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Refused => f.write_str("refused"),
            Self::Dns => f.write_str("dns"),
            Self::Connect => f.write_str("connect"),
            Self::Tls => f.write_str("tls"),
            Self::Timeout => f.write_str("timeout"),
            Self::Http(status) => write!(f, "http {status}"),
            Self::Request => f.write_str("request"),
        }
    }
}

/// Where a checked URL points: its host (a name or a literal address) and port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    pub host: String,
    /// Set when the host is a literal address.
    pub ip: Option<IpAddr>,
    pub port: u16,
}

/// Checks a webhook URL's shape: `https`, a host, no credentials, no fragment; a literal
/// address must be allowed. A host name's addresses are checked when a delivery resolves it.
pub fn check_url(raw: &str, allow_private: bool) -> Result<Destination, &'static str> {
    if raw.len() > 2048 {
        return Err("must be at most 2048 characters");
    }
    let url = url::Url::parse(raw).map_err(|_| "must be an HTTPS URL")?;
    if url.scheme() != "https" {
        return Err("must be an HTTPS URL");
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("must not carry credentials");
    }
    let port = url.port_or_known_default().unwrap_or(443);
    let (host, ip) = match url.host() {
        Some(url::Host::Domain(name)) => {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            if name.is_empty() {
                return Err("must name a host");
            }
            // Names that are addresses in other spellings never reach a resolver.
            if name == "localhost" || name.ends_with(".localhost") {
                if allow_private {
                    (name, None)
                } else {
                    return Err(UNUSABLE);
                }
            } else if name == "metadata.google.internal" || name == "metadata" {
                return Err(UNUSABLE);
            } else {
                (name, None)
            }
        }
        Some(url::Host::Ipv4(v4)) => (v4.to_string(), Some(IpAddr::V4(v4))),
        Some(url::Host::Ipv6(v6)) => (v6.to_string(), Some(IpAddr::V6(v6))),
        None => return Err("must name a host"),
    };
    if let Some(ip) = ip
        && !address_allowed(ip, allow_private)
    {
        return Err(UNUSABLE);
    }
    Ok(Destination { host, ip, port })
}

/// The retry schedule after `failures` consecutive failed attempts of one delivery (1 for
/// the first): about 1 min, 5 min, 30 min, 2 h, 6 h, 12 h, then 24 h. `jitter` in `[0, 1)`
/// spreads the wait over ±20 %.
pub fn retry_delay(failures: i64, jitter: f64) -> chrono::Duration {
    backoff::spread(RETRY.delay(failures.saturating_sub(1)), 0.2, jitter)
}

/// The waits of [`retry_delay`] before their spread.
pub const RETRY: Backoff = Backoff::Steps(&[
    chrono::Duration::minutes(1),
    chrono::Duration::minutes(5),
    chrono::Duration::minutes(30),
    chrono::Duration::hours(2),
    chrono::Duration::hours(6),
    chrono::Duration::hours(12),
    chrono::Duration::hours(24),
]);

/// An endpoint failing without a success for this long is disabled.
pub fn disable_after() -> chrono::Duration {
    chrono::Duration::days(3)
}

/// `v1,<base64 HMAC-SHA256 of "id.timestamp.body">` keyed by the secret's UTF-8 bytes (the
/// Standard Webhooks signature).
pub fn standard_signature(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("any key length");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
    )
}

/// The `webhook-signature` value for several secrets: one `v1,` entry per secret, in their
/// order, separated by single spaces (Standard Webhooks lets a receiver accept any entry).
pub fn standard_signatures(secrets: &[&str], id: &str, timestamp: i64, body: &[u8]) -> String {
    secrets
        .iter()
        .map(|secret| standard_signature(secret, id, timestamp, body))
        .collect::<Vec<_>>()
        .join(" ")
}

/// When a secret replaced at `now` stops signing, for a rotation window of `window`: `None`
/// when the window is zero (or less), so the replaced secret stops at once.
pub fn previous_secret_until(
    now: DateTime<Utc>,
    window: chrono::Duration,
) -> Option<DateTime<Utc>> {
    (window > chrono::Duration::zero()).then(|| now + window)
}

/// When the previous secret stops signing, as seen at `now`: its end while it still signs
/// (strictly before `until`), else `None` (no previous secret, or its window is over).
pub fn previous_secret_expires_at(
    previous: Option<&str>,
    until: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    match (previous, until) {
        (Some(secret), Some(until)) if !secret.is_empty() && now < until => Some(until),
        _ => None,
    }
}

/// The secrets a delivery signed at `now` carries: the current one first, then the previous
/// one while its window lasts ([`previous_secret_expires_at`]). The JWT is signed with the
/// first only.
pub fn signing_secrets<'a>(
    current: &'a str,
    previous: Option<&'a str>,
    until: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Vec<&'a str> {
    let mut secrets = vec![current];
    if let Some(previous) = previous
        && previous_secret_expires_at(Some(previous), until, now).is_some()
        && previous != current
    {
        secrets.push(previous);
    }
    secrets
}

/// The stable, non-secret id of a signing secret: the first 16 lower-case hex digits of the
/// SHA-256 of its UTF-8 bytes. A delivery JWT names its key by it in the header's `kid`, so a
/// receiver holding both secrets during a rotation knows which one to verify with.
pub fn key_id(secret: &str) -> String {
    let mut id = hex::encode(Sha256::digest(secret.as_bytes()));
    id.truncate(16);
    id
}

/// Verifies a `webhook-signature` header value (space-separated `v1,<sig>` entries) in
/// constant time per entry.
pub fn verify_standard_signature(
    secret: &str,
    id: &str,
    timestamp: i64,
    body: &[u8],
    header: &str,
) -> bool {
    use subtle::ConstantTimeEq as _;
    let expected = standard_signature(secret, id, timestamp, body);
    header
        .split_whitespace()
        .any(|candidate| bool::from(candidate.as_bytes().ct_eq(expected.as_bytes())))
}

/// Lower-case hex SHA-256 of the exact body bytes (the JWT's `body_sha256` claim).
pub fn body_sha256(body: &[u8]) -> String {
    hex::encode(Sha256::digest(body))
}

/// The claims of a delivery's `Authorization: Bearer` JWT (method `JWT`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeliveryClaims {
    pub iss: String,
    /// The user id, as a string.
    pub sub: String,
    pub iat: i64,
    /// `iat` + 5 minutes.
    pub exp: i64,
    /// The delivery's message id.
    pub jti: String,
    /// Hex SHA-256 of the exact body bytes.
    pub body_sha256: String,
}

/// How long a delivery's JWT is valid.
pub const JWT_LIFETIME_SECONDS: i64 = 300;

/// The issuer every delivery JWT names.
pub const JWT_ISSUER: &str = "marketplace";

/// An HS256 JWT keyed by the secret's UTF-8 bytes, its header's `kid` the secret's
/// [`key_id`].
pub fn delivery_jwt(
    secret: &str,
    user_id: i64,
    message_id: &str,
    issued_at: i64,
    body: &[u8],
) -> Result<String, jsonwebtoken::errors::Error> {
    let claims = DeliveryClaims {
        iss: JWT_ISSUER.to_owned(),
        sub: user_id.to_string(),
        iat: issued_at,
        exp: issued_at + JWT_LIFETIME_SECONDS,
        jti: message_id.to_owned(),
        body_sha256: body_sha256(body),
    };
    super::jwt_hmac::install();
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
    header.kid = Some(key_id(secret));
    jsonwebtoken::encode(
        &header,
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn classifies_addresses() {
        for public in ["93.184.216.34", "8.8.8.8", "2606:4700::1111", "100.128.0.1"] {
            assert_eq!(classify(ip(public)), AddressClass::Public, "{public}");
        }
        for private in [
            "127.0.0.1",
            "10.0.0.1",
            "172.16.5.4",
            "192.168.1.1",
            "100.64.0.1",
            "::1",
            "fd12::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::127.0.0.1",
            "64:ff9b::a00:1",
            "2002:7f00:1::",
        ] {
            assert_eq!(classify(ip(private)), AddressClass::Private, "{private}");
        }
        for forbidden in [
            "169.254.169.254",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "100.100.100.200",
            "192.0.0.192",
            "fe80::1",
            "::",
            "ff02::1",
            "fd00:ec2::254",
            "::ffff:169.254.169.254",
            "2002:a9fe:a9fe::",
        ] {
            assert_eq!(
                classify(ip(forbidden)),
                AddressClass::Forbidden,
                "{forbidden}"
            );
        }
    }

    #[test]
    fn private_targets_lift_only_the_private_rule() {
        assert!(address_allowed(ip("127.0.0.1"), true));
        assert!(!address_allowed(ip("127.0.0.1"), false));
        assert!(!address_allowed(ip("169.254.169.254"), true));
        assert!(!address_allowed(ip("fe80::1"), true));
    }

    #[test]
    fn checks_urls() {
        assert!(check_url("https://example.com/hook", false).is_ok());
        assert_eq!(
            check_url("https://example.com:8443/", false).unwrap().port,
            8443
        );
        for bad in [
            "http://example.com/",
            "https://user:pw@example.com/",
            "https://127.0.0.1/",
            "https://10.0.0.1/",
            "https://169.254.169.254/latest",
            "https://[::1]/",
            "https://[::ffff:127.0.0.1]/",
            "https://localhost/",
            "https://0x7f000001/",
            "https://2130706433/",
            "ftp://example.com/",
            "not a url",
        ] {
            assert!(check_url(bad, false).is_err(), "{bad}");
        }
        assert!(check_url("https://127.0.0.1:9/", true).is_ok());
        assert!(check_url("https://169.254.169.254/", true).is_err());
    }

    #[test]
    fn retry_schedule_grows_then_stays_daily() {
        let minutes = |n| retry_delay(n, 0.5).num_minutes();
        assert_eq!(
            (1..=9).map(minutes).collect::<Vec<_>>(),
            vec![1, 5, 30, 120, 360, 720, 1440, 1440, 1440]
        );
        assert!(retry_delay(1, 0.0) < retry_delay(1, 0.99));
        assert!(retry_delay(1, 0.99) < chrono::Duration::seconds(73));
    }

    #[test]
    fn standard_signature_verifies_with_its_secret_only() {
        let sig = standard_signature("s3cret", "msg_1", 1_700_000_000, b"{\"a\":1}");
        assert!(sig.starts_with("v1,"));
        assert!(verify_standard_signature(
            "s3cret",
            "msg_1",
            1_700_000_000,
            b"{\"a\":1}",
            &sig
        ));
        assert!(!verify_standard_signature(
            "other",
            "msg_1",
            1_700_000_000,
            b"{\"a\":1}",
            &sig
        ));
        assert!(!verify_standard_signature(
            "s3cret",
            "msg_1",
            1_700_000_000,
            b"{\"a\":2}",
            &sig
        ));
    }

    #[test]
    fn delivery_jwt_carries_the_body_hash() {
        let token = delivery_jwt("s3cret", 7, "msg_1_7", 1_700_000_000, b"{}").unwrap();
        let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::HS256);
        validation.validate_exp = false;
        let data = jsonwebtoken::decode::<DeliveryClaims>(
            &token,
            &jsonwebtoken::DecodingKey::from_secret(b"s3cret"),
            &validation,
        )
        .unwrap();
        assert_eq!(data.claims.sub, "7");
        assert_eq!(data.claims.exp - data.claims.iat, 300);
        assert_eq!(data.claims.body_sha256, body_sha256(b"{}"));
        assert_eq!(data.header.kid.as_deref(), Some(key_id("s3cret").as_str()));
        assert!(
            jsonwebtoken::decode::<DeliveryClaims>(
                &token,
                &jsonwebtoken::DecodingKey::from_secret(b"other"),
                &validation,
            )
            .is_err()
        );
    }

    fn at(seconds: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + seconds, 0).unwrap()
    }

    #[test]
    fn the_previous_secret_signs_beside_the_new_until_its_window_ends() {
        let until = Some(at(3600));
        assert_eq!(signing_secrets("new", None, None, at(0)), vec!["new"]);
        assert_eq!(
            signing_secrets("new", Some("old"), until, at(0)),
            vec!["new", "old"]
        );
        assert_eq!(
            signing_secrets("new", Some("old"), until, at(3599)),
            vec!["new", "old"]
        );
        // The window is half-open: at its end only the new secret signs.
        assert_eq!(
            signing_secrets("new", Some("old"), until, at(3600)),
            vec!["new"]
        );
        assert_eq!(
            signing_secrets("new", Some("old"), until, at(7200)),
            vec!["new"]
        );
        // A previous secret without an end (a zero window) never signs, nor does a repeat of
        // the current one.
        assert_eq!(
            signing_secrets("new", Some("old"), None, at(0)),
            vec!["new"]
        );
        assert_eq!(
            signing_secrets("new", Some("new"), until, at(0)),
            vec!["new"]
        );
    }

    #[test]
    fn the_expiry_shows_only_while_the_previous_secret_signs() {
        assert_eq!(
            previous_secret_expires_at(Some("old"), Some(at(10)), at(0)),
            Some(at(10))
        );
        assert_eq!(
            previous_secret_expires_at(Some("old"), Some(at(10)), at(10)),
            None
        );
        assert_eq!(previous_secret_expires_at(None, Some(at(10)), at(0)), None);
        assert_eq!(previous_secret_expires_at(Some("old"), None, at(0)), None);
        assert_eq!(
            previous_secret_until(at(0), chrono::Duration::hours(24)),
            Some(at(86_400))
        );
        assert_eq!(previous_secret_until(at(0), chrono::Duration::zero()), None);
    }

    #[test]
    fn several_signatures_are_space_separated_and_each_verifies() {
        let header = standard_signatures(&["new", "old"], "msg_1", 1_700_000_000, b"{}");
        let entries: Vec<&str> = header.split(' ').collect();
        assert_eq!(
            entries,
            vec![
                standard_signature("new", "msg_1", 1_700_000_000, b"{}"),
                standard_signature("old", "msg_1", 1_700_000_000, b"{}"),
            ]
        );
        for secret in ["new", "old"] {
            assert!(verify_standard_signature(
                secret,
                "msg_1",
                1_700_000_000,
                b"{}",
                &header
            ));
        }
        assert!(!verify_standard_signature(
            "other",
            "msg_1",
            1_700_000_000,
            b"{}",
            &header
        ));
        assert_eq!(
            standard_signatures(&["new"], "msg_1", 1_700_000_000, b"{}"),
            entries[0]
        );
    }

    #[test]
    fn a_key_id_is_stable_short_and_reveals_nothing_usable() {
        assert_eq!(key_id("s3cret"), key_id("s3cret"));
        assert_eq!(key_id("s3cret").len(), 16);
        assert!(
            key_id("s3cret")
                .chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        assert_ne!(key_id("s3cret"), key_id("s3cret2"));
        assert_eq!(
            key_id("s3cret"),
            &hex::encode(Sha256::digest(b"s3cret"))[..16]
        );
    }
}
