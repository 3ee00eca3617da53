//! Where a client stopped in a list it scrolls through: the sort key of the last item it was
//! given, handed out as an opaque `next_cursor` and taken back as `cursor`. A page after a
//! cursor starts right after that key, so rows added meanwhile are neither repeated nor
//! skipped (new rows sort before the cursor in a newest-first list: a client sees them when
//! it starts over).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, Utc};

/// The sort key of one item: an optional rank (higher first: search relevance), then a time
/// and an id (newest first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cursor {
    pub rank: i64,
    pub at: DateTime<Utc>,
    pub id: i64,
}

/// Version tag of the encoding, so that a cursor from another version is refused rather than
/// misread.
const TAG: &str = "c1";

impl Cursor {
    pub fn encode(&self) -> String {
        URL_SAFE_NO_PAD.encode(format!(
            "{TAG}.{}.{}.{}",
            self.rank,
            // Nanoseconds: the finest a stored time has, so the key is exact on both engines.
            self.at.timestamp_nanos_opt().unwrap_or(i64::MAX),
            self.id
        ))
    }

    /// `None` for anything [`encode`](Self::encode) did not make.
    pub fn decode(text: &str) -> Option<Self> {
        if text.len() > 128 {
            return None;
        }
        let raw = URL_SAFE_NO_PAD.decode(text).ok()?;
        let raw = std::str::from_utf8(&raw).ok()?;
        let mut parts = raw.split('.');
        if parts.next()? != TAG {
            return None;
        }
        let rank = parts.next()?.parse().ok()?;
        let at = DateTime::from_timestamp_nanos(parts.next()?.parse().ok()?);
        let id = parts.next()?.parse().ok()?;
        let cursor = Self { rank, at, id };
        // Only the one text `encode` writes for it (no leading zeros, padding bits or
        // trailing characters that decode the same).
        (parts.next().is_none() && cursor.encode() == text).then_some(cursor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn a_cursor_reads_back_as_it_was_written(
            rank in -5i64..5,
            nanos in 0i64..4_102_444_800_000_000_000,
            id in 1i64..i64::MAX,
        ) {
            let cursor = Cursor { rank, at: DateTime::from_timestamp_nanos(nanos), id };
            prop_assert_eq!(Cursor::decode(&cursor.encode()), Some(cursor));
        }

        #[test]
        fn anything_else_is_refused_not_misread(text in "\\PC{0,40}") {
            if let Some(cursor) = Cursor::decode(&text) {
                prop_assert_eq!(cursor.encode(), text);
            }
        }
    }

    #[test]
    fn foreign_and_tampered_cursors_are_refused() {
        for text in ["", "abc", "YzEuMS4y", &URL_SAFE_NO_PAD.encode("c2.0.1.2")] {
            assert_eq!(Cursor::decode(text), None, "{text}");
        }
        let good = Cursor {
            rank: 0,
            at: DateTime::from_timestamp_nanos(1),
            id: 9,
        }
        .encode();
        assert!(Cursor::decode(&format!("{good}!")).is_none());
    }
}
