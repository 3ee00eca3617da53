//! The HTTP layer: routes per resource, extractors, middleware, error mapping, OpenAPI.
//!
//! Every route is mounted through [`configure`] with `utoipa_actix_web`, which only accepts
//! handlers that carry an OpenAPI description: a route cannot be mounted undocumented.

use actix_web::{HttpResponse, web};
use utoipa_actix_web::service_config::ServiceConfig;

pub mod auth;
pub mod client_ip;
pub mod cors;
pub mod error;
pub mod metrics;
pub mod middleware;
pub mod multipart;
pub mod openapi;
pub mod pagination;
pub mod rate_limit;
pub mod raw_body;
pub mod routes;
pub mod system;
pub mod text_guard;
pub mod ws;

pub use error::{ApiError, ApiResult};
pub use openapi::ApiDoc;

/// Mounts every route of the service. The router tries each route's pattern in this order
/// until one matches, so the busiest fixed path comes first: the processor's webhooks, which
/// arrive in bursts, would otherwise pay for every `{id}` pattern mounted before them.
pub fn configure(cfg: &mut ServiceConfig) {
    use routes::{auth, invitations, users};
    cfg.service(routes::payments::webhook)
        .service(system::health)
        .service(system::metrics)
        .service(system::openapi)
        .service(system::actor_metrics)
        // Accounts and sessions.
        .service(auth::register)
        .service(auth::login)
        .service(auth::login_secure)
        .service(auth::refresh)
        .service(auth::refresh_secure)
        .service(auth::verify)
        .service(auth::verify_secure)
        .service(auth::verify_token)
        .service(auth::logout)
        .service(auth::logout_secure)
        .service(auth::forgot_password)
        .service(auth::reset_password)
        .service(auth::verify_email)
        .service(auth::send_verification_email)
        .service(auth::add_role)
        .service(auth::switch_role)
        .service(auth::accept_admin_invitation)
        // Users: `me` routes before `{id}`.
        .service(users::me)
        .service(users::update_me)
        .service(users::change_password)
        .service(users::change_email)
        .service(users::get_webhook)
        .service(users::put_webhook)
        .service(users::get_webhook_secret)
        .service(users::regenerate_webhook_secret)
        .service(routes::webhook_deliveries::list)
        .service(routes::webhook_deliveries::redeliver)
        .service(users::public_user)
        // Admin invitations.
        .service(invitations::create)
        .service(invitations::list)
        .service(invitations::get)
        .service(invitations::cancel);
    // Profiles (issue: profiles, projects and proposals).
    // Fixed paths before `{id}`, `active` before `{slug}`.
    cfg.service(routes::documents::upload)
        .service(routes::documents::download)
        .service(routes::profiles::create)
        .service(routes::profiles::me)
        .service(routes::profiles::me_profile)
        .service(routes::profiles::fiscal_status)
        .service(routes::profiles::upload_picture)
        .service(routes::profiles::picture_file)
        .service(routes::profiles::search_experts)
        .service(routes::profiles::expert_by_slug)
        .service(routes::profiles::public_team)
        .service(routes::profiles::create_team_profile)
        .service(routes::profiles::update_team_profile)
        .service(routes::profiles::get_team_profile)
        .service(routes::profiles::team_profile_by_slug)
        .service(routes::profiles::public_profile)
        .service(routes::profiles::update)
        .service(routes::profiles::update_fiscal)
        .service(routes::profiles::active_skills)
        .service(routes::profiles::skill)
        .service(routes::profiles::skill_experts)
        .service(routes::profiles::verify)
        .service(routes::profiles::unverify)
        .service(routes::profiles::reject)
        .service(routes::profiles::resubmit)
        .service(routes::profiles::pre_evaluate)
        .service(routes::profiles::admin_user_profile)
        .service(routes::profiles::admin_list)
        .service(routes::profiles::admin_create_expert)
        .service(routes::profiles::admin_create_company);
    // Projects: fixed paths before `{project_id}`.
    {
        use routes::{applications, expert, projects};
        cfg.service(projects::public_list)
            .service(projects::my_projects)
            .service(projects::all_projects)
            .service(projects::list)
            .service(projects::create)
            .service(projects::get_project)
            .service(projects::update)
            .service(projects::change_status)
            .service(projects::delete_project)
            .service(projects::submit)
            .service(projects::request_budget)
            .service(projects::validate)
            .service(projects::curate)
            .service(projects::auto_curate)
            .service(projects::curation_suggestions)
            .service(projects::admin_invite_experts)
            .service(routes::admin_projects::list)
            .service(routes::admin_projects::get_one)
            .service(routes::admin_projects::set_status)
            .service(applications::apply)
            .service(applications::my_application)
            .service(applications::list)
            .service(applications::request_revision)
            .service(applications::resubmit)
            .service(applications::reject)
            .service(applications::select)
            .service(applications::cancel_selection)
            .service(expert::stats)
            .service(expert::my_applications)
            .service(expert::available_projects)
            .service(expert::assigned_projects)
            .service(expert::invitations);
    }
    // Commission configuration (administrators): `bulk` before `{level}`.
    cfg.service(routes::commission::list_config)
        .service(routes::commission::update_bulk)
        .service(routes::commission::get_level)
        .service(routes::commission::update_level);
    // Connected payout account of experts.
    cfg.service(routes::connect::get_status)
        .service(routes::connect::account_link)
        .service(routes::connect::account_update_link)
        .service(routes::connect::admin_disconnect);
    // Payments: the literal `/api/payments/...` paths below must stay before any
    // `/api/payments/{id}` route, which would otherwise capture them.
    cfg.service(routes::payment_methods::public_key)
        .service(routes::payment_methods::saved_methods)
        .service(routes::payment_methods::delete_saved_method)
        .service(routes::payment_methods::attach_method);
    // Milestones and deliveries: the literal `deliveries/…` paths before `{milestone_id}`.
    {
        use routes::milestones as ms;
        cfg.service(ms::create_delivery)
            .service(ms::deliveries_of_milestone)
            .service(ms::deliveries_of_project)
            .service(ms::my_deliveries)
            .service(ms::get_delivery)
            .service(ms::update_delivery)
            .service(ms::review_delivery)
            .service(ms::create)
            .service(ms::list_for_project)
            .service(ms::get_milestone)
            .service(ms::update)
            .service(ms::delete_milestone)
            .service(ms::complete)
            .service(ms::approve)
            .service(ms::reject)
            .service(routes::timers::release_engagement);
    }
    // WebSockets: notifications and chat rooms.
    cfg.service(ws::notifications_socket)
        .service(ws::chat_socket);
    // A project's chat.
    {
        use routes::chat;
        cfg.service(chat::list)
            .service(chat::post_message)
            .service(chat::upload_file)
            .service(chat::download_file)
            .service(chat::mark_read)
            .service(chat::get_message)
            .service(chat::edit_message)
            .service(chat::delete_message);
    }
    // Notifications.
    cfg.service(routes::webhook_deliveries::test)
        .service(routes::notifications::list)
        .service(routes::notifications::mark_read)
        .service(routes::notifications::mark_all_read)
        .service(routes::notifications::test);
    // Payments: literal paths before `/api/payments/{payment_id}`.
    {
        use routes::payments;
        cfg.service(payments::initiate)
            .service(payments::release)
            .service(payments::release_and_charge_next)
            .service(payments::sync_status)
            .service(payments::refund)
            .service(payments::history)
            .service(payments::by_project)
            .service(payments::intent)
            .service(payments::confirm_initial)
            .service(payments::retry_transfer)
            .service(payments::receipt)
            .service(payments::get_one)
            .service(payments::admin_list)
            .service(payments::admin_reconcile)
            .service(routes::money_audit::audit)
            .service(payments::admin_get)
            .service(payments::admin_refund);
    }
    // Reviews: fixed paths before `{review_id}`.
    {
        use routes::reviews;
        cfg.service(reviews::create)
            .service(reviews::of_user)
            .service(reviews::stats)
            .service(reviews::of_project)
            .service(reviews::of_project_reviewer)
            .service(reviews::respond)
            .service(reviews::edit_response)
            .service(reviews::publish)
            .service(reviews::hide)
            .service(reviews::get_one)
            .service(reviews::edit)
            .service(reviews::remove);
    }
    // Administrators on accounts.
    {
        use routes::admin_users as au;
        cfg.service(au::list)
            .service(au::get_one)
            .service(au::update)
            .service(au::remove)
            .service(au::set_status)
            .service(au::suspend)
            .service(au::change_password)
            .service(au::recontact)
            .service(au::set_roles)
            .service(au::deletion_request)
            .service(au::deletion_confirm);
    }
    // Administrators on a user's standing.
    cfg.service(routes::reputation::set_internal_rating)
        .service(routes::reputation::rating_history)
        .service(routes::reputation::get_reputation)
        .service(routes::reputation::suggest_level);
    // Disputes.
    cfg.service(routes::disputes::raise)
        .service(routes::disputes::latest)
        .service(routes::disputes::admin_list)
        .service(routes::disputes::admin_get)
        .service(routes::disputes::mediate)
        .service(routes::disputes::resolve);
    // Processor sandbox controls (404 unless the sandbox is the processor).
    cfg.service(routes::sandbox::confirm_payment_intent)
        .service(routes::sandbox::cancel_payment_intent)
        .service(routes::sandbox::set_balance)
        .service(routes::sandbox::dispute_charge)
        .service(routes::sandbox::update_dispute)
        .service(routes::sandbox::close_dispute)
        .service(routes::sandbox::fail_transfer)
        .service(routes::sandbox::payout)
        .service(routes::sandbox::update_account)
        .service(routes::sandbox::complete_onboarding)
        .service(routes::sandbox::ledger)
        .service(routes::sandbox::inject_failure)
        .service(routes::sandbox::resend_event)
        .service(routes::sandbox::events);
    // Platform metrics (`growth` is a fixed path of its own).
    cfg.service(routes::admin_metrics::overview)
        .service(routes::admin_metrics::growth_view);
    // DAC7 tax-reporting review.
    cfg.service(routes::dac7::summary)
        .service(routes::dac7::review)
        .service(routes::dac7::notify_experts)
        .service(routes::dac7::report);
    // End-to-end reset (404 unless enabled).
    cfg.service(routes::testing::reset_e2e);
    // CRM integration (issue 17): administrators, plus the signed inbound webhook.
    {
        use routes::crm;
        cfg.service(crm::sync_contact)
            .service(crm::create_opportunity)
            .service(crm::add_tags)
            .service(crm::contact_status)
            .service(crm::sync_logs)
            .service(crm::health_check)
            .service(crm::crm_tags)
            .service(crm::crm_diagnosis)
            .service(crm::crm_sync_tags)
            .service(crm::webhook);
    }
}

/// The answer for a request no route takes: 405 with `Allow` when the address is a route's
/// under another method, 404 otherwise.
pub async fn no_route(req: actix_web::HttpRequest, routes: web::Data<KnownRoutes>) -> HttpResponse {
    let allowed = routes.methods_at(req.path());
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
    def: actix_web::dev::ResourceDef,
    methods: Vec<&'static str>,
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
                .filter_map(|(name, op)| op.is_some().then_some(name))
                .collect();
                KnownRoute {
                    fixed_start: template.split('{').next().unwrap_or_default().to_owned(),
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
        for route in &self.0 {
            if path.starts_with(&route.fixed_start) && route.def.is_match(path) {
                for m in &route.methods {
                    if !methods.contains(m) {
                        methods.push(*m);
                    }
                }
            }
        }
        methods
    }
}

/// Extraction settings shared by every route (error shapes of DESIGN §6).
pub fn extractor_configs(cfg: &mut web::ServiceConfig) {
    cfg.app_data(error::extract::json_config())
        .app_data(error::extract::query_config())
        .app_data(error::extract::path_config());
}
