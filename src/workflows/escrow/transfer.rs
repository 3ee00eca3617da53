//! Transfers of released money to the expert's connected account, deferred when they
//! cannot be made now, retried by administrators and the daily job.

use std::collections::BTreeMap;

use serde_json::json;

use super::*;
use crate::domain::payment::{PaymentStatus, PayoutStatus};
use crate::domain::profile::ConnectStatus;
use crate::domain::user::Role;
use crate::integrations::processor::{CreateTransfer, ProcessorError, Transfer};
use crate::state::AppState;
use crate::store::milestones;
use crate::store::payments::{self, Payment, ReleasedFrom, Split};
use crate::store::{LockScope, profiles};
use crate::workflows::error::{FlowError, FlowResult};
use crate::workflows::notify::for_admins;

/// Whether transfers can reach the expert: an onboarded, `active` connected account.
fn payout_account_active(p: &profiles::Profile) -> bool {
    p.processor_connect_status == Some(ConnectStatus::Active)
        && p.processor_connect_account_id.is_some()
}

/// Why a released payment's transfer cannot be made now.
fn transfer_blocker(y: &Payment, expert: Option<&profiles::Profile>) -> Option<&'static str> {
    let expert_amount = y.expert_amount_minor.unwrap_or(0);
    match expert {
        _ if expert_amount <= 0 => Some("expert_amount_not_positive"),
        None => Some("expert_profile_missing"),
        Some(p) if !p.fiscal_data_complete => Some("fiscal_data_incomplete"),
        Some(p) if !payout_account_active(p) => Some("processor_connect_not_active"),
        Some(_) => None,
    }
}

/// Transfers a `released` payment's expert amount to the expert's connected account, in the
/// payment's actor. Not possible now (account not active, fiscal data incomplete, nothing to
/// pay) → stays `released` with payout `pending` and the reason in its metadata; the platform
/// balance short or the processor failing → deferred the same way, for the retry job.
/// Answers the payment as stored afterwards.
pub(crate) async fn transfer(state: &AppState, y: Payment) -> FlowResult<Payment> {
    if y.status != PaymentStatus::Released || y.payout_status != PayoutStatus::Pending {
        return Ok(y);
    }
    let mut conn = state.db.conn().await?;
    let expert = match y.expert_id {
        Some(id) => profiles::find_by_user(conn.exec(), id, Role::Experto).await?,
        None => None,
    };
    let now = state.clock.now();
    let mut metadata = y.payment_metadata.0.clone();
    if let Some(reason) = transfer_blocker(&y, expert.as_ref()) {
        if metadata["transfer_blocked"] != json!(reason) {
            metadata["transfer_blocked"] = json!(reason);
            let mut tx = state.db.begin().await?;
            payments::set_metadata(tx.exec(), y.id, &metadata, now).await?;
            let alert = for_admins(
                "payment_transfer_blocked",
                "Transfer waiting for intervention",
                &format!(
                    "Payment {} is released but cannot be transferred yet: {reason}.",
                    y.id
                ),
                json!({"payment_id": y.id, "project_id": y.project_id, "reason": reason}),
            );
            record(
                &mut tx,
                "payment.transfer_blocked",
                y.id,
                json!({"payment_id": y.id, "reason": reason, "notify": [alert]}),
                now,
            )
            .await?;
            state.commit(tx).await?;
        }
        return load(state, y.id).await;
    }
    let destination = expert
        .and_then(|p| p.processor_connect_account_id)
        .unwrap_or_default();
    // The attempt's time names the key: the same attempt repeated (after a crash, its outcome
    // unknown) replays at the processor; a new attempt after a known failure gets a new time.
    // Milliseconds, so two deliberate attempts within a second still differ.
    let mut attempt = y.transfer_attempt_at.unwrap_or(now);
    if metadata["transfer_failed_attempt"] == json!(attempt.timestamp_millis())
        || y.transfer_attempt_at.is_none()
    {
        let after_previous = attempt + chrono::Duration::milliseconds(1);
        attempt = if now > after_previous {
            now
        } else {
            after_previous
        };
        if !payments::begin_transfer_attempt(conn.exec(), y.id, y.transfer_attempt_at, attempt)
            .await?
        {
            // Another instance began an attempt meanwhile: make that one (the same key, so
            // the processor answers with its transfer instead of making a second).
            let current = load(state, y.id).await?;
            match current.transfer_attempt_at {
                Some(theirs)
                    if current.status == PaymentStatus::Released
                        && current.payout_status == PayoutStatus::Pending =>
                {
                    attempt = theirs;
                }
                _ => return Ok(current),
            }
        }
    }
    drop(conn);
    let group = format!("project_{}", y.project_id);
    // A key is only as good as the records that name it: a database restored to before the
    // transfer was recorded releases again under a new attempt time (a new key), and so does
    // a new attempt after one whose answer never came. So every attempt first asks the
    // processor for a transfer of this payment, and records it instead of making another.
    let made = match made_earlier(state, &y, &group).await {
        Ok(Some(t)) => {
            tracing::warn!(payment_id = y.id, transfer = %t.id,
                "the processor already holds this payment's transfer: recorded, not made again");
            Ok(t)
        }
        Ok(None) => {
            let mut meta = BTreeMap::new();
            meta.insert("payment_id".to_owned(), y.id.to_string());
            meta.insert("project_id".to_owned(), y.project_id.to_string());
            state
                .processor
                .client
                .create_transfer(
                    &CreateTransfer {
                        amount: y.expert_amount_minor.unwrap_or(0),
                        currency: y.currency.clone(),
                        destination,
                        transfer_group: Some(group),
                        source_transaction: None,
                        metadata: meta,
                    },
                    &format!("transfer_{}_{}", y.id, attempt.timestamp_millis()),
                )
                .await
        }
        Err(error) => Err(error),
    };
    let mut tx = state.db.begin().await?;
    if let Some(obj) = metadata.as_object_mut() {
        obj.remove("transfer_blocked");
    }
    match made {
        Ok(t) => {
            if let Some(obj) = metadata.as_object_mut() {
                obj.remove("transfer_failed_attempt");
                obj.remove("transfer_error");
                obj.remove("transfer_deferred");
            }
            payments::set_metadata(tx.exec(), y.id, &metadata, now).await?;
            payments::mark_transferred(tx.exec(), y.id, &t.id, now).await?;
        }
        Err(error) => {
            let deferred = error.is_balance_insufficient();
            tracing::warn!(payment_id = y.id, %error, deferred, "transfer not made");
            metadata["transfer_failed_attempt"] = json!(attempt.timestamp_millis());
            metadata["transfer_error"] = json!(error.code().unwrap_or("processor_unavailable"));
            metadata["transfer_deferred"] = json!(deferred);
            payments::set_metadata(tx.exec(), y.id, &metadata, now).await?;
        }
    }
    tx.commit().await?;
    load(state, y.id).await
}

