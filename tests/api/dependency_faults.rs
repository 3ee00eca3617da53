//! A dependency that goes away is answered, not waited on (`availability`): Redis killed (a
//! Redis server of the test's own, never the shared one), PostgreSQL cut off (a TCP relay of
//! the test's own in front of the test database, closed as a stopped server closes its
//! connections). Each test checks that the dependency really was away while it asserted.

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::json as j;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::helpers::{
    ChildGuard, PASSWORD, TestApp, free_port, json, login, register, request_as, spawn_app_with,
    wait_for,
};

/// A probe notices within a few of its 250 ms intervals.
const NOTICED_WITHIN: Duration = Duration::from_secs(3);

/// Loose on purpose (the suite shares two cores): what it tells apart is an answer at once
/// from a wait on a dependency's timeouts (1.1 s a request for Redis, 5 s for PostgreSQL).
const AT_ONCE: Duration = Duration::from_millis(500);

/// The request limit of the Redis test: above what it sends before its flood.
const LIMIT_PER_MINUTE: usize = 30;

fn redis_server(port: u16) -> ChildGuard {
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server on PATH (.ci/run installs it)");
    ChildGuard(child)
}

async fn redis_answers(port: u16) -> bool {
    match TcpStream::connect(("127.0.0.1", port)).await {
        Ok(mut stream) => {
            use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
            let mut answer = [0u8; 7];
            stream.write_all(b"PING\r\n").await.is_ok()
                && stream.read_exact(&mut answer).await.is_ok()
                && &answer == b"+PONG\r\n"
        }
        Err(_) => false,
    }
}

async fn until(what: &str, mut condition: impl FnMut() -> bool) {
    wait_for(NOTICED_WITHIN, || condition().then_some(()))
        .await
        .unwrap_or_else(|| panic!("{what} within {NOTICED_WITHIN:?}"));
}

/// `(status, code, Retry-After, how long)` of one bearer request.
async fn timed(
    app: &TestApp,
    method: Method,
    path: &str,
    token: &str,
    body: Option<&serde_json::Value>,
) -> (u16, String, Option<String>, Duration) {
    let started = Instant::now();
    let response = request_as(app, method, path, token, body).await;
    let took = started.elapsed();
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    let body = response.text().await.unwrap();
    let code = serde_json::from_str::<serde_json::Value>(&body)
        .ok()
        .and_then(|b| b["code"].as_str().map(str::to_owned))
        .unwrap_or_default();
    (status, code, retry_after, took)
}

async fn status_of(app: &TestApp, path: &str, token: &str) -> u16 {
    timed(app, Method::GET, path, token, None).await.0
}

async fn metric(app: &TestApp, line_start: &str) -> f64 {
    let text = app.get("/metrics").await.text().await.unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix(line_start))
        .unwrap_or_else(|| panic!("{line_start} on /metrics"))
        .trim()
        .parse()
        .unwrap()
}

/// A standard sign-in's answer (its tokens in the body).
async fn sign_in(app: &TestApp, username: &str) -> serde_json::Value {
    let body = j!({"username": username, "password": PASSWORD});
    json(app.post_json("/api/auth/login", &body).await).await
}

