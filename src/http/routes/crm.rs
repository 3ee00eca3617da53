//! CRM integration (administrators only): `/api/integrations/crm/*`, the per-user CRM admin
//! routes, and the inbound CRM webhook `POST /api/webhooks/crm` (signed, no session).

use actix_web::{HttpRequest, HttpResponse, get, post, web};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use crate::domain::crm as rules;
use crate::http::auth::AdminUser;
use crate::http::error::{ApiError, ApiResult, ErrorBody, FieldError};
use crate::http::pagination::{PageQuery, Paginated};
use crate::integrations::crm::webhook::SIGNATURE_HEADER;
use crate::state::AppState;
use crate::store::crm::{self as store, LogFilter, OpportunityRecord, SyncEntry};
use crate::workflows::crm::admin::TagReport;
use crate::workflows::crm::health::HealthReport;
use crate::workflows::crm::inbound::Refused;
use crate::workflows::crm::ops::Lookup;
use crate::workflows::crm::{CrmService, Op};

/// A sync-log entry.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SyncLogView {
    pub id: i64,
    pub user_id: Option<i64>,
    pub crm_contact_id: Option<String>,
    /// One of the eight sync-log event types.
    pub event_type: String,
    /// `success`, `failed` or `skipped`.
    #[schema(value_type = String)]
    pub status: rules::SyncStatus,
    /// What was asked (no secrets).
    #[schema(value_type = Object)]
    pub request: Value,
    pub response_status: Option<i64>,
    #[schema(value_type = Option<Object>)]
    pub response: Option<Value>,
    pub error: Option<String>,
    pub retry_count: i64,
    /// Set when the retry scheduler gave up (the status stays `failed`).
    pub exhausted_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<SyncEntry> for SyncLogView {
    fn from(e: SyncEntry) -> Self {
        Self {
            id: e.id,
            user_id: e.user_id,
            crm_contact_id: e.crm_contact_id,
            event_type: e.event_type,
            status: e.status,
            request: e.payload.0,
            response_status: e.response_status,
            response: e.response.map(|r| r.0),
            error: e.error,
            retry_count: e.retry_count,
            exhausted_at: e.exhausted_at,
            created_at: e.created_at,
            updated_at: e.updated_at,
        }
    }
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct OpportunityView {
    pub id: String,
    pub contact_id: Option<String>,
    pub user_id: Option<i64>,
    pub project_id: Option<i64>,
    pub name: Option<String>,
    /// `open`, `won`, `lost`, `abandoned`.
    pub status: String,
    /// Decimal amount (two decimals).
    #[schema(value_type = Option<f64>)]
    pub monetary_value: Option<Value>,
    pub pipeline_id: Option<String>,
    pub pipeline_stage_id: Option<String>,
    pub updated_at: DateTime<Utc>,
}

impl From<OpportunityRecord> for OpportunityView {
    fn from(o: OpportunityRecord) -> Self {
        Self {
            id: o.id,
            contact_id: o.contact_id,
            user_id: o.user_id,
            project_id: o.project_id,
            name: o.name,
            status: o.status,
            monetary_value: o.monetary_value_minor.map(rules::minor_to_number),
            pipeline_id: o.pipeline_id,
            pipeline_stage_id: o.pipeline_stage_id,
            updated_at: o.updated_at,
        }
    }
}

fn crm(state: &AppState) -> CrmService {
    CrmService::of(state)
}

// ------------------------------------------------------------------------------------------
// /api/integrations/crm/*
// ------------------------------------------------------------------------------------------

#[derive(Debug, Deserialize, ToSchema)]
pub struct ContactSyncRequest {
    pub user_id: i64,
}

/// Synchronises a user's contact now: minimal without a profile, enriched with one.
#[utoipa::path(
    tag = "crm",
    request_body = ContactSyncRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, body = SyncLogView, description = "The sync-log entry (its status says whether the CRM took it)"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody, description = "Unknown user"),
        (status = 422, body = ErrorBody),
        (status = 503, body = ErrorBody, description = "The CRM is off"),
    )
)]
#[post("/api/integrations/crm/contact")]
pub async fn sync_contact(
    state: web::Data<AppState>,
    _admin: AdminUser,
    body: web::Json<ContactSyncRequest>,
) -> ApiResult<HttpResponse> {
    let entry = crm(&state).sync_contact(body.user_id).await?;
    Ok(HttpResponse::Ok().json(SyncLogView::from(entry)))
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct OpportunityRequest {
    pub project_id: i64,
    /// Defaults to the project's title.
    pub name: Option<String>,
    /// `open` (default), `won`, `lost`, `abandoned`.
    pub status: Option<String>,
}

/// Creates the opportunity of a project on its company's contact, `monetaryValue` from the
/// project's budget, in `CRM_PIPELINE_ID`.
#[utoipa::path(
    tag = "crm",
    request_body = OpportunityRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, body = SyncLogView, description = "The sync-log entry; `response.opportunity_id` on success"),
        (status = 400, body = ErrorBody, description = "No company, or no pipeline configured"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody, description = "Unknown project"),
        (status = 422, body = ErrorBody),
        (status = 503, body = ErrorBody, description = "The CRM is off"),
    )
)]
#[post("/api/integrations/crm/opportunity")]
pub async fn create_opportunity(
    state: web::Data<AppState>,
    _admin: AdminUser,
    body: web::Json<OpportunityRequest>,
) -> ApiResult<HttpResponse> {
    let body = body.into_inner();
    let status = match body.status.as_deref() {
        None => rules::OpportunityStatus::Open,
        Some(text) => rules::OpportunityStatus::parse(text)
            .ok_or_else(|| ApiError::invalid_field("status", "open, won, lost or abandoned"))?,
    };
    let entry = crm(&state)
        .opportunity_for_project(body.project_id, body.name, status)
        .await?;
    Ok(HttpResponse::Ok().json(SyncLogView::from(entry)))
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct TagRequest {
    pub user_id: i64,
    pub tags: Vec<String>,
}

/// Adds tags to a user's contact.
#[utoipa::path(
    tag = "crm",
    request_body = TagRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, body = SyncLogView),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody),
        (status = 503, body = ErrorBody, description = "The CRM is off"),
    )
)]
#[post("/api/integrations/crm/tag")]
pub async fn add_tags(
    state: web::Data<AppState>,
    _admin: AdminUser,
    body: web::Json<TagRequest>,
) -> ApiResult<HttpResponse> {
    let tags: Vec<String> = body.tags.iter().map(|t| t.trim().to_lowercase()).collect();
    if tags.is_empty() || tags.len() > 20 || tags.iter().any(|t| t.is_empty() || t.len() > 100) {
        return Err(ApiError::invalid_field(
            "tags",
            "1 to 20 tags of 1 to 100 characters",
        ));
    }
    crm(&state).facts(body.user_id).await?;
    let entry = crm(&state)
        .run_now(Some(body.user_id), &Op::TagAdd { tags })
        .await?;
    Ok(HttpResponse::Ok().json(SyncLogView::from(entry)))
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct StatusUser {
    pub id: i64,
    pub email: String,
    pub username: String,
    pub roles: Vec<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ContactStatusView {
    pub contact_id: String,
    /// The contact as the CRM has it now; null when it could not be read.
    #[schema(value_type = Option<Object>)]
    pub contact: Option<Value>,
    pub contact_error: Option<String>,
    pub user: Option<StatusUser>,
    pub tags: Vec<String>,
    pub opportunities: Vec<OpportunityView>,
    pub last_syncs: Vec<SyncLogView>,
}

/// A contact: the CRM's record, the linked user, tags, opportunities and the last syncs.
#[utoipa::path(
    tag = "crm",
    params(("contact_id" = String, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = ContactStatusView),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody, description = "Unknown to the CRM and to the service"),
        (status = 503, body = ErrorBody, description = "The CRM is off"),
    )
)]
#[get("/api/integrations/crm/status/{contact_id}")]
pub async fn contact_status(
    state: web::Data<AppState>,
    _admin: AdminUser,
    contact_id: web::Path<String>,
) -> ApiResult<HttpResponse> {
    let s = crm(&state).status(&contact_id).await?;
    Ok(HttpResponse::Ok().json(ContactStatusView {
        contact_id: s.contact_id,
        contact: s
            .contact
            .map(|c| serde_json::to_value(c).unwrap_or(Value::Null)),
        contact_error: s.contact_error,
        user: s.user.map(|u| StatusUser {
            id: u.user_id,
            email: u.email,
            username: u.username,
            roles: u.roles,
        }),
        tags: s.tags,
        opportunities: s.opportunities.into_iter().map(Into::into).collect(),
        last_syncs: s.last_syncs.into_iter().map(Into::into).collect(),
    }))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SyncLogQuery {
    pub page: Option<i64>,
    pub size: Option<i64>,
    pub user_id: Option<i64>,
    /// One of the eight event types.
    pub event_type: Option<String>,
    /// `success`, `failed` or `skipped`.
    pub status: Option<String>,
}

/// The sync log, newest first.
#[utoipa::path(
    tag = "crm",
    params(SyncLogQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, body = Paginated<SyncLogView>),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 422, body = ErrorBody),
    )
)]
#[get("/api/integrations/crm/sync-logs")]
pub async fn sync_logs(
    state: web::Data<AppState>,
    _admin: AdminUser,
    query: web::Query<SyncLogQuery>,
) -> ApiResult<HttpResponse> {
    let q = query.into_inner();
    let page = PageQuery {
        page: q.page,
        size: q.size,
    }
    .validate()?;
    let mut errors = Vec::new();
    if q.event_type
        .as_deref()
        .is_some_and(|t| !rules::EVENT_TYPES.contains(&t))
    {
        errors.push(FieldError::new("event_type", rules::EVENT_TYPES.join(", ")));
    }
    let status = q.status.as_deref().map(rules::SyncStatus::parse);
    if status == Some(None) {
        errors.push(FieldError::new("status", "success, failed or skipped"));
    }
    if !errors.is_empty() {
        return Err(ApiError::validation(errors));
    }
    let filter = LogFilter {
        user_id: q.user_id,
        event_type: q.event_type,
        status: status.flatten(),
        contact_id: None,
    };
    let mut conn = state.db.conn().await?;
    let (items, total) = store::list_logs(conn.exec(), &filter, page.page, page.size).await?;
    let items: Vec<SyncLogView> = items.into_iter().map(Into::into).collect();
    Ok(HttpResponse::Ok().json(Paginated::new(items, total, page)))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct HealthQuery {
    /// `quick` (default: checks 1–3 and 8) or `full` (all 8).
    pub detail_level: Option<String>,
}

/// The CRM health check.
#[utoipa::path(
    tag = "crm",
    params(HealthQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, body = HealthReport),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 422, body = ErrorBody),
    )
)]
#[get("/api/integrations/crm/health-check")]
pub async fn health_check(
    state: web::Data<AppState>,
    _admin: AdminUser,
    query: web::Query<HealthQuery>,
) -> ApiResult<HttpResponse> {
    let full = match query.detail_level.as_deref() {
        None | Some("quick") => false,
        Some("full") => true,
        Some(_) => return Err(ApiError::invalid_field("detail_level", "quick or full")),
    };
    Ok(HttpResponse::Ok().json(crm(&state).health(full).await?))
}

