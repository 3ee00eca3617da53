//! `Idempotency-Key` (issue 34): a retried request never does its work twice, on either
//! engine, across instances and restarts.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json as j};

use crate::escrow::deal;
use crate::helpers::{Account, TestApp, json, spawn_app_with};
use crate::market::{Market, code};
use marketplace::domain::idempotency::fingerprint;

/// A cookie-session request of `account` carrying `key`, the body sent as these exact bytes.
async fn keyed(
    app: &TestApp,
    account: &Account,
    method: Method,
    path: &str,
    body: Option<&Value>,
    key: &str,
) -> reqwest::Response {
    let mut request = app
        .client
        .request(method, app.url(path))
        .bearer_auth(&account.access_token)
        .header("Cookie", format!("csrf_token={}", account.csrf_token))
        .header("X-CSRF-Token", &account.csrf_token)
        .header("Idempotency-Key", key);
    if let Some(body) = body {
        request = request
            .header("content-type", "application/json")
            .body(body.to_string());
    }
    request.send().await.expect("request")
}

fn project(title: &str) -> Value {
    j!({"title": title, "description": "Build it", "budget": 1200.0,
        "deadline": "2099-01-01T00:00:00", "skills_required": ["Rust"],
        "project_type": "curated", "status": "pending_publication"})
}

async fn projects_of(app: &TestApp, company: &Account) -> i64 {
    let mut conn = app.db.conn().await.unwrap();
    marketplace::on_exec!(conn.exec(), c => sqlx::query_scalar::<_, i64>(
        "SELECT COUNT(*) FROM projects WHERE company_id = $1")
        .bind(company.id).fetch_one(c).await)
    .unwrap()
}

