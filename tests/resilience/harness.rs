//! Processes and plumbing for the resilience tests: a database of their own, the standalone
//! processor sandbox, server processes that can be killed with SIGKILL and started again,
//! and the HTTP steps users take (register, profile, project, proposal, selection, funding).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{Value, json as j};
use sqlx::Connection as _;
use sqlx::postgres::{PgPool, PgPoolOptions};

/// The password of every account these tests make.
pub const PASSWORD: &str = "Secret123!";

/// PostgreSQL and Redis, or `None` (the test prints why it is skipped).
pub struct Infra {
    pub pg_url: String,
    pub redis_url: String,
}

pub fn infra(test: &str) -> Option<Infra> {
    let pg_url = std::env::var("TEST_DATABASE_URL").ok();
    let redis_url = std::env::var("REDIS_URL").ok();
    match (pg_url, redis_url) {
        (Some(pg), Some(redis)) if pg.starts_with("postgres") => Some(Infra {
            pg_url: pg,
            redis_url: redis,
        }),
        _ => {
            eprintln!(
                "{test}: skipped (needs TEST_DATABASE_URL=postgres://… and REDIS_URL=redis://…)"
            );
            None
        }
    }
}

/// The server binary: `MARKETPLACE_BIN` (CI: the release build; relative to the package, as
/// `cargo test` runs from there) or this package's. Absolute, as children start elsewhere.
pub fn binary() -> PathBuf {
    let path = std::env::var_os("MARKETPLACE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_marketplace")));
    std::fs::canonicalize(&path).unwrap_or(path)
}

pub fn random(bytes: usize) -> String {
    marketplace::domain::token::random_token(bytes)
        .to_lowercase()
        .replace(['-', '_'], "x")
}

/// A loopback port nobody listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Polls `probe` every 25 ms until it answers or `deadline` passes.
pub async fn poll<T, F, Fut>(what: &str, deadline: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let until = Instant::now() + deadline;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(Instant::now() < until, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// A database of one test on the `TEST_DATABASE_URL` server, dropped by [`TestDb::drop_now`].
pub struct TestDb {
    pub url: String,
    admin_url: String,
    name: String,
    pub pool: PgPool,
}

impl TestDb {
    pub async fn create(admin_url: &str, tag: &str) -> Self {
        let mut admin = sqlx::PgConnection::connect(admin_url)
            .await
            .expect("TEST_DATABASE_URL reachable");
        let now = chrono::Utc::now().timestamp();
        // Left by an earlier run that died: older than two hours.
        let stale: Vec<String> =
            sqlx::query_scalar("SELECT datname FROM pg_database WHERE datname LIKE 'mkt_res_%'")
                .fetch_all(&mut admin)
                .await
                .unwrap_or_default();
        for name in stale {
            let created = name.split('_').nth(3).and_then(|t| t.parse::<i64>().ok());
            if created.is_some_and(|c| now - c > 2 * 3600) {
                let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                    "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                )))
                .execute(&mut admin)
                .await;
            }
        }
        let name = format!("mkt_res_{tag}_{now}_{}", random(4));
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut admin)
            .await
            .expect("create the test database");
        let mut url = url::Url::parse(admin_url).expect("TEST_DATABASE_URL is a URL");
        url.set_path(&format!("/{name}"));
        let url = url.to_string();
        // Migrated once here, so servers start on a ready schema.
        marketplace::store::Db::connect(&marketplace::config::DatabaseTarget::Postgres(
            url.clone(),
        ))
        .await
        .expect("migrations apply");
        let pool = PgPoolOptions::new()
            .max_connections(4)
            .connect(&url)
            .await
            .expect("test pool");
        Self {
            url,
            admin_url: admin_url.to_owned(),
            name,
            pool,
        }
    }

    pub async fn drop_now(self) {
        self.pool.close().await;
        if let Ok(mut admin) = sqlx::PgConnection::connect(&self.admin_url).await {
            let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            )))
            .execute(&mut admin)
            .await;
        }
    }

    pub async fn count(&self, sql: &'static str) -> i64 {
        sqlx::query_scalar::<_, i64>(sql)
            .fetch_one(&self.pool)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    pub async fn count1(&self, sql: &'static str, a: i64) -> i64 {
        sqlx::query_scalar::<_, i64>(sql)
            .bind(a)
            .fetch_one(&self.pool)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }
}

/// Keys shared by the sandbox and the servers (passed in the environment, never printed).
#[derive(Clone)]
pub struct Keys {
    pub secret_key: String,
    pub webhook_secret: String,
    pub jwt_secret: String,
}

