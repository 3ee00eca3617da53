//! `POST /api/v1/testing/reset-e2e`: the end-to-end reset for front-end test suites.
//!
//! It answers 404 unless `ENABLE_TEST_RESET_ENDPOINT=true`, which the service refuses under
//! `APP_ENV=production`.

use actix_web::{HttpRequest, HttpResponse, post, web};

use crate::demo::reset::{self, ResetReport};
use crate::domain::token::constant_time_eq;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::state::AppState;

pub const TOKEN_HEADER: &str = "X-Test-Reset-Token";

/// Empties every table, the uploads and this instance's cache keys, then loads the demo
/// data; answers with the demo accounts. Header `X-Test-Reset-Token` must equal
/// `TEST_RESET_TOKEN` (compared in constant time).
#[utoipa::path(
    tag = "testing",
    params(("X-Test-Reset-Token" = String, Header, description = "The configured TEST_RESET_TOKEN")),
    responses(
        (status = 200, body = ResetReport),
        (status = 403, body = ErrorBody, description = "Missing or wrong token"),
        (status = 404, body = ErrorBody, description = "The endpoint is not enabled"),
    )
)]
#[post("/api/v1/testing/reset-e2e")]
pub async fn reset_e2e(state: web::Data<AppState>, req: HttpRequest) -> ApiResult<HttpResponse> {
    let settings = &state.settings;
    let Some(expected) = settings
        .test_reset_token
        .as_ref()
        .filter(|_| settings.enable_test_reset_endpoint)
    else {
        return Err(ApiError::not_found(
            "The end-to-end reset is not enabled on this instance",
        ));
    };
    let given = req
        .headers()
        .get(TOKEN_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if !constant_time_eq(given.as_bytes(), expected.expose().as_bytes()) {
        return Err(ApiError::forbidden("The reset token is missing or wrong"));
    }
    Ok(HttpResponse::Ok().json(reset::reset_e2e(&state).await?))
}

/// Mounts the end-to-end reset (404 unless enabled).
pub fn mount(cfg: &mut utoipa_actix_web::service_config::ServiceConfig) {
    cfg.service(reset_e2e);
}
