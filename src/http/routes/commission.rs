//! `/api/admin/commission-config*`: the commission percentage of each expert level
//! (administrators only). Rates travel as percents (`4.5`), are stored in basis points.

use std::collections::BTreeMap;

use actix_web::{HttpResponse, get, put, web};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::domain::commission::{Level, parse_rate, rate_to_number};
use crate::http::auth::AdminUser;
use crate::http::error::{ApiError, ApiResult, ErrorBody, FieldError};
use crate::state::AppState;
use crate::store::commission::{self, CommissionRate};
use crate::workflows::commission as flow;

/// One level's commission.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct CommissionView {
    /// `Global`, `Pro` or `Enterprise`.
    #[schema(example = "Global")]
    pub level: String,
    /// Percent, 0 to 100, at most 2 decimals.
    #[schema(example = 5.0)]
    pub rate: f64,
    /// `null` for the default never changed.
    pub updated_at: Option<DateTime<Utc>>,
    /// The administrator who changed it last.
    pub updated_by: Option<i64>,
}

impl From<CommissionRate> for CommissionView {
    fn from(r: CommissionRate) -> Self {
        Self {
            level: r.level,
            rate: rate_to_number(r.rate_bp),
            updated_at: r.updated_at,
            updated_by: r.updated_by,
        }
    }
}

/// `PUT /api/admin/commission-config/{level}`.
#[derive(Deserialize, ToSchema)]
pub struct RateRequest {
    /// Percent, 0 to 100, at most 2 decimals.
    #[schema(value_type = f64, example = 4.5)]
    pub rate: Value,
}

/// One level and its new rate.
#[derive(Deserialize, ToSchema)]
pub struct LevelRate {
    pub level: String,
    #[schema(value_type = f64, example = 4.5)]
    pub rate: Value,
}

/// The rates of a bulk change, by level or as a list.
#[derive(Deserialize, ToSchema)]
#[serde(untagged)]
pub enum RateSet {
    /// `{"Global": 6, "Pro": 4.5}`
    ByLevel(BTreeMap<String, Value>),
    /// `[{"level": "Global", "rate": 6}]`
    List(Vec<LevelRate>),
}

/// `PUT /api/admin/commission-config/bulk`: `{"rates": {...}}`, `{"rates": [...]}` or the
/// list alone.
#[derive(Deserialize, ToSchema)]
#[serde(untagged)]
pub enum BulkRequest {
    Wrapped { rates: RateSet },
    List(Vec<LevelRate>),
}

fn rate_of(value: &Value) -> Result<i64, &'static str> {
    match value {
        Value::Number(n) => parse_rate(n),
        _ => Err("must be a number between 0 and 100"),
    }
}

fn level_of(path: &str) -> ApiResult<Level> {
    Level::parse(path).ok_or_else(|| ApiError::not_found("No such expert level"))
}

/// Every level's rate, checked as a whole: one invalid entry refuses them all.
fn parse_bulk(body: BulkRequest) -> ApiResult<Vec<(Level, i64)>> {
    let entries: Vec<(String, String, Value)> = match body {
        BulkRequest::Wrapped {
            rates: RateSet::ByLevel(map),
        } => map
            .into_iter()
            .map(|(level, rate)| (format!("rates.{level}"), level, rate))
            .collect(),
        BulkRequest::Wrapped {
            rates: RateSet::List(list),
        }
        | BulkRequest::List(list) => list
            .into_iter()
            .enumerate()
            .map(|(i, e)| (format!("rates[{i}]"), e.level, e.rate))
            .collect(),
    };
    let mut errors = Vec::new();
    if entries.is_empty() {
        errors.push(FieldError::new("rates", "must name at least one level"));
    }
    let mut parsed: Vec<(Level, i64)> = Vec::new();
    for (field, level, rate) in entries {
        let rate = rate_of(&rate).map_err(|m| FieldError::new(field.clone(), m));
        match (Level::parse(&level), rate) {
            (None, _) => errors.push(FieldError::new(
                field,
                "is not an expert level (Global, Pro, Enterprise)",
            )),
            (Some(l), _) if parsed.iter().any(|(p, _)| *p == l) => {
                errors.push(FieldError::new(field, "names a level twice"));
            }
            (Some(_), Err(e)) => errors.push(e),
            (Some(l), Ok(bp)) => parsed.push((l, bp)),
        }
    }
    if errors.is_empty() {
        Ok(parsed)
    } else {
        Err(ApiError::validation(errors))
    }
}

