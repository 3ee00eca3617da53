//! Platform figures for administrators: the overview's from the tallies the writes keep
//! (`store::tallies`), the growth view's from indexed date ranges.

use chrono::{DateTime, Utc};

use std::collections::HashMap;

use super::listing::Sql;
use super::tallies::{self, Tally};
use super::{Exec, StoreResult};
use crate::domain::payment::PaymentStatus;
use crate::domain::user::Role;
use crate::on_exec;

/// Counts by one text column: `(value, count)`.
pub type Counts = Vec<(String, i64)>;

pub async fn users_by_role(ex: Exec<'_>) -> StoreResult<Counts> {
    counts(ex, Tally::UsersByRole).await
}

/// Profiles by verification status, per profile type: `("experto:verified", n)`.
pub async fn profiles_by_verification(ex: Exec<'_>) -> StoreResult<Counts> {
    counts(ex, Tally::ProfilesByVerification).await
}

async fn counts(ex: Exec<'_>, tally: Tally) -> StoreResult<Counts> {
    Ok(tallies::by_key(ex, tally)
        .await?
        .into_iter()
        .map(|k| (k.key, k.n))
        .collect())
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

pub async fn money_totals(mut ex: Exec<'_>) -> StoreResult<MoneyTotals> {
    let by_status = tallies::by_key(ex.re(), Tally::Payments).await?;
    let amount = |statuses: &[PaymentStatus]| -> i64 {
        by_status
            .iter()
            .filter(|k| statuses.iter().any(|s| s.as_str() == k.key))
            .map(|k| k.total)
            .sum()
    };
    let revenue = tallies::by_key(ex, Tally::Revenue).await?;
    Ok(MoneyTotals {
        revenue_minor: revenue.iter().map(|k| k.total).sum(),
        gross_volume_minor: amount(&[PaymentStatus::Released]),
        in_escrow_minor: amount(&[PaymentStatus::Held, PaymentStatus::Disputed]),
        refunded_minor: amount(&[PaymentStatus::Refunded]),
    })
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
pub async fn top_experts_by_earnings(mut ex: Exec<'_>) -> StoreResult<Vec<Ranked>> {
    let top = tallies::top_by_total(ex.re(), Tally::ExpertEarnings, TOP).await?;
    named(ex, top, Role::Experto).await
}

/// Companies by what their released payments amount to.
pub async fn top_companies_by_spend(mut ex: Exec<'_>) -> StoreResult<Vec<Ranked>> {
    let top = tallies::top_by_total(ex.re(), Tally::CompanySpend, TOP).await?;
    named(ex, top, Role::Empresa).await
}

/// Experts by the mean of their revealed, published reviews (×100, rounded).
pub async fn top_experts_by_rating(
    mut ex: Exec<'_>,
    now: DateTime<Utc>,
) -> StoreResult<Vec<Ranked>> {
    let top = tallies::top_by_mean_rating(ex.re(), now, TOP).await?;
    named(ex, top, Role::Experto).await
}

/// The length of each top list.
const TOP: i64 = 5;

/// Each ranked user with their name: the profile's (full name of an expert, company name of
/// a company) or else the username; users gone are left out.
async fn named(ex: Exec<'_>, top: Vec<tallies::Ranked>, profile: Role) -> StoreResult<Vec<Ranked>> {
    let ids: Vec<i64> = top.iter().map(|r| r.user_id).collect();
    let column = match profile {
        Role::Empresa => "company_name",
        _ => "full_name",
    };
    let mut sql = Sql::default();
    let profile_type = sql.arg(profile.as_str());
    let in_list = sql.arg_list(&ids);
    let sql = sql.with_text(&format!(
        "SELECT u.id, COALESCE((SELECT NULLIF(p.{column}, '') FROM profiles p
                                WHERE p.user_id = u.id AND p.profile_type = {profile_type}),
                               u.username)
         FROM users u WHERE u.id IN ({in_list})"
    ));
    let names: HashMap<i64, String> = if ids.is_empty() {
        HashMap::new()
    } else {
        sql.fetch_all::<(i64, String)>(ex)
            .await?
            .into_iter()
            .collect()
    };
    Ok(top
        .into_iter()
        .filter_map(|r| {
            Some(Ranked {
                name: names.get(&r.user_id)?.clone(),
                user_id: r.user_id,
                value: r.value,
                count: r.n,
            })
        })
        .collect())
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
            -- Under way at some point of the window: assigned before its end and not ended
            -- before its start, as three disjoint sets each under its own index: still open,
            -- completed since the start, cancelled (never completed) since the start.
            (SELECT COUNT(*) FROM projects WHERE assigned_at IS NOT NULL AND assigned_at < $2
               AND completed_at IS NULL AND cancelled_at IS NULL)
            + (SELECT COUNT(*) FROM projects WHERE assigned_at IS NOT NULL AND completed_at >= $1
                 AND assigned_at < $2 AND (cancelled_at IS NULL OR cancelled_at >= $1))
            + (SELECT COUNT(*) FROM projects WHERE assigned_at IS NOT NULL AND cancelled_at >= $1
                 AND completed_at IS NULL AND assigned_at < $2) AS active_projects,
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

/// Revenue (commission released) and projects created in each calendar month (UTC, by its
/// `YYYY-MM` label), in the order given; from the tallies kept by month (migration 0025).
pub async fn months(mut ex: Exec<'_>, labels: &[String]) -> StoreResult<Vec<(i64, i64)>> {
    let revenue = tallies::by_key(ex.re(), Tally::RevenueByMonth).await?;
    let projects = tallies::by_key(ex, Tally::ProjectsByMonth).await?;
    let of = |kept: &[tallies::Keyed], label: &str| kept.iter().find(|k| k.key == label).cloned();
    Ok(labels
        .iter()
        .map(|label| {
            (
                of(&revenue, label).map_or(0, |k| k.total),
                of(&projects, label).map_or(0, |k| k.n),
            )
        })
        .collect())
}
