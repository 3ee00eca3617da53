//! Escrow benchmarks, on SQLite and (with `BENCH_DATABASE_URL`) PostgreSQL:
//!
//! 1. **Signed webhook events applied per second**: `BENCH_EVENTS` distinct pending payments,
//!    one signed `payment_intent.amount_capturable_updated` each, posted by
//!    `BENCH_WEBHOOK_CLIENTS` concurrent senders to the receiver. The clock runs from the
//!    first post until every event is applied (stored, then held in its payment's actor:
//!    payment, milestone, project, notification event, processed mark). Each payment is
//!    held once; the same events posted again measure duplicates (verified, found stored).
//! 2. **Delivery approval → released payment with its transfer**: `BENCH_RELEASES` funded
//!    milestones (authorised at the sandbox for real), each with a submitted delivery; the
//!    company approves them one after the other and each `PUT …/review` is timed until its
//!    answer, which comes after the capture, the commission, the transfer to the connected
//!    account and the next milestone's preparation.
//! 3. **Disputes**: `BENCH_DISPUTES` funded milestones; on each the company raises a dispute
//!    (`POST /api/projects/{id}/dispute`: project and payment frozen, audit line, notices) and
//!    an administrator resolves it for the expert (`PUT /api/admin/disputes/{id}/resolve`:
//!    capture, commission, transfer, resolution). Both calls are timed.
//!
//! Set-up (users, profiles, projects, payments and their intents) goes through the store and
//! workflows directly and is not measured. It measures and prints; it asserts nothing.
//! Run it with `cargo bench --bench escrow`; without `--bench` it does nothing.

#[path = "../tests/api/smtp_server.rs"]
mod smtp_server;
mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use marketplace::clock::Clock;
use marketplace::config::Settings;
use marketplace::domain::milestone::MilestoneStatus;
use marketplace::domain::project::{ProjectStatus, ValidationStatus};
use marketplace::domain::user::Role;
use marketplace::integrations::processor::CreateAccount;
use marketplace::integrations::processor::webhook::{SIGNATURE_HEADER, sign};
use marketplace::startup::Application;
use marketplace::state::AppState;
use marketplace::store::milestones::{self, NewMilestone};
use marketplace::store::payments::{self, NewPayment};
use marketplace::store::projects::{self, NewProject};
use marketplace::workflows::{accounts, payments as payment_flow};
use serde_json::{Value, json};
use support::{
    FreshPostgres, cpu_by_thread, cpu_split, cpu_ticks, cpu_use, env_number, env_text,
    load_average, lowercase_token,
};

const PASSWORD: &str = "Bench-Passw0rd!";

struct Config {
    events: usize,
    clients: usize,
    releases: usize,
    disputes: usize,
    postgres_admin_url: Option<String>,
    redis_url: Option<String>,
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("escrow: benchmark skipped (run it with `cargo bench --bench escrow`)");
        return;
    }
    let config = Config {
        events: env_number("BENCH_EVENTS", 500, 10, 100_000) as usize,
        clients: env_number("BENCH_WEBHOOK_CLIENTS", 8, 1, 256) as usize,
        releases: env_number("BENCH_RELEASES", 30, 1, 10_000) as usize,
        disputes: env_number("BENCH_DISPUTES", 20, 1, 10_000) as usize,
        postgres_admin_url: env_text("BENCH_DATABASE_URL"),
        redis_url: env_text("REDIS_URL"),
    };
    println!(
        "== escrow benchmark, load average before = {}",
        load_average()
    );
    let mut engines = vec![false];
    if config.postgres_admin_url.is_some() {
        engines.push(true);
    }
    actix_web::rt::System::new().block_on(async {
        for postgres in engines {
            let label = match (postgres, config.redis_url.is_some()) {
                (false, _) => "sqlite",
                (true, false) => "postgres",
                (true, true) => "postgres + redis",
            };
            println!("\n== {label}");
            if let Err(err) = run_engine(postgres, &config).await {
                println!("{label}: failed: {err:#}");
            }
        }
    });
    println!("\nload average after = {}", load_average());
}

