//! The money audit's rules: a payment as recorded, held against the processor's own objects
//! (intent, charge, transfer). Each mismatch names the invariant it breaks. No I/O.

use serde::Serialize;

use super::payment::{PaymentStatus, PayoutStatus};

/// A payment as the service recorded it.
#[derive(Debug, Clone)]
pub struct Recorded<'a> {
    pub status: PaymentStatus,
    pub amount_minor: i64,
    pub commission_minor: Option<i64>,
    pub payout_status: PayoutStatus,
    pub intent_id: Option<&'a str>,
    pub transfer_id: Option<&'a str>,
}

#[derive(Debug, Clone, Copy)]
pub struct IntentFacts<'a> {
    pub status: &'a str,
    pub amount: i64,
    pub amount_received: i64,
}

#[derive(Debug, Clone, Copy)]
pub struct TransferFacts {
    pub amount: i64,
    pub amount_reversed: i64,
}

/// What the processor holds; `None` where it has no such object.
#[derive(Debug, Clone, Copy, Default)]
pub struct AtProcessor<'a> {
    pub intent: Option<IntentFacts<'a>>,
    /// Amount refunded on the intent's charge.
    pub charge_refunded: Option<i64>,
    pub transfer: Option<TransferFacts>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Mismatch {
    /// `missing_at_processor`, `missing_in_records`, `amount`, `status`.
    pub kind: &'static str,
    /// The invariant broken, in words.
    pub invariant: &'static str,
    pub detail: String,
}

fn mismatch(kind: &'static str, invariant: &'static str, detail: String) -> Mismatch {
    Mismatch {
        kind,
        invariant,
        detail,
    }
}

const SAME_AMOUNT: &str = "the intent's amount is the payment's amount";
const SAME_STATE: &str = "the payment's status follows the intent's";
const CAPTURED_SPLIT: &str = "captured = transferred + commission";
const REFUND_REVERSED: &str = "refunded money comes back from the expert: the transfer is reversed";
const TRANSFER_KEPT: &str = "a released payment's transfer is not reversed";
const EXISTS: &str = "every processor object the payment names exists";

/// Every mismatch between the record and the processor's objects.
pub fn check(rec: &Recorded<'_>, at: &AtProcessor<'_>) -> Vec<Mismatch> {
    let mut out = Vec::new();
    let intent = match (rec.intent_id, at.intent) {
        (None, _) => return out, // never sent to the processor: nothing to compare
        (Some(id), None) => {
            out.push(mismatch(
                "missing_at_processor",
                EXISTS,
                format!("payment intent {id} not found"),
            ));
            return out;
        }
        (Some(_), Some(intent)) => intent,
    };
    if intent.amount != rec.amount_minor {
        out.push(mismatch(
            "amount",
            SAME_AMOUNT,
            format!("recorded {}, intent {}", rec.amount_minor, intent.amount),
        ));
    }
    let refunded_fully = at.charge_refunded == Some(intent.amount);
    let consistent = match rec.status {
        PaymentStatus::Pending => matches!(
            intent.status,
            "requires_payment_method" | "requires_confirmation" | "requires_action" | "processing"
        ),
        PaymentStatus::Held => intent.status == "requires_capture",
        PaymentStatus::Released | PaymentStatus::Disputed => intent.status == "succeeded",
        PaymentStatus::Refunded => {
            intent.status == "canceled" || (intent.status == "succeeded" && refunded_fully)
        }
        PaymentStatus::Failed => matches!(intent.status, "canceled" | "requires_payment_method"),
    };
    if !consistent {
        out.push(mismatch(
            "status",
            SAME_STATE,
            format!("recorded {}, intent {}", rec.status, intent.status),
        ));
    }
    match (rec.transfer_id, at.transfer) {
        (Some(id), None) => out.push(mismatch(
            "missing_at_processor",
            EXISTS,
            format!("transfer {id} not found"),
        )),
        (None, _)
            if rec.status == PaymentStatus::Released
                && rec.payout_status == PayoutStatus::Transferred =>
        {
            out.push(mismatch(
                "missing_in_records",
                CAPTURED_SPLIT,
                "the payout is marked transferred but no transfer is recorded".into(),
            ))
        }
        (Some(_), Some(t)) => {
            if rec.status == PaymentStatus::Released {
                let commission = rec.commission_minor.unwrap_or(0);
                if t.amount + commission != intent.amount_received {
                    out.push(mismatch(
                        "amount",
                        CAPTURED_SPLIT,
                        format!(
                            "captured {} ≠ transferred {} + commission {commission}",
                            intent.amount_received, t.amount
                        ),
                    ));
                }
                if t.amount_reversed != 0 {
                    out.push(mismatch(
                        "status",
                        TRANSFER_KEPT,
                        format!("{} of the transfer reversed", t.amount_reversed),
                    ));
                }
            }
            if rec.status == PaymentStatus::Refunded && t.amount_reversed != t.amount {
                out.push(mismatch(
                    "amount",
                    REFUND_REVERSED,
                    format!("reversed {} of {}", t.amount_reversed, t.amount),
                ));
            }
        }
        _ => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn released<'a>() -> Recorded<'a> {
        Recorded {
            status: PaymentStatus::Released,
            amount_minor: 10_000,
            commission_minor: Some(500),
            payout_status: PayoutStatus::Transferred,
            intent_id: Some("pi_1"),
            transfer_id: Some("tr_1"),
        }
    }

    fn settled<'a>(transferred: i64, reversed: i64) -> AtProcessor<'a> {
        AtProcessor {
            intent: Some(IntentFacts {
                status: "succeeded",
                amount: 10_000,
                amount_received: 10_000,
            }),
            charge_refunded: Some(0),
            transfer: Some(TransferFacts {
                amount: transferred,
                amount_reversed: reversed,
            }),
        }
    }

    #[test]
    fn a_consistent_release_passes() {
        assert!(check(&released(), &settled(9_500, 0)).is_empty());
    }

    #[test]
    fn a_short_transfer_breaks_the_split() {
        let found = check(&released(), &settled(9_400, 0));
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].invariant, CAPTURED_SPLIT);
    }

    #[test]
    fn missing_objects_and_stale_states_are_named() {
        let found = check(&released(), &AtProcessor::default());
        assert_eq!(found[0].kind, "missing_at_processor");
        let held = Recorded {
            status: PaymentStatus::Held,
            transfer_id: None,
            payout_status: PayoutStatus::Pending,
            ..released()
        };
        let found = check(&held, &settled(9_500, 0));
        assert_eq!(found[0].kind, "status");
        let refunded = Recorded {
            status: PaymentStatus::Refunded,
            ..released()
        };
        let mut at = settled(9_500, 0);
        at.charge_refunded = Some(10_000);
        let found = check(&refunded, &at);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].invariant, REFUND_REVERSED);
    }
}
