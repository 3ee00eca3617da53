//! The processor's webhook events (DESIGN §4): the signature is checked first, the event is
//! stored by its id and answered, and only then applied, once, in its payment's actor.
//!
//! Receipts hand their events to the receipts' writer (a job they wake), which stores those
//! waiting in one statement and one commit, answers each receipt after that commit, and
//! queues the new events for the applier (another job it wakes), which takes what waits in
//! groups: the events of distinct payments are applied in all their actors at once and in
//! one transaction, so a burst costs one commit and a few statements per event rather than a
//! transaction each. A payment's events keep their order: a second event of a
//! payment starts the next group. The sweep applies what a crash or a failure left behind.
//!
//! Applying writes the effects and marks the event processed in one transaction, so an event
//! takes effect exactly once however often it is delivered or swept. Every effect is a
//! conditional update from the states it may leave: an event older than the payment's state
//! (out of order) changes nothing.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::oneshot;

use crate::domain::dispute::DisputeStatus;
use crate::domain::milestone::MilestoneStatus;
use crate::domain::money::minor_to_number;
use crate::domain::payment::{PaymentStatus, PayoutStatus};
use crate::domain::project::format_minor;
use crate::integrations::mail::Template;
use crate::integrations::processor::webhook::{self, DEFAULT_TOLERANCE_SECS};
use crate::integrations::processor::{Event, PaymentIntent};
use crate::state::{AppState, Asked};
use crate::store::disputes::{self, Chargeback};
use crate::store::payments::{self, Payment};
use crate::store::processor_events::{self, NewEvent, StoredEvent};
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

