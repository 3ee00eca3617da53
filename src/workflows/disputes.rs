//! Disputes between a project's company and expert, mediated and decided by administrators.
//!
//! Raising, mediating and resolving run in the project's actor, each a conditional update
//! under the project's lock; the partial unique index `uq_disputes_project_active` keeps one
//! active dispute per project whatever happens around the actor. A resolution moves the money
//! payment by payment in each payment's actor (the lock order of DESIGN §3), the same path as
//! the processor's chargeback events, so a decision and a `charge.dispute.closed` on the same
//! payment are applied one after the other, never interleaved.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::domain::dispute::ChargebackStatus;
use crate::domain::payment::PaymentStatus;
use crate::domain::project::ProjectStatus;
use crate::domain::text::DecisionText;
use crate::domain::user::Role;
use crate::integrations::mail::Template;
use crate::state::AppState;
use crate::store::disputes::{self, Dispute, NewDispute};
use crate::store::payments::{self, Payment, ReleasedFrom};
use crate::store::projects::{self, Project};
use crate::store::{LockScope, Tx, milestones, users};
use crate::workflows::emails::email;
use crate::workflows::error::{FlowError, FlowResult};
use crate::workflows::escrow::{self, RefundCause};
use crate::workflows::notify::{for_admins, for_user};
use crate::workflows::projects::{Caller, load_visible};

/// The four decisions of `PUT /api/admin/disputes/{id}/resolve`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResolutionAction {
    ResolveFavorExpert,
    ReleaseToExpert,
    ResolveFavorCompany,
    RefundCompany,
}

impl ResolutionAction {
    pub const ALL: [Self; 4] = [
        Self::ResolveFavorExpert,
        Self::ReleaseToExpert,
        Self::ResolveFavorCompany,
        Self::RefundCompany,
    ];

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.as_str() == text)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::ResolveFavorExpert => "resolve_favor_expert",
            Self::ReleaseToExpert => "release_to_expert",
            Self::ResolveFavorCompany => "resolve_favor_company",
            Self::RefundCompany => "refund_company",
        }
    }

    /// The money goes to the expert (else back to the company).
    pub fn pays_expert(self) -> bool {
        matches!(self, Self::ResolveFavorExpert | Self::ReleaseToExpert)
    }
}

/// What a participant says when raising a dispute (validated by the caller: one of `reason`
/// or `description` is present).
#[derive(Debug, Clone, Default)]
pub struct Complaint {
    pub title: Option<String>,
    pub reason: Option<String>,
    pub description: Option<String>,
    pub dispute_type: Option<String>,
    pub priority: Option<String>,
    pub evidence: Option<String>,
    pub requested_resolution: Option<String>,
    pub contact_preference: Option<String>,
}

fn not_active(d: &Dispute) -> FlowError {
    FlowError::conflict(
        "DISPUTE_NOT_ACTIVE",
        format!(
            "The dispute is {}; only an open or in-review dispute can be changed",
            d.status
        ),
    )
}

fn not_found() -> FlowError {
    FlowError::not_found("No such dispute")
}

async fn find(state: &AppState, id: i64) -> FlowResult<Dispute> {
    let mut conn = state.db.conn().await?;
    disputes::find(conn.exec(), id).await?.ok_or_else(not_found)
}

/// A `[DISPUTE_EVENT]` audit line in the project's administrators' notes.
pub(crate) async fn audit(
    tx: &mut Tx,
    project_id: i64,
    text: &str,
    now: DateTime<Utc>,
) -> FlowResult<()> {
    let line = format!("[DISPUTE_EVENT] {} {text}", now.to_rfc3339());
    projects::append_admin_note(tx.exec(), project_id, &line, now).await?;
    Ok(())
}

/// Records a dispute's domain event (aggregate `dispute`).
async fn record(
    tx: &mut Tx,
    kind: &str,
    dispute_id: i64,
    payload: Value,
    now: DateTime<Utc>,
) -> FlowResult<()> {
    crate::store::events::record(
        tx.exec(),
        crate::store::events::NewEvent {
            kind,
            aggregate: "dispute",
            aggregate_id: Some(dispute_id),
            payload,
        },
        now,
    )
    .await?;
    Ok(())
}

