//! What the sandbox remembers: every object it created, the platform balance, stored
//! idempotent answers, injected failures, call counts and the events it sent.
//!
//! All rules run under one lock and never await, so every request sees and leaves a
//! consistent state; webhook deliveries happen after the lock is released.

use std::collections::{BTreeMap, HashMap, VecDeque};

use rand::Rng as _;
use serde::Serialize;
use serde_json::{Value, json};

use super::SandboxError;
use super::cards::TestCard;
use crate::clock::Clock;
use crate::integrations::processor::client::API_VERSION;
use crate::integrations::processor::types::Metadata;

/// The one currency the platform balance is kept in. Amounts of any currency count into it:
/// the sandbox does not convert.
pub(crate) const BALANCE_CURRENCY: &str = "eur";

/// Available balance of a fresh sandbox: large enough that ordinary flows transfer at once.
pub(crate) const DEFAULT_AVAILABLE_BALANCE: i64 = 100_000_000;

/// Card authorisations last seven days, as for most cards.
pub(crate) const AUTHORISATION_SECS: i64 = 7 * 24 * 3600;

/// Time a connected account has to answer a dispute.
pub(crate) const EVIDENCE_SECS: i64 = 7 * 24 * 3600;

/// Account links expire quickly, as the real ones do.
pub(crate) const ACCOUNT_LINK_SECS: i64 = 300;

/// The processor calls the sandbox counts, and which injected failures can target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Operation {
    CreatePaymentIntent,
    RetrievePaymentIntent,
    ConfirmPaymentIntent,
    Capture,
    Cancel,
    RetrieveCharge,
    Refund,
    RetrieveRefund,
    Transfer,
    RetrieveTransfer,
    ListTransfers,
    TransferReversal,
    CreateAccount,
    RetrieveAccount,
    CreateAccountLink,
    CreateCustomer,
    RetrieveCustomer,
    ListPaymentMethods,
    RetrievePaymentMethod,
    AttachPaymentMethod,
    DetachPaymentMethod,
    RetrieveBalance,
    RetrieveDispute,
    RetrieveEvent,
}

impl Operation {
    pub const ALL: [Operation; 24] = [
        Self::CreatePaymentIntent,
        Self::RetrievePaymentIntent,
        Self::ConfirmPaymentIntent,
        Self::Capture,
        Self::Cancel,
        Self::RetrieveCharge,
        Self::Refund,
        Self::RetrieveRefund,
        Self::Transfer,
        Self::RetrieveTransfer,
        Self::ListTransfers,
        Self::TransferReversal,
        Self::CreateAccount,
        Self::RetrieveAccount,
        Self::CreateAccountLink,
        Self::CreateCustomer,
        Self::RetrieveCustomer,
        Self::ListPaymentMethods,
        Self::RetrievePaymentMethod,
        Self::AttachPaymentMethod,
        Self::DetachPaymentMethod,
        Self::RetrieveBalance,
        Self::RetrieveDispute,
        Self::RetrieveEvent,
    ];

    /// The name used in the ledger's `calls` and by the failure-injection control.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CreatePaymentIntent => "create_payment_intent",
            Self::RetrievePaymentIntent => "retrieve_payment_intent",
            Self::ConfirmPaymentIntent => "confirm_payment_intent",
            Self::Capture => "capture",
            Self::Cancel => "cancel",
            Self::RetrieveCharge => "retrieve_charge",
            Self::Refund => "refund",
            Self::RetrieveRefund => "retrieve_refund",
            Self::Transfer => "transfer",
            Self::RetrieveTransfer => "retrieve_transfer",
            Self::ListTransfers => "list_transfers",
            Self::TransferReversal => "transfer_reversal",
            Self::CreateAccount => "create_account",
            Self::RetrieveAccount => "retrieve_account",
            Self::CreateAccountLink => "create_account_link",
            Self::CreateCustomer => "create_customer",
            Self::RetrieveCustomer => "retrieve_customer",
            Self::ListPaymentMethods => "list_payment_methods",
            Self::RetrievePaymentMethod => "retrieve_payment_method",
            Self::AttachPaymentMethod => "attach_payment_method",
            Self::DetachPaymentMethod => "detach_payment_method",
            Self::RetrieveBalance => "retrieve_balance",
            Self::RetrieveDispute => "retrieve_dispute",
            Self::RetrieveEvent => "retrieve_event",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|op| op.as_str() == name)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IntentStatus {
    RequiresPaymentMethod,
    RequiresConfirmation,
    RequiresAction,
    RequiresCapture,
    Canceled,
    Succeeded,
}

