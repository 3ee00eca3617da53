//! Projects from creation to publication: the company's creation checks, validation by an
//! administrator, invitations and curation, edits, manual status moves and deletion.
//! Selection and its undoing are in [`super::selection`], inside the project actor.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::domain::project::{
    self as rules, CurationCandidate, ProjectStatus, ProjectType, ValidationStatus,
};
use crate::domain::text::Title;
use crate::domain::user::Role;
use crate::domain::visibility::{self, Relation};
use crate::integrations::mail::Template;
use crate::state::AppState;
use crate::store::events::{self, NewEvent};
use crate::store::projects::{self, NewProject, Project};
use crate::store::{Exec, LockScope, Tx, expert_lists, profiles, reviews, users};
use crate::workflows::emails::email;
use crate::workflows::error::{FlowError, FlowResult};
use crate::workflows::notify::{for_admins, for_user};

/// Who is acting, as the workflows need to know it.
#[derive(Debug, Clone, Copy)]
pub struct Caller {
    pub id: i64,
    pub admin: bool,
    pub company: bool,
    pub expert: bool,
}

/// Whether a project is on the public marketplace ([`visibility::is_listed`]).
pub fn is_public(p: &Project) -> bool {
    ProjectType::parse(&p.project_type).is_some_and(|kind| visibility::is_listed(kind, p.status))
}

/// The project if `caller` may see it: administrators see every project, anyone a public
/// listing, and a private or unpublished project only the people in it. Otherwise 404, so
/// its existence is not revealed.
pub async fn load_visible(
    mut ex: Exec<'_>,
    caller: &Caller,
    id: i64,
) -> FlowResult<(Project, Relation)> {
    // One round trip: the project and the caller's invitation and application with it.
    let (p, invited_formally, applied) = projects::find_with_ties(ex.re(), id, caller.id)
        .await?
        .ok_or_else(|| FlowError::not_found("Project not found"))?;
    let mut rel = relation_by_row(&p, caller);
    rel.invited |= invited_formally;
    rel.applicant = applied;
    if sees(caller, &p, &rel) {
        Ok((p, rel))
    } else {
        Err(FlowError::not_found("Project not found"))
    }
}

/// How `caller` stands to `p` as far as its own columns tell: neither a formal invitation
/// nor an application (rows of their own tables).
pub fn relation_by_row(p: &Project, caller: &Caller) -> Relation {
    Relation {
        owner: p.company_id == Some(caller.id),
        assigned: p.expert_id == Some(caller.id),
        target: p.target_expert_id == Some(caller.id),
        invited: p.invited_experts.0.contains(&caller.id),
        applicant: false,
    }
}

/// Whether `caller`, standing as `rel` to `p`, may see it ([`visibility::sees`]).
pub fn sees(caller: &Caller, p: &Project, rel: &Relation) -> bool {
    visibility::sees(caller.admin, is_public(p), rel)
}

/// The project if `caller` owns it (or, with `admin_ok`, is an administrator): 404 when it
/// is not visible to them, 403 when visible but not theirs.
pub async fn load_owned(
    ex: Exec<'_>,
    caller: &Caller,
    id: i64,
    admin_ok: bool,
) -> FlowResult<Project> {
    let (p, rel) = load_visible(ex, caller, id).await?;
    if rel.owner || (admin_ok && caller.admin) {
        Ok(p)
    } else {
        Err(FlowError::forbidden(
            "Only the project's company may do this",
        ))
    }
}

/// Records a domain event of a project in the transaction.
pub async fn record(
    tx: &mut Tx,
    kind: &str,
    project_id: i64,
    payload: Value,
    now: DateTime<Utc>,
) -> FlowResult<i64> {
    Ok(events::record(
        tx.exec(),
        NewEvent {
            kind,
            aggregate: "project",
            aggregate_id: Some(project_id),
            payload,
        },
        now,
    )
    .await?)
}

fn project_ref(p: &Project) -> Value {
    json!({"project_id": p.id, "project_title": p.title})
}

// ---------------------------------------------------------------------------------------
// Creation
// ---------------------------------------------------------------------------------------

