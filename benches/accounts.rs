//! Account benchmarks: what one bcrypt verification costs, how many logins per second the
//! service sustains at the real bcrypt cost, how fast an authenticated read
//! (`GET /api/users/me`) is, and what an `Idempotency-Key` adds to a small write
//! (`POST /api/notifications/mark-all-read` with and without a key), on SQLite and (when
//! configured) PostgreSQL and Redis.
//!
//! It measures and prints; it asserts nothing about speed. Run it with
//! `cargo bench --bench accounts` (see `benches/README.md` for the variables).
//!
//! Outside `cargo bench` (no `--bench` argument, as under `cargo test --benches`) it does
//! nothing, so a test run never spends minutes here.

#[path = "support/crm_load.rs"]
mod crm_load;
mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use marketplace::clock::Clock;
use marketplace::config::Settings;
use marketplace::startup::Application;
use serde_json::{Value, json};
use support::{FreshPostgres, env_number, env_text, load_average, lowercase_token};

/// The production default (`BCRYPT_COST`), which both the micro benchmark and the server use.
const BCRYPT_COST: u32 = 12;
/// Meets the password policy (upper, lower, digit, special, 8+ characters).
const PASSWORD: &str = "Bench-Passw0rd!";
/// The server under test always gets two workers, whatever the machine.
const SERVER_WORKERS: &str = "2";

/// What the run is told by the environment.
#[derive(Clone, Debug)]
struct Config {
    duration: Duration,
    warmup: Duration,
    login_clients: usize,
    me_clients: usize,
    bcrypt_iterations: usize,
    /// Upper bound of requests per client and phase, whatever the duration.
    max_requests_per_client: usize,
    postgres_admin_url: Option<String>,
    redis_url: Option<String>,
}

impl Config {
    fn from_env() -> Self {
        Self {
            duration: Duration::from_secs(env_number("BENCH_SECONDS", 10, 1, 600)),
            warmup: Duration::from_secs(env_number("BENCH_WARMUP_SECONDS", 1, 0, 60)),
            login_clients: env_number("BENCH_LOGIN_CLIENTS", 8, 1, 256) as usize,
            me_clients: env_number("BENCH_ME_CLIENTS", 32, 1, 256) as usize,
            bcrypt_iterations: env_number("BENCH_BCRYPT_ITERATIONS", 20, 20, 1000) as usize,
            max_requests_per_client: env_number("BENCH_MAX_REQUESTS", 200_000, 1, 10_000_000)
                as usize,
            postgres_admin_url: env_text("BENCH_DATABASE_URL"),
            redis_url: env_text("REDIS_URL"),
        }
    }
}

/// One line of the final table.
struct Row {
    target: String,
    metric: &'static str,
    value: String,
}

#[derive(Default)]
struct Table(Vec<Row>);

impl Table {
    fn add(&mut self, target: &str, metric: &'static str, value: String) {
        self.0.push(Row {
            target: target.to_owned(),
            metric,
            value,
        });
    }