/// The company and the expert of a project, as they are written to.
async fn parties(tx: &mut Tx, p: &Project) -> FlowResult<Vec<users::Contact>> {
    let mut found = Vec::new();
    for (id, kind) in [(p.company_id, Role::Empresa), (p.expert_id, Role::Experto)] {
        if let Some(id) = id
            && let Some(c) = users::contact(tx.exec(), id, kind).await?
        {
            found.push(c);
        }
    }
    Ok(found)
}

// ---------------------------------------------------------------------------------------
// Raising and reading
// ---------------------------------------------------------------------------------------

/// Whether `caller` is the project's company or expert: 404 when they cannot see it, 403 when
/// they can but take no part in it (administrators only read). Checked again in the actor.
async fn require_party(state: &AppState, caller: &Caller, project_id: i64) -> FlowResult<()> {
    let mut conn = state.db.conn().await?;
    let (_, rel) = load_visible(conn.exec(), caller, project_id).await?;
    if rel.owner || rel.assigned {
        Ok(())
    } else {
        Err(not_a_party())
    }
}

fn not_a_party() -> FlowError {
    FlowError::forbidden("Only the project's company or expert may raise a dispute")
}

/// `POST /api/projects/{id}/dispute`: the company or the expert raises a dispute. The project
/// becomes `disputed`, its `pending` and `held` payments too; administrators and the
/// counterpart are told (with an e-mail). Refused (409) while a dispute is active or when the
/// project is `completed`, `disputed` or `cancelled`. Answers the dispute's id.
pub async fn raise(
    state: &AppState,
    caller: &Caller,
    project_id: i64,
    complaint: Complaint,
) -> FlowResult<i64> {
    require_party(state, caller, project_id).await?;
    let st = state.clone();
    let raised_by = caller.id;
    state
        .project_actors
        .call(project_id, move || async move {
            raise_now(&st, raised_by, project_id, &complaint).await
        })
        .await?
}

