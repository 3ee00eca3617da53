//! Placeholder until the commission module lands (replaced on merge).

use super::{Exec, StoreResult};
use crate::on_exec;

pub async fn rate_bp_for(ex: Exec<'_>, level: &str) -> StoreResult<Option<i64>> {
    Ok(
        on_exec!(ex, c => sqlx::query_scalar("SELECT rate_bp FROM commission_config WHERE level = $1")
        .bind(level)
        .fetch_optional(c)
        .await)?,
    )
}
