//! The processor sandbox: a stateful fake of the processor's REST protocol, served from this
//! process on a loopback port, so [`ProcessorClient`](crate::integrations::processor::ProcessorClient) is the client in
//! every mode (DESIGN §5).
//!
//! It keeps intents, charges, refunds, transfers, accounts, customers, payment methods,
//! disputes and payouts; honours idempotency keys; sends the webhook events the real
//! processor sends, signed with the webhook secret; and offers controls that play the
//! customer and the world (confirm with a test card, chargebacks, payouts, failures).
//!
//! Determinism for tests: every event a request causes is delivered (in order, one at a time)
//! before that request answers. Unlike the real processor, a call therefore waits for the
//! service's webhook receiver; the receiver must answer without waiting for work that is
//! itself waiting on a processor call, or both wait until the delivery times out.

mod api;
mod cards;
mod controls;
mod delivery;
mod operations;
mod render;
pub mod standalone;
mod state;

use std::net::TcpListener;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use actix_web::dev::ServerHandle;
use actix_web::{App, HttpServer, web};
use anyhow::Context as _;
use serde_json::{Value, json};

pub use self::controls::{DisputeOutcome, DisputeUpdate, FailureSpec, PayoutOutcome};
pub use self::state::{Delivery, EventRecord, Operation, State};
use crate::clock::Clock;
use crate::config::Secret;

/// How long a webhook delivery may take before it is recorded as failed.
pub const DEFAULT_DELIVERY_TIMEOUT: Duration = Duration::from_secs(10);

/// What a sandbox needs to start.
#[derive(Debug, Clone)]
pub struct SandboxConfig {
    /// The secret key clients must present (`Authorization: Bearer …`).
    pub secret_key: Secret,
    /// The secret webhook deliveries are signed with.
    pub webhook_secret: Secret,
    /// The time source: object timestamps, authorisation expiry and signatures follow it.
    pub clock: Clock,
    pub delivery_timeout: Duration,
}

impl SandboxConfig {
    pub fn new(secret_key: Secret, webhook_secret: Secret, clock: Clock) -> Self {
        Self {
            secret_key,
            webhook_secret,
            clock,
            delivery_timeout: DEFAULT_DELIVERY_TIMEOUT,
        }
    }
}

/// An error of the processor's protocol: the HTTP status and the `error` body's fields.
/// Controls answer with it too (status 404 for an unknown object, 400 for a broken rule).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{status} {kind}: {message}")]
pub struct SandboxError {
    pub status: u16,
    /// `invalid_request_error`, `card_error`, `idempotency_error`, `api_error`, …
    pub kind: &'static str,
    pub code: Option<String>,
    pub message: String,
    /// Rarely present, so kept out of line: the parameter at fault, a card error's intent.
    detail: Option<Box<ErrorDetail>>,
    /// Whether an idempotent replay answers it again (false: the request never ran).
    replayable: bool,
}

#[derive(Debug, Clone, Default, PartialEq)]
struct ErrorDetail {
    param: Option<String>,
    payment_intent: Option<Value>,
}

impl SandboxError {
    fn new(
        status: u16,
        kind: &'static str,
        code: Option<&str>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            status,
            kind,
            code: code.map(str::to_owned),
            message: message.into(),
            detail: None,
            replayable: true,
        }
    }

    /// 400: a rule of the processor refuses the request in the object's current state.
    pub(crate) fn refused(code: Option<&str>, message: impl Into<String>) -> Self {
        Self::new(400, "invalid_request_error", code, message)
    }

    /// 400: a parameter is missing or malformed; the request did not run.
    pub(crate) fn invalid_param(param: &str, code: &str, message: impl Into<String>) -> Self {
        Self {
            replayable: false,
            ..Self::new(400, "invalid_request_error", Some(code), message).with_param(param)
        }
    }

    /// 404: no object of this kind has this id.
    pub(crate) fn missing(object: &str, id: &str) -> Self {
        Self::new(
            404,
            "invalid_request_error",
            Some("resource_missing"),
            format!("No such {object}: '{id}'"),
        )
    }

    /// 400 naming a parameter that refers to an unknown object.
    pub(crate) fn missing_param(param: &str, object: &str, id: &str) -> Self {
        Self::new(
            400,
            "invalid_request_error",
            Some("resource_missing"),
            format!("No such {object}: '{id}'"),
        )
        .with_param(param)
    }

    /// 402: the card was declined; the body carries the intent, as the processor's does.
    pub(crate) fn card_declined(message: &str, payment_intent: Value) -> Self {
        let mut error = Self::new(402, "card_error", Some("card_declined"), message);
        error.detail_mut().payment_intent = Some(payment_intent);
        error
    }

    pub(crate) fn idempotency_mismatch() -> Self {
        Self {
            replayable: false,
            ..Self::new(
                400,
                "idempotency_error",
                None,
                "Keys for idempotent requests can only be used with the same parameters they \
                 were first used with.",
            )
        }
    }

    pub(crate) fn with_param(mut self, param: &str) -> Self {
        self.detail_mut().param = Some(param.to_owned());
        self
    }

    fn detail_mut(&mut self) -> &mut ErrorDetail {
        self.detail.get_or_insert_with(Box::default)
    }

    /// The request parameter at fault, when one is.
    pub fn param(&self) -> Option<&str> {
        self.detail.as_ref()?.param.as_deref()
    }

    pub(crate) fn unauthorized(message: &str) -> Self {
        Self {
            replayable: false,
            ..Self::new(401, "invalid_request_error", None, message)
        }
    }

    /// An injected failure: never stored for replay, so a retry with the same key runs.
    pub(crate) fn injected(op: Operation, status: u16, code: Option<String>) -> Self {
        let kind = match status {
            429 => "rate_limit_error",
            s if s >= 500 => "api_error",
            _ => "invalid_request_error",
        };
        Self {
            code,
            replayable: false,
            ..Self::new(
                status,
                kind,
                None,
                format!("Injected failure of `{}` (sandbox control)", op.as_str()),
            )
        }
    }

    /// The processor's error body: `{"error": {type, code, message, param, …}}`.
    pub fn body(&self) -> Value {
        let mut error = json!({
            "type": self.kind,
            "code": self.code,
            "message": self.message,
        });
        if let Some(detail) = &self.detail {
            if let Some(param) = &detail.param {
                error["param"] = Value::from(param.as_str());
            }
            if let Some(intent) = &detail.payment_intent {
                error["payment_intent"] = intent.clone();
            }
        }
        json!({ "error": error })
    }
}