/// The specification's creation checks, in its order: (1) e-mail verified; (2) company
/// profile exists and is complete; (3) profile verified — 403 for each; (4) complete fiscal
/// data for the first project — 400 `FISCAL_DATA_REQUIRED`, and the company is told so by a
/// notification. (5), the deadline, is checked with the body.
pub async fn creation_checks(state: &AppState, caller: &Caller) -> FlowResult<()> {
    let mut conn = state.db.conn().await?;
    let user = users::find(conn.exec(), caller.id)
        .await?
        .ok_or_else(|| FlowError::forbidden("Unknown user"))?;
    if !caller.company {
        return Err(FlowError::forbidden_code(
            "COMPANY_ROLE_REQUIRED",
            "Only companies create projects",
        ));
    }
    if !user.email_verified {
        return Err(FlowError::forbidden_code(
            "EMAIL_NOT_VERIFIED",
            "Verify your e-mail address before creating a project",
        ));
    }
    let profile = profiles::find_by_user(conn.exec(), caller.id, Role::Empresa)
        .await?
        .ok_or_else(|| {
            FlowError::forbidden_code(
                "PROFILE_REQUIRED",
                "Create your company profile before creating a project",
            )
        })?;
    if profile
        .company_name
        .as_deref()
        .is_none_or(|n| n.trim().is_empty())
    {
        return Err(FlowError::forbidden_code(
            "PROFILE_INCOMPLETE",
            "Complete your company profile (company name) before creating a project",
        ));
    }
    if !profile.is_verified {
        return Err(FlowError::forbidden_code(
            "PROFILE_NOT_VERIFIED",
            "Your company profile must be verified before you create a project",
        ));
    }
    if !profile.fiscal_data_complete
        && projects::count_by_company(conn.exec(), caller.id).await? == 0
    {
        drop(conn);
        fiscal_data_required(state, caller.id, Role::Empresa, "create your first project").await?;
        return Err(FlowError::rule(
            "FISCAL_DATA_REQUIRED",
            "Complete your fiscal data before creating your first project",
        ));
    }
    Ok(())
}

/// Tells `user_id` that fiscal data is missing for `what` (notification `FISCAL_DATA_REQUIRED`).
pub async fn fiscal_data_required(
    state: &AppState,
    user_id: i64,
    role: Role,
    what: &str,
) -> FlowResult<()> {
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    events::record(
        tx.exec(),
        NewEvent::of_user(
            "profile.fiscal_data_required",
            user_id,
            json!({
                "notify": [for_user(
                    user_id,
                    "FISCAL_DATA_REQUIRED",
                    "Fiscal data required",
                    &format!("Complete the fiscal data of your profile to {what}."),
                    json!({"profile_type": role.as_str()}),
                )],
            }),
        ),
        now,
    )
    .await?;
    state.commit(tx).await?;
    Ok(())
}

/// A project as the company described it, already validated.
#[derive(Debug, Clone)]
pub struct ProjectDraft {
    pub title: Title,
    pub description: String,
    pub budget_minor: i64,
    pub deadline: Option<DateTime<Utc>>,
    pub skills_required: Vec<String>,
    pub project_type: ProjectType,
    pub target_expert_id: Option<i64>,
    /// `draft` or `pending_publication`.
    pub submit: bool,
}

/// Whether `user_id` is an expert (for targets and invitations).
pub async fn is_expert(ex: Exec<'_>, user_id: i64) -> FlowResult<bool> {
    Ok(users::roles_of(ex, user_id).await?.contains(&Role::Experto))
}

