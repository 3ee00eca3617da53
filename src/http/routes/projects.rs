//! `/api/projects/*` (projects, their validation, invitations and curation) and
//! `POST /api/admin/projects/{id}/invite-experts`. Proposals and selection are in
//! [`super::applications`].

use actix_web::{HttpResponse, delete, get, patch, post, put, web};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::domain::money::{minor_to_number, parse_number};
use crate::domain::project::{ProjectStatus, ProjectType, parse_deadline};
use crate::http::auth::{AdminUser, AuthUser, CsrfChecked};
use crate::http::error::{ApiError, ApiResult, ErrorBody, FieldError};
use crate::http::pagination::{Page, PageQuery, Paginated};
use crate::state::AppState;
use crate::store::projects::{self, Project, ProjectFilter, Viewer};
use crate::workflows::projects::{self as flow, Caller, ProjectChanges, ProjectDraft};

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
    pub status: String,
    /// `pending`, `approved` or `rejected`.
    pub validation_status: Option<String>,
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

const MAX_TITLE: usize = 200;
const MAX_DESCRIPTION: usize = 20_000;
const MAX_SKILLS: usize = 50;

/// `POST /api/projects/`.
#[derive(Deserialize, ToSchema)]
pub struct CreateProjectRequest {
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

fn check_title(title: &str, errors: &mut Vec<FieldError>) -> String {
    let title = title.trim();
    if title.is_empty() || title.chars().count() > MAX_TITLE {
        errors.push(FieldError::new(
            "title",
            format!("must be 1 to {MAX_TITLE} characters"),
        ));
    }
    title.to_owned()
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
            String::new()
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
    let wants_submit = match req.status.as_deref() {
        None | Some("draft") => false,
        Some("pending_publication") => true,
        Some(_) => {
            errors.push(FieldError::new(
                "status",
                "must be draft or pending_publication",
            ));
            false
        }
    };
    if !errors.is_empty() {
        return Err(ApiError::validation(errors));
    }
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
        title: req.title.as_deref().map(|t| check_title(t, &mut errors)),
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

// ---------------------------------------------------------------------------------------
// Lists
// ---------------------------------------------------------------------------------------

#[derive(Deserialize, IntoParams)]
pub struct ProjectListQuery {
    /// Page number, from 1.
    pub page: Option<i64>,
    /// Items per page, 1 to 100.
    pub size: Option<i64>,
    pub status: Option<String>,
    /// `private` or `curated`.
    pub project_type: Option<String>,
    /// A required skill (case-insensitive).
    pub skill: Option<String>,
    pub min_budget: Option<f64>,
    pub max_budget: Option<f64>,
    /// Text in the title or description.
    pub search: Option<String>,
    pub company_id: Option<i64>,
}

impl ProjectListQuery {
    fn parse(&self) -> ApiResult<(Page, ProjectFilter)> {
        let page = PageQuery {
            page: self.page,
            size: self.size,
        }
        .validate()?;
        let mut errors = Vec::new();
        if let Some(s) = &self.status
            && ProjectStatus::parse(s).is_none()
        {
            errors.push(FieldError::new("status", "is not a project status"));
        }
        if let Some(t) = &self.project_type
            && ProjectType::parse(t).is_none()
        {
            errors.push(FieldError::new(
                "project_type",
                "must be private or curated",
            ));
        }
        let money = |field: &str, v: Option<f64>, errors: &mut Vec<FieldError>| {
            v.and_then(
                |v| match serde_json::Number::from_f64(v).map(|n| parse_number(&n)) {
                    Some(Ok(minor)) => Some(minor),
                    _ => {
                        errors.push(FieldError::new(field, "must be a non-negative amount"));
                        None
                    }
                },
            )
        };
        let min_budget_minor = money("min_budget", self.min_budget, &mut errors);
        let max_budget_minor = money("max_budget", self.max_budget, &mut errors);
        if !errors.is_empty() {
            return Err(ApiError::validation(errors));
        }
        Ok((
            page,
            ProjectFilter {
                status: self.status.clone(),
                project_type: self.project_type.clone(),
                skill: self.skill.clone(),
                min_budget_minor,
                max_budget_minor,
                search: self.search.clone(),
                company_id: self.company_id,
            },
        ))
    }
}

async fn list_for(
    state: &AppState,
    viewer: Viewer,
    caller: Option<&Caller>,
    query: &ProjectListQuery,
) -> ApiResult<Paginated<ProjectView>> {
    let (page, filter) = query.parse()?;
    let mut conn = state.db.conn().await?;
    let (items, total) =
        projects::list_visible(conn.exec(), viewer, &filter, page.limit(), page.offset()).await?;
    Ok(Paginated::new(items, total, page).map(|p| ProjectView::for_caller(p, caller)))
}

/// The public marketplace: curated projects open for proposals. No authentication.
#[utoipa::path(
    tag = "projects",
    params(ProjectListQuery),
    responses((status = 200, body = Paginated<ProjectView>), (status = 422, body = ErrorBody))
)]
#[get("/api/projects/public")]
pub async fn public_list(
    state: web::Data<AppState>,
    query: web::Query<ProjectListQuery>,
) -> ApiResult<HttpResponse> {
    let page = list_for(&state, Viewer::Anonymous, None, &query).await?;
    Ok(HttpResponse::Ok().json(page))
}

