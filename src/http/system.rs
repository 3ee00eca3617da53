//! Operational routes: health, metrics and the OpenAPI document.

use actix_web::{HttpResponse, ResponseError as _, get, web};
use serde::Serialize;
use utoipa::ToSchema;

use super::metrics::{HttpMetrics, render_actors, render_single};
use crate::state::AppState;

#[derive(Serialize, ToSchema)]
pub struct DependencyHealth {
    /// `ok` or `error`.
    pub status: &'static str,
    /// The engine or backend in use (`sqlite`, `postgres`, `memory`, `redis`).
    pub backend: &'static str,
}

#[derive(Serialize, ToSchema)]
pub struct Health {
    /// `ok` when every dependency answers, `degraded` when the cache does not, `unavailable`
    /// when the database does not.
    pub status: &'static str,
    pub version: &'static str,
    pub database: DependencyHealth,
    pub cache: DependencyHealth,
}

/// Application status with database and cache reachability.
#[utoipa::path(
    tag = "system",
    responses(
        (status = 200, description = "The database answers", body = Health),
        (status = 503, description = "The database does not answer", body = Health),
    )
)]
#[get("/health")]
pub async fn health(state: web::Data<AppState>) -> HttpResponse {
    let timeout = std::time::Duration::from_secs(3);
    let (db, cache) = tokio::join!(
        tokio::time::timeout(timeout, state.db.ping()),
        tokio::time::timeout(timeout, state.cache.ping()),
    );
    let db_ok = matches!(db, Ok(Ok(())));
    let cache_ok = matches!(cache, Ok(Ok(())));
    let body = Health {
        status: match (db_ok, cache_ok) {
            (true, true) => "ok",
            (true, false) => "degraded",
            (false, _) => "unavailable",
        },
        version: env!("CARGO_PKG_VERSION"),
        database: DependencyHealth {
            status: if db_ok { "ok" } else { "error" },
            backend: state.db.engine(),
        },
        cache: DependencyHealth {
            status: if cache_ok { "ok" } else { "error" },
            backend: state.cache.backend(),
        },
    };
    if db_ok {
        HttpResponse::Ok().json(body)
    } else {
        HttpResponse::ServiceUnavailable().json(body)
    }
}

/// Wrong `METRICS_TOKEN`s one client (an IPv4 address or an IPv6 /64) may send a minute before
/// `/metrics` refuses it.
pub const METRICS_FAILURES_PER_MINUTE: u32 = 10;

