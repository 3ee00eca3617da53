//! A chat room's group commit: the posts waiting for the room's actor are stored together (one
//! statement, one commit), in the order they reached the room, each answered its message
//! after that commit and fanned out in the store's order; the groups of several rooms waiting
//! at once share one commit; `/metrics` counts the commits.

use std::time::Duration;

use futures_util::SinkExt;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json as j};
use tokio_tungstenite::tungstenite::Message;

use crate::escrow::deal;
use crate::helpers::{TestApp, json};
use crate::market::Market;
use crate::realtime::{Socket, connect, next_frame_within};
use marketplace::domain::text::ChatText;
use marketplace::state::AppState;
use marketplace::workflows::chat;
use marketplace::workflows::projects::Caller;

/// The next text frame as JSON, skipping pings (10 s at most: a burst's frames wait for its
/// group's commit).
async fn next_frame(socket: &mut Socket) -> Value {
    next_frame_within(socket, Duration::from_secs(10)).await
}

/// The value of the `/metrics` series `name`, as this instance reports it.
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

/// Keeps the room's actor busy until `count` posts wait in its line (10 s at most), so that
/// they are all there when its next job starts.
fn hold_until_waiting(
    state: &AppState,
    project_id: i64,
    count: usize,
) -> impl Future<Output = Result<(), actors::ActorError>> + use<> {
    let st = state.clone();
    state.chat_rooms.call(project_id, move || async move {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while st.chat_posts.waiting(project_id) < count && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
}

/// The room's history, oldest first: (id, content).
async fn history(m: &Market, project_id: i64) -> Vec<(i64, String)> {
    let r = m
        .as_admin(
            Method::GET,
            &format!("/api/chat/{project_id}?size=100"),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let mut items: Vec<(i64, String)> = json(r).await["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["id"].as_i64().unwrap(),
                i["content"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    items.reverse();
    items
}

/// `ids` increase, and are the room's whole history in that order, each once.
async fn assert_history_is(m: &Market, project_id: i64, ids: &[i64], what: &str) {
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "{what}: in order {ids:?}"
    );
    let stored = history(m, project_id).await;
    assert_eq!(
        stored.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        ids,
        "{what}"
    );
}

const COMMITS: &str = "realtime_chat_commits_total";
const STORED: &str = "realtime_chat_messages_stored_total";

#[actix_web::test]
async fn a_burst_over_rest_and_sockets_is_stored_in_few_commits_and_fanned_out_in_store_order() {
    const REST_COMPANY: usize = 20;
    const REST_ADMIN: usize = 15;
    const SOCKETS: usize = 15;
    const POSTS: usize = REST_COMPANY + REST_ADMIN + SOCKETS;
    let m = Market::open_with(&[("WS_MAX_SOCKETS_PER_USER", "20")]).await;
    let d = deal(&m, "burst", [100.0, 100.0, 100.0]).await;
    let room = format!("/api/ws/chat/{}", d.project_id);
    let mut listener = connect(&m.app, &room, &d.company.access_token).await;
    // A socket's frames are handled one after the other: one message from each.
    let mut senders = Vec::new();
    for _ in 0..SOCKETS {
        senders.push(connect(&m.app, &room, &d.expert.access_token).await);
    }
    let (commits_before, stored_before) =
        (metric(&m.app, COMMITS).await, metric(&m.app, STORED).await);

    let hold = hold_until_waiting(&m.app.state, d.project_id, POSTS);
    let path = format!("/api/chat/{}", d.project_id);
    let rest = futures_util::future::join_all((0..REST_COMPANY + REST_ADMIN).map(|n| {
        let path = path.clone();
        let d = &d;
        let m = &m;
        async move {
            let content = format!("rest {n}");
            let body = j!({ "content": content });
            let r = if n < REST_COMPANY {
                m.send(&d.company, Method::POST, &path, Some(body)).await
            } else {
                m.as_admin(Method::POST, &path, Some(&body)).await
            };
            assert_eq!(r.status(), StatusCode::CREATED, "{content}");
            let message = json(r).await;
            assert_eq!(message["content"], content.as_str());
            (message["id"].as_i64().unwrap(), content)
        }
    }));
    let frames = futures_util::future::join_all(senders.iter_mut().enumerate().map(
        |(n, socket)| async move {
            let frame = j!({"type": "message", "content": format!("socket {n}")});
            socket.send(Message::text(frame.to_string())).await.unwrap();
        },
    ));
    let (held, answered, ()) = futures_util::join!(hold, rest, async {
        frames.await;
    });
    held.unwrap();

    // Every post stored once; the frames on a listening socket follow the store's order.
    let stored = history(&m, d.project_id).await;
    assert_eq!(stored.len(), POSTS);
    let mut seen = Vec::new();
    for _ in 0..POSTS {
        let frame = next_frame(&mut listener).await;
        assert_eq!(frame["type"], "message.created");
        seen.push((
            frame["data"]["id"].as_i64().unwrap(),
            frame["data"]["content"].as_str().unwrap().to_owned(),
        ));
    }
    assert_eq!(seen, stored, "frames in the store's order");
    assert!(
        stored.windows(2).all(|w| w[0].0 < w[1].0),
        "ids increase: {stored:?}"
    );
    // Each REST post was answered the message stored for it.
    for (id, content) in &answered {
        assert!(stored.contains(&(*id, content.clone())), "{id} {content}");
    }
    for n in 0..SOCKETS {
        let content = format!("socket {n}");
        assert!(stored.iter().any(|(_, c)| *c == content), "{content}");
    }
    // The senders got their own messages' frames, no error.
    for socket in &mut senders {
        for _ in 0..POSTS {
            assert_eq!(next_frame(socket).await["type"], "message.created");
        }
    }

    // Grouped: fewer commits than posts (all waited together: one group of them).
    let commits = metric(&m.app, COMMITS).await - commits_before;
    assert_eq!(metric(&m.app, STORED).await - stored_before, POSTS as f64);
    assert!(
        commits >= 1.0 && commits < POSTS as f64,
        "{commits} commits for {POSTS} posts"
    );
    assert!(metric(&m.app, "realtime_chat_commit_messages_max").await > 1.0);
}

#[actix_web::test]
async fn posts_waiting_together_are_stored_in_the_order_they_reached_the_room_and_answered_each() {
    let m = Market::open().await;
    let d = deal(&m, "line", [100.0, 100.0, 100.0]).await;
    let outsider = m.expert("intruder").await;
    let state = &m.app.state;
    let as_caller = |id: i64, admin: bool| Caller {
        id,
        admin,
        company: false,
        expert: false,
    };
    let company = as_caller(d.company.id, false);
    let expert = as_caller(d.expert.id, false);
    let intruder = as_caller(outsider.id, false);
    const POSTS: usize = 40;
    let commits_before = metric(&m.app, COMMITS).await;

    // The posts reach the room in the order of the list (each joins the line when first
    // polled, and `join_all` polls them in order) while its actor is busy.
    let hold = hold_until_waiting(state, d.project_id, POSTS);
    let callers: Vec<Caller> = (0..POSTS)
        .map(|n| match n {
            17 => intruder,
            n if n % 2 == 0 => company,
            _ => expert,
        })
        .collect();
    let posts = futures_util::future::join_all(callers.iter().enumerate().map(|(n, who)| {
        chat::post(
            state,
            who,
            d.project_id,
            ChatText::parse(format!("in line {n}")).unwrap(),
        )
    }));
    let (held, answers) = futures_util::join!(hold, posts);
    held.unwrap();

    // One who does not take part is refused alone; the others are stored, in line order.
    let mut ids = Vec::new();
    for (n, answer) in answers.into_iter().enumerate() {
        if n == 17 {
            let refused = answer.expect_err("an outsider's post is refused");
            assert_eq!(refused.to_string(), "Chat not found");
            continue;
        }
        let message = answer.unwrap_or_else(|e| panic!("post {n}: {e}"));
        assert_eq!(message.content, format!("in line {n}"));
        ids.push(message.id);
    }
    assert_history_is(&m, d.project_id, &ids, "stored once each").await;
    let commits = metric(&m.app, COMMITS).await - commits_before;
    assert!(commits < (POSTS - 1) as f64, "{commits} commits");
    // Each stored message recorded its event, as a post alone does.
    assert_eq!(
        m.count(
            "SELECT COUNT(*) FROM events WHERE kind = 'chat.message_created' AND aggregate_id = $1",
            d.project_id
        )
        .await,
        (POSTS - 1) as i64
    );

    // Later posts, one at a time, each get a commit of their own and come after.
    let later = chat::post(
        state,
        &company,
        d.project_id,
        ChatText::parse("after the line").unwrap(),
    )
    .await
    .unwrap();
    assert!(later.id > *ids.last().unwrap());
}

#[actix_web::test]
async fn a_post_that_cannot_be_stored_fails_alone_and_the_rest_of_its_group_is_stored() {
    let m = Market::open().await;
    let d = deal(&m, "ghost", [100.0, 100.0, 100.0]).await;
    let state = &m.app.state;
    let company = Caller {
        id: d.company.id,
        admin: false,
        company: true,
        expert: false,
    };
    // An administrator's account that no longer exists: admitted as a mediator, refused by
    // the store (its author is not a user), so its group fails and is tried post by post.
    let ghost = Caller {
        id: 999_999_999,
        admin: true,
        company: false,
        expert: false,
    };
    const POSTS: usize = 8;
    let callers: Vec<Caller> = (0..POSTS)
        .map(|n| if n == 3 { ghost } else { company })
        .collect();
    let hold = hold_until_waiting(state, d.project_id, POSTS);
    let posts = futures_util::future::join_all(callers.iter().enumerate().map(|(n, who)| {
        chat::post(
            state,
            who,
            d.project_id,
            ChatText::parse(format!("group {n}")).unwrap(),
        )
    }));
    let (held, answers) = futures_util::join!(hold, posts);
    held.unwrap();

    let mut ids = Vec::new();
    for (n, answer) in answers.into_iter().enumerate() {
        if n == 3 {
            assert!(answer.is_err(), "the ghost's post is refused");
            continue;
        }
        let message = answer.unwrap_or_else(|e| panic!("post {n}: {e}"));
        assert_eq!(message.content, format!("group {n}"));
        ids.push(message.id);
    }
    assert_history_is(&m, d.project_id, &ids, "the others stored once each").await;
}

/// Holds the commit the rooms share until `rooms` groups wait for it (10 s at most), then lets
/// it go: those groups are then written by one turn.
async fn share_commit_when_waiting(state: &AppState, rooms: usize) {
    let turn = state.chat_commits.turn.lock().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while state.chat_commits.waiting.len() < rooms && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        state.chat_commits.waiting.len(),
        rooms,
        "every room's group waits"
    );
    drop(turn);
}

/// Posts `per_room` messages to each room, as its company (except where `author` says
/// otherwise), with each room's posts in one group and every room's group waiting for the
/// same commit; the answers, room by room, in post order.
async fn post_in_rooms_at_once(
    m: &Market,
    rooms: &[crate::escrow::Deal],
    per_room: usize,
    author: impl Fn(usize, usize) -> Option<Caller>,
) -> Vec<Vec<marketplace::workflows::error::FlowResult<marketplace::store::chat::Message>>> {
    let state = &m.app.state;
    let holds = futures_util::future::join_all(
        rooms
            .iter()
            .map(|d| hold_until_waiting(state, d.project_id, per_room)),
    );
    let posts = futures_util::future::join_all(rooms.iter().enumerate().map(|(r, d)| {
        let author = &author;
        futures_util::future::join_all((0..per_room).map(move |n| {
            let who = author(r, n).unwrap_or(Caller {
                id: d.company.id,
                admin: false,
                company: true,
                expert: false,
            });
            let text = ChatText::parse(format!("room {r} post {n}")).unwrap();
            async move { chat::post(state, &who, d.project_id, text).await }
        }))
    }));
    // Polled first, so the commit is held before any group can reach it.
    let ((), held, answers) =
        futures_util::join!(share_commit_when_waiting(state, rooms.len()), holds, posts);
    for h in held {
        h.unwrap();
    }
    answers
}

#[actix_web::test]
async fn groups_of_several_rooms_waiting_at_once_share_one_commit_each_in_its_order() {
    let m = Market::open().await;
    let mut rooms = Vec::new();
    for name in ["north", "south", "east"] {
        rooms.push(deal(&m, name, [100.0, 100.0, 100.0]).await);
    }
    let mut listener = connect(
        &m.app,
        &format!("/api/ws/chat/{}", rooms[1].project_id),
        &rooms[1].company.access_token,
    )
    .await;
    const PER_ROOM: usize = 6;
    let (commits_before, stored_before) =
        (metric(&m.app, COMMITS).await, metric(&m.app, STORED).await);

    let answers = post_in_rooms_at_once(&m, &rooms, PER_ROOM, |_, _| None).await;

    // One commit for the three rooms' groups.
    assert_eq!(metric(&m.app, COMMITS).await - commits_before, 1.0);
    assert_eq!(
        metric(&m.app, STORED).await - stored_before,
        (rooms.len() * PER_ROOM) as f64
    );
    for (r, (d, answers)) in rooms.iter().zip(answers).enumerate() {
        let ids: Vec<i64> = answers
            .into_iter()
            .enumerate()
            .map(|(n, answer)| {
                let message = answer.unwrap_or_else(|e| panic!("room {r} post {n}: {e}"));
                assert_eq!(message.project_id, d.project_id);
                assert_eq!(message.content, format!("room {r} post {n}"));
                message.id
            })
            .collect();
        assert_history_is(&m, d.project_id, &ids, &format!("room {r}")).await;
        assert_eq!(
            m.count(
                "SELECT COUNT(*) FROM events WHERE kind = 'chat.message_created' AND aggregate_id = $1",
                d.project_id
            )
            .await,
            PER_ROOM as i64
        );
    }
    // A room's frames, published together, arrive one by one in its order, and only its own.
    for n in 0..PER_ROOM {
        let frame = next_frame(&mut listener).await;
        assert_eq!(frame["type"], "message.created");
        assert_eq!(frame["data"]["content"], format!("room 1 post {n}"));
        assert_eq!(frame["data"]["project_id"], rooms[1].project_id);
    }
}

#[actix_web::test]
async fn a_room_whose_group_cannot_be_stored_fails_alone_in_a_shared_commit() {
    let m = Market::open().await;
    let mut rooms = Vec::new();
    for name in ["west", "ghosted", "river"] {
        rooms.push(deal(&m, name, [100.0, 100.0, 100.0]).await);
    }
    const PER_ROOM: usize = 4;
    // An administrator's account that no longer exists, posting third in the second room:
    // admitted as a mediator, refused by the store, so the shared commit fails and each
    // room is tried alone (the second post by post).
    let ghost = Caller {
        id: 999_999_999,
        admin: true,
        company: false,
        expert: false,
    };
    let answers = post_in_rooms_at_once(&m, &rooms, PER_ROOM, |r, n| {
        (r == 1 && n == 2).then_some(ghost)
    })
    .await;

    for (r, (d, answers)) in rooms.iter().zip(answers).enumerate() {
        let mut ids = Vec::new();
        for (n, answer) in answers.into_iter().enumerate() {
            if r == 1 && n == 2 {
                assert!(answer.is_err(), "the ghost's post is refused");
                continue;
            }
            let message = answer.unwrap_or_else(|e| panic!("room {r} post {n}: {e}"));
            assert_eq!(message.content, format!("room {r} post {n}"));
            ids.push(message.id);
        }
        assert_history_is(&m, d.project_id, &ids, &format!("room {r}")).await;
    }
}

#[actix_web::test]
async fn a_socket_whose_messages_wait_for_their_commit_still_receives_frames_and_keeps_their_order()
{
    let m = Market::open().await;
    let d = deal(&m, "patient", [100.0, 100.0, 100.0]).await;
    let room = format!("/api/ws/chat/{}", d.project_id);
    let mut poster = connect(&m.app, &room, &d.company.access_token).await;
    let mut typist = connect(&m.app, &room, &d.expert.access_token).await;
    let count = || {
        m.count(
            "SELECT COUNT(*) FROM chat_messages WHERE project_id = $1",
            d.project_id,
        )
    };

    // The commit the rooms share is held: the poster's messages wait for it.
    let turn = m.app.state.chat_commits.turn.lock().await;
    for n in 0..3 {
        let frame = j!({"type": "message", "content": format!("patient {n}")});
        poster.send(Message::text(frame.to_string())).await.unwrap();
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while m.app.state.chat_commits.waiting.is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        !m.app.state.chat_commits.waiting.is_empty(),
        "a group waits"
    );
    // Meanwhile the room's other frames reach the poster.
    let typing = j!({"type": "typing"});
    typist
        .send(Message::text(typing.to_string()))
        .await
        .unwrap();
    let frame = next_frame(&mut poster).await;
    assert_eq!(frame["type"], "typing");
    assert_eq!(frame["data"]["user_id"], d.expert.id);
    assert_eq!(count().await, 0, "nothing stored while the commit is held");

    drop(turn);
    for n in 0..3 {
        let frame = next_frame(&mut poster).await;
        assert_eq!(frame["type"], "message.created");
        assert_eq!(frame["data"]["content"], format!("patient {n}"));
    }
    let stored = history(&m, d.project_id).await;
    let contents: Vec<&str> = stored.iter().map(|(_, c)| c.as_str()).collect();
    assert_eq!(contents, ["patient 0", "patient 1", "patient 2"]);
}
