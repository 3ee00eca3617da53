//! [`ProcessorClient`]: the processor's REST protocol (API version [`API_VERSION`]) over
//! HTTPS, or over loopback HTTP to the sandbox. Bearer secret key, form-encoded bodies,
//! an `Idempotency-Key` on every POST (a required argument of each mutating method, so a
//! retry after a crash repeats nothing). No automatic retries: the caller decides, with
//! [`ProcessorError::is_retryable`], and retries with the same key.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::error::{ProcessorError, redact_keys};
use super::form::Form;
use super::types::{
    Account, AccountLink, Balance, Charge, Customer, Dispute, List, Metadata, PaymentIntent,
    PaymentMethod, Refund, Transfer, TransferReversal,
};
use crate::config::Secret;

/// The API version every request pins (`Stripe-Version`).
pub const API_VERSION: &str = "2024-12-18.acacia";

/// The production API.
pub const DEFAULT_API_BASE: &str = "https://api.stripe.com";

/// A request that funds or refunds waits on the processor: bounded, so a slow processor costs a
/// user at most this (then 503 `PROCESSOR_UNAVAILABLE`, retried with the same idempotency key).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A client of the processor's REST API. Cheap to share behind an `Arc`.
pub struct ProcessorClient {
    http: reqwest::Client,
    base_url: String,
    secret_key: Secret,
}

impl std::fmt::Debug for ProcessorClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessorClient")
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

/// `POST /v1/payment_intents`, always with `capture_method=manual` (escrow).
#[derive(Debug, Clone, Default)]
pub struct CreatePaymentIntent {
    /// Minor units.
    pub amount: i64,
    /// ISO 4217; sent lower case.
    pub currency: String,
    pub customer: Option<String>,
    pub payment_method: Option<String>,
    pub metadata: Metadata,
    pub transfer_group: Option<String>,
    pub description: Option<String>,
}

/// What a refund applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefundTarget {
    PaymentIntent(String),
    Charge(String),
}

/// `POST /v1/refunds`. Only captured money can be refunded: an authorised intent that was
/// never captured is cancelled instead ([`ProcessorClient::cancel_payment_intent`]).
#[derive(Debug, Clone)]
pub struct CreateRefund {
    pub target: RefundTarget,
    /// Minor units; the whole unrefunded amount when absent.
    pub amount: Option<i64>,
    /// `duplicate`, `fraudulent` or `requested_by_customer`.
    pub reason: Option<String>,
    pub metadata: Metadata,
}

/// `POST /v1/transfers`: platform balance to a connected account.
#[derive(Debug, Clone, Default)]
pub struct CreateTransfer {
    /// Minor units.
    pub amount: i64,
    pub currency: String,
    /// The connected account (`acct_…`).
    pub destination: String,
    pub transfer_group: Option<String>,
    /// A charge whose funds pay the transfer (drawn from that charge, even while pending).
    /// Without it the transfer draws on the available balance.
    pub source_transaction: Option<String>,
    pub metadata: Metadata,
}

/// `POST /v1/transfers/{id}/reversals`.
#[derive(Debug, Clone, Default)]
pub struct CreateTransferReversal {
    /// Minor units; the whole unreversed amount when absent.
    pub amount: Option<i64>,
    pub metadata: Metadata,
}

/// `POST /v1/accounts` (an express connected account).
#[derive(Debug, Clone, Default)]
pub struct CreateAccount {
    pub email: String,
    /// ISO 3166-1 alpha-2; the platform's country when absent.
    pub country: Option<String>,
    pub metadata: Metadata,
}

/// The kind of hosted page an account link opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccountLinkType {
    /// First onboarding, or finishing an incomplete one.
    Onboarding,
    /// Changing details of an account whose onboarding is complete; refused otherwise.
    Update,
}

impl AccountLinkType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Onboarding => "account_onboarding",
            Self::Update => "account_update",
        }
    }
}

/// `POST /v1/account_links`.
#[derive(Debug, Clone)]
pub struct CreateAccountLink {
    pub account: String,
    pub kind: AccountLinkType,
    /// Where the page sends the user when the link expired or was already used.
    pub refresh_url: String,
    /// Where the page sends the user when done (not a proof of completion: read the account).
    pub return_url: String,
}

/// `POST /v1/customers`.
#[derive(Debug, Clone, Default)]
pub struct CreateCustomer {
    pub email: String,
    pub name: Option<String>,
    pub metadata: Metadata,
}

