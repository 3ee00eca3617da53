//! Escrow: money authorised by the company is `held` (manual capture), captured and
//! transferred to the expert minus the commission on release, or given back on refund.
//!
//! Every change of a payment driven by the processor runs in that payment's actor
//! (`AppState::payment_actors`); releases start in the project's actor and wait for the
//! payment's (the lock order of DESIGN §3). Network calls happen outside transactions; each
//! state change is a conditional update, so a second instance changes nothing twice, and each
//! call to the processor carries an idempotency key derived from the payment id.

use std::collections::BTreeMap;
use std::future::Future;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::domain::commission;
use crate::domain::money::minor_to_number;
use crate::domain::project::format_minor;
use crate::integrations::mail::Template;
use crate::integrations::processor::{
    CreateRefund, CreateTransfer, CreateTransferReversal, PaymentIntent, ProcessorError,
    RefundTarget,
};
use crate::state::AppState;
use crate::store::events::{self, NewEvent};
use crate::store::milestones;
use crate::store::payments::{self, Authorisation, NewPayment, Payment, ReleasedFrom, Split};
use crate::store::projects::{self, Project};
use crate::store::{LockScope, Tx, commission as rates, profiles, users};
use crate::workflows::emails::email;
use crate::workflows::error::{FlowError, FlowResult};
use crate::workflows::notify::{for_admins, for_user};

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

/// An amount as people read it: `1250.00 EUR`.
pub(crate) fn money_text(minor: i64, currency: &str) -> String {
    format!("{} {}", format_minor(minor), currency.to_uppercase())
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
            Some(id) => users::contact(tx.exec(), id, "empresa").await?,
            None => None,
        };
        let expert = match y.expert_id {
            Some(id) => users::contact(tx.exec(), id, "experto").await?,
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
        json!({"payment_id": y.id, "project_id": y.project_id, "milestone_id": y.milestone_id,
               "project_title": self.project.title, "amount": minor_to_number(y.amount_minor),
               "currency": y.currency})
    }

    /// The context of the payment e-mails.
    pub fn mail(&self, to: &users::Contact, y: &Payment, amount_minor: i64) -> Value {
        json!({"name": to.name, "project_title": self.project.title,
               "project_id": y.project_id, "milestone_title": self.milestone_title,
               "amount": format_minor(amount_minor),
               "currency": y.currency.to_uppercase()})
    }
}

// ---------------------------------------------------------------------------------------
// Held: the money is authorised.
// ---------------------------------------------------------------------------------------

/// `pending` → `held` from what the processor says of the intent (`requires_capture`, or
/// `succeeded` when captured already): `held_at`, the charge, the milestone `awaiting_payment`
/// → `pending`, the project `in_progress` on its first held payment, the expert told.
/// `false` when the payment was not `pending` (nothing changes: never backwards; a payment
/// frozen by a dispute before it was funded only keeps the authorisation).
pub(crate) async fn hold_in_tx(
    tx: &mut Tx,
    y: &Payment,
    intent: &PaymentIntent,
    capture_before: Option<DateTime<Utc>>,
    receipt_url: Option<&str>,
    now: DateTime<Utc>,
) -> FlowResult<bool> {
    tx.lock(LockScope::Project, y.project_id).await?;
    let mut metadata = y.payment_metadata.0.clone();
    metadata["amount_capturable"] = json!(intent.amount_capturable);
    let auth = Authorisation {
        charge_id: intent.latest_charge_id(),
        capture_before,
        receipt_url,
    };
    if y.status == "disputed" {
        // Frozen by a dispute before it was funded: the money is kept for the decision.
        if payments::record_authorisation_while_disputed(tx.exec(), y.id, &auth, &metadata, now)
            .await?
            && let Some(m) = y.milestone_id
        {
            milestones::transition(tx.exec(), m, "awaiting_payment", "pending", now).await?;
        }
        return Ok(false);
    }
    if !payments::mark_held(tx.exec(), y.id, &auth, &metadata, now).await? {
        return Ok(false);
    }
    if let Some(m) = y.milestone_id {
        milestones::transition(tx.exec(), m, "awaiting_payment", "pending", now).await?;
    }
    projects::transition(tx.exec(), y.project_id, "assigned", "in_progress", now).await?;
    let parties = Parties::load(tx, y).await?;
    let mut notify = Vec::new();
    let mut mails = Vec::new();
    if let Some(expert) = &parties.expert {
        notify.push(for_user(
            expert.id,
            "payment_held",
            "Payment held in escrow",
            &format!(
                "{} for \"{}\" is held in escrow: you can start the milestone.",
                money_text(y.amount_minor, &y.currency),
                parties.project.title
            ),
            parties.data(y),
        ));
        mails.push(email(
            &expert.email,
            Template::PaymentHeld,
            parties.mail(expert, y, y.amount_minor),
        ));
    }
    let payload = json!({"payment_id": y.id, "project_id": y.project_id,
                         "milestone_id": y.milestone_id, "notify": notify, "email": mails});
    record(tx, "payment.held", y.id, payload, now).await?;
    Ok(true)
}

