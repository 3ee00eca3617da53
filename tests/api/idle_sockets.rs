//! Idle WebSockets (issue #31, "the idle-socket reset"): a socket whose client answers the
//! server's pings lives on whatever the service's clock does, and keeps receiving frames; a
//! socket the server ends gets a close frame with a code and a reason first, never a bare TCP
//! reset or end of stream, even when its client comes back to it late.
//!
//! `soak_idle_sockets` (ignored: minutes of real time) holds idle chat and notification
//! sockets, some read as a browser reads them and some not read at all, for `SOAK_SECONDS`
//! (120) on the engines the suite is pointed at, and prints how each one ended:
//! `cargo test --test api soak_idle_sockets -- --ignored --nocapture`.

use std::time::Duration;

use futures_util::StreamExt;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json as j};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{self, Message};

use crate::escrow::deal;
use crate::helpers::{Account, TestApp, json};
use crate::market::Market;
use crate::realtime::{Socket, next_frame};

/// How a client opens its socket: with an access token in the query, or with the session
/// cookie from the front end's origin (as a browser does).
#[derive(Clone, Copy, Debug)]
enum Auth {
    Token,
    Cookie,
}

fn request(
    app: &TestApp,
    path: &str,
    who: &Account,
    auth: Auth,
) -> tungstenite::handshake::client::Request {
    let url = app.url(path).replacen("http://", "ws://", 1);
    match auth {
        Auth::Token => format!("{url}?token={}", who.access_token)
            .into_client_request()
            .unwrap(),
        Auth::Cookie => {
            let mut request = url.into_client_request().unwrap();
            let headers = request.headers_mut();
            let cookie = format!("refresh_token={}", who.refresh_cookie);
            headers.insert("Cookie", cookie.parse().unwrap());
            // FRONTEND_URL in the harness.
            headers.insert("Origin", "http://frontend.test".parse().unwrap());
            request
        }
    }
}

/// A socket over a TCP receive buffer kept small, as a client that stops reading leaves it.
async fn open(app: &TestApp, path: &str, who: &Account, auth: Auth) -> Socket {
    let address = app.address.trim_start_matches("http://").parse().unwrap();
    let tcp = tokio::net::TcpSocket::new_v4().unwrap();
    tcp.set_recv_buffer_size(4096).unwrap();
    let stream = tcp.connect(address).await.unwrap();
    let (socket, _) = tokio_tungstenite::client_async(
        request(app, path, who, auth),
        tokio_tungstenite::MaybeTlsStream::Plain(stream),
    )
    .await
    .unwrap_or_else(|e| panic!("{path} opens: {e:?}"));
    socket
}

/// How a socket ended, as its client saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ending {
    /// Still open: nothing ended it.
    Open,
    /// A close frame, with its code and reason.
    Closed(u16, String),
    /// A close frame without a code.
    ClosedWithoutCode,
    /// The TCP connection reset (no close frame read before it).
    Reset,
    /// End of stream without a close frame.
    EndWithoutClose,
    Other(String),
}

fn ending_of(error: &tungstenite::Error) -> Ending {
    use tungstenite::error::ProtocolError;
    match error {
        tungstenite::Error::Io(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
            Ending::Reset
        }
        tungstenite::Error::Protocol(ProtocolError::ResetWithoutClosingHandshake) => {
            Ending::EndWithoutClose
        }
        other => Ending::Other(other.to_string()),
    }
}

/// Reads the socket until `until` (answering pings as tungstenite does when it reads), or
/// until it ends: how it ended, the pings seen and the text frames read.
async fn read_until(socket: &mut Socket, until: Instant) -> (Ending, usize, usize) {
    let (mut pings, mut texts) = (0, 0);
    loop {
        let ending = match tokio::time::timeout_at(until, socket.next()).await {
            Err(_) => Ending::Open,
            Ok(Some(Ok(Message::Ping(_)))) => {
                pings += 1;
                continue;
            }
            Ok(Some(Ok(Message::Text(_)))) => {
                texts += 1;
                continue;
            }
            Ok(Some(Ok(Message::Close(Some(frame))))) => {
                Ending::Closed(u16::from(frame.code), frame.reason.to_string())
            }
            Ok(Some(Ok(Message::Close(None)))) => Ending::ClosedWithoutCode,
            Ok(Some(Ok(_))) => continue,
            Ok(Some(Err(e))) => ending_of(&e),
            Ok(None) => Ending::EndWithoutClose,
        };
        return (ending, pings, texts);
    }
}