impl Keys {
    pub fn fresh() -> Self {
        Self {
            secret_key: format!("sk_test_res_{}", random(18)),
            webhook_secret: format!("whsec_res_{}", random(18)),
            jwt_secret: random(40),
        }
    }
}

/// A child process killed when dropped (a failing test leaves nothing running).
pub struct Proc {
    child: Option<Child>,
}

impl Proc {
    /// Sends SIGTERM (the process then stops as it chooses).
    pub fn terminate(&self) {
        if let Some(child) = &self.child {
            let status = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status()
                .expect("kill runs");
            assert!(status.success(), "SIGTERM sent");
        }
    }

    /// Waits (polling, up to `limit`) for the process to exit by itself; its exit status.
    pub async fn exited_within(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + limit;
        while std::time::Instant::now() < deadline {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                self.child = None;
                return Some(status);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    }

    /// SIGKILL, then reaps it.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}

fn spawn(args: &[&str], env: &HashMap<String, String>, dir: &Path, log: &str) -> Proc {
    let log = std::fs::File::create(dir.join(log)).expect("log file");
    let child = Command::new(binary())
        .args(args)
        // A clean environment: nothing of the caller's (or a `.env` file) leaks in.
        .env_clear()
        .envs(env)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log file"))
        .stderr(log)
        .spawn()
        .expect("the marketplace binary starts");
    Proc { child: Some(child) }
}

/// The standalone processor sandbox.
pub struct SandboxProc {
    pub base: String,
    /// Killed when dropped.
    _proc: Proc,
}

impl SandboxProc {
    pub async fn start(dir: &Path, keys: &Keys, webhook_url: &str, http: &reqwest::Client) -> Self {
        let port = free_port();
        let mut env = HashMap::new();
        env.insert("PROCESSOR_SECRET_KEY".into(), keys.secret_key.clone());
        env.insert(
            "PROCESSOR_WEBHOOK_SECRET".into(),
            keys.webhook_secret.clone(),
        );
        env.insert("RUST_LOG".into(), "warn".into());
        env.insert("DATA_DIR".into(), dir.display().to_string());
        let proc = spawn(
            &[
                "processor-sandbox",
                "--port",
                &port.to_string(),
                "--webhook-url",
                webhook_url,
                "--redeliver-ms",
                "300",
            ],
            &env,
            dir,
            "sandbox.log",
        );
        let base = format!("http://127.0.0.1:{port}");
        let url = format!("{base}/api/sandbox/ledger");
        poll("the sandbox", Duration::from_secs(30), || async {
            http.get(&url)
                .send()
                .await
                .ok()
                .filter(|r| r.status().is_success())
        })
        .await;
        Self { base, _proc: proc }
    }

    pub async fn ledger(&self, http: &reqwest::Client) -> Value {
        let r = http
            .get(format!("{}/api/sandbox/ledger", self.base))
            .send()
            .await
            .expect("ledger");
        r.json().await.expect("ledger JSON")
    }

    pub async fn events(&self, http: &reqwest::Client) -> Vec<Value> {
        let r = http
            .get(format!("{}/api/sandbox/events", self.base))
            .send()
            .await
            .expect("events");
        r.json().await.expect("events JSON")
    }

    pub async fn control(
        &self,
        http: &reqwest::Client,
        path: &str,
        body: Value,
    ) -> reqwest::Result<reqwest::Response> {
        http.post(format!("{}/api/sandbox/{path}", self.base))
            .json(&body)
            .send()
            .await
    }
}

/// One server process, started again on the same port and settings after a kill.
pub struct ServerProc {
    pub base: String,
    env: HashMap<String, String>,
    dir: PathBuf,
    log: String,
    proc: Proc,
    pub starts: usize,
}

/// The settings of a server on `db`, with its sandbox at `sandbox_port`'s base.
pub fn server_env(
    db_url: &str,
    redis_url: &str,
    cache_prefix: &str,
    keys: &Keys,
    sandbox_base: &str,
    data_dir: &Path,
    port: u16,
) -> HashMap<String, String> {
    let mut env = HashMap::new();
    for (k, v) in [
        ("BIND_ADDR", format!("127.0.0.1:{port}")),
        ("DATA_DIR", data_dir.display().to_string()),
        ("DATABASE_URL", db_url.to_owned()),
        ("DATABASE_MAX_CONNECTIONS", "10".to_owned()),
        ("REDIS_URL", redis_url.to_owned()),
        ("CACHE_PREFIX", cache_prefix.to_owned()),
        ("PROCESSOR_SECRET_KEY", keys.secret_key.clone()),
        ("PROCESSOR_WEBHOOK_SECRET", keys.webhook_secret.clone()),
        ("PROCESSOR_API_BASE", sandbox_base.to_owned()),
        ("JWT_SECRET", keys.jwt_secret.clone()),
        ("BCRYPT_COST", "4".to_owned()),
        ("RATE_LIMIT_PER_MINUTE", "0".to_owned()),
        ("LOGIN_RATE_LIMIT_MAX_ATTEMPTS_PER_USER", "1000".to_owned()),
        ("LOGIN_RATE_LIMIT_MAX_ATTEMPTS_PER_IP", "1000".to_owned()),
        ("WORKERS", "2".to_owned()),
        ("FRONTEND_URL", "http://frontend.test".to_owned()),
        ("RUST_LOG", "warn".to_owned()),
    ] {
        env.insert(k.to_owned(), v);
    }
    env
}

impl ServerProc {
    pub async fn start(
        env: HashMap<String, String>,
        dir: &Path,
        log: &str,
        http: &reqwest::Client,
    ) -> Self {
        let addr = env["BIND_ADDR"].clone();
        let mut server = Self {
            base: format!("http://{addr}"),
            proc: spawn(&["serve"], &env, dir, log),
            env,
            dir: dir.to_owned(),
            log: log.to_owned(),
            starts: 1,
        };
        server.wait_healthy(http).await;
        server
    }

    pub async fn wait_healthy(&mut self, http: &reqwest::Client) {
        let url = format!("{}/health", self.base);
        poll("the server's health", Duration::from_secs(60), || async {
            http.get(&url)
                .send()
                .await
                .ok()
                .filter(|r| r.status().is_success())
        })
        .await;
    }

    pub fn kill9(&mut self) {
        self.proc.kill9();
    }

    /// The process, to signal and to wait for.
    pub fn process(&mut self) -> &mut Proc {
        &mut self.proc
    }

    /// Starts it again (after [`kill9`](Self::kill9)); the log is appended to a new file.
    pub async fn restart(&mut self, http: &reqwest::Client) {
        self.starts += 1;
        let log = format!("{}.{}", self.log, self.starts);
        self.proc = spawn(&["serve"], &self.env, &self.dir, &log);
        self.wait_healthy(http).await;
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }
}

/// A registered account's session.
#[derive(Clone, Debug)]
pub struct Account {
    pub id: i64,
    pub username: String,
    pub access_token: String,
    pub csrf_token: String,
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
}

/// A request as `account` (bearer plus the CSRF cookie and header).
pub async fn send(
    http: &reqwest::Client,
    base: &str,
    account: &Account,
    method: Method,
    path: &str,
    body: Option<&Value>,
) -> reqwest::Result<reqwest::Response> {
    let mut request = http
        .request(method, format!("{base}{path}"))
        .bearer_auth(&account.access_token);
    if !account.csrf_token.is_empty() {
        request = request
            .header("Cookie", format!("csrf_token={}", account.csrf_token))
            .header("X-CSRF-Token", &account.csrf_token);
    }
    if let Some(body) = body {
        request = request.json(body);
    }
    request.send().await
}

/// Asserts the status and answers the JSON body.
pub async fn expect(
    response: reqwest::Result<reqwest::Response>,
    status: StatusCode,
    what: &str,
) -> Value {
    let response = response.unwrap_or_else(|e| panic!("{what}: {e}"));
    let got = response.status();
    let text = response.text().await.unwrap_or_default();
    assert_eq!(got, status, "{what}: {text}");
    serde_json::from_str(&text).unwrap_or(Value::Null)
}

/// The marketplace as the tests set it up: an administrator, and deals between verified
/// companies and experts with onboarded payout accounts.
pub struct Market {
    pub http: reqwest::Client,
    pub base: String,
    pub admin: Account,
    pub sandbox_base: String,
}

/// A project with an expert selected on a proposal of `amounts`; the first payment pending.
#[derive(Clone, Debug)]
pub struct Deal {
    pub company: Account,
    pub expert: Account,
    pub project_id: i64,
    pub first_payment: i64,
    pub account: String,
}

impl Market {
    pub async fn open(http: reqwest::Client, base: &str, sandbox_base: &str, db: &TestDb) -> Self {
        let mk = marketplace::store::Db::connect(&marketplace::config::DatabaseTarget::Postgres(
            db.url.clone(),
        ))
        .await
        .expect("database");
        let name = format!("root{}", random(3));
        let id = marketplace::workflows::accounts::create_admin(
            &mk,
            &marketplace::clock::Clock::system(),
            4,
            &format!("{name}@example.com"),
            &name,
            PASSWORD,
        )
        .await
        .expect("administrator");
        let token = login(&http, base, &name).await;
        Self {
            http,
            base: base.to_owned(),
            admin: Account {
                id,
                username: name,
                access_token: token,
                csrf_token: String::new(),
            },
            sandbox_base: sandbox_base.to_owned(),
        }
    }

    pub async fn send(
        &self,
        who: &Account,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> reqwest::Result<reqwest::Response> {
        send(&self.http, &self.base, who, method, path, body.as_ref()).await
    }

    pub async fn as_admin(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> reqwest::Result<reqwest::Response> {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.admin.access_token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        request.send().await
    }

    /// A verified member of `role` with complete fiscal data and a confirmed e-mail.
    pub async fn member(&self, db: &TestDb, username: &str, role: &str) -> Account {
        let email = format!("{username}@example.com");
        let r = self
            .http
            .post(format!("{}/api/auth/register", self.base))
            .json(
                &j!({"email": email, "username": username, "password": PASSWORD, "roles": [role]}),
            )
            .send()
            .await;
        let body = expect(r, StatusCode::CREATED, "registration").await;
        let account = Account {
            id: body["user"]["id"].as_i64().unwrap(),
            username: username.to_owned(),
            access_token: body["access_token"].as_str().unwrap().to_owned(),
            csrf_token: body["csrf_token"].as_str().unwrap().to_owned(),
        };
        sqlx::query(
            "UPDATE users SET email_verified = TRUE, email_verified_at = $2, updated_at = $2 WHERE id = $1",
        )
        .bind(account.id)
        .bind(chrono::Utc::now())
            .execute(&db.pool)
            .await
            .expect("e-mail confirmed");
        let profile = if role == "empresa" {
            j!({"profile_type": "empresa", "company_name": format!("{username} SL"), "full_name": username})
        } else {
            j!({"profile_type": "experto", "full_name": format!("Expert {username}"), "skills": ["Rust", "SQL"]})
        };
        let r = self
            .send(&account, Method::POST, "/api/profiles/", Some(profile))
            .await;
        let profile = expect(r, StatusCode::CREATED, "profile").await;
        let fiscal = j!({"tax_id": "B12345678", "fiscal_name": "Fiscal Name",
            "fiscal_address": "Calle Mayor 1", "fiscal_postal_code": "28001", "fiscal_city": "Madrid",
            "fiscal_country": "ES", "fiscal_type": "autonomo"});
        let r = self
            .send(
                &account,
                Method::PUT,
                &format!("/api/profiles/{}/fiscal-data", profile["id"]),
                Some(fiscal),
            )
            .await;
        expect(r, StatusCode::OK, "fiscal data").await;
        let r = self
            .as_admin(
                Method::PUT,
                &format!("/api/admin/users/{}/verify", account.id),
                Some(j!({})),
            )
            .await;
        expect(r, StatusCode::OK, "verification").await;
        account
    }

    /// The expert's payout account, onboarded at the sandbox and `active` here.
    pub async fn connect(&self, db: &TestDb, expert: &Account) -> String {
        let r = self
            .send(
                expert,
                Method::POST,
                "/api/processor-connect/account-link",
                Some(j!({})),
            )
            .await;
        expect(r, StatusCode::OK, "account link").await;
        let r = self
            .send(expert, Method::GET, "/api/processor-connect/status", None)
            .await;
        let account = expect(r, StatusCode::OK, "connect status").await["account_id"]
            .as_str()
            .unwrap()
            .to_owned();
        let r = self
            .http
            .post(format!(
                "{}/api/sandbox/accounts/{account}/complete-onboarding",
                self.sandbox_base
            ))
            .send()
            .await;
        expect(r, StatusCode::OK, "onboarding").await;
        let pool = &db.pool;
        let id = expert.id;
        poll("the payout account active", Duration::from_secs(30), || async move {
            let status: Option<String> = sqlx::query_scalar(
                "SELECT processor_connect_status FROM profiles WHERE user_id = $1 AND profile_type = 'experto'",
            )
            .bind(id)
            .fetch_one(pool)
            .await
            .ok()
            .flatten();
            (status.as_deref() == Some("active")).then_some(())
        })
        .await;
        account
    }

    /// A curated project, validated, with `invited` invited; its id.
    pub async fn project(&self, company: &Account, budget: f64, invited: &[&Account]) -> i64 {
        let r = self
            .send(
                company,
                Method::POST,
                "/api/projects/",
                Some(
                    j!({"title": "Data platform", "description": "Build it", "budget": budget,
                    "deadline": "2099-01-01T00:00:00", "skills_required": ["Rust"],
                    "project_type": "curated", "status": "pending_publication"}),
                ),
            )
            .await;
        let id = expect(r, StatusCode::CREATED, "project").await["id"]
            .as_i64()
            .unwrap();
        let r = self
            .as_admin(
                Method::POST,
                &format!("/api/projects/{id}/validate"),
                Some(j!({"approved": true})),
            )
            .await;
        expect(r, StatusCode::OK, "validation").await;
        let ids: Vec<i64> = invited.iter().map(|a| a.id).collect();
        let r = self
            .as_admin(
                Method::POST,
                &format!("/api/admin/projects/{id}/invite-experts"),
                Some(j!({"expert_ids": ids})),
            )
            .await;
        expect(r, StatusCode::OK, "invitations").await;
        id
    }

    pub async fn apply(&self, expert: &Account, project_id: i64, amounts: &[i64]) {
        let milestones: Vec<Value> = amounts
            .iter()
            .enumerate()
            .map(
                |(i, a)| j!({"title": format!("Milestone {}", i + 1), "amount": *a as f64 / 100.0}),
            )
            .collect();
        let total = amounts.iter().sum::<i64>() as f64 / 100.0;
        let r = self
            .send(
                expert,
                Method::POST,
                &format!("/api/projects/{project_id}/apply"),
                Some(j!({"cover_letter": "I can do it", "proposed_budget": total,
                         "proposed_milestones": milestones})),
            )
            .await;
        expect(r, StatusCode::CREATED, "proposal").await;
    }

    /// Company and expert `name…`, the expert connected, a project with a proposal of
    /// `amounts` (minor units), not yet selected.
    pub async fn parties(
        &self,
        db: &TestDb,
        name: &str,
        amounts: &[i64],
    ) -> (Account, Account, i64, String) {
        let company = self.member(db, &format!("{name}co"), "empresa").await;
        let expert = self.member(db, &format!("{name}ex"), "experto").await;
        let account = self.connect(db, &expert).await;
        let budget = amounts.iter().sum::<i64>() as f64 / 100.0;
        let project_id = self.project(&company, budget, &[&expert]).await;
        self.apply(&expert, project_id, amounts).await;
        (company, expert, project_id, account)
    }

    /// [`parties`](Self::parties) and the selection.
    pub async fn deal(&self, db: &TestDb, name: &str, amounts: &[i64]) -> Deal {
        let (company, expert, project_id, account) = self.parties(db, name, amounts).await;
        let r = self
            .send(
                &company,
                Method::POST,
                &format!("/api/projects/{project_id}/select/{}", expert.id),
                None,
            )
            .await;
        let first_payment = expect(r, StatusCode::OK, "selection").await["payment"]["id"]
            .as_i64()
            .unwrap();
        Deal {
            company,
            expert,
            project_id,
            first_payment,
            account,
        }
    }
}

/// Standard login; the access token.
pub async fn login(http: &reqwest::Client, base: &str, username: &str) -> String {
    let r = http
        .post(format!("{base}/api/auth/login"))
        .json(&j!({"username": username, "password": PASSWORD}))
        .send()
        .await;
    expect(r, StatusCode::OK, "login").await["access_token"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Payment `id`'s intent id, once it has one.
pub async fn intent_of(db: &TestDb, id: i64) -> Option<String> {
    sqlx::query_scalar("SELECT processor_payment_intent_id FROM payments WHERE id = $1")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .ok()
        .flatten()
}

pub async fn status_of(db: &TestDb, id: i64) -> String {
    sqlx::query_scalar("SELECT status FROM payments WHERE id = $1")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .expect("payment status")
}

/// Items of a ledger list (`intents`, `transfers`, `refunds`).
pub fn items<'a>(ledger: &'a Value, list: &str) -> &'a [Value] {
    ledger[list].as_array().map(Vec::as_slice).unwrap_or(&[])
}

pub fn transfers_of(ledger: &Value, payment_id: i64) -> Vec<&Value> {
    items(ledger, "transfers")
        .iter()
        .filter(|t| t["metadata"]["payment_id"].as_str() == Some(payment_id.to_string().as_str()))
        .collect()
}

pub fn intent_in<'a>(ledger: &'a Value, intent: &str) -> Option<&'a Value> {
    items(ledger, "intents").iter().find(|i| i["id"] == intent)
}
