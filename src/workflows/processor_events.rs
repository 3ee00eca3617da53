//! The processor's webhook events (DESIGN §4): the signature is checked first, the event is
//! stored by its id and answered, and only then applied, once, in its payment's actor.
//!
//! Applying writes the effects and marks the event processed in one transaction, so an event
//! takes effect exactly once however often it is delivered or swept. Every effect is a
//! conditional update from the states it may leave: an event older than the payment's state
//! (out of order) changes nothing.

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::domain::money::minor_to_number;
use crate::domain::project::format_minor;
use crate::integrations::mail::Template;
use crate::integrations::processor::webhook::{self, DEFAULT_TOLERANCE_SECS};
use crate::integrations::processor::{Event, PaymentIntent};
use crate::state::AppState;
use crate::store::disputes::{self, Chargeback};
use crate::store::payments::{self, Payment};
use crate::store::processor_events::{self, StoredEvent};
use crate::store::{LockScope, Tx, milestones, profiles, users};
use crate::workflows::disputes as settled;
use crate::workflows::emails::email;
use crate::workflows::error::{FlowError, FlowResult};
use crate::workflows::escrow::{
    self, Parties, announce_refund, charge_details, money_text, record,
};
use crate::workflows::notify::{for_admins, for_user};

/// Why a delivery was refused (400, nothing stored).
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error("missing signature")]
    MissingSignature,
    #[error("invalid signature: {0}")]
    BadSignature(#[from] webhook::SignatureError),
    #[error("not a processor event")]
    NotAnEvent,
}

/// Verifies, parses and stores a delivery. `Ok(Some(id))` for a new event, to be applied
/// with [`apply`]; `Ok(None)` for an id already stored.
pub async fn receive(
    state: &AppState,
    signature: Option<&str>,
    body: &[u8],
) -> Result<Option<String>, ReceiveError> {
    let signature = signature.ok_or(Refused::MissingSignature)?;
    webhook::verify(
        signature,
        body,
        state.processor.webhook_secret.expose(),
        state.clock.now().timestamp(),
        DEFAULT_TOLERANCE_SECS,
    )
    .map_err(Refused::from)?;
    // Parsed once: the event is read from the document that is stored.
    let payload: Value = serde_json::from_slice(body).map_err(|_| Refused::NotAnEvent)?;
    let event = Event::deserialize(&payload).map_err(|_| Refused::NotAnEvent)?;
    let created = DateTime::<Utc>::from_timestamp(event.created, 0);
    let mut conn = state.db.conn().await.map_err(FlowError::from)?;
    let new = processor_events::insert_new(
        conn.exec(),
        &event.id,
        &event.kind,
        &payload,
        created,
        state.clock.now(),
    )
    .await
    .map_err(FlowError::from)?;
    Ok(new.then_some(event.id))
}

