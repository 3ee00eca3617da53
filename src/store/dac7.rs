//! DAC7: experts' released income per tax year and quarter, and their yearly review.

use chrono::{DateTime, Utc};

use super::listing::Sql;
use super::tallies::Tally;
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

/// The statement of [`year_income`]: each expert's sums of the year from
/// `Tally::SellerIncome` (`$14`, migration 0044), whose twelve keys of the year are
/// `$1`–`$12` ([`income_keys`]), the tax year `$13`, narrowed by `$narrowing` (conditions
/// on the tally rows). The sums come out by account, so each expert's account, profile and
/// review are looked up in id order, as they lie on disk, and the join needs no sort after
/// (at M PostgreSQL's hash aggregate handed them out in hash order).
macro_rules! year_income_sql {
    ($narrowing:literal) => {
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
             SELECT t.user_id,
                 CAST(SUM(CASE WHEN t.key IN ($1, $2, $3, $4) THEN t.total ELSE 0 END) AS BIGINT) AS gross_minor,
                 CAST(SUM(CASE WHEN t.key IN ($5, $6, $7, $8) THEN t.total ELSE 0 END) AS BIGINT) AS commission_minor,
                 CAST(SUM(CASE WHEN t.key IN ($9, $10, $11, $12) THEN t.total ELSE 0 END) AS BIGINT) AS net_minor,
                 CAST(SUM(t.n) AS BIGINT) AS paid_activities,
                 CAST(SUM(CASE WHEN t.key = $1 THEN t.total ELSE 0 END) AS BIGINT) AS q1_minor,
                 CAST(SUM(CASE WHEN t.key = $2 THEN t.total ELSE 0 END) AS BIGINT) AS q2_minor,
                 CAST(SUM(CASE WHEN t.key = $3 THEN t.total ELSE 0 END) AS BIGINT) AS q3_minor,
                 CAST(SUM(CASE WHEN t.key = $4 THEN t.total ELSE 0 END) AS BIGINT) AS q4_minor,
                 CAST(SUM(CASE WHEN t.key = $1 THEN t.n ELSE 0 END) AS BIGINT) AS q1_count,
                 CAST(SUM(CASE WHEN t.key = $2 THEN t.n ELSE 0 END) AS BIGINT) AS q2_count,
                 CAST(SUM(CASE WHEN t.key = $3 THEN t.n ELSE 0 END) AS BIGINT) AS q3_count,
                 CAST(SUM(CASE WHEN t.key = $4 THEN t.n ELSE 0 END) AS BIGINT) AS q4_count,
                 CAST(SUM(CASE WHEN t.key = $5 THEN t.total ELSE 0 END) AS BIGINT) AS q1_commission_minor,
                 CAST(SUM(CASE WHEN t.key = $6 THEN t.total ELSE 0 END) AS BIGINT) AS q2_commission_minor,
                 CAST(SUM(CASE WHEN t.key = $7 THEN t.total ELSE 0 END) AS BIGINT) AS q3_commission_minor,
                 CAST(SUM(CASE WHEN t.key = $8 THEN t.total ELSE 0 END) AS BIGINT) AS q4_commission_minor
             FROM (
                 SELECT user_id, key, n, total FROM tallies
                  WHERE name = $14
                    AND key IN ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) ", $narrowing, "
                 UNION ALL
                 SELECT user_id, key, n, total FROM tally_deltas
                  WHERE name = $14
                    AND key IN ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) ", $narrowing, "
             ) t
             GROUP BY t.user_id
             HAVING SUM(t.n) > 0
             ORDER BY t.user_id
         ) a
         JOIN users u ON u.id = a.user_id
         LEFT JOIN profiles p ON p.user_id = a.user_id AND p.profile_type = 'experto'
         LEFT JOIN dac7_reviews r ON r.user_id = a.user_id AND r.period = $13
         ORDER BY a.user_id"
        )
    };
}

/// The keys of `seller_income` (migration 0044) for `year`: its four quarters' gross, then
/// their commission, then their net, as [`year_income_sql`] binds them.
fn income_keys(year: i32) -> [String; 12] {
    std::array::from_fn(|i| {
        let figure = ["gross", "commission", "net"][i / 4];
        format!("{year:04}-Q{} {figure}", i % 4 + 1)
    })
}