async fn run_engine(postgres: bool, config: &Config) -> anyhow::Result<()> {
    let data = tempfile::tempdir()?;
    let mut vars: HashMap<&str, String> = HashMap::new();
    vars.insert("BIND_ADDR", "127.0.0.1:0".into());
    vars.insert("DATA_DIR", data.path().display().to_string());
    // E-mail leaves over SMTP, as in production (the file outbox, the default without it,
    // is a stand-in for development and tests).
    vars.insert("SMTP_URL", format!("smtp://127.0.0.1:{}", smtp_server()?));
    vars.insert("BCRYPT_COST", "4".into());
    vars.insert("WORKERS", "2".into());
    vars.insert("RATE_LIMIT_PER_MINUTE", "0".into());
    vars.insert("CACHE_PREFIX", format!("bench:{}:", lowercase_token(9)));
    let database = match (&config.postgres_admin_url, postgres) {
        (Some(admin), true) => {
            let db = FreshPostgres::create(admin).await?;
            vars.insert("DATABASE_URL", db.url.clone());
            // Production runs PostgreSQL with Redis (notifications are published there).
            if let Some(redis) = &config.redis_url {
                vars.insert("REDIS_URL", redis.clone());
            }
            Some(db)
        }
        _ => None,
    };
    let settings = Settings::from_lookup(|k| vars.get(k).cloned()).context("settings")?;
    let app = Application::build_with_clock(settings, Clock::system()).await?;
    let base = format!("http://127.0.0.1:{}", app.port());
    let state = app.state().clone();
    let server = app.server_handle();
    actix_web::rt::spawn(app.run_until_stopped());

    let result = measure(&state, &base, config).await;
    server.stop(false).await;
    // Every key of this run is under its own prefix; some would otherwise stay for weeks.
    // The outbox finishes first, or its last keys would come after.
    let _ = wait_dispatched(&state).await;
    if let Err(err) = state.cache.delete_prefix("").await {
        println!("the run's cache keys were not deleted: {err}");
    }
    state.db.close().await;
    if let Some(db) = database {
        db.drop_database().await;
    }
    result
}

/// Starts an SMTP server that accepts every message (the tests' one) on a thread and
/// runtime of its own, like a mail server on another machine; answers its port.
fn smtp_server() -> anyhow::Result<u16> {
    let (port, started) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("bench-smtp".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("the SMTP server's runtime");
            runtime.block_on(async {
                let (_server, listening) = smtp_server::SmtpServer::start().await;
                let _ = port.send(listening);
                std::future::pending::<()>().await;
            });
        })?;
    Ok(started.recv()?)
}

