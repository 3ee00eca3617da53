//! The money audit: every payment recorded in a window, with its transfer and refund, held
//! against the processor's own objects (`domain::money_audit` names the invariants). Beside
//! the reconciliation (which corrects stale `pending`/`held` records), this only reports; a
//! daily job runs it over the last two days and alerts the administrators.

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;
use serde_json::json;

use crate::domain::money_audit::{
    AtProcessor, IntentFacts, Mismatch, Recorded, TransferFacts, check,
};
use crate::domain::payment::PaymentStatus;
use crate::integrations::mail::Template;
use crate::integrations::processor::ProcessorError;
use crate::state::AppState;
use crate::store::events::{self, NewEvent};
use crate::store::{payments, users};
use crate::workflows::emails::email;
use crate::workflows::error::{FlowError, FlowResult};
use crate::workflows::notify;

pub const MONEY_AUDIT: &str = "money_audit";

/// Mismatches found by the daily runs of this process, for `/metrics`.
pub static MISMATCHES_FOUND: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// At most this many payments per audit (the window is the caller's to narrow).
const MAX_PAYMENTS: i64 = 5_000;

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct PaymentMismatch {
    pub payment_id: i64,
    pub project_id: i64,
    #[schema(value_type = String)]
    pub status: PaymentStatus,
    #[serde(flatten)]
    pub mismatch: Mismatch,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AuditReport {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub payments_checked: usize,
    pub mismatches: Vec<PaymentMismatch>,
}

fn unavailable(e: ProcessorError) -> FlowError {
    tracing::warn!(error = %e, "processor unavailable during the money audit");
    FlowError::unavailable("The payment processor is unavailable; try the audit again")
}

/// An object the processor does not know is `None`; any other failure stops the audit.
fn found<T>(answer: Result<T, ProcessorError>) -> FlowResult<Option<T>> {
    match answer {
        Ok(object) => Ok(Some(object)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(unavailable(e)),
    }
}

pub async fn audit(
    state: &AppState,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> FlowResult<AuditReport> {
    if from >= to {
        return Err(FlowError::invalid("from", "must be before `to`"));
    }
    let recorded = {
        let mut conn = state.db.conn().await?;
        payments::touched_between(conn.exec(), from, to, MAX_PAYMENTS).await?
    };
    let client = &state.processor.client;
    let mut mismatches = Vec::new();
    for y in &recorded {
        let intent = match &y.processor_payment_intent_id {
            Some(id) => found(client.retrieve_payment_intent(id).await)?,
            None => None,
        };
        let charge_refunded = match intent
            .as_ref()
            .and_then(|i| i.latest_charge.as_ref())
            .map(|c| c.id().to_owned())
        {
            Some(charge) if y.status == PaymentStatus::Refunded => {
                found(client.retrieve_charge(&charge).await)?.map(|c| c.amount_refunded)
            }
            _ => None,
        };
        let transfer = match &y.processor_transfer_id {
            Some(id) => found(client.retrieve_transfer(id).await)?,
            None => None,
        };
        let rec = Recorded {
            status: y.status,
            amount_minor: y.amount_minor,
            commission_minor: y.commission_minor,
            payout_status: y.payout_status,
            intent_id: y.processor_payment_intent_id.as_deref(),
            transfer_id: y.processor_transfer_id.as_deref(),
        };
        let at = AtProcessor {
            intent: intent.as_ref().map(|i| IntentFacts {
                status: &i.status,
                amount: i.amount,
                amount_received: i.amount_received,
            }),
            charge_refunded,
            transfer: transfer.as_ref().map(|t| TransferFacts {
                amount: t.amount,
                amount_reversed: t.amount_reversed,
            }),
        };
        mismatches.extend(
            check(&rec, &at)
                .into_iter()
                .map(|mismatch| PaymentMismatch {
                    payment_id: y.id,
                    project_id: y.project_id,
                    status: y.status,
                    mismatch,
                }),
        );
    }
    Ok(AuditReport {
        from,
        to,
        payments_checked: recorded.len(),
        mismatches,
    })
}

/// The daily run: the last two days (so a late change is seen twice); when anything does
/// not add up, every administrator is notified and e-mailed.
pub async fn daily(state: &AppState) -> FlowResult<usize> {
    let now = state.clock.now();
    let report = audit(state, now - Duration::days(2), now).await?;
    let found = report.mismatches.len();
    MISMATCHES_FOUND.fetch_add(found as u64, std::sync::atomic::Ordering::Relaxed);
    if found == 0 {
        return Ok(0);
    }
    tracing::error!(
        mismatches = found,
        "the money audit found records that do not match the processor"
    );
    let ids: Vec<i64> = report.mismatches.iter().map(|m| m.payment_id).collect();
    let message = format!(
        "The daily money audit found {found} mismatch(es) with the processor, on payments {ids:?}. See GET /api/admin/payments/audit."
    );
    let mut conn = state.db.conn().await?;
    let mails: Vec<_> = users::administrator_contacts(conn.exec())
        .await?
        .into_iter()
        .map(|a| {
            email(
                &a.email,
                Template::AdminAlert,
                json!({"name": a.name, "title": "Money audit mismatch", "message": message}),
            )
        })
        .collect();
    let notify = [notify::for_admins(
        "money_audit_mismatch",
        "Money audit mismatch",
        &message,
        json!({"payment_ids": ids}),
    )];
    events::record(
        conn.exec(),
        NewEvent {
            kind: "payments.audit_mismatch",
            aggregate: "payment",
            aggregate_id: None,
            payload: json!({"payment_ids": ids, "notify": notify, "email": mails}),
        },
        now,
    )
    .await?;
    drop(conn);
    state.outbox.wake();
    Ok(found)
}
