//! `/api/projects/*` (projects, their validation, invitations and curation) and
//! `POST /api/admin/projects/{id}/invite-experts`. Proposals and selection are in
//! [`super::applications`].

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::domain::money::{minor_to_number, parse_number};
use crate::domain::project::{ProjectStatus, ProjectType, ValidationStatus, parse_deadline};
use crate::domain::text::Title;
use crate::http::auth::AuthUser;
use crate::http::error::{ApiError, ApiResult, FieldError};
use crate::store::projects::Project;
use crate::workflows::projects::{Caller, ProjectChanges, ProjectDraft};

mod curation;
mod lists;
mod one;

pub use curation::*;
pub use lists::*;
pub use one::*;

// ---------------------------------------------------------------------------------------
// Views
// ---------------------------------------------------------------------------------------

/// A project.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct ProjectView {
    pub id: i64,
    pub title: String,
    pub description: String,
    /// A decimal number with at most 2 decimals.
    pub budget: f64,
    /// ISO 4217, lower case.
    pub currency: String,
    pub deadline: Option<DateTime<Utc>>,
    pub skills_required: Vec<String>,
    /// `private` or `curated`.
    pub project_type: String,
    #[schema(value_type = String)]
    pub status: ProjectStatus,
    /// `pending`, `approved` or `rejected`.
    #[schema(value_type = Option<String>)]
    pub validation_status: Option<ValidationStatus>,
    /// The administrator's notes on validation: for the company and administrators.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub validation_notes: Option<String>,
    pub submitted_at: Option<DateTime<Utc>>,
    pub validated_at: Option<DateTime<Utc>>,
    pub published_at: Option<DateTime<Utc>>,
    pub assigned_at: Option<DateTime<Utc>>,
    pub completed_at: Option<DateTime<Utc>>,
    pub company_id: Option<i64>,
    pub expert_id: Option<i64>,
    pub target_expert_id: Option<i64>,
    /// Legacy invitation list (formal invitations are records of their own).
    pub invited_experts: Vec<i64>,
    /// Audit lines (`[DISPUTE_EVENT] …`): administrators only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_notes: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl ProjectView {
    /// The project as `caller` may see it.
    pub fn for_caller(p: Project, caller: Option<&Caller>) -> Self {
        let admin = caller.is_some_and(|c| c.admin);
        let owner = caller.is_some_and(|c| p.company_id == Some(c.id));
        Self {
            id: p.id,
            title: p.title,
            description: p.description,
            budget: minor_to_number(p.budget_minor),
            currency: p.currency,
            deadline: p.deadline,
            skills_required: p.skills_required.0,
            project_type: p.project_type,
            status: p.status,
            validation_status: p.validation_status,
            validation_notes: p.validation_notes.filter(|_| admin || owner),
            submitted_at: p.submitted_at,
            validated_at: p.validated_at,
            published_at: p.published_at,
            assigned_at: p.assigned_at,
            completed_at: p.completed_at,
            company_id: p.company_id,
            expert_id: p.expert_id,
            target_expert_id: p.target_expert_id,
            invited_experts: p.invited_experts.0,
            admin_notes: admin.then_some(p.admin_notes),
            created_at: p.created_at,
            updated_at: p.updated_at,
        }
    }
}

pub fn caller(auth: &AuthUser) -> Caller {
    use crate::domain::user::Role;
    Caller {
        id: auth.id(),
        admin: auth.has_role(Role::Admin),
        company: auth.has_role(Role::Empresa),
        expert: auth.has_role(Role::Experto),
    }
}

// ---------------------------------------------------------------------------------------
// Input
// ---------------------------------------------------------------------------------------

const MAX_DESCRIPTION: usize = 20_000;
const MAX_SKILLS: usize = 50;

/// `POST /api/projects/`.
#[derive(Deserialize, ToSchema)]
pub struct CreateProjectRequest {
    /// Required: a missing title is answered 422 naming the field, as any invalid one.
    #[schema(required = true, value_type = String, min_length = 1, max_length = 200)]
    pub title: Option<String>,
    pub description: Option<String>,
    /// A positive decimal number with at most 2 decimals.
    #[schema(value_type = f64)]
    pub budget: Option<serde_json::Number>,
    /// `YYYY-MM-DDTHH:MM:SS` (read as UTC) or RFC 3339; not in the past.
    pub deadline: Option<String>,
    #[serde(default)]
    pub skills_required: Vec<String>,
    /// `private` or `curated` (default).
    pub project_type: Option<String>,
    /// The expert of a private project (required for `private`).
    pub target_expert_id: Option<i64>,
    /// `draft` (default) or `pending_publication`.
    pub status: Option<String>,
}

/// `PUT /api/projects/{project_id}`: every field optional.
#[derive(Deserialize, ToSchema)]
pub struct UpdateProjectRequest {
    #[schema(min_length = 1, max_length = 200)]
    pub title: Option<String>,
    pub description: Option<String>,
    #[schema(value_type = Option<f64>)]
    pub budget: Option<serde_json::Number>,
    pub deadline: Option<String>,
    pub skills_required: Option<Vec<String>>,
    pub project_type: Option<String>,
    pub target_expert_id: Option<i64>,
    /// Legacy invitation list, replaced as a whole.
    pub invited_experts: Option<Vec<i64>>,
}

fn check_title(title: &str, errors: &mut Vec<FieldError>) -> Option<Title> {
    Title::parse(title)
        .map_err(|e| errors.push(FieldError::new("title", e.to_string())))
        .ok()
}