#[actix_web::test]
async fn redis_away_serves_what_is_safe_without_it_and_refuses_the_rest_at_once() {
    let port = free_port();
    let mut redis = redis_server(port);
    until_async(|| redis_answers(port)).await;
    let url = format!("redis://127.0.0.1:{port}");
    let limit = LIMIT_PER_MINUTE.to_string();
    let app = spawn_app_with(&[("REDIS_URL", &url), ("RATE_LIMIT_PER_MINUTE", &limit)]).await;
    let ana = register(&app, "ana", &["empresa"]).await;
    let signed_in = sign_in(&app, "ana").await;
    let refresh = signed_in["refresh_token"].as_str().unwrap().to_owned();
    let redis_state = app
        .state
        .cache
        .availability()
        .cloned()
        .expect("Redis is watched");
    assert!(!redis_state.is_away());

    // Killed: gone without a word, as a crashed server is.
    redis.0.kill().unwrap();
    redis.0.wait().unwrap();
    until("the probe finds Redis away", || redis_state.is_away()).await;
    assert!(!redis_answers(port).await, "Redis is really down");
    let refused_before = redis_state.counts().1;

    // Sessions are in the database and rate limits count per instance: reads and writes go on.
    let (status, _, _, took) =
        timed(&app, Method::GET, "/api/users/me", &ana.access_token, None).await;
    assert_eq!(status, 200, "a signed-in read without Redis");
    assert!(
        took < AT_ONCE,
        "answered at once, not after Redis's timeouts: {took:?}"
    );
    let plain_token = signed_in["access_token"].as_str().unwrap();
    let (status, ..) = timed(
        &app,
        Method::POST,
        "/api/notifications/mark-all-read",
        plain_token,
        None,
    )
    .await;
    assert!(
        matches!(status, 200 | 204),
        "a write without Redis: {status}"
    );

    // A refresh must check the rotated tokens' blacklist, which only Redis holds: refused at
    // once rather than let through unchecked.
    let started = Instant::now();
    let response = app
        .post_json("/api/auth/refresh", &j!({"refresh_token": refresh}))
        .await;
    let took = started.elapsed();
    assert_eq!(response.status(), 503);
    assert_eq!(
        response.headers()["retry-after"].to_str().unwrap(),
        "2",
        "Retry-After"
    );
    assert_eq!(json(response).await["code"], "SERVICE_UNAVAILABLE");
    assert!(took < AT_ONCE, "refused at once: {took:?}");
    assert!(
        redis_state.counts().1 > refused_before,
        "answered by the flag, not by a call that failed"
    );
    assert_eq!(
        metric(&app, "dependency_up{dependency=\"redis\"}").await,
        0.0
    );

    // Still sent traffic: every instance shares the one Redis.
    let ready = app.get("/ready").await;
    assert_eq!(ready.status(), 200);
    assert_eq!(json(ready).await["status"], "degraded");

    // The request limit still holds, counted by this instance alone: never skipped.
    let mut answers = Vec::new();
    for _ in 0..LIMIT_PER_MINUTE + 5 {
        answers.push(
            timed(&app, Method::GET, "/api/users/me", &ana.access_token, None)
                .await
                .0,
        );
    }
    assert!(
        answers.contains(&429),
        "the limit counts without Redis: {answers:?}"
    );
    assert!(
        answers.iter().all(|s| matches!(s, 200 | 429)),
        "{answers:?}"
    );
    assert!(!redis_answers(port).await, "Redis stayed down throughout");

    // Back, empty: the probe lets requests in again.
    let _redis = redis_server(port);
    until_async(|| redis_answers(port)).await;
    until("the probe finds Redis back", || !redis_state.is_away()).await;
    let signed_in = sign_in(&app, "ana").await;
    let response = app
        .post_json(
            "/api/auth/refresh",
            &j!({"refresh_token": signed_in["refresh_token"]}),
        )
        .await;
    assert_eq!(response.status(), 200, "a refresh once Redis is back");
    assert_eq!(
        metric(&app, "dependency_up{dependency=\"redis\"}").await,
        1.0
    );
    assert_eq!(
        metric(&app, "dependency_outages_total{dependency=\"redis\"}").await,
        1.0
    );
    app.stop().await;
}

