//! Reads back the messages a [`FileOutbox`](super::FileOutbox) wrote. Meant for
//! black-box tests (hence public): they find the e-mail a request sent and follow the
//! token in its link.
//!
//! The parser understands what `FileOutbox` writes: unfolded headers with RFC 2047
//! encoded words, a `multipart/alternative` body (or a single part) and
//! quoted-printable, base64, 7bit or 8bit parts in UTF-8. It is lenient: a part it
//! cannot find stays empty instead of failing.

use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

/// One message found in the outbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedMail {
    /// File name, e.g. `20250102T030405.123456Z-9f1c2b3a4d5e6f70.eml`.
    pub file_name: String,
    /// `From` header as written, e.g. `Marketplace <no-reply@example.com>`.
    pub from: String,
    /// Recipient address (the part inside `<…>` when a display name is present).
    pub to: String,
    /// Decoded subject.
    pub subject: String,
    /// Decoded text/plain part, with `\n` line endings.
    pub text: String,
    /// Decoded text/html part, when the message has one.
    pub html: Option<String>,
    /// Files attached: (file name, media type, decoded bytes).
    pub attachments: Vec<(String, String, Vec<u8>)>,
}

impl ReceivedMail {
    /// Value of the first `token=` query parameter in the text part, percent-decoded.
    ///
    /// The value runs over URL-safe characters (letters, digits, `-_.~%`), so a link
    /// must not be followed directly by one of them.
    #[must_use]
    pub fn token(&self) -> Option<String> {
        let start = ["?token=", "&token="]
            .iter()
            .filter_map(|marker| self.text.find(marker).map(|at| at + marker.len()))
            .min()?;
        let value: String = self.text[start..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '~' | '%'))
            .collect();
        (!value.is_empty()).then(|| percent_decode(&value))
    }
}

/// Every `.eml` message in `dir`, oldest first (file names sort by time).
///
/// A missing directory holds no mail. Files still being written have another name and
/// are not read.
pub fn read_all(dir: &Path) -> Vec<ReceivedMail> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<_> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "eml"))
        .collect();
    files.sort();
    files
        .iter()
        .filter_map(|path| {
            let raw = std::fs::read(path).ok()?;
            let mut mail = parse(&String::from_utf8_lossy(&raw));
            mail.file_name = path.file_name()?.to_string_lossy().into_owned();
            Some(mail)
        })
        .collect()
}

/// Parses one RFC 5322 message as `FileOutbox` writes it. `file_name` is left empty.
pub fn parse(raw: &str) -> ReceivedMail {
    let raw = raw.replace("\r\n", "\n");
    let part = Part::parse(&raw);
    let mut mail = ReceivedMail {
        file_name: String::new(),
        from: part.header("from").map(decode_words).unwrap_or_default(),
        to: part
            .header("to")
            .map(|to| address_of(&decode_words(to)))
            .unwrap_or_default(),
        subject: part.header("subject").map(decode_words).unwrap_or_default(),
        text: String::new(),
        html: None,
        attachments: Vec::new(),
    };
    read_leaves(part, &mut mail);
    mail
}

/// Reads `part`'s bodies and attachments into `mail`, descending into nested multiparts
/// (`multipart/mixed` holding the `multipart/alternative` bodies and the files).
fn read_leaves(part: Part<'_>, mail: &mut ReceivedMail) {
    if let Some(boundary) = part.boundary() {
        for inner in split_multipart(part.body, &boundary) {
            read_leaves(Part::parse(inner), mail);
        }
        return;
    }
    let attached = part
        .header("content-disposition")
        .filter(|d| d.to_ascii_lowercase().starts_with("attachment"))
        .map(|d| {
            d.split(';')
                .skip(1)
                .find_map(|parameter| {
                    let (name, value) = parameter.split_once('=')?;
                    name.trim()
                        .eq_ignore_ascii_case("filename")
                        .then(|| value.trim().trim_matches('"').to_owned())
                })
                .unwrap_or_default()
        });
    match (attached, part.media_type().as_str()) {
        (Some(name), media) => {
            mail.attachments
                .push((name, media.to_owned(), part.decoded_bytes()));
        }
        (None, "text/plain") if mail.text.is_empty() => mail.text = part.decoded_body(),
        (None, "text/html") if mail.html.is_none() => mail.html = Some(part.decoded_body()),
        _ => {}
    }
}

/// Headers and body of a message or of one MIME part.
struct Part<'a> {
    headers: Vec<(String, String)>,
    body: &'a str,
}

