//! A payment's states (`payments.status`) and its payout's (`payments.payout_status`), with
//! the moves between them and the rules workflows decide from a state.

use super::state::{Lifecycle, state_enum, word_of};

state_enum! {
    /// Where a milestone's money is: authorised and waiting (`pending`), in escrow (`held`),
    /// with the expert (`released`), back with the company (`refunded`), lost before it was
    /// captured (`failed`), or frozen by a dispute (`disputed`).
    pub enum PaymentStatus {
        Pending = "pending",
        Held = "held",
        Released = "released",
        Refunded = "refunded",
        Failed = "failed",
        Disputed = "disputed",
    }
}

impl Lifecycle for PaymentStatus {
    /// The moves the store's conditional updates make.
    fn can_move_to(self, next: Self) -> bool {
        use PaymentStatus::*;
        matches!(
            (self, next),
            (Pending, Held | Failed | Disputed)
                | (Held, Released | Refunded | Disputed | Failed)
                // A failed transfer puts the money back in escrow.
                | (Released, Held | Refunded)
                // Decided for the expert: released, or back to `pending` when never funded.
                | (Disputed, Released | Refunded | Pending)
        )
    }
}

impl PaymentStatus {
    /// The money may be refunded to the company: in escrow, with the expert, or disputed.
    pub fn may_be_refunded(self) -> bool {
        self.can_move_to(Self::Refunded)
    }

    /// A dispute freezes it: not yet settled (`pending` or `held`).
    pub fn may_be_disputed(self) -> bool {
        self.can_move_to(Self::Disputed)
    }

    /// Authorised money may sit at the processor (`held`, or `disputed` once funded): what
    /// capture deadlines and administrators' moves watch.
    pub fn may_hold_money(self) -> bool {
        matches!(self, Self::Held | Self::Disputed)
    }

    /// No money ever moved (`pending` or `failed`): undoing a selection leaves nothing behind.
    pub fn moved_no_money(self) -> bool {
        matches!(self, Self::Pending | Self::Failed)
    }
}

state_enum! {
    /// Whether a released payment reached the expert's account.
    pub enum PayoutStatus {
        Pending = "pending",
        Transferred = "transferred",
        Failed = "failed",
    }
}

impl Lifecycle for PayoutStatus {
    /// The moves the store's conditional updates make: a transfer succeeds or fails, a
    /// failed one is tried again on the next release, and a refund takes back a transfer.
    fn can_move_to(self, next: Self) -> bool {
        use PayoutStatus::*;
        matches!(
            (self, next),
            (Pending, Transferred | Failed) | (Failed, Pending) | (Transferred, Pending)
        )
    }
}

/// Where the processor's payment intent stands, read from its word (`PaymentIntent.status`).
/// A word this service does not know reads as [`IntentStatus::Other`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntentStatus {
    RequiresPaymentMethod,
    RequiresConfirmation,
    RequiresAction,
    Processing,
    /// Authorised: the money is held until captured or let go.
    RequiresCapture,
    /// Captured.
    Succeeded,
    Canceled,
    Other,
}

impl IntentStatus {
    const WORDS: [(&'static str, IntentStatus); 7] = [
        ("requires_payment_method", Self::RequiresPaymentMethod),
        ("requires_confirmation", Self::RequiresConfirmation),
        ("requires_action", Self::RequiresAction),
        ("processing", Self::Processing),
        ("requires_capture", Self::RequiresCapture),
        ("succeeded", Self::Succeeded),
        ("canceled", Self::Canceled),
    ];

    /// The status the processor's word names.
    pub fn of(word: &str) -> Self {
        word_of(&Self::WORDS, word, Self::Other)
    }

    /// The money is authorised or taken.
    pub fn is_authorised(self) -> bool {
        matches!(self, Self::RequiresCapture | Self::Succeeded)
    }

    /// Nothing more can happen to it: captured or cancelled.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Succeeded | Self::Canceled)
    }

    /// Still waiting for the company's card: nothing authorised yet.
    pub fn awaits_the_card(self) -> bool {
        matches!(
            self,
            Self::RequiresPaymentMethod | Self::RequiresConfirmation | Self::RequiresAction
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn each_intent_word_names_one_status_and_an_unknown_one_none() {
        use IntentStatus::*;
        for (word, status) in IntentStatus::WORDS {
            assert_eq!(IntentStatus::of(word), status);
        }
        assert_eq!(IntentStatus::of("requires_reauthorization"), Other);
        let authorised: Vec<_> = IntentStatus::WORDS
            .iter()
            .filter(|(_, s)| s.is_authorised())
            .map(|(w, _)| *w)
            .collect();
        assert_eq!(authorised, ["requires_capture", "succeeded"]);
        let waiting = IntentStatus::WORDS
            .iter()
            .filter(|(_, s)| s.awaits_the_card())
            .count();
        assert_eq!(waiting, 3);
        assert!(Canceled.is_final() && Succeeded.is_final() && !RequiresCapture.is_final());
        assert!(!Other.is_authorised() && !Other.is_final() && !Other.awaits_the_card());
    }

    #[test]
    fn payment_moves() {
        use PaymentStatus::*;
        assert!(Pending.can_move_to(Held));
        assert!(Held.can_move_to(Released));
        assert!(Released.can_move_to(Held));
        assert!(Disputed.can_move_to(Pending));
        assert!(!Pending.can_move_to(Released));
        assert!(!Released.can_move_to(Disputed));
        let refundable: Vec<_> = PaymentStatus::ALL
            .into_iter()
            .filter(|s| s.may_be_refunded())
            .collect();
        assert_eq!(refundable, [Held, Released, Disputed]);
        let disputable: Vec<_> = PaymentStatus::ALL
            .into_iter()
            .filter(|s| s.may_be_disputed())
            .collect();
        assert_eq!(disputable, [Pending, Held]);
    }

    #[test]
    fn payout_moves() {
        use PayoutStatus::*;
        assert!(Pending.can_move_to(Transferred));
        assert!(Pending.can_move_to(Failed));
        assert!(!Failed.can_move_to(Transferred));
    }

    fn payment_status() -> impl Strategy<Value = PaymentStatus> {
        prop::sample::select(PaymentStatus::ALL.to_vec())
    }

    proptest! {
        /// No state moves to itself, and the ends (`refunded`, `failed`) move nowhere.
        #[test]
        fn ends_are_final(from in payment_status(), to in payment_status()) {
            prop_assert!(!(from == to && from.can_move_to(to)));
            if matches!(from, PaymentStatus::Refunded | PaymentStatus::Failed) {
                prop_assert!(!from.can_move_to(to));
            }
        }

        /// The stored text reads back as the same state.
        #[test]
        fn text_round_trips(s in payment_status()) {
            prop_assert_eq!(s.as_str().parse::<PaymentStatus>(), Ok(s));
        }
    }
}