#[derive(Deserialize)]
struct ErrorEnvelope {
    error: ErrorBody,
}

#[derive(Deserialize)]
struct ErrorBody {
    #[serde(rename = "type")]
    kind: Option<String>,
    code: Option<String>,
    message: Option<String>,
}

impl ProcessorClient {
    /// A client of the API at `base_url` (`https://api.stripe.com`, or the sandbox's
    /// loopback address).
    pub fn new(base_url: &str, secret_key: Secret) -> Result<Self, ProcessorError> {
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            .user_agent(concat!("marketplace/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ProcessorError::Network(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self {
            http,
            base_url: base_url.trim_end_matches('/').to_owned(),
            secret_key,
        })
    }

    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    pub async fn create_payment_intent(
        &self,
        params: &CreatePaymentIntent,
        idempotency_key: &str,
    ) -> Result<PaymentIntent, ProcessorError> {
        let form = Form::new()
            .field("amount", params.amount)
            .field("currency", params.currency.to_lowercase())
            .field("capture_method", "manual")
            .optional("customer", params.customer.as_deref())
            .optional("payment_method", params.payment_method.as_deref())
            .optional("transfer_group", params.transfer_group.as_deref())
            .optional("description", params.description.as_deref())
            .map("metadata", &params.metadata);
        self.post("/v1/payment_intents", form, idempotency_key)
            .await
    }

    pub async fn retrieve_payment_intent(&self, id: &str) -> Result<PaymentIntent, ProcessorError> {
        self.get(&id_path("/v1/payment_intents", id, "")?, &[])
            .await
    }

    /// The intent with its latest charge expanded (one call instead of two).
    pub async fn retrieve_payment_intent_with_charge(
        &self,
        id: &str,
    ) -> Result<PaymentIntent, ProcessorError> {
        self.get(
            &id_path("/v1/payment_intents", id, "")?,
            &[("expand[]", "latest_charge")],
        )
        .await
    }

    /// Captures the whole authorised amount. Only from `requires_capture`; the processor
    /// answers `payment_intent_unexpected_state` otherwise.
    pub async fn capture_payment_intent(
        &self,
        id: &str,
        idempotency_key: &str,
    ) -> Result<PaymentIntent, ProcessorError> {
        self.post(
            &id_path("/v1/payment_intents", id, "/capture")?,
            Form::new(),
            idempotency_key,
        )
        .await
    }

    /// Cancels an intent that is not final; an authorisation is released.
    pub async fn cancel_payment_intent(
        &self,
        id: &str,
        idempotency_key: &str,
    ) -> Result<PaymentIntent, ProcessorError> {
        self.post(
            &id_path("/v1/payment_intents", id, "/cancel")?,
            Form::new(),
            idempotency_key,
        )
        .await
    }

    pub async fn retrieve_charge(&self, id: &str) -> Result<Charge, ProcessorError> {
        self.get(&id_path("/v1/charges", id, "")?, &[]).await
    }

    pub async fn create_refund(
        &self,
        params: &CreateRefund,
        idempotency_key: &str,
    ) -> Result<Refund, ProcessorError> {
        let form = match &params.target {
            RefundTarget::PaymentIntent(id) => Form::new().field("payment_intent", id),
            RefundTarget::Charge(id) => Form::new().field("charge", id),
        }
        .optional("amount", params.amount)
        .optional("reason", params.reason.as_deref())
        .map("metadata", &params.metadata);
        self.post("/v1/refunds", form, idempotency_key).await
    }

    pub async fn create_transfer(
        &self,
        params: &CreateTransfer,
        idempotency_key: &str,
    ) -> Result<Transfer, ProcessorError> {
        let form = Form::new()
            .field("amount", params.amount)
            .field("currency", params.currency.to_lowercase())
            .field("destination", &params.destination)
            .optional("transfer_group", params.transfer_group.as_deref())
            .optional("source_transaction", params.source_transaction.as_deref())
            .map("metadata", &params.metadata);
        self.post("/v1/transfers", form, idempotency_key).await
    }

    pub async fn retrieve_transfer(&self, id: &str) -> Result<Transfer, ProcessorError> {
        self.get(&id_path("/v1/transfers", id, "")?, &[]).await
    }

