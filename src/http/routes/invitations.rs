//! `/api/admin/invitations`: administrators invite administrators by e-mail.

use crate::domain::search::SearchTerm;
use actix_web::{HttpResponse, delete, get, post, web};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::views::Message;
use crate::domain::user::{EmailAddress, InvitationStatus};
use crate::http::auth::AdminUser;
use crate::http::error::{ApiError, ApiResult, FieldError};
use crate::http::pagination::{PageQuery, Paginated};
use crate::state::AppState;
use crate::store::invitations::{self, Invitation};
use crate::workflows::invitations as invitations_flow;

#[derive(Deserialize, ToSchema)]
pub struct CreateInvitationRequest {
    pub email: String,
    pub message: Option<String>,
    /// 1 to 720, default 168.
    pub expires_hours: Option<i64>,
}

#[derive(Serialize, ToSchema)]
pub struct InvitationView {
    pub id: i64,
    pub email: String,
    pub invited_by: Option<i64>,
    pub inviter_username: Option<String>,
    pub message: Option<String>,
    pub expires_at: DateTime<Utc>,
    pub used: bool,
    pub used_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

impl From<Invitation> for InvitationView {
    fn from(i: Invitation) -> Self {
        Self {
            id: i.id,
            email: i.email,
            invited_by: i.invited_by,
            inviter_username: i.inviter_username,
            message: i.message,
            expires_at: i.expires_at,
            used: i.used,
            used_at: i.used_at,
            created_at: i.created_at,
        }
    }
}

#[derive(Deserialize, IntoParams)]
pub struct InvitationListQuery {
    pub page: Option<i64>,
    pub size: Option<i64>,
    /// `all` (default), `pending`, `used` or `expired`.
    pub status: Option<String>,
    /// Part of the invitee's e-mail.
    pub search: Option<SearchTerm>,
}

/// Invites an administrator: the e-mail carries a single-use token.
#[utoipa::path(
    tag = "admin",
    request_body = CreateInvitationRequest,
    security(("bearer" = [])),
    responses(
        (status = 201, body = InvitationView),
        (status = 403, body = crate::http::error::ErrorBody),
        (status = 409, body = crate::http::error::ErrorBody, description = "A user with this e-mail exists"),
    )
)]
#[post("/api/admin/invitations")]
pub async fn create(
    state: web::Data<AppState>,
    AdminUser(admin): AdminUser,
    body: web::Json<CreateInvitationRequest>,
) -> ApiResult<HttpResponse> {
    let mut errors = Vec::new();
    let email = EmailAddress::parse(&body.email)
        .map_err(|m| errors.push(FieldError::new("email", m)))
        .ok();
    let hours = body.expires_hours.unwrap_or(168);
    if !(1..=720).contains(&hours) {
        errors.push(FieldError::new("expires_hours", "must be from 1 to 720"));
    }
    let message = body
        .message
        .as_deref()
        .map(str::trim)
        .filter(|m| !m.is_empty());
    if message.is_some_and(|m| m.chars().count() > 2000) {
        errors.push(FieldError::new(
            "message",
            "must be at most 2000 characters",
        ));
    }
    let (Some(email), true) = (email, errors.is_empty()) else {
        return Err(ApiError::validation(errors));
    };

    let invitation =
        invitations_flow::invite_admin(&state, &admin.user, &email, message, hours).await?;
    Ok(HttpResponse::Created().json(InvitationView::from(invitation)))
}

/// Invitations, newest first, by status and e-mail search.
#[utoipa::path(
    tag = "admin",
    params(InvitationListQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, body = Paginated<InvitationView>),
        (status = 403, body = crate::http::error::ErrorBody),
        (status = 422, body = crate::http::error::ErrorBody),
    )
)]
#[get("/api/admin/invitations")]
pub async fn list(
    state: web::Data<AppState>,
    _admin: AdminUser,
    query: web::Query<InvitationListQuery>,
) -> ApiResult<HttpResponse> {
    let page = PageQuery {
        page: query.page,
        size: query.size,
    }
    .validate()?;
    let status = match query.status.as_deref() {
        None | Some("all") => None,
        Some(text) => Some(InvitationStatus::parse(text).ok_or_else(|| {
            ApiError::invalid_field("status", "must be all, pending, used or expired")
        })?),
    };
    let mut conn = state.db.conn().await?;
    let (items, total) = invitations::list(
        conn.exec(),
        status,
        query.search.as_ref().map(SearchTerm::as_str),
        state.clock.now(),
        page.limit(),
        page.offset(),
    )
    .await?;
    Ok(HttpResponse::Ok().json(Paginated::new(items, total, page).map(InvitationView::from)))
}

/// One invitation.
#[utoipa::path(
    tag = "admin",
    params(("invitation_id" = i64, Path)),
    security(("bearer" = [])),
    responses((status = 200, body = InvitationView), (status = 404, body = crate::http::error::ErrorBody))
)]
#[get("/api/admin/invitations/{invitation_id}")]
pub async fn get(
    state: web::Data<AppState>,
    _admin: AdminUser,
    id: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let mut conn = state.db.conn().await?;
    let invitation = invitations::find(conn.exec(), id.into_inner())
        .await?
        .ok_or_else(|| ApiError::not_found("Invitation not found"))?;
    Ok(HttpResponse::Ok().json(InvitationView::from(invitation)))
}

/// Cancels an invitation: its token stops working.
#[utoipa::path(
    tag = "admin",
    params(("invitation_id" = i64, Path)),
    security(("bearer" = [])),
    responses((status = 200, body = Message), (status = 404, body = crate::http::error::ErrorBody))
)]
#[delete("/api/admin/invitations/{invitation_id}")]
pub async fn cancel(
    state: web::Data<AppState>,
    _admin: AdminUser,
    id: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    invitations_flow::cancel(&state, id.into_inner()).await?;
    Ok(HttpResponse::Ok().json(Message::new("Invitation cancelled")))
}

/// Mounts the administrators' invitations.
pub fn mount(cfg: &mut utoipa_actix_web::service_config::ServiceConfig) {
    cfg.service(create)
        .service(list)
        .service(get)
        .service(cancel);
}
