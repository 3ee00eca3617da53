//! Chargebacks: the effects of the processor's disputes of a payment (`charge.dispute.*`) on
//! the payment and on the project's dispute, run by `processor_events` in the payment's
//! actor. A dispute an administrator decides is `disputes`' (`settled` here).

use chrono::{DateTime, Utc};
use serde_json::json;

use crate::domain::dispute::ChargebackStatus;
use crate::domain::payment::{PaymentStatus, PayoutStatus};
use crate::domain::project::money_text;
use crate::integrations::processor::Event;
use crate::state::AppState;
use crate::store::Tx;
use crate::store::disputes::{self, Chargeback};
use crate::store::payments::{self, Payment};
use crate::workflows::disputes as settled;
use crate::workflows::error::FlowResult;
use crate::workflows::escrow::{self, alert_admins, announce_refund, record};
use crate::workflows::notify::for_admins;
use crate::workflows::processor_effect::{Note, bad_object};

/// `charge.dispute.created`: a Dispute with the processor's id and evidence details (or the
/// project's dispute under way gets them), the payment `disputed` from `pending`/`held`.
pub(super) async fn on_dispute_created(
    tx: &mut Tx,
    event: &Event,
    y: &Payment,
    now: DateTime<Utc>,
) -> FlowResult<Note> {
    let dispute = event.dispute().map_err(bad_object)?;
    if disputes::find_by_processor_id(tx.exec(), &dispute.id)
        .await?
        .is_some()
    {
        return Ok(Some("chargeback already recorded"));
    }
    let evidence = dispute
        .evidence_details
        .as_ref()
        .and_then(|e| serde_json::to_string(e).ok());
    let chargeback = Chargeback {
        project_id: y.project_id,
        payment_id: y.id,
        processor_dispute_id: &dispute.id,
        processor_status: &dispute.status,
        reason: &dispute.reason,
        evidence_details: evidence.as_deref(),
    };
    let dispute_id = match disputes::active_of_project(tx.exec(), y.project_id).await? {
        Some(active) => {
            disputes::attach_chargeback(tx.exec(), active.id, &chargeback, now).await?;
            active.id
        }
        None => disputes::insert_chargeback(tx.exec(), &chargeback, now).await?,
    };
    payments::mark_disputed(tx.exec(), y.id, now).await?;
    let line = format!(
        "chargeback {} ({}) on payment {} recorded in dispute {dispute_id}",
        dispute.id, dispute.reason, y.id
    );
    settled::audit(tx, y.project_id, &line, now).await?;
    let alert = for_admins(
        "dispute_created",
        "Chargeback opened",
        &format!(
            "The card holder disputed payment {} ({}): {}.",
            y.id,
            money_text(dispute.amount, &y.currency),
            dispute.reason
        ),
        json!({"dispute_id": dispute_id, "payment_id": y.id, "project_id": y.project_id,
               "processor_dispute_id": dispute.id}),
    );
    record(
        tx,
        "dispute.created",
        y.id,
        json!({"dispute_id": dispute_id, "payment_id": y.id, "project_id": y.project_id,
               "chargeback": true, "notify": [alert]}),
        now,
    )
    .await?;
    Ok(None)
}

/// `charge.dispute.updated`: `under_review` → `in_review` (from `open` or `in_review`),
/// `needs_response` → `open` (from `open`); a decided dispute never moves.
pub(super) async fn on_dispute_updated(
    tx: &mut Tx,
    event: &Event,
    now: DateTime<Utc>,
) -> FlowResult<Note> {
    let dispute = event.dispute().map_err(bad_object)?;
    let Some(ours) = disputes::find_by_processor_id(tx.exec(), &dispute.id).await? else {
        return Ok(Some("unknown chargeback"));
    };
    let moved = match dispute.state().followed_by() {
        Some((from, to)) => {
            disputes::follow_processor(tx.exec(), ours.id, from, to, &dispute.status, now).await?
        }
        None => false,
    };
    if !moved {
        disputes::set_processor_status(tx.exec(), ours.id, &dispute.status, now).await?;
    }
    Ok(None)
}

/// `charge.dispute.closed`: lost → the payment `refunded` (the bank gave the money back)
/// and the dispute resolved for the company; won → the payment stays `disputed` for an
/// administrator to decide.
pub(super) async fn on_dispute_closed(
    tx: &mut Tx,
    event: &Event,
    y: &Payment,
    now: DateTime<Utc>,
) -> FlowResult<Note> {
    let dispute = event.dispute().map_err(bad_object)?;
    let ours = disputes::find_by_processor_id(tx.exec(), &dispute.id).await?;
    if let Some(d) = &ours {
        disputes::set_processor_status(tx.exec(), d.id, &dispute.status, now).await?;
    }
    if dispute.state() != ChargebackStatus::Lost {
        // Already decided by an administrator (after the processor's decision was known):
        // nothing waits any more.
        if y.status != PaymentStatus::Disputed {
            return Ok(Some("chargeback won; the payment was decided already"));
        }
        alert_admins(
            tx,
            y,
            "dispute_chargeback_won",
            "Chargeback won",
            &format!(
                "The chargeback on payment {} was decided for the platform; the payment stays disputed until an administrator resolves it.",
                y.id
            ),
            now,
        )
        .await?;
        return Ok(None);
    }
    let metadata = y.payment_metadata.0.clone();
    if payments::mark_refunded(
        tx.exec(),
        y.id,
        None,
        Some("chargeback_lost"),
        &metadata,
        now,
    )
    .await?
    {
        announce_refund(tx, y, now).await?;
        // The bank took the money back from the platform; the expert was paid already.
        if y.payout_status == PayoutStatus::Transferred {
            alert_admins(
                tx,
                y,
                "chargeback_after_transfer",
                "Chargeback lost after the transfer",
                &format!(
                    "The chargeback on payment {} was lost after {} went to the expert; the transfer stands and is for an administrator to recover.",
                    y.id,
                    money_text(y.expert_amount_minor.unwrap_or(0), &y.currency)
                ),
                now,
            )
            .await?;
        }
    }
    let Some(d) = ours else {
        return Ok(None);
    };
    // The dispute is decided by the bank unless other payments of the project wait, frozen
    // by it, for an administrator.
    if !payments::disputed_of_project(tx.exec(), y.project_id)
        .await?
        .is_empty()
    {
        return Ok(Some(
            "chargeback lost; other disputed payments wait for an administrator",
        ));
    }
    const RESOLUTION: &str =
        "The card issuer decided the chargeback for the card holder; the payment was refunded.";
    if disputes::resolve_by_processor(tx.exec(), d.id, RESOLUTION, "refund_company", now).await? {
        let to = settled::settle_project(tx, y.project_id, d.created_at, now).await?;
        let line = format!(
            "dispute {} resolved by the card issuer (chargeback {} lost): refund_company; payment {}; project {to}",
            d.id, dispute.id, y.id
        );
        settled::audit(tx, y.project_id, &line, now).await?;
        settled::announce_resolution(tx, &d, RESOLUTION, "refund_company", now).await?;
    }
    Ok(None)
}

/// A chargeback lost on money authorised but never captured: the card holder got it back
/// through the bank, so the authorisation is let go rather than left to lapse (a capture
/// afterwards would take the money twice). A failure is logged; the authorisation then
/// lapses on its own.
pub(super) async fn release_lost_authorisation(state: &AppState, y: &Payment) {
    if !y.status.may_hold_money() {
        return;
    }
    if let Err(error) = escrow::cancel_uncaptured(state, y).await {
        tracing::warn!(payment_id = y.id, %error, "authorisation of a lost chargeback not released");
    }
}