    fn print(&self) {
        let w_target = self
            .0
            .iter()
            .map(|r| r.target.len())
            .chain([6])
            .max()
            .unwrap_or(6);
        let w_metric = self
            .0
            .iter()
            .map(|r| r.metric.len())
            .chain([6])
            .max()
            .unwrap_or(6);
        println!();
        println!("{:<w_target$}  {:<w_metric$}  value", "engine", "metric");
        println!("{}", "-".repeat(w_target + w_metric + 16));
        for row in &self.0 {
            println!(
                "{:<w_target$}  {:<w_metric$}  {}",
                row.target, row.metric, row.value
            );
        }
    }
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("accounts: benchmark skipped (run it with `cargo bench --bench accounts`)");
        return;
    }
    let config = Config::from_env();
    let parallelism = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("== accounts benchmark");
    println!(
        "available_parallelism = {parallelism}, load average before the run = {}",
        load_average()
    );
    println!(
        "phases of {} s (+{} s warm-up), {} login clients, {} /users/me clients, at most {} \
         requests per client and phase",
        config.duration.as_secs(),
        config.warmup.as_secs(),
        config.login_clients,
        config.me_clients,
        config.max_requests_per_client
    );

    let mut table = Table::default();

    // 1. bcrypt alone.
    let bcrypt = measure_bcrypt(config.bcrypt_iterations, parallelism);
    let limit = parallelism as f64 / bcrypt.mean;
    println!(
        "bcrypt verify, cost {BCRYPT_COST}: mean {:.1} ms, stdev {:.1} ms, min {:.1} ms, \
         max {:.1} ms over {} iterations",
        bcrypt.mean * 1e3,
        bcrypt.stdev * 1e3,
        bcrypt.min * 1e3,
        bcrypt.max * 1e3,
        bcrypt.samples
    );
    println!(
        "theoretical login limit = {parallelism} / {:.4} s = {limit:.2} logins/s; measured with \
         {parallelism} threads verifying at once: {:.2} verifications/s",
        bcrypt.mean, bcrypt.parallel_rate
    );
    table.add(
        "bcrypt",
        "verify cost 12 (ms, mean ± stdev)",
        format!("{:.1} ± {:.1}", bcrypt.mean * 1e3, bcrypt.stdev * 1e3),
    );
    table.add(
        "bcrypt",
        "theoretical limit (logins/s)",
        format!("{limit:.2} ({parallelism} cores / cost)"),
    );
    table.add(
        "bcrypt",
        "parallel verifications/s",
        format!("{:.2} ({parallelism} threads)", bcrypt.parallel_rate),
    );

    // 2 and 3, against each engine and cache.
    let mut targets = vec![Target {
        postgres: false,
        redis: None,
    }];
    if config.redis_url.is_some() {
        targets.push(Target {
            postgres: false,
            redis: config.redis_url.clone(),
        });
    }
    if config.postgres_admin_url.is_some() {
        targets.push(Target {
            postgres: true,
            redis: None,
        });
        if config.redis_url.is_some() {
            targets.push(Target {
                postgres: true,
                redis: config.redis_url.clone(),
            });
        }
    }

    actix_web::rt::System::new().block_on(async {
        for target in &targets {
            let label = target.label();
            println!("\n== {label}");
            match run_target(target, &config, limit).await {
                Ok(result) => result.record(&label, limit, bcrypt.parallel_rate, &mut table),
                Err(err) => {
                    println!("{label}: failed: {err:#}");
                    table.add(&label, "error", format!("{err:#}"));
                }
            }
        }
        if support::env_number("BENCH_CRM", 1, 0, 1) == 1 {
            for (metric, value) in crm_load::run().await {
                table.add("crm (sqlite+memory)", metric, value);
            }
        }
    });

    table.print();
    println!("\nload average after the run = {}", load_average());
}

struct BcryptStats {
    samples: usize,
    mean: f64,
    stdev: f64,
    min: f64,
    max: f64,
    /// Verifications per second with one thread per core verifying at once.
    parallel_rate: f64,
}

fn measure_bcrypt(iterations: usize, parallelism: usize) -> BcryptStats {
    let hash = bcrypt::hash(PASSWORD, BCRYPT_COST).expect("bcrypt hashes");
    // Warm-up, and a check that the hash is the one we measure against.
    assert!(bcrypt::verify(PASSWORD, &hash).expect("bcrypt verifies"));

    let samples: Vec<f64> = (0..iterations)
        .map(|_| {
            let started = Instant::now();
            let ok = bcrypt::verify(std::hint::black_box(PASSWORD), &hash);
            std::hint::black_box(ok.ok());
            started.elapsed().as_secs_f64()
        })
        .collect();
    let n = samples.len() as f64;
    let mean = samples.iter().sum::<f64>() / n;
    let variance = samples.iter().map(|s| (s - mean).powi(2)).sum::<f64>() / (n - 1.0);

    let per_thread = (iterations / parallelism).max(4);
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..parallelism {
            scope.spawn(|| {
                for _ in 0..per_thread {
                    std::hint::black_box(bcrypt::verify(PASSWORD, &hash).ok());
                }
            });
        }
    });
    let parallel_rate = (per_thread * parallelism) as f64 / started.elapsed().as_secs_f64();

    BcryptStats {
        samples: samples.len(),
        mean,
        stdev: variance.sqrt(),
        min: samples.iter().copied().fold(f64::INFINITY, f64::min),
        max: samples.iter().copied().fold(0.0, f64::max),
        parallel_rate,
    }
}

/// An engine and cache to run the HTTP phases against.
struct Target {
    postgres: bool,
    redis: Option<String>,
}

