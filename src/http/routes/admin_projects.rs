//! `/api/admin/projects…`: every project for administrators, one project with everything
//! attached to it, and the forced state change.

use crate::domain::search::SearchTerm;
use actix_web::{HttpResponse, get, put, web};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::applications::ApplicationView;
use super::disputes::AdminDisputeView;
use super::escrow_views::{MilestoneView, PaymentView};
use super::projects::{ProjectView, caller};
use crate::domain::project::{ProjectStatus, ProjectType};
use crate::domain::text::StatusReason;
use crate::http::auth::AdminUser;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::pagination::{PageQuery, Paginated};
use crate::state::AppState;
use crate::store::project_lists::{self, AdminProjectFilter};
use crate::store::projects;
use crate::store::{applications, disputes, milestones, payments};
use crate::workflows::project_admin as flow;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AdminProjectQuery {
    pub status: Option<String>,
    /// `private` or `curated`.
    pub project_type: Option<String>,
    pub company_id: Option<i64>,
    pub expert_id: Option<i64>,
    /// Created at or after.
    pub created_from: Option<DateTime<Utc>>,
    /// Created before.
    pub created_to: Option<DateTime<Utc>>,
    /// Words in the title or description (case and accents ignored); title matches first.
    pub search: Option<SearchTerm>,
    /// A `next_cursor` of this list: the page after it (`page` is then ignored).
    pub cursor: Option<String>,
}

/// Every project, newest first, with filters.
#[utoipa::path(
    tag = "admin",
    params(AdminProjectQuery, PageQuery),
    security(("bearer" = [])),
    responses((status = 200, body = Paginated<ProjectView>), (status = 403, body = ErrorBody))
)]
#[get("/api/admin/projects")]
pub async fn list(
    state: web::Data<AppState>,
    AdminUser(admin): AdminUser,
    query: web::Query<AdminProjectQuery>,
    page: web::Query<PageQuery>,
) -> ApiResult<HttpResponse> {
    let page = page.into_inner().validate()?;
    let q = query.into_inner();
    let status = match q.status.as_deref() {
        None => None,
        Some(text) => Some(
            ProjectStatus::parse(text)
                .ok_or_else(|| ApiError::invalid_field("status", "is not a project status"))?,
        ),
    };
    let project_type = match q.project_type.as_deref() {
        None => None,
        Some(text) => Some(ProjectType::parse(text).ok_or_else(|| {
            ApiError::invalid_field("project_type", "must be private or curated")
        })?),
    };
    let filter = AdminProjectFilter {
        status,
        project_type,
        company_id: q.company_id,
        expert_id: q.expert_id,
        created_from: q.created_from,
        created_to: q.created_to,
        search: q.search.map(SearchTerm::into_string),
    };
    let seek = crate::http::pagination::seek(q.cursor.as_deref(), page)?;
    let mut conn = state.db.conn().await?;
    let window = seek.window(page.size);
    let kept = &state.project_search_counts;
    let query = project_lists::admin_for_page(conn.exec(), &filter, window, kept).await?;
    let (items, next, total) = project_lists::page(conn.exec(), query, seek, page.size).await?;
    let c = caller(&admin);
    Ok(HttpResponse::Ok().json(
        Paginated::new(items, total, page)
            .with_next(next)
            .map(|p| ProjectView::for_caller(p, Some(&c))),
    ))
}

/// A project with its administrators' notes, proposals, milestones, payments and disputes.
#[derive(Serialize, ToSchema)]
pub struct AdminProjectView {
    #[serde(flatten)]
    pub project: ProjectView,
    pub applications: Vec<ApplicationView>,
    pub milestones: Vec<MilestoneView>,
    pub payments: Vec<PaymentView>,
    pub disputes: Vec<AdminDisputeView>,
}

async fn full(
    state: &AppState,
    admin: &crate::http::auth::AuthUser,
    id: i64,
) -> ApiResult<AdminProjectView> {
    let mut conn = state.db.conn().await?;
    let p = projects::find(conn.exec(), id)
        .await?
        .ok_or_else(|| ApiError::not_found("Project not found"))?;
    let (apps, _) = applications::list_for_project(conn.exec(), id, None, 1000, 0).await?;
    let (ms, _) = milestones::list_for_project(conn.exec(), id, 1000, 0).await?;
    let ys = payments::list_for_project(conn.exec(), id).await?;
    let ds = disputes::of_project(conn.exec(), id).await?;
    Ok(AdminProjectView {
        project: ProjectView::for_caller(p, Some(&caller(admin))),
        applications: apps.into_iter().map(ApplicationView::from).collect(),
        milestones: ms.into_iter().map(MilestoneView::from).collect(),
        payments: ys.into_iter().map(PaymentView::from).collect(),
        disputes: ds.into_iter().map(AdminDisputeView::from).collect(),
    })
}

/// One project with everything attached to it.
#[utoipa::path(
    tag = "admin",
    params(("project_id" = i64, Path)),
    security(("bearer" = [])),
    responses((status = 200, body = AdminProjectView), (status = 403, body = ErrorBody))
)]
#[get("/api/admin/projects/{project_id}")]
pub async fn get_one(
    state: web::Data<AppState>,
    AdminUser(admin): AdminUser,
    project_id: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    Ok(HttpResponse::Ok().json(full(&state, &admin, project_id.into_inner()).await?))
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct AdminProjectStatusRequest {
    pub status: String,
    /// Why; written to the project's administrators' notes.
    #[schema(min_length = 1, max_length = 2000)]
    pub reason: String,
}

/// Forces the project's state. Refused where money would be stranded: `completed` while a
/// payment is pending, held or disputed; `cancelled` or a state before selection while money
/// is in escrow (pending authorisations are cancelled at the processor with the move).
#[utoipa::path(
    tag = "admin",
    params(("project_id" = i64, Path)),
    request_body = AdminProjectStatusRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, body = AdminProjectView),
        (status = 403, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "`MONEY_STRANDED`, `MONEY_AUTHORISED`, `INVALID_TRANSITION`"),
        (status = 503, body = ErrorBody, description = "The processor could not be asked about a pending authorisation; nothing changed"),
    )
)]
#[put("/api/admin/projects/{project_id}/status")]
pub async fn set_status(
    state: web::Data<AppState>,
    AdminUser(admin): AdminUser,
    project_id: web::Path<i64>,
    body: web::Json<AdminProjectStatusRequest>,
) -> ApiResult<HttpResponse> {
    let to = ProjectStatus::parse(&body.status)
        .ok_or_else(|| ApiError::invalid_field("status", "is not a project status"))?;
    let reason = StatusReason::parse(body.into_inner().reason)
        .map_err(|e| ApiError::invalid_field("reason", e.to_string()))?;
    let id = project_id.into_inner();
    flow::set_status(&state, admin.id(), id, to, reason).await?;
    Ok(HttpResponse::Ok().json(full(&state, &admin, id).await?))
}

/// Mounts the administrators' project routes: the list before `{project_id}`.
pub fn mount(cfg: &mut utoipa_actix_web::service_config::ServiceConfig) {
    cfg.service(list).service(get_one).service(set_status);
}
