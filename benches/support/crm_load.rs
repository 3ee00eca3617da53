//! The CRM phase of the `accounts` bench (issue 17):
//! - sign-ups per second with the CRM off and with the CRM sandbox on: the sync runs in the
//!   background, so the two should match;
//! - a burst of 1,000 CRM calls queued at once against the sandbox: the most requests sent in
//!   any 10 s window, which the client-side limiter keeps at 100 or fewer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use marketplace::clock::Clock;
use marketplace::config::{Secret, Settings};
use marketplace::integrations::crm::{
    BURST_LIMIT, BURST_WINDOW, ClientConfig, CrmClient, CrmMetrics, CrmSandbox,
};
use marketplace::startup::Application;
use serde_json::json;

use super::{env_number, lowercase_token};

/// Sign-ups per second with `CRM_API_BASE` unset (off) or `sandbox`; (rate, syncs logged by
/// the end).
async fn signups(crm: Option<&str>, users: usize, clients: usize) -> anyhow::Result<(f64, i64)> {
    let data = tempfile::tempdir()?;
    let mut vars: HashMap<&str, String> = HashMap::new();
    vars.insert("BIND_ADDR", "127.0.0.1:0".into());
    vars.insert("DATA_DIR", data.path().display().to_string());
    // A cheap hash, so what is measured is the request path, not bcrypt.
    vars.insert("BCRYPT_COST", "4".into());
    vars.insert("WORKERS", "2".into());
    vars.insert("RATE_LIMIT_PER_MINUTE", "0".into());
    if let Some(base) = crm {
        vars.insert("CRM_API_BASE", base.into());
    }
    let settings = Settings::from_lookup(|k| vars.get(k).cloned()).context("settings")?;
    let app = Application::build_with_clock(settings, Clock::system()).await?;
    let base = format!("http://127.0.0.1:{}", app.port());
    let db = app.state().db.clone();
    let server = app.server_handle();
    actix_web::rt::spawn(app.run_until_stopped());
    let client = reqwest::Client::new();
    let tag = lowercase_token(4);
    let next = Arc::new(Mutex::new(0usize));
    let started = Instant::now();
    let loops = (0..clients).map(|_| {
        let (client, base, next, tag) = (client.clone(), base.clone(), next.clone(), tag.clone());
        async move {
            loop {
                let i = {
                    let mut n = next.lock().unwrap();
                    *n += 1;
                    *n
                };
                if i > users {
                    return Ok::<_, anyhow::Error>(());
                }
                let response = client
                    .post(format!("{base}/api/auth/register"))
                    .json(&json!({"email": format!("u{i}{tag}@bench.example"), "username": format!("u{i}_{tag}"),
                                  "password": "Bench-Passw0rd!", "roles": ["experto"]}))
                    .send()
                    .await?;
                anyhow::ensure!(response.status().as_u16() == 201, "register answered {}", response.status());
            }
        }
    });
    for outcome in futures_util::future::join_all(loops).await {
        outcome?;
    }
    let rate = users as f64 / started.elapsed().as_secs_f64();
    let mut conn = db.conn().await?;
    let synced: i64 = marketplace::on_exec!(conn.exec(), c => sqlx::query_scalar(
        "SELECT COUNT(*) FROM crm_sync_log WHERE status = 'success'").fetch_one(c).await)?;
    drop(conn);
    server.stop(false).await;
    db.close().await;
    Ok((rate, synced))
}

/// Fires `calls` CRM calls at once for `seconds`; (sent, most sent in any 10 s window).
async fn burst(calls: usize, seconds: u64) -> anyhow::Result<(usize, usize)> {
    let key = Secret::new("pit-bench");
    let sandbox = CrmSandbox::start(key.clone(), "bench-location".into()).await?;
    let client = Arc::new(CrmClient::new(
        ClientConfig {
            base_url: sandbox.base_url().to_owned(),
            api_key: key,
            version: "2021-07-28".into(),
            location_id: "bench-location".into(),
            clock: Clock::system(),
            burst_limit: BURST_LIMIT,
            burst_window: BURST_WINDOW,
            max_limiter_wait: Duration::from_secs(3600),
        },
        Arc::new(CrmMetrics::default()),
    )?);
    let tasks: Vec<_> = (0..calls)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                let _ = client.custom_fields().await;
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    tasks.iter().for_each(tokio::task::JoinHandle::abort);
    // Counted where the CRM counts: requests as they arrive (completion times would put a
    // window's tail and the next window's head into one 10 s span).
    let mut times = sandbox.with_state(|s| s.arrivals.clone());
    sandbox.stop().await;
    times.sort();
    let most = (0..times.len())
        .map(|i| {
            times[i..]
                .iter()
                .take_while(|t| **t - times[i] < BURST_WINDOW)
                .count()
        })
        .max()
        .unwrap_or(0);
    Ok((times.len(), most))
}

/// Runs the phase and prints its lines; (metric, value) rows for the summary table.
pub async fn run() -> Vec<(&'static str, String)> {
    let users = env_number("BENCH_CRM_SIGNUPS", 300, 10, 100_000) as usize;
    let seconds = env_number("BENCH_CRM_BURST_SECONDS", 25, 11, 600);
    let mut rows = Vec::new();
    println!("\n== CRM: {users} sign-ups by 8 clients with the CRM off, then with the sandbox");
    for (label, crm) in [
        ("sign-ups/s, CRM off", None),
        ("sign-ups/s, CRM sandbox", Some("sandbox")),
    ] {
        match signups(crm, users, 8).await {
            Ok((rate, synced)) => {
                println!("{label}: {rate:.1} ({synced} syncs logged when the last answer came)");
                rows.push((label, format!("{rate:.1} ({synced} synced by then)")));
            }
            Err(e) => rows.push((label, format!("error: {e:#}"))),
        }
    }
    println!("== CRM: 1000 calls queued at once for {seconds} s");
    match burst(1000, seconds).await {
        Ok((sent, most)) => {
            println!("sent {sent} in {seconds} s; most in one 10 s window: {most}");
            rows.push((
                "burst of 1000: most requests in a 10 s window",
                format!("{most} (limit 100; {sent} sent in {seconds} s)"),
            ));
        }
        Err(e) => rows.push(("burst of 1000", format!("error: {e:#}"))),
    }
    rows
}
