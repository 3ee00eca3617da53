//! Payments under `/api/payments/…`: funding a milestone, release, refund, the processor's
//! webhook receiver, and the views of payments for companies, experts and administrators.

use actix_web::{HttpRequest, HttpResponse, get, post, web};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::domain::payment::PaymentStatus;
use crate::domain::text::{RefundReason, TextError};
use crate::domain::user::Role;
use crate::http::auth::{AdminUser, AuthUser, CsrfChecked};
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::pagination::{PageQuery, Paginated, state_filter};
use crate::http::routes::escrow_views::{PaymentView, payment_view, payment_views};
use crate::integrations::processor::webhook::SIGNATURE_HEADER;
use crate::state::AppState;
use crate::store::payments::{self, Payment, PaymentFilter};
use crate::store::projects;
use crate::workflows::escrow::{self, RefundCause, Release};
use crate::workflows::processor_events::{self, ReceiveError, Refused};

/// A payment and, for the company paying it, the secret its card form confirms with.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct PaymentWithSecret {
    #[serde(flatten)]
    pub payment: PaymentView,
    /// Only for the paying company.
    pub client_secret: Option<String>,
}

/// The released payment, and the next milestone's payment when one was prepared.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct ReleaseResponse {
    #[serde(flatten)]
    pub payment: PaymentView,
    pub next_payment: Option<PaymentWithSecret>,
}

#[derive(Deserialize, ToSchema)]
pub struct InitiateRequest {
    pub project_id: i64,
    pub milestone_id: i64,
}

#[derive(Deserialize, ToSchema)]
pub struct PaymentRequest {
    pub payment_id: i64,
}

#[derive(Deserialize, ToSchema)]
pub struct RefundRequest {
    pub payment_id: i64,
    /// Why the company gets its money back (kept with the payment).
    #[schema(min_length = 1, max_length = 1000)]
    pub reason: Option<String>,
}

/// Who may see a payment: its company, its expert and administrators.
fn may_see(auth: &AuthUser, y: &Payment) -> bool {
    auth.has_role(Role::Admin) || y.company_id == Some(auth.id()) || y.expert_id == Some(auth.id())
}

async fn visible_payment(state: &AppState, auth: &AuthUser, id: i64) -> ApiResult<Payment> {
    let mut conn = state.db.conn().await?;
    payments::find(conn.exec(), id)
        .await?
        .filter(|y| may_see(auth, y))
        .ok_or_else(|| ApiError::not_found("No such payment"))
}

/// The client secret of the payment's intent, asked of the processor.
async fn client_secret(state: &AppState, y: &Payment) -> Option<String> {
    let intent_id = y.processor_payment_intent_id.as_deref()?;
    match state
        .processor
        .client
        .retrieve_payment_intent(intent_id)
        .await
    {
        Ok(i) => i.client_secret,
        Err(error) => {
            tracing::warn!(payment_id = y.id, %error, "client secret not available");
            None
        }
    }
}

/// Payment `y` shown as `payment`, with its secret for the paying company.
async fn with_secret(state: &AppState, y: &Payment, payment: PaymentView) -> PaymentWithSecret {
    let client_secret = if y.status == PaymentStatus::Pending {
        client_secret(state, y).await
    } else {
        None
    };
    PaymentWithSecret {
        payment,
        client_secret,
    }
}

async fn release_response(state: &AppState, r: Release) -> ReleaseResponse {
    let next_payment = match r.next_payment {
        // The money moved already: nothing more is read before answering.
        Some(next) => Some(with_secret(state, &next, next.clone().into()).await),
        None => None,
    };
    ReleaseResponse {
        payment: r.payment.into(),
        next_payment,
    }
}

