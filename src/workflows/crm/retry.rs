//! The CRM retry scheduler: a supervised periodic job (every `CRM_RETRY_INTERVAL_MINUTES`
//! while `CRM_RETRY_ENABLED`) that replays up to ten failed sync-log entries, oldest first,
//! with the user's state at that time. Each attempt counts in `retry_count`; after five the
//! entry stays `failed` and is marked exhausted. Entries whose user no longer exists are
//! skipped. A rejected key (401) stops the cycle: it is for the health check, not a loop.
//! The cycle also applies inbound CRM events stored but never applied.

use serde::Serialize;

use super::CrmService;
use super::ops::{Op, outcome_failed, outcome_skipped};
use crate::domain::crm::SyncStatus;
use crate::domain::crm::{MAX_RETRIES, RETRY_BATCH};
use crate::integrations::crm::CrmError;
use crate::store::crm as store;
use crate::workflows::error::FlowResult;

/// The name operators see among the actor metrics.
pub const JOB_NAME: &str = "crm_retry";

/// What one cycle did.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct RetryReport {
    pub attempted: usize,
    pub succeeded: usize,
    pub exhausted: usize,
    pub skipped: usize,
    /// Set when the cycle stopped because the CRM rejects the key.
    pub unauthorized: bool,
    /// Inbound events stored but left unapplied by a stop, applied now.
    pub webhooks_applied: usize,
}

/// One cycle of the scheduler.
pub async fn retry_failed(crm: &CrmService) -> FlowResult<RetryReport> {
    let mut report = RetryReport {
        webhooks_applied: crm.sweep_webhooks().await?,
        ..RetryReport::default()
    };
    let Some(client) = crm.client().cloned() else {
        return Ok(report);
    };
    if client.auth_failed() {
        // One cheap probe; while the key is still refused, nothing is replayed.
        if let Err(CrmError::Unauthorized(_)) = client.custom_fields().await {
            tracing::warn!(
                "CRM retry skipped: the CRM rejects CRM_API_KEY (see the CRM health check)"
            );
            report.unauthorized = true;
            return Ok(report);
        }
    }
    let due = {
        let mut conn = crm.db.conn().await?;
        store::due_failed(conn.exec(), RETRY_BATCH).await?
    };
    for entry in due {
        let outcome = match Op::from_entry(&entry) {
            None => outcome_skipped(entry.crm_contact_id.clone(), "unknown operation"),
            Some(op) => {
                let user_gone = match entry.user_id {
                    Some(id) => {
                        let mut conn = crm.db.conn().await?;
                        store::user_facts(conn.exec(), id).await?.is_none()
                    }
                    None => true,
                };
                if op.needs_user() && user_gone {
                    outcome_skipped(entry.crm_contact_id.clone(), "the user no longer exists")
                } else {
                    match crm.perform(entry.user_id, &op).await? {
                        Ok(outcome) => outcome,
                        // The limiter's budget is spent: the rest waits for the next cycle.
                        Err(CrmError::Throttled) => break,
                        Err(other) => outcome_failed(entry.crm_contact_id.clone(), &other),
                    }
                }
            }
        };
        let exhausted =
            outcome.status == SyncStatus::Failed && entry.retry_count + 1 >= MAX_RETRIES;
        let recorded = {
            let mut conn = crm.db.conn().await?;
            store::record_retry(conn.exec(), &entry, &outcome, exhausted, crm.clock.now()).await?
        };
        if !recorded {
            continue; // another scheduler took this attempt
        }
        report.attempted += 1;
        crm.setup().metrics.retried();
        crm.setup().metrics.sync_outcome(outcome.status);
        match outcome.status {
            SyncStatus::Success => report.succeeded += 1,
            SyncStatus::Skipped => report.skipped += 1,
            _ if exhausted => {
                report.exhausted += 1;
                tracing::warn!(
                    entry_id = entry.id,
                    "CRM sync given up after {MAX_RETRIES} attempts"
                );
            }
            _ => {}
        }
        if outcome.response_status == Some(401) {
            report.unauthorized = true;
            break;
        }
    }
    Ok(report)
}
