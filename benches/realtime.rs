//! Real-time benchmarks against the release server run as its own process (so its memory is
//! its own): the resident memory of 10,000 idle notification sockets, the fan-out latency of
//! a chat room of 50 sockets receiving 200 messages a second (REST post → every member's
//! frame; `BENCH_POST_OVER=socket`: posted as frames on the members' own sockets), and the
//! push latency of a notification (`POST /api/notifications/test` → frame).
//!
//! It measures and prints; it asserts nothing about speed. Run it with
//! `cargo bench --bench realtime` (SQLite); with `BENCH_DATABASE_URL` and `REDIS_URL` it runs
//! on PostgreSQL with Redis as well (`BENCH_SKIP_SQLITE=1`: only there). 10,000 sockets need `ulimit -n` above 10,100 in the
//! shell that starts it (the server inherits it); with less, fewer sockets are opened and the
//! run says so. See `benches/README.md` (section "Real time").
//!
//! Outside `cargo bench` (no `--bench` argument) it does nothing.

mod support;

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use futures_util::{StreamExt, stream};
use serde_json::{Value, json};
use sqlx::Connection as _;
use support::{FreshPostgres, env_number, env_text, load_average, lowercase_token};
use tokio_tungstenite::tungstenite::Message;

const PASSWORD: &str = "Bench-Passw0rd!";

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

struct Config {
    idle_sockets: usize,
    room_members: usize,
    rooms: usize,
    rate: u64,
    duration: Duration,
    pushes: usize,
    /// Posts as REST requests (`rest`), or as text frames on the members' own sockets
    /// (`socket`), each member posting its share of its room's rate.
    post_over_socket: bool,
    postgres_admin_url: Option<String>,
    redis_url: Option<String>,
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("realtime bench: run with `cargo bench --bench realtime`");
        return;
    }
    let mut config = Config {
        idle_sockets: env_number("BENCH_IDLE_SOCKETS", 10_000, 1, 100_000) as usize,
        room_members: env_number("BENCH_ROOM_MEMBERS", 50, 2, 1000) as usize,
        rooms: env_number("BENCH_ROOMS", 1, 1, 1000) as usize,
        rate: env_number("BENCH_RATE", 200, 1, 10_000),
        duration: Duration::from_secs(env_number("BENCH_SECONDS", 10, 1, 600)),
        pushes: env_number("BENCH_PUSHES", 500, 10, 100_000) as usize,
        post_over_socket: match env_text("BENCH_POST_OVER").as_deref() {
            None | Some("rest") => false,
            Some("socket") => true,
            Some(other) => panic!("BENCH_POST_OVER is rest or socket, not {other}"),
        },
        postgres_admin_url: env_text("BENCH_DATABASE_URL"),
        redis_url: env_text("REDIS_URL"),
    };
    // The client holds one descriptor per socket, and so does the server (same limit).
    let limit = open_files_limit();
    if config.idle_sockets + 200 > limit {
        let fit = limit.saturating_sub(200).max(1);
        println!(
            "ulimit -n is {limit}: opening {fit} idle sockets instead of {} (raise it)",
            config.idle_sockets
        );
        config.idle_sockets = fit;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        println!("machine: {}", support::machine());
        println!("load average before: {}", load_average());
        if env_text("BENCH_SKIP_SQLITE").is_none()
            && let Err(e) = run_engine(None, &config).await
        {
            println!("SQLite run failed: {e:#}");
        }
        if let Some(admin) = &config.postgres_admin_url {
            match FreshPostgres::create(admin).await {
                Ok(pg) => {
                    if let Err(e) = run_engine(Some(pg.url.clone()), &config).await {
                        println!("PostgreSQL run failed: {e:#}");
                    }
                    pg.drop_database().await;
                }
                Err(e) => println!("PostgreSQL unavailable: {e:#}"),
            }
        }
    });
}

fn open_files_limit() -> usize {
    std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3).map(str::to_owned))
        })
        .and_then(|n| n.parse().ok())
        .unwrap_or(1024)
}

