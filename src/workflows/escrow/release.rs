//! Release: on approval the held money is captured, the commission of the expert's level
//! kept, and the next milestone prepared.

use chrono::{DateTime, Utc};
use serde_json::json;

use super::*;
use crate::domain::commission;
use crate::domain::milestone::MilestoneStatus;
use crate::domain::payment::{IntentStatus, PaymentStatus};
use crate::domain::project::ProjectStatus;
use crate::domain::user::Role;
use crate::integrations::mail::Template;
use crate::integrations::processor::PaymentIntent;
use crate::state::AppState;
use crate::store::milestones;
use crate::store::payments::{self, NewPayment, Payment, ReleasedFrom, Split};
use crate::store::projects::{self};
use crate::store::{LockScope, Tx, commission as rates, profiles};
use crate::workflows::emails::email;
use crate::workflows::error::{FlowError, FlowResult};
use crate::workflows::notify::for_user;

/// Approves the milestone and releases its held payment: capture, commission, transfer (or
/// deferral), the delivery and milestone `approved`, the next milestone's payment. The
/// caller must already run inside the project's actor.
pub async fn release_milestone(
    state: &AppState,
    actor_id: Option<i64>,
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
            .filter(|y| y.status == PaymentStatus::Held)
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
            match crate::workflows::payments::ensure_intent(state, next.clone()).await {
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
/// when a dispute is decided for the expert (by `actor_id`, recorded as the reviewer; `None`
/// is the service itself, e.g. a delivery approved when its review window ran out).
pub(crate) async fn release_in_actor(
    state: &AppState,
    payment_id: i64,
    from: ReleasedFrom,
    actor_id: Option<i64>,
    delivery_id: Option<i64>,
) -> FlowResult<(Payment, Option<Payment>)> {
    let y = load(state, payment_id).await?;
    if y.status != from.status() {
        return Err(FlowError::conflict(
            "PAYMENT_NOT_HELD",
            format!(
                "The payment is {}; only a {} payment is released here",
                y.status,
                from.status()
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
        milestones::transition(
            tx.exec(),
            m.id,
            MilestoneStatus::AwaitingPayment,
            MilestoneStatus::Pending,
            now,
        )
        .await?;
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
        Some(m) => {
            let funding_due = now + state.settings.funding_reminder_after;
            prepare_next(&mut tx, &y, m.position, now, funding_due).await?
        }
        None => None,
    };
    let project = projects::find(tx.exec(), y.project_id)
        .await?
        .ok_or_else(changed)?;
    let open_left = milestones::has_unfinished(tx.exec(), y.project_id).await?;
    let to = if open_left {
        ProjectStatus::InProgress
    } else {
        ProjectStatus::Completed
    };
    let at_work = matches!(
        project.status,
        ProjectStatus::InReview | ProjectStatus::InProgress | ProjectStatus::Assigned
    );
    if project.status != to
        && at_work
        && projects::transition(tx.exec(), y.project_id, project.status, to, now).await?
        && !open_left
    {
        crate::workflows::reviews::ask_for_reviews(&mut tx, y.project_id, now).await?;
    }
    let released = payments::find(tx.exec(), y.id).await?.ok_or_else(changed)?;
    crate::workflows::invoices::on_release(&mut tx, &state.settings, &released, now).await?;
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
    state.commit(tx).await?;
    if next.is_some() {
        crate::workflows::deadlines::wake(state);
    }

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
    funding_due: DateTime<Utc>,
) -> FlowResult<Option<Payment>> {
    let Some(next) = milestones::next_after(tx.exec(), y.project_id, position).await? else {
        return Ok(None);
    };
    if next.status != MilestoneStatus::Pending
        || !milestones::transition(
            tx.exec(),
            next.id,
            MilestoneStatus::Pending,
            MilestoneStatus::AwaitingPayment,
            now,
        )
        .await?
    {
        return Ok(None);
    }
    milestones::start_funding_clock(tx.exec(), next.id, funding_due).await?;
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
pub(super) async fn capture(state: &AppState, y: &Payment) -> FlowResult<PaymentIntent> {
    let intent_id = y.processor_payment_intent_id.as_deref().ok_or_else(|| {
        FlowError::conflict("PAYMENT_NOT_HELD", "The payment has no payment intent")
    })?;
    let client = &state.processor.client;
    let intent = client
        .retrieve_payment_intent(intent_id)
        .await
        .map_err(|e| processor_failure("report the payment", &e))?;
    match intent.state() {
        IntentStatus::Succeeded => Ok(intent),
        IntentStatus::RequiresCapture => client
            .capture_payment_intent(intent_id, &format!("payment_{}_capture", y.id))
            .await
            .map_err(|e| processor_failure("capture the payment", &e)),
        _ => Err(FlowError::conflict(
            "PAYMENT_NOT_CAPTURABLE",
            format!(
                "The processor reports the payment as {}; it cannot be captured",
                intent.status
            ),
        )),
    }
}

/// The expert's level now, and the commission at that level's rate: (level, commission,
/// expert amount).
async fn split_for(state: &AppState, y: &Payment) -> FlowResult<(String, i64, i64)> {
    let mut conn = state.db.conn().await?;
    let level = match y.expert_id {
        Some(id) => profiles::find_by_user(conn.exec(), id, Role::Experto)
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
                Some(caller_id),
                y.project_id,
                milestone_id,
                ReleaseTrigger::PaymentRelease,
            )
            .await
        })
        .await?
}
