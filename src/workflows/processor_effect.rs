//! What the effects of the processor's events share, whichever workflow they change
//! (`escrow::processor_effects`, `chargebacks`, `connect::account_events`, all applied by
//! `processor_events`): a module of its own below them all, so none imports another for it.

use crate::workflows::error::FlowError;

/// The note an effect leaves on its event (stored with it), `None` when there is none.
pub(super) type Note = Option<&'static str>;

/// An event object that does not read as its type: an internal error, nothing applied.
pub(super) fn bad_object(e: serde_json::Error) -> FlowError {
    FlowError::Internal(anyhow::anyhow!("event object unreadable: {e}"))
}
