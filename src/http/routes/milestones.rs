//! Milestones and deliveries under `/api/milestones/…` (specification, "Milestones and
//! deliveries"): the company's plan, the older direct actions, and deliveries with their
//! review. Mounted with the literal `deliveries/…` paths before the `{milestone_id}` ones.

use actix_web::{HttpResponse, delete, get, post, put, web};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::domain::delivery::DeliveryStatus;
use crate::domain::money::parse_number;
use crate::domain::project::parse_deadline;
use crate::domain::text::{Feedback, TextError, Title};
use crate::http::auth::{AuthUser, CsrfChecked};
use crate::http::error::{ApiError, ApiResult, ErrorBody, FieldError};
use crate::http::pagination::{PageQuery, Paginated};
use crate::http::routes::escrow_views::{MilestoneView, PaymentView};
use crate::http::routes::projects::caller;
use crate::state::AppState;
use crate::store::deliveries::Delivery;
use crate::store::milestones;
use crate::workflows::deliveries::{self as delivery_flow, Decision};
use crate::workflows::escrow::Release;
use crate::workflows::milestones::{self as flow, MilestoneDraft, MilestoneEdit};

const MAX_TEXT: usize = 10_000;
const MAX_ATTACHMENTS: usize = 20;
const MAX_ATTACHMENT: usize = 500;

// ---------------------------------------------------------------------------------------
// Shapes
// ---------------------------------------------------------------------------------------

/// A delivery.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DeliveryView {
    pub id: i64,
    pub milestone_id: i64,
    pub project_id: i64,
    pub expert_id: Option<i64>,
    pub description: String,
    /// File paths or links.
    pub attachments: Vec<String>,
    /// `submitted`, `approved`, `rejected`, `needs_revision`.
    #[schema(value_type = String)]
    pub status: DeliveryStatus,
    pub feedback: Option<String>,
    pub reviewed_at: Option<DateTime<Utc>>,
    pub reviewed_by: Option<i64>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// While `submitted`: when the service approves it if the company has not reviewed it
    /// (`AUTO_APPROVE_DAYS`; the clock stops while the project is disputed).
    pub auto_approve_at: Option<DateTime<Utc>>,
    /// The service approved it when its review window ran out (`reviewed_by` is empty and
    /// `feedback` gives the reason).
    pub auto_approved: bool,
}

impl From<Delivery> for DeliveryView {
    fn from(d: Delivery) -> Self {
        let waits = d.status.is_under_review();
        let auto_approve_at = waits.then_some(d.auto_approve_at).flatten();
        Self {
            id: d.id,
            milestone_id: d.milestone_id,
            project_id: d.project_id,
            expert_id: d.expert_id,
            description: d.description,
            attachments: d.attachments.0,
            status: d.status,
            feedback: d.feedback,
            reviewed_at: d.reviewed_at,
            reviewed_by: d.reviewed_by,
            auto_approve_at,
            auto_approved: d.auto_approved,
            created_at: d.created_at,
            updated_at: d.updated_at,
        }
    }
}

/// The delivery after a review, with the money an approval moved.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ReviewResponse {
    #[serde(flatten)]
    pub delivery: DeliveryView,
    /// The released payment (approval only).
    pub payment: Option<PaymentView>,
    /// The next milestone's payment, `pending`, when one is left (approval only).
    pub next_payment: Option<PaymentView>,
}

/// A milestone approved directly, with the money moved.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ApprovalResponse {
    #[serde(flatten)]
    pub milestone: MilestoneView,
    pub payment: PaymentView,
    pub next_payment: Option<PaymentView>,
}

fn money(release: Option<Release>) -> (Option<PaymentView>, Option<PaymentView>) {
    match release {
        Some(r) => (Some(r.payment.into()), r.next_payment.map(Into::into)),
        None => (None, None),
    }
}

