//! Deleting what has outlived its time (expired idempotency keys, old webhook log rows, read
//! notifications, dispatched outbox events, the CRM sync log) in bounded statements, so a
//! large backlog never holds one long delete open.

use crate::store::StoreResult;
use crate::workflows::error::FlowResult;

/// Rows one statement deletes at most.
pub const BATCH: i64 = 1_000;

/// Runs `delete_up_to(BATCH)` (one statement deleting at most that many rows, answering how
/// many it deleted) until a statement deletes fewer; how many in all.
pub async fn in_batches<F, Fut>(mut delete_up_to: F) -> FlowResult<u64>
where
    F: FnMut(i64) -> Fut,
    Fut: Future<Output = StoreResult<u64>>,
{
    let mut deleted = 0;
    loop {
        let batch = delete_up_to(BATCH).await?;
        deleted += batch;
        if batch < BATCH as u64 {
            return Ok(deleted);
        }
    }
}

/// The job pruning read notifications, in `/metrics`.
pub const NOTIFICATION_PRUNE_JOB: &str = "notification_prune";

/// Deletes the notifications read more than `NOTIFICATION_RETENTION_DAYS` ago (none when
/// the setting keeps them); how many. Unread ones stay whatever their age.
pub async fn prune_read_notifications(state: &crate::state::AppState) -> FlowResult<u64> {
    let Some(kept) = state.settings.notification_retention else {
        return Ok(0);
    };
    let before = state.clock.now() - kept;
    in_batches(|limit| async move {
        let mut conn = state.db.conn().await?;
        crate::store::notifications::prune_read(conn.exec(), before, limit).await
    })
    .await
}

/// The job pruning dispatched outbox events, in `/metrics`.
pub const EVENT_PRUNE_JOB: &str = "event_prune";

/// Deletes the outbox events older than `EVENT_RETENTION_DAYS` that every consumer has had
/// and whose e-mails are sent (none when the setting keeps them); how many. Their webhook
/// log rows (kept as long, at most) stay and lose only their link.
pub async fn prune_dispatched_events(state: &crate::state::AppState) -> FlowResult<u64> {
    let Some(kept) = state.settings.event_retention else {
        return Ok(0);
    };
    let before = state.clock.now() - kept;
    in_batches(|limit| async move {
        let mut conn = state.db.conn().await?;
        crate::store::events::prune_dispatched(conn.exec(), before, limit).await
    })
    .await
}

/// The job pruning the CRM sync log, in `/metrics`.
pub const CRM_LOG_PRUNE_JOB: &str = "crm_log_prune";

/// Deletes the CRM sync log entries older than `CRM_SYNC_LOG_RETENTION_DAYS` (none when the
/// setting keeps them), except those still to be retried and each user's newest entry naming
/// their contact; how many.
pub async fn prune_crm_sync_log(state: &crate::state::AppState) -> FlowResult<u64> {
    let Some(kept) = state.settings.crm_sync_log_retention else {
        return Ok(0);
    };
    let before = state.clock.now() - kept;
    in_batches(|limit| async move {
        let mut conn = state.db.conn().await?;
        crate::store::crm::prune_log(conn.exec(), before, limit).await
    })
    .await
}
