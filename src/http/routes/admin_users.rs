//! `/api/admin/users…`: administrators list and read accounts, change their base fields,
//! status, suspension, password and roles, recontact companies, and remove accounts in three
//! steps (request, confirm, delete).

use crate::domain::profile::VerificationStatus;
use crate::domain::search::SearchTerm;
use crate::domain::text::AccountReason;
use crate::domain::user::AccountStatus;
use actix_web::{HttpResponse, delete, get, post, put, web};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::views::{Message, UserView};
use crate::http::auth::AdminUser;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::pagination::{PageQuery, Paginated};
use crate::state::AppState;
use crate::store::user_admin::{self, UserFilter};
use crate::store::users::{self, User};
use crate::workflows::user_admin::{self as flow, BaseChange, DeletionRequest, Recontact};

/// An account as administrators see it: the user, its standing and its removal.
#[derive(Debug, Serialize, ToSchema)]
pub struct AdminUserView {
    #[serde(flatten)]
    pub user: UserView,
    /// `active`, `inactive`, `suspended` or `deleted`.
    pub status: &'static str,
    pub last_login_at: Option<DateTime<Utc>>,
    pub updated_at: DateTime<Utc>,
    pub crm_id: Option<String>,
    pub accept_marketing: bool,
    pub source: Option<String>,
    pub suspended_at: Option<DateTime<Utc>>,
    pub suspended_until: Option<DateTime<Utc>>,
    pub suspension_reason: Option<String>,
    pub suspended_by: Option<i64>,
    pub deletion_requested_at: Option<DateTime<Utc>>,
    pub deletion_confirmed_at: Option<DateTime<Utc>>,
    pub deleted_at: Option<DateTime<Utc>>,
}

fn status_of(user: &User) -> &'static str {
    AccountStatus::of(
        user.deleted_at.is_some(),
        user.suspended_at.is_some(),
        user.is_active,
    )
    .as_str()
}

async fn view(state: &AppState, user: User) -> ApiResult<AdminUserView> {
    let mut conn = state.db.conn().await?;
    let standing = user_admin::standing(conn.exec(), user.id).await?;
    Ok(view_of(user, standing))
}

fn view_of(user: User, standing: user_admin::Standing) -> AdminUserView {
    AdminUserView {
        user: UserView::from(&user),
        status: status_of(&user),
        last_login_at: user.last_login_at,
        updated_at: user.updated_at,
        crm_id: user.crm_id.clone(),
        accept_marketing: standing.accept_marketing,
        source: standing.source,
        suspended_at: user.suspended_at,
        suspended_until: user.suspended_until,
        suspension_reason: standing.suspension_reason,
        suspended_by: standing.suspended_by,
        deletion_requested_at: standing.deletion_requested_at,
        deletion_confirmed_at: standing.deletion_confirmed_at,
        deleted_at: user.deleted_at,
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct UserListQuery {
    /// `empresa`, `experto` or `admin`.
    pub role: Option<String>,
    /// `active`, `inactive`, `suspended` or `deleted`.
    pub status: Option<String>,
    /// A profile verification status: `pending`, `pre_evaluated`, `verified`, `rejected`,
    /// `resubmitted`.
    pub verification: Option<String>,
    /// Text in the e-mail, username or profile names (`%` and `_` are literal).
    pub search: Option<SearchTerm>,
}

fn one_of(field: &str, value: &Option<String>, allowed: &[&str]) -> ApiResult<()> {
    match value {
        Some(v) if !allowed.contains(&v.as_str()) => Err(ApiError::invalid_field(
            field,
            format!("must be one of {}", allowed.join(", ")),
        )),
        _ => Ok(()),
    }
}

/// Accounts, newest first, filtered by role, status, verification and text.
#[utoipa::path(
    tag = "admin",
    params(UserListQuery, PageQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, body = Paginated<AdminUserView>),
        (status = 403, body = ErrorBody),
    )
)]
#[get("/api/admin/users")]
pub async fn list(
    state: web::Data<AppState>,
    _admin: AdminUser,
    query: web::Query<UserListQuery>,
    page: web::Query<PageQuery>,
) -> ApiResult<HttpResponse> {
    let page = page.into_inner().validate()?;
    let q = query.into_inner();
    one_of("role", &q.role, &["empresa", "experto", "admin"])?;
    one_of(
        "status",
        &q.status,
        &AccountStatus::ALL.map(AccountStatus::as_str),
    )?;
    one_of(
        "verification",
        &q.verification,
        &VerificationStatus::ALL.map(VerificationStatus::as_str),
    )?;
    let filter = UserFilter {
        role: q.role,
        status: q.status,
        verification: q.verification,
        search: q.search.map(SearchTerm::into_string),
    };
    let (found, total) = {
        let mut conn = state.db.conn().await?;
        user_admin::list(
            conn.exec(),
            &filter,
            page.page,
            page.size,
            &state.account_searches,
        )
        .await?
    };
    let items = found
        .into_iter()
        .map(|(user, standing)| view_of(user, standing))
        .collect();
    Ok(HttpResponse::Ok().json(Paginated::new(items, total, page)))
}

