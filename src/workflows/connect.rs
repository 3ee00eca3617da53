//! Placeholder until the connected-account module lands (replaced on merge).

use chrono::{DateTime, Utc};

use crate::integrations::processor::Account;
use crate::on_exec;
use crate::store::{Exec, StoreResult};

pub async fn apply_account_update(
    ex: Exec<'_>,
    account: &Account,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let status = if account.charges_enabled && account.payouts_enabled && account.details_submitted
    {
        "active"
    } else {
        "pending"
    };
    let done = on_exec!(ex, c => sqlx::query(
        "UPDATE profiles SET processor_connect_status = $1, processor_charges_enabled = $2,
             processor_payouts_enabled = $3, updated_at = $4
         WHERE processor_connect_account_id = $5",
    )
    .bind(status)
    .bind(account.charges_enabled)
    .bind(account.payouts_enabled)
    .bind(now)
    .bind(&account.id)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done > 0)
}