/// Projects visible to the caller (public listings and their own), filtered and paginated;
/// administrators see every project.
#[utoipa::path(
    tag = "projects",
    params(ProjectListQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, body = Paginated<ProjectView>),
        (status = 401, body = ErrorBody),
        (status = 422, body = ErrorBody),
    )
)]
#[get("/api/projects")]
pub async fn list(
    state: web::Data<AppState>,
    auth: AuthUser,
    query: web::Query<ProjectListQuery>,
) -> ApiResult<HttpResponse> {
    let c = caller(&auth);
    let viewer = if c.admin {
        Viewer::Admin
    } else {
        Viewer::User(c.id)
    };
    Ok(HttpResponse::Ok().json(list_for(&state, viewer, Some(&c), &query).await?))
}

/// The caller's own projects: as the company, or as the assigned expert.
#[utoipa::path(
    tag = "projects",
    params(ProjectListQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, body = Paginated<ProjectView>),
        (status = 401, body = ErrorBody),
        (status = 422, body = ErrorBody),
    )
)]
#[get("/api/projects/my")]
pub async fn my_projects(
    state: web::Data<AppState>,
    auth: AuthUser,
    query: web::Query<ProjectListQuery>,
) -> ApiResult<HttpResponse> {
    let c = caller(&auth);
    let (page, filter) = query.parse()?;
    let mut conn = state.db.conn().await?;
    let (items, total) = projects::list_mine(
        conn.exec(),
        c.id,
        filter.status.as_deref(),
        page.limit(),
        page.offset(),
    )
    .await?;
    let page = Paginated::new(items, total, page).map(|p| ProjectView::for_caller(p, Some(&c)));
    Ok(HttpResponse::Ok().json(page))
}

/// Every project (administrators), filtered and paginated.
#[utoipa::path(
    tag = "projects",
    params(ProjectListQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, body = Paginated<ProjectView>),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody),
        (status = 422, body = ErrorBody),
    )
)]
#[get("/api/projects/all")]
pub async fn all_projects(
    state: web::Data<AppState>,
    AdminUser(admin): AdminUser,
    query: web::Query<ProjectListQuery>,
) -> ApiResult<HttpResponse> {
    let c = caller(&admin);
    Ok(HttpResponse::Ok().json(list_for(&state, Viewer::Admin, Some(&c), &query).await?))
}

// ---------------------------------------------------------------------------------------
// One project
// ---------------------------------------------------------------------------------------

/// Creates a project (201). Checks, in this order: e-mail verified (403), company profile
/// exists and complete (403), profile verified (403), fiscal data complete for the first
/// project (400 `FISCAL_DATA_REQUIRED`), then the body, including a deadline not in the
/// past (422).
#[utoipa::path(
    tag = "projects",
    request_body = CreateProjectRequest,
    security(("bearer" = [])),
    responses(
        (status = 201, body = ProjectView),
        (status = 400, body = ErrorBody, description = "FISCAL_DATA_REQUIRED"),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody, description = "Not a company, e-mail not verified, profile missing, incomplete or unverified"),
        (status = 422, body = ErrorBody),
    )
)]
#[post("/api/projects")]
pub async fn create(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    body: web::Json<CreateProjectRequest>,
) -> ApiResult<HttpResponse> {
    let c = caller(&auth);
    flow::creation_checks(&state, &c).await?;
    let draft = draft_from(body.into_inner(), state.clock.now())?;
    let project = flow::create(&state, &c, draft).await?;
    Ok(HttpResponse::Created().json(ProjectView::for_caller(project, Some(&c))))
}

