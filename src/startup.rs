//! Builds the running service from its settings: database, cache, mail, background jobs and
//! the HTTP server.

use actix_web::dev::Server;
use actix_web::middleware::{NormalizePath, TrailingSlash, from_fn};
use actix_web::{App, HttpServer, web};
use anyhow::Context as _;
use std::net::TcpListener;
use std::sync::Arc;
use utoipa::OpenApi as _;
use utoipa_actix_web::AppExt as _;

use crate::clock::Clock;
use crate::config::Settings;
use crate::domain::access_token::AccessTokens;
use crate::integrations::{cache, crm, mail, processor};
use crate::state::{AppState, KeyedActors};
use crate::store::Db;
use crate::store::kept_projects::{self, KeptProjects};
use crate::workflows::crm::CrmService;
use crate::workflows::emails::MailSender;
use crate::workflows::kept_projects::ProjectTokens;
use crate::workflows::outbox::Dispatcher;
use crate::{background, http};

/// A built service, bound to its port, not yet serving.
pub struct Application {
    port: u16,
    server: Server,
    state: AppState,
}

impl Application {
    /// Opens every dependency and binds the listener (port 0 picks a free one).
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        Self::build_with_clock(settings, Clock::system()).await
    }

    pub async fn build_with_clock(mut settings: Settings, clock: Clock) -> anyhow::Result<Self> {
        settings
            .resolve_jwt_secret()
            .context("cannot keep the development JWT secret under DATA_DIR")?;
        let settings = Arc::new(settings);

        let (target, pool_size, timeout) = (
            &settings.database,
            settings.database_max_connections,
            settings.database_statement_timeout,
        );
        let db = if settings.migrate_on_start {
            Db::connect_tuned(target, pool_size, timeout).await
        } else {
            Db::connect_migrated(target, pool_size, timeout).await
        }
        .context("cannot open the database")?;
        let cache = cache::connect_prefixed(
            settings.redis_url.as_ref().map(|s| s.expose()),
            &settings.cache_prefix,
        )
        .await
        .context("cannot reach the cache (REDIS_URL)")?;
        // Project rows are kept where every instance reads the same tokens: one shared cache,
        // or SQLite's one instance. Told after each commit which it wrote, before answering.
        let kept_projects = (cache.backend() == "redis" || db.engine() == "sqlite").then(|| {
            let kept = Arc::new(KeptProjects::holding(kept_projects::MAX_ROWS));
            db.watch_commits(Arc::new(ProjectTokens {
                kept: kept.clone(),
                cache: cache.clone(),
            }));
            kept
        });
        let mailer = build_mailer(&settings)?;
        let processor = Arc::new(
            processor::connect_with_clock(&settings, clock.clone())
                .await
                .context("cannot set up the payment processor")?,
        );
        let crm_setup = Arc::new(
            crm::connect(&settings, clock.clone())
                .await
                .context("cannot set up the CRM")?,
        );
        let jobs = actors::Jobs::default();
        let realtime = crate::integrations::realtime::Realtime::start(cache.clone())
            .await
            .context("cannot subscribe to the real-time channel")?;
        let drains = background::start_drains(
            &jobs,
            CrmService::new(
                db.clone(),
                clock.clone(),
                settings.clone(),
                crm_setup.clone(),
            ),
            MailSender::new(
                db.clone(),
                clock.clone(),
                mailer.clone(),
                settings.invoice_verify_url.clone(),
            ),
            |crm, mail_sender| {
                Dispatcher::new(
                    db.clone(),
                    clock.clone(),
                    vec![
                        Arc::new(
                            crate::workflows::notify::NotificationConsumer::new(
                                db.clone(),
                                clock.clone(),
                            )
                            .pushing_to(realtime.clone()),
                        ) as Arc<dyn crate::workflows::outbox::Consumer>,
                        Arc::new(crate::workflows::emails::EmailConsumer::new(
                            db.clone(),
                            clock.clone(),
                            mail_sender.clone(),
                        )),
                        Arc::new(crate::workflows::crm::CrmConsumer::new(crm.clone())),
                        Arc::new(crate::workflows::webhooks::WebhookConsumer::new(
                            db.clone(),
                            clock.clone(),
                            Arc::new(http::routes::webhook_deliveries::RestViews),
                            jobs.clone(),
                        )),
                    ],
                )
            },
        );

        let sockets = socket_registry(&settings, cache.clone(), clock.clone());
        let state = AppState {
            tokens: Arc::new(access_tokens(&settings)),
            settings: settings.clone(),
            db,
            cache,
            mailer,
            clock,
            outbox: drains.outbox,
            mail_sender: drains.mail_sender,
            processor,
            project_actors: KeyedActors(actors::Registry::new(
                "project",
                actors::RegistryConfig::default(),
            )),
            payment_actors: KeyedActors(actors::Registry::new(
                "payment",
                actors::RegistryConfig::default(),
            )),
            chat_rooms: actors::Registry::new(
                crate::workflows::chat::ROOM_ACTORS,
                actors::RegistryConfig::default(),
            ),
            // Past this many waiting in one room, a post is answered 503.
            chat_posts: Arc::new(crate::state::Lines::new(2_500)),
            // A room's actor waits for its group's commit, so at most one group per room
            // waits here.
            chat_commits: Arc::new(crate::state::Combining::new(usize::MAX)),
            chat_groups: Arc::default(),
            jobs,
            crm: crm_setup,
            crm_worker: drains.crm.worker(),
            webhook_http: Arc::new(webhook_http(&settings)?),
            realtime,
            sockets,
            sessions: Arc::default(),
            public_projects: Arc::default(),
            kept_projects,
            expert_directory: Arc::default(),
            curation_candidates: Arc::default(),
            account_searches: Arc::default(),
            project_search_counts: Arc::default(),
            backfills: Default::default(),
            // Past this many waiting in a lane, a stored event is left to the sweep.
            processor_events: Arc::new(
                (0..crate::workflows::processor_events::LANES)
                    .map(|_| crate::state::Queue::new(2_500))
                    .collect(),
            ),
            // Past this many waiting to be stored, a receipt is answered 503 (the processor
            // delivers it again).
            processor_receipts: Arc::new(crate::state::Queue::new(2_500)),
            readiness: Arc::default(),
        };
        background::start_all(&state);

        let listener = match TcpListener::bind(settings.bind_addr) {
            Ok(listener) => listener,
            Err(err) => {
                state.processor.stop().await;
                state.crm.stop().await;
                return Err(err).with_context(|| format!("cannot bind {}", settings.bind_addr));
            }
        };
        let local = listener.local_addr()?;
        let port = local.port();
        if let Some(sandbox) = &state.processor.sandbox {
            // The sandbox delivers its events to this instance's receiver.
            sandbox.set_webhook_target(format!(
                "http://{}/api/payments/webhooks/processor",
                reachable_address(local)
            ));
        }
        let server = run(listener, state.clone(), settings.workers)?;
        Ok(Self {
            port,
            server,
            state,
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// A handle that stops the server.
    pub fn server_handle(&self) -> actix_web::dev::ServerHandle {
        self.server.handle()
    }

    /// Serves until SIGTERM (or SIGINT), then stops without dropping anyone: `/ready` answers
    /// 503 and every WebSocket is closed with 1001 (clients reconnect elsewhere) while
    /// requests are still served for `SHUTDOWN_DRAIN_SECONDS`; then the listener closes and
    /// requests under way get `SHUTDOWN_TIMEOUT_SECONDS` to finish; then the jobs stop (a
    /// job's claims are leases: whatever one held is taken up again by another instance when
    /// they lapse). A second signal stops at once; nothing is lost either way, since every
    /// change commits whole or not at all and every claim lapses.
    pub async fn run_until_signalled(self) -> std::io::Result<()> {
        let server = self.server.handle();
        let state = self.state.clone();
        actix_web::rt::spawn(async move { drain_on_signal(state, server).await });
        self.run_until_stopped().await
    }

    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        let result = self.server.await;
        self.state.jobs.stop_all();
        self.state.processor.stop().await;
        self.state.crm.stop().await;
        result
    }
}

/// The stopping sequence of [`Application::run_until_signalled`].
async fn drain_on_signal(state: AppState, server: actix_web::dev::ServerHandle) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut terminate), Ok(mut interrupt)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot listen for signals; stop the service with SIGKILL");
        return;
    };
    let mut next_signal = async move || {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
    };
    next_signal().await;
    let (drain, timeout) = (
        state.settings.shutdown_drain,
        state.settings.shutdown_timeout,
    );
    tracing::info!(
        drain_seconds = drain.as_secs(),
        timeout_seconds = timeout.as_secs(),
        "stopping: draining (a second signal stops at once)"
    );
    state.readiness.drain();
    tokio::select! {
        () = tokio::time::sleep(drain) => {}
        () = next_signal() => return server.stop(false).await,
    }
    tracing::info!("stopping: no new connections; finishing the requests under way");
    tokio::select! {
        () = server.stop(true) => tracing::info!("stopped"),
        () = next_signal() => server.stop(false).await,
    }
}

