//! Controls: the customer and the world acting on the sandbox (DESIGN §9), plus failure
//! injection, event re-delivery and the ledger tests hold the service's records against.
//! Controls are not API calls: they are not counted, not subject to injected failures and
//! need no key. Each answers with the object it changed and sends the events the real
//! processor would.

use serde_json::{Value, json};

use super::state::{
    DisputeRecord, DisputeStatus, EVIDENCE_SECS, EventRecord, FailureRule, Operation, PayoutRecord,
    State, new_id,
};
use super::{SandboxError, SandboxHandle};

/// A dispute's next step while open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DisputeUpdate {
    /// Evidence was submitted; the bank is deciding.
    UnderReview,
    NeedsResponse,
}

impl DisputeUpdate {
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "under_review" => Some(Self::UnderReview),
            "needs_response" => Some(Self::NeedsResponse),
            _ => None,
        }
    }
}

/// How the bank closed a dispute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DisputeOutcome {
    /// The money comes back to the platform.
    Won,
    /// The money stays with the card holder.
    Lost,
}

impl DisputeOutcome {
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "won" => Some(Self::Won),
            "lost" => Some(Self::Lost),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayoutOutcome {
    Paid,
    Failed,
}

impl PayoutOutcome {
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "paid" => Some(Self::Paid),
            "failed" => Some(Self::Failed),
            _ => None,
        }
    }
}

/// The next `count` calls of `operation` fail with `status` (default 500) and `code`,
/// changing nothing and storing nothing under their idempotency keys. `count` 0 clears.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureSpec {
    pub operation: Operation,
    pub count: u32,
    pub status: Option<u16>,
    pub code: Option<String>,
}

impl State {
    pub(crate) fn set_balance(&mut self, available: i64) -> Value {
        self.available = available;
        self.balance_json()
    }

    /// Opens a chargeback on an authorised (captured or not) charge. For captured money the
    /// disputed amount leaves the platform balance now, as with the real processor.
    pub(crate) fn dispute_charge(
        &mut self,
        charge_id: &str,
        reason: &str,
    ) -> Result<Value, SandboxError> {
        let now = self.now();
        let charge = self
            .charges
            .get(charge_id)
            .ok_or_else(|| SandboxError::missing("charge", charge_id))?;
        if !charge.paid {
            return Err(SandboxError::refused(
                None,
                format!("Charge {charge_id} was declined; there is nothing to dispute."),
            ));
        }
        if charge.dispute.is_some() {
            return Err(SandboxError::refused(
                Some("charge_disputed"),
                format!("Charge {charge_id} is already disputed."),
            ));
        }
        let amount = if charge.captured {
            charge.refundable()
        } else {
            charge.amount
        };
        let withdrawn = if charge.captured { amount } else { 0 };
        let id = new_id("dp");
        let record = DisputeRecord {
            id: id.clone(),
            amount,
            currency: charge.currency.clone(),
            charge: charge_id.to_owned(),
            payment_intent: charge.payment_intent.clone(),
            status: DisputeStatus::NeedsResponse,
            reason: reason.to_owned(),
            due_by: now + EVIDENCE_SECS,
            has_evidence: false,
            submission_count: 0,
            withdrawn,
            created: now,
        };
        self.disputes.insert(&id, record);
        if let Some(charge) = self.charges.get_mut(charge_id) {
            charge.dispute = Some(id.clone());
        }
        self.available -= withdrawn;
        let object = self.dispute_json(&id);
        self.emit("charge.dispute.created", object.clone(), None, None);
        Ok(object)
    }

    fn open_dispute(&mut self, id: &str) -> Result<&mut DisputeRecord, SandboxError> {
        let dispute = self
            .disputes
            .get_mut(id)
            .ok_or_else(|| SandboxError::missing("dispute", id))?;
        if dispute.status.is_closed() {
            return Err(SandboxError::refused(
                None,
                format!(
                    "Dispute {id} is already closed ({}).",
                    dispute.status.as_str()
                ),
            ));
        }
        Ok(dispute)
    }

    pub(crate) fn update_dispute(
        &mut self,
        id: &str,
        update: DisputeUpdate,
    ) -> Result<Value, SandboxError> {
        let dispute = self.open_dispute(id)?;
        let previous = dispute.status;
        match update {
            DisputeUpdate::UnderReview => {
                dispute.status = DisputeStatus::UnderReview;
                dispute.has_evidence = true;
                dispute.submission_count += 1;
            }
            DisputeUpdate::NeedsResponse => dispute.status = DisputeStatus::NeedsResponse,
        }
        let object = self.dispute_json(id);
        self.emit(
            "charge.dispute.updated",
            object.clone(),
            None,
            Some(json!({ "status": previous.as_str() })),
        );
        Ok(object)
    }