/// A project. A private or unpublished project is visible only to its company, its target
/// expert, invited experts, applicants, its expert and administrators; 404 for others.
#[utoipa::path(
    tag = "projects",
    params(("project_id" = i64, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = ProjectView),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
    )
)]
#[get("/api/projects/{project_id}")]
pub async fn get_project(
    state: web::Data<AppState>,
    auth: AuthUser,
    path: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let c = caller(&auth);
    let mut conn = state.db.conn().await?;
    let (p, _) = flow::load_visible(conn.exec(), &c, path.into_inner()).await?;
    Ok(HttpResponse::Ok().json(ProjectView::for_caller(p, Some(&c))))
}

/// Edits a project before an expert is selected (its company or an administrator); the
/// deadline may not be in the past.
#[utoipa::path(
    tag = "projects",
    params(("project_id" = i64, Path)),
    request_body = UpdateProjectRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, body = ProjectView),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "An expert is already selected"),
        (status = 422, body = ErrorBody),
    )
)]
#[put("/api/projects/{project_id}")]
pub async fn update(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    path: web::Path<i64>,
    body: web::Json<UpdateProjectRequest>,
) -> ApiResult<HttpResponse> {
    let c = caller(&auth);
    let changes = changes_from(body.into_inner(), state.clock.now())?;
    let project = flow::update(&state, &c, path.into_inner(), changes).await?;
    Ok(HttpResponse::Ok().json(ProjectView::for_caller(project, Some(&c))))
}

#[derive(Deserialize, ToSchema)]
pub struct StatusRequest {
    pub status: String,
}

/// Moves a project by hand: `draft` → `pending_publication` (as submit), a published curated
/// project → `bidding`, `pending_publication` → `draft`, any state before selection →
/// `cancelled`; administrators may also publish. Everything else has its own workflow (409).
#[utoipa::path(
    tag = "projects",
    params(("project_id" = i64, Path)),
    request_body = StatusRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, body = ProjectView),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "INVALID_TRANSITION"),
        (status = 422, body = ErrorBody),
    )
)]
#[patch("/api/projects/{project_id}/status")]
pub async fn change_status(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    path: web::Path<i64>,
    body: web::Json<StatusRequest>,
) -> ApiResult<HttpResponse> {
    let c = caller(&auth);
    let to = ProjectStatus::parse(&body.status)
        .ok_or_else(|| ApiError::invalid_field("status", "is not a project status"))?;
    let project = flow::change_status(&state, &c, path.into_inner(), to).await?;
    Ok(HttpResponse::Ok().json(ProjectView::for_caller(project, Some(&c))))
}

/// Deletes a project before an expert is selected (204).
#[utoipa::path(
    tag = "projects",
    params(("project_id" = i64, Path)),
    security(("bearer" = [])),
    responses(
        (status = 204),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody),
    )
)]
#[delete("/api/projects/{project_id}")]
pub async fn delete_project(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    path: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    flow::delete(&state, &caller(&auth), path.into_inner()).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// Sends a draft for validation (`pending_publication`); administrators are notified.
#[utoipa::path(
    tag = "projects",
    params(("project_id" = i64, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = ProjectView),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody),
    )
)]
#[post("/api/projects/{project_id}/submit")]
pub async fn submit(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    path: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let c = caller(&auth);
    let project = flow::submit(&state, &c, path.into_inner()).await?;
    Ok(HttpResponse::Ok().json(ProjectView::for_caller(project, Some(&c))))
}

#[derive(Deserialize, ToSchema)]
pub struct BudgetRequest {
    /// The expert whose profile the request comes from.
    pub expert_id: i64,
    pub message: Option<String>,
}

/// Asks one expert for a budget (from their profile): the expert is invited and the project
/// goes to `pending_publication`; administrators and the expert are told.
#[utoipa::path(
    tag = "projects",
    params(("project_id" = i64, Path)),
    request_body = BudgetRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, body = ProjectView),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody),
        (status = 422, body = ErrorBody),
    )
)]
#[post("/api/projects/{project_id}/request-budget")]
pub async fn request_budget(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    path: web::Path<i64>,
    body: web::Json<BudgetRequest>,
) -> ApiResult<HttpResponse> {
    let c = caller(&auth);
    let message = body
        .message
        .as_deref()
        .map(str::trim)
        .filter(|m| !m.is_empty());
    if message.is_some_and(|m| m.chars().count() > 2000) {
        return Err(ApiError::invalid_field(
            "message",
            "must be at most 2000 characters",
        ));
    }
    let project =
        flow::request_budget(&state, &c, path.into_inner(), body.expert_id, message).await?;
    Ok(HttpResponse::Ok().json(ProjectView::for_caller(project, Some(&c))))
}

#[derive(Deserialize, ToSchema)]
pub struct ValidateRequest {
    pub approved: bool,
    /// Required when rejecting: what the company should change.
    pub notes: Option<String>,
}

