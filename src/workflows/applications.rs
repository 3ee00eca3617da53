//! Proposals: an expert applies under the applying rules, the company asks for a revision or
//! turns it down, the expert resubmits. Selection is in [`super::selection`].

use serde_json::json;

use crate::domain::project::format_minor;
use crate::domain::project::{self as rules, ApplyRefusal, ProjectStatus};
use crate::domain::text::Feedback;
use crate::domain::user::Role;
use crate::integrations::mail::Template;
use crate::state::AppState;
use crate::store::applications::{self, Application, Proposal};
use crate::store::projects::Project;
use crate::store::{LockScope, profiles, users};
use crate::workflows::emails::email;
use crate::workflows::error::{FlowError, FlowResult};
use crate::workflows::notify::for_user;
use crate::workflows::projects::{Caller, load_owned, load_visible, record};

fn project_ref(p: &Project, application_id: i64) -> serde_json::Value {
    json!({"project_id": p.id, "project_title": p.title, "application_id": application_id})
}

/// An expert applies to a project (201). The project must be visible to them (else 404),
/// take proposals in its state (else 400 `PROJECT_NOT_OPEN`) and have invited them, or target
/// them when private (else 403 `NOT_INVITED`); one application per expert and project (409).
pub async fn apply(
    state: &AppState,
    caller: &Caller,
    project_id: i64,
    proposal: Proposal,
) -> FlowResult<Application> {
    if !caller.expert {
        return Err(FlowError::forbidden_code(
            "EXPERT_ROLE_REQUIRED",
            "Only experts apply to projects",
        ));
    }
    check_plan(&proposal)?;
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    tx.lock(LockScope::Project, project_id).await?;
    let (p, rel) = load_visible(tx.exec(), caller, project_id).await?;
    if rel.owner {
        return Err(FlowError::forbidden(
            "A company cannot apply to its own project",
        ));
    }
    let status = p.status;
    match rules::may_apply(status, rel.invited, rel.target) {
        Ok(()) => {}
        Err(ApplyRefusal::NotOpen) => {
            return Err(FlowError::rule(
                "PROJECT_NOT_OPEN",
                format!("This project does not take proposals while {}", p.status),
            ));
        }
        Err(ApplyRefusal::NotInvited) => {
            return Err(FlowError::forbidden_code(
                "NOT_INVITED",
                if status == ProjectStatus::PublishedPrivate {
                    "This private project takes proposals only from its expert"
                } else {
                    "This project takes proposals only from invited experts"
                },
            ));
        }
    }
    let id = match applications::insert(tx.exec(), project_id, caller.id, &proposal, now).await {
        Ok(id) => id,
        Err(err) if err.is_unique_violation() => {
            return Err(FlowError::conflict(
                "ALREADY_APPLIED",
                "You have already applied to this project",
            ));
        }
        Err(err) => return Err(err.into()),
    };
    // A proposal accepts that the platform issues the expert's invoices in their name
    // (self-billing), once: the first one's date is kept.
    profiles::accept_self_billing(tx.exec(), caller.id, now).await?;
    let mut notify = Vec::new();
    let mut mails = Vec::new();
    if let Some(company_id) = p.company_id {
        let expert = users::contact(tx.exec(), caller.id, Role::Experto).await?;
        let expert_name = expert.map_or_else(|| "An expert".to_owned(), |e| e.name);
        notify.push(for_user(
            company_id,
            "new_proposal",
            "New proposal",
            &format!("{expert_name} sent a proposal for \"{}\".", p.title),
            project_ref(&p, id),
        ));
        if let Some(company) = users::contact(tx.exec(), company_id, Role::Empresa).await? {
            mails.push(email(
                &company.email,
                Template::NewProposal,
                json!({
                    "name": company.name, "project_title": p.title, "project_id": p.id,
                    "expert_name": expert_name,
                    "proposed_budget": format_minor(proposal.proposed_budget_minor),
                    "currency": p.currency,
                }),
            ));
        }
    }
    let payload = json!({
        "project_id": project_id, "application_id": id, "expert_id": caller.id,
        "notify": notify, "email": mails,
    });
    record(&mut tx, "application.received", project_id, payload, now).await?;
    let application = applications::find(tx.exec(), id)
        .await?
        .ok_or_else(|| anyhow::anyhow!("application {id} vanished"))?;
    state.commit(tx).await?;
    Ok(application)
}

fn check_plan(proposal: &Proposal) -> FlowResult<()> {
    let amounts: Vec<i64> = proposal.milestones.iter().map(|m| m.amount_minor).collect();
    rules::check_milestone_plan(proposal.proposed_budget_minor, &amounts)
        .map_err(|message| FlowError::invalid("proposed_milestones", message))
}

