//! DAC7 (Council Directive (EU) 2021/514) rules with no I/O: which sellers the platform
//! reports, and the text of the annual report. A tax year's quarters are UTC's calendar
//! quarters, kept by the writes (migration 0044).

use super::state::state_enum;

state_enum! {
    /// An expert's DAC7 review for a tax year (`dac7_reviews.status`, and the latest in
    /// `profiles.dac7_review_status`): waiting (`pending_review`), the expert told to check
    /// their data (`notified`), or checked (`reviewed`).
    pub enum Dac7ReviewStatus {
        PendingReview = "pending_review",
        Notified = "notified",
        Reviewed = "reviewed",
    }
}

/// A seller is left out of the report only with fewer than 30 paid activities **and** at
/// most EUR 2,000 of consideration in the year (Annex V, excluded seller).
pub const ACTIVITY_THRESHOLD: i64 = 30;
pub const CONSIDERATION_THRESHOLD_MINOR: i64 = 200_000;

pub fn is_reportable(paid_activities: i64, gross_minor: i64) -> bool {
    paid_activities >= ACTIVITY_THRESHOLD || gross_minor > CONSIDERATION_THRESHOLD_MINOR
}

/// Years the review accepts: the platform's lifetime, give or take.
pub const FIRST_YEAR: i32 = 2020;
pub const LAST_YEAR: i32 = 2100;

/// The characters that make a spreadsheet read a cell as a formula.
const FORMULA_STARTS: [char; 6] = ['=', '+', '-', '@', '\t', '\r'];

/// One CSV field, safe whatever separator the spreadsheet splits on: a formula start is
/// neutralised with `'` at the start of the field and after every `,`, `;` and line break in
/// it (Excel with Spanish and most European settings splits on `;`, and a tool that ignores
/// quotes splits on either), and the field is quoted when it holds any of them or `"`.
pub fn csv_field(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    let mut cell_starts = true;
    for c in value.chars() {
        if cell_starts && FORMULA_STARTS.contains(&c) {
            out.push('\'');
        }
        out.push(c);
        cell_starts = matches!(c, ',' | ';' | '\n' | '\r');
    }
    if out.contains([',', ';', '"', '\n', '\r']) {
        format!("\"{}\"", out.replace('"', "\"\""))
    } else {
        out
    }
}

/// Minor units as a decimal amount with two places (`123456` → `1234.56`).
pub fn amount(minor: i64) -> String {
    let sign = if minor < 0 { "-" } else { "" };
    let m = minor.unsigned_abs();
    format!("{sign}{}.{:02}", m / 100, m % 100)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whichever of `,`, `;` or a line break a tool splits the written field on, and
        /// whether it honours the quotes or not, no piece starts a formula.
        #[test]
        fn no_piece_of_a_field_starts_a_formula(value in "[=+@;,a\\-\t\r\n\" ]{0,12}") {
            let field = csv_field(&value);
            let unquoted = field.strip_prefix('"').unwrap_or(&field);
            for piece in unquoted.split([',', ';', '\n', '\r']) {
                prop_assert!(!piece.starts_with(FORMULA_STARTS), "{value:?} gave {field:?}");
            }
        }
    }

    #[test]
    fn thirty_activities_or_more_than_two_thousand_euros_are_reported() {
        assert!(!is_reportable(29, 200_000));
        assert!(is_reportable(30, 0));
        assert!(is_reportable(1, 200_001));
        assert!(!is_reportable(0, 0));
    }

    #[test]
    fn csv_fields_are_quoted_and_never_formulas() {
        assert_eq!(csv_field("plain"), "plain");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_field("=HYPERLINK(1)"), "'=HYPERLINK(1)");
        assert_eq!(csv_field("-1,2"), "\"'-1,2\"");
        // Split on `;` (European spreadsheets), no cell starts a formula either.
        assert_eq!(
            csv_field("x;=cmd|' /C calc'!A0;y"),
            "\"x;'=cmd|' /C calc'!A0;y\""
        );
        assert_eq!(csv_field("Ana;=1+1;"), "\"Ana;'=1+1;\"");
        assert_eq!(csv_field("x;@SUM(1+1);y"), "\"x;'@SUM(1+1);y\"");
        assert_eq!(csv_field("a;b"), "\"a;b\"");
        assert_eq!(amount(123_456), "1234.56");
        assert_eq!(amount(5), "0.05");
        assert_eq!(amount(-250), "-2.50");
    }
}
