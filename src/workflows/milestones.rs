//! Milestones: the company's plan (created at the end, edited and deleted only while `pending`
//! and never funded), the older direct actions (the expert completes, the company approves or
//! rejects), and what deliveries share with them: who takes part in the work, funding, and
//! counting a rejection (the third cancels the milestone, the later ones and the project).
//!
//! Every move of a milestone that touches the project's state runs in the project's actor, in
//! a transaction holding the project's advisory lock, through conditional updates (DESIGN §3).

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::domain::delivery::DeliveryStatus;
use crate::domain::milestone::MilestoneStatus;
use crate::domain::payment::PaymentStatus;
use crate::domain::project::ProjectStatus;
use crate::domain::text::{Feedback, Title};
use crate::domain::user::Role;
use crate::integrations::mail::Template;
use crate::state::AppState;
use crate::store::deliveries::{self, Delivery};
use crate::store::milestones::{self, Milestone, MilestoneChanges, NewMilestone};
use crate::store::projects::{self, Project};
use crate::store::{Exec, LockScope, Tx, payments, users};
use crate::workflows::emails::email;
use crate::workflows::error::{FlowError, FlowResult, Refusal};
use crate::workflows::escrow::{self, RefundCause, Release, ReleaseTrigger};
use crate::workflows::notify::for_user;
use crate::workflows::projects::{Caller, load_owned, record};

/// Rejections after which a milestone is cancelled (specification, Limits).
pub const MAX_REJECTIONS: i64 = 3;

/// How the caller stands to a project's work.
#[derive(Debug, Clone, Copy)]
pub struct Access {
    pub company: bool,
    pub expert: bool,
    pub admin: bool,
}

impl Access {
    /// The company of the project or an administrator: who reviews.
    pub fn reviews(&self) -> bool {
        self.company || self.admin
    }
}

pub fn changed() -> FlowError {
    FlowError::conflict("INVALID_STATE", "The project changed meanwhile; try again")
}

/// The project if the caller works on it (its company, its selected expert) or is an
/// administrator; 404 otherwise, so its milestones are not revealed.
pub async fn load_participating(
    ex: Exec<'_>,
    caller: &Caller,
    project_id: i64,
) -> FlowResult<(Project, Access)> {
    let p = projects::find(ex, project_id)
        .await?
        .ok_or_else(|| FlowError::not_found("Project not found"))?;
    let access = Access {
        company: p.company_id == Some(caller.id),
        expert: p.expert_id == Some(caller.id),
        admin: caller.admin,
    };
    if access.company || access.expert || access.admin {
        Ok((p, access))
    } else {
        Err(FlowError::not_found("Project not found"))
    }
}

/// A milestone with its project, as the caller may see it (404 otherwise).
pub async fn milestone_in(
    mut ex: Exec<'_>,
    caller: &Caller,
    id: i64,
) -> FlowResult<(Milestone, Project, Access)> {
    let not_found = || FlowError::not_found("Milestone not found");
    let m = milestones::find(ex.re(), id).await?.ok_or_else(not_found)?;
    let (p, access) = load_participating(ex, caller, m.project_id)
        .await
        .map_err(|e| hidden_as(e, not_found))?;
    Ok((m, p, access))
}

/// A 404 about the project said about the thing asked for; other errors unchanged.
pub fn hidden_as(e: FlowError, what: impl Fn() -> FlowError) -> FlowError {
    match e {
        FlowError::Refused {
            kind: Refusal::NotFound,
            ..
        } => what(),
        other => other,
    }
}

/// The project a milestone belongs to (to find its actor), or 404.
pub async fn project_of(state: &AppState, milestone_id: i64) -> FlowResult<i64> {
    let mut conn = state.db.conn().await?;
    milestones::find(conn.exec(), milestone_id)
        .await?
        .map(|m| m.project_id)
        .ok_or_else(|| FlowError::not_found("Milestone not found"))
}