/// The server process, stopped when dropped.
struct Server {
    child: Child,
    base: String,
    _data: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// Resident memory of the server process, in KiB.
    fn rss_kib(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("VmRSS:"))
                    .and_then(|l| l.split_whitespace().nth(1).map(str::to_owned))
            })
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }

    fn ws(&self, path: &str, token: &str) -> String {
        format!(
            "{}{path}?token={token}",
            self.base.replacen("http://", "ws://", 1)
        )
    }
}

async fn start_server(database: &str, redis: Option<&str>) -> anyhow::Result<Server> {
    let data = tempfile::tempdir()?;
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0")?;
        probe.local_addr()?.port()
    };
    let database = if database.is_empty() {
        format!("sqlite:{}", data.path().join("bench.db").display())
    } else {
        database.to_owned()
    };
    let mut command = Command::new(env!("CARGO_BIN_EXE_marketplace"));
    command
        .arg("serve")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("BIND_ADDR", format!("127.0.0.1:{port}"))
        .env("DATA_DIR", data.path())
        .env("DATABASE_URL", &database)
        .env("CACHE_PREFIX", format!("bench:{}:", lowercase_token(6)))
        .env("WORKERS", "2")
        .env("BCRYPT_COST", "4")
        .env("JWT_ACCESS_EXPIRE_MINUTES", "120")
        .env("RATE_LIMIT_PER_MINUTE", "0")
        .env("LOGIN_RATE_LIMIT_MAX_ATTEMPTS_PER_USER", "1000000")
        .env("LOGIN_RATE_LIMIT_MAX_ATTEMPTS_PER_IP", "1000000")
        // The bench holds 100 sockets per user and all of them from one address, and posts
        // hundreds of messages a second as one user: far past the caps and the chat budget
        // that stop one account (issue #31), which it raises to measure the room.
        .env("WS_MAX_SOCKETS_PER_USER", "100000")
        .env("WS_MAX_SOCKETS_PER_ADDRESS", "1000000")
        .env("WS_MAX_SOCKETS", "1000000")
        .env("CHAT_MESSAGES_PER_MINUTE", "1000000")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    if let Some(redis) = redis {
        command.env("REDIS_URL", redis);
    }
    let child = command.spawn().context("start the release server")?;
    let server = Server {
        child,
        base: format!("http://127.0.0.1:{port}"),
        _data: data,
    };
    let client = reqwest::Client::new();
    for _ in 0..200 {
        if client
            .get(format!("{}/health", server.base))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            return Ok(server);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("the server did not answer /health")
}

async fn run_engine(postgres: Option<String>, config: &Config) -> anyhow::Result<()> {
    let label = match (&postgres, &config.redis_url) {
        (None, _) => "SQLite + in-process cache".to_owned(),
        (Some(_), Some(_)) => "PostgreSQL + Redis".to_owned(),
        (Some(_), None) => "PostgreSQL + in-process cache".to_owned(),
    };
    let redis = postgres.as_ref().and(config.redis_url.as_deref());
    let server = start_server(postgres.as_deref().unwrap_or_default(), redis).await?;
    let client = reqwest::Client::new();
    println!("\n== {label}");

    idle_sockets(&server, &client, config).await?;
    fan_out(&server, &client, config, postgres.as_deref()).await?;
    push_latency(&server, &client, config).await?;
    Ok(())
}

/// Registers `username` and logs in the standard way; (user id, access token). That token
/// needs no CSRF double submit (registration's cookie-flavoured session would).
async fn register(
    client: &reqwest::Client,
    base: &str,
    username: &str,
    role: &str,
) -> anyhow::Result<(i64, String)> {
    let r = client
        .post(format!("{base}/api/auth/register"))
        .json(
            &json!({"email": format!("{username}@bench.test"), "username": username,
                      "password": PASSWORD, "roles": [role]}),
        )
        .send()
        .await?;
    if r.status() != 201 {
        bail!("register {username}: {} {}", r.status(), r.text().await?);
    }
    let body: Value = r.json().await?;
    let id = body["user"]["id"].as_i64().context("user id")?;
    let r = client
        .post(format!("{base}/api/auth/login"))
        .json(&json!({"username": username, "password": PASSWORD}))
        .send()
        .await?;
    if r.status() != 200 {
        bail!("login {username}: {}", r.status());
    }
    let body: Value = r.json().await?;
    Ok((
        id,
        body["access_token"]
            .as_str()
            .context("access token")?
            .to_owned(),
    ))
}