/// The address a local client reaches a listener on: loopback when it listens on every
/// interface.
fn reachable_address(local: std::net::SocketAddr) -> std::net::SocketAddr {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    match local.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => (Ipv4Addr::LOCALHOST, local.port()).into(),
        IpAddr::V6(ip) if ip.is_unspecified() => (Ipv6Addr::LOCALHOST, local.port()).into(),
        _ => local,
    }
}

/// The WebSockets' caps: per account and per address from the settings, per process from
/// `WS_MAX_SOCKETS` or else from the open-files limit, raised first as far as it goes.
fn socket_registry(
    settings: &Settings,
    cache: Arc<dyn cache::Cache>,
    clock: Clock,
) -> Arc<crate::integrations::socket_registry::SocketRegistry> {
    use crate::domain::realtime_limits::{default_process_cap, socket_lease};
    let soft_limit = raise_open_files_limit();
    let process = settings
        .ws_max_sockets
        .unwrap_or_else(|| default_process_cap(soft_limit));
    if let Some(limit) = soft_limit
        && u64::from(process) >= limit
    {
        tracing::warn!(
            ws_max_sockets = process,
            open_files_limit = limit,
            "WS_MAX_SOCKETS is not below the open-files limit: accept() may fail before it refuses"
        );
    }
    let caps = crate::integrations::socket_registry::SocketCaps {
        per_account: settings.ws_max_sockets_per_user,
        per_address: settings.ws_max_sockets_per_address,
        process,
    };
    tracing::info!(
        per_account = caps.per_account,
        per_address = caps.per_address,
        process = caps.process,
        "WebSocket caps"
    );
    crate::integrations::socket_registry::SocketRegistry::new(
        cache,
        clock,
        caps,
        socket_lease(settings.ws_ping_interval),
    )
}

