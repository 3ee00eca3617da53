//! Selection of an expert, and its undoing, inside the project's actor (DESIGN §3).
//!
//! The actor serialises every selection of one project in this process; the transaction's
//! advisory lock and its conditional updates (`status = $from AND expert_id IS NULL`,
//! application `pending`) make a second instance or a restarted actor harmless too. Of many
//! concurrent selections exactly one commits: one accepted application, one set of
//! milestones, one payment.

use serde_json::json;

use crate::domain::milestone::MilestoneStatus;
use crate::domain::payment::{IntentStatus, PaymentStatus};
use crate::domain::project::{ApplicationStatus, ProjectStatus};
use crate::domain::user::Role;
use crate::integrations::mail::Template;
use crate::state::AppState;
use crate::store::applications::{self, Application};
use crate::store::milestones::{self, Milestone, NewMilestone};
use crate::store::payments::{self, NewPayment, Payment};
use crate::store::projects::{self, Project};
use crate::store::{LockScope, profiles, users};
use crate::workflows::emails::email;
use crate::workflows::error::{FlowError, FlowResult};
use crate::workflows::notify::for_user;
use crate::workflows::projects::{Caller, fiscal_data_required, load_owned, record};

/// What a selection produced.
#[derive(Debug, Clone)]
pub struct Selection {
    pub project: Project,
    pub application: Application,
    pub milestones: Vec<Milestone>,
    /// The first milestone's payment, `pending`.
    pub payment: Payment,
}

/// The company selects `expert_id`'s proposal.
pub async fn select(
    state: &AppState,
    caller: Caller,
    project_id: i64,
    expert_id: i64,
) -> FlowResult<Selection> {
    let st = state.clone();
    state
        .project_actors
        .call(project_id, move || async move {
            select_now(&st, &caller, project_id, expert_id).await
        })
        .await?
}

