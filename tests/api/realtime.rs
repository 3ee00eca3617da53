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

/// A client's socket, as the WebSocket tests open it.
pub(crate) type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

fn ws_url(app: &TestApp, path: &str, token: &str) -> String {
    format!(
        "{}?token={token}",
        app.url(path).replacen("http://", "ws://", 1)
    )
}

/// Opens a socket with the access token in the query.
pub(crate) async fn connect(app: &TestApp, path: &str, token: &str) -> Socket {
    let (socket, _) = tokio_tungstenite::connect_async(ws_url(app, path, token))
        .await
        .expect("the socket opens");
    socket
}

/// The next text frame as JSON, skipping pings (5 s at most).
pub(crate) async fn next_frame(socket: &mut Socket) -> Value {
    next_frame_within(socket, Duration::from_secs(5)).await
}

/// The next text frame as JSON, skipping pings, within `limit`.
pub(crate) async fn next_frame_within(socket: &mut Socket, limit: Duration) -> Value {
    loop {
        let message = tokio::time::timeout(limit, socket.next())
            .await
            .expect("a frame in time")
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
pub(crate) async fn closed_with(socket: &mut Socket, wait: Duration) -> CloseCode {
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
    // Garbage gets an error frame, not a dropped socket; so does a type no member sends.
    expert.send(Message::text("not json")).await.unwrap();
    assert_eq!(next_frame(&mut expert).await["type"], "error");
    expert
        .send(Message::text(r#"{"type": "shout", "content": "hey"}"#))
        .await
        .unwrap();
    let frame = next_frame(&mut expert).await;
    assert_eq!(
        (&frame["type"], &frame["data"]["detail"]),
        (&j!("error"), &j!("unknown frame type"))
    );
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
        .header("Cookie", format!("csrf_token={}", user.csrf_token))
        .header("X-CSRF-Token", &user.csrf_token)
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
    let database = m.app.database_url();
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

/// The value of the `/metrics` series `name` (with its labels), as this instance reports it.
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

#[actix_web::test]
async fn a_panicking_room_restarts_and_later_messages_still_arrive_in_order() {
    let m = Market::open().await;
    let d = deal(&m, "phoenix", [100.0, 100.0, 100.0]).await;
    let room = format!("/api/ws/chat/{}", d.project_id);
    let mut expert = connect(&m.app, &room, &d.expert.access_token).await;
    let restarts = r#"realtime_supervisor_restarts_total{supervisor="chat_room"}"#;
    let restarts_before = metric(&m.app, restarts).await;

    let first = post(&m, &d.company, d.project_id, "before").await["id"].clone();
    // The room's actor is busy with a job that panics; the posts queue behind it.
    let boom = m
        .app
        .state
        .chat_rooms
        .call::<_, _, ()>(d.project_id, || async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            panic!("the room actor is made to panic")
        });
    let posts = async {
        let mut ids = Vec::new();
        for text in ["after one", "after two", "after three"] {
            ids.push(post(&m, &d.company, d.project_id, text).await["id"].clone());
        }
        ids
    };
    let (boom, later) = futures_util::join!(boom, posts);
    assert_eq!(boom, Err(actors::ActorError::Panicked));
    let mut sent = vec![first];
    sent.extend(later);
    for id in &sent {
        let frame = next_frame(&mut expert).await;
        assert_eq!(frame["type"], "message.created");
        assert_eq!(&frame["data"]["id"], id, "in the order of the store");
    }
    quiet(&mut expert, Duration::from_millis(300)).await;
    assert!(metric(&m.app, restarts).await > restarts_before);
}

#[actix_web::test]
async fn operators_see_rooms_sockets_frames_and_restarts_on_metrics() {
    let m = Market::open().await;
    let d = deal(&m, "gauges", [100.0, 100.0, 100.0]).await;
    // The deal's own notifications are pushed before the sockets open, so the one frame
    // counted below is the post's (a late outbox pass once made it two).
    let _ = m.app.state.outbox.trigger().await;
    let room = format!("/api/ws/chat/{}", d.project_id);
    let mut chat = connect(&m.app, &room, &d.expert.access_token).await;
    let mut notes = connect(&m.app, "/api/ws/notifications", &d.company.access_token).await;
    assert_eq!(next_frame(&mut notes).await["type"], "unread_count");
    post(&m, &d.company, d.project_id, "counted").await;
    assert_eq!(next_frame(&mut chat).await["type"], "message.created");

    // Per instance: this test's server alone.
    assert_eq!(metric(&m.app, "realtime_rooms_live").await, 2.0);
    assert_eq!(
        metric(&m.app, r#"realtime_sockets_live{kind="chat"}"#).await,
        1.0
    );
    assert_eq!(
        metric(&m.app, r#"realtime_sockets_live{kind="notifications"}"#).await,
        1.0
    );
    assert_eq!(
        metric(&m.app, "realtime_frames_fanned_out_total").await,
        1.0
    );
    // Process-wide counters (other tests share the process): present.
    metric(&m.app, "realtime_slow_consumers_dropped_total").await;
    metric(
        &m.app,
        r#"realtime_supervisor_restarts_total{supervisor="chat_room"}"#,
    )
    .await;
    assert!(
        metric(
            &m.app,
            r#"actor_messages_handled_total{kind="chat_room",category="registry"}"#
        )
        .await
            >= 1.0
    );

    chat.close(None).await.unwrap();
    notes.close(None).await.unwrap();
    let gone = crate::helpers::wait_for(Duration::from_secs(5), || {
        use marketplace::integrations::realtime::SocketKind;
        let live = &m.app.state.realtime;
        (live.sockets_live(SocketKind::Chat) + live.sockets_live(SocketKind::Notifications) == 0
            && live.rooms_live() == 0)
            .then_some(())
    })
    .await;
    assert!(gone.is_some(), "closed sockets are counted out");
}

/// A socket whose client reads nothing, over a TCP receive buffer kept small so the server's
/// writes back up quickly.
async fn unread_socket(app: &TestApp, path: &str, token: &str) -> Socket {
    let address = app.address.trim_start_matches("http://").parse().unwrap();
    let tcp = tokio::net::TcpSocket::new_v4().unwrap();
    tcp.set_recv_buffer_size(4096).unwrap();
    let stream = tcp.connect(address).await.unwrap();
    let (socket, _) = tokio_tungstenite::client_async(
        ws_url(app, path, token),
        tokio_tungstenite::MaybeTlsStream::Plain(stream),
    )
    .await
    .expect("the socket opens");
    socket
}

#[actix_web::test]
async fn a_slow_consumer_is_dropped_while_the_others_receive_everything() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    let m = Market::open().await;
    let d = deal(&m, "laggard", [100.0, 100.0, 100.0]).await;
    let path = format!("/api/ws/chat/{}", d.project_id);
    let room = marketplace::integrations::realtime::chat_room(d.project_id);
    let total = 600;
    let mut slow = unread_socket(&m.app, &path, &d.expert.access_token).await;
    let mut readers = Vec::new();
    let counts: Vec<_> = (0..2).map(|_| Arc::new(AtomicUsize::new(0))).collect();
    for (who, count) in [&d.company, &d.expert].into_iter().zip(&counts) {
        let mut socket = connect(&m.app, &path, &who.access_token).await;
        let count = count.clone();
        readers.push(actix_web::rt::spawn(async move {
            let mut seen = Vec::new();
            while seen.len() < total {
                let Some(Ok(message)) = socket.next().await else {
                    break;
                };
                if let Message::Text(text) = message {
                    let frame: Value = serde_json::from_str(&text).unwrap();
                    seen.push(frame["data"]["n"].as_u64().unwrap());
                    count.fetch_add(1, Ordering::SeqCst);
                }
            }
            // The socket stays open (returned) until the test is done with the room.
            (seen, socket)
        }));
    }
    assert_eq!(m.app.state.realtime.members(&room), 3);
    let dropped = r"realtime_slow_consumers_dropped_total";
    let dropped_before = metric(&m.app, dropped).await;

    // 600 frames of 60 KB (36 MB): far more than the slow socket's queue and TCP buffers
    // hold. Sent in steps the readers keep up with, so only the one that never reads lags.
    let pad = "x".repeat(60 * 1024);
    for n in 0..total {
        let frame = j!({"type": "typing", "data": {"n": n, "pad": pad}}).to_string();
        m.app.state.realtime.publish(&room, &frame).await.unwrap();
        if n % 50 == 49 {
            let caught_up = crate::helpers::wait_for(Duration::from_secs(10), || {
                counts
                    .iter()
                    .all(|c| c.load(Ordering::SeqCst) > n)
                    .then_some(())
            })
            .await;
            assert!(caught_up.is_some(), "readers keep up ({n})");
        }
    }
    let mut fast = Vec::new();
    for reader in readers {
        let (seen, socket) = reader.await.unwrap();
        assert_eq!(seen, (0..total as u64).collect::<Vec<_>>(), "all, in order");
        fast.push(socket);
    }
    assert_eq!(
        m.app.state.realtime.members(&room),
        2,
        "the slow socket left the room"
    );
    assert!(metric(&m.app, dropped).await > dropped_before);

    // The slow client, reading at last, gets what was queued for it, then 1013 (try again).
    let mut received = 0;
    let code = loop {
        match tokio::time::timeout(Duration::from_secs(10), slow.next()).await {
            Ok(Some(Ok(Message::Text(_)))) => received += 1,
            Ok(Some(Ok(Message::Close(Some(frame))))) => break frame.code,
            Ok(Some(Ok(_))) => {}
            other => panic!("after {received} frames: {other:?}"),
        }
    };
    assert_eq!(code, CloseCode::Again);
    assert!(received < total, "{received}");
}

#[actix_web::test]
async fn the_session_cookie_counts_only_from_the_front_end_origin() {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;

    let m = Market::open().await;
    let user = m.company("cookied").await;
    let url = m
        .app
        .url("/api/ws/notifications")
        .replacen("http://", "ws://", 1);
    let request = |origin: &str| {
        let mut request = url.as_str().into_client_request().unwrap();
        let headers = request.headers_mut();
        headers.insert(
            "Cookie",
            format!("refresh_token={}", user.refresh_cookie)
                .parse()
                .unwrap(),
        );
        headers.insert("Origin", origin.parse().unwrap());
        request
    };
    match tokio_tungstenite::connect_async(request("http://evil.test"))
        .await
        .unwrap_err()
    {
        tokio_tungstenite::tungstenite::Error::Http(response) => {
            assert_eq!(response.status(), 403)
        }
        other => panic!("{other:?}"),
    }
    // FRONTEND_URL is http://frontend.test in the harness.
    let (mut socket, _) = tokio_tungstenite::connect_async(request("http://frontend.test"))
        .await
        .expect("accepted from the front end's origin");
    assert_eq!(next_frame(&mut socket).await["type"], "unread_count");
}

#[actix_web::test]
async fn a_socket_that_never_answers_pings_is_closed() {
    use marketplace::integrations::realtime::SocketKind;

    let m = Market::open_with(&[("WS_PING_SECONDS", "1")]).await;
    let user = m.company("mute").await;
    // Never read, so tungstenite never answers the pings.
    let mut socket = unread_socket(&m.app, "/api/ws/notifications", &user.access_token).await;
    let live = || m.app.state.realtime.sockets_live(SocketKind::Notifications);
    assert_eq!(live(), 1);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(live(), 1, "two intervals without a pong are tolerated");
    let closed =
        crate::helpers::wait_for(Duration::from_secs(3), || (live() == 0).then_some(())).await;
    assert!(
        closed.is_some(),
        "closed after three intervals without a pong"
    );
    // Reading again, the client answers the pings it had not read and learns why it was
    // closed: the server still reads what comes (the close handshake), where it used to shut
    // the connection after actix's 1 s linger and answer those pongs with a reset.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        closed_with(&mut socket, Duration::from_secs(5)).await,
        CloseCode::Away
    );
}

#[actix_web::test]
async fn an_idle_socket_that_answers_pings_stays_open() {
    let m = Market::open_with(&[("WS_PING_SECONDS", "2")]).await;
    let user = m.company("patient").await;
    let mut socket = connect(&m.app, "/api/ws/notifications", &user.access_token).await;
    assert_eq!(next_frame(&mut socket).await["type"], "unread_count");
    // Three intervals (and past actix's 5 s request and keep-alive timers) with nothing but
    // pings, each answered as tungstenite reads it.
    let mut pings = 0;
    let until = tokio::time::Instant::now() + Duration::from_millis(6500);
    while let Ok(message) = tokio::time::timeout_at(until, socket.next()).await {
        match message {
            Some(Ok(Message::Ping(_))) => pings += 1,
            other => panic!("after {pings} pings: {other:?}"),
        }
    }
    assert!(pings >= 3, "{pings}");
    let r = m
        .send(&user, Method::POST, "/api/notifications/test", None)
        .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    assert_eq!(next_frame(&mut socket).await["type"], "test");
}

#[actix_web::test]
async fn a_member_connected_to_another_instance_gets_no_chat_email() {
    if std::env::var("REDIS_URL").is_err() {
        // Presence is shared through Redis; without it each instance knows only its own.
        return;
    }
    let m = Market::open().await;
    let d = deal(&m, "present", [100.0, 100.0, 100.0]).await;
    let database = m.app.database_url();
    let other = crate::helpers::spawn_app_with(&[
        ("DATABASE_URL", &database),
        ("CACHE_PREFIX", &m.app.state.settings.cache_prefix),
    ])
    .await;
    let token = crate::helpers::login(&other, &d.expert.username, crate::helpers::PASSWORD).await;
    let room = format!("/api/ws/chat/{}", d.project_id);
    let mut remote = connect(&other, &room, &token).await;
    let sent = post(&m, &d.company, d.project_id, "are you there?").await;
    assert_eq!(next_frame(&mut remote).await["data"]["id"], sent["id"]);
    let digests = "SELECT COUNT(*) FROM chat_email_digests WHERE user_id = $1";
    assert_eq!(m.count(digests, d.expert.id).await, 0, "present elsewhere");

    // Gone from the other instance too: the next message is e-mailed.
    remote.close(None).await.unwrap();
    let gone = crate::helpers::wait_for(Duration::from_secs(5), || {
        (other
            .state
            .realtime
            .members(&marketplace::integrations::realtime::chat_room(
                d.project_id,
            ))
            == 0)
            .then_some(())
    })
    .await;
    assert!(gone.is_some());
    tokio::time::sleep(Duration::from_millis(300)).await;
    post(&m, &d.company, d.project_id, "hello?").await;
    assert_eq!(m.count(digests, d.expert.id).await, 1);
}

#[actix_web::test]
async fn a_frame_and_a_body_with_the_same_text_get_the_same_answer() {
    let m = Market::open().await;
    let d = deal(&m, "guarded", [100.0, 100.0, 100.0]).await;
    let room = format!("/api/ws/chat/{}", d.project_id);
    let mut socket = connect(&m.app, &room, &d.company.access_token).await;
    let rest = async |text: &str| {
        let r = m
            .send(
                &d.company,
                Method::POST,
                &format!("/api/chat/{}", d.project_id),
                Some(j!({ "content": text })),
            )
            .await;
        assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY, "{text:?}");
        json(r).await
    };
    let frame = |text: &str| Message::text(j!({"type": "message", "content": text}).to_string());

    for text in ["nul a\u{0}b", "rlo a\u{202E}b"] {
        let body = rest(text).await;
        socket.send(frame(text)).await.unwrap();
        let answer = next_frame(&mut socket).await;
        assert_eq!(answer["type"], "error", "{text:?}");
        // REST's body is refused by the middleware as a whole, the frame's content by its
        // type: the same code and the same sentence about the character.
        assert_eq!(answer["data"]["code"], "VALIDATION_ERROR");
        assert_eq!(answer["data"]["code"], body["code"]);
        assert_eq!(
            answer["data"]["errors"][0]["message"],
            body["errors"][0]["message"]
        );
    }

    let too_long = "x".repeat(5_001);
    let body = rest(&too_long).await;
    assert_eq!(body["detail"], "content: must be 1 to 5000 characters");
    socket.send(frame(&too_long)).await.unwrap();
    let answer = next_frame(&mut socket).await;
    assert_eq!(answer["type"], "error");
    assert_eq!(answer["data"], body, "the body REST answers, in the frame");

    // Nothing was stored by either path: the history is empty, and so is the table.
    let r = m
        .send(
            &d.expert,
            Method::GET,
            &format!("/api/chat/{}", d.project_id),
            None,
        )
        .await;
    assert_eq!(json(r).await["total"], 0);
    assert_eq!(
        m.count(
            "SELECT COUNT(*) FROM chat_messages WHERE project_id = $1",
            d.project_id
        )
        .await,
        0
    );
    // The socket still serves: a clean message is stored and fanned out, its sender included.
    socket.send(frame("clean")).await.unwrap();
    let created = next_frame(&mut socket).await;
    assert_eq!(created["type"], "message.created");
    assert_eq!(created["data"]["content"], "clean");
}
