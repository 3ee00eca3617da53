//! A payment's states (`payments.status`) and its payout's (`payments.payout_status`), with
//! the moves between them and the rules workflows decide from a state.

use super::state::{Lifecycle, state_enum};

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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