/// The authorisation's details from the intent's charge: when it lapses, its receipt.
pub(crate) async fn charge_details(
    state: &AppState,
    intent: &PaymentIntent,
) -> (Option<DateTime<Utc>>, Option<String>) {
    let Some(charge_id) = intent.latest_charge_id() else {
        return (None, None);
    };
    let charge = match intent.latest_charge.as_ref().and_then(|c| c.object()) {
        Some(c) => Some(c.clone()),
        None => state.processor.client.retrieve_charge(charge_id).await.ok(),
    };
    match charge {
        Some(c) => (
            c.capture_before()
                .and_then(|t| DateTime::<Utc>::from_timestamp(t, 0)),
            c.receipt_url.clone(),
        ),
        None => (None, None),
    }
}

/// Whether the intent's money is authorised or taken.
pub(crate) fn is_authorised(intent: &PaymentIntent) -> bool {
    matches!(intent.status.as_str(), "requires_capture" | "succeeded")
}

/// `POST /api/payments/sync-status`: asks the processor and moves a `pending` payment to
/// `held` (or `failed` when its intent was cancelled). Answers the payment as stored.
pub async fn sync_status(state: &AppState, payment_id: i64) -> FlowResult<Payment> {
    in_payment_actor(state, payment_id, move |st| async move {
        let y = load(&st, payment_id).await?;
        let Some(intent_id) = y.processor_payment_intent_id.clone() else {
            return Ok(y);
        };
        if y.status != "pending" {
            return Ok(y);
        }
        let intent = st
            .processor
            .client
            .retrieve_payment_intent(&intent_id)
            .await
            .map_err(|e| processor_failure("report the payment", &e))?;
        let now = st.clock.now();
        if is_authorised(&intent) {
            let (capture_before, receipt) = charge_details(&st, &intent).await;
            let mut tx = st.db.begin().await?;
            hold_in_tx(
                &mut tx,
                &y,
                &intent,
                capture_before,
                receipt.as_deref(),
                now,
            )
            .await?;
            tx.commit().await?;
            st.outbox.wake();
        } else if intent.status == "canceled" {
            let mut tx = st.db.begin().await?;
            payments::fail_pending(tx.exec(), y.id, "canceled", now).await?;
            tx.commit().await?;
        }
        load(&st, payment_id).await
    })
    .await
}

// ---------------------------------------------------------------------------------------
// Release: capture, commission, transfer, next milestone.
// ---------------------------------------------------------------------------------------

