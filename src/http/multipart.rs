//! Reading `multipart/form-data` uploads: the first file part, bounded in size, plus the
//! small text fields beside it.

use futures_util::StreamExt as _;
use std::collections::HashMap;

/// How much of an oversized body is read (and dropped) before answering 413, so the client
/// gets the answer instead of a reset connection.
pub const MAX_DRAIN_BYTES: usize = 16 * 1024 * 1024;
/// Text fields longer than this are cut (they are names and kinds, not content).
const MAX_TEXT_FIELD: usize = 1024;

/// Whether the request declares a body past [`MAX_DRAIN_BYTES`]: answered 413 before reading.
pub fn declared_too_large(req: &actix_web::HttpRequest) -> bool {
    req.headers()
        .get(actix_web::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .is_some_and(|len| len > MAX_DRAIN_BYTES)
}

/// What a form held.
#[derive(Debug, Default)]
pub struct Form {
    /// The first file part (a part with a file name, or named `file`, `picture`, `image` or
    /// `document`): its bytes and the client's file name.
    pub file: Option<(Vec<u8>, Option<String>)>,
    pub fields: HashMap<String, String>,
}

#[derive(Debug, PartialEq, Eq)]
pub enum FormError {
    /// The file is larger than allowed, or the body past [`MAX_DRAIN_BYTES`].
    TooLarge,
    /// Not a readable multipart body.
    Malformed,
}

pub async fn read_form(
    mut payload: actix_multipart::Multipart,
    max_file: usize,
) -> Result<Form, FormError> {
    let mut form = Form::default();
    let mut seen = 0usize;
    let mut oversized = false;
    while let Some(field) = payload.next().await {
        let mut field = field.map_err(|_| FormError::Malformed)?;
        let (name, file_name) = field
            .content_disposition()
            .map(|cd| {
                (
                    cd.get_name().unwrap_or_default().to_owned(),
                    cd.get_filename().map(str::to_owned),
                )
            })
            .unwrap_or_default();
        let is_file = form.file.is_none()
            && (file_name.is_some()
                || matches!(name.as_str(), "file" | "picture" | "image" | "document"));
        let mut buf = Vec::new();
        while let Some(chunk) = field.next().await {
            let chunk = chunk.map_err(|_| FormError::Malformed)?;
            seen += chunk.len();
            if seen > MAX_DRAIN_BYTES {
                return Err(FormError::TooLarge);
            }
            let limit = if is_file { max_file } else { MAX_TEXT_FIELD };
            if !oversized && buf.len() <= limit {
                buf.extend_from_slice(&chunk);
                if is_file && buf.len() > max_file {
                    oversized = true;
                    buf = Vec::new();
                }
            }
        }
        if is_file {
            if !oversized {
                form.file = Some((buf, file_name));
            }
        } else if !name.is_empty() {
            buf.truncate(MAX_TEXT_FIELD);
            // Free text: the characters refused in JSON bodies are dropped here.
            let text = String::from_utf8_lossy(&buf)
                .chars()
                .filter(|c| !crate::domain::text::is_forbidden(*c))
                .collect();
            form.fields.insert(name, text);
        }
    }
    if oversized {
        return Err(FormError::TooLarge);
    }
    Ok(form)
}