    /// Won: the withdrawn money returns to the platform. Lost: it is gone for good (the
    /// ledger counts it as refunded to the card holder).
    pub(crate) fn close_dispute(
        &mut self,
        id: &str,
        outcome: DisputeOutcome,
    ) -> Result<Value, SandboxError> {
        let dispute = self.open_dispute(id)?;
        let withdrawn = dispute.withdrawn;
        dispute.status = match outcome {
            DisputeOutcome::Won => DisputeStatus::Won,
            DisputeOutcome::Lost => DisputeStatus::Lost,
        };
        if outcome == DisputeOutcome::Won {
            self.available += withdrawn;
        }
        let object = self.dispute_json(id);
        self.emit("charge.dispute.closed", object.clone(), None, None);
        Ok(object)
    }

    /// The transfer did not reach the account: its unreversed money returns to the platform
    /// balance and `transfer.failed` is sent.
    pub(crate) fn fail_transfer(&mut self, id: &str) -> Result<Value, SandboxError> {
        let transfer = self
            .transfers
            .get_mut(id)
            .ok_or_else(|| SandboxError::missing("transfer", id))?;
        if transfer.failed {
            return Err(SandboxError::refused(
                None,
                format!("Transfer {id} has already failed."),
            ));
        }
        transfer.failed = true;
        let (funding, amount) = (transfer.funding, transfer.unreversed());
        if let Some(charge) = transfer
            .source_transaction
            .clone()
            .and_then(|c| self.charges.get_mut(&c))
        {
            charge.transferred -= amount;
        }
        self.credit(funding, amount);
        let object = self.transfer_json(id);
        self.emit("transfer.failed", object.clone(), None, None);
        Ok(object)
    }

    pub(crate) fn payout(
        &mut self,
        account: &str,
        amount: i64,
        outcome: PayoutOutcome,
    ) -> Result<Value, SandboxError> {
        if self.accounts.get(account).is_none() {
            return Err(SandboxError::missing("account", account));
        }
        if amount <= 0 {
            return Err(SandboxError::invalid_param(
                "amount",
                "parameter_invalid_integer",
                "Invalid positive integer: amount",
            ));
        }
        let id = new_id("po");
        let failed = outcome == PayoutOutcome::Failed;
        let record = PayoutRecord {
            id: id.clone(),
            account: account.to_owned(),
            amount,
            currency: super::state::BALANCE_CURRENCY.to_owned(),
            status: if failed { "failed" } else { "paid" },
            destination: new_id("ba"),
            failure_code: failed.then(|| "could_not_process".to_owned()),
            failure_message: failed.then(|| "The bank could not process this payout.".to_owned()),
            created: self.now(),
        };
        self.payouts.insert(&id, record);
        let object = self.payout_json(&id);
        let kind = if failed {
            "payout.failed"
        } else {
            "payout.paid"
        };
        self.emit(kind, object.clone(), Some(account), None);
        Ok(object)
    }

    pub(crate) fn update_account(
        &mut self,
        id: &str,
        charges_enabled: Option<bool>,
        payouts_enabled: Option<bool>,
        details_submitted: Option<bool>,
    ) -> Result<Value, SandboxError> {
        let account = self
            .accounts
            .get_mut(id)
            .ok_or_else(|| SandboxError::missing("account", id))?;
        let mut previous = serde_json::Map::new();
        let mut set = |field: &str, target: &mut bool, value: Option<bool>| {
            if let Some(value) = value
                && *target != value
            {
                previous.insert(field.to_owned(), Value::from(*target));
                *target = value;
            }
        };
        set(
            "charges_enabled",
            &mut account.charges_enabled,
            charges_enabled,
        );
        set(
            "payouts_enabled",
            &mut account.payouts_enabled,
            payouts_enabled,
        );
        set(
            "details_submitted",
            &mut account.details_submitted,
            details_submitted,
        );
        let object = self.account_json(id);
        self.emit(
            "account.updated",
            object.clone(),
            Some(id),
            Some(Value::Object(previous)),
        );
        Ok(object)
    }

