//! Money on the wire and in storage: JSON numbers with at most 2 decimals outside, integer
//! minor units (cents) inside. Arithmetic is on integers or `Decimal`, never on floats.

use rust_decimal::Decimal;
use std::str::FromStr as _;

/// The largest amount the service takes: the payment processor's maximum charge. Every
/// amount in cents then stays below 2^53, so it goes out as a JSON number exactly.
pub const MAX_MINOR: i64 = 9_999_999_999;

/// Parses an amount given on the wire (the text of a JSON number) into minor units (cents):
/// at most 2 decimals, not negative, at most 99,999,999.99. The bound is checked before any
/// arithmetic, so no input can overflow.
pub fn parse_money(text: &str) -> Result<i64, &'static str> {
    let value = Decimal::from_str(text)
        .or_else(|_| Decimal::from_scientific(text))
        .map_err(|_| "must be a number")?;
    let value = value.normalize();
    if value.scale() > 2 {
        return Err("must have at most 2 decimals");
    }
    if value.is_sign_negative() && !value.is_zero() {
        return Err("must not be negative");
    }
    if value > Decimal::new(MAX_MINOR, 2) {
        return Err("must be at most 99999999.99");
    }
    let minor = value
        .checked_mul(Decimal::ONE_HUNDRED)
        .ok_or("is too large")?;
    i64::try_from(minor).map_err(|_| "is too large")
}

/// Parses a JSON number of the wire into minor units (see [`parse_money`]).
pub fn parse_number(number: &serde_json::Number) -> Result<i64, &'static str> {
    parse_money(&number.to_string())
}

/// Minor units back to the number sent on the wire (exact for every cent amount: the
/// shortest decimal that reads back as this double is the amount itself).
pub fn minor_to_number(minor: i64) -> f64 {
    minor as f64 / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn money_has_at_most_two_decimals() {
        assert_eq!(parse_money("50"), Ok(5000));
        assert_eq!(parse_money("50.5"), Ok(5050));
        assert_eq!(parse_money("50.55"), Ok(5055));
        assert_eq!(parse_money("50.50"), Ok(5050));
        assert_eq!(parse_money("1e2"), Ok(10000));
        assert_eq!(parse_money("0"), Ok(0));
        assert!(parse_money("50.555").is_err());
        assert!(parse_money("-1").is_err());
        assert!(parse_money("abc").is_err());
        assert_eq!(minor_to_number(5055), 50.55);
        assert_eq!(
            serde_json::to_string(&minor_to_number(1010)).unwrap(),
            "10.1"
        );
    }

    #[test]
    fn amounts_are_bounded_before_any_arithmetic() {
        assert_eq!(parse_money("99999999.99"), Ok(MAX_MINOR));
        for huge in [
            "100000000",
            "1e15",
            "8e26",
            "1e27",
            "7.9e28",
            "1e400",
            "9007199254740993",
        ] {
            assert!(parse_money(huge).is_err(), "{huge}");
        }
        // Every accepted amount goes out exactly.
        assert_eq!(
            serde_json::to_string(&minor_to_number(MAX_MINOR)).unwrap(),
            "99999999.99"
        );
    }

    #[test]
    fn json_numbers_keep_their_decimal_text() {
        let n: serde_json::Number = serde_json::from_str("0.1").unwrap();
        assert_eq!(parse_number(&n), Ok(10));
        let n: serde_json::Number = serde_json::from_str("0.2").unwrap();
        assert_eq!(parse_number(&n), Ok(20));
        let n: serde_json::Number = serde_json::from_str("0.30000000000000004").unwrap();
        assert!(parse_number(&n).is_err());
    }
}