/// The transfer of payment `y` the processor already made, if any: one of its group naming the
/// payment in its metadata, not reversed, and not one whose failure the payment recorded.
async fn made_earlier(
    state: &AppState,
    y: &Payment,
    group: &str,
) -> Result<Option<Transfer>, ProcessorError> {
    let failed = failed_transfers(y);
    let payment_id = y.id.to_string();
    Ok(state
        .processor
        .client
        .list_transfers(group)
        .await?
        .into_iter()
        .find(|t| {
            t.metadata.get("payment_id") == Some(&payment_id)
                && !t.reversed
                && !failed.contains(&t.id)
        }))
}

/// `POST /api/payments/retry-transfer/{id}` (administrators): a `released` payment with
/// payout `pending`, or a `held` one whose transfer failed (released again first, its
/// milestone and delivery approved again, by `admin_id`). The expert's account must be
/// `active`.
pub async fn retry_transfer(
    state: &AppState,
    admin_id: i64,
    payment_id: i64,
) -> FlowResult<Payment> {
    in_payment_actor(state, payment_id, move |st| async move {
        let y = load(&st, payment_id).await?;
        let eligible = matches!(
            (y.status, y.payout_status),
            (PaymentStatus::Held, PayoutStatus::Failed)
                | (PaymentStatus::Released, PayoutStatus::Pending)
        );
        if !eligible {
            return Err(FlowError::conflict(
                "TRANSFER_NOT_RETRYABLE",
                format!(
                    "Only a held payment whose payout failed or a released payment whose payout is pending can be retried; this one is {} with payout {}",
                    y.status, y.payout_status
                ),
            ));
        }
        require_connect_active(&st, y.expert_id).await?;
        let y = if y.status == PaymentStatus::Held {
            let intent = capture(&st, &y).await?;
            let now = st.clock.now();
            let mut tx = st.db.begin().await?;
            tx.lock(LockScope::Project, y.project_id).await?;
            let level = y.expert_level_used.clone().unwrap_or_else(|| "Global".into());
            let commission_minor = y.commission_minor.unwrap_or(0);
            let split = Split {
                expert_level: &level,
                commission_minor,
                expert_amount_minor: y.amount_minor - commission_minor,
            };
            if !payments::mark_released(
                tx.exec(),
                y.id,
                ReleasedFrom::Held,
                &split,
                intent.latest_charge_id(),
                now,
            )
            .await?
            {
                return Err(FlowError::conflict("INVALID_STATE", "The payment changed; try again"));
            }
            if let Some(m) = y.milestone_id {
                milestones::approve_with_delivery(tx.exec(), m, None, Some(admin_id), now).await?;
            }
            tx.commit().await?;
            load(&st, payment_id).await?
        } else {
            // An attempt that failed is already marked so, and gets a new key; one whose
            // outcome is unknown (a crash after the processor made it) is made again under
            // its own key, so the processor answers with that transfer instead of a second.
            y
        };
        transfer(&st, y).await
    })
    .await
}

/// Refuses when the expert's connected account is not `active` (DESIGN errors table).
pub async fn require_connect_active(state: &AppState, expert_id: Option<i64>) -> FlowResult<()> {
    let mut conn = state.db.conn().await?;
    let active = match expert_id {
        Some(id) => profiles::find_by_user(conn.exec(), id, Role::Experto)
            .await?
            .is_some_and(|p| payout_account_active(&p)),
        None => false,
    };
    if active {
        Ok(())
    } else {
        Err(FlowError::rule(
            "PROCESSOR_CONNECT_NOT_ACTIVE",
            "The expert's payout account is not active yet",
        ))
    }
}

// ---------------------------------------------------------------------------------------
// Refund.
// ---------------------------------------------------------------------------------------
