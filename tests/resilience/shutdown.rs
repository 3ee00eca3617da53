//! A graceful stop (issue 33): on SIGTERM the server answers `/ready` 503 and closes its
//! WebSockets with 1001 while it still serves requests for `SHUTDOWN_DRAIN_SECONDS`, refuses
//! new sockets, lets a request under way finish, then exits 0; a second SIGTERM stops it at
//! once.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use reqwest::StatusCode;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use crate::harness::*;

async fn start(
    infra: &Infra,
    dir: &std::path::Path,
    name: &str,
    http: &reqwest::Client,
) -> (ServerProc, TestDb, SandboxProc) {
    let db = TestDb::create(&infra.pg_url, name).await;
    let keys = Keys::fresh();
    let port = free_port();
    let webhook = format!("http://127.0.0.1:{port}/api/payments/webhooks/processor");
    let sandbox = SandboxProc::start(dir, &keys, &webhook, http).await;
    let data = dir.join(name);
    std::fs::create_dir_all(&data).unwrap();
    let mut env = server_env(
        &db.url,
        &infra.redis_url,
        &format!("res:{name}:{}:", random(6)),
        &keys,
        &sandbox.base,
        &data,
        port,
    );
    env.insert("SHUTDOWN_DRAIN_SECONDS".into(), "2".into());
    env.insert("SHUTDOWN_TIMEOUT_SECONDS".into(), "10".into());
    let server = ServerProc::start(env, dir, &format!("{name}.log"), http).await;
    (server, db, sandbox)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_drains_then_exits_zero_and_a_second_one_stops_at_once() {
    let Some(infra) = infra("sigterm_drains_then_exits_zero_and_a_second_one_stops_at_once") else {
        return;
    };
    let http = client();
    let dir = tempfile::tempdir().expect("temporary directory");
    let (mut server, db, sandbox) = start(&infra, dir.path(), "drain", &http).await;
    let m = Market::open(http.clone(), &server.base, &sandbox.base, &db).await;
    let company = m.member(&db, "drainco", "empresa").await;
    let ws = |base: &str| {
        format!(
            "{}/api/ws/notifications?token={}",
            base.replacen("http://", "ws://", 1),
            company.access_token
        )
    };
    let (mut socket, _) = tokio_tungstenite::connect_async(ws(&server.base))
        .await
        .expect("socket");
    assert!(
        matches!(socket.next().await, Some(Ok(Message::Text(_)))),
        "the greeting"
    );
    assert_eq!(
        http.get(server.url("/ready"))
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );

    let signalled = Instant::now();
    server.process().terminate();
    // The socket is told to go elsewhere at once.
    let code = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(message) = socket.next().await {
            if let Ok(Message::Close(Some(frame))) = message {
                return Some(frame.code);
            }
        }
        None
    })
    .await
    .expect("closed in time");
    assert_eq!(code, Some(CloseCode::Away));
    // As a browser does: the close is answered and the connection let go.
    drop(socket);
    // Draining: not ready, no new socket, but requests are still served.
    let ready = http
        .get(server.url("/ready"))
        .send()
        .await
        .expect("still listening");
    assert_eq!(ready.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        tokio_tungstenite::connect_async(ws(&server.base))
            .await
            .is_err()
    );
    let r = send(
        &http,
        &server.base,
        &company,
        reqwest::Method::GET,
        "/api/users/me",
        None,
    )
    .await
    .expect("served while draining");
    assert_eq!(r.status(), StatusCode::OK);
    let status = server
        .process()
        .exited_within(Duration::from_secs(20))
        .await
        .expect("exits by itself");
    assert!(status.success(), "exit status {status:?}");
    let took = signalled.elapsed();
    assert!(took >= Duration::from_secs(2), "drained first ({took:?})");
    // The connections were closed after their answers while draining: nothing held the stop
    // up to its 10 s bound.
    assert!(
        took < Duration::from_secs(8),
        "stopped soon after the drain ({took:?})"
    );
    eprintln!("sigterm: drained and exited 0 in {took:?}");

    // A second SIGTERM during the drain stops it at once.
    server.restart(&http).await;
    server.process().terminate();
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.process().terminate();
    let status = server
        .process()
        .exited_within(Duration::from_secs(2))
        .await
        .expect("stops at once");
    assert!(status.success(), "exit status {status:?}");
    drop(sandbox);
    db.drop_now().await;
}
