//! Refunds to the company (the transfer reversed first) and cancelled intents.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::*;
use crate::domain::payment::{IntentStatus, PaymentStatus, PayoutStatus};
use crate::domain::text::RefundReason;
use crate::integrations::mail::Template;
use crate::integrations::processor::{
    CreateRefund, CreateTransferReversal, ProcessorError, RefundTarget,
};
use crate::state::AppState;
use crate::store::payments::{self, Payment};
use crate::store::{LockScope, Tx};
use crate::workflows::emails::email;
use crate::workflows::error::{FlowError, FlowResult};
use crate::workflows::notify::for_user;

/// Gives the company its money back (reversing the transfer first when there was one; an
/// uncaptured authorisation is cancelled). Runs in the payment's actor. A failed reversal
/// refunds nothing.
pub async fn refund_payment(
    state: &AppState,
    payment_id: i64,
    cause: RefundCause,
) -> FlowResult<Payment> {
    refund_with_reason(state, payment_id, cause, None).await
}

/// [`refund_payment`] with the administrator's words for it.
pub async fn refund_with_reason(
    state: &AppState,
    payment_id: i64,
    cause: RefundCause,
    reason: Option<RefundReason>,
) -> FlowResult<Payment> {
    in_payment_actor(state, payment_id, move |st| async move {
        refund_in_actor(&st, payment_id, cause, reason.as_deref()).await
    })
    .await
}

pub(crate) async fn refund_in_actor(
    state: &AppState,
    payment_id: i64,
    cause: RefundCause,
    reason: Option<&str>,
) -> FlowResult<Payment> {
    let y = load(state, payment_id).await?;
    if !y.status.may_be_refunded() {
        return Err(FlowError::conflict(
            "PAYMENT_NOT_REFUNDABLE",
            format!("The payment is {}; there is no money to refund", y.status),
        ));
    }
    // A transfer attempt whose outcome is unknown (the service died after the processor made
    // it, before recording it) is finished first, under its own key, so the reversal below
    // takes it back instead of leaving it with the expert.
    let y = match y.transfer_attempt_at {
        Some(at)
            if y.status == PaymentStatus::Released
                && y.payout_status == PayoutStatus::Pending
                && y.payment_metadata.0["transfer_failed_attempt"]
                    != json!(at.timestamp_millis()) =>
        {
            transfer(state, y).await?
        }
        _ => y,
    };
    let client = &state.processor.client;
    let mut metadata = y.payment_metadata.0.clone();
    // The expert's money first: a refund must never leave the platform paying twice.
    if y.payout_status == PayoutStatus::Transferred
        && let Some(transfer_id) = y.processor_transfer_id.as_deref()
        && metadata.get("reversal_id").is_none()
    {
        let reversal = client
            .create_transfer_reversal(
                transfer_id,
                &CreateTransferReversal {
                    amount: None,
                    metadata: BTreeMap::from([("payment_id".to_owned(), y.id.to_string())]),
                },
                &format!("payment_{}_reversal", y.id),
            )
            .await
            .map_err(|error| {
                tracing::warn!(payment_id = y.id, %error, "transfer reversal failed; no refund");
                FlowError::conflict(
                    "REVERSAL_FAILED",
                    "The transfer to the expert could not be reversed; nothing was refunded",
                )
            })?;
        metadata["reversal_id"] = json!(reversal.id);
        metadata["reversal_amount"] = json!(reversal.amount);
        let mut conn = state.db.conn().await?;
        payments::set_metadata(conn.exec(), y.id, &metadata, state.clock.now()).await?;
    }
    let unfunded = y.status == PaymentStatus::Disputed && y.held_at.is_none();
    let Some(intent_id) = y.processor_payment_intent_id.as_deref() else {
        // A disputed payment whose intent was never made: nothing was taken.
        return if unfunded {
            record_refund(state, &y, cause, reason, None, &metadata).await
        } else {
            Err(FlowError::conflict(
                "PAYMENT_NOT_REFUNDABLE",
                "The payment has no payment intent",
            ))
        };
    };
    let intent = client
        .retrieve_payment_intent(intent_id)
        .await
        .map_err(|e| processor_failure("report the payment", &e))?;
    let refund_id = match intent.state() {
        // Never captured: cancelling gives everything back (an authorisation is let go; a
        // disputed payment the company never paid can no longer be paid).
        status
            if status == IntentStatus::RequiresCapture
                || (unfunded && status.awaits_the_card()) =>
        {
            client
                .cancel_payment_intent(intent_id, &format!("payment_{}_cancel", y.id))
                .await
                .map_err(|e| processor_failure("cancel the payment", &e))?;
            None
        }
        IntentStatus::Canceled => None,
        IntentStatus::Succeeded => {
            let refund = client
                .create_refund(
                    &CreateRefund {
                        target: RefundTarget::PaymentIntent(intent_id.to_owned()),
                        amount: None,
                        reason: Some("requested_by_customer".to_owned()),
                        metadata: BTreeMap::from([("payment_id".to_owned(), y.id.to_string())]),
                    },
                    &format!("payment_{}_refund", y.id),
                )
                .await
                .map_err(|e| processor_failure("refund the payment", &e))?;
            Some(refund.id)
        }
        _ => {
            return Err(FlowError::conflict(
                "PAYMENT_NOT_REFUNDABLE",
                format!(
                    "The processor reports the payment as {}; it cannot be refunded",
                    intent.status
                ),
            ));
        }
    };
    record_refund(state, &y, cause, reason, refund_id.as_deref(), &metadata).await
}