/// Approves the milestone and releases its held payment: capture, commission, transfer (or
/// deferral), the delivery and milestone `approved`, the next milestone's payment. The
/// caller must already run inside the project's actor.
pub async fn release_milestone(
    state: &AppState,
    actor_id: i64,
    project_id: i64,
    milestone_id: i64,
    trigger: ReleaseTrigger,
) -> FlowResult<Release> {
    let payment = {
        let mut conn = state.db.conn().await?;
        let m = milestones::find(conn.exec(), milestone_id)
            .await?
            .filter(|m| m.project_id == project_id)
            .ok_or_else(|| FlowError::not_found("No such milestone in this project"))?;
        payments::open_of_milestone(conn.exec(), m.id)
            .await?
            .filter(|y| y.status == "held")
            .ok_or_else(|| {
                FlowError::conflict(
                    "PAYMENT_NOT_HELD",
                    "The milestone's payment is not held in escrow; it cannot be released",
                )
            })?
    };
    let delivery_id = match trigger {
        ReleaseTrigger::DeliveryApproved { delivery_id } => Some(delivery_id),
        _ => None,
    };
    let (payment, next) = in_payment_actor(state, payment.id, move |st| async move {
        release_in_actor(&st, payment.id, ReleasedFrom::Held, actor_id, delivery_id).await
    })
    .await?;
    Ok(with_next_intent(state, payment, next).await)
}

/// A release's answer, with the next milestone's intent created (after every commit; without
/// it the company funds later: initiate or intent details create it).
pub(crate) async fn with_next_intent(
    state: &AppState,
    payment: Payment,
    next: Option<Payment>,
) -> Release {
    let next_payment = match next {
        Some(next) => Some(
            match super::payments::ensure_intent(state, next.clone()).await {
                Ok(p) => p,
                Err(error) => {
                    tracing::warn!(payment_id = next.id, %error, "next intent not created yet");
                    next
                }
            },
        ),
        None => None,
    };
    Release {
        payment,
        next_payment,
    }
}

