//! The escrow's periodic jobs (started by `background`) and the reconciliation they
//! share with administrators:
//! - deferred transfers, retried daily (the platform balance was short, the processor down,
//!   or the expert's account not active yet);
//! - processor events stored but not applied (a crash between storing and applying);
//! - authorisations about to lapse: reported to administrators and, by configuration,
//!   captured into the platform balance so escrow still holds the money.

use serde::Serialize;
use serde_json::json;
use utoipa::ToSchema;

use crate::domain::payment::{IntentStatus, PaymentStatus, PayoutStatus};
use crate::state::AppState;
use crate::store::payments::{self, Payment};
use crate::workflows::error::{FlowError, FlowResult};
use crate::workflows::escrow::{self, Hold, charge_details, hold_in_tx, in_payment_actor, record};
use crate::workflows::notify::for_admins;

/// Job names, as `state.jobs` knows them.
pub const TRANSFER_RETRY: &str = "transfer_retry";
pub const AUTHORISATION_WATCH: &str = "authorisation_watch";

/// Tries again every released payment whose transfer is still to be made. Answers how many
/// were transferred.
pub async fn retry_deferred_transfers(state: &AppState) -> FlowResult<usize> {
    let due = {
        let mut conn = state.db.conn().await?;
        payments::awaiting_transfer(conn.exec(), 500).await?
    };
    let mut transferred = 0;
    for y in due {
        let outcome = in_payment_actor(state, y.id, move |st| async move {
            let y = escrow::load(&st, y.id).await?;
            escrow::transfer(&st, y).await
        })
        .await;
        match outcome {
            Ok(y) if y.payout_status == PayoutStatus::Transferred => transferred += 1,
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(payment_id = y.id, %error, "deferred transfer not retried")
            }
        }
    }
    Ok(transferred)
}

/// Held payments whose authorisation lapses within the configured margin: reported to
/// administrators once and, with `CAPTURE_BEFORE_EXPIRY`, captured now (the payment stays
/// `held`: the money waits in the platform balance for release or refund). Answers how many
/// were captured.
pub async fn watch_authorisations(state: &AppState) -> FlowResult<usize> {
    let margin = chrono::Duration::hours(i64::from(state.settings.authorisation_margin_hours));
    let expiring = {
        let mut conn = state.db.conn().await?;
        payments::authorisations_expiring(conn.exec(), state.clock.now() + margin).await?
    };
    let mut captured = 0;
    for y in expiring {
        match in_payment_actor(state, y.id, move |st| async move {
            secure_authorisation(&st, y.id).await
        })
        .await
        {
            Ok(true) => captured += 1,
            Ok(false) => {}
            Err(error) => {
                tracing::warn!(payment_id = y.id, %error, "expiring authorisation not secured")
            }
        }
    }
    Ok(captured)
}

async fn secure_authorisation(state: &AppState, payment_id: i64) -> FlowResult<bool> {
    let y = escrow::load(state, payment_id).await?;
    if !y.status.may_hold_money() || y.capture_before.is_none() {
        return Ok(false);
    }
    let now = state.clock.now();
    let mut metadata = y.payment_metadata.0.clone();
    let capture = state.settings.capture_before_expiry;
    let mut captured = false;
    if capture && let Some(intent_id) = y.processor_payment_intent_id.as_deref() {
        let client = &state.processor.client;
        let intent = client
            .retrieve_payment_intent(intent_id)
            .await
            .map_err(|e| escrow::processor_failure("report the payment", &e))?;
        if intent.state() == IntentStatus::RequiresCapture {
            client
                .capture_payment_intent(intent_id, &format!("payment_{}_capture", y.id))
                .await
                .map_err(|e| escrow::processor_failure("capture the payment", &e))?;
        }
        captured = intent.state().is_authorised();
    }
    if metadata.get("expiry_reported").is_some() && !captured {
        return Ok(false);
    }
    metadata["expiry_reported"] = json!(now);
    let message = if captured {
        metadata["captured_early_at"] = json!(now);
        format!(
            "The card authorisation of held payment {} was about to lapse ({}); it was captured into the platform balance and stays in escrow.",
            y.id,
            y.capture_before.map(|t| t.to_rfc3339()).unwrap_or_default()
        )
    } else {
        format!(
            "The card authorisation of held payment {} lapses at {}; release or refund it before then.",
            y.id,
            y.capture_before.map(|t| t.to_rfc3339()).unwrap_or_default()
        )
    };
    let mut tx = state.db.begin().await?;
    if captured {
        payments::mark_captured_early(tx.exec(), y.id, &metadata, now).await?;
    } else {
        payments::set_metadata(tx.exec(), y.id, &metadata, now).await?;
    }
    let alert = for_admins(
        "payment_authorisation_expiring",
        "Card authorisation about to lapse",
        &message,
        json!({"payment_id": y.id, "project_id": y.project_id, "captured": captured}),
    );
    record(
        &mut tx,
        "payment.authorisation_expiring",
        y.id,
        json!({"payment_id": y.id, "captured": captured, "notify": [alert]}),
        now,
    )
    .await?;
    state.commit(tx).await?;
    Ok(captured)
}