macro_rules! bind_year {
    ($query:expr, $year:expr) => {{
        let mut query = $query;
        for key in income_keys($year) {
            query = query.bind(key);
        }
        query
            .bind(i64::from($year))
            .bind(Tally::SellerIncome.as_str())
    }};
}

/// Income of `year` per expert with released payments in it, from the sums the writes keep
/// by quarter (migration 0044); one expert only when `expert` is given. One row per expert.
pub async fn year_income(
    ex: Exec<'_>,
    year: i32,
    expert: Option<i64>,
) -> StoreResult<Vec<SellerYear>> {
    Ok(on_exec!(ex, c => {
        let query = match expert {
            Some(expert) => bind_year!(
                sqlx::query_as::<_, SellerYear>(year_income_sql!("AND user_id = $15")),
                year
            )
            .bind(expert),
            None => bind_year!(sqlx::query_as::<_, SellerYear>(year_income_sql!("")), year),
        };
        query.fetch_all(c).await
    })?)
}

/// [`year_income`] of every expert, row by row as the database answers: the report streams
/// them out without holding the year in memory.
pub fn year_income_stream<'c>(
    ex: Exec<'c>,
    year: i32,
) -> futures_util::stream::BoxStream<'c, StoreResult<SellerYear>> {
    use futures_util::{StreamExt as _, TryStreamExt as _};
    on_exec!(ex, c => bind_year!(sqlx::query_as::<_, SellerYear>(year_income_sql!("")), year)
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
        set_profile_status(ex, &[user_id], Dac7ReviewStatus::Reviewed, period, now).await?;
    }
    Ok(rows == 1)
}

/// Marks the year `notified` with its deadline for each of `experts` who has not reviewed it
/// yet, and their profiles: two statements however many they are. Answers those marked.
pub async fn mark_notified(
    mut ex: Exec<'_>,
    experts: &[i64],
    period: i64,
    review_deadline: &str,
    now: DateTime<Utc>,
) -> StoreResult<Vec<i64>> {
    if experts.is_empty() {
        return Ok(Vec::new());
    }
    let mut sql = Sql::default();
    let (year, deadline, at) = (sql.arg(period), sql.arg(review_deadline), sql.arg(now));
    let rows: Vec<String> = experts
        .iter()
        .map(|id| {
            format!(
                "({}, {year}, 'notified', {deadline}, {at}, {at}, {at})",
                sql.arg(*id)
            )
        })
        .collect();
    let marked: Vec<(i64,)> = sql
        .with_text(&format!(
            "INSERT INTO dac7_reviews (user_id, period, status, review_deadline, notified_at,
                                       created_at, updated_at)
             VALUES {rows}
             ON CONFLICT (user_id, period) DO UPDATE
                 SET status = 'notified', review_deadline = {deadline}, notified_at = {at},
                     updated_at = {at}
                 WHERE dac7_reviews.status <> 'reviewed'
             RETURNING user_id",
            rows = rows.join(", ")
        ))
        .fetch_all(ex.re())
        .await?;
    let marked: Vec<i64> = marked.into_iter().map(|(id,)| id).collect();
    set_profile_status(ex, &marked, Dac7ReviewStatus::Notified, period, now).await?;
    Ok(marked)
}

/// The expert profiles of `experts` keep their latest review (`dac7_review_*`), in one
/// statement: a review stamps its time, a request to review keeps the last review's.
async fn set_profile_status(
    ex: Exec<'_>,
    experts: &[i64],
    status: Dac7ReviewStatus,
    period: i64,
    now: DateTime<Utc>,
) -> StoreResult<()> {
    if experts.is_empty() {
        return Ok(());
    }
    let mut sql = Sql::default();
    let (to, year, at) = (sql.arg(status.as_str()), sql.arg(period), sql.arg(now));
    let reviewed_at = if status == Dac7ReviewStatus::Reviewed {
        format!(", dac7_reviewed_at = {at}")
    } else {
        String::new()
    };
    let list = sql.arg_list(experts);
    // `Sql` reads rows: the ids updated are read back only to run the statement.
    sql.with_text(&format!(
        "UPDATE profiles SET dac7_review_status = {to}, dac7_review_period = {year},
                updated_at = {at}{reviewed_at}
         WHERE user_id IN ({list}) AND profile_type = 'experto'
         RETURNING user_id"
    ))
    .fetch_all::<(i64,)>(ex)
    .await?;
    Ok(())
}