/// An administrator approves (published as `published_curated` or `published_private`) or
/// rejects (back to `draft`, with notes) a project pending publication; the company is told.
#[utoipa::path(
    tag = "projects",
    params(("project_id" = i64, Path)),
    request_body = ValidateRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, body = ProjectView),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "Not pending publication"),
        (status = 422, body = ErrorBody),
    )
)]
#[post("/api/projects/{project_id}/validate")]
pub async fn validate(
    state: web::Data<AppState>,
    AdminUser(admin): AdminUser,
    path: web::Path<i64>,
    body: web::Json<ValidateRequest>,
) -> ApiResult<HttpResponse> {
    let notes = body
        .notes
        .as_deref()
        .map(str::trim)
        .filter(|n| !n.is_empty());
    if !body.approved && notes.is_none() {
        return Err(ApiError::invalid_field(
            "notes",
            "are required to reject a project",
        ));
    }
    if notes.is_some_and(|n| n.chars().count() > 2000) {
        return Err(ApiError::invalid_field(
            "notes",
            "must be at most 2000 characters",
        ));
    }
    let project =
        flow::validate(&state, admin.id(), path.into_inner(), body.approved, notes).await?;
    Ok(HttpResponse::Ok().json(ProjectView::for_caller(project, Some(&caller(&admin)))))
}

// ---------------------------------------------------------------------------------------
// Invitations and curation
// ---------------------------------------------------------------------------------------

#[derive(Deserialize, ToSchema)]
pub struct InviteExpertsRequest {
    /// Expert user ids.
    pub expert_ids: Vec<i64>,
    pub message: Option<String>,
}

#[derive(Serialize, Deserialize, ToSchema)]
pub struct InviteExpertsResponse {
    pub message: String,
    pub project_id: i64,
    /// Every expert now invited by this request (newly or already).
    pub invited_expert_ids: Vec<i64>,
    /// Those invited for the first time (they are notified and e-mailed).
    pub newly_invited: Vec<i64>,
}

fn check_invitees(ids: &[i64]) -> ApiResult<Vec<i64>> {
    let mut out: Vec<i64> = Vec::new();
    for id in ids {
        if !out.contains(id) {
            out.push(*id);
        }
    }
    if out.is_empty() || out.len() > 100 {
        return Err(ApiError::invalid_field(
            "expert_ids",
            "must name 1 to 100 experts",
        ));
    }
    Ok(out)
}

async fn invite(
    state: &AppState,
    admin_id: i64,
    project_id: i64,
    req: &InviteExpertsRequest,
    source: &str,
) -> ApiResult<HttpResponse> {
    let ids = check_invitees(&req.expert_ids)?;
    let message = req
        .message
        .as_deref()
        .map(str::trim)
        .filter(|m| !m.is_empty());
    let newly = flow::invite_experts(state, admin_id, project_id, &ids, source, message).await?;
    Ok(HttpResponse::Ok().json(InviteExpertsResponse {
        message: format!("{} expert(s) invited", ids.len()),
        project_id,
        invited_expert_ids: ids,
        newly_invited: newly,
    }))
}

/// An administrator invites experts: formal invitations and the legacy `invited_experts`
/// list, both honoured everywhere.
#[utoipa::path(
    tag = "admin",
    params(("id" = i64, Path)),
    request_body = InviteExpertsRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, body = InviteExpertsResponse),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody),
        (status = 422, body = ErrorBody),
    )
)]
#[post("/api/admin/projects/{id}/invite-experts")]
pub async fn admin_invite_experts(
    state: web::Data<AppState>,
    AdminUser(admin): AdminUser,
    path: web::Path<i64>,
    body: web::Json<InviteExpertsRequest>,
) -> ApiResult<HttpResponse> {
    invite(&state, admin.id(), path.into_inner(), &body, "admin").await
}

/// Manual curation: an administrator picks the experts invited to propose.
#[utoipa::path(
    tag = "projects",
    params(("project_id" = i64, Path)),
    request_body = InviteExpertsRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, body = InviteExpertsResponse),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody),
        (status = 422, body = ErrorBody),
    )
)]
#[post("/api/projects/{project_id}/curate")]
pub async fn curate(
    state: web::Data<AppState>,
    AdminUser(admin): AdminUser,
    path: web::Path<i64>,
    body: web::Json<InviteExpertsRequest>,
) -> ApiResult<HttpResponse> {
    invite(&state, admin.id(), path.into_inner(), &body, "curation").await
}