// ------------------------------------------------------------------------------------------
// /api/admin/users/{user_id}/crm-*
// ------------------------------------------------------------------------------------------

/// Expected tags of the user against the contact's actual tags, read live from the CRM.
#[utoipa::path(
    tag = "admin",
    params(("user_id" = i64, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = TagReport),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 503, body = ErrorBody, description = "The CRM is off or did not answer"),
    )
)]
#[get("/api/admin/users/{user_id}/crm-tags")]
pub async fn crm_tags(
    state: web::Data<AppState>,
    _admin: AdminUser,
    user_id: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    Ok(HttpResponse::Ok().json(crm(&state).tag_report(user_id.into_inner()).await?))
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DiagnosisView {
    pub user_id: i64,
    /// Whether the user's `crm_id` is set.
    pub linked: bool,
    pub contact_id: Option<String>,
    /// `crm_id`, then the sync log, then a duplicate search by e-mail.
    #[schema(value_type = Vec<Object>)]
    pub lookups: Vec<Value>,
    #[schema(value_type = Option<Object>)]
    pub contact: Option<Value>,
    pub last_syncs: Vec<SyncLogView>,
    pub problems: Vec<String>,
}

/// How the user's contact is found and what is wrong with its synchronisation.
#[utoipa::path(
    tag = "admin",
    params(("user_id" = i64, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = DiagnosisView),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
    )
)]
#[get("/api/admin/users/{user_id}/crm-diagnosis")]
pub async fn crm_diagnosis(
    state: web::Data<AppState>,
    _admin: AdminUser,
    user_id: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let d = crm(&state).diagnose(user_id.into_inner()).await?;
    Ok(HttpResponse::Ok().json(DiagnosisView {
        user_id: d.user_id,
        linked: d.linked,
        contact_id: d.contact_id,
        lookups: d
            .lookups
            .iter()
            .map(|l: &Lookup| serde_json::to_value(l).unwrap_or(Value::Null))
            .collect(),
        contact: d
            .contact
            .map(|c| serde_json::to_value(c).unwrap_or(Value::Null)),
        last_syncs: d.last_syncs.into_iter().map(Into::into).collect(),
        problems: d.problems,
    }))
}

