//! Reviews of a project's counterpart, their reveal, responses and moderation log; the
//! review requests sent when a project completes.
//!
//! "Revealed" is a rule of time as well as of state: `revealed_at` is set when the
//! counterpart reviews, and a review is revealed from `blind_until` on even if no job has
//! marked it yet. Every query that shows ratings to others or counts them takes `now`.

use chrono::{DateTime, Utc};

use super::listing::{self, Sql, Total};
use super::tallies::{self, Tally};
use super::{Exec, StoreResult};
use crate::domain::reputation::ReviewVisibility;
use crate::on_exec;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Review {
    pub id: i64,
    pub project_id: i64,
    pub reviewer_id: Option<i64>,
    pub reviewee_id: Option<i64>,
    pub reviewer_role: Option<String>,
    pub rating: i64,
    pub comment: Option<String>,
    pub response: Option<String>,
    pub responded_at: Option<DateTime<Utc>>,
    pub visibility: ReviewVisibility,
    pub blind_until: Option<DateTime<Utc>>,
    pub revealed_at: Option<DateTime<Utc>>,
    pub announced_at: Option<DateTime<Utc>>,
    pub edited_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl Review {
    /// When its rating and words are (or were) shown to the reviewee and the public.
    pub fn reveal_at(&self) -> Option<DateTime<Utc>> {
        self.revealed_at.or(self.blind_until)
    }

    pub fn is_revealed(&self, now: DateTime<Utc>) -> bool {
        self.reveal_at().is_some_and(|at| at <= now)
    }
}

macro_rules! select_reviews {
    ($($rest:expr),* $(,)?) => {
        concat!(
            "SELECT r.id, r.project_id, r.reviewer_id, r.reviewee_id, r.reviewer_role, r.rating, ",
            "r.comment, r.response, r.responded_at, r.visibility, r.blind_until, r.revealed_at, ",
            "r.announced_at, r.edited_at, r.created_at, r.updated_at FROM reviews r ",
            $($rest),*
        )
    };
}

pub struct NewReview<'a> {
    pub project_id: i64,
    pub reviewer_id: i64,
    pub reviewee_id: i64,
    pub reviewer_role: &'a str,
    pub rating: i64,
    pub comment: &'a str,
    pub blind_until: DateTime<Utc>,
}

/// Inserts a review; a second one by the same author on the project is a unique violation.
pub async fn insert(ex: Exec<'_>, r: &NewReview<'_>, now: DateTime<Utc>) -> StoreResult<i64> {
    Ok(on_exec!(ex, c => sqlx::query_scalar(
        "INSERT INTO reviews (project_id, reviewer_id, reviewee_id, reviewer_role, rating, comment,
             blind_until, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8) RETURNING id",
    )
    .bind(r.project_id)
    .bind(r.reviewer_id)
    .bind(r.reviewee_id)
    .bind(r.reviewer_role)
    .bind(r.rating)
    .bind(r.comment)
    .bind(r.blind_until)
    .bind(now)
    .fetch_one(c)
    .await)?)
}

pub async fn find(ex: Exec<'_>, id: i64) -> StoreResult<Option<Review>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, Review>(select_reviews!("WHERE r.id = $1"))
        .bind(id)
        .fetch_optional(c)
        .await)?,
    )
}

pub async fn of_project(ex: Exec<'_>, project_id: i64) -> StoreResult<Vec<Review>> {
    Ok(on_exec!(ex, c => sqlx::query_as::<_, Review>(
        select_reviews!("WHERE r.project_id = $1 ORDER BY r.created_at DESC, r.id DESC"),
    )
    .bind(project_id)
    .fetch_all(c)
    .await)?)
}

/// Whose reviews a list is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserSide {
    Author,
    Reviewee,
    Either,
}

