//! Disputes: raised on a project by its company or expert (`/api/projects/{id}/dispute`),
//! mediated and resolved by administrators (`/api/admin/disputes/…`).

use crate::domain::dispute::DisputeStatus;
use crate::domain::search::SearchTerm;
use crate::domain::text::{DecisionText, TextError};
use actix_web::{HttpResponse, get, post, put, web};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::http::auth::{AdminUser, AuthUser, CsrfChecked};
use crate::http::error::{ApiError, ApiResult, ErrorBody, FieldError};
use crate::http::pagination::{PageQuery, Paginated};
use crate::http::routes::escrow_views::PaymentView;
use crate::http::routes::projects::caller;
use crate::state::AppState;
use crate::store::disputes::{self, Dispute, DisputeFilter, DisputeOrder};
use crate::workflows::disputes::{self as flow, Complaint, ResolutionAction};

/// Text limits of a complaint (characters).
const MAX_TITLE: usize = 200;
const MAX_TEXT: usize = 5_000;
const MAX_LABEL: usize = 50;

/// A dispute as the project's company and expert see it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DisputeView {
    pub id: i64,
    pub project_id: i64,
    pub payment_id: Option<i64>,
    pub raised_by: Option<i64>,
    /// `open`, `in_review`, `resolved`, `closed`.
    #[schema(value_type = String)]
    pub status: DisputeStatus,
    pub title: Option<String>,
    pub reason: String,
    pub description: Option<String>,
    pub dispute_type: Option<String>,
    pub priority: Option<String>,
    pub contact_preference: Option<String>,
    pub evidence: Option<String>,
    pub requested_resolution: Option<String>,
    pub resolution: Option<String>,
    /// `resolve_favor_expert`, `release_to_expert`, `resolve_favor_company`, `refund_company`.
    pub resolution_action: Option<String>,
    pub resolved_by: Option<i64>,
    /// Set when the card holder's bank opened it (a chargeback).
    pub processor_dispute_id: Option<String>,
    pub created_at: DateTime<Utc>,
    pub resolved_at: Option<DateTime<Utc>>,
    /// Raised by the expert and still `open`: the company's reply (a chat message) is due by
    /// then, or the dispute is escalated (`DISPUTE_RESPONSE_DAYS`).
    pub response_due_at: Option<DateTime<Utc>>,
    /// When it was escalated to the administrators for priority mediation.
    pub escalated_at: Option<DateTime<Utc>>,
}

impl From<Dispute> for DisputeView {
    fn from(d: Dispute) -> Self {
        Self {
            id: d.id,
            project_id: d.project_id,
            payment_id: d.payment_id,
            raised_by: d.raised_by,
            status: d.status,
            title: d.title,
            reason: d.reason,
            description: d.description,
            dispute_type: d.dispute_type,
            priority: d.priority,
            contact_preference: d.contact_preference,
            evidence: d.evidence,
            requested_resolution: d.requested_resolution,
            resolution: d.resolution,
            resolution_action: d.resolution_action,
            resolved_by: d.resolved_by,
            processor_dispute_id: d.processor_dispute_id,
            created_at: d.created_at,
            resolved_at: d.resolved_at,
            response_due_at: d.response_due_at,
            escalated_at: d.escalated_at,
        }
    }
}

/// A dispute as administrators see it: the parties' view, the mediation and the processor's
/// side of a chargeback.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AdminDisputeView {
    #[serde(flatten)]
    pub dispute: DisputeView,
    pub mediation_notes: Option<String>,
    pub mediated_by: Option<i64>,
    pub mediated_at: Option<DateTime<Utc>>,
    /// The processor's status of the chargeback (`needs_response`, `under_review`, `won`,
    /// `lost`, …).
    pub processor_dispute_status: Option<String>,
    /// What the processor asks for as evidence (JSON text).
    pub evidence_details: Option<String>,
    pub updated_at: DateTime<Utc>,
}