async fn measure(state: &AppState, base: &str, config: &Config) -> anyhow::Result<()> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(config.clients + 4)
        .build()?;
    let parties = Parties::create(state, base, &client).await?;

    // 1. Webhook events.
    let pending = parties.payments(state, config.events, 1).await?;
    let events: Vec<String> = pending
        .iter()
        .enumerate()
        .map(|(i, (payment_id, intent))| {
            json!({"id": format!("evt_bench_{i}_{}", lowercase_token(4)), "object": "event",
                   "type": "payment_intent.amount_capturable_updated",
                   "created": chrono::Utc::now().timestamp(), "api_version": "2024-12-18.acacia",
                   "data": {"object": {"id": intent, "object": "payment_intent", "amount": 1000,
                       "amount_capturable": 1000, "amount_received": 0, "currency": "eur",
                       "status": "requires_capture", "capture_method": "manual",
                       "metadata": {"payment_id": payment_id.to_string()}}}})
            .to_string()
        })
        .collect();
    let secret = state.processor.webhook_secret.expose().to_owned();
    // Duplicates are answered without being applied again: their line reports the answers.
    for round in ["new events", "duplicates"] {
        let cpu_before = cpu_ticks();
        let threads_before = cpu_by_thread();
        let started = Instant::now();
        let errors = post_all(base, &events, &secret, config.clients).await;
        let posted = started.elapsed();
        wait_applied(state).await?;
        let elapsed = started.elapsed();
        let cpu = cpu_use(cpu_before, cpu_ticks(), events.len());
        let applied = count(
            state,
            "SELECT COUNT(*) FROM processor_events
             WHERE processed_at IS NOT NULL AND id LIKE 'evt_bench_%' AND $1 = $1",
            0,
        )
        .await?;
        println!(
            "webhooks ({round}): {} events, {} senders: answered in {:.2} s, all applied after \
             {:.2} s → {:.0} events/s applied ({errors} errors, {applied} applied; {cpu})",
            events.len(),
            config.clients,
            posted.as_secs_f64(),
            elapsed.as_secs_f64(),
            events.len() as f64 / elapsed.as_secs_f64(),
        );
        if round == "new events" {
            // What the holds set off (notifications, e-mails, webhooks) is delivered after:
            // the time and CPU until then are what a steady stream of events costs.
            wait_dispatched(state).await?;
            let settled = started.elapsed();
            println!(
                "  delivered by the outbox after {:.2} s → {:.0} events/s in all ({})",
                settled.as_secs_f64(),
                events.len() as f64 / settled.as_secs_f64(),
                cpu_use(cpu_before, cpu_ticks(), events.len()),
            );
            // The e-mails have a queue of their own, sent at the mail server's pace.
            wait_mailed(state).await?;
            let mailed = started.elapsed();
            println!(
                "  e-mails sent after {:.2} s → {:.0} events/s",
                mailed.as_secs_f64(),
                events.len() as f64 / mailed.as_secs_f64(),
            );
            println!(
                "  CPU per event, by thread: {}",
                cpu_split(&threads_before, &cpu_by_thread(), events.len())
            );
        }
    }

    // 2. Approval → released with transfer.
    let funded = parties.payments(state, config.releases, 2).await?;
    fund_all(state, base, &client, &funded).await?;
    let mut deliveries = Vec::new();
    for (payment_id, _) in &funded {
        let milestone = payment_milestone(state, *payment_id).await?;
        let r = client
            .post(format!("{base}/api/milestones/deliveries/"))
            .bearer_auth(&parties.expert_token)
            .json(&json!({"milestone_id": milestone, "description": "Delivered"}))
            .send()
            .await?;
        anyhow::ensure!(r.status().is_success(), "delivery: {}", r.status());
        let body: Value = r.json().await?;
        deliveries.push(body["id"].as_i64().unwrap_or_default());
    }
    let mut latencies = Vec::new();
    let mut not_transferred = 0;
    for delivery in deliveries {
        let started = Instant::now();
        let r = client
            .put(format!(
                "{base}/api/milestones/deliveries/{delivery}/review"
            ))
            .bearer_auth(&parties.company_token)
            .json(&json!({"decision": "approve"}))
            .send()
            .await?;
        let status = r.status();
        let body: Value = r.json().await?;
        latencies.push(started.elapsed());
        anyhow::ensure!(status.is_success(), "approval: {status} {body}");
        if body["payment"]["payout_status"] != "transferred" {
            not_transferred += 1;
        }
    }
    report(
        "approval → released with transfer",
        latencies,
        &format!("{not_transferred} not transferred"),
    );

    // 3. Disputes raised and resolved for the expert.
    let funded = parties.payments(state, config.disputes, 2).await?;
    fund_all(state, base, &client, &funded).await?;
    let (mut raised, mut resolved) = (Vec::new(), Vec::new());
    let mut not_transferred = 0;
    for (payment_id, _) in &funded {
        let project = count(
            state,
            "SELECT project_id FROM payments WHERE id = $1",
            *payment_id,
        )
        .await?;
        let started = Instant::now();
        let r = client
            .post(format!("{base}/api/projects/{project}/dispute"))
            .bearer_auth(&parties.company_token)
            .json(&json!({"reason": "The delivery is late."}))
            .send()
            .await?;
        let status = r.status();
        let body: Value = r.json().await?;
        raised.push(started.elapsed());
        anyhow::ensure!(status.is_success(), "dispute: {status} {body}");
        let dispute = body["dispute_id"].as_i64().unwrap_or_default();
        let started = Instant::now();
        let r = client
            .put(format!("{base}/api/admin/disputes/{dispute}/resolve"))
            .bearer_auth(&parties.admin_token)
            .json(&json!({"resolution": "Delivered after all; paid.",
                          "resolution_action": "release_to_expert"}))
            .send()
            .await?;
        let status = r.status();
        let body: Value = r.json().await?;
        resolved.push(started.elapsed());
        anyhow::ensure!(status.is_success(), "resolution: {status} {body}");
        if body["payments"][0]["payout_status"] != "transferred" {
            not_transferred += 1;
        }
    }
    report("dispute raised", raised, "project and payment frozen");
    report(
        "dispute resolved for the expert",
        resolved,
        &format!("{not_transferred} not transferred"),
    );
    Ok(())
}