/// The processor's webhook receiver. The signature (header `Stripe-Signature`) is checked
/// first: missing or wrong → 400 and nothing is stored. A new event is stored by its id (with
/// the other receipts waiting, in one commit) and answered once stored; it is applied
/// afterwards, in its payment's actor (with other events' in one transaction when several
/// wait). A repeated id, or an event type the service does not use, is answered 200 and
/// changes nothing. An event that could not be stored is answered 503, for the processor to
/// deliver it again.
#[utoipa::path(
    tag = "payments",
    request_body(content = Object, description = "The processor's event, as signed"),
    responses(
        (status = 200, description = "Stored (or known already)"),
        (status = 400, body = ErrorBody, description = "INVALID_SIGNATURE or INVALID_EVENT"),
        (status = 503, body = ErrorBody, description = "UNAVAILABLE: not stored; deliver it again"),
    )
)]
#[post("/api/payments/webhooks/processor")]
pub async fn webhook(
    state: web::Data<AppState>,
    req: HttpRequest,
    crate::http::raw_body::SignedBody(body): crate::http::raw_body::SignedBody,
) -> ApiResult<HttpResponse> {
    let signature = req
        .headers()
        .get(SIGNATURE_HEADER)
        .and_then(|v| v.to_str().ok());
    match processor_events::receive(&state, signature, &body).await {
        Ok(true) => Ok(HttpResponse::Ok().json(serde_json::json!({"received": true}))),
        Ok(false) => {
            Ok(HttpResponse::Ok().json(serde_json::json!({"received": true, "duplicate": true})))
        }
        Err(ReceiveError::Refused(refused)) => {
            tracing::info!(reason = %refused, "processor webhook refused");
            let code = match refused {
                Refused::NotAnEvent => "INVALID_EVENT",
                _ => "INVALID_SIGNATURE",
            };
            Err(ApiError::bad_request(
                code,
                "The webhook is not a validly signed processor event",
            ))
        }
        Err(ReceiveError::Flow(e)) => Err(e.into()),
    }
}

/// The company funds a milestone waiting for its payment: a `pending` payment (payout
/// `pending`) with its payment intent (manual capture), `milestone_id` saved. The milestone
/// must have no open payment and the expert's payout account must be `active`.
#[utoipa::path(
    tag = "payments",
    request_body = InitiateRequest,
    security(("bearer" = [])),
    responses(
        (status = 201, body = PaymentWithSecret),
        (status = 400, body = ErrorBody, description = "PROCESSOR_CONNECT_NOT_ACTIVE"),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "PAYMENT_PENDING"),
        (status = 503, body = ErrorBody),
    )
)]
#[post("/api/payments/initiate")]
pub async fn initiate(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    body: web::Json<InitiateRequest>,
) -> ApiResult<HttpResponse> {
    let y = escrow::initiate(
        &state,
        auth.id(),
        auth.has_role(Role::Admin),
        body.project_id,
        body.milestone_id,
    )
    .await?;
    let view = payment_view(&state, y.clone()).await?;
    Ok(HttpResponse::Created().json(with_secret(&state, &y, view).await))
}

/// What both release routes answer.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code, clippy::large_enum_variant)] // Describes the answers for OpenAPI; never built.
enum ReleaseAnswers {
    #[response(
        status = 200,
        description = "The released payment (and the next one's intent)"
    )]
    Released(#[to_schema] ReleaseResponse),
    #[response(
        status = 403,
        description = "Not the project's company, or the CSRF check failed"
    )]
    Forbidden(ErrorBody),
    #[response(
        status = 404,
        description = "Unknown payment, or not visible to the caller"
    )]
    NotFound(ErrorBody),
    #[response(status = 409, description = "PAYMENT_NOT_HELD")]
    NotHeld(ErrorBody),
    #[response(
        status = 503,
        description = "The processor is unavailable; nothing was released"
    )]
    Unavailable(ErrorBody),
}

/// Releases a held payment: capture, commission from the expert's level, transfer to the
/// expert's connected account (or deferred), the milestone approved and the next one's
/// payment prepared.
#[utoipa::path(
    tag = "payments",
    request_body = PaymentRequest,
    security(("bearer" = [])),
    responses(ReleaseAnswers)
)]
#[post("/api/payments/release")]
pub async fn release(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    body: web::Json<PaymentRequest>,
) -> ApiResult<HttpResponse> {
    release_as(&state, &auth, body.payment_id, false).await
}

/// Like `release`, refused up front unless the expert's payout account is `active`; answers
/// the next milestone's payment with its `client_secret`.
#[utoipa::path(
    tag = "payments",
    request_body = PaymentRequest,
    security(("bearer" = [])),
    responses(
        ReleaseAnswers,
        (status = 400, body = ErrorBody, description = "PROCESSOR_CONNECT_NOT_ACTIVE"),
    )
)]
#[post("/api/payments/release-and-charge-next")]
pub async fn release_and_charge_next(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    body: web::Json<PaymentRequest>,
) -> ApiResult<HttpResponse> {
    release_as(&state, &auth, body.payment_id, true).await
}

