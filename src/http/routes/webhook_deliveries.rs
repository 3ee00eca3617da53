//! Outgoing user webhooks over HTTP: the owner's delivery log, redelivery and the test
//! delivery; and [`RestViews`], which gives each webhook the resource as the REST API shows
//! it to its recipient (the same view types the routes answer with, never more).

use actix_web::{HttpResponse, get, post, web};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use super::applications::ApplicationView;
use super::disputes::DisputeView;
use super::escrow_views::{MilestoneView, PaymentView};
use super::invoices::InvoiceView;
use super::milestones::DeliveryView;
use super::projects::ProjectView;
use super::reviews::ReviewView;
use crate::domain::reputation::ReviewVisibility;
use crate::domain::webhook_rules::WebhookDeliveryState;
use crate::http::auth::{AuthUser, CsrfChecked};
use crate::http::error::{ApiError, ApiResult};
use crate::http::pagination::{PageQuery, Paginated};
use crate::state::AppState;
use crate::store::events::Event;
use crate::store::webhook_deliveries::{self, Delivery};
use crate::store::{
    Db, applications, deliveries, disputes, invoices, milestones, payments, projects, reviews,
};
use crate::workflows::projects::Caller;
use crate::workflows::webhooks::{self, EventViews, Recipient};

// ---------------------------------------------------------------------------------------
// Who each event concerns, and what they see
// ---------------------------------------------------------------------------------------

/// [`EventViews`] built from the REST views.
pub struct RestViews;

fn to_value<T: Serialize>(view: T) -> anyhow::Result<Value> {
    Ok(serde_json::to_value(view)?)
}

fn id_of(event: &Event, key: &str) -> Option<i64> {
    event.payload.0.get(key).and_then(Value::as_i64)
}

/// The experts an `application.accepted` event tells their proposal was not selected.
fn turned_down(event: &Event) -> Vec<i64> {
    event
        .payload
        .0
        .get("notify")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|n| n["type"] == "application_rejected")
        .filter_map(|n| n["user_id"].as_i64())
        .collect()
}

fn owner(id: i64) -> Caller {
    Caller {
        id,
        admin: false,
        company: true,
        expert: false,
    }
}

async fn project_company(db: &Db, project_id: i64) -> anyhow::Result<Option<i64>> {
    let mut conn = db.conn().await?;
    Ok(projects::find(conn.exec(), project_id)
        .await?
        .and_then(|p| p.company_id))
}

/// The company and expert of a payment, each with the payment as they read it.
async fn payment_parties(
    db: &Db,
    event_type: &'static str,
    payment_id: Option<i64>,
) -> anyhow::Result<Vec<Recipient>> {
    let Some(payment_id) = payment_id else {
        return Ok(Vec::new());
    };
    let mut conn = db.conn().await?;
    let Some(y) = payments::find(conn.exec(), payment_id).await? else {
        return Ok(Vec::new());
    };
    let parties: Vec<i64> = [y.company_id, y.expert_id].into_iter().flatten().collect();
    let data = to_value(PaymentView::from(y))?;
    Ok(parties
        .into_iter()
        .map(|user_id| Recipient {
            user_id,
            event_type,
            data: data.clone(),
        })
        .collect())
}

/// `milestone.payment_required` for the milestone of `payment_id`, to its project's company.
async fn payment_required(db: &Db, payment_id: Option<i64>) -> anyhow::Result<Vec<Recipient>> {
    let Some(payment_id) = payment_id else {
        return Ok(Vec::new());
    };
    let mut conn = db.conn().await?;
    let Some(y) = payments::find(conn.exec(), payment_id).await? else {
        return Ok(Vec::new());
    };
    let Some(milestone_id) = y.milestone_id else {
        return Ok(Vec::new());
    };
    let Some(m) = milestones::find(conn.exec(), milestone_id).await? else {
        return Ok(Vec::new());
    };
    let Some(company) = y.company_id else {
        return Ok(Vec::new());
    };
    Ok(vec![Recipient {
        user_id: company,
        event_type: "milestone.payment_required",
        data: to_value(MilestoneView::from(m))?,
    }])
}