    /// The transfers of `transfer_group`, newest first: at most 100, the processor's page.
    pub async fn list_transfers(
        &self,
        transfer_group: &str,
    ) -> Result<Vec<Transfer>, ProcessorError> {
        let list: List<Transfer> = self
            .get(
                "/v1/transfers",
                &[("transfer_group", transfer_group), ("limit", "100")],
            )
            .await?;
        Ok(list.data)
    }

    pub async fn create_transfer_reversal(
        &self,
        transfer: &str,
        params: &CreateTransferReversal,
        idempotency_key: &str,
    ) -> Result<TransferReversal, ProcessorError> {
        let form = Form::new()
            .optional("amount", params.amount)
            .map("metadata", &params.metadata);
        self.post(
            &id_path("/v1/transfers", transfer, "/reversals")?,
            form,
            idempotency_key,
        )
        .await
    }

    /// An express account that may receive transfers and take card payments once onboarded.
    pub async fn create_account(
        &self,
        params: &CreateAccount,
        idempotency_key: &str,
    ) -> Result<Account, ProcessorError> {
        let form = Form::new()
            .field("type", "express")
            .field("email", &params.email)
            .optional("country", params.country.as_deref())
            .field("capabilities[card_payments][requested]", true)
            .field("capabilities[transfers][requested]", true)
            .map("metadata", &params.metadata);
        self.post("/v1/accounts", form, idempotency_key).await
    }

    pub async fn retrieve_account(&self, id: &str) -> Result<Account, ProcessorError> {
        self.get(&id_path("/v1/accounts", id, "")?, &[]).await
    }

    pub async fn create_account_link(
        &self,
        params: &CreateAccountLink,
        idempotency_key: &str,
    ) -> Result<AccountLink, ProcessorError> {
        let form = Form::new()
            .field("account", &params.account)
            .field("type", params.kind.as_str())
            .field("refresh_url", &params.refresh_url)
            .field("return_url", &params.return_url);
        self.post("/v1/account_links", form, idempotency_key).await
    }

    pub async fn create_customer(
        &self,
        params: &CreateCustomer,
        idempotency_key: &str,
    ) -> Result<Customer, ProcessorError> {
        let form = Form::new()
            .field("email", &params.email)
            .optional("name", params.name.as_deref())
            .map("metadata", &params.metadata);
        self.post("/v1/customers", form, idempotency_key).await
    }

    /// The customer's saved cards (first 100).
    pub async fn list_payment_methods(
        &self,
        customer: &str,
    ) -> Result<Vec<PaymentMethod>, ProcessorError> {
        let list: List<PaymentMethod> = self
            .get(
                "/v1/payment_methods",
                &[("customer", customer), ("type", "card"), ("limit", "100")],
            )
            .await?;
        Ok(list.data)
    }

    pub async fn attach_payment_method(
        &self,
        payment_method: &str,
        customer: &str,
        idempotency_key: &str,
    ) -> Result<PaymentMethod, ProcessorError> {
        self.post(
            &id_path("/v1/payment_methods", payment_method, "/attach")?,
            Form::new().field("customer", customer),
            idempotency_key,
        )
        .await
    }

    pub async fn detach_payment_method(
        &self,
        payment_method: &str,
        idempotency_key: &str,
    ) -> Result<PaymentMethod, ProcessorError> {
        self.post(
            &id_path("/v1/payment_methods", payment_method, "/detach")?,
            Form::new(),
            idempotency_key,
        )
        .await
    }

    pub async fn retrieve_dispute(&self, id: &str) -> Result<Dispute, ProcessorError> {
        self.get(&id_path("/v1/disputes", id, "")?, &[]).await
    }

    /// The platform's own balance.
    pub async fn retrieve_balance(&self) -> Result<Balance, ProcessorError> {
        self.get("/v1/balance", &[]).await
    }