fn check_description(text: &str, errors: &mut Vec<FieldError>) -> String {
    if text.chars().count() > MAX_DESCRIPTION {
        errors.push(FieldError::new(
            "description",
            format!("must be at most {MAX_DESCRIPTION} characters"),
        ));
    }
    text.trim().to_owned()
}

fn check_budget(n: &serde_json::Number, errors: &mut Vec<FieldError>) -> i64 {
    match parse_number(n) {
        Ok(0) => {
            errors.push(FieldError::new("budget", "must be above 0"));
            0
        }
        Ok(minor) => minor,
        Err(message) => {
            errors.push(FieldError::new("budget", message));
            0
        }
    }
}

fn check_deadline(
    text: &str,
    now: DateTime<Utc>,
    errors: &mut Vec<FieldError>,
) -> Option<DateTime<Utc>> {
    match parse_deadline(text) {
        None => {
            errors.push(FieldError::new(
                "deadline",
                "must be an ISO datetime, YYYY-MM-DDTHH:MM:SS",
            ));
            None
        }
        Some(t) if t < now => {
            errors.push(FieldError::new("deadline", "must not be in the past"));
            None
        }
        Some(t) => Some(t),
    }
}

fn check_skills(skills: &[String], errors: &mut Vec<FieldError>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in skills {
        let s = s.trim();
        if s.is_empty() || s.chars().count() > 100 {
            errors.push(FieldError::new(
                "skills_required",
                "each skill must be 1 to 100 characters",
            ));
            break;
        }
        if !out.iter().any(|o| o.eq_ignore_ascii_case(s)) {
            out.push(s.to_owned());
        }
    }
    if out.len() > MAX_SKILLS {
        errors.push(FieldError::new(
            "skills_required",
            format!("at most {MAX_SKILLS} skills"),
        ));
    }
    out
}

fn check_type(text: &str, errors: &mut Vec<FieldError>) -> ProjectType {
    ProjectType::parse(text).unwrap_or_else(|| {
        errors.push(FieldError::new(
            "project_type",
            "must be private or curated",
        ));
        ProjectType::Curated
    })
}

fn draft_from(req: CreateProjectRequest, now: DateTime<Utc>) -> ApiResult<ProjectDraft> {
    let mut errors = Vec::new();
    let title = match &req.title {
        Some(t) => check_title(t, &mut errors),
        None => {
            errors.push(FieldError::new("title", "is required"));
            None
        }
    };
    let description = check_description(req.description.as_deref().unwrap_or(""), &mut errors);
    let budget_minor = match &req.budget {
        Some(n) => check_budget(n, &mut errors),
        None => {
            errors.push(FieldError::new("budget", "is required"));
            0
        }
    };
    let deadline = req
        .deadline
        .as_deref()
        .and_then(|d| check_deadline(d, now, &mut errors));
    let skills_required = check_skills(&req.skills_required, &mut errors);
    let project_type = check_type(
        req.project_type.as_deref().unwrap_or("curated"),
        &mut errors,
    );
    if project_type == ProjectType::Private && req.target_expert_id.is_none() {
        errors.push(FieldError::new(
            "target_expert_id",
            "is required for a private project",
        ));
    }
    let wants_submit = match req.status.as_deref().map(ProjectStatus::parse) {
        None | Some(Some(ProjectStatus::Draft)) => false,
        Some(Some(ProjectStatus::PendingPublication)) => true,
        Some(_) => {
            errors.push(FieldError::new(
                "status",
                "must be draft or pending_publication",
            ));
            false
        }
    };
    let (Some(title), true) = (title, errors.is_empty()) else {
        return Err(ApiError::validation(errors));
    };
    Ok(ProjectDraft {
        title,
        description,
        budget_minor,
        deadline,
        skills_required,
        project_type,
        target_expert_id: req.target_expert_id,
        submit: wants_submit,
    })
}

fn changes_from(req: UpdateProjectRequest, now: DateTime<Utc>) -> ApiResult<ProjectChanges> {
    let mut errors = Vec::new();
    let changes = ProjectChanges {
        title: req
            .title
            .as_deref()
            .and_then(|t| check_title(t, &mut errors)),
        description: req
            .description
            .as_deref()
            .map(|d| check_description(d, &mut errors)),
        budget_minor: req.budget.as_ref().map(|b| check_budget(b, &mut errors)),
        deadline: req
            .deadline
            .as_deref()
            .and_then(|d| check_deadline(d, now, &mut errors)),
        skills_required: req
            .skills_required
            .as_deref()
            .map(|s| check_skills(s, &mut errors)),
        project_type: req
            .project_type
            .as_deref()
            .map(|t| check_type(t, &mut errors)),
        target_expert_id: req.target_expert_id,
        invited_experts: req.invited_experts,
    };
    if errors.is_empty() {
        Ok(changes)
    } else {
        Err(ApiError::validation(errors))
    }
}

/// Mounts the project routes: fixed paths before `{project_id}`.
pub fn mount(cfg: &mut utoipa_actix_web::service_config::ServiceConfig) {
    cfg.service(public_list)
        .service(my_projects)
        .service(all_projects)
        .service(list)
        .service(create)
        .service(get_project)
        .service(update)
        .service(change_status)
        .service(delete_project)
        .service(submit)
        .service(request_budget)
        .service(validate)
        .service(curate)
        .service(auto_curate)
        .service(curation_suggestions)
        .service(admin_invite_experts);
}