/// The whole release of one payment, in its actor: from `held` on approval, from `disputed`
/// when a dispute is decided for the expert (by `actor_id`, recorded as the reviewer).
pub(crate) async fn release_in_actor(
    state: &AppState,
    payment_id: i64,
    from: ReleasedFrom,
    actor_id: i64,
    delivery_id: Option<i64>,
) -> FlowResult<(Payment, Option<Payment>)> {
    let y = load(state, payment_id).await?;
    if y.status != from.as_str() {
        return Err(FlowError::conflict(
            "PAYMENT_NOT_HELD",
            format!(
                "The payment is {}; only a {} payment is released here",
                y.status,
                from.as_str()
            ),
        ));
    }
    let intent = capture(state, &y).await?;
    let split = split_for(state, &y).await?;
    let now = state.clock.now();

    let mut tx = state.db.begin().await?;
    tx.lock(LockScope::Project, y.project_id).await?;
    let changed = || FlowError::conflict("INVALID_STATE", "The payment changed; try again");
    let level = split.0.clone();
    let split_row = Split {
        expert_level: &level,
        commission_minor: split.1,
        expert_amount_minor: split.2,
    };
    if !payments::mark_released(
        tx.exec(),
        y.id,
        from,
        &split_row,
        intent.latest_charge_id(),
        now,
    )
    .await?
    {
        return Err(changed());
    }
    let milestone = match y.milestone_id {
        Some(id) => milestones::find(tx.exec(), id).await?,
        None => None,
    };
    // Authorised while disputed: the milestone never learnt it was funded.
    if let Some(m) = &milestone
        && from == ReleasedFrom::Disputed
    {
        milestones::transition(tx.exec(), m.id, "awaiting_payment", "pending", now).await?;
    }
    if let Some(m) = &milestone
        && !milestones::approve_with_delivery(tx.exec(), m.id, delivery_id, actor_id, now).await?
    {
        return Err(FlowError::conflict(
            "INVALID_STATE",
            "The milestone or its delivery is no longer waiting for approval",
        ));
    }
    let next = match &milestone {
        Some(m) => prepare_next(&mut tx, &y, m.position, now).await?,
        None => None,
    };
    let project = projects::find(tx.exec(), y.project_id)
        .await?
        .ok_or_else(changed)?;
    let open_left = milestones::has_unfinished(tx.exec(), y.project_id).await?;
    let to = if open_left {
        "in_progress"
    } else {
        "completed"
    };
    if project.status != to {
        for from in ["in_review", "in_progress", "assigned"] {
            if projects::transition(tx.exec(), y.project_id, from, to, now).await? {
                break;
            }
        }
    }
    let released = payments::find(tx.exec(), y.id).await?.ok_or_else(changed)?;
    let parties = Parties::load(&mut tx, &released).await?;
    let mut notify = Vec::new();
    let mut mails = Vec::new();
    if let Some(expert) = &parties.expert {
        notify.push(for_user(
            expert.id,
            "payment_released",
            "Payment released",
            &format!(
                "{} for \"{}\" was released to you.",
                money_text(split.2, &y.currency),
                parties.milestone_title
            ),
            parties.data(&released),
        ));
        mails.push(email(
            &expert.email,
            Template::PaymentReceived,
            parties.mail(expert, &released, split.2),
        ));
    }
    if let Some(company) = &parties.company {
        notify.push(for_user(
            company.id,
            "payment_released",
            "Payment released",
            &format!(
                "You released {} for \"{}\".",
                money_text(y.amount_minor, &y.currency),
                parties.milestone_title
            ),
            parties.data(&released),
        ));
        mails.push(email(
            &company.email,
            Template::PaymentReleased,
            parties.mail(company, &released, y.amount_minor),
        ));
    }
    if let Some(next) = &next {
        let title = milestones::find(tx.exec(), next.milestone_id.unwrap_or_default())
            .await?
            .map(|m| m.title)
            .unwrap_or_default();
        let data = json!({"payment_id": next.id, "project_id": next.project_id,
                          "milestone_id": next.milestone_id, "milestone_title": title});
        for party in [&parties.expert, &parties.company].into_iter().flatten() {
            notify.push(for_user(
                party.id,
                "milestone_awaiting_payment",
                "Next milestone awaiting payment",
                &format!(
                    "\"{title}\" of \"{}\" now waits for its payment.",
                    parties.project.title
                ),
                data.clone(),
            ));
        }
        if let Some(company) = &parties.company {
            let mut context = parties.mail(company, next, next.amount_minor);
            context["milestone_title"] = json!(title);
            mails.push(email(
                &company.email,
                Template::MilestoneAwaitingPayment,
                context,
            ));
        }
    }
    let payload = json!({
        "payment_id": y.id, "project_id": y.project_id, "milestone_id": y.milestone_id,
        "expert_level": level, "commission_minor": split.1, "expert_amount_minor": split.2,
        "next_payment_id": next.as_ref().map(|n| n.id), "project_completed": !open_left,
        "notify": notify, "email": mails,
    });
    record(&mut tx, "payment.released", y.id, payload, now).await?;
    tx.commit().await?;
    state.outbox.wake();

    let payment = transfer(state, released).await?;
    Ok((payment, next))
}

/// The next milestone after `position` waiting its turn becomes `awaiting_payment` with a
/// `pending` payment.
async fn prepare_next(
    tx: &mut Tx,
    y: &Payment,
    position: i64,
    now: DateTime<Utc>,
) -> FlowResult<Option<Payment>> {
    let Some(next) = milestones::next_after(tx.exec(), y.project_id, position).await? else {
        return Ok(None);
    };
    if next.status != "pending"
        || !milestones::transition(tx.exec(), next.id, "pending", "awaiting_payment", now).await?
    {
        return Ok(None);
    }
    let id = payments::insert_pending(
        tx.exec(),
        &NewPayment {
            project_id: y.project_id,
            milestone_id: Some(next.id),
            company_id: y.company_id,
            expert_id: y.expert_id,
            amount_minor: next.amount_minor,
            currency: &next.currency,
        },
        now,
    )
    .await?;
    Ok(payments::find(tx.exec(), id).await?)
}

