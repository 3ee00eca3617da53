//! The sandbox's records as the processor's JSON objects (shapes of
//! `tests/fixtures/processor/objects.json`, fields the sandbox does not model left out or
//! `null`).

use serde_json::{Value, json};

use super::cards::TestCard;
use super::state::{BALANCE_CURRENCY, State};

/// Requirements an express account has until onboarding is complete.
const ONBOARDING_REQUIREMENTS: [&str; 6] = [
    "business_type",
    "external_account",
    "individual.first_name",
    "individual.last_name",
    "tos_acceptance.date",
    "tos_acceptance.ip",
];

impl State {
    pub(crate) fn intent_json(&self, id: &str) -> Value {
        let Some(i) = self.intents.get(id) else {
            return Value::Null;
        };
        json!({
            "id": i.id,
            "object": "payment_intent",
            "amount": i.amount,
            "amount_capturable": i.amount_capturable,
            "amount_received": i.amount_received,
            "canceled_at": i.canceled_at,
            "cancellation_reason": i.cancellation_reason,
            "capture_method": i.capture_method,
            "client_secret": i.client_secret,
            "confirmation_method": "automatic",
            "created": i.created,
            "currency": i.currency,
            "customer": i.customer,
            "description": i.description,
            "last_payment_error": i.last_payment_error,
            "latest_charge": i.latest_charge,
            "livemode": false,
            "metadata": i.metadata,
            "next_action": i.next_action,
            "payment_method": i.payment_method,
            "payment_method_types": ["card"],
            "status": i.status.as_str(),
            "transfer_group": i.transfer_group,
        })
    }

    pub(crate) fn charge_json(&self, id: &str) -> Value {
        let Some(c) = self.charges.get(id) else {
            return Value::Null;
        };
        let mut card = card_json(&c.card);
        card["capture_before"] = json!(c.capture_before);
        card["network"] = json!(c.card.brand);
        let declined = c.status == "failed";
        json!({
            "id": c.id,
            "object": "charge",
            "amount": c.amount,
            "amount_captured": c.amount_captured,
            "amount_refunded": c.amount_refunded,
            "balance_transaction": null,
            "captured": c.captured,
            "created": c.created,
            "currency": c.currency,
            "customer": c.customer,
            "disputed": c.dispute.is_some(),
            "failure_code": c.failure_code,
            "failure_message": c.failure_message,
            "livemode": false,
            "metadata": c.metadata,
            "outcome": {
                "network_status": if declined { "declined_by_network" } else { "approved_by_network" },
                "reason": c.failure_code,
                "risk_level": "normal",
                "seller_message": if declined { "The bank did not return any further details with this decline." } else { "Payment complete." },
                "type": if declined { "issuer_declined" } else { "authorized" },
            },
            "paid": c.paid,
            "payment_intent": c.payment_intent,
            "payment_method": c.payment_method,
            "payment_method_details": { "card": card, "type": "card" },
            "receipt_url": (!declined).then(|| format!("{}/receipts/payment/{}", self.base_url, c.id)),
            "refunded": c.amount_captured > 0 && c.amount_refunded >= c.amount_captured,
            "status": c.status,
            "transfer_group": c.transfer_group,
        })
    }

    pub(crate) fn refund_json(&self, id: &str) -> Value {
        let Some(r) = self.refunds.get(id) else {
            return Value::Null;
        };
        json!({
            "id": r.id,
            "object": "refund",
            "amount": r.amount,
            "balance_transaction": null,
            "charge": r.charge,
            "created": r.created,
            "currency": r.currency,
            "metadata": r.metadata,
            "payment_intent": r.payment_intent,
            "reason": r.reason,
            "receipt_number": null,
            "status": "succeeded",
            "transfer_reversal": null,
        })
    }

    pub(crate) fn transfer_json(&self, id: &str) -> Value {
        let Some(t) = self.transfers.get(id) else {
            return Value::Null;
        };
        let reversals: Vec<Value> = t.reversals.iter().map(|r| self.reversal_json(r)).collect();
        json!({
            "id": t.id,
            "object": "transfer",
            "amount": t.amount,
            "amount_reversed": t.amount_reversed,
            "balance_transaction": null,
            "created": t.created,
            "currency": t.currency,
            "description": t.description,
            "destination": t.destination,
            "destination_payment": t.destination_payment,
            "livemode": false,
            "metadata": t.metadata,
            "reversals": {
                "object": "list",
                "data": reversals,
                "has_more": false,
                "total_count": t.reversals.len(),
                "url": format!("/v1/transfers/{}/reversals", t.id),
            },
            "reversed": t.amount_reversed >= t.amount,
            "source_transaction": t.source_transaction,
            "source_type": "card",
            "transfer_group": t.transfer_group,
        })
    }

