//! Administrators set the commission kept at each expert level; releases read the rate of
//! the expert's level at that moment.

use crate::domain::commission::Level;
use crate::state::AppState;
use crate::store::commission::{self, CommissionRate};
use crate::workflows::error::FlowResult;

/// Sets one level's rate (basis points), recording who changed it.
pub async fn set_rate(
    state: &AppState,
    admin_id: i64,
    level: Level,
    rate_bp: i64,
) -> FlowResult<CommissionRate> {
    let mut conn = state.db.conn().await?;
    Ok(commission::update(conn.exec(), level, rate_bp, admin_id, state.clock.now()).await?)
}

/// Sets several levels' rates at once, all or none; answers every level.
pub async fn set_rates(
    state: &AppState,
    admin_id: i64,
    rates: &[(Level, i64)],
) -> FlowResult<Vec<CommissionRate>> {
    Ok(commission::update_all(&state.db, rates, admin_id, state.clock.now()).await?)
}