impl From<Dispute> for AdminDisputeView {
    fn from(d: Dispute) -> Self {
        Self {
            mediation_notes: d.mediation_notes.clone(),
            mediated_by: d.mediated_by,
            mediated_at: d.mediated_at,
            processor_dispute_status: d.processor_dispute_status.clone(),
            evidence_details: d.evidence_details.clone(),
            updated_at: d.updated_at,
            dispute: d.into(),
        }
    }
}

#[derive(Debug, Deserialize, ToSchema, Default)]
pub struct RaiseRequest {
    pub title: Option<String>,
    /// Required unless `description` is given.
    pub reason: Option<String>,
    /// Required unless `reason` is given.
    pub description: Option<String>,
    pub dispute_type: Option<String>,
    pub priority: Option<String>,
    pub evidence: Option<String>,
    pub requested_resolution: Option<String>,
    pub contact_preference: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RaisedResponse {
    pub message: String,
    pub dispute_id: i64,
}

/// Trims a text field and checks its length; blank is absent.
fn text(
    errors: &mut Vec<FieldError>,
    field: &str,
    value: Option<String>,
    max: usize,
) -> Option<String> {
    let value = value
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())?;
    if value.chars().count() > max {
        errors.push(FieldError::new(field, format!("At most {max} characters")));
    }
    Some(value)
}

impl RaiseRequest {
    fn validate(self) -> ApiResult<Complaint> {
        let mut errors = Vec::new();
        let c = Complaint {
            title: text(&mut errors, "title", self.title, MAX_TITLE),
            reason: text(&mut errors, "reason", self.reason, MAX_TEXT),
            description: text(&mut errors, "description", self.description, MAX_TEXT),
            dispute_type: text(&mut errors, "dispute_type", self.dispute_type, MAX_LABEL),
            priority: text(&mut errors, "priority", self.priority, MAX_LABEL),
            evidence: text(&mut errors, "evidence", self.evidence, MAX_TEXT),
            requested_resolution: text(
                &mut errors,
                "requested_resolution",
                self.requested_resolution,
                MAX_TEXT,
            ),
            contact_preference: text(
                &mut errors,
                "contact_preference",
                self.contact_preference,
                MAX_LABEL,
            ),
        };
        if c.reason.is_none() && c.description.is_none() {
            errors.push(FieldError::new(
                "reason",
                "Give a reason or a description of the dispute",
            ));
        }
        if errors.is_empty() {
            Ok(c)
        } else {
            Err(ApiError::validation(errors))
        }
    }
}

/// The project's company or expert raises a dispute: the project and its pending and held
/// payments become `disputed`; administrators and the counterpart are told (with an e-mail).
#[utoipa::path(
    tag = "disputes",
    params(("project_id" = i64, Path)),
    request_body = RaiseRequest,
    security(("bearer" = [])),
    responses(
        (status = 201, body = RaisedResponse),
        (status = 403, body = ErrorBody, description = "Not the project's company or expert"),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "DISPUTE_ACTIVE or DISPUTE_NOT_ALLOWED (project completed, disputed or cancelled)"),
        (status = 422, body = ErrorBody, description = "Neither reason nor description, or a field too long"),
    )
)]
#[post("/api/projects/{project_id}/dispute")]
pub async fn raise(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    path: web::Path<i64>,
    body: web::Json<RaiseRequest>,
) -> ApiResult<HttpResponse> {
    let complaint = body.into_inner().validate()?;
    let id = flow::raise(&state, &caller(&auth), path.into_inner(), complaint).await?;
    Ok(HttpResponse::Created().json(RaisedResponse {
        message: "Dispute opened; an administrator will review it".into(),
        dispute_id: id,
    }))
}

/// The project's most recent dispute (its company, its expert and administrators).
#[utoipa::path(
    tag = "disputes",
    params(("project_id" = i64, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = DisputeView),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody, description = "No such project, or no dispute on it"),
    )
)]
#[get("/api/projects/{project_id}/dispute")]
pub async fn latest(
    state: web::Data<AppState>,
    auth: AuthUser,
    path: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let d = flow::latest(&state, &caller(&auth), path.into_inner()).await?;
    Ok(HttpResponse::Ok().json(DisputeView::from(d)))
}