/// One correction made by reconciliation.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Correction {
    pub payment_id: i64,
    #[schema(value_type = String)]
    pub from: PaymentStatus,
    #[schema(value_type = String)]
    pub to: PaymentStatus,
    /// The intent's status at the processor.
    pub processor_status: String,
}

/// What reconciliation saw and did.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Reconciliation {
    pub checked: usize,
    pub corrected: Vec<Correction>,
    /// Payments the processor could not be asked about.
    pub unreachable: Vec<i64>,
}

/// Compares `pending` and `held` payments untouched for `older_than` with the processor and
/// corrects ours where the processor moved on: authorised → `held`, cancelled before
/// authorisation → `failed`, an authorisation lapsed or cancelled while held → `failed`
/// (administrators alerted), refunded → `refunded`. Each correction is recorded as a
/// `payment.reconciled` event.
pub async fn reconcile(
    state: &AppState,
    older_than: chrono::Duration,
) -> FlowResult<Reconciliation> {
    let stale = {
        let mut conn = state.db.conn().await?;
        payments::stale(conn.exec(), state.clock.now() - older_than, 500).await?
    };
    let mut result = Reconciliation {
        checked: stale.len(),
        corrected: Vec::new(),
        unreachable: Vec::new(),
    };
    for y in stale {
        let id = y.id;
        match in_payment_actor(
            state,
            id,
            move |st| async move { reconcile_one(&st, id).await },
        )
        .await
        {
            Ok(Some(c)) => result.corrected.push(c),
            Ok(None) => {}
            Err(FlowError::Refused { .. }) => result.unreachable.push(id),
            Err(e) => return Err(e),
        }
    }
    Ok(result)
}

async fn reconcile_one(state: &AppState, payment_id: i64) -> FlowResult<Option<Correction>> {
    let y: Payment = escrow::load(state, payment_id).await?;
    let Some(intent_id) = y.processor_payment_intent_id.clone() else {
        return Ok(None);
    };
    if !matches!(y.status, PaymentStatus::Pending | PaymentStatus::Held) {
        return Ok(None);
    }
    let intent = state
        .processor
        .client
        .retrieve_payment_intent_with_charge(&intent_id)
        .await
        .map_err(|e| escrow::processor_failure("report the payment", &e))?;
    let refunded = intent
        .latest_charge
        .as_ref()
        .and_then(|c| c.object())
        .is_some_and(|c| c.refunded);
    let (capture_before, receipt) = charge_details(state, &intent).await;
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    let to = match (y.status, intent.state()) {
        (PaymentStatus::Pending, status) if status.is_authorised() => {
            let hold = Hold {
                payment: &y,
                intent: &intent,
                capture_before,
                receipt_url: receipt.as_deref(),
            };
            hold_in_tx(&mut tx, hold, now)
                .await?
                .then_some(PaymentStatus::Held)
        }
        (PaymentStatus::Pending, IntentStatus::Canceled) => {
            payments::fail_pending(tx.exec(), y.id, "canceled", now)
                .await?
                .then_some(PaymentStatus::Failed)
        }
        (PaymentStatus::Held, IntentStatus::Canceled) => {
            let failed = payments::fail_held(tx.exec(), y.id, "authorisation_lapsed", now).await?;
            if failed {
                let alert = for_admins(
                    "payment_authorisation_lost",
                    "Held payment's authorisation lapsed",
                    &format!(
                        "Held payment {} has no authorisation left at the processor; it is now failed and the company must pay again.",
                        y.id
                    ),
                    json!({"payment_id": y.id, "project_id": y.project_id}),
                );
                record(
                    &mut tx,
                    "payment.authorisation_lost",
                    y.id,
                    json!({"notify": [alert]}),
                    now,
                )
                .await?;
            }
            failed.then_some(PaymentStatus::Failed)
        }
        (PaymentStatus::Held, IntentStatus::Succeeded) if refunded => {
            let metadata = y.payment_metadata.0.clone();
            let done = payments::mark_refunded(
                tx.exec(),
                y.id,
                None,
                Some("refunded_at_processor"),
                &metadata,
                now,
            )
            .await?;
            if done {
                escrow::announce_refund(&mut tx, &y, now).await?;
            }
            done.then_some(PaymentStatus::Refunded)
        }
        _ => None,
    };
    let Some(to) = to else {
        tx.rollback().await?;
        return Ok(None);
    };
    let correction = Correction {
        payment_id: y.id,
        from: y.status,
        to,
        processor_status: intent.status.clone(),
    };
    record(
        &mut tx,
        "payment.reconciled",
        y.id,
        json!({"payment_id": y.id, "from": correction.from, "to": correction.to,
               "processor_status": correction.processor_status}),
        now,
    )
    .await?;
    state.commit(tx).await?;
    Ok(Some(correction))
}