/// Raises this process's soft limit of open files to its hard limit (both logged) and
/// answers the soft limit in force; `None` when it cannot be read.
#[cfg(unix)]
fn raise_open_files_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` only writes the struct it is given, which lives on this stack.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        tracing::warn!(error = %std::io::Error::last_os_error(), "open-files limit unreadable");
        return None;
    }
    #[allow(clippy::useless_conversion)] // `rlim_t` is not `u64` on every platform.
    let (soft, hard) = (u64::from(limit.rlim_cur), u64::from(limit.rlim_max));
    if soft >= hard {
        tracing::info!(soft, hard, "open-files limit");
        return Some(soft);
    }
    let raised = libc::rlimit {
        rlim_cur: limit.rlim_max,
        rlim_max: limit.rlim_max,
    };
    // SAFETY: `setrlimit` only reads the struct it is given.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
        // macOS refuses a soft limit above OPEN_MAX even under a higher hard limit.
        tracing::warn!(
            soft,
            hard,
            error = %std::io::Error::last_os_error(),
            "open-files soft limit not raised"
        );
        return Some(soft);
    }
    tracing::info!(
        soft_before = soft,
        soft = hard,
        hard,
        "open-files soft limit raised"
    );
    Some(hard)
}

#[cfg(not(unix))]
fn raise_open_files_limit() -> Option<u64> {
    None
}

fn webhook_http(
    settings: &Settings,
) -> anyhow::Result<crate::integrations::webhook_http::WebhookHttp> {
    let ca = match &settings.webhook_ca_file {
        Some(path) => Some(
            std::fs::read(path)
                .with_context(|| format!("cannot read WEBHOOK_CA_FILE {}", path.display()))?,
        ),
        None => None,
    };
    crate::integrations::webhook_http::WebhookHttp::new(
        settings.webhook_allow_private_targets,
        ca.as_deref(),
    )
    .context("invalid WEBHOOK_CA_FILE")
}

fn access_tokens(settings: &Settings) -> AccessTokens {
    let secret = settings
        .jwt_secret
        .as_ref()
        .map(|s| s.expose().as_bytes().to_vec())
        .unwrap_or_default();
    AccessTokens::new(
        &secret,
        chrono::Duration::minutes(i64::from(settings.jwt_access_expire_minutes)),
        chrono::Duration::days(i64::from(settings.jwt_refresh_expire_days)),
    )
}

fn build_mailer(settings: &Settings) -> anyhow::Result<mail::Mailer> {
    let transport: Arc<dyn mail::MailTransport> = match &settings.smtp_url {
        Some(url) => {
            Arc::new(mail::SmtpTransport::from_url(url.expose()).context("invalid SMTP_URL")?)
        }
        None => Arc::new(mail::FileOutbox::new(settings.mail_outbox_dir.clone())),
    };
    Ok(mail::Mailer::new(
        transport,
        settings.mail_from.clone(),
        settings.frontend_url.clone(),
    )?)
}

/// The OpenAPI document of every mounted route, as `/openapi.json` serves it.
pub fn openapi_document() -> utoipa::openapi::OpenApi {
    let (_, api) = App::new()
        .into_utoipa_app()
        .openapi(http::ApiDoc::openapi())
        .configure(http::configure)
        .split_for_parts();
    let mut api = api;
    http::openapi::complete(&mut api);
    api
}

fn run(listener: TcpListener, state: AppState, workers: Option<usize>) -> anyhow::Result<Server> {
    // After a WebSocket's close frame (or any response that ends the connection) the server
    // keeps reading, and discarding, until the client closes: a client that comes back to its
    // socket late answers the ping it had not read, and that must not meet a reset that loses
    // the close frame and its reason. actix's default linger is 1 s; a pong-less socket is
    // closed after three ping intervals, so the same span (at most 30 s) covers it. A client
    // later than that finds a single ping before the close frame (`http::ws` never sends a
    // second one unanswered): its one pong meets the reset, and the close frame, already in
    // its buffer, is still read.
    let linger = (state.settings.ws_ping_interval * 3).min(std::time::Duration::from_secs(30));
    let shutdown_timeout = state.settings.shutdown_timeout;
    let data = web::Data::new(state);
    let http_metrics = web::Data::new(http::metrics::HttpMetrics::default());
    let openapi = web::Data::new(openapi_document());
    let known_routes = web::Data::new(http::KnownRoutes::new(&openapi));
    let frontend_url = data.settings.frontend_url.clone();
    let mut server = HttpServer::new(move || {
        let (app, _) = App::new()
            .into_utoipa_app()
            .openapi(http::ApiDoc::openapi())
            .configure(http::configure)
            .split_for_parts();
        app.app_data(data.clone())
            .app_data(http_metrics.clone())
            .app_data(openapi.clone())
            .app_data(known_routes.clone())
            .configure(http::extractor_configs)
            .default_service(web::to(http::no_route))
            // Outermost last: the request context sees the final status of everything inside.
            .wrap(from_fn(http::idempotency::idempotent))
            .wrap(from_fn(http::text_guard::refuse_forbidden_text))
            .wrap(from_fn(http::rate_limit::global_limit))
            .wrap(NormalizePath::new(TrailingSlash::Trim))
            .wrap(http::cors::allow_list(&frontend_url))
            .wrap(from_fn(http::middleware::request_context))
    })
    .client_disconnect_timeout(linger)
    .on_connect(http::half_close::remember)
    // Signals are the service's own (`Application::run_until_signalled`): it drains first.
    .disable_signals()
    .shutdown_timeout(shutdown_timeout.as_secs())
    .listen(listener)?;
    if let Some(workers) = workers {
        server = server.workers(workers);
    }
    Ok(server.run())
}