/// Every level's commission: Global, Pro, Enterprise.
#[utoipa::path(
    tag = "admin",
    security(("bearer" = [])),
    responses(
        (status = 200, body = Vec<CommissionView>),
        (status = 403, body = ErrorBody),
    )
)]
#[get("/api/admin/commission-config")]
pub async fn list_config(state: web::Data<AppState>, _admin: AdminUser) -> ApiResult<HttpResponse> {
    let mut conn = state.db.conn().await?;
    let rates = commission::list(conn.exec()).await?;
    Ok(HttpResponse::Ok().json(
        rates
            .into_iter()
            .map(CommissionView::from)
            .collect::<Vec<_>>(),
    ))
}

/// Changes several levels at once, all or none: every entry is checked before anything is
/// written (unknown level or a rate outside 0–100 → 422 naming each bad entry). Answers
/// every level.
#[utoipa::path(
    tag = "admin",
    request_body = BulkRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, body = Vec<CommissionView>),
        (status = 403, body = ErrorBody, description = "Not an administrator, or CSRF"),
    )
)]
#[put("/api/admin/commission-config/bulk")]
pub async fn update_bulk(
    state: web::Data<AppState>,
    AdminUser(admin): AdminUser,
    body: web::Json<BulkRequest>,
) -> ApiResult<HttpResponse> {
    let rates = parse_bulk(body.into_inner())?;
    let all = flow::set_rates(&state, admin.id(), &rates).await?;
    Ok(HttpResponse::Ok().json(
        all.into_iter()
            .map(CommissionView::from)
            .collect::<Vec<_>>(),
    ))
}

/// One level's commission.
#[utoipa::path(
    tag = "admin",
    params(("level" = String, Path, description = "`Global`, `Pro` or `Enterprise`")),
    security(("bearer" = [])),
    responses(
        (status = 200, body = CommissionView),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody, description = "Unknown level"),
    )
)]
#[get("/api/admin/commission-config/{level}")]
pub async fn get_level(
    state: web::Data<AppState>,
    _admin: AdminUser,
    path: web::Path<String>,
) -> ApiResult<HttpResponse> {
    let level = level_of(&path)?;
    let mut conn = state.db.conn().await?;
    let rate = commission::find(conn.exec(), level)
        .await?
        .ok_or_else(|| ApiError::not_found("No such expert level"))?;
    Ok(HttpResponse::Ok().json(CommissionView::from(rate)))
}

/// Changes one level's commission (percent, 0 to 100, at most 2 decimals).
#[utoipa::path(
    tag = "admin",
    params(("level" = String, Path, description = "`Global`, `Pro` or `Enterprise`")),
    request_body = RateRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, body = CommissionView),
        (status = 403, body = ErrorBody, description = "Not an administrator, or CSRF"),
        (status = 404, body = ErrorBody, description = "Unknown level"),
    )
)]
#[put("/api/admin/commission-config/{level}")]
pub async fn update_level(
    state: web::Data<AppState>,
    AdminUser(admin): AdminUser,
    path: web::Path<String>,
    body: web::Json<RateRequest>,
) -> ApiResult<HttpResponse> {
    let level = level_of(&path)?;
    let rate_bp = rate_of(&body.rate).map_err(|m| ApiError::invalid_field("rate", m))?;
    let rate = flow::set_rate(&state, admin.id(), level, rate_bp).await?;
    Ok(HttpResponse::Ok().json(CommissionView::from(rate)))
}

/// Mounts the commission configuration: `bulk` before `{level}`.
pub fn mount(cfg: &mut utoipa_actix_web::service_config::ServiceConfig) {
    cfg.service(list_config)
        .service(update_bulk)
        .service(get_level)
        .service(update_level);
}