/// What the server's handlers and the handle share.
pub(crate) struct Shared {
    state: Arc<Mutex<State>>,
    secret_key: Secret,
    webhook_secret: Secret,
    clock: Clock,
    /// One delivery at a time, in the order events were recorded.
    delivery_lock: tokio::sync::Mutex<()>,
    webhook_http: reqwest::Client,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves state that is still well formed (every rule
        // checks before it changes anything), so a poisoned lock is used as is.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs a control (the world acting): not counted as a call, no failure injection, no
    /// idempotency; its events are delivered before it returns.
    async fn control<T>(
        &self,
        rule: impl FnOnce(&mut State) -> Result<T, SandboxError>,
    ) -> Result<T, SandboxError> {
        let result = {
            let mut state = self.lock();
            state.begin_request(None, false);
            rule(&mut state)
        };
        self.deliver_pending().await;
        result
    }
}

/// Starts sandboxes.
pub struct Sandbox;

impl Sandbox {
    /// Binds `127.0.0.1:0` and serves the protocol with one worker.
    pub async fn start(config: SandboxConfig) -> anyhow::Result<SandboxHandle> {
        let listener =
            TcpListener::bind("127.0.0.1:0").context("cannot bind the processor sandbox")?;
        Self::start_on(config, listener, false).await
    }

    /// Serves the protocol on `listener` with one worker; `controls` also mounts the
    /// controls under `/api/sandbox/` on the same port (the standalone sandbox, see
    /// [`standalone`]).
    pub async fn start_on(
        config: SandboxConfig,
        listener: TcpListener,
        controls: bool,
    ) -> anyhow::Result<SandboxHandle> {
        let port = listener.local_addr()?.port();
        let base_url = format!("http://127.0.0.1:{port}");
        let webhook_http = reqwest::Client::builder()
            .timeout(config.delivery_timeout)
            // A fresh connection per delivery: deliveries run on whichever runtime asks, and
            // a pooled connection would belong to the runtime that opened it.
            .pool_max_idle_per_host(0)
            .user_agent("Stripe/1.0 (+https://stripe.com/docs/webhooks)")
            .build()
            .context("cannot build the sandbox's webhook client")?;
        let shared = Arc::new(Shared {
            state: Arc::new(Mutex::new(State::new(
                config.clock.clone(),
                base_url.clone(),
            ))),
            secret_key: config.secret_key,
            webhook_secret: config.webhook_secret,
            clock: config.clock,
            delivery_lock: tokio::sync::Mutex::new(()),
            webhook_http,
        });
        let data = web::Data::from(shared.clone());
        let server = HttpServer::new(move || {
            App::new()
                .app_data(data.clone())
                .app_data(web::PayloadConfig::new(1024 * 1024))
                .configure(api::routes)
                .configure(|cfg| {
                    if controls {
                        standalone::control_routes(cfg);
                    }
                })
                .default_service(web::to(api::unknown_route))
        })
        .workers(1)
        .disable_signals()
        .shutdown_timeout(2)
        .listen(listener)
        .context("cannot serve the processor sandbox")?
        .run();
        let server_handle = server.handle();
        tokio::spawn(server);
        tracing::info!(%base_url, "processor sandbox started");
        Ok(SandboxHandle {
            shared,
            base_url,
            server: server_handle,
        })
    }
}

/// A running sandbox: its address, its state, and the controls. Clones share everything.
#[derive(Clone)]
pub struct SandboxHandle {
    shared: Arc<Shared>,
    base_url: String,
    server: ServerHandle,
}

impl std::fmt::Debug for SandboxHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxHandle")
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

impl SandboxHandle {
    /// `http://127.0.0.1:<port>`: the API base for [`ProcessorClient`](crate::integrations::processor::ProcessorClient).
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The whole state, for inspection (tests, the ledger).
    pub fn state(&self) -> Arc<Mutex<State>> {
        self.shared.state.clone()
    }

    /// Where events are POSTed; until set, each event is recorded as not delivered.
    pub fn set_webhook_target(&self, url: impl Into<String>) {
        self.shared.lock().webhook_target = Some(url.into());
    }

    /// The secret key clients present: another instance of the service sharing this sandbox
    /// (tests of two instances) configures it as its processor key.
    pub fn secret_key(&self) -> &Secret {
        &self.shared.secret_key
    }

    /// The webhook secret deliveries are signed with.
    pub fn webhook_secret(&self) -> &Secret {
        &self.shared.webhook_secret
    }

    /// Stops serving; waits up to two seconds for requests in flight.
    pub async fn stop(&self) {
        self.server.stop(true).await;
    }
}

#[cfg(test)]
mod tests;