pub async fn create(state: &AppState, caller: &Caller, d: ProjectDraft) -> FlowResult<Project> {
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    if let Some(target) = d.target_expert_id
        && !is_expert(tx.exec(), target).await?
    {
        return Err(FlowError::invalid(
            "target_expert_id",
            "must be the id of an expert",
        ));
    }
    let status = if d.submit {
        ProjectStatus::PendingPublication
    } else {
        ProjectStatus::Draft
    };
    let id = projects::insert(
        tx.exec(),
        &NewProject {
            company_id: caller.id,
            target_expert_id: d.target_expert_id,
            title: &d.title,
            description: &d.description,
            budget_minor: d.budget_minor,
            currency: "eur",
            deadline: d.deadline,
            skills_required: &d.skills_required,
            project_type: d.project_type.as_str(),
            status,
            validation_status: d.submit.then_some(ValidationStatus::Pending),
            submitted_at: d.submit.then_some(now),
        },
        now,
    )
    .await?;
    let project = projects::find(tx.exec(), id)
        .await?
        .ok_or_else(|| anyhow::anyhow!("project {id} vanished"))?;
    let mut payload = json!({"project_id": id, "company_id": caller.id, "status": status.as_str()});
    if d.submit {
        payload["notify"] = json!([pending_publication_notice(&project)]);
    }
    record(&mut tx, "project.created", id, payload, now).await?;
    state.commit(tx).await?;
    Ok(project)
}

fn pending_publication_notice(p: &Project) -> Value {
    for_admins(
        "project_pending_publication",
        "Project awaiting validation",
        &format!("\"{}\" is waiting for validation.", p.title),
        project_ref(p),
    )
}

/// `draft` → `pending_publication`; administrators are told.
pub async fn submit(state: &AppState, caller: &Caller, id: i64) -> FlowResult<Project> {
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    tx.lock(LockScope::Project, id).await?;
    let p = load_owned(tx.exec(), caller, id, false).await?;
    if p.status != ProjectStatus::Draft {
        return Err(FlowError::conflict(
            "INVALID_STATE",
            format!(
                "Only a draft can be submitted; this project is {}",
                p.status
            ),
        ));
    }
    if !projects::submit_for_validation(tx.exec(), id, p.status, now).await? {
        return Err(FlowError::conflict(
            "INVALID_STATE",
            "The project changed; try again",
        ));
    }
    let payload = json!({"project_id": id, "notify": [pending_publication_notice(&p)]});
    record(&mut tx, "project.submitted", id, payload, now).await?;
    let project = projects::find(tx.exec(), id).await?.unwrap_or(p);
    state.commit(tx).await?;
    Ok(project)
}

/// A company asks one expert for a budget from the expert's profile: the expert is invited
/// (source `budget_request`) and the project goes to `pending_publication`, where invited
/// experts may propose while administrators validate it.
pub async fn request_budget(
    state: &AppState,
    caller: &Caller,
    id: i64,
    expert_id: i64,
    message: Option<&str>,
) -> FlowResult<Project> {
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    tx.lock(LockScope::Project, id).await?;
    let p = load_owned(tx.exec(), caller, id, false).await?;
    let status = p.status;
    if !status.is_before_selection() {
        return Err(FlowError::conflict(
            "INVALID_STATE",
            "A budget can only be requested before an expert is selected",
        ));
    }
    if !is_expert(tx.exec(), expert_id).await? {
        return Err(FlowError::invalid(
            "expert_id",
            "must be the id of an expert",
        ));
    }
    projects::invite(
        tx.exec(),
        id,
        expert_id,
        Some(caller.id),
        "budget_request",
        message,
        now,
    )
    .await?;
    if status != ProjectStatus::PendingPublication
        && !projects::submit_for_validation(tx.exec(), id, p.status, now).await?
    {
        return Err(FlowError::conflict(
            "INVALID_STATE",
            "The project changed; try again",
        ));
    }
    let mut notify = vec![pending_publication_notice(&p)];
    let mut mails = Vec::new();
    invitation_notices(tx.exec(), &p, expert_id, &mut notify, &mut mails).await?;
    let payload = json!({
        "project_id": id, "expert_id": expert_id, "notify": notify, "email": mails,
    });
    record(&mut tx, "project.budget_requested", id, payload, now).await?;
    let project = projects::find(tx.exec(), id).await?.unwrap_or(p);
    state.commit(tx).await?;
    Ok(project)
}