/// Captures the payment's authorisation (once: an intent already `succeeded` was captured,
/// e.g. before its authorisation lapsed). Answers the captured intent.
async fn capture(state: &AppState, y: &Payment) -> FlowResult<PaymentIntent> {
    let intent_id = y.processor_payment_intent_id.as_deref().ok_or_else(|| {
        FlowError::conflict("PAYMENT_NOT_HELD", "The payment has no payment intent")
    })?;
    let client = &state.processor.client;
    let intent = client
        .retrieve_payment_intent(intent_id)
        .await
        .map_err(|e| processor_failure("report the payment", &e))?;
    match intent.status.as_str() {
        "succeeded" => Ok(intent),
        "requires_capture" => client
            .capture_payment_intent(intent_id, &format!("payment_{}_capture", y.id))
            .await
            .map_err(|e| processor_failure("capture the payment", &e)),
        other => Err(FlowError::conflict(
            "PAYMENT_NOT_CAPTURABLE",
            format!("The processor reports the payment as {other}; it cannot be captured"),
        )),
    }
}

/// The expert's level now, and the commission at that level's rate: (level, commission,
/// expert amount).
async fn split_for(state: &AppState, y: &Payment) -> FlowResult<(String, i64, i64)> {
    let mut conn = state.db.conn().await?;
    let level = match y.expert_id {
        Some(id) => profiles::find_by_user(conn.exec(), id, "experto")
            .await?
            .map(|p| p.expert_level),
        None => None,
    }
    .unwrap_or_else(|| "Global".to_owned());
    let known = commission::Level::parse(&level).unwrap_or(commission::Level::Global);
    let rate = rates::rate_bp_for(conn.exec(), known).await?;
    let level = known.as_str().to_owned();
    let (commission_minor, expert_minor) = commission::split(y.amount_minor, rate);
    Ok((level, commission_minor, expert_minor))
}

// ---------------------------------------------------------------------------------------
// Transfer to the expert.
// ---------------------------------------------------------------------------------------

/// Whether transfers can reach the expert: an onboarded, `active` connected account.
fn payout_account_active(p: &profiles::Profile) -> bool {
    p.processor_connect_status.as_deref() == Some(crate::workflows::connect::ACTIVE)
        && p.processor_connect_account_id.is_some()
}

/// Why a released payment's transfer cannot be made now.
fn transfer_blocker(y: &Payment, expert: Option<&profiles::Profile>) -> Option<&'static str> {
    let expert_amount = y.expert_amount_minor.unwrap_or(0);
    match expert {
        _ if expert_amount <= 0 => Some("expert_amount_not_positive"),
        None => Some("expert_profile_missing"),
        Some(p) if !p.fiscal_data_complete => Some("fiscal_data_incomplete"),
        Some(p) if !payout_account_active(p) => Some("processor_connect_not_active"),
        Some(_) => None,
    }
}