async fn post(m: &Market, who: &Account, project: i64, content: &str) {
    let r = m
        .send(
            who,
            Method::POST,
            &format!("/api/chat/{project}"),
            Some(j!({ "content": content })),
        )
        .await;
    assert_eq!(r.status(), StatusCode::CREATED);
}

async fn notify(m: &Market, who: &Account) -> Value {
    let r = m
        .send(who, Method::POST, "/api/notifications/test", None)
        .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    json(r).await
}

/// Waits until the server has let go of every socket of this instance (its session tasks
/// ended), 10 s at most.
async fn server_let_go(app: &TestApp) -> bool {
    use marketplace::integrations::realtime::SocketKind;
    let live = &app.state.realtime;
    crate::helpers::wait_for(Duration::from_secs(10), || {
        (live.sockets_live(SocketKind::Chat) + live.sockets_live(SocketKind::Notifications) == 0)
            .then_some(())
    })
    .await
    .is_some()
}

#[actix_web::test]
async fn a_socket_that_answers_pings_lives_through_hours_of_service_clock() {
    // The access token outlives the move (24 h); the cookie's session lasts days.
    let m = Market::open_with(&[
        ("WS_PING_SECONDS", "1"),
        ("JWT_ACCESS_EXPIRE_MINUTES", "1440"),
    ])
    .await;
    let d = deal(&m, "owl", [100.0, 100.0, 100.0]).await;
    let _ = m.app.state.outbox.trigger().await;
    let room = format!("/api/ws/chat/{}", d.project_id);
    let mut chat = open(&m.app, &room, &d.expert, Auth::Token).await;
    let mut notes = open(&m.app, "/api/ws/notifications", &d.company, Auth::Cookie).await;
    assert_eq!(next_frame(&mut notes).await["type"], "unread_count");

    // Six hours of the service's clock, an hour at a time, while the clients keep answering
    // pings: more than the sockets' leases, presence and heartbeat windows many times over.
    let mut pings = 0;
    for _ in 0..6 {
        m.app.clock.advance(chrono::Duration::hours(1));
        for socket in [&mut chat, &mut notes] {
            let until = Instant::now() + Duration::from_millis(300);
            let (ending, seen, _) = read_until(socket, until).await;
            assert_eq!(ending, Ending::Open, "after {pings} pings");
            pings += seen;
        }
    }
    // And past three ping intervals of real time after the last move.
    for socket in [&mut chat, &mut notes] {
        let until = Instant::now() + Duration::from_millis(1800);
        let (ending, seen, _) = read_until(socket, until).await;
        assert_eq!(ending, Ending::Open, "after {pings} pings");
        pings += seen;
    }
    assert!(pings >= 4, "{pings}");

    // Both still receive what is published.
    post(&m, &d.company, d.project_id, "still there?").await;
    let frame = next_frame(&mut chat).await;
    assert_eq!(frame["type"], "message.created");
    assert_eq!(frame["data"]["content"], "still there?");
    let stored = notify(&m, &d.company).await;
    assert_eq!(next_frame(&mut notes).await["id"], stored["id"]);
}

#[actix_web::test]
async fn a_socket_that_stops_answering_gets_a_close_frame_however_late_it_reads() {
    let m = Market::open_with(&[
        ("WS_PING_SECONDS", "1"),
        ("JWT_ACCESS_EXPIRE_MINUTES", "1440"),
    ])
    .await;
    let d = deal(&m, "mute", [100.0, 100.0, 100.0]).await;
    let _ = m.app.state.outbox.trigger().await;
    let room = format!("/api/ws/chat/{}", d.project_id);
    let mut chat = open(&m.app, &room, &d.expert, Auth::Token).await;
    let mut notes = open(&m.app, "/api/ws/notifications", &d.company, Auth::Cookie).await;
    assert_eq!(next_frame(&mut notes).await["type"], "unread_count");
    m.app.clock.advance(chrono::Duration::hours(6));
    post(&m, &d.company, d.project_id, "last words").await;
    assert_eq!(next_frame(&mut chat).await["type"], "message.created");

    // Neither client reads from here on, so neither answers a ping. The server gives up on
    // them after three intervals, then lingers (three intervals) reading what they send;
    // they come back after that, when the server has closed the connection.
    assert!(server_let_go(&m.app).await, "the server ends both sockets");
    tokio::time::sleep(Duration::from_secs(4)).await;
    for socket in [&mut chat, &mut notes] {
        let (ending, _, _) = read_until(socket, Instant::now() + Duration::from_secs(5)).await;
        assert_eq!(
            ending,
            Ending::Closed(u16::from(CloseCode::Away), "no pong".into())
        );
    }
}

