//! A search term as clients send it in a query string.

use serde::{Deserialize, Deserializer};

/// The longest search term: longer than any name or title searched, and far below the
/// engines' own limits on `LIKE` patterns (SQLite refuses patterns past 50,000 bytes).
pub const MAX_SEARCH_CHARS: usize = 200;

/// A search term, trimmed, at most [`MAX_SEARCH_CHARS`] characters: a longer one is refused
/// when the query is read (422), so no search reaches the store unbounded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchTerm(String);

impl SearchTerm {
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.chars().count() > MAX_SEARCH_CHARS {
            return Err(format!(
                "a search term is at most {MAX_SEARCH_CHARS} characters"
            ));
        }
        Ok(Self(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

impl<'de> Deserialize<'de> for SearchTerm {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl utoipa::PartialSchema for SearchTerm {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .max_length(Some(MAX_SEARCH_CHARS))
            .description(Some(
                "Matched literally (`%` and `_` included), case-insensitively",
            ))
            .into()
    }
}

impl utoipa::ToSchema for SearchTerm {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terms_are_trimmed_and_bounded() {
        assert_eq!(SearchTerm::parse("  acme ").unwrap().as_str(), "acme");
        assert!(SearchTerm::parse(&"é".repeat(MAX_SEARCH_CHARS)).is_ok());
        assert!(SearchTerm::parse(&"é".repeat(MAX_SEARCH_CHARS + 1)).is_err());
    }
}