#[derive(Deserialize, ToSchema)]
pub struct CreateMilestoneRequest {
    pub project_id: i64,
    #[schema(min_length = 1, max_length = 200)]
    pub title: String,
    pub description: Option<String>,
    /// Above 0, at most 2 decimals.
    #[schema(value_type = f64)]
    pub amount: serde_json::Number,
    /// `YYYY-MM-DDTHH:MM:SS` or RFC 3339.
    pub due_date: Option<String>,
}

#[derive(Deserialize, ToSchema)]
pub struct UpdateMilestoneRequest {
    #[schema(min_length = 1, max_length = 200)]
    pub title: Option<String>,
    pub description: Option<String>,
    #[schema(value_type = Option<f64>)]
    pub amount: Option<serde_json::Number>,
    pub due_date: Option<String>,
}

#[derive(Deserialize, ToSchema)]
pub struct FeedbackRequest {
    #[schema(min_length = 1, max_length = 5000)]
    pub feedback: Option<String>,
}

#[derive(Deserialize, ToSchema)]
pub struct CreateDeliveryRequest {
    pub milestone_id: i64,
    pub description: String,
    #[serde(default)]
    pub attachments: Vec<String>,
}

#[derive(Deserialize, ToSchema)]
pub struct UpdateDeliveryRequest {
    pub description: Option<String>,
    pub attachments: Option<Vec<String>>,
}

#[derive(Deserialize, ToSchema)]
pub struct DeliveryReviewRequest {
    /// `approve`, `reject` or `request_revision`.
    pub decision: String,
    /// Required for `request_revision`.
    #[schema(min_length = 1, max_length = 5000)]
    pub feedback: Option<String>,
}

// ---------------------------------------------------------------------------------------
// Field checks
// ---------------------------------------------------------------------------------------

fn check_title(title: &str, errors: &mut Vec<FieldError>) -> Option<Title> {
    Title::parse(title)
        .map_err(|e| errors.push(FieldError::new("title", e.to_string())))
        .ok()
}

fn check_amount(n: &serde_json::Number, errors: &mut Vec<FieldError>) -> i64 {
    match parse_number(n) {
        Ok(minor) if minor > 0 => minor,
        Ok(_) => {
            errors.push(FieldError::new("amount", "must be above 0"));
            0
        }
        Err(message) => {
            errors.push(FieldError::new("amount", message));
            0
        }
    }
}

fn check_due_date(text: &str, errors: &mut Vec<FieldError>) -> Option<DateTime<Utc>> {
    let t = parse_deadline(text);
    if t.is_none() {
        errors.push(FieldError::new("due_date", "must be an ISO datetime"));
    }
    t
}

/// Trimmed text of at most `max` characters; empty is `None` unless `required`.
fn check_text(
    field: &'static str,
    text: &str,
    max: usize,
    required: bool,
    errors: &mut Vec<FieldError>,
) -> Option<String> {
    let text = text.trim();
    if text.chars().count() > max || (required && text.is_empty()) {
        let need = if required { "1" } else { "0" };
        errors.push(FieldError::new(
            field,
            format!("must be {need} to {max} characters"),
        ));
    }
    (!text.is_empty()).then(|| text.to_owned())
}

/// Feedback on handed-in work: required to ask for a revision, else optional (blank is none).
/// An optional one has always been told its bounds as "0 to".
fn check_feedback(
    text: Option<String>,
    required: bool,
    errors: &mut Vec<FieldError>,
) -> Option<Feedback> {
    let parsed = if required {
        Feedback::parse(text.unwrap_or_default()).map(Some)
    } else {
        Feedback::parse_optional(text)
    };
    parsed.unwrap_or_else(|refusal| {
        let message = match refusal {
            TextError::Length { max, .. } if !required => format!("must be 0 to {max} characters"),
            refusal => refusal.to_string(),
        };
        errors.push(FieldError::new("feedback", message));
        None
    })
}

