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
    pub state: AppState,
    pub db: Db,
    pub clock: Clock,
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
    // Every test's database is new: it is migrated as the app starts, also under
    // `APP_ENV=production` on PostgreSQL (whose default leaves that to `marketplace migrate`).
    vars.insert("MIGRATE_ON_START".into(), "true".into());
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
    capture_logs();
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
        db: state.db.clone(),
        clock,
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

    /// This instance's `DATABASE_URL`, for a second instance on the same database.
    pub fn database_url(&self) -> String {
        match &self.state.settings.database {
            marketplace::config::DatabaseTarget::Postgres(url) => url.clone(),
            marketplace::config::DatabaseTarget::Sqlite(path) => {
                format!("sqlite:{}", path.display())
            }
        }
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
        self.mails_where(count, |m| m.to.contains(to))
            .await
            .unwrap_or_else(|| panic!("expected {count} e-mail(s) to {to}"))
    }

    /// E-mails sent to `to` whose subject contains `subject`, waiting up to five seconds for
    /// one. E-mail leaves after the notifications of the same event (it has a queue of its
    /// own), so a notification seen says nothing of its e-mail.
    pub async fn mails_about(&self, to: &str, subject: &str) -> Vec<ReceivedMail> {
        self.mails_where(1, |m| m.to.contains(to) && m.subject.contains(subject))
            .await
            .unwrap_or_else(|| panic!("expected an e-mail to {to} about {subject:?}"))
    }

    /// The e-mails that pass `keep`, once there are at least `count` (five seconds at most).
    async fn mails_where(
        &self,
        count: usize,
        keep: impl Fn(&ReceivedMail) -> bool,
    ) -> Option<Vec<ReceivedMail>> {
        wait_for(Duration::from_secs(5), || {
            let mails: Vec<_> = self.mails().into_iter().filter(|m| keep(m)).collect();
            (mails.len() >= count).then_some(mails)
        })
        .await
    }

    /// Stops the server. The pool is not closed here: closing waits for every connection a
    /// test may still hold.
    pub async fn stop(self) {
        self.server.stop(false).await;
    }

    /// Stops the server and hands back its data directory (an SQLite database lives there),
    /// so a restarted instance finds what this one stored.
    pub async fn stop_keeping_data(self) -> tempfile::TempDir {
        self.server.stop(false).await;
        self._data
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
pub async fn fresh_postgres_database(admin_url: &str) -> String {
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
    let (target, dir) = fresh_target().await;
    (Db::connect(&target).await.expect("database opens"), dir)
}

/// [`fresh_db`]'s database, not yet opened: for tests that open it their own way.
pub async fn fresh_target() -> (marketplace::config::DatabaseTarget, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let target = match std::env::var("TEST_DATABASE_URL") {
        Ok(url) => {
            marketplace::config::DatabaseTarget::Postgres(fresh_postgres_database(&url).await)
        }
        Err(_) => marketplace::config::DatabaseTarget::Sqlite(dir.path().join("test.db")),
    };
    (target, dir)
}

/// The password every test account uses.
pub const PASSWORD: &str = "Secret123!";

/// A registered account and its first session (secure flavour, as registration gives).
#[derive(Clone)]
pub struct Account {
    pub id: i64,
    pub email: String,
    pub username: String,
    pub access_token: String,
    pub csrf_token: String,
    pub refresh_cookie: String,
}

/// Registers `username` (e-mail `<username>@example.com`) with `roles`.
pub async fn register(app: &TestApp, username: &str, roles: &[&str]) -> Account {
    let email = format!("{username}@example.com");
    let response = app
        .post_json(
            "/api/auth/register",
            &serde_json::json!({"email": email, "username": username, "password": PASSWORD, "roles": roles}),
        )
        .await;
    assert_eq!(response.status(), 201, "registration of {username}");
    let refresh_cookie = cookie_value(&response, "refresh_token").expect("refresh cookie");
    let body = json(response).await;
    Account {
        id: body["user"]["id"].as_i64().unwrap(),
        email,
        username: username.to_owned(),
        access_token: body["access_token"].as_str().unwrap().to_owned(),
        csrf_token: body["csrf_token"].as_str().unwrap().to_owned(),
        refresh_cookie,
    }
}

/// Standard login; the access token.
pub async fn login(app: &TestApp, username: &str, password: &str) -> String {
    let response = app
        .post_json(
            "/api/auth/login",
            &serde_json::json!({"username": username, "password": password}),
        )
        .await;
    assert_eq!(response.status(), 200, "login of {username}");
    json(response).await["access_token"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Creates an administrator directly and logs in; (id, access token).
pub async fn admin(app: &TestApp, username: &str) -> (i64, String) {
    let id = marketplace::workflows::accounts::create_admin(
        &app.db,
        &app.clock,
        4,
        &format!("{username}@example.com"),
        username,
        PASSWORD,
    )
    .await
    .expect("admin created");
    (id, login(app, username, PASSWORD).await)
}

/// The value of cookie `name` set by a response.
pub fn cookie_value(response: &reqwest::Response, name: &str) -> Option<String> {
    set_cookie(response, name).map(|c| {
        c.split(';')
            .next()
            .unwrap_or_default()
            .split_once('=')
            .map(|(_, v)| v.to_owned())
            .unwrap_or_default()
    })
}

/// The whole `Set-Cookie` line for cookie `name`.
pub fn set_cookie(response: &reqwest::Response, name: &str) -> Option<String> {
    response
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with(&format!("{name}=")))
        .map(str::to_owned)
}

/// Every log line the servers of this test process wrote (debug level and up), so tests can
/// check that no secret ever reaches a log.
pub fn captured_logs() -> String {
    String::from_utf8_lossy(&LOGS.lock().unwrap()).into_owned()
}

static LOGS: std::sync::Mutex<Vec<u8>> = std::sync::Mutex::new(Vec::new());

struct LogSink;

impl std::io::Write for LogSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        LOGS.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn capture_logs() {
    static INIT: std::sync::Once = std::sync::Once::new();
    INIT.call_once(|| {
        let _ = tracing_subscriber::fmt()
            .json()
            .with_env_filter("debug,h2=info,hyper=info,hyper_util=info,reqwest=info,rustls=info")
            .with_writer(|| LogSink)
            .try_init();
    });
}

/// A cookie session opened by `POST /api/auth/login_secure`.
pub struct CookieSession {
    pub access_token: String,
    /// The `csrf_token` cookie's value (equal to the body's `csrf_token`).
    pub csrf_token: String,
}

/// Secure-flavour login under a fresh `X-Session-ID`; the tokens are read from the cookies.
pub async fn login_secure_session(app: &TestApp, username: &str, password: &str) -> CookieSession {
    let session_id = format!("sess_{}", marketplace::domain::token::random_token(12));
    let response = app
        .client
        .post(app.url("/api/auth/login_secure"))
        .header("X-Session-ID", session_id)
        .json(&serde_json::json!({"username": username, "password": password}))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 200, "login_secure of {username}");
    let csrf_token = cookie_value(&response, "csrf_token").expect("csrf cookie");
    assert!(cookie_value(&response, "refresh_token").is_some_and(|v| !v.is_empty()));
    let body = json(response).await;
    assert_eq!(body["csrf_token"], csrf_token.as_str());
    CookieSession {
        access_token: body["access_token"].as_str().unwrap().to_owned(),
        csrf_token,
    }
}

/// A request with `Authorization: Bearer <token>` and, when given, a JSON body.
/// A bearer request. A mutating one of a cookie-flavoured session (a `register`ed account's
/// token) needs that session's CSRF pair: `market::send` sends it.
pub async fn request_as(
    app: &TestApp,
    method: reqwest::Method,
    path: &str,
    token: &str,
    body: Option<&Value>,
) -> reqwest::Response {
    let mut request = app.client.request(method, app.url(path)).bearer_auth(token);
    if let Some(body) = body {
        request = request.json(body);
    }
    request.send().await.expect("request")
}

/// Every object key of a JSON value, at any depth.
pub fn json_keys(value: &Value) -> Vec<String> {
    match value {
        Value::Object(map) => map
            .iter()
            .flat_map(|(k, v)| std::iter::once(k.clone()).chain(json_keys(v)))
            .collect(),
        Value::Array(items) => items.iter().flat_map(json_keys).collect(),
        _ => Vec::new(),
    }
}

/// A loopback port free a moment ago, for a process the test starts.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The service's own binary, to listen on `port` with `data_dir`, nothing inherited from the
/// test's environment but `PATH`, and its output dropped: a test adds its settings and spawns.
pub fn service_command(data_dir: &std::path::Path, port: u16) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_marketplace"));
    command
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("DATA_DIR", data_dir)
        .env("BIND_ADDR", format!("127.0.0.1:{port}"))
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    command
}

/// Kills its child when dropped, so a failing assertion leaves no process behind.
pub struct ChildGuard(pub std::process::Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
