//! The rules of the processor's API calls, applied to [`State`]. Each checks everything
//! before it changes anything, so a refused call leaves no trace but its error.

use serde_json::{Value, json};

use super::SandboxError;
use super::cards::{CardBehaviour, test_card};
use super::state::{
    ACCOUNT_LINK_SECS, AUTHORISATION_SECS, AccountRecord, Charge, CustomerRecord, Funding, Intent,
    IntentStatus, LinkRecord, PaymentMethodRecord, RefundRecord, ReversalRecord, State,
    TransferRecord, new_id,
};
use crate::integrations::processor::form::FormParams;

/// Smallest amount a card payment may have, in minor units (0.50 in the usual currencies).
const MINIMUM_CHARGE: i64 = 50;

const REFUND_REASONS: [&str; 3] = ["duplicate", "fraudulent", "requested_by_customer"];
const CANCELLATION_REASONS: [&str; 4] = [
    "duplicate",
    "fraudulent",
    "requested_by_customer",
    "abandoned",
];

/// What a confirmation did.
#[derive(Debug)]
pub(crate) enum Confirmation {
    Authorised,
    /// Declined: the intent is back to `requires_payment_method`; the API answers 402.
    Declined(SandboxError),
    RequiresAction,
}

fn required<'a>(params: &'a FormParams, name: &str) -> Result<&'a str, SandboxError> {
    params.get(name).filter(|v| !v.is_empty()).ok_or_else(|| {
        SandboxError::invalid_param(
            name,
            "parameter_missing",
            format!("Missing required param: {name}."),
        )
    })
}

fn optional<'a>(params: &'a FormParams, name: &str) -> Option<&'a str> {
    params.get(name).filter(|v| !v.is_empty())
}

/// A positive whole number of minor units.
fn amount(params: &FormParams, name: &str) -> Result<Option<i64>, SandboxError> {
    let Some(raw) = optional(params, name) else {
        return Ok(None);
    };
    match raw.parse::<i64>() {
        Ok(n) if n > 0 => Ok(Some(n)),
        _ => Err(SandboxError::invalid_param(
            name,
            "parameter_invalid_integer",
            format!("Invalid positive integer: {name}"),
        )),
    }
}

fn required_amount(params: &FormParams, name: &str) -> Result<i64, SandboxError> {
    required(params, name)?;
    amount(params, name)?.ok_or_else(|| {
        SandboxError::invalid_param(
            name,
            "parameter_missing",
            format!("Missing required param: {name}."),
        )
    })
}

fn currency(params: &FormParams) -> Result<String, SandboxError> {
    let raw = required(params, "currency")?;
    if raw.len() == 3 && raw.chars().all(|c| c.is_ascii_alphabetic()) {
        Ok(raw.to_ascii_lowercase())
    } else {
        Err(SandboxError::invalid_param(
            "currency",
            "parameter_invalid_string",
            format!("Invalid currency: {raw}"),
        ))
    }
}

fn one_of<'a>(
    params: &'a FormParams,
    name: &str,
    allowed: &[&str],
) -> Result<Option<&'a str>, SandboxError> {
    match optional(params, name) {
        Some(value) if !allowed.contains(&value) => Err(SandboxError::invalid_param(
            name,
            "parameter_invalid_string",
            format!("Invalid {name}: must be one of {}", allowed.join(", ")),
        )),
        other => Ok(other),
    }
}

fn unexpected_state(what: &str, status: &str, allowed: &str) -> SandboxError {
    SandboxError::refused(
        Some("payment_intent_unexpected_state"),
        format!(
            "This PaymentIntent could not be {what} because it has a status of {status}. \
             Only a PaymentIntent with one of the following statuses may be {what}: {allowed}."
        ),
    )
}

impl State {
    fn intent(&self, id: &str) -> Result<&Intent, SandboxError> {
        self.intents
            .get(id)
            .ok_or_else(|| SandboxError::missing("payment_intent", id))
    }