/// The notification and e-mail telling an expert they were invited to a project.
async fn invitation_notices(
    mut ex: Exec<'_>,
    p: &Project,
    expert_id: i64,
    notify: &mut Vec<Value>,
    mails: &mut Vec<Value>,
) -> FlowResult<()> {
    let company = match p.company_id {
        Some(id) => users::contact(ex.re(), id, Role::Empresa).await?,
        None => None,
    };
    let company_name = company.map_or_else(|| "A company".to_owned(), |c| c.name);
    notify.push(for_user(
        expert_id,
        "expert_invited",
        "You are invited to a project",
        &format!(
            "{company_name} invites you to send a proposal for \"{}\".",
            p.title
        ),
        project_ref(p),
    ));
    if let Some(expert) = users::contact(ex, expert_id, Role::Experto).await? {
        mails.push(email(
            &expert.email,
            Template::ExpertInvited,
            json!({
                "name": expert.name, "project_title": p.title, "project_id": p.id,
                "company_name": company_name,
            }),
        ));
    }
    Ok(())
}

/// An administrator's verdict on a project in `pending_publication`: approval publishes it
/// (`published_curated` or `published_private` by type), rejection returns it to `draft`
/// with the notes. The company is told either way; a private project's expert is invited.
pub async fn validate(
    state: &AppState,
    admin_id: i64,
    id: i64,
    approved: bool,
    notes: Option<&str>,
) -> FlowResult<Project> {
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    tx.lock(LockScope::Project, id).await?;
    let p = projects::find(tx.exec(), id)
        .await?
        .ok_or_else(|| FlowError::not_found("Project not found"))?;
    if p.status != ProjectStatus::PendingPublication {
        return Err(FlowError::conflict(
            "INVALID_STATE",
            format!(
                "Only a project pending publication can be validated; this one is {}",
                p.status
            ),
        ));
    }
    let to = if approved {
        ProjectType::parse(&p.project_type)
            .unwrap_or(ProjectType::Curated)
            .published_status()
    } else {
        ProjectStatus::Draft
    };
    if !projects::record_validation(tx.exec(), id, to, approved, notes, admin_id, now).await? {
        return Err(FlowError::conflict(
            "INVALID_STATE",
            "The project changed; try again",
        ));
    }
    let mut notify = Vec::new();
    let mut mails = Vec::new();
    if let Some(company_id) = p.company_id {
        let company = users::contact(tx.exec(), company_id, Role::Empresa).await?;
        let (kind, title, message) = if approved {
            (
                "project_approved",
                "Project published",
                format!("\"{}\" was approved and is published.", p.title),
            )
        } else {
            (
                "project_rejected",
                "Project not approved",
                format!(
                    "\"{}\" was not approved{}",
                    p.title,
                    notes.map_or_else(|| ".".to_owned(), |n| format!(": {n}"))
                ),
            )
        };
        notify.push(for_user(company_id, kind, title, &message, project_ref(&p)));
        if let Some(c) = company {
            let mut ctx = json!({"name": c.name, "project_title": p.title, "project_id": p.id});
            let template = if approved {
                Template::ProjectApproved
            } else {
                ctx["reason"] = json!(notes);
                Template::ProjectRejected
            };
            mails.push(email(&c.email, template, ctx));
        }
    }
    if approved
        && to == ProjectStatus::PublishedPrivate
        && let Some(target) = p.target_expert_id
    {
        invitation_notices(tx.exec(), &p, target, &mut notify, &mut mails).await?;
    }
    let kind = if approved {
        "project.published"
    } else {
        "project.rejected"
    };
    let payload = json!({
        "project_id": id, "approved": approved, "status": to.as_str(),
        "notify": notify, "email": mails,
    });
    record(&mut tx, kind, id, payload, now).await?;
    let project = projects::find(tx.exec(), id).await?.unwrap_or(p);
    state.commit(tx).await?;
    Ok(project)
}

// ---------------------------------------------------------------------------------------
// Invitations and curation
// ---------------------------------------------------------------------------------------

