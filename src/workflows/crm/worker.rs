//! The CRM worker: a supervised job draining the CRM queue (woken when a sync is queued, and
//! every few seconds for syncs queued by other instances or left by a stop; started by
//! `background::start_drains`) that performs queued operations in order. The client's
//! limiter paces it; a slow, down or rate-limited CRM only ever delays this queue, never the
//! outbox's notifications and e-mails.

use super::{CrmService, Op};
use crate::store::crm as store;
use crate::workflows::error::FlowResult;

/// The name operators see among the actor metrics.
pub const JOB_NAME: &str = "crm_sync";
/// How long a claimed item is reserved for the worker that claimed it.
const LEASE: chrono::Duration = chrono::Duration::minutes(5);
/// Items claimed at once: one, leased just before it runs, so the calls of a slow CRM never
/// use up the lease of items still waiting their turn.
const CLAIMED_AT_ONCE: i64 = 1;
/// How long an item the limiter held back waits before the next try (not a failure: the
/// CRM was not called).
const THROTTLED_WAIT: chrono::Duration = chrono::Duration::seconds(1);

/// Queues `op` (once per outbox event) and wakes the worker.
pub async fn enqueue(
    crm: &CrmService,
    event_id: Option<i64>,
    user_id: Option<i64>,
    op: &Op,
) -> FlowResult<()> {
    let value = serde_json::to_value(op).map_err(anyhow::Error::from)?;
    {
        let mut conn = crm.db.conn().await?;
        store::enqueue(conn.exec(), event_id, user_id, &value, crm.clock.now()).await?;
    }
    crm.wake();
    Ok(())
}

/// Performs every due item; answers how many were performed (each is logged).
pub async fn drain(crm: &CrmService) -> FlowResult<usize> {
    let mut performed = 0;
    loop {
        let now = crm.clock.now();
        let claimed = {
            let mut conn = crm.db.conn().await?;
            store::QUEUE
                .claim(conn.exec(), now, now + LEASE, CLAIMED_AT_ONCE)
                .await?
        };
        let Some(item) = claimed.into_iter().next() else {
            return Ok(performed);
        };
        let op: Op = match serde_json::from_value(item.op.0.clone()) {
            Ok(op) => op,
            Err(error) => {
                tracing::warn!(item = item.id, %error, "CRM queue item not understood; dropped");
                let mut conn = crm.db.conn().await?;
                store::QUEUE
                    .mark_done(conn.exec(), &[item.id], crm.clock.now())
                    .await?;
                continue;
            }
        };
        match crm.run(item.user_id, &op).await? {
            Ok(_) => {
                let mut conn = crm.db.conn().await?;
                store::QUEUE
                    .mark_done(conn.exec(), &[item.id], crm.clock.now())
                    .await?;
                performed += 1;
            }
            Err(throttled) => {
                // The limiter's budget is spent: back in the queue, the next pass goes on.
                tracing::info!(item = item.id, %throttled, "CRM sync postponed");
                let mut conn = crm.db.conn().await?;
                store::QUEUE
                    .release(conn.exec(), &[item.id], crm.clock.now() + THROTTLED_WAIT)
                    .await?;
                return Ok(performed);
            }
        }
    }
}