async fn select_now(
    state: &AppState,
    caller: &Caller,
    project_id: i64,
    expert_id: i64,
) -> FlowResult<Selection> {
    let mut conn = state.db.conn().await?;
    let p = load_owned(conn.exec(), caller, project_id, false).await?;
    let status = p.status;
    if status.is_unpublished() {
        return Err(FlowError::rule(
            "PROJECT_NOT_PUBLISHED",
            format!(
                "An expert can be selected only once the project is published; it is still {}",
                p.status
            ),
        ));
    }
    if !status.allows_selection() {
        return Err(FlowError::conflict(
            "INVALID_STATE",
            format!(
                "An expert cannot be selected while the project is {}",
                p.status
            ),
        ));
    }
    let application = applications::find_by_expert(conn.exec(), project_id, expert_id)
        .await?
        .ok_or_else(|| FlowError::not_found("This expert has not applied to the project"))?;
    if application.status != ApplicationStatus::Pending {
        return Err(FlowError::conflict(
            "INVALID_STATE",
            format!(
                "Only a pending proposal can be selected; this one is {}",
                application.status
            ),
        ));
    }
    let fiscal_complete = profiles::find_by_user(conn.exec(), expert_id, Role::Experto)
        .await?
        .is_some_and(|pr| pr.fiscal_data_complete);
    if !fiscal_complete && !projects::ever_assigned(conn.exec(), expert_id).await? {
        drop(conn);
        fiscal_data_required(state, expert_id, Role::Experto, "start your first project").await?;
        return Err(FlowError::rule(
            "FISCAL_DATA_REQUIRED",
            "The expert must complete their fiscal data before their first project",
        ));
    }
    drop(conn);

    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    tx.lock(LockScope::Project, project_id).await?;
    let changed = || FlowError::conflict("INVALID_STATE", "The project changed; try again");
    if !projects::assign(tx.exec(), project_id, p.status, expert_id, now).await? {
        return Err(changed());
    }
    if !applications::accept(tx.exec(), application.id, now).await? {
        return Err(changed());
    }
    let turned_down =
        applications::reject_others_on_selection(tx.exec(), project_id, application.id, now)
            .await?;

    // The plan: the project's own milestones if the company wrote them, else the proposal's.
    let mut plan = milestones::active_of_project(tx.exec(), project_id).await?;
    if plan.is_empty() {
        let first_position = milestones::next_position(tx.exec(), project_id).await?;
        for (i, m) in application.proposed_milestones.0.iter().enumerate() {
            milestones::insert(
                tx.exec(),
                &NewMilestone {
                    project_id,
                    position: first_position + i as i64,
                    title: &m.title,
                    description: m.description.as_deref(),
                    amount_minor: m.amount_minor,
                    currency: &p.currency,
                    due_date: m.due_date,
                    status: MilestoneStatus::Pending,
                },
                now,
            )
            .await?;
        }
        plan = milestones::active_of_project(tx.exec(), project_id).await?;
    }
    let first = plan
        .first()
        .ok_or_else(|| FlowError::rule("NO_MILESTONES", "The proposal has no milestones"))?;
    if !milestones::transition(
        tx.exec(),
        first.id,
        MilestoneStatus::Pending,
        MilestoneStatus::AwaitingPayment,
        now,
    )
    .await?
    {
        return Err(FlowError::conflict(
            "INVALID_STATE",
            "The project's first milestone is not waiting to be funded",
        ));
    }
    let funding_due = now + state.settings.funding_reminder_after;
    milestones::start_funding_clock(tx.exec(), first.id, funding_due).await?;
    let payment_id = payments::insert_pending(
        tx.exec(),
        &NewPayment {
            project_id,
            milestone_id: Some(first.id),
            company_id: p.company_id,
            expert_id: Some(expert_id),
            amount_minor: first.amount_minor,
            currency: &first.currency,
        },
        now,
    )
    .await?;

    let expert = users::contact(tx.exec(), expert_id, Role::Experto).await?;
    let company = match p.company_id {
        Some(id) => users::contact(tx.exec(), id, Role::Empresa).await?,
        None => None,
    };
    let expert_name = expert.as_ref().map_or("The expert", |e| e.name.as_str());
    let company_name = company.as_ref().map_or("The company", |c| c.name.as_str());
    let reference = json!({"project_id": project_id, "project_title": p.title});
    let mut notify = vec![for_user(
        expert_id,
        "expert_selected",
        "You were selected",
        &format!("{company_name} selected your proposal for \"{}\".", p.title),
        reference.clone(),
    )];
    for other in &turned_down {
        notify.push(for_user(
            *other,
            "application_rejected",
            "Proposal not selected",
            &format!("Another proposal was selected for \"{}\".", p.title),
            reference.clone(),
        ));
    }
    let mut mails = Vec::new();
    if let Some(e) = &expert {
        mails.push(email(
            &e.email,
            Template::ExpertSelected,
            json!({"name": e.name, "project_title": p.title, "project_id": project_id,
                   "company_name": company_name}),
        ));
    }
    if let Some(c) = &company {
        mails.push(email(
            &c.email,
            Template::MatchConfirmed,
            json!({"name": c.name, "project_title": p.title, "project_id": project_id,
                   "counterpart_name": expert_name}),
        ));
    }
    let payload = json!({
        "project_id": project_id, "application_id": application.id, "expert_id": expert_id,
        "payment_id": payment_id, "milestone_id": first.id,
        "notify": notify, "email": mails,
    });
    record(&mut tx, "application.accepted", project_id, payload, now).await?;

    let project = projects::find(tx.exec(), project_id)
        .await?
        .ok_or_else(changed)?;
    let application = applications::find(tx.exec(), application.id)
        .await?
        .ok_or_else(changed)?;
    let milestones = milestones::active_of_project(tx.exec(), project_id).await?;
    let payment = payments::find(tx.exec(), payment_id)
        .await?
        .ok_or_else(changed)?;
    state.commit(tx).await?;
    super::deadlines::wake(state);
    // The intent is created after commit (no network call holds the transaction); if the
    // processor is down the payment stays without one and funding creates it later.
    let payment = match super::payments::ensure_intent(state, payment.clone()).await {
        Ok(p) => p,
        Err(error) => {
            tracing::warn!(payment_id = payment.id, %error, "payment intent not created yet");
            payment
        }
    };
    Ok(Selection {
        project,
        application,
        milestones,
        payment,
    })
}

/// Undoes a selection while no money has been authorised: the project returns to its state
/// before selection, the proposals to `pending`, the milestones are cancelled and the
/// unfunded payment `failed`.
pub async fn cancel(state: &AppState, caller: Caller, project_id: i64) -> FlowResult<Project> {
    let st = state.clone();
    state
        .project_actors
        .call(project_id, move || async move {
            cancel_now(&st, &caller, project_id).await
        })
        .await?
}

