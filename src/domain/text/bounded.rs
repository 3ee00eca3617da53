//! Free text of one kind, parsed once at the edge: no forbidden character and a length within
//! the bounds of its kind. A workflow that takes a [`Text`] cannot be handed unchecked text,
//! whether it came in a JSON body or a WebSocket frame.

use std::fmt;
use std::ops::Deref;

use super::first_forbidden;

/// Text with no forbidden character and between `MIN` and `MAX` characters.
///
/// `MIN` counts the trimmed text, so blank text is empty. By default the text is kept trimmed
/// and `MAX` counts it so; with `AS_SENT` it is kept exactly as sent (a chat message keeps its
/// indentation) and `MAX` counts every character sent.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Text<const MIN: usize, const MAX: usize, const AS_SENT: bool = false>(String);

/// A chat message (REST and WebSocket alike).
pub type ChatText = Text<1, 5_000, true>;
/// The title of a project, a milestone or a proposed milestone.
pub type Title = Text<1, 200>;
/// Why an administrator moves a project to another status.
pub type StatusReason = Text<1, 2_000>;
/// Why an administrator suspends an account or asks for its removal.
pub type AccountReason = Text<10, 2_000>;
/// Why an administrator changes a user's internal rating (no upper bound but the body's).
pub type RatingReason = Text<10, { usize::MAX }>;
/// Why a payment is refunded (optional).
pub type RefundReason = Text<1, 1_000>;
/// A review's comment, or its reviewee's response.
pub type ReviewText = Text<10, 2_000>;
/// What a company asks an expert to change: on a proposal, or on a delivery.
pub type Feedback = Text<1, 5_000>;
/// A mediator's notes on a dispute, or its resolution (the specification's limits).
pub type DecisionText = Text<10, 2_000>;

/// Why a text was refused; its `Display` is the message a client reads under the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TextError {
    #[error(
        "contains the character U+{:04X}; control and bidirectional-override characters are not \
         accepted",
        u32::from(*.0)
    )]
    Forbidden(char),
    #[error("{}", length_message(*.min, *.max))]
    Length { min: usize, max: usize },
}

fn length_message(min: usize, max: usize) -> String {
    match (min, max) {
        (0, max) => format!("must be at most {max} characters"),
        (min, usize::MAX) => format!("must be at least {min} characters"),
        (min, max) => format!("must be {min} to {max} characters"),
    }
}

impl<const MIN: usize, const MAX: usize, const AS_SENT: bool> Text<MIN, MAX, AS_SENT> {
    /// Checks `text`: a forbidden character first (whatever the length), then the length.
    pub fn parse(text: impl Into<String>) -> Result<Self, TextError> {
        let text = text.into();
        if let Some(c) = first_forbidden(&text) {
            return Err(TextError::Forbidden(c));
        }
        let trimmed = text.trim();
        let kept = if AS_SENT { text.as_str() } else { trimmed };
        let long_enough = MIN == 0 || trimmed.chars().nth(MIN - 1).is_some();
        let short_enough = kept.chars().nth(MAX).is_none();
        if !(long_enough && short_enough) {
            return Err(TextError::Length { min: MIN, max: MAX });
        }
        Ok(Self(if AS_SENT || trimmed.len() == text.len() {
            text
        } else {
            trimmed.to_owned()
        }))
    }