impl IntentStatus {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::RequiresPaymentMethod => "requires_payment_method",
            Self::RequiresConfirmation => "requires_confirmation",
            Self::RequiresAction => "requires_action",
            Self::RequiresCapture => "requires_capture",
            Self::Canceled => "canceled",
            Self::Succeeded => "succeeded",
        }
    }

    pub(crate) fn is_final(self) -> bool {
        matches!(self, Self::Canceled | Self::Succeeded)
    }
}

pub(crate) struct Intent {
    pub id: String,
    pub client_secret: String,
    pub amount: i64,
    pub currency: String,
    pub status: IntentStatus,
    /// `manual` (escrow: authorise now, capture later) or `automatic`.
    pub capture_method: String,
    pub customer: Option<String>,
    pub payment_method: Option<String>,
    pub description: Option<String>,
    pub transfer_group: Option<String>,
    pub metadata: Metadata,
    pub latest_charge: Option<String>,
    pub last_payment_error: Option<Value>,
    pub next_action: Option<Value>,
    pub amount_capturable: i64,
    pub amount_received: i64,
    pub created: i64,
    pub canceled_at: Option<i64>,
    pub cancellation_reason: Option<String>,
    /// Real captures (never counts replays or refused attempts).
    pub captures: u32,
    /// Authorised money released without capture (cancellation, expiry).
    pub released: i64,
}

pub(crate) struct Charge {
    pub id: String,
    pub amount: i64,
    pub amount_captured: i64,
    pub amount_refunded: i64,
    pub currency: String,
    pub captured: bool,
    pub paid: bool,
    /// `succeeded` (authorised or captured) or `failed` (declined).
    pub status: &'static str,
    pub payment_intent: Option<String>,
    pub customer: Option<String>,
    pub payment_method: Option<String>,
    pub card: TestCard,
    /// Unix seconds; set while an authorisation waits for capture.
    pub capture_before: Option<i64>,
    pub failure_code: Option<String>,
    pub failure_message: Option<String>,
    pub dispute: Option<String>,
    /// Transferred to connected accounts with this charge as `source_transaction`.
    pub transferred: i64,
    pub transfer_group: Option<String>,
    pub metadata: Metadata,
    pub created: i64,
}

impl Charge {
    /// Captured money not yet refunded.
    pub(crate) fn refundable(&self) -> i64 {
        self.amount_captured - self.amount_refunded
    }
}

pub(crate) struct RefundRecord {
    pub id: String,
    pub amount: i64,
    pub currency: String,
    pub charge: String,
    pub payment_intent: Option<String>,
    pub reason: Option<String>,
    pub metadata: Metadata,
    pub created: i64,
}

/// Which part of the platform balance a transfer was paid from, so a reversal or failure
/// gives the money back to the same place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Funding {
    Available,
    /// A `source_transaction` charge's pending funds.
    Pending,
}

pub(crate) struct TransferRecord {
    pub id: String,
    pub amount: i64,
    pub amount_reversed: i64,
    pub currency: String,
    pub destination: String,
    pub destination_payment: String,
    pub source_transaction: Option<String>,
    pub transfer_group: Option<String>,
    pub description: Option<String>,
    pub metadata: Metadata,
    pub reversals: Vec<String>,
    pub funding: Funding,
    /// Failed by the control: its money is back in the platform balance.
    pub failed: bool,
    pub created: i64,
}

impl TransferRecord {
    pub(crate) fn unreversed(&self) -> i64 {
        self.amount - self.amount_reversed
    }
}

pub(crate) struct ReversalRecord {
    pub id: String,
    pub amount: i64,
    pub currency: String,
    pub transfer: String,
    pub metadata: Metadata,
    pub created: i64,
}

pub(crate) struct AccountRecord {
    pub id: String,
    pub kind: String,
    pub email: Option<String>,
    pub country: String,
    pub charges_enabled: bool,
    pub payouts_enabled: bool,
    pub details_submitted: bool,
    pub metadata: Metadata,
    pub created: i64,
}

/// What the hosted onboarding page at an account link's URL does when opened.
pub(crate) struct LinkRecord {
    pub account: String,
    pub onboarding: bool,
    pub refresh_url: String,
    pub return_url: String,
    pub expires_at: i64,
    pub used: bool,
}