async fn raise_now(
    state: &AppState,
    raised_by: i64,
    project_id: i64,
    c: &Complaint,
) -> FlowResult<i64> {
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    tx.lock(LockScope::Project, project_id).await?;
    let p = projects::find(tx.exec(), project_id)
        .await?
        .ok_or_else(|| FlowError::not_found("Project not found"))?;
    if p.company_id != Some(raised_by) && p.expert_id != Some(raised_by) {
        return Err(not_a_party());
    }
    if matches!(
        p.status,
        ProjectStatus::Completed | ProjectStatus::Disputed | ProjectStatus::Cancelled
    ) {
        return Err(FlowError::conflict(
            "DISPUTE_NOT_ALLOWED",
            format!("A dispute cannot be raised on a {} project", p.status),
        ));
    }
    if disputes::active_of_project(tx.exec(), project_id)
        .await?
        .is_some()
    {
        return Err(active_exists());
    }
    let frozen = payments::dispute_open_of_project(tx.exec(), project_id, now).await?;
    // The payment the dispute is about: the money in escrow, else the latest released.
    let all = payments::list_for_project(tx.exec(), project_id).await?;
    let held = |y: &&Payment| frozen.contains(&y.id) && y.held_at.is_some();
    let payment_id = all
        .iter()
        .filter(held)
        .map(|y| y.id)
        .min()
        .or_else(|| frozen.iter().copied().min())
        .or_else(|| {
            all.iter()
                .filter(|y| y.status == PaymentStatus::Released)
                .map(|y| y.id)
                .max()
        });
    if !projects::transition(
        tx.exec(),
        project_id,
        p.status,
        ProjectStatus::Disputed,
        now,
    )
    .await?
    {
        return Err(FlowError::conflict(
            "INVALID_STATE",
            "The project changed; try again",
        ));
    }
    let reason = c
        .reason
        .as_deref()
        .or(c.description.as_deref())
        .unwrap_or_default();
    let inserted = disputes::insert(
        tx.exec(),
        &NewDispute {
            project_id,
            payment_id,
            raised_by,
            title: c.title.as_deref(),
            reason,
            description: c.description.as_deref(),
            dispute_type: c.dispute_type.as_deref(),
            priority: c.priority.as_deref(),
            evidence: c.evidence.as_deref(),
            requested_resolution: c.requested_resolution.as_deref(),
            contact_preference: c.contact_preference.as_deref(),
        },
        now,
    )
    .await;
    let id = match inserted {
        Ok(id) => id,
        Err(e) if e.is_unique_violation() => return Err(active_exists()),
        Err(e) => return Err(e.into()),
    };
    let by_company = p.company_id == Some(raised_by);
    let side = if by_company { "company" } else { "expert" };
    if !by_company {
        // The company's silence is escalated after DISPUTE_RESPONSE_DAYS (issue 20).
        let due = now + state.settings.dispute_response_within;
        crate::store::timers::start_response_clock(tx.exec(), id, due).await?;
    }
    audit(
        &mut tx,
        project_id,
        &format!(
            "dispute {id} raised by the {side} (user {raised_by}); payments frozen: {frozen:?}"
        ),
        now,
    )
    .await?;

    let people = parties(&mut tx, &p).await?;
    let opener = people
        .iter()
        .find(|c| c.id == raised_by)
        .map(|c| c.name.clone())
        .unwrap_or_else(|| format!("The {side}"));
    let data = json!({"dispute_id": id, "project_id": project_id, "payment_id": payment_id,
                      "project_title": p.title});
    let message = format!("{opener} opened a dispute on \"{}\": {reason}", p.title);
    let mut notify = vec![for_admins(
        "dispute_created",
        "Dispute opened",
        &message,
        data.clone(),
    )];
    let mut mails = Vec::new();
    let mail = |to: &users::Contact| {
        email(
            &to.email,
            Template::DisputeCreated,
            json!({"name": to.name, "project_title": p.title, "project_id": project_id,
                   "opened_by": opener, "reason": reason}),
        )
    };
    for counterpart in people.iter().filter(|c| c.id != raised_by) {
        notify.push(for_user(
            counterpart.id,
            "dispute_created",
            "Dispute opened",
            &message,
            data.clone(),
        ));
        mails.push(mail(counterpart));
    }
    for admin in users::administrator_contacts(tx.exec()).await? {
        mails.push(mail(&admin));
    }
    let payload = json!({"dispute_id": id, "project_id": project_id, "payment_id": payment_id,
                         "raised_by": raised_by, "frozen_payments": frozen,
                         "notify": notify, "email": mails});
    record(&mut tx, "dispute.created", id, payload, now).await?;
    state.commit(tx).await?;
    crate::workflows::deadlines::wake(state);
    Ok(id)
}

fn active_exists() -> FlowError {
    FlowError::conflict(
        "DISPUTE_ACTIVE",
        "The project already has an open dispute; it must be resolved first",
    )
}

/// `GET /api/projects/{id}/dispute`: the project's most recent dispute, for its company, its
/// expert and administrators.
pub async fn latest(state: &AppState, caller: &Caller, project_id: i64) -> FlowResult<Dispute> {
    let mut conn = state.db.conn().await?;
    let (_, rel) = load_visible(conn.exec(), caller, project_id).await?;
    if !(rel.owner || rel.assigned || caller.admin) {
        return Err(FlowError::forbidden(
            "Only the project's company, its expert and administrators see its disputes",
        ));
    }
    disputes::latest_of_project(conn.exec(), project_id)
        .await?
        .ok_or_else(|| FlowError::not_found("The project has no dispute"))
}

// ---------------------------------------------------------------------------------------
// Mediation
// ---------------------------------------------------------------------------------------

