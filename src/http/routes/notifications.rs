//! `/api/notifications/*`: the caller's stored notifications.
//!
//! The list answers the pagination envelope of DESIGN §6 plus one extra field,
//! `unread_count` (all unread notifications of the caller, whatever the filter), so a client
//! shows its badge without a second request.

use actix_web::{HttpResponse, get, post, web};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use crate::http::auth::{AuthUser, CsrfChecked};
use crate::http::error::ApiResult;
use crate::http::pagination::{PageQuery, Paginated};
use crate::state::AppState;
use crate::store::notifications::{self, Notification};
use crate::workflows::notify;

/// A stored notification.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct NotificationView {
    pub id: i64,
    /// The notification type (`payment_held`, `EXPERT_PAYOUT_PAID`, `test`, …).
    #[serde(rename = "type")]
    pub kind: String,
    pub title: String,
    pub message: String,
    /// Free-form details (ids of what it is about, links).
    #[schema(value_type = Object)]
    pub data: Value,
    pub is_read: bool,
    pub read_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

impl From<Notification> for NotificationView {
    fn from(n: Notification) -> Self {
        Self {
            id: n.id,
            kind: n.kind,
            title: n.title,
            message: n.message,
            data: n.data.0,
            is_read: n.is_read,
            read_at: n.read_at,
            created_at: n.created_at,
        }
    }
}

/// One page of the caller's notifications, newest first.
#[derive(Serialize, ToSchema)]
pub struct NotificationPage {
    pub items: Vec<NotificationView>,
    pub total: i64,
    pub page: i64,
    pub size: i64,
    pub pages: i64,
    /// Every unread notification of the caller, whatever `unread_only` says.
    pub unread_count: i64,
}

#[derive(Deserialize, IntoParams)]
pub struct NotificationListQuery {
    /// Page number, from 1.
    pub page: Option<i64>,
    /// Items per page, 1 to 100.
    pub size: Option<i64>,
    /// Only unread notifications (default false).
    pub unread_only: Option<bool>,
}

#[derive(Deserialize, ToSchema)]
pub struct NotificationReadRequest {
    pub notification_id: i64,
}

#[derive(Serialize, ToSchema)]
pub struct MarkAllReadResponse {
    /// How many notifications were unread and are now read.
    pub updated: i64,
}

/// The caller's notifications, newest first (optionally unread only), with the unread count.
#[utoipa::path(
    tag = "notifications",
    params(NotificationListQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, body = NotificationPage),
        (status = 422, body = crate::http::error::ErrorBody),
    )
)]
#[get("/api/notifications")]
pub async fn list(
    state: web::Data<AppState>,
    auth: AuthUser,
    query: web::Query<NotificationListQuery>,
) -> ApiResult<HttpResponse> {
    let page = PageQuery {
        page: query.page,
        size: query.size,
    }
    .validate()?;
    let mut conn = state.db.conn().await?;
    let (items, total) = notifications::list_for_user(
        conn.exec(),
        auth.id(),
        query.unread_only.unwrap_or(false),
        page.limit(),
        page.offset(),
    )
    .await?;
    let unread_count = notifications::unread_count(conn.exec(), auth.id()).await?;
    let p = Paginated::new(items, total, page).map(NotificationView::from);
    Ok(HttpResponse::Ok().json(NotificationPage {
        items: p.items,
        total: p.total,
        page: p.page,
        size: p.size,
        pages: p.pages,
        unread_count,
    }))
}

/// Marks one of the caller's notifications read; another user's is not found.
#[utoipa::path(
    tag = "notifications",
    request_body = NotificationReadRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, body = NotificationView),
        (status = 404, body = crate::http::error::ErrorBody, description = "Not the caller's notification"),
    )
)]
#[post("/api/notifications/mark-read")]
pub async fn mark_read(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    body: web::Json<NotificationReadRequest>,
) -> ApiResult<HttpResponse> {
    let notification = notify::mark_read(&state, auth.id(), body.notification_id).await?;
    Ok(HttpResponse::Ok().json(NotificationView::from(notification)))
}

/// Marks every unread notification of the caller read.
#[utoipa::path(
    tag = "notifications",
    security(("bearer" = [])),
    responses(
        (status = 200, body = MarkAllReadResponse),
    )
)]
#[post("/api/notifications/mark-all-read")]
pub async fn mark_all_read(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
) -> ApiResult<HttpResponse> {
    let updated = notify::mark_all_read(&state, auth.id()).await?;
    Ok(HttpResponse::Ok().json(MarkAllReadResponse { updated }))
}

/// Stores a test notification for the caller (type `test`).
#[utoipa::path(
    tag = "notifications",
    security(("bearer" = [])),
    responses(
        (status = 201, body = NotificationView),
    )
)]
#[post("/api/notifications/test")]
pub async fn test(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
) -> ApiResult<HttpResponse> {
    let notification = notify::store_test(&state, auth.id()).await?;
    Ok(HttpResponse::Created().json(NotificationView::from(notification)))
}

/// Mounts the notifications.
pub fn mount(cfg: &mut utoipa_actix_web::service_config::ServiceConfig) {
    cfg.service(list)
        .service(mark_read)
        .service(mark_all_read)
        .service(test);
}