pub(crate) struct CustomerRecord {
    pub id: String,
    pub email: Option<String>,
    pub name: Option<String>,
    pub metadata: Metadata,
    pub created: i64,
}

pub(crate) struct PaymentMethodRecord {
    pub id: String,
    pub card: TestCard,
    pub customer: Option<String>,
    pub metadata: Metadata,
    pub created: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DisputeStatus {
    NeedsResponse,
    UnderReview,
    Won,
    Lost,
}

impl DisputeStatus {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::NeedsResponse => "needs_response",
            Self::UnderReview => "under_review",
            Self::Won => "won",
            Self::Lost => "lost",
        }
    }

    pub(crate) fn is_closed(self) -> bool {
        matches!(self, Self::Won | Self::Lost)
    }
}

pub(crate) struct DisputeRecord {
    pub id: String,
    pub amount: i64,
    pub currency: String,
    pub charge: String,
    pub payment_intent: Option<String>,
    pub status: DisputeStatus,
    pub reason: String,
    pub due_by: i64,
    pub has_evidence: bool,
    pub submission_count: i64,
    /// Money taken from the platform balance when the dispute opened (captured charges).
    pub withdrawn: i64,
    pub created: i64,
}

pub(crate) struct PayoutRecord {
    pub id: String,
    pub account: String,
    pub amount: i64,
    pub currency: String,
    pub status: &'static str,
    pub destination: String,
    pub failure_code: Option<String>,
    pub failure_message: Option<String>,
    pub created: i64,
}

/// One attempt to deliver an event to the webhook target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Delivery {
    /// Unix seconds of the attempt.
    pub at: i64,
    /// The signature header sent.
    pub signature: String,
    /// The target's HTTP status, when it answered.
    pub status: Option<u16>,
    /// Why there was no answer (no target set, connection refused, timeout).
    pub error: Option<String>,
}

impl Delivery {
    /// The target answered 2xx.
    pub fn succeeded(&self) -> bool {
        self.status.is_some_and(|s| (200..300).contains(&s))
    }
}

/// An event the sandbox sent, with the exact body delivered and every attempt.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventRecord {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub created: i64,
    pub account: Option<String>,
    /// The raw JSON body every attempt delivered (what the signature covers).
    pub payload: String,
    pub deliveries: Vec<Delivery>,
}

impl EventRecord {
    /// The delivered event as JSON.
    pub fn event(&self) -> Value {
        serde_json::from_str(&self.payload).unwrap_or(Value::Null)
    }
}

/// An injected failure: the next `remaining` calls of an operation fail with this answer
/// and change nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FailureRule {
    pub remaining: u32,
    pub status: u16,
    pub code: Option<String>,
}

/// A stored answer of an idempotent request.
struct StoredAnswer {
    /// The request's parameters, to refuse a key reused for a different request.
    fingerprint: String,
    answer: Result<Value, SandboxError>,
}

/// The replay of an idempotent request, or the refusal of a key reused with other parameters.
pub(crate) enum Replay {
    Answer(Result<Value, SandboxError>),
    Mismatch,
}

/// Rows in creation order, found by id.
pub(crate) struct Table<T> {
    rows: Vec<T>,
    index: HashMap<String, usize>,
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Self {
            rows: Vec::new(),
            index: HashMap::new(),
        }
    }
}

impl<T> Table<T> {
    pub(crate) fn insert(&mut self, id: &str, row: T) {
        self.index.insert(id.to_owned(), self.rows.len());
        self.rows.push(row);
    }

    pub(crate) fn get(&self, id: &str) -> Option<&T> {
        self.index.get(id).map(|&i| &self.rows[i])
    }

    pub(crate) fn get_mut(&mut self, id: &str) -> Option<&mut T> {
        self.index.get(id).map(|&i| &mut self.rows[i])
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.rows.iter()
    }
}

/// The request being handled: events it causes carry its idempotency key, as the real
/// processor's `request` field does.
#[derive(Default)]
struct RequestContext {
    id: Option<String>,
    idempotency_key: Option<String>,
}

