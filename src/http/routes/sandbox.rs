//! `/api/sandbox/*`: the processor sandbox's controls (DESIGN §9), mounted always and
//! answering 404 unless the sandbox is the processor (no `PROCESSOR_SECRET_KEY`). Each answers
//! the processor object it changed, as the processor shows it.
//!
//! No authentication: the sandbox holds no real money and exists for local use and outside
//! test scripts, which play the card holder, the banks and the connected accounts here. A
//! deployment with a real processor has no sandbox, so these routes can do nothing there.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, get, post, web};
use serde::Deserialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::integrations::processor::SandboxHandle;
use crate::integrations::standins::processor::{
    DisputeOutcome, DisputeUpdate, FailureSpec, Operation, PayoutOutcome, SandboxError,
};
use crate::state::AppState;

/// A processor object (payment intent, charge, dispute, transfer, payout, account, balance,
/// event) in the processor's own shape.
#[derive(ToSchema)]
#[schema(value_type = Object)]
pub struct ProcessorObject(pub Value);

#[derive(Deserialize, ToSchema)]
pub struct ConfirmRequest {
    /// `pm_card_visa` (authorised), `pm_card_chargeDeclined` (declined),
    /// `pm_card_authenticationRequired` (requires action), or a saved payment method id.
    #[schema(example = "pm_card_visa")]
    pub payment_method: String,
}

#[derive(Deserialize, ToSchema)]
pub struct BalanceRequest {
    /// The platform's available balance, in minor units.
    #[schema(example = 0)]
    pub available: i64,
}

#[derive(Deserialize, ToSchema)]
pub struct DisputeRequest {
    /// The card holder's reason (default `fraudulent`).
    #[schema(example = "fraudulent")]
    pub reason: Option<String>,
}

#[derive(Deserialize, ToSchema)]
pub struct DisputeUpdateRequest {
    /// `under_review` (evidence submitted) or `needs_response`.
    #[schema(example = "under_review")]
    pub status: String,
}

#[derive(Deserialize, ToSchema)]
pub struct DisputeCloseRequest {
    /// `won` (the money returns) or `lost` (the card holder keeps it).
    #[schema(example = "lost")]
    pub outcome: String,
}

#[derive(Deserialize, ToSchema)]
pub struct PayoutRequest {
    /// The connected account (`acct_…`).
    pub account: String,
    /// Minor units.
    #[schema(example = 10000)]
    pub amount: i64,
    /// `paid` or `failed`.
    #[schema(example = "paid")]
    pub outcome: String,
}

#[derive(Deserialize, ToSchema)]
pub struct AccountUpdateRequest {
    pub charges_enabled: Option<bool>,
    pub payouts_enabled: Option<bool>,
}

#[derive(Deserialize, ToSchema)]
pub struct FailureRequest {
    /// The processor call to fail: `capture`, `transfer`, `transfer_reversal`, `refund`,
    /// `create_payment_intent`, or any other name the ledger's `calls` shows.
    #[schema(example = "transfer")]
    pub operation: String,
    /// How many of the next calls fail (0 clears).
    #[schema(example = 1)]
    pub count: u32,
    /// HTTP status of the failure (default 500).
    pub status: Option<u16>,
    /// The error's `code` (e.g. `balance_insufficient`).
    pub code: Option<String>,
}

fn sandbox(state: &AppState) -> ApiResult<&SandboxHandle> {
    state.processor.sandbox.as_ref().ok_or_else(|| {
        ApiError::not_found("The processor sandbox is not running: a real processor is configured")
    })
}

impl From<SandboxError> for ApiError {
    fn from(err: SandboxError) -> Self {
        if err.status == 404 {
            return ApiError::not_found(err.message);
        }
        let status = StatusCode::from_u16(err.status).unwrap_or(StatusCode::BAD_REQUEST);
        let code = err.code.as_deref().unwrap_or(err.kind).to_uppercase();
        ApiError::new(status, code, err.message)
    }
}

