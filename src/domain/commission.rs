//! Commission: the platform's share of a released payment, by expert level. Rates are kept in
//! basis points (1/100 of a percent) and amounts in minor units, so the split is exact integer
//! arithmetic and its two parts always add up to the amount.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::money::{minor_to_number, parse_number};

/// 100 percent.
pub const MAX_RATE_BP: i64 = 10_000;

/// The expert levels commissions are configured for.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema,
)]
pub enum Level {
    Global,
    Pro,
    Enterprise,
}

impl Level {
    pub const ALL: [Level; 3] = [Level::Global, Level::Pro, Level::Enterprise];

    pub fn as_str(self) -> &'static str {
        match self {
            Level::Global => "Global",
            Level::Pro => "Pro",
            Level::Enterprise => "Enterprise",
        }
    }

    pub fn parse(value: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|l| l.as_str() == value)
    }

    /// The specification's defaults: 5, 4 and 3 percent.
    pub fn default_rate_bp(self) -> i64 {
        match self {
            Level::Global => 500,
            Level::Pro => 400,
            Level::Enterprise => 300,
        }
    }
}

impl std::fmt::Display for Level {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Splits `amount_minor` into `(commission_minor, expert_amount_minor)`: the commission is
/// `amount × rate` rounded half-up to the cent (half away from zero for a negative amount),
/// the expert gets the rest. `rate_bp` is clamped to 0–100 %, the range storage allows, so
/// the commission never exceeds the amount.
pub fn split(amount_minor: i64, rate_bp: i64) -> (i64, i64) {
    let rate = i128::from(rate_bp.clamp(0, MAX_RATE_BP));
    let product = i128::from(amount_minor) * rate;
    let half = i128::from(MAX_RATE_BP / 2);
    let rounded = if product >= 0 {
        (product + half) / i128::from(MAX_RATE_BP)
    } else {
        (product - half) / i128::from(MAX_RATE_BP)
    };
    // |rounded| ≤ |amount_minor|, so it fits.
    let commission = i64::try_from(rounded).unwrap_or(amount_minor);
    (commission, amount_minor - commission)
}

/// Parses a rate given on the wire as a percent (a JSON number 0–100, at most 2 decimals)
/// into basis points: `4.5` → 450.
pub fn parse_rate(number: &serde_json::Number) -> Result<i64, &'static str> {
    // A percent with 2 decimals is, in hundredths, exactly the basis points: the money parser
    // does the decimal work.
    match parse_number(number) {
        Ok(bp) if bp <= MAX_RATE_BP => Ok(bp),
        Err(e @ "must have at most 2 decimals") => Err(e),
        _ => Err("must be a number between 0 and 100"),
    }
}

/// Basis points back to the percent sent on the wire (450 → 4.5).
pub fn rate_to_number(rate_bp: i64) -> f64 {
    minor_to_number(rate_bp)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn number(text: &str) -> serde_json::Number {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn levels_parse_exactly() {
        for level in Level::ALL {
            assert_eq!(Level::parse(level.as_str()), Some(level));
        }
        assert_eq!(Level::parse("global"), None);
        assert_eq!(Level::parse(""), None);
        assert_eq!(
            Level::ALL.map(Level::default_rate_bp),
            [500, 400, 300],
            "spec defaults 5/4/3 %"
        );
    }

    #[test]
    fn split_rounds_half_up_to_the_cent() {
        assert_eq!(split(10_000, 500), (500, 9_500));
        // 0.5 cent rounds up, 0.49 down.
        assert_eq!(split(10, 500), (1, 9)); // 0.5
        assert_eq!(split(9, 500), (0, 9)); // 0.45
        assert_eq!(split(333, 450), (15, 318)); // 14.985
        assert_eq!(split(12_345, 333), (411, 11_934)); // 411.0885
        assert_eq!(split(1, 5_000), (1, 0)); // 0.5
        assert_eq!(split(0, 500), (0, 0));
        assert_eq!(split(10_000, 0), (0, 10_000));
        assert_eq!(split(10_000, 10_000), (10_000, 0));
        assert_eq!(split(-10, 500), (-1, -9));
        assert_eq!(split(i64::MAX, 10_000), (i64::MAX, 0));
        // Out-of-range rates are clamped to 0–100 %.
        assert_eq!(split(100, 20_000), (100, 0));
        assert_eq!(split(100, -5), (0, 100));
    }

    #[test]
    fn split_always_adds_up_and_stays_within_the_amount() {
        // A deterministic sweep instead of a property test (no proptest dependency).
        let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..20_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let amount = (seed % 100_000_000) as i64;
            let rate = ((seed >> 32) % 10_001) as i64;
            let (commission, expert) = split(amount, rate);
            assert_eq!(commission + expert, amount);
            assert!((0..=amount).contains(&commission));
            // Half-up: commission·10000 − amount·rate lies in (−5000, 5000].
            let error = i128::from(commission) * 10_000 - i128::from(amount) * i128::from(rate);
            assert!(error > -5_000 && error <= 5_000, "{amount} {rate}");
        }
    }

    #[test]
    fn rates_are_percent_with_two_decimals() {
        assert_eq!(parse_rate(&number("5")), Ok(500));
        assert_eq!(parse_rate(&number("4.5")), Ok(450));
        assert_eq!(parse_rate(&number("0.01")), Ok(1));
        assert_eq!(parse_rate(&number("0")), Ok(0));
        assert_eq!(parse_rate(&number("100")), Ok(10_000));
        assert_eq!(parse_rate(&number("100.0")), Ok(10_000));
        assert!(parse_rate(&number("100.5")).is_err());
        assert!(parse_rate(&number("100.01")).is_err());
        assert!(parse_rate(&number("-1")).is_err());
        assert_eq!(
            parse_rate(&number("4.555")),
            Err("must have at most 2 decimals")
        );
        assert_eq!(rate_to_number(450), 4.5);
        assert_eq!(serde_json::to_string(&rate_to_number(500)).unwrap(), "5.0");
    }
}