fn check_attachments(list: Vec<String>, errors: &mut Vec<FieldError>) -> Vec<String> {
    if list.len() > MAX_ATTACHMENTS {
        errors.push(FieldError::new(
            "attachments",
            format!("at most {MAX_ATTACHMENTS} attachments"),
        ));
    }
    let list: Vec<String> = list.iter().map(|a| a.trim().to_owned()).collect();
    if list
        .iter()
        .any(|a| a.is_empty() || a.chars().count() > MAX_ATTACHMENT)
    {
        errors.push(FieldError::new(
            "attachments",
            format!("each must be 1 to {MAX_ATTACHMENT} characters"),
        ));
    }
    list
}

fn done<T>(value: T, errors: Vec<FieldError>) -> ApiResult<T> {
    if errors.is_empty() {
        Ok(value)
    } else {
        Err(ApiError::validation(errors))
    }
}

// ---------------------------------------------------------------------------------------
// Deliveries (literal paths first)
// ---------------------------------------------------------------------------------------

/// The project's expert hands in work for a funded milestone (201): the milestone
/// `in_progress`, the project `in_review`, the company notified (`delivery_submitted`).
#[utoipa::path(
    tag = "deliveries",
    request_body = CreateDeliveryRequest,
    security(("bearer" = [])),
    responses(
        (status = 201, body = DeliveryView),
        (status = 403, body = ErrorBody, description = "Not the project's expert"),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "MILESTONE_NOT_FUNDED, DELIVERY_UNDER_REVIEW or INVALID_STATE"),
    )
)]
#[post("/api/milestones/deliveries")]
pub async fn create_delivery(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    body: web::Json<CreateDeliveryRequest>,
) -> ApiResult<HttpResponse> {
    let req = body.into_inner();
    let mut errors = Vec::new();
    let description = check_text("description", &req.description, MAX_TEXT, true, &mut errors);
    let attachments = check_attachments(req.attachments, &mut errors);
    let (description, attachments) = done((description.unwrap_or_default(), attachments), errors)?;
    let d = delivery_flow::submit(
        &state,
        caller(&auth),
        req.milestone_id,
        description,
        attachments,
    )
    .await?;
    Ok(HttpResponse::Created().json(DeliveryView::from(d)))
}

/// A milestone's deliveries, newest first (the project's company and expert, administrators).
#[utoipa::path(
    tag = "deliveries",
    params(("milestone_id" = i64, Path), PageQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, body = Paginated<DeliveryView>),
        (status = 404, body = ErrorBody),
        (status = 422, body = ErrorBody),
    )
)]
#[get("/api/milestones/deliveries/milestone/{milestone_id}")]
pub async fn deliveries_of_milestone(
    state: web::Data<AppState>,
    auth: AuthUser,
    path: web::Path<i64>,
    query: web::Query<PageQuery>,
) -> ApiResult<HttpResponse> {
    let page = query.into_inner().validate()?;
    let (items, total) = delivery_flow::list_for_milestone(
        &state,
        &caller(&auth),
        path.into_inner(),
        page.limit(),
        page.offset(),
    )
    .await?;
    Ok(HttpResponse::Ok().json(Paginated::new(items, total, page).map(DeliveryView::from)))
}

/// A project's deliveries, newest first (the project's company and expert, administrators).
#[utoipa::path(
    tag = "deliveries",
    params(("project_id" = i64, Path), PageQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, body = Paginated<DeliveryView>),
        (status = 404, body = ErrorBody),
        (status = 422, body = ErrorBody),
    )
)]
#[get("/api/milestones/deliveries/project/{project_id}")]
pub async fn deliveries_of_project(
    state: web::Data<AppState>,
    auth: AuthUser,
    path: web::Path<i64>,
    query: web::Query<PageQuery>,
) -> ApiResult<HttpResponse> {
    let page = query.into_inner().validate()?;
    let (items, total) = delivery_flow::list_for_project(
        &state,
        &caller(&auth),
        path.into_inner(),
        page.limit(),
        page.offset(),
    )
    .await?;
    Ok(HttpResponse::Ok().json(Paginated::new(items, total, page).map(DeliveryView::from)))
}

