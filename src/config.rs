//! Configuration from the environment (and `.env`), with the names and defaults of
//! DESIGN §7 and §9. Parsing is a pure function of a variable lookup so it can be tested
//! without touching the process environment.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// The shortest secret a client presents over HTTP (`METRICS_TOKEN`, `CRM_WEBHOOK_SECRET`,
/// `TEST_RESET_TOKEN`): 16 characters are out of reach of guessing at any request rate.
pub const MIN_SHARED_SECRET: usize = 16;

/// A configuration value that cannot be used; the message names the variable.
#[derive(Debug, thiserror::Error)]
#[error("invalid configuration: {var}: {message}")]
pub struct ConfigError {
    pub var: &'static str,
    pub message: String,
}

fn invalid(var: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError {
        var,
        message: message.into(),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppEnv {
    Development,
    Production,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Pretty,
    Json,
}

/// Where the service keeps its relational data.
#[derive(Clone, PartialEq, Eq)]
pub enum DatabaseTarget {
    /// A PostgreSQL URL (`postgres://…`).
    Postgres(String),
    /// An SQLite database file.
    Sqlite(PathBuf),
}

impl std::fmt::Debug for DatabaseTarget {
    // The URL may carry a password: show only the engine.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Postgres(_) => f.write_str("Postgres(<url>)"),
            Self::Sqlite(path) => write!(f, "Sqlite({})", path.display()),
        }
    }
}

