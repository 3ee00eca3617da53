//! The processor's REST protocol over HTTP: `/v1/…` routes with bearer-key authentication,
//! form-encoded bodies and idempotency keys, plus the two pages a browser would open (hosted
//! onboarding and a receipt).

use actix_web::http::StatusCode;
use actix_web::http::header::{CONTENT_TYPE, LOCATION};
use actix_web::{HttpRequest, HttpResponse, web};
use base64::Engine as _;
use serde_json::Value;

use super::operations::Confirmation;
use super::state::{Operation, Replay, State};
use super::{SandboxError, Shared};
use crate::domain::token::constant_time_eq;
use crate::integrations::processor::client::API_VERSION;
use crate::integrations::processor::form::FormParams;

type Data = web::Data<Shared>;
type Id = web::Path<String>;

pub(crate) fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/v1/payment_intents", web::post().to(create_payment_intent))
        .route(
            "/v1/payment_intents/{id}",
            web::get().to(retrieve_payment_intent),
        )
        .route(
            "/v1/payment_intents/{id}/confirm",
            web::post().to(confirm_payment_intent),
        )
        .route(
            "/v1/payment_intents/{id}/capture",
            web::post().to(capture_payment_intent),
        )
        .route(
            "/v1/payment_intents/{id}/cancel",
            web::post().to(cancel_payment_intent),
        )
        .route("/v1/charges/{id}", web::get().to(retrieve_charge))
        .route("/v1/refunds", web::post().to(create_refund))
        .route("/v1/refunds/{id}", web::get().to(retrieve_refund))
        .route("/v1/transfers", web::post().to(create_transfer))
        .route("/v1/transfers", web::get().to(list_transfers))
        .route("/v1/transfers/{id}", web::get().to(retrieve_transfer))
        .route(
            "/v1/transfers/{id}/reversals",
            web::post().to(create_reversal),
        )
        .route("/v1/accounts", web::post().to(create_account))
        .route("/v1/accounts/{id}", web::get().to(retrieve_account))
        .route("/v1/account_links", web::post().to(create_account_link))
        .route("/v1/customers", web::post().to(create_customer))
        .route("/v1/customers/{id}", web::get().to(retrieve_customer))
        .route("/v1/payment_methods", web::get().to(list_payment_methods))
        .route(
            "/v1/payment_methods/{id}",
            web::get().to(retrieve_payment_method),
        )
        .route(
            "/v1/payment_methods/{id}/attach",
            web::post().to(attach_payment_method),
        )
        .route(
            "/v1/payment_methods/{id}/detach",
            web::post().to(detach_payment_method),
        )
        .route("/v1/balance", web::get().to(retrieve_balance))
        .route("/v1/disputes/{id}", web::get().to(retrieve_dispute))
        .route("/v1/events/{id}", web::get().to(retrieve_event))
        .route(
            "/connect/onboarding/{token}",
            web::get().to(onboarding_page),
        )
        .route("/receipts/payment/{id}", web::get().to(receipt_page));
}

pub(crate) async fn unknown_route(req: HttpRequest) -> HttpResponse {
    let error = SandboxError::missing("route", &format!("{} {}", req.method(), req.path()));
    respond(Err(error), false, None)
}

