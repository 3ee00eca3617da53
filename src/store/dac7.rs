//! DAC7: experts' released income per tax year and quarter, and their yearly review.

use chrono::{DateTime, Utc};

use super::{Exec, StoreResult};
use crate::domain::dac7::Dac7ReviewStatus;
use crate::on_exec;

/// An expert's income of one year, from the payments released to them, with the fiscal
/// identity the report needs.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SellerYear {
    pub user_id: i64,
    /// What companies paid for the expert's milestones (before commission).
    pub gross_minor: i64,
    /// The platform's commission withheld.
    pub commission_minor: i64,
    /// What the expert received.
    pub net_minor: i64,
    /// Milestones paid (payments released).
    pub paid_activities: i64,
    pub q1_minor: i64,
    pub q2_minor: i64,
    pub q3_minor: i64,
    pub q4_minor: i64,
    pub q1_count: i64,
    pub q2_count: i64,
    pub q3_count: i64,
    pub q4_count: i64,
    pub q1_commission_minor: i64,
    pub q2_commission_minor: i64,
    pub q3_commission_minor: i64,
    pub q4_commission_minor: i64,
    pub fiscal_data_complete: bool,
    pub fiscal_name: Option<String>,
    pub tax_id: Option<String>,
    pub vat_number: Option<String>,
    pub fiscal_type: Option<String>,
    pub fiscal_address: Option<String>,
    pub fiscal_postal_code: Option<String>,
    pub fiscal_city: Option<String>,
    pub fiscal_country: Option<String>,
    pub birth_date: Option<String>,
    pub email: String,
    pub review_status: Option<Dac7ReviewStatus>,
}

/// The statement of [`year_income`]: each expert's sums as `$user` (the expert of the
/// group) after `$narrowing` (conditions on `y`, then its grouping).
macro_rules! year_income_sql {
    ($user:literal, $narrowing:literal) => {
        concat!(
            "SELECT a.user_id, a.gross_minor, a.commission_minor, a.net_minor, a.paid_activities,
                a.q1_minor, a.q2_minor, a.q3_minor, a.q4_minor,
                a.q1_count, a.q2_count, a.q3_count, a.q4_count,
                a.q1_commission_minor, a.q2_commission_minor, a.q3_commission_minor,
                a.q4_commission_minor,
                COALESCE(p.fiscal_data_complete, FALSE) AS fiscal_data_complete,
                p.fiscal_name, p.tax_id, p.vat_number, p.fiscal_type, p.fiscal_address,
                p.fiscal_postal_code, p.fiscal_city, p.fiscal_country, p.birth_date,
                u.email, r.status AS review_status
         FROM (
             SELECT ", $user, " AS user_id,
                 CAST(SUM(y.amount_minor) AS BIGINT) AS gross_minor,
                 CAST(SUM(COALESCE(y.commission_minor, 0)) AS BIGINT) AS commission_minor,
                 CAST(SUM(COALESCE(y.expert_amount_minor,
                     y.amount_minor - COALESCE(y.commission_minor, 0))) AS BIGINT) AS net_minor,
                 COUNT(*) AS paid_activities,
                 CAST(SUM(CASE WHEN y.released_at < $2 THEN y.amount_minor ELSE 0 END) AS BIGINT) AS q1_minor,
                 CAST(SUM(CASE WHEN y.released_at >= $2 AND y.released_at < $3 THEN y.amount_minor ELSE 0 END) AS BIGINT) AS q2_minor,
                 CAST(SUM(CASE WHEN y.released_at >= $3 AND y.released_at < $4 THEN y.amount_minor ELSE 0 END) AS BIGINT) AS q3_minor,
                 CAST(SUM(CASE WHEN y.released_at >= $4 THEN y.amount_minor ELSE 0 END) AS BIGINT) AS q4_minor,
                 CAST(SUM(CASE WHEN y.released_at < $2 THEN 1 ELSE 0 END) AS BIGINT) AS q1_count,
                 CAST(SUM(CASE WHEN y.released_at >= $2 AND y.released_at < $3 THEN 1 ELSE 0 END) AS BIGINT) AS q2_count,
                 CAST(SUM(CASE WHEN y.released_at >= $3 AND y.released_at < $4 THEN 1 ELSE 0 END) AS BIGINT) AS q3_count,
                 CAST(SUM(CASE WHEN y.released_at >= $4 THEN 1 ELSE 0 END) AS BIGINT) AS q4_count,
                 CAST(SUM(CASE WHEN y.released_at < $2 THEN COALESCE(y.commission_minor, 0) ELSE 0 END) AS BIGINT) AS q1_commission_minor,
                 CAST(SUM(CASE WHEN y.released_at >= $2 AND y.released_at < $3 THEN COALESCE(y.commission_minor, 0) ELSE 0 END) AS BIGINT) AS q2_commission_minor,
                 CAST(SUM(CASE WHEN y.released_at >= $3 AND y.released_at < $4 THEN COALESCE(y.commission_minor, 0) ELSE 0 END) AS BIGINT) AS q3_commission_minor,
                 CAST(SUM(CASE WHEN y.released_at >= $4 THEN COALESCE(y.commission_minor, 0) ELSE 0 END) AS BIGINT) AS q4_commission_minor
             FROM payments y
             WHERE y.status = 'released' AND y.expert_id IS NOT NULL
               AND y.released_at >= $1 AND y.released_at < $5
               ", $narrowing, "
         ) a
         JOIN users u ON u.id = a.user_id
         LEFT JOIN profiles p ON p.user_id = a.user_id AND p.profile_type = 'experto'
         LEFT JOIN dac7_reviews r ON r.user_id = a.user_id AND r.period = $6
         ORDER BY a.user_id"
        )
    };
}