    pub(crate) fn reversal_json(&self, id: &str) -> Value {
        let Some(r) = self.reversals.get(id) else {
            return Value::Null;
        };
        json!({
            "id": r.id,
            "object": "transfer_reversal",
            "amount": r.amount,
            "balance_transaction": null,
            "created": r.created,
            "currency": r.currency,
            "destination_payment_refund": null,
            "metadata": r.metadata,
            "source_refund": null,
            "transfer": r.transfer,
        })
    }

    pub(crate) fn account_json(&self, id: &str) -> Value {
        let Some(a) = self.accounts.get(id) else {
            return Value::Null;
        };
        let due: Vec<&str> = if a.details_submitted {
            Vec::new()
        } else {
            ONBOARDING_REQUIREMENTS.to_vec()
        };
        let capability = |on: bool| if on { "active" } else { "inactive" };
        json!({
            "id": a.id,
            "object": "account",
            "business_type": null,
            "capabilities": {
                "card_payments": capability(a.charges_enabled),
                "transfers": capability(a.payouts_enabled),
            },
            "charges_enabled": a.charges_enabled,
            "country": a.country,
            "created": a.created,
            "default_currency": BALANCE_CURRENCY,
            "details_submitted": a.details_submitted,
            "email": a.email,
            "metadata": a.metadata,
            "payouts_enabled": a.payouts_enabled,
            "requirements": {
                "alternatives": [],
                "current_deadline": null,
                "currently_due": due,
                "disabled_reason": (!a.charges_enabled).then_some("requirements.past_due"),
                "errors": [],
                "eventually_due": due,
                "past_due": due,
                "pending_verification": [],
            },
            "type": a.kind,
        })
    }

    pub(crate) fn customer_json(&self, id: &str) -> Value {
        let Some(c) = self.customers.get(id) else {
            return Value::Null;
        };
        json!({
            "id": c.id,
            "object": "customer",
            "created": c.created,
            "email": c.email,
            "invoice_settings": { "default_payment_method": null },
            "livemode": false,
            "metadata": c.metadata,
            "name": c.name,
        })
    }

    pub(crate) fn payment_method_json(&self, id: &str) -> Value {
        let Some(m) = self.payment_methods.get(id) else {
            return Value::Null;
        };
        let mut card = card_json(&m.card);
        card["display_brand"] = json!(m.card.brand);
        card["checks"] = json!({ "cvc_check": "pass" });
        json!({
            "id": m.id,
            "object": "payment_method",
            "billing_details": {
                "address": { "city": null, "country": null, "line1": null, "line2": null, "postal_code": null, "state": null },
                "email": null,
                "name": null,
                "phone": null,
            },
            "card": card,
            "created": m.created,
            "customer": m.customer,
            "livemode": false,
            "metadata": m.metadata,
            "type": "card",
        })
    }

    pub(crate) fn dispute_json(&self, id: &str) -> Value {
        let Some(d) = self.disputes.get(id) else {
            return Value::Null;
        };
        json!({
            "id": d.id,
            "object": "dispute",
            "amount": d.amount,
            "balance_transactions": [],
            "charge": d.charge,
            "created": d.created,
            "currency": d.currency,
            "evidence_details": {
                "due_by": d.due_by,
                "has_evidence": d.has_evidence,
                "past_due": !d.status.is_closed() && self.now() > d.due_by,
                "submission_count": d.submission_count,
            },
            "is_charge_refundable": false,
            "livemode": false,
            "metadata": {},
            "payment_intent": d.payment_intent,
            "reason": d.reason,
            "status": d.status.as_str(),
        })
    }

    pub(crate) fn payout_json(&self, id: &str) -> Value {
        let Some(p) = self.payouts.get(id) else {
            return Value::Null;
        };
        json!({
            "id": p.id,
            "object": "payout",
            "amount": p.amount,
            "arrival_date": p.created + 24 * 3600,
            "automatic": true,
            "balance_transaction": null,
            "created": p.created,
            "currency": p.currency,
            "description": "STRIPE PAYOUT",
            "destination": p.destination,
            "failure_balance_transaction": null,
            "failure_code": p.failure_code,
            "failure_message": p.failure_message,
            "livemode": false,
            "metadata": {},
            "method": "standard",
            "source_type": "card",
            "status": p.status,
            "type": "bank_account",
        })
    }

    pub(crate) fn balance_json(&self) -> Value {
        json!({
            "object": "balance",
            "available": [{ "amount": self.available, "currency": BALANCE_CURRENCY, "source_types": { "card": self.available } }],
            "pending": [{ "amount": self.pending, "currency": BALANCE_CURRENCY, "source_types": { "card": self.pending } }],
            "livemode": false,
        })
    }
}

fn card_json(card: &TestCard) -> Value {
    json!({
        "brand": card.brand,
        "country": card.country,
        "exp_month": card.exp_month,
        "exp_year": card.exp_year,
        "funding": card.funding,
        "last4": card.last4,
    })
}