#[derive(Debug, thiserror::Error)]
pub enum ReceiveError {
    #[error(transparent)]
    Refused(#[from] Refused),
    #[error(transparent)]
    Flow(#[from] FlowError),
}

/// Applies a stored event once, in the actor of the payment it concerns (account-level
/// events need none). Safe to call again: an applied event is left alone.
pub async fn apply(state: &AppState, event_id: &str) -> FlowResult<()> {
    let stored = {
        let mut conn = state.db.conn().await?;
        processor_events::find(conn.exec(), event_id).await?
    };
    match stored.filter(|e| e.processed_at.is_none()) {
        Some(stored) => apply_stored(state, stored).await,
        None => Ok(()),
    }
}

/// [`apply`] for an event already read (the sweep's): it is not read again. Whether it was
/// applied meanwhile is checked in the payment's actor, and the processed mark is a
/// conditional update, so a second application changes nothing.
async fn apply_stored(state: &AppState, stored: StoredEvent) -> FlowResult<()> {
    let event = match Event::deserialize(&stored.payload.0) {
        Ok(e) => e,
        Err(_) => return finish(state, &stored, None, Some("unreadable event")).await,
    };
    if !HANDLED.contains(&event.kind.as_str()) {
        return finish(state, &stored, None, Some("event type not used")).await;
    }
    // Our id in the object's metadata: tried first, in that payment's actor, which reads the
    // payment and the event's processed mark in one query.
    let event = match metadata_payment_id(&event) {
        Some(payment_id) => match in_actor(state, payment_id, &stored.id, event).await? {
            Applied::Done => return Ok(()),
            Applied::NoSuchPayment(event) => event,
        },
        None => event,
    };
    match payment_by_processor_ids(state, &event).await? {
        Some(payment_id) => match in_actor(state, payment_id, &stored.id, event).await? {
            Applied::Done => Ok(()),
            Applied::NoSuchPayment(_) => {
                finish(state, &stored, None, Some("no matching payment")).await
            }
        },
        None if is_account_level(&event.kind) => apply_account_event(state, &stored, &event).await,
        None => finish(state, &stored, None, Some("no matching payment")).await,
    }
}

/// What applying in a payment's actor came to.
enum Applied {
    /// Applied, or found applied already.
    Done,
    /// The payment does not exist: the event is handed back to look further.
    NoSuchPayment(Event),
}

async fn in_actor(
    state: &AppState,
    payment_id: i64,
    event_id: &str,
    event: Event,
) -> FlowResult<Applied> {
    let id = event_id.to_owned();
    escrow::in_payment_actor(state, payment_id, move |st| async move {
        apply_to_payment(&st, &id, event, payment_id).await
    })
    .await
}

/// The event types with effects (the specification's table).
const HANDLED: &[&str] = &[
    "payment_intent.succeeded",
    "payment_intent.payment_failed",
    "payment_intent.canceled",
    "payment_intent.amount_capturable_updated",
    "charge.refunded",
    "transfer.created",
    "transfer.failed",
    "payout.paid",
    "payout.failed",
    "charge.dispute.created",
    "charge.dispute.updated",
    "charge.dispute.closed",
    "account.updated",
];

fn is_account_level(kind: &str) -> bool {
    kind.starts_with("payout.") || kind == "account.updated"
}

/// Marks an event processed without effects (or after account-level ones).
async fn finish(
    state: &AppState,
    stored: &StoredEvent,
    payment_id: Option<i64>,
    note: Option<&str>,
) -> FlowResult<()> {
    let mut conn = state.db.conn().await?;
    processor_events::mark_processed(conn.exec(), &stored.id, payment_id, note, state.clock.now())
        .await?;
    Ok(())
}

/// Our payment id in the event object's metadata, when it carries one.
fn metadata_payment_id(event: &Event) -> Option<i64> {
    event.data.object["metadata"]["payment_id"]
        .as_str()
        .and_then(|s| s.parse::<i64>().ok())
}

/// The payment an event is about by the processor's ids we stored (when our id in the
/// object's metadata named none).
async fn payment_by_processor_ids(state: &AppState, event: &Event) -> FlowResult<Option<i64>> {
    let object = &event.data.object;
    let mut conn = state.db.conn().await?;
    let text = |key: &str| object[key].as_str().map(str::to_owned);
    let found = match event.kind.split('.').next().unwrap_or_default() {
        "payment_intent" => match text("id") {
            Some(id) => payments::find_by_intent(conn.exec(), &id).await?,
            None => None,
        },
        "charge" => {
            let intent = text("payment_intent");
            let charge = if event.kind.starts_with("charge.dispute.") {
                text("charge")
            } else {
                text("id")
            };
            let by_intent = match &intent {
                Some(id) => payments::find_by_intent(conn.exec(), id).await?,
                None => None,
            };
            match (by_intent, charge) {
                (Some(y), _) => Some(y),
                (None, Some(c)) => payments::find_by_charge(conn.exec(), &c).await?,
                (None, None) => None,
            }
        }
        "transfer" => match text("id") {
            Some(id) => payments::find_by_transfer(conn.exec(), &id).await?,
            None => None,
        },
        _ => None,
    };
    Ok(found.map(|y| y.id))
}

/// Applies a payment's event in its actor: processor calls first, then one transaction with
/// the effects and the processed mark. The payment and whether the event was applied
/// meanwhile are read in one query.
async fn apply_to_payment(
    state: &AppState,
    event_id: &str,
    event: Event,
    payment_id: i64,
) -> FlowResult<Applied> {
    let found = {
        let mut conn = state.db.conn().await?;
        payments::find_for_event(conn.exec(), payment_id, event_id).await?
    };
    let Some(found) = found else {
        return Ok(Applied::NoSuchPayment(event));
    };
    if found.event_processed_at.is_some() {
        return Ok(Applied::Done);
    }
    let y = found.payment;
    let now = state.clock.now();
    // What needs the network is asked before the transaction opens.
    let authorisation = match event.kind.as_str() {
        "payment_intent.succeeded" | "payment_intent.amount_capturable_updated"
            if y.status == "pending" || (y.status == "disputed" && y.held_at.is_none()) =>
        {
            let intent = event.payment_intent().map_err(bad_object)?;
            let (capture_before, receipt_url) = charge_details(state, &intent).await;
            Some(Authorised {
                intent,
                capture_before,
                receipt_url,
            })
        }
        "charge.dispute.closed" => {
            if event.dispute().is_ok_and(|d| d.status == "lost") {
                release_lost_authorisation(state, &y).await;
            }
            None
        }
        _ => None,
    };

    let mut tx = state.db.begin().await?;
    tx.lock(LockScope::Project, y.project_id).await?;
    let note = match event.kind.as_str() {
        "payment_intent.succeeded" | "payment_intent.amount_capturable_updated" => {
            on_authorised(&mut tx, &event, &y, authorisation, now).await?
        }
        "payment_intent.payment_failed" | "payment_intent.canceled" => {
            on_intent_failed(&mut tx, &event, &y, now).await?
        }
        "charge.refunded" => on_charge_refunded(&mut tx, &y, now).await?,
        "transfer.created" => on_transfer_created(&mut tx, &event, &y, now).await?,
        "transfer.failed" => on_transfer_failed(&mut tx, &event, &y, now).await?,
        "charge.dispute.created" => on_dispute_created(&mut tx, &event, &y, now).await?,
        "charge.dispute.updated" => on_dispute_updated(&mut tx, &event, now).await?,
        "charge.dispute.closed" => on_dispute_closed(&mut tx, &event, &y, now).await?,
        _ => Some("event type not used"),
    };
    if !processor_events::mark_processed(tx.exec(), event_id, Some(y.id), note, now).await? {
        // Applied meanwhile (another instance): leave its effects as they are.
        tx.rollback().await?;
        return Ok(Applied::Done);
    }
    tx.commit().await?;
    state.outbox.wake();
    Ok(Applied::Done)
}

/// A chargeback lost on money authorised but never captured: the card holder got it back
/// through the bank, so the authorisation is let go rather than left to lapse (a capture
/// afterwards would take the money twice). A failure is logged; the authorisation then
/// lapses on its own.
async fn release_lost_authorisation(state: &AppState, y: &Payment) {
    if !matches!(y.status.as_str(), "held" | "disputed") {
        return;
    }
    if let Err(error) = escrow::cancel_uncaptured(state, y).await {
        tracing::warn!(payment_id = y.id, %error, "authorisation of a lost chargeback not released");
    }
}

fn bad_object(e: serde_json::Error) -> FlowError {
    FlowError::Internal(anyhow::anyhow!("event object unreadable: {e}"))
}

type Note = Option<&'static str>;

/// What the processor says of an authorisation, read before the transaction opens.
struct Authorised {
    intent: PaymentIntent,
    capture_before: Option<DateTime<Utc>>,
    receipt_url: Option<String>,
}

/// `payment_intent.succeeded` / `amount_capturable_updated`: `held` from `pending`, whichever
/// comes first (DESIGN §5); afterwards only the capturable amount is noted.
async fn on_authorised(
    tx: &mut Tx,
    event: &Event,
    y: &Payment,
    authorisation: Option<Authorised>,
    now: DateTime<Utc>,
) -> FlowResult<Note> {
    // The transaction holds the project's lock already (taken in `apply_to_payment`).
    let intent = match authorisation {
        Some(a) if escrow::is_authorised(&a.intent) => {
            let held = escrow::hold_locked_in_tx(
                tx,
                y,
                &a.intent,
                a.capture_before,
                a.receipt_url.as_deref(),
                now,
            )
            .await?;
            return Ok((!held).then_some("payment no longer pending"));
        }
        Some(a) => a.intent,
        None => event.payment_intent().map_err(bad_object)?,
    };
    if event.kind == "payment_intent.amount_capturable_updated" {
        let mut metadata = y.payment_metadata.0.clone();
        metadata["amount_capturable"] = json!(intent.amount_capturable);
        payments::set_metadata(tx.exec(), y.id, &metadata, now).await?;
    }
    Ok(Some("payment already past pending"))
}

/// `payment_intent.payment_failed` / `canceled`: `failed` from `pending`, the milestone stays
/// `awaiting_payment`. A declined card is told to the company. An authorisation cancelled
/// while we hold the payment means escrow is gone: administrators are alerted.
async fn on_intent_failed(
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
    let in_escrow = y.status == "held" || (y.status == "disputed" && y.held_at.is_some());
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
async fn on_charge_refunded(tx: &mut Tx, y: &Payment, now: DateTime<Utc>) -> FlowResult<Note> {
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
    if y.payout_status == "transferred" && metadata.get("reversal_id").is_none() {
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
async fn on_transfer_created(
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

fn failed_transfers(y: &Payment) -> Vec<String> {
    y.payment_metadata.0["failed_transfers"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// `transfer.failed`: payout `failed`, the money back in escrow (`held`), the transfer id
/// cleared, the expert amount recomputed, the milestone and its delivery back for review,
/// administrators alerted — naming the next milestone when it was already prepared.
async fn on_transfer_failed(
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
            && next.status == "awaiting_payment"
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

/// `charge.dispute.created`: a Dispute with the processor's id and evidence details (or the
/// project's dispute under way gets them), the payment `disputed` from `pending`/`held`.
async fn on_dispute_created(
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
async fn on_dispute_updated(tx: &mut Tx, event: &Event, now: DateTime<Utc>) -> FlowResult<Note> {
    let dispute = event.dispute().map_err(bad_object)?;
    let Some(ours) = disputes::find_by_processor_id(tx.exec(), &dispute.id).await? else {
        return Ok(Some("unknown chargeback"));
    };
    let moved = match dispute.status.as_str() {
        "under_review" => {
            disputes::follow_processor(
                tx.exec(),
                ours.id,
                ["open", "in_review"],
                "in_review",
                &dispute.status,
                now,
            )
            .await?
        }
        "needs_response" | "warning_needs_response" => {
            disputes::follow_processor(
                tx.exec(),
                ours.id,
                ["open", "open"],
                "open",
                &dispute.status,
                now,
            )
            .await?
        }
        _ => false,
    };
    if !moved {
        disputes::set_processor_status(tx.exec(), ours.id, &dispute.status, now).await?;
    }
    Ok(None)
}

/// `charge.dispute.closed`: lost → the payment `refunded` (the bank gave the money back)
/// and the dispute resolved for the company; won → the payment stays `disputed` for an
/// administrator to decide.
async fn on_dispute_closed(
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
    if dispute.status != "lost" {
        // Already decided by an administrator (after the processor's decision was known):
        // nothing waits any more.
        if y.status != "disputed" {
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
        if y.payout_status == "transferred" {
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

async fn alert_admins(
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

/// `payout.paid` / `payout.failed` (the expert told, administrators too on failure) and
/// `account.updated` (the connected account's status kept in step).
async fn apply_account_event(
    state: &AppState,
    stored: &StoredEvent,
    event: &Event,
) -> FlowResult<()> {
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    if event.kind == "account.updated" {
        let account = event.account_object().map_err(bad_object)?;
        crate::workflows::connect::apply_account_update(tx.exec(), &account, now).await?;
    } else {
        let payout = event.payout().map_err(bad_object)?;
        let account = event.account.clone().or(payout.destination.clone());
        let expert = match &account {
            Some(a) => profiles::user_by_connect_account(tx.exec(), a).await?,
            None => None,
        };
        let contact = match expert {
            Some(id) => users::contact(tx.exec(), id, "experto").await?,
            None => None,
        };
        let paid = event.kind == "payout.paid";
        let amount = money_text(payout.amount, &payout.currency);
        let data = json!({"payout_id": payout.id, "amount": minor_to_number(payout.amount),
                          "currency": payout.currency, "account": account});
        let (kind, title, message) = if paid {
            (
                "EXPERT_PAYOUT_PAID",
                "Payout paid",
                format!("A payout of {amount} reached your bank account."),
            )
        } else {
            (
                "EXPERT_PAYOUT_FAILED",
                "Payout failed",
                format!(
                    "A payout of {amount} to your bank account failed: {}.",
                    payout
                        .failure_message
                        .as_deref()
                        .or(payout.failure_code.as_deref())
                        .unwrap_or("no reason given")
                ),
            )
        };
        let mut notify = Vec::new();
        let mut mails = Vec::new();
        if let Some(c) = &contact {
            notify.push(for_user(c.id, kind, title, &message, data.clone()));
            let context = json!({"name": c.name, "amount": format_minor(payout.amount),
                                 "currency": payout.currency.to_uppercase(),
                                 "reason": payout.failure_message});
            let template = if paid {
                Template::PayoutPaid
            } else {
                Template::PayoutFailed
            };
            mails.push(email(&c.email, template, context));
        }
        if !paid {
            notify.push(for_admins(
                kind,
                "Expert payout failed",
                &format!(
                    "A payout of {amount} to connected account {} failed.",
                    account.as_deref().unwrap_or("unknown")
                ),
                data,
            ));
        }
        crate::store::events::record(
            tx.exec(),
            crate::store::events::NewEvent {
                kind: if paid { "payout.paid" } else { "payout.failed" },
                aggregate: "user",
                aggregate_id: expert,
                payload: json!({"payout_id": payout.id, "notify": notify, "email": mails}),
            },
            now,
        )
        .await?;
    }
    if !processor_events::mark_processed(tx.exec(), &stored.id, None, None, now).await? {
        tx.rollback().await?;
        return Ok(());
    }
    tx.commit().await?;
    state.outbox.wake();
    Ok(())
}

/// The name of the sweep's periodic job.
pub const SWEEP: &str = "processor_event_sweep";

/// Applies events stored but not applied (a crash between storing and applying, or a
/// failure while applying), oldest first. Answers how many were applied.
pub async fn sweep(state: &AppState, older_than: chrono::Duration) -> FlowResult<usize> {
    let due = {
        let mut conn = state.db.conn().await?;
        processor_events::unprocessed(conn.exec(), state.clock.now() - older_than, 100).await?
    };
    let mut applied = 0;
    for event in due {
        // Read once above: not read again before it is applied.
        let event_id = event.id.clone();
        match apply_stored(state, event).await {
            Ok(()) => applied += 1,
            Err(error) => {
                tracing::warn!(event_id, %error, "processor event not applied")
            }
        }
    }
    Ok(applied)
}
