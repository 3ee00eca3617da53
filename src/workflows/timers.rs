//! Timed transitions (issue 20): work is never stuck waiting on a silent party.
//!
//! * A delivery left `submitted` for `AUTO_APPROVE_DAYS` is approved by the service in the
//!   project's actor, exactly as a company approval; the company is reminded at half the
//!   window and at its last fourteenth.
//! * An expert's dispute the company has not answered (a chat message since it was raised)
//!   within `DISPUTE_RESPONSE_DAYS` is escalated to the administrators; no money moves.
//! * A milestone `awaiting_payment` for `FUNDING_REMINDER_DAYS` reminds the company; after
//!   [`RELEASE_AFTER_DAYS`] the expert may end the engagement ([`release_engagement`]).
//!
//! One supervised job ([`TIMERS`](crate::workflows::deadlines::TIMERS)) fires whatever is
//! due, found by indexed queries (`store::timers`), and asks to run again at the next deadline
//! (at most a minute later); the workflows that start a nearer clock wake it through
//! `workflows::deadlines`, which sits below them, so none of them imports this job. Every
//! deadline reads `state.clock`, and every effect is a conditional update, so two instances
//! fire each timer once.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::json;

use crate::domain::milestone::MilestoneStatus;
use crate::domain::payment::PaymentStatus;
use crate::domain::project::{ProjectStatus, format_minor};
use crate::domain::user::Role;
use crate::integrations::mail::Template;
use crate::state::AppState;
use crate::store::deliveries;
use crate::store::timers::{self, DueDelivery, DueDispute, DueFunding, ResponseOutcome};
use crate::store::{LockScope, milestones, payments, projects, users};
use crate::workflows::deliveries as review;
use crate::workflows::emails::email;
use crate::workflows::error::{FlowError, FlowResult};
use crate::workflows::escrow;
use crate::workflows::milestones::{changed, milestone_in, move_project, project_of};
use crate::workflows::notify::{for_admins, for_user};
use crate::workflows::projects::{Caller, record};

/// Days a milestone waits for its payment before the expert may end the engagement.
pub const RELEASE_AFTER_DAYS: i64 = 14;

/// Timers fired per kind and run; a full batch runs the job again at once.
const BATCH: i64 = 50;

/// Why the unfunded payment of an engagement the expert ended failed.
const ENGAGEMENT_RELEASED: &str = "engagement_released";

/// Fires every due timer, then answers the wait until the next deadline. A timer that failed
/// (the processor unreachable, …) fails the run, so the job backs off and retries it.
pub async fn fire_due(state: &AppState) -> FlowResult<Option<Duration>> {
    let now = state.clock.now();
    let mut failure: Option<FlowError> = None;
    let mut full = false;
    let mut keep = |result: FlowResult<()>, what: &str, id: i64| {
        if let Err(error) = result {
            tracing::warn!(id, %error, "timer not fired: {what}");
            failure = Some(error);
        }
    };

    // Approvals first: a delivery approved now needs no reminder.
    let due = {
        let mut conn = state.db.conn().await?;
        timers::deliveries_to_approve(conn.exec(), now, BATCH).await?
    };
    full |= due.len() as i64 == BATCH;
    for d in &due {
        keep(auto_approve(state, d).await, "auto-approval", d.id);
    }
    let due = {
        let mut conn = state.db.conn().await?;
        timers::deliveries_to_remind(conn.exec(), now, BATCH).await?
    };
    full |= due.len() as i64 == BATCH;
    for d in &due {
        keep(remind_review(state, d, now).await, "review reminder", d.id);
    }
    let due = {
        let mut conn = state.db.conn().await?;
        timers::disputes_to_escalate(conn.exec(), now, BATCH).await?
    };
    full |= due.len() as i64 == BATCH;
    for d in &due {
        keep(escalate(state, d, now).await, "dispute escalation", d.id);
    }
    let due = {
        let mut conn = state.db.conn().await?;
        timers::milestones_to_remind(conn.exec(), now, BATCH).await?
    };
    full |= due.len() as i64 == BATCH;
    for m in &due {
        keep(
            remind_funding(state, m, now).await,
            "funding reminder",
            m.id,
        );
    }

    if let Some(error) = failure {
        return Err(error);
    }
    if full {
        return Ok(Some(Duration::ZERO));
    }
    let next = {
        let mut conn = state.db.conn().await?;
        timers::next_deadline(conn.exec()).await?
    };
    Ok(next.map(|at| match (at - state.clock.now()).to_std() {
        Ok(wait) => wait,
        // Still due after a run that fired everything it found: something the queries
        // count cannot fire (a state they do not foresee). Not a reason to spin: the
        // longest sleep, and the next run tries again.
        Err(_) => MAX_WAIT,
    }))
}