#[derive(Deserialize, IntoParams, ToSchema)]
pub struct SuggestionQuery {
    /// How many experts, 1 to 50 (default 10).
    pub limit: Option<usize>,
}

/// One suggested expert and the score that ranked them (see the curation score: skills 50,
/// level 20, internal rating 15, reviews 15).
#[derive(Serialize, Deserialize, ToSchema)]
pub struct SuggestionView {
    pub expert_id: i64,
    pub full_name: Option<String>,
    pub slug: Option<String>,
    pub expert_level: String,
    pub skills: Vec<String>,
    pub internal_rating: Option<f64>,
    pub score: f64,
    pub matched_skills: usize,
    pub score_parts: ScoreParts,
    pub already_invited: bool,
}

#[derive(Serialize, Deserialize, ToSchema)]
pub struct ScoreParts {
    pub skills: f64,
    pub level: f64,
    pub internal_rating: f64,
    pub reviews: f64,
}

fn suggestion_view(s: flow::Suggestion) -> SuggestionView {
    SuggestionView {
        expert_id: s.expert_id,
        full_name: s.profile.full_name,
        slug: s.profile.slug,
        expert_level: s.profile.expert_level,
        skills: s.skills,
        internal_rating: s.profile.internal_rating,
        score: s.score.total,
        matched_skills: s.score.matched_skills,
        score_parts: ScoreParts {
            skills: s.score.skills,
            level: s.score.level,
            internal_rating: s.score.internal_rating,
            reviews: s.score.reviews,
        },
        already_invited: s.already_invited,
    }
}

fn suggestion_limit(limit: Option<usize>) -> ApiResult<usize> {
    match limit.unwrap_or(10) {
        n @ 1..=50 => Ok(n),
        _ => Err(ApiError::invalid_field("limit", "must be from 1 to 50")),
    }
}

/// Verified, available experts ranked for the project (administrators and the project's
/// company).
#[utoipa::path(
    tag = "projects",
    params(("project_id" = i64, Path), SuggestionQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, body = Vec<SuggestionView>),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
    )
)]
#[get("/api/projects/{project_id}/curation-suggestions")]
pub async fn curation_suggestions(
    state: web::Data<AppState>,
    auth: AuthUser,
    path: web::Path<i64>,
    query: web::Query<SuggestionQuery>,
) -> ApiResult<HttpResponse> {
    let c = caller(&auth);
    let limit = suggestion_limit(query.limit)?;
    let id = path.into_inner();
    {
        let mut conn = state.db.conn().await?;
        flow::load_owned(conn.exec(), &c, id, true).await?;
    }
    let ranked = flow::curation_suggestions(&state, id, limit).await?;
    Ok(HttpResponse::Ok().json(ranked.into_iter().map(suggestion_view).collect::<Vec<_>>()))
}

#[derive(Serialize, Deserialize, ToSchema)]
pub struct AutoCurateResponse {
    pub message: String,
    pub project_id: i64,
    pub invited_expert_ids: Vec<i64>,
    pub suggestions: Vec<SuggestionView>,
}

#[derive(Deserialize, ToSchema, Default)]
pub struct AutoCurateRequest {
    /// How many of the best-ranked experts to invite, 1 to 50 (default 5).
    pub limit: Option<usize>,
}

/// Invites the best-ranked suggestions (see curation-suggestions) not yet invited.
#[utoipa::path(
    tag = "projects",
    params(("project_id" = i64, Path)),
    request_body(content = Option<AutoCurateRequest>),
    security(("bearer" = [])),
    responses(
        (status = 200, body = AutoCurateResponse),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody),
    )
)]
#[post("/api/projects/{project_id}/auto-curate")]
pub async fn auto_curate(
    state: web::Data<AppState>,
    AdminUser(admin): AdminUser,
    path: web::Path<i64>,
    body: Option<web::Json<AutoCurateRequest>>,
) -> ApiResult<HttpResponse> {
    let limit = suggestion_limit(body.and_then(|b| b.limit).or(Some(5)))?;
    let id = path.into_inner();
    let suggestions = flow::curation_suggestions(&state, id, limit).await?;
    let ids: Vec<i64> = suggestions.iter().map(|s| s.expert_id).collect();
    let invited = if ids.is_empty() {
        Vec::new()
    } else {
        flow::invite_experts(&state, admin.id(), id, &ids, "curation", None).await?
    };
    Ok(HttpResponse::Ok().json(AutoCurateResponse {
        message: format!("{} expert(s) invited", invited.len()),
        project_id: id,
        invited_expert_ids: invited,
        suggestions: suggestions.into_iter().map(suggestion_view).collect(),
    }))
}