/// Transfers a `released` payment's expert amount to the expert's connected account, in the
/// payment's actor. Not possible now (account not active, fiscal data incomplete, nothing to
/// pay) → stays `released` with payout `pending` and the reason in its metadata; the platform
/// balance short or the processor failing → deferred the same way, for the retry job.
/// Answers the payment as stored afterwards.
pub(crate) async fn transfer(state: &AppState, y: Payment) -> FlowResult<Payment> {
    if y.status != "released" || y.payout_status != "pending" {
        return Ok(y);
    }
    let mut conn = state.db.conn().await?;
    let expert = match y.expert_id {
        Some(id) => profiles::find_by_user(conn.exec(), id, "experto").await?,
        None => None,
    };
    let now = state.clock.now();
    let mut metadata = y.payment_metadata.0.clone();
    if let Some(reason) = transfer_blocker(&y, expert.as_ref()) {
        if metadata["transfer_blocked"] != json!(reason) {
            metadata["transfer_blocked"] = json!(reason);
            let mut tx = state.db.begin().await?;
            payments::set_metadata(tx.exec(), y.id, &metadata, now).await?;
            let alert = for_admins(
                "payment_transfer_blocked",
                "Transfer waiting for intervention",
                &format!(
                    "Payment {} is released but cannot be transferred yet: {reason}.",
                    y.id
                ),
                json!({"payment_id": y.id, "project_id": y.project_id, "reason": reason}),
            );
            record(
                &mut tx,
                "payment.transfer_blocked",
                y.id,
                json!({"payment_id": y.id, "reason": reason, "notify": [alert]}),
                now,
            )
            .await?;
            tx.commit().await?;
            state.outbox.wake();
        }
        return load(state, y.id).await;
    }
    let destination = expert
        .and_then(|p| p.processor_connect_account_id)
        .unwrap_or_default();
    // The attempt's time names the key: the same attempt repeated (after a crash, its outcome
    // unknown) replays at the processor; a new attempt after a known failure gets a new time.
    // Milliseconds, so two deliberate attempts within a second still differ.
    let mut attempt = y.transfer_attempt_at.unwrap_or(now);
    if metadata["transfer_failed_attempt"] == json!(attempt.timestamp_millis())
        || y.transfer_attempt_at.is_none()
    {
        let after_previous = attempt + chrono::Duration::milliseconds(1);
        attempt = if now > after_previous {
            now
        } else {
            after_previous
        };
        payments::begin_transfer_attempt(conn.exec(), y.id, attempt).await?;
    }
    drop(conn);
    let mut meta = BTreeMap::new();
    meta.insert("payment_id".to_owned(), y.id.to_string());
    meta.insert("project_id".to_owned(), y.project_id.to_string());
    let made = state
        .processor
        .client
        .create_transfer(
            &CreateTransfer {
                amount: y.expert_amount_minor.unwrap_or(0),
                currency: y.currency.clone(),
                destination,
                transfer_group: Some(format!("project_{}", y.project_id)),
                source_transaction: None,
                metadata: meta,
            },
            &format!("transfer_{}_{}", y.id, attempt.timestamp_millis()),
        )
        .await;
    let mut tx = state.db.begin().await?;
    if let Some(obj) = metadata.as_object_mut() {
        obj.remove("transfer_blocked");
    }
    match made {
        Ok(t) => {
            if let Some(obj) = metadata.as_object_mut() {
                obj.remove("transfer_failed_attempt");
                obj.remove("transfer_error");
                obj.remove("transfer_deferred");
            }
            payments::set_metadata(tx.exec(), y.id, &metadata, now).await?;
            payments::mark_transferred(tx.exec(), y.id, &t.id, now).await?;
        }
        Err(error) => {
            let deferred = error.is_balance_insufficient();
            tracing::warn!(payment_id = y.id, %error, deferred, "transfer not made");
            metadata["transfer_failed_attempt"] = json!(attempt.timestamp_millis());
            metadata["transfer_error"] = json!(error.code().unwrap_or("processor_unavailable"));
            metadata["transfer_deferred"] = json!(deferred);
            payments::set_metadata(tx.exec(), y.id, &metadata, now).await?;
        }
    }
    tx.commit().await?;
    load(state, y.id).await
}

