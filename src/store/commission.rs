//! Commission configuration: one rate per expert level, in basis points.

use chrono::{DateTime, Utc};

use super::{Db, Exec, StoreResult};
use crate::domain::commission::Level;
use crate::on_exec;

/// One level's configured rate.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct CommissionRate {
    pub level: String,
    pub rate_bp: i64,
    pub updated_at: Option<DateTime<Utc>>,
    /// The administrator who set it last; `None` for the seeded default.
    pub updated_by: Option<i64>,
}

/// Every level, Global, Pro, Enterprise.
pub async fn list(ex: Exec<'_>) -> StoreResult<Vec<CommissionRate>> {
    Ok(on_exec!(ex, c => sqlx::query_as::<_, CommissionRate>(
        "SELECT level, rate_bp, updated_at, updated_by FROM commission_config
         ORDER BY CASE level WHEN 'Global' THEN 0 WHEN 'Pro' THEN 1 ELSE 2 END",
    )
    .fetch_all(c)
    .await)?)
}

pub async fn find(ex: Exec<'_>, level: Level) -> StoreResult<Option<CommissionRate>> {
    Ok(on_exec!(ex, c => sqlx::query_as::<_, CommissionRate>(
        "SELECT level, rate_bp, updated_at, updated_by FROM commission_config WHERE level = $1",
    )
    .bind(level.as_str())
    .fetch_optional(c)
    .await)?)
}

/// The rate a release at `level` uses. The migration seeds every level; should a row be
/// missing, the specification's default applies rather than failing a release.
pub async fn rate_bp_for(ex: Exec<'_>, level: Level) -> StoreResult<i64> {
    Ok(rate_of(level, find(ex, level).await?.as_ref()))
}

/// [`rate_bp_for`] of every level, in one read.
pub async fn rates_bp(ex: Exec<'_>) -> StoreResult<Vec<(Level, i64)>> {
    let rows = list(ex).await?;
    Ok(Level::ALL
        .into_iter()
        .map(|level| {
            let row = rows.iter().find(|r| r.level == level.as_str());
            (level, rate_of(level, row))
        })
        .collect())
}

fn rate_of(level: Level, row: Option<&CommissionRate>) -> i64 {
    row.map_or_else(|| level.default_rate_bp(), |r| r.rate_bp)
}

/// Sets one level's rate (an upsert, so a missing row cannot make the write vanish).
pub async fn update(
    ex: Exec<'_>,
    level: Level,
    rate_bp: i64,
    admin_id: i64,
    now: DateTime<Utc>,
) -> StoreResult<CommissionRate> {
    Ok(on_exec!(ex, c => sqlx::query_as::<_, CommissionRate>(
        "INSERT INTO commission_config (level, rate_bp, updated_at, updated_by)
         VALUES ($1, $2, $3, $4)
         ON CONFLICT (level) DO UPDATE
            SET rate_bp = excluded.rate_bp, updated_at = excluded.updated_at,
                updated_by = excluded.updated_by
         RETURNING level, rate_bp, updated_at, updated_by",
    )
    .bind(level.as_str())
    .bind(rate_bp)
    .bind(now)
    .bind(admin_id)
    .fetch_one(c)
    .await)?)
}

/// Sets several levels in one transaction: all of them or none. Returns every level after.
pub async fn update_all(
    db: &Db,
    rates: &[(Level, i64)],
    admin_id: i64,
    now: DateTime<Utc>,
) -> StoreResult<Vec<CommissionRate>> {
    let mut tx = db.begin().await?;
    for &(level, rate_bp) in rates {
        // An error drops `tx`, which rolls back the levels already written.
        update(tx.exec(), level, rate_bp, admin_id, now).await?;
    }
    let all = list(tx.exec()).await?;
    tx.commit().await?;
    Ok(all)
}
