//! Funding: the payment intent of a milestone is created (`initiate`) and the authorised
//! money becomes `held` (webhook, `sync-status`).

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::*;
use crate::domain::milestone::MilestoneStatus;
use crate::domain::payment::{IntentStatus, PaymentStatus};
use crate::domain::project::ProjectStatus;
use crate::integrations::mail::Template;
use crate::integrations::processor::PaymentIntent;
use crate::state::AppState;
use crate::store::events::NewEvent;
use crate::store::payments::{self, Authorisation, NewPayment, Payment};
use crate::store::projects::{self};
use crate::store::{LockScope, Tx};
use crate::store::{events, milestones};
use crate::workflows::emails::email;
use crate::workflows::error::{FlowError, FlowResult};
use crate::workflows::notify::for_user;

/// An authorisation the processor reported for a payment: what holding it stores.
pub(crate) struct Hold<'a> {
    pub payment: &'a Payment,
    pub intent: &'a PaymentIntent,
    pub capture_before: Option<DateTime<Utc>>,
    pub receipt_url: Option<&'a str>,
}

/// `pending` → `held` from what the processor says of the intent (`requires_capture`, or
/// `succeeded` when captured already): `held_at`, the charge, the milestone `awaiting_payment`
/// → `pending`, the project `in_progress` on its first held payment, the expert told.
/// `false` when the payment was not `pending` (nothing changes: never backwards; a payment
/// frozen by a dispute before it was funded only keeps the authorisation).
pub(crate) async fn hold_in_tx(
    tx: &mut Tx,
    hold: Hold<'_>,
    now: DateTime<Utc>,
) -> FlowResult<bool> {
    tx.lock(LockScope::Project, hold.payment.project_id).await?;
    Ok(hold_all_locked_in_tx(tx, &[hold], now).await?[0])
}

/// [`hold_in_tx`] of several payments (distinct) in a transaction that holds their projects'
/// locks already. Each step is one statement for all of them: a group of webhook events costs
/// what one does. Answers, for each, whether it was held.
pub(crate) async fn hold_all_locked_in_tx(
    tx: &mut Tx,
    holds: &[Hold<'_>],
    now: DateTime<Utc>,
) -> FlowResult<Vec<bool>> {
    let metadata: Vec<Value> = holds
        .iter()
        .map(|h| {
            let mut metadata = h.payment.payment_metadata.0.clone();
            metadata["amount_capturable"] = json!(h.intent.amount_capturable);
            metadata
        })
        .collect();
    let mut to_hold = Vec::with_capacity(holds.len());
    for (h, metadata) in holds.iter().zip(&metadata) {
        let auth = Authorisation {
            charge_id: h.intent.latest_charge_id(),
            capture_before: h.capture_before,
            receipt_url: h.receipt_url,
        };
        let y = h.payment;
        if y.status == PaymentStatus::Disputed {
            // Frozen by a dispute before it was funded: the money is kept for the decision.
            if payments::record_authorisation_while_disputed(tx.exec(), y.id, &auth, metadata, now)
                .await?
                && let Some(m) = y.milestone_id
            {
                milestones::transition(
                    tx.exec(),
                    m,
                    MilestoneStatus::AwaitingPayment,
                    MilestoneStatus::Pending,
                    now,
                )
                .await?;
            }
            continue;
        }
        to_hold.push(payments::ToHold {
            id: y.id,
            auth,
            metadata,
        });
    }
    let held_ids = payments::mark_all_held(tx.exec(), &to_hold, now).await?;
    let held: Vec<&Payment> = holds
        .iter()
        .map(|h| h.payment)
        .filter(|y| held_ids.contains(&y.id))
        .collect();
    if held.is_empty() {
        return Ok(vec![false; holds.len()]);
    }
    let milestone_ids: Vec<i64> = held.iter().filter_map(|y| y.milestone_id).collect();
    milestones::transition_all(
        tx.exec(),
        &milestone_ids,
        MilestoneStatus::AwaitingPayment,
        MilestoneStatus::Pending,
        now,
    )
    .await?;
    let mut project_ids: Vec<i64> = held.iter().map(|y| y.project_id).collect();
    project_ids.sort_unstable();
    project_ids.dedup();
    projects::transition_all(
        tx.exec(),
        &project_ids,
        ProjectStatus::Assigned,
        ProjectStatus::InProgress,
        now,
    )
    .await?;
    let notices = payments::hold_notices(tx.exec(), &held_ids).await?;
    let events = held
        .iter()
        .map(|y| {
            let notice = notices
                .iter()
                .find(|n| n.payment_id == y.id)
                .ok_or_else(|| FlowError::not_found("No such project"))?;
            Ok(held_event(y, notice))
        })
        .collect::<FlowResult<Vec<_>>>()?;
    events::record_all(tx.exec(), &events, now).await?;
    Ok(holds
        .iter()
        .map(|h| held_ids.contains(&h.payment.id))
        .collect())
}

/// The `payment.held` event of `y`: the expert's notification and e-mail.
fn held_event(y: &Payment, notice: &payments::HoldNotice) -> NewEvent<'static> {
    let expert = match (notice.expert_id, &notice.expert_email, &notice.expert_name) {
        (Some(id), Some(email), Some(name)) => Some(users::Contact {
            id,
            email: email.clone(),
            name: name.clone(),
        }),
        _ => None,
    };
    let milestone_title = notice.milestone_title.as_deref().unwrap_or_default();
    let mut notify = Vec::new();
    let mut mails = Vec::new();
    if let Some(expert) = &expert {
        notify.push(for_user(
            expert.id,
            "payment_held",
            "Payment held in escrow",
            &format!(
                "{} for \"{}\" is held in escrow: you can start the milestone.",
                money_text(y.amount_minor, &y.currency),
                notice.project_title
            ),
            payment_data(y, &notice.project_title),
        ));
        mails.push(email(
            &expert.email,
            Template::PaymentHeld,
            payment_mail(
                expert,
                y,
                &notice.project_title,
                milestone_title,
                y.amount_minor,
            ),
        ));
    }
    NewEvent {
        kind: "payment.held",
        aggregate: "payment",
        aggregate_id: Some(y.id),
        payload: json!({"payment_id": y.id, "project_id": y.project_id,
                        "milestone_id": y.milestone_id, "notify": notify, "email": mails}),
    }
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
    intent.state().is_authorised()
}

