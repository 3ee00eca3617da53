//! The effects of the processor's payment-intent, charge and transfer events on a payment,
//! run by `processor_events` in the payment's actor and its group's transaction (a hold
//! itself is [`hold_all_locked_in_tx`]'s).

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::*;
use crate::domain::milestone::MilestoneStatus;
use crate::domain::payment::{PaymentStatus, PayoutStatus};
use crate::integrations::mail::Template;
use crate::integrations::processor::{Event, PaymentIntent};
use crate::store::payments::{self, Payment};
use crate::store::{Tx, milestones};
use crate::workflows::emails::email;
use crate::workflows::error::FlowResult;
use crate::workflows::notify::{for_admins, for_user};
use crate::workflows::processor_effect::{Note, bad_object};

/// What the processor says of an authorisation, read before the transaction opens.
pub(crate) struct Authorised {
    pub(crate) intent: PaymentIntent,
    pub(crate) capture_before: Option<DateTime<Utc>>,
    pub(crate) receipt_url: Option<String>,
}

/// `payment_intent.succeeded` / `amount_capturable_updated` that holds nothing: the payment
/// is past `pending` (`held` from `pending`, whichever comes first, is the applier's
/// `hold_waiting`'s, DESIGN §5) or the intent not authorised, so only the capturable amount
/// is noted.
pub(crate) async fn on_authorised(
    tx: &mut Tx,
    event: &Event,
    y: &Payment,
    authorisation: Option<&Authorised>,
    now: DateTime<Utc>,
) -> FlowResult<Note> {
    if event.kind == "payment_intent.amount_capturable_updated" {
        let capturable = match authorisation {
            Some(a) => a.intent.amount_capturable,
            None => {
                event
                    .payment_intent()
                    .map_err(bad_object)?
                    .amount_capturable
            }
        };
        let mut metadata = y.payment_metadata.0.clone();
        metadata["amount_capturable"] = json!(capturable);
        payments::set_metadata(tx.exec(), y.id, &metadata, now).await?;
    }
    Ok(Some("payment already past pending"))
}

/// `payment_intent.payment_failed` / `canceled`: `failed` from `pending`, the milestone stays
/// `awaiting_payment`. A declined card is told to the company. An authorisation cancelled
/// while we hold the payment means escrow is gone: administrators are alerted.
pub(crate) async fn on_intent_failed(
    tx: &mut Tx,
    event: &Event,
    y: &Payment,
    now: DateTime<Utc>,
) -> FlowResult<Note> {
    let intent = event.payment_intent().map_err(bad_object)?;
    let failed = event.kind == "payment_intent.payment_failed";
    let reason = if failed {
        intent
            .last_payment_error
            .as_ref()
            .and_then(|e| e.code.clone().or(e.message.clone()))
            .unwrap_or_else(|| "payment_failed".to_owned())
    } else {
        format!(
            "canceled: {}",
            intent.cancellation_reason.as_deref().unwrap_or("unknown")
        )
    };
    let in_escrow = y.status == PaymentStatus::Held
        || (y.status == PaymentStatus::Disputed && y.held_at.is_some());
    if in_escrow && !failed {
        let alert = for_admins(
            "payment_authorisation_lost",
            "Held payment's authorisation cancelled",
            &format!(
                "The authorisation of held payment {} was cancelled at the processor; escrow no longer holds it.",
                y.id
            ),
            json!({"payment_id": y.id, "project_id": y.project_id}),
        );
        record(
            tx,
            "payment.authorisation_lost",
            y.id,
            json!({"notify": [alert]}),
            now,
        )
        .await?;
        return Ok(Some(
            "held payment's authorisation cancelled; admins alerted",
        ));
    }
    if !payments::fail_pending(tx.exec(), y.id, &reason, now).await? {
        return Ok(Some("payment no longer pending"));
    }
    let parties = Parties::load(tx, y).await?;
    let mut notify = Vec::new();
    let mut mails = Vec::new();
    if failed && let Some(company) = &parties.company {
        notify.push(for_user(
            company.id,
            "payment_failed",
            "Payment failed",
            &format!(
                "The payment of {} for \"{}\" failed: {reason}.",
                money_text(y.amount_minor, &y.currency),
                parties.milestone_title
            ),
            parties.data(y),
        ));
        mails.push(email(
            &company.email,
            Template::PaymentFailed,
            parties.mail(company, y, y.amount_minor),
        ));
    }
    let payload = json!({"payment_id": y.id, "reason": reason, "notify": notify, "email": mails});
    record(tx, "payment.failed", y.id, payload, now).await?;
    Ok(None)
}