impl Target {
    fn label(&self) -> String {
        let engine = if self.postgres { "postgres" } else { "sqlite" };
        let cache = if self.redis.is_some() {
            "redis"
        } else {
            "memory"
        };
        format!("{engine}+{cache}")
    }
}

/// What the HTTP phases measured against one target.
struct TargetResult {
    login: LoadResult,
    me: LoadResult,
    /// The same write without a key, then with a new key each time.
    unkeyed: LoadResult,
    keyed: LoadResult,
}

impl TargetResult {
    /// Prints and tabulates the result; `limit` is the theoretical bcrypt limit and
    /// `parallel_rate` the measured one.
    fn record(&self, label: &str, limit: f64, parallel_rate: f64, table: &mut Table) {
        let login_rate = self.login.rate();
        println!(
            "login: {} clients, {login_rate:.2} logins/s ({:.0}% of the theoretical bcrypt \
             limit, {:.0}% of the measured parallel bcrypt rate), {}",
            self.login.clients,
            100.0 * login_rate / limit,
            100.0 * login_rate / parallel_rate,
            self.login.summary()
        );
        println!(
            "/users/me: {} clients, {:.0} req/s, {}",
            self.me.clients,
            self.me.rate(),
            self.me.summary()
        );
        table.add(label, "login (logins/s)", format!("{login_rate:.2}"));
        table.add(
            label,
            "login (fraction of bcrypt limit)",
            format!("{:.0}%", 100.0 * login_rate / limit),
        );
        table.add(
            label,
            "login (fraction of measured bcrypt)",
            format!("{:.0}%", 100.0 * login_rate / parallel_rate),
        );
        table.add(
            label,
            "login p50 / p99 (ms)",
            format!(
                "{:.0} / {:.0} (n = {})",
                self.login.percentile_ms(0.50),
                self.login.percentile_ms(0.99),
                self.login.latencies_us.len()
            ),
        );
        table.add(label, "login errors", self.login.errors.to_string());
        table.add(label, "/users/me (req/s)", format!("{:.0}", self.me.rate()));
        table.add(
            label,
            "/users/me p50 / p99 (ms)",
            format!(
                "{:.2} / {:.2} (n = {})",
                self.me.percentile_ms(0.50),
                self.me.percentile_ms(0.99),
                self.me.latencies_us.len()
            ),
        );
        table.add(label, "/users/me errors", self.me.errors.to_string());
        let writes = [
            (
                "mark-all-read",
                "mark-all-read (req/s)",
                "mark-all-read p50 / p99 (ms)",
                &self.unkeyed,
            ),
            (
                "keyed",
                "same, keyed (req/s)",
                "same, keyed p50 / p99 (ms)",
                &self.keyed,
            ),
        ];
        for (name, rate_row, latency_row, run) in writes {
            println!(
                "{name}: {} clients, {:.0} req/s, {}",
                run.clients,
                run.rate(),
                run.summary()
            );
            table.add(label, rate_row, format!("{:.0}", run.rate()));
            let latency = format!(
                "{:.2} / {:.2} (n = {}, {} errors)",
                run.percentile_ms(0.50),
                run.percentile_ms(0.99),
                run.latencies_us.len(),
                run.errors
            );
            table.add(label, latency_row, latency);
        }
    }
}

/// Starts the server for `target`, drives it from a separate thread, stops it and drops any
/// database created for the run.
async fn run_target(target: &Target, config: &Config, limit: f64) -> anyhow::Result<TargetResult> {
    let data = tempfile::tempdir().context("temporary directory")?;
    let mut vars: HashMap<&str, String> = HashMap::new();
    vars.insert("BIND_ADDR", "127.0.0.1:0".into());
    vars.insert("DATA_DIR", data.path().display().to_string());
    vars.insert("BCRYPT_COST", BCRYPT_COST.to_string());
    vars.insert("WORKERS", SERVER_WORKERS.into());
    vars.insert("RATE_LIMIT_PER_MINUTE", "0".into());
    vars.insert("LOGIN_RATE_LIMIT_MAX_ATTEMPTS_PER_USER", "1000000".into());
    vars.insert("LOGIN_RATE_LIMIT_MAX_ATTEMPTS_PER_IP", "1000000".into());
    vars.insert("CACHE_PREFIX", format!("bench:{}:", lowercase_token(9)));
    if let Some(redis) = &target.redis {
        vars.insert("REDIS_URL", redis.clone());
    }
    let database = match (&config.postgres_admin_url, target.postgres) {
        (Some(admin), true) => {
            let db = FreshPostgres::create(admin).await?;
            vars.insert("DATABASE_URL", db.url.clone());
            Some(db)
        }
        _ => None,
    };

    let result = serve_and_load(&vars, config, limit).await;
    if let Some(db) = database {
        db.drop_database().await;
    }
    drop(data);
    result
}