fn object(value: Value) -> HttpResponse {
    HttpResponse::Ok().json(value)
}

/// Plays the customer: confirms a payment intent with a test card and sends the events the
/// processor sends (authorised: `payment_intent.amount_capturable_updated`; declined:
/// `payment_intent.payment_failed`; authentication: `payment_intent.requires_action`).
#[utoipa::path(
    tag = "sandbox",
    params(("id" = String, Path, description = "Payment intent id")),
    request_body = ConfirmRequest,
    responses(
        (status = 200, body = ProcessorObject, description = "The payment intent"),
        (status = 400, body = ErrorBody, description = "The intent cannot be confirmed in its state"),
        (status = 404, body = ErrorBody),
    )
)]
#[post("/api/sandbox/payment_intents/{id}/confirm")]
pub async fn confirm_payment_intent(
    state: web::Data<AppState>,
    id: web::Path<String>,
    body: web::Json<ConfirmRequest>,
) -> ApiResult<HttpResponse> {
    let intent = sandbox(&state)?
        .confirm_payment_intent(&id, &body.payment_method)
        .await?;
    Ok(object(intent))
}

/// The customer abandons the payment: the intent is cancelled (`payment_intent.canceled`).
#[utoipa::path(
    tag = "sandbox",
    params(("id" = String, Path, description = "Payment intent id")),
    responses(
        (status = 200, body = ProcessorObject, description = "The payment intent"),
        (status = 400, body = ErrorBody, description = "Already succeeded or cancelled"),
        (status = 404, body = ErrorBody),
    )
)]
#[post("/api/sandbox/payment_intents/{id}/cancel")]
pub async fn cancel_payment_intent(
    state: web::Data<AppState>,
    id: web::Path<String>,
) -> ApiResult<HttpResponse> {
    Ok(object(sandbox(&state)?.cancel_payment_intent(&id).await?))
}

/// Sets the platform's available balance (what transfers draw on).
#[utoipa::path(
    tag = "sandbox",
    request_body = BalanceRequest,
    responses(
        (status = 200, body = ProcessorObject, description = "The balance"),
        (status = 404, body = ErrorBody),
    )
)]
#[post("/api/sandbox/balance")]
pub async fn set_balance(
    state: web::Data<AppState>,
    body: web::Json<BalanceRequest>,
) -> ApiResult<HttpResponse> {
    Ok(object(sandbox(&state)?.set_balance(body.available).await?))
}

/// Opens a chargeback on an authorised or captured charge (`charge.dispute.created`).
#[utoipa::path(
    tag = "sandbox",
    params(("id" = String, Path, description = "Charge id")),
    request_body = DisputeRequest,
    responses(
        (status = 200, body = ProcessorObject, description = "The dispute"),
        (status = 400, body = ErrorBody, description = "Declined or already disputed"),
        (status = 404, body = ErrorBody),
    )
)]
#[post("/api/sandbox/charges/{id}/dispute")]
pub async fn dispute_charge(
    state: web::Data<AppState>,
    id: web::Path<String>,
    body: web::Json<DisputeRequest>,
) -> ApiResult<HttpResponse> {
    let reason = body.reason.as_deref().unwrap_or("fraudulent");
    Ok(object(sandbox(&state)?.dispute_charge(&id, reason).await?))
}

/// Moves an open dispute (`charge.dispute.updated`).
#[utoipa::path(
    tag = "sandbox",
    params(("id" = String, Path, description = "Dispute id")),
    request_body = DisputeUpdateRequest,
    responses(
        (status = 200, body = ProcessorObject, description = "The dispute"),
        (status = 400, body = ErrorBody, description = "The dispute is closed"),
        (status = 404, body = ErrorBody),
    )
)]
#[post("/api/sandbox/disputes/{id}/update")]
pub async fn update_dispute(
    state: web::Data<AppState>,
    id: web::Path<String>,
    body: web::Json<DisputeUpdateRequest>,
) -> ApiResult<HttpResponse> {
    let handle = sandbox(&state)?;
    let update = DisputeUpdate::parse(&body.status).ok_or_else(|| {
        ApiError::invalid_field("status", "must be `under_review` or `needs_response`")
    })?;
    Ok(object(handle.update_dispute(&id, update).await?))
}

