//! Payments at the processor: every payment row gets its payment intent (manual capture, so
//! the money is held in escrow until release). The row is written first, in the transition
//! that causes it; the intent is created after commit with an idempotency key derived from
//! the payment id, so a retry after a crash creates nothing twice.

use std::collections::BTreeMap;

use crate::integrations::processor::CreatePaymentIntent;
use crate::state::AppState;
use crate::store::payments::{self, Payment};
use crate::workflows::error::{FlowError, FlowResult};

/// The idempotency key of a payment's intent.
pub fn intent_key(payment_id: i64) -> String {
    format!("payment_{payment_id}_intent")
}

/// Creates the payment's intent at the processor when it has none, and records it. Returns
/// the payment as stored afterwards.
pub async fn ensure_intent(state: &AppState, payment: Payment) -> FlowResult<Payment> {
    if payment.processor_payment_intent_id.is_some() {
        return Ok(payment);
    }
    let mut metadata = BTreeMap::new();
    metadata.insert("payment_id".to_owned(), payment.id.to_string());
    metadata.insert("project_id".to_owned(), payment.project_id.to_string());
    if let Some(milestone) = payment.milestone_id {
        metadata.insert("milestone_id".to_owned(), milestone.to_string());
    }
    let intent = state
        .processor
        .client
        .create_payment_intent(
            &CreatePaymentIntent {
                amount: payment.amount_minor,
                currency: payment.currency.clone(),
                customer: None,
                payment_method: None,
                metadata,
                transfer_group: Some(format!("project_{}", payment.project_id)),
                description: None,
            },
            &intent_key(payment.id),
        )
        .await
        .map_err(|error| {
            tracing::warn!(payment_id = payment.id, %error, "the processor did not create the intent");
            FlowError::unavailable("The payment processor is unavailable; try again")
        })?;
    let mut conn = state.db.conn().await?;
    payments::set_intent(conn.exec(), payment.id, &intent.id, state.clock.now()).await?;
    Ok(payments::find(conn.exec(), payment.id)
        .await?
        .unwrap_or(payment))
}
