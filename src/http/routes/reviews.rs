//! Reviews: `/api/reviews/*`. The project's company and its expert review each other once the
//! project is finished; ratings stay sealed until both have reviewed or the blind window
//! lapses (`REVIEW_BLIND_DAYS`). Administrators publish, hide and delete.
//!
//! Reads are public; a bearer token, when sent, lets the author and administrators read
//! sealed and hidden reviews.

use actix_web::{HttpResponse, delete, get, post, put, web};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::domain::reputation;
use crate::domain::reputation::ReviewVisibility;
use crate::domain::text::ReviewText;
use crate::http::auth::{AdminUser, AuthUser, CsrfChecked};
use crate::http::error::{ApiError, ApiResult, ErrorBody, FieldError};
use crate::http::pagination::{PageQuery, Paginated};
use crate::http::routes::projects::caller;
use crate::state::AppState;
use crate::store::reviews::{self, Review, UserSide};
use crate::workflows::projects::Caller;
use crate::workflows::reviews::{self as flow, Draft, Moderation, Reading};

/// A review as its reader may see it: `rating`, `comment` and `response` are `null` while
/// it is sealed for them (`revealed: false`; `reveal_at` says when it opens).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ReviewView {
    pub id: i64,
    pub project_id: i64,
    pub reviewer_id: Option<i64>,
    pub reviewee_id: Option<i64>,
    /// The role the author acted in: `empresa` or `experto`.
    pub reviewer_role: Option<String>,
    pub rating: Option<i64>,
    pub comment: Option<String>,
    pub response: Option<String>,
    pub responded_at: Option<DateTime<Utc>>,
    /// `published` or `hidden`.
    #[schema(value_type = String)]
    pub visibility: ReviewVisibility,
    /// Whether the reviewee and the public read it now.
    pub revealed: bool,
    pub reveal_at: Option<DateTime<Utc>>,
    pub edited_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

fn view(r: Review, reading: Reading, now: DateTime<Utc>) -> ReviewView {
    let full = reading == Reading::Full;
    ReviewView {
        id: r.id,
        project_id: r.project_id,
        reviewer_id: r.reviewer_id,
        reviewee_id: r.reviewee_id,
        revealed: r.is_revealed(now),
        reveal_at: r.reveal_at(),
        reviewer_role: r.reviewer_role,
        rating: full.then_some(r.rating),
        comment: r.comment.filter(|_| full),
        response: r.response.filter(|_| full),
        responded_at: r.responded_at,
        visibility: r.visibility,
        edited_at: r.edited_at,
        created_at: r.created_at,
        updated_at: r.updated_at,
    }
}