    fn intent_mut(&mut self, id: &str) -> Result<&mut Intent, SandboxError> {
        self.intents
            .get_mut(id)
            .ok_or_else(|| SandboxError::missing("payment_intent", id))
    }

    /// The intent as the API answers it, with `latest_charge` expanded when asked.
    pub(crate) fn intent_answer(&self, id: &str, params: &FormParams) -> Value {
        let mut intent = self.intent_json(id);
        if params.list("expand").contains(&"latest_charge")
            && let Some(charge) = intent["latest_charge"].as_str().map(str::to_owned)
        {
            intent["latest_charge"] = self.charge_json(&charge);
        }
        intent
    }

    pub(crate) fn retrieve(&self, object: &str, id: &str) -> Result<Value, SandboxError> {
        let found = match object {
            "payment_intent" => self.intent_json(id),
            "charge" => self.charge_json(id),
            "refund" => self.refund_json(id),
            "transfer" => self.transfer_json(id),
            "account" => self.account_json(id),
            "customer" => self.customer_json(id),
            "payment_method" => self.payment_method_json(id),
            "dispute" => self.dispute_json(id),
            "event" => self
                .events
                .get(id)
                .map(|e| e.event())
                .unwrap_or(Value::Null),
            _ => Value::Null,
        };
        if found.is_null() {
            Err(SandboxError::missing(object, id))
        } else {
            Ok(found)
        }
    }

    /// A test token (`pm_card_visa`) becomes a new payment method, as the processor does;
    /// an existing payment method id is used as is.
    fn resolve_payment_method(
        &mut self,
        given: &str,
        customer: Option<&str>,
    ) -> Result<String, SandboxError> {
        if let Some(card) = test_card(given) {
            let id = new_id("pm");
            let record = PaymentMethodRecord {
                id: id.clone(),
                card,
                customer: customer.map(str::to_owned),
                metadata: Default::default(),
                created: self.now(),
            };
            self.payment_methods.insert(&id, record);
            return Ok(id);
        }
        if self.payment_methods.get(given).is_some() {
            return Ok(given.to_owned());
        }
        Err(SandboxError::missing_param(
            "payment_method",
            "PaymentMethod",
            given,
        ))
    }

    pub(crate) fn create_payment_intent(
        &mut self,
        params: &FormParams,
    ) -> Result<Value, SandboxError> {
        let amount = required_amount(params, "amount")?;
        let currency = currency(params)?;
        if amount < MINIMUM_CHARGE {
            return Err(SandboxError::invalid_param(
                "amount",
                "amount_too_small",
                format!("Amount must be at least {MINIMUM_CHARGE} minor units"),
            ));
        }
        let capture_method = one_of(params, "capture_method", &["automatic", "manual"])?
            .unwrap_or("automatic")
            .to_owned();
        let customer = optional(params, "customer").map(str::to_owned);
        if let Some(customer) = &customer
            && self.customers.get(customer).is_none()
        {
            return Err(SandboxError::missing_param(
                "customer", "customer", customer,
            ));
        }
        let payment_method = match optional(params, "payment_method") {
            Some(given) => Some(self.resolve_payment_method(given, None)?),
            None => None,
        };
        let id = new_id("pi");
        let client_secret = format!("{id}_secret_{}", &new_id("s")[2..]);
        let intent = Intent {
            id: id.clone(),
            client_secret,
            amount,
            currency,
            status: if payment_method.is_some() {
                IntentStatus::RequiresConfirmation
            } else {
                IntentStatus::RequiresPaymentMethod
            },
            capture_method,
            customer,
            payment_method,
            description: optional(params, "description").map(str::to_owned),
            transfer_group: optional(params, "transfer_group").map(str::to_owned),
            metadata: metadata(params),
            latest_charge: None,
            last_payment_error: None,
            next_action: None,
            amount_capturable: 0,
            amount_received: 0,
            created: self.now(),
            canceled_at: None,
            cancellation_reason: None,
            captures: 0,
            released: 0,
        };
        self.intents.insert(&id, intent);
        if params.get("confirm") == Some("true")
            && let Confirmation::Declined(error) = self.confirm_intent(&id, None)?
        {
            return Err(error);
        }
        Ok(self.intent_answer(&id, params))
    }