/// A user's reviews, newest first: published ones, plus hidden ones for administrators
/// (`with_hidden`) or their own author (`viewer_id`). Answers the page and the total.
///
/// Each side is read newest first from its own index and the two merged, so a page reads
/// `offset + limit` reviews of each side, never all of them; the total is kept by the writes
/// (`Tally::ReviewsByUser`), plus the viewer's own hidden reviews, counted (a few).
pub async fn of_user(
    mut ex: Exec<'_>,
    user_id: i64,
    side: UserSide,
    viewer_id: Option<i64>,
    with_hidden: bool,
    limit: i64,
    offset: i64,
) -> StoreResult<(Vec<Review>, i64)> {
    let sides: &[(&str, &str)] = match side {
        UserSide::Author => &[("written:", "reviewer_id")],
        UserSide::Reviewee => &[("received:", "reviewee_id")],
        UserSide::Either => &[("written:", "reviewer_id"), ("received:", "reviewee_id")],
    };
    let mut sql = Sql::default();
    let u = sql.arg(user_id);
    let viewer = viewer_id.filter(|_| !with_hidden).map(|v| sql.arg(v));
    let shown = match (with_hidden, &viewer) {
        (true, _) => "TRUE".to_owned(),
        (false, Some(v)) => format!("(r.visibility = 'published' OR r.reviewer_id = {v})"),
        (false, None) => "r.visibility = 'published'".to_owned(),
    };
    let window = limit.saturating_add(offset);
    let parts: Vec<String> = sides
        .iter()
        .map(|(_, column)| {
            format!(
                "SELECT * FROM ({} WHERE r.{column} = {u} AND {shown}
                  ORDER BY r.created_at DESC, r.id DESC LIMIT {window}) {}",
                select_reviews!(),
                column.trim_end_matches("_id")
            )
        })
        .collect();
    let page = sql.clone().with_text(&format!(
        "SELECT * FROM ({}) r ORDER BY r.created_at DESC, r.id DESC LIMIT {limit} OFFSET {offset}",
        parts.join(" UNION ALL ")
    ));
    let items = page.fetch_all::<Review>(ex.re()).await?;

    let visibilities: &[ReviewVisibility] = if with_hidden {
        &ReviewVisibility::ALL
    } else {
        &[ReviewVisibility::Published]
    };
    let keys: Vec<String> = sides
        .iter()
        .flat_map(|(prefix, _)| tallies::state_keys(prefix, visibilities, ReviewVisibility::as_str))
        .collect();
    let mut total = vec![tallies::user_total(Tally::ReviewsByUser, user_id, &keys)];
    if let Some(v) = viewer {
        let on_side: Vec<String> = sides
            .iter()
            .map(|(_, column)| format!("r.{column} = {u}"))
            .collect();
        let own_hidden = vec![
            format!("r.reviewer_id = {v}"),
            "r.visibility = 'hidden'".to_owned(),
            format!("({})", on_side.join(" OR ")),
        ];
        total.push(listing::count_rows("reviews r", &own_hidden, &sql));
    }
    let total = Total::Sum(total).read(ex).await?;
    Ok((items, total))
}

/// Reveals the project's reviews not revealed yet (the counterpart has reviewed).
pub async fn reveal_project(ex: Exec<'_>, project_id: i64, now: DateTime<Utc>) -> StoreResult<u64> {
    Ok(on_exec!(ex, c => sqlx::query(
        "UPDATE reviews SET revealed_at = $2, updated_at = $2
         WHERE project_id = $1 AND revealed_at IS NULL AND (blind_until IS NULL OR blind_until > $2)",
    )
    .bind(project_id)
    .bind(now)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?)
}

/// Reviews revealed by `now` whose reveal was not told yet, oldest first.
pub async fn unannounced(ex: Exec<'_>, now: DateTime<Utc>, limit: i64) -> StoreResult<Vec<Review>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, Review>(select_reviews!(
        "WHERE r.announced_at IS NULL AND (r.revealed_at IS NOT NULL OR r.blind_until <= $1) ",
        "ORDER BY r.id LIMIT $2"
    ))
    .bind(now)
    .bind(limit)
    .fetch_all(c)
    .await)?,
    )
}

