//! Platform figures for administrators, each an aggregate computed by the database.

use chrono::{DateTime, Utc};

use super::{Exec, StoreResult};
use crate::on_exec;

/// Counts by one text column: `(value, count)`.
pub type Counts = Vec<(String, i64)>;

pub async fn users_by_role(ex: Exec<'_>) -> StoreResult<Counts> {
    Ok(on_exec!(ex, c => sqlx::query_as(
        "SELECT r.role, COUNT(*) FROM user_roles r JOIN users u ON u.id = r.user_id
         WHERE u.deleted_at IS NULL GROUP BY r.role ORDER BY r.role",
    )
    .fetch_all(c)
    .await)?)
}

/// Profiles by verification status, per profile type: `("experto:verified", n)`.
pub async fn profiles_by_verification(ex: Exec<'_>) -> StoreResult<Counts> {
    Ok(on_exec!(ex, c => sqlx::query_as(
        "SELECT p.profile_type || ':' || p.verification_status, COUNT(*) FROM profiles p
         JOIN users u ON u.id = p.user_id WHERE u.deleted_at IS NULL
         GROUP BY p.profile_type, p.verification_status ORDER BY 1",
    )
    .fetch_all(c)
    .await)?)
}

/// From the counts the writes keep (migration 0016), not a count of the projects.
pub async fn projects_by_status(ex: Exec<'_>) -> StoreResult<Counts> {
    Ok(on_exec!(ex, c => sqlx::query_as(
        "SELECT status, CAST(SUM(n) AS BIGINT) FROM project_counts GROUP BY status
         HAVING SUM(n) > 0 ORDER BY status",
    )
    .fetch_all(c)
    .await)?)
}

/// Money over all time, in minor units.
#[derive(Debug, Clone, Copy, Default, sqlx::FromRow)]
pub struct MoneyTotals {
    /// Commission of released payments.
    pub revenue_minor: i64,
    /// Amount of released payments.
    pub gross_volume_minor: i64,
    /// Amount held or disputed right now.
    pub in_escrow_minor: i64,
    pub refunded_minor: i64,
}

pub async fn money_totals(ex: Exec<'_>) -> StoreResult<MoneyTotals> {
    Ok(on_exec!(ex, c => sqlx::query_as::<_, MoneyTotals>(
        "SELECT
             CAST(COALESCE(SUM(CASE WHEN status = 'released' THEN COALESCE(commission_minor, 0) END), 0) AS BIGINT) AS revenue_minor,
             CAST(COALESCE(SUM(CASE WHEN status = 'released' THEN amount_minor END), 0) AS BIGINT) AS gross_volume_minor,
             CAST(COALESCE(SUM(CASE WHEN status IN ('held', 'disputed') THEN amount_minor END), 0) AS BIGINT) AS in_escrow_minor,
             CAST(COALESCE(SUM(CASE WHEN status = 'refunded' THEN amount_minor END), 0) AS BIGINT) AS refunded_minor
         FROM payments",
    )
    .fetch_one(c)
    .await)?)
}

/// One entry of a top-five list.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Ranked {
    pub user_id: i64,
    pub name: String,
    /// Minor units (earnings, spend) or a rating times 100.
    pub value: i64,
    pub count: i64,
}

/// Experts by what they received from released payments.
pub async fn top_experts_by_earnings(ex: Exec<'_>) -> StoreResult<Vec<Ranked>> {
    Ok(on_exec!(ex, c => sqlx::query_as::<_, Ranked>(
        "SELECT y.expert_id AS user_id,
                COALESCE((SELECT NULLIF(p.full_name, '') FROM profiles p
                          WHERE p.user_id = y.expert_id AND p.profile_type = 'experto'), u.username) AS name,
                CAST(SUM(COALESCE(y.expert_amount_minor, y.amount_minor)) AS BIGINT) AS value,
                COUNT(*) AS count
         FROM payments y JOIN users u ON u.id = y.expert_id
         WHERE y.status = 'released'
         GROUP BY y.expert_id, u.username ORDER BY value DESC, y.expert_id LIMIT 5",
    )
    .fetch_all(c)
    .await)?)
}

/// Companies by what their released payments amount to.
pub async fn top_companies_by_spend(ex: Exec<'_>) -> StoreResult<Vec<Ranked>> {
    Ok(on_exec!(ex, c => sqlx::query_as::<_, Ranked>(
        "SELECT y.company_id AS user_id,
                COALESCE((SELECT NULLIF(p.company_name, '') FROM profiles p
                          WHERE p.user_id = y.company_id AND p.profile_type = 'empresa'), u.username) AS name,
                CAST(SUM(y.amount_minor) AS BIGINT) AS value,
                COUNT(*) AS count
         FROM payments y JOIN users u ON u.id = y.company_id
         WHERE y.status = 'released'
         GROUP BY y.company_id, u.username ORDER BY value DESC, y.company_id LIMIT 5",
    )
    .fetch_all(c)
    .await)?)
}

