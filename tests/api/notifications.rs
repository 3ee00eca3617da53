//! Stored notifications: the REST routes and the outbox consumer that turns an event's
//! `notify` array into notifications, once per event.

use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::{Account, TestApp, admin, json, register, request_as, spawn_app};
use crate::market::send;
use marketplace::store::events::{self, Event, NewEvent};
use marketplace::workflows::notify::{NotificationConsumer, for_admins, for_user};
use marketplace::workflows::outbox::{Consumer, Dispatcher};

async fn list(app: &TestApp, token: &str, query: &str) -> Value {
    let response = request_as(
        app,
        Method::GET,
        &format!("/api/notifications{query}"),
        token,
        None,
    )
    .await;
    assert_eq!(response.status(), 200);
    json(response).await
}

async fn create_test(app: &TestApp, who: &Account) -> Value {
    let response = send(app, Method::POST, "/api/notifications/test", who, None).await;
    assert_eq!(response.status(), 201);
    json(response).await
}

/// Records an event in a committed transaction on the app's database; its id.
async fn record_event(app: &TestApp, payload: Value) -> i64 {
    let mut tx = app.db.begin().await.unwrap();
    let id = events::record(
        tx.exec(),
        NewEvent {
            kind: "test.notify",
            aggregate: "test",
            aggregate_id: None,
            payload,
        },
        app.clock.now(),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    id
}

/// Notifications of `user_id` made by `event_id`, straight from the table.
async fn stored_for_event(app: &TestApp, user_id: i64, event_id: i64) -> i64 {
    let mut conn = app.db.conn().await.unwrap();
    marketplace::on_exec!(conn.exec(), c => sqlx::query_scalar::<_, i64>(
        "SELECT COUNT(*) FROM notifications WHERE user_id = $1 AND event_id = $2",
    )
    .bind(user_id)
    .bind(event_id)
    .fetch_one(c)
    .await)
    .unwrap()
}

#[actix_web::test]
async fn the_list_starts_empty_and_a_test_notification_shows_unread() {
    let app = spawn_app().await;
    let alice = register(&app, "alice", &["empresa"]).await;

    let body = list(&app, &alice.access_token, "").await;
    assert_eq!(
        body,
        json!({"items": [], "total": 0, "page": 1, "size": 20, "pages": 0, "unread_count": 0})
    );

    let created = create_test(&app, &alice).await;
    assert_eq!(created["type"], "test");
    assert_eq!(created["is_read"], false);
    assert!(created["read_at"].is_null());
    assert!(created["id"].as_i64().is_some());
    assert!(created["created_at"].as_str().is_some());

    let body = list(&app, &alice.access_token, "/").await;
    assert_eq!(body["total"], 1);
    assert_eq!(body["unread_count"], 1);
    assert_eq!(body["items"][0], created);
    app.stop().await;
}

#[actix_web::test]
async fn the_list_is_paginated_newest_first_and_filters_unread() {
    let app = spawn_app().await;
    let alice = register(&app, "alice", &["experto"]).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(create_test(&app, &alice).await["id"].as_i64().unwrap());
    }

    let first = list(&app, &alice.access_token, "?page=1&size=2").await;
    assert_eq!(
        (first["total"].as_i64(), first["pages"].as_i64()),
        (Some(3), Some(2))
    );
    assert_eq!(
        (first["page"].as_i64(), first["size"].as_i64()),
        (Some(1), Some(2))
    );
    let got: Vec<i64> = first["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_i64().unwrap())
        .collect();
    assert_eq!(got, vec![ids[2], ids[1]]);
    let second = list(&app, &alice.access_token, "?page=2&size=2").await;
    let got: Vec<i64> = second["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_i64().unwrap())
        .collect();
    assert_eq!(got, vec![ids[0]]);

    let response = send(
        &app,
        Method::POST,
        "/api/notifications/mark-read",
        &alice,
        Some(&json!({"notification_id": ids[1]})),
    )
    .await;
    assert_eq!(response.status(), 200);
    let unread = list(&app, &alice.access_token, "?unread_only=true").await;
    assert_eq!(unread["total"], 2);
    assert_eq!(unread["unread_count"], 2);
    assert!(
        unread["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n["is_read"] == false)
    );

    let response = request_as(
        &app,
        Method::GET,
        "/api/notifications?size=101",
        &alice.access_token,
        None,
    )
    .await;
    assert_eq!(response.status(), 422);
    app.stop().await;
}

#[actix_web::test]
async fn only_the_owner_marks_a_notification_read() {
    let app = spawn_app().await;
    let alice = register(&app, "alice", &["empresa"]).await;
    let bob = register(&app, "bob", &["experto"]).await;
    let id = create_test(&app, &alice).await["id"].as_i64().unwrap();

    let response = send(
        &app,
        Method::POST,
        "/api/notifications/mark-read",
        &bob,
        Some(&json!({"notification_id": id})),
    )
    .await;
    assert_eq!(response.status(), 404);
    assert_eq!(json(response).await["code"], "NOT_FOUND");
    assert_eq!(
        list(&app, &alice.access_token, "").await["items"][0]["is_read"],
        false
    );

    let response = send(
        &app,
        Method::POST,
        "/api/notifications/mark-read",
        &alice,
        Some(&json!({"notification_id": id})),
    )
    .await;
    assert_eq!(response.status(), 200);
    let body = json(response).await;
    assert_eq!(body["id"], id);
    assert_eq!(body["is_read"], true);
    assert!(body["read_at"].as_str().is_some());

    let response = send(
        &app,
        Method::POST,
        "/api/notifications/mark-read",
        &alice,
        Some(&json!({"notification_id": id + 1000})),
    )
    .await;
    assert_eq!(response.status(), 404);
    let response = send(
        &app,
        Method::POST,
        "/api/notifications/mark-read",
        &alice,
        Some(&json!({})),
    )
    .await;
    assert_eq!(response.status(), 422);
    app.stop().await;
}

#[actix_web::test]
async fn mark_all_read_counts_what_it_changed() {
    let app = spawn_app().await;
    let alice = register(&app, "alice", &["empresa"]).await;
    let bob = register(&app, "bob", &["experto"]).await;
    for _ in 0..3 {
        create_test(&app, &alice).await;
    }
    create_test(&app, &bob).await;

    let mark_all = |who: &Account| {
        let app = &app;
        let who = who.clone();
        async move {
            let response = send(
                app,
                Method::POST,
                "/api/notifications/mark-all-read",
                &who,
                None,
            )
            .await;
            assert_eq!(response.status(), 200);
            json(response).await
        }
    };
    assert_eq!(mark_all(&alice).await, json!({"updated": 3}));
    assert_eq!(mark_all(&alice).await, json!({"updated": 0}));
    let body = list(&app, &alice.access_token, "").await;
    assert_eq!(body["unread_count"], 0);
    assert!(
        body["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n["is_read"] == true)
    );
    assert_eq!(list(&app, &bob.access_token, "").await["unread_count"], 1);
    app.stop().await;
}

#[actix_web::test]
async fn an_event_stores_its_notifications_once_however_often_it_is_dispatched() {
    let app = spawn_app().await;
    let alice = register(&app, "alice", &["empresa"]).await;
    let event_id = record_event(
        &app,
        json!({"notify": [for_user(alice.id, "payment_held", "Payment held", "Funds are in escrow", json!({"payment_id": 9}))]}),
    )
    .await;

    let _ = app.state.outbox.trigger().await;
    let _ = app.state.outbox.trigger().await;
    assert_eq!(stored_for_event(&app, alice.id, event_id).await, 1);

    // Another instance's dispatcher over the same database.
    let other = Dispatcher::new(
        app.db.clone(),
        app.clock.clone(),
        vec![std::sync::Arc::new(NotificationConsumer::new(
            app.db.clone(),
            app.clock.clone(),
        ))],
    );
    other.run_once().await.unwrap();
    // A replay after a crash between the effect and the record of its delivery.
    let consumer = NotificationConsumer::new(app.db.clone(), app.clock.clone());
    let event = Event {
        id: event_id,
        kind: "test.notify".into(),
        aggregate: "test".into(),
        aggregate_id: None,
        payload: sqlx::types::Json(
            json!({"notify": [for_user(alice.id, "payment_held", "Payment held", "Funds are in escrow", json!({"payment_id": 9}))]}),
        ),
        created_at: app.clock.now(),
        available_at: app.clock.now(),
        attempts: 0,
    };
    consumer.handle(&event).await.unwrap();
    assert_eq!(consumer.store(&event).await.unwrap(), 0);
    assert_eq!(stored_for_event(&app, alice.id, event_id).await, 1);

    let body = list(&app, &alice.access_token, "").await;
    assert_eq!(body["total"], 1);
    let item = &body["items"][0];
    assert_eq!(item["type"], "payment_held");
    assert_eq!(item["title"], "Payment held");
    assert_eq!(item["message"], "Funds are in escrow");
    assert_eq!(item["data"], json!({"payment_id": 9}));
    assert_eq!(item["is_read"], false);
    app.stop().await;
}

#[actix_web::test]
async fn to_admins_reaches_each_administrator_once() {
    let app = spawn_app().await;
    let (root, root_token) = admin(&app, "root").await;
    let (second, second_token) = admin(&app, "second").await;
    let alice = register(&app, "alice", &["experto"]).await;
    // Malformed entries and events without `notify` are skipped, not retried forever.
    record_event(&app, json!({"other": 1})).await;
    let event_id = record_event(
        &app,
        json!({"notify": [
            for_admins("profile_created", "New profile", "Verify alice", json!({"user_id": alice.id})),
            // The same type named directly for an administrator: still one for them.
            for_user(root, "profile_created", "New profile", "Verify alice", json!({})),
            {"title": "no recipient"},
            "not an object",
        ]}),
    )
    .await;
    let _ = app.state.outbox.trigger().await;
    let _ = app.state.outbox.trigger().await;

    assert_eq!(stored_for_event(&app, root, event_id).await, 1);
    assert_eq!(stored_for_event(&app, second, event_id).await, 1);
    assert_eq!(stored_for_event(&app, alice.id, event_id).await, 0);
    for token in [&root_token, &second_token] {
        let body = list(&app, token, "").await;
        assert_eq!(body["total"], 1);
        assert_eq!(body["items"][0]["type"], "profile_created");
        assert_eq!(body["items"][0]["message"], "Verify alice");
    }
    assert_eq!(list(&app, &alice.access_token, "").await["total"], 0);
    let mut conn = app.db.conn().await.unwrap();
    let pending = events::OUTBOX.pending_count(conn.exec()).await.unwrap();
    assert_eq!(pending, 0, "every event was dispatched");
    app.stop().await;
}

#[actix_web::test]
async fn every_route_needs_authentication() {
    let app = spawn_app().await;
    for (method, path) in [
        (Method::GET, "/api/notifications"),
        (Method::POST, "/api/notifications/mark-read"),
        (Method::POST, "/api/notifications/mark-all-read"),
        (Method::POST, "/api/notifications/test"),
    ] {
        let response = app
            .client
            .request(method.clone(), app.url(path))
            .json(&json!({"notification_id": 1}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 401, "{method} {path}");
        assert_eq!(json(response).await["code"], "NOT_AUTHENTICATED");
    }
    app.stop().await;
}
