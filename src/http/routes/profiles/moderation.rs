//! Administrators' profile moderation: verify, unverify, reject, resubmit, pre-evaluate,
//! the admin views and lists, profiles created for a user.

use crate::domain::search::SearchTerm;
use actix_web::{HttpResponse, get, post, put, web};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use crate::domain::profile::{VerificationAction, VerificationStatus};
use crate::domain::user::Role;
use crate::http::auth::{AdminUser, AuthUser};
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::pagination::{PageQuery, Paginated};
use crate::state::AppState;
use crate::store::profiles::{self, AdminFilter};

use super::*;
use crate::workflows::profiles as flow;

// ---------------------------------------------------------------------------------------
// Administration
// ---------------------------------------------------------------------------------------

#[derive(Deserialize, ToSchema, Default)]
pub struct NotesRequest {
    /// Kept as the profile's verification notes (visible to administrators only).
    pub notes: Option<String>,
}

async fn moderate(
    state: &AppState,
    admin: &AuthUser,
    user_id: i64,
    body: Option<web::Json<NotesRequest>>,
    action: VerificationAction,
) -> ApiResult<HttpResponse> {
    let notes = body.and_then(|b| b.into_inner().notes);
    let profile = flow::moderate(state, admin.id(), user_id, notes, action).await?;
    let mut conn = state.db.conn().await?;
    Ok(HttpResponse::Ok().json(admin_of(conn.exec(), profile).await?))
}

macro_rules! moderation_route {
    ($name:ident, $path:literal, $action:expr, $doc:literal) => {
        #[doc = $doc]
        #[utoipa::path(
            tag = "admin",
            params(("user_id" = i64, Path)),
            request_body = NotesRequest,
            security(("bearer" = [])),
            responses(
                (status = 200, body = AdminProfileView),
                (status = 403, body = ErrorBody),
                (status = 404, body = ErrorBody, description = "Unknown user, or no profile"),
            )
        )]
        #[put($path)]
        pub async fn $name(
            state: web::Data<AppState>,
            AdminUser(admin): AdminUser,
            user_id: web::Path<i64>,
            body: Option<web::Json<NotesRequest>>,
        ) -> ApiResult<HttpResponse> {
            moderate(&state, &admin, user_id.into_inner(), body, $action).await
        }
    };
}

moderation_route!(
    verify,
    "/api/admin/users/{user_id}/verify",
    VerificationAction::Verify,
    "Verifies the user's active-role profile."
);
moderation_route!(
    unverify,
    "/api/admin/users/{user_id}/unverify",
    VerificationAction::Unverify,
    "Withdraws the verification of the user's active-role profile (back to `pending`)."
);
moderation_route!(
    reject,
    "/api/admin/users/{user_id}/reject",
    VerificationAction::Reject,
    "Rejects the user's active-role profile."
);
moderation_route!(
    resubmit,
    "/api/admin/users/{user_id}/resubmit",
    VerificationAction::Resubmit,
    "Asks the user to resubmit their active-role profile."
);
moderation_route!(
    pre_evaluate,
    "/api/admin/users/{user_id}/pre-evaluation",
    VerificationAction::PreEvaluate,
    "Marks the user's active-role profile pre-evaluated."
);

