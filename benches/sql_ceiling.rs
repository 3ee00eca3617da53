//! The database's own ceiling under the hot paths of `benches/http_ratio.sh`: the same store
//! calls those requests make, from `BENCH_CONCURRENCY` tasks on a pool sized like the
//! service's, with no HTTP, JSON or middleware around them. Beside the HTTP numbers it shows how
//! much of each request is the database and how much is everything else.
//!
//! `http_ratio.sh` runs it on the database its server just used (the server stopped first):
//!
//! ```sh
//! BENCH_SQL_DATABASE=postgres://… BENCH_USER_ID=2 BENCH_PROJECT_ID=1 cargo bench --bench sql_ceiling
//! ```
//!
//! `BENCH_SQL_DATABASE` is a PostgreSQL URL or `sqlite:<path>`; the user must have a live
//! session. `BENCH_SECONDS` (10) per phase, `DATABASE_MAX_CONNECTIONS` as the service reads
//! it. It measures and prints; it asserts nothing. Without `--bench` it does nothing.

mod support;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use marketplace::config::DatabaseTarget;
use marketplace::store::{Db, Pool, projects, sessions, users};
use support::{env_number, env_text, load_average};

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("sql_ceiling: benchmark skipped (run it with `cargo bench --bench sql_ceiling`)");
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    if let Err(e) = runtime.block_on(run()) {
        eprintln!("sql_ceiling: {e:#}");
        std::process::exit(1);
    }
}

async fn run() -> anyhow::Result<()> {
    let url = env_text("BENCH_SQL_DATABASE").context("BENCH_SQL_DATABASE is required")?;
    let target = match url.strip_prefix("sqlite:") {
        Some(path) => DatabaseTarget::Sqlite(PathBuf::from(path.trim_start_matches("//"))),
        None => DatabaseTarget::Postgres(url),
    };
    let user_id = env_number("BENCH_USER_ID", 0, 0, i64::MAX as u64) as i64;
    let project_id = env_number("BENCH_PROJECT_ID", 0, 0, i64::MAX as u64) as i64;
    let seconds = env_number("BENCH_SECONDS", 10, 1, 600);
    let concurrency = env_number("BENCH_CONCURRENCY", 32, 1, 1024) as usize;
    let pool = env_text("DATABASE_MAX_CONNECTIONS").and_then(|n| n.parse().ok());

    let db = Arc::new(Db::connect_sized(&target, pool).await?);
    let session_id = {
        let mut conn = db.conn().await?;
        sessions::live_of_user(conn.exec(), user_id, chrono::Utc::now())
            .await?
            .last()
            .map(|s| s.id)
            .context("BENCH_USER_ID has no live session")?
    };
    println!(
        "  {} ceiling: {concurrency} tasks, 2 runtime threads, load average {}",
        db.engine(),
        load_average()
    );
    let phase = Duration::from_secs(seconds);

    measure(
        "one primary-key SELECT",
        &db,
        concurrency,
        phase,
        move |db| async move { primary_key_select(&db, user_id).await },
    )
    .await?;
    measure(
        "authentication (/users/me)",
        &db,
        concurrency,
        phase,
        move |db| async move { session(&db, session_id).await },
    )
    .await?;
    measure(
        "authentication + project (/projects/{id})",
        &db,
        concurrency,
        phase,
        move |db| async move {
            // As the service did it: a connection per query, given back in between.
            session(&db, session_id).await?;
            let mut conn = db.conn().await?;
            projects::find_with_ties(conn.exec(), project_id, user_id)
                .await?
                .context("project")?;
            Ok(())
        },
    )
    .await?;
    db.close().await;
    Ok(())
}

/// What authenticating a request reads when the session is not in memory.
async fn session(db: &Db, session_id: i64) -> anyhow::Result<()> {
    let mut conn = db.conn().await?;
    users::find_by_session(conn.exec(), session_id)
        .await?
        .context("session")?;
    Ok(())
}

/// The smallest read there is: one indexed row, two columns.
async fn primary_key_select(db: &Db, user_id: i64) -> anyhow::Result<()> {
    const QUERY: &str = "SELECT id, email FROM users WHERE id = $1";
    let found: Option<(i64, String)> = match db.pool() {
        Pool::Postgres(pool) => {
            sqlx::query_as(QUERY)
                .bind(user_id)
                .fetch_optional(pool)
                .await?
        }
        Pool::Sqlite(pool) => {
            sqlx::query_as(QUERY)
                .bind(user_id)
                .fetch_optional(pool)
                .await?
        }
    };
    found.context("user")?;
    Ok(())
}

/// Runs `op` in a loop from `concurrency` tasks for `phase` (after a one-second warm-up)
/// and prints operations per second with p50 and p99.
async fn measure<F, Fut>(
    label: &str,
    db: &Arc<Db>,
    concurrency: usize,
    phase: Duration,
    op: F,
) -> anyhow::Result<()>
where
    F: Fn(Arc<Db>) -> Fut + Copy + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    for (window, record) in [(Duration::from_secs(1), false), (phase, true)] {
        let start = Instant::now();
        let deadline = start + window;
        let tasks: Vec<_> = (0..concurrency)
            .map(|_| {
                let db = Arc::clone(db);
                tokio::spawn(async move {
                    let mut latencies = Vec::new();
                    while Instant::now() < deadline {
                        let began = Instant::now();
                        op(Arc::clone(&db)).await?;
                        latencies.push(began.elapsed().as_micros() as u32);
                    }
                    anyhow::Ok(latencies)
                })
            })
            .collect();
        let mut all = Vec::new();
        for task in tasks {
            all.extend(task.await??);
        }
        if !record {
            continue;
        }
        let elapsed = start.elapsed().as_secs_f64();
        all.sort_unstable();
        let at =
            |q: f64| all.get(((all.len() as f64 * q) as usize).min(all.len().saturating_sub(1)));
        println!(
            "  {label:<44} {:>9.0} op/s   p50 {:>6.2} ms   p99 {:>6.2} ms",
            all.len() as f64 / elapsed,
            at(0.50).copied().unwrap_or(0) as f64 / 1000.0,
            at(0.99).copied().unwrap_or(0) as f64 / 1000.0,
        );
    }
    Ok(())
}
