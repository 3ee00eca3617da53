//! The processor's objects as the service reads them. Only the fields the service uses are
//! declared; every other field of the published objects is ignored, and fields the processor
//! may leave out or set to `null` are `Option`.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::domain::dispute::ChargebackStatus;
use crate::domain::payment::IntentStatus;

/// Free-form string pairs the service attaches to objects (`payment_id`, `milestone_id`, …).
pub type Metadata = BTreeMap<String, String>;

/// A reference to another object: its id, or the object itself when the request asked for it
/// to be expanded (`expand[]=latest_charge`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Expandable<T> {
    Id(String),
    Object(Box<T>),
}

/// Objects that carry an id, so an [`Expandable`] can name them either way.
pub trait HasId {
    fn id(&self) -> &str;
}

impl<T: HasId> Expandable<T> {
    pub fn id(&self) -> &str {
        match self {
            Self::Id(id) => id,
            Self::Object(object) => object.id(),
        }
    }

    /// The expanded object, when the response carried it.
    pub fn object(&self) -> Option<&T> {
        match self {
            Self::Id(_) => None,
            Self::Object(object) => Some(object),
        }
    }
}

macro_rules! has_id {
    ($($ty:ty),*) => {
        $(impl HasId for $ty {
            fn id(&self) -> &str {
                &self.id
            }
        })*
    };
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PaymentIntent {
    pub id: String,
    pub amount: i64,
    #[serde(default)]
    pub amount_capturable: i64,
    #[serde(default)]
    pub amount_received: i64,
    pub currency: String,
    /// `requires_payment_method`, `requires_confirmation`, `requires_action`, `processing`,
    /// `requires_capture`, `canceled` or `succeeded`.
    pub status: String,
    /// `manual` for every intent the service creates (escrow).
    pub capture_method: Option<String>,
    pub client_secret: Option<String>,
    /// The charge of the last confirmation: where the service reads the charge id from.
    pub latest_charge: Option<Expandable<Charge>>,
    pub customer: Option<String>,
    pub payment_method: Option<String>,
    #[serde(default)]
    pub metadata: Metadata,
    pub last_payment_error: Option<PaymentError>,
    pub cancellation_reason: Option<String>,
    pub transfer_group: Option<String>,
    pub description: Option<String>,
    pub created: Option<i64>,
}

impl PaymentIntent {
    /// Its status as the service reads it.
    pub fn state(&self) -> IntentStatus {
        IntentStatus::of(&self.status)
    }

    /// The id of the latest charge, whether the response expanded it or not.
    pub fn latest_charge_id(&self) -> Option<&str> {
        self.latest_charge.as_ref().map(Expandable::id)
    }
}

/// Why the last confirmation failed (`last_payment_error`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PaymentError {
    /// `card_error`, `invalid_request_error`, …
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub code: Option<String>,
    pub decline_code: Option<String>,
    pub message: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Charge {
    pub id: String,
    pub amount: i64,
    #[serde(default)]
    pub amount_captured: i64,
    #[serde(default)]
    pub amount_refunded: i64,
    pub currency: Option<String>,
    #[serde(default)]
    pub captured: bool,
    #[serde(default)]
    pub refunded: bool,
    #[serde(default)]
    pub paid: bool,
    /// `succeeded`, `pending` or `failed`.
    pub status: String,
    pub payment_intent: Option<String>,
    pub receipt_url: Option<String>,
    #[serde(default)]
    pub disputed: bool,
    pub payment_method_details: Option<PaymentMethodDetails>,
}

impl Charge {
    /// When an uncaptured authorisation expires (unix seconds), when the processor says.
    pub fn capture_before(&self) -> Option<i64> {
        self.payment_method_details
            .as_ref()?
            .card
            .as_ref()?
            .capture_before
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PaymentMethodDetails {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub card: Option<ChargeCard>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChargeCard {
    pub brand: Option<String>,
    pub last4: Option<String>,
    /// Unix seconds; present on uncaptured card authorisations.
    pub capture_before: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Refund {
    pub id: String,
    pub amount: i64,
    pub charge: Option<String>,
    pub payment_intent: Option<String>,
    pub currency: Option<String>,
    pub reason: Option<String>,
    /// `succeeded`, `pending`, `failed`, `canceled`, `requires_action`.
    pub status: Option<String>,
    #[serde(default)]
    pub metadata: Metadata,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Transfer {
    pub id: String,
    pub amount: i64,
    #[serde(default)]
    pub amount_reversed: i64,
    pub currency: Option<String>,
    /// The connected account (`acct_…`).
    pub destination: Option<String>,
    #[serde(default)]
    pub reversed: bool,
    pub source_transaction: Option<String>,
    pub transfer_group: Option<String>,
    #[serde(default)]
    pub metadata: Metadata,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TransferReversal {
    pub id: String,
    pub amount: i64,
    pub currency: Option<String>,
    pub transfer: String,
    #[serde(default)]
    pub metadata: Metadata,
}

/// A connected payout account.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Account {
    pub id: String,
    #[serde(default)]
    pub charges_enabled: bool,
    #[serde(default)]
    pub payouts_enabled: bool,
    #[serde(default)]
    pub details_submitted: bool,
    pub email: Option<String>,
    pub country: Option<String>,
    pub requirements: Option<AccountRequirements>,
    #[serde(default)]
    pub metadata: Metadata,
}

/// What the account still has to provide before it may charge or be paid out.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AccountRequirements {
    #[serde(default)]
    pub currently_due: Vec<String>,
    #[serde(default)]
    pub past_due: Vec<String>,
    pub disabled_reason: Option<String>,
}

/// A hosted onboarding (or update) page of a connected account.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AccountLink {
    pub url: String,
    pub expires_at: i64,
    pub created: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Balance {
    #[serde(default)]
    pub available: Vec<BalanceAmount>,
    #[serde(default)]
    pub pending: Vec<BalanceAmount>,
}

impl Balance {
    /// The available amount in `currency` (0 when the processor lists none).
    pub fn available_in(&self, currency: &str) -> i64 {
        sum_in(&self.available, currency)
    }

    /// The pending amount in `currency` (0 when the processor lists none).
    pub fn pending_in(&self, currency: &str) -> i64 {
        sum_in(&self.pending, currency)
    }
}

fn sum_in(amounts: &[BalanceAmount], currency: &str) -> i64 {
    amounts
        .iter()
        .filter(|a| a.currency.eq_ignore_ascii_case(currency))
        .map(|a| a.amount)
        .sum()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BalanceAmount {
    pub amount: i64,
    pub currency: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Customer {
    pub id: String,
    pub email: Option<String>,
    pub name: Option<String>,
    #[serde(default)]
    pub metadata: Metadata,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PaymentMethod {
    pub id: String,
    /// `card` for every method the service saves.
    #[serde(rename = "type")]
    pub kind: String,
    pub card: Option<CardDetails>,
    pub customer: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CardDetails {
    pub brand: Option<String>,
    pub last4: Option<String>,
    pub exp_month: Option<u32>,
    pub exp_year: Option<i32>,
}

/// A list answer (`{"object": "list", "data": [...], "has_more": …}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct List<T> {
    pub data: Vec<T>,
    #[serde(default)]
    pub has_more: bool,
}

/// A chargeback opened by the card holder's bank.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Dispute {
    pub id: String,
    pub amount: i64,
    pub currency: Option<String>,
    pub charge: String,
    pub payment_intent: Option<String>,
    /// `warning_needs_response`, `warning_under_review`, `warning_closed`, `needs_response`,
    /// `under_review`, `won` or `lost`.
    pub status: String,
    pub reason: String,
    pub evidence_details: Option<EvidenceDetails>,
}

impl Dispute {
    /// Its status as the service reads it.
    pub fn state(&self) -> ChargebackStatus {
        ChargebackStatus::of(&self.status)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvidenceDetails {
    /// Unix seconds; evidence must be submitted before.
    pub due_by: Option<i64>,
    #[serde(default)]
    pub has_evidence: bool,
    #[serde(default)]
    pub past_due: bool,
    #[serde(default)]
    pub submission_count: i64,
}

/// Money leaving a connected account for its bank.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Payout {
    pub id: String,
    pub amount: i64,
    pub currency: String,
    /// `paid`, `pending`, `in_transit`, `canceled` or `failed`.
    pub status: String,
    pub destination: Option<String>,
    pub failure_code: Option<String>,
    pub failure_message: Option<String>,
}

/// A webhook event. `data.object` is kept as JSON: its type depends on `type`; the typed
/// accessors read it as the object the service expects.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub created: i64,
    /// The connected account the event happened on (Connect events: `account.updated`,
    /// `payout.*`); absent for the platform's own events.
    pub account: Option<String>,
    pub api_version: Option<String>,
    pub data: EventData,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventData {
    pub object: Value,
    /// The changed fields' earlier values, on `*.updated` events.
    pub previous_attributes: Option<Value>,
}

impl Event {
    /// `data.object` read as `T`.
    pub fn object_as<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        T::deserialize(&self.data.object)
    }

    /// The `object` field of `data.object` (`payment_intent`, `charge`, `dispute`, …).
    pub fn object_kind(&self) -> Option<&str> {
        self.data.object.get("object").and_then(Value::as_str)
    }

    /// The id of `data.object`.
    pub fn object_id(&self) -> Option<&str> {
        self.data.object.get("id").and_then(Value::as_str)
    }

    pub fn payment_intent(&self) -> Result<PaymentIntent, serde_json::Error> {
        self.object_as()
    }

    pub fn charge(&self) -> Result<Charge, serde_json::Error> {
        self.object_as()
    }

    pub fn dispute(&self) -> Result<Dispute, serde_json::Error> {
        self.object_as()
    }

    pub fn transfer(&self) -> Result<Transfer, serde_json::Error> {
        self.object_as()
    }

    pub fn payout(&self) -> Result<Payout, serde_json::Error> {
        self.object_as()
    }

    pub fn account_object(&self) -> Result<Account, serde_json::Error> {
        self.object_as()
    }
}

has_id!(
    PaymentIntent,
    Charge,
    Refund,
    Transfer,
    TransferReversal,
    Account,
    Customer,
    PaymentMethod,
    Dispute,
    Payout
);

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> Value {
        let text = include_str!("../../../tests/fixtures/processor/objects.json");
        serde_json::from_str(text).expect("objects.json is JSON")
    }

    fn parse<T: DeserializeOwned>(objects: &Value, name: &str) -> T {
        serde_json::from_value(objects[name].clone())
            .unwrap_or_else(|e| panic!("{name} does not parse: {e}"))
    }

    #[test]
    fn every_published_object_parses_into_its_type() {
        let fixture = fixture();
        let objects = &fixture["objects"];
        let names: Vec<&str> = objects
            .as_object()
            .expect("objects")
            .keys()
            .map(String::as_str)
            .collect();
        for name in names {
            match name {
                "account" => {
                    let a: Account = parse(objects, name);
                    assert_eq!(a.id, "acct_1PgafTB7WZ01zgkW");
                    assert!(!a.charges_enabled && !a.details_submitted);
                    assert_eq!(a.requirements.unwrap().currently_due.len(), 6);
                }
                "account_link" => {
                    let l: AccountLink = parse(objects, name);
                    assert!(l.url.starts_with("https://"));
                }
                "balance" => {
                    let b: Balance = parse(objects, name);
                    assert_eq!(b.available_in("usd"), 0);
                    assert_eq!(b.pending.len(), 1);
                }
                "charge" => {
                    let c: Charge = parse(objects, name);
                    assert_eq!((c.amount, c.captured, c.paid), (100, false, true));
                    assert_eq!(c.capture_before(), None);
                    assert_eq!(
                        c.payment_method_details.unwrap().card.unwrap().last4,
                        Some("4242".into())
                    );
                }
                "customer" => {
                    let c: Customer = parse(objects, name);
                    assert_eq!(c.id, "cus_QXg1o8vcGmoR32");
                }
                "dispute" => {
                    let d: Dispute = parse(objects, name);
                    assert_eq!(d.status, "warning_needs_response");
                    assert_eq!(d.evidence_details.unwrap().due_by, Some(1723679999));
                }
                "event" => {
                    let e: Event = parse(objects, name);
                    assert_eq!(e.kind, "plan.created");
                    assert_eq!(e.account, None);
                    assert_eq!(e.object_kind(), Some("plan"));
                    assert_eq!(e.object_id(), Some("price_1PgafmB7WZ01zgkW6dKueIc5"));
                    // The data object is whatever the type says; here a plan, read as JSON.
                    let plan: Value = e.object_as().unwrap();
                    assert_eq!(plan["amount"], 2000);
                    assert!(e.payment_intent().is_err());
                }
                "payment_intent" => {
                    let p: PaymentIntent = parse(objects, name);
                    assert_eq!(p.status, "requires_payment_method");
                    assert_eq!(p.latest_charge_id(), None);
                    assert!(p.client_secret.unwrap().starts_with("pi_"));
                    assert_eq!(
                        p.last_payment_error.unwrap().kind.as_deref(),
                        Some("idempotency_error")
                    );
                }
                "payment_method" => {
                    let m: PaymentMethod = parse(objects, name);
                    assert_eq!(m.kind, "card");
                    let card = m.card.unwrap();
                    assert_eq!((card.exp_month, card.exp_year), (Some(8), Some(2030)));
                }
                "payout" => {
                    let p: Payout = parse(objects, name);
                    assert_eq!(p.status, "in_transit");
                }
                "refund" => {
                    let r: Refund = parse(objects, name);
                    assert_eq!(r.charge.as_deref(), Some("ch_1PgafuB7WZ01zgkWXYmPNZs8"));
                }
                "transfer" => {
                    let t: Transfer = parse(objects, name);
                    assert_eq!(t.destination.as_deref(), Some("acct_1PgafTB7WZ01zgkW"));
                    assert!(!t.reversed);
                }
                "transfer_reversal" => {
                    let r: TransferReversal = parse(objects, name);
                    assert_eq!(r.transfer, "tr_1Pgc7BB7WZ01zgkWVJfE40RX");
                }
                other => panic!("objects.json has an object no type reads: {other}"),
            }
        }
    }

    #[test]
    fn latest_charge_reads_as_id_or_expanded_object() {
        let objects = &fixture()["objects"];
        let mut intent = objects["payment_intent"].clone();
        intent["latest_charge"] = Value::from("ch_1");
        let by_id: PaymentIntent = serde_json::from_value(intent.clone()).unwrap();
        assert_eq!(by_id.latest_charge_id(), Some("ch_1"));

        intent["latest_charge"] = objects["charge"].clone();
        let expanded: PaymentIntent = serde_json::from_value(intent).unwrap();
        assert_eq!(
            expanded.latest_charge_id(),
            Some("ch_1PgafuB7WZ01zgkWXYmPNZs8")
        );
        let charge = expanded.latest_charge.unwrap();
        assert_eq!(charge.object().unwrap().amount, 100);
    }

    #[test]
    fn event_data_object_reads_as_the_typed_object() {
        let objects = &fixture()["objects"];
        let event: Event = serde_json::from_value(serde_json::json!({
            "id": "evt_1", "object": "event", "type": "charge.dispute.created",
            "created": 1, "account": null, "api_version": "2024-12-18.acacia",
            "data": {"object": objects["dispute"].clone()}
        }))
        .unwrap();
        assert_eq!(event.dispute().unwrap().reason, "general");
        assert_eq!(event.object_kind(), Some("dispute"));
    }
}