/// Every setting of the service. Secrets are kept in [`Secret`] so they never print.
#[derive(Debug, Clone)]
pub struct Settings {
    pub bind_addr: SocketAddr,
    pub data_dir: PathBuf,
    pub database: DatabaseTarget,
    pub redis_url: Option<Secret>,
    /// Prefix of every cache key and channel, so several deployments can share one Redis.
    pub cache_prefix: String,
    pub smtp_url: Option<Secret>,
    pub mail_from: String,
    pub mail_outbox_dir: PathBuf,
    pub uploads_dir: PathBuf,
    pub frontend_url: String,
    pub app_env: AppEnv,
    pub cookie_domain: Option<String>,
    /// `None` in development until [`Settings::resolve_jwt_secret`] loads or creates one.
    pub jwt_secret: Option<Secret>,
    pub jwt_access_expire_minutes: u32,
    pub jwt_refresh_expire_days: u32,
    pub max_concurrent_sessions: u32,
    pub rate_limit_per_minute: u32,
    pub login_max_attempts_per_user: u32,
    pub login_max_attempts_per_ip: u32,
    pub login_window_seconds: u32,
    pub bcrypt_cost: u32,
    pub processor_secret_key: Option<Secret>,
    pub processor_publishable_key: Option<String>,
    pub processor_webhook_secret: Option<Secret>,
    pub processor_api_base: Option<String>,
    /// Hours before an authorisation lapses at which held payments are reported and, with
    /// `capture_before_expiry`, captured into the platform balance.
    pub authorisation_margin_hours: u32,
    pub capture_before_expiry: bool,
    pub crm_api_key: Option<Secret>,
    pub crm_api_base: Option<String>,
    pub crm_webhook_secret: Option<Secret>,
    pub crm_retry_enabled: bool,
    pub crm_retry_interval_minutes: u32,
    /// The CRM location (sub-account) every contact lives in.
    pub crm_location_id: Option<String>,
    /// The `Version` header of CRM calls.
    pub crm_api_version: String,
    /// The pipeline opportunities are created in.
    pub crm_pipeline_id: Option<String>,
    /// Whether internal rating changes are written to the contact's `internal_rating` field.
    pub crm_sync_internal_rating: bool,
    pub enable_test_reset_endpoint: bool,
    /// `ENABLE_API_DOCS` (default on, off with `APP_ENV=production`): the reference page at
    /// `/docs`.
    pub enable_api_docs: bool,
    pub test_reset_token: Option<Secret>,
    /// WebSocket ping interval (`WS_PING_SECONDS`, default 10); a socket without a pong for
    /// three intervals is closed, and its session is checked again at every ping.
    pub ws_ping_interval: std::time::Duration,
    /// `WS_MAX_SOCKETS_PER_USER` (default 10): live WebSockets per account, both kinds
    /// together, on every instance; past it a new upgrade is refused with 429 (no live socket
    /// is closed for it: see `integrations::socket_registry`).
    pub ws_max_sockets_per_user: u32,
    /// `WS_MAX_SOCKETS_PER_ADDRESS` (default ten times the per-account cap): live WebSockets
    /// per client address (an IPv6 /64), on every instance; 429 past it.
    pub ws_max_sockets_per_address: u32,
    /// `WS_MAX_SOCKETS`: WebSockets this process holds at most (503 past it). Unset, start-up
    /// derives it from the open-files limit (`domain::realtime_limits::default_process_cap`).
    pub ws_max_sockets: Option<u32>,
    /// `CHAT_MESSAGES_PER_MINUTE` (default 60): the budget of chat messages per account, REST
    /// posts and socket frames together, on every instance.
    pub chat_messages_per_minute: u32,
    /// `CHAT_EMAIL_DIGEST_MINUTES` (default 15): a chat participant not connected to the room
    /// gets at most one new-message e-mail per room in this window.
    pub chat_email_digest: chrono::Duration,
    /// `IDEMPOTENCY_KEY_HOURS` (default 24): how long an `Idempotency-Key` and its answer are
    /// kept; a retry after that runs as a new request.
    pub idempotency_key_ttl: chrono::Duration,
    /// `NOTIFICATION_RETENTION_DAYS` (default 90, 0 to keep them): read notifications older
    /// than this (by when they were read) are pruned daily; unread ones are always kept.
    pub notification_retention: Option<chrono::Duration>,
    /// `EVENT_RETENTION_DAYS` (default 30, 0 to keep them, else at least 30): outbox events
    /// every consumer has had (and whose e-mails are sent) are pruned daily once this old.
    pub event_retention: Option<chrono::Duration>,
    /// `CRM_SYNC_LOG_RETENTION_DAYS` (default 90, 0 to keep them): CRM sync log entries are
    /// pruned daily once this old, except those still to be retried and each user's newest
    /// entry naming their CRM contact.
    pub crm_sync_log_retention: Option<chrono::Duration>,
    /// Pool size (`DATABASE_MAX_CONNECTIONS`); the engine's default when unset.
    pub database_max_connections: Option<u32>,
    /// `DATABASE_STATEMENT_TIMEOUT_SECONDS` (default 10, 0 for none): the database cancels a
    /// statement running longer (PostgreSQL's `statement_timeout`, SQLite's progress handler),
    /// and the request gets 503 `QUERY_TIMEOUT`. Migrations run without it.
    pub database_statement_timeout: Option<std::time::Duration>,
    /// `MIGRATE_ON_START`: whether `serve` applies the pending migrations before it listens.
    /// Default: on for SQLite (one process owns the file) and in development; off for
    /// PostgreSQL under `APP_ENV=production`, where other instances of an older version may
    /// be serving the database and `marketplace migrate` is the upgrade's own step. Off, `serve`
    /// refuses a database missing any migration it knows.
    pub migrate_on_start: bool,
    /// When set, `/metrics` answers only with `Authorization: Bearer <token>`.
    pub metrics_token: Option<Secret>,
    pub log_format: LogFormat,
    pub workers: Option<usize>,
    /// `SHUTDOWN_DRAIN_SECONDS` (default 5): after SIGTERM the instance answers `/ready` 503
    /// and closes its WebSockets, but keeps serving this long, so the load balancer's checks
    /// see it draining before it stops listening.
    pub shutdown_drain: std::time::Duration,
    /// `SHUTDOWN_TIMEOUT_SECONDS` (default 30): then, no new connections, and requests under
    /// way get this long to finish.
    pub shutdown_timeout: std::time::Duration,
    /// `REVIEW_BLIND_DAYS`: a review is revealed this long after its project ended, if the
    /// counterpart has not reviewed before.
    pub review_blind_window: chrono::Duration,
    /// `AUTO_APPROVE_DAYS`: a submitted delivery left unreviewed this long is approved.
    pub auto_approve_after: chrono::Duration,
    /// `DISPUTE_RESPONSE_DAYS`: an expert's dispute unanswered this long is escalated.
    pub dispute_response_within: chrono::Duration,
    /// `FUNDING_REMINDER_DAYS`: a milestone awaiting payment this long reminds the company.
    pub funding_reminder_after: chrono::Duration,
    /// `WEBHOOK_ALLOW_PRIVATE_TARGETS`: user webhooks may reach loopback and private ranges
    /// (development and tests); link-local and metadata addresses stay refused.
    pub webhook_allow_private_targets: bool,
    /// `WEBHOOK_CA_FILE`: one more trusted root (PEM) for webhook receivers.
    pub webhook_ca_file: Option<PathBuf>,
    /// `WEBHOOK_SECRET_ROTATION_HOURS` (default 24, 0–720): how long a regenerated webhook
    /// secret still signs deliveries beside the new one; zero ends it at once.
    pub webhook_secret_rotation: chrono::Duration,
    /// `TRUSTED_PROXIES`: address blocks (comma-separated, e.g. `10.0.0.0/8,::1`) whose
    /// `Forwarded`/`X-Forwarded-For` headers are believed for rate limits and logs. Empty by
    /// default: the connected peer is the client.
    pub trusted_proxies: Vec<crate::domain::client_address::Cidr>,
    /// `INVOICE_VAT_RATE` (percent, at most 2 decimals; default 21): the domestic VAT rate of
    /// the invoices, in basis points.
    pub invoice_vat_rate_bp: i64,
    /// The platform's fiscal identity on its commission invoices (`PLATFORM_FISCAL_*`).
    pub platform_fiscal: PlatformFiscal,
    /// `INVOICE_VERIFY_URL` (default `FRONTEND_URL` + `/invoices/verify`): the page an
    /// invoice's QR code opens, given `number` and `hash`; it asks
    /// `GET /api/invoices/verify`.
    pub invoice_verify_url: String,
}