async fn find(state: &AppState, id: i64) -> ApiResult<User> {
    let mut conn = state.db.conn().await?;
    users::find(conn.exec(), id)
        .await?
        .ok_or_else(|| ApiError::not_found("User not found"))
}

/// One account.
#[utoipa::path(
    tag = "admin",
    params(("user_id" = i64, Path)),
    security(("bearer" = [])),
    responses((status = 200, body = AdminUserView), (status = 403, body = ErrorBody))
)]
#[get("/api/admin/users/{user_id}")]
pub async fn get_one(
    state: web::Data<AppState>,
    _admin: AdminUser,
    user_id: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let user = find(&state, user_id.into_inner()).await?;
    Ok(HttpResponse::Ok().json(view(&state, user).await?))
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct UpdateUserRequest {
    pub email: Option<String>,
    pub username: Option<String>,
    pub email_verified: Option<bool>,
}

/// Changes base fields: e-mail, username, whether the e-mail is verified.
#[utoipa::path(
    tag = "admin",
    params(("user_id" = i64, Path)),
    request_body = UpdateUserRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, body = AdminUserView),
        (status = 403, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "`ALREADY_EXISTS` e-mail or username taken; `USER_DELETED`"),
    )
)]
#[put("/api/admin/users/{user_id}")]
pub async fn update(
    state: web::Data<AppState>,
    AdminUser(admin): AdminUser,
    user_id: web::Path<i64>,
    body: web::Json<UpdateUserRequest>,
) -> ApiResult<HttpResponse> {
    let b = body.into_inner();
    let change = BaseChange {
        email: b.email,
        username: b.username,
        email_verified: b.email_verified,
    };
    let user = flow::update_base(&state, admin.id(), user_id.into_inner(), change).await?;
    Ok(HttpResponse::Ok().json(view(&state, user).await?))
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct AccountStatusRequest {
    /// `active` or `inactive`.
    pub status: String,
}

/// Activates or deactivates an account; deactivation ends its sessions at once, and
/// either ends a suspension.
#[utoipa::path(
    tag = "admin",
    params(("user_id" = i64, Path)),
    request_body = AccountStatusRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, body = AdminUserView),
        (status = 403, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "`CANNOT_TARGET_SELF`, `LAST_ADMINISTRATOR`, `DELETION_CONFIRMED`, `USER_DELETED`"),
    )
)]
#[put("/api/admin/users/{user_id}/status")]
pub async fn set_status(
    state: web::Data<AppState>,
    AdminUser(admin): AdminUser,
    user_id: web::Path<i64>,
    body: web::Json<AccountStatusRequest>,
) -> ApiResult<HttpResponse> {
    let active = match AccountStatus::parse(&body.status) {
        Some(AccountStatus::Active) => true,
        Some(AccountStatus::Inactive) => false,
        _ => {
            return Err(ApiError::invalid_field(
                "status",
                "must be active or inactive",
            ));
        }
    };
    let user = flow::set_status(&state, admin.id(), user_id.into_inner(), active).await?;
    Ok(HttpResponse::Ok().json(view(&state, user).await?))
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct SuspendRequest {
    /// 10 to 2000 characters.
    #[schema(min_length = 10, max_length = 2000)]
    pub reason: String,
    /// End of the suspension; without it, until an administrator sets the status back.
    pub until: Option<DateTime<Utc>>,
}

/// The reason of a suspension or a removal request, refused (422) under `reason`.
fn account_reason(reason: String) -> ApiResult<AccountReason> {
    AccountReason::parse(reason).map_err(|e| ApiError::invalid_field("reason", e.to_string()))
}

/// Suspends an account: login answers 403 `ACCOUNT_SUSPENDED` and every session ends at once.
#[utoipa::path(
    tag = "admin",
    params(("user_id" = i64, Path)),
    request_body = SuspendRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, body = AdminUserView),
        (status = 403, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "`CANNOT_TARGET_SELF`, `LAST_ADMINISTRATOR`, `USER_DELETED`"),
    )
)]
#[put("/api/admin/users/{user_id}/suspend")]
pub async fn suspend(
    state: web::Data<AppState>,
    AdminUser(admin): AdminUser,
    user_id: web::Path<i64>,
    body: web::Json<SuspendRequest>,
) -> ApiResult<HttpResponse> {
    let b = body.into_inner();
    let reason = account_reason(b.reason)?;
    let user = flow::suspend(&state, admin.id(), user_id.into_inner(), reason, b.until).await?;
    Ok(HttpResponse::Ok().json(view(&state, user).await?))
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct AdminPasswordRequest {
    pub new_password: String,
}

/// Sets a new password (policy checked), ends the user's sessions and e-mails them. Not the
/// caller's own (`CANNOT_TARGET_SELF`): that goes through `/api/users/me/change-password`.
#[utoipa::path(
    tag = "admin",
    params(("user_id" = i64, Path)),
    request_body = AdminPasswordRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, body = Message),
        (status = 403, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "`USER_DELETED`, `CANNOT_TARGET_SELF`"),
    )
)]
#[put("/api/admin/users/{user_id}/change-password")]
pub async fn change_password(
    state: web::Data<AppState>,
    AdminUser(admin): AdminUser,
    user_id: web::Path<i64>,
    body: web::Json<AdminPasswordRequest>,
) -> ApiResult<HttpResponse> {
    flow::change_password(&state, admin.id(), user_id.into_inner(), &body.new_password).await?;
    Ok(HttpResponse::Ok().json(Message::new(
        "Password changed; the user's sessions have ended",
    )))
}