#[async_trait]
impl EventViews for RestViews {
    fn wants(&self, kind: &str) -> bool {
        webhooks::EVENT_TYPES.contains(&kind)
    }

    async fn recipients(&self, db: &Db, event: &Event) -> anyhow::Result<Vec<Recipient>> {
        let mut conn = db.conn().await?;
        let one = |user_id: Option<i64>, event_type: &'static str, data: Value| {
            user_id
                .map(|user_id| Recipient {
                    user_id,
                    event_type,
                    data,
                })
                .into_iter()
                .collect::<Vec<_>>()
        };
        Ok(match event.kind.as_str() {
            kind @ ("project.created" | "project.published") => {
                let kind = if kind == "project.created" {
                    "project.created"
                } else {
                    "project.published"
                };
                let Some(p) = projects::find(conn.exec(), event.aggregate_id.unwrap_or(0)).await?
                else {
                    return Ok(Vec::new());
                };
                let Some(company) = p.company_id else {
                    return Ok(Vec::new());
                };
                let data = to_value(ProjectView::for_caller(p, Some(&owner(company))))?;
                one(Some(company), kind, data)
            }
            kind @ ("application.received"
            | "application.accepted"
            | "application.rejected"
            | "application.revision_requested") => {
                let Some(a) =
                    applications::find(conn.exec(), id_of(event, "application_id").unwrap_or(0))
                        .await?
                else {
                    return Ok(Vec::new());
                };
                let (to, kind) = match kind {
                    "application.received" => (
                        project_company(db, a.project_id).await?,
                        "application.received",
                    ),
                    "application.accepted" => (Some(a.expert_id), "application.accepted"),
                    "application.rejected" => (Some(a.expert_id), "application.rejected"),
                    _ => (Some(a.expert_id), "application.revision_requested"),
                };
                let project_id = a.project_id;
                let mut out = one(to, kind, to_value(ApplicationView::from(a))?);
                if kind == "application.accepted" {
                    out.extend(payment_required(db, id_of(event, "payment_id")).await?);
                    // The proposals the selection turned down: `application.rejected` to
                    // each of their experts (the event tells them in its `notify` list).
                    for expert_id in turned_down(event) {
                        if let Some(other) =
                            applications::find_by_expert(conn.exec(), project_id, expert_id).await?
                        {
                            out.extend(one(
                                Some(expert_id),
                                "application.rejected",
                                to_value(ApplicationView::from(other))?,
                            ));
                        }
                    }
                }
                out
            }
            "payment.held" => payment_parties(db, "payment.held", event.aggregate_id).await?,
            "payment.released" => {
                let mut out = payment_parties(db, "payment.released", event.aggregate_id).await?;
                out.extend(payment_required(db, id_of(event, "next_payment_id")).await?);
                out
            }
            "payment.refunded" => {
                payment_parties(db, "payment.refunded", event.aggregate_id).await?
            }
            "payment.failed" => payment_parties(db, "payment.failed", event.aggregate_id).await?,
            kind @ ("delivery.submitted" | "delivery.reviewed") => {
                let Some(d) =
                    deliveries::find(conn.exec(), id_of(event, "delivery_id").unwrap_or(0)).await?
                else {
                    return Ok(Vec::new());
                };
                let (to, kind) = if kind == "delivery.submitted" {
                    (
                        project_company(db, d.project_id).await?,
                        "delivery.submitted",
                    )
                } else {
                    (d.expert_id, "delivery.reviewed")
                };
                one(to, kind, to_value(DeliveryView::from(d))?)
            }
            kind @ ("dispute.created" | "dispute.resolved") => {
                let kind = if kind == "dispute.created" {
                    "dispute.created"
                } else {
                    "dispute.resolved"
                };
                let Some(d) = disputes::find(conn.exec(), event.aggregate_id.unwrap_or(0)).await?
                else {
                    return Ok(Vec::new());
                };
                let Some(p) = projects::find(conn.exec(), d.project_id).await? else {
                    return Ok(Vec::new());
                };
                let data = to_value(DisputeView::from(d))?;
                [p.company_id, p.expert_id]
                    .into_iter()
                    .flatten()
                    .map(|user_id| Recipient {
                        user_id,
                        event_type: kind,
                        data: data.clone(),
                    })
                    .collect()
            }
            "review.received" => {
                let Some(r) = reviews::find(conn.exec(), event.aggregate_id.unwrap_or(0)).await?
                else {
                    return Ok(Vec::new());
                };
                let to = r.reviewee_id;
                one(
                    to,
                    "review.received",
                    to_value(sealed_review(r, event.created_at))?,
                )
            }
            kind @ ("invoice.issued" | "credit_note.issued") => {
                let kind = if kind == "invoice.issued" {
                    "invoice.issued"
                } else {
                    "credit_note.issued"
                };
                let Some(d) = invoices::find(conn.exec(), event.aggregate_id.unwrap_or(0)).await?
                else {
                    return Ok(Vec::new());
                };
                let to = [Some(d.recipient_user_id), d.issuer_user_id];
                let data = to_value(InvoiceView::from(d))?;
                to.into_iter()
                    .flatten()
                    .map(|user_id| Recipient {
                        user_id,
                        event_type: kind,
                        data: data.clone(),
                    })
                    .collect()
            }
            _ => Vec::new(),
        })
    }
}

