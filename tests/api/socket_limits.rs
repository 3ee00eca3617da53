//! WebSockets that one account cannot take down (issue #31; findings D19 and D20): sockets
//! capped per account (both kinds together), per client address and per process, each
//! refused before the upgrade while HTTP keeps answering; a socket that vanished without
//! closing lapses with its lease; chat messages spend one budget per account over REST and
//! sockets alike, a socket past it gets `error` frames and, if it keeps going, a 1008 close;
//! typing frames have a small rate of their own.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json as j};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use crate::helpers::{Account, TestApp, json};
use crate::market::Market;
use crate::realtime::{Socket, next_frame};

/// An upgrade the server refused: its status, `Retry-After` and body.
#[derive(Debug)]
struct Refused {
    status: u16,
    retry_after: Option<String>,
    body: Value,
}

const NOTIFICATIONS: &str = "/api/ws/notifications";

fn chat(project: i64) -> String {
    format!("/api/ws/chat/{project}")
}

/// Opens `path` with `token`, from `forwarded_for` when given (the harness's peer is
/// loopback; tests that set it trust loopback as a proxy).
async fn upgrade_from(
    app: &TestApp,
    path: &str,
    token: &str,
    forwarded_for: Option<&str>,
) -> Result<Socket, Refused> {
    let url = format!(
        "{}?token={token}",
        app.url(path).replacen("http://", "ws://", 1)
    );
    let mut request = url.into_client_request().unwrap();
    if let Some(address) = forwarded_for {
        request
            .headers_mut()
            .insert("X-Forwarded-For", address.parse().unwrap());
    }
    match tokio_tungstenite::connect_async(request).await {
        Ok((socket, _)) => Ok(socket),
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => Err(Refused {
            status: response.status().as_u16(),
            retry_after: response
                .headers()
                .get("Retry-After")
                .map(|v| v.to_str().unwrap().to_owned()),
            body: response
                .body()
                .as_deref()
                .and_then(|b| serde_json::from_slice(b).ok())
                .unwrap_or(Value::Null),
        }),
        Err(other) => panic!("upgrade of {path}: {other:?}"),
    }
}

async fn upgrade(app: &TestApp, path: &str, token: &str) -> Result<Socket, Refused> {
    upgrade_from(app, path, token, None).await
}

async fn open(app: &TestApp, path: &str, token: &str) -> Socket {
    upgrade(app, path, token)
        .await
        .unwrap_or_else(|refused| panic!("{path} refused: {refused:?}"))
}

/// The refusal of an upgrade expected to be refused, checked for its status and code.
async fn refused(app: &TestApp, path: &str, token: &str, status: u16, code: &str) -> Refused {
    refused_from(app, path, token, None, status, code).await
}

async fn refused_from(
    app: &TestApp,
    path: &str,
    token: &str,
    forwarded_for: Option<&str>,
    status: u16,
    code: &str,
) -> Refused {
    match upgrade_from(app, path, token, forwarded_for).await {
        Ok(_) => panic!("{path} opened past a cap"),
        Err(refused) => {
            assert_eq!(refused.status, status, "{refused:?}");
            assert_eq!(refused.body["code"], code, "{refused:?}");
            assert!(refused.body["detail"].is_string(), "{refused:?}");
            assert!(refused.retry_after.is_some(), "Retry-After: {refused:?}");
            refused
        }
    }
}

/// Opens `path` once a place is free (a closed socket leaves when its session ends, a moment
/// after the close handshake), five seconds at most.
async fn open_when_free(app: &TestApp, path: &str, token: &str) -> Socket {
    let until = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        match upgrade(app, path, token).await {
            Ok(socket) => return socket,
            Err(refused) if tokio::time::Instant::now() < until => {
                assert!(matches!(refused.status, 429 | 503), "{refused:?}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(refused) => panic!("still refused: {refused:?}"),
        }
    }
}

/// Reads `socket` in a task of its own until it ends (so pings are answered), keeping it open.
fn keep_reading(mut socket: Socket) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move { while let Some(Ok(_)) = socket.next().await {} })
}

