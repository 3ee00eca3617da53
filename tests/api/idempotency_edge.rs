//! What a keyed request costs at the edge (`http::idempotency`, probe D30): the body its route
//! declares and no more is read, a multipart boundary is at most RFC 2046's 70 characters and
//! found in linear time, and a large body is hashed off the workers, so no account can stall
//! them or fill the memory through `Idempotency-Key`.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use reqwest::header::CONTENT_TYPE;

use crate::helpers::{
    Account, ChildGuard, TestApp, free_port, json, register, service_command, spawn_app, wait_for,
};
use crate::market::code;

/// A keyed request of a just-registered (unverified) account with these exact bytes.
fn keyed_upload(
    client: &reqwest::Client,
    base: &str,
    account: &Account,
    path: &str,
    boundary: &str,
    body: bytes::Bytes,
    key: Option<&str>,
) -> reqwest::RequestBuilder {
    let request = client
        .post(format!("{base}{path}"))
        .bearer_auth(&account.access_token)
        .header("Cookie", format!("csrf_token={}", account.csrf_token))
        .header("X-CSRF-Token", &account.csrf_token)
        .header(
            CONTENT_TYPE,
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(body);
    match key {
        Some(key) => request.header("Idempotency-Key", key),
        None => request,
    }
}

/// `GET /health` every 20 ms until `stop` fires; each answer's time.
fn watch_health(
    app: &TestApp,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<Vec<Duration>>,
) {
    let (stop, mut stopped) = tokio::sync::oneshot::channel();
    let (client, url) = (app.client.clone(), app.url("/health"));
    let watch = tokio::spawn(async move {
        let mut times = Vec::new();
        while stopped.try_recv().is_err() {
            let started = Instant::now();
            let r = client.get(&url).send().await.expect("health answers");
            assert_eq!(r.status(), StatusCode::OK);
            times.push(started.elapsed());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        times
    });
    (stop, watch)
}

fn median(mut times: Vec<Duration>) -> Duration {
    assert!(!times.is_empty(), "health was asked");
    times.sort();
    times[times.len() / 2]
}

/// The probe's rows: a boundary of 60,000 characters over 8 MB bodies, twice at once, by an
/// account registered a moment before, to a route that takes no body and to an upload.
/// Before, each held a worker for over 10 s and `/health` waited as long; now each is refused
/// before its body is read.
#[actix_web::test]
async fn a_boundary_past_70_characters_is_refused_before_the_body_is_read() {
    let app = spawn_app().await;
    let fresh = register(&app, "justcame", &["experto"]).await;
    let boundary = format!("{}b", "a".repeat(59_999));
    let body = bytes::Bytes::from(vec![b'a'; 8_000_000]);
    let (stop, health) = watch_health(&app);
    for path in ["/api/notifications/mark-all-read", "/api/profiles/upload"] {
        let started = Instant::now();
        let sends = (0..2).map(|i| {
            keyed_upload(
                &app.client,
                &app.address,
                &fresh,
                path,
                &boundary,
                body.clone(),
                Some(&format!("{path}-{i}")),
            )
            .send()
        });
        for r in futures_util::future::join_all(sends).await {
            let r = r.expect("an answer, not a dropped connection");
            assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{path}");
            assert_eq!(code(&json(r).await), "INVALID_MULTIPART_BOUNDARY");
        }
        // Sending 16 MB on loopback takes a fraction of this; the old scan took 12 s.
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{path}: {:?}",
            started.elapsed()
        );
    }
    stop.send(()).unwrap();
    let times = health.await.unwrap();
    let slowest = times.iter().max().copied().unwrap_or_default();
    assert!(median(times) < Duration::from_millis(50), "health's median");
    assert!(
        slowest < Duration::from_secs(1),
        "health waited {slowest:?}"
    );
    // Refused before a key was taken: a retry with a fitting boundary would run.
    let mut conn = app.db.conn().await.unwrap();
    let keys: i64 = marketplace::on_exec!(conn.exec(), c => sqlx::query_scalar(
        "SELECT COUNT(*) FROM idempotency_keys WHERE user_id = $1")
        .bind(fresh.id).fetch_one(c).await)
    .unwrap();
    assert_eq!(keys, 0);
    app.stop().await;
}

/// The probe's upload (8 MB under a boundary of 60,000 characters) and the worst body under
/// RFC 2046's longest boundary (`a…ab` over `a`s), each sent to an upload route without a key
/// and with one: the keyed request costs the same order as the plain one (the probe's took
/// 14 s against 0.01 s), since the boundary is refused or found in a linear pass on the
/// blocking pool, and `/health` stays quick meanwhile.
#[actix_web::test]
async fn a_keyed_upload_costs_what_the_same_upload_costs_without_a_key() {
    let app = spawn_app().await;
    let fresh = register(&app, "uploader", &["experto"]).await;
    let body = bytes::Bytes::from(vec![b'a'; 8_000_000]);
    let timed = |boundary: String, key: Option<String>| {
        let request = keyed_upload(
            &app.client,
            &app.address,
            &fresh,
            "/api/profiles/upload",
            &boundary,
            body.clone(),
            key.as_deref(),
        );
        async move {
            let started = Instant::now();
            let r = request.send().await.expect("an answer");
            let status = r.status();
            let _ = r.bytes().await;
            (status, started.elapsed())
        }
    };
    let (stop, health) = watch_health(&app);
    let cases = [
        // No file part in either body: 422 from the route, 400 for the keyed long boundary.
        (59_999, StatusCode::BAD_REQUEST),
        (69, StatusCode::UNPROCESSABLE_ENTITY),
    ];
    for (run, keyed_status) in cases {
        let boundary = format!("{}b", "a".repeat(run));
        let (mut plain, mut keyed) = (Duration::MAX, Duration::MAX);
        for round in 0..3 {
            let (status, took) = timed(boundary.clone(), None).await;
            assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "no file part");
            plain = plain.min(took);
            let key = format!("upload-{run}-{round}");
            let (status, took) = timed(boundary.clone(), Some(key)).await;
            assert_eq!(status, keyed_status, "under a key, boundary of {}", run + 1);
            keyed = keyed.min(took);
        }
        assert!(
            keyed < plain * 10 + Duration::from_millis(500),
            "boundary of {}: with a key {keyed:?}, without {plain:?}",
            run + 1
        );
    }
    stop.send(()).unwrap();
    let times = health.await.unwrap();
    assert!(median(times) < Duration::from_millis(50), "health's median");
    app.stop().await;
}

