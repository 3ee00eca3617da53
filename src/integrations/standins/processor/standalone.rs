//! The sandbox as a process of its own (`marketplace processor-sandbox`): the processor's
//! protocol and the controls on one port, webhooks to a configured URL, and failed deliveries
//! retried as the processor retries them. Its ledger outlives the service processes that use
//! it (`PROCESSOR_API_BASE`), so tests can kill and restart them, or run several at once.

use std::net::TcpListener;
use std::time::Duration;

use actix_web::{HttpResponse, web};
use serde::Deserialize;
use serde_json::Value;

use super::{Sandbox, SandboxConfig, SandboxError, Shared};

type Data = web::Data<Shared>;
type Id = web::Path<String>;

/// Serves the sandbox on `listener` until the process is interrupted, delivering webhooks to
/// `webhook_url` and queueing again every `redeliver_every` the events whose last delivery
/// was not accepted.
pub async fn serve(
    config: SandboxConfig,
    listener: TcpListener,
    webhook_url: Option<String>,
    redeliver_every: Duration,
) -> anyhow::Result<()> {
    let sandbox = Sandbox::start_on(config, listener, true).await?;
    if let Some(url) = webhook_url {
        sandbox.set_webhook_target(url);
    }
    let shared = sandbox.shared.clone();
    let redelivery = tokio::spawn(async move {
        loop {
            tokio::time::sleep(redeliver_every).await;
            let queued = shared.lock().requeue_failed();
            if queued > 0 {
                shared.deliver_pending().await;
            }
        }
    });
    tracing::info!(
        base_url = sandbox.base_url(),
        "standalone processor sandbox serving"
    );
    tokio::signal::ctrl_c().await?;
    redelivery.abort();
    sandbox.stop().await;
    Ok(())
}

/// The controls of DESIGN §9 under `/api/sandbox/`, plus `webhook-target`, served by the
/// standalone sandbox itself (the service mounts its own copy while its sandbox runs inside).
pub(crate) fn control_routes(cfg: &mut web::ServiceConfig) {
    cfg.route(
        "/api/sandbox/payment_intents/{id}/confirm",
        web::post().to(confirm),
    )
    .route(
        "/api/sandbox/payment_intents/{id}/cancel",
        web::post().to(cancel),
    )
    .route("/api/sandbox/balance", web::post().to(balance))
    .route(
        "/api/sandbox/accounts/{id}/complete-onboarding",
        web::post().to(complete_onboarding),
    )
    .route(
        "/api/sandbox/transfers/{id}/fail",
        web::post().to(fail_transfer),
    )
    .route("/api/sandbox/ledger", web::get().to(ledger))
    .route("/api/sandbox/events", web::get().to(events))
    .route("/api/sandbox/events/{id}/resend", web::post().to(resend))
    .route(
        "/api/sandbox/webhook-target",
        web::post().to(webhook_target),
    );
}

fn answer(result: Result<Value, SandboxError>) -> HttpResponse {
    match result {
        Ok(value) => HttpResponse::Ok().json(value),
        Err(err) => {
            let status = actix_web::http::StatusCode::from_u16(err.status)
                .unwrap_or(actix_web::http::StatusCode::BAD_REQUEST);
            HttpResponse::build(status).json(err.body())
        }
    }
}

#[derive(Deserialize)]
struct ConfirmBody {
    payment_method: String,
}

async fn confirm(data: Data, id: Id, body: web::Json<ConfirmBody>) -> HttpResponse {
    answer(
        data.control(|state| {
            state.confirm_intent(&id, Some(&body.payment_method))?;
            Ok(state.intent_json(&id))
        })
        .await,
    )
}

async fn cancel(data: Data, id: Id) -> HttpResponse {
    answer(
        data.control(|state| state.cancel_intent(&id, Some("abandoned")))
            .await,
    )
}

#[derive(Deserialize)]
struct BalanceBody {
    available: i64,
}

async fn balance(data: Data, body: web::Json<BalanceBody>) -> HttpResponse {
    answer(
        data.control(|state| Ok(state.set_balance(body.available)))
            .await,
    )
}

async fn complete_onboarding(data: Data, id: Id) -> HttpResponse {
    answer(
        data.control(|state| state.update_account(&id, Some(true), Some(true), Some(true)))
            .await,
    )
}

async fn fail_transfer(data: Data, id: Id) -> HttpResponse {
    answer(data.control(|state| state.fail_transfer(&id)).await)
}

async fn ledger(data: Data) -> HttpResponse {
    HttpResponse::Ok().json(data.lock().ledger())
}

async fn events(data: Data) -> HttpResponse {
    let events: Vec<_> = data.lock().events.iter().cloned().collect();
    HttpResponse::Ok().json(events)
}

async fn resend(data: Data, id: Id) -> HttpResponse {
    let queued = data
        .control(|state| {
            if state.requeue(&id) {
                Ok(())
            } else {
                Err(SandboxError::missing("event", &id))
            }
        })
        .await;
    answer(queued.and_then(|()| {
        let state = data.lock();
        let record = state
            .events
            .get(&id)
            .ok_or_else(|| SandboxError::missing("event", &id))?;
        Ok(serde_json::to_value(record).unwrap_or(Value::Null))
    }))
}

#[derive(Deserialize)]
struct TargetBody {
    url: Option<String>,
}

/// Where webhooks go from now on (`null`: nowhere, each event recorded as not delivered).
async fn webhook_target(data: Data, body: web::Json<TargetBody>) -> HttpResponse {
    let url = body.into_inner().url;
    data.lock().webhook_target = url.clone();
    HttpResponse::Ok().json(serde_json::json!({ "url": url }))
}
