//! `/api/admin/metrics` and `/api/admin/metrics/growth`: the platform in figures. Every
//! figure is an aggregate the database computes; amounts are decimal numbers in euros.

use std::collections::BTreeMap;

use actix_web::{HttpResponse, get, web};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::domain::growth::{Period, growth, last_twelve_months, percent, round2};
use crate::domain::money::minor_to_number;
use crate::http::auth::AdminUser;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::state::AppState;
use crate::store::platform_metrics::{self as store, Ranked, WindowFigures};

#[derive(Debug, Serialize, ToSchema)]
pub struct RankedView {
    pub user_id: i64,
    pub name: String,
    /// Euros (earnings, spend) or the mean rating.
    pub value: f64,
    /// Released payments, or reviews.
    pub count: i64,
}

fn ranked(rows: Vec<Ranked>, money: bool) -> Vec<RankedView> {
    rows.into_iter()
        .map(|r| RankedView {
            user_id: r.user_id,
            name: r.name,
            value: if money {
                minor_to_number(r.value)
            } else {
                r.value as f64 / 100.0
            },
            count: r.count,
        })
        .collect()
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PlatformMetrics {
    /// Accounts (not deleted) per role.
    pub users_by_role: BTreeMap<String, i64>,
    /// Profiles per `profile_type:verification_status`.
    pub profiles_by_verification: BTreeMap<String, i64>,
    pub projects_by_status: BTreeMap<String, i64>,
    pub total_projects: i64,
    /// Commission of every released payment.
    pub total_revenue: f64,
    /// Amount of every released payment.
    pub gross_volume: f64,
    /// Held or disputed right now.
    pub in_escrow: f64,
    pub refunded: f64,
    pub currency: &'static str,
    pub top_experts_by_earnings: Vec<RankedView>,
    pub top_experts_by_rating: Vec<RankedView>,
    pub top_companies_by_spend: Vec<RankedView>,
}

/// Users by role and verification, projects by status, revenue (commission of released
/// payments), gross volume, and the top five experts by earnings and by rating and companies
/// by spend.
#[utoipa::path(
    tag = "admin",
    security(("bearer" = [])),
    responses((status = 200, body = PlatformMetrics), (status = 403, body = ErrorBody))
)]
#[get("/api/admin/metrics")]
pub async fn overview(state: web::Data<AppState>, _admin: AdminUser) -> ApiResult<HttpResponse> {
    let mut conn = state.db.conn().await?;
    let by_status: BTreeMap<String, i64> = store::projects_by_status(conn.exec())
        .await?
        .into_iter()
        .collect();
    let money = store::money_totals(conn.exec()).await?;
    let body = PlatformMetrics {
        users_by_role: store::users_by_role(conn.exec())
            .await?
            .into_iter()
            .collect(),
        profiles_by_verification: store::profiles_by_verification(conn.exec())
            .await?
            .into_iter()
            .collect(),
        total_projects: by_status.values().sum(),
        projects_by_status: by_status,
        total_revenue: minor_to_number(money.revenue_minor),
        gross_volume: minor_to_number(money.gross_volume_minor),
        in_escrow: minor_to_number(money.in_escrow_minor),
        refunded: minor_to_number(money.refunded_minor),
        currency: "eur",
        top_experts_by_earnings: ranked(store::top_experts_by_earnings(conn.exec()).await?, true),
        top_experts_by_rating: ranked(
            store::top_experts_by_rating(conn.exec(), state.clock.now()).await?,
            false,
        ),
        top_companies_by_spend: ranked(store::top_companies_by_spend(conn.exec()).await?, true),
    };
    Ok(HttpResponse::Ok().json(body))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct GrowthQuery {
    /// `7d`, `30d` (default), `90d` or `1y`.
    pub period: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct MonthRevenue {
    /// `YYYY-MM`.
    pub month: String,
    pub revenue: f64,
    pub projects: i64,
}

/// The figures of the period and their growth over the period of equal length before it.
#[derive(Debug, Serialize, ToSchema)]
pub struct GrowthMetrics {
    pub period: &'static str,
    /// Commission of payments released in the period.
    pub total_revenue: f64,
    /// Projects under way at some point of the period.
    pub active_projects: i64,
    /// Accounts registered in the period.
    pub total_users: i64,
    /// Projects created in the period.
    pub total_projects: i64,
    /// Completed ÷ (completed + cancelled) among projects that ended in the period, percent.
    pub completion_rate: f64,
    /// Mean amount released per project with a release in the period.
    pub average_project_value: f64,
    /// Mean revealed rating received by experts for reviews written in the period.
    pub expert_satisfaction: f64,
    /// Mean revealed rating received by companies for reviews written in the period.
    pub company_satisfaction: f64,
    /// Disputes opened in the period ÷ projects active in it, percent.
    pub dispute_rate: f64,
    pub revenue_growth: f64,
    pub projects_growth: f64,
    pub users_growth: f64,
    pub completion_rate_growth: f64,
    pub average_project_value_growth: f64,
    pub expert_satisfaction_growth: f64,
    pub company_satisfaction_growth: f64,
    pub dispute_rate_growth: f64,
    /// The last twelve months, oldest first.
    pub monthly_revenue: Vec<MonthRevenue>,
    /// Projects created in the period, per type (`private`, `curated`).
    pub project_types: BTreeMap<String, i64>,
    /// Every project per current status.
    pub project_statuses: BTreeMap<String, i64>,
}

/// One period's derived figures.
struct Derived {
    revenue: f64,
    completion_rate: f64,
    average_project_value: f64,
    expert_satisfaction: f64,
    company_satisfaction: f64,
    dispute_rate: f64,
}

fn derive(w: &WindowFigures) -> Derived {
    Derived {
        revenue: minor_to_number(w.revenue_minor),
        completion_rate: percent(w.completed, w.completed + w.cancelled),
        average_project_value: if w.released_projects == 0 {
            0.0
        } else {
            round2(minor_to_number(w.released_minor) / w.released_projects as f64)
        },
        expert_satisfaction: w.expert_rating_x100.unwrap_or(0) as f64 / 100.0,
        company_satisfaction: w.company_rating_x100.unwrap_or(0) as f64 / 100.0,
        dispute_rate: percent(w.disputes_opened, w.active_projects),
    }
}

/// Growth figures over `period`: how each is defined is written on each field. Growth is
/// (current − previous) ÷ previous in percent; when the previous period has no data it is
/// 100 if the current one has, else 0.
#[utoipa::path(
    tag = "admin",
    params(GrowthQuery),
    security(("bearer" = [])),
    responses((status = 200, body = GrowthMetrics), (status = 403, body = ErrorBody))
)]
#[get("/api/admin/metrics/growth")]
pub async fn growth_view(
    state: web::Data<AppState>,
    _admin: AdminUser,
    query: web::Query<GrowthQuery>,
) -> ApiResult<HttpResponse> {
    let period = match query.period.as_deref() {
        None => Period::Month,
        Some(p) => Period::parse(p)
            .ok_or_else(|| ApiError::invalid_field("period", "must be 7d, 30d, 90d or 1y"))?,
    };
    let now = state.clock.now();
    let (current, previous) = period.windows(now);
    let mut conn = state.db.conn().await?;
    let cur = store::window(conn.exec(), current.start, current.end, now).await?;
    let prev = store::window(conn.exec(), previous.start, previous.end, now).await?;
    let months = last_twelve_months(now);
    let labels: Vec<String> = months.iter().map(|(label, _)| label.clone()).collect();
    let per_month = store::months(conn.exec(), &labels).await?;
    let statuses = store::projects_by_status(conn.exec()).await?;
    let (c, p) = (derive(&cur), derive(&prev));
    let body = GrowthMetrics {
        period: period.as_str(),
        total_revenue: c.revenue,
        active_projects: cur.active_projects,
        total_users: cur.users_registered,
        total_projects: cur.projects_created,
        completion_rate: c.completion_rate,
        average_project_value: c.average_project_value,
        expert_satisfaction: c.expert_satisfaction,
        company_satisfaction: c.company_satisfaction,
        dispute_rate: c.dispute_rate,
        revenue_growth: growth(c.revenue, p.revenue),
        projects_growth: growth(cur.projects_created as f64, prev.projects_created as f64),
        users_growth: growth(cur.users_registered as f64, prev.users_registered as f64),
        completion_rate_growth: growth(c.completion_rate, p.completion_rate),
        average_project_value_growth: growth(c.average_project_value, p.average_project_value),
        expert_satisfaction_growth: growth(c.expert_satisfaction, p.expert_satisfaction),
        company_satisfaction_growth: growth(c.company_satisfaction, p.company_satisfaction),
        dispute_rate_growth: growth(c.dispute_rate, p.dispute_rate),
        monthly_revenue: months
            .into_iter()
            .zip(per_month)
            .map(|((month, _), (revenue, projects))| MonthRevenue {
                month,
                revenue: minor_to_number(revenue),
                projects,
            })
            .collect(),
        project_types: [
            ("private".to_owned(), cur.private_created),
            ("curated".to_owned(), cur.curated_created),
        ]
        .into_iter()
        .collect(),
        project_statuses: statuses.into_iter().collect(),
    };
    Ok(HttpResponse::Ok().json(body))
}

/// Mounts the platform metrics (`growth` is a fixed path of its own).
pub fn mount(cfg: &mut utoipa_actix_web::service_config::ServiceConfig) {
    cfg.service(overview).service(growth_view);
}