/// `PUT /api/admin/disputes/{id}/mediate`: `open` → `in_review` with the mediator's notes;
/// the parties are told an administrator took it up.
pub async fn mediate(
    state: &AppState,
    admin_id: i64,
    dispute_id: i64,
    notes: DecisionText,
) -> FlowResult<Dispute> {
    let d = find(state, dispute_id).await?;
    let st = state.clone();
    state
        .project_actors
        .call(d.project_id, move || async move {
            let now = st.clock.now();
            let mut tx = st.db.begin().await?;
            tx.lock(LockScope::Project, d.project_id).await?;
            if !disputes::mediate(tx.exec(), dispute_id, admin_id, &notes, now).await? {
                let current = disputes::find(tx.exec(), dispute_id)
                    .await?
                    .ok_or_else(not_found)?;
                return Err(FlowError::conflict(
                    "DISPUTE_NOT_OPEN",
                    format!(
                        "The dispute is {}; only an open dispute goes to mediation",
                        current.status
                    ),
                ));
            }
            audit(
                &mut tx,
                d.project_id,
                &format!("dispute {dispute_id} in mediation by administrator {admin_id}"),
                now,
            )
            .await?;
            let p = projects::find(tx.exec(), d.project_id)
                .await?
                .ok_or_else(not_found)?;
            let data = json!({"dispute_id": dispute_id, "project_id": p.id,
                              "project_title": p.title});
            let notify: Vec<Value> = parties(&mut tx, &p)
                .await?
                .iter()
                .map(|c| {
                    for_user(
                        c.id,
                        "dispute_in_review",
                        "Dispute in mediation",
                        &format!(
                            "An administrator is reviewing the dispute on \"{}\".",
                            p.title
                        ),
                        data.clone(),
                    )
                })
                .collect();
            let payload = json!({"dispute_id": dispute_id, "project_id": p.id,
                                 "mediated_by": admin_id, "notify": notify});
            record(&mut tx, "dispute.in_review", dispute_id, payload, now).await?;
            let mediated = disputes::find(tx.exec(), dispute_id)
                .await?
                .ok_or_else(not_found)?;
            st.commit(tx).await?;
            Ok(mediated)
        })
        .await?
}

// ---------------------------------------------------------------------------------------
// Resolution
// ---------------------------------------------------------------------------------------

/// A decided dispute and the payments it moved, as they are now.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub dispute: Dispute,
    pub payments: Vec<Payment>,
}

/// `PUT /api/admin/disputes/{id}/resolve`: decides an `open` or `in_review` dispute. The
/// project's disputed payments (and a released one the dispute is about) go to the expert
/// (captured and transferred by the escrow rules; a payment never funded goes back to
/// `pending`) or back to the company (reversal first, then refund or cancellation; the
/// milestone is cancelled unless approved). Then, in one transaction: the dispute `resolved`,
/// the project `in_progress` (or `completed` when no milestone is left), the audit line and
/// both parties told. While the card issuer is deciding a chargeback on the project the
/// processor holds the money, so nothing is decided (409 `CHARGEBACK_OPEN`).
pub async fn resolve(
    state: &AppState,
    admin_id: i64,
    dispute_id: i64,
    resolution: DecisionText,
    action: ResolutionAction,
) -> FlowResult<Resolved> {
    let d = find(state, dispute_id).await?;
    let st = state.clone();
    state
        .project_actors
        .call(d.project_id, move || async move {
            resolve_now(&st, admin_id, dispute_id, &resolution, action).await
        })
        .await?
}