impl Shared {
    /// The key must be the sandbox's secret key, as a bearer token (or HTTP basic user name,
    /// as `curl -u sk_…:` sends it).
    fn authenticate(&self, req: &HttpRequest) -> Result<(), SandboxError> {
        let header = req
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| {
                SandboxError::unauthorized(
                    "You did not provide an API key. Provide it in the Authorization header, \
                     using Bearer auth (`Authorization: Bearer YOUR_SECRET_KEY`).",
                )
            })?;
        let presented = if let Some(token) = header.strip_prefix("Bearer ") {
            token.trim().to_owned()
        } else if let Some(basic) = header.strip_prefix("Basic ") {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(basic.trim())
                .unwrap_or_default();
            let text = String::from_utf8_lossy(&decoded).into_owned();
            text.split(':').next().unwrap_or_default().to_owned()
        } else {
            String::new()
        };
        if constant_time_eq(presented.as_bytes(), self.secret_key.expose().as_bytes()) {
            Ok(())
        } else {
            // Never echo the key presented.
            Err(SandboxError::unauthorized("Invalid API Key provided."))
        }
    }

    /// One API call: authenticated, counted, subject to injected failures and (POSTs with
    /// an `Idempotency-Key`) answered from the stored answer when the key was seen on this
    /// endpoint before. Events it causes are delivered before it answers.
    async fn call(
        &self,
        req: &HttpRequest,
        op: Operation,
        params: &FormParams,
        rule: impl FnOnce(&mut State) -> Result<Value, SandboxError>,
    ) -> HttpResponse {
        if let Err(error) = self.authenticate(req) {
            return respond(Err(error), false, None);
        }
        let key = req
            .headers()
            .get("idempotency-key")
            .and_then(|v| v.to_str().ok())
            .filter(|_| req.method() == actix_web::http::Method::POST)
            .map(str::to_owned);
        let endpoint = format!("{} {}", req.method(), req.path());
        let fingerprint = fingerprint(params);
        let (answer, replayed, request_id) = {
            let mut state = self.lock();
            state.begin_request(key.as_deref(), true);
            state.count_call(op);
            let request_id = state.request_id().map(str::to_owned);
            let replay = key
                .as_deref()
                .and_then(|k| state.replay(&endpoint, k, &fingerprint));
            match replay {
                Some(Replay::Answer(answer)) => (answer, true, request_id),
                Some(Replay::Mismatch) => {
                    (Err(SandboxError::idempotency_mismatch()), false, request_id)
                }
                None => match state.take_failure(op) {
                    Some(error) => (Err(error), false, request_id),
                    None => {
                        let answer = rule(&mut state);
                        if let Some(key) = &key {
                            state.store_answer(&endpoint, key, fingerprint, &answer);
                        }
                        (answer, false, request_id)
                    }
                },
            }
        };
        self.deliver_pending().await;
        respond(answer, replayed, request_id.as_deref())
    }
}

/// The request's parameters in a stable order, to recognise a key reused for another request.
fn fingerprint(params: &FormParams) -> String {
    let mut pairs: Vec<_> = params.pairs().to_vec();
    pairs.sort();
    serde_json::to_string(&pairs).unwrap_or_default()
}