/// Prometheus text: HTTP requests, actors, database pool and outbox backlog.
#[utoipa::path(
    tag = "system",
    responses(
        (status = 200, description = "Prometheus text format", content_type = "text/plain"),
        (status = 401, body = crate::http::error::ErrorBody, description = "`METRICS_TOKEN` is set and the bearer token is missing or wrong"),
        (status = 429, body = crate::http::error::ErrorBody, description = "Too many wrong tokens from this address in the last minute: every attempt is refused until the window ends"),
    )
)]
#[get("/metrics")]
pub async fn metrics(
    state: web::Data<AppState>,
    http: web::Data<HttpMetrics>,
    req: actix_web::HttpRequest,
) -> HttpResponse {
    if let Some(token) = &state.settings.metrics_token {
        // Wrong tokens are counted per client; past the budget every attempt is refused
        // unchecked, so guessing learns nothing (`/metrics` is outside the global limit).
        let client = super::client_ip::client_key(&req);
        let failures = format!("ratelimit:metrics:{client}");
        let spent = state.cache.get(&failures).await.ok().flatten();
        if spent.and_then(|n| n.parse::<u32>().ok()) >= Some(METRICS_FAILURES_PER_MINUTE) {
            return super::error::ApiError::too_many_requests(60).error_response();
        }
        let given = req
            .headers()
            .get(actix_web::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or_default();
        if !crate::domain::token::constant_time_eq(given.as_bytes(), token.expose().as_bytes()) {
            if let Err(refused) = super::rate_limit::hit(
                state.cache.as_ref(),
                &failures,
                METRICS_FAILURES_PER_MINUTE,
                std::time::Duration::from_secs(60),
            )
            .await
            {
                return refused.error_response();
            }
            return HttpResponse::Unauthorized()
                .insert_header(("WWW-Authenticate", "Bearer"))
                .json(crate::http::error::ErrorBody {
                    detail: "METRICS_TOKEN is set: send it as a bearer token".into(),
                    code: "NOT_AUTHENTICATED".into(),
                    errors: None,
                });
        }
    }
    let mut out = String::with_capacity(16 * 1024);
    http.render(&mut out);
    render_actors(&mut out);
    super::ws::render_metrics(&state, &mut out);
    state.crm.metrics.render(&mut out);
    crate::workflows::webhooks::metrics().render(&mut out);
    let (size, idle) = state.db.pool_stats();
    render_single(
        &mut out,
        "db_pool_connections",
        "gauge",
        "Open database connections.",
        f64::from(size),
    );
    render_single(
        &mut out,
        "db_pool_idle_connections",
        "gauge",
        "Idle database connections.",
        idle as f64,
    );
    render_single(
        &mut out,
        "instance_ready",
        "gauge",
        "1 while this instance takes traffic (GET /ready answers 200), 0 while it drains.",
        if state.readiness.is_draining() {
            0.0
        } else {
            1.0
        },
    );
    render_kept(
        &mut out,
        "public_project_pages_total",
        "Public project list pages answered, by where the answer came from: kept by this instance since the last write to projects, or read from the database.",
        state.public_projects.counts(),
    );
    render_kept(
        &mut out,
        "kept_project_rows_total",
        "Reads of one project (GET /api/projects/{id}) by whether this instance held its row under the project's current tokens, or not (then read from the database).",
        state
            .kept_projects
            .as_ref()
            .map_or((0, 0), |rows| rows.counts()),
    );
    render_kept(
        &mut out,
        "expert_directory_pages_total",
        "Expert directory and expert search pages answered, by where the answer came from: kept by this instance since the last write to what the directory shows, or read from the database.",
        state.expert_directory.counts(),
    );
    render_kept(
        &mut out,
        "curation_candidates_total",
        "Curation suggestions' candidate experts, by where they came from: kept by this instance since the last write to what they are chosen from, or read from the database.",
        state.curation_candidates.counts(),
    );
    render_kept(
        &mut out,
        "admin_user_search_totals_total",
        "Totals of the administrators' user searches, by where they came from: kept by this instance since the last write to the accounts' search texts, or read (counted) from the database.",
        state.account_searches.totals.counts(),
    );
    render_kept(
        &mut out,
        "admin_user_search_pages_total",
        "Pages of the administrators' user searches whose accounts were kept by this instance since the last write to the accounts' search texts, or read from the database (asked only once the search's total is kept).",
        state.account_searches.pages.counts(),
    );
    render_kept(
        &mut out,
        "project_search_counts_total",
        "Counts of SQLite's project search index asked for by project searches, by where they came from: kept by this instance since the last write to projects, or read from the index.",
        state.project_search_counts.counts(),
    );
    render_single(
        &mut out,
        "money_audit_mismatches_total",
        "counter",
        "Payments the daily money audit run by this instance found not matching the processor.",
        crate::workflows::money_audit::MISMATCHES_FOUND.load(std::sync::atomic::Ordering::Relaxed)
            as f64,
    );
    render_single(
        &mut out,
        "invoice_chain_broken",
        "gauge",
        "1 when this instance's last walk of the invoices' hash chains found a broken link (`marketplace invoices verify` names it), else 0.",
        crate::workflows::invoices::CHAIN_BROKEN.load(std::sync::atomic::Ordering::Relaxed) as f64,
    );
    render_single(
        &mut out,
        "invoice_chain_verified_unix_seconds",
        "gauge",
        "When this instance last finished walking the invoices' hash chains; 0 before its first walk.",
        crate::workflows::invoices::CHAIN_VERIFIED_AT.load(std::sync::atomic::Ordering::Relaxed)
            as f64,
    );
    render_dependencies(&mut out, &state);
    if let Ok(mut conn) = state.db.conn().await {
        render_backlogs(&mut out, &mut conn, state.clock.now()).await;
    }
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(out)
}

/// The database's and (when it is Redis) the cache's availability, as their probes found it
/// (`dependency="postgres"`, `"redis"`; `"sqlite"`, which has no probe, is always up).
fn render_dependencies(out: &mut String, state: &AppState) {
    // An SQLite file is in this process and always answers; Redis is listed when configured.
    let watched: Vec<_> = std::iter::once(state.db.availability())
        .chain(state.cache.availability())
        .collect();
    let each = |f: &dyn Fn(&crate::availability::Availability) -> f64| {
        watched.iter().map(|a| (a.name(), f(a))).collect::<Vec<_>>()
    };
    super::metrics::render_labeled(
        out,
        "dependency_up",
        "gauge",
        "1 while the dependency answers its probe (every 250 ms), 0 while it is away and the requests that need it are refused with 503.",
        "dependency",
        each(&|a| if a.is_away() { 0.0 } else { 1.0 }),
    );
    super::metrics::render_labeled(
        out,
        "dependency_outages_total",
        "counter",
        "Times the dependency's probe found it away after it had answered.",
        "dependency",
        each(&|a| a.counts().0 as f64),
    );
    super::metrics::render_labeled(
        out,
        "dependency_refusals_total",
        "counter",
        "Calls on the dependency refused at once because it was away (answered 503, or served without it).",
        "dependency",
        each(&|a| a.counts().1 as f64),
    );
}

/// A counter of answers by where they came from (`source`): kept by this instance, or read
/// from the database; `counts` as the keeping cache reports them.
fn render_kept(out: &mut String, name: &str, help: &str, (kept, read): (u64, u64)) {
    super::metrics::render_labeled(
        out,
        name,
        "counter",
        help,
        "source",
        [("kept", kept as f64), ("read", read as f64)],
    );
}

/// The work waiting in the database, shared by every instance: rows of each queue not done
/// yet, and the processor events not applied. A failed read leaves its family out.
async fn render_backlogs(
    out: &mut String,
    conn: &mut crate::store::Conn,
    now: chrono::DateTime<chrono::Utc>,
) {
    use crate::store::{crm, events, mail_queue, processor_events, webhook_deliveries};
    let mut pending = Vec::new();
    for (name, count) in [
        ("outbox", events::OUTBOX.pending_count(conn.exec()).await),
        ("mail", mail_queue::QUEUE.pending_count(conn.exec()).await),
        ("crm", crm::QUEUE.pending_count(conn.exec()).await),
        (
            "webhook_deliveries",
            webhook_deliveries::QUEUE.pending_count(conn.exec()).await,
        ),
    ] {
        if let Ok(count) = count {
            pending.push((name, count as f64));
        }
    }
    super::metrics::render_labeled(
        out,
        "queue_pending_rows",
        "gauge",
        "Rows of each work queue not done yet (due, waiting for a retry or being handled).",
        "queue",
        pending,
    );
    if let Ok((count, oldest)) = processor_events::unapplied(conn.exec()).await {
        render_single(
            out,
            "processor_events_unapplied",
            "gauge",
            "Processor events stored and not applied yet.",
            count as f64,
        );
        let age = oldest.map_or(0.0, |at| {
            (now - at).num_milliseconds().max(0) as f64 / 1000.0
        });
        render_single(
            out,
            "processor_events_oldest_unapplied_age_seconds",
            "gauge",
            "How long the oldest processor event not applied yet has waited (0 when none).",
            age,
        );
    }
    if let Ok(backfills) = crate::store::backfills::progress(conn.exec()).await {
        render_backfills(out, &backfills);
    }
}

/// Each registered backfill's progress (`store::backfills`), shared by every instance.
fn render_backfills(out: &mut String, backfills: &[crate::store::backfills::Progress]) {
    let each = |f: &dyn Fn(&crate::store::backfills::Progress) -> f64| {
        backfills
            .iter()
            .map(|b| (b.name.as_str(), f(b)))
            .collect::<Vec<_>>()
    };
    super::metrics::render_labeled(
        out,
        "backfill_rows_total",
        "counter",
        "Rows each backfill has filled, by the backfills job of any instance.",
        "backfill",
        each(&|b| b.rows_changed as f64),
    );
    super::metrics::render_labeled(
        out,
        "backfill_remaining_ids",
        "gauge",
        "Source ids each backfill has yet to cover (0 once finished).",
        "backfill",
        each(&|b| (b.upto - b.done_through).max(0) as f64),
    );
    super::metrics::render_labeled(
        out,
        "backfill_finished",
        "gauge",
        "1 once a backfill has covered every source id it was registered for, so the code reads its column; 0 while the old shape is read.",
        "backfill",
        each(&|b| if b.finished_at.is_some() { 1.0 } else { 0.0 }),
    );
}

/// This document.
#[utoipa::path(
    tag = "system",
    responses((status = 200, description = "OpenAPI 3 document of every route", content_type = "application/json"))
)]
#[get("/openapi.json")]
pub async fn openapi(doc: web::Data<utoipa::openapi::OpenApi>) -> HttpResponse {
    HttpResponse::Ok().json(doc.get_ref())
}

