//! Characters free text may not carry.
//!
//! Control characters other than tab and line breaks have no place in a name, a message or a
//! search: NUL in particular is refused by PostgreSQL in `TEXT` (a 500 waiting to happen), and
//! the bidirectional overrides and isolates make text display in another order than it is
//! stored (a file name `invoice<U+202E>fdp.exe` shows as `invoiceexe.pdf`, a message reads
//! differently to its reader).
//! Free text a workflow takes is a [`Text`] of its kind, which refuses them with the length
//! rule of that kind when it is parsed; the HTTP middleware `text_guard` refuses them in every
//! path, query and JSON body besides, a second net for the fields that are plain strings.

mod bounded;

pub use bounded::*;

/// Whether `c` is refused in free text: C0 controls but tab, line feed and carriage return
/// (a line break typed in a text area travels as CR LF), DEL, C1 controls, and the
/// bidirectional embedding, override and isolate characters.
pub fn is_forbidden(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{8}' | '\u{B}' | '\u{C}' | '\u{E}'..='\u{1F}' | '\u{7F}'..='\u{9F}'
        | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// The first forbidden character in `text`.
pub fn first_forbidden(text: &str) -> Option<char> {
    text.chars().find(|c| is_forbidden(*c))
}

/// The first forbidden character inside a string of a JSON document, written raw or as a
/// `\uXXXX` escape. Escapes are decoded one by one (`\\u0000` is a backslash and the text
/// `u0000`, not NUL), so nothing hides behind an escape and nothing innocent is refused.
/// Malformed JSON answers `None`: the JSON parser refuses it with its own message.
pub fn first_forbidden_in_json(body: &[u8]) -> Option<char> {
    let Ok(text) = std::str::from_utf8(body) else {
        return None;
    };
    let mut chars = text.chars();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        if !in_string {
            in_string = c == '"';
            continue;
        }
        match c {
            '"' => in_string = false,
            '\\' => match chars.next() {
                Some('u') => {
                    let hex: String = chars.by_ref().take(4).collect();
                    let unit = u32::from_str_radix(&hex, 16).ok()?;
                    // Surrogates (halves of an astral character) are never forbidden.
                    if let Some(decoded) = char::from_u32(unit).filter(|d| is_forbidden(*d)) {
                        return Some(decoded);
                    }
                }
                // The short escapes of backspace and form feed are control characters too.
                Some('b') => return Some('\u{8}'),
                Some('f') => return Some('\u{C}'),
                Some(_) => {}
                None => return None,
            },
            c if is_forbidden(c) => return Some(c),
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn line_breaks_and_tabs_pass_controls_and_overrides_do_not() {
        assert_eq!(first_forbidden("two\nlines\r\n\tindented"), None);
        assert_eq!(first_forbidden("nul\0"), Some('\0'));
        assert_eq!(first_forbidden("bell\u{7}"), Some('\u{7}'));
        assert_eq!(first_forbidden("invoice\u{202E}fdp.exe"), Some('\u{202E}'));
        assert_eq!(first_forbidden("isolate\u{2066}"), Some('\u{2066}'));
        assert_eq!(first_forbidden("c1\u{85}"), Some('\u{85}'));
        assert_eq!(first_forbidden("Zoë, 東京, emoji 🎉, RTL עברית"), None);
    }

    #[test]
    fn escapes_inside_json_strings_are_decoded() {
        assert_eq!(first_forbidden_in_json(br#"{"a":"x\u0000y"}"#), Some('\0'));
        assert_eq!(
            first_forbidden_in_json(br#"{"a":"\u202e"}"#),
            Some('\u{202E}')
        );
        assert_eq!(
            first_forbidden_in_json(br#"{"a":"\u001F"}"#),
            Some('\u{1F}')
        );
        // An escaped backslash followed by the text u0000 is innocent.
        assert_eq!(first_forbidden_in_json(br#"{"a":"\\u0000"}"#), None);
        assert_eq!(
            first_forbidden_in_json(br#"{"a":"line\nbreak\ttab\""}"#),
            None
        );
        // Surrogate pairs of an emoji are fine.
        assert_eq!(first_forbidden_in_json(br#"{"a":"\ud83c\udf89"}"#), None);
        // Outside strings nothing is text.
        assert_eq!(first_forbidden_in_json(b"{\"a\": 1,\n\"b\": [true]}"), None);
        assert_eq!(
            first_forbidden_in_json("{\"k\u{202E}\":1}".as_bytes()),
            Some('\u{202E}')
        );
    }

    proptest! {
        /// Whatever a string holds, serialising it to JSON and scanning the document finds
        /// exactly the first forbidden character of the string.
        #[test]
        fn scanning_json_agrees_with_scanning_the_text(text in "\\PC*|[\\x00-\\x20\\u{2066}\\u{202E}a\\\\\"]*") {
            let document = serde_json::json!({ "field": text, "n": 1 }).to_string();
            prop_assert_eq!(first_forbidden_in_json(document.as_bytes()), first_forbidden(&text));
        }
    }
}
