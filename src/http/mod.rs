//! The HTTP layer: routes per resource, extractors, middleware, error mapping, OpenAPI.
//!
//! Each resource module mounts its own routes (`mount`, at its bottom) and [`configure`] mounts
//! the modules in order, all through `utoipa_actix_web`'s `ServiceConfig`, which only accepts
//! handlers that carry an OpenAPI description: a route cannot be mounted undocumented.

use actix_web::{HttpResponse, web};
use utoipa_actix_web::service_config::ServiceConfig;

pub mod auth;
pub mod client_ip;
pub mod cors;
pub mod error;
pub mod half_close;
pub mod idempotency;
pub mod metrics;
pub mod middleware;
pub mod multipart;
pub mod openapi;
pub mod pagination;
pub mod pushed_docs;
pub mod rate_limit;
pub mod raw_body;
pub mod routes;
pub mod spooled;
pub mod system;
pub mod text_guard;
pub mod ws;

pub use error::{ApiError, ApiResult};
pub use openapi::ApiDoc;

/// Mounts every route of the service, each module its own (`mount` at the bottom of each
/// module). The router tries each route's pattern in mount order until one matches, so the
/// order below is the order that matters: a fixed path must come before a `{param}` path of
/// the same method that would capture it, and the busiest fixed path comes first — the
/// processor's webhooks, which arrive in bursts, would otherwise pay for every pattern mounted
/// before them.
pub fn configure(cfg: &mut ServiceConfig) {
    routes::payments::mount_processor_webhook(cfg);
    system::mount(cfg);
    routes::api_docs::mount(cfg);
    routes::auth::mount(cfg);
    routes::users::mount(cfg);
    routes::webhook_deliveries::mount(cfg);
    routes::invitations::mount(cfg);
    routes::documents::mount(cfg);
    routes::profiles::mount(cfg);
    routes::projects::mount(cfg);
    routes::admin_projects::mount(cfg);
    routes::applications::mount(cfg);
    routes::expert::mount(cfg);
    routes::commission::mount(cfg);
    routes::connect::mount(cfg);
    // Literal `/api/payments/…` paths: before `/api/payments/{payment_id}`.
    routes::payment_methods::mount(cfg);
    routes::milestones::mount(cfg);
    routes::timers::mount(cfg);
    ws::mount(cfg);
    routes::chat::mount(cfg);
    routes::notifications::mount(cfg);
    // `/api/admin/payments/audit`: before `/api/admin/payments/{payment_id}`.
    routes::money_audit::mount(cfg);
    routes::payments::mount(cfg);
    routes::reviews::mount(cfg);
    routes::admin_users::mount(cfg);
    routes::reputation::mount(cfg);
    routes::disputes::mount(cfg);
    routes::sandbox::mount(cfg);
    routes::admin_metrics::mount(cfg);
    routes::dac7::mount(cfg);
    routes::invoices::mount(cfg);
    routes::testing::mount(cfg);
    routes::crm::mount(cfg);
}

/// The answer for a request no route takes: 405 with `Allow` when the address is a route's
/// under another method, 404 otherwise.
pub async fn no_route(req: actix_web::HttpRequest, routes: web::Data<KnownRoutes>) -> HttpResponse {
    unrouted(req.path(), &routes)
}

/// [`no_route`]'s answer for `path`, also given at once to a method HTTP does not define
/// (no route takes one, whatever the address).
pub fn unrouted(path: &str, routes: &KnownRoutes) -> HttpResponse {
    let allowed = routes.methods_at(path);
    if allowed.is_empty() {
        return HttpResponse::NotFound().json(error::ErrorBody {
            detail: "No route matches this address".into(),
            code: "ROUTE_NOT_FOUND".into(),
            errors: None,
        });
    }
    let allowed = allowed.join(", ");
    HttpResponse::MethodNotAllowed()
        .insert_header((actix_web::http::header::ALLOW, allowed.clone()))
        .json(error::ErrorBody {
            detail: format!("This address answers {allowed}"),
            code: "METHOD_NOT_ALLOWED".into(),
            errors: None,
        })
}

