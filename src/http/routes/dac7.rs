//! `/api/dac7/…`: the DAC7 tax-reporting review. Experts read their yearly summary and
//! confirm it; administrators ask experts to review and download the annual report.

use actix_web::{HttpResponse, get, post, web};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use crate::domain::user::Role;
use crate::http::auth::{AdminUser, AuthUser};
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::spooled::Spool;
use crate::state::AppState;
use crate::workflows::dac7::{self as flow, Dac7Summary, NotifyOutcome};

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct YearQuery {
    /// The tax year, e.g. 2026.
    pub year: i32,
}

fn expert(auth: &AuthUser) -> ApiResult<i64> {
    if !auth.has_role(Role::Experto) {
        return Err(ApiError::forbidden("Experts only"));
    }
    Ok(auth.id())
}

/// The caller's DAC7 summary of `year`: fiscal data, income per quarter (gross released,
/// commission withheld, net, paid milestones), review status and whether the platform
/// reports it (30 or more paid milestones, or more than EUR 2,000).
#[utoipa::path(
    tag = "dac7",
    params(YearQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, body = Dac7Summary),
        (status = 400, body = ErrorBody, description = "`FISCAL_DATA_REQUIRED`"),
        (status = 403, body = ErrorBody, description = "Not an expert"),
    )
)]
#[get("/api/dac7/expert/dac7-summary")]
pub async fn summary(
    state: web::Data<AppState>,
    auth: AuthUser,
    query: web::Query<YearQuery>,
) -> ApiResult<HttpResponse> {
    let id = expert(&auth)?;
    Ok(HttpResponse::Ok().json(flow::summary(&state, id, query.year).await?))
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct Dac7ReviewRequest {
    /// The tax year reviewed.
    pub period: i32,
    /// Must be true.
    pub confirmed: bool,
}

/// The expert confirms their data for a year, once.
#[utoipa::path(
    tag = "dac7",
    request_body = Dac7ReviewRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, body = Dac7Summary),
        (status = 400, body = ErrorBody, description = "`CONFIRMATION_REQUIRED` when not confirmed; `FISCAL_DATA_REQUIRED`"),
        (status = 403, body = ErrorBody, description = "Not an expert"),
        (status = 409, body = ErrorBody, description = "`ALREADY_REVIEWED`"),
    )
)]
#[post("/api/dac7/expert/dac7-review")]
pub async fn review(
    state: web::Data<AppState>,
    crate::http::auth::CsrfChecked(auth): crate::http::auth::CsrfChecked,
    body: web::Json<Dac7ReviewRequest>,
) -> ApiResult<HttpResponse> {
    let id = expert(&auth)?;
    let done = flow::confirm(&state, id, body.period, body.confirmed).await?;
    Ok(HttpResponse::Ok().json(done))
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct NotifyRequest {
    pub year: i32,
    /// `YYYY-MM-DD`.
    pub review_deadline: String,
}

/// Asks experts with complete fiscal data and income in `year` to review it (e-mail and
/// notification; status `notified`). Experts who already reviewed are skipped.
#[utoipa::path(
    tag = "dac7",
    request_body = NotifyRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, body = NotifyOutcome),
        (status = 403, body = ErrorBody),
    )
)]
#[post("/api/dac7/admin/notify-experts")]
pub async fn notify_experts(
    state: web::Data<AppState>,
    _admin: AdminUser,
    body: web::Json<NotifyRequest>,
) -> ApiResult<HttpResponse> {
    let outcome = flow::notify_experts(&state, body.year, &body.review_deadline).await?;
    Ok(HttpResponse::Ok().json(outcome))
}

/// The annual DAC7 report: CSV, one line per reportable seller of `year`, amounts per
/// quarter in euros. The report is written whole before it is answered, so it carries its
/// `Content-Length`, and a report the database cannot finish in time is answered 503
/// `QUERY_TIMEOUT` instead of a cut download.
#[utoipa::path(
    tag = "dac7",
    params(YearQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "CSV, one line per reportable seller", content_type = "text/csv"),
        (status = 403, body = ErrorBody),
        (status = 503, description = "`QUERY_TIMEOUT`: the database did not finish the report within its statement timeout", body = ErrorBody),
    )
)]
#[get("/api/dac7/admin/report")]
pub async fn report(
    state: web::Data<AppState>,
    _admin: AdminUser,
    query: web::Query<YearQuery>,
) -> ApiResult<HttpResponse> {
    let mut csv = Spool::new().await.map_err(ApiError::internal)?;
    flow::write_report_csv(&state, query.year, csv.writer()).await?;
    let mut response = HttpResponse::Ok();
    response
        .content_type("text/csv; charset=utf-8")
        .insert_header((
            "Content-Disposition",
            format!("attachment; filename=\"dac7-{}.csv\"", query.year),
        ));
    csv.answer(response).await.map_err(ApiError::internal)
}

/// Mounts the DAC7 tax-reporting review.
pub fn mount(cfg: &mut utoipa_actix_web::service_config::ServiceConfig) {
    cfg.service(summary)
        .service(review)
        .service(notify_experts)
        .service(report);
}