/// Forces the contact's tags to the expected ones; answers the tag report after.
#[utoipa::path(
    tag = "admin",
    params(("user_id" = i64, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = TagReport),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody, description = "Unknown user, or no contact yet"),
        (status = 503, body = ErrorBody, description = "The CRM is off or did not answer"),
    )
)]
#[post("/api/admin/users/{user_id}/crm-sync-tags")]
pub async fn crm_sync_tags(
    state: web::Data<AppState>,
    _admin: AdminUser,
    user_id: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    Ok(HttpResponse::Ok().json(crm(&state).sync_tags(user_id.into_inner()).await?))
}

// ------------------------------------------------------------------------------------------
// Inbound webhook
// ------------------------------------------------------------------------------------------

/// Inbound CRM events. `X-CRM-Signature` (hex HMAC-SHA256 of the raw body with
/// `CRM_WEBHOOK_SECRET`, `sha256=` prefix accepted) is checked first: missing or wrong → 401
/// and nothing stored. A `timestamp` more than 5 minutes from now → 400. A new event is stored
/// by its `webhookId` and answered at once, then applied; a repeated one is answered 200.
#[utoipa::path(
    tag = "crm",
    request_body(content = Object, description = "LeadConnector's flat event JSON"),
    responses(
        (status = 200, description = "Stored (or known already)"),
        (status = 400, body = ErrorBody, description = "INVALID_EVENT or STALE_EVENT"),
        (status = 401, body = ErrorBody, description = "INVALID_SIGNATURE"),
    )
)]
#[post("/api/webhooks/crm")]
pub async fn webhook(
    state: web::Data<AppState>,
    req: HttpRequest,
    crate::http::raw_body::SignedBody(body): crate::http::raw_body::SignedBody,
) -> ApiResult<HttpResponse> {
    let signature = req
        .headers()
        .get(SIGNATURE_HEADER)
        .and_then(|v| v.to_str().ok());
    match crm(&state).receive_webhook(signature, &body).await? {
        Ok(Some(received)) => {
            let crm = crm(&state);
            actix_web::rt::spawn(async move {
                if let Err(error) = crm.apply_webhook(&received).await {
                    tracing::warn!(webhook_id = %received.webhook_id, %error, "CRM webhook not applied");
                }
            });
            Ok(HttpResponse::Ok().json(serde_json::json!({"received": true})))
        }
        Ok(None) => {
            Ok(HttpResponse::Ok().json(serde_json::json!({"received": true, "duplicate": true})))
        }
        Err(Refused::Signature) => Err(ApiError::unauthorized(
            "INVALID_SIGNATURE",
            "The webhook is not validly signed",
        )),
        Err(Refused::Stale) => Err(ApiError::bad_request(
            "STALE_EVENT",
            "The event's timestamp is more than 5 minutes from now",
        )),
        Err(refused @ Refused::Invalid(_)) => {
            Err(ApiError::bad_request("INVALID_EVENT", refused.to_string()))
        }
    }
}

/// Mounts the CRM integration: administrators, plus the signed inbound webhook.
pub fn mount(cfg: &mut utoipa_actix_web::service_config::ServiceConfig) {
    cfg.service(sync_contact)
        .service(create_opportunity)
        .service(add_tags)
        .service(contact_status)
        .service(sync_logs)
        .service(health_check)
        .service(crm_tags)
        .service(crm_diagnosis)
        .service(crm_sync_tags)
        .service(webhook);
}