/// One actor kind's live numbers.
#[derive(Serialize, ToSchema)]
pub struct ActorKind {
    pub kind: &'static str,
    /// `registry`, `hub` or `periodic`.
    pub category: &'static str,
    /// Metric name to value: live actors, messages handled, handling time, mailbox wait,
    /// restarts (registries); rooms and members (hubs); runs, failures, back-off (jobs).
    #[schema(value_type = Object)]
    pub metrics: std::collections::BTreeMap<&'static str, f64>,
    /// Periodic jobs: the message of the last failed run (times are in `metrics`:
    /// `last_run_unix_seconds`, `next_run_unix_seconds`, `last_failure_unix_seconds`).
    pub last_failure: Option<String>,
}

/// Live actors, messages handled, handling time, mailbox wait and restarts per actor kind.
#[utoipa::path(
    tag = "admin",
    security(("bearer" = [])),
    responses(
        (status = 200, body = Vec<ActorKind>),
        (status = 403, body = crate::http::error::ErrorBody),
    )
)]
#[get("/api/admin/system/actors")]
pub async fn actor_metrics(_admin: crate::http::auth::AdminUser) -> HttpResponse {
    let kinds: Vec<ActorKind> = ::actors::metrics::snapshot()
        .into_iter()
        .map(|k| ActorKind {
            kind: k.kind,
            category: k.category,
            metrics: k.samples().into_iter().collect(),
            last_failure: match &k.values {
                ::actors::metrics::KindValues::Periodic(v) => v.last_error.clone(),
                _ => None,
            },
        })
        .collect();
    HttpResponse::Ok().json(kinds)
}