/// The longest the job sleeps (new deadlines wake it sooner).
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// A window as people read it: "14 days", "0.5 days".
fn days_text(window: chrono::Duration) -> String {
    let micros = window.num_microseconds().unwrap_or(i64::MAX);
    let days = rust_decimal::Decimal::from(micros) / rust_decimal::Decimal::from(86_400_000_000i64);
    let days = days.round_dp(4).normalize();
    if days == rust_decimal::Decimal::ONE {
        "1 day".to_owned()
    } else {
        format!("{days} days")
    }
}

fn when(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M UTC").to_string()
}

// ---------------------------------------------------------------------------------------
// Deliveries
// ---------------------------------------------------------------------------------------

async fn auto_approve(state: &AppState, d: &DueDelivery) -> FlowResult<()> {
    let reason = format!(
        "Approved automatically: the company did not review this delivery within {}.",
        days_text(state.settings.auto_approve_after)
    );
    match review::approve_when_due(state, d.id, reason).await {
        Ok(_) => Ok(()),
        Err(error) => {
            // Another instance approved it first (its release's conditional updates won):
            // nothing is left to do.
            let mut conn = state.db.conn().await?;
            match deliveries::find(conn.exec(), d.id).await? {
                Some(now) if now.status.is_under_review() => Err(error),
                _ => Ok(()),
            }
        }
    }
}