/// A user's full profile with verification notes (the active role's, else the first).
#[utoipa::path(
    tag = "admin",
    params(("user_id" = i64, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = AdminProfileView),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
    )
)]
#[get("/api/admin/users/{user_id}/profile")]
pub async fn admin_user_profile(
    state: web::Data<AppState>,
    _admin: AdminUser,
    user_id: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let mut conn = state.db.conn().await?;
    let profile = flow::profile_of_user(conn.exec(), user_id.into_inner()).await?;
    Ok(HttpResponse::Ok().json(admin_of(conn.exec(), profile).await?))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AdminProfileQuery {
    /// `empresa`, `experto` or `admin`.
    pub profile_type: Option<String>,
    pub is_verified: Option<bool>,
    /// `pending`, `pre_evaluated`, `verified`, `rejected` or `resubmitted`.
    pub verification_status: Option<String>,
    /// Part of a name, company name, slug, e-mail or username.
    pub search: Option<SearchTerm>,
    pub page: Option<i64>,
    pub size: Option<i64>,
}

/// Every profile, newest first, with filters.
#[utoipa::path(
    tag = "admin",
    params(AdminProfileQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, body = Paginated<AdminProfileView>),
        (status = 403, body = ErrorBody),
        (status = 422, body = ErrorBody),
    )
)]
#[get("/api/admin/profiles")]
pub async fn admin_list(
    state: web::Data<AppState>,
    _admin: AdminUser,
    query: web::Query<AdminProfileQuery>,
) -> ApiResult<HttpResponse> {
    let q = query.into_inner();
    let page = PageQuery {
        page: q.page,
        size: q.size,
    }
    .validate()?;
    if let Some(kind) = &q.profile_type
        && Role::parse(kind).is_none()
    {
        return Err(ApiError::invalid_field(
            "profile_type",
            "must be empresa, experto or admin",
        ));
    }
    let verification_status = match q.verification_status.as_deref() {
        None => None,
        Some(text) => Some(VerificationStatus::parse(text).ok_or_else(|| {
            ApiError::invalid_field("verification_status", "unknown verification status")
        })?),
    };
    let filter = AdminFilter {
        profile_type: q.profile_type,
        is_verified: q.is_verified,
        verification_status,
        search: q.search.map(SearchTerm::into_string),
    };
    let mut conn = state.db.conn().await?;
    let (items, total) = profiles::list_admin(conn.exec(), &filter, page.page, page.size).await?;
    let ids: Vec<i64> = items.iter().map(|p| p.id).collect();
    let mut held = skills::of_profiles(conn.exec(), &ids).await?;
    let views: Vec<AdminProfileView> = items
        .into_iter()
        .map(|p| {
            let skills = held.remove(&p.id).unwrap_or_default();
            admin_view(p, skills)
        })
        .collect();
    Ok(HttpResponse::Ok().json(Paginated::new(views, total, page)))
}

async fn admin_create(
    state: &AppState,
    user_id: i64,
    role: Role,
    input: &ProfileInput,
) -> ApiResult<HttpResponse> {
    let profile = flow::create_for_user(state, user_id, role, input).await?;
    let mut conn = state.db.conn().await?;
    Ok(HttpResponse::Created().json(owner_of(conn.exec(), profile).await?))
}

/// Creates an expert profile (with a generated unique slug) for a user; the user gains the
/// `experto` role if they lacked it.
#[utoipa::path(
    tag = "admin",
    params(("user_id" = i64, Path)),
    request_body = ProfileInput,
    security(("bearer" = [])),
    responses(
        (status = 201, body = ProfileView),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody),
    )
)]
#[post("/api/admin/profiles/expert/{user_id}")]
pub async fn admin_create_expert(
    state: web::Data<AppState>,
    _admin: AdminUser,
    user_id: web::Path<i64>,
    body: web::Json<ProfileInput>,
) -> ApiResult<HttpResponse> {
    admin_create(&state, user_id.into_inner(), Role::Experto, &body).await
}

/// Creates a company profile for a user; the user gains the `empresa` role if they lacked it.
#[utoipa::path(
    tag = "admin",
    params(("user_id" = i64, Path)),
    request_body = ProfileInput,
    security(("bearer" = [])),
    responses(
        (status = 201, body = ProfileView),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody),
    )
)]
#[post("/api/admin/profiles/company/{user_id}")]
pub async fn admin_create_company(
    state: web::Data<AppState>,
    _admin: AdminUser,
    user_id: web::Path<i64>,
    body: web::Json<ProfileInput>,
) -> ApiResult<HttpResponse> {
    admin_create(&state, user_id.into_inner(), Role::Empresa, &body).await
}
