//! `GET /api/admin/payments/audit`: every payment, transfer and refund recorded in a window,
//! held against the processor's own objects.

use actix_web::{HttpResponse, get, web};
use chrono::{DateTime, Duration, Utc};
use serde::Deserialize;
use utoipa::IntoParams;

use crate::http::auth::AdminUser;
use crate::http::error::{ApiResult, ErrorBody};
use crate::state::AppState;
use crate::workflows::money_audit::{self as flow, AuditReport};

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    /// Start of the window (default: 7 days ago).
    pub from: Option<DateTime<Utc>>,
    /// End of the window, exclusive (default: now).
    pub to: Option<DateTime<Utc>>,
}

/// Lists each mismatch between our payments and the processor (amount, status, an object
/// missing on either side) with the invariant it breaks: the intent's amount is the
/// payment's, the status follows the intent's, captured = transferred + commission, a
/// refund reverses the transfer. Reports only; `POST /api/admin/payments/reconcile`
/// corrects stale records.
#[utoipa::path(
    tag = "admin",
    params(AuditQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, body = AuditReport),
        (status = 403, body = ErrorBody),
        (status = 503, body = ErrorBody, description = "The processor could not be asked; try again"),
    )
)]
#[get("/api/admin/payments/audit")]
pub async fn audit(
    state: web::Data<AppState>,
    _admin: AdminUser,
    query: web::Query<AuditQuery>,
) -> ApiResult<HttpResponse> {
    let to = query.to.unwrap_or_else(|| state.clock.now());
    let from = query.from.unwrap_or(to - Duration::days(7));
    Ok(HttpResponse::Ok().json(flow::audit(&state, from, to).await?))
}

/// Mounts the money audit.
pub fn mount(cfg: &mut utoipa_actix_web::service_config::ServiceConfig) {
    cfg.service(audit);
}