/// The mounted route templates and their methods, as the OpenAPI document lists them, matched
/// once per unrouted request (built once: scanners hit unknown addresses at high rates).
pub struct KnownRoutes(Vec<KnownRoute>);

struct KnownRoute {
    /// The template's text before its first parameter: a path without it cannot match, so
    /// most unrouted paths are turned away without running a single pattern.
    fixed_start: String,
    /// How many parameters the template has: of two templates matching a path, the router
    /// reaches the one with fewer first (a fixed path is mounted before a `{id}` path).
    params: usize,
    def: actix_web::dev::ResourceDef,
    methods: Vec<(&'static str, DeclaredBody)>,
}

/// The body an operation takes, as its OpenAPI `requestBody` declares it: what the edge may
/// read of a request before its route runs (`http::idempotency`), so that limit is the
/// route's own declaration, never a second list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeclaredBody {
    /// No `requestBody`: the route reads nothing.
    None,
    /// A JSON (or other small) body, read under the JSON limit.
    Json,
    /// A `multipart/*` upload, read under the uploads' limit.
    Upload,
}

impl DeclaredBody {
    fn of(op: &utoipa::openapi::path::Operation) -> Self {
        use utoipa::openapi::RefOr;
        match &op.request_body {
            None => Self::None,
            Some(RefOr::T(body)) if body.content.keys().any(|t| t.starts_with("multipart/")) => {
                Self::Upload
            }
            Some(_) => Self::Json,
        }
    }

    /// The most bytes of a body read for such a route.
    pub fn limit(self) -> usize {
        match self {
            Self::None => 0,
            Self::Json => error::extract::JSON_BODY_LIMIT,
            Self::Upload => multipart::MAX_DRAIN_BYTES,
        }
    }
}

impl KnownRoutes {
    pub fn new(doc: &utoipa::openapi::OpenApi) -> Self {
        let routes = doc
            .paths
            .paths
            .iter()
            .map(|(template, item)| {
                let methods = [
                    ("GET", &item.get),
                    ("HEAD", &item.head),
                    ("POST", &item.post),
                    ("PUT", &item.put),
                    ("PATCH", &item.patch),
                    ("DELETE", &item.delete),
                    ("OPTIONS", &item.options),
                ]
                .into_iter()
                .filter_map(|(name, op)| op.as_ref().map(|op| (name, DeclaredBody::of(op))))
                .collect();
                KnownRoute {
                    fixed_start: template.split('{').next().unwrap_or_default().to_owned(),
                    params: template.matches('{').count(),
                    def: actix_web::dev::ResourceDef::new(template.as_str()),
                    methods,
                }
            })
            .collect();
        Self(routes)
    }

    /// Every method some template matching `path` answers (a fixed path such as
    /// `/api/projects/public` also matches `/api/projects/{id}`, which routing would try).
    pub fn methods_at(&self, path: &str) -> Vec<&'static str> {
        let mut methods = Vec::new();
        for route in self.matching(path) {
            for (m, _) in &route.methods {
                if !methods.contains(m) {
                    methods.push(*m);
                }
            }
        }
        methods
    }

    /// The body the operation that routing picks for `method` and `path` declares:
    /// [`DeclaredBody::None`] when no route takes the request (it is answered 404 or 405).
    pub fn body_of(&self, method: &str, path: &str) -> DeclaredBody {
        self.matching(path)
            .filter_map(|route| {
                let (_, body) = route.methods.iter().find(|(m, _)| *m == method)?;
                Some((
                    route.params,
                    std::cmp::Reverse(route.fixed_start.len()),
                    *body,
                ))
            })
            .min_by_key(|(params, fixed, _)| (*params, *fixed))
            .map_or(DeclaredBody::None, |(_, _, body)| body)
    }

    fn matching<'a>(&'a self, path: &'a str) -> impl Iterator<Item = &'a KnownRoute> {
        self.0
            .iter()
            .filter(move |r| path.starts_with(&r.fixed_start) && r.def.is_match(path))
    }
}

/// Extraction settings shared by every route (error shapes of DESIGN §6).
pub fn extractor_configs(cfg: &mut web::ServiceConfig) {
    cfg.app_data(error::extract::json_config())
        .app_data(error::extract::query_config())
        .app_data(error::extract::path_config());
}