pub struct State {
    clock: Clock,
    /// Where the sandbox serves (for URLs in objects: receipts, onboarding pages).
    pub(crate) base_url: String,
    pub(crate) intents: Table<Intent>,
    pub(crate) charges: Table<Charge>,
    pub(crate) refunds: Table<RefundRecord>,
    pub(crate) transfers: Table<TransferRecord>,
    pub(crate) reversals: Table<ReversalRecord>,
    pub(crate) accounts: Table<AccountRecord>,
    pub(crate) links: HashMap<String, LinkRecord>,
    pub(crate) customers: Table<CustomerRecord>,
    pub(crate) payment_methods: Table<PaymentMethodRecord>,
    pub(crate) disputes: Table<DisputeRecord>,
    pub(crate) payouts: Table<PayoutRecord>,
    pub(crate) events: Table<EventRecord>,
    pub(crate) available: i64,
    pub(crate) pending: i64,
    idempotency: HashMap<(String, String), StoredAnswer>,
    pub(crate) failures: HashMap<Operation, FailureRule>,
    pub(crate) calls: BTreeMap<&'static str, u64>,
    pub(crate) webhook_target: Option<String>,
    /// Events not yet delivered, oldest first.
    undelivered: VecDeque<String>,
    request: RequestContext,
}

impl State {
    pub(crate) fn new(clock: Clock, base_url: String) -> Self {
        Self {
            clock,
            base_url,
            intents: Table::default(),
            charges: Table::default(),
            refunds: Table::default(),
            transfers: Table::default(),
            reversals: Table::default(),
            accounts: Table::default(),
            links: HashMap::new(),
            customers: Table::default(),
            payment_methods: Table::default(),
            disputes: Table::default(),
            payouts: Table::default(),
            events: Table::default(),
            available: DEFAULT_AVAILABLE_BALANCE,
            pending: 0,
            idempotency: HashMap::new(),
            failures: HashMap::new(),
            calls: BTreeMap::new(),
            webhook_target: None,
            undelivered: VecDeque::new(),
            request: RequestContext::default(),
        }
    }

    /// Unix seconds on the sandbox's clock (the service's clock, so tests that move it move
    /// authorisation expiry too).
    pub(crate) fn now(&self) -> i64 {
        self.clock.now().timestamp()
    }

    /// Starts handling a request: remembers its idempotency key for the events it causes
    /// and lets time act first (authorisations that expired meanwhile are released).
    pub(crate) fn begin_request(&mut self, idempotency_key: Option<&str>, api_request: bool) {
        self.request = RequestContext {
            id: api_request.then(|| new_id("req")),
            idempotency_key: idempotency_key.map(str::to_owned),
        };
        self.expire_authorisations();
    }

    pub(crate) fn request_id(&self) -> Option<&str> {
        self.request.id.as_deref()
    }

    pub(crate) fn count_call(&mut self, op: Operation) {
        *self.calls.entry(op.as_str()).or_default() += 1;
    }

    /// Consumes one injected failure of `op`, if one is set.
    pub(crate) fn take_failure(&mut self, op: Operation) -> Option<SandboxError> {
        let rule = self.failures.get_mut(&op)?;
        if rule.remaining == 0 {
            return None;
        }
        rule.remaining -= 1;
        let (status, code) = (rule.status, rule.code.clone());
        if rule.remaining == 0 {
            self.failures.remove(&op);
        }
        Some(SandboxError::injected(op, status, code))
    }

    pub(crate) fn replay(&self, endpoint: &str, key: &str, fingerprint: &str) -> Option<Replay> {
        let stored = self
            .idempotency
            .get(&(endpoint.to_owned(), key.to_owned()))?;
        Some(if stored.fingerprint == fingerprint {
            Replay::Answer(stored.answer.clone())
        } else {
            Replay::Mismatch
        })
    }

    /// Keeps the answer for replays. Refusals of malformed parameters are not kept (the
    /// request never ran), as with the real processor; answers of requests that ran are,
    /// errors included.
    pub(crate) fn store_answer(
        &mut self,
        endpoint: &str,
        key: &str,
        fingerprint: String,
        answer: &Result<Value, SandboxError>,
    ) {
        if let Err(err) = answer
            && !err.replayable
        {
            return;
        }
        self.idempotency.insert(
            (endpoint.to_owned(), key.to_owned()),
            StoredAnswer {
                fingerprint,
                answer: answer.clone(),
            },
        );
    }

