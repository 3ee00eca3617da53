//! Figures kept by the writes that change them (migration 0023): triggers append signed
//! deltas to `tally_deltas`, [`fold`] moves them into `tallies`, and every read here adds the
//! two in one statement, so it sees each delta once whether it was folded or not.
//!
//! Appending instead of updating a total keeps the escrow path free of hot rows: a payment's
//! release inserts a few rows and never waits for another payment's transaction.

use std::collections::HashMap;

use chrono::{DateTime, NaiveDate, Utc};

use super::listing::{Sql, Total};
use super::{Db, Exec, StoreResult};
use crate::domain::growth::day_key;
use crate::on_exec;

/// What a tally counts; its name in the tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tally {
    /// Payments by status: count and amount.
    Payments,
    /// Released payments: count and commission.
    Revenue,
    /// Released payments by calendar month of release (UTC, `YYYY-MM`): count and commission.
    RevenueByMonth,
    /// Projects by calendar month of creation (UTC, `YYYY-MM`).
    ProjectsByMonth,
    /// Per expert: released payments and what the expert received.
    ExpertEarnings,
    /// Per company: released payments and their amount.
    CompanySpend,
    /// Users not deleted, by role.
    UsersByRole,
    /// Every account, deleted or not (key '').
    Users,
    /// Accounts by the administrators' list's status filters (migration 0026).
    UsersByStatus,
    /// Accounts by role, deleted or not.
    AccountsByRole,
    /// Expert profiles of active users, by whether they are verified (`true` / `false`,
    /// migration 0027).
    ListedExperts,
    /// Profiles of users not deleted, by `type:verification`.
    ProfilesByVerification,
    /// Per expert: revealed, published reviews by companies, and the sum of their ratings
    /// (reviews past their blind window that the reveal job has not announced yet are added
    /// by [`top_by_mean_rating`]).
    ExpertRatings,
    /// Projects by word of their text, type and status: key `<word> <type> <status>`
    /// (PostgreSQL only, from the full-text vectors: migration 0030).
    ProjectWords,
    /// Listed experts by skill and verification: key `<skill id>:<true|false>` (migration
    /// 0030).
    ExpertsBySkill,
    /// Every profile, by `<type>:<is_verified>:<verification status>` (migration 0030).
    Profiles,
    /// Listed experts by word of their search document, alone and beside each of their
    /// skills, and verification: key `<word>[ #<skill id>]:<true|false>` (PostgreSQL only,
    /// migration 0046).
    ExpertWords,
    /// Per user: `mine:<status>`, the projects the user owns or is the expert of (once each),
    /// and `expert:<status>`, those the user is the expert of (migration 0032).
    ProjectsByParty,
    /// Per expert: applications by status (migration 0032).
    ApplicationsByExpert,
    /// Per expert: the projects they are invited to (formally or in the legacy list, once
    /// each), by `<project status>:<true|false>`, `true` once they applied (migration 0034).
    InvitationsByExpert,
    /// Projects by `<type> <status> <skill>`, the skill as `project_skills` holds it
    /// (migration 0034).
    ProjectsBySkill,
    /// Per user: `received:<visibility>` and `written:<visibility>` reviews, and
    /// `shown:<rating>`, the published reviews received that are revealed or announced
    /// (migration 0035).
    ReviewsByUser,
    /// Disputes by status (migration 0036).
    Disputes,
    /// Per expert: `held` payments and their amount, `released` ones and what the expert
    /// received (migration 0037).
    ExpertMoney,
    /// Projects ever assigned (`assignments`) and, of those, ended (`ends`): the growth view's
    /// projects under way (migration 0040, beside the day tallies read by [`over_days`]).
    UnderWay,
    /// Per user: payments by `company:<status>` and `expert:<status>`, the user's side
    /// (migration 0041).
    PaymentsByParty,
    /// Every committed change to projects, one a statement on PostgreSQL and one a row on
    /// SQLite (key ''): what the public list's kept answers are checked against (migration
    /// 0043, `store::page_cache`).
    ProjectWrites,
    /// Every committed change to what the expert directory shows: profiles, their skills,
    /// the skills and an account's activity; one a statement on PostgreSQL and one a row on
    /// SQLite (key ''): what the directory's kept answers are checked against (migration
    /// 0047, `store::page_cache`).
    ExpertWrites,
    /// Every committed change to the accounts' search texts, one a statement on PostgreSQL
    /// and one a row on SQLite (key ''): what the administrators' kept search totals are
    /// checked against (migration 0054, `store::page_cache`).
    AccountSearchWrites,
    /// Per expert: released income by UTC quarter, key `<YYYY>-Q<n> <figure>`: `gross` (count
    /// and amount), `commission`, `net` (migration 0044, read by `dac7::year_income`).
    SellerIncome,
}

