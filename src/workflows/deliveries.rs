//! Deliveries: the expert hands in work for a funded milestone, the company (or an
//! administrator) reviews it — approve (escrow releases the money), reject (counted; the
//! third cancels), or request a revision, which the expert answers with a new version.
//!
//! Submission, resubmission and review move the project, so each runs in the project's actor
//! with the project's advisory lock and conditional updates (DESIGN §3); the events and
//! their notifications commit in the same transaction (DESIGN §4).

use serde_json::json;

use crate::domain::delivery::DeliveryStatus;
use crate::domain::milestone::MilestoneStatus;
use crate::domain::project::ProjectStatus;
use crate::domain::text::Feedback;
use crate::state::AppState;
use crate::store::deliveries::{self, Delivery};
use crate::store::milestones::{self, Milestone};
use crate::store::projects::Project;
use crate::store::{Exec, LockScope};
use crate::workflows::deadlines;
use crate::workflows::error::{FlowError, FlowResult};
use crate::workflows::escrow::{self, Release, ReleaseTrigger};
use crate::workflows::milestones::{
    Access, after_release, changed, count_rejection, hidden_as, load_participating, milestone_in,
    move_project, refund_cancelled, rejection_messages, require_active, require_funded,
    tell_company,
};
use crate::workflows::notify::for_user;
use crate::workflows::projects::{Caller, record};

/// A review decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Approve,
    Reject,
    RequestRevision,
}

impl Decision {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "approve" => Some(Self::Approve),
            "reject" => Some(Self::Reject),
            "request_revision" => Some(Self::RequestRevision),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Approve => "approve",
            Self::Reject => "reject",
            Self::RequestRevision => "request_revision",
        }
    }
}

/// What a review produced: the delivery, and the money escrow moved on approval.
#[derive(Debug, Clone)]
pub struct Reviewed {
    pub delivery: Delivery,
    pub release: Option<Release>,
}

fn not_found() -> FlowError {
    FlowError::not_found("Delivery not found")
}

/// A delivery with its project and milestone, as the caller may see them (404 otherwise).
async fn delivery_in(
    mut ex: Exec<'_>,
    caller: &Caller,
    id: i64,
) -> FlowResult<(Delivery, Project, Milestone, Access)> {
    let d = deliveries::find(ex.re(), id).await?.ok_or_else(not_found)?;
    let (p, access) = load_participating(ex.re(), caller, d.project_id)
        .await
        .map_err(|e| hidden_as(e, not_found))?;
    let m = milestones::find(ex, d.milestone_id)
        .await?
        .ok_or_else(not_found)?;
    Ok((d, p, m, access))
}

/// The project of a delivery (to find its actor), or 404.
async fn project_of(state: &AppState, id: i64) -> FlowResult<i64> {
    let mut conn = state.db.conn().await?;
    deliveries::find(conn.exec(), id)
        .await?
        .map(|d| d.project_id)
        .ok_or_else(not_found)
}

pub async fn get(state: &AppState, caller: &Caller, id: i64) -> FlowResult<Delivery> {
    let mut conn = state.db.conn().await?;
    Ok(delivery_in(conn.exec(), caller, id).await?.0)
}

// ---------------------------------------------------------------------------------------
// Submission
// ---------------------------------------------------------------------------------------

/// The project's expert hands in work for a funded milestone (`pending` or `in_progress` with
/// its payment held), one delivery under review at a time: the milestone `in_progress`, the
/// project `in_review`, the company told.
pub async fn submit(
    state: &AppState,
    caller: Caller,
    milestone_id: i64,
    description: String,
    attachments: Vec<String>,
) -> FlowResult<Delivery> {
    let project_id = crate::workflows::milestones::project_of(state, milestone_id).await?;
    let st = state.clone();
    state
        .project_actors
        .call(project_id, move || async move {
            submit_now(
                &st,
                &caller,
                project_id,
                milestone_id,
                &description,
                &attachments,
            )
            .await
        })
        .await?
}