/// Invites experts to a project: formal invitation records (`source`), and for an
/// administrator's invitation also the legacy `invited_experts` list, so older readers see
/// them too. Returns the experts newly invited; each is notified and e-mailed.
pub async fn invite_experts(
    state: &AppState,
    admin_id: i64,
    id: i64,
    expert_ids: &[i64],
    source: &str,
    message: Option<&str>,
) -> FlowResult<Vec<i64>> {
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    tx.lock(LockScope::Project, id).await?;
    let p = projects::find(tx.exec(), id)
        .await?
        .ok_or_else(|| FlowError::not_found("Project not found"))?;
    if !p.status.is_before_selection() {
        return Err(FlowError::conflict(
            "INVALID_STATE",
            "Experts can only be invited before one is selected",
        ));
    }
    for &expert in expert_ids {
        if !is_expert(tx.exec(), expert).await? {
            return Err(FlowError::invalid(
                "expert_ids",
                format!("user {expert} is not an expert"),
            ));
        }
    }
    let mut invited = Vec::new();
    let mut notify = Vec::new();
    let mut mails = Vec::new();
    for &expert in expert_ids {
        if projects::invite(tx.exec(), id, expert, Some(admin_id), source, message, now).await? {
            invited.push(expert);
            invitation_notices(tx.exec(), &p, expert, &mut notify, &mut mails).await?;
        }
    }
    if source == "admin" {
        let mut legacy = p.invited_experts.0.clone();
        for &expert in expert_ids {
            if !legacy.contains(&expert) {
                legacy.push(expert);
            }
        }
        if legacy != p.invited_experts.0 {
            projects::set_invited_experts(tx.exec(), id, &legacy, now).await?;
        }
    }
    if !invited.is_empty() {
        let payload = json!({
            "project_id": id, "expert_ids": invited, "source": source,
            "notify": notify, "email": mails,
        });
        record(&mut tx, "project.experts_invited", id, payload, now).await?;
    }
    state.commit(tx).await?;
    Ok(invited)
}

/// A suggested expert for a project, with the score that ranked them.
#[derive(Debug, Clone)]
pub struct Suggestion {
    pub expert_id: i64,
    pub profile: profiles::Profile,
    pub skills: Vec<String>,
    pub score: rules::CurationScore,
    pub already_invited: bool,
}

/// How many experts a suggestion ranks at most: those SQL puts first by required skills
/// held, level and internal rating (`store::profiles::curation_candidates`); reviews, worth at
/// most 15 of the score's 100, then order them. Four times the longest list asked for; the
/// walk for several skills reads four times as many, so this bound is most of its cost (at M
/// for four skills, 2,000 entries walked for 500 candidates: 6 ms on PostgreSQL, 18 on SQLite;
/// 800 for 200: 3.5 and 7).
const CURATION_CANDIDATES: i64 = 200;

/// Verified, available, active experts ranked by [`rules::curation_score`] for a project
/// `caller` owns or administers ([`load_owned`]); with required skills, only experts who
/// have at least one of them. The candidates are kept by this instance until an expert
/// changes (`AppState::curation_candidates`); their reviews and the suggested profiles are
/// read at every request.
pub async fn curation_suggestions(
    state: &AppState,
    caller: &Caller,
    id: i64,
    limit: usize,
) -> FlowResult<Vec<Suggestion>> {
    let mut conn = state.db.conn().await?;
    let p = load_owned(conn.exec(), caller, id, true).await?;
    let required_names: Vec<String> = p
        .skills_required
        .0
        .iter()
        .map(|s| s.trim().to_lowercase())
        .collect();
    let writes = expert_lists::writes(conn.exec()).await?;
    let candidates = state
        .curation_candidates
        .get_or_read(
            (required_names.clone(), p.company_id),
            writes,
            |kept| kept.iter().map(profiles::CurationCandidate::bytes).sum(),
            profiles::curation_candidates(
                conn.exec(),
                &required_names,
                p.company_id,
                CURATION_CANDIDATES,
            ),
        )
        .await?;
    let formal: Vec<i64> = projects::invitations_of(conn.exec(), id)
        .await?
        .into_iter()
        .map(|i| i.expert_id)
        .collect();
    let now = state.clock.now();
    let ranked =
        ranked_with_reviews(conn.exec(), &p.skills_required.0, candidates, limit, now).await?;
    // Only the suggested are read whole.
    let ids: Vec<i64> = ranked.iter().map(|(_, c)| c.profile_id).collect();
    let mut curated = profiles::curated(conn.exec(), &ids).await?;
    Ok(ranked
        .into_iter()
        .filter_map(|(score, c)| {
            // A profile deleted between the two reads is left out.
            let (profile, skills) = curated.remove(&c.profile_id)?;
            let expert_id = profile.user_id;
            Some(Suggestion {
                expert_id,
                already_invited: formal.contains(&expert_id)
                    || p.invited_experts.0.contains(&expert_id),
                profile,
                skills,
                score,
            })
        })
        .collect())
}