/// `POST /api/payments/sync-status`: asks the processor and moves a `pending` payment to
/// `held` (or `failed` when its intent was cancelled). Answers the payment as stored.
pub async fn sync_status(state: &AppState, payment_id: i64) -> FlowResult<Payment> {
    in_payment_actor(state, payment_id, move |st| async move {
        let y = load(&st, payment_id).await?;
        let Some(intent_id) = y.processor_payment_intent_id.clone() else {
            return Ok(y);
        };
        if y.status != PaymentStatus::Pending {
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
            let hold = Hold {
                payment: &y,
                intent: &intent,
                capture_before,
                receipt_url: receipt.as_deref(),
            };
            hold_in_tx(&mut tx, hold, now).await?;
            st.commit(tx).await?;
        } else if intent.state() == IntentStatus::Canceled {
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
            if p.status == ProjectStatus::Disputed {
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
                // Prepared without its intent (a crash or the processor down right after
                // the commit that made it): creating that intent is what funding it needs.
                if open.status == PaymentStatus::Pending
                    && open.processor_payment_intent_id.is_none()
                {
                    return Ok(open);
                }
                return Err(FlowError::conflict(
                    "PAYMENT_PENDING",
                    format!(
                        "The milestone already has payment {} ({}); fund that one",
                        open.id, open.status
                    ),
                ));
            }
            if !matches!(
                m.status,
                MilestoneStatus::AwaitingPayment | MilestoneStatus::Pending
            ) {
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
            if m.status == MilestoneStatus::Pending
                && milestones::transition(
                    tx.exec(),
                    m.id,
                    MilestoneStatus::Pending,
                    MilestoneStatus::AwaitingPayment,
                    now,
                )
                .await?
            {
                let due = now + st.settings.funding_reminder_after;
                milestones::start_funding_clock(tx.exec(), m.id, due).await?;
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
    crate::workflows::payments::ensure_intent(state, payment).await
}