    /// Confirms with `payment_method` (a test token or a payment method id), or the one the
    /// intent already has. Sends `payment_intent.amount_capturable_updated` (authorised,
    /// manual capture), `payment_intent.succeeded` (automatic capture),
    /// `payment_intent.payment_failed` or `payment_intent.requires_action`.
    pub(crate) fn confirm_intent(
        &mut self,
        id: &str,
        payment_method: Option<&str>,
    ) -> Result<Confirmation, SandboxError> {
        let intent = self.intent(id)?;
        if !matches!(
            intent.status,
            IntentStatus::RequiresPaymentMethod
                | IntentStatus::RequiresConfirmation
                | IntentStatus::RequiresAction
        ) {
            return Err(unexpected_state(
                "confirmed",
                intent.status.as_str(),
                "requires_payment_method, requires_confirmation, requires_action",
            ));
        }
        let customer = intent.customer.clone();
        let pm = match (payment_method, intent.payment_method.clone()) {
            (Some(given), _) => self.resolve_payment_method(given, None)?,
            (None, Some(existing)) => existing,
            (None, None) => {
                return Err(SandboxError::refused(
                    Some("payment_intent_unexpected_state"),
                    "You cannot confirm this PaymentIntent because it's missing a payment method.",
                ));
            }
        };
        let card = match self.payment_methods.get(&pm) {
            Some(record) => record.card,
            None => {
                return Err(SandboxError::missing_param(
                    "payment_method",
                    "PaymentMethod",
                    &pm,
                ));
            }
        };
        let now = self.now();
        let intent = self.intent_mut(id)?;
        let (amount, currency, manual) = (
            intent.amount,
            intent.currency.clone(),
            intent.capture_method == "manual",
        );
        let metadata = intent.metadata.clone();
        let transfer_group = intent.transfer_group.clone();

        if card.behaviour == CardBehaviour::RequireAction {
            intent.status = IntentStatus::RequiresAction;
            intent.payment_method = Some(pm);
            intent.last_payment_error = None;
            intent.next_action = Some(json!({
                "type": "use_stripe_sdk",
                "use_stripe_sdk": { "type": "three_d_secure_redirect" },
            }));
            let object = self.intent_json(id);
            self.emit("payment_intent.requires_action", object, None, None);
            return Ok(Confirmation::RequiresAction);
        }

        let charge_id = new_id("ch");
        let declined = match card.behaviour {
            CardBehaviour::Decline {
                decline_code,
                message,
            } => Some((decline_code, message)),
            _ => None,
        };
        let authorised = declined.is_none();
        let capture_now = authorised && !manual;
        let charge = Charge {
            id: charge_id.clone(),
            amount,
            amount_captured: if capture_now { amount } else { 0 },
            amount_refunded: 0,
            currency,
            captured: capture_now,
            paid: authorised,
            status: if authorised { "succeeded" } else { "failed" },
            payment_intent: Some(id.to_owned()),
            customer,
            payment_method: Some(pm.clone()),
            card,
            capture_before: (authorised && manual).then_some(now + AUTHORISATION_SECS),
            failure_code: declined.map(|_| "card_declined".to_owned()),
            failure_message: declined.map(|(_, message)| message.to_owned()),
            dispute: None,
            transferred: 0,
            transfer_group,
            metadata,
            created: now,
        };
        self.charges.insert(&charge_id, charge);
        let pm_json = self.payment_method_json(&pm);
        let intent = self.intent_mut(id)?;
        intent.latest_charge = Some(charge_id.clone());
        intent.next_action = None;

        if let Some((decline_code, message)) = declined {
            intent.status = IntentStatus::RequiresPaymentMethod;
            intent.payment_method = None;
            intent.last_payment_error = Some(json!({
                "type": "card_error",
                "code": "card_declined",
                "decline_code": decline_code,
                "message": message,
                "charge": charge_id,
                "payment_method": pm_json,
            }));
            let object = self.intent_json(id);
            self.emit("payment_intent.payment_failed", object.clone(), None, None);
            return Ok(Confirmation::Declined(SandboxError::card_declined(
                message, object,
            )));
        }

        intent.payment_method = Some(pm);
        intent.last_payment_error = None;
        if manual {
            intent.status = IntentStatus::RequiresCapture;
            intent.amount_capturable = amount;
            let object = self.intent_json(id);
            self.emit(
                "payment_intent.amount_capturable_updated",
                object,
                None,
                None,
            );
        } else {
            intent.status = IntentStatus::Succeeded;
            intent.amount_received = amount;
            intent.captures += 1;
            self.pending += amount;
            let object = self.intent_json(id);
            self.emit("payment_intent.succeeded", object, None, None);
        }
        Ok(Confirmation::Authorised)
    }

