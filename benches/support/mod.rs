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

/// The machine a figure was measured on, for the line a bench prints first: CPU model and
/// cores, memory and kernel, from /proc (each `unknown` where unreadable).
pub fn machine() -> String {
    let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    let cpuinfo = read("/proc/cpuinfo");
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|rest| rest.split_once(':'))
        .map_or("unknown", |(_, model)| model.trim());
    let cores = cpuinfo
        .lines()
        .filter(|l| l.starts_with("processor"))
        .count();
    let memory_gib = read("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
        .map_or("unknown".to_owned(), |kib| {
            format!("{} GiB", kib / 1024 / 1024)
        });
    let kernel = read("/proc/sys/kernel/osrelease");
    format!("{model} × {cores}, {memory_gib}, Linux {}", kernel.trim())
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

/// CPU ticks (10 ms) spent so far by every thread on the machine, keyed by who spent them:
/// this process's threads by name (digits dropped, so a pool's threads add up; Linux keeps
/// 15 characters, so the HTTP workers are `actix-rt|system` and the main thread, which runs
/// the service's jobs, is the bench's own name), other processes by program (`postgres`),
/// the kernel's workers together.
pub fn cpu_by_thread() -> std::collections::HashMap<String, u64> {
    let mut ticks = std::collections::HashMap::new();
    let own = std::process::id().to_string();
    let Ok(processes) = std::fs::read_dir("/proc") else {
        return ticks;
    };
    for process in processes.flatten() {
        let pid = process.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(threads) = std::fs::read_dir(process.path().join("task")) else {
            continue;
        };
        for thread in threads.flatten() {
            let Some((name, spent)) = std::fs::read_to_string(thread.path().join("stat"))
                .ok()
                .and_then(|stat| thread_ticks(&stat))
            else {
                continue;
            };
            let key = if pid == own {
                let name: String = name.chars().filter(|c| !c.is_ascii_digit()).collect();
                format!("bench process: {name}")
            } else if name.starts_with("kworker/") {
                // Named after the work they do at the moment: one key for all of them.
                "kernel workers".into()
            } else {
                program_name(&process.path()).unwrap_or(name)
            };
            *ticks.entry(key).or_default() += spent;
        }
    }
    // A thread's time stays in its process's total after it ends (the senders' thread ends
    // with each round): what the live threads do not account for.
    let own_total = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| thread_ticks(&stat))
        .map_or(0, |(_, spent)| spent);
    let live: u64 = ticks
        .iter()
        .filter(|(key, _)| key.starts_with("bench process: "))
        .map(|(_, spent)| spent)
        .sum();
    ticks.insert(
        "bench process: threads ended".into(),
        own_total.saturating_sub(live),
    );
    ticks
}

/// `(name, user + system ticks)` from a `/proc/…/task/…/stat` line.
fn thread_ticks(stat: &str) -> Option<(String, u64)> {
    let (head, rest) = stat.rsplit_once(") ")?;
    let name = head.split_once(" (")?.1.to_owned();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3 of the line, utime 14 and stime 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((name, utime + stime))
}

/// A process's program, from `/proc/<pid>/comm`.
fn program_name(process: &std::path::Path) -> Option<String> {
    std::fs::read_to_string(process.join("comm"))
        .ok()
        .map(|c| c.trim().to_owned())
}

/// Who spent the CPU between two [`cpu_by_thread`] readings, the largest first, in ms of
/// CPU per unit of work, down to 2 % of the whole: `postgres 0.91 ms (41 %), …`.
pub fn cpu_split(
    before: &std::collections::HashMap<String, u64>,
    after: &std::collections::HashMap<String, u64>,
    units: usize,
) -> String {
    let mut spent: Vec<(&String, u64)> = after
        .iter()
        .map(|(key, t)| (key, t.saturating_sub(before.get(key).copied().unwrap_or(0))))
        .filter(|(_, t)| *t > 0)
        .collect();
    let total: u64 = spent.iter().map(|(_, t)| t).sum();
    if total == 0 || units == 0 {
        return "no CPU use seen".into();
    }
    spent.sort_by_key(|(_, t)| std::cmp::Reverse(*t));
    spent
        .iter()
        .filter(|(_, t)| t * 50 >= total)
        .map(|(key, t)| {
            format!(
                "{key} {:.2} ms ({:.0} %)",
                10.0 * *t as f64 / units as f64,
                100.0 * *t as f64 / total as f64
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
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