impl Tally {
    pub fn as_str(self) -> &'static str {
        match self {
            Tally::Payments => "payments",
            Tally::Revenue => "revenue",
            Tally::RevenueByMonth => "revenue_by_month",
            Tally::ProjectsByMonth => "projects_by_month",
            Tally::ExpertEarnings => "expert_earnings",
            Tally::CompanySpend => "company_spend",
            Tally::UsersByRole => "users_by_role",
            Tally::Users => "users",
            Tally::UsersByStatus => "users_by_status",
            Tally::AccountsByRole => "accounts_by_role",
            Tally::ListedExperts => "listed_experts",
            Tally::ProfilesByVerification => "profiles_by_verification",
            Tally::ExpertRatings => "expert_ratings",
            Tally::ProjectWords => "project_words",
            Tally::ExpertsBySkill => "experts_by_skill",
            Tally::Profiles => "profiles",
            Tally::ExpertWords => "expert_words",
            Tally::ProjectsByParty => "projects_by_party",
            Tally::ApplicationsByExpert => "applications_by_expert",
            Tally::InvitationsByExpert => "invitations_by_expert",
            Tally::ProjectsBySkill => "projects_by_skill",
            Tally::ReviewsByUser => "reviews_by_user",
            Tally::Disputes => "disputes",
            Tally::ExpertMoney => "expert_money",
            Tally::UnderWay => "under_way",
            Tally::PaymentsByParty => "payments_by_party",
            Tally::ProjectWrites => "project_writes",
            Tally::ExpertWrites => "expert_writes",
            Tally::AccountSearchWrites => "account_search_writes",
            Tally::SellerIncome => "seller_income",
        }
    }
}

/// One key's figures.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Keyed {
    pub key: String,
    pub n: i64,
    pub total: i64,
}

/// A keyed tally (by status, role, ...), keys in order; keys counting nothing left out.
pub async fn by_key(ex: Exec<'_>, tally: Tally) -> StoreResult<Vec<Keyed>> {
    let mut sql = Sql::default();
    let rows = rows_of(&mut sql, tally, None, None);
    keyed(ex, sql, &rows).await
}

/// The keys `<prefix><state>` of each of `states`, as a per-user tally names them.
pub fn state_keys<S: Copy>(prefix: &str, states: &[S], name: fn(S) -> &'static str) -> Vec<String> {
    states
        .iter()
        .map(|s| format!("{prefix}{}", name(*s)))
        .collect()
}

/// One user's counts of a per-user tally keyed `<prefix><state>` ([`state_keys`]), for each
/// of `states` that counts something, in key order.
pub async fn by_state_of<S: Copy>(
    ex: Exec<'_>,
    tally: Tally,
    user_id: i64,
    prefix: &str,
    states: &[S],
    name: fn(S) -> &'static str,
) -> StoreResult<Vec<(S, i64)>> {
    let keys = state_keys(prefix, states, name);
    let counts = of_user(ex, tally, user_id, &keys).await?;
    Ok(counts
        .into_iter()
        .filter_map(|k| {
            let at = keys.iter().position(|key| *key == k.key)?;
            Some((states[at], k.n))
        })
        .collect())
}

/// One user's figures of a per-user tally under `keys`, by key, in order; keys counting
/// nothing left out.
pub async fn of_user(
    ex: Exec<'_>,
    tally: Tally,
    user_id: i64,
    keys: &[String],
) -> StoreResult<Vec<Keyed>> {
    let mut sql = Sql::default();
    let bound = bind_keys(&mut sql, keys);
    let rows = rows_of(&mut sql, tally, Some(&bound), Some(user_id));
    keyed(ex, sql, &rows).await
}

