//! Delivery over SMTP.

use std::time::Duration;

use lettre::transport::smtp::PoolConfig;
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};

use super::{Email, MailError, MailTransport, SENDS_AT_ONCE, message};

/// Longest wait for the SMTP server at each step.
const SMTP_TIMEOUT: Duration = Duration::from_secs(30);

/// Sends through an SMTP server configured by `SMTP_URL`, over a pool of connections (as
/// many as [`SENDS_AT_ONCE`], each closed after a minute unused): a message on a pooled
/// connection skips the TCP and TLS handshakes and the greeting.
pub struct SmtpTransport {
    inner: AsyncSmtpTransport<Tokio1Executor>,
}

impl SmtpTransport {
    /// Configures the transport from a URL, without connecting yet:
    ///
    /// - `smtp://user:pass@host:port`: plain SMTP (default port 25);
    /// - `smtp://user:pass@host:port?tls=required`: STARTTLS (default port 587);
    /// - `smtps://user:pass@host:port`: implicit TLS (default port 465).
    ///
    /// User and password are percent-decoded. Errors never repeat the URL. Call it inside a
    /// Tokio runtime: the pool starts its task that closes idle connections.
    pub fn from_url(url: &str) -> Result<Self, MailError> {
        let builder = AsyncSmtpTransport::<Tokio1Executor>::from_url(url)
            .map_err(|error| MailError::Config(format!("SMTP_URL: {error}")))?;
        Ok(Self {
            inner: builder
                .timeout(Some(SMTP_TIMEOUT))
                .pool_config(PoolConfig::new().max_size(SENDS_AT_ONCE as u32))
                .build(),
        })
    }
}

#[async_trait::async_trait]
impl MailTransport for SmtpTransport {
    async fn send(&self, from: &str, email: &Email) -> Result<(), MailError> {
        let message = message::build(from, email)?;
        self.inner
            .send(message)
            .await
            .map_err(|error| MailError::Smtp(error.to_string()))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn builds_from_smtp_urls_without_connecting() {
        for url in [
            "smtp://localhost:2525",
            "smtp://user:pass@mail.example.com:25",
            "smtp://user:pass@mail.example.com:587?tls=required",
            "smtp://user:pass@mail.example.com?tls=opportunistic",
            "smtps://user:p%40ss@mail.example.com:465",
            "smtps://mail.example.com",
        ] {
            assert!(SmtpTransport::from_url(url).is_ok(), "{url}");
        }
    }

    #[test]
    fn refuses_other_schemes_without_repeating_the_password() {
        for url in ["http://user:hunter2@mail.example.com", "not a url hunter2"] {
            let Err(error) = SmtpTransport::from_url(url) else {
                panic!("accepted {url}");
            };
            assert!(matches!(error, MailError::Config(_)));
            assert!(!error.to_string().contains("hunter2"), "{error}");
        }
    }
}
