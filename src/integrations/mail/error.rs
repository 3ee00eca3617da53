//! Errors of the mail module.

/// A message that could not be rendered, built or delivered.
///
/// Never holds message bodies or context values: they carry tokens.
#[derive(Debug, thiserror::Error)]
pub enum MailError {
    /// Mail configuration (sender, frontend URL, SMTP URL) is unusable.
    #[error("invalid mail configuration: {0}")]
    Config(String),
    /// A sender or recipient address does not parse.
    #[error("invalid {field} address: {reason}")]
    InvalidAddress {
        /// `"from"` or `"to"`.
        field: &'static str,
        /// Why the address was refused.
        reason: String,
    },
    /// A template failed to load or render, e.g. because a variable is missing.
    #[error("mail template {template} failed: {reason}")]
    Template {
        /// Name of the template (or layout) that failed.
        template: String,
        /// What went wrong and where, without context values.
        reason: String,
    },
    /// The message could not be assembled.
    #[error("could not build the message: {0}")]
    Build(String),
    /// The SMTP server could not be reached or refused the message.
    #[error("SMTP delivery failed: {0}")]
    Smtp(String),
    /// The file outbox could not be written.
    #[error("could not write to the mail outbox: {0}")]
    Outbox(#[source] std::io::Error),
}