    pub(crate) fn inject_failure(&mut self, spec: FailureSpec) -> Result<Value, SandboxError> {
        let status = spec.status.unwrap_or(500);
        if !(400..=599).contains(&status) {
            return Err(SandboxError::invalid_param(
                "status",
                "parameter_invalid_integer",
                "status must be an HTTP error status (400 to 599)",
            ));
        }
        if spec.count == 0 {
            self.failures.remove(&spec.operation);
        } else {
            self.failures.insert(
                spec.operation,
                FailureRule {
                    remaining: spec.count,
                    status,
                    code: spec.code.clone(),
                },
            );
        }
        Ok(json!({
            "operation": spec.operation.as_str(),
            "remaining": spec.count,
            "status": status,
            "code": spec.code,
        }))
    }

    /// The truth tests hold the service's records against. Per intent: `authorised` is what
    /// can still be captured, `captured` what was, `refunded` what went back to the card
    /// holder (refunds and lost chargebacks, the latter also in `dispute_lost`),
    /// `released` authorised money let go without capture, `captures` the number of real
    /// captures. Per transfer: `reversed` is the reversed amount. Balance in minor units.
    pub fn ledger(&self) -> Value {
        let intents: Vec<Value> = self
            .intents
            .iter()
            .map(|i| {
                let charge = i.latest_charge.as_deref().and_then(|c| self.charges.get(c));
                let captured = charge.map_or(0, |c| c.amount_captured);
                let refunded = charge.map_or(0, |c| c.amount_refunded);
                let dispute = charge
                    .and_then(|c| c.dispute.as_deref())
                    .and_then(|d| self.disputes.get(d));
                let dispute_lost = dispute
                    .filter(|d| d.status == DisputeStatus::Lost)
                    .map_or(0, |d| d.withdrawn);
                json!({
                    "id": i.id,
                    "amount": i.amount,
                    "currency": i.currency,
                    "status": i.status.as_str(),
                    "charge": i.latest_charge,
                    "authorised": i.amount_capturable,
                    "captured": captured,
                    "refunded": refunded + dispute_lost,
                    "dispute_lost": dispute_lost,
                    "released": i.released,
                    "captures": i.captures,
                    "dispute": dispute.map(|d| d.id.clone()),
                    "metadata": i.metadata,
                })
            })
            .collect();
        let transfers: Vec<Value> = self
            .transfers
            .iter()
            .map(|t| {
                json!({
                    "id": t.id,
                    "amount": t.amount,
                    "currency": t.currency,
                    "destination": t.destination,
                    "reversed": t.amount_reversed,
                    "failed": t.failed,
                    "source_transaction": t.source_transaction,
                    "transfer_group": t.transfer_group,
                    "metadata": t.metadata,
                })
            })
            .collect();
        let refunds: Vec<Value> = self
            .refunds
            .iter()
            .map(|r| {
                json!({
                    "id": r.id,
                    "amount": r.amount,
                    "charge": r.charge,
                    "payment_intent": r.payment_intent,
                    "reason": r.reason,
                    "metadata": r.metadata,
                })
            })
            .collect();
        let disputes: Vec<Value> = self
            .disputes
            .iter()
            .map(|d| {
                json!({
                    "id": d.id,
                    "amount": d.amount,
                    "charge": d.charge,
                    "payment_intent": d.payment_intent,
                    "status": d.status.as_str(),
                    "reason": d.reason,
                })
            })
            .collect();
        let payouts: Vec<Value> = self
            .payouts
            .iter()
            .map(|p| json!({ "id": p.id, "account": p.account, "amount": p.amount, "status": p.status }))
            .collect();
        let accounts: Vec<Value> = self
            .accounts
            .iter()
            .map(|a| {
                json!({
                    "id": a.id,
                    "email": a.email,
                    "charges_enabled": a.charges_enabled,
                    "payouts_enabled": a.payouts_enabled,
                    "details_submitted": a.details_submitted,
                })
            })
            .collect();
        json!({
            "intents": intents,
            "transfers": transfers,
            "refunds": refunds,
            "disputes": disputes,
            "payouts": payouts,
            "accounts": accounts,
            "balance": {
                "available": self.available,
                "pending": self.pending,
                "currency": super::state::BALANCE_CURRENCY,
            },
            "calls": self.calls,
        })
    }

    /// Opening an account link's URL: onboarding completes (`account.updated`) and the
    /// browser goes to `return_url`; an expired or used link goes to `refresh_url`.
    pub(crate) fn follow_link(&mut self, token: &str) -> Option<String> {
        let now = self.now();
        let link = self.links.get_mut(token)?;
        if link.used || link.expires_at < now {
            return Some(link.refresh_url.clone());
        }
        link.used = true;
        let (account, onboarding, target) = (
            link.account.clone(),
            link.onboarding,
            link.return_url.clone(),
        );
        if onboarding {
            // The account exists: links are only made for existing accounts.
            let _ = self.update_account(&account, Some(true), Some(true), Some(true));
        }
        Some(target)
    }
}

