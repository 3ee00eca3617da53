//! The expert's dashboard under `/api/expert/*`: stats, proposals, projects open to them,
//! projects assigned to them and invitations. Every list is paginated.

use actix_web::{HttpResponse, get, web};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::domain::money::minor_to_number;
use crate::domain::project::{ApplicationStatus, ProjectStatus};
use crate::domain::user::Role;
use crate::http::auth::AuthUser;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::pagination::{PageQuery, Paginated};
use crate::http::routes::applications::{ApplicationView, application_views};
use crate::http::routes::projects::{ProjectView, caller};
use crate::state::AppState;
use crate::store::project_lists;
use crate::store::{applications, payments, projects};

fn expert(auth: &AuthUser) -> ApiResult<()> {
    if auth.has_role(Role::Experto) {
        Ok(())
    } else {
        Err(ApiError::forbidden("Experts only"))
    }
}

#[derive(Serialize, Deserialize, ToSchema)]
pub struct ApplicationStats {
    pub total: i64,
    pub pending: i64,
    pub needs_revision: i64,
    pub accepted: i64,
    pub rejected: i64,
}

#[derive(Serialize, Deserialize, ToSchema)]
pub struct ProjectStats {
    /// Every project the expert was selected for.
    pub total: i64,
    /// Of those, not yet completed or cancelled.
    pub active: i64,
    pub completed: i64,
}

#[derive(Serialize, Deserialize, ToSchema)]
pub struct EarningStats {
    /// Released to the expert, after commission.
    pub released: f64,
    /// Held in escrow for the expert's current milestones.
    pub in_escrow: f64,
    pub currency: String,
}

#[derive(Serialize, Deserialize, ToSchema)]
pub struct ExpertStats {
    pub applications: ApplicationStats,
    pub projects: ProjectStats,
    pub earnings: EarningStats,
    /// Projects the expert is invited to (formally or in the legacy list).
    pub invitations: i64,
}

/// The expert's numbers: proposals by status, projects, earnings.
#[utoipa::path(
    tag = "expert",
    security(("bearer" = [])),
    responses(
        (status = 200, body = ExpertStats),
        (status = 403, body = ErrorBody),
    )
)]
#[get("/api/expert/stats")]
pub async fn stats(state: web::Data<AppState>, auth: AuthUser) -> ApiResult<HttpResponse> {
    expert(&auth)?;
    let id = auth.id();
    let mut conn = state.db.conn().await?;
    let counts = applications::counts_for_expert(conn.exec(), id).await?;
    let count = |s| counts.iter().find(|(k, _)| *k == s).map_or(0, |(_, n)| *n);
    let by_status = projects::assigned_counts(conn.exec(), id).await?;
    let assigned_total: i64 = by_status.iter().map(|(_, n)| n).sum();
    let completed = by_status
        .iter()
        .filter(|(s, _)| *s == ProjectStatus::Completed)
        .map(|(_, n)| n)
        .sum();
    let active = by_status
        .iter()
        .filter(|(s, _)| !matches!(s, ProjectStatus::Completed | ProjectStatus::Cancelled))
        .map(|(_, n)| n)
        .sum();
    let (released, held) = payments::expert_totals(conn.exec(), id).await?;
    let invitation_count = project_lists::invitation_count(conn.exec(), id).await?;
    Ok(HttpResponse::Ok().json(ExpertStats {
        applications: ApplicationStats {
            total: counts.iter().map(|(_, n)| n).sum(),
            pending: count(ApplicationStatus::Pending),
            needs_revision: count(ApplicationStatus::NeedsRevision),
            accepted: count(ApplicationStatus::Accepted),
            rejected: count(ApplicationStatus::Rejected),
        },
        projects: ProjectStats {
            total: assigned_total,
            active,
            completed,
        },
        earnings: EarningStats {
            released: minor_to_number(released),
            in_escrow: minor_to_number(held),
            currency: "eur".to_owned(),
        },
        invitations: invitation_count,
    }))
}

#[derive(Deserialize, utoipa::IntoParams)]
pub struct ExpertApplicationsQuery {
    pub page: Option<i64>,
    pub size: Option<i64>,
    /// `pending`, `needs_revision`, `accepted`, `rejected`.
    pub status: Option<String>,
}