    /// `POST /v1/payment_intents/{id}/capture`: only from `requires_capture`. Sends
    /// `charge.captured` then `payment_intent.succeeded`. Captured money is pending in the
    /// platform balance (it becomes available later; transfers without a
    /// `source_transaction` draw on the available part).
    pub(crate) fn capture_intent(
        &mut self,
        id: &str,
        params: &FormParams,
    ) -> Result<Value, SandboxError> {
        let intent = self.intent(id)?;
        if intent.status != IntentStatus::RequiresCapture {
            return Err(unexpected_state(
                "captured",
                intent.status.as_str(),
                "requires_capture",
            ));
        }
        let capturable = intent.amount_capturable;
        let amount = amount(params, "amount_to_capture")?.unwrap_or(capturable);
        if amount > capturable {
            return Err(SandboxError::refused(
                Some("amount_too_large"),
                format!(
                    "The amount to capture ({amount}) is greater than the amount capturable ({capturable})."
                ),
            )
            .with_param("amount_to_capture"));
        }
        let charge_id = intent.latest_charge.clone().unwrap_or_default();
        let charge = self
            .charges
            .get_mut(&charge_id)
            .ok_or_else(|| SandboxError::missing("charge", &charge_id))?;
        charge.captured = true;
        charge.amount_captured = amount;
        charge.capture_before = None;
        let intent = self.intent_mut(id)?;
        intent.status = IntentStatus::Succeeded;
        intent.amount_received = amount;
        intent.released += capturable - amount;
        intent.amount_capturable = 0;
        intent.captures += 1;
        self.pending += amount;
        let charge = self.charge_json(&charge_id);
        self.emit("charge.captured", charge, None, None);
        let object = self.intent_json(id);
        self.emit("payment_intent.succeeded", object, None, None);
        Ok(self.intent_answer(id, params))
    }

    /// Cancels an intent that is not final; an authorisation is released (nothing was
    /// captured, so nothing is refunded). Sends `payment_intent.canceled`.
    pub(crate) fn cancel_intent(
        &mut self,
        id: &str,
        reason: Option<&str>,
    ) -> Result<Value, SandboxError> {
        let intent = self.intent(id)?;
        if intent.status.is_final() {
            return Err(unexpected_state(
                "canceled",
                intent.status.as_str(),
                "requires_payment_method, requires_capture, requires_confirmation, requires_action, processing",
            ));
        }
        self.release_authorisation(id, reason);
        let object = self.intent_json(id);
        self.emit("payment_intent.canceled", object.clone(), None, None);
        Ok(object)
    }