/// `charge.refunded`: `refunded` from a state with money (never from `pending`, `failed` or
/// `refunded`), both parties told. Money refunded after a transfer the service did not reverse
/// is for administrators to recover.
pub(crate) async fn on_charge_refunded(
    tx: &mut Tx,
    y: &Payment,
    now: DateTime<Utc>,
) -> FlowResult<Note> {
    let metadata = y.payment_metadata.0.clone();
    if !payments::mark_refunded(
        tx.exec(),
        y.id,
        None,
        Some("charge_refunded"),
        &metadata,
        now,
    )
    .await?
    {
        return Ok(Some("payment not in a refundable state"));
    }
    announce_refund(tx, y, now).await?;
    if y.payout_status == PayoutStatus::Transferred && metadata.get("reversal_id").is_none() {
        alert_admins(
            tx,
            y,
            "payment_refunded_after_transfer",
            "Refund after transfer",
            &format!(
                "Payment {} was refunded at the processor after its transfer to the expert; the transfer was not reversed.",
                y.id
            ),
            now,
        )
        .await?;
    }
    Ok(None)
}

/// `transfer.created`: payout `transferred` on a `released` payment, unless that transfer
/// already failed (a late, out-of-order event).
pub(crate) async fn on_transfer_created(
    tx: &mut Tx,
    event: &Event,
    y: &Payment,
    now: DateTime<Utc>,
) -> FlowResult<Note> {
    let transfer = event.transfer().map_err(bad_object)?;
    if failed_transfers(y).contains(&transfer.id) {
        return Ok(Some("transfer already failed"));
    }
    Ok(
        if payments::mark_transferred(tx.exec(), y.id, &transfer.id, now).await? {
            None
        } else {
            Some("payout already recorded")
        },
    )
}

/// `transfer.failed`: payout `failed`, the money back in escrow (`held`), the transfer id
/// cleared, the expert amount recomputed, the milestone and its delivery back for review,
/// administrators alerted — naming the next milestone when it was already prepared.
pub(crate) async fn on_transfer_failed(
    tx: &mut Tx,
    event: &Event,
    y: &Payment,
    now: DateTime<Utc>,
) -> FlowResult<Note> {
    let transfer = event.transfer().map_err(bad_object)?;
    let mut metadata = y.payment_metadata.0.clone();
    let mut failed = failed_transfers(y);
    if failed.contains(&transfer.id) {
        return Ok(Some("transfer failure already applied"));
    }
    failed.push(transfer.id.clone());
    metadata["failed_transfers"] = json!(failed);
    let expert_amount = y.amount_minor - y.commission_minor.unwrap_or(0);
    if !payments::mark_transfer_failed(tx.exec(), y.id, &transfer.id, expert_amount, &metadata, now)
        .await?
    {
        return Ok(Some("payment not released with this transfer"));
    }
    let mut orphan = Value::Null;
    if let Some(m) = y.milestone_id {
        milestones::reopen_after_failed_transfer(tx.exec(), m, now).await?;
        if let Some(current) = milestones::find(tx.exec(), m).await?
            && let Some(next) =
                milestones::next_after(tx.exec(), y.project_id, current.position).await?
            && next.status == MilestoneStatus::AwaitingPayment
        {
            let next_payment = payments::open_of_milestone(tx.exec(), next.id).await?;
            orphan = json!({"milestone_id": next.id, "title": next.title,
                            "payment_id": next_payment.as_ref().map(|p| p.id),
                            "payment_status": next_payment.map(|p| p.status)});
        }
    }
    let mut message = format!(
        "The transfer {} of payment {} ({}) failed; the milestone is back in progress for review.",
        transfer.id,
        y.id,
        money_text(expert_amount, &y.currency)
    );
    if !orphan.is_null() {
        message.push_str(&format!(
            " The next milestone \"{}\" (id {}) was already set up for payment and now runs ahead of this one.",
            orphan["title"].as_str().unwrap_or_default(),
            orphan["milestone_id"]
        ));
    }
    let alert = for_admins(
        "payment_transfer_failed",
        "Transfer failed",
        &message,
        json!({"payment_id": y.id, "project_id": y.project_id, "transfer_id": transfer.id,
               "orphan_next_milestone": orphan}),
    );
    record(
        tx,
        "payment.transfer_failed",
        y.id,
        json!({"payment_id": y.id, "transfer_id": transfer.id, "notify": [alert]}),
        now,
    )
    .await?;
    Ok(None)
}

/// Alerts administrators about payment `y`, in an event `payment.<kind>`.
pub(crate) async fn alert_admins(
    tx: &mut Tx,
    y: &Payment,
    kind: &str,
    title: &str,
    message: &str,
    now: DateTime<Utc>,
) -> FlowResult<()> {
    let alert = for_admins(
        kind,
        title,
        message,
        json!({"payment_id": y.id, "project_id": y.project_id}),
    );
    record(
        tx,
        &format!("payment.{kind}"),
        y.id,
        json!({"payment_id": y.id, "notify": [alert]}),
        now,
    )
    .await?;
    Ok(())
}