async fn release_as(
    state: &AppState,
    auth: &AuthUser,
    payment_id: i64,
    charge_next: bool,
) -> ApiResult<HttpResponse> {
    let r = escrow::release_payment(
        state,
        auth.id(),
        auth.has_role(Role::Admin),
        payment_id,
        charge_next,
    )
    .await?;
    Ok(HttpResponse::Ok().json(release_response(state, r).await))
}

/// Asks the processor about a `pending` payment: authorised → `held` (held_at, the charge,
/// the milestone funded); cancelled → `failed`.
#[utoipa::path(
    tag = "payments",
    request_body = PaymentRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, body = PaymentView),
        (status = 404, body = ErrorBody),
        (status = 503, body = ErrorBody),
    )
)]
#[post("/api/payments/sync-status")]
pub async fn sync_status(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    body: web::Json<PaymentRequest>,
) -> ApiResult<HttpResponse> {
    visible_payment(&state, &auth, body.payment_id).await?;
    let y = escrow::sync_status(&state, body.payment_id).await?;
    Ok(HttpResponse::Ok().json(PaymentView::from(y)))
}

/// An optional refund reason (blank is none); a wrong length in the words it has always used.
fn refund_reason(reason: Option<String>) -> ApiResult<Option<RefundReason>> {
    RefundReason::parse_optional(reason).map_err(|refusal| {
        let message = match refusal {
            TextError::Length { max, .. } => format!("At most {max} characters"),
            refusal => refusal.to_string(),
        };
        ApiError::invalid_field("reason", message)
    })
}

/// Administrators refund a payment to the company. A transferred payment's transfer is
/// reversed first; when the reversal fails nothing is refunded (409 `REVERSAL_FAILED`).
#[utoipa::path(
    tag = "payments",
    request_body = RefundRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, body = PaymentView),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "PAYMENT_NOT_REFUNDABLE or REVERSAL_FAILED"),
        (status = 503, body = ErrorBody),
    )
)]
#[post("/api/payments/refund")]
pub async fn refund(
    state: web::Data<AppState>,
    _admin: AdminUser,
    body: web::Json<RefundRequest>,
) -> ApiResult<HttpResponse> {
    let body = body.into_inner();
    let reason = refund_reason(body.reason)?;
    let y = escrow::refund_with_reason(&state, body.payment_id, RefundCause::Admin, reason).await?;
    Ok(HttpResponse::Ok().json(PaymentView::from(y)))
}

#[derive(Deserialize, IntoParams)]
pub struct HistoryQuery {
    pub page: Option<i64>,
    pub size: Option<i64>,
    /// `pending`, `held`, `released`, `refunded`, `failed`, `disputed`.
    pub status: Option<String>,
}

/// The caller's payments by their active role: what a company paid, what an expert is paid
/// (administrators: every payment). Newest first.
#[utoipa::path(
    tag = "payments",
    params(HistoryQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, body = Paginated<PaymentView>),
        (status = 422, body = ErrorBody),
    )
)]
#[get("/api/payments/history")]
pub async fn history(
    state: web::Data<AppState>,
    auth: AuthUser,
    query: web::Query<HistoryQuery>,
) -> ApiResult<HttpResponse> {
    let q = query.into_inner();
    let page = PageQuery {
        page: q.page,
        size: q.size,
    }
    .validate()?;
    let Some(status) = state_filter(q.status.as_deref()) else {
        return Ok(HttpResponse::Ok().json(Paginated::<PaymentView>::empty(page)));
    };
    let mut filter = PaymentFilter {
        status,
        ..PaymentFilter::default()
    };
    match auth.user.active_role {
        Role::Empresa => filter.company_id = Some(auth.id()),
        Role::Experto => filter.expert_id = Some(auth.id()),
        Role::Admin => {}
    }
    let mut conn = state.db.conn().await?;
    let (items, total) = payments::list(conn.exec(), &filter, page.limit(), page.offset()).await?;
    drop(conn);
    let items = payment_views(&state, items).await?;
    Ok(HttpResponse::Ok().json(Paginated::new(items, total, page)))
}