/// Records a refund made (or nothing to give back): `refunded`, both parties told.
async fn record_refund(
    state: &AppState,
    y: &Payment,
    cause: RefundCause,
    reason: Option<&str>,
    refund_id: Option<&str>,
    metadata: &Value,
) -> FlowResult<Payment> {
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    tx.lock(LockScope::Project, y.project_id).await?;
    let reason = reason.unwrap_or(cause.reason());
    if !payments::mark_refunded(tx.exec(), y.id, refund_id, Some(reason), metadata, now).await? {
        return Err(FlowError::conflict(
            "INVALID_STATE",
            "The payment changed; try again",
        ));
    }
    announce_refund(&mut tx, y, now).await?;
    state.commit(tx).await?;
    load(state, y.id).await
}

/// Cancels at the processor the intents of the project's payments failed for `reason` (their
/// milestone or project is gone): whatever state they reached, nothing was captured, and the
/// company's card can no longer be charged for them. Best effort, logged: an intent left
/// behind lapses on its own.
pub async fn cancel_abandoned_intents(state: &AppState, project_id: i64, reason: &str) {
    let listed = async {
        let mut conn = state.db.conn().await?;
        payments::list_for_project(conn.exec(), project_id).await
    };
    let abandoned = match listed.await {
        Ok(all) => all.into_iter().filter(|y| {
            y.status == PaymentStatus::Failed && y.failure_reason.as_deref() == Some(reason)
        }),
        Err(error) => {
            tracing::warn!(project_id, %error, "abandoned intents not listed");
            return;
        }
    };
    for y in abandoned {
        if let Err(error) = cancel_uncaptured(state, &y).await {
            tracing::warn!(payment_id = y.id, %error, "abandoned intent not cancelled; it lapses on its own");
        }
    }
}

/// Cancels the payment's intent unless it is final (captured or cancelled already), which
/// lets an authorisation go. Its key makes a repeat harmless.
pub(crate) async fn cancel_uncaptured(state: &AppState, y: &Payment) -> Result<(), ProcessorError> {
    let Some(intent_id) = y.processor_payment_intent_id.as_deref() else {
        return Ok(());
    };
    let client = &state.processor.client;
    let intent = client.retrieve_payment_intent(intent_id).await?;
    if intent.state().is_final() {
        return Ok(());
    }
    client
        .cancel_payment_intent(intent_id, &format!("payment_{}_cancel", y.id))
        .await
        .map(drop)
}

/// Tells the company and the expert, each in their own words, that a payment was refunded,
/// and credits the invoices a release issued for it.
pub(crate) async fn announce_refund(
    tx: &mut Tx,
    y: &Payment,
    now: DateTime<Utc>,
) -> FlowResult<()> {
    crate::workflows::invoices::on_refund(tx, y, now).await?;
    let parties = Parties::load(tx, y).await?;
    let amount = money_text(y.amount_minor, &y.currency);
    let mut notify = Vec::new();
    let mut mails = Vec::new();
    if let Some(company) = &parties.company {
        notify.push(for_user(
            company.id,
            "payment_refunded",
            "Payment refunded",
            &format!(
                "{amount} for \"{}\" was refunded to you.",
                parties.milestone_title
            ),
            parties.data(y),
        ));
        mails.push(email(
            &company.email,
            Template::PaymentRefundedCompany,
            parties.mail(company, y, y.amount_minor),
        ));
    }
    if let Some(expert) = &parties.expert {
        notify.push(for_user(
            expert.id,
            "payment_refunded",
            "Payment refunded to the company",
            &format!(
                "The payment of {amount} for \"{}\" went back to the company.",
                parties.milestone_title
            ),
            parties.data(y),
        ));
        mails.push(email(
            &expert.email,
            Template::PaymentRefundedExpert,
            parties.mail(expert, y, y.amount_minor),
        ));
    }
    let payload = json!({"payment_id": y.id, "project_id": y.project_id,
                         "notify": notify, "email": mails});
    record(tx, "payment.refunded", y.id, payload, now).await?;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Initiate.
// ---------------------------------------------------------------------------------------