/// Prints a latency line: n, mean, p50, p90, max.
fn report(what: &str, mut latencies: Vec<Duration>, note: &str) {
    latencies.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mean = latencies.iter().map(|d| ms(*d)).sum::<f64>() / latencies.len() as f64;
    println!(
        "{what}: n = {}, mean {:.1} ms, p50 {:.1} ms, p90 {:.1} ms, max {:.1} ms ({note})",
        latencies.len(),
        mean,
        ms(latencies[latencies.len() / 2]),
        ms(latencies[latencies.len() * 9 / 10]),
        ms(*latencies.last().unwrap()),
    );
}

/// The company's card authorises each payment at the sandbox; waits until each is `held`.
async fn fund_all(
    state: &AppState,
    base: &str,
    client: &reqwest::Client,
    payments: &[(i64, String)],
) -> anyhow::Result<()> {
    for (payment_id, intent) in payments {
        let r = client
            .post(format!(
                "{base}/api/sandbox/payment_intents/{intent}/confirm"
            ))
            .json(&json!({"payment_method": "pm_card_visa"}))
            .send()
            .await?;
        anyhow::ensure!(r.status().is_success(), "confirm: {}", r.status());
        wait_held(state, *payment_id).await?;
    }
    Ok(())
}

/// The company and the expert (verified, fiscal data complete, onboarded payout account).
struct Parties {
    company_id: i64,
    expert_id: i64,
    company_token: String,
    expert_token: String,
    admin_token: String,
}

impl Parties {
    async fn create(
        state: &AppState,
        base: &str,
        client: &reqwest::Client,
    ) -> anyhow::Result<Self> {
        let (db, clock) = (&state.db, &state.clock);
        let company_id = accounts::create_user(
            db,
            clock,
            4,
            "co@bench.local",
            "benchco",
            PASSWORD,
            &[Role::Empresa],
        )
        .await?;
        let expert_id = accounts::create_user(
            db,
            clock,
            4,
            "ex@bench.local",
            "benchex",
            PASSWORD,
            &[Role::Experto],
        )
        .await?;
        accounts::create_admin(db, clock, 4, "admin@bench.local", "benchadmin", PASSWORD).await?;
        let account = state
            .processor
            .client
            .create_account(
                &CreateAccount {
                    email: "ex@bench.local".into(),
                    country: Some("ES".into()),
                    metadata: Default::default(),
                },
                "bench_account",
            )
            .await?;
        client
            .post(format!(
                "{base}/api/sandbox/accounts/{}/complete-onboarding",
                account.id
            ))
            .json(&json!({}))
            .send()
            .await?;
        let now = clock.now();
        let mut conn = db.conn().await?;
        for (user, kind, connect) in [
            (company_id, "empresa", None),
            (expert_id, "experto", Some(&account.id)),
        ] {
            marketplace::on_exec!(conn.exec(), c => sqlx::query(
                "INSERT INTO profiles (user_id, profile_type, full_name, company_name,
                     fiscal_data_complete, is_verified, processor_connect_account_id,
                     processor_connect_status, created_at, updated_at)
                 VALUES ($1, $2, 'Bench', 'Bench SL', TRUE, TRUE, $3,
                     CASE WHEN $3 IS NULL THEN NULL ELSE 'active' END, $4, $4)")
                .bind(user).bind(kind).bind(connect).bind(now)
                .execute(c).await.map(drop))?;
        }
        Ok(Self {
            company_id,
            expert_id,
            company_token: login(client, base, "benchco").await?,
            expert_token: login(client, base, "benchex").await?,
            admin_token: login(client, base, "benchadmin").await?,
        })
    }