async fn open(url: String) -> anyhow::Result<Socket> {
    let (socket, _) = tokio_tungstenite::connect_async(url).await?;
    Ok(socket)
}

/// Reads a socket until it ends (answering pings as tungstenite does when reading), calling
/// `on_text` with each text frame.
fn keep_reading(
    mut socket: impl futures_util::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>>
    + Unpin
    + Send
    + 'static,
    on_text: impl Fn(&str) + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while let Some(Ok(message)) = socket.next().await {
            if let Message::Text(text) = message {
                on_text(&text);
            }
        }
    })
}

async fn idle_sockets(
    server: &Server,
    client: &reqwest::Client,
    config: &Config,
) -> anyhow::Result<()> {
    // 100 users, their sockets spread evenly (a user's tabs share one room).
    let mut tokens = Vec::new();
    for i in 0..100 {
        tokens.push(
            register(client, &server.base, &format!("idle{i}"), "empresa")
                .await?
                .1,
        );
    }
    // Warm the server's pools and allocator with a few sockets first.
    let warm: Vec<_> = stream::iter(0..50)
        .map(|i| open(server.ws("/api/ws/notifications", &tokens[i % tokens.len()])))
        .buffer_unordered(50)
        .collect()
        .await;
    drop(warm);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = server.rss_kib();

    let greeted = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let opened: Vec<anyhow::Result<Socket>> = stream::iter(0..config.idle_sockets)
        .map(|i| open(server.ws("/api/ws/notifications", &tokens[i % tokens.len()])))
        .buffer_unordered(100)
        .collect()
        .await;
    let connect_time = started.elapsed();
    let mut readers = Vec::new();
    let mut failed = 0;
    for socket in opened {
        match socket {
            Ok(socket) => {
                let greeted = greeted.clone();
                readers.push(keep_reading(socket, move |_| {
                    greeted.fetch_add(1, Ordering::Relaxed);
                }));
            }
            Err(_) => failed += 1,
        }
    }
    let live = readers.len();
    while greeted.load(Ordering::Relaxed) < live {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = server.rss_kib();
    let grown = after.saturating_sub(before);
    println!(
        "idle notification sockets: {live} open ({failed} failed) in {:.1} s; server RSS {} MiB \
         before, {} MiB after: +{} MiB, {:.1} KiB per socket",
        connect_time.as_secs_f64(),
        before / 1024,
        after / 1024,
        grown / 1024,
        grown as f64 / live.max(1) as f64
    );
    for reader in readers {
        reader.abort();
    }
    Ok(())
}

/// A project whose company and expert are the two users, written straight to the database
/// (the bench measures the room, not the hiring flow).
async fn project_between(
    server: &Server,
    postgres: Option<&str>,
    company: i64,
    expert: i64,
) -> anyhow::Result<i64> {
    const INSERT: &str = "INSERT INTO projects (company_id, expert_id, title, budget_minor, \
                          status, created_at, updated_at) \
                          VALUES ($1, $2, 'Bench room', 100000, 'in_progress', $3, $3) \
                          RETURNING id";
    let now = chrono::Utc::now();
    Ok(match postgres {
        Some(url) => {
            let mut c = sqlx::PgConnection::connect(url).await?;
            sqlx::query_scalar(INSERT)
                .bind(company)
                .bind(expert)
                .bind(now)
                .fetch_one(&mut c)
                .await?
        }
        None => {
            let path = server._data.path().join("bench.db");
            let mut c =
                sqlx::SqliteConnection::connect(&format!("sqlite:{}", path.display())).await?;
            sqlx::query_scalar(INSERT)
                .bind(company)
                .bind(expert)
                .bind(now)
                .fetch_one(&mut c)
                .await?
        }
    })
}

/// What the bench reads of a room's frame.
#[derive(serde::Deserialize)]
struct RoomFrame<'a> {
    #[serde(rename = "type", borrow)]
    kind: &'a str,
    #[serde(borrow)]
    data: Option<RoomFrameData<'a>>,
}