// ---------------------------------------------------------------------------------------
// Administration
// ---------------------------------------------------------------------------------------

#[derive(Debug, Deserialize, IntoParams)]
pub struct AdminDisputeQuery {
    pub page: Option<i64>,
    pub size: Option<i64>,
    /// `open`, `in_review`, `resolved` or `closed`.
    pub status: Option<String>,
    /// `created_at` (default) or `status`.
    pub sort_by: Option<String>,
    /// `desc` (default) or `asc`.
    pub sort_order: Option<String>,
    /// Words of the title, reason, description or project title.
    pub search: Option<SearchTerm>,
}

impl AdminDisputeQuery {
    fn order(&self) -> Result<DisputeOrder, Vec<FieldError>> {
        let mut errors = Vec::new();
        let by = self.sort_by.as_deref().unwrap_or("created_at");
        let asc = match self.sort_order.as_deref().unwrap_or("desc") {
            "asc" => true,
            "desc" => false,
            _ => {
                errors.push(FieldError::new("sort_order", "asc or desc"));
                false
            }
        };
        let order = match (by, asc) {
            ("created_at", false) => DisputeOrder::CreatedDesc,
            ("created_at", true) => DisputeOrder::CreatedAsc,
            ("status", false) => DisputeOrder::StatusDesc,
            ("status", true) => DisputeOrder::StatusAsc,
            _ => {
                errors.push(FieldError::new("sort_by", "created_at or status"));
                DisputeOrder::default()
            }
        };
        if errors.is_empty() {
            Ok(order)
        } else {
            Err(errors)
        }
    }
}

/// Every dispute, newest first unless sorted otherwise.
#[utoipa::path(
    tag = "admin",
    params(AdminDisputeQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, body = Paginated<AdminDisputeView>),
        (status = 403, body = ErrorBody),
        (status = 422, body = ErrorBody),
    )
)]
#[get("/api/admin/disputes")]
pub async fn admin_list(
    state: web::Data<AppState>,
    _admin: AdminUser,
    query: web::Query<AdminDisputeQuery>,
) -> ApiResult<HttpResponse> {
    let q = query.into_inner();
    let page = PageQuery {
        page: q.page,
        size: q.size,
    }
    .validate()?;
    let mut errors = Vec::new();
    let order = q.order().unwrap_or_else(|e| {
        errors.extend(e);
        DisputeOrder::default()
    });
    let status = q.status.as_deref().map(DisputeStatus::parse);
    if status == Some(None) {
        errors.push(FieldError::new(
            "status",
            "open, in_review, resolved or closed",
        ));
    }
    if !errors.is_empty() {
        return Err(ApiError::validation(errors));
    }
    let filter = DisputeFilter {
        status: status.flatten(),
        search: q.search.as_ref().map(SearchTerm::as_str),
        order,
    };
    let mut conn = state.db.conn().await?;
    let (items, total) = disputes::list(conn.exec(), &filter, page.page, page.size).await?;
    Ok(HttpResponse::Ok().json(Paginated::new(items, total, page).map(AdminDisputeView::from)))
}

#[utoipa::path(
    tag = "admin",
    params(("dispute_id" = i64, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = AdminDisputeView),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
    )
)]
#[get("/api/admin/disputes/{dispute_id}")]
pub async fn admin_get(
    state: web::Data<AppState>,
    _admin: AdminUser,
    path: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let mut conn = state.db.conn().await?;
    let d = disputes::find(conn.exec(), path.into_inner())
        .await?
        .ok_or_else(|| ApiError::not_found("No such dispute"))?;
    Ok(HttpResponse::Ok().json(AdminDisputeView::from(d)))
}