    pub(crate) fn cancel_intent_api(
        &mut self,
        id: &str,
        params: &FormParams,
    ) -> Result<Value, SandboxError> {
        let reason = one_of(params, "cancellation_reason", &CANCELLATION_REASONS)?;
        self.cancel_intent(id, reason)?;
        Ok(self.intent_answer(id, params))
    }

    /// `POST /v1/refunds` on a captured charge (by `payment_intent` or `charge`): never more
    /// than captured minus refunded. An authorisation that was never captured cannot be
    /// refunded: the caller cancels the intent instead (400 `payment_intent_unexpected_state`).
    /// Sends `charge.refunded`.
    pub(crate) fn create_refund(&mut self, params: &FormParams) -> Result<Value, SandboxError> {
        let charge_id = match (
            optional(params, "payment_intent"),
            optional(params, "charge"),
        ) {
            (Some(intent), None) => {
                let intent = self.intents.get(intent).ok_or_else(|| {
                    SandboxError::missing_param("payment_intent", "payment_intent", intent)
                })?;
                intent.latest_charge.clone().ok_or_else(|| {
                    SandboxError::refused(
                        Some("payment_intent_unexpected_state"),
                        "This PaymentIntent does not have a successful charge to refund.",
                    )
                })?
            }
            (None, Some(charge)) => charge.to_owned(),
            _ => {
                return Err(SandboxError::invalid_param(
                    "charge",
                    "parameter_missing",
                    "Exactly one of `charge` or `payment_intent` is required.",
                ));
            }
        };
        let reason = one_of(params, "reason", &REFUND_REASONS)?.map(str::to_owned);
        let requested = amount(params, "amount")?;
        let charge = self
            .charges
            .get(&charge_id)
            .ok_or_else(|| SandboxError::missing_param("charge", "charge", &charge_id))?;
        if !charge.paid {
            return Err(SandboxError::refused(
                Some("payment_intent_unexpected_state"),
                format!("Charge {charge_id} was declined; there is nothing to refund."),
            ));
        }
        if !charge.captured {
            return Err(SandboxError::refused(
                Some("payment_intent_unexpected_state"),
                format!(
                    "Charge {charge_id} has not been captured; cancel the PaymentIntent to release \
                     the authorisation instead of refunding it."
                ),
            ));
        }
        if let Some(dispute) = &charge.dispute
            && self
                .disputes
                .get(dispute)
                .is_some_and(|d| d.status != super::state::DisputeStatus::Won)
        {
            return Err(SandboxError::refused(
                Some("charge_disputed"),
                format!("Charge {charge_id} has been charged back; cannot issue a refund."),
            ));
        }
        let refundable = charge.refundable();
        if refundable <= 0 {
            return Err(SandboxError::refused(
                Some("charge_already_refunded"),
                format!("Charge {charge_id} has already been refunded."),
            ));
        }
        let amount = requested.unwrap_or(refundable);
        if amount > refundable {
            return Err(SandboxError::refused(
                Some("amount_too_large"),
                format!(
                    "Refund amount ({amount}) is greater than unrefunded amount on charge ({refundable})"
                ),
            )
            .with_param("amount"));
        }
        let id = new_id("re");
        let record = RefundRecord {
            id: id.clone(),
            amount,
            currency: charge.currency.clone(),
            charge: charge_id.clone(),
            payment_intent: charge.payment_intent.clone(),
            reason,
            metadata: metadata(params),
            created: self.now(),
        };
        self.refunds.insert(&id, record);
        if let Some(charge) = self.charges.get_mut(&charge_id) {
            charge.amount_refunded += amount;
        }
        self.debit_for_refund(amount);
        let charge = self.charge_json(&charge_id);
        self.emit("charge.refunded", charge, None, None);
        Ok(self.refund_json(&id))
    }