#[derive(serde::Deserialize)]
struct RoomFrameData<'a> {
    #[serde(borrow)]
    content: Option<&'a str>,
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

async fn fan_out(
    server: &Server,
    client: &reqwest::Client,
    config: &Config,
    postgres: Option<&str>,
) -> anyhow::Result<()> {
    // `BENCH_ROOMS` rooms, each between its own company and expert, each with
    // `BENCH_ROOM_MEMBERS` sockets and `BENCH_RATE` posts a second.
    let mut rooms = Vec::with_capacity(config.rooms);
    for r in 0..config.rooms {
        let (company, company_token) =
            register(client, &server.base, &format!("roomco{r}"), "empresa").await?;
        let (expert, expert_token) =
            register(client, &server.base, &format!("roomex{r}"), "experto").await?;
        let project = project_between(server, postgres, company, expert).await?;
        rooms.push((project, company_token, expert_token));
    }

    let per_room = (config.rate * config.duration.as_secs()) as usize;
    let total = per_room * config.rooms;
    let sent_at: Arc<Vec<Mutex<Option<Instant>>>> =
        Arc::new((0..total).map(|_| Mutex::new(None)).collect());
    let latencies = Arc::new(Mutex::new(Vec::with_capacity(total * config.room_members)));
    let refused = Arc::new(AtomicUsize::new(0));
    // The sockets' reading tasks, and over sockets their writing tasks.
    let mut tasks = Vec::new();
    // Over sockets: each member's frames go through a task that writes them, in room order
    // (member `m` of room `r` is `senders[r * members + m]`).
    let mut senders = Vec::new();
    for (i, (project, company_token, expert_token)) in rooms
        .iter()
        .flat_map(|room| std::iter::repeat_n(room, config.room_members))
        .enumerate()
    {
        let token = if i % 2 == 0 {
            company_token
        } else {
            expert_token
        };
        let socket = open(server.ws(&format!("/api/ws/chat/{project}"), token)).await?;
        let socket = if config.post_over_socket {
            let (mut sink, socket) = socket.split();
            let (send, mut to_send) = tokio::sync::mpsc::unbounded_channel::<String>();
            senders.push(send);
            tasks.push(tokio::spawn(async move {
                while let Some(text) = to_send.recv().await {
                    if futures_util::SinkExt::send(&mut sink, Message::text(text))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            }));
            futures_util::future::Either::Left(socket)
        } else {
            futures_util::future::Either::Right(socket)
        };
        let (sent_at, latencies, refused) = (sent_at.clone(), latencies.clone(), refused.clone());
        tasks.push(keep_reading(socket, move |text| {
            let arrived = Instant::now();
            // Read into borrowed fields, not a `Value`: at 100,000 frames a second the
            // client's parsing is a share of the two cores the server runs on.
            let Ok(frame) = serde_json::from_str::<RoomFrame>(text) else {
                return;
            };
            if frame.kind == "error" {
                refused.fetch_add(1, Ordering::Relaxed);
                return;
            }
            if frame.kind != "message.created" {
                return;
            }
            let Some(seq) = frame
                .data
                .and_then(|d| d.content)
                .and_then(|c| c.parse::<usize>().ok())
            else {
                return;
            };
            if let Some(sent) = sent_at.get(seq).and_then(|s| *s.lock().unwrap()) {
                latencies.lock().unwrap().push(arrived - sent);
            }
        }));
    }

    // Open loop: one post every 1/(rate × rooms) s whatever the answers' pace, the rooms in
    // turn (message `seq` goes to room `seq % rooms`; over sockets, from its members in turn).
    let mut tick = tokio::time::interval(Duration::from_secs_f64(
        1.0 / (config.rate as f64 * config.rooms as f64),
    ));
    let mut posts = Vec::with_capacity(total);
    for seq in 0..total {
        tick.tick().await;
        let room = seq % config.rooms;
        if config.post_over_socket {
            let member = (seq / config.rooms) % config.room_members;
            *sent_at[seq].lock().unwrap() = Some(Instant::now());
            let frame = json!({"type": "message", "content": seq.to_string()}).to_string();
            if senders[room * config.room_members + member]
                .send(frame)
                .is_err()
            {
                refused.fetch_add(1, Ordering::Relaxed);
            }
            continue;
        }
        let (client, sent_at, refused) = (client.clone(), sent_at.clone(), refused.clone());
        let (project, company_token, _) = &rooms[room];
        let url = format!("{}/api/chat/{project}", server.base);
        let token = company_token.clone();
        posts.push(tokio::spawn(async move {
            *sent_at[seq].lock().unwrap() = Some(Instant::now());
            let ok = client
                .post(url)
                .bearer_auth(token)
                .json(&json!({"content": seq.to_string()}))
                .send()
                .await
                .is_ok_and(|r| r.status() == 201);
            if !ok {
                refused.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for post in posts {
        let _ = post.await;
    }
    let expected = total * config.room_members;
    let deadline = Instant::now() + Duration::from_secs(10);
    while latencies.lock().unwrap().len() < expected && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for task in tasks {
        task.abort();
    }
    let mut all = latencies.lock().unwrap().clone();
    all.sort();
    println!(
        "chat fan-out, {} room(s) of {} members, {} msg/s each for {} s, posted over {}: {} of \
         {expected} frames; post → member's frame p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; {} \
         posts refused",
        config.rooms,
        config.room_members,
        config.rate,
        config.duration.as_secs(),
        if config.post_over_socket {
            "the members' sockets"
        } else {
            "REST"
        },
        all.len(),
        percentile(&all, 0.5),
        percentile(&all, 0.99),
        percentile(&all, 1.0),
        refused.load(Ordering::Relaxed)
    );
    // The room's group commits, as the server counts them.
    let metrics = client
        .get(format!("{}/metrics", server.base))
        .send()
        .await?
        .text()
        .await?;
    let series = |name: &str| {
        metrics.lines().find_map(|line| {
            line.strip_prefix(name)
                .and_then(|rest| rest.strip_prefix(' '))
                .and_then(|v| v.parse::<f64>().ok())
        })
    };
    if let (Some(commits), Some(stored), Some(largest)) = (
        series("realtime_chat_commits_total"),
        series("realtime_chat_messages_stored_total"),
        series("realtime_chat_commit_messages_max"),
    ) {
        println!(
            "room commits: {commits} for {stored} messages, {:.1} a commit, at most {largest}",
            stored / commits.max(1.0)
        );
    }
    if let Some(dropped) = series("realtime_slow_consumers_dropped_total") {
        println!("sockets dropped as slow consumers: {dropped}");
    }
    Ok(())
}

async fn push_latency(
    server: &Server,
    client: &reqwest::Client,
    config: &Config,
) -> anyhow::Result<()> {
    let (_, token) = register(client, &server.base, "pushed", "empresa").await?;
    let mut socket = open(server.ws("/api/ws/notifications", &token)).await?;
    let mut to_frame = Vec::with_capacity(config.pushes);
    let mut to_answer = Vec::with_capacity(config.pushes);
    for _ in 0..config.pushes {
        let started = Instant::now();
        let r = client
            .post(format!("{}/api/notifications/test", server.base))
            .bearer_auth(&token)
            .send()
            .await?;
        if r.status() != 201 {
            bail!("POST /api/notifications/test: {}", r.status());
        }
        to_answer.push(started.elapsed());
        loop {
            let message = tokio::time::timeout(Duration::from_secs(5), socket.next())
                .await
                .context("a frame within 5 s")?
                .context("socket open")??;
            if let Message::Text(text) = message {
                let frame: Value = serde_json::from_str(&text)?;
                if frame["type"] == "test" {
                    to_frame.push(started.elapsed());
                    break;
                }
            }
        }
        // 50 a second: latency, not throughput.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    to_frame.sort();
    to_answer.sort();
    println!(
        "notification push, {} sequential: POST → frame p50 {:.2} ms, p99 {:.2} ms; POST → 201 \
         p50 {:.2} ms, p99 {:.2} ms",
        config.pushes,
        percentile(&to_frame, 0.5),
        percentile(&to_frame, 0.99),
        percentile(&to_answer, 0.5),
        percentile(&to_answer, 0.99)
    );
    Ok(())
}