/// The application `application_id` of project `p`, or 404.
async fn application_of(
    ex: crate::store::Exec<'_>,
    p: &Project,
    application_id: i64,
) -> FlowResult<Application> {
    applications::find(ex, application_id)
        .await?
        .filter(|a| a.project_id == p.id)
        .ok_or_else(|| FlowError::not_found("Application not found"))
}

/// The company asks for changes: `pending` → `needs_revision` with its feedback.
pub async fn request_revision(
    state: &AppState,
    caller: &Caller,
    project_id: i64,
    application_id: i64,
    feedback: &Feedback,
) -> FlowResult<Application> {
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    tx.lock(LockScope::Project, project_id).await?;
    let p = load_owned(tx.exec(), caller, project_id, false).await?;
    let a = application_of(tx.exec(), &p, application_id).await?;
    if !applications::request_revision(tx.exec(), a.id, feedback, now).await? {
        return Err(FlowError::conflict(
            "INVALID_STATE",
            format!(
                "Only a pending proposal can be sent back for revision; this one is {}",
                a.status
            ),
        ));
    }
    let notify = vec![for_user(
        a.expert_id,
        "application_revision_requested",
        "Changes requested",
        &format!(
            "The company asks for changes to your proposal for \"{}\".",
            p.title
        ),
        project_ref(&p, a.id),
    )];
    let payload = json!({
        "project_id": p.id, "application_id": a.id, "expert_id": a.expert_id, "notify": notify,
    });
    record(
        &mut tx,
        "application.revision_requested",
        p.id,
        payload,
        now,
    )
    .await?;
    let application = applications::find(tx.exec(), a.id).await?.unwrap_or(a);
    state.commit(tx).await?;
    Ok(application)
}

/// The expert resubmits: only from `needs_revision`; back to `pending`, attempt + 1,
/// feedback cleared.
pub async fn resubmit(
    state: &AppState,
    caller: &Caller,
    project_id: i64,
    application_id: i64,
    proposal: Proposal,
) -> FlowResult<Application> {
    check_plan(&proposal)?;
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    tx.lock(LockScope::Project, project_id).await?;
    let (p, _) = load_visible(tx.exec(), caller, project_id).await?;
    let a = application_of(tx.exec(), &p, application_id).await?;
    if a.expert_id != caller.id {
        return Err(FlowError::not_found("Application not found"));
    }
    if !applications::resubmit(tx.exec(), a.id, &proposal, now).await? {
        return Err(FlowError::conflict(
            "INVALID_STATE",
            format!(
                "A proposal can be resubmitted only when a revision was requested; this one is {}",
                a.status
            ),
        ));
    }
    let mut notify = Vec::new();
    if let Some(company_id) = p.company_id {
        notify.push(for_user(
            company_id,
            "application_resubmitted",
            "Proposal revised",
            &format!("A revised proposal for \"{}\" is waiting for you.", p.title),
            project_ref(&p, a.id),
        ));
    }
    let payload = json!({"project_id": p.id, "application_id": a.id, "notify": notify});
    record(&mut tx, "application.resubmitted", p.id, payload, now).await?;
    let application = applications::find(tx.exec(), a.id).await?.unwrap_or(a);
    state.commit(tx).await?;
    Ok(application)
}

/// The company turns a proposal down.
pub async fn reject(
    state: &AppState,
    caller: &Caller,
    project_id: i64,
    application_id: i64,
) -> FlowResult<Application> {
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    tx.lock(LockScope::Project, project_id).await?;
    let p = load_owned(tx.exec(), caller, project_id, false).await?;
    let a = application_of(tx.exec(), &p, application_id).await?;
    if !applications::reject(tx.exec(), a.id, now).await? {
        return Err(FlowError::conflict(
            "INVALID_STATE",
            format!("This proposal cannot be rejected while {}", a.status),
        ));
    }
    let notify = vec![for_user(
        a.expert_id,
        "application_rejected",
        "Proposal not selected",
        &format!("Your proposal for \"{}\" was not selected.", p.title),
        project_ref(&p, a.id),
    )];
    let payload = json!({
        "project_id": p.id, "application_id": a.id, "expert_id": a.expert_id, "notify": notify,
    });
    record(&mut tx, "application.rejected", p.id, payload, now).await?;
    let application = applications::find(tx.exec(), a.id).await?.unwrap_or(a);
    state.commit(tx).await?;
    Ok(application)
}