    /// `POST /v1/transfers`: to an existing connected account. With a `source_transaction`
    /// the money comes from that captured charge (even while pending); without, from the
    /// available balance, refused with `balance_insufficient` when it is short. Sends
    /// `transfer.created`.
    pub(crate) fn create_transfer(&mut self, params: &FormParams) -> Result<Value, SandboxError> {
        let amount = required_amount(params, "amount")?;
        let currency = currency(params)?;
        let destination = required(params, "destination")?;
        if self.accounts.get(destination).is_none() {
            return Err(SandboxError::missing_param(
                "destination",
                "destination",
                destination,
            ));
        }
        let source_transaction = optional(params, "source_transaction").map(str::to_owned);
        let funding = match &source_transaction {
            Some(charge_id) => {
                let charge = self.charges.get(charge_id).ok_or_else(|| {
                    SandboxError::missing_param("source_transaction", "charge", charge_id)
                })?;
                if !charge.captured {
                    return Err(SandboxError::refused(
                        None,
                        format!("The source transaction {charge_id} has not been captured."),
                    )
                    .with_param("source_transaction"));
                }
                let left = charge.refundable() - charge.transferred;
                if amount > left {
                    return Err(SandboxError::refused(
                        Some("balance_insufficient"),
                        format!(
                            "Insufficient funds in the source transaction {charge_id} ({left} left)."
                        ),
                    ));
                }
                Funding::Pending
            }
            None => {
                if amount > self.available {
                    return Err(SandboxError::refused(
                        Some("balance_insufficient"),
                        "You have insufficient available funds in your platform balance.",
                    ));
                }
                Funding::Available
            }
        };
        match &source_transaction {
            Some(charge_id) => {
                if let Some(charge) = self.charges.get_mut(charge_id) {
                    charge.transferred += amount;
                }
                self.pending -= amount;
            }
            None => self.available -= amount,
        }
        let id = new_id("tr");
        let record = TransferRecord {
            id: id.clone(),
            amount,
            amount_reversed: 0,
            currency,
            destination: destination.to_owned(),
            destination_payment: new_id("py"),
            source_transaction,
            transfer_group: optional(params, "transfer_group").map(str::to_owned),
            description: optional(params, "description").map(str::to_owned),
            metadata: metadata(params),
            reversals: Vec::new(),
            funding,
            failed: false,
            created: self.now(),
        };
        self.transfers.insert(&id, record);
        let object = self.transfer_json(&id);
        self.emit("transfer.created", object.clone(), None, None);
        Ok(object)
    }

    /// `POST /v1/transfers/{id}/reversals`: never more than the unreversed amount; the money
    /// returns to where the transfer took it from. Sends `transfer.reversed`.
    pub(crate) fn create_reversal(
        &mut self,
        transfer_id: &str,
        params: &FormParams,
    ) -> Result<Value, SandboxError> {
        let requested = amount(params, "amount")?;
        let transfer = self
            .transfers
            .get(transfer_id)
            .ok_or_else(|| SandboxError::missing("transfer", transfer_id))?;
        if transfer.failed {
            return Err(SandboxError::refused(
                None,
                format!(
                    "Transfer {transfer_id} failed; its funds are already back in the platform balance."
                ),
            ));
        }
        let left = transfer.unreversed();
        if left <= 0 {
            return Err(SandboxError::refused(
                None,
                format!("Transfer {transfer_id} has already been fully reversed."),
            ));
        }
        let amount = requested.unwrap_or(left);
        if amount > left {
            return Err(SandboxError::refused(
                Some("amount_too_large"),
                format!("The reversal amount ({amount}) is greater than the unreversed amount of the transfer ({left})."),
            )
            .with_param("amount"));
        }
        let (funding, currency, source) = (
            transfer.funding,
            transfer.currency.clone(),
            transfer.source_transaction.clone(),
        );
        let id = new_id("trr");
        let record = ReversalRecord {
            id: id.clone(),
            amount,
            currency,
            transfer: transfer_id.to_owned(),
            metadata: metadata(params),
            created: self.now(),
        };
        self.reversals.insert(&id, record);
        if let Some(transfer) = self.transfers.get_mut(transfer_id) {
            transfer.amount_reversed += amount;
            transfer.reversals.push(id.clone());
        }
        if let Some(charge) = source.and_then(|c| self.charges.get_mut(&c)) {
            charge.transferred -= amount;
        }
        self.credit(funding, amount);
        let object = self.transfer_json(transfer_id);
        self.emit("transfer.reversed", object, None, None);
        Ok(self.reversal_json(&id))
    }