/// The readable ones of `items`, each as `viewer` may read it.
fn views(items: Vec<Review>, viewer: Option<&Caller>, now: DateTime<Utc>) -> Vec<ReviewView> {
    items
        .into_iter()
        .filter_map(|r| flow::reading(&r, viewer, now).map(|reading| view(r, reading, now)))
        .collect()
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct CreateReview {
    pub project_id: i64,
    pub reviewee_id: i64,
    /// A whole number from 1 to 5.
    pub rating: serde_json::Value,
    /// 10 to 2000 characters.
    #[schema(min_length = 10, max_length = 2000)]
    pub comment: String,
}

/// A whole-number rating from 1 to 5 (`4.0` is refused: ratings are whole stars).
fn parse_rating(value: &serde_json::Value) -> Result<i64, String> {
    let rating = value
        .as_i64()
        .ok_or_else(|| "must be a whole number from 1 to 5".to_owned())?;
    reputation::check_rating(rating).map(|()| rating)
}

/// Writes a review of the project's counterpart (CSRF protected).
#[utoipa::path(
    tag = "reviews",
    request_body = CreateReview,
    security(("bearer" = [])),
    responses(
        (status = 201, body = ReviewView),
        (status = 400, body = ErrorBody, description = "WRONG_REVIEWEE, PROJECT_NOT_FINISHED"),
        (status = 403, body = ErrorBody, description = "NOT_A_PARTY, or the CSRF check failed"),
        (status = 404, body = ErrorBody, description = "Project unknown or not visible"),
        (status = 409, body = ErrorBody, description = "REVIEW_EXISTS"),
    )
)]
#[post("/api/reviews")]
pub async fn create(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    body: web::Json<CreateReview>,
) -> ApiResult<HttpResponse> {
    let body = body.into_inner();
    let mut errors = Vec::new();
    let rating = parse_rating(&body.rating)
        .map_err(|m| errors.push(FieldError::new("rating", m)))
        .ok();
    let comment = ReviewText::parse(body.comment)
        .map_err(|e| errors.push(FieldError::new("comment", e.to_string())))
        .ok();
    let (Some(rating), Some(comment)) = (rating, comment) else {
        return Err(ApiError::validation(errors));
    };
    let draft = Draft {
        project_id: body.project_id,
        reviewee_id: body.reviewee_id,
        rating,
        comment,
    };
    let review = flow::create(&state, &caller(&auth), draft).await?;
    Ok(HttpResponse::Created().json(view(review, Reading::Full, state.clock.now())))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct UserReviewsQuery {
    /// `author` (reviews the user wrote) or `reviewee` (reviews about the user); both when
    /// absent.
    pub role: Option<String>,
    pub page: Option<i64>,
    pub size: Option<i64>,
}

/// A user's reviews, newest first (paginated).
#[utoipa::path(
    tag = "reviews",
    params(("user_id" = i64, Path), UserReviewsQuery),
    responses((status = 200, body = Paginated<ReviewView>))
)]
#[get("/api/reviews/user/{user_id}")]
pub async fn of_user(
    state: web::Data<AppState>,
    auth: Option<AuthUser>,
    user_id: web::Path<i64>,
    query: web::Query<UserReviewsQuery>,
) -> ApiResult<HttpResponse> {
    let side = match query.role.as_deref() {
        None => UserSide::Either,
        Some("author") => UserSide::Author,
        Some("reviewee") => UserSide::Reviewee,
        Some(_) => {
            return Err(ApiError::invalid_field(
                "role",
                "must be author or reviewee",
            ));
        }
    };
    let page = PageQuery {
        page: query.page,
        size: query.size,
    }
    .validate()?;
    let viewer = auth.as_ref().map(caller);
    let now = state.clock.now();
    let mut conn = state.db.conn().await?;
    let (items, total) = reviews::of_user(
        conn.exec(),
        *user_id,
        side,
        viewer.as_ref().map(|v| v.id),
        viewer.as_ref().is_some_and(|v| v.admin),
        page.limit(),
        page.offset(),
    )
    .await?;
    let items = views(items, viewer.as_ref(), now);
    Ok(HttpResponse::Ok().json(Paginated::new(items, total, page)))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ReviewStats {
    pub user_id: i64,
    /// Mean of the revealed, published ratings received (two decimals), `null` without any.
    pub average_rating: Option<f64>,
    pub total_reviews: i64,
    /// Count per rating, keys `"1"` to `"5"`.
    pub distribution: std::collections::BTreeMap<String, i64>,
    /// The five latest revealed, published reviews received.
    pub recent: Vec<ReviewView>,
}

/// Statistics of the reviews a user received: revealed and published ones only.
#[utoipa::path(
    tag = "reviews",
    params(("user_id" = i64, Path)),
    responses((status = 200, body = ReviewStats))
)]
#[get("/api/reviews/stats/{user_id}")]
pub async fn stats(state: web::Data<AppState>, user_id: web::Path<i64>) -> ApiResult<HttpResponse> {
    use rust_decimal::prelude::ToPrimitive as _;
    let s = flow::stats(&state, *user_id).await?;
    let now = state.clock.now();
    Ok(HttpResponse::Ok().json(ReviewStats {
        user_id: *user_id,
        average_rating: s.summary.average.and_then(|a| a.to_f64()),
        total_reviews: s.summary.total,
        distribution: (1..=5)
            .map(|r| (r.to_string(), s.summary.distribution[r - 1]))
            .collect(),
        recent: s
            .recent
            .into_iter()
            .map(|r| view(r, Reading::Full, now))
            .collect(),
    }))
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct EditReview {
    pub rating: Option<serde_json::Value>,
    #[schema(min_length = 10, max_length = 2000)]
    pub comment: Option<String>,
}

/// The author edits a review while it is sealed and unanswered (CSRF protected).
#[utoipa::path(
    tag = "reviews",
    request_body = EditReview,
    params(("review_id" = i64, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = ReviewView),
        (status = 403, body = ErrorBody, description = "Not the author, or the CSRF check failed"),
        (status = 409, body = ErrorBody, description = "REVIEW_LOCKED: revealed or answered"),
    )
)]
#[put("/api/reviews/{review_id}")]
pub async fn edit(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    id: web::Path<i64>,
    body: web::Json<EditReview>,
) -> ApiResult<HttpResponse> {
    let body = body.into_inner();
    let mut errors = Vec::new();
    let rating = match &body.rating {
        Some(value) => parse_rating(value)
            .map_err(|m| errors.push(FieldError::new("rating", m)))
            .ok(),
        None => None,
    };
    let comment = match body.comment.map(ReviewText::parse).transpose() {
        Ok(comment) => comment,
        Err(e) => {
            errors.push(FieldError::new("comment", e.to_string()));
            None
        }
    };
    if !errors.is_empty() {
        return Err(ApiError::validation(errors));
    }
    let review = flow::edit(&state, &caller(&auth), *id, rating, comment).await?;
    Ok(HttpResponse::Ok().json(view(review, Reading::Full, state.clock.now())))
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct RespondRequest {
    /// 10 to 2000 characters.
    #[schema(min_length = 10, max_length = 2000)]
    pub response: String,
}

async fn respond_as(
    state: &AppState,
    auth: &AuthUser,
    id: i64,
    body: &RespondRequest,
    edit_allowed: bool,
) -> ApiResult<HttpResponse> {
    let response = ReviewText::parse(body.response.as_str())
        .map_err(|e| ApiError::invalid_field("response", e.to_string()))?;
    let review = flow::respond(state, &caller(auth), id, &response, edit_allowed).await?;
    let now = state.clock.now();
    Ok(HttpResponse::Ok().json(view(review, Reading::Full, now)))
}

/// The reviewee answers a revealed review, once (CSRF protected).
#[utoipa::path(
    tag = "reviews",
    request_body = RespondRequest,
    params(("review_id" = i64, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = ReviewView),
        (status = 403, body = ErrorBody, description = "Not the reviewee, or the CSRF check failed"),
        (status = 409, body = ErrorBody, description = "REVIEW_NOT_REVEALED, RESPONSE_EXISTS"),
    )
)]
#[post("/api/reviews/{review_id}/respond")]
pub async fn respond(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    id: web::Path<i64>,
    body: web::Json<RespondRequest>,
) -> ApiResult<HttpResponse> {
    respond_as(&state, &auth, *id, &body, false).await
}

