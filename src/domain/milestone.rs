//! A milestone's states (`milestones.status`) and the moves between them.

use super::state::{Lifecycle, state_enum};

state_enum! {
    /// A milestone waits for its money (`awaiting_payment`), is funded and ready (`pending`),
    /// worked on (`in_progress`), handed in (`completed`), accepted (`approved`) or ended
    /// (`cancelled`). `rejected` is a legacy state the schema still allows.
    pub enum MilestoneStatus {
        AwaitingPayment = "awaiting_payment",
        Pending = "pending",
        InProgress = "in_progress",
        Completed = "completed",
        Approved = "approved",
        Rejected = "rejected",
        Cancelled = "cancelled",
    }
}

impl Lifecycle for MilestoneStatus {
    /// The moves the workflows make (each guarded in SQL by the state it starts from).
    fn can_move_to(self, next: Self) -> bool {
        use MilestoneStatus::*;
        match next {
            // Funded, or its funding cancelled again (a released dispute, an undone hold).
            Pending => self == AwaitingPayment,
            // The next milestone to fund, once the one before it is released.
            AwaitingPayment => self == Pending,
            // Work starts with a delivery, or goes on after a rejection or a failed transfer.
            InProgress => matches!(self, Pending | Completed | Approved),
            Completed => self.may_be_completed(),
            Approved => self.may_be_approved(),
            Cancelled => self.is_unfinished() && self != Cancelled,
            Rejected => false,
        }
    }
}

impl MilestoneStatus {
    /// The expert may mark the work done.
    pub fn may_be_completed(self) -> bool {
        matches!(self, Self::Pending | Self::InProgress)
    }

    /// The company may approve it (work in progress with a delivery, or handed in).
    pub fn may_be_approved(self) -> bool {
        matches!(self, Self::Pending | Self::InProgress | Self::Completed)
    }

    /// Neither approved nor cancelled: the project still has work on it.
    pub fn is_unfinished(self) -> bool {
        !matches!(self, Self::Approved | Self::Cancelled)
    }
}

#[cfg(test)]
mod tests {
    use super::MilestoneStatus::{self, *};
    use crate::domain::state::Lifecycle;
    use proptest::prelude::*;

    #[test]
    fn milestone_moves() {
        assert!(AwaitingPayment.can_move_to(Pending));
        assert!(Pending.can_move_to(InProgress));
        assert!(InProgress.can_move_to(Completed));
        assert!(Completed.can_move_to(InProgress));
        assert!(Completed.can_move_to(Approved));
        assert!(Approved.can_move_to(InProgress));
        assert!(!Approved.can_move_to(Cancelled));
        assert!(!Cancelled.can_move_to(Pending));
        assert!(!AwaitingPayment.can_move_to(InProgress));
    }

    fn status() -> impl Strategy<Value = MilestoneStatus> {
        prop::sample::select(MilestoneStatus::ALL.to_vec())
    }

    proptest! {
        /// `cancelled` is final and nothing moves to itself.
        #[test]
        fn cancelled_is_final(from in status(), to in status()) {
            prop_assert!(!(from == to && from.can_move_to(to)));
            prop_assert!(!Cancelled.can_move_to(to));
        }
    }
}
