//! Escrow: money authorised by the company is `held` (manual capture), captured and
//! transferred to the expert minus the commission on release, or given back on refund.
//!
//! Every change of a payment driven by the processor runs in that payment's actor
//! (`AppState::payment_actors`); releases start in the project's actor and wait for the
//! payment's (the lock order of DESIGN §3). Network calls happen outside transactions; each
//! state change is a conditional update, so a second instance changes nothing twice, and each
//! call to the processor carries an idempotency key derived from the payment id.

use std::future::Future;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::domain::money::minor_to_number;
use crate::domain::project::{format_minor, money_text};
use crate::domain::user::Role;
use crate::integrations::processor::ProcessorError;
use crate::state::AppState;
use crate::store::events::{self, NewEvent};
use crate::store::milestones;
use crate::store::payments::{self, Payment};
use crate::store::projects::{self, Project};
use crate::store::{Tx, users};
use crate::workflows::error::{FlowError, FlowResult};

mod hold;
mod processor_effects;
mod refund;
mod release;
mod transfer;

pub use hold::*;
pub(crate) use processor_effects::*;
pub use refund::*;
pub use release::*;
pub use transfer::*;

/// What approving a milestone produced.
#[derive(Debug, Clone)]
pub struct Release {
    /// The payment released (captured; transferred or deferred).
    pub payment: Payment,
    /// The next milestone's payment, `pending`, when a milestone is left.
    pub next_payment: Option<Payment>,
}

/// Who asked for the release.
#[derive(Debug, Clone, Copy)]
pub enum ReleaseTrigger {
    /// The company approved this delivery (`PUT /api/milestones/deliveries/{id}/review`).
    DeliveryApproved { delivery_id: i64 },
    /// The company approved the milestone directly (`POST /api/milestones/{id}/approve`).
    MilestoneApproved,
    /// `POST /api/payments/release` or `release-and-charge-next`.
    PaymentRelease,
}

/// Why a payment is refunded.
#[derive(Debug, Clone, Copy)]
pub enum RefundCause {
    /// The milestone was rejected for the third time and the project cancelled.
    MilestoneCancelled,
    /// An administrator refunded it.
    Admin,
    /// A dispute was decided for the company.
    DisputeResolved,
}

impl RefundCause {
    fn reason(self) -> &'static str {
        match self {
            Self::MilestoneCancelled => "milestone_cancelled",
            Self::Admin => "admin_refund",
            Self::DisputeResolved => "dispute_resolved",
        }
    }
}

/// Runs `job` in payment `payment_id`'s actor.
pub async fn in_payment_actor<T, F, Fut>(state: &AppState, payment_id: i64, job: F) -> FlowResult<T>
where
    F: FnOnce(AppState) -> Fut + Send + 'static,
    Fut: Future<Output = FlowResult<T>> + 'static,
    T: Send + 'static,
{
    let st = state.clone();
    state
        .payment_actors
        .call(payment_id, move || job(st))
        .await?
}

/// Runs `job` while it holds the actors of `payment_ids` at once: for each payment held, as
/// if it were one job of its actor (`actors::Registry::call_together`). `job` runs on the
/// caller's task and is given the payments it holds: those whose actor was free within
/// `patience`.
pub async fn in_payment_actors<T, F, Fut>(
    state: &AppState,
    payment_ids: &[i64],
    patience: std::time::Duration,
    job: F,
) -> T
where
    F: FnOnce(Vec<i64>) -> Fut,
    Fut: Future<Output = T>,
{
    state
        .payment_actors
        .call_together(payment_ids, patience, job)
        .await
}

/// A processor failure as the caller sees it: refused by the processor (409 with its code)
/// or unreachable (503).
pub fn processor_failure(what: &str, error: &ProcessorError) -> FlowError {
    tracing::warn!(%error, "processor call failed: {what}");
    match error {
        ProcessorError::Api { status, .. } if *status < 500 && *status != 429 => {
            FlowError::conflict(
                "PROCESSOR_REFUSED",
                format!("The payment processor refused to {what}"),
            )
        }
        _ => FlowError::unavailable("The payment processor is unavailable; try again"),
    }
}

/// The transfers of payment `y` that failed at the processor (`transfer.failed`), as its
/// metadata records them.
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

pub(crate) async fn load(state: &AppState, payment_id: i64) -> FlowResult<Payment> {
    let mut conn = state.db.conn().await?;
    payments::find(conn.exec(), payment_id)
        .await?
        .ok_or_else(|| FlowError::not_found("No such payment"))
}

/// Records a payment's domain event in `tx` (aggregate `payment`).
pub(crate) async fn record(
    tx: &mut Tx,
    kind: &str,
    payment_id: i64,
    payload: Value,
    now: DateTime<Utc>,
) -> FlowResult<i64> {
    Ok(events::record(
        tx.exec(),
        NewEvent {
            kind,
            aggregate: "payment",
            aggregate_id: Some(payment_id),
            payload,
        },
        now,
    )
    .await?)
}

/// The people and words around a payment, for notifications and e-mails.
pub(crate) struct Parties {
    pub project: Project,
    pub milestone_title: String,
    pub company: Option<users::Contact>,
    pub expert: Option<users::Contact>,
}

impl Parties {
    pub async fn load(tx: &mut Tx, y: &Payment) -> FlowResult<Self> {
        let project = projects::find(tx.exec(), y.project_id)
            .await?
            .ok_or_else(|| FlowError::not_found("No such project"))?;
        let milestone_title = match y.milestone_id {
            Some(id) => milestones::find(tx.exec(), id)
                .await?
                .map(|m| m.title)
                .unwrap_or_default(),
            None => String::new(),
        };
        let company = match y.company_id {
            Some(id) => users::contact(tx.exec(), id, Role::Empresa).await?,
            None => None,
        };
        let expert = match y.expert_id {
            Some(id) => users::contact(tx.exec(), id, Role::Experto).await?,
            None => None,
        };
        Ok(Self {
            project,
            milestone_title,
            company,
            expert,
        })
    }

    /// What notifications carry to point at the payment.
    pub fn data(&self, y: &Payment) -> Value {
        payment_data(y, &self.project.title)
    }

    /// The context of the payment e-mails.
    pub fn mail(&self, to: &users::Contact, y: &Payment, amount_minor: i64) -> Value {
        payment_mail(
            to,
            y,
            &self.project.title,
            &self.milestone_title,
            amount_minor,
        )
    }
}

/// [`Parties::data`] from the project's title alone.
pub(crate) fn payment_data(y: &Payment, project_title: &str) -> Value {
    json!({"payment_id": y.id, "project_id": y.project_id, "milestone_id": y.milestone_id,
           "project_title": project_title, "amount": minor_to_number(y.amount_minor),
           "currency": y.currency})
}

/// [`Parties::mail`] from the titles alone.
pub(crate) fn payment_mail(
    to: &users::Contact,
    y: &Payment,
    project_title: &str,
    milestone_title: &str,
    amount_minor: i64,
) -> Value {
    json!({"name": to.name, "project_title": project_title,
           "project_id": y.project_id, "milestone_title": milestone_title,
           "amount": format_minor(amount_minor),
           "currency": y.currency.to_uppercase()})
}

// ---------------------------------------------------------------------------------------
// Held: the money is authorised.
// ---------------------------------------------------------------------------------------