impl<'a> Part<'a> {
    fn parse(raw: &'a str) -> Self {
        let (head, body) = raw.split_once("\n\n").unwrap_or((raw, ""));
        let mut headers: Vec<(String, String)> = Vec::new();
        for line in head.lines() {
            if line.starts_with([' ', '\t']) {
                // A folded continuation: unfolding removes only the line break.
                if let Some((_, value)) = headers.last_mut() {
                    value.push_str(line);
                }
            } else if let Some((name, value)) = line.split_once(':') {
                headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
            }
        }
        Self { headers, body }
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(header, _)| header == name)
            .map(|(_, value)| value.as_str())
    }

    /// `text/plain` for `Content-Type: text/plain; charset=utf-8`; the RFC default when absent.
    fn media_type(&self) -> String {
        self.header("content-type")
            .and_then(|value| value.split(';').next())
            .map_or_else(
                || "text/plain".to_owned(),
                |media| media.trim().to_ascii_lowercase(),
            )
    }

    fn boundary(&self) -> Option<String> {
        let content_type = self.header("content-type")?;
        if !content_type.to_ascii_lowercase().starts_with("multipart/") {
            return None;
        }
        content_type.split(';').skip(1).find_map(|parameter| {
            let (name, value) = parameter.split_once('=')?;
            name.trim()
                .eq_ignore_ascii_case("boundary")
                .then(|| value.trim().trim_matches('"').to_owned())
        })
    }

    fn decoded_body(&self) -> String {
        String::from_utf8_lossy(&self.decoded_bytes()).into_owned()
    }

    fn decoded_bytes(&self) -> Vec<u8> {
        let encoding = self
            .header("content-transfer-encoding")
            .unwrap_or("7bit")
            .to_ascii_lowercase();
        match encoding.as_str() {
            "quoted-printable" => decode_quoted_printable(self.body),
            "base64" => {
                let compact: String = self.body.split_whitespace().collect();
                BASE64.decode(compact).unwrap_or_default()
            }
            _ => self.body.as_bytes().to_vec(),
        }
    }
}

/// The parts between `--boundary` lines, each without the line break that belongs to
/// the next delimiter.
fn split_multipart<'a>(body: &'a str, boundary: &str) -> Vec<&'a str> {
    let delimiter = format!("--{boundary}");
    let mut parts = Vec::new();
    let mut current: Option<usize> = None;
    let mut offset = 0;
    for line in body.split_inclusive('\n') {
        let trimmed = line.trim_end();
        if trimmed == delimiter || trimmed == format!("{delimiter}--") {
            if let Some(start) = current {
                let part = &body[start..offset];
                parts.push(part.strip_suffix('\n').unwrap_or(part));
            }
            if trimmed != delimiter {
                break;
            }
            current = Some(offset + line.len());
        }
        offset += line.len();
    }
    parts
}

/// Decodes RFC 2045 quoted-printable: `=XX` escapes and `=` soft line breaks.
fn decode_quoted_printable(body: &str) -> Vec<u8> {
    let bytes = body.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'=' if bytes.get(i + 1) == Some(&b'\n') => i += 2,
            b'=' => match bytes.get(i + 1..i + 3).and_then(hex_byte) {
                Some(byte) => {
                    decoded.push(byte);
                    i += 3;
                }
                None => {
                    decoded.push(b'=');
                    i += 1;
                }
            },
            byte => {
                decoded.push(byte);
                i += 1;
            }
        }
    }
    decoded
}

/// Decodes RFC 2047 encoded words (`=?utf-8?b?…?=`, `=?utf-8?q?…?=`) in a header value;
/// whitespace between two encoded words is dropped, as the RFC says.
fn decode_words(value: &str) -> String {
    let mut decoded: Vec<u8> = Vec::new();
    let mut after_word = false;
    let mut rest = value;
    while let Some(start) = rest.find("=?") {
        let (plain, tail) = rest.split_at(start);
        match decode_word(tail) {
            Some((bytes, used)) => {
                let between_words = after_word && plain.chars().all(char::is_whitespace);
                if !between_words {
                    decoded.extend_from_slice(plain.as_bytes());
                }
                decoded.extend_from_slice(&bytes);
                rest = &tail[used..];
                after_word = true;
            }
            None => {
                decoded.extend_from_slice(plain.as_bytes());
                decoded.extend_from_slice(b"=?");
                rest = &tail[2..];
                after_word = false;
            }
        }
    }
    decoded.extend_from_slice(rest.as_bytes());
    // Bytes of one character may be split over two words: decode UTF-8 at the end.
    String::from_utf8_lossy(&decoded).into_owned()
}

/// Decodes the encoded word at the start of `text`; returns its bytes and length.
fn decode_word(text: &str) -> Option<(Vec<u8>, usize)> {
    let inner = text.strip_prefix("=?")?;
    let (_charset, inner) = inner.split_once('?')?;
    let (encoding, inner) = inner.split_once('?')?;
    let end = inner.find("?=")?;
    let payload = &inner[..end];
    let used = text.len() - inner.len() + end + 2;
    let bytes = match encoding {
        "b" | "B" => BASE64.decode(payload).ok()?,
        "q" | "Q" => decode_quoted_printable(&payload.replace('_', " ")),
        _ => return None,
    };
    Some((bytes, used))
}

/// `ana@example.com` from `Ana <ana@example.com>` or from itself.
fn address_of(mailbox: &str) -> String {
    match (mailbox.rfind('<'), mailbox.rfind('>')) {
        (Some(open), Some(close)) if open < close => mailbox[open + 1..close].trim().to_owned(),
        _ => mailbox.trim().to_owned(),
    }
}

fn hex_byte(pair: &[u8]) -> Option<u8> {
    let text = std::str::from_utf8(pair).ok()?;
    u8::from_str_radix(text, 16).ok()
}

fn percent_decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| bytes.get(i + 1..i + 3).and_then(hex_byte))
            .flatten();
        match escaped {
            Some(byte) => {
                decoded.push(byte);
                i += 3;
            }
            None => {
                decoded.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&decoded).into_owned()
}
