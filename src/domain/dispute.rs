//! A dispute's states (`disputes.status`) and the moves between them.

use super::state::{Lifecycle, state_enum};

state_enum! {
    /// Raised (`open`), taken up by an administrator or the card issuer (`in_review`),
    /// decided (`resolved`) or closed without a decision (`closed`).
    pub enum DisputeStatus {
        Open = "open",
        InReview = "in_review",
        Resolved = "resolved",
        Closed = "closed",
    }
}

impl Lifecycle for DisputeStatus {
    /// The moves the workflows and the processor's notices make: mediation takes an open
    /// dispute up, a chargeback waiting for a response reopens it, and a decision ends it.
    fn can_move_to(self, next: Self) -> bool {
        use DisputeStatus::*;
        match next {
            InReview => self.is_active(),
            Open => self == InReview,
            Resolved | Closed => self.is_active(),
        }
    }
}

impl DisputeStatus {
    /// Not yet decided: the project stays frozen.
    pub fn is_active(self) -> bool {
        matches!(self, Self::Open | Self::InReview)
    }
}

/// The card issuer's side of a chargeback as the processor words it
/// (`disputes.processor_dispute_status`). Kept as the processor's text, not an enum: its
/// vocabulary is the processor's to grow.
pub mod chargeback {
    /// Decided for the platform.
    pub const WON: &str = "won";
    /// Decided for the cardholder: the money goes back to them.
    pub const LOST: &str = "lost";
    /// An inquiry closed without becoming a chargeback.
    pub const WARNING_CLOSED: &str = "warning_closed";

    /// The issuer has decided: the processor will not change it again.
    pub fn is_decided(status: &str) -> bool {
        matches!(status, WON | LOST)
    }
}

#[cfg(test)]
mod tests {
    use super::DisputeStatus::{self, *};
    use crate::domain::state::Lifecycle;
    use proptest::prelude::*;

    #[test]
    fn dispute_moves() {
        assert!(Open.can_move_to(InReview));
        assert!(InReview.can_move_to(Resolved));
        assert!(!Resolved.can_move_to(Open));
        assert!(!Closed.can_move_to(InReview));
    }

    proptest! {
        /// A decided dispute never moves again.
        #[test]
        fn decisions_are_final(
            from in prop::sample::select(vec![Resolved, Closed]),
            to in prop::sample::select(DisputeStatus::ALL.to_vec()),
        ) {
            prop_assert!(!from.can_move_to(to));
        }
    }
}