/// The caller's own deliveries, newest first (experts).
#[utoipa::path(
    tag = "deliveries",
    params(PageQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, body = Paginated<DeliveryView>),
        (status = 403, body = ErrorBody),
        (status = 422, body = ErrorBody),
    )
)]
#[get("/api/milestones/deliveries/expert/me")]
pub async fn my_deliveries(
    state: web::Data<AppState>,
    auth: AuthUser,
    query: web::Query<PageQuery>,
) -> ApiResult<HttpResponse> {
    let page = query.into_inner().validate()?;
    let (items, total) =
        delivery_flow::list_mine(&state, &caller(&auth), page.limit(), page.offset()).await?;
    Ok(HttpResponse::Ok().json(Paginated::new(items, total, page).map(DeliveryView::from)))
}

/// A delivery (the project's company and expert, administrators; 404 for others).
#[utoipa::path(
    tag = "deliveries",
    params(("delivery_id" = i64, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = DeliveryView),
        (status = 404, body = ErrorBody),
    )
)]
#[get("/api/milestones/deliveries/{delivery_id}")]
pub async fn get_delivery(
    state: web::Data<AppState>,
    auth: AuthUser,
    path: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let d = delivery_flow::get(&state, &caller(&auth), path.into_inner()).await?;
    Ok(HttpResponse::Ok().json(DeliveryView::from(d)))
}

/// The expert's new version of a delivery sent back for revision; it is `submitted` again.
#[utoipa::path(
    tag = "deliveries",
    params(("delivery_id" = i64, Path)),
    request_body = UpdateDeliveryRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, body = DeliveryView),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "Not in needs_revision"),
    )
)]
#[put("/api/milestones/deliveries/{delivery_id}")]
pub async fn update_delivery(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    path: web::Path<i64>,
    body: web::Json<UpdateDeliveryRequest>,
) -> ApiResult<HttpResponse> {
    let req = body.into_inner();
    let mut errors = Vec::new();
    let description = req
        .description
        .map(|t| check_text("description", &t, MAX_TEXT, true, &mut errors).unwrap_or_default());
    let attachments = req.attachments.map(|a| check_attachments(a, &mut errors));
    let (description, attachments) = done((description, attachments), errors)?;
    let d = delivery_flow::resubmit(
        &state,
        caller(&auth),
        path.into_inner(),
        description,
        attachments,
    )
    .await?;
    Ok(HttpResponse::Ok().json(DeliveryView::from(d)))
}

/// The company of the project (or an administrator) reviews a submitted delivery, in the
/// project's actor. `approve` releases the held payment and prepares the next milestone's
/// (answered as `payment` and `next_payment`); `reject` counts a rejection — the third
/// cancels the milestone, the later ones and the project, and refunds the held payment;
/// `request_revision` sends it back to the expert with the feedback.
#[utoipa::path(
    tag = "deliveries",
    params(("delivery_id" = i64, Path)),
    request_body = DeliveryReviewRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, body = ReviewResponse),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "Not submitted, changed meanwhile, or MILESTONE_NOT_FUNDED"),
        (status = 503, body = ErrorBody, description = "The payment processor is unavailable"),
    )
)]
#[put("/api/milestones/deliveries/{delivery_id}/review")]
pub async fn review_delivery(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    path: web::Path<i64>,
    body: web::Json<DeliveryReviewRequest>,
) -> ApiResult<HttpResponse> {
    let req = body.into_inner();
    let mut errors = Vec::new();
    let decision = Decision::parse(&req.decision);
    if decision.is_none() {
        errors.push(FieldError::new(
            "decision",
            "must be approve, reject or request_revision",
        ));
    }
    let required = decision == Some(Decision::RequestRevision);
    let feedback = check_feedback(req.feedback, required, &mut errors);
    let (decision, feedback) = done((decision, feedback), errors)?;
    let decision = decision.unwrap_or(Decision::Reject);
    let r =
        delivery_flow::review(&state, caller(&auth), path.into_inner(), decision, feedback).await?;
    let (payment, next_payment) = money(r.release);
    Ok(HttpResponse::Ok().json(ReviewResponse {
        delivery: r.delivery.into(),
        payment,
        next_payment,
    }))
}