/// The payments of a project, oldest first: its company, its expert and administrators.
#[utoipa::path(
    tag = "payments",
    params(("project_id" = i64, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = Vec<PaymentView>),
        (status = 404, body = ErrorBody),
    )
)]
#[get("/api/payments/project/{project_id}")]
pub async fn by_project(
    state: web::Data<AppState>,
    auth: AuthUser,
    path: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let project_id = path.into_inner();
    let mut conn = state.db.conn().await?;
    let p = projects::find(conn.exec(), project_id)
        .await?
        .filter(|p| {
            auth.has_role(Role::Admin)
                || p.company_id == Some(auth.id())
                || p.expert_id == Some(auth.id())
        })
        .ok_or_else(|| ApiError::not_found("No such project"))?;
    let items = payments::list_for_project(conn.exec(), p.id).await?;
    drop(conn);
    Ok(HttpResponse::Ok().json(payment_views(&state, items).await?))
}

#[derive(Serialize, Deserialize, ToSchema)]
pub struct ReceiptView {
    pub payment_id: i64,
    pub receipt_url: String,
}

/// The processor's receipt of a payment whose money was authorised.
#[utoipa::path(
    tag = "payments",
    params(("payment_id" = i64, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = ReceiptView),
        (status = 404, body = ErrorBody, description = "Unknown, not visible, or no receipt yet"),
    )
)]
#[get("/api/payments/{payment_id}/receipt")]
pub async fn receipt(
    state: web::Data<AppState>,
    auth: AuthUser,
    path: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let y = visible_payment(&state, &auth, path.into_inner()).await?;
    let mut url = y.receipt_url.clone();
    if url.is_none()
        && let Some(charge) = y.processor_charge_id.as_deref()
    {
        url = state
            .processor
            .client
            .retrieve_charge(charge)
            .await
            .ok()
            .and_then(|c| c.receipt_url);
    }
    let receipt_url = url.ok_or_else(|| ApiError::not_found("This payment has no receipt yet"))?;
    Ok(HttpResponse::Ok().json(ReceiptView {
        payment_id: y.id,
        receipt_url,
    }))
}

#[derive(Serialize, Deserialize, ToSchema)]
pub struct IntentView {
    pub id: String,
    pub payment_id: i64,
    /// The processor's status (`requires_payment_method`, `requires_capture`, …).
    pub status: String,
    pub amount: f64,
    pub amount_capturable: f64,
    pub currency: String,
    /// Only for the paying company.
    pub client_secret: Option<String>,
}

/// An intent's details from the processor, for the payment's company, expert and
/// administrators; the `client_secret` only to the company that pays.
#[utoipa::path(
    tag = "payments",
    params(("payment_intent_id" = String, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = IntentView),
        (status = 404, body = ErrorBody),
        (status = 503, body = ErrorBody),
    )
)]
#[get("/api/payments/intent/{payment_intent_id}")]
pub async fn intent(
    state: web::Data<AppState>,
    auth: AuthUser,
    path: web::Path<String>,
) -> ApiResult<HttpResponse> {
    let intent_id = path.into_inner();
    let y = {
        let mut conn = state.db.conn().await?;
        payments::find_by_intent(conn.exec(), &intent_id)
            .await?
            .filter(|y| may_see(&auth, y))
            .ok_or_else(|| ApiError::not_found("No such payment intent"))?
    };
    let i = state
        .processor
        .client
        .retrieve_payment_intent(&intent_id)
        .await
        .map_err(|e| escrow::processor_failure("report the payment", &e))?;
    use crate::domain::money::minor_to_number;
    Ok(HttpResponse::Ok().json(IntentView {
        id: i.id,
        payment_id: y.id,
        status: i.status,
        amount: minor_to_number(i.amount),
        amount_capturable: minor_to_number(i.amount_capturable),
        currency: i.currency,
        client_secret: i.client_secret.filter(|_| y.company_id == Some(auth.id())),
    }))
}

#[derive(Serialize, Deserialize, ToSchema)]
pub struct ConfirmInitialResponse {
    pub message: String,
    /// The project's status afterwards (`in_progress` once the first payment is held).
    pub project_status: String,
    pub payment: PaymentView,
}

