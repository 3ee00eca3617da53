//! The test harness: `spawn_app()` starts the real server on `127.0.0.1:0` with a fresh
//! database (an SQLite file, or a fresh PostgreSQL database when `TEST_DATABASE_URL` is set),
//! the cache (Redis when `REDIS_URL` is set, isolated by a key prefix) and the file mail
//! outbox, and gives handles to all of them.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use marketplace::clock::Clock;
use marketplace::config::Settings;
use marketplace::integrations::mail::outbox_reader::{self, ReceivedMail};
use marketplace::startup::Application;
use marketplace::state::AppState;
use marketplace::store::Db;
use serde_json::Value;
use sqlx::Connection as _;

pub struct TestApp {
    pub address: String,
    pub port: u16,
    pub state: AppState,
    pub db: Db,
    pub clock: Clock,
    pub data_dir: PathBuf,
    pub outbox_dir: PathBuf,
    /// A client without a cookie store: tests pass cookies explicitly when they need them.
    pub client: reqwest::Client,
    server: actix_web::dev::ServerHandle,
    _data: tempfile::TempDir,
}

/// Settings the harness applies unless a test overrides them.
fn base_vars(data_dir: &std::path::Path) -> HashMap<String, String> {
    let mut vars = HashMap::new();
    vars.insert("BIND_ADDR".into(), "127.0.0.1:0".into());
    vars.insert("DATA_DIR".into(), data_dir.display().to_string());
    // Rate limits have their own tests; the rest of the suite should not trip them.
    vars.insert("RATE_LIMIT_PER_MINUTE".into(), "0".into());
    vars.insert(
        "LOGIN_RATE_LIMIT_MAX_ATTEMPTS_PER_USER".into(),
        "1000".into(),
    );
    vars.insert("LOGIN_RATE_LIMIT_MAX_ATTEMPTS_PER_IP".into(), "1000".into());
    // bcrypt's cost is a setting; the suite uses the cheapest so it stays fast.
    vars.insert("BCRYPT_COST".into(), "4".into());
    vars.insert("WORKERS".into(), "2".into());
    vars.insert("FRONTEND_URL".into(), "http://frontend.test".into());
    // Each app gets its own cache namespace, so apps sharing one Redis never see each other.
    vars.insert(
        "CACHE_PREFIX".into(),
        format!("test:{}:", marketplace::domain::token::random_token(9)),
    );
    if let Ok(redis) = std::env::var("REDIS_URL") {
        vars.insert("REDIS_URL".into(), redis);
    }
    vars
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(&[]).await
}

/// Spawns with some variables overridden (`("MAX_CONCURRENT_SESSIONS", "2")`).
pub async fn spawn_app_with(overrides: &[(&str, &str)]) -> TestApp {
    let data = tempfile::tempdir().expect("temporary directory");
    let mut vars = base_vars(data.path());
    if let Ok(url) = std::env::var("TEST_DATABASE_URL") {
        vars.insert("DATABASE_URL".into(), fresh_postgres_database(&url).await);
    }
    for (k, v) in overrides {
        vars.insert((*k).into(), (*v).into());
    }
    let settings = Settings::from_lookup(|k| vars.get(k).cloned()).expect("test settings");
    let clock = Clock::system();
    let app = Application::build_with_clock(settings, clock.clone())
        .await
        .expect("application builds");
    let port = app.port();
    let state = app.state().clone();
    let server = app.server_handle();
    actix_web::rt::spawn(app.run_until_stopped());

    TestApp {
        address: format!("http://127.0.0.1:{port}"),
        port,
        db: state.db.clone(),
        clock,
        data_dir: data.path().to_path_buf(),
        outbox_dir: state.settings.mail_outbox_dir.clone(),
        state,
        client: reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(30))
            .build()
            .expect("client"),
        server,
        _data: data,
    }
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.address, path)
    }

    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.client
            .get(self.url(path))
            .send()
            .await
            .expect("request")
    }

    pub async fn post_json(&self, path: &str, body: &Value) -> reqwest::Response {
        self.client
            .post(self.url(path))
            .json(body)
            .send()
            .await
            .expect("request")
    }

    /// Every e-mail written to the outbox so far.
    pub fn mails(&self) -> Vec<ReceivedMail> {
        outbox_reader::read_all(&self.outbox_dir)
    }

    /// E-mails sent to `to`, waiting up to five seconds for at least `count`.
    pub async fn mails_to(&self, to: &str, count: usize) -> Vec<ReceivedMail> {
        let found = wait_for(Duration::from_secs(5), || {
            let mails: Vec<_> = self
                .mails()
                .into_iter()
                .filter(|m| m.to.contains(to))
                .collect();
            (mails.len() >= count).then_some(mails)
        })
        .await;
        found.unwrap_or_else(|| panic!("expected {count} e-mail(s) to {to}"))
    }

    /// Stops the server. The pool is not closed here: closing waits for every connection a
    /// test may still hold.
    pub async fn stop(self) {
        self.server.stop(false).await;
    }
}

/// Polls `probe` until it gives a value or the deadline passes.
pub async fn wait_for<T>(deadline: Duration, mut probe: impl FnMut() -> Option<T>) -> Option<T> {
    let until = std::time::Instant::now() + deadline;
    loop {
        if let Some(value) = probe() {
            return Some(value);
        }
        if std::time::Instant::now() >= until {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Reads a JSON body, failing the test with the body text when it is not JSON.
pub async fn json(response: reqwest::Response) -> Value {
    let text = response.text().await.expect("body");
    serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"))
}

/// Creates an empty database for one test on the server named by `admin_url` and returns its
/// URL. Databases left by earlier runs (older than two hours) are dropped on the way.
async fn fresh_postgres_database(admin_url: &str) -> String {
    let mut admin = sqlx::PgConnection::connect(admin_url)
        .await
        .expect("TEST_DATABASE_URL reachable");
    let now = chrono::Utc::now().timestamp();
    drop_stale_databases(&mut admin, now).await;
    let name = format!(
        "mkt_t_{now}_{}",
        marketplace::domain::token::random_token(6)
            .to_lowercase()
            .replace(['-', '_'], "x")
    );
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut admin)
        .await
        .expect("create test database");
    let mut url = url::Url::parse(admin_url).expect("TEST_DATABASE_URL is a URL");
    url.set_path(&format!("/{name}"));
    url.to_string()
}

async fn drop_stale_databases(admin: &mut sqlx::PgConnection, now: i64) {
    let names: Vec<String> =
        sqlx::query_scalar("SELECT datname FROM pg_database WHERE datname LIKE 'mkt_t_%'")
            .fetch_all(&mut *admin)
            .await
            .unwrap_or_default();
    for name in names {
        let created = name
            .split('_')
            .nth(2)
            .and_then(|t| t.parse::<i64>().ok())
            .unwrap_or(now);
        if now - created > 2 * 3600 {
            let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
            )))
            .execute(&mut *admin)
            .await;
        }
    }
}

/// A migrated database of the engine under test, without a server (for store and dispatcher
/// tests that must own every consumer). The directory keeps an SQLite file alive.
pub async fn fresh_db() -> (Db, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let target = match std::env::var("TEST_DATABASE_URL") {
        Ok(url) => {
            marketplace::config::DatabaseTarget::Postgres(fresh_postgres_database(&url).await)
        }
        Err(_) => marketplace::config::DatabaseTarget::Sqlite(dir.path().join("test.db")),
    };
    (Db::connect(&target).await.expect("database opens"), dir)
}