/// The `limit` best of `candidates` scored with their reviews, best first ([`best_first`]).
///
/// Reviews weigh at most 15 of the 100, so every candidate's score lies between its score
/// without reviews and its ceiling ([`rules::curation_ceiling`]). Only candidates whose
/// ceiling reaches [`rules::curation_bar`] can enter the list ([`rules::curation_contends`]),
/// and their reviews are read in one statement (at M, 114 of 200 candidates for a list of
/// ten). The list is the one scoring every candidate would give.
async fn ranked_with_reviews(
    ex: Exec<'_>,
    required: &[String],
    candidates: Vec<profiles::CurationCandidate>,
    limit: usize,
    now: DateTime<Utc>,
) -> FlowResult<Vec<(rules::CurationScore, profiles::CurationCandidate)>> {
    if limit == 0 {
        return Ok(Vec::new());
    }
    let scored: Vec<(CurationCandidate, profiles::CurationCandidate)> = candidates
        .into_iter()
        .map(|c| {
            let scored = CurationCandidate {
                skills: c.skills.clone(),
                level: c.expert_level.clone(),
                internal_rating: c.internal_rating,
                ..Default::default()
            };
            (scored, c)
        })
        .filter(|(scored, _)| {
            required.is_empty() || rules::curation_score(required, scored).matched_skills > 0
        })
        .collect();
    let bar = rules::curation_bar(required, scored.iter().map(|(s, _)| s), limit);
    let contenders: Vec<_> = scored
        .into_iter()
        .filter(|(s, _)| rules::curation_contends(required, s, bar))
        .collect();
    let users: Vec<i64> = contenders.iter().map(|(_, c)| c.user_id).collect();
    let reviews: HashMap<i64, (f64, i64)> = reviews::averages(ex, &users, now)
        .await?
        .into_iter()
        .map(|(user, average, count)| (user, (average, count)))
        .collect();
    let mut ranked: Vec<(rules::CurationScore, profiles::CurationCandidate)> = contenders
        .into_iter()
        .map(|(mut scored, c)| {
            if let Some(&(average, count)) = reviews.get(&c.user_id) {
                (scored.review_average, scored.review_count) = (Some(average), count);
            }
            (rules::curation_score(required, &scored), c)
        })
        .collect();
    ranked.sort_by(|a, b| best_first((a.0.total, a.1.user_id), (b.0.total, b.1.user_id)));
    ranked.truncate(limit);
    Ok(ranked)
}

/// Curation's order over (score, user id): highest score first, then lowest user id.
fn best_first(a: (f64, i64), b: (f64, i64)) -> std::cmp::Ordering {
    b.0.total_cmp(&a.0).then(a.1.cmp(&b.1))
}

// ---------------------------------------------------------------------------------------
// Edits, status, deletion
// ---------------------------------------------------------------------------------------

/// Changes to a project; `None` leaves a field as it is.
#[derive(Debug, Clone, Default)]
pub struct ProjectChanges {
    pub title: Option<Title>,
    pub description: Option<String>,
    pub budget_minor: Option<i64>,
    pub deadline: Option<DateTime<Utc>>,
    pub skills_required: Option<Vec<String>>,
    pub project_type: Option<ProjectType>,
    pub target_expert_id: Option<i64>,
    /// The legacy invitation list, replaced as a whole.
    pub invited_experts: Option<Vec<i64>>,
}