async fn until_async<F: std::future::Future<Output = bool>>(mut condition: impl FnMut() -> F) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !condition().await {
        assert!(Instant::now() < deadline, "timed out");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A TCP relay to PostgreSQL that can be cut (every connection closed, new ones refused) and
/// restored on the same port.
struct Relay {
    port: u16,
    target: String,
    running: Mutex<Option<JoinHandle<()>>>,
}

impl Relay {
    async fn start(target: String) -> Arc<Self> {
        let relay = Arc::new(Self {
            port: free_port(),
            target,
            running: Mutex::new(None),
        });
        relay.restore().await;
        relay
    }

    async fn restore(&self) {
        let listener = TcpListener::bind(("127.0.0.1", self.port)).await.unwrap();
        let target = self.target.clone();
        let accepting = tokio::spawn(async move {
            let mut links = tokio::task::JoinSet::new();
            while let Ok((mut client, _)) = listener.accept().await {
                let target = target.clone();
                links.spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
            }
        });
        *self.running.lock().unwrap() = Some(accepting);
    }

    /// Closes the listener and, with the `JoinSet` it owns, every relayed connection.
    async fn cut(&self) {
        let accepting = self.running.lock().unwrap().take().expect("running");
        accepting.abort();
        let _ = accepting.await;
    }
}

/// An instance on a fresh database of the server at `admin_url`, reached through a [`Relay`].
async fn behind_relay(admin_url: &str) -> (TestApp, Arc<Relay>) {
    let database_url = super::helpers::fresh_postgres_database(admin_url).await;
    let mut url = url::Url::parse(&database_url).unwrap();
    let target = format!("{}:{}", url.host_str().unwrap(), url.port().unwrap_or(5432));
    let relay = Relay::start(target).await;
    url.set_port(Some(relay.port)).unwrap();
    (
        spawn_app_with(&[("DATABASE_URL", url.as_str())]).await,
        relay,
    )
}

#[actix_web::test]
async fn postgres_away_is_refused_at_once_and_nothing_is_half_done() {
    let Ok(admin_url) = std::env::var("TEST_DATABASE_URL") else {
        // The embedded SQLite file cannot go away.
        return;
    };
    let (app, relay) = behind_relay(&admin_url).await;
    register(&app, "ana", &["empresa"]).await;
    let token = login(&app, "ana", PASSWORD).await;
    let database = app.db.availability().clone();
    assert_eq!(status_of(&app, "/api/notifications", &token).await, 200);

    relay.cut().await;
    until("the probe finds PostgreSQL away", || database.is_away()).await;
    for (method, path, body) in [
        (Method::GET, "/api/users/me", None),
        (Method::GET, "/api/notifications", None),
        (
            Method::PUT,
            "/api/users/me",
            Some(j!({"username": "never"})),
        ),
    ] {
        let (status, code, retry_after, took) =
            timed(&app, method.clone(), path, &token, body.as_ref()).await;
        assert_eq!(
            (status, code.as_str()),
            (503, "SERVICE_UNAVAILABLE"),
            "{method} {path}"
        );
        assert_eq!(retry_after.as_deref(), Some("2"), "{method} {path}");
        assert!(took < AT_ONCE, "{method} {path} refused at once: {took:?}");
    }
    assert_eq!(app.get("/ready").await.status(), 503);
    assert!(database.is_away(), "PostgreSQL stayed away throughout");
    assert!(database.counts().1 >= 3, "refused by the flag");

    relay.restore().await;
    until("the probe finds PostgreSQL back", || !database.is_away()).await;
    let back = Instant::now();
    while status_of(&app, "/api/notifications", &token).await != 200 {
        assert!(
            back.elapsed() < Duration::from_secs(2),
            "served within 2 s of the probe"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let me = json(request_as(&app, Method::GET, "/api/users/me", &token, None).await).await;
    assert_eq!(me["username"], "ana", "the refused write was not applied");
    assert_eq!(
        metric(&app, "dependency_outages_total{dependency=\"postgres\"}").await,
        1.0
    );
    app.stop().await;
}

/// A write reaching a server that has become a read-only standby (a failover under way) is an
/// outage to the request, answered 503 like one: PostgreSQL's own refusal, made here by a
/// read-only transaction.
#[actix_web::test]
async fn a_write_refused_by_a_read_only_server_counts_as_the_database_away() {
    if std::env::var("TEST_DATABASE_URL").is_err() {
        return;
    }
    let (db, _dir) = super::helpers::fresh_db().await;
    let mut tx = db.begin().await.unwrap();
    marketplace::on_exec!(tx.exec(), c => sqlx::query("SET TRANSACTION READ ONLY")
        .execute(c).await.map(drop))
    .unwrap();
    let refused: marketplace::store::StoreError = marketplace::on_exec!(tx.exec(), c =>
        sqlx::query("INSERT INTO skills (name) VALUES ('x')").execute(c).await.map(drop))
    .unwrap_err()
    .into();
    assert!(refused.is_unavailable(), "{refused}");
}

/// A keyed request whose run loses the database (a failover under way) is answered 503, and its
/// key cannot be let go then: it is let go as soon as the probe finds the database back, so the
/// client's retry after `Retry-After` runs instead of being refused `IDEMPOTENCY_KEY_IN_USE` for
/// the rest of the lease.
#[actix_web::test]
async fn a_key_held_when_postgres_went_away_is_let_go_once_it_is_back() {
    let Ok(admin_url) = std::env::var("TEST_DATABASE_URL") else {
        return;
    };
    let (app, relay) = behind_relay(&admin_url).await;
    let ana = register(&app, "ana", &["empresa"]).await;
    let database = app.db.availability().clone();
    let state = &app.state;
    let claim = match marketplace::workflows::idempotency::start(state, ana.id, "k-away", "f")
        .await
        .unwrap()
    {
        marketplace::workflows::idempotency::Start::Run(claim) => claim,
        _ => panic!("a fresh key runs"),
    };
    // `None` when the probe's own query fails: a pooled connection from before the cut
    // answers EOF once after the restore (and is dropped), which says nothing of the key.
    let held = || async {
        let mut conn = app.db.conn().await.ok()?;
        marketplace::on_exec!(conn.exec(), c => sqlx::query_scalar::<_, i64>(
            "SELECT COUNT(*) FROM idempotency_keys WHERE idempotency_key = 'k-away'")
            .fetch_one(c).await)
        .ok()
    };
    assert_eq!(held().await, Some(1));

    relay.cut().await;
    until("the probe finds PostgreSQL away", || database.is_away()).await;
    marketplace::workflows::idempotency::finish(state, &claim, None).await;
    relay.restore().await;
    until("the probe finds PostgreSQL back", || !database.is_away()).await;
    until_async(|| async { held().await == Some(0) }).await;
    app.stop().await;
}