// ---------------------------------------------------------------------------------------
// Milestones
// ---------------------------------------------------------------------------------------

/// The company adds a milestone at the end of its project's plan (201, `pending`).
#[utoipa::path(
    tag = "milestones",
    request_body = CreateMilestoneRequest,
    security(("bearer" = [])),
    responses(
        (status = 201, body = MilestoneView),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "The project is finished, cancelled or disputed"),
    )
)]
#[post("/api/milestones")]
pub async fn create(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    body: web::Json<CreateMilestoneRequest>,
) -> ApiResult<HttpResponse> {
    let req = body.into_inner();
    let mut errors = Vec::new();
    let title = check_title(&req.title, &mut errors);
    let description = req
        .description
        .and_then(|t| check_text("description", &t, MAX_TEXT, false, &mut errors));
    let amount_minor = check_amount(&req.amount, &mut errors);
    let due_date = req.due_date.and_then(|t| check_due_date(&t, &mut errors));
    let (Some(title), true) = (title, errors.is_empty()) else {
        return Err(ApiError::validation(errors));
    };
    let draft = MilestoneDraft {
        title,
        description,
        amount_minor,
        due_date,
    };
    let m = flow::create(&state, &caller(&auth), req.project_id, draft).await?;
    Ok(HttpResponse::Created().json(MilestoneView::from(m)))
}

/// A project's milestones in order, cancelled ones included (the project's company and
/// expert, administrators; 404 for others).
#[utoipa::path(
    tag = "milestones",
    params(("project_id" = i64, Path), PageQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, body = Paginated<MilestoneView>),
        (status = 404, body = ErrorBody),
        (status = 422, body = ErrorBody),
    )
)]
#[get("/api/milestones/project/{project_id}")]
pub async fn list_for_project(
    state: web::Data<AppState>,
    auth: AuthUser,
    path: web::Path<i64>,
    query: web::Query<PageQuery>,
) -> ApiResult<HttpResponse> {
    let page = query.into_inner().validate()?;
    let mut conn = state.db.conn().await?;
    let (p, _) = flow::load_participating(conn.exec(), &caller(&auth), path.into_inner()).await?;
    let (items, total) =
        milestones::list_for_project(conn.exec(), p.id, page.limit(), page.offset()).await?;
    Ok(HttpResponse::Ok().json(Paginated::new(items, total, page).map(MilestoneView::from)))
}

/// A milestone (the project's company and expert, administrators; 404 for others).
#[utoipa::path(
    tag = "milestones",
    params(("milestone_id" = i64, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = MilestoneView),
        (status = 404, body = ErrorBody),
    )
)]
#[get("/api/milestones/{milestone_id}")]
pub async fn get_milestone(
    state: web::Data<AppState>,
    auth: AuthUser,
    path: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let mut conn = state.db.conn().await?;
    let (m, _, _) = flow::milestone_in(conn.exec(), &caller(&auth), path.into_inner()).await?;
    Ok(HttpResponse::Ok().json(MilestoneView::from(m)))
}

/// The company edits a milestone while it is `pending` and was never funded (409 otherwise).
#[utoipa::path(
    tag = "milestones",
    params(("milestone_id" = i64, Path)),
    request_body = UpdateMilestoneRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, body = MilestoneView),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody),
    )
)]
#[put("/api/milestones/{milestone_id}")]
pub async fn update(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    path: web::Path<i64>,
    body: web::Json<UpdateMilestoneRequest>,
) -> ApiResult<HttpResponse> {
    let req = body.into_inner();
    let mut errors = Vec::new();
    let edit = MilestoneEdit {
        title: req.title.and_then(|t| check_title(&t, &mut errors)),
        description: req
            .description
            .and_then(|t| check_text("description", &t, MAX_TEXT, false, &mut errors)),
        amount_minor: req.amount.map(|n| check_amount(&n, &mut errors)),
        due_date: req.due_date.and_then(|t| check_due_date(&t, &mut errors)),
    };
    let edit = done(edit, errors)?;
    let m = flow::update(&state, &caller(&auth), path.into_inner(), edit).await?;
    Ok(HttpResponse::Ok().json(MilestoneView::from(m)))
}