/// Text frames until the server closes the socket, and its close code (10 s at most).
async fn frames_until_close(socket: &mut Socket) -> (Vec<Value>, CloseCode) {
    let mut frames = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match tokio::time::timeout_at(deadline, socket.next()).await {
            Ok(Some(Ok(Message::Text(text)))) => frames.push(serde_json::from_str(&text).unwrap()),
            Ok(Some(Ok(Message::Close(Some(frame))))) => return (frames, frame.code),
            Ok(Some(Ok(_))) => continue,
            other => panic!("no close frame after {} frames: {other:?}", frames.len()),
        }
    }
}

/// The value of the `/metrics` series `series` (with its labels).
async fn metric(app: &TestApp, series: &str) -> f64 {
    let text = app.get("/metrics").await.text().await.unwrap();
    text.lines()
        .find_map(|line| {
            line.strip_prefix(series)
                .and_then(|rest| rest.strip_prefix(' '))
        })
        .unwrap_or_else(|| panic!("no {series} on /metrics:\n{text}"))
        .parse()
        .unwrap()
}

fn message(content: &str) -> Message {
    Message::text(j!({"type": "message", "content": content}).to_string())
}

async fn post(m: &Market, who: &Account, project: i64, content: &str) -> reqwest::Response {
    m.send(
        who,
        Method::POST,
        &format!("/api/chat/{project}"),
        Some(j!({ "content": content })),
    )
    .await
}

async fn stored(m: &Market, project: i64) -> i64 {
    m.count(
        "SELECT COUNT(*) FROM chat_messages WHERE project_id = $1",
        project,
    )
    .await
}

