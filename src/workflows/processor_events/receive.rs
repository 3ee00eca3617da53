//! Receiving: a delivery's signature is checked, its event handed to the receipts' writer,
//! which stores the events waiting together, answers each receipt and queues the new events
//! for the applier ([`super::apply`]).

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::oneshot;

use super::apply::{APPLY, GROUP, metadata_payment_id};
use crate::integrations::processor::Event;
use crate::integrations::processor::webhook::{self, DEFAULT_TOLERANCE_SECS};
use crate::state::{AppState, Asked};
use crate::store::processor_events::{self, NewEvent, StoredEvent};
use crate::workflows::error::{FlowError, FlowResult};

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