async fn serve_and_load(
    vars: &HashMap<&str, String>,
    config: &Config,
    limit: f64,
) -> anyhow::Result<TargetResult> {
    let settings = Settings::from_lookup(|k| vars.get(k).cloned()).context("benchmark settings")?;
    let app = Application::build_with_clock(settings, Clock::system())
        .await
        .context("application builds")?;
    let base = format!("http://127.0.0.1:{}", app.port());
    let db = app.state().db.clone();
    let server = app.server_handle();
    actix_web::rt::spawn(app.run_until_stopped());

    // The load runs on its own thread and runtime, so it never shares the thread that runs the
    // server's accept loop and cache connection.
    let (tx, rx) = tokio::sync::oneshot::channel();
    let load_config = config.clone();
    std::thread::spawn(move || {
        let result = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("load runtime")
            .and_then(|rt| rt.block_on(load(&base, &load_config, limit)));
        let _ = tx.send(result);
    });
    let result = match rx.await {
        Ok(result) => result,
        Err(_) => Err(anyhow::anyhow!("the load thread panicked")),
    };

    server.stop(false).await;
    db.close().await;
    result
}

/// Registers the users, then runs the login phase and the `/users/me` phase.
async fn load(base: &str, config: &Config, limit: f64) -> anyhow::Result<TargetResult> {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(config.login_clients.max(config.me_clients) + 8)
        .build()
        .context("HTTP client")?;

    // One user per login client (so their logins never queue on one user's session lock),
    // and one reader for /users/me.
    let logins: Vec<String> = (0..config.login_clients)
        .map(|i| format!("bench_login_{i}"))
        .chain(["bench_reader".to_owned()])
        .collect();
    let registered =
        futures_util::future::join_all(logins.iter().map(|name| register(&client, base, name)))
            .await;
    for outcome in registered {
        outcome?;
    }

    let login_url = format!("{base}/api/auth/login");
    let login_bodies: Vec<Value> = logins
        .iter()
        .map(|name| json!({ "username": name, "password": PASSWORD }))
        .collect();
    let login_request = |i: usize| client.post(&login_url).json(&login_bodies[i]);

    println!(
        "login: {} clients for {} s (bcrypt limit {limit:.2}/s)…",
        config.login_clients,
        config.duration.as_secs()
    );
    run_load(
        config.login_clients,
        config.warmup,
        config.max_requests_per_client,
        login_request,
    )
    .await;
    let login = run_load(
        config.login_clients,
        config.duration,
        config.max_requests_per_client,
        login_request,
    )
    .await;

    let reader = login_bodies.last().expect("the reader");
    let response = client
        .post(&login_url)
        .json(reader)
        .send()
        .await
        .context("reader login")?;
    let status = response.status();
    let body: Value = response.json().await.context("reader login body")?;
    let token = body["access_token"]
        .as_str()
        .with_context(|| format!("reader login answered {status}: {body}"))?
        .to_owned();
    let me_url = format!("{base}/api/users/me");
    let me_request = |_: usize| client.get(&me_url).bearer_auth(&token);

    let me = phase("/users/me", config, me_request).await;

    // A small write, then the same write under a new key each time: the key's cost is its
    // fingerprint and the key's row, taken and answered.
    let write_url = format!("{base}/api/notifications/mark-all-read");
    let unkeyed_request = |_: usize| client.post(&write_url).bearer_auth(&token);
    let next_key = std::sync::atomic::AtomicU64::new(0);
    let keyed_request = |_: usize| {
        let key = next_key.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        unkeyed_request(0).header("Idempotency-Key", format!("bench-{key}"))
    };
    let unkeyed = phase("mark-all-read", config, &unkeyed_request).await;
    let keyed = phase("mark-all-read, keyed", config, keyed_request).await;

    Ok(TargetResult {
        login,
        me,
        unkeyed,
        keyed,
    })
}