#[actix_web::test]
async fn one_account_is_refused_past_its_cap_while_http_keeps_answering() {
    let m = Market::open().await;
    let hoarder = m.company("hoarder").await;
    m.company("bystander").await;
    let project = m.published_project(&hoarder, 1000.0, &[]).await;
    let token = hoarder.access_token.as_str();

    // The default cap, ten, counts both kinds together.
    let mut held = Vec::new();
    for _ in 0..6 {
        held.push(open(&m.app, NOTIFICATIONS, token).await);
    }
    for _ in 0..4 {
        held.push(open(&m.app, &chat(project), token).await);
    }
    let first = refused(&m.app, NOTIFICATIONS, token, 429, "TOO_MANY_SOCKETS").await;
    assert_eq!(first.retry_after.as_deref(), Some("30"), "a lease: 3 pings");
    refused(&m.app, &chat(project), token, 429, "TOO_MANY_SOCKETS").await;

    // The account keeps trying while others use the service.
    let flood = async {
        let mut statuses = Vec::new();
        for i in 0..40 {
            let path = if i % 2 == 0 {
                NOTIFICATIONS.to_owned()
            } else {
                chat(project)
            };
            statuses.push(upgrade(&m.app, &path, token).await.err().map(|r| r.status));
        }
        statuses
    };
    let others = async {
        let health = m.app.get("/health").await.status();
        let token = crate::helpers::login(&m.app, "bystander", crate::helpers::PASSWORD).await;
        let health_again = m.app.get("/health").await.status();
        (health, token, health_again)
    };
    let (statuses, (health, other_token, health_again)) = futures_util::join!(flood, others);
    assert!(
        statuses.iter().all(|s| *s == Some(429)),
        "every extra upgrade refused: {statuses:?}"
    );
    assert_eq!(health, StatusCode::OK);
    assert_eq!(health_again, StatusCode::OK);
    // Another account still opens sockets.
    let mut other = open(&m.app, NOTIFICATIONS, &other_token).await;
    assert_eq!(next_frame(&mut other).await["type"], "unread_count");
    assert_eq!(
        m.app
            .state
            .sockets
            .live_for_account(hoarder.id)
            .await
            .unwrap(),
        10
    );
    assert!(
        metric(
            &m.app,
            r#"realtime_sockets_refused_total{reason="account"}"#
        )
        .await
            >= 42.0
    );
    assert_eq!(
        metric(&m.app, r#"realtime_socket_caps{scope="account"}"#).await,
        10.0
    );

    // Closing one lets one new socket in, and only one.
    let mut closing = held.pop().unwrap();
    closing.close(None).await.unwrap();
    held.push(open_when_free(&m.app, NOTIFICATIONS, token).await);
    refused(&m.app, &chat(project), token, 429, "TOO_MANY_SOCKETS").await;
}

#[actix_web::test]
async fn a_socket_that_vanished_without_closing_stops_counting_after_its_lease() {
    // Pings every second: live sockets renew their lease (three seconds) each second.
    let m = Market::open_with(&[("WS_PING_SECONDS", "1"), ("WS_MAX_SOCKETS_PER_USER", "2")]).await;
    let user = m.company("ghosted").await;
    let token = user.access_token.as_str();
    let live = keep_reading(open(&m.app, NOTIFICATIONS, token).await);
    // A socket of an instance that died: registered, never released, never renewed.
    let sockets = &m.app.state.sockets;
    let slot = sockets.process_slot().unwrap();
    let vanished = sockets
        .admit(slot, user.id, None)
        .await
        .unwrap()
        .expect("room for it");
    std::mem::forget(vanished);
    refused(&m.app, NOTIFICATIONS, token, 429, "TOO_MANY_SOCKETS").await;

    // Past the lease, only the socket that renews it still counts.
    m.app.clock.advance(chrono::Duration::seconds(4));
    let mut counted = None;
    for _ in 0..100 {
        let n = sockets.live_for_account(user.id).await.unwrap();
        counted = Some(n);
        if n == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        counted,
        Some(1),
        "the live socket renewed, the vanished one lapsed"
    );
    let _second = keep_reading(open(&m.app, NOTIFICATIONS, token).await);
    refused(&m.app, NOTIFICATIONS, token, 429, "TOO_MANY_SOCKETS").await;
    live.abort();
}

#[actix_web::test]
async fn many_users_behind_one_address_are_refused_past_the_address_cap() {
    let m = Market::open_with(&[
        ("TRUSTED_PROXIES", "127.0.0.0/8, ::1"),
        ("WS_MAX_SOCKETS_PER_ADDRESS", "3"),
    ])
    .await;
    let office = Some("203.0.113.7");
    let mut held = Vec::new();
    let a = m.company("officea").await;
    let b = m.company("officeb").await;
    let c = m.company("officec").await;
    for (who, n) in [(&a, 2), (&b, 1)] {
        for _ in 0..n {
            held.push(
                upgrade_from(&m.app, NOTIFICATIONS, &who.access_token, office)
                    .await
                    .expect("under the address cap"),
            );
        }
    }
    let refusal = refused_from(
        &m.app,
        NOTIFICATIONS,
        &c.access_token,
        office,
        429,
        "TOO_MANY_SOCKETS_FROM_ADDRESS",
    )
    .await;
    assert_eq!(refusal.retry_after.as_deref(), Some("30"));
    // The same account from another address, and from the proxy itself, is let in.
    held.push(
        upgrade_from(&m.app, NOTIFICATIONS, &c.access_token, Some("198.51.100.9"))
            .await
            .expect("another address"),
    );
    held.push(open(&m.app, NOTIFICATIONS, &c.access_token).await);
    assert!(
        metric(
            &m.app,
            r#"realtime_sockets_refused_total{reason="address"}"#
        )
        .await
            >= 1.0
    );
    assert_eq!(m.app.get("/health").await.status(), StatusCode::OK);
}

#[actix_web::test]
async fn the_process_cap_refuses_with_503_while_http_keeps_answering() {
    let m = Market::open_with(&[("WS_MAX_SOCKETS", "2")]).await;
    let one = m.company("firstin").await;
    let two = m.company("secondin").await;
    let three = m.company("thirdin").await;
    let mut first = open(&m.app, NOTIFICATIONS, &one.access_token).await;
    let _second = open(&m.app, NOTIFICATIONS, &two.access_token).await;
    refused(
        &m.app,
        NOTIFICATIONS,
        &three.access_token,
        503,
        "SOCKETS_AT_CAPACITY",
    )
    .await;
    assert_eq!(m.app.get("/health").await.status(), StatusCode::OK);
    crate::helpers::login(&m.app, "thirdin", crate::helpers::PASSWORD).await;
    assert!(
        metric(
            &m.app,
            r#"realtime_sockets_refused_total{reason="process"}"#
        )
        .await
            >= 1.0
    );
    assert_eq!(metric(&m.app, "realtime_sockets_process").await, 2.0);
    assert_eq!(
        metric(&m.app, r#"realtime_socket_caps{scope="process"}"#).await,
        2.0
    );

    first.close(None).await.unwrap();
    let _third = open_when_free(&m.app, NOTIFICATIONS, &three.access_token).await;
}

#[actix_web::test]
async fn a_flood_of_chat_frames_is_cut_at_the_budget_and_the_client_closed() {
    let m = Market::open_with(&[("CHAT_MESSAGES_PER_MINUTE", "5")]).await;
    let company = m.company("chatty").await;
    let project = m.published_project(&company, 1000.0, &[]).await;
    let mut socket = open(&m.app, &chat(project), &company.access_token).await;

    for i in 0..5 {
        socket.send(message(&format!("m{i}"))).await.unwrap();
    }
    for i in 0..5 {
        let frame = next_frame(&mut socket).await;
        assert_eq!(frame["type"], "message.created", "{frame}");
        assert_eq!(frame["data"]["content"], format!("m{i}"));
    }
    // Twenty more as fast as it can: refused from the first, and closed at the tenth refusal.
    for i in 5..25 {
        if socket.send(message(&format!("m{i}"))).await.is_err() {
            break;
        }
    }
    let (frames, code) = frames_until_close(&mut socket).await;
    assert_eq!(code, CloseCode::Policy);
    assert_eq!(frames.len(), 10, "{frames:?}");
    let rest = post(&m, &company, project, "and over REST").await;
    assert_eq!(rest.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(rest.headers().get("Retry-After").is_some());
    let body = json(rest).await;
    assert_eq!(body["code"], "RATE_LIMITED");
    for frame in &frames {
        assert_eq!(frame["type"], "error");
        assert_eq!(frame["data"], body, "the body REST answers, in the frame");
    }

    // Exactly the budget was stored.
    assert_eq!(stored(&m, project).await, 5);
    let r = m
        .send(&company, Method::GET, &format!("/api/chat/{project}"), None)
        .await;
    assert_eq!(json(r).await["total"], 5);
    assert!(
        metric(
            &m.app,
            r#"realtime_frames_refused_total{reason="chat_budget"}"#
        )
        .await
            >= 10.0
    );
    assert!(metric(&m.app, "realtime_sockets_closed_for_refusals_total").await >= 1.0);
}

#[actix_web::test]
async fn rest_posts_and_socket_frames_share_one_budget_that_a_minute_refills() {
    let m = Market::open_with(&[("CHAT_MESSAGES_PER_MINUTE", "5")]).await;
    let company = m.company("thrifty").await;
    let project = m.published_project(&company, 1000.0, &[]).await;
    for text in ["rest one", "rest two"] {
        assert_eq!(
            post(&m, &company, project, text).await.status(),
            StatusCode::CREATED
        );
    }
    let mut socket = open(&m.app, &chat(project), &company.access_token).await;
    for text in ["socket one", "socket two", "socket three", "socket four"] {
        socket.send(message(text)).await.unwrap();
    }
    let mut created = Vec::new();
    let mut errors = Vec::new();
    while created.len() + errors.len() < 4 {
        let frame = next_frame(&mut socket).await;
        match frame["type"].as_str() {
            Some("message.created") => created.push(frame["data"]["content"].clone()),
            Some("error") => errors.push(frame["data"]["code"].clone()),
            _ => panic!("{frame}"),
        }
    }
    assert_eq!(created, ["socket one", "socket two", "socket three"]);
    assert_eq!(errors, ["RATE_LIMITED"]);
    let r = post(&m, &company, project, "rest three").await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(stored(&m, project).await, 5);

    // A minute later the whole budget is back, for either path.
    m.app.clock.advance(chrono::Duration::seconds(60));
    assert_eq!(
        post(&m, &company, project, "rest again").await.status(),
        StatusCode::CREATED
    );
    assert_eq!(next_frame(&mut socket).await["type"], "message.created");
    socket.send(message("socket again")).await.unwrap();
    let frame = next_frame(&mut socket).await;
    assert_eq!(frame["type"], "message.created", "{frame}");
    assert_eq!(frame["data"]["content"], "socket again");
    assert_eq!(stored(&m, project).await, 7);
}

#[actix_web::test]
async fn typing_frames_past_their_rate_are_dropped_without_an_answer() {
    let m = Market::open().await;
    let company = m.company("typist").await;
    let project = m.published_project(&company, 1000.0, &[]).await;
    let mut typist = open(&m.app, &chat(project), &company.access_token).await;
    let mut watcher = open(&m.app, &chat(project), &m.admin_token).await;
    for _ in 0..20 {
        typist
            .send(Message::text(r#"{"type": "typing"}"#))
            .await
            .unwrap();
    }
    // A burst of three, perhaps one more if a third of a second went by.
    let mut relayed = 0;
    let quiet_until = tokio::time::Instant::now() + Duration::from_millis(800);
    while let Ok(Some(Ok(message))) = tokio::time::timeout_at(quiet_until, watcher.next()).await {
        if let Message::Text(text) = message {
            let frame: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(frame["type"], "typing");
            relayed += 1;
        }
    }
    assert!((3..=5).contains(&relayed), "{relayed} relayed");
    // The typist heard nothing back but its own relayed frames: no error frames.
    let mut own = 0;
    let until = tokio::time::Instant::now() + Duration::from_millis(300);
    while let Ok(Some(Ok(message))) = tokio::time::timeout_at(until, typist.next()).await {
        if let Message::Text(text) = message {
            let frame: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(frame["type"], "typing", "{frame}");
            own += 1;
        }
    }
    assert_eq!(own, relayed);
    assert!(metric(&m.app, r#"realtime_frames_refused_total{reason="typing"}"#).await >= 15.0);
    // The socket still serves messages.
    typist.send(message("done typing")).await.unwrap();
    assert_eq!(next_frame(&mut watcher).await["type"], "message.created");
}

#[actix_web::test]
async fn the_account_cap_and_the_chat_budget_hold_across_instances() {
    if std::env::var("REDIS_URL").is_err() {
        // Instances share the leases and the budget through Redis; without it each counts
        // its own.
        return;
    }
    let caps = [
        ("WS_MAX_SOCKETS_PER_USER", "2"),
        ("CHAT_MESSAGES_PER_MINUTE", "4"),
    ];
    let m = Market::open_with(&caps).await;
    let company = m.company("twinned").await;
    let project = m.published_project(&company, 1000.0, &[]).await;
    let database = m.app.database_url();
    let prefix = m.app.state.settings.cache_prefix.clone();
    let mut vars = vec![
        ("DATABASE_URL", database.as_str()),
        ("CACHE_PREFIX", prefix.as_str()),
    ];
    vars.extend(caps);
    let other = crate::helpers::spawn_app_with(&vars).await;
    // Each test instance signs with a secret of its own: a token of the other's.
    let token_there =
        crate::helpers::login(&other, &company.username, crate::helpers::PASSWORD).await;

    let mut here = open(&m.app, NOTIFICATIONS, &company.access_token).await;
    let mut there = open(&other, &chat(project), &token_there).await;
    refused(&other, NOTIFICATIONS, &token_there, 429, "TOO_MANY_SOCKETS").await;
    refused(
        &m.app,
        &chat(project),
        &company.access_token,
        429,
        "TOO_MANY_SOCKETS",
    )
    .await;

    // Two messages over REST here, two over the socket there: the budget is spent on both.
    for text in ["here one", "here two"] {
        assert_eq!(
            post(&m, &company, project, text).await.status(),
            StatusCode::CREATED
        );
    }
    for text in ["there one", "there two", "there three"] {
        there.send(message(text)).await.unwrap();
    }
    let mut types = Vec::new();
    while types.len() < 5 {
        types.push(next_frame(&mut there).await["type"].clone());
    }
    let created = types.iter().filter(|t| *t == "message.created").count();
    let errors = types.iter().filter(|t| *t == "error").count();
    assert_eq!((created, errors), (4, 1), "{types:?}");
    assert_eq!(stored(&m, project).await, 4);

    // A socket closed on one instance makes room on the other.
    assert_eq!(next_frame(&mut here).await["type"], "unread_count");
    here.close(None).await.unwrap();
    let _again = open_when_free(&other, NOTIFICATIONS, &token_there).await;
}