    /// `n` projects in progress, each with `milestones` milestones, the first awaiting its
    /// `pending` payment with a payment intent. Answers (payment id, intent id).
    async fn payments(
        &self,
        state: &AppState,
        n: usize,
        milestones: i64,
    ) -> anyhow::Result<Vec<(i64, String)>> {
        let now = state.clock.now();
        let skills: Vec<String> = Vec::new();
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let mut conn = state.db.conn().await?;
            let project = projects::insert(
                conn.exec(),
                &NewProject {
                    company_id: self.company_id,
                    target_expert_id: None,
                    title: "Bench project",
                    description: "Measured",
                    budget_minor: 1000 * milestones,
                    currency: "eur",
                    deadline: None,
                    skills_required: &skills,
                    project_type: "curated",
                    status: ProjectStatus::Assigned,
                    validation_status: Some(ValidationStatus::Approved),
                    submitted_at: None,
                },
                now,
            )
            .await?;
            marketplace::on_exec!(conn.exec(), c => sqlx::query(
                "UPDATE projects SET expert_id = $1 WHERE id = $2")
                .bind(self.expert_id).bind(project).execute(c).await.map(drop))?;
            let mut first = 0;
            for position in 1..=milestones {
                let id = milestones::insert(
                    conn.exec(),
                    &NewMilestone {
                        project_id: project,
                        position,
                        title: "Bench milestone",
                        description: None,
                        amount_minor: 1000,
                        currency: "eur",
                        due_date: None,
                        status: if position == 1 {
                            MilestoneStatus::AwaitingPayment
                        } else {
                            MilestoneStatus::Pending
                        },
                    },
                    now,
                )
                .await?;
                if position == 1 {
                    first = id;
                }
            }
            let payment_id = payments::insert_pending(
                conn.exec(),
                &NewPayment {
                    project_id: project,
                    milestone_id: Some(first),
                    company_id: Some(self.company_id),
                    expert_id: Some(self.expert_id),
                    amount_minor: 1000,
                    currency: "eur",
                },
                now,
            )
            .await?;
            let payment = payments::find(conn.exec(), payment_id)
                .await?
                .context("payment")?;
            drop(conn);
            let payment = payment_flow::ensure_intent(state, payment).await?;
            out.push((
                payment_id,
                payment.processor_payment_intent_id.unwrap_or_default(),
            ));
        }
        Ok(out)
    }
}

async fn login(client: &reqwest::Client, base: &str, username: &str) -> anyhow::Result<String> {
    let r = client
        .post(format!("{base}/api/auth/login"))
        .json(&json!({"username": username, "password": PASSWORD}))
        .send()
        .await?;
    anyhow::ensure!(r.status().is_success(), "login: {}", r.status());
    let body: Value = r.json().await?;
    body["access_token"]
        .as_str()
        .map(str::to_owned)
        .context("access token")
}