/// The company confirms the project's first payment after paying: the processor is asked
/// and, once the money is authorised, the payment is `held` and the project `in_progress`.
#[utoipa::path(
    tag = "payments",
    params(("project_id" = i64, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = ConfirmInitialResponse),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "No payment to confirm"),
        (status = 503, body = ErrorBody),
    )
)]
#[post("/api/payments/confirm-initial/{project_id}")]
pub async fn confirm_initial(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    path: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let project_id = path.into_inner();
    let first = {
        let mut conn = state.db.conn().await?;
        let p = projects::find(conn.exec(), project_id)
            .await?
            .ok_or_else(|| ApiError::not_found("No such project"))?;
        if p.company_id != Some(auth.id()) && !auth.has_role(Role::Admin) {
            return Err(ApiError::forbidden(
                "Only the project's company confirms its payment",
            ));
        }
        payments::list_for_project(conn.exec(), project_id)
            .await?
            .into_iter()
            .find(|y| matches!(y.status, PaymentStatus::Pending | PaymentStatus::Held))
            .ok_or_else(|| {
                ApiError::conflict("NO_PAYMENT", "The project has no payment to confirm")
            })?
    };
    let y = escrow::sync_status(&state, first.id).await?;
    let mut conn = state.db.conn().await?;
    let status = projects::find(conn.exec(), project_id)
        .await?
        .map(|p| p.status.to_string())
        .unwrap_or_default();
    let message = if y.status == PaymentStatus::Held {
        "The payment is held in escrow; the project is under way"
    } else {
        "The payment is not authorised yet"
    };
    Ok(HttpResponse::Ok().json(ConfirmInitialResponse {
        message: message.to_owned(),
        project_status: status,
        payment: y.into(),
    }))
}

/// Administrators retry a transfer: a `held` payment whose payout `failed`, or a `released`
/// one whose payout is `pending`. The expert's payout account must be `active`.
#[utoipa::path(
    tag = "payments",
    params(("payment_id" = i64, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = PaymentView),
        (status = 400, body = ErrorBody, description = "PROCESSOR_CONNECT_NOT_ACTIVE"),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "TRANSFER_NOT_RETRYABLE"),
        (status = 503, body = ErrorBody),
    )
)]
#[post("/api/payments/retry-transfer/{payment_id}")]
pub async fn retry_transfer(
    state: web::Data<AppState>,
    AdminUser(admin): AdminUser,
    path: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let y = escrow::retry_transfer(&state, admin.id(), path.into_inner()).await?;
    Ok(HttpResponse::Ok().json(PaymentView::from(y)))
}

/// One payment: its company, its expert and administrators.
#[utoipa::path(
    tag = "payments",
    params(("payment_id" = i64, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = PaymentView),
        (status = 404, body = ErrorBody),
    )
)]
#[get("/api/payments/{payment_id}")]
pub async fn get_one(
    state: web::Data<AppState>,
    auth: AuthUser,
    path: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let y = visible_payment(&state, &auth, path.into_inner()).await?;
    Ok(HttpResponse::Ok().json(payment_view(&state, y).await?))
}

// ---------------------------------------------------------------------------------------
// Administration
// ---------------------------------------------------------------------------------------

#[derive(Deserialize, IntoParams)]
pub struct AdminPaymentQuery {
    pub page: Option<i64>,
    pub size: Option<i64>,
    pub status: Option<String>,
    pub payout_status: Option<String>,
    pub project_id: Option<i64>,
    pub company_id: Option<i64>,
    pub expert_id: Option<i64>,
}

/// Every payment, newest first, filtered.
#[utoipa::path(
    tag = "admin",
    params(AdminPaymentQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, body = Paginated<PaymentView>),
        (status = 403, body = ErrorBody),
        (status = 422, body = ErrorBody),
    )
)]
#[get("/api/admin/payments")]
pub async fn admin_list(
    state: web::Data<AppState>,
    _admin: AdminUser,
    query: web::Query<AdminPaymentQuery>,
) -> ApiResult<HttpResponse> {
    let q = query.into_inner();
    let page = PageQuery {
        page: q.page,
        size: q.size,
    }
    .validate()?;
    let (Some(status), Some(payout_status)) = (
        state_filter(q.status.as_deref()),
        state_filter(q.payout_status.as_deref()),
    ) else {
        return Ok(HttpResponse::Ok().json(Paginated::<PaymentView>::empty(page)));
    };
    let filter = PaymentFilter {
        company_id: q.company_id,
        expert_id: q.expert_id,
        project_id: q.project_id,
        status,
        payout_status,
    };
    let mut conn = state.db.conn().await?;
    let (items, total) = payments::list(conn.exec(), &filter, page.limit(), page.offset()).await?;
    drop(conn);
    let items = payment_views(&state, items).await?;
    Ok(HttpResponse::Ok().json(Paginated::new(items, total, page)))
}