/// Edits a project before selection (its company or an administrator).
pub async fn update(
    state: &AppState,
    caller: &Caller,
    id: i64,
    ch: ProjectChanges,
) -> FlowResult<Project> {
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    tx.lock(LockScope::Project, id).await?;
    let mut p = load_owned(tx.exec(), caller, id, true).await?;
    if !p.status.is_before_selection() {
        return Err(FlowError::conflict(
            "INVALID_STATE",
            "A project cannot be edited once an expert is selected",
        ));
    }
    for expert in ch
        .target_expert_id
        .iter()
        .chain(ch.invited_experts.iter().flatten())
    {
        if !is_expert(tx.exec(), *expert).await? {
            return Err(FlowError::invalid(
                if Some(*expert) == ch.target_expert_id {
                    "target_expert_id"
                } else {
                    "invited_experts"
                },
                format!("user {expert} is not an expert"),
            ));
        }
    }
    let expected = p.status;
    if let Some(v) = ch.title {
        p.title = v.into_string();
    }
    if let Some(v) = ch.description {
        p.description = v;
    }
    if let Some(v) = ch.budget_minor {
        p.budget_minor = v;
    }
    if let Some(v) = ch.deadline {
        p.deadline = Some(v);
    }
    if let Some(v) = ch.skills_required {
        p.skills_required.0 = v;
    }
    if let Some(v) = ch.project_type {
        p.project_type = v.as_str().to_owned();
    }
    if let Some(v) = ch.target_expert_id {
        p.target_expert_id = Some(v);
    }
    if let Some(v) = ch.invited_experts {
        p.invited_experts.0 = v;
    }
    if p.project_type == ProjectType::Private.as_str() && p.target_expert_id.is_none() {
        return Err(FlowError::invalid(
            "target_expert_id",
            "a private project needs its target expert",
        ));
    }
    if !projects::update_details(tx.exec(), &p, expected, now).await? {
        return Err(FlowError::conflict(
            "INVALID_STATE",
            "The project changed; try again",
        ));
    }
    let project = projects::find(tx.exec(), id).await?.unwrap_or(p);
    tx.commit().await?;
    Ok(project)
}

/// A manual status move (see [`rules::manual_move_allowed`]).
pub async fn change_status(
    state: &AppState,
    caller: &Caller,
    id: i64,
    to: ProjectStatus,
) -> FlowResult<Project> {
    if to == ProjectStatus::PendingPublication {
        return submit(state, caller, id).await;
    }
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    tx.lock(LockScope::Project, id).await?;
    let p = load_owned(tx.exec(), caller, id, true).await?;
    let from = p.status;
    if !rules::manual_move_allowed(from, to, caller.admin) {
        return Err(FlowError::conflict(
            "INVALID_TRANSITION",
            format!(
                "A project cannot move from {} to {} this way",
                from.as_str(),
                to.as_str()
            ),
        ));
    }
    if !projects::transition(tx.exec(), id, from, to, now).await? {
        return Err(FlowError::conflict(
            "INVALID_STATE",
            "The project changed; try again",
        ));
    }
    let payload = json!({"project_id": id, "from": from.as_str(), "to": to.as_str()});
    record(&mut tx, "project.status_changed", id, payload, now).await?;
    let project = projects::find(tx.exec(), id).await?.unwrap_or(p);
    state.commit(tx).await?;
    Ok(project)
}

/// Deletes a project before selection (its company or an administrator).
pub async fn delete(state: &AppState, caller: &Caller, id: i64) -> FlowResult<()> {
    let mut tx = state.db.begin().await?;
    tx.lock(LockScope::Project, id).await?;
    let p = load_owned(tx.exec(), caller, id, true).await?;
    if !p.status.is_before_selection() {
        return Err(FlowError::conflict(
            "INVALID_STATE",
            "A project cannot be deleted once an expert is selected",
        ));
    }
    match projects::delete(tx.exec(), id, p.status).await {
        Ok(true) => {}
        Ok(false) => {
            return Err(FlowError::conflict(
                "INVALID_STATE",
                "The project changed; try again",
            ));
        }
        // A payment or a dispute refers to it: history is never deleted.
        Err(err) if err.is_foreign_key_violation() => {
            return Err(FlowError::conflict(
                "PROJECT_HAS_PAYMENTS",
                "The project has payment records and cannot be deleted",
            ));
        }
        Err(err) => return Err(err.into()),
    }
    tx.commit().await?;
    Ok(())
}
