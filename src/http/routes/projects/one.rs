//! One project: read, change, submit, request a budget, validate, publish, cancel.

use actix_web::{HttpResponse, delete, get, patch, post, put, web};
use serde::Deserialize;
use utoipa::ToSchema;

use crate::domain::project::ProjectStatus;
use crate::http::auth::{AdminUser, AuthUser, CsrfChecked};
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::state::AppState;
use crate::workflows::kept_projects::load_visible_kept;
use crate::workflows::projects::{self as flow};

use super::*;

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
        (status = 403, body = ErrorBody, description = "Not a company, e-mail not verified, profile missing, incomplete or unverified"),
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
    let p = load_visible_kept(&state, &c, path.into_inner()).await?;
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
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "An expert is already selected"),
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
pub struct ProjectStatusRequest {
    pub status: String,
}

/// Moves a project by hand: `draft` → `pending_publication` (as submit), a published curated
/// project → `bidding`, `pending_publication` → `draft`, any state before selection →
/// `cancelled`; administrators may also publish. Everything else has its own workflow (409).
#[utoipa::path(
    tag = "projects",
    params(("project_id" = i64, Path)),
    request_body = ProjectStatusRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, body = ProjectView),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "INVALID_TRANSITION"),
    )
)]
#[patch("/api/projects/{project_id}/status")]
pub async fn change_status(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    path: web::Path<i64>,
    body: web::Json<ProjectStatusRequest>,
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
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody),
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
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "Not pending publication"),
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
