//! Platform figures for administrators: the overview's from the tallies the writes keep
//! (`store::tallies`), the growth view's from the tallies kept by day and the rows of the
//! parts of a day at a window's ends.

use chrono::{DateTime, Utc};

use std::collections::HashMap;

use super::listing::Sql;
use super::tallies::{self, Tally};
use super::{Exec, StoreResult};
use crate::domain::growth::{Window, midnight};
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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, sqlx::FromRow)]
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

/// A project's first end, completion or cancellation, as migration 0040's indexes spell it.
pub const PROJECT_END: &str = "CASE WHEN cancelled_at IS NULL OR completed_at < cancelled_at \
                               THEN completed_at ELSE cancelled_at END";

/// The day tallies of migration 0040 a window adds up over its whole days.
const DAY_FIGURES: [&str; 10] = [
    "growth:released",
    "growth:revenue",
    "growth:project:private",
    "growth:project:curated",
    "growth:user",
    "growth:completed",
    "growth:cancelled",
    "growth:dispute",
    "growth:rating:empresa",
    "growth:rating:experto",
];

/// What a window counts from its rows: the parts of a day at its ends (`head`, `tail`), and
/// what the day tallies cannot add up.
#[derive(Debug, Default, sqlx::FromRow)]
struct FromRows {
    revenue_minor: i64,
    released_minor: i64,
    released_n: i64,
    /// Releases at the ends whose project's previous release is in the window, and releases
    /// of its whole days whose previous one is in the part of a day before them (migration
    /// 0052): with the pairs of the tallies, each release but the first of its project there.
    released_again_at_ends: i64,
    released_again_after_head: i64,
    private_created: i64,
    curated_created: i64,
    users_registered: i64,
    completed: i64,
    cancelled: i64,
    disputes_opened: i64,
    /// Shown reviews written at the ends, and those in the whole days that are shown but
    /// not counted yet (past their blind window, not announced): count and sum per role.
    expert_rated_n: i64,
    expert_rated_sum: i64,
    company_rated_n: i64,
    company_rated_sum: i64,
    /// Projects assigned in what is left of the window's last day, and ended in what is left
    /// of its first day.
    assigned_after_end: i64,
    ended_after_start: i64,
    /// Projects assigned after the window and ended before it: assigned after they ended.
    reopened_across: i64,
}