async fn resolve_now(
    state: &AppState,
    admin_id: i64,
    dispute_id: i64,
    resolution: &str,
    action: ResolutionAction,
) -> FlowResult<Resolved> {
    let d = find(state, dispute_id).await?;
    if !is_active(&d) {
        return Err(not_active(&d));
    }
    require_no_open_chargeback(state, &d).await?;
    // The project's actor serialises decisions on this instance only: claimed in the
    // database first, so a decision another instance is making is refused here.
    {
        let mut conn = state.db.conn().await?;
        if !disputes::claim_decision(conn.exec(), dispute_id, action.as_str(), state.clock.now())
            .await?
        {
            return Err(FlowError::conflict(
                "DISPUTE_NOT_ACTIVE",
                "Another decision of this dispute is under way",
            ));
        }
    }
    let covered = {
        let mut conn = state.db.conn().await?;
        let mut ids: Vec<i64> = payments::disputed_of_project(conn.exec(), d.project_id)
            .await?
            .iter()
            .map(|y| y.id)
            .collect();
        if let Some(id) = d.payment_id
            && !ids.contains(&id)
            && payments::find(conn.exec(), id)
                .await?
                .is_some_and(|y| y.status == PaymentStatus::Released)
        {
            ids.push(id);
        }
        ids
    };
    let mut moved = Vec::new();
    let mut refunded_milestones = Vec::new();
    for payment_id in covered {
        let (y, next) = escrow::in_payment_actor(state, payment_id, move |st| async move {
            decide_payment(&st, dispute_id, payment_id, admin_id, action).await
        })
        .await?;
        let release = escrow::with_next_intent(state, y, next).await;
        if release.payment.status == PaymentStatus::Refunded
            && let Some(m) = release.payment.milestone_id
        {
            refunded_milestones.push(m);
        }
        moved.push(release.payment);
    }

    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    tx.lock(LockScope::Project, d.project_id).await?;
    if !disputes::resolve(
        tx.exec(),
        dispute_id,
        admin_id,
        resolution,
        action.as_str(),
        now,
    )
    .await?
    {
        // Decided meanwhile by the processor (a chargeback lost): its record stands.
        tracing::warn!(
            dispute_id,
            "dispute decided meanwhile; the resolution is not recorded"
        );
        let current = disputes::find(tx.exec(), dispute_id)
            .await?
            .ok_or_else(not_found)?;
        return Err(not_active(&current));
    }
    for m in refunded_milestones {
        milestones::cancel_unapproved(tx.exec(), m, now).await?;
    }
    let to = settle_project(&mut tx, d.project_id, d.created_at, now).await?;
    let ids: Vec<i64> = moved.iter().map(|y| y.id).collect();
    audit(
        &mut tx,
        d.project_id,
        &format!(
            "dispute {dispute_id} resolved by administrator {admin_id}: {}; payments {ids:?}; project {to}",
            action.as_str()
        ),
        now,
    )
    .await?;
    announce_resolution(&mut tx, &d, resolution, action.as_str(), now).await?;
    let dispute = disputes::find(tx.exec(), dispute_id)
        .await?
        .ok_or_else(not_found)?;
    state.commit(tx).await?;
    Ok(Resolved {
        dispute,
        payments: moved,
    })
}

fn is_active(d: &Dispute) -> bool {
    d.status.is_active()
}

/// A chargeback on the dispute must be closed before an administrator decides: until then
/// the card issuer holds the money (the processor refuses refunds of a disputed charge, and
/// a transfer could pay the expert money the bank takes back). The processor is asked when
/// our record is not final yet, so a decision made right after the bank's is not refused.
async fn require_no_open_chargeback(state: &AppState, d: &Dispute) -> FlowResult<()> {
    let Some(chargeback) = d.processor_dispute_id.as_deref() else {
        return Ok(());
    };
    if d.processor_dispute_status
        .as_deref()
        .is_some_and(|word| ChargebackStatus::of(word).is_decided())
    {
        return Ok(());
    }
    let live = state
        .processor
        .client
        .retrieve_dispute(chargeback)
        .await
        .map_err(|e| escrow::processor_failure("report the chargeback", &e))?;
    match live.state() {
        ChargebackStatus::Won | ChargebackStatus::WarningClosed => Ok(()),
        // Lost, its notice not applied yet: the refund it records comes first.
        ChargebackStatus::Lost => Err(FlowError::conflict(
            "CHARGEBACK_CLOSING",
            "The card issuer has just decided the chargeback; try again in a moment",
        )),
        _ => Err(FlowError::conflict(
            "CHARGEBACK_OPEN",
            "The card issuer is still deciding the chargeback on this project; resolve the dispute once it is closed",
        )),
    }
}