/// The kept key's row: (answer status, work committed), or none.
async fn kept(app: &TestApp, user_id: i64, key: &str) -> Option<(Option<i32>, bool)> {
    let mut conn = app.db.conn().await.unwrap();
    marketplace::on_exec!(conn.exec(), c => sqlx::query_as::<_, (Option<i32>, bool)>(
        "SELECT status, work_committed FROM idempotency_keys
         WHERE user_id = $1 AND idempotency_key = $2")
        .bind(user_id).bind(key).fetch_optional(c).await)
    .unwrap()
}

fn replayed(r: &reqwest::Response) -> bool {
    r.headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true")
}

#[actix_web::test]
async fn a_retry_gets_the_first_answer_and_does_nothing_again() {
    let m = Market::open().await;
    let company = m.company("retryco").await;
    let body = project("Keyed platform");

    let first = keyed(
        &m.app,
        &company,
        Method::POST,
        "/api/projects/",
        Some(&body),
        "k-1",
    )
    .await;
    assert_eq!(first.status(), StatusCode::CREATED);
    assert!(!replayed(&first));
    let created = json(first).await;
    assert_eq!(
        kept(&m.app, company.id, "k-1").await,
        Some((Some(201), true))
    );

    for _ in 0..2 {
        let again = keyed(
            &m.app,
            &company,
            Method::POST,
            "/api/projects/",
            Some(&body),
            "k-1",
        )
        .await;
        assert_eq!(again.status(), StatusCode::CREATED);
        assert!(replayed(&again));
        assert!(
            again.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("application/json")
        );
        assert_eq!(json(again).await, created);
    }
    assert_eq!(projects_of(&m.app, &company).await, 1);

    // Another key is another request.
    let other = keyed(
        &m.app,
        &company,
        Method::POST,
        "/api/projects/",
        Some(&body),
        "k-2",
    )
    .await;
    assert_eq!(other.status(), StatusCode::CREATED);
    assert!(!replayed(&other));
    assert_eq!(projects_of(&m.app, &company).await, 2);
    m.app.stop().await;
}

#[actix_web::test]
async fn a_key_used_for_another_request_is_refused() {
    let m = Market::open().await;
    let company = m.company("reuseco").await;
    let r = keyed(
        &m.app,
        &company,
        Method::POST,
        "/api/projects/",
        Some(&project("One")),
        "same",
    )
    .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let id = json(r).await["id"].as_i64().unwrap();

    // Another body, another method and path: each refused, nothing done.
    let r = keyed(
        &m.app,
        &company,
        Method::POST,
        "/api/projects/",
        Some(&project("Two")),
        "same",
    )
    .await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(code(&json(r).await), "IDEMPOTENCY_KEY_REUSED");
    let path = format!("/api/projects/{id}");
    let r = keyed(
        &m.app,
        &company,
        Method::PUT,
        &path,
        Some(&j!({"title": "Renamed"})),
        "same",
    )
    .await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(code(&json(r).await), "IDEMPOTENCY_KEY_REUSED");
    assert_eq!(projects_of(&m.app, &company).await, 1);
    assert_eq!(
        m.text("SELECT title FROM projects WHERE id = $1", id).await,
        "One"
    );

    // A key that is not 1 to 255 visible characters is refused before anything runs.
    for bad in ["a".repeat(256), "two words".to_owned()] {
        let r = keyed(
            &m.app,
            &company,
            Method::POST,
            "/api/projects/",
            Some(&project("Three")),
            &bad,
        )
        .await;
        assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(json(r).await["errors"][0]["field"], "Idempotency-Key");
    }
    assert_eq!(projects_of(&m.app, &company).await, 1);
    m.app.stop().await;
}

/// Keys are each user's own: the same key of another user runs that user's request, and
/// never reads the first user's answer.
#[actix_web::test]
async fn keys_belong_to_their_user() {
    let m = Market::open().await;
    let ana = m.company("anaco").await;
    let bea = m.company("beaco").await;
    let body = project("Shared words");
    let a = keyed(
        &m.app,
        &ana,
        Method::POST,
        "/api/projects/",
        Some(&body),
        "shared-key",
    )
    .await;
    let b = keyed(
        &m.app,
        &bea,
        Method::POST,
        "/api/projects/",
        Some(&body),
        "shared-key",
    )
    .await;
    assert_eq!(
        (a.status(), b.status()),
        (StatusCode::CREATED, StatusCode::CREATED)
    );
    assert!(!replayed(&b));
    let (a, b) = (json(a).await, json(b).await);
    assert_ne!(a["id"], b["id"]);
    assert_eq!(projects_of(&m.app, &ana).await, 1);
    assert_eq!(projects_of(&m.app, &bea).await, 1);
    m.app.stop().await;
}

/// Two requests with one key at once: one runs, the other is told it is running. The
/// project's actor is held busy so the first is still running when the second arrives.
#[actix_web::test]
async fn a_retry_while_the_first_runs_is_refused_and_the_work_is_done_once() {
    let m = Market::open().await;
    let d = deal(&m, "racekey", [100.0, 200.0, 300.0]).await;
    let (hold, held) = tokio::sync::oneshot::channel::<()>();
    let (started, running) = tokio::sync::oneshot::channel::<()>();
    let busy = m
        .app
        .state
        .project_actors
        .call(d.project_id, move || async move {
            let _ = started.send(());
            let _ = held.await;
        });
    let busy = tokio::spawn(busy);
    running.await.unwrap();

    let path = format!("/api/admin/projects/{}/status", d.project_id);
    let body = j!({"status": "cancelled", "reason": "The company asked to stop"});
    let send = || {
        m.app
            .client
            .put(m.app.url(&path))
            .bearer_auth(&m.admin_token)
            .header("Idempotency-Key", "cancel-once")
            .json(&body)
            .send()
    };
    let first = tokio::spawn(send());
    // The first holds the key (waiting for the actor) before the second is sent.
    for _ in 0..500 {
        if kept(&m.app, m.admin_id, "cancel-once").await.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let second = send().await.unwrap();
    assert_eq!(second.status(), StatusCode::CONFLICT);
    assert_eq!(code(&json(second).await), "IDEMPOTENCY_KEY_IN_USE");

    hold.send(()).unwrap();
    busy.await.unwrap().unwrap();
    let first = first.await.unwrap().unwrap();
    assert_eq!(first.status(), StatusCode::OK, "{}", json(first).await);
    // The transition ran in the project's actor, which carried the key: its transaction
    // marked it.
    assert_eq!(
        kept(&m.app, m.admin_id, "cancel-once").await,
        Some((Some(200), true))
    );
    let third = send().await.unwrap();
    assert_eq!(third.status(), StatusCode::OK);
    assert!(replayed(&third));
    assert_eq!(
        m.count(
            "SELECT COUNT(*) FROM events WHERE aggregate = 'project' AND aggregate_id = $1 AND kind = 'project.status_changed'",
            d.project_id
        )
        .await,
        1
    );
    m.app.stop().await;
}

/// Many copies of one selection at once, with one key: one selection, one payment, and every
/// copy either the first answer or told the first is running.
#[actix_web::test]
async fn concurrent_copies_of_a_selection_select_and_charge_once() {
    let m = Market::open().await;
    let company = m.company("copyco").await;
    let expert = m.expert("copyex").await;
    let project_id = m.published_project(&company, 600.0, &[&expert]).await;
    assert_eq!(
        m.apply(&expert, project_id, [100.0, 200.0, 300.0])
            .await
            .status(),
        StatusCode::CREATED
    );
    let path = format!("/api/projects/{project_id}/select/{}", expert.id);
    let copies = (0..6).map(|_| keyed(&m.app, &company, Method::POST, &path, None, "select-1"));
    let answers = futures_util::future::join_all(copies).await;
    let mut payments = Vec::new();
    for r in answers {
        match r.status() {
            StatusCode::OK => payments.push(json(r).await["payment"]["id"].as_i64().unwrap()),
            StatusCode::CONFLICT => assert_eq!(code(&json(r).await), "IDEMPOTENCY_KEY_IN_USE"),
            other => panic!("unexpected {other}"),
        }
    }
    assert!(!payments.is_empty());
    payments.dedup();
    assert_eq!(payments.len(), 1, "every answer names the one payment");
    assert_eq!(
        m.count(
            "SELECT COUNT(*) FROM payments WHERE project_id = $1",
            project_id
        )
        .await,
        1
    );
    let r = keyed(&m.app, &company, Method::POST, &path, None, "select-1").await;
    assert!(replayed(&r));
    assert_eq!(json(r).await["payment"]["id"], payments[0]);
    m.app.stop().await;
}

/// Answers of requests that never reached their route's rules, and server failures, are not
/// kept: the retry runs.
#[actix_web::test]
async fn refusals_before_the_route_and_failures_are_not_kept() {
    let m = Market::open_with(&[("CHAT_MESSAGES_PER_MINUTE", "1")]).await;
    let company = m.company("failco").await;
    let body = project("After refusals");

    // Not authenticated: the route refuses; the key is not taken.
    let r = m
        .app
        .client
        .post(m.app.url("/api/projects/"))
        .bearer_auth("not-a-token")
        .header("Idempotency-Key", "later")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    // A cookie session without its CSRF header: refused, not kept.
    let r = m
        .app
        .client
        .post(m.app.url("/api/projects/"))
        .bearer_auth(&company.access_token)
        .header("Cookie", format!("csrf_token={}", company.csrf_token))
        .header("Idempotency-Key", "later")
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert_eq!(code(&json(r).await), "CSRF_FAILED");
    assert_eq!(kept(&m.app, company.id, "later").await, None);
    let r = keyed(
        &m.app,
        &company,
        Method::POST,
        "/api/projects/",
        Some(&body),
        "later",
    )
    .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    assert!(!replayed(&r));

    // A rate limit (the chat budget of one message a minute): the retry runs once the budget
    // is back.
    let project_id = json(r).await["id"].as_i64().unwrap();
    let chat = format!("/api/chat/{project_id}");
    let r = keyed(
        &m.app,
        &company,
        Method::POST,
        &chat,
        Some(&j!({"content": "first"})),
        "c-1",
    )
    .await;
    assert_eq!(r.status(), StatusCode::CREATED, "{}", json(r).await);
    let second = j!({"content": "second"});
    let r = keyed(&m.app, &company, Method::POST, &chat, Some(&second), "c-2").await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(kept(&m.app, company.id, "c-2").await, None);
    m.app.clock.advance(chrono::Duration::minutes(2));
    let r = keyed(&m.app, &company, Method::POST, &chat, Some(&second), "c-2").await;
    assert_eq!(r.status(), StatusCode::CREATED);
    assert!(!replayed(&r));
    // The chat post was stored by the room's group commit, which marked its key.
    assert_eq!(
        kept(&m.app, company.id, "c-2").await,
        Some((Some(201), true))
    );
    let r = keyed(&m.app, &company, Method::POST, &chat, Some(&second), "c-2").await;
    assert!(replayed(&r));
    assert_eq!(
        m.count(
            "SELECT COUNT(*) FROM chat_messages WHERE project_id = $1",
            project_id
        )
        .await,
        2
    );
    m.app.stop().await;
}

/// A server failure (the processor down when an expert opens their payout account) lets the
/// key go: the retry with the same key runs again, and the account is created once.
#[actix_web::test]
async fn a_retry_after_a_server_failure_runs_again() {
    let m = Market::open().await;
    let expert = m.expert("downex").await;
    let r = m
        .app
        .post_json(
            "/api/sandbox/failures",
            &j!({"operation": "create_account", "count": 1, "status": 500}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK, "{}", json(r).await);
    let path = "/api/processor-connect/account-link";
    let r = keyed(&m.app, &expert, Method::POST, path, Some(&j!({})), "link-1").await;
    assert!(r.status().is_server_error(), "{}", r.status());
    assert_eq!(kept(&m.app, expert.id, "link-1").await, None);
    let r = keyed(&m.app, &expert, Method::POST, path, Some(&j!({})), "link-1").await;
    assert_eq!(r.status(), StatusCode::OK, "{}", json(r).await);
    assert!(!replayed(&r));
    let accounts_created = || async {
        json(m.app.get("/api/sandbox/ledger").await).await["calls"]["create_account"]
            .as_i64()
            .unwrap_or_default()
    };
    let before = accounts_created().await;
    let r = keyed(&m.app, &expert, Method::POST, path, Some(&j!({})), "link-1").await;
    assert!(replayed(&r));
    assert_eq!(accounts_created().await, before, "the replay called nobody");
    assert!(
        m.text(
            "SELECT COALESCE(processor_connect_account_id, '') FROM profiles WHERE user_id = $1 AND profile_type = 'experto'",
            expert.id
        )
        .await
        .starts_with("acct_")
    );
    m.app.stop().await;
}

/// Keys and their answers live in the database: a retry served by a restarted (or another)
/// instance gets the first answer.
#[actix_web::test]
async fn a_retry_after_a_restart_gets_the_first_answer() {
    let m = Market::open().await;
    let company = m.company("restartco").await;
    let body = project("Before the restart");
    let r = keyed(
        &m.app,
        &company,
        Method::POST,
        "/api/projects/",
        Some(&body),
        "r-1",
    )
    .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let created = json(r).await;
    let database = m.app.database_url();
    let secret = m.app.state.settings.jwt_secret.clone().expect("JWT secret");
    let prefix = m.app.state.settings.cache_prefix.clone();
    let _data = m.app.stop_keeping_data().await;

    let again = spawn_app_with(&[
        ("DATABASE_URL", &database),
        ("JWT_SECRET", secret.expose()),
        ("CACHE_PREFIX", &prefix),
    ])
    .await;
    let r = keyed(
        &again,
        &company,
        Method::POST,
        "/api/projects/",
        Some(&body),
        "r-1",
    )
    .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    assert!(replayed(&r));
    assert_eq!(json(r).await, created);
    assert_eq!(projects_of(&again, &company).await, 1);
    again.stop().await;
}

/// What a crash leaves: a key whose run committed nothing is taken over by the retry, which
/// runs; one whose run committed and died before keeping its answer is never run again.
#[actix_web::test]
async fn after_a_crash_a_retry_runs_only_if_nothing_was_committed() {
    let m = Market::open().await;
    let company = m.company("crashco").await;
    let body = project("After a crash");
    let print = fingerprint(
        "POST",
        // As the server reads it: the trailing slash trimmed.
        "/api/projects",
        "",
        "application/json",
        body.to_string().as_bytes(),
    )
    .expect("no multipart boundary");
    let now = m.app.clock.now();
    let dead = |key: &'static str, committed: bool| {
        let db = m.app.db.clone();
        let print = print.clone();
        let user = company.id;
        async move {
            let mut conn = db.conn().await.unwrap();
            marketplace::on_exec!(conn.exec(), c => sqlx::query(
                "INSERT INTO idempotency_keys (user_id, idempotency_key, fingerprint, owner,
                     locked_until, work_committed, created_at, expires_at)
                 VALUES ($1, $2, $3, 'crashed', $4, $5, $6, $7)")
                .bind(user).bind(key).bind(&print)
                .bind(now + chrono::Duration::seconds(30)).bind(committed)
                .bind(now).bind(now + chrono::Duration::hours(24))
                .execute(c).await.map(|_| ()))
            .unwrap();
        }
    };
    dead("nothing-done", false).await;
    dead("work-done", true).await;

    // While the dead run's lease lasts, it may still be running.
    for key in ["nothing-done", "work-done"] {
        let r = keyed(
            &m.app,
            &company,
            Method::POST,
            "/api/projects/",
            Some(&body),
            key,
        )
        .await;
        assert_eq!(r.status(), StatusCode::CONFLICT);
        assert_eq!(code(&json(r).await), "IDEMPOTENCY_KEY_IN_USE");
    }
    m.app.clock.advance(chrono::Duration::seconds(61));
    let r = keyed(
        &m.app,
        &company,
        Method::POST,
        "/api/projects/",
        Some(&body),
        "nothing-done",
    )
    .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    assert!(!replayed(&r));
    let r = keyed(
        &m.app,
        &company,
        Method::POST,
        "/api/projects/",
        Some(&body),
        "work-done",
    )
    .await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    assert_eq!(code(&json(r).await), "IDEMPOTENCY_KEY_INTERRUPTED");
    assert_eq!(projects_of(&m.app, &company).await, 1);
    m.app.stop().await;
}

/// A run whose key was taken over commits nothing more: its next transaction finds the key
/// no longer its own. A transaction rolled back leaves the key unmarked.
#[actix_web::test]
async fn a_run_that_lost_its_key_cannot_commit() {
    use marketplace::store::idempotency::{self as keys, Claimed, NewKey, carry};
    let app = crate::helpers::spawn_app().await;
    let account = crate::helpers::register(&app, "fenced", &["empresa"]).await;
    let now = app.clock.now();
    let new = |owner: &'static str| NewKey {
        user_id: account.id,
        key: "fence",
        fingerprint: "f",
        owner,
        now,
        locked_until: now,
        expires_at: now + chrono::Duration::hours(1),
    };
    let Claimed::Fresh(slow) = keys::claim(&app.db, &new("slow")).await.unwrap() else {
        panic!("the key was free");
    };
    // A transaction begun and rolled back marks nothing.
    let tx = carry(Some(slow.clone()), app.db.begin()).await.unwrap();
    drop(tx);
    let Claimed::Found(found) = keys::claim(&app.db, &new("retry")).await.unwrap() else {
        panic!("the key is held");
    };
    assert!(!found.work_committed);
    let retry = keys::take_over(
        &app.db,
        &found,
        "retry",
        now,
        now + chrono::Duration::seconds(60),
    )
    .await
    .unwrap()
    .expect("taken over: the slow run committed nothing");
    let lost = carry(Some(slow.clone()), app.db.begin()).await;
    assert!(matches!(
        lost,
        Err(marketplace::store::StoreError::KeyTakenOver)
    ));
    let tx = carry(Some(retry.clone()), app.db.begin()).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(kept(&app, account.id, "fence").await, Some((None, true)));
    app.stop().await;
}

#[actix_web::test]
async fn expired_keys_are_swept_and_free_again() {
    // Keys kept an hour, and access tokens that outlast it.
    let m = Market::open_with(&[
        ("IDEMPOTENCY_KEY_HOURS", "1"),
        ("JWT_ACCESS_EXPIRE_MINUTES", "180"),
    ])
    .await;
    let company = m.company("sweepco").await;
    let r = keyed(
        &m.app,
        &company,
        Method::POST,
        "/api/projects/",
        Some(&project("Old")),
        "old",
    )
    .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    m.app.clock.advance(chrono::Duration::minutes(59));
    let r = keyed(
        &m.app,
        &company,
        Method::POST,
        "/api/projects/",
        Some(&project("Old")),
        "old",
    )
    .await;
    assert!(replayed(&r), "still kept");
    m.app.clock.advance(chrono::Duration::minutes(2));
    m.app
        .state
        .jobs
        .trigger(marketplace::workflows::idempotency::SWEEP_JOB)
        .await
        .unwrap();
    assert_eq!(kept(&m.app, company.id, "old").await, None);
    let r = keyed(
        &m.app,
        &company,
        Method::POST,
        "/api/projects/",
        Some(&project("New")),
        "old",
    )
    .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    assert!(!replayed(&r));
    m.app.stop().await;
}

/// The header is documented on every operation it applies to, with its refusals.
#[actix_web::test]
async fn the_document_describes_the_header_where_it_applies() {
    let app = crate::helpers::spawn_app().await;
    let doc = json(app.get("/openapi.json").await).await;
    let header_of = |path: &str, method: &str| {
        doc["paths"][path][method]["parameters"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|p| {
                p["name"] == "Idempotency-Key" && p["in"] == "header" && p["required"] == false
            })
    };
    assert!(header_of("/api/projects", "post"));
    assert!(header_of("/api/projects/{project_id}", "put"));
    assert!(header_of("/api/projects/{project_id}", "delete"));
    assert!(!header_of("/api/projects/{project_id}", "get"));
    assert!(!header_of("/api/auth/login", "post"));
    assert!(!header_of("/api/auth/logout", "post"));
    let post = &doc["paths"]["/api/projects"]["post"]["responses"];
    assert!(post["409"].is_object() && post["422"].is_object());
    // Every secured mutating operation outside the session routes takes it.
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in ["post", "put", "patch", "delete"] {
            let op = &item[method];
            let secured = op["security"].as_array().is_some_and(|s| !s.is_empty());
            if op.is_object() && secured && !path.starts_with("/api/auth/") {
                assert!(header_of(path, method), "{method} {path}");
            }
        }
    }
    app.stop().await;
}

