//! Escrow: releasing a held payment to the expert and refunding it to the company.
//!
//! Interface used by the delivery review (`workflows::deliveries`); the bodies are being
//! written in this module.

use crate::state::AppState;
use crate::store::payments::Payment;
use crate::workflows::error::{FlowError, FlowResult};

/// What approving a milestone produced.
#[derive(Debug, Clone)]
pub struct Release {
    /// The payment released (captured; transferred or deferred).
    pub payment: Payment,
    /// The next milestone's payment, `pending`, when a milestone is left.
    pub next_payment: Option<Payment>,
}

/// Who asked for the release.
#[derive(Debug, Clone, Copy)]
pub enum ReleaseTrigger {
    /// The company approved this delivery (`PUT /api/milestones/deliveries/{id}/review`).
    DeliveryApproved { delivery_id: i64 },
    /// The company approved the milestone directly (`POST /api/milestones/{id}/approve`).
    MilestoneApproved,
}

/// Approves the milestone and releases its held payment: capture, commission, transfer (or
/// deferral), the delivery and milestone `approved`, the next milestone's payment. The
/// caller must already run inside the project's actor.
pub async fn release_milestone(
    _state: &AppState,
    _actor_id: i64,
    _project_id: i64,
    _milestone_id: i64,
    _trigger: ReleaseTrigger,
) -> FlowResult<Release> {
    Err(FlowError::unavailable("Release is not available yet"))
}

/// Why a payment is refunded.
#[derive(Debug, Clone, Copy)]
pub enum RefundCause {
    /// The milestone was rejected for the third time and the project cancelled.
    MilestoneCancelled,
}

/// Gives the company its money back (reversing the transfer first when there was one; an
/// uncaptured authorisation is cancelled). Runs in the payment's actor.
pub async fn refund_payment(
    _state: &AppState,
    _payment_id: i64,
    _cause: RefundCause,
) -> FlowResult<Payment> {
    Err(FlowError::unavailable("Refunds are not available yet"))
}
