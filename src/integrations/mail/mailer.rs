//! Renders a [`Template`] and sends it through the configured transport.

use std::sync::Arc;

use super::message::parse_mailbox;
use super::templates::Renderer;
use super::{Attachment, Email, MailError, MailTransport, RenderedMail, Template};

/// Renders transactional e-mails and sends them. Cheap to clone.
#[derive(Clone)]
pub struct Mailer {
    inner: Arc<Inner>,
}

struct Inner {
    transport: Arc<dyn MailTransport>,
    from: String,
    frontend_url: String,
    renderer: Renderer,
}

impl Mailer {
    /// A mailer sending as `from` (`MAIL_FROM`, e.g. `Marketplace <no-reply@example.com>`)
    /// with links into `frontend_url` (`FRONTEND_URL`, an http(s) URL).
    ///
    /// Checks both values and compiles every template, so mistakes show at start-up.
    pub fn new(
        transport: Arc<dyn MailTransport>,
        from: String,
        frontend_url: String,
    ) -> Result<Self, MailError> {
        parse_mailbox("from", &from)?;
        let frontend_url = checked_frontend_url(&frontend_url)?;
        Ok(Self {
            inner: Arc::new(Inner {
                transport,
                from,
                frontend_url,
                renderer: Renderer::new()?,
            }),
        })
    }

    /// The frontend URL links point into, without a trailing slash.
    pub fn frontend_url(&self) -> &str {
        &self.inner.frontend_url
    }

    /// Renders `mail` with `ctx` (a JSON object) plus `frontend_url`, without sending.
    pub fn render(
        &self,
        mail: Template,
        ctx: &serde_json::Value,
    ) -> Result<RenderedMail, MailError> {
        self.inner
            .renderer
            .render(mail, ctx, &self.inner.frontend_url)
    }

    /// Renders `mail` with `ctx` and sends it to `to`.
    pub async fn send(
        &self,
        to: &str,
        mail: Template,
        ctx: serde_json::Value,
    ) -> Result<(), MailError> {
        self.send_keyed(to, mail, ctx, None).await
    }

    /// [`send`](Self::send) under an idempotency key (see [`Email::idempotency_key`]).
    pub async fn send_keyed(
        &self,
        to: &str,
        mail: Template,
        ctx: serde_json::Value,
        idempotency_key: Option<String>,
    ) -> Result<(), MailError> {
        self.send_with(to, mail, ctx, idempotency_key, Vec::new())
            .await
    }

    /// [`send_keyed`](Self::send_keyed) with files attached.
    pub async fn send_with(
        &self,
        to: &str,
        mail: Template,
        ctx: serde_json::Value,
        idempotency_key: Option<String>,
        attachments: Vec<Attachment>,
    ) -> Result<(), MailError> {
        let rendered = self.render(mail, &ctx)?;
        let email = Email {
            to: to.to_owned(),
            subject: rendered.subject,
            text: rendered.text,
            html: Some(rendered.html),
            idempotency_key,
            attachments,
        };
        match self.inner.transport.send(&self.inner.from, &email).await {
            Ok(()) => {
                tracing::info!(to, template = mail.name(), "mail sent");
                Ok(())
            }
            Err(error) => {
                tracing::warn!(to, template = mail.name(), %error, "mail not sent");
                Err(error)
            }
        }
    }
}

fn checked_frontend_url(frontend_url: &str) -> Result<String, MailError> {
    let trimmed = frontend_url.trim().trim_end_matches('/');
    let parsed = url::Url::parse(trimmed)
        .map_err(|error| MailError::Config(format!("FRONTEND_URL: {error}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(MailError::Config(
            "FRONTEND_URL must be an http or https URL".to_owned(),
        ));
    }
    Ok(trimmed.to_owned())
}
