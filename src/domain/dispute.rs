//! A dispute's states (`disputes.status`) and the moves between them.

use super::state::{Lifecycle, state_enum, word_of};

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

/// The card issuer's side of a chargeback, read from the processor's word for it. The word
/// itself is kept as the processor wrote it (`disputes.processor_dispute_status`): its
/// vocabulary is the processor's to grow, and a word this service does not know reads as
/// [`ChargebackStatus::Other`], which moves nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChargebackStatus {
    /// An inquiry (before a chargeback) waiting for the merchant's response.
    WarningNeedsResponse,
    /// An inquiry under the issuer's review.
    WarningUnderReview,
    /// An inquiry closed without becoming a chargeback.
    WarningClosed,
    /// A chargeback waiting for the merchant's evidence.
    NeedsResponse,
    /// Evidence given; the issuer is deciding.
    UnderReview,
    /// Decided for the platform.
    Won,
    /// Decided for the card holder: the money goes back to them.
    Lost,
    /// A word this service does not know.
    Other,
}

impl ChargebackStatus {
    const WORDS: [(&'static str, ChargebackStatus); 7] = [
        ("warning_needs_response", Self::WarningNeedsResponse),
        ("warning_under_review", Self::WarningUnderReview),
        ("warning_closed", Self::WarningClosed),
        ("needs_response", Self::NeedsResponse),
        ("under_review", Self::UnderReview),
        ("won", Self::Won),
        ("lost", Self::Lost),
    ];

    /// The status the processor's word names.
    pub fn of(word: &str) -> Self {
        word_of(&Self::WORDS, word, Self::Other)
    }

    /// The issuer has decided: the processor will not change it again.
    pub fn is_decided(self) -> bool {
        matches!(self, Self::Won | Self::Lost)
    }

    /// Where the project's dispute follows an update, and the states it follows from: under
    /// review → `in_review` (from `open` or `in_review`); a response needed → `open` (from
    /// `open`); nothing for the others (a decision comes by its own notice). The states
    /// from are a pair, one named twice when it is alone (one statement shape for both).
    pub fn followed_by(self) -> Option<([DisputeStatus; 2], DisputeStatus)> {
        use DisputeStatus::*;
        match self {
            Self::UnderReview => Some(([Open, InReview], InReview)),
            Self::NeedsResponse | Self::WarningNeedsResponse => Some(([Open, Open], Open)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ChargebackStatus;
    use super::DisputeStatus::{self, *};
    use crate::domain::state::Lifecycle;
    use proptest::prelude::*;

    #[test]
    fn each_word_of_the_processor_reads_back_as_itself() {
        for (word, status) in ChargebackStatus::WORDS {
            assert_eq!(ChargebackStatus::of(word), status);
        }
        assert_eq!(ChargebackStatus::of("prevented"), ChargebackStatus::Other);
    }

    #[test]
    fn only_the_issuers_decisions_are_final_and_only_updates_move_a_dispute() {
        use ChargebackStatus as C;
        let decided: Vec<_> = ChargebackStatus::WORDS
            .iter()
            .filter(|(_, s)| s.is_decided())
            .map(|(w, _)| *w)
            .collect();
        assert_eq!(decided, ["won", "lost"]);
        assert_eq!(
            C::UnderReview.followed_by(),
            Some(([Open, InReview], InReview))
        );
        assert_eq!(C::NeedsResponse.followed_by(), Some(([Open, Open], Open)));
        assert_eq!(
            C::WarningNeedsResponse.followed_by(),
            Some(([Open, Open], Open))
        );
        for quiet in [
            C::WarningUnderReview,
            C::WarningClosed,
            C::Won,
            C::Lost,
            C::Other,
        ] {
            assert_eq!(quiet.followed_by(), None, "{quiet:?}");
        }
        // Every move it names is one a dispute may make.
        for (_, s) in ChargebackStatus::WORDS {
            if let Some((from, to)) = s.followed_by() {
                for f in from {
                    assert!(f == to || f.can_move_to(to), "{f:?} → {to:?}");
                }
            }
        }
    }

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