/// The platform as an invoice issuer: `PLATFORM_FISCAL_NAME`, `_TAX_ID`, `_ADDRESS`,
/// `_POSTAL_CODE`, `_CITY`, `_COUNTRY` (ISO code). The defaults name a development identity;
/// production must set its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlatformFiscal {
    pub name: String,
    pub tax_id: String,
    pub address: String,
    pub postal_code: String,
    pub city: String,
    pub country: String,
}

/// A secret string: compared and used, never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<secret>")
    }
}

impl Settings {
    /// Reads `.env` (if present) and the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        // A missing .env is normal; a malformed one is worth a word but not a refusal.
        if let Err(err) = dotenvy::dotenv()
            && !err.not_found()
        {
            eprintln!("warning: .env not read: {err}");
        }
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Parses settings from any lookup of variable names (the environment, or a map in tests).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let get = |name: &str| {
            lookup(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };

        let app_env = match get("APP_ENV").as_deref() {
            None | Some("development") | Some("dev") | Some("test") => AppEnv::Development,
            Some("production") | Some("prod") => AppEnv::Production,
            Some(other) => {
                return Err(invalid(
                    "APP_ENV",
                    format!("expected `development` or `production`, got `{other}`"),
                ));
            }
        };

        let data_dir = PathBuf::from(get("DATA_DIR").unwrap_or_else(|| "data".into()));
        let bind_addr = match get("BIND_ADDR") {
            None => SocketAddr::from(([127, 0, 0, 1], 8080)),
            Some(v) => v
                .parse()
                .map_err(|_| invalid("BIND_ADDR", format!("expected host:port, got `{v}`")))?,
        };
        let database = match get("DATABASE_URL") {
            None => DatabaseTarget::Sqlite(data_dir.join("marketplace.db")),
            Some(url) => parse_database_url(&url)?,
        };
        let redis_url = get("REDIS_URL")
            .map(|v| check_url("REDIS_URL", &v, &["redis", "rediss"]).map(|_| Secret(v)))
            .transpose()?;
        let smtp_url = get("SMTP_URL")
            .map(|v| check_url("SMTP_URL", &v, &["smtp", "smtps"]).map(|_| Secret(v)))
            .transpose()?;
        let frontend_url = get("FRONTEND_URL").unwrap_or_else(|| "http://localhost:3000".into());
        check_url("FRONTEND_URL", &frontend_url, &["http", "https"])?;
        let processor_api_base = get("PROCESSOR_API_BASE");
        if let Some(base) = &processor_api_base {
            check_url("PROCESSOR_API_BASE", base, &["http", "https"])?;
        }
        let crm_api_base = get("CRM_API_BASE");
        if let Some(base) = crm_api_base.as_deref().filter(|b| *b != "sandbox") {
            check_url("CRM_API_BASE", base, &["http", "https"])?;
        }

        let jwt_secret = get("JWT_SECRET").map(Secret);
        if let Some(secret) = &jwt_secret
            && secret.0.len() < 32
        {
            return Err(invalid("JWT_SECRET", "must be at least 32 characters"));
        }
        if app_env == AppEnv::Production && jwt_secret.is_none() {
            return Err(invalid(
                "JWT_SECRET",
                "required when APP_ENV=production (refusing to start with a generated secret)",
            ));
        }

        // The sandboxes' controls are unauthenticated by design: never in production.
        if app_env == AppEnv::Production && get("PROCESSOR_SECRET_KEY").is_none() {
            return Err(invalid(
                "PROCESSOR_SECRET_KEY",
                "required when APP_ENV=production (the processor sandbox is for development)",
            ));
        }
        if app_env == AppEnv::Production && get("CRM_API_BASE").as_deref() == Some("sandbox") {
            return Err(invalid(
                "CRM_API_BASE",
                "`sandbox` is for development, not APP_ENV=production",
            ));
        }

        let number = |name: &'static str, default: u32, min: u32, max: u32| match get(name) {
            None => Ok(default),
            Some(v) => match v.parse::<u32>() {
                Ok(n) if (min..=max).contains(&n) => Ok(n),
                _ => Err(invalid(
                    name,
                    format!("expected a whole number from {min} to {max}, got `{v}`"),
                )),
            },
        };
        let flag = |name: &'static str, default: bool| match get(name).as_deref() {
            None => Ok(default),
            Some("1" | "true" | "yes" | "on" | "TRUE" | "True") => Ok(true),
            Some("0" | "false" | "no" | "off" | "FALSE" | "False") => Ok(false),
            Some(v) => Err(invalid(name, format!("expected true or false, got `{v}`"))),
        };
        // Shared secrets a stranger may guess at over HTTP: as long as the reset token's.
        for var in ["METRICS_TOKEN", "CRM_WEBHOOK_SECRET"] {
            if get(var).is_some_and(|t| !t.is_empty() && t.chars().count() < MIN_SHARED_SECRET) {
                return Err(invalid(var, "must be at least 16 characters"));
            }
        }
        // Private targets open loopback and the internal network to every user's webhooks.
        if app_env == AppEnv::Production && flag("WEBHOOK_ALLOW_PRIVATE_TARGETS", false)? {
            return Err(invalid(
                "WEBHOOK_ALLOW_PRIVATE_TARGETS",
                "is for development and tests, never APP_ENV=production",
            ));
        }
        let reset_enabled = flag("ENABLE_TEST_RESET_ENDPOINT", false)?;
        if reset_enabled && app_env == AppEnv::Production {
            return Err(invalid(
                "ENABLE_TEST_RESET_ENDPOINT",
                "the end-to-end reset empties the database: never with APP_ENV=production",
            ));
        }
        if reset_enabled
            && get("TEST_RESET_TOKEN").is_none_or(|t| t.chars().count() < MIN_SHARED_SECRET)
        {
            return Err(invalid(
                "TEST_RESET_TOKEN",
                "required (at least 16 characters) when ENABLE_TEST_RESET_ENDPOINT=true",
            ));
        }

        let log_format = match get("LOG_FORMAT").as_deref() {
            None | Some("pretty") | Some("text") => LogFormat::Pretty,
            Some("json") => LogFormat::Json,
            Some(v) => {
                return Err(invalid(
                    "LOG_FORMAT",
                    format!("expected `pretty` or `json`, got `{v}`"),
                ));
            }
        };
        let workers = match get("WORKERS") {
            None => None,
            Some(_) => Some(number("WORKERS", 0, 1, 256)? as usize),
        };

        let ws_max_sockets_per_user = number(
            "WS_MAX_SOCKETS_PER_USER",
            crate::domain::realtime_limits::DEFAULT_SOCKETS_PER_ACCOUNT,
            1,
            1_000_000,
        )?;

        let days = |name: &'static str, default: i64| match get(name) {
            None => Ok(chrono::Duration::days(default)),
            Some(v) => parse_days(&v).ok_or_else(|| {
                invalid(
                    name,
                    format!("expected a number of days above 0 and up to 365, got `{v}`"),
                )
            }),
        };

        let migrate_on_start = flag(
            "MIGRATE_ON_START",
            matches!(database, DatabaseTarget::Sqlite(_)) || app_env == AppEnv::Development,
        )?;
        Ok(Self {
            bind_addr,
            mail_outbox_dir: get("MAIL_OUTBOX_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| data_dir.join("outbox")),
            uploads_dir: get("UPLOADS_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| data_dir.join("uploads")),
            data_dir,
            database,
            redis_url,
            cache_prefix: get("CACHE_PREFIX").unwrap_or_else(|| "mkt:".into()),
            smtp_url,
            mail_from: get("MAIL_FROM")
                .unwrap_or_else(|| "Marketplace <no-reply@marketplace.local>".into()),
            frontend_url: frontend_url.trim_end_matches('/').to_owned(),
            app_env,
            cookie_domain: get("COOKIE_DOMAIN"),
            jwt_secret,
            jwt_access_expire_minutes: number("JWT_ACCESS_EXPIRE_MINUTES", 15, 1, 24 * 60)?,
            jwt_refresh_expire_days: number("JWT_REFRESH_EXPIRE_DAYS", 7, 1, 365)?,
            max_concurrent_sessions: number("MAX_CONCURRENT_SESSIONS", 10, 1, 10_000)?,
            rate_limit_per_minute: number("RATE_LIMIT_PER_MINUTE", 60, 0, 1_000_000)?,
            login_max_attempts_per_user: number(
                "LOGIN_RATE_LIMIT_MAX_ATTEMPTS_PER_USER",
                5,
                1,
                1_000_000,
            )?,
            login_max_attempts_per_ip: number(
                "LOGIN_RATE_LIMIT_MAX_ATTEMPTS_PER_IP",
                20,
                1,
                1_000_000,
            )?,
            login_window_seconds: number("LOGIN_RATE_LIMIT_WINDOW_SECONDS", 60, 1, 86_400)?,
            bcrypt_cost: number("BCRYPT_COST", 12, 4, 31)?,
            processor_secret_key: get("PROCESSOR_SECRET_KEY").map(Secret),
            processor_publishable_key: get("PROCESSOR_PUBLISHABLE_KEY"),
            processor_webhook_secret: get("PROCESSOR_WEBHOOK_SECRET").map(Secret),
            processor_api_base,
            authorisation_margin_hours: number("AUTHORISATION_MARGIN_HOURS", 24, 1, 24 * 30)?,
            capture_before_expiry: flag("CAPTURE_BEFORE_EXPIRY", true)?,
            crm_api_key: get("CRM_API_KEY").map(Secret),
            crm_api_base,
            crm_webhook_secret: get("CRM_WEBHOOK_SECRET").map(Secret),
            crm_retry_enabled: flag("CRM_RETRY_ENABLED", true)?,
            crm_retry_interval_minutes: number("CRM_RETRY_INTERVAL_MINUTES", 30, 1, 10_080)?,
            crm_location_id: get("CRM_LOCATION_ID"),
            crm_api_version: get("CRM_API_VERSION").unwrap_or_else(|| "2021-07-28".into()),
            crm_pipeline_id: get("CRM_PIPELINE_ID"),
            crm_sync_internal_rating: flag("CRM_SYNC_INTERNAL_RATING", true)?,
            enable_test_reset_endpoint: reset_enabled,
            enable_api_docs: flag("ENABLE_API_DOCS", app_env != AppEnv::Production)?,
            shutdown_drain: std::time::Duration::from_secs(u64::from(number(
                "SHUTDOWN_DRAIN_SECONDS",
                5,
                0,
                600,
            )?)),
            shutdown_timeout: std::time::Duration::from_secs(u64::from(number(
                "SHUTDOWN_TIMEOUT_SECONDS",
                30,
                1,
                600,
            )?)),
            ws_ping_interval: std::time::Duration::from_secs(u64::from(number(
                "WS_PING_SECONDS",
                10,
                1,
                60,
            )?)),
            ws_max_sockets_per_user,
            ws_max_sockets_per_address: number(
                "WS_MAX_SOCKETS_PER_ADDRESS",
                ws_max_sockets_per_user
                    .saturating_mul(crate::domain::realtime_limits::ADDRESS_CAP_PER_ACCOUNT_CAP),
                1,
                10_000_000,
            )?,
            ws_max_sockets: match get("WS_MAX_SOCKETS") {
                None => None,
                Some(_) => Some(number("WS_MAX_SOCKETS", 0, 1, 10_000_000)?),
            },
            chat_messages_per_minute: number("CHAT_MESSAGES_PER_MINUTE", 60, 1, 1_000_000)?,
            chat_email_digest: chrono::Duration::minutes(i64::from(number(
                "CHAT_EMAIL_DIGEST_MINUTES",
                15,
                1,
                10_080,
            )?)),
            idempotency_key_ttl: chrono::Duration::hours(i64::from(number(
                "IDEMPOTENCY_KEY_HOURS",
                24,
                1,
                24 * 30,
            )?)),
            database_max_connections: match get("DATABASE_MAX_CONNECTIONS") {
                None => None,
                Some(v) => match v.parse::<u32>() {
                    Ok(n) if (1..=1000).contains(&n) => Some(n),
                    _ => {
                        return Err(invalid(
                            "DATABASE_MAX_CONNECTIONS",
                            "must be a whole number from 1 to 1000",
                        ));
                    }
                },
            },
            notification_retention: match number("NOTIFICATION_RETENTION_DAYS", 90, 0, 3650)? {
                0 => None,
                days => Some(chrono::Duration::days(i64::from(days))),
            },
            event_retention: match number("EVENT_RETENTION_DAYS", 30, 0, 3650)? {
                0 => None,
                days if days < 30 => {
                    return Err(invalid(
                        "EVENT_RETENTION_DAYS",
                        format!(
                            "expected 0 (keep them) or at least 30 days, the webhook event log \
                             receivers catch up from, got `{days}`"
                        ),
                    ));
                }
                days => Some(chrono::Duration::days(i64::from(days))),
            },
            crm_sync_log_retention: match number("CRM_SYNC_LOG_RETENTION_DAYS", 90, 0, 3650)? {
                0 => None,
                days => Some(chrono::Duration::days(i64::from(days))),
            },
            migrate_on_start,
            database_statement_timeout: match number(
                "DATABASE_STATEMENT_TIMEOUT_SECONDS",
                10,
                0,
                3600,
            )? {
                0 => None,
                seconds => Some(std::time::Duration::from_secs(u64::from(seconds))),
            },
            metrics_token: get("METRICS_TOKEN").filter(|t| !t.is_empty()).map(Secret),
            test_reset_token: get("TEST_RESET_TOKEN").map(Secret),
            log_format,
            workers,
            review_blind_window: days("REVIEW_BLIND_DAYS", 14)?,
            auto_approve_after: days("AUTO_APPROVE_DAYS", 14)?,
            dispute_response_within: days("DISPUTE_RESPONSE_DAYS", 7)?,
            funding_reminder_after: days("FUNDING_REMINDER_DAYS", 3)?,
            webhook_allow_private_targets: flag("WEBHOOK_ALLOW_PRIVATE_TARGETS", false)?,
            webhook_ca_file: get("WEBHOOK_CA_FILE").map(PathBuf::from),
            webhook_secret_rotation: chrono::Duration::hours(i64::from(number(
                "WEBHOOK_SECRET_ROTATION_HOURS",
                24,
                0,
                24 * 30,
            )?)),
            trusted_proxies: get("TRUSTED_PROXIES")
                .unwrap_or_default()
                .split(',')
                .filter(|entry| !entry.trim().is_empty())
                .map(|entry| {
                    entry
                        .parse()
                        .map_err(|e: crate::domain::client_address::InvalidCidr| {
                            invalid("TRUSTED_PROXIES", e.to_string())
                        })
                })
                .collect::<Result<_, _>>()?,
            invoice_vat_rate_bp: match get("INVOICE_VAT_RATE") {
                None => 2_100,
                Some(text) => serde_json::from_str::<serde_json::Number>(&text)
                    .ok()
                    .and_then(|n| crate::domain::commission::parse_rate(&n).ok())
                    .ok_or_else(|| {
                        invalid("INVOICE_VAT_RATE", "expected a percent 0-100, e.g. 21")
                    })?,
            },
            invoice_verify_url: match get("INVOICE_VERIFY_URL") {
                Some(url) => {
                    check_url("INVOICE_VERIFY_URL", &url, &["http", "https"])?;
                    url
                }
                None => format!("{}/invoices/verify", frontend_url.trim_end_matches('/')),
            },
            platform_fiscal: {
                use crate::domain::invoice::development_platform as dev;
                let or = |name: &str, default: &str| get(name).unwrap_or_else(|| default.into());
                PlatformFiscal {
                    name: or("PLATFORM_FISCAL_NAME", dev::NAME),
                    tax_id: or("PLATFORM_FISCAL_TAX_ID", dev::TAX_ID),
                    address: or("PLATFORM_FISCAL_ADDRESS", dev::ADDRESS),
                    postal_code: or("PLATFORM_FISCAL_POSTAL_CODE", dev::POSTAL_CODE),
                    city: or("PLATFORM_FISCAL_CITY", dev::CITY),
                    country: or("PLATFORM_FISCAL_COUNTRY", dev::COUNTRY),
                }
            },
        })
    }

    /// In development without `JWT_SECRET`, loads the secret kept under `DATA_DIR` or creates
    /// it once, so a restart keeps everyone's sessions.
    pub fn resolve_jwt_secret(&mut self) -> std::io::Result<()> {
        if self.jwt_secret.is_some() {
            return Ok(());
        }
        let path = self.data_dir.join("jwt_secret");
        let secret = match std::fs::read_to_string(&path) {
            Ok(existing) if existing.trim().len() >= 32 => existing.trim().to_owned(),
            _ => {
                let fresh = crate::domain::token::random_token(48);
                write_private(&path, &fresh)?;
                fresh
            }
        };
        self.jwt_secret = Some(Secret(secret));
        Ok(())
    }

    pub fn is_production(&self) -> bool {
        self.app_env == AppEnv::Production
    }
}

