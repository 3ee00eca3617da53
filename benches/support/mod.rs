//! What the benchmark binaries share: the environment, the machine's load, and fresh
//! PostgreSQL databases. Each bench includes it with `mod support;`.

#![allow(dead_code)] // each bench uses its own subset

use anyhow::Context as _;
use sqlx::Connection as _;

pub fn env_number(name: &str, default: u64, min: u64, max: u64) -> u64 {
    match std::env::var(name) {
        Ok(raw) if !raw.trim().is_empty() => match raw.trim().parse::<u64>() {
            Ok(n) => n.clamp(min, max),
            Err(_) => {
                eprintln!("warning: {name}={raw} is not a whole number; using {default}");
                default
            }
        },
        _ => default,
    }
}

pub fn env_text(name: &str) -> Option<String> {
    std::env::var(name)
        .ok()
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// The load average (1, 5, 15 minutes) from /proc, or `unknown`.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| {
            let parts: Vec<&str> = s.split_whitespace().take(3).collect();
            (parts.len() == 3).then(|| parts.join(" "))
        })
        .unwrap_or_else(|| "unknown".into())
}

/// The machine's CPU time since boot from `/proc/stat` (Linux), in clock ticks of 10 ms:
/// `(busy, total)`, where busy is all but idle and I/O wait. `None` where it is unreadable.
pub fn cpu_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let ticks: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .map(|t| t.parse().unwrap_or(0))
        .collect();
    let total: u64 = ticks.iter().take(8).sum();
    let idle = ticks.get(3)? + ticks.get(4)?;
    Some((total - idle, total))
}

/// What the machine's CPUs did between two [`cpu_ticks`] readings, for `units` of work:
/// `busy 81 %, 0.62 ms of CPU each`.
pub fn cpu_use(before: Option<(u64, u64)>, after: Option<(u64, u64)>, units: usize) -> String {
    match (before, after) {
        (Some((b0, t0)), Some((b1, t1))) if t1 > t0 && units > 0 => format!(
            "machine busy {:.0} %, {:.2} ms of CPU each",
            100.0 * (b1 - b0) as f64 / (t1 - t0) as f64,
            10.0 * (b1 - b0) as f64 / units as f64
        ),
        _ => "CPU use unknown".into(),
    }
}

/// A random `[a-z0-9]` string, usable in database names and cache prefixes.
pub fn lowercase_token(bytes: usize) -> String {
    marketplace::domain::token::random_token(bytes)
        .to_lowercase()
        .replace(['-', '_'], "x")
}

/// A PostgreSQL database created for one target and dropped after it.
pub struct FreshPostgres {
    admin_url: String,
    name: String,
    pub url: String,
}

impl FreshPostgres {
    /// Creates `mkt_b_<unix time>_<random>`, dropping databases of earlier runs older than two
    /// hours on the way (a run that crashed cannot drop its own).
    pub async fn create(admin_url: &str) -> anyhow::Result<Self> {
        let mut admin = sqlx::PgConnection::connect(admin_url)
            .await
            .context("BENCH_DATABASE_URL reachable")?;
        let now = chrono::Utc::now().timestamp();
        let stale: Vec<String> =
            sqlx::query_scalar("SELECT datname FROM pg_database WHERE datname LIKE 'mkt_b_%'")
                .fetch_all(&mut admin)
                .await
                .unwrap_or_default();
        for name in stale {
            let created = name
                .split('_')
                .nth(2)
                .and_then(|t| t.parse::<i64>().ok())
                .unwrap_or(now);
            if now - created > 2 * 3600 {
                let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                    "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                )))
                .execute(&mut admin)
                .await;
            }
        }

        let name = format!("mkt_b_{now}_{}", lowercase_token(6));
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut admin)
            .await
            .context("create the benchmark database")?;
        let _ = admin.close().await;
        let mut url = url::Url::parse(admin_url).context("BENCH_DATABASE_URL is a URL")?;
        url.set_path(&format!("/{name}"));
        println!("created database {name}");
        Ok(Self {
            admin_url: admin_url.to_owned(),
            name,
            url: url.to_string(),
        })
    }

    pub async fn drop_database(self) {
        let dropped = async {
            let mut admin = sqlx::PgConnection::connect(&self.admin_url).await?;
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            )))
            .execute(&mut admin)
            .await?;
            admin.close().await
        }
        .await;
        match dropped {
            Ok(()) => println!("dropped database {}", self.name),
            Err(err) => println!("could not drop database {}: {err}", self.name),
        }
    }
}