    /// `POST /v1/accounts`: a connected account that must be onboarded before it charges or
    /// is paid out.
    pub(crate) fn create_account(&mut self, params: &FormParams) -> Result<Value, SandboxError> {
        let kind = one_of(params, "type", &["express", "standard", "custom"])?
            .unwrap_or("express")
            .to_owned();
        let country = match optional(params, "country") {
            Some(c) if c.len() == 2 && c.chars().all(|c| c.is_ascii_alphabetic()) => {
                c.to_ascii_uppercase()
            }
            Some(_) => {
                return Err(SandboxError::invalid_param(
                    "country",
                    "parameter_invalid_string",
                    "Invalid country: expected a two-letter code",
                ));
            }
            None => "ES".to_owned(),
        };
        let id = new_id("acct");
        let record = AccountRecord {
            id: id.clone(),
            kind,
            email: optional(params, "email").map(str::to_owned),
            country,
            charges_enabled: false,
            payouts_enabled: false,
            details_submitted: false,
            metadata: metadata(params),
            created: self.now(),
        };
        self.accounts.insert(&id, record);
        Ok(self.account_json(&id))
    }

    /// `POST /v1/account_links`. `account_update` is refused while onboarding is incomplete
    /// (callers fall back to `account_onboarding`). The URL is a page of the sandbox that
    /// completes onboarding and redirects to `return_url` (or `refresh_url` once expired or
    /// used).
    pub(crate) fn create_account_link(
        &mut self,
        params: &FormParams,
    ) -> Result<Value, SandboxError> {
        let account = required(params, "account")?;
        let kind = required(params, "type")?;
        let onboarding = match kind {
            "account_onboarding" => true,
            "account_update" => false,
            _ => {
                return Err(SandboxError::invalid_param(
                    "type",
                    "parameter_invalid_string",
                    "Invalid type: must be one of account_onboarding, account_update",
                ));
            }
        };
        let refresh_url = required(params, "refresh_url")?.to_owned();
        let return_url = required(params, "return_url")?.to_owned();
        let record = self
            .accounts
            .get(account)
            .ok_or_else(|| SandboxError::missing_param("account", "account", account))?;
        if !onboarding && !record.details_submitted {
            return Err(SandboxError::refused(
                None,
                "You cannot create `account_update` type Account Links for an account that has \
                 not completed onboarding; use `account_onboarding`.",
            )
            .with_param("type"));
        }
        let now = self.now();
        let token = new_id("link");
        let url = format!("{}/connect/onboarding/{token}", self.base_url);
        self.links.insert(
            token,
            LinkRecord {
                account: account.to_owned(),
                onboarding,
                refresh_url,
                return_url,
                expires_at: now + ACCOUNT_LINK_SECS,
                used: false,
            },
        );
        Ok(json!({
            "object": "account_link",
            "created": now,
            "expires_at": now + ACCOUNT_LINK_SECS,
            "url": url,
        }))
    }

    pub(crate) fn create_customer(&mut self, params: &FormParams) -> Result<Value, SandboxError> {
        let id = new_id("cus");
        let record = CustomerRecord {
            id: id.clone(),
            email: optional(params, "email").map(str::to_owned),
            name: optional(params, "name").map(str::to_owned),
            metadata: metadata(params),
            created: self.now(),
        };
        self.customers.insert(&id, record);
        Ok(self.customer_json(&id))
    }

