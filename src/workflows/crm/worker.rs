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
const BATCH: i64 = 20;

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
        let due = {
            let mut conn = crm.db.conn().await?;
            store::due_queue(conn.exec(), crm.clock.now(), BATCH).await?
        };
        if due.is_empty() {
            return Ok(performed);
        }
        for item in due {
            let until = crm.clock.now() + LEASE;
            {
                let mut conn = crm.db.conn().await?;
                if !store::lease_queue(conn.exec(), &item, until).await? {
                    continue; // another worker has it
                }
            }
            let op: Op = match serde_json::from_value(item.op.0.clone()) {
                Ok(op) => op,
                Err(error) => {
                    tracing::warn!(item = item.id, %error, "CRM queue item not understood; dropped");
                    let mut conn = crm.db.conn().await?;
                    store::dequeue(conn.exec(), item.id).await?;
                    continue;
                }
            };
            match crm.run(item.user_id, &op).await? {
                Ok(_) => {
                    let mut conn = crm.db.conn().await?;
                    store::dequeue(conn.exec(), item.id).await?;
                    performed += 1;
                }
                Err(throttled) => {
                    // The limiter's budget is spent: back in the queue, the next pass goes on.
                    tracing::info!(item = item.id, %throttled, "CRM sync postponed");
                    let leased = store::QueueItem {
                        available_at: until,
                        ..item
                    };
                    let mut conn = crm.db.conn().await?;
                    store::lease_queue(
                        conn.exec(),
                        &leased,
                        crm.clock.now() + chrono::Duration::seconds(1),
                    )
                    .await?;
                    return Ok(performed);
                }
            }
        }
    }
}