/// Experts by the mean of their revealed, published reviews (×100, rounded).
pub async fn top_experts_by_rating(ex: Exec<'_>, now: DateTime<Utc>) -> StoreResult<Vec<Ranked>> {
    Ok(on_exec!(ex, c => sqlx::query_as::<_, Ranked>(
        "SELECT r.reviewee_id AS user_id,
                COALESCE((SELECT NULLIF(p.full_name, '') FROM profiles p
                          WHERE p.user_id = r.reviewee_id AND p.profile_type = 'experto'), u.username) AS name,
                CAST(ROUND(AVG(r.rating) * 100) AS BIGINT) AS value,
                COUNT(*) AS count
         FROM reviews r JOIN users u ON u.id = r.reviewee_id
         WHERE r.reviewer_role = 'empresa' AND r.visibility = 'published'
           AND (r.revealed_at IS NOT NULL OR r.blind_until <= $1)
         GROUP BY r.reviewee_id, u.username ORDER BY value DESC, count DESC, r.reviewee_id LIMIT 5",
    )
    .bind(now)
    .fetch_all(c)
    .await)?)
}

/// The figures of one window `[start, end)` the growth view compares.
#[derive(Debug, Clone, Copy, Default, sqlx::FromRow)]
pub struct WindowFigures {
    /// Commission of payments released in the window.
    pub revenue_minor: i64,
    /// Amount released in the window, and the projects it was released on.
    pub released_minor: i64,
    pub released_projects: i64,
    pub projects_created: i64,
    pub private_created: i64,
    pub curated_created: i64,
    pub users_registered: i64,
    /// Projects that ended in the window, by how.
    pub completed: i64,
    pub cancelled: i64,
    /// Projects under way at some point of the window (assigned before its end, not ended
    /// before its start).
    pub active_projects: i64,
    pub disputes_opened: i64,
    /// Mean revealed rating received by experts / companies for reviews written in the
    /// window (×100, rounded); none without reviews.
    pub expert_rating_x100: Option<i64>,
    pub company_rating_x100: Option<i64>,
}

pub async fn window(
    ex: Exec<'_>,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    now: DateTime<Utc>,
) -> StoreResult<WindowFigures> {
    Ok(on_exec!(ex, c => sqlx::query_as::<_, WindowFigures>(
        "SELECT
            (SELECT CAST(COALESCE(SUM(COALESCE(commission_minor, 0)), 0) AS BIGINT) FROM payments
              WHERE status = 'released' AND released_at >= $1 AND released_at < $2) AS revenue_minor,
            (SELECT CAST(COALESCE(SUM(amount_minor), 0) AS BIGINT) FROM payments
              WHERE status = 'released' AND released_at >= $1 AND released_at < $2) AS released_minor,
            (SELECT COUNT(DISTINCT project_id) FROM payments
              WHERE status = 'released' AND released_at >= $1 AND released_at < $2) AS released_projects,
            (SELECT COUNT(*) FROM projects WHERE created_at >= $1 AND created_at < $2) AS projects_created,
            (SELECT COUNT(*) FROM projects WHERE project_type = 'private'
              AND created_at >= $1 AND created_at < $2) AS private_created,
            (SELECT COUNT(*) FROM projects WHERE project_type = 'curated'
              AND created_at >= $1 AND created_at < $2) AS curated_created,
            (SELECT COUNT(*) FROM users WHERE created_at >= $1 AND created_at < $2) AS users_registered,
            (SELECT COUNT(*) FROM projects WHERE status = 'completed'
              AND completed_at >= $1 AND completed_at < $2) AS completed,
            (SELECT COUNT(*) FROM projects WHERE status = 'cancelled'
              AND cancelled_at >= $1 AND cancelled_at < $2) AS cancelled,
            (SELECT COUNT(*) FROM projects WHERE assigned_at IS NOT NULL AND assigned_at < $2
              AND (completed_at IS NULL OR completed_at >= $1)
              AND (cancelled_at IS NULL OR cancelled_at >= $1)) AS active_projects,
            (SELECT COUNT(*) FROM disputes WHERE created_at >= $1 AND created_at < $2) AS disputes_opened,
            (SELECT CAST(ROUND(AVG(rating) * 100) AS BIGINT) FROM reviews
              WHERE reviewer_role = 'empresa' AND visibility = 'published'
                AND (revealed_at IS NOT NULL OR blind_until <= $3)
                AND created_at >= $1 AND created_at < $2) AS expert_rating_x100,
            (SELECT CAST(ROUND(AVG(rating) * 100) AS BIGINT) FROM reviews
              WHERE reviewer_role = 'experto' AND visibility = 'published'
                AND (revealed_at IS NOT NULL OR blind_until <= $3)
                AND created_at >= $1 AND created_at < $2) AS company_rating_x100",
    )
    .bind(start)
    .bind(end)
    .bind(now)
    .fetch_one(c)
    .await)?)
}

/// Revenue (commission released) and projects created in each window, in order.
pub async fn months(
    mut ex: Exec<'_>,
    windows: &[(DateTime<Utc>, DateTime<Utc>)],
) -> StoreResult<Vec<(i64, i64)>> {
    let mut out = Vec::with_capacity(windows.len());
    for (start, end) in windows {
        let row: (i64, i64) = on_exec!(ex.re(), c => sqlx::query_as(
            "SELECT
                (SELECT CAST(COALESCE(SUM(COALESCE(commission_minor, 0)), 0) AS BIGINT) FROM payments
                  WHERE status = 'released' AND released_at >= $1 AND released_at < $2),
                (SELECT COUNT(*) FROM projects WHERE created_at >= $1 AND created_at < $2)",
        )
        .bind(start)
        .bind(end)
        .fetch_one(c)
        .await)?;
        out.push(row);
    }
    Ok(out)
}
