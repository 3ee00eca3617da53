//! Errors of calls to the processor.

/// A processor call that did not give the object asked for.
///
/// Never carries the secret key: the processor's own messages are scrubbed of anything that
/// looks like an API key before they are kept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProcessorError {
    /// The processor answered with an error body.
    #[error("processor refused the request ({status} {kind}{}): {message}", code.as_deref().map(|c| format!("/{c}")).unwrap_or_default())]
    Api {
        /// HTTP status of the answer.
        status: u16,
        /// The error's `type`: `invalid_request_error`, `card_error`, `api_error`, …
        kind: String,
        /// The error's `code` when it has one: `balance_insufficient`,
        /// `payment_intent_unexpected_state`, `charge_already_refunded`, `resource_missing`, …
        code: Option<String>,
        message: String,
    },
    /// The processor could not be reached, or the answer did not arrive in time.
    #[error("processor unreachable: {0}")]
    Network(String),
    /// The answer was not the object expected.
    #[error("unexpected processor answer: {0}")]
    Decode(String),
}

impl ProcessorError {
    /// The platform balance cannot cover a transfer: defer it and retry later.
    pub fn is_balance_insufficient(&self) -> bool {
        self.code() == Some("balance_insufficient")
    }

    /// Worth retrying with the same idempotency key: the processor may not have seen the
    /// request, or failed on its side, or asked to slow down.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Network(_) => true,
            Self::Api { status, .. } => *status >= 500 || *status == 429,
            Self::Decode(_) => false,
        }
    }

    /// The object named does not exist (HTTP 404, code `resource_missing`).
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Api { status: 404, .. }) || self.code() == Some("resource_missing")
    }

    /// The error's `code`, when the processor gave one.
    pub fn code(&self) -> Option<&str> {
        match self {
            Self::Api { code, .. } => code.as_deref(),
            _ => None,
        }
    }

    /// HTTP status of an API error.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Api { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// Replaces every word that looks like an API key (`sk_…`, `rk_…`, `pk_…`) with a mask, so an
/// error message echoing a key (as "Invalid API Key provided: sk_test_…") never keeps it.
pub(crate) fn redact_keys(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(start) = find_key_start(rest) {
        out.push_str(&rest[..start]);
        let key = &rest[start..];
        let end = key
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '*'))
            .unwrap_or(key.len());
        out.push_str(&key[..3]);
        out.push_str("<redacted>");
        rest = &key[end..];
    }
    out.push_str(rest);
    out
}

fn find_key_start(text: &str) -> Option<usize> {
    ["sk_", "rk_", "pk_"]
        .iter()
        .filter_map(|prefix| {
            text.match_indices(prefix)
                .map(|(i, _)| i)
                // Only at the start of a word: `task_id` is not a key.
                .find(|&i| i == 0 || !text.as_bytes()[i - 1].is_ascii_alphanumeric())
        })
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(status: u16, code: Option<&str>) -> ProcessorError {
        ProcessorError::Api {
            status,
            kind: "invalid_request_error".into(),
            code: code.map(str::to_owned),
            message: "m".into(),
        }
    }

    #[test]
    fn helpers_classify_errors() {
        assert!(api(400, Some("balance_insufficient")).is_balance_insufficient());
        assert!(!api(400, None).is_balance_insufficient());
        assert!(api(500, None).is_retryable());
        assert!(api(503, None).is_retryable());
        assert!(api(429, None).is_retryable());
        assert!(!api(400, None).is_retryable());
        assert!(ProcessorError::Network("x".into()).is_retryable());
        assert!(!ProcessorError::Decode("x".into()).is_retryable());
        assert!(api(404, Some("resource_missing")).is_not_found());
        assert_eq!(
            api(400, Some("charge_already_refunded")).to_string(),
            "processor refused the request (400 invalid_request_error/charge_already_refunded): m"
        );
    }

    #[test]
    fn keys_are_redacted_from_messages() {
        assert_eq!(
            redact_keys("Invalid API Key provided: sk_test_abc123XYZ."),
            "Invalid API Key provided: sk_<redacted>."
        );
        assert_eq!(
            redact_keys("rk_live_1 and pk_test_2, task_id stays"),
            "rk_<redacted> and pk_<redacted>, task_id stays"
        );
        assert_eq!(redact_keys("nothing here"), "nothing here");
    }
}