async fn submit_now(
    state: &AppState,
    caller: &Caller,
    project_id: i64,
    milestone_id: i64,
    description: &str,
    attachments: &[String],
) -> FlowResult<Delivery> {
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    tx.lock(LockScope::Project, project_id).await?;
    let (m, p, access) = milestone_in(tx.exec(), caller, milestone_id).await?;
    if !access.expert {
        return Err(FlowError::forbidden(
            "Only the project's expert hands in deliveries",
        ));
    }
    require_active(&p)?;
    match m.status {
        MilestoneStatus::Pending | MilestoneStatus::InProgress => {}
        MilestoneStatus::AwaitingPayment => {
            return Err(FlowError::conflict(
                "MILESTONE_NOT_FUNDED",
                "The milestone's payment is not held in escrow yet",
            ));
        }
        other => {
            return Err(FlowError::conflict(
                "INVALID_STATE",
                format!("No delivery can be handed in for a milestone that is {other}"),
            ));
        }
    }
    // `pending` also names later milestones nobody has paid for yet: the held payment decides.
    require_funded(tx.exec(), &m).await?;
    if deliveries::submitted_of(tx.exec(), m.id).await?.is_some() {
        return Err(FlowError::conflict(
            "DELIVERY_UNDER_REVIEW",
            "A delivery of this milestone is already waiting for review",
        ));
    }
    if m.status == MilestoneStatus::Pending
        && !milestones::transition(
            tx.exec(),
            m.id,
            MilestoneStatus::Pending,
            MilestoneStatus::InProgress,
            now,
        )
        .await?
    {
        return Err(changed());
    }
    move_project(&mut tx, &p, ProjectStatus::InReview, now).await?;
    let id = deliveries::insert(
        tx.exec(),
        m.id,
        p.id,
        caller.id,
        description,
        attachments,
        deadlines::review_clock(state, now),
        now,
    )
    .await?;
    let (notify, mails) = tell_company(&mut tx, &p, &m, "delivery_submitted").await?;
    let payload = json!({
        "project_id": p.id, "milestone_id": m.id, "delivery_id": id, "expert_id": caller.id,
        "notify": notify, "email": mails,
    });
    record(&mut tx, "delivery.submitted", p.id, payload, now).await?;
    let d = deliveries::find(tx.exec(), id).await?.ok_or_else(changed)?;
    state.commit(tx).await?;
    deadlines::wake(state);
    Ok(d)
}

/// The expert's new version of a delivery sent back for revision (`needs_revision` →
/// `submitted`); `None` keeps a field. The project is `in_review` again.
pub async fn resubmit(
    state: &AppState,
    caller: Caller,
    id: i64,
    description: Option<String>,
    attachments: Option<Vec<String>>,
) -> FlowResult<Delivery> {
    let project_id = project_of(state, id).await?;
    let st = state.clone();
    state
        .project_actors
        .call(project_id, move || async move {
            resubmit_now(&st, &caller, project_id, id, description, attachments).await
        })
        .await?
}

async fn resubmit_now(
    state: &AppState,
    caller: &Caller,
    project_id: i64,
    id: i64,
    description: Option<String>,
    attachments: Option<Vec<String>>,
) -> FlowResult<Delivery> {
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    tx.lock(LockScope::Project, project_id).await?;
    let (d, p, m, _) = delivery_in(tx.exec(), caller, id).await?;
    if d.expert_id != Some(caller.id) {
        return Err(FlowError::forbidden(
            "Only the expert who handed in a delivery may change it",
        ));
    }
    require_active(&p)?;
    if d.status != DeliveryStatus::NeedsRevision || m.status != MilestoneStatus::InProgress {
        return Err(FlowError::conflict(
            "INVALID_STATE",
            format!(
                "A delivery can be changed only when a revision was requested; this one is {}",
                d.status
            ),
        ));
    }
    if deliveries::submitted_of(tx.exec(), m.id).await?.is_some() {
        return Err(FlowError::conflict(
            "DELIVERY_UNDER_REVIEW",
            "A delivery of this milestone is already waiting for review",
        ));
    }
    let description = description.unwrap_or_else(|| d.description.clone());
    let attachments = attachments.unwrap_or_else(|| d.attachments.0.clone());
    let clock = deadlines::review_clock(state, now);
    if !deliveries::resubmit(tx.exec(), d.id, &description, &attachments, clock, now).await? {
        return Err(changed());
    }
    move_project(&mut tx, &p, ProjectStatus::InReview, now).await?;
    let (notify, mails) = tell_company(&mut tx, &p, &m, "delivery_submitted").await?;
    let payload = json!({
        "project_id": p.id, "milestone_id": m.id, "delivery_id": d.id, "resubmitted": true,
        "notify": notify, "email": mails,
    });
    record(&mut tx, "delivery.submitted", p.id, payload, now).await?;
    let d = deliveries::find(tx.exec(), d.id)
        .await?
        .ok_or_else(changed)?;
    state.commit(tx).await?;
    deadlines::wake(state);
    Ok(d)
}

