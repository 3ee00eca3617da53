//! Applying: the applier's lanes and the sweep take stored events, the events of distinct
//! payments are applied together in all their payments' actors and one transaction, and each
//! event is sent to its kind's effects (in `escrow`, `chargebacks`, `connect`).

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::Value;

use crate::domain::dispute::ChargebackStatus;
use crate::domain::payment::PaymentStatus;
use crate::integrations::processor::Event;
use crate::state::AppState;
use crate::store::payments::{self, Payment};
use crate::store::processor_events::{self, StoredEvent};
use crate::store::{LockScope, Tx};
use crate::workflows::error::{FlowError, FlowResult};
use crate::workflows::escrow::{self, Authorised, charge_details};
use crate::workflows::processor_effect::{Note, bad_object};
use crate::workflows::{chargebacks, connect};

/// The name of the applier's job, which applies the events receipts queue.
pub const APPLY: &str = "processor_event_apply";

/// At most this many events are applied together (in one transaction).
pub(super) const GROUP: usize = 64;

/// Lanes of the applier, applied side by side: a lane's groups go one after the other, so a
/// lane alone would wait on each statement in turn. A payment's events share a lane (by its
/// id), which keeps them in order.
pub const LANES: usize = 4;

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
pub(super) fn metadata_payment_id(object: &Value) -> Option<i64> {
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
            if event
                .dispute()
                .is_ok_and(|d| d.state() == ChargebackStatus::Lost)
            {
                chargebacks::release_lost_authorisation(state, y).await;
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
            escrow::on_authorised(tx, event, y, authorisation, now).await
        }
        "payment_intent.payment_failed" | "payment_intent.canceled" => {
            escrow::on_intent_failed(tx, event, y, now).await
        }
        "charge.refunded" => escrow::on_charge_refunded(tx, y, now).await,
        "transfer.created" => escrow::on_transfer_created(tx, event, y, now).await,
        "transfer.failed" => escrow::on_transfer_failed(tx, event, y, now).await,
        "charge.dispute.created" => chargebacks::on_dispute_created(tx, event, y, now).await,
        "charge.dispute.updated" => chargebacks::on_dispute_updated(tx, event, now).await,
        "charge.dispute.closed" => chargebacks::on_dispute_closed(tx, event, y, now).await,
        _ => Ok(Some("event type not used")),
    }
}

/// An account-level event: its effects ([`connect::on_account_event`]) and its processed mark,
/// in a transaction of its own.
async fn apply_account_event(state: &AppState, event_id: &str, event: &Event) -> FlowResult<()> {
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    connect::on_account_event(&mut tx, event, now).await?;
    if !processor_events::mark_processed(tx.exec(), event_id, None, None, now).await? {
        tx.rollback().await?;
        return Ok(());
    }
    state.commit(tx).await?;
    Ok(())
}
