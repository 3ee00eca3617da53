//! Administrators' internal ratings of users (kept on each of the user's profiles) and
//! their history.

use chrono::{DateTime, Utc};

use super::{Exec, StoreResult};
use crate::on_exec;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct RatingChange {
    pub id: i64,
    pub user_id: i64,
    pub old_rating: Option<f64>,
    pub new_rating: f64,
    pub reason: String,
    pub changed_by: String,
    pub changed_by_id: Option<i64>,
    pub created_at: DateTime<Utc>,
}

/// The user's internal rating now (their profiles share it), `None` when unrated; the outer
/// `None` when the user has no profile.
pub async fn current(ex: Exec<'_>, user_id: i64) -> StoreResult<Option<Option<f64>>> {
    let rows: Vec<Option<f64>> = on_exec!(ex, c => sqlx::query_scalar(
        "SELECT internal_rating FROM profiles WHERE user_id = $1 ORDER BY id",
    )
    .bind(user_id)
    .fetch_all(c)
    .await)?;
    Ok((!rows.is_empty()).then(|| rows.into_iter().flatten().next()))
}

/// Sets the rating on every profile of the user.
pub async fn set(ex: Exec<'_>, user_id: i64, rating: f64, now: DateTime<Utc>) -> StoreResult<()> {
    on_exec!(ex, c => sqlx::query(
        "UPDATE profiles SET internal_rating = $2, updated_at = $3 WHERE user_id = $1",
    )
    .bind(user_id)
    .bind(rating)
    .bind(now)
    .execute(c)
    .await
    .map(drop))?;
    Ok(())
}

pub struct NewChange<'a> {
    pub user_id: i64,
    pub old_rating: Option<f64>,
    pub new_rating: f64,
    pub reason: &'a str,
    pub changed_by: &'a str,
    pub changed_by_id: i64,
}

pub async fn record(ex: Exec<'_>, c: &NewChange<'_>, now: DateTime<Utc>) -> StoreResult<i64> {
    Ok(on_exec!(ex, conn => sqlx::query_scalar(
        "INSERT INTO internal_rating_history
             (user_id, old_rating, new_rating, reason, changed_by, changed_by_id, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
    )
    .bind(c.user_id)
    .bind(c.old_rating)
    .bind(c.new_rating)
    .bind(c.reason)
    .bind(c.changed_by)
    .bind(c.changed_by_id)
    .bind(now)
    .fetch_one(conn)
    .await)?)
}

/// The newest `limit` changes and how many there are in all.
pub async fn history(
    mut ex: Exec<'_>,
    user_id: i64,
    limit: i64,
) -> StoreResult<(Vec<RatingChange>, i64)> {
    let items = on_exec!(ex.re(), c => sqlx::query_as::<_, RatingChange>(
        "SELECT id, user_id, old_rating, new_rating, reason, changed_by, changed_by_id, created_at
         FROM internal_rating_history WHERE user_id = $1
         ORDER BY created_at DESC, id DESC LIMIT $2",
    )
    .bind(user_id)
    .bind(limit)
    .fetch_all(c)
    .await)?;
    let total = on_exec!(ex, c => sqlx::query_scalar(
        "SELECT COUNT(*) FROM internal_rating_history WHERE user_id = $1",
    )
    .bind(user_id)
    .fetch_one(c)
    .await)?;
    Ok((items, total))
}

/// Whether any of the user's profiles is verified, and the expert level of their expert
/// profile.
pub async fn verification(ex: Exec<'_>, user_id: i64) -> StoreResult<(bool, Option<String>)> {
    let rows: Vec<(bool, String, String)> = on_exec!(ex, c => sqlx::query_as(
        "SELECT is_verified, profile_type, expert_level FROM profiles WHERE user_id = $1",
    )
    .bind(user_id)
    .fetch_all(c)
    .await)?;
    let verified = rows.iter().any(|r| r.0);
    let level = rows.into_iter().find(|r| r.1 == "experto").map(|r| r.2);
    Ok((verified, level))
}