/// A number of days, fractions allowed (`0.0005` is 43.2 s), above 0 and up to 365, to the
/// microsecond; decimal arithmetic, so `1.1` is exactly 95,040 s.
fn parse_days(text: &str) -> Option<chrono::Duration> {
    let days: rust_decimal::Decimal = text.parse().ok()?;
    if days <= rust_decimal::Decimal::ZERO || days > rust_decimal::Decimal::from(365) {
        return None;
    }
    let micros = (days * rust_decimal::Decimal::from(86_400_000_000i64)).round();
    let micros = i64::try_from(micros).ok()?;
    (micros > 0).then(|| chrono::Duration::microseconds(micros))
}

fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    use std::io::Write;
    options.open(path)?.write_all(contents.as_bytes())
}

fn parse_database_url(url: &str) -> Result<DatabaseTarget, ConfigError> {
    if let Some(path) = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
    {
        let path = path.split('?').next().unwrap_or_default();
        if path.is_empty() {
            return Err(invalid("DATABASE_URL", "an sqlite URL needs a file path"));
        }
        return Ok(DatabaseTarget::Sqlite(PathBuf::from(path)));
    }
    let parsed = check_url("DATABASE_URL", url, &["postgres", "postgresql"])?;
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(invalid("DATABASE_URL", "a postgres URL needs a host"));
    }
    Ok(DatabaseTarget::Postgres(url.to_owned()))
}