/// The company deletes a milestone while it is `pending` and was never funded (204).
#[utoipa::path(
    tag = "milestones",
    params(("milestone_id" = i64, Path)),
    security(("bearer" = [])),
    responses(
        (status = 204),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody),
    )
)]
#[delete("/api/milestones/{milestone_id}")]
pub async fn delete_milestone(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    path: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    flow::delete(&state, &caller(&auth), path.into_inner()).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// Older direct action: the project's expert marks a funded `pending`/`in_progress`
/// milestone `completed`; the project is `in_review`.
#[utoipa::path(
    tag = "milestones",
    params(("milestone_id" = i64, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = MilestoneView),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody),
    )
)]
#[post("/api/milestones/{milestone_id}/complete")]
pub async fn complete(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    path: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let m = flow::complete(&state, caller(&auth), path.into_inner()).await?;
    Ok(HttpResponse::Ok().json(MilestoneView::from(m)))
}

/// Older direct action: the company approves a `completed`/`in_progress` milestone; its held
/// payment is released and the next milestone's prepared.
#[utoipa::path(
    tag = "milestones",
    params(("milestone_id" = i64, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = ApprovalResponse),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody),
        (status = 503, body = ErrorBody, description = "The payment processor is unavailable"),
    )
)]
#[post("/api/milestones/{milestone_id}/approve")]
pub async fn approve(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    path: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let (m, release) = flow::approve(&state, caller(&auth), path.into_inner()).await?;
    Ok(HttpResponse::Ok().json(ApprovalResponse {
        milestone: m.into(),
        payment: release.payment.into(),
        next_payment: release.next_payment.map(Into::into),
    }))
}

/// Older direct action: the company rejects work handed in (a `completed` milestone, or one
/// with a delivery waiting, which is rejected with it), counted like a rejected delivery:
/// back to `in_progress`, the third time cancelled with the project.
#[utoipa::path(
    tag = "milestones",
    params(("milestone_id" = i64, Path)),
    request_body(content = Option<FeedbackRequest>),
    security(("bearer" = [])),
    responses(
        (status = 200, body = MilestoneView),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody),
        (status = 422, body = ErrorBody),
    )
)]
#[post("/api/milestones/{milestone_id}/reject")]
pub async fn reject(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    path: web::Path<i64>,
    body: Option<web::Json<FeedbackRequest>>,
) -> ApiResult<HttpResponse> {
    let mut errors = Vec::new();
    let feedback = check_feedback(
        body.and_then(|b| b.into_inner().feedback),
        false,
        &mut errors,
    );
    let feedback = done(feedback, errors)?;
    let m = flow::reject(&state, caller(&auth), path.into_inner(), feedback).await?;
    Ok(HttpResponse::Ok().json(MilestoneView::from(m)))
}

/// Mounts milestones and deliveries: the literal `deliveries/…` paths before
/// `{milestone_id}`.
pub fn mount(cfg: &mut utoipa_actix_web::service_config::ServiceConfig) {
    cfg.service(create_delivery)
        .service(deliveries_of_milestone)
        .service(deliveries_of_project)
        .service(my_deliveries)
        .service(get_delivery)
        .service(update_delivery)
        .service(review_delivery)
        .service(create)
        .service(list_for_project)
        .service(get_milestone)
        .service(update)
        .service(delete_milestone)
        .service(complete)
        .service(approve)
        .service(reject);
}
