//! Project lists: the public list, the company's own, administrators' pending ones.

use crate::domain::search::SearchTerm;
use actix_web::{HttpResponse, get, web};
use serde::Deserialize;
use utoipa::IntoParams;

use crate::domain::money::parse_number;
use crate::domain::project::{ProjectStatus, ProjectType};
use crate::http::auth::{AdminUser, AuthUser};
use crate::http::error::{ApiError, ApiResult, ErrorBody, FieldError};
use crate::http::pagination::{Page, PageQuery, Paginated, kept};
use crate::state::AppState;
use crate::store::Conn;
use crate::store::backfills;
use crate::store::listing::Seek;
use crate::store::project_lists::{self, ProjectFilter, Viewer};
use crate::workflows::projects::Caller;

use super::*;

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
    /// Words in the title or description (case and accents ignored); title matches come
    /// first, then the newest.
    pub search: Option<SearchTerm>,
    pub company_id: Option<i64>,
    /// A `next_cursor` of this list: the page after it (`page` is then ignored).
    pub cursor: Option<String>,
}

impl ProjectListQuery {
    fn parse(&self) -> ApiResult<(Page, Seek, ProjectFilter)> {
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
        let seek = crate::http::pagination::seek(self.cursor.as_deref(), page)?;
        Ok((
            page,
            seek,
            ProjectFilter {
                status: self.status.as_deref().and_then(ProjectStatus::parse),
                project_type: self.project_type.as_deref().and_then(ProjectType::parse),
                skill: self.skill.clone(),
                min_budget_minor,
                max_budget_minor,
                search: self.search.clone().map(SearchTerm::into_string),
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
    let (page, seek, filter) = query.parse()?;
    let mut conn = state.db.conn().await?;
    read_page(state, &mut conn, viewer, caller, page, seek, &filter).await
}

async fn read_page(
    state: &AppState,
    conn: &mut Conn,
    viewer: Viewer,
    caller: Option<&Caller>,
    page: Page,
    seek: Seek,
    filter: &ProjectFilter,
) -> ApiResult<Paginated<ProjectView>> {
    let window = seek.window(page.size);
    let kept = &state.project_search_counts;
    let skill_budgets = state
        .backfills
        .is_finished(&backfills::PROJECT_SKILL_BUDGETS);
    let query =
        project_lists::visible_for_page(conn.exec(), viewer, filter, window, kept, skill_budgets)
            .await?;
    let (items, next, total) = project_lists::page(conn.exec(), query, seek, page.size).await?;
    Ok(Paginated::new(items, total, page)
        .with_next(next)
        .map(|p| ProjectView::for_caller(p, caller)))
}

/// The public marketplace: curated projects open for proposals. No authentication.
///
/// The same answer goes to everyone, so each instance keeps it until a project changes: the
/// count of committed writes to projects is read first, and an answer kept under that count
/// is served as it is (`store::page_cache`).
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
    let (page, seek, filter) = query.parse()?;
    let mut conn = state.db.conn().await?;
    let writes = project_lists::writes(conn.exec()).await?;
    let key = (seek, page.size, filter.clone());
    let read = read_page(
        &state,
        &mut conn,
        Viewer::Anonymous,
        None,
        page,
        seek,
        &filter,
    );
    kept(&state.public_projects, key, writes, read).await
}

/// Projects visible to the caller (public listings and their own), filtered and paginated;
/// administrators see every project.
#[utoipa::path(
    tag = "projects",
    params(ProjectListQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, body = Paginated<ProjectView>),
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
    let (page, seek, filter) = query.parse()?;
    let mut conn = state.db.conn().await?;
    let query = project_lists::mine(c.id, filter.status);
    let (items, next, total) = project_lists::page(conn.exec(), query, seek, page.size).await?;
    let page = Paginated::new(items, total, page)
        .with_next(next)
        .map(|p| ProjectView::for_caller(p, Some(&c)));
    Ok(HttpResponse::Ok().json(page))
}

/// Every project (administrators), filtered and paginated.
#[utoipa::path(
    tag = "projects",
    params(ProjectListQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, body = Paginated<ProjectView>),
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