fn check_url(var: &'static str, value: &str, schemes: &[&str]) -> Result<url::Url, ConfigError> {
    // The value may hold credentials: never echo it back.
    let parsed = url::Url::parse(value).map_err(|e| invalid(var, format!("not a URL ({e})")))?;
    if !schemes.contains(&parsed.scheme()) {
        return Err(invalid(
            var,
            format!("scheme must be one of {}", schemes.join(", ")),
        ));
    }
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse(vars: &[(&str, &str)]) -> Result<Settings, ConfigError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Settings::from_lookup(|k| map.get(k).cloned())
    }

    #[test]
    fn defaults_need_nothing() {
        let s = parse(&[]).unwrap();
        assert_eq!(s.bind_addr.to_string(), "127.0.0.1:8080");
        assert_eq!(
            s.database,
            DatabaseTarget::Sqlite(PathBuf::from("data/marketplace.db"))
        );
        assert_eq!(s.mail_outbox_dir, PathBuf::from("data/outbox"));
        assert_eq!(s.uploads_dir, PathBuf::from("data/uploads"));
        assert_eq!(s.jwt_access_expire_minutes, 15);
        assert_eq!(s.jwt_refresh_expire_days, 7);
        assert_eq!(s.max_concurrent_sessions, 10);
        assert_eq!(s.rate_limit_per_minute, 60);
        assert_eq!(
            (
                s.login_max_attempts_per_user,
                s.login_max_attempts_per_ip,
                s.login_window_seconds
            ),
            (5, 20, 60)
        );
        assert_eq!(s.bcrypt_cost, 12);
        assert_eq!(s.webhook_secret_rotation, chrono::Duration::hours(24));
        assert_eq!(
            parse(&[("WEBHOOK_SECRET_ROTATION_HOURS", "0")])
                .unwrap()
                .webhook_secret_rotation,
            chrono::Duration::zero()
        );
        assert!(s.crm_retry_enabled);
        assert_eq!(s.crm_retry_interval_minutes, 30);
        assert!(!s.enable_test_reset_endpoint);
        assert_eq!(s.app_env, AppEnv::Development);
        assert_eq!(
            (
                s.ws_max_sockets_per_user,
                s.ws_max_sockets_per_address,
                s.ws_max_sockets,
                s.chat_messages_per_minute
            ),
            (10, 100, None, 60)
        );
    }

    #[test]
    fn socket_caps_follow_each_other_unless_set() {
        let s = parse(&[("WS_MAX_SOCKETS_PER_USER", "50")]).unwrap();
        assert_eq!(s.ws_max_sockets_per_address, 500);
        let s = parse(&[
            ("WS_MAX_SOCKETS_PER_USER", "50"),
            ("WS_MAX_SOCKETS_PER_ADDRESS", "20"),
            ("WS_MAX_SOCKETS", "4000"),
        ])
        .unwrap();
        assert_eq!(
            (s.ws_max_sockets_per_address, s.ws_max_sockets),
            (20, Some(4000))
        );
    }

    #[test]
    fn timer_windows_take_fractions_of_a_day() {
        let s = parse(&[]).unwrap();
        assert_eq!(s.auto_approve_after, chrono::Duration::days(14));
        assert_eq!(s.dispute_response_within, chrono::Duration::days(7));
        assert_eq!(s.funding_reminder_after, chrono::Duration::days(3));
        let s = parse(&[
            ("AUTO_APPROVE_DAYS", "0.0005"),
            ("FUNDING_REMINDER_DAYS", "1.5"),
        ])
        .unwrap();
        assert_eq!(s.auto_approve_after, chrono::Duration::milliseconds(43_200));
        assert_eq!(s.funding_reminder_after, chrono::Duration::hours(36));
        for bad in ["0", "-1", "366", "soon", "1e3"] {
            let error = parse(&[("DISPUTE_RESPONSE_DAYS", bad)]).unwrap_err();
            assert_eq!(error.var, "DISPUTE_RESPONSE_DAYS", "{bad}");
        }
    }

    #[test]
    fn production_without_jwt_secret_refuses() {
        let err = parse(&[("APP_ENV", "production")]).unwrap_err();
        assert_eq!(err.var, "JWT_SECRET");
        let production = [
            ("APP_ENV", "production"),
            ("JWT_SECRET", "0123456789abcdef0123456789abcdef"),
        ];
        // Nor with the processor's sandbox, nor the CRM's.
        assert_eq!(parse(&production).unwrap_err().var, "PROCESSOR_SECRET_KEY");
        let mut with_key = production.to_vec();
        with_key.push(("PROCESSOR_SECRET_KEY", "sk_live_x"));
        assert!(parse(&with_key).unwrap().is_production());
        with_key.push(("CRM_API_BASE", "sandbox"));
        assert_eq!(parse(&with_key).unwrap_err().var, "CRM_API_BASE");
        with_key.pop();
        // Nor with the end-to-end reset.
        with_key.push(("ENABLE_TEST_RESET_ENDPOINT", "true"));
        with_key.push(("TEST_RESET_TOKEN", "0123456789abcdef"));
        assert_eq!(
            parse(&with_key).unwrap_err().var,
            "ENABLE_TEST_RESET_ENDPOINT"
        );
        assert_eq!(
            parse(&[("ENABLE_TEST_RESET_ENDPOINT", "true")])
                .unwrap_err()
                .var,
            "TEST_RESET_TOKEN"
        );
    }

    #[test]
    fn guessable_secrets_and_private_webhook_targets_are_refused() {
        for var in ["METRICS_TOKEN", "CRM_WEBHOOK_SECRET"] {
            assert_eq!(parse(&[(var, "a")]).unwrap_err().var, var);
            assert_eq!(parse(&[(var, "fifteen-chars-x")]).unwrap_err().var, var);
            assert!(parse(&[(var, "sixteen-chars-xx")]).is_ok());
        }
        let production = [
            ("APP_ENV", "production"),
            ("JWT_SECRET", "0123456789abcdef0123456789abcdef"),
            ("PROCESSOR_SECRET_KEY", "sk_live_x"),
            ("WEBHOOK_ALLOW_PRIVATE_TARGETS", "true"),
        ];
        assert_eq!(
            parse(&production).unwrap_err().var,
            "WEBHOOK_ALLOW_PRIVATE_TARGETS"
        );
        assert!(parse(&production[..3]).is_ok());
        assert!(parse(&[("WEBHOOK_ALLOW_PRIVATE_TARGETS", "true")]).is_ok());
    }

    #[test]
    fn bad_values_name_their_variable() {
        for (var, value) in [
            ("DATABASE_URL", "mysql://x/y"),
            ("DATABASE_URL", "postgres://"),
            ("DATABASE_URL", "not a url"),
            ("DATABASE_MAX_CONNECTIONS", "0"),
            ("DATABASE_MAX_CONNECTIONS", "many"),
            ("DATABASE_STATEMENT_TIMEOUT_SECONDS", "3601"),
            ("DATABASE_STATEMENT_TIMEOUT_SECONDS", "soon"),
            ("NOTIFICATION_RETENTION_DAYS", "-1"),
            ("EVENT_RETENTION_DAYS", "7"),
            ("CRM_SYNC_LOG_RETENTION_DAYS", "-1"),
            ("RATE_LIMIT_PER_MINUTE", "-1"),
            ("MAX_CONCURRENT_SESSIONS", "lots"),
            ("JWT_ACCESS_EXPIRE_MINUTES", "0"),
            ("BIND_ADDR", "localhost"),
            ("REDIS_URL", "http://127.0.0.1"),
            ("CRM_RETRY_ENABLED", "maybe"),
            ("APP_ENV", "staging"),
            ("JWT_SECRET", "short"),
            ("WS_MAX_SOCKETS_PER_USER", "0"),
            ("WS_MAX_SOCKETS_PER_ADDRESS", "none"),
            ("WS_MAX_SOCKETS", "0"),
            ("CHAT_MESSAGES_PER_MINUTE", "0"),
            ("CHAT_MESSAGES_PER_MINUTE", "-5"),
            ("WEBHOOK_SECRET_ROTATION_HOURS", "721"),
            ("WEBHOOK_SECRET_ROTATION_HOURS", "-1"),
        ] {
            let err = parse(&[(var, value)]).unwrap_err();
            assert_eq!(err.var, var, "{value}");
            assert!(err.to_string().starts_with("invalid configuration: "));
            assert!(!err.to_string().contains('\n'));
        }
    }

    #[test]
    fn database_url_never_printed() {
        let err = parse(&[("DATABASE_URL", "mysql://user:hunter2@host/db")]).unwrap_err();
        assert!(!err.to_string().contains("hunter2"));
        let s = parse(&[("DATABASE_URL", "postgres://u:hunter2@localhost/db")]).unwrap();
        assert!(!format!("{s:?}").contains("hunter2"));
    }

    #[test]
    fn zero_disables_rate_limit_and_sqlite_urls_work() {
        let s = parse(&[
            ("RATE_LIMIT_PER_MINUTE", "0"),
            ("DATABASE_URL", "sqlite:///tmp/x.db"),
        ])
        .unwrap();
        assert_eq!(s.rate_limit_per_minute, 0);
        assert_eq!(
            s.database,
            DatabaseTarget::Sqlite(PathBuf::from("/tmp/x.db"))
        );
    }

    #[test]
    fn dev_secret_is_generated_once_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().to_str().unwrap();
        let mut first = parse(&[("DATA_DIR", data)]).unwrap();
        first.resolve_jwt_secret().unwrap();
        let mut second = parse(&[("DATA_DIR", data)]).unwrap();
        second.resolve_jwt_secret().unwrap();
        assert_eq!(first.jwt_secret, second.jwt_secret);
        assert!(first.jwt_secret.unwrap().expose().len() >= 32);
    }
}