/// Verifies and parses a delivery, then hands it to the receipts' writer and waits until it
/// is stored (a new event is then queued for the applier). `Ok(true)` for a new event,
/// `Ok(false)` for an id already stored.
pub async fn receive(
    state: &AppState,
    signature: Option<&str>,
    body: &[u8],
) -> Result<bool, ReceiveError> {
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
    let event = NewEvent {
        created: DateTime::<Utc>::from_timestamp(event.created, 0),
        id: event.id,
        kind: event.kind,
        payload,
    };
    let (answer, stored) = oneshot::channel();
    let not_stored = || FlowError::unavailable("The event could not be stored; deliver it again");
    if !state.processor_receipts.push(Asked {
        item: event,
        answer,
    }) {
        tracing::warn!("processor receipts queue full; the delivery is refused");
        return Err(not_stored().into());
    }
    state.jobs.wake(RECEIPTS);
    // No answer (the writer failed, or is stopped): not known to be stored, so the processor
    // is asked to deliver it again; a copy stored after all is then found by its id.
    match tokio::time::timeout(RECEIPT_PATIENCE, stored).await {
        Ok(Ok(Some(new))) => Ok(new),
        _ => Err(not_stored().into()),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReceiveError {
    #[error(transparent)]
    Refused(#[from] Refused),
    #[error(transparent)]
    Flow(#[from] FlowError),
}

/// The name of the receipts' writer, a job each receipt wakes.
pub const RECEIPTS: &str = "processor_event_receipts";

/// How long a receipt waits for its event to be stored before it is refused (503).
const RECEIPT_PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);

/// The receipts' writer: stores the events waiting in [`AppState::processor_receipts`]
/// together, one statement and one commit for up to [`GROUP`] of them, so concurrent
/// receipts share a commit; queues the new ones for the applier, then answers each receipt.
/// Of several receipts of one id, the first is the new one. A failed write answers its
/// receipts `None` (refused, delivered again) and the writer goes on with the next ones.
/// Answers how many events were stored.
pub async fn store_receipts(state: &AppState) -> FlowResult<usize> {
    let mut stored = 0;
    let mut failure = None;
    loop {
        let (events, answers): (Vec<_>, Vec<_>) = state
            .processor_receipts
            .take(GROUP)
            .into_iter()
            .map(|asked| (asked.item, asked.answer))
            .unzip();
        if events.is_empty() {
            break;
        }
        let now = state.clock.now();
        let written = match state.db.conn().await {
            Ok(mut conn) => processor_events::insert_all_new(conn.exec(), &events, now)
                .await
                .map_err(FlowError::from),
            Err(e) => Err(e.into()),
        };
        let mut new_ids: HashSet<String> = match written {
            Ok(ids) => ids.into_iter().collect(),
            Err(e) => {
                tracing::error!(error = %e, events = events.len(), "processor events not stored");
                for answer in answers {
                    let _ = answer.send(None);
                }
                failure = Some(e);
                continue;
            }
        };
        stored += new_ids.len();
        for (event, answer) in events.into_iter().zip(answers) {
            let new = new_ids.remove(&event.id);
            if new {
                queue(state, event, now);
            }
            // The processor may have stopped waiting; the event is stored all the same.
            let _ = answer.send(Some(new));
        }
    }
    failure.map_or(Ok(stored), Err)
}

/// The name of the applier's job, which applies the events receipts queue.
pub const APPLY: &str = "processor_event_apply";

/// At most this many events are applied together (in one transaction).
const GROUP: usize = 64;

/// Lanes of the applier, applied side by side: a lane's groups go one after the other, so a
/// lane alone would wait on each statement in turn. A payment's events share a lane (by its
/// id), which keeps them in order.
pub const LANES: usize = 4;

/// Hands a newly stored event to the applier and wakes it. When too many are waiting, the
/// event is left to the sweep.
fn queue(state: &AppState, event: NewEvent, received_at: DateTime<Utc>) {
    let lanes = &state.processor_events;
    let lane = metadata_payment_id(&event.payload["data"]["object"])
        .map_or(0, |id| id.unsigned_abs() as usize % lanes.len());
    let event = StoredEvent {
        id: event.id,
        kind: event.kind,
        payload: sqlx::types::Json(event.payload),
        payment_id: None,
        received_at,
        processed_at: None,
        error: None,
    };
    if lanes[lane].push(event) {
        state.jobs.wake(APPLY);
    } else {
        tracing::warn!("processor events queue full; the sweep applies the event");
    }
}

/// The applier's run: applies what receipts queued, every lane side by side, each oldest
/// first and group after group, until the lanes are empty. Answers how many were applied.
/// One job for all lanes on purpose: a lane that empties waits for the run to end, so in a
/// burst its events gather into full groups. A job per lane (measured) applied each event
/// sooner but in small groups, which cost more per event and applied fewer per second.
pub async fn apply_queued(state: &AppState) -> FlowResult<usize> {
    let lanes = state.processor_events.iter().map(|lane| async move {
        let mut applied = 0;
        loop {
            let events = lane.take(GROUP);
            if events.is_empty() {
                return applied;
            }
            applied += apply_all(state, events).await;
        }
    });
    Ok(futures_util::future::join_all(lanes)
        .await
        .into_iter()
        .sum())
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
    Ok(apply_all(state, due).await)
}

/// An event with the payment it names.
struct ForPayment {
    event_id: String,
    event: Event,
    payment_id: i64,
}

/// Applies stored events in the order given; answers how many were applied. Runs of events
/// naming distinct payments in their metadata (the usual case) are applied together, the
/// others one by one. A failure is logged and the event left for the sweep.
async fn apply_all(state: &AppState, events: Vec<StoredEvent>) -> usize {
    let mut applied = 0;
    let mut group: Vec<ForPayment> = Vec::new();
    for stored in events {
        let event = match Event::deserialize(&stored.payload.0) {
            Ok(event) if HANDLED.contains(&event.kind.as_str()) => event,
            Ok(_) => {
                applied += done(
                    &stored.id,
                    finish(state, &stored.id, "event type not used").await,
                );
                continue;
            }
            Err(_) => {
                applied += done(
                    &stored.id,
                    finish(state, &stored.id, "unreadable event").await,
                );
                continue;
            }
        };
        match metadata_payment_id(&event.data.object) {
            Some(payment_id) => {
                // A second event of a payment waits for the first to be applied.
                if group.iter().any(|g| g.payment_id == payment_id) {
                    applied += apply_group(state, std::mem::take(&mut group)).await;
                }
                group.push(ForPayment {
                    event_id: stored.id,
                    event,
                    payment_id,
                });
            }
            None => {
                applied += apply_group(state, std::mem::take(&mut group)).await;
                applied += done(&stored.id, apply_unnamed(state, &stored.id, event).await);
            }
        }
    }
    applied + apply_group(state, group).await
}

/// 1 when applied, else 0 and the failure logged.
fn done(event_id: &str, result: FlowResult<()>) -> usize {
    match result {
        Ok(()) => 1,
        Err(error) => {
            tracing::warn!(event_id, %error, "processor event not applied");
            0
        }
    }
}

/// Applies a group of events of distinct payments together; when that fails, one by one (a
/// failure of one does not hold up the others). An event whose metadata names no payment is
/// looked up by the processor's ids; one whose payment's actor is busy is queued in that
/// actor, ahead of anything later for the payment, and applied there when its turn comes.
async fn apply_group(state: &AppState, group: Vec<ForPayment>) -> usize {
    if group.is_empty() {
        return 0;
    }
    let outcome = match apply_together(state, &group, PATIENCE).await {
        Ok(outcome) => outcome,
        Err(error) if group.len() > 1 => {
            tracing::warn!(%error, events = group.len(), "processor events not applied together; one by one");
            let mut applied = 0;
            for one in group {
                applied += Box::pin(apply_group(state, vec![one])).await;
            }
            return applied;
        }
        Err(error) => {
            tracing::warn!(event_id = group[0].event_id, %error, "processor event not applied");
            return 0;
        }
    };
    let mut applied = 0;
    for (index, one) in group.into_iter().enumerate() {
        if outcome.missing.contains(&index) {
            applied += done(
                &one.event_id,
                apply_unnamed(state, &one.event_id, one.event).await,
            );
        } else if outcome.busy.contains(&index) {
            apply_when_free(state, one);
        } else {
            applied += 1;
        }
    }
    applied
}

/// Queues `one` in its payment's actor now (so it keeps its place before later events of
/// the payment) and applies it there, in the background, when the actor is free.
fn apply_when_free(state: &AppState, one: ForPayment) {
    let st = state.clone();
    let payment_id = one.payment_id;
    let queued = state.payment_actors.call(payment_id, move || async move {
        let group = [one];
        let outcome = in_actors(&st, &group, &[payment_id]).await;
        (group, outcome)
    });
    let st = state.clone();
    tokio::spawn(async move {
        match queued.await {
            Ok(([one], Ok(outcome))) if !outcome.missing.is_empty() => {
                let _ = done(
                    &one.event_id,
                    apply_unnamed(&st, &one.event_id, one.event).await,
                );
            }
            Ok((_, Ok(_))) => {}
            Ok(([one], Err(error))) => {
                tracing::warn!(event_id = one.event_id, %error, "processor event not applied");
            }
            Err(error) => tracing::warn!(payment_id, %error, "processor event not applied"),
        }
    });
}

/// An event naming no payment of ours in its metadata: its payment is looked up by the
/// processor's ids; account-level events need none.
async fn apply_unnamed(state: &AppState, event_id: &str, event: Event) -> FlowResult<()> {
    match payment_by_processor_ids(state, &event).await? {
        Some(payment_id) => {
            let one = [ForPayment {
                event_id: event_id.to_owned(),
                event,
                payment_id,
            }];
            let outcome = apply_together(state, &one, ALONE).await?;
            if !outcome.busy.is_empty() {
                Err(FlowError::unavailable("The payment's actor stayed busy"))
            } else if !outcome.missing.is_empty() {
                finish(state, event_id, "no matching payment").await
            } else {
                Ok(())
            }
        }
        None if is_account_level(&event.kind) => apply_account_event(state, event_id, &event).await,
        None => finish(state, event_id, "no matching payment").await,
    }
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

/// Marks an event processed without effects.
async fn finish(state: &AppState, event_id: &str, note: &str) -> FlowResult<()> {
    let mut conn = state.db.conn().await?;
    processor_events::mark_processed(conn.exec(), event_id, None, Some(note), state.clock.now())
        .await?;
    Ok(())
}

/// Our payment id in the metadata of an event's object, when it carries one.
fn metadata_payment_id(object: &Value) -> Option<i64> {
    object["metadata"]["payment_id"]
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

/// How long a group waits for a payment's actor busy with another job before it goes on
/// without that payment's event.
const PATIENCE: std::time::Duration = std::time::Duration::from_millis(100);

/// How long an event alone waits for its payment's actor.
const ALONE: std::time::Duration = std::time::Duration::from_secs(3600);

/// What applying a group came to, by the events' positions in it.
#[derive(Debug, Default)]
struct Outcome {
    /// The payment does not exist: nothing was done.
    missing: Vec<usize>,
    /// The payment's actor was busy past the patience: nothing was done.
    busy: Vec<usize>,
}

/// Applies events of distinct payments in all their payments' actors at once (those free
/// within `patience`): see [`in_actors`].
async fn apply_together(
    state: &AppState,
    group: &[ForPayment],
    patience: std::time::Duration,
) -> FlowResult<Outcome> {
    let ids: Vec<i64> = group.iter().map(|g| g.payment_id).collect();
    escrow::in_payment_actors(state, &ids, patience, |held| async move {
        in_actors(state, group, &held).await
    })
    .await
}

/// Applies the events whose payments' actors are held: what needs the processor first, then
/// one transaction with every event's effects and processed mark. Events applied already are
/// left alone.
async fn in_actors(state: &AppState, group: &[ForPayment], held: &[i64]) -> FlowResult<Outcome> {
    let mut outcome = Outcome::default();
    let (found, applied) = {
        let event_ids: Vec<&str> = group
            .iter()
            .filter(|g| held.contains(&g.payment_id))
            .map(|g| g.event_id.as_str())
            .collect();
        let mut conn = state.db.conn().await?;
        let found = payments::find_many(conn.exec(), held).await?;
        (
            found,
            processor_events::processed_among(conn.exec(), &event_ids).await?,
        )
    };
    let mut work = Vec::with_capacity(group.len());
    for (index, one) in group.iter().enumerate() {
        if !held.contains(&one.payment_id) {
            outcome.busy.push(index);
            continue;
        }
        let Some(y) = found.iter().find(|y| y.id == one.payment_id) else {
            outcome.missing.push(index);
            continue;
        };
        if applied.contains(&one.event_id) {
            continue;
        }
        work.push((one, y));
    }
    if work.is_empty() {
        return Ok(outcome);
    }
    // What needs the network is asked before the transaction opens, for every event at once
    // (a charge's details are one call each).
    let asked = futures_util::future::try_join_all(
        work.iter()
            .map(|(one, y)| ask_processor(state, &one.event, y)),
    )
    .await?;
    let work: Vec<_> = work
        .into_iter()
        .zip(asked)
        .map(|((one, y), authorisation)| (one, y, authorisation))
        .collect();
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    let projects: Vec<i64> = work.iter().map(|(_, y, _)| y.project_id).collect();
    tx.lock_all(LockScope::Project, &projects).await?;
    // Claimed (marked applied) first: an event applied meanwhile by another instance, which
    // took the same locks, is not claimed, and left as it is.
    let claims: Vec<(&str, i64)> = work
        .iter()
        .map(|(one, y, _)| (one.event_id.as_str(), y.id))
        .collect();
    let claimed = processor_events::claim_all(tx.exec(), &claims, now).await?;
    let mut notes: Vec<(&str, &str)> = Vec::new();
    // Holds (the usual event) are applied together: those waiting are applied before any
    // other event's effects, so the effects keep the group's order.
    let mut holds: Vec<(&str, escrow::Hold)> = Vec::new();
    for (one, y, authorisation) in &work {
        if !claimed.contains(&one.event_id) {
            continue;
        }
        if let Some(hold) = as_hold(y, authorisation.as_ref()) {
            holds.push((&one.event_id, hold));
            continue;
        }
        hold_waiting(&mut tx, &mut holds, &mut notes, now).await?;
        if let Some(note) = effects(&mut tx, &one.event, y, authorisation.as_ref(), now).await? {
            notes.push((&one.event_id, note));
        }
    }
    hold_waiting(&mut tx, &mut holds, &mut notes, now).await?;
    processor_events::note_all(tx.exec(), &notes).await?;
    state.commit(tx).await?;
    Ok(outcome)
}

/// The hold an authorisation asks for: the processor authorised the money of a payment that
/// waits for it (`ask_processor` reads the authorisation only for such a payment).
fn as_hold<'a>(y: &'a Payment, authorisation: Option<&'a Authorised>) -> Option<escrow::Hold<'a>> {
    authorisation
        .filter(|a| escrow::is_authorised(&a.intent))
        .map(|a| escrow::Hold {
            payment: y,
            intent: &a.intent,
            capture_before: a.capture_before,
            receipt_url: a.receipt_url.as_deref(),
        })
}

/// Applies the `holds` waiting (by their events' ids), together, and notes the events whose
/// payment was no longer pending.
async fn hold_waiting<'a>(
    tx: &mut Tx,
    holds: &mut Vec<(&'a str, escrow::Hold<'_>)>,
    notes: &mut Vec<(&'a str, &'static str)>,
    now: DateTime<Utc>,
) -> FlowResult<()> {
    if holds.is_empty() {
        return Ok(());
    }
    let (events, holds): (Vec<&str>, Vec<escrow::Hold>) = std::mem::take(holds).into_iter().unzip();
    let held = escrow::hold_all_locked_in_tx(tx, &holds, now).await?;
    for (event_id, held) in events.into_iter().zip(held) {
        if !held {
            notes.push((event_id, "payment no longer pending"));
        }
    }
    Ok(())
}

/// What applying `event` to `y` needs from the processor, asked before the transaction.
async fn ask_processor(
    state: &AppState,
    event: &Event,
    y: &Payment,
) -> FlowResult<Option<Authorised>> {
    Ok(match event.kind.as_str() {
        "payment_intent.succeeded" | "payment_intent.amount_capturable_updated"
            if y.status == PaymentStatus::Pending
                || (y.status == PaymentStatus::Disputed && y.held_at.is_none()) =>
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
                release_lost_authorisation(state, y).await;
            }
            None
        }
        _ => None,
    })
}

/// The effects of `event` on `y`, in a transaction that holds the project's lock (holds are
/// applied together, by [`hold_waiting`]).
async fn effects(
    tx: &mut Tx,
    event: &Event,
    y: &Payment,
    authorisation: Option<&Authorised>,
    now: DateTime<Utc>,
) -> FlowResult<Note> {
    match event.kind.as_str() {
        "payment_intent.succeeded" | "payment_intent.amount_capturable_updated" => {
            on_authorised(tx, event, y, authorisation, now).await
        }
        "payment_intent.payment_failed" | "payment_intent.canceled" => {
            on_intent_failed(tx, event, y, now).await
        }
        "charge.refunded" => on_charge_refunded(tx, y, now).await,
        "transfer.created" => on_transfer_created(tx, event, y, now).await,
        "transfer.failed" => on_transfer_failed(tx, event, y, now).await,
        "charge.dispute.created" => on_dispute_created(tx, event, y, now).await,
        "charge.dispute.updated" => on_dispute_updated(tx, event, now).await,
        "charge.dispute.closed" => on_dispute_closed(tx, event, y, now).await,
        _ => Ok(Some("event type not used")),
    }
}

/// A chargeback lost on money authorised but never captured: the card holder got it back
/// through the bank, so the authorisation is let go rather than left to lapse (a capture
/// afterwards would take the money twice). A failure is logged; the authorisation then
/// lapses on its own.
async fn release_lost_authorisation(state: &AppState, y: &Payment) {
    if !y.status.may_hold_money() {
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

/// `payment_intent.succeeded` / `amount_capturable_updated` that holds nothing: the payment
/// is past `pending` (`held` from `pending`, whichever comes first, is [`hold_waiting`]'s,
/// DESIGN §5) or the intent not authorised, so only the capturable amount is noted.
async fn on_authorised(
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
                [DisputeStatus::Open, DisputeStatus::InReview],
                DisputeStatus::InReview,
                &dispute.status,
                now,
            )
            .await?
        }
        "needs_response" | "warning_needs_response" => {
            disputes::follow_processor(
                tx.exec(),
                ours.id,
                [DisputeStatus::Open, DisputeStatus::Open],
                DisputeStatus::Open,
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
async fn apply_account_event(state: &AppState, event_id: &str, event: &Event) -> FlowResult<()> {
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
    if !processor_events::mark_processed(tx.exec(), event_id, None, None, now).await? {
        tx.rollback().await?;
        return Ok(());
    }
    state.commit(tx).await?;
    Ok(())
}