/// `POST /api/payments/retry-transfer/{id}` (administrators): a `released` payment with
/// payout `pending`, or a `held` one whose transfer failed (released again first, its
/// milestone and delivery approved again, by `admin_id`). The expert's account must be
/// `active`.
pub async fn retry_transfer(
    state: &AppState,
    admin_id: i64,
    payment_id: i64,
) -> FlowResult<Payment> {
    in_payment_actor(state, payment_id, move |st| async move {
        let y = load(&st, payment_id).await?;
        let eligible = matches!(
            (y.status.as_str(), y.payout_status.as_str()),
            ("held", "failed") | ("released", "pending")
        );
        if !eligible {
            return Err(FlowError::conflict(
                "TRANSFER_NOT_RETRYABLE",
                format!(
                    "Only a held payment whose payout failed or a released payment whose payout is pending can be retried; this one is {} with payout {}",
                    y.status, y.payout_status
                ),
            ));
        }
        require_connect_active(&st, y.expert_id).await?;
        let y = if y.status == "held" {
            let intent = capture(&st, &y).await?;
            let now = st.clock.now();
            let mut tx = st.db.begin().await?;
            tx.lock(LockScope::Project, y.project_id).await?;
            let level = y.expert_level_used.clone().unwrap_or_else(|| "Global".into());
            let commission_minor = y.commission_minor.unwrap_or(0);
            let split = Split {
                expert_level: &level,
                commission_minor,
                expert_amount_minor: y.amount_minor - commission_minor,
            };
            if !payments::mark_released(
                tx.exec(),
                y.id,
                ReleasedFrom::Held,
                &split,
                intent.latest_charge_id(),
                now,
            )
            .await?
            {
                return Err(FlowError::conflict("INVALID_STATE", "The payment changed; try again"));
            }
            if let Some(m) = y.milestone_id {
                milestones::approve_with_delivery(tx.exec(), m, None, admin_id, now).await?;
            }
            tx.commit().await?;
            load(&st, payment_id).await?
        } else {
            // A deliberate retry: a new attempt, so a new idempotency key.
            let mut metadata = y.payment_metadata.0.clone();
            metadata["transfer_failed_attempt"] =
                json!(y.transfer_attempt_at.map(|t| t.timestamp_millis()));
            let mut conn = st.db.conn().await?;
            payments::set_metadata(conn.exec(), y.id, &metadata, st.clock.now()).await?;
            load(&st, payment_id).await?
        };
        transfer(&st, y).await
    })
    .await
}

/// Refuses when the expert's connected account is not `active` (DESIGN errors table).
pub async fn require_connect_active(state: &AppState, expert_id: Option<i64>) -> FlowResult<()> {
    let mut conn = state.db.conn().await?;
    let active = match expert_id {
        Some(id) => profiles::find_by_user(conn.exec(), id, "experto")
            .await?
            .is_some_and(|p| payout_account_active(&p)),
        None => false,
    };
    if active {
        Ok(())
    } else {
        Err(FlowError::rule(
            "PROCESSOR_CONNECT_NOT_ACTIVE",
            "The expert's payout account is not active yet",
        ))
    }
}