/// The figures of `rows` ([`rows_of`]) by key, in order; keys counting nothing left out.
/// Prepared once, as [`summed`] is.
async fn keyed(ex: Exec<'_>, sql: Sql, rows: &str) -> StoreResult<Vec<Keyed>> {
    sql.same_plan()
        .with_text(&format!(
            "SELECT key, CAST(SUM(n) AS BIGINT) AS n, CAST(SUM(total) AS BIGINT) AS total FROM (
             SELECT key, n, total FROM tallies WHERE {rows}
             UNION ALL
             SELECT key, n, total FROM tally_deltas WHERE {rows}) x
         GROUP BY key HAVING SUM(n) <> 0 ORDER BY key"
        ))
        .fetch_all(ex)
        .await
}

/// Tallies kept by day (key `YYYY-MM-DD`, migration 0040): the count and total of each of
/// `names` over the days `[first, until)`, by name; names counting nothing left out. A range
/// of a primary key whatever the days: prepared once.
pub async fn over_days(
    ex: Exec<'_>,
    names: &[&str],
    (first, until): (NaiveDate, NaiveDate),
) -> StoreResult<HashMap<String, (i64, i64)>> {
    if first >= until {
        return Ok(HashMap::new());
    }
    let mut sql = Sql::default();
    let names = sql.arg_list(names);
    let (first, until) = (sql.arg(day_key(first)), sql.arg(day_key(until)));
    let rows = format!("name IN ({names}) AND key >= {first} AND key < {until}");
    let sums: Vec<(String, i64, i64)> = sql
        .with_text(&format!(
            "SELECT name, CAST(SUM(n) AS BIGINT), CAST(SUM(total) AS BIGINT) FROM (
                 SELECT name, n, total FROM tallies WHERE {rows}
                 UNION ALL
                 SELECT name, n, total FROM tally_deltas WHERE {rows}) x
             GROUP BY name"
        ))
        .same_plan()
        .fetch_all(ex)
        .await?;
    Ok(sums
        .into_iter()
        .map(|(name, n, total)| (name, (n, total)))
        .collect())
}

/// The count kept by `name` over pairs of days (key `<first day> <second day>`, migration
/// 0052) whose two days both fall in `[first, until)`, the second never before the first.
pub async fn day_pairs_within(
    ex: Exec<'_>,
    name: &str,
    (first, until): (NaiveDate, NaiveDate),
) -> StoreResult<i64> {
    if first >= until {
        return Ok(0);
    }
    let mut sql = Sql::default();
    let name = sql.arg(name);
    let (first, until) = (sql.arg(day_key(first)), sql.arg(day_key(until)));
    // Keyed by the first day: a range of the primary key, whose second days are then read.
    let rows = format!("name = {name} AND key >= {first} AND key < {until}");
    sql.with_text(&format!(
        "SELECT CAST(COALESCE(SUM(n), 0) AS BIGINT) FROM (
             SELECT key, n FROM tallies WHERE {rows}
             UNION ALL
             SELECT key, n FROM tally_deltas WHERE {rows}) x
         WHERE substr(key, 12) < {until}"
    ))
    .same_plan()
    .fetch_count(ex)
    .await
}

/// How many committed writes a count of writes (key '') holds: [`Tally::ProjectWrites`],
/// [`Tally::ExpertWrites`], [`Tally::AccountSearchWrites`].
pub async fn written(ex: Exec<'_>, tally: Tally) -> StoreResult<i64> {
    total(tally, Some("")).read(ex).await
}

/// A list's total from a keyed tally: the count of `key`, or of every key with `None` (0
/// when it counts nothing).
pub fn total(tally: Tally, key: Option<&str>) -> Total {
    match key {
        Some(key) => total_of(tally, |sql| vec![sql.arg(key)]),
        None => {
            let mut sql = Sql::default();
            let rows = rows_of(&mut sql, tally, None, None);
            summed(sql, &rows)
        }
    }
}

/// A list's total from a keyed tally: the count of the keys `keys` answers, SQL expressions
/// over the values it binds (0 without a key).
pub fn total_of(tally: Tally, keys: impl FnOnce(&mut Sql) -> Vec<String>) -> Total {
    let mut sql = Sql::default();
    let keys = keys(&mut sql);
    if keys.is_empty() {
        return Total::Known(0);
    }
    let rows = rows_of(&mut sql, tally, Some(&keys), None);
    summed(sql, &rows)
}

