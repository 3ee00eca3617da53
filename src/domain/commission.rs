//! Placeholder until the commission module lands (replaced on merge).

/// (commission, expert amount) of `amount_minor` at `rate_bp` basis points, half-up.
pub fn split(amount_minor: i64, rate_bp: i64) -> (i64, i64) {
    let commission = (amount_minor * rate_bp + 5_000) / 10_000;
    (commission, amount_minor - commission)
}