/// Work happens only while the project is under way (not disputed, finished or cancelled).
pub fn require_active(p: &Project) -> FlowResult<()> {
    match p.status {
        ProjectStatus::Assigned | ProjectStatus::InProgress | ProjectStatus::InReview => Ok(()),
        _ => Err(FlowError::conflict(
            "INVALID_STATE",
            format!(
                "No work can be handed in or reviewed while the project is {}",
                p.status
            ),
        )),
    }
}

/// The milestone's payment held in escrow; 409 `MILESTONE_NOT_FUNDED` without one.
pub async fn require_funded(ex: Exec<'_>, m: &Milestone) -> FlowResult<i64> {
    milestones::held_payment(ex, m.id).await?.ok_or_else(|| {
        FlowError::conflict(
            "MILESTONE_NOT_FUNDED",
            "The milestone's payment is not held in escrow yet",
        )
    })
}

/// Moves the project from the state read in this transaction to `to` (nothing when already there).
pub async fn move_project(
    tx: &mut Tx,
    p: &Project,
    to: ProjectStatus,
    now: DateTime<Utc>,
) -> FlowResult<()> {
    if p.status != to && !projects::transition(tx.exec(), p.id, p.status, to, now).await? {
        return Err(changed());
    }
    Ok(())
}

fn only_company() -> FlowError {
    FlowError::forbidden("Only the project's company may do this")
}

fn only_expert() -> FlowError {
    FlowError::forbidden("Only the project's expert may do this")
}

fn reference(p: &Project, m: &Milestone) -> Value {
    json!({"project_id": p.id, "project_title": p.title, "milestone_id": m.id,
           "milestone_title": m.title})
}

// ---------------------------------------------------------------------------------------
// The plan
// ---------------------------------------------------------------------------------------

/// A milestone as the company describes it, already validated.
#[derive(Debug, Clone)]
pub struct MilestoneDraft {
    pub title: Title,
    pub description: Option<String>,
    pub amount_minor: i64,
    pub due_date: Option<DateTime<Utc>>,
}

/// Changes to a milestone, already validated; `None` keeps the value.
#[derive(Debug, Clone, Default)]
pub struct MilestoneEdit {
    pub title: Option<Title>,
    pub description: Option<String>,
    pub amount_minor: Option<i64>,
    pub due_date: Option<DateTime<Utc>>,
}

/// The company adds a `pending` milestone at the end of its project's plan.
pub async fn create(
    state: &AppState,
    caller: &Caller,
    project_id: i64,
    d: MilestoneDraft,
) -> FlowResult<Milestone> {
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    tx.lock(LockScope::Project, project_id).await?;
    let p = load_owned(tx.exec(), caller, project_id, false).await?;
    if matches!(
        p.status,
        ProjectStatus::Completed | ProjectStatus::Cancelled | ProjectStatus::Disputed
    ) {
        return Err(FlowError::conflict(
            "INVALID_STATE",
            format!(
                "Milestones cannot be added while the project is {}",
                p.status
            ),
        ));
    }
    let position = milestones::next_position(tx.exec(), p.id).await?;
    let id = milestones::insert(
        tx.exec(),
        &NewMilestone {
            project_id: p.id,
            position,
            title: &d.title,
            description: d.description.as_deref(),
            amount_minor: d.amount_minor,
            currency: &p.currency,
            due_date: d.due_date,
            status: MilestoneStatus::Pending,
        },
        now,
    )
    .await?;
    let m = milestones::find(tx.exec(), id).await?.ok_or_else(changed)?;
    tx.commit().await?;
    Ok(m)
}

/// The milestone for the company's change of plan: locked, visible, theirs.
async fn own_milestone(tx: &mut Tx, caller: &Caller, id: i64) -> FlowResult<Milestone> {
    let project_id = milestones::find(tx.exec(), id)
        .await?
        .map(|m| m.project_id)
        .ok_or_else(|| FlowError::not_found("Milestone not found"))?;
    tx.lock(LockScope::Project, project_id).await?;
    let (m, _, access) = milestone_in(tx.exec(), caller, id).await?;
    if !access.company {
        return Err(only_company());
    }
    Ok(m)
}

fn not_editable(m: &Milestone) -> FlowError {
    FlowError::conflict(
        "INVALID_STATE",
        format!(
            "Only a pending milestone that was never funded can be changed; this one is {}",
            m.status
        ),
    )
}