// ---------------------------------------------------------------------------------------
// Review
// ---------------------------------------------------------------------------------------

/// The company of the project (or an administrator) decides on a `submitted` delivery.
pub async fn review(
    state: &AppState,
    caller: Caller,
    id: i64,
    decision: Decision,
    feedback: Option<Feedback>,
) -> FlowResult<Reviewed> {
    let project_id = project_of(state, id).await?;
    let st = state.clone();
    state
        .project_actors
        .call(project_id, move || async move {
            let feedback = feedback.as_deref();
            match decision {
                Decision::Approve => approve_now(&st, &caller, id, feedback).await,
                _ => decide_now(&st, &caller, project_id, id, decision, feedback).await,
            }
        })
        .await?
}

/// The checks every review makes on what it read.
async fn reviewable(
    ex: Exec<'_>,
    caller: &Caller,
    id: i64,
) -> FlowResult<(Delivery, Project, Milestone)> {
    let (d, p, m, access) = delivery_in(ex, caller, id).await?;
    if !access.reviews() {
        return Err(FlowError::forbidden(
            "Only the project's company reviews deliveries",
        ));
    }
    require_active(&p)?;
    if !d.status.is_under_review() {
        return Err(FlowError::conflict(
            "INVALID_STATE",
            format!(
                "Only a submitted delivery can be reviewed; this one is {}",
                d.status
            ),
        ));
    }
    Ok((d, p, m))
}

/// Approval: escrow releases the held payment (and approves delivery and milestone), then the
/// project moves on.
async fn approve_now(
    state: &AppState,
    caller: &Caller,
    id: i64,
    feedback: Option<&str>,
) -> FlowResult<Reviewed> {
    let (d, p, m) = {
        let mut conn = state.db.conn().await?;
        let (d, p, m) = reviewable(conn.exec(), caller, id).await?;
        require_funded(conn.exec(), &m).await?;
        (d, p, m)
    };
    // We are in the project's actor, as release_milestone requires.
    let release = escrow::release_milestone(
        state,
        Some(caller.id),
        p.id,
        m.id,
        ReleaseTrigger::DeliveryApproved { delivery_id: d.id },
    )
    .await?;
    after_release(state, Some(caller.id), p.id, &m, Some(&d), feedback).await?;
    let mut conn = state.db.conn().await?;
    let delivery = deliveries::find(conn.exec(), id).await?.unwrap_or(d);
    Ok(Reviewed {
        delivery,
        release: Some(release),
    })
}

/// The service approves a delivery its company left `submitted` past `auto_approve_at`
/// (issue 20), in the project's actor, exactly as a company approval (escrow releases the
/// held payment, the project moves on) with no reviewer and `reason` as the feedback.
/// `None` when there is nothing to approve any more (reviewed meanwhile, not due, the project
/// disputed or ended); the conditional updates of the release make a second instance's
/// attempt fail instead of approving twice.
pub async fn approve_when_due(
    state: &AppState,
    id: i64,
    reason: String,
) -> FlowResult<Option<Reviewed>> {
    let project_id = project_of(state, id).await?;
    let st = state.clone();
    state
        .project_actors
        .call(project_id, move || async move {
            approve_when_due_now(&st, id, &reason).await
        })
        .await?
}

async fn approve_when_due_now(
    state: &AppState,
    id: i64,
    reason: &str,
) -> FlowResult<Option<Reviewed>> {
    let now = state.clock.now();
    let (d, p, m) = {
        let mut conn = state.db.conn().await?;
        let Some(d) = deliveries::find(conn.exec(), id).await? else {
            return Ok(None);
        };
        if !d.status.is_under_review() || d.auto_approve_at.is_none_or(|at| at > now) {
            return Ok(None);
        }
        let Some(p) = crate::store::projects::find(conn.exec(), d.project_id).await? else {
            return Ok(None);
        };
        if require_active(&p).is_err() {
            return Ok(None);
        }
        let m = milestones::find(conn.exec(), d.milestone_id)
            .await?
            .ok_or_else(not_found)?;
        require_funded(conn.exec(), &m).await?;
        (d, p, m)
    };
    let release = escrow::release_milestone(
        state,
        None,
        p.id,
        m.id,
        ReleaseTrigger::DeliveryApproved { delivery_id: d.id },
    )
    .await?;
    after_release(state, None, p.id, &m, Some(&d), Some(reason)).await?;
    let mut conn = state.db.conn().await?;
    let delivery = deliveries::find(conn.exec(), id).await?.unwrap_or(d);
    Ok(Some(Reviewed {
        delivery,
        release: Some(release),
    }))
}

