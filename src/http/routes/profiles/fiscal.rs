//! Fiscal data of a profile: `PUT /api/profiles/{id}/fiscal-data`, `GET /api/profiles/me/fiscal-status`.

use actix_web::{HttpResponse, get, put, web};
use serde::Serialize;
use utoipa::ToSchema;

use crate::domain::profile::{self as rules};
use crate::http::auth::{AuthUser, CsrfChecked};
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::state::AppState;
use crate::store::profiles::{self};

use super::*;
use crate::workflows::profiles::{FiscalInput, fiscal_fields, role_of};

// ---------------------------------------------------------------------------------------
// Fiscal data
// ---------------------------------------------------------------------------------------

/// Updates the fiscal data of the caller's own profile (CSRF protected) and recomputes
/// `fiscal_data_complete`.
#[utoipa::path(
    tag = "profiles",
    params(("id" = i64, Path)),
    request_body = FiscalInput,
    security(("bearer" = [])),
    responses(
        (status = 200, body = ProfileView),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 422, body = ErrorBody, description = "fiscal_type or irpf_rate outside the allowed values"),
    )
)]
#[put("/api/profiles/{id}/fiscal-data")]
pub async fn update_fiscal(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    id: web::Path<i64>,
    body: web::Json<FiscalInput>,
) -> ApiResult<HttpResponse> {
    let profile = flow::update_fiscal(&state, auth.id(), id.into_inner(), &body).await?;
    let mut conn = state.db.conn().await?;
    let view = owner_of(conn.exec(), profile).await?;
    Ok(HttpResponse::Ok().json(view))
}

#[derive(Serialize, ToSchema)]
pub struct FiscalStatus {
    pub profile_id: i64,
    pub profile_type: String,
    pub fiscal_data_complete: bool,
    /// Required fields still missing.
    pub missing_fields: Vec<String>,
}

/// Fiscal completeness of the caller's active-role profile.
#[utoipa::path(
    tag = "profiles",
    security(("bearer" = [])),
    responses((status = 200, body = FiscalStatus), (status = 404, body = ErrorBody))
)]
#[get("/api/profiles/me/fiscal-status")]
pub async fn fiscal_status(state: web::Data<AppState>, auth: AuthUser) -> ApiResult<HttpResponse> {
    let mut conn = state.db.conn().await?;
    let profile = profiles::find_by_user(conn.exec(), auth.id(), auth.user.active_role)
        .await?
        .ok_or_else(|| ApiError::not_found("No profile for the active role"))?;
    let missing = rules::missing_fiscal_fields(role_of(&profile), &fiscal_fields(&profile));
    Ok(HttpResponse::Ok().json(FiscalStatus {
        profile_id: profile.id,
        profile_type: profile.profile_type.clone(),
        fiscal_data_complete: missing.is_empty(),
        missing_fields: missing.into_iter().map(str::to_owned).collect(),
    }))
}