/// A list's total from one user's keys `keys` of a per-user tally (0 without a key).
pub fn user_total(tally: Tally, user_id: i64, keys: &[String]) -> Total {
    if keys.is_empty() {
        return Total::Known(0);
    }
    let mut sql = Sql::default();
    let bound = bind_keys(&mut sql, keys);
    let rows = rows_of(&mut sql, tally, Some(&bound), Some(user_id));
    summed(sql, &rows)
}

/// Binds each of `keys` and answers their placeholders.
fn bind_keys(sql: &mut Sql, keys: &[String]) -> Vec<String> {
    keys.iter().map(|k| sql.arg(k.as_str())).collect()
}

/// The condition on a tally's rows (folded or not) that a read adds up: the tally's, under
/// `keys` (SQL expressions over values bound in `sql`) and one user's, when given. By user,
/// the rows are found through migration 0033's indexes.
fn rows_of(sql: &mut Sql, tally: Tally, keys: Option<&[String]>, user_id: Option<i64>) -> String {
    let mut rows = format!("name = {}", sql.arg(tally.as_str()));
    if let Some(keys) = keys {
        rows.push_str(&format!(" AND key IN ({})", keys.join(", ")));
    }
    if let Some(user_id) = user_id {
        rows.push_str(&format!(" AND user_id = {}", sql.arg(user_id)));
    }
    rows
}

/// The sum of the counts of `rows` ([`rows_of`]): a lookup of a few keys, whatever their
/// values, so prepared once ([`Sql::same_plan`]).
fn summed(sql: Sql, rows: &str) -> Total {
    Total::Query(sql.with_text(&sum_of(rows)).same_plan())
}

/// The statement adding up the counts of `rows` ([`rows_of`]), folded or not.
fn sum_of(rows: &str) -> String {
    format!(
        "SELECT CAST(COALESCE(SUM(n), 0) AS BIGINT) FROM (
             SELECT n FROM tallies WHERE {rows}
             UNION ALL
             SELECT n FROM tally_deltas WHERE {rows}) x"
    )
}

/// [`total_of`] one key as a scalar subquery of another statement, whose values `sql` binds:
/// the count of the key `key` answers (an SQL expression, which may name the outer rows).
pub fn count_in(sql: &mut Sql, tally: Tally, key: &str) -> String {
    let rows = rows_of(sql, tally, Some(&[key.to_owned()]), None);
    format!("({})", sum_of(&rows))
}

/// One user's place in a per-user tally.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Ranked {
    pub user_id: i64,
    pub n: i64,
    /// The sum, or for [`top_by_mean_rating`] the mean ×100.
    pub value: i64,
}

