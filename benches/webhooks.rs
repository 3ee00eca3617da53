//! Outgoing user webhook benchmark: deliveries per second to a local HTTPS receiver answering
//! at once, then the same while another receiver hangs on every call (each call runs into
//! the 10 s limit), to show a hanging receiver does not slow deliveries to other users.
//!
//! It measures and prints; it asserts nothing about speed. Run it with
//! `cargo bench --bench webhooks` (`BENCH_WEBHOOK_DELIVERIES`, default 2000, deliveries per
//! phase; `BENCH_WEBHOOK_USERS`, default 20, users per receiver). Outside `cargo bench` it
//! does nothing.

#[path = "../tests/api/webhooks/receiver.rs"]
mod receiver;
mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use marketplace::clock::Clock;
use marketplace::config::Settings;
use marketplace::domain::webhook_rules::WebhookDeliveryState;
use marketplace::startup::Application;
use marketplace::state::AppState;
use marketplace::store::webhook_deliveries::{self, NewDelivery};
use marketplace::workflows::webhooks::JOB;
use receiver::{Receiver, Reply};
use serde_json::json;
use support::{env_number, load_average};

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("webhooks: benchmark skipped (run it with `cargo bench --bench webhooks`)");
        return;
    }
    let deliveries = env_number("BENCH_WEBHOOK_DELIVERIES", 2000, 10, 1_000_000) as usize;
    let users = env_number("BENCH_WEBHOOK_USERS", 20, 1, 1000) as usize;
    println!("== webhooks benchmark");
    println!("load average before the run = {}", load_average());
    actix_web::rt::System::new().block_on(async {
        if let Err(error) = run(deliveries, users).await {
            eprintln!("webhooks benchmark failed: {error:#}");
            std::process::exit(1);
        }
    });
    println!("load average after the run = {}", load_average());
}

async fn run(deliveries: usize, users: usize) -> anyhow::Result<()> {
    let data = tempfile::tempdir()?;
    let ca = receiver::ca_file();
    let vars: HashMap<&str, String> = HashMap::from([
        ("BIND_ADDR", "127.0.0.1:0".to_owned()),
        ("DATA_DIR", data.path().display().to_string()),
        ("RATE_LIMIT_PER_MINUTE", "0".to_owned()),
        ("BCRYPT_COST", "4".to_owned()),
        ("WORKERS", "2".to_owned()),
        ("LOG_LEVEL", "error".to_owned()),
        ("RUST_LOG", "error".to_owned()),
        ("WEBHOOK_ALLOW_PRIVATE_TARGETS", "true".to_owned()),
        ("WEBHOOK_CA_FILE", ca),
    ]);
    let settings = Settings::from_lookup(|k| vars.get(k).cloned()).context("settings")?;
    let app = Application::build_with_clock(settings, Clock::system()).await?;
    let base = format!("http://127.0.0.1:{}", app.port());
    let state = app.state().clone();
    actix_web::rt::spawn(app.run_until_stopped());
    let client = reqwest::Client::new();

    // Fast users on 127.0.0.1, hanging users on `localhost`: two destination hosts.
    let fast = Receiver::start().await;
    let slow = Receiver::start().await;
    slow.always(Reply::Hang(Duration::from_secs(15)));
    let mut fast_users = Vec::new();
    let mut slow_users = Vec::new();
    for i in 0..users * 2 {
        let id = register(&client, &base, i).await?;
        let (rx, host, list) = if i % 2 == 0 {
            (&fast, "127.0.0.1", &mut fast_users)
        } else {
            (&slow, "localhost", &mut slow_users)
        };
        configure(
            &client,
            &base,
            &id,
            &format!("https://{host}:{}/u{}", rx.port, id.0),
        )
        .await?;
        list.push(id.0);
    }

    // 1. Deliveries per second to a receiver answering at once.
    let (rate_alone, took) = phase(&state, "a", &fast_users, deliveries).await?;
    println!(
        "alone: {deliveries} deliveries in {:.2} s = {rate_alone:.0} deliveries/s \
         (at most {} in flight per host)",
        took.as_secs_f64(),
        marketplace::integrations::webhook_http::PER_HOST
    );

    // 2. The same while every call to the other host hangs.
    queue(&state, "s", &slow_users, users * 5).await?;
    state.jobs.wake(JOB);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (rate_beside, took) = phase(&state, "b", &fast_users, deliveries).await?;
    println!(
        "beside a hanging receiver: {deliveries} deliveries in {:.2} s = {rate_beside:.0} \
         deliveries/s ({:.0} % of alone); calls held by the hanging receiver: {}",
        took.as_secs_f64(),
        100.0 * rate_beside / rate_alone,
        slow.hits().len()
    );
    println!(
        "| phase | deliveries/s |\n|---|---|\n| alone | {rate_alone:.0} |\n| beside a hanging receiver | {rate_beside:.0} |"
    );
    Ok(())
}