// ---------------------------------------------------------------------------------------
// Refund.
// ---------------------------------------------------------------------------------------

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
    reason: Option<String>,
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
    if !matches!(y.status.as_str(), "held" | "released" | "disputed") {
        return Err(FlowError::conflict(
            "PAYMENT_NOT_REFUNDABLE",
            format!("The payment is {}; there is no money to refund", y.status),
        ));
    }
    let client = &state.processor.client;
    let mut metadata = y.payment_metadata.0.clone();
    // The expert's money first: a refund must never leave the platform paying twice.
    if y.payout_status == "transferred"
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
    let unfunded = y.status == "disputed" && y.held_at.is_none();
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
    let refund_id = match intent.status.as_str() {
        // Never captured: cancelling gives everything back (an authorisation is let go; a
        // disputed payment the company never paid can no longer be paid).
        status
            if status == "requires_capture"
                || (unfunded
                    && matches!(
                        status,
                        "requires_payment_method" | "requires_confirmation" | "requires_action"
                    )) =>
        {
            client
                .cancel_payment_intent(intent_id, &format!("payment_{}_cancel", y.id))
                .await
                .map_err(|e| processor_failure("cancel the payment", &e))?;
            None
        }
        "canceled" => None,
        "succeeded" => {
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
        other => {
            return Err(FlowError::conflict(
                "PAYMENT_NOT_REFUNDABLE",
                format!("The processor reports the payment as {other}; it cannot be refunded"),
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
    tx.commit().await?;
    state.outbox.wake();
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
        Ok(all) => all
            .into_iter()
            .filter(|y| y.status == "failed" && y.failure_reason.as_deref() == Some(reason)),
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
    if matches!(intent.status.as_str(), "canceled" | "succeeded") {
        return Ok(());
    }
    client
        .cancel_payment_intent(intent_id, &format!("payment_{}_cancel", y.id))
        .await
        .map(drop)
}

/// Tells the company and the expert, each in their own words, that a payment was refunded.
pub(crate) async fn announce_refund(
    tx: &mut Tx,
    y: &Payment,
    now: DateTime<Utc>,
) -> FlowResult<()> {
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

/// `POST /api/payments/initiate`: the company funds a milestone waiting for its payment. The
/// milestone must have no open payment and the expert's payout account must be `active`.
pub async fn initiate(
    state: &AppState,
    company_id: i64,
    admin: bool,
    project_id: i64,
    milestone_id: i64,
) -> FlowResult<Payment> {
    let st = state.clone();
    let payment = state
        .project_actors
        .call(project_id, move || async move {
            let now = st.clock.now();
            let mut tx = st.db.begin().await?;
            tx.lock(LockScope::Project, project_id).await?;
            let p = projects::find(tx.exec(), project_id)
                .await?
                .ok_or_else(|| FlowError::not_found("No such project"))?;
            if p.company_id != Some(company_id) && !admin {
                return Err(FlowError::forbidden(
                    "Only the project's company pays for it",
                ));
            }
            if p.status == "disputed" {
                return Err(FlowError::conflict(
                    "PROJECT_DISPUTED",
                    "The project is disputed; no payment starts until the dispute is resolved",
                ));
            }
            let m = milestones::find(tx.exec(), milestone_id)
                .await?
                .filter(|m| m.project_id == project_id)
                .ok_or_else(|| FlowError::not_found("No such milestone in this project"))?;
            if let Some(open) = payments::open_of_milestone(tx.exec(), m.id).await? {
                return Err(FlowError::conflict(
                    "PAYMENT_PENDING",
                    format!(
                        "The milestone already has payment {} ({}); fund that one",
                        open.id, open.status
                    ),
                ));
            }
            if !matches!(m.status.as_str(), "awaiting_payment" | "pending") {
                return Err(FlowError::conflict(
                    "INVALID_STATE",
                    format!(
                        "The milestone is {}; it does not wait for a payment",
                        m.status
                    ),
                ));
            }
            let expert_id = p.expert_id.ok_or_else(|| {
                FlowError::rule("NO_EXPERT", "The project has no expert selected yet")
            })?;
            require_connect_active(&st, Some(expert_id)).await?;
            if m.status == "pending" {
                milestones::transition(tx.exec(), m.id, "pending", "awaiting_payment", now).await?;
            }
            let id = payments::insert_pending(
                tx.exec(),
                &NewPayment {
                    project_id,
                    milestone_id: Some(m.id),
                    company_id: p.company_id,
                    expert_id: Some(expert_id),
                    amount_minor: m.amount_minor,
                    currency: &m.currency,
                },
                now,
            )
            .await?;
            let y = payments::find(tx.exec(), id)
                .await?
                .ok_or_else(|| FlowError::not_found("No such payment"))?;
            tx.commit().await?;
            Ok::<_, FlowError>(y)
        })
        .await??;
    super::payments::ensure_intent(state, payment).await
}

/// `POST /api/payments/release` and `release-and-charge-next`: the project's company (or an
/// administrator) releases a held payment, in the project's actor. `charge_next` first
/// requires the expert's payout account to be `active` (the money must be able to move on).
pub async fn release_payment(
    state: &AppState,
    caller_id: i64,
    admin: bool,
    payment_id: i64,
    charge_next: bool,
) -> FlowResult<Release> {
    let y = load(state, payment_id).await?;
    if y.company_id != Some(caller_id) && !admin {
        return Err(FlowError::forbidden(
            "Only the project's company releases its payments",
        ));
    }
    if charge_next {
        require_connect_active(state, y.expert_id).await?;
    }
    let milestone_id = y.milestone_id.ok_or_else(|| {
        FlowError::conflict("PAYMENT_NOT_HELD", "The payment is not tied to a milestone")
    })?;
    let st = state.clone();
    state
        .project_actors
        .call(y.project_id, move || async move {
            release_milestone(
                &st,
                caller_id,
                y.project_id,
                milestone_id,
                ReleaseTrigger::PaymentRelease,
            )
            .await
        })
        .await?
}