/// Income of the year bounded by `q` (its quarter starts and the next year's start), per
/// expert with released payments in it; one expert only when `expert` is given (read from
/// the expert's payments). Summed in SQL, one row per expert.
pub async fn year_income(
    ex: Exec<'_>,
    q: &[DateTime<Utc>; 5],
    period: i64,
    expert: Option<i64>,
) -> StoreResult<Vec<SellerYear>> {
    Ok(on_exec!(ex, c => {
        let query = match expert {
            // One expert's sums as one group, not grouped by expert: the planner then knows it
            // reads one row and looks its expert up by key (grouped, it guessed a group per
            // payment at L and hashed every user: 98 ms against a few).
            Some(expert) => sqlx::query_as::<_, SellerYear>(year_income_sql!(
                "CAST($7 AS BIGINT)",
                "AND y.expert_id = $7 HAVING COUNT(*) > 0"
            ))
                .bind(q[0]).bind(q[1]).bind(q[2]).bind(q[3]).bind(q[4]).bind(period).bind(expert),
            None => sqlx::query_as::<_, SellerYear>(year_income_sql!("y.expert_id", "GROUP BY y.expert_id"))
                .bind(q[0]).bind(q[1]).bind(q[2]).bind(q[3]).bind(q[4]).bind(period),
        };
        query.fetch_all(c).await
    })?)
}

/// [`year_income`] of every expert, row by row as the database answers: the report streams
/// them out without holding the year in memory.
pub fn year_income_stream<'c>(
    ex: Exec<'c>,
    q: [DateTime<Utc>; 5],
    period: i64,
) -> futures_util::stream::BoxStream<'c, StoreResult<SellerYear>> {
    use futures_util::{StreamExt as _, TryStreamExt as _};
    on_exec!(ex, c => sqlx::query_as::<_, SellerYear>(year_income_sql!("y.expert_id", "GROUP BY y.expert_id"))
        .bind(q[0]).bind(q[1]).bind(q[2]).bind(q[3]).bind(q[4]).bind(period)
        .fetch(c)
        .map_err(super::StoreError::from)
        .boxed())
}

/// An expert's review of one tax year.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Review {
    pub status: Dac7ReviewStatus,
    pub review_deadline: Option<String>,
    pub notified_at: Option<DateTime<Utc>>,
    pub reviewed_at: Option<DateTime<Utc>>,
}

pub async fn review(ex: Exec<'_>, user_id: i64, period: i64) -> StoreResult<Option<Review>> {
    Ok(on_exec!(ex, c => sqlx::query_as::<_, Review>(
        "SELECT status, review_deadline, notified_at, reviewed_at FROM dac7_reviews
         WHERE user_id = $1 AND period = $2",
    )
    .bind(user_id)
    .bind(period)
    .fetch_optional(c)
    .await)?)
}

/// Marks the year reviewed; false when it already was (the guard against two confirmations).
pub async fn mark_reviewed(
    mut ex: Exec<'_>,
    user_id: i64,
    period: i64,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let rows = on_exec!(ex.re(), c => sqlx::query(
        "INSERT INTO dac7_reviews (user_id, period, status, reviewed_at, created_at, updated_at)
         VALUES ($1, $2, 'reviewed', $3, $3, $3)
         ON CONFLICT (user_id, period) DO UPDATE
             SET status = 'reviewed', reviewed_at = $3, updated_at = $3
             WHERE dac7_reviews.status <> 'reviewed'",
    )
    .bind(user_id)
    .bind(period)
    .bind(now)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    if rows == 1 {
        set_profile_status(
            ex,
            user_id,
            Dac7ReviewStatus::Reviewed,
            period,
            Some(now),
            now,
        )
        .await?;
    }
    Ok(rows == 1)
}

/// Marks the year `notified` with its deadline; false when the expert already reviewed it.
pub async fn mark_notified(
    mut ex: Exec<'_>,
    user_id: i64,
    period: i64,
    review_deadline: &str,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let rows = on_exec!(ex.re(), c => sqlx::query(
        "INSERT INTO dac7_reviews (user_id, period, status, review_deadline, notified_at,
                                   created_at, updated_at)
         VALUES ($1, $2, 'notified', $3, $4, $4, $4)
         ON CONFLICT (user_id, period) DO UPDATE
             SET status = 'notified', review_deadline = $3, notified_at = $4, updated_at = $4
             WHERE dac7_reviews.status <> 'reviewed'",
    )
    .bind(user_id)
    .bind(period)
    .bind(review_deadline)
    .bind(now)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    if rows == 1 {
        set_profile_status(ex, user_id, Dac7ReviewStatus::Notified, period, None, now).await?;
    }
    Ok(rows == 1)
}

/// The expert profile keeps the latest review (`dac7_review_*`).
async fn set_profile_status(
    ex: Exec<'_>,
    user_id: i64,
    status: Dac7ReviewStatus,
    period: i64,
    reviewed_at: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> StoreResult<()> {
    on_exec!(ex, c => sqlx::query(
        "UPDATE profiles SET dac7_review_status = $2, dac7_review_period = $3,
                dac7_reviewed_at = COALESCE($4, dac7_reviewed_at), updated_at = $5
         WHERE user_id = $1 AND profile_type = 'experto'",
    )
    .bind(user_id)
    .bind(status)
    .bind(period)
    .bind(reviewed_at)
    .bind(now)
    .execute(c)
    .await
    .map(drop))?;
    Ok(())
}
