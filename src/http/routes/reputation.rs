//! Administrators on a user's standing: `/api/admin/users/{user_id}/internal-rating`, its
//! history, the reputation (lead score with its components) and the suggested expert level.

use actix_web::{HttpResponse, get, put, web};
use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::domain::reputation;
use crate::domain::text::RatingReason;
use crate::http::auth::AdminUser;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::state::AppState;
use crate::store::reputation::RatingChange;
use crate::workflows::reputation as flow;

/// The new internal rating; also accepted as query parameters.
#[derive(Debug, Default, Deserialize, ToSchema, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct InternalRatingRequest {
    /// 1.0 to 5.0, one decimal at most.
    #[schema(value_type = Option<f64>)]
    #[param(value_type = Option<f64>)]
    pub rating: Option<Decimal>,
    /// Why, at least 10 characters.
    #[schema(min_length = 10)]
    pub reason: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RatingChangeView {
    pub id: i64,
    pub old_rating: Option<f64>,
    pub new_rating: f64,
    pub reason: String,
    /// The administrator's username.
    pub changed_by: String,
    pub changed_by_id: Option<i64>,
    pub created_at: DateTime<Utc>,
}

impl From<RatingChange> for RatingChangeView {
    fn from(c: RatingChange) -> Self {
        Self {
            id: c.id,
            old_rating: c.old_rating,
            new_rating: c.new_rating,
            reason: c.reason,
            changed_by: c.changed_by,
            changed_by_id: c.changed_by_id,
            created_at: c.created_at,
        }
    }
}

/// Sets a user's internal rating, kept in its history (CSRF protected).
#[utoipa::path(
    tag = "admin",
    params(("user_id" = i64, Path), InternalRatingRequest),
    request_body(content = InternalRatingRequest, description = "Or the same fields as query parameters"),
    security(("bearer" = [])),
    responses(
        (status = 200, body = RatingChangeView),
        (status = 403, body = ErrorBody, description = "Not an administrator, or CSRF"),
        (status = 409, body = ErrorBody, description = "NO_PROFILE"),
    )
)]
#[put("/api/admin/users/{user_id}/internal-rating")]
pub async fn set_internal_rating(
    state: web::Data<AppState>,
    AdminUser(admin): AdminUser,
    user_id: web::Path<i64>,
    query: web::Query<InternalRatingRequest>,
    body: Option<web::Json<InternalRatingRequest>>,
) -> ApiResult<HttpResponse> {
    let body = body.map(web::Json::into_inner).unwrap_or_default();
    let query = query.into_inner();
    let rating = body
        .rating
        .or(query.rating)
        .ok_or_else(|| ApiError::invalid_field("rating", "is required"))?;
    let reason = body
        .reason
        .or(query.reason)
        .ok_or_else(|| ApiError::invalid_field("reason", "is required"))?;
    // The rating's rule first, then the reason's, as the answers have always come.
    let rating = reputation::check_internal_rating(rating)
        .map_err(|m| ApiError::invalid_field("rating", m))?;
    let reason = RatingReason::parse(reason)
        .map_err(|e| ApiError::invalid_field("reason", e.to_string()))?;
    let change = flow::set_internal_rating(&state, &admin.user, *user_id, rating, reason).await?;
    Ok(HttpResponse::Ok().json(RatingChangeView::from(change)))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct HistoryQuery {
    /// 1 to 50, default 10.
    pub limit: Option<i64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RatingHistory {
    pub user_id: i64,
    /// Newest first.
    pub history: Vec<RatingChangeView>,
    pub total: i64,
}

/// A user's internal rating changes, newest first.
#[utoipa::path(
    tag = "admin",
    params(("user_id" = i64, Path), HistoryQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, body = RatingHistory),
        (status = 403, body = ErrorBody, description = "Not an administrator"),
    )
)]
#[get("/api/admin/users/{user_id}/internal-rating-history")]
pub async fn rating_history(
    state: web::Data<AppState>,
    _admin: AdminUser,
    user_id: web::Path<i64>,
    query: web::Query<HistoryQuery>,
) -> ApiResult<HttpResponse> {
    let limit = query.limit.unwrap_or(10);
    if !(1..=50).contains(&limit) {
        return Err(ApiError::invalid_field("limit", "must be from 1 to 50"));
    }
    let (history, total) = flow::rating_history(&state, *user_id, limit).await?;
    Ok(HttpResponse::Ok().json(RatingHistory {
        user_id: *user_id,
        history: history.into_iter().map(Into::into).collect(),
        total,
    }))
}

