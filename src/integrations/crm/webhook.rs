//! Inbound CRM webhooks (DESIGN §9): `X-CRM-Signature` is the hex HMAC-SHA256 of the raw body
//! keyed by `CRM_WEBHOOK_SECRET`, optionally prefixed `sha256=`; compared in constant time.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::config::Secret;

pub const SIGNATURE_HEADER: &str = "X-CRM-Signature";

/// `sha256=<hex>` of `body` (tests and the sandbox sign with it).
pub fn sign(secret: &Secret, body: &[u8]) -> String {
    format!("sha256={}", hex::encode(digest(secret, body)))
}

fn digest(secret: &Secret, body: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.expose().as_bytes())
        .expect("HMAC takes a key of any length");
    mac.update(body);
    mac.finalize().into_bytes().to_vec()
}

/// Whether `header` is the signature of `body`.
pub fn verify(secret: &Secret, header: Option<&str>, body: &[u8]) -> bool {
    let Some(header) = header.map(str::trim) else {
        return false;
    };
    let hex_part = header.strip_prefix("sha256=").unwrap_or(header);
    let Ok(given) = hex::decode(hex_part.to_ascii_lowercase()) else {
        return false;
    };
    crate::domain::token::constant_time_eq(&given, &digest(secret, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_verify_with_or_without_prefix_and_only_for_their_body() {
        let secret = Secret::new("whsec");
        let signed = sign(&secret, b"{}");
        assert!(verify(&secret, Some(&signed), b"{}"));
        assert!(verify(
            &secret,
            Some(signed.trim_start_matches("sha256=")),
            b"{}"
        ));
        assert!(!verify(&secret, Some(&signed), b"{ }"));
        assert!(!verify(&Secret::new("other"), Some(&signed), b"{}"));
        assert!(!verify(&secret, None, b"{}"));
        assert!(!verify(&secret, Some("sha256=zz"), b"{}"));
    }
}