async fn register(client: &reqwest::Client, base: &str, username: &str) -> anyhow::Result<()> {
    let response = client
        .post(format!("{base}/api/auth/register"))
        .json(&json!({
            "email": format!("{username}@bench.example"),
            "username": username,
            "password": PASSWORD,
            "roles": ["experto"],
        }))
        .send()
        .await
        .with_context(|| format!("register {username}"))?;
    let status = response.status();
    if status.as_u16() != 201 {
        let body = response.text().await.unwrap_or_default();
        anyhow::bail!("register {username} answered {status}: {body}");
    }
    Ok(())
}

/// Latencies and errors of one phase.
struct LoadResult {
    clients: usize,
    elapsed: Duration,
    /// Latency of each successful request, in microseconds, sorted.
    latencies_us: Vec<u32>,
    errors: usize,
    first_error: Option<String>,
}

impl LoadResult {
    fn rate(&self) -> f64 {
        self.latencies_us.len() as f64 / self.elapsed.as_secs_f64()
    }

    /// Nearest-rank percentile, in milliseconds (NaN without samples).
    fn percentile_ms(&self, p: f64) -> f64 {
        let n = self.latencies_us.len();
        if n == 0 {
            return f64::NAN;
        }
        let rank = ((p * n as f64).ceil() as usize).clamp(1, n);
        f64::from(self.latencies_us[rank - 1]) / 1000.0
    }

    fn summary(&self) -> String {
        let mut text = format!(
            "{} ok in {:.2} s, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms, {} errors",
            self.latencies_us.len(),
            self.elapsed.as_secs_f64(),
            self.percentile_ms(0.50),
            self.percentile_ms(0.99),
            self.percentile_ms(1.0),
            self.errors
        );
        if let Some(first) = &self.first_error {
            text.push_str(&format!(" (first: {first})"));
        }
        text
    }
}

/// A phase of `BENCH_ME_CLIENTS` clients sending `request`: an unmeasured warm-up, then the
/// measured run.
async fn phase<F>(name: &str, config: &Config, request: F) -> LoadResult
where
    F: Fn(usize) -> reqwest::RequestBuilder,
{
    let clients = config.me_clients;
    println!(
        "{name}: {clients} clients for {} s…",
        config.duration.as_secs()
    );
    let most = config.max_requests_per_client;
    run_load(clients, config.warmup, most, &request).await;
    run_load(clients, config.duration, most, &request).await
}

/// `clients` concurrent loops, each sending `request(client index)` one after the other until
/// `duration` has passed or it has sent `max_per_client` requests (or met 1000 errors).
async fn run_load<F>(
    clients: usize,
    duration: Duration,
    max_per_client: usize,
    request: F,
) -> LoadResult
where
    F: Fn(usize) -> reqwest::RequestBuilder,
{
    let started = Instant::now();
    let deadline = started + duration;
    let request = &request;
    let per_client = futures_util::future::join_all((0..clients).map(|i| async move {
        let mut latencies = Vec::with_capacity(max_per_client.min(65_536));
        let mut errors = 0usize;
        let mut first_error = None;
        let mut sent = 0usize;
        while Instant::now() < deadline && sent < max_per_client && errors < 1000 {
            sent += 1;
            let begun = Instant::now();
            let outcome = match request(i).send().await {
                Ok(response) => {
                    let status = response.status();
                    match response.bytes().await {
                        Ok(_) if status.is_success() => Ok(()),
                        Ok(body) => Err(format!(
                            "{status}: {}",
                            String::from_utf8_lossy(&body[..body.len().min(200)])
                        )),
                        Err(err) => Err(format!("body: {err}")),
                    }
                }
                Err(err) => Err(format!("send: {err}")),
            };
            match outcome {
                Ok(()) => {
                    let us = begun.elapsed().as_micros().min(u128::from(u32::MAX)) as u32;
                    latencies.push(us);
                }
                Err(err) => {
                    errors += 1;
                    first_error.get_or_insert(err);
                }
            }
        }
        (latencies, errors, first_error)
    }))
    .await;
    let elapsed = started.elapsed();

    let mut result = LoadResult {
        clients,
        elapsed,
        latencies_us: Vec::new(),
        errors: 0,
        first_error: None,
    };
    for (latencies, errors, first_error) in per_client {
        result.latencies_us.extend(latencies);
        result.errors += errors;
        if result.first_error.is_none() {
            result.first_error = first_error;
        }
    }
    result.latencies_us.sort_unstable();
    result
}