/// The reviewee writes or edits the answer to a revealed review (CSRF protected).
#[utoipa::path(
    tag = "reviews",
    request_body = RespondRequest,
    params(("review_id" = i64, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = ReviewView),
        (status = 403, body = ErrorBody, description = "Not the reviewee, or the CSRF check failed"),
        (status = 409, body = ErrorBody, description = "REVIEW_NOT_REVEALED"),
    )
)]
#[put("/api/reviews/{review_id}/respond")]
pub async fn edit_response(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    id: web::Path<i64>,
    body: web::Json<RespondRequest>,
) -> ApiResult<HttpResponse> {
    respond_as(&state, &auth, *id, &body, true).await
}

/// The reviews written on a project.
#[utoipa::path(
    tag = "reviews",
    params(("project_id" = i64, Path)),
    responses((status = 200, body = Vec<ReviewView>))
)]
#[get("/api/reviews/project/{project_id}")]
pub async fn of_project(
    state: web::Data<AppState>,
    auth: Option<AuthUser>,
    project_id: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let mut conn = state.db.conn().await?;
    let items = reviews::of_project(conn.exec(), *project_id).await?;
    let viewer = auth.as_ref().map(caller);
    Ok(HttpResponse::Ok().json(views(items, viewer.as_ref(), state.clock.now())))
}