/// Rejection or revision request, in one locked transaction.
async fn decide_now(
    state: &AppState,
    caller: &Caller,
    project_id: i64,
    id: i64,
    decision: Decision,
    feedback: Option<&str>,
) -> FlowResult<Reviewed> {
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    tx.lock(LockScope::Project, project_id).await?;
    let (d, p, m) = reviewable(tx.exec(), caller, id).await?;
    let to = if decision == Decision::Reject {
        DeliveryStatus::Rejected
    } else {
        DeliveryStatus::NeedsRevision
    };
    if !deliveries::transition(
        tx.exec(),
        d.id,
        DeliveryStatus::Submitted,
        to,
        feedback,
        Some(caller.id),
        now,
    )
    .await?
    {
        return Err(changed());
    }
    let mut rejection = None;
    let mut payload = json!({
        "project_id": p.id, "milestone_id": m.id, "delivery_id": d.id,
        "decision": decision.as_str(),
    });
    if decision == Decision::Reject {
        let outcome = count_rejection(&mut tx, &p, &m, now).await?;
        let (notify, mails) = rejection_messages(&mut tx, &p, &m, &outcome, feedback).await?;
        rejection = Some(outcome);
        payload["rejection_count"] = json!(outcome.count);
        payload["milestone_cancelled"] = json!(outcome.cancelled);
        payload["refund_payment_id"] = json!(outcome.refund);
        payload["notify"] = json!(notify);
        payload["email"] = json!(mails);
    } else {
        // The ball is back with the expert.
        if p.status == ProjectStatus::InReview {
            move_project(&mut tx, &p, ProjectStatus::InProgress, now).await?;
        }
        if let Some(expert_id) = d.expert_id {
            payload["notify"] = json!([for_user(
                expert_id,
                "delivery_reviewed",
                "Revision requested",
                &format!(
                    "The company asks for changes to your delivery for \"{}\" of \"{}\".",
                    m.title, p.title
                ),
                json!({"project_id": p.id, "milestone_id": m.id, "delivery_id": d.id,
                       "decision": decision.as_str(), "feedback": feedback}),
            )]);
        }
    }
    record(&mut tx, "delivery.reviewed", p.id, payload, now).await?;
    let delivery = deliveries::find(tx.exec(), d.id)
        .await?
        .ok_or_else(changed)?;
    state.commit(tx).await?;
    if let Some(outcome) = &rejection {
        refund_cancelled(state, p.id, outcome).await;
    }
    Ok(Reviewed {
        delivery,
        release: None,
    })
}

// ---------------------------------------------------------------------------------------
// Lists
// ---------------------------------------------------------------------------------------

/// A page of a milestone's deliveries (participants and administrators; 404 for others).
pub async fn list_for_milestone(
    state: &AppState,
    caller: &Caller,
    milestone_id: i64,
    limit: i64,
    offset: i64,
) -> FlowResult<(Vec<Delivery>, i64)> {
    let mut conn = state.db.conn().await?;
    let (m, _, _) = milestone_in(conn.exec(), caller, milestone_id).await?;
    Ok(deliveries::list(conn.exec(), deliveries::Of::Milestone(m.id), limit, offset).await?)
}

/// A page of a project's deliveries (participants and administrators; 404 for others).
pub async fn list_for_project(
    state: &AppState,
    caller: &Caller,
    project_id: i64,
    limit: i64,
    offset: i64,
) -> FlowResult<(Vec<Delivery>, i64)> {
    let mut conn = state.db.conn().await?;
    let (p, _) = load_participating(conn.exec(), caller, project_id).await?;
    Ok(deliveries::list(conn.exec(), deliveries::Of::Project(p.id), limit, offset).await?)
}

/// A page of the caller's own deliveries.
pub async fn list_mine(
    state: &AppState,
    caller: &Caller,
    limit: i64,
    offset: i64,
) -> FlowResult<(Vec<Delivery>, i64)> {
    if !caller.expert {
        return Err(FlowError::forbidden_code(
            "EXPERT_ROLE_REQUIRED",
            "Only experts hand in deliveries",
        ));
    }
    let mut conn = state.db.conn().await?;
    Ok(deliveries::list(
        conn.exec(),
        deliveries::Of::Expert(caller.id),
        limit,
        offset,
    )
    .await?)
}