pub async fn update(
    state: &AppState,
    caller: &Caller,
    id: i64,
    e: MilestoneEdit,
) -> FlowResult<Milestone> {
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    let m = own_milestone(&mut tx, caller, id).await?;
    let changes = MilestoneChanges {
        title: e.title.as_deref(),
        description: e.description.as_deref(),
        amount_minor: e.amount_minor,
        due_date: e.due_date,
    };
    // Conditional on `pending` and no payment, in SQL.
    if !milestones::update_pending(tx.exec(), id, &changes, now).await? {
        return Err(not_editable(&m));
    }
    let m = milestones::find(tx.exec(), id).await?.ok_or_else(changed)?;
    tx.commit().await?;
    Ok(m)
}

pub async fn delete(state: &AppState, caller: &Caller, id: i64) -> FlowResult<()> {
    let mut tx = state.db.begin().await?;
    let m = own_milestone(&mut tx, caller, id).await?;
    if !milestones::delete_pending(tx.exec(), id).await? {
        return Err(not_editable(&m));
    }
    tx.commit().await?;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Older direct actions
// ---------------------------------------------------------------------------------------

/// The expert declares a funded milestone done (no delivery waiting): `pending`/`in_progress`
/// → `completed`, the project `in_review`, the company told.
pub async fn complete(state: &AppState, caller: Caller, id: i64) -> FlowResult<Milestone> {
    let project_id = project_of(state, id).await?;
    let st = state.clone();
    state
        .project_actors
        .call(project_id, move || async move {
            complete_now(&st, &caller, project_id, id).await
        })
        .await?
}

async fn complete_now(
    state: &AppState,
    caller: &Caller,
    project_id: i64,
    id: i64,
) -> FlowResult<Milestone> {
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    tx.lock(LockScope::Project, project_id).await?;
    let (m, p, access) = milestone_in(tx.exec(), caller, id).await?;
    if !access.expert {
        return Err(only_expert());
    }
    require_active(&p)?;
    if !m.status.may_be_completed() {
        return Err(FlowError::conflict(
            "INVALID_STATE",
            format!("A milestone cannot be completed while {}", m.status),
        ));
    }
    require_funded(tx.exec(), &m).await?;
    // A delivery waiting for review already says the work is done; it is reviewed instead.
    if deliveries::submitted_of(tx.exec(), m.id).await?.is_some() {
        return Err(FlowError::conflict(
            "DELIVERY_UNDER_REVIEW",
            "A delivery of this milestone is waiting for review",
        ));
    }
    if !milestones::transition(tx.exec(), m.id, m.status, MilestoneStatus::Completed, now).await? {
        return Err(changed());
    }
    move_project(&mut tx, &p, ProjectStatus::InReview, now).await?;
    let (notify, mails) = tell_company(&mut tx, &p, &m, "milestone_completed").await?;
    let payload = json!({"project_id": p.id, "milestone_id": m.id, "notify": notify,
                         "email": mails});
    record(&mut tx, "milestone.completed", p.id, payload, now).await?;
    let m = milestones::find(tx.exec(), id).await?.ok_or_else(changed)?;
    state.commit(tx).await?;
    Ok(m)
}

/// The notification and e-mail that tell the company work is waiting for its review.
pub async fn tell_company(
    tx: &mut Tx,
    p: &Project,
    m: &Milestone,
    kind: &str,
) -> FlowResult<(Vec<Value>, Vec<Value>)> {
    let Some(company_id) = p.company_id else {
        return Ok((Vec::new(), Vec::new()));
    };
    let expert_name = match p.expert_id {
        Some(id) => users::contact(tx.exec(), id, Role::Experto)
            .await?
            .map(|c| c.name),
        None => None,
    }
    .unwrap_or_else(|| "The expert".to_owned());
    let notify = vec![for_user(
        company_id,
        kind,
        "Work to review",
        &format!(
            "{expert_name} handed in \"{}\" of \"{}\" for your review.",
            m.title, p.title
        ),
        reference(p, m),
    )];
    let mut mails = Vec::new();
    if let Some(c) = users::contact(tx.exec(), company_id, Role::Empresa).await? {
        mails.push(email(
            &c.email,
            Template::MilestoneCompleted,
            json!({"name": c.name, "project_title": p.title, "project_id": p.id,
                   "milestone_title": m.title, "expert_name": expert_name}),
        ));
    }
    Ok((notify, mails))
}

/// The company approves a `completed` or `in_progress` milestone directly: its held payment
/// is released by escrow (which approves the milestone), then the project moves on.
pub async fn approve(
    state: &AppState,
    caller: Caller,
    id: i64,
) -> FlowResult<(Milestone, Release)> {
    let project_id = project_of(state, id).await?;
    let st = state.clone();
    state
        .project_actors
        .call(project_id, move || async move {
            approve_now(&st, &caller, id).await
        })
        .await?
}

async fn approve_now(
    state: &AppState,
    caller: &Caller,
    id: i64,
) -> FlowResult<(Milestone, Release)> {
    let (m, p) = {
        let mut conn = state.db.conn().await?;
        let (m, p, access) = milestone_in(conn.exec(), caller, id).await?;
        if !access.company {
            return Err(only_company());
        }
        require_active(&p)?;
        if !matches!(
            m.status,
            MilestoneStatus::Completed | MilestoneStatus::InProgress
        ) {
            return Err(FlowError::conflict(
                "INVALID_STATE",
                format!("A milestone cannot be approved while {}", m.status),
            ));
        }
        require_funded(conn.exec(), &m).await?;
        (m, p)
    };
    // We are in the project's actor, as release_milestone requires.
    let release = escrow::release_milestone(
        state,
        Some(caller.id),
        p.id,
        m.id,
        ReleaseTrigger::MilestoneApproved,
    )
    .await?;
    after_release(state, Some(caller.id), p.id, &m, None, None).await?;
    let mut conn = state.db.conn().await?;
    let m = milestones::find(conn.exec(), id).await?.unwrap_or(m);
    Ok((m, release))
}

/// After escrow approved milestone `m` and released its money (moving the project on in the
/// same transaction): the reviewer's feedback kept and the expert told.
pub async fn after_release(
    state: &AppState,
    reviewer: Option<i64>,
    project_id: i64,
    m: &Milestone,
    delivery: Option<&Delivery>,
    feedback: Option<&str>,
) -> FlowResult<()> {
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    tx.lock(LockScope::Project, project_id).await?;
    let p = projects::find(tx.exec(), project_id)
        .await?
        .ok_or_else(changed)?;
    if let Some(d) = delivery {
        // Escrow approved the delivery; the reviewer's words are kept with it.
        deliveries::transition(
            tx.exec(),
            d.id,
            DeliveryStatus::Approved,
            DeliveryStatus::Approved,
            feedback,
            reviewer,
            now,
        )
        .await?;
    }
    // No reviewer: the service approved it when the review window ran out (issue 20).
    let auto = reviewer.is_none();
    let how = if auto {
        " automatically: the company did not review it in time"
    } else {
        ""
    };
    let mut notify = Vec::new();
    let mut mails = Vec::new();
    if auto && let Some(company_id) = p.company_id {
        notify.push(for_user(
            company_id,
            "delivery_auto_approved",
            "Delivery approved automatically",
            &format!("\"{}\" of \"{}\" was approved{how}.", m.title, p.title),
            json!({"project_id": p.id, "milestone_id": m.id,
                   "delivery_id": delivery.map(|d| d.id), "decision": "approve"}),
        ));
    }
    if let Some(expert_id) = p.expert_id {
        notify.push(for_user(
            expert_id,
            if delivery.is_some() {
                "delivery_reviewed"
            } else {
                "milestone_approved"
            },
            "Milestone approved",
            &format!("\"{}\" of \"{}\" was approved{how}.", m.title, p.title),
            json!({"project_id": p.id, "milestone_id": m.id,
                   "delivery_id": delivery.map(|d| d.id), "decision": "approve"}),
        ));
        if let Some(e) = users::contact(tx.exec(), expert_id, Role::Experto).await? {
            mails.push(email(
                &e.email,
                Template::MilestoneApproved,
                json!({"name": e.name, "project_title": p.title, "project_id": p.id,
                       "milestone_title": m.title, "feedback": feedback}),
            ));
        }
    }
    let kind = if delivery.is_some() {
        "delivery.reviewed"
    } else {
        "milestone.approved"
    };
    let payload = json!({
        "project_id": p.id, "milestone_id": m.id, "delivery_id": delivery.map(|d| d.id),
        "decision": "approve", "project_status": p.status, "reviewed_by": reviewer,
        "auto_approved": auto, "feedback": feedback, "notify": notify, "email": mails,
    });
    record(&mut tx, kind, p.id, payload, now).await?;
    state.commit(tx).await?;
    Ok(())
}

/// The company rejects work handed in directly (a `completed` milestone, or an `in_progress`
/// one with a delivery waiting, rejected with it): counted like a rejected delivery.
pub async fn reject(
    state: &AppState,
    caller: Caller,
    id: i64,
    feedback: Option<Feedback>,
) -> FlowResult<Milestone> {
    let project_id = project_of(state, id).await?;
    let st = state.clone();
    state
        .project_actors
        .call(project_id, move || async move {
            reject_now(&st, &caller, project_id, id, feedback.as_deref()).await
        })
        .await?
}

async fn reject_now(
    state: &AppState,
    caller: &Caller,
    project_id: i64,
    id: i64,
    feedback: Option<&str>,
) -> FlowResult<Milestone> {
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    tx.lock(LockScope::Project, project_id).await?;
    let (m, p, access) = milestone_in(tx.exec(), caller, id).await?;
    if !access.company {
        return Err(only_company());
    }
    require_active(&p)?;
    let waiting = deliveries::submitted_of(tx.exec(), m.id).await?;
    // Only work handed in (completed, or a delivery waiting) can be rejected: rejections
    // lead to cancellation and a refund, so none can be counted against nothing.
    let handed_in = m.status == MilestoneStatus::Completed
        || (m.status == MilestoneStatus::InProgress && waiting.is_some());
    if !handed_in {
        return Err(FlowError::conflict(
            "INVALID_STATE",
            format!(
                "Only a milestone with work handed in can be rejected; this one is {}",
                m.status
            ),
        ));
    }
    if let Some(d) = &waiting
        && !deliveries::transition(
            tx.exec(),
            d.id,
            DeliveryStatus::Submitted,
            DeliveryStatus::Rejected,
            feedback,
            Some(caller.id),
            now,
        )
        .await?
    {
        return Err(changed());
    }
    let outcome = count_rejection(&mut tx, &p, &m, now).await?;
    let (notify, mails) = rejection_messages(&mut tx, &p, &m, &outcome, feedback).await?;
    let payload = json!({
        "project_id": p.id, "milestone_id": m.id, "delivery_id": waiting.map(|d| d.id),
        "rejection_count": outcome.count, "milestone_cancelled": outcome.cancelled,
        "refund_payment_id": outcome.refund, "notify": notify, "email": mails,
    });
    record(&mut tx, "milestone.rejected", p.id, payload, now).await?;
    let m = milestones::find(tx.exec(), id).await?.ok_or_else(changed)?;
    state.commit(tx).await?;
    refund_cancelled(state, p.id, &outcome).await;
    Ok(m)
}

// ---------------------------------------------------------------------------------------
// Rejections
// ---------------------------------------------------------------------------------------

/// What counting a rejection did.
#[derive(Debug, Clone, Copy)]
pub struct Rejection {
    /// The milestone's rejections now.
    pub count: i64,
    /// The limit was reached: milestone, later milestones and project cancelled.
    pub cancelled: bool,
    /// The held payment to refund once committed.
    pub refund: Option<i64>,
}

/// Counts a rejection of milestone `m` (read in this locked transaction). Below the limit the
/// milestone returns to `in_progress` and the project leaves `in_review`; at the limit the
/// milestone and the later ones are cancelled, unfunded payments failed, the project
/// `cancelled`, and the held payment is named for a refund after commit.
pub async fn count_rejection(
    tx: &mut Tx,
    p: &Project,
    m: &Milestone,
    now: DateTime<Utc>,
) -> FlowResult<Rejection> {
    let count = m.rejection_count + 1;
    let cancelled = count >= MAX_REJECTIONS;
    let to = if cancelled {
        MilestoneStatus::Cancelled
    } else {
        MilestoneStatus::InProgress
    };
    if !milestones::add_rejection(tx.exec(), m.id, m.status, m.rejection_count, to, now).await? {
        return Err(changed());
    }
    let mut refund = None;
    if cancelled {
        milestones::cancel_after(tx.exec(), p.id, m.position, now).await?;
        for y in payments::list_for_project(tx.exec(), p.id).await? {
            // An unfunded payment of a cancelled project must not be charged any more.
            if y.status == PaymentStatus::Pending {
                payments::fail_pending(tx.exec(), y.id, PROJECT_CANCELLED, now).await?;
            }
        }
        move_project(tx, p, ProjectStatus::Cancelled, now).await?;
        refund = milestones::held_payment(tx.exec(), m.id).await?;
    } else if p.status == ProjectStatus::InReview {
        move_project(tx, p, ProjectStatus::InProgress, now).await?;
    }
    Ok(Rejection {
        count,
        cancelled,
        refund,
    })
}

/// Tells the expert about a rejection (and both parties about a cancellation).
pub async fn rejection_messages(
    tx: &mut Tx,
    p: &Project,
    m: &Milestone,
    outcome: &Rejection,
    feedback: Option<&str>,
) -> FlowResult<(Vec<Value>, Vec<Value>)> {
    let mut notify = Vec::new();
    let mut mails = Vec::new();
    let data = json!({"project_id": p.id, "milestone_id": m.id, "decision": "reject",
                      "rejection_count": outcome.count, "milestone_cancelled": outcome.cancelled});
    if let Some(expert_id) = p.expert_id {
        let message = if outcome.cancelled {
            format!(
                "\"{}\" of \"{}\" was rejected {MAX_REJECTIONS} times; the project is cancelled.",
                m.title, p.title
            )
        } else {
            format!(
                "\"{}\" of \"{}\" was rejected ({} of {MAX_REJECTIONS}).",
                m.title, p.title, outcome.count
            )
        };
        notify.push(for_user(
            expert_id,
            "delivery_reviewed",
            "Milestone rejected",
            &message,
            data.clone(),
        ));
        if let Some(e) = users::contact(tx.exec(), expert_id, Role::Experto).await? {
            mails.push(email(
                &e.email,
                Template::MilestoneRejected,
                json!({"name": e.name, "project_title": p.title, "project_id": p.id,
                       "milestone_title": m.title, "feedback": feedback}),
            ));
        }
    }
    if outcome.cancelled
        && let Some(company_id) = p.company_id
    {
        notify.push(for_user(
            company_id,
            "project_cancelled",
            "Project cancelled",
            &format!(
                "\"{}\" was rejected {MAX_REJECTIONS} times: the project is cancelled and its held payment refunded.",
                m.title
            ),
            data,
        ));
    }
    Ok((notify, mails))
}

/// After a cancellation is committed: refunds the cancelled milestone's held payment and
/// cancels the intents of the project's payments failed with it, so the company's card can no
/// longer be charged for them. The cancellation stands whatever happens here: a failure is
/// logged (with the payment id in the event) for an operator or a later retry, rather than
/// undoing a decision the company made.
pub async fn refund_cancelled(state: &AppState, project_id: i64, outcome: &Rejection) {
    if !outcome.cancelled {
        return;
    }
    if let Some(payment_id) = outcome.refund
        && let Err(error) =
            escrow::refund_payment(state, payment_id, RefundCause::MilestoneCancelled).await
    {
        tracing::error!(payment_id, %error, "refund after a cancelled milestone failed; the payment stays held");
    }
    escrow::cancel_abandoned_intents(state, project_id, PROJECT_CANCELLED).await;
}

/// Why the unfunded payments of a project cancelled by rejections failed.
const PROJECT_CANCELLED: &str = "project_cancelled";