    /// An optional field: absent or blank is `None`, anything else must parse.
    pub fn parse_optional(text: Option<String>) -> Result<Option<Self>, TextError> {
        text.filter(|t| !t.trim().is_empty())
            .map(Self::parse)
            .transpose()
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

impl<const MIN: usize, const MAX: usize, const AS_SENT: bool> TryFrom<String>
    for Text<MIN, MAX, AS_SENT>
{
    type Error = TextError;

    fn try_from(text: String) -> Result<Self, TextError> {
        Self::parse(text)
    }
}

impl<const MIN: usize, const MAX: usize, const AS_SENT: bool> TryFrom<&str>
    for Text<MIN, MAX, AS_SENT>
{
    type Error = TextError;

    fn try_from(text: &str) -> Result<Self, TextError> {
        Self::parse(text)
    }
}

impl<const MIN: usize, const MAX: usize, const AS_SENT: bool> Deref for Text<MIN, MAX, AS_SENT> {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl<const MIN: usize, const MAX: usize, const AS_SENT: bool> AsRef<str>
    for Text<MIN, MAX, AS_SENT>
{
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl<const MIN: usize, const MAX: usize, const AS_SENT: bool> fmt::Display
    for Text<MIN, MAX, AS_SENT>
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<const MIN: usize, const MAX: usize, const AS_SENT: bool> From<Text<MIN, MAX, AS_SENT>>
    for String
{
    fn from(text: Text<MIN, MAX, AS_SENT>) -> Self {
        text.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    type Small = Text<2, 5>;
    type SmallAsSent = Text<2, 5, true>;

    #[test]
    fn titles_are_trimmed_and_bounded_in_characters() {
        assert_eq!(Title::parse("  A plan \n").unwrap().as_str(), "A plan");
        assert_eq!(Title::parse("é".repeat(200)).unwrap().chars().count(), 200);
        let too_long = TextError::Length { min: 1, max: 200 };
        assert_eq!(Title::parse("é".repeat(201)), Err(too_long.clone()));
        assert_eq!(Title::parse(" \t\r\n "), Err(too_long.clone()));
        assert_eq!(too_long.to_string(), "must be 1 to 200 characters");
    }

    #[test]
    fn a_chat_message_keeps_its_spacing_and_counts_all_it_sent() {
        let indented = "  let x = 1;\n";
        assert_eq!(ChatText::parse(indented).unwrap().as_str(), indented);
        assert!(ChatText::parse("   ").is_err());
        assert!(ChatText::parse("x".repeat(5_000)).is_ok());
        // Spaces count: 4,999 characters and two spaces are over the bound.
        let padded = format!(" {} ", "x".repeat(4_999));
        assert_eq!(
            ChatText::parse(padded).unwrap_err().to_string(),
            "must be 1 to 5000 characters"
        );
    }

    #[test]
    fn forbidden_characters_are_refused_before_the_length() {
        assert_eq!(ChatText::parse("a\0b"), Err(TextError::Forbidden('\0')));
        assert_eq!(
            ChatText::parse(format!("{}\u{202E}", "x".repeat(6_000))),
            Err(TextError::Forbidden('\u{202E}'))
        );
        assert_eq!(
            TextError::Forbidden('\u{202E}').to_string(),
            "contains the character U+202E; control and bidirectional-override characters are \
             not accepted"
        );
        // Blank around a forbidden character is still refused, not trimmed away.
        assert_eq!(Title::parse("\u{1}  "), Err(TextError::Forbidden('\u{1}')));
    }

    #[test]
    fn the_message_names_the_bounds_there_are() {
        assert_eq!(
            Text::<0, 2_000>::parse("x".repeat(2_001))
                .unwrap_err()
                .to_string(),
            "must be at most 2000 characters"
        );
        assert_eq!(
            RatingReason::parse("too short").unwrap_err().to_string(),
            "must be at least 10 characters"
        );
        assert!(RatingReason::parse("x".repeat(100_000)).is_ok());
        assert_eq!(
            AccountReason::parse("short").unwrap_err().to_string(),
            "must be 10 to 2000 characters"
        );
    }

    #[test]
    fn an_optional_field_is_absent_when_blank() {
        assert_eq!(RefundReason::parse_optional(None), Ok(None));
        assert_eq!(RefundReason::parse_optional(Some("  ".into())), Ok(None));
        assert_eq!(
            RefundReason::parse_optional(Some(" duplicate ".into()))
                .unwrap()
                .unwrap()
                .as_str(),
            "duplicate"
        );
        assert!(RefundReason::parse_optional(Some("x".repeat(1_001))).is_err());
        assert_eq!(
            RefundReason::parse_optional(Some(" \u{7} ".into())),
            Err(TextError::Forbidden('\u{7}'))
        );
    }

    proptest! {
        /// A text parses exactly when it holds no forbidden character and its trimmed length
        /// is within the bounds; what is kept is the trimmed text.
        #[test]
        fn trimmed_text_parses_exactly_within_its_bounds(text in "[ \\ta-zé\\x00\\u{202E}]{0,9}") {
            let trimmed = text.trim();
            let n = trimmed.chars().count();
            let expected = if let Some(c) = first_forbidden(&text) {
                Err(TextError::Forbidden(c))
            } else if (2..=5).contains(&n) {
                Ok(trimmed.to_owned())
            } else {
                Err(TextError::Length { min: 2, max: 5 })
            };
            prop_assert_eq!(Small::parse(text.clone()).map(Text::into_string), expected);
        }

        /// Kept as sent: the minimum counts the trimmed text, the maximum all of it.
        #[test]
        fn text_kept_as_sent_counts_its_spaces_against_the_maximum(text in "[ \\na-zé]{0,9}") {
            let fits = text.trim().chars().count() >= 2 && text.chars().count() <= 5;
            let parsed = SmallAsSent::parse(text.clone());
            prop_assert_eq!(parsed.is_ok(), fits);
            if let Ok(kept) = parsed {
                prop_assert_eq!(kept.as_str(), text.as_str());
            }
        }
    }
}
