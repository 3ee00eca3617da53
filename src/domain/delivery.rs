//! A delivery's states (`deliveries.status`) and the moves between them.

use super::state::{Lifecycle, state_enum};

state_enum! {
    /// Work handed in for a milestone, waiting for review (`submitted`), accepted
    /// (`approved`), refused (`rejected`) or sent back for changes (`needs_revision`).
    pub enum DeliveryStatus {
        Submitted = "submitted",
        Approved = "approved",
        Rejected = "rejected",
        NeedsRevision = "needs_revision",
    }
}

impl Lifecycle for DeliveryStatus {
    /// The moves the workflows make: a review decides a submitted delivery, a revision is
    /// handed in again, and a failed transfer puts an approval back under review.
    fn can_move_to(self, next: Self) -> bool {
        use DeliveryStatus::*;
        matches!(
            (self, next),
            (Submitted, Approved | Rejected | NeedsRevision)
                | (NeedsRevision, Submitted)
                | (Approved, Submitted)
        )
    }
}

impl DeliveryStatus {
    /// Waiting for the company's review (the only state a review decides).
    pub fn is_under_review(self) -> bool {
        self == Self::Submitted
    }
}

#[cfg(test)]
mod tests {
    use super::DeliveryStatus::{self, *};
    use crate::domain::state::Lifecycle;
    use proptest::prelude::*;

    #[test]
    fn delivery_moves() {
        assert!(Submitted.can_move_to(NeedsRevision));
        assert!(NeedsRevision.can_move_to(Submitted));
        assert!(!NeedsRevision.can_move_to(Approved));
        assert!(!Rejected.can_move_to(Submitted));
    }

    proptest! {
        /// Every review decision starts from a delivery under review.
        #[test]
        fn reviews_start_under_review(
            from in prop::sample::select(DeliveryStatus::ALL.to_vec()),
            to in prop::sample::select(vec![Approved, Rejected, NeedsRevision]),
        ) {
            prop_assert_eq!(from.can_move_to(to), from.is_under_review());
        }
    }
}
