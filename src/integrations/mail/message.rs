//! Turns an [`Email`] into an RFC 5322 message.

use lettre::Message;
use lettre::message::header::{ContentTransferEncoding, ContentType};
use lettre::message::{Attachment, Body, Mailbox, MultiPart, SinglePart};

use super::{Email, MailError};

/// Builds a `multipart/alternative` message: text/plain always, text/html when present;
/// inside a `multipart/mixed` beside the attachments when there are any.
///
/// Parts are quoted-printable so that the file outbox stays readable and its reader
/// simple, whatever the content.
pub(super) fn build(from: &str, email: &Email) -> Result<Message, MailError> {
    let from = parse_mailbox("from", from)?;
    let to = parse_mailbox("to", &email.to)?;
    let mut body = MultiPart::alternative().singlepart(part(ContentType::TEXT_PLAIN, &email.text)?);
    if let Some(html) = &email.html {
        body = body.singlepart(part(ContentType::TEXT_HTML, html)?);
    }
    // With files: `multipart/mixed`, the bodies first, then each file.
    if !email.attachments.is_empty() {
        let mut mixed = MultiPart::mixed().multipart(body);
        for file in &email.attachments {
            let content_type = ContentType::parse(&file.content_type)
                .map_err(|_| MailError::Build("an attachment's content type".to_owned()))?;
            mixed = mixed.singlepart(
                Attachment::new(file.filename.clone()).body(file.bytes.clone(), content_type),
            );
        }
        body = mixed;
    }
    Message::builder()
        .from(from)
        .to(to)
        .subject(email.subject.as_str())
        // `<random@hostname>`: relays and clients use it to thread and deduplicate.
        .message_id(None)
        .multipart(body)
        .map_err(|error| MailError::Build(error.to_string()))
}

pub(super) fn parse_mailbox(field: &'static str, address: &str) -> Result<Mailbox, MailError> {
    address.parse().map_err(
        |error: lettre::address::AddressError| MailError::InvalidAddress {
            field,
            reason: error.to_string(),
        },
    )
}

fn part(content_type: ContentType, content: &str) -> Result<SinglePart, MailError> {
    // Quoted-printable accepts any text, so this never fails; the error keeps no content.
    let body =
        Body::new_with_encoding(content.to_owned(), ContentTransferEncoding::QuotedPrintable)
            .map_err(|_| MailError::Build("body cannot be quoted-printable".to_owned()))?;
    Ok(SinglePart::builder().header(content_type).body(body))
}
