//! Administrators' public team profiles: `/api/profiles/admin/*`, `/api/profiles/team`.

use actix_web::{HttpResponse, get, post, put, web};
use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;

use crate::domain::user::Role;
use crate::http::auth::{AdminUser, AuthUser, CsrfChecked};
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::state::AppState;
use crate::store::profiles::{self, TeamProfile};

use crate::workflows::profiles::{self as flow, TeamProfileInput};

// ---------------------------------------------------------------------------------------
// Administrators' team profiles
// ---------------------------------------------------------------------------------------

/// An administrator's public team profile (every field optional).
#[derive(Serialize, ToSchema)]
pub struct TeamProfileView {
    pub id: i64,
    pub user_id: i64,
    /// `admin-{user_id}`.
    pub slug: Option<String>,
    pub full_name: Option<String>,
    pub team_role: Option<String>,
    pub bio: Option<String>,
    pub profile_picture: Option<String>,
    pub location: Option<String>,
    pub linkedin_url: Option<String>,
    pub twitter_url: Option<String>,
    pub github_url: Option<String>,
    pub instagram_url: Option<String>,
    pub tiktok_url: Option<String>,
    pub personal_website: Option<String>,
    pub display_order: i64,
    pub is_visible_in_team: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<TeamProfile> for TeamProfileView {
    fn from(t: TeamProfile) -> Self {
        Self {
            id: t.id,
            user_id: t.user_id,
            slug: t.slug,
            full_name: t.full_name,
            team_role: t.team_role,
            bio: t.bio,
            profile_picture: t.profile_picture,
            location: t.location,
            linkedin_url: t.linkedin_url,
            twitter_url: t.twitter_url,
            github_url: t.github_url,
            instagram_url: t.instagram_url,
            tiktok_url: t.tiktok_url,
            personal_website: t.personal_website,
            display_order: t.display_order,
            is_visible_in_team: t.is_visible_in_team,
            created_at: t.created_at,
            updated_at: t.updated_at,
        }
    }
}

fn admin_only(auth: &AuthUser) -> ApiResult<()> {
    if auth.has_role(Role::Admin) {
        Ok(())
    } else {
        Err(ApiError::forbidden("Administrators only"))
    }
}

/// Creates the caller's team profile (administrators only, CSRF protected); its slug is
/// `admin-{user_id}`.
#[utoipa::path(
    tag = "profiles",
    request_body = TeamProfileInput,
    security(("bearer" = [])),
    responses(
        (status = 201, body = TeamProfileView),
        (status = 403, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "Already created"),
    )
)]
#[post("/api/profiles/admin/me")]
pub async fn create_team_profile(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    body: web::Json<TeamProfileInput>,
) -> ApiResult<HttpResponse> {
    admin_only(&auth)?;
    let team = flow::create_team(&state, auth.id(), &body).await?;
    Ok(HttpResponse::Created().json(TeamProfileView::from(team)))
}

/// Updates the caller's team profile (administrators only, CSRF protected).
#[utoipa::path(
    tag = "profiles",
    request_body = TeamProfileInput,
    security(("bearer" = [])),
    responses(
        (status = 200, body = TeamProfileView),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody, description = "Not created yet"),
    )
)]
#[put("/api/profiles/admin/me")]
pub async fn update_team_profile(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    body: web::Json<TeamProfileInput>,
) -> ApiResult<HttpResponse> {
    admin_only(&auth)?;
    let team = flow::update_team(&state, auth.id(), &body).await?;
    Ok(HttpResponse::Ok().json(TeamProfileView::from(team)))
}

/// The caller's team profile (administrators only).
#[utoipa::path(
    tag = "profiles",
    security(("bearer" = [])),
    responses(
        (status = 200, body = TeamProfileView),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
    )
)]
#[get("/api/profiles/admin/me")]
pub async fn get_team_profile(
    state: web::Data<AppState>,
    AdminUser(auth): AdminUser,
) -> ApiResult<HttpResponse> {
    let mut conn = state.db.conn().await?;
    let team = profiles::find_team_by_user(conn.exec(), auth.id())
        .await?
        .ok_or_else(|| ApiError::not_found("You have no team profile yet"))?;
    Ok(HttpResponse::Ok().json(TeamProfileView::from(team)))
}

/// A team profile by slug (public; only profiles shown in the team).
#[utoipa::path(
    tag = "profiles",
    params(("slug" = String, Path)),
    responses((status = 200, body = TeamProfileView), (status = 404, body = ErrorBody))
)]
#[get("/api/profiles/admin/slug/{slug}")]
pub async fn team_profile_by_slug(
    state: web::Data<AppState>,
    slug: web::Path<String>,
) -> ApiResult<HttpResponse> {
    let mut conn = state.db.conn().await?;
    let team = profiles::find_team_by_slug(conn.exec(), slug.trim())
        .await?
        .filter(|t| t.is_visible_in_team)
        .ok_or_else(|| ApiError::not_found("Team profile not found"))?;
    Ok(HttpResponse::Ok().json(TeamProfileView::from(team)))
}

/// The public team: visible administrators' profiles by `display_order`.
#[utoipa::path(tag = "profiles", responses((status = 200, body = Vec<TeamProfileView>)))]
#[get("/api/profiles/team")]
pub async fn public_team(state: web::Data<AppState>) -> ApiResult<HttpResponse> {
    let mut conn = state.db.conn().await?;
    let list: Vec<TeamProfileView> = profiles::list_team(conn.exec())
        .await?
        .into_iter()
        .map(TeamProfileView::from)
        .collect();
    Ok(HttpResponse::Ok().json(list))
}