/// The review as its reviewee reads it when the event happens: rating and words only once it
/// is revealed and published (the blind period keeps them sealed, as `GET` does).
fn sealed_review(r: reviews::Review, now: DateTime<Utc>) -> ReviewView {
    let revealed = r.is_revealed(now);
    let full = revealed && r.visibility == ReviewVisibility::Published;
    ReviewView {
        id: r.id,
        project_id: r.project_id,
        reviewer_id: r.reviewer_id,
        reviewee_id: r.reviewee_id,
        revealed,
        reveal_at: r.reveal_at(),
        reviewer_role: r.reviewer_role,
        rating: full.then_some(r.rating),
        comment: r.comment.filter(|_| full),
        response: r.response.filter(|_| full),
        responded_at: r.responded_at,
        visibility: r.visibility,
        edited_at: r.edited_at,
        created_at: r.created_at,
        updated_at: r.updated_at,
    }
}

// ---------------------------------------------------------------------------------------
// Routes
// ---------------------------------------------------------------------------------------

/// One delivery in its owner's log.
#[derive(Serialize, ToSchema)]
pub struct WebhookDeliveryView {
    pub id: i64,
    /// The stable id receivers de-duplicate on (`webhook-id`).
    pub message_id: String,
    /// One of the 18 event types, or `webhook.test`.
    pub event_type: String,
    /// `pending`, `delivered`, `failed` or `disabled`.
    #[schema(value_type = String)]
    pub state: WebhookDeliveryState,
    pub attempt_count: i64,
    pub last_status_code: Option<i64>,
    /// How the last attempt failed: `dns`, `connect`, `tls`, `timeout`, `http <status>`,
    /// `refused` (a destination the guard refuses) or `request`.
    pub last_error: Option<String>,
    pub last_attempt_at: Option<DateTime<Utc>>,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub delivered_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    /// For a delivery that gave up (`failed`) or was never sent (`disabled`): where the
    /// receiver reads this event and every later one (`GET /api/users/me/events`).
    pub catch_up: Option<String>,
}

impl From<Delivery> for WebhookDeliveryView {
    fn from(d: Delivery) -> Self {
        Self {
            id: d.id,
            message_id: d.message_id,
            event_type: d.event_type,
            attempt_count: d.attempts,
            last_status_code: d.last_status_code,
            last_error: d.last_error,
            last_attempt_at: d.last_attempt_at,
            next_attempt_at: d
                .next_attempt_at
                .filter(|_| d.state == WebhookDeliveryState::Pending),
            delivered_at: d.delivered_at,
            catch_up: matches!(
                d.state,
                WebhookDeliveryState::Failed | WebhookDeliveryState::Disabled
            )
            .then(|| {
                let since = d
                    .created_at
                    .to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
                format!("/api/users/me/events?since={since}")
            }),
            created_at: d.created_at,
            state: d.state,
        }
    }
}