async fn cancel_now(state: &AppState, caller: &Caller, project_id: i64) -> FlowResult<Project> {
    release_unfunded_intents(state, project_id).await?;
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    tx.lock(LockScope::Project, project_id).await?;
    let p = load_owned(tx.exec(), caller, project_id, true).await?;
    // Money first: a payment held a moment ago has also moved the project on, and the
    // caller should hear why rather than only that the state changed.
    let payments = payments::list_for_project(tx.exec(), project_id).await?;
    if payments.iter().any(|y| !y.status.moved_no_money()) {
        return Err(FlowError::conflict(
            "MONEY_AUTHORISED",
            "Money has been authorised for this project; the selection cannot be cancelled",
        ));
    }
    if p.status != ProjectStatus::Assigned {
        return Err(FlowError::conflict(
            "INVALID_STATE",
            format!(
                "Only a selection not yet funded can be cancelled; the project is {}",
                p.status
            ),
        ));
    }
    for y in payments
        .iter()
        .filter(|y| y.status == PaymentStatus::Pending)
    {
        // Conditional: a payment held a moment ago makes this fail, and nothing is undone.
        if !payments::fail_pending(tx.exec(), y.id, "selection_cancelled", now).await? {
            return Err(FlowError::conflict(
                "MONEY_AUTHORISED",
                "Money has been authorised for this project; the selection cannot be cancelled",
            ));
        }
    }
    if !projects::unassign(tx.exec(), project_id, now).await? {
        return Err(FlowError::conflict(
            "INVALID_STATE",
            "The project changed; try again",
        ));
    }
    milestones::cancel_open_of_project(tx.exec(), project_id, now).await?;
    applications::reopen_after_selection(tx.exec(), project_id, now).await?;
    let mut notify = Vec::new();
    if let Some(expert_id) = p.expert_id {
        notify.push(for_user(
            expert_id,
            "selection_cancelled",
            "Selection cancelled",
            &format!("The company cancelled its selection for \"{}\".", p.title),
            json!({"project_id": project_id, "project_title": p.title}),
        ));
    }
    let cancelled: Vec<i64> = payments
        .iter()
        .filter(|y| y.status == PaymentStatus::Pending)
        .map(|y| y.id)
        .collect();
    let payload = json!({
        "project_id": project_id, "expert_id": p.expert_id, "payments_failed": cancelled,
        "notify": notify,
    });
    record(
        &mut tx,
        "project.selection_cancelled",
        project_id,
        payload,
        now,
    )
    .await?;
    let project = projects::find(tx.exec(), project_id).await?.unwrap_or(p);
    state.commit(tx).await?;
    Ok(project)
}

/// Asks the processor about each `pending` payment's intent: an authorised one means money is
/// held (409, whatever our records say yet); any other is cancelled, so the company's card
/// can no longer be charged for a selection that no longer exists.
pub(crate) async fn release_unfunded_intents(state: &AppState, project_id: i64) -> FlowResult<()> {
    let pending: Vec<Payment> = {
        let mut conn = state.db.conn().await?;
        payments::list_for_project(conn.exec(), project_id)
            .await?
            .into_iter()
            .filter(|y| y.status == PaymentStatus::Pending)
            .collect()
    };
    let client = &state.processor.client;
    let unavailable = |e: crate::integrations::processor::ProcessorError| {
        tracing::warn!(error = %e, "processor unavailable while cancelling a selection");
        FlowError::unavailable("The payment processor is unavailable; try again")
    };
    for y in pending {
        let Some(intent_id) = y.processor_payment_intent_id.as_deref() else {
            continue;
        };
        let intent = client
            .retrieve_payment_intent(intent_id)
            .await
            .map_err(unavailable)?;
        match intent.state() {
            status if status.is_authorised() || status == IntentStatus::Processing => {
                return Err(FlowError::conflict(
                    "MONEY_AUTHORISED",
                    "Money has been authorised for this project; the selection cannot be cancelled",
                ));
            }
            IntentStatus::Canceled => {}
            _ => {
                client
                    .cancel_payment_intent(intent_id, &format!("payment_{}_cancel", y.id))
                    .await
                    .map_err(unavailable)?;
            }
        }
    }
    Ok(())
}