    /// Records an event and queues it for delivery.
    pub(crate) fn emit(
        &mut self,
        kind: &str,
        object: Value,
        account: Option<&str>,
        previous_attributes: Option<Value>,
    ) {
        let id = new_id("evt");
        let created = self.now();
        let mut data = json!({ "object": object });
        if let Some(previous) = previous_attributes {
            data["previous_attributes"] = previous;
        }
        let mut event = json!({
            "id": id,
            "object": "event",
            "api_version": API_VERSION,
            "created": created,
            "data": data,
            "livemode": false,
            "pending_webhooks": 1,
            "request": {
                "id": self.request.id,
                "idempotency_key": self.request.idempotency_key,
            },
            "type": kind,
        });
        if let Some(account) = account {
            event["account"] = Value::from(account);
        }
        let record = EventRecord {
            id: id.clone(),
            kind: kind.to_owned(),
            created,
            account: account.map(str::to_owned),
            payload: event.to_string(),
            deliveries: Vec::new(),
        };
        self.events.insert(&id, record);
        self.undelivered.push_back(id);
    }

    /// Queues a stored event for one more delivery.
    pub(crate) fn requeue(&mut self, event_id: &str) -> bool {
        if self.events.get(event_id).is_none() {
            return false;
        }
        self.undelivered.push_back(event_id.to_owned());
        true
    }

    /// Queues again every event whose last delivery was not accepted (the processor retries
    /// those; the standalone sandbox does too). Answers how many were queued.
    pub(crate) fn requeue_failed(&mut self) -> usize {
        let failed: Vec<String> = self
            .events
            .iter()
            .filter(|e| e.deliveries.last().is_some_and(|d| !d.succeeded()))
            .filter(|e| !self.undelivered.contains(&e.id))
            .map(|e| e.id.clone())
            .collect();
        let queued = failed.len();
        self.undelivered.extend(failed);
        queued
    }

    /// The oldest undelivered event: (id, body, target).
    pub(crate) fn next_undelivered(&mut self) -> Option<(String, String, Option<String>)> {
        let id = self.undelivered.pop_front()?;
        let payload = self.events.get(&id)?.payload.clone();
        Some((id, payload, self.webhook_target.clone()))
    }

    pub(crate) fn record_delivery(&mut self, event_id: &str, delivery: Delivery) {
        if let Some(event) = self.events.get_mut(event_id) {
            event.deliveries.push(delivery);
        }
    }

    /// Money leaving the platform to the card holder: pending funds first, then available
    /// (which may go negative, as the real balance may).
    pub(crate) fn debit_for_refund(&mut self, amount: i64) {
        let from_pending = amount.min(self.pending.max(0));
        self.pending -= from_pending;
        self.available -= amount - from_pending;
    }

    pub(crate) fn credit(&mut self, funding: Funding, amount: i64) {
        match funding {
            Funding::Available => self.available += amount,
            Funding::Pending => self.pending += amount,
        }
    }

    /// Releases every authorisation whose `capture_before` has passed: the intent is
    /// cancelled (`cancellation_reason: automatic`) and `payment_intent.canceled` is sent.
    fn expire_authorisations(&mut self) {
        let now = self.now();
        let expired: Vec<String> = self
            .intents
            .iter()
            .filter(|i| i.status == IntentStatus::RequiresCapture)
            .filter(|i| {
                i.latest_charge
                    .as_deref()
                    .and_then(|c| self.charges.get(c))
                    .and_then(|c| c.capture_before)
                    .is_some_and(|before| before <= now)
            })
            .map(|i| i.id.clone())
            .collect();
        for id in expired {
            self.release_authorisation(&id, Some("automatic"));
            let object = self.intent_json(&id);
            self.emit("payment_intent.canceled", object, None, None);
        }
    }

    /// Cancels an intent; an authorisation it holds is released, nothing is captured.
    pub(crate) fn release_authorisation(&mut self, intent_id: &str, reason: Option<&str>) {
        let now = self.now();
        let Some(intent) = self.intents.get_mut(intent_id) else {
            return;
        };
        intent.released += intent.amount_capturable;
        intent.amount_capturable = 0;
        intent.status = IntentStatus::Canceled;
        intent.canceled_at = Some(now);
        intent.cancellation_reason = reason.map(str::to_owned);
        intent.next_action = None;
        let charge = intent.latest_charge.clone();
        if let Some(charge) = charge.and_then(|c| self.charges.get_mut(&c)) {
            charge.capture_before = None;
        }
    }
}

/// `prefix_` and 24 random letters and digits, like the processor's ids.
pub(crate) fn new_id(prefix: &str) -> String {
    let suffix: String = rand::rng()
        .sample_iter(rand::distr::Alphanumeric)
        .take(24)
        .map(char::from)
        .collect();
    format!("{prefix}_{suffix}")
}