/// Sends the recontact e-mail to a company and records when and by whom.
#[utoipa::path(
    tag = "admin",
    params(("user_id" = i64, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = Recontact),
        (status = 400, body = ErrorBody, description = "`NOT_A_COMPANY`"),
        (status = 403, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "`USER_DELETED`"),
    )
)]
#[post("/api/admin/users/{user_id}/recontact")]
pub async fn recontact(
    state: web::Data<AppState>,
    AdminUser(admin): AdminUser,
    user_id: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let done = flow::recontact(&state, admin.id(), user_id.into_inner()).await?;
    Ok(HttpResponse::Ok().json(done))
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct RolesRequest {
    /// The whole new set: `empresa`, `experto`, `admin`; at least one.
    pub roles: Vec<String>,
    /// One of `roles`; by default the current active role when kept, else the first.
    pub active_role: Option<String>,
}

/// Replaces the user's roles.
#[utoipa::path(
    tag = "admin",
    params(("user_id" = i64, Path)),
    request_body = RolesRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, body = AdminUserView),
        (status = 403, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "`CANNOT_REMOVE_OWN_ADMIN`, `LAST_ADMINISTRATOR`, `USER_DELETED`"),
    )
)]
#[put("/api/admin/users/{user_id}/roles")]
pub async fn set_roles(
    state: web::Data<AppState>,
    AdminUser(admin): AdminUser,
    user_id: web::Path<i64>,
    body: web::Json<RolesRequest>,
) -> ApiResult<HttpResponse> {
    let b = body.into_inner();
    let user = flow::set_roles(
        &state,
        admin.id(),
        user_id.into_inner(),
        &b.roles,
        b.active_role.as_deref(),
    )
    .await?;
    Ok(HttpResponse::Ok().json(view(&state, user).await?))
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct DeletionRequestBody {
    /// 10 to 2000 characters.
    #[schema(min_length = 10, max_length = 2000)]
    pub reason: String,
}

/// Step one of a removal: recorded, the other administrators told.
#[utoipa::path(
    tag = "admin",
    params(("user_id" = i64, Path)),
    request_body = DeletionRequestBody,
    security(("bearer" = [])),
    responses(
        (status = 200, body = DeletionRequest),
        (status = 403, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "`DELETION_ALREADY_REQUESTED`, `CANNOT_TARGET_SELF`, `USER_DELETED`"),
    )
)]
#[post("/api/admin/users/{user_id}/deletion-request")]
pub async fn deletion_request(
    state: web::Data<AppState>,
    AdminUser(admin): AdminUser,
    user_id: web::Path<i64>,
    body: web::Json<DeletionRequestBody>,
) -> ApiResult<HttpResponse> {
    let reason = account_reason(body.into_inner().reason)?;
    let request = flow::request_deletion(&state, admin.id(), user_id.into_inner(), reason).await?;
    Ok(HttpResponse::Ok().json(request))
}