impl SandboxHandle {
    /// Plays the customer: confirms with a test method (`pm_card_visa` authorises,
    /// `pm_card_chargeDeclined` is declined, `pm_card_authenticationRequired` requires
    /// action) and answers the intent, declined or not.
    pub async fn confirm_payment_intent(
        &self,
        id: &str,
        payment_method: &str,
    ) -> Result<Value, SandboxError> {
        self.shared
            .control(|state| {
                // A decline is an outcome here, not an error: the intent says what happened.
                state.confirm_intent(id, Some(payment_method))?;
                Ok(state.intent_json(id))
            })
            .await
    }

    /// The customer abandons: the intent is cancelled (`payment_intent.canceled`).
    pub async fn cancel_payment_intent(&self, id: &str) -> Result<Value, SandboxError> {
        self.shared
            .control(|state| state.cancel_intent(id, Some("abandoned")))
            .await
    }

    /// Sets the platform's available balance (minor units); answers the balance.
    pub async fn set_balance(&self, available: i64) -> Result<Value, SandboxError> {
        self.shared
            .control(|state| Ok(state.set_balance(available)))
            .await
    }

    /// Opens a chargeback (`charge.dispute.created`).
    pub async fn dispute_charge(&self, charge: &str, reason: &str) -> Result<Value, SandboxError> {
        self.shared
            .control(|state| state.dispute_charge(charge, reason))
            .await
    }

    /// `charge.dispute.updated`.
    pub async fn update_dispute(
        &self,
        id: &str,
        update: DisputeUpdate,
    ) -> Result<Value, SandboxError> {
        self.shared
            .control(|state| state.update_dispute(id, update))
            .await
    }

    /// `charge.dispute.closed` with status `won` or `lost`.
    pub async fn close_dispute(
        &self,
        id: &str,
        outcome: DisputeOutcome,
    ) -> Result<Value, SandboxError> {
        self.shared
            .control(|state| state.close_dispute(id, outcome))
            .await
    }

    /// `transfer.failed`; the money returns to the platform balance.
    pub async fn fail_transfer(&self, id: &str) -> Result<Value, SandboxError> {
        self.shared.control(|state| state.fail_transfer(id)).await
    }

    /// A payout of a connected account to its bank: `payout.paid` or `payout.failed`,
    /// carrying the account.
    pub async fn payout(
        &self,
        account: &str,
        amount: i64,
        outcome: PayoutOutcome,
    ) -> Result<Value, SandboxError> {
        self.shared
            .control(|state| state.payout(account, amount, outcome))
            .await
    }

    /// `account.updated` with the changed capabilities.
    pub async fn update_account(
        &self,
        id: &str,
        charges_enabled: Option<bool>,
        payouts_enabled: Option<bool>,
    ) -> Result<Value, SandboxError> {
        self.shared
            .control(|state| state.update_account(id, charges_enabled, payouts_enabled, None))
            .await
    }

    /// The account holder finishes onboarding: details submitted, charges and payouts
    /// enabled, `account.updated`.
    pub async fn complete_onboarding(&self, id: &str) -> Result<Value, SandboxError> {
        self.shared
            .control(|state| state.update_account(id, Some(true), Some(true), Some(true)))
            .await
    }

    /// Makes the next calls of an operation fail (see [`FailureSpec`]).
    pub async fn inject_failure(&self, spec: FailureSpec) -> Result<Value, SandboxError> {
        self.shared
            .control(|state| state.inject_failure(spec))
            .await
    }

    /// Delivers a stored event once more (same id and body, fresh signature); answers the
    /// event record with every attempt.
    pub async fn resend_event(&self, id: &str) -> Result<Value, SandboxError> {
        self.shared
            .control(|state| {
                if state.requeue(id) {
                    Ok(())
                } else {
                    Err(SandboxError::missing("event", id))
                }
            })
            .await?;
        let state = self.shared.lock();
        let record = state
            .events
            .get(id)
            .ok_or_else(|| SandboxError::missing("event", id))?;
        Ok(serde_json::to_value(record).unwrap_or(Value::Null))
    }

    /// Every event sent so far, oldest first, with its delivery attempts.
    pub fn events(&self) -> Vec<EventRecord> {
        self.shared.lock().events.iter().cloned().collect()
    }

    /// See [`State::ledger`].
    pub fn ledger(&self) -> Value {
        self.shared.lock().ledger()
    }
}