/// Closes a dispute as won or lost (`charge.dispute.closed`).
#[utoipa::path(
    tag = "sandbox",
    params(("id" = String, Path, description = "Dispute id")),
    request_body = DisputeCloseRequest,
    responses(
        (status = 200, body = ProcessorObject, description = "The dispute"),
        (status = 400, body = ErrorBody, description = "Already closed"),
        (status = 404, body = ErrorBody),
    )
)]
#[post("/api/sandbox/disputes/{id}/close")]
pub async fn close_dispute(
    state: web::Data<AppState>,
    id: web::Path<String>,
    body: web::Json<DisputeCloseRequest>,
) -> ApiResult<HttpResponse> {
    let handle = sandbox(&state)?;
    let outcome = DisputeOutcome::parse(&body.outcome)
        .ok_or_else(|| ApiError::invalid_field("outcome", "must be `won` or `lost`"))?;
    Ok(object(handle.close_dispute(&id, outcome).await?))
}

/// Fails a transfer: its money returns to the platform balance (`transfer.failed`).
#[utoipa::path(
    tag = "sandbox",
    params(("id" = String, Path, description = "Transfer id")),
    responses(
        (status = 200, body = ProcessorObject, description = "The transfer"),
        (status = 400, body = ErrorBody, description = "Already failed"),
        (status = 404, body = ErrorBody),
    )
)]
#[post("/api/sandbox/transfers/{id}/fail")]
pub async fn fail_transfer(
    state: web::Data<AppState>,
    id: web::Path<String>,
) -> ApiResult<HttpResponse> {
    Ok(object(sandbox(&state)?.fail_transfer(&id).await?))
}

/// A connected account's payout to its bank (`payout.paid` or `payout.failed`, carrying the
/// account).
#[utoipa::path(
    tag = "sandbox",
    request_body = PayoutRequest,
    responses(
        (status = 200, body = ProcessorObject, description = "The payout"),
        (status = 404, body = ErrorBody, description = "No such account"),
    )
)]
#[post("/api/sandbox/payouts")]
pub async fn payout(
    state: web::Data<AppState>,
    body: web::Json<PayoutRequest>,
) -> ApiResult<HttpResponse> {
    let handle = sandbox(&state)?;
    let outcome = PayoutOutcome::parse(&body.outcome)
        .ok_or_else(|| ApiError::invalid_field("outcome", "must be `paid` or `failed`"))?;
    if body.amount <= 0 {
        return Err(ApiError::invalid_field("amount", "must be positive"));
    }
    Ok(object(
        handle.payout(&body.account, body.amount, outcome).await?,
    ))
}

/// Changes a connected account's capabilities (`account.updated`).
#[utoipa::path(
    tag = "sandbox",
    params(("id" = String, Path, description = "Connected account id")),
    request_body = AccountUpdateRequest,
    responses(
        (status = 200, body = ProcessorObject, description = "The account"),
        (status = 404, body = ErrorBody),
    )
)]
#[post("/api/sandbox/accounts/{id}/update")]
pub async fn update_account(
    state: web::Data<AppState>,
    id: web::Path<String>,
    body: web::Json<AccountUpdateRequest>,
) -> ApiResult<HttpResponse> {
    let account = sandbox(&state)?
        .update_account(&id, body.charges_enabled, body.payouts_enabled)
        .await?;
    Ok(object(account))
}