/// One payment's side of a decision, in its actor (after the dispute is seen still active
/// there: a chargeback's close applied just before wins). Answers the payment and, for a
/// release, the next milestone's payment prepared.
async fn decide_payment(
    state: &AppState,
    dispute_id: i64,
    payment_id: i64,
    admin_id: i64,
    action: ResolutionAction,
) -> FlowResult<(Payment, Option<Payment>)> {
    let d = find(state, dispute_id).await?;
    if !is_active(&d) {
        return Err(not_active(&d));
    }
    let y = escrow::load(state, payment_id).await?;
    if !action.pays_expert() {
        let y =
            escrow::refund_in_actor(state, payment_id, RefundCause::DisputeResolved, None).await?;
        return Ok((y, None));
    }
    match y.status {
        PaymentStatus::Released => Ok((escrow::transfer(state, y).await?, None)),
        PaymentStatus::Disputed
            if y.held_at.is_some() || authorised_meanwhile(state, &y).await? =>
        {
            escrow::release_in_actor(
                state,
                payment_id,
                ReleasedFrom::Disputed,
                Some(admin_id),
                None,
            )
            .await
        }
        PaymentStatus::Disputed => {
            // Never funded: nothing to release; the company funds it as before.
            let mut conn = state.db.conn().await?;
            payments::undispute_unfunded(conn.exec(), payment_id, state.clock.now()).await?;
            Ok((escrow::load(state, payment_id).await?, None))
        }
        _ => Ok((y, None)),
    }
}

/// Whether a payment frozen before it was funded was authorised while disputed (its event
/// then found it `disputed` and moved nothing).
async fn authorised_meanwhile(state: &AppState, y: &Payment) -> FlowResult<bool> {
    let Some(intent_id) = y.processor_payment_intent_id.as_deref() else {
        return Ok(false);
    };
    let intent = state
        .processor
        .client
        .retrieve_payment_intent(intent_id)
        .await
        .map_err(|e| escrow::processor_failure("report the payment", &e))?;
    Ok(escrow::is_authorised(&intent))
}

/// A disputed project goes back to work: `in_progress`, or `completed` when it has
/// milestones and none is left to do; the review clocks the dispute (raised at
/// `disputed_since`) stopped restart with the time they had left. Answers the project's state.
pub(crate) async fn settle_project(
    tx: &mut Tx,
    project_id: i64,
    disputed_since: DateTime<Utc>,
    now: DateTime<Utc>,
) -> FlowResult<ProjectStatus> {
    crate::workflows::deadlines::resume_review_clocks(tx, project_id, disputed_since, now).await?;
    let (_, count) = milestones::list_for_project(tx.exec(), project_id, 1, 0).await?;
    let done = count > 0 && !milestones::has_unfinished(tx.exec(), project_id).await?;
    let to = if done {
        ProjectStatus::Completed
    } else {
        ProjectStatus::InProgress
    };
    if projects::transition(tx.exec(), project_id, ProjectStatus::Disputed, to, now).await? && done
    {
        crate::workflows::reviews::ask_for_reviews(tx, project_id, now).await?;
    }
    let p = projects::find(tx.exec(), project_id)
        .await?
        .ok_or_else(|| FlowError::not_found("Project not found"))?;
    Ok(p.status)
}

/// Tells both parties (notification and e-mail) how the dispute was decided.
pub(crate) async fn announce_resolution(
    tx: &mut Tx,
    d: &Dispute,
    resolution: &str,
    action: &str,
    now: DateTime<Utc>,
) -> FlowResult<()> {
    let p = projects::find(tx.exec(), d.project_id)
        .await?
        .ok_or_else(|| FlowError::not_found("Project not found"))?;
    let data = json!({"dispute_id": d.id, "project_id": p.id, "project_title": p.title,
                      "resolution_action": action});
    let mut notify = Vec::new();
    let mut mails = Vec::new();
    for party in parties(tx, &p).await? {
        notify.push(for_user(
            party.id,
            "dispute_resolved",
            "Dispute resolved",
            &format!("The dispute on \"{}\" is resolved: {resolution}", p.title),
            data.clone(),
        ));
        mails.push(email(
            &party.email,
            Template::DisputeResolved,
            json!({"name": party.name, "project_title": p.title, "project_id": p.id,
                   "resolution": resolution}),
        ));
    }
    let payload = json!({"dispute_id": d.id, "project_id": p.id, "resolution_action": action,
                         "notify": notify, "email": mails});
    record(tx, "dispute.resolved", d.id, payload, now).await
}