/// One page of the caller's deliveries, newest first.
#[derive(Serialize, ToSchema)]
pub struct WebhookDeliveryPage {
    pub items: Vec<WebhookDeliveryView>,
    pub total: i64,
    pub page: i64,
    pub size: i64,
    pub pages: i64,
}

/// What a test delivery came to.
#[derive(Serialize, ToSchema)]
pub struct WebhookTestResult {
    /// The receiver answered 2xx.
    pub delivered: bool,
    pub status_code: Option<u16>,
    pub duration_ms: u64,
    /// How the attempt failed: `dns`, `connect`, `tls`, `timeout`, `http <status>`, `refused`
    /// (a destination the guard refuses) or `request`.
    pub error: Option<String>,
}

/// The caller's webhook deliveries, newest first.
#[utoipa::path(
    tag = "users",
    params(PageQuery),
    security(("bearer" = [])),
    responses((status = 200, body = WebhookDeliveryPage))
)]
#[get("/api/users/me/webhook/deliveries")]
pub async fn list(
    state: web::Data<AppState>,
    auth: AuthUser,
    query: web::Query<PageQuery>,
) -> ApiResult<HttpResponse> {
    let page = query.into_inner().validate()?;
    let mut conn = state.db.conn().await?;
    let items =
        webhook_deliveries::list_for_user(conn.exec(), auth.id(), page.limit(), page.offset())
            .await?;
    let total = webhook_deliveries::count_for_user(conn.exec(), auth.id()).await?;
    let p = Paginated::new(items, total, page).map(WebhookDeliveryView::from);
    Ok(HttpResponse::Ok().json(WebhookDeliveryPage {
        items: p.items,
        total: p.total,
        page: p.page,
        size: p.size,
        pages: p.pages,
    }))
}

/// Sends one of the caller's deliveries again, with the same id and body, signed with the
/// current secret (CSRF protected).
#[utoipa::path(
    tag = "users",
    params(("id" = i64, Path)),
    security(("bearer" = [])),
    responses(
        (status = 202, body = WebhookDeliveryView),
        (status = 403, body = crate::http::error::ErrorBody, description = "CSRF check failed"),
        (status = 404, body = crate::http::error::ErrorBody, description = "Not the caller's delivery"),
    )
)]
#[post("/api/users/me/webhook/deliveries/{id}/redeliver")]
pub async fn redeliver(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    id: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let id = id.into_inner();
    webhooks::redeliver(&state, auth.id(), id).await?;
    let mut conn = state.db.conn().await?;
    let delivery = webhook_deliveries::find_for_user(conn.exec(), id, auth.id())
        .await?
        .ok_or_else(|| {
            crate::workflows::error::FlowError::not_found("Webhook delivery not found")
        })?;
    Ok(HttpResponse::Accepted().json(WebhookDeliveryView::from(delivery)))
}

/// Sends a `webhook.test` delivery to the caller's URL at once and says how it went.
#[utoipa::path(
    tag = "notifications",
    security(("bearer" = [])),
    responses(
        (status = 200, body = WebhookTestResult),
        (status = 422, body = crate::http::error::ErrorBody, description = "No webhook URL configured"),
    )
)]
#[post("/api/notifications/webhook/test")]
pub async fn test(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
) -> ApiResult<HttpResponse> {
    let outcome = webhooks::send_test(&state, auth.id()).await?;
    Ok(HttpResponse::Ok().json(WebhookTestResult {
        delivered: outcome.delivered,
        status_code: outcome.status_code,
        duration_ms: outcome.duration_ms,
        error: outcome.error,
    }))
}

/// Mounts the webhook deliveries and the test delivery.
/// The query of the catch-up.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventFeedQuery {
    /// An event's `id` (as its webhook carried it): only the events after it.
    pub after: Option<String>,
    /// Only events of this type (one of the 16).
    #[serde(rename = "type")]
    #[param(rename = "type")]
    pub event_type: Option<String>,
    /// RFC 3339: only events recorded at or after this instant.
    pub since: Option<String>,
    /// Page number, from 1.
    pub page: Option<i64>,
    /// Items per page, 1 to 100.
    pub size: Option<i64>,
}

