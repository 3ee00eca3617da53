//! Webhook signatures. The processor signs each delivery with the endpoint's secret:
//! header `t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>`. Several `v1`
//! entries may appear (while a secret is being rolled) and any match is enough; other schemes
//! (`v0`, …) are ignored. The timestamp must be within the tolerance of now, either side, so a
//! captured delivery cannot be replayed later.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The header that carries the signature.
pub const SIGNATURE_HEADER: &str = "Stripe-Signature";

/// How far the signed timestamp may be from now, either side.
pub const DEFAULT_TOLERANCE_SECS: i64 = 300;

type HmacSha256 = Hmac<Sha256>;

/// Why a delivery's signature was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// The header is empty or does not hold `key=value` pairs.
    #[error("the signature header is malformed")]
    Malformed,
    /// No `t=` timestamp (or one that is not a number).
    #[error("the signature header has no timestamp")]
    MissingTimestamp,
    /// No `v1=` signature.
    #[error("the signature header has no v1 signature")]
    MissingSignature,
    /// The timestamp is further from now than the tolerance allows.
    #[error("the signature timestamp is outside the tolerance")]
    OutsideTolerance,
    /// No `v1` signature matches the payload and secret.
    #[error("no signature matches the payload")]
    Mismatch,
}

/// Checks `header` against the raw `payload` as delivered.
/// More `v1=` signatures than a key rotation needs are refused unread.
pub const MAX_CANDIDATES: usize = 8;

pub fn verify(
    header: &str,
    payload: &[u8],
    secret: &str,
    now_unix: i64,
    tolerance_secs: i64,
) -> Result<(), SignatureError> {
    let parsed = parse_header(header)?;
    let timestamp = parsed.timestamp.ok_or(SignatureError::MissingTimestamp)?;
    if parsed.signatures.is_empty() {
        return Err(SignatureError::MissingSignature);
    }
    // Whether the delivery is too old or from the future is checked before any signature, but
    // a mismatching signature is what a forger sees either way: both answer "refused".
    if now_unix.abs_diff(timestamp) > tolerance_secs.unsigned_abs() {
        return Err(SignatureError::OutsideTolerance);
    }
    if parsed.signatures.len() > MAX_CANDIDATES {
        return Err(SignatureError::Mismatch);
    }
    // One MAC over the body, whatever the number of candidates; each candidate is compared
    // in constant time, and all of them, so the time taken does not say which one matched.
    let expected = signer(secret, timestamp, payload).finalize().into_bytes();
    let mut matched = false;
    for candidate in parsed.signatures {
        if let Ok(bytes) = hex::decode(candidate) {
            matched |= crate::domain::token::constant_time_eq(&bytes, &expected);
        }
    }
    if matched {
        Ok(())
    } else {
        Err(SignatureError::Mismatch)
    }
}

/// The header value for `payload` signed at `timestamp` (unix seconds).
pub fn sign(payload: &[u8], secret: &str, timestamp: i64) -> String {
    let signature = signer(secret, timestamp, payload).finalize().into_bytes();
    format!("t={timestamp},v1={}", hex::encode(signature))
}

fn signer(secret: &str, timestamp: i64, payload: &[u8]) -> HmacSha256 {
    let mut mac =
        HmacSha256::new_from_slice(secret.as_bytes()).expect("HMAC takes keys of any length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(payload);
    mac
}

struct ParsedHeader<'a> {
    timestamp: Option<i64>,
    signatures: Vec<&'a str>,
}

fn parse_header(header: &str) -> Result<ParsedHeader<'_>, SignatureError> {
    let mut parsed = ParsedHeader {
        timestamp: None,
        signatures: Vec::new(),
    };
    let mut pairs = 0;
    for item in header.split(',') {
        let Some((key, value)) = item.trim().split_once('=') else {
            continue;
        };
        pairs += 1;
        match key {
            "t" => parsed.timestamp = value.parse().ok(),
            "v1" => parsed.signatures.push(value),
            _ => {}
        }
    }
    if pairs == 0 {
        return Err(SignatureError::Malformed);
    }
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn fixture() -> Value {
        let text = include_str!("../../../tests/fixtures/processor/webhook-signatures.json");
        serde_json::from_str(text).expect("webhook-signatures.json is JSON")
    }

    #[test]
    fn one_good_signature_among_a_few_passes_and_a_flood_of_candidates_is_refused() {
        let body = br#"{"id":"evt_1"}"#;
        let good = sign(body, "whsec_test", 1_000);
        let v1 = good.split("v1=").nth(1).unwrap();
        let bad = "0".repeat(64);
        let few = format!("t=1000,v1={bad},v1={v1}");
        assert_eq!(verify(&few, body, "whsec_test", 1_000, 300), Ok(()));
        let flood = format!("t=1000{}", format!(",v1={v1}").repeat(MAX_CANDIDATES + 1));
        assert_eq!(
            verify(&flood, body, "whsec_test", 1_000, 300),
            Err(SignatureError::Mismatch)
        );
    }

    #[test]
    fn every_labelled_case_verifies_as_labelled() {
        let fixture = fixture();
        let secret = fixture["secret"].as_str().unwrap();
        let tolerance = fixture["tolerance_seconds"].as_i64().unwrap();
        assert_eq!(tolerance, DEFAULT_TOLERANCE_SECS);
        let cases = fixture["cases"].as_array().unwrap();
        assert!(cases.len() >= 10);
        for case in cases {
            let name = case["name"].as_str().unwrap();
            let result = verify(
                case["header"].as_str().unwrap(),
                case["payload"].as_str().unwrap().as_bytes(),
                secret,
                case["now"].as_i64().unwrap(),
                tolerance,
            );
            let expected_valid = case["valid"].as_bool().unwrap();
            assert_eq!(result.is_ok(), expected_valid, "case {name}: {result:?}");
            let expected_error = match name {
                "wrong_secret" | "tampered_payload" => Some(SignatureError::Mismatch),
                "timestamp_too_old" | "timestamp_too_far_in_future" => {
                    Some(SignatureError::OutsideTolerance)
                }
                "missing_timestamp" => Some(SignatureError::MissingTimestamp),
                "missing_v1" => Some(SignatureError::MissingSignature),
                "garbage_header" | "empty_header" => Some(SignatureError::Malformed),
                _ => None,
            };
            if !expected_valid {
                assert_eq!(result.err(), expected_error, "case {name}");
            }
        }
    }

    #[test]
    fn sign_produces_what_verify_accepts() {
        let fixture = fixture();
        let valid = &fixture["cases"][0];
        let secret = fixture["secret"].as_str().unwrap();
        let payload = valid["payload"].as_str().unwrap().as_bytes();
        // Same secret, timestamp and body: the fixture's own header.
        assert_eq!(
            sign(payload, secret, 1763700000),
            valid["header"].as_str().unwrap()
        );
        let header = sign(b"{}", "whsec_x", 1000);
        assert_eq!(verify(&header, b"{}", "whsec_x", 1300, 300), Ok(()));
        assert_eq!(
            verify(&header, b"{}", "whsec_x", 1301, 300),
            Err(SignatureError::OutsideTolerance)
        );
        assert_eq!(
            verify(&header, b"{}", "whsec_y", 1000, 300),
            Err(SignatureError::Mismatch)
        );
    }

    #[test]
    fn non_hex_signatures_are_skipped_not_fatal() {
        let good = sign(b"body", "s", 50);
        let v1 = good.split("v1=").nth(1).unwrap();
        let header = format!("t=50,v1=zz-not-hex,v1={v1}");
        assert_eq!(verify(&header, b"body", "s", 50, 300), Ok(()));
    }
}
