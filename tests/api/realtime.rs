//! WebSockets through a real client: chat rooms (REST and socket posts fanned out once, in
//! order, to every member; typing relayed, never stored), notification sockets (unread count
//! on connect, every stored notification pushed), closing on logout and on an expired token,
//! hostile frames, and fan-out across two instances sharing PostgreSQL and Redis.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json as j};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use crate::escrow::deal;
use crate::helpers::{Account, TestApp, json};
use crate::market::Market;

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

fn ws_url(app: &TestApp, path: &str, token: &str) -> String {
    format!(
        "{}?token={token}",
        app.url(path).replacen("http://", "ws://", 1)
    )
}

async fn connect(app: &TestApp, path: &str, token: &str) -> Socket {
    let (socket, _) = tokio_tungstenite::connect_async(ws_url(app, path, token))
        .await
        .expect("the socket opens");
    socket
}

/// The next text frame as JSON, skipping pings (5 s at most).
async fn next_frame(socket: &mut Socket) -> Value {
    loop {
        let message = tokio::time::timeout(Duration::from_secs(5), socket.next())
            .await
            .expect("a frame within 5 s")
            .expect("the socket is open")
            .expect("a readable frame");
        match message {
            Message::Text(text) => return serde_json::from_str(&text).unwrap(),
            Message::Ping(_) | Message::Pong(_) => continue,
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// No text frame arrives within `wait`.
async fn quiet(socket: &mut Socket, wait: Duration) {
    let deadline = tokio::time::Instant::now() + wait;
    while let Ok(message) = tokio::time::timeout_at(deadline, socket.next()).await {
        match message {
            Some(Ok(Message::Text(text))) => panic!("unexpected frame {text}"),
            Some(Ok(_)) => continue,
            _ => return,
        }
    }
}

/// The close code the server sends (within `wait`).
async fn closed_with(socket: &mut Socket, wait: Duration) -> CloseCode {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match tokio::time::timeout_at(deadline, socket.next()).await {
            Ok(Some(Ok(Message::Close(Some(frame))))) => return frame.code,
            Ok(Some(Ok(_))) => continue,
            other => panic!("no close frame: {other:?}"),
        }
    }
}

async fn post(m: &Market, who: &Account, project: i64, content: &str) -> Value {
    let r = m
        .send(
            who,
            Method::POST,
            &format!("/api/chat/{project}"),
            Some(j!({ "content": content })),
        )
        .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    json(r).await
}

#[actix_web::test]
async fn both_parties_receive_each_message_once_and_in_order() {
    let m = Market::open().await;
    let d = deal(&m, "live", [100.0, 100.0, 100.0]).await;
    let room = format!("/api/ws/chat/{}", d.project_id);
    let mut company = connect(&m.app, &room, &d.company.access_token).await;
    let mut expert = connect(&m.app, &room, &d.expert.access_token).await;
    let mut company_tab = connect(&m.app, &room, &d.company.access_token).await;

    let mut sent = Vec::new();
    for text in ["one", "two", "three"] {
        sent.push(post(&m, &d.company, d.project_id, text).await["id"].clone());
    }
    for socket in [&mut company, &mut expert, &mut company_tab] {
        for id in &sent {
            let frame = next_frame(socket).await;
            assert_eq!(frame["type"], "message.created");
            assert_eq!(&frame["data"]["id"], id, "in order");
        }
        quiet(socket, Duration::from_millis(300)).await;
    }

    // A message sent over the socket is stored, then fanned out like a REST post.
    expert
        .send(Message::text(
            r#"{"type": "message", "content": "From the socket"}"#,
        ))
        .await
        .unwrap();
    let frame = next_frame(&mut company).await;
    assert_eq!(frame["type"], "message.created");
    assert_eq!(frame["data"]["content"], "From the socket");
    assert_eq!(frame["data"]["sender_id"], d.expert.id);
    assert_eq!(
        m.count(
            "SELECT COUNT(*) FROM chat_messages WHERE project_id = $1",
            d.project_id
        )
        .await,
        4
    );
    // Typing is relayed, never stored.
    expert
        .send(Message::text(r#"{"type": "typing"}"#))
        .await
        .unwrap();
    let frame = next_frame(&mut company).await;
    assert_eq!(frame["type"], "typing");
    assert_eq!(frame["data"]["user_id"], d.expert.id);
    // Edits and read marks fan out too.
    let id = sent[0].as_i64().unwrap();
    let r = m
        .send(
            &d.company,
            Method::PUT,
            &format!("/api/chat/{}/messages/{id}", d.project_id),
            Some(j!({"content": "one (edited)"})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let mut types = Vec::new();
    for _ in 0..3 {
        types.push(
            next_frame(&mut expert).await["type"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    assert_eq!(types, ["message.created", "typing", "message.updated"]);
    // Garbage gets an error frame, not a dropped socket.
    expert.send(Message::text("not json")).await.unwrap();
    assert_eq!(next_frame(&mut expert).await["type"], "error");
    // A frame over 64 KiB closes the socket with 1009.
    expert
        .send(Message::text("x".repeat(70 * 1024)))
        .await
        .unwrap();
    assert_eq!(
        closed_with(&mut expert, Duration::from_secs(5)).await,
        CloseCode::Size
    );
}

#[actix_web::test]
async fn outsiders_and_missing_tokens_are_refused_before_the_upgrade() {
    let m = Market::open().await;
    let d = deal(&m, "closed", [100.0, 100.0, 100.0]).await;
    let outsider = m.expert("eavesdropper").await;
    let room = format!("/api/ws/chat/{}", d.project_id);
    let refused = tokio_tungstenite::connect_async(ws_url(&m.app, &room, &outsider.access_token))
        .await
        .unwrap_err();
    match refused {
        tokio_tungstenite::tungstenite::Error::Http(response) => {
            assert_eq!(response.status(), 404)
        }
        other => panic!("{other:?}"),
    }
    let refused = tokio_tungstenite::connect_async(
        m.app
            .url("/api/ws/notifications")
            .replacen("http://", "ws://", 1),
    )
    .await
    .unwrap_err();
    match refused {
        tokio_tungstenite::tungstenite::Error::Http(response) => {
            assert_eq!(response.status(), 401)
        }
        other => panic!("{other:?}"),
    }
}

#[actix_web::test]
async fn notifications_are_pushed_and_the_socket_closes_when_the_session_ends() {
    let m = Market::open_with(&[("WS_PING_SECONDS", "1")]).await;
    let user = m.company("listener").await;
    let mut socket = connect(&m.app, "/api/ws/notifications", &user.access_token).await;
    let first = next_frame(&mut socket).await;
    assert_eq!(first["type"], "unread_count");
    let unread = first["data"]["unread"].as_i64().unwrap();

    let r = m
        .send(&user, Method::POST, "/api/notifications/test", None)
        .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let stored = json(r).await;
    let pushed = next_frame(&mut socket).await;
    assert_eq!(pushed["type"], "test");
    assert_eq!(pushed["id"], stored["id"]);
    assert!(pushed["title"].is_string() && pushed["created_at"].is_string());

    // A notification stored by the outbox consumer is pushed too: the administrator
    // approves the company's project.
    m.published_project(&user, 1000.0, &[]).await;
    let _ = m.app.state.outbox.trigger().await;
    let seen = next_frame(&mut socket).await;
    assert!(
        seen["id"].as_i64().unwrap() > stored["id"].as_i64().unwrap(),
        "{seen}"
    );
    assert_ne!(seen["type"], "test");
    let _ = unread;

    // Logging out ends the session: the socket closes with 1008 at the next check.
    let r = m
        .app
        .client
        .post(m.app.url("/api/auth/logout"))
        .bearer_auth(&user.access_token)
        .json(&j!({"refresh_token": user.refresh_cookie}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    assert_eq!(
        closed_with(&mut socket, Duration::from_secs(5)).await,
        CloseCode::Policy
    );
}

#[actix_web::test]
async fn an_expired_token_closes_the_socket() {
    let m = Market::open_with(&[("WS_PING_SECONDS", "1")]).await;
    let user = m.company("expiring").await;
    let mut socket = connect(&m.app, "/api/ws/notifications", &user.access_token).await;
    assert_eq!(next_frame(&mut socket).await["type"], "unread_count");
    m.app.clock.advance(chrono::Duration::minutes(16));
    assert_eq!(
        closed_with(&mut socket, Duration::from_secs(5)).await,
        CloseCode::Policy
    );
}

#[actix_web::test]
async fn a_member_on_another_instance_receives_a_message_once() {
    if std::env::var("REDIS_URL").is_err() {
        // Instances share frames through Redis; without it each has its own memory.
        return;
    }
    let m = Market::open().await;
    let d = deal(&m, "twin", [100.0, 100.0, 100.0]).await;
    let database = match &m.app.state.settings.database {
        marketplace::config::DatabaseTarget::Postgres(url) => url.clone(),
        marketplace::config::DatabaseTarget::Sqlite(path) => format!("sqlite:{}", path.display()),
    };
    let other = crate::helpers::spawn_app_with(&[
        ("DATABASE_URL", &database),
        ("CACHE_PREFIX", &m.app.state.settings.cache_prefix),
    ])
    .await;
    let token = crate::helpers::login(&other, &d.expert.username, crate::helpers::PASSWORD).await;
    let room = format!("/api/ws/chat/{}", d.project_id);
    let mut remote = connect(&other, &room, &token).await;
    let mut local = connect(&m.app, &room, &d.company.access_token).await;
    let sent = post(&m, &d.company, d.project_id, "across instances").await;
    for socket in [&mut remote, &mut local] {
        let frame = next_frame(socket).await;
        assert_eq!(frame["data"]["id"], sent["id"]);
        quiet(socket, Duration::from_millis(300)).await;
    }
}