/// Peak resident memory of a process, in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .expect("the server's status")
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM")
}

/// 55 concurrent 4 MiB keyed bodies to a route that declares none (the probe's 15 MiB bodies
/// took the process from 370 to 926 MB; read whole, these would add 220 MiB): none is read, so
/// the server's peak memory grows by less than 64 MiB. Measured on the service's own process,
/// started from its binary. 4 MiB rather than 15 keeps the 220 MiB this test sends through
/// loopback from starving the tests beside it; `benches/scale/idempotency_edge.py` sends the
/// probe's 15.
#[actix_web::test]
async fn a_route_without_a_body_reads_none_under_a_key() {
    let data = tempfile::tempdir().unwrap();
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let server = ChildGuard(
        service_command(data.path(), port)
            .env("BCRYPT_COST", "4")
            .env("WORKERS", "2")
            .env("RATE_LIMIT_PER_MINUTE", "0")
            .spawn()
            .expect("the service starts"),
    );
    let client = reqwest::Client::new();
    let up = wait_for(Duration::from_secs(30), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).ok()
    })
    .await;
    assert!(up.is_some(), "the service listens");
    let r = client
        .post(format!("{base}/api/auth/register"))
        .json(
            &serde_json::json!({"email": "bulk@example.com", "username": "bulk",
            "password": crate::helpers::PASSWORD, "roles": ["experto"]}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let body = json(r).await;
    let account = Account {
        id: body["user"]["id"].as_i64().unwrap(),
        email: "bulk@example.com".into(),
        username: "bulk".into(),
        access_token: body["access_token"].as_str().unwrap().into(),
        csrf_token: body["csrf_token"].as_str().unwrap().into(),
        refresh_cookie: String::new(),
    };
    let before = peak_rss_kib(server.0.id());
    let body = bytes::Bytes::from(vec![b'a'; 4 * 1024 * 1024]);
    let sends = (0..55).map(|i| {
        keyed_upload(
            &client,
            &base,
            &account,
            "/api/notifications/mark-all-read",
            "xyz",
            body.clone(),
            Some(&format!("bulk-{i}")),
        )
        .send()
    });
    for r in futures_util::future::join_all(sends).await {
        assert_eq!(r.expect("an answer").status(), StatusCode::OK);
    }
    let grown = peak_rss_kib(server.0.id()).saturating_sub(before);
    assert!(grown < 64 * 1024, "peak RSS grew by {grown} KiB");
}