#[utoipa::path(
    tag = "admin",
    params(("payment_id" = i64, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = PaymentView),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
    )
)]
#[get("/api/admin/payments/{payment_id}")]
pub async fn admin_get(
    state: web::Data<AppState>,
    _admin: AdminUser,
    path: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let mut conn = state.db.conn().await?;
    let y = payments::find(conn.exec(), path.into_inner())
        .await?
        .ok_or_else(|| ApiError::not_found("No such payment"))?;
    drop(conn);
    Ok(HttpResponse::Ok().json(payment_view(&state, y).await?))
}

#[derive(Deserialize, ToSchema, Default)]
pub struct AdminRefundRequest {
    #[schema(min_length = 1, max_length = 1000)]
    pub reason: Option<String>,
}

/// Refunds a payment (as `POST /api/payments/refund`).
#[utoipa::path(
    tag = "admin",
    params(("payment_id" = i64, Path)),
    request_body(content = AdminRefundRequest, description = "Optional"),
    security(("bearer" = [])),
    responses(
        (status = 200, body = PaymentView),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "PAYMENT_NOT_REFUNDABLE or REVERSAL_FAILED"),
        (status = 503, body = ErrorBody),
    )
)]
#[post("/api/admin/payments/{payment_id}/refund")]
pub async fn admin_refund(
    state: web::Data<AppState>,
    _admin: AdminUser,
    path: web::Path<i64>,
    body: Option<web::Json<AdminRefundRequest>>,
) -> ApiResult<HttpResponse> {
    let reason = refund_reason(body.map(|b| b.into_inner()).unwrap_or_default().reason)?;
    let y =
        escrow::refund_with_reason(&state, path.into_inner(), RefundCause::Admin, reason).await?;
    Ok(HttpResponse::Ok().json(PaymentView::from(y)))
}

#[derive(Deserialize, IntoParams)]
pub struct ReconcileQuery {
    /// Payments untouched for at least this many minutes (0 to 10080, default 60).
    pub older_than_minutes: Option<i64>,
}

/// Compares stale `pending` and `held` payments with the processor and corrects ours; each
/// correction is recorded (`payment.reconciled`) and listed.
#[utoipa::path(
    tag = "admin",
    params(ReconcileQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, body = crate::workflows::escrow_jobs::Reconciliation),
        (status = 403, body = ErrorBody),
        (status = 422, body = ErrorBody),
    )
)]
#[post("/api/admin/payments/reconcile")]
pub async fn admin_reconcile(
    state: web::Data<AppState>,
    _admin: AdminUser,
    query: web::Query<ReconcileQuery>,
) -> ApiResult<HttpResponse> {
    let minutes = query.older_than_minutes.unwrap_or(60);
    if !(0..=10_080).contains(&minutes) {
        return Err(ApiError::invalid_field(
            "older_than_minutes",
            "Between 0 and 10080",
        ));
    }
    let result =
        crate::workflows::escrow_jobs::reconcile(&state, chrono::Duration::minutes(minutes))
            .await?;
    Ok(HttpResponse::Ok().json(result))
}

/// Mounts the processor's webhook (mounted before every other route: see
/// `http::configure`).
pub fn mount_processor_webhook(cfg: &mut utoipa_actix_web::service_config::ServiceConfig) {
    cfg.service(webhook);
}

/// Mounts the payments (the processor's webhook is [`mount_processor_webhook`]):
/// literal paths before `{payment_id}`.
pub fn mount(cfg: &mut utoipa_actix_web::service_config::ServiceConfig) {
    cfg.service(initiate)
        .service(release)
        .service(release_and_charge_next)
        .service(sync_status)
        .service(refund)
        .service(history)
        .service(by_project)
        .service(intent)
        .service(confirm_initial)
        .service(retry_transfer)
        .service(receipt)
        .service(get_one)
        .service(admin_list)
        .service(admin_reconcile)
        .service(admin_get)
        .service(admin_refund);
}