/// The expert's proposals, newest first.
#[utoipa::path(
    tag = "expert",
    params(ExpertApplicationsQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, body = Paginated<ApplicationView>),
        (status = 403, body = ErrorBody),
        (status = 422, body = ErrorBody),
    )
)]
#[get("/api/expert/applications")]
pub async fn my_applications(
    state: web::Data<AppState>,
    auth: AuthUser,
    query: web::Query<ExpertApplicationsQuery>,
) -> ApiResult<HttpResponse> {
    expert(&auth)?;
    let page = PageQuery {
        page: query.page,
        size: query.size,
    }
    .validate()?;
    let mut conn = state.db.conn().await?;
    let (items, total) = match query.status.as_deref().map(ApplicationStatus::parse) {
        // No proposal is in a state that does not exist.
        Some(None) => (Vec::new(), 0),
        status => {
            applications::list_for_expert(
                conn.exec(),
                auth.id(),
                status.flatten(),
                page.page,
                page.size,
            )
            .await?
        }
    };
    drop(conn);
    let items = application_views(&state, items).await?;
    Ok(HttpResponse::Ok().json(Paginated::new(items, total, page)))
}

/// The expert's project lists.
enum ProjectList {
    Available,
    Assigned,
    Invited,
}

async fn project_list(
    state: &AppState,
    auth: &AuthUser,
    query: PageQuery,
    which: ProjectList,
) -> ApiResult<HttpResponse> {
    expert(auth)?;
    let page = query.validate()?;
    let c = caller(auth);
    let mut conn = state.db.conn().await?;
    let invited = match which {
        ProjectList::Available => Some(project_lists::Invited::Available),
        ProjectList::Invited => Some(project_lists::Invited::All),
        ProjectList::Assigned => None,
    };
    let (items, total) = match invited {
        Some(which) => {
            let seek = crate::store::listing::Seek::Page(page.page);
            let query =
                project_lists::invited(conn.exec(), which, c.id, seek.window(page.size)).await?;
            let (items, _, total) =
                project_lists::page(conn.exec(), query, seek, page.size).await?;
            (items, total)
        }
        None => projects::list_assigned_to(conn.exec(), c.id, page.limit(), page.offset()).await?,
    };
    let page = Paginated::new(items, total, page).map(|p| ProjectView::for_caller(p, Some(&c)));
    Ok(HttpResponse::Ok().json(page))
}

/// Projects the expert may still apply to: invited curated listings, invited projects
/// pending publication, and private projects targeting them.
#[utoipa::path(
    tag = "expert",
    params(PageQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, body = Paginated<ProjectView>),
        (status = 403, body = ErrorBody),
        (status = 422, body = ErrorBody),
    )
)]
#[get("/api/expert/available-projects")]
pub async fn available_projects(
    state: web::Data<AppState>,
    auth: AuthUser,
    query: web::Query<PageQuery>,
) -> ApiResult<HttpResponse> {
    project_list(&state, &auth, query.into_inner(), ProjectList::Available).await
}

/// Projects the expert was selected for, newest first.
#[utoipa::path(
    tag = "expert",
    params(PageQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, body = Paginated<ProjectView>),
        (status = 403, body = ErrorBody),
        (status = 422, body = ErrorBody),
    )
)]
#[get("/api/expert/assigned-projects")]
pub async fn assigned_projects(
    state: web::Data<AppState>,
    auth: AuthUser,
    query: web::Query<PageQuery>,
) -> ApiResult<HttpResponse> {
    project_list(&state, &auth, query.into_inner(), ProjectList::Assigned).await
}

/// Projects the expert is invited to, by formal invitation or in the legacy list.
#[utoipa::path(
    tag = "expert",
    params(PageQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, body = Paginated<ProjectView>),
        (status = 403, body = ErrorBody),
        (status = 422, body = ErrorBody),
    )
)]
#[get("/api/expert/invitations")]
pub async fn invitations(
    state: web::Data<AppState>,
    auth: AuthUser,
    query: web::Query<PageQuery>,
) -> ApiResult<HttpResponse> {
    project_list(&state, &auth, query.into_inner(), ProjectList::Invited).await
}

/// Mounts the expert's own lists.
pub fn mount(cfg: &mut utoipa_actix_web::service_config::ServiceConfig) {
    cfg.service(stats)
        .service(my_applications)
        .service(available_projects)
        .service(assigned_projects)
        .service(invitations);
}