/// The account holder finishes onboarding: details submitted, charges and payouts enabled
/// (`account.updated`).
#[utoipa::path(
    tag = "sandbox",
    params(("id" = String, Path, description = "Connected account id")),
    responses(
        (status = 200, body = ProcessorObject, description = "The account"),
        (status = 404, body = ErrorBody),
    )
)]
#[post("/api/sandbox/accounts/{id}/complete-onboarding")]
pub async fn complete_onboarding(
    state: web::Data<AppState>,
    id: web::Path<String>,
) -> ApiResult<HttpResponse> {
    Ok(object(sandbox(&state)?.complete_onboarding(&id).await?))
}

/// What the processor holds: per intent authorised, captured, refunded (and captures
/// counted); per transfer amount, destination, reversed, failed; refunds, disputes,
/// payouts; the platform balance; the calls the service made, per operation.
#[utoipa::path(
    tag = "sandbox",
    responses(
        (status = 200, body = ProcessorObject, description = "The ledger"),
        (status = 404, body = ErrorBody),
    )
)]
#[get("/api/sandbox/ledger")]
pub async fn ledger(state: web::Data<AppState>) -> ApiResult<HttpResponse> {
    Ok(object(sandbox(&state)?.ledger()))
}

/// Makes the next calls of one processor operation fail without changing anything, so a
/// retry with the same idempotency key then succeeds.
#[utoipa::path(
    tag = "sandbox",
    request_body = FailureRequest,
    responses(
        (status = 200, body = ProcessorObject, description = "The failure now armed"),
        (status = 400, body = ErrorBody, description = "Status is not an HTTP error status"),
        (status = 404, body = ErrorBody),
    )
)]
#[post("/api/sandbox/failures")]
pub async fn inject_failure(
    state: web::Data<AppState>,
    body: web::Json<FailureRequest>,
) -> ApiResult<HttpResponse> {
    let handle = sandbox(&state)?;
    let body = body.into_inner();
    let operation = Operation::parse(&body.operation).ok_or_else(|| {
        ApiError::invalid_field("operation", "not an operation the sandbox knows")
    })?;
    let spec = FailureSpec {
        operation,
        count: body.count,
        status: body.status,
        code: body.code,
    };
    Ok(object(handle.inject_failure(spec).await?))
}

/// Delivers a stored event once more (same id and body, fresh signature): a duplicate
/// delivery, as the processor may make.
#[utoipa::path(
    tag = "sandbox",
    params(("id" = String, Path, description = "Event id")),
    responses(
        (status = 200, body = ProcessorObject, description = "The event record with every delivery attempt"),
        (status = 404, body = ErrorBody),
    )
)]
#[post("/api/sandbox/events/{id}/resend")]
pub async fn resend_event(
    state: web::Data<AppState>,
    id: web::Path<String>,
) -> ApiResult<HttpResponse> {
    Ok(object(sandbox(&state)?.resend_event(&id).await?))
}

/// Every event the sandbox sent, oldest first: type, account, the exact body delivered and
/// each delivery attempt (signature, HTTP status or error).
#[utoipa::path(
    tag = "sandbox",
    responses(
        (status = 200, body = [ProcessorObject], description = "The events"),
        (status = 404, body = ErrorBody),
    )
)]
#[get("/api/sandbox/events")]
pub async fn events(state: web::Data<AppState>) -> ApiResult<HttpResponse> {
    Ok(HttpResponse::Ok().json(sandbox(&state)?.events()))
}

/// Mounts the processor sandbox controls (404 unless the sandbox is the processor).
pub fn mount(cfg: &mut utoipa_actix_web::service_config::ServiceConfig) {
    cfg.service(confirm_payment_intent)
        .service(cancel_payment_intent)
        .service(set_balance)
        .service(dispute_charge)
        .service(update_dispute)
        .service(close_dispute)
        .service(fail_transfer)
        .service(payout)
        .service(update_account)
        .service(complete_onboarding)
        .service(ledger)
        .service(inject_failure)
        .service(resend_event)
        .service(events);
}