/// One event, exactly as its webhook delivers it (same `id`: de-duplicate by it).
#[derive(Serialize, ToSchema)]
pub struct CaughtUpEvent {
    /// The `webhook-id` of its delivery.
    pub id: String,
    /// One of the 18 event types.
    #[serde(rename = "type")]
    pub event_type: String,
    pub created_at: String,
    /// The resource as the REST API shows it to the caller.
    #[schema(value_type = Object)]
    pub data: Value,
}

/// A page of the caller's events, oldest first.
#[derive(Serialize, ToSchema)]
pub struct CaughtUpEventPage {
    pub items: Vec<CaughtUpEvent>,
    pub total: i64,
    pub page: i64,
    pub size: i64,
    pub pages: i64,
}

/// The webhook events meant for the caller, oldest first, for a receiver to catch up on what
/// it missed: every event of the last 30 days while the caller has a webhook address,
/// delivered or not (an endpoint switched off still collects them). Each is the body its
/// webhook carries, with the same `id`.
#[utoipa::path(
    tag = "users",
    params(EventFeedQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, body = CaughtUpEventPage),
        (status = 422, body = crate::http::error::ErrorBody, description = "`after` names no event of the caller's (kept 30 days), `since` is not RFC 3339, `type` is not an event type, or the page is out of bounds"),
    )
)]
#[get("/api/users/me/events")]
pub async fn events(
    state: web::Data<AppState>,
    auth: AuthUser,
    query: web::Query<EventFeedQuery>,
) -> ApiResult<HttpResponse> {
    let q = query.into_inner();
    let page = PageQuery {
        page: q.page,
        size: q.size,
    }
    .validate()?;
    let mut conn = state.db.conn().await?;
    let after = match q.after.as_deref() {
        None => None,
        Some(id) => Some(
            webhook_deliveries::row_of_message(conn.exec(), auth.id(), id)
                .await?
                .ok_or_else(|| {
                    ApiError::invalid_field(
                        "after",
                        "no event of yours has this id (events are kept 30 days)",
                    )
                })?,
        ),
    };
    let since = q
        .since
        .as_deref()
        .map(|s| {
            DateTime::parse_from_rfc3339(s)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|_| ApiError::invalid_field("since", "must be an RFC 3339 date and time"))
        })
        .transpose()?;
    let event_type = q.event_type.as_deref();
    if event_type.is_some_and(|t| !webhooks::EVENT_TYPES.contains(&t)) {
        return Err(ApiError::invalid_field(
            "type",
            "must be one of the 18 event types",
        ));
    }
    let filter = webhook_deliveries::FeedFilter {
        user_id: auth.id(),
        after,
        event_type,
        since,
    };
    let bodies = webhook_deliveries::feed(conn.exec(), filter, page.limit(), page.offset()).await?;
    let total = webhook_deliveries::feed_count(conn.exec(), filter).await?;
    let items = bodies
        .iter()
        .map(|body| {
            let v: Value = serde_json::from_str(body)?;
            Ok(CaughtUpEvent {
                id: v["id"].as_str().unwrap_or_default().to_owned(),
                event_type: v["type"].as_str().unwrap_or_default().to_owned(),
                created_at: v["created_at"].as_str().unwrap_or_default().to_owned(),
                data: v["data"].clone(),
            })
        })
        .collect::<Result<Vec<_>, serde_json::Error>>()
        .map_err(|e| ApiError::internal(anyhow::anyhow!("a stored webhook body: {e}")))?;
    let p = Paginated::new(items, total, page);
    Ok(HttpResponse::Ok().json(CaughtUpEventPage {
        items: p.items,
        total: p.total,
        page: p.page,
        size: p.size,
        pages: p.pages,
    }))
}

pub fn mount(cfg: &mut utoipa_actix_web::service_config::ServiceConfig) {
    cfg.service(list)
        .service(redeliver)
        .service(test)
        .service(events);
}