/// Marks the reveal told, once: `false` when another run told it first.
pub async fn mark_announced(ex: Exec<'_>, id: i64, now: DateTime<Utc>) -> StoreResult<bool> {
    let done = on_exec!(ex, c => sqlx::query(
        "UPDATE reviews SET announced_at = $2 WHERE id = $1 AND announced_at IS NULL",
    )
    .bind(id)
    .bind(now)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}

/// The author's edit: only while unrevealed and unanswered (`false` otherwise).
pub async fn edit(
    ex: Exec<'_>,
    id: i64,
    rating: i64,
    comment: &str,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let done = on_exec!(ex, c => sqlx::query(
        "UPDATE reviews SET rating = $2, comment = $3, edited_at = $4, updated_at = $4
         WHERE id = $1 AND response IS NULL AND revealed_at IS NULL
           AND (blind_until IS NULL OR blind_until > $4)",
    )
    .bind(id)
    .bind(rating)
    .bind(comment)
    .bind(now)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}

/// The reviewee's response: a first one (`replace` false) only where none exists; with
/// `replace`, only where one exists (an edit).
pub async fn respond(
    ex: Exec<'_>,
    id: i64,
    response: &str,
    replace: bool,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let done = on_exec!(ex, c => sqlx::query(
        "UPDATE reviews SET response = $2, responded_at = $3, updated_at = $3
         WHERE id = $1 AND ((response IS NULL) <> $4)",
    )
    .bind(id)
    .bind(response)
    .bind(now)
    .bind(replace)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}

pub async fn set_visibility(
    ex: Exec<'_>,
    id: i64,
    visibility: ReviewVisibility,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let done = on_exec!(ex, c => sqlx::query(
        "UPDATE reviews SET visibility = $2, updated_at = $3 WHERE id = $1",
    )
    .bind(id)
    .bind(visibility)
    .bind(now)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}

pub async fn delete(ex: Exec<'_>, id: i64) -> StoreResult<bool> {
    let done = on_exec!(ex, c => sqlx::query("DELETE FROM reviews WHERE id = $1")
        .bind(id)
        .execute(c)
        .await
        .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}

/// Records an administrator's `publish`, `hide` or `delete`.
pub async fn log_moderation(
    ex: Exec<'_>,
    review_id: i64,
    action: &str,
    admin_id: i64,
    now: DateTime<Utc>,
) -> StoreResult<()> {
    on_exec!(ex, c => sqlx::query(
        "INSERT INTO review_moderation (review_id, action, admin_id, created_at)
         VALUES ($1, $2, $3, $4)",
    )
    .bind(review_id)
    .bind(action)
    .bind(admin_id)
    .bind(now)
    .execute(c)
    .await
    .map(drop))?;
    Ok(())
}

/// One administrator action on a review.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Moderation {
    pub action: String,
    pub admin_id: Option<i64>,
    pub created_at: DateTime<Utc>,
}

pub async fn moderation_of(ex: Exec<'_>, review_id: i64) -> StoreResult<Vec<Moderation>> {
    Ok(on_exec!(ex, c => sqlx::query_as::<_, Moderation>(
        "SELECT action, admin_id, created_at FROM review_moderation
         WHERE review_id = $1 ORDER BY created_at, id",
    )
    .bind(review_id)
    .fetch_all(c)
    .await)?)
}

/// How many shown reviews `user_id` received at each rating: `(rating, count)`, in rating
/// order ([`shown_ratings`]).
pub async fn distribution(
    ex: Exec<'_>,
    user_id: i64,
    now: DateTime<Utc>,
) -> StoreResult<Vec<(i64, i64)>> {
    let counts = shown_ratings(ex, &[user_id], now).await?;
    Ok(counts
        .into_iter()
        .map(|(_, rating, n)| (rating, n))
        .collect())
}

/// How many shown reviews each of `users` received at each rating: `(user_id, rating,
/// count)` by user and rating, none counting nothing. Kept by the writes
/// (`Tally::ReviewsByUser`, `shown:<rating>`) up to the reviews past their blind window that
/// the reveal job has not announced yet, which are added (a few); one statement for a page of
/// users.
///
/// Each user's entries are read through migration 0033's indexes (`name, user_id, key`): one
/// probe a user, the five keys among the few the user has, where listing them made five
/// probes (at M, 80 users read in 0.8 ms instead of 2.5). Every part is a lookup by user,
/// whoever they are, so the plan is kept: planning it for a hundred users took longer than
/// reading them. The key is compared as an expression so that no index offers it as a range:
/// the primary key (`name, key, user_id`) would offer every user's ratings, and PostgreSQL's
/// kept plan, which cannot see how wide that range is, took it (for 120 users, 52 ms at S and
/// 430 ms at M, against 1.4 and 2 by user).
async fn shown_ratings(
    ex: Exec<'_>,
    users: &[i64],
    now: DateTime<Utc>,
) -> StoreResult<Vec<(i64, i64, i64)>> {
    if users.is_empty() {
        return Ok(Vec::new());
    }
    let mut sql = Sql::default();
    let now = sql.arg(now);
    let list = sql.arg_set(users);
    let name = sql.arg(Tally::ReviewsByUser.as_str());
    let (lowest, highest) = (RATINGS[0], RATINGS[RATINGS.len() - 1]);
    let lowest = sql.arg(format!("{SHOWN}{lowest}").as_str());
    let highest = sql.arg(format!("{SHOWN}{highest}").as_str());
    let kept = |table: &str| {
        format!(
            "SELECT user_id, CAST(substr(key, 7) AS BIGINT) AS rating, n FROM {table}
              WHERE name = {name} AND user_id IN ({list})
                AND (key || '') BETWEEN {lowest} AND {highest}"
        )
    };
    sql.with_text(&format!(
        "SELECT user_id, rating, CAST(SUM(n) AS BIGINT) FROM (
             {} UNION ALL {} UNION ALL
             SELECT r.reviewee_id, r.rating, 1 FROM reviews r
              WHERE r.reviewee_id IN ({list}) AND r.announced_at IS NULL
                AND r.revealed_at IS NULL AND r.blind_until <= {now}
                AND r.visibility = 'published') x
         GROUP BY user_id, rating HAVING SUM(n) <> 0 ORDER BY user_id, rating",
        kept("tallies"),
        kept("tally_deltas")
    ))
    .same_plan()
    .fetch_all(ex)
    .await
}

/// The ratings a review may give, as `Tally::ReviewsByUser` keys them (after [`SHOWN`]): no
/// other key of the tally sorts between the first and the last.
const RATINGS: [&str; 5] = ["1", "2", "3", "4", "5"];

/// The prefix of `Tally::ReviewsByUser`'s shown ratings (`substr(key, 7)` is the rating).
const SHOWN: &str = "shown:";

/// The latest shown reviews `user_id` received.
pub async fn recent_shown(
    ex: Exec<'_>,
    user_id: i64,
    now: DateTime<Utc>,
    limit: i64,
) -> StoreResult<Vec<Review>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, Review>(select_reviews!(
        "WHERE r.reviewee_id = $2 AND r.visibility = 'published' ",
        "AND (r.revealed_at IS NOT NULL OR r.blind_until <= $1) ",
        "ORDER BY r.created_at DESC, r.id DESC LIMIT $3"
    ))
    .bind(now)
    .bind(user_id)
    .bind(limit)
    .fetch_all(c)
    .await)?,
    )
}

/// Average and count of the shown reviews each of `users` received: `(user_id, average,
/// count)`, users without any left out ([`shown_ratings`]).
pub async fn averages(
    ex: Exec<'_>,
    users: &[i64],
    now: DateTime<Utc>,
) -> StoreResult<Vec<(i64, f64, i64)>> {
    let mut sums: Vec<(i64, i64, i64)> = Vec::new();
    for (user, rating, n) in shown_ratings(ex, users, now).await? {
        match sums.last_mut() {
            Some((last, sum, count)) if *last == user => {
                *sum += rating * n;
                *count += n;
            }
            _ => sums.push((user, rating * n, n)),
        }
    }
    Ok(sums
        .into_iter()
        .map(|(user, sum, n)| (user, sum as f64 / n as f64, n))
        .collect())
}

/// Records that `user_id` was asked to review the project; `false` when asked already.
pub async fn request_once(
    ex: Exec<'_>,
    project_id: i64,
    user_id: i64,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let done = on_exec!(ex, c => sqlx::query(
        "INSERT INTO review_requests (project_id, user_id, created_at) VALUES ($1, $2, $3)
         ON CONFLICT DO NOTHING",
    )
    .bind(project_id)
    .bind(user_id)
    .bind(now)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}
