//! Invitations of experts to a project and curation suggestions.

use actix_web::{HttpResponse, get, post, web};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::http::auth::{AdminUser, AuthUser};
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::state::AppState;
use crate::workflows::projects::{self as flow};

use super::*;

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
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody),
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
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody),
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
    let limit = suggestion_limit(query.limit)?;
    let ranked =
        flow::curation_suggestions(&state, &caller(&auth), path.into_inner(), limit).await?;
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
    let suggestions = flow::curation_suggestions(&state, &caller(&admin), id, limit).await?;
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