struct Id(i64, String, String);

async fn register(client: &reqwest::Client, base: &str, i: usize) -> anyhow::Result<Id> {
    let tag = support::lowercase_token(6);
    let r = client
        .post(format!("{base}/api/auth/register"))
        .json(&json!({"email": format!("hook{i}{tag}@example.com"), "username": format!("hook{i}{tag}"),
                      "password": "Bench-Passw0rd!", "roles": ["empresa"]}))
        .send()
        .await?;
    anyhow::ensure!(r.status() == 201, "registration: {}", r.status());
    let body: serde_json::Value = r.json().await?;
    Ok(Id(
        body["user"]["id"].as_i64().context("user id")?,
        body["access_token"].as_str().context("token")?.to_owned(),
        body["csrf_token"].as_str().context("csrf")?.to_owned(),
    ))
}

async fn configure(client: &reqwest::Client, base: &str, id: &Id, url: &str) -> anyhow::Result<()> {
    let r = client
        .put(format!("{base}/api/users/me/webhook"))
        .bearer_auth(&id.1)
        .header("Cookie", format!("csrf_token={}", id.2))
        .header("X-CSRF-Token", &id.2)
        .json(&json!({"url": url, "enabled": true, "auth_method": "JWT"}))
        .send()
        .await?;
    anyhow::ensure!(r.status() == 200, "webhook configuration: {}", r.status());
    Ok(())
}

/// Queues `n` deliveries spread over `users`, ids prefixed `msg_bench_<tag>_`.
async fn queue(state: &AppState, tag: &str, users: &[i64], n: usize) -> anyhow::Result<()> {
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    for i in 0..n {
        let user_id = users[i % users.len()];
        let id = format!("msg_bench_{tag}_{i}");
        let body = json!({"id": id, "type": "project.created", "created_at": now,
                          "data": {"id": i, "title": "Bench"}})
        .to_string();
        webhook_deliveries::insert(
            tx.exec(),
            &NewDelivery {
                message_id: &id,
                user_id,
                event_id: None,
                event_type: "project.created",
                body: &body,
                state: WebhookDeliveryState::Pending,
            },
            now,
        )
        .await?;
    }
    tx.commit().await?;
    Ok(())
}

async fn delivered(state: &AppState, prefix: &str) -> anyhow::Result<i64> {
    let mut conn = state.db.conn().await?;
    let pattern = format!("{prefix}%");
    Ok(
        marketplace::on_exec!(conn.exec(), c => sqlx::query_scalar::<_, i64>(
        "SELECT COUNT(*) FROM webhook_deliveries WHERE state = 'delivered' AND message_id LIKE $1")
        .bind(&pattern).fetch_one(c).await)?,
    )
}

/// Queues `n` deliveries to `users` and times them until all are delivered.
async fn phase(
    state: &AppState,
    tag: &str,
    users: &[i64],
    n: usize,
) -> anyhow::Result<(f64, Duration)> {
    queue(state, tag, users, n).await?;
    let started = Instant::now();
    state.jobs.wake(JOB);
    let prefix = format!("msg_bench_{tag}_");
    let deadline = started + Duration::from_secs(600);
    while delivered(state, &prefix).await? < n as i64 {
        anyhow::ensure!(Instant::now() < deadline, "phase {tag} did not finish");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let took = started.elapsed();
    Ok((n as f64 / took.as_secs_f64(), took))
}