/// Which engines this run is on.
fn engines() -> String {
    let db = if std::env::var("TEST_DATABASE_URL").is_ok() {
        "PostgreSQL"
    } else {
        "SQLite"
    };
    let cache = if std::env::var("REDIS_URL").is_ok() {
        "Redis"
    } else {
        "in-process cache"
    };
    format!("{db} + {cache}")
}

/// One instance's idle sockets for `hold`: a chat and a notification socket read as a browser
/// reads them, and one of each never read until the end; `clock_step`, when given, moves the
/// service's clock that much every five seconds. Answers a line per socket.
async fn soak_one(
    label: &str,
    auth: Auth,
    hold: Duration,
    clock_step: Option<chrono::Duration>,
) -> Vec<(String, Ending)> {
    let m = Market::open_with(&[("JWT_ACCESS_EXPIRE_MINUTES", "1440")]).await;
    let d = deal(&m, label, [100.0, 100.0, 100.0]).await;
    let _ = m.app.state.outbox.trigger().await;
    let room = format!("/api/ws/chat/{}", d.project_id);
    let start = Instant::now();
    let until = start + hold;
    let mut tasks = Vec::new();
    for (kind, path, who) in [
        ("chat", room.as_str(), &d.expert),
        ("notifications", "/api/ws/notifications", &d.company),
    ] {
        for reading in [true, false] {
            let socket = open(&m.app, path, who, auth).await;
            let name = format!("{label} {kind} {}", if reading { "read" } else { "unread" });
            tasks.push((
                name,
                kind,
                actix_web::rt::spawn(async move {
                    let mut socket = socket;
                    let read = if reading {
                        read_until(&mut socket, until).await
                    } else {
                        tokio::time::sleep_until(until).await;
                        // Comes back: reads what waited, answering the pings it owes.
                        read_until(&mut socket, Instant::now() + Duration::from_secs(10)).await
                    };
                    (read, socket)
                }),
            ));
        }
    }
    if let Some(step) = clock_step {
        while Instant::now() + Duration::from_secs(5) < until {
            tokio::time::sleep(Duration::from_secs(5)).await;
            m.app.clock.advance(step);
        }
    }
    let mut lines = Vec::new();
    for (name, kind, task) in tasks {
        let ((ending, pings, texts), mut socket) = task.await.unwrap();
        let mut line = format!("{name}: {ending:?} ({pings} pings, {texts} texts read)");
        if ending == Ending::Open {
            // Still open: it still receives what is published.
            let received = if kind == "chat" {
                post(&m, &d.company, d.project_id, "after the soak").await;
                next_frame(&mut socket).await["type"] == "message.created"
            } else {
                let stored = notify(&m, &d.company).await;
                next_frame(&mut socket).await["id"] == stored["id"]
            };
            line.push_str(if received {
                ", then received a frame"
            } else {
                ", then MISSED a frame"
            });
            lines.push((
                line,
                if received {
                    ending
                } else {
                    Ending::Other("missed".into())
                },
            ));
        } else {
            lines.push((line, ending));
        }
    }
    lines
}

#[actix_web::test]
#[ignore = "minutes of real time: run with --ignored --nocapture"]
async fn soak_idle_sockets() {
    let seconds = std::env::var("SOAK_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(120);
    let hold = Duration::from_secs(seconds);
    let started = chrono::Utc::now();
    let (plain, moved) = futures_util::join!(
        soak_one("still", Auth::Token, hold, None),
        soak_one(
            "moved",
            Auth::Cookie,
            hold,
            Some(chrono::Duration::hours(1))
        ),
    );
    println!(
        "soak {} from {started}, {seconds} s, WS_PING_SECONDS=10:",
        engines()
    );
    let mut failures = Vec::new();
    for (line, ending) in plain.into_iter().chain(moved) {
        println!("  {line}");
        let expected = if line.contains(" read:") {
            Ending::Open
        } else {
            Ending::Closed(1001, "no pong".into())
        };
        if ending != expected {
            failures.push(line);
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