/// The exact figures of the candidates for a top list: the first `$2 + |d|` of the folded
/// tally in its order, and every user with unfolded deltas (`d`). A user without deltas has
/// their folded figures, and at most `$2 - 1` users above them in the true order are not above
/// them in the folded one unless they have deltas; so the true top `$2` are all candidates.
/// (Each candidate's folded figures are looked up one by one: the planner cannot tell how
/// many candidates there are, and would join the whole tally otherwise.)
macro_rules! candidates {
    ($deltas:literal, $order:literal) => {
        concat!(
            "WITH d AS (SELECT user_id, SUM(n) AS n, SUM(total) AS total FROM (",
            $deltas,
            ") dx GROUP BY user_id),
             cand AS (SELECT user_id FROM (SELECT user_id FROM tallies
                                            WHERE name = $1 AND key = '' AND n > 0
                                            ORDER BY ",
            $order,
            " LIMIT $2 + (SELECT COUNT(*) FROM d)) top
                      UNION SELECT user_id FROM d),
             exact AS (SELECT c.user_id,
                              CAST(COALESCE((SELECT t.n FROM tallies t WHERE t.name = $1
                                               AND t.key = '' AND t.user_id = c.user_id), 0)
                                   + COALESCE(d.n, 0) AS BIGINT) AS n,
                              CAST(COALESCE((SELECT t.total FROM tallies t WHERE t.name = $1
                                               AND t.key = '' AND t.user_id = c.user_id), 0)
                                   + COALESCE(d.total, 0) AS BIGINT) AS total
                         FROM cand c LEFT JOIN d ON d.user_id = c.user_id) "
        )
    };
}

/// The `limit` users with the largest sums of a per-user tally, ties by id.
pub async fn top_by_total(ex: Exec<'_>, tally: Tally, limit: i64) -> StoreResult<Vec<Ranked>> {
    Ok(on_exec!(ex, c => sqlx::query_as::<_, Ranked>(concat!(
        candidates!(
            "SELECT user_id, n, total FROM tally_deltas WHERE name = $1",
            "total DESC, user_id"
        ),
        "SELECT user_id, n, total AS value FROM exact WHERE n > 0
         ORDER BY total DESC, user_id LIMIT $2"
    ))
    .bind(tally.as_str())
    .bind(limit)
    .fetch_all(c)
    .await)?)
}

/// The `limit` experts with the best mean rating from companies (×100, rounded), then the
/// most reviews, then by id; counting the reviews revealed by `now`.
pub async fn top_by_mean_rating(
    ex: Exec<'_>,
    now: DateTime<Utc>,
    limit: i64,
) -> StoreResult<Vec<Ranked>> {
    Ok(on_exec!(ex, c => sqlx::query_as::<_, Ranked>(concat!(
        candidates!(
            "SELECT user_id, n, total FROM tally_deltas WHERE name = $1
             UNION ALL
             SELECT reviewee_id, 1, rating FROM reviews
              WHERE announced_at IS NULL AND blind_until <= $3 AND revealed_at IS NULL
                AND reviewer_role = 'empresa' AND visibility = 'published'
                AND reviewee_id IS NOT NULL",
            "mean_x100 DESC, n DESC, user_id"
        ),
        "SELECT user_id, n, CAST(ROUND(total * 100.0 / n) AS BIGINT) AS value FROM exact
          WHERE n > 0 ORDER BY value DESC, n DESC, user_id LIMIT $2"
    ))
    .bind(Tally::ExpertRatings.as_str())
    .bind(limit)
    .bind(now)
    .fetch_all(c)
    .await)?)
}

/// Moves up to `limit` of the oldest deltas into the tallies, in one transaction; how many
/// it moved. Instances may fold at once: each takes deltas no other holds.
pub async fn fold(db: &Db, limit: i64) -> StoreResult<u64> {
    let mut tx = db.begin().await?;
    let moved = match tx.exec() {
        Exec::Postgres(c) => {
            let moved: Option<i64> = sqlx::query_scalar(
                "WITH moved AS (
                     DELETE FROM tally_deltas WHERE id IN (
                         SELECT id FROM tally_deltas ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)
                     RETURNING name, key, user_id, n, total)
                 INSERT INTO tallies (name, key, user_id, n, total)
                 SELECT name, key, user_id, SUM(n), SUM(total) FROM moved
                  GROUP BY name, key, user_id ORDER BY name, key, user_id
                 ON CONFLICT (name, key, user_id) DO UPDATE
                     SET n = tallies.n + EXCLUDED.n, total = tallies.total + EXCLUDED.total
                 RETURNING (SELECT COUNT(*) FROM moved)",
            )
            .bind(limit)
            .fetch_optional(&mut *c)
            .await?;
            moved.unwrap_or(0)
        }
        // One writer at a time: the transaction sees no other fold.
        Exec::Sqlite(c) => {
            let (last, moved): (Option<i64>, i64) = sqlx::query_as(
                "SELECT MAX(id), COUNT(*) FROM (SELECT id FROM tally_deltas ORDER BY id LIMIT $1)",
            )
            .bind(limit)
            .fetch_one(&mut *c)
            .await?;
            if let Some(last) = last {
                sqlx::query(
                    "INSERT INTO tallies (name, key, user_id, n, total)
                     SELECT name, key, user_id, SUM(n), SUM(total) FROM tally_deltas
                      WHERE id <= $1 GROUP BY name, key, user_id
                     ON CONFLICT (name, key, user_id) DO UPDATE
                         SET n = n + excluded.n, total = total + excluded.total",
                )
                .bind(last)
                .execute(&mut *c)
                .await?;
                sqlx::query("DELETE FROM tally_deltas WHERE id <= $1")
                    .bind(last)
                    .execute(&mut *c)
                    .await?;
            }
            moved
        }
    };
    tx.commit().await?;
    Ok(moved as u64)
}