/// Posts every event, signed, from `clients` concurrent senders. Answers the errors.
/// Posts every event once, `clients` at a time, and answers how many were refused. The
/// senders run on a thread and runtime of their own, as the processor sends from another
/// machine: on the service's runtime they would share the thread of its background jobs (the
/// receipts' writer, the applier, the outbox) and slow them down.
async fn post_all(base: &str, events: &[String], secret: &str, clients: usize) -> usize {
    let url = format!("{base}/api/payments/webhooks/processor");
    let chunks: Vec<Vec<String>> = events
        .chunks(events.len().div_ceil(clients))
        .map(|c| c.to_vec())
        .collect();
    let secret = secret.to_owned();
    let (done, errors) = tokio::sync::oneshot::channel();
    // Named, so that the bench's CPU split shows the senders apart from the service.
    let senders = std::thread::Builder::new().name("bench-senders".into());
    let _ = senders.spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("the senders' runtime");
        let _ = done.send(runtime.block_on(send_chunks(url, chunks, secret)));
    });
    errors.await.unwrap_or(events.len())
}

async fn send_chunks(url: String, chunks: Vec<Vec<String>>, secret: String) -> usize {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(chunks.len())
        .build()
        .expect("the senders' client");
    let tasks = chunks.into_iter().map(|chunk| {
        let (client, url, secret) = (client.clone(), &url, &secret);
        async move {
            let mut errors = 0;
            for body in chunk {
                let signature = sign(body.as_bytes(), secret, chrono::Utc::now().timestamp());
                let ok = client
                    .post(url)
                    .header(SIGNATURE_HEADER, signature)
                    .header("Content-Type", "application/json")
                    .body(body)
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success());
                errors += usize::from(!ok);
            }
            errors
        }
    });
    futures_util::future::join_all(tasks)
        .await
        .into_iter()
        .sum()
}

async fn count(state: &AppState, sql: &'static str, id: i64) -> anyhow::Result<i64> {
    let mut conn = state.db.conn().await?;
    Ok(
        marketplace::on_exec!(conn.exec(), c => sqlx::query_scalar::<_, i64>(sql).bind(id).fetch_one(c).await)?,
    )
}

/// Waits (10 ms polls, 5 minutes at most) until no stored event waits to be applied: every
/// post has been answered by then, so every new event is stored.
async fn wait_applied(state: &AppState) -> anyhow::Result<()> {
    let waiting = "SELECT COUNT(*) FROM processor_events WHERE processed_at IS NULL AND $1 = $1";
    wait_none(state, waiting, "events not applied in time").await
}

/// Waits (10 ms polls, 5 minutes at most) until every queued e-mail is sent.
async fn wait_mailed(state: &AppState) -> anyhow::Result<()> {
    let waiting = "SELECT COUNT(*) FROM mail_queue WHERE sent_at IS NULL AND $1 = $1";
    wait_none(state, waiting, "e-mails not sent in time").await
}

/// Waits (10 ms polls, 5 minutes at most) until the outbox has delivered every event.
async fn wait_dispatched(state: &AppState) -> anyhow::Result<()> {
    let waiting = "SELECT COUNT(*) FROM events WHERE dispatched_at IS NULL AND $1 = $1";
    wait_none(state, waiting, "events not delivered in time").await
}

/// Polls the count `waiting` (10 ms apart, 5 minutes at most) until it is 0. Each count
/// reads an index of the rows still waiting, so polling costs the database little while a
/// burst runs.
async fn wait_none(state: &AppState, waiting: &'static str, late: &str) -> anyhow::Result<()> {
    for _ in 0..30_000 {
        if count(state, waiting, 0).await? == 0 {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    anyhow::bail!("{late}")
}

async fn wait_held(state: &AppState, payment_id: i64) -> anyhow::Result<()> {
    for _ in 0..1000 {
        let held = count(
            state,
            "SELECT COUNT(*) FROM payments WHERE id = $1 AND status = 'held'",
            payment_id,
        )
        .await?;
        if held == 1 {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    anyhow::bail!("payment {payment_id} not held")
}

async fn payment_milestone(state: &AppState, payment_id: i64) -> anyhow::Result<i64> {
    count(
        state,
        "SELECT milestone_id FROM payments WHERE id = $1",
        payment_id,
    )
    .await
}