/// Step two: the account is deactivated (as a suspension) and its sessions end.
#[utoipa::path(
    tag = "admin",
    params(("user_id" = i64, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = DeletionRequest),
        (status = 403, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "`DELETION_NOT_REQUESTED` (or already confirmed), `LAST_ADMINISTRATOR`, `CANNOT_TARGET_SELF`, `USER_DELETED`"),
    )
)]
#[post("/api/admin/users/{user_id}/deletion-confirm")]
pub async fn deletion_confirm(
    state: web::Data<AppState>,
    AdminUser(admin): AdminUser,
    user_id: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let request = flow::confirm_deletion(&state, admin.id(), user_id.into_inner()).await?;
    Ok(HttpResponse::Ok().json(request))
}

/// Final removal of a confirmed account: e-mail, names, phone, location, pictures,
/// documents and chat files are erased; payments, commissions, disputes, reviews and the
/// fiscal identity reported under DAC7 stay, on the anonymised account, as tax and
/// accounting law requires. The CRM is told (its failure does not block the removal).
#[utoipa::path(
    tag = "admin",
    params(("user_id" = i64, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = DeletionRequest),
        (status = 403, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "`DELETION_NOT_CONFIRMED`; `USER_HAS_ACTIVE_WORK` while money is held or disputed, a dispute is active or a project is under way; `USER_DELETED`"),
    )
)]
#[delete("/api/admin/users/{user_id}")]
pub async fn remove(
    state: web::Data<AppState>,
    AdminUser(admin): AdminUser,
    user_id: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let request = flow::delete(&state, admin.id(), user_id.into_inner()).await?;
    Ok(HttpResponse::Ok().json(request))
}

/// Mounts the administrators' routes on accounts.
pub fn mount(cfg: &mut utoipa_actix_web::service_config::ServiceConfig) {
    cfg.service(list)
        .service(get_one)
        .service(update)
        .service(remove)
        .service(set_status)
        .service(suspend)
        .service(change_password)
        .service(recontact)
        .service(set_roles)
        .service(deletion_request)
        .service(deletion_confirm);
}