    /// `GET /v1/transfers?transfer_group=…&limit=…`: the transfers of a group (all of them
    /// without one), newest first, as the real list does; up to `limit` (10 by default, at
    /// most 100).
    pub(crate) fn list_transfers(&self, params: &FormParams) -> Result<Value, SandboxError> {
        let group = optional(params, "transfer_group");
        let limit = match amount(params, "limit")? {
            None => 10,
            Some(n) if n <= 100 => n as usize,
            Some(_) => {
                return Err(SandboxError::invalid_param(
                    "limit",
                    "parameter_invalid_integer",
                    "This value must be less than or equal to 100.",
                ));
            }
        };
        let mut matching: Vec<_> = self
            .transfers
            .iter()
            .filter(|t| group.is_none() || t.transfer_group.as_deref() == group)
            .collect();
        matching.sort_by(|a, b| b.created.cmp(&a.created).then_with(|| b.id.cmp(&a.id)));
        let data: Vec<Value> = matching
            .iter()
            .take(limit)
            .map(|t| self.transfer_json(&t.id))
            .collect();
        Ok(json!({
            "object": "list",
            "data": data,
            "has_more": matching.len() > limit,
            "url": "/v1/transfers",
        }))
    }

    /// `GET /v1/payment_methods?customer=…&type=card`.
    pub(crate) fn list_payment_methods(&self, params: &FormParams) -> Result<Value, SandboxError> {
        let customer = required(params, "customer")?;
        if self.customers.get(customer).is_none() {
            return Err(SandboxError::missing_param(
                "customer", "customer", customer,
            ));
        }
        one_of(params, "type", &["card"])?;
        let data: Vec<Value> = self
            .payment_methods
            .iter()
            .filter(|m| m.customer.as_deref() == Some(customer))
            .map(|m| self.payment_method_json(&m.id))
            .collect();
        Ok(json!({
            "object": "list",
            "data": data,
            "has_more": false,
            "url": "/v1/payment_methods",
        }))
    }

    /// Attaching a test token attaches a new payment method made from it.
    pub(crate) fn attach_payment_method(
        &mut self,
        given: &str,
        params: &FormParams,
    ) -> Result<Value, SandboxError> {
        let customer = required(params, "customer")?;
        if self.customers.get(customer).is_none() {
            return Err(SandboxError::missing_param(
                "customer", "customer", customer,
            ));
        }
        if test_card(given).is_none() {
            let record = self
                .payment_methods
                .get(given)
                .ok_or_else(|| SandboxError::missing("payment_method", given))?;
            if record.customer.as_deref().is_some_and(|c| c != customer) {
                return Err(SandboxError::refused(
                    None,
                    "The payment method you provided has already been attached to a customer.",
                ));
            }
        }
        let id = self.resolve_payment_method(given, Some(customer))?;
        if let Some(record) = self.payment_methods.get_mut(&id) {
            record.customer = Some(customer.to_owned());
        }
        Ok(self.payment_method_json(&id))
    }

    pub(crate) fn detach_payment_method(&mut self, id: &str) -> Result<Value, SandboxError> {
        let record = self
            .payment_methods
            .get_mut(id)
            .ok_or_else(|| SandboxError::missing("payment_method", id))?;
        if record.customer.is_none() {
            return Err(SandboxError::refused(
                None,
                "The payment method you provided is not attached to a customer so detachment is impossible.",
            ));
        }
        record.customer = None;
        Ok(self.payment_method_json(id))
    }
}

/// `metadata[key]=value` pairs; an empty value means "no such key", as on the processor.
fn metadata(params: &FormParams) -> crate::integrations::processor::types::Metadata {
    params
        .map("metadata")
        .into_iter()
        .filter(|(_, v)| !v.is_empty())
        .collect()
}
