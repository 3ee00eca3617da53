//! The cryptography behind every JWT of the service (access tokens, webhook deliveries): HMAC
//! with SHA-2, from the `hmac` and `sha2` crates, installed as jsonwebtoken's process-wide
//! `CryptoProvider`. jsonwebtoken's own `rust_crypto` backend would bring RSA (the `rsa`
//! crate, RUSTSEC-2023-0071, with no fixed version) and elliptic curves for algorithms the
//! service never uses.
//!
//! Verification knows HS256 alone, the one algorithm the service accepts, so no `Validation`
//! could widen it. Signing knows the whole HMAC family: the tests forge HS384 and HS512 tokens
//! to see them refused. Every other algorithm is an `InvalidAlgorithm` error.

use std::sync::Once;

use hmac::digest::KeyInit;
use hmac::{Hmac, Mac};
use jsonwebtoken::crypto::{CryptoProvider, JwkUtils, JwtSigner, JwtVerifier};
use jsonwebtoken::errors::{ErrorKind, Result};
use jsonwebtoken::signature::{self, Signer, Verifier};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey};
use sha2::{Sha256, Sha384, Sha512};

/// The provider: JWKs are never read, so their helpers stay unimplemented.
static PROVIDER: CryptoProvider = CryptoProvider {
    signer_factory: signer,
    verifier_factory: verifier,
    jwk_utils: JwkUtils::new_unimplemented(),
};

/// Installs the provider for the process. Called wherever the service makes a JWT key, so it
/// comes before any token is signed or read: jsonwebtoken, asked first, would settle for good
/// on a provider that panics. Later calls do nothing.
pub fn install() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        // An error means a provider is already set; nothing else in the service sets one.
        let _ = PROVIDER.install_default();
    });
}

/// An HMAC keyed with a token's secret, and the algorithm a header names it by.
struct Keyed<M> {
    mac: M,
    algorithm: Algorithm,
}

impl<M: Mac + KeyInit + Clone> Keyed<M> {
    fn new(algorithm: Algorithm, secret: &[u8]) -> Result<Self> {
        let mac =
            <M as KeyInit>::new_from_slice(secret).map_err(|_| ErrorKind::InvalidKeyFormat)?;
        Ok(Self { mac, algorithm })
    }
}

impl<M: Mac + Clone> Signer<Vec<u8>> for Keyed<M> {
    fn try_sign(&self, message: &[u8]) -> std::result::Result<Vec<u8>, signature::Error> {
        Ok(self
            .mac
            .clone()
            .chain_update(message)
            .finalize()
            .into_bytes()
            .to_vec())
    }
}

impl<M: Mac + Clone> Verifier<Vec<u8>> for Keyed<M> {
    /// Compared in constant time (`verify_slice`).
    fn verify(&self, message: &[u8], tag: &Vec<u8>) -> std::result::Result<(), signature::Error> {
        self.mac
            .clone()
            .chain_update(message)
            .verify_slice(tag)
            .map_err(|_| signature::Error::new())
    }
}

impl<M: Mac + Clone + 'static> JwtSigner for Keyed<M> {
    fn algorithm(&self) -> Algorithm {
        self.algorithm
    }
}

impl<M: Mac + Clone + 'static> JwtVerifier for Keyed<M> {
    fn algorithm(&self) -> Algorithm {
        self.algorithm
    }
}

fn signer(algorithm: &Algorithm, key: &EncodingKey) -> Result<Box<dyn JwtSigner>> {
    let secret = || key.try_get_hmac_secret();
    Ok(match algorithm {
        Algorithm::HS256 => Box::new(Keyed::<Hmac<Sha256>>::new(*algorithm, secret()?)?),
        Algorithm::HS384 => Box::new(Keyed::<Hmac<Sha384>>::new(*algorithm, secret()?)?),
        Algorithm::HS512 => Box::new(Keyed::<Hmac<Sha512>>::new(*algorithm, secret()?)?),
        _ => return Err(ErrorKind::InvalidAlgorithm.into()),
    })
}

fn verifier(algorithm: &Algorithm, key: &DecodingKey) -> Result<Box<dyn JwtVerifier>> {
    match algorithm {
        Algorithm::HS256 => Ok(Box::new(Keyed::<Hmac<Sha256>>::new(
            *algorithm,
            key.try_get_hmac_secret()?,
        )?)),
        _ => Err(ErrorKind::InvalidAlgorithm.into()),
    }
}

#[cfg(test)]
mod tests {
    use jsonwebtoken::{Header, Validation};
    use serde_json::{Value, json};

    use super::*;

    /// jwt.io's example token, HS256 under `your-256-bit-secret`.
    const KNOWN: &str = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.\
        eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ.\
        SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c";
    const SECRET: &[u8] = b"your-256-bit-secret";

    fn hs256() -> Validation {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.required_spec_claims.clear();
        validation.validate_exp = false;
        validation
    }

    fn read(token: &str, secret: &[u8], validation: &Validation) -> Result<Value> {
        jsonwebtoken::decode::<Value>(token, &DecodingKey::from_secret(secret), validation)
            .map(|data| data.claims)
    }

    fn signed(alg: Algorithm, claims: &Value) -> Result<String> {
        install();
        jsonwebtoken::encode(&Header::new(alg), claims, &EncodingKey::from_secret(SECRET))
    }

    #[test]
    fn signs_and_verifies_a_known_hs256_token() {
        install();
        assert_eq!(read(KNOWN, SECRET, &hs256()).unwrap()["name"], "John Doe");
        let (message, tag) = KNOWN.rsplit_once('.').unwrap();
        let key = EncodingKey::from_secret(SECRET);
        assert_eq!(
            jsonwebtoken::crypto::sign(message.as_bytes(), &key, Algorithm::HS256).unwrap(),
            tag
        );
        assert!(read(KNOWN, b"another secret", &hs256()).is_err());
        let mut changed = KNOWN.to_owned();
        changed.replace_range(KNOWN.len() - 2.., "5d");
        assert!(read(&changed, SECRET, &hs256()).is_err());
    }

    #[test]
    fn verifies_no_algorithm_but_hs256() {
        let claims = json!({"sub": "7"});
        for alg in [Algorithm::HS384, Algorithm::HS512] {
            let token = signed(alg, &claims).unwrap();
            assert!(read(&token, SECRET, &hs256()).is_err(), "{alg:?}");
            // Even a validation naming it: the provider has no verifier for it.
            let err = read(&token, SECRET, &Validation::new(alg)).unwrap_err();
            assert_eq!(err.kind(), &ErrorKind::InvalidAlgorithm, "{alg:?}");
        }
    }

    #[test]
    fn signs_nothing_but_hmac() {
        let claims = json!({"sub": "7"});
        for alg in [
            Algorithm::RS256,
            Algorithm::PS256,
            Algorithm::ES256,
            Algorithm::EdDSA,
        ] {
            let err = signed(alg, &claims).unwrap_err();
            assert_eq!(err.kind(), &ErrorKind::InvalidAlgorithm, "{alg:?}");
        }
    }

    #[test]
    fn refuses_alg_none() {
        install();
        // `{"alg":"none"}` is not even a known algorithm name; with `"HS256"` and no
        // signature, the check fails.
        let unsigned = "eyJhbGciOiJub25lIn0.eyJzdWIiOiI3In0.";
        assert!(read(unsigned, SECRET, &hs256()).is_err());
        let (message, _) = KNOWN.rsplit_once('.').unwrap();
        assert!(read(&format!("{message}."), SECRET, &hs256()).is_err());
    }
}
