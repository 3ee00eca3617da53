//! Transactional e-mail: [`Template`]s rendered by the [`Mailer`] and handed to a
//! [`MailTransport`]: [`SmtpTransport`] when `SMTP_URL` is set, otherwise a
//! [`FileOutbox`] that writes one `.eml` file per message.
//!
//! Message bodies carry tokens (verification, reset, invitation links), so neither
//! errors nor logs ever hold them; logs name the recipient and the template only.

mod error;
mod file_outbox;
mod mailer;
mod message;
pub mod outbox_reader;
mod smtp;
mod templates;

use std::fmt;

/// Messages sent at once, at most: the mail sender (`workflows::emails`) sends this many
/// together, and the SMTP transport keeps as many connections. A message waits on the mail
/// server for several round trips (and on loopback about 40 ms for its final `.`, which
/// lettre writes apart without `TCP_NODELAY`), so these sends, not the CPU, pace e-mail.
pub const SENDS_AT_ONCE: usize = 16;

pub use self::error::MailError;
pub use self::file_outbox::FileOutbox;
pub use self::mailer::Mailer;
pub use self::smtp::SmtpTransport;
pub use self::templates::{RenderedMail, Template};

/// One message ready to send.
#[derive(Clone, PartialEq, Eq)]
pub struct Email {
    /// Recipient address, e.g. `ana@example.com` or `Ana <ana@example.com>`.
    pub to: String,
    /// Subject line.
    pub subject: String,
    /// Plain-text body, always sent.
    pub text: String,
    /// HTML alternative of the body, sent as well when present.
    pub html: Option<String>,
    /// Names the message when it is sent at least once (the outbox's e-mails): the file
    /// outbox writes each key under one name, so a retry after a crash between sending and
    /// recording it replaces the message instead of adding a second. Time-sortable.
    pub idempotency_key: Option<String>,
    /// Files sent with the message (an invoice's PDF).
    pub attachments: Vec<Attachment>,
}

/// A file attached to an [`Email`].
#[derive(Clone, PartialEq, Eq)]
pub struct Attachment {
    pub filename: String,
    /// e.g. `application/pdf`.
    pub content_type: String,
    pub bytes: Vec<u8>,
}

/// Leaves the bodies out: they may contain tokens.
impl fmt::Debug for Email {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Email")
            .field("to", &self.to)
            .field("subject", &self.subject)
            .finish_non_exhaustive()
    }
}

/// Delivers e-mail somewhere: an SMTP server, a directory, a test double.
#[async_trait::async_trait]
pub trait MailTransport: Send + Sync {
    /// Sends `email` with `from` (an address, optionally with a display name) as sender.
    async fn send(&self, from: &str, email: &Email) -> Result<(), MailError>;
}

#[cfg(test)]
mod tests;