/// A switchover as the service sees it (PostgreSQL only): the server drops every connection and
/// comes back read-only, then drops them again and comes back writable. A keyed write during
/// the read-only stretch is refused 503 with `Retry-After` (never 500), nothing of it applied and
/// no answer kept under its key; the same request retried after the switch is applied once.
#[actix_web::test]
async fn a_write_refused_during_a_switchover_is_applied_once_by_its_retry() {
    let Ok(server) = std::env::var("TEST_DATABASE_URL") else {
        return;
    };
    let m = Market::open().await;
    let company = m.company("switchco").await;
    let body = project("Across the switch");
    let database: String = {
        let mut conn = m.app.db.conn().await.unwrap();
        marketplace::on_exec!(conn.exec(), c =>
            sqlx::query_scalar("SELECT current_database()").fetch_one(c).await)
        .unwrap()
    };
    // The server's side of the switch: its setting for new sessions, then every session of the
    // database cut (the service's pool and its probe make new ones).
    let switch = |read_only: bool| {
        let (server, database) = (server.clone(), database.clone());
        async move {
            use sqlx::Connection as _;
            let mut admin = sqlx::PgConnection::connect(&server).await.unwrap();
            let setting = if read_only { "on" } else { "DEFAULT" };
            // The database's name is the harness's own (`test_…`), not input.
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "ALTER DATABASE \"{database}\" SET default_transaction_read_only = {setting}"
            )))
            .execute(&mut admin)
            .await
            .unwrap();
            sqlx::query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                 WHERE datname = $1 AND pid <> pg_backend_pid()",
            )
            .bind(&database)
            .execute(&mut admin)
            .await
            .unwrap();
        }
    };

    // The one request of the test, sent again and again with its key.
    let post = || {
        keyed(
            &m.app,
            &company,
            Method::POST,
            "/api/projects/",
            Some(&body),
            "switch-1",
        )
    };

    switch(true).await;
    let mut refused = 0;
    for _ in 0..5 {
        let r = post().await;
        assert_eq!(
            r.status(),
            StatusCode::SERVICE_UNAVAILABLE,
            "refused, not failed"
        );
        assert!(r.headers().contains_key("retry-after"));
        assert_eq!(json(r).await["code"], "SERVICE_UNAVAILABLE");
        refused += 1;
    }
    assert_eq!(projects_of(&m.app, &company).await, 0, "nothing applied");
    assert_eq!(
        kept(&m.app, company.id, "switch-1").await,
        None,
        "no answer kept"
    );

    switch(false).await;
    // The pool re-makes what the switch cut as it finds it: a connection idle for
    // `PING_AFTER_IDLE` is checked before it is handed out. Waited out here, so that the run
    // keeping its answer does not meet a connection cut under it (that answer would be lost,
    // and the retry refused as interrupted: a crash after the commit, another test's case).
    tokio::time::sleep(marketplace::store::PING_AFTER_IDLE * 2).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let first = loop {
        let r = post().await;
        if r.status() != StatusCode::SERVICE_UNAVAILABLE {
            break r;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "writable again within 5 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(
        first.status(),
        StatusCode::CREATED,
        "after {refused} refusals"
    );
    let id = json(first).await["id"].clone();
    let again = post().await;
    assert!(replayed(&again), "the kept answer: {}", again.status());
    assert_eq!(json(again).await["id"], id);
    assert_eq!(projects_of(&m.app, &company).await, 1, "applied once");
    m.app.stop().await;
}