/// Reminds the company of a delivery waiting for its review: the reminder due now (the
/// later one when both are, after a pause), once.
async fn remind_review(state: &AppState, d: &DueDelivery, now: DateTime<Utc>) -> FlowResult<()> {
    let window = state.settings.auto_approve_after;
    let last_at = d.auto_approve_at - window / 14;
    let (sent, next) = if now >= last_at {
        (2, None)
    } else {
        (1, Some(last_at))
    };
    let mut tx = state.db.begin().await?;
    tx.lock(LockScope::Project, d.project_id).await?;
    if d.reminders_sent >= sent {
        // Already sent (by another instance): only the next date is left to set.
        timers::mark_reminded(tx.exec(), d.id, d.reminders_sent, d.reminders_sent, next).await?;
        tx.commit().await?;
        return Ok(());
    }
    if !timers::mark_reminded(tx.exec(), d.id, d.reminders_sent, sent, next).await? {
        return Ok(());
    }
    let p = projects::find(tx.exec(), d.project_id)
        .await?
        .ok_or_else(changed)?;
    let m = milestones::find(tx.exec(), d.milestone_id)
        .await?
        .ok_or_else(changed)?;
    let expert_name = match p.expert_id {
        Some(id) => users::contact(tx.exec(), id, Role::Experto)
            .await?
            .map(|c| c.name),
        None => None,
    }
    .unwrap_or_else(|| "The expert".to_owned());
    let mut notify = Vec::new();
    let mut mails = Vec::new();
    if let Some(company_id) = p.company_id {
        notify.push(for_user(
            company_id,
            "delivery_review_reminder",
            "A delivery waits for your review",
            &format!(
                "Review \"{}\" of \"{}\" by {}, or it is approved automatically.",
                m.title,
                p.title,
                when(d.auto_approve_at)
            ),
            json!({"project_id": p.id, "milestone_id": m.id, "delivery_id": d.id,
                   "auto_approve_at": d.auto_approve_at, "reminder": sent}),
        ));
        if let Some(c) = users::contact(tx.exec(), company_id, Role::Empresa).await? {
            mails.push(email(
                &c.email,
                Template::DeliveryReviewReminder,
                json!({"name": c.name, "project_title": p.title, "project_id": p.id,
                       "milestone_title": m.title, "expert_name": expert_name,
                       "auto_approve_at": when(d.auto_approve_at)}),
            ));
        }
    }
    let payload = json!({"project_id": p.id, "milestone_id": m.id, "delivery_id": d.id,
                         "reminder": sent, "auto_approve_at": d.auto_approve_at,
                         "notify": notify, "email": mails});
    record(&mut tx, "delivery.review_reminder", p.id, payload, now).await?;
    state.commit(tx).await?;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Disputes
// ---------------------------------------------------------------------------------------

/// Escalates an expert's dispute the company left unanswered (once), or stops its clock when
/// the company did answer.
async fn escalate(state: &AppState, d: &DueDispute, now: DateTime<Utc>) -> FlowResult<()> {
    let mut tx = state.db.begin().await?;
    tx.lock(LockScope::Project, d.project_id).await?;
    if timers::close_response_clock(tx.exec(), d.id, now).await? != ResponseOutcome::Escalated {
        tx.commit().await?;
        return Ok(());
    }
    let p = projects::find(tx.exec(), d.project_id)
        .await?
        .ok_or_else(changed)?;
    let data = json!({"dispute_id": d.id, "project_id": p.id, "project_title": p.title,
                      "escalated_at": now});
    let message = format!(
        "The company of \"{}\" has not answered the expert's dispute within {}; it needs \
         priority mediation.",
        p.title,
        days_text(state.settings.dispute_response_within)
    );
    let mut notify = vec![for_admins(
        "dispute_escalated",
        "Dispute escalated",
        &message,
        data.clone(),
    )];
    if let Some(expert_id) = p.expert_id {
        notify.push(for_user(
            expert_id,
            "dispute_escalated",
            "Dispute escalated",
            "The company has not answered your dispute; the administrators mediate it first.",
            data,
        ));
    }
    let payload = json!({"dispute_id": d.id, "project_id": p.id, "escalated_at": now,
                         "notify": notify});
    crate::store::events::record(
        tx.exec(),
        crate::store::events::NewEvent {
            kind: "dispute.escalated",
            aggregate: "dispute",
            aggregate_id: Some(d.id),
            payload,
        },
        now,
    )
    .await?;
    state.commit(tx).await?;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Funding
// ---------------------------------------------------------------------------------------

/// Reminds the company that a milestone still waits for its payment, once.
async fn remind_funding(state: &AppState, due: &DueFunding, now: DateTime<Utc>) -> FlowResult<()> {
    let mut tx = state.db.begin().await?;
    tx.lock(LockScope::Project, due.project_id).await?;
    if !timers::mark_funding_reminded(tx.exec(), due.id, now).await? {
        return Ok(());
    }
    let p = projects::find(tx.exec(), due.project_id)
        .await?
        .ok_or_else(changed)?;
    let m = milestones::find(tx.exec(), due.id)
        .await?
        .ok_or_else(changed)?;
    let since = m.awaiting_payment_at.unwrap_or(m.updated_at);
    let data = json!({"project_id": p.id, "milestone_id": m.id, "milestone_title": m.title,
                      "awaiting_payment_at": since,
                      "engagement_releasable_at": since + chrono::Duration::days(RELEASE_AFTER_DAYS)});
    let mut notify = Vec::new();
    let mut mails = Vec::new();
    if let Some(company_id) = p.company_id {
        notify.push(for_user(
            company_id,
            "funding_reminder",
            "Milestone awaiting payment",
            &format!(
                "\"{}\" of \"{}\" has been waiting for its payment since {}.",
                m.title,
                p.title,
                when(since)
            ),
            data.clone(),
        ));
        if let Some(c) = users::contact(tx.exec(), company_id, Role::Empresa).await? {
            mails.push(email(
                &c.email,
                Template::FundingReminder,
                json!({"name": c.name, "project_title": p.title, "project_id": p.id,
                       "milestone_title": m.title, "amount": format_minor(m.amount_minor),
                       "currency": m.currency.to_uppercase(), "awaiting_since": when(since),
                       "release_after_days": RELEASE_AFTER_DAYS}),
            ));
        }
    }
    let mut payload = data;
    payload["notify"] = json!(notify);
    payload["email"] = json!(mails);
    record(&mut tx, "milestone.funding_reminder", p.id, payload, now).await?;
    state.commit(tx).await?;
    Ok(())
}

/// `POST /api/milestones/{id}/release-engagement`: the project's expert ends an engagement
/// whose milestone has waited [`RELEASE_AFTER_DAYS`] for its payment. In the project's actor:
/// the milestone and every open one cancelled, the unfunded payment failed and its intent
/// cancelled at the processor, the project `cancelled`; what was paid before stays paid.
pub async fn release_engagement(
    state: &AppState,
    caller: Caller,
    milestone_id: i64,
) -> FlowResult<projects::Project> {
    let project_id = project_of(state, milestone_id).await?;
    let st = state.clone();
    let project = state
        .project_actors
        .call(project_id, move || async move {
            release_engagement_now(&st, &caller, project_id, milestone_id).await
        })
        .await??;
    escrow::cancel_abandoned_intents(state, project_id, ENGAGEMENT_RELEASED).await;
    Ok(project)
}

async fn release_engagement_now(
    state: &AppState,
    caller: &Caller,
    project_id: i64,
    milestone_id: i64,
) -> FlowResult<projects::Project> {
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    tx.lock(LockScope::Project, project_id).await?;
    let (m, p, access) = milestone_in(tx.exec(), caller, milestone_id).await?;
    if !access.expert {
        return Err(FlowError::forbidden(
            "Only the project's expert may end the engagement",
        ));
    }
    if m.status != MilestoneStatus::AwaitingPayment
        || !matches!(
            p.status,
            ProjectStatus::Assigned | ProjectStatus::InProgress | ProjectStatus::InReview
        )
    {
        return Err(FlowError::conflict(
            "INVALID_STATE",
            format!(
                "Only an engagement whose milestone awaits its payment can be ended; the \
                 milestone is {} and the project {}",
                m.status, p.status
            ),
        ));
    }
    let since = m.awaiting_payment_at.unwrap_or(m.updated_at);
    let allowed_at = since + chrono::Duration::days(RELEASE_AFTER_DAYS);
    if now < allowed_at {
        return Err(FlowError::conflict(
            "FUNDING_NOT_OVERDUE",
            format!(
                "The milestone has waited for its payment since {}; the engagement can be \
                 ended from {}",
                when(since),
                when(allowed_at)
            ),
        ));
    }
    let payment = payments::open_of_milestone(tx.exec(), m.id).await?;
    if let Some(y) = &payment
        && y.status != PaymentStatus::Pending
    {
        // Authorised meanwhile: the money is there, the engagement goes on.
        return Err(FlowError::conflict(
            "MONEY_AUTHORISED",
            "The milestone's payment is held; the engagement goes on",
        ));
    }
    milestones::cancel_open_of_project(tx.exec(), p.id, now).await?;
    if let Some(y) = &payment
        && !payments::fail_pending(tx.exec(), y.id, ENGAGEMENT_RELEASED, now).await?
    {
        return Err(changed());
    }
    move_project(&mut tx, &p, ProjectStatus::Cancelled, now).await?;
    let mut notify = Vec::new();
    let message = format!(
        "The expert ended the engagement on \"{}\": \"{}\" waited for its payment since {}. \
         The project is cancelled; what was paid stays paid.",
        p.title,
        m.title,
        when(since)
    );
    let data = json!({"project_id": p.id, "milestone_id": m.id,
                      "payment_id": payment.as_ref().map(|y| y.id)});
    for user in [p.company_id, p.expert_id].into_iter().flatten() {
        notify.push(for_user(
            user,
            "engagement_released",
            "Engagement ended",
            &message,
            data.clone(),
        ));
    }
    let mut payload = data;
    payload["notify"] = json!(notify);
    payload["expert_id"] = json!(caller.id);
    record(&mut tx, "project.engagement_released", p.id, payload, now).await?;
    let project = projects::find(tx.exec(), p.id).await?.ok_or_else(changed)?;
    state.commit(tx).await?;
    Ok(project)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_read_in_days() {
        assert_eq!(days_text(chrono::Duration::days(14)), "14 days");
        assert_eq!(days_text(chrono::Duration::days(1)), "1 day");
        assert_eq!(days_text(chrono::Duration::hours(12)), "0.5 days");
        assert_eq!(
            days_text(chrono::Duration::milliseconds(43_200)),
            "0.0005 days"
        );
    }
}