/// The lead score's five components, each out of its weight.
#[derive(Debug, Serialize, ToSchema)]
pub struct LeadScoreComponents {
    /// Out of 30.
    pub completed_projects: f64,
    /// Out of 25.
    pub reviews: f64,
    /// Out of 20.
    pub verification: f64,
    /// Out of 15.
    pub recent_activity: f64,
    /// Out of 10.
    pub time_on_platform: f64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Reputation {
    pub user_id: i64,
    /// 0–100.
    pub lead_score: i64,
    pub components: LeadScoreComponents,
    pub completed_projects: i64,
    /// Mean of the revealed, published ratings received.
    pub average_rating: Option<f64>,
    pub total_reviews: i64,
    pub email_verified: bool,
    pub profile_verified: bool,
    pub last_active_at: Option<DateTime<Utc>>,
    pub registered_at: DateTime<Utc>,
    pub internal_rating: Option<f64>,
    pub expert_level: Option<String>,
}

/// A score as a JSON number (two decimals at most: not money).
fn number(value: Decimal) -> f64 {
    use rust_decimal::prelude::ToPrimitive as _;
    value.to_f64().unwrap_or_default()
}

/// A user's reputation: the lead score with each component and what it was computed from.
#[utoipa::path(
    tag = "admin",
    params(("user_id" = i64, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = Reputation),
        (status = 403, body = ErrorBody, description = "Not an administrator"),
    )
)]
#[get("/api/admin/users/{user_id}/reputation")]
pub async fn get_reputation(
    state: web::Data<AppState>,
    _admin: AdminUser,
    user_id: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let s = flow::standing(&state, *user_id).await?;
    Ok(HttpResponse::Ok().json(Reputation {
        user_id: *user_id,
        lead_score: s.score.total,
        components: LeadScoreComponents {
            completed_projects: number(s.score.completed_projects),
            reviews: number(s.score.reviews),
            verification: number(s.score.verification),
            recent_activity: number(s.score.recent_activity),
            time_on_platform: number(s.score.time_on_platform),
        },
        completed_projects: s.inputs.completed_projects,
        average_rating: s.inputs.review_average.map(number),
        total_reviews: s.inputs.review_count,
        email_verified: s.inputs.email_verified,
        profile_verified: s.inputs.profile_verified,
        last_active_at: s.inputs.last_active_at,
        registered_at: s.inputs.registered_at,
        internal_rating: s.internal_rating,
        expert_level: s.expert_level,
    }))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct LevelSuggestion {
    pub user_id: i64,
    /// `Global` (0–50), `Pro` (51–75) or `Enterprise` (76–100).
    pub suggested_level: String,
    pub lead_score: i64,
    /// The level of the user's expert profile, `null` without one.
    pub current_level: Option<String>,
}

/// The expert level the user's lead score suggests.
#[utoipa::path(
    tag = "admin",
    params(("user_id" = i64, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = LevelSuggestion),
        (status = 403, body = ErrorBody, description = "Not an administrator"),
    )
)]
#[get("/api/admin/users/{user_id}/suggest-level")]
pub async fn suggest_level(
    state: web::Data<AppState>,
    _admin: AdminUser,
    user_id: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let s = flow::standing(&state, *user_id).await?;
    Ok(HttpResponse::Ok().json(LevelSuggestion {
        user_id: *user_id,
        suggested_level: reputation::suggested_level(s.score.total).to_owned(),
        lead_score: s.score.total,
        current_level: s.expert_level,
    }))
}

/// Mounts the administrators' routes on a user's standing.
pub fn mount(cfg: &mut utoipa_actix_web::service_config::ServiceConfig) {
    cfg.service(set_internal_rating)
        .service(rating_history)
        .service(get_reputation)
        .service(suggest_level);
}
