//! Document and chat uploads (DESIGN §6): images, PDF, DOCX and ZIP up to 10 MB, the type
//! read from the content's magic bytes, never from the name.

/// The largest document accepted, in bytes.
pub const MAX_DOCUMENT_BYTES: usize = 10 * 1024 * 1024;

/// A type on the allow-list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DocumentType {
    Jpeg,
    Png,
    Webp,
    Gif,
    Pdf,
    Docx,
    Zip,
}

impl DocumentType {
    /// Reads the type from the first bytes; `None` for anything off the allow-list
    /// (executables, scripts, HTML, …) whatever its name says.
    pub fn sniff(bytes: &[u8]) -> Option<Self> {
        match bytes {
            [0xFF, 0xD8, 0xFF, ..] => Some(Self::Jpeg),
            [0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A, ..] => Some(Self::Png),
            [
                b'R',
                b'I',
                b'F',
                b'F',
                _,
                _,
                _,
                _,
                b'W',
                b'E',
                b'B',
                b'P',
                ..,
            ] => Some(Self::Webp),
            [b'G', b'I', b'F', b'8', b'7' | b'9', b'a', ..] => Some(Self::Gif),
            [b'%', b'P', b'D', b'F', b'-', ..] => Some(Self::Pdf),
            [b'P', b'K', 0x03, 0x04, ..] | [b'P', b'K', 0x05, 0x06, ..] => {
                // A DOCX is a ZIP whose entries (names stored uncompressed in the local
                // headers) include the Word document part.
                if contains(bytes, b"word/document.xml") || contains(bytes, b"word/") {
                    Some(Self::Docx)
                } else {
                    Some(Self::Zip)
                }
            }
            _ => None,
        }
    }

    pub fn mime(self) -> &'static str {
        match self {
            Self::Jpeg => "image/jpeg",
            Self::Png => "image/png",
            Self::Webp => "image/webp",
            Self::Gif => "image/gif",
            Self::Pdf => "application/pdf",
            Self::Docx => "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
            Self::Zip => "application/zip",
        }
    }

    pub fn extension(self) -> &'static str {
        match self {
            Self::Jpeg => "jpg",
            Self::Png => "png",
            Self::Webp => "webp",
            Self::Gif => "gif",
            Self::Pdf => "pdf",
            Self::Docx => "docx",
            Self::Zip => "zip",
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The name an upload of type `kind` is stored and offered under: the client's name made
/// safe ([`clean_file_name`]), ending in the extension of the type its bytes were sniffed as
/// (appended when the name says otherwise: `invoice.bat` holding a GIF is `invoice.bat.gif`),
/// so a download never opens as something other than what it is.
pub fn display_name(name: Option<&str>, kind: DocumentType) -> String {
    let clean = clean_file_name(name);
    let says = clean
        .rsplit_once('.')
        .map(|(_, ext)| ext.to_ascii_lowercase());
    let agrees = match says.as_deref() {
        Some("jpeg" | "jpg") => kind == DocumentType::Jpeg,
        Some(ext) => ext == kind.extension(),
        None => false,
    };
    if agrees {
        clean
    } else {
        format!("{clean}.{}", kind.extension())
    }
}

/// A client's file name made safe to store and show: the last path component, printable
/// characters only, at most 120 characters; `document` when nothing is left.
fn clean_file_name(name: Option<&str>) -> String {
    let base = name
        .unwrap_or_default()
        .rsplit(['/', '\\'])
        .next()
        .unwrap_or_default();
    let cleaned: String = base
        .chars()
        .filter(|c| {
            !c.is_control()
                && !super::text::is_forbidden(*c)
                && !matches!(c, '"' | '<' | '>' | '|' | ':' | '*' | '?')
        })
        .take(120)
        .collect();
    let cleaned = cleaned.trim().trim_start_matches('.').to_owned();
    if cleaned.is_empty() {
        "document".to_owned()
    } else {
        cleaned
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_come_from_the_content() {
        assert_eq!(
            DocumentType::sniff(b"%PDF-1.7\n..."),
            Some(DocumentType::Pdf)
        );
        assert_eq!(
            DocumentType::sniff(&[0xFF, 0xD8, 0xFF, 0xE0]),
            Some(DocumentType::Jpeg)
        );
        assert_eq!(
            DocumentType::sniff(b"PK\x03\x04....word/document.xml"),
            Some(DocumentType::Docx)
        );
        assert_eq!(
            DocumentType::sniff(b"PK\x03\x04....data.csv"),
            Some(DocumentType::Zip)
        );
        assert_eq!(DocumentType::sniff(b"MZ\x90\x00 executable"), None);
        assert_eq!(DocumentType::sniff(b"\x7fELF\x02\x01"), None);
        assert_eq!(DocumentType::sniff(b"#!/bin/sh\nrm -rf /"), None);
        assert_eq!(DocumentType::sniff(b"<html>"), None);
        assert_eq!(DocumentType::sniff(b""), None);
    }

    #[test]
    fn file_names_are_cleaned() {
        assert_eq!(clean_file_name(Some("../../etc/passwd")), "passwd");
        assert_eq!(clean_file_name(Some("C:\\Users\\a\\cv.pdf")), "cv.pdf");
        assert_eq!(clean_file_name(Some(".hidden")), "hidden");
        assert_eq!(clean_file_name(Some("a\u{0}b\"c.pdf")), "abc.pdf");
        assert_eq!(
            clean_file_name(Some("invoice\u{202E}fdp.exe")),
            "invoicefdp.exe"
        );
        assert_eq!(clean_file_name(None), "document");
    }

    #[test]
    fn a_stored_name_ends_in_the_extension_of_the_sniffed_type() {
        use DocumentType::*;
        assert_eq!(display_name(Some("cv.pdf"), Pdf), "cv.pdf");
        assert_eq!(display_name(Some("Photo.JPEG"), Jpeg), "Photo.JPEG");
        assert_eq!(display_name(Some("photo.jpg"), Jpeg), "photo.jpg");
        assert_eq!(display_name(Some("invoice.bat"), Gif), "invoice.bat.gif");
        assert_eq!(display_name(Some("invoice.html"), Gif), "invoice.html.gif");
        assert_eq!(display_name(Some("setup.exe"), Png), "setup.exe.png");
        assert_eq!(display_name(Some("logo.svg"), Pdf), "logo.svg.pdf");
        assert_eq!(display_name(Some("report"), Docx), "report.docx");
        assert_eq!(display_name(None, Zip), "document.zip");
    }
}