fn respond(
    answer: Result<Value, SandboxError>,
    replayed: bool,
    request_id: Option<&str>,
) -> HttpResponse {
    let (status, body) = match answer {
        Ok(body) => (StatusCode::OK, body),
        Err(error) => (
            StatusCode::from_u16(error.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            error.body(),
        ),
    };
    let mut response = HttpResponse::build(status);
    response.insert_header(("Stripe-Version", API_VERSION));
    if let Some(id) = request_id {
        response.insert_header(("Request-Id", id));
    }
    if replayed {
        response.insert_header(("Idempotent-Replayed", "true"));
    }
    response.json(body)
}

fn form(body: &[u8]) -> FormParams {
    FormParams::parse(body)
}

fn query(req: &HttpRequest) -> FormParams {
    FormParams::parse(req.query_string().as_bytes())
}

async fn create_payment_intent(data: Data, req: HttpRequest, body: web::Bytes) -> HttpResponse {
    let params = form(&body);
    data.call(&req, Operation::CreatePaymentIntent, &params, |s| {
        s.create_payment_intent(&params)
    })
    .await
}

async fn retrieve_payment_intent(data: Data, req: HttpRequest, id: Id) -> HttpResponse {
    let params = query(&req);
    data.call(&req, Operation::RetrievePaymentIntent, &params, |s| {
        s.retrieve("payment_intent", &id)?;
        Ok(s.intent_answer(&id, &params))
    })
    .await
}

async fn confirm_payment_intent(
    data: Data,
    req: HttpRequest,
    id: Id,
    body: web::Bytes,
) -> HttpResponse {
    let params = form(&body);
    data.call(&req, Operation::ConfirmPaymentIntent, &params, |s| match s
        .confirm_intent(&id, params.get("payment_method"))?
    {
        Confirmation::Declined(error) => Err(error),
        Confirmation::Authorised | Confirmation::RequiresAction => {
            Ok(s.intent_answer(&id, &params))
        }
    })
    .await
}

async fn capture_payment_intent(
    data: Data,
    req: HttpRequest,
    id: Id,
    body: web::Bytes,
) -> HttpResponse {
    let params = form(&body);
    data.call(&req, Operation::Capture, &params, |s| {
        s.capture_intent(&id, &params)
    })
    .await
}

async fn cancel_payment_intent(
    data: Data,
    req: HttpRequest,
    id: Id,
    body: web::Bytes,
) -> HttpResponse {
    let params = form(&body);
    data.call(&req, Operation::Cancel, &params, |s| {
        s.cancel_intent_api(&id, &params)
    })
    .await
}

async fn retrieve_charge(data: Data, req: HttpRequest, id: Id) -> HttpResponse {
    let params = query(&req);
    data.call(&req, Operation::RetrieveCharge, &params, |s| {
        s.retrieve("charge", &id)
    })
    .await
}

async fn create_refund(data: Data, req: HttpRequest, body: web::Bytes) -> HttpResponse {
    let params = form(&body);
    data.call(&req, Operation::Refund, &params, |s| {
        s.create_refund(&params)
    })
    .await
}

async fn retrieve_refund(data: Data, req: HttpRequest, id: Id) -> HttpResponse {
    let params = query(&req);
    data.call(&req, Operation::RetrieveRefund, &params, |s| {
        s.retrieve("refund", &id)
    })
    .await
}

async fn create_transfer(data: Data, req: HttpRequest, body: web::Bytes) -> HttpResponse {
    let params = form(&body);
    data.call(&req, Operation::Transfer, &params, |s| {
        s.create_transfer(&params)
    })
    .await
}

async fn list_transfers(data: Data, req: HttpRequest) -> HttpResponse {
    let params = query(&req);
    data.call(&req, Operation::ListTransfers, &params, |s| {
        s.list_transfers(&params)
    })
    .await
}

async fn retrieve_transfer(data: Data, req: HttpRequest, id: Id) -> HttpResponse {
    let params = query(&req);
    data.call(&req, Operation::RetrieveTransfer, &params, |s| {
        s.retrieve("transfer", &id)
    })
    .await
}

async fn create_reversal(data: Data, req: HttpRequest, id: Id, body: web::Bytes) -> HttpResponse {
    let params = form(&body);
    data.call(&req, Operation::TransferReversal, &params, |s| {
        s.create_reversal(&id, &params)
    })
    .await
}

async fn create_account(data: Data, req: HttpRequest, body: web::Bytes) -> HttpResponse {
    let params = form(&body);
    data.call(&req, Operation::CreateAccount, &params, |s| {
        s.create_account(&params)
    })
    .await
}

async fn retrieve_account(data: Data, req: HttpRequest, id: Id) -> HttpResponse {
    let params = query(&req);
    data.call(&req, Operation::RetrieveAccount, &params, |s| {
        s.retrieve("account", &id)
    })
    .await
}

async fn create_account_link(data: Data, req: HttpRequest, body: web::Bytes) -> HttpResponse {
    let params = form(&body);
    data.call(&req, Operation::CreateAccountLink, &params, |s| {
        s.create_account_link(&params)
    })
    .await
}

async fn create_customer(data: Data, req: HttpRequest, body: web::Bytes) -> HttpResponse {
    let params = form(&body);
    data.call(&req, Operation::CreateCustomer, &params, |s| {
        s.create_customer(&params)
    })
    .await
}

async fn retrieve_customer(data: Data, req: HttpRequest, id: Id) -> HttpResponse {
    let params = query(&req);
    data.call(&req, Operation::RetrieveCustomer, &params, |s| {
        s.retrieve("customer", &id)
    })
    .await
}

async fn list_payment_methods(data: Data, req: HttpRequest) -> HttpResponse {
    let params = query(&req);
    data.call(&req, Operation::ListPaymentMethods, &params, |s| {
        s.list_payment_methods(&params)
    })
    .await
}

async fn retrieve_payment_method(data: Data, req: HttpRequest, id: Id) -> HttpResponse {
    let params = query(&req);
    data.call(&req, Operation::RetrievePaymentMethod, &params, |s| {
        s.retrieve("payment_method", &id)
    })
    .await
}

async fn attach_payment_method(
    data: Data,
    req: HttpRequest,
    id: Id,
    body: web::Bytes,
) -> HttpResponse {
    let params = form(&body);
    data.call(&req, Operation::AttachPaymentMethod, &params, |s| {
        s.attach_payment_method(&id, &params)
    })
    .await
}

async fn detach_payment_method(
    data: Data,
    req: HttpRequest,
    id: Id,
    body: web::Bytes,
) -> HttpResponse {
    let params = form(&body);
    data.call(&req, Operation::DetachPaymentMethod, &params, |s| {
        s.detach_payment_method(&id)
    })
    .await
}

async fn retrieve_balance(data: Data, req: HttpRequest) -> HttpResponse {
    let params = query(&req);
    data.call(&req, Operation::RetrieveBalance, &params, |s| {
        Ok(s.balance_json())
    })
    .await
}

async fn retrieve_dispute(data: Data, req: HttpRequest, id: Id) -> HttpResponse {
    let params = query(&req);
    data.call(&req, Operation::RetrieveDispute, &params, |s| {
        s.retrieve("dispute", &id)
    })
    .await
}

async fn retrieve_event(data: Data, req: HttpRequest, id: Id) -> HttpResponse {
    let params = query(&req);
    data.call(&req, Operation::RetrieveEvent, &params, |s| {
        s.retrieve("event", &id)
    })
    .await
}

/// The hosted onboarding page an account link points at: opening it completes onboarding
/// and redirects, as a user finishing the real page would be.
async fn onboarding_page(data: Data, token: web::Path<String>) -> HttpResponse {
    let target = {
        let mut state = data.lock();
        state.begin_request(None, false);
        state.follow_link(&token)
    };
    data.deliver_pending().await;
    match target {
        Some(url) => HttpResponse::SeeOther()
            .insert_header((LOCATION, url))
            .finish(),
        None => HttpResponse::NotFound()
            .insert_header((CONTENT_TYPE, "text/plain; charset=utf-8"))
            .body("This link is not valid."),
    }
}

/// A minimal receipt for a charge (what `receipt_url` opens).
async fn receipt_page(data: Data, id: Id) -> HttpResponse {
    let state = data.lock();
    let Some(charge) = state.charges.get(&id) else {
        return HttpResponse::NotFound()
            .insert_header((CONTENT_TYPE, "text/plain; charset=utf-8"))
            .body("No such receipt.");
    };
    let amount = charge.amount_captured.max(charge.amount);
    let body = format!(
        "<!doctype html><title>Receipt</title><h1>Receipt</h1>\
         <p>Charge {}</p><p>Amount: {}.{:02} {}</p><p>Card: {} ending {}</p>",
        charge.id,
        amount / 100,
        amount % 100,
        charge.currency.to_uppercase(),
        charge.card.brand,
        charge.card.last4
    );
    HttpResponse::Ok()
        .insert_header((CONTENT_TYPE, "text/html; charset=utf-8"))
        .body(body)
}