/// The review one reviewer wrote on a project.
#[utoipa::path(
    tag = "reviews",
    params(("project_id" = i64, Path), ("reviewer_id" = i64, Path)),
    responses((status = 200, body = ReviewView))
)]
#[get("/api/reviews/project/{project_id}/reviewer/{reviewer_id}")]
pub async fn of_project_reviewer(
    state: web::Data<AppState>,
    auth: Option<AuthUser>,
    path: web::Path<(i64, i64)>,
) -> ApiResult<HttpResponse> {
    let (project_id, reviewer_id) = path.into_inner();
    let mut conn = state.db.conn().await?;
    let items = reviews::of_project(conn.exec(), project_id).await?;
    let viewer = auth.as_ref().map(caller);
    views(items, viewer.as_ref(), state.clock.now())
        .into_iter()
        .find(|r| r.reviewer_id == Some(reviewer_id))
        .map(|r| HttpResponse::Ok().json(r))
        .ok_or_else(|| ApiError::not_found("Review not found"))
}

/// One review.
#[utoipa::path(
    tag = "reviews",
    params(("review_id" = i64, Path)),
    responses((status = 200, body = ReviewView))
)]
#[get("/api/reviews/{review_id}")]
pub async fn get_one(
    state: web::Data<AppState>,
    auth: Option<AuthUser>,
    id: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let viewer = auth.as_ref().map(caller);
    let (review, reading) = flow::get(&state, viewer.as_ref(), *id).await?;
    Ok(HttpResponse::Ok().json(view(review, reading, state.clock.now())))
}

async fn moderate(
    state: &AppState,
    admin: &AuthUser,
    id: i64,
    action: Moderation,
) -> ApiResult<HttpResponse> {
    match flow::moderate(state, admin.id(), id, action).await? {
        Some(review) => Ok(HttpResponse::Ok().json(view(review, Reading::Full, state.clock.now()))),
        None => Ok(HttpResponse::NoContent().finish()),
    }
}

/// Publishes a review (administrators; recorded with who and when).
#[utoipa::path(
    tag = "reviews",
    params(("review_id" = i64, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = ReviewView),
        (status = 403, body = ErrorBody, description = "Not an administrator, or CSRF"),
    )
)]
#[post("/api/reviews/{review_id}/publish")]
pub async fn publish(
    state: web::Data<AppState>,
    AdminUser(admin): AdminUser,
    id: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    moderate(&state, &admin, *id, Moderation::Publish).await
}

/// Hides a review from every public list and statistic (administrators).
#[utoipa::path(
    tag = "reviews",
    params(("review_id" = i64, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = ReviewView),
        (status = 403, body = ErrorBody, description = "Not an administrator, or CSRF"),
    )
)]
#[post("/api/reviews/{review_id}/hide")]
pub async fn hide(
    state: web::Data<AppState>,
    AdminUser(admin): AdminUser,
    id: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    moderate(&state, &admin, *id, Moderation::Hide).await
}

/// Deletes a review (administrators; the deletion stays in the moderation log).
#[utoipa::path(
    tag = "reviews",
    params(("review_id" = i64, Path)),
    security(("bearer" = [])),
    responses(
        (status = 204, description = "Deleted"),
        (status = 403, body = ErrorBody, description = "Not an administrator, or CSRF"),
    )
)]
#[delete("/api/reviews/{review_id}")]
pub async fn remove(
    state: web::Data<AppState>,
    AdminUser(admin): AdminUser,
    id: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    moderate(&state, &admin, *id, Moderation::Delete).await
}

/// Mounts the reviews: fixed paths before `{review_id}`.
pub fn mount(cfg: &mut utoipa_actix_web::service_config::ServiceConfig) {
    cfg.service(create)
        .service(of_user)
        .service(stats)
        .service(of_project)
        .service(of_project_reviewer)
        .service(respond)
        .service(edit_response)
        .service(publish)
        .service(hide)
        .service(get_one)
        .service(edit)
        .service(remove);
}