    async fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        form: Form,
        idempotency_key: &str,
    ) -> Result<T, ProcessorError> {
        let request = self
            .request(Method::POST, path)
            .header("Idempotency-Key", idempotency_key)
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(form.encode());
        self.send(Method::POST, path, request).await
    }

    async fn get<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, &str)],
    ) -> Result<T, ProcessorError> {
        let request = self.request(Method::GET, path).query(query);
        self.send(Method::GET, path, request).await
    }

    fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.base_url))
            .bearer_auth(self.secret_key.expose())
            .header("Stripe-Version", API_VERSION)
    }

    async fn send<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        request: reqwest::RequestBuilder,
    ) -> Result<T, ProcessorError> {
        let response = request
            .send()
            .await
            .map_err(|e| ProcessorError::Network(describe_network_error(&e)))?;
        let status = response.status();
        let request_id = response
            .headers()
            .get("request-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let body = response
            .bytes()
            .await
            .map_err(|e| ProcessorError::Network(describe_network_error(&e)))?;
        tracing::debug!(%method, path, status = status.as_u16(), request_id, "processor call");
        if !status.is_success() {
            return Err(api_error(status, &body));
        }
        serde_json::from_slice(&body).map_err(|e| {
            // serde's message may quote a value (a client secret): keep only where it failed.
            ProcessorError::Decode(format!(
                "{method} {path}: {:?} error at line {} column {}",
                e.classify(),
                e.line(),
                e.column()
            ))
        })
    }
}

fn api_error(status: StatusCode, body: &[u8]) -> ProcessorError {
    let parsed = serde_json::from_slice::<ErrorEnvelope>(body).ok();
    let (kind, code, message) = match parsed {
        Some(ErrorEnvelope { error }) => (error.kind, error.code, error.message),
        None => (None, None, None),
    };
    ProcessorError::Api {
        status: status.as_u16(),
        kind: kind.unwrap_or_else(|| "api_error".to_owned()),
        code,
        message: redact_keys(
            &message.unwrap_or_else(|| format!("HTTP {status} without an error body")),
        ),
    }
}

/// reqwest's description, without the URL's query (ids only, but keep logs lean).
fn describe_network_error(err: &reqwest::Error) -> String {
    let kind = if err.is_timeout() {
        "timed out"
    } else if err.is_connect() {
        "connection failed"
    } else {
        "request failed"
    };
    let mut detail = String::new();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        detail = cause.to_string();
        source = cause.source();
    }
    if detail.is_empty() {
        kind.to_owned()
    } else {
        format!("{kind}: {detail}")
    }
}

/// `{prefix}/{id}{suffix}`. Ids are the processor's (`pi_…`, `acct_…`): letters, digits and
/// `_`. Anything else (a user-given id with `/` or `..`) could reach another path, so it is
/// answered here as the processor answers an unknown id.
fn id_path(prefix: &str, id: &str, suffix: &str) -> Result<String, ProcessorError> {
    let valid = !id.is_empty()
        && id.len() <= 255
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !valid {
        return Err(ProcessorError::Api {
            status: 404,
            kind: "invalid_request_error".to_owned(),
            code: Some("resource_missing".to_owned()),
            message: "No such object: the id is not a valid processor id".to_owned(),
        });
    }
    Ok(format!("{prefix}/{id}{suffix}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_errors_keep_type_code_and_message_without_keys() {
        let body = br#"{"error":{"type":"invalid_request_error","code":"balance_insufficient","message":"You have insufficient available funds in your account."}}"#;
        let err = api_error(StatusCode::BAD_REQUEST, body);
        assert!(err.is_balance_insufficient());
        assert_eq!(err.status(), Some(400));

        let body = br#"{"error":{"type":"invalid_request_error","message":"Invalid API Key provided: sk_test_********************1234"}}"#;
        let err = api_error(StatusCode::UNAUTHORIZED, body);
        assert!(!err.to_string().contains("1234"), "{err}");

        let err = api_error(StatusCode::BAD_GATEWAY, b"<html>");
        assert!(err.is_retryable());
        assert_eq!(
            err,
            ProcessorError::Api {
                status: 502,
                kind: "api_error".into(),
                code: None,
                message: "HTTP 502 Bad Gateway without an error body".into()
            }
        );
    }

    #[test]
    fn ids_cannot_escape_their_path_segment() {
        assert_eq!(
            id_path("/v1/charges", "ch_123", "").unwrap(),
            "/v1/charges/ch_123"
        );
        for bad in ["..", "pm_1/../x", "", "a b", "ch_%2e"] {
            assert!(id_path("/v1/charges", bad, "").unwrap_err().is_not_found());
        }
    }

    #[test]
    fn debug_never_shows_the_key() {
        let client = ProcessorClient::new("http://x/", Secret::new("sk_test_hidden")).unwrap();
        assert!(!format!("{client:?}").contains("hidden"));
        assert_eq!(client.base_url(), "http://x");
    }
}