/// A decision text (10 to 2,000 characters, trimmed); a refusal is noted in `errors`, a wrong
/// length in the words these fields have always used.
fn decision_text(errors: &mut Vec<FieldError>, field: &str, value: String) -> Option<DecisionText> {
    DecisionText::parse(value)
        .map_err(|refusal| {
            let message = match refusal {
                TextError::Length { min, max } => format!("From {min} to {max} characters"),
                refusal => refusal.to_string(),
            };
            errors.push(FieldError::new(field, message));
        })
        .ok()
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct MediateRequest {
    /// 10 to 2,000 characters.
    #[schema(min_length = 10, max_length = 2000)]
    pub notes: String,
}

/// An administrator takes up an `open` dispute (`in_review`); the parties are told.
#[utoipa::path(
    tag = "admin",
    params(("dispute_id" = i64, Path)),
    request_body = MediateRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, body = AdminDisputeView),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "DISPUTE_NOT_OPEN"),
    )
)]
#[put("/api/admin/disputes/{dispute_id}/mediate")]
pub async fn mediate(
    state: web::Data<AppState>,
    AdminUser(admin): AdminUser,
    path: web::Path<i64>,
    body: web::Json<MediateRequest>,
) -> ApiResult<HttpResponse> {
    let mut errors = Vec::new();
    let notes = decision_text(&mut errors, "notes", body.into_inner().notes)
        .ok_or_else(|| ApiError::validation(errors))?;
    let d = flow::mediate(&state, admin.id(), path.into_inner(), notes).await?;
    Ok(HttpResponse::Ok().json(AdminDisputeView::from(d)))
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct ResolveRequest {
    /// 10 to 2,000 characters.
    #[schema(min_length = 10, max_length = 2000)]
    pub resolution: String,
    /// `resolve_favor_expert`, `release_to_expert`, `resolve_favor_company`, `refund_company`.
    pub resolution_action: String,
}

/// The decided dispute and the payments the decision moved.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ResolvedResponse {
    #[serde(flatten)]
    pub dispute: AdminDisputeView,
    pub payments: Vec<PaymentView>,
}

/// Decides an `open` or `in_review` dispute: the disputed money goes to the expert (captured
/// and transferred) or back to the company (transfer reversed first, then refunded); the
/// project returns to `in_progress`; both parties are told.
#[utoipa::path(
    tag = "admin",
    params(("dispute_id" = i64, Path)),
    request_body = ResolveRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, body = ResolvedResponse),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "DISPUTE_NOT_ACTIVE, CHARGEBACK_OPEN, CHARGEBACK_CLOSING, REVERSAL_FAILED, PROCESSOR_REFUSED"),
        (status = 503, body = ErrorBody, description = "The processor is unreachable; the dispute stays open"),
    )
)]
#[put("/api/admin/disputes/{dispute_id}/resolve")]
pub async fn resolve(
    state: web::Data<AppState>,
    AdminUser(admin): AdminUser,
    path: web::Path<i64>,
    body: web::Json<ResolveRequest>,
) -> ApiResult<HttpResponse> {
    let body = body.into_inner();
    let mut errors = Vec::new();
    let resolution = decision_text(&mut errors, "resolution", body.resolution);
    let action = ResolutionAction::parse(&body.resolution_action);
    if action.is_none() {
        errors.push(FieldError::new(
            "resolution_action",
            "resolve_favor_expert, release_to_expert, resolve_favor_company or refund_company",
        ));
    }
    let (Some(resolution), Some(action)) = (resolution, action) else {
        return Err(ApiError::validation(errors));
    };
    let r = flow::resolve(&state, admin.id(), path.into_inner(), resolution, action).await?;
    Ok(HttpResponse::Ok().json(ResolvedResponse {
        dispute: r.dispute.into(),
        payments: r.payments.into_iter().map(PaymentView::from).collect(),
    }))
}

/// Mounts the disputes.
pub fn mount(cfg: &mut utoipa_actix_web::service_config::ServiceConfig) {
    cfg.service(raise)
        .service(latest)
        .service(admin_list)
        .service(admin_get)
        .service(mediate)
        .service(resolve);
}