/// Mounts health, metrics, the OpenAPI document and the actors' numbers.
/// Whether this instance takes traffic: what a load balancer checks.
#[derive(Serialize, ToSchema)]
pub struct Readiness {
    /// `ready`, `degraded` (the shared cache does not answer: served without it where that is
    /// safe), `draining` (stopping: send nothing new) or `unavailable` (the database does not
    /// answer).
    pub status: &'static str,
}

/// Readiness, apart from liveness (`/health`): 200 while this instance can serve (its
/// migrations applied, which it checks before it listens at all, and the database answering;
/// `degraded` while the cache does not); 503 once it drains toward a stop (SIGTERM) or while
/// the database does not answer.
#[utoipa::path(
    tag = "system",
    responses(
        (status = 200, description = "Ready", body = Readiness),
        (status = 503, description = "Draining, or the database does not answer", body = Readiness),
    )
)]
#[get("/ready")]
pub async fn ready(state: web::Data<AppState>) -> HttpResponse {
    let status = if state.readiness.is_draining() {
        "draining"
    } else {
        let timeout = std::time::Duration::from_secs(2);
        let (db, cache) = tokio::join!(
            tokio::time::timeout(timeout, state.db.ping()),
            tokio::time::timeout(timeout, state.cache.ping()),
        );
        match (db, cache) {
            (Ok(Ok(())), Ok(Ok(()))) => "ready",
            // Served without the cache where that is safe, refused at once where not
            // (README, "When a dependency is away"): every instance shares the one Redis, so
            // taking them all out of the balancer would refuse everything instead.
            (Ok(Ok(())), _) => "degraded",
            _ => "unavailable",
        }
    };
    let body = Readiness { status };
    if matches!(status, "ready" | "degraded") {
        HttpResponse::Ok().json(body)
    } else {
        HttpResponse::ServiceUnavailable().json(body)
    }
}

pub fn mount(cfg: &mut utoipa_actix_web::service_config::ServiceConfig) {
    cfg.service(health)
        .service(ready)
        .service(metrics)
        .service(openapi)
        .service(actor_metrics);
}