/// The figures of `[start, end)`: its whole days from the day tallies (migration 0040), the
/// parts of a day at either end from the rows, so what a request reads grows with the days
/// of the window, not with the rows in it.
pub async fn window(
    mut ex: Exec<'_>,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    now: DateTime<Utc>,
) -> StoreResult<WindowFigures> {
    let cut = Window { start, end }.cut_at_days();
    let after_end = Window::cut_from(end);
    let after_start = Window::cut_from(start);
    let kept = tallies::over_days(ex.re(), &DAY_FIGURES, cut.days).await?;
    let kept_after_end = tallies::over_days(ex.re(), &["growth:assigned"], after_end.days).await?;
    let kept_after_start = tallies::over_days(ex.re(), &["growth:ended"], after_start.days).await?;
    let under_way = tallies::by_key(ex.re(), Tally::UnderWay).await?;
    let released_again =
        tallies::day_pairs_within(ex.re(), "growth:release_pair", cut.days).await?;
    let mut sql = Sql::default();
    let (h0, h1) = (sql.arg(cut.head.start), sql.arg(cut.head.end));
    let (t0, t1) = (sql.arg(cut.tail.start), sql.arg(cut.tail.end));
    let (w0, w1) = (sql.arg(start), sql.arg(end));
    let (d0, d1) = (sql.arg(midnight(cut.days.0)), sql.arg(midnight(cut.days.1)));
    let now = sql.arg(now);
    let end_day_left = sql.arg(after_end.head.end);
    let start_day_left = sql.arg(after_start.head.end);
    // `what` of the rows `FROM … WHERE …` (`rows`) whose `column` is in the head or the tail,
    // as two range reads (an OR of the two would leave SQLite without its index).
    let at_ends = |what: &str, rows: &str, column: &str| {
        let part = |from: &str, to: &str| {
            format!(
                "(SELECT CAST(COALESCE({what}, 0) AS BIGINT) FROM {rows}
                   AND {column} >= {from} AND {column} < {to})"
            )
        };
        format!("{} + {}", part(&h0, &h1), part(&t0, &t1))
    };
    // Reviews by `role` shown at the ends, and those in the whole days shown but not counted
    // by the tallies yet (past their blind window, not announced).
    let rated = |role: &str, what: &str| {
        let rows = format!("reviews WHERE reviewer_role = '{role}' AND visibility = 'published'");
        format!(
            "{} + (SELECT CAST(COALESCE({what}, 0) AS BIGINT) FROM {rows}
                    AND announced_at IS NULL AND revealed_at IS NULL AND blind_until <= {now}
                    AND created_at >= {d0} AND created_at < {d1})",
            at_ends(
                what,
                &format!("{rows} AND (revealed_at IS NOT NULL OR blind_until <= {now})"),
                "created_at"
            )
        )
    };
    let released = "payments WHERE status = 'released'";
    let text = format!(
        "SELECT
            {revenue} AS revenue_minor,
            {released_amount} AS released_minor,
            {released_n} AS released_n,
            {released_again} AS released_again_at_ends,
            (SELECT COUNT(*) FROM payments WHERE status = 'released'
               AND prev_released_at >= {w0} AND prev_released_at < {h1}
               AND released_at >= {d0} AND released_at < {d1}) AS released_again_after_head,
            {private} AS private_created,
            {curated} AS curated_created,
            {users} AS users_registered,
            {completed} AS completed,
            {cancelled} AS cancelled,
            {disputes} AS disputes_opened,
            {expert_n} AS expert_rated_n, {expert_sum} AS expert_rated_sum,
            {company_n} AS company_rated_n, {company_sum} AS company_rated_sum,
            (SELECT COUNT(*) FROM projects WHERE assigned_at IS NOT NULL
               AND assigned_at >= {w1} AND assigned_at < {end_day_left}) AS assigned_after_end,
            (SELECT COUNT(*) FROM projects WHERE assigned_at IS NOT NULL
               AND {PROJECT_END} >= {w0} AND {PROJECT_END} < {start_day_left})
              AS ended_after_start,
            (SELECT COUNT(*) FROM projects WHERE assigned_at > {PROJECT_END}
               AND assigned_at >= {w1} AND {PROJECT_END} < {w0}) AS reopened_across",
        revenue = at_ends(
            "SUM(COALESCE(commission_minor, 0))",
            released,
            "released_at"
        ),
        released_amount = at_ends("SUM(amount_minor)", released, "released_at"),
        released_n = at_ends("COUNT(*)", released, "released_at"),
        released_again = at_ends(
            "COUNT(*)",
            &format!("{released} AND prev_released_at >= {w0}"),
            "released_at"
        ),
        private = at_ends(
            "COUNT(*)",
            "projects WHERE project_type = 'private'",
            "created_at"
        ),
        curated = at_ends(
            "COUNT(*)",
            "projects WHERE project_type = 'curated'",
            "created_at"
        ),
        users = at_ends(
            "COUNT(*)",
            "users WHERE created_at IS NOT NULL",
            "created_at"
        ),
        completed = at_ends(
            "COUNT(*)",
            "projects WHERE status = 'completed'",
            "completed_at"
        ),
        cancelled = at_ends(
            "COUNT(*)",
            "projects WHERE status = 'cancelled'",
            "cancelled_at"
        ),
        disputes = at_ends(
            "COUNT(*)",
            "disputes WHERE created_at IS NOT NULL",
            "created_at"
        ),
        expert_n = rated("empresa", "COUNT(*)"),
        expert_sum = rated("empresa", "SUM(rating)"),
        company_n = rated("experto", "COUNT(*)"),
        company_sum = rated("experto", "SUM(rating)"),
    );
    // Thirty small range reads, each under its own index whatever the times: planning them
    // took longer than reading them (9 ms at M), so the statement is planned once.
    let rows: FromRows = sql
        .with_text(&text)
        .planned_once()
        .fetch_all::<FromRows>(ex)
        .await?
        .pop()
        .unwrap_or_default();
    let day = |name: &str| kept.get(name).copied().unwrap_or_default();
    let all = |key: &str| under_way.iter().find(|k| k.key == key).map_or(0, |k| k.n);
    let (private, curated) = (
        day("growth:project:private").0,
        day("growth:project:curated").0,
    );
    // Assigned before the end, less those ended before the start: every project ended before
    // the start was assigned before the end, but for those reopened across the window.
    let assigned_before_end = all("assignments")
        - rows.assigned_after_end
        - kept_after_end.get("growth:assigned").map_or(0, |k| k.0);
    let ended_before_start = all("ends")
        - rows.ended_after_start
        - kept_after_start.get("growth:ended").map_or(0, |k| k.0);
    let mean_x100 = |(n, sum): (i64, i64)| (n > 0).then(|| (sum * 200 + n) / (2 * n));
    let plus = |(n, sum): (i64, i64), more_n: i64, more_sum: i64| (n + more_n, sum + more_sum);
    Ok(WindowFigures {
        revenue_minor: day("growth:revenue").1 + rows.revenue_minor,
        released_minor: day("growth:released").1 + rows.released_minor,
        // A project released on in the window has one release there whose previous one is
        // before it (or none): every release less those whose previous one is in the window.
        released_projects: day("growth:released").0 + rows.released_n
            - released_again
            - rows.released_again_at_ends
            - rows.released_again_after_head,
        projects_created: private + curated + rows.private_created + rows.curated_created,
        private_created: private + rows.private_created,
        curated_created: curated + rows.curated_created,
        users_registered: day("growth:user").0 + rows.users_registered,
        completed: day("growth:completed").0 + rows.completed,
        cancelled: day("growth:cancelled").0 + rows.cancelled,
        active_projects: assigned_before_end - ended_before_start + rows.reopened_across,
        disputes_opened: day("growth:dispute").0 + rows.disputes_opened,
        expert_rating_x100: mean_x100(plus(
            day("growth:rating:empresa"),
            rows.expert_rated_n,
            rows.expert_rated_sum,
        )),
        company_rating_x100: mean_x100(plus(
            day("growth:rating:experto"),
            rows.company_rated_n,
            rows.company_rated_sum,
        )),
    })
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
