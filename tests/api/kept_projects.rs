//! `GET /api/projects/{id}` from the rows each instance keeps (issue #32): a kept row is
//! served until a write changes it, never after the answer of that write, on this instance
//! or another, and shows nobody what the database would not.

use crate::helpers::{Account, TestApp, json, spawn_app_with};
use crate::market::{Market, send};
use marketplace::store::kept_projects::MAX_AGE;
use marketplace::{on_exec, store::Exec};
use reqwest::{Method, StatusCode};
use serde_json::json as j;

/// Reads served from a kept row, and reads that went to the database, so far.
fn reads(app: &TestApp) -> (u64, u64) {
    app.state
        .kept_projects
        .as_ref()
        .expect("rows kept on SQLite and with Redis")
        .counts()
}

async fn title(m: &Market, account: &Account, id: i64) -> String {
    let r = m
        .send(account, Method::GET, &format!("/api/projects/{id}"), None)
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    json(r).await["title"].as_str().unwrap().to_string()
}

/// Writes a project's title by hand, in a transaction of the service or outside any.
async fn set_title(ex: Exec<'_>, id: i64, title: &str) {
    on_exec!(ex, c => sqlx::query("UPDATE projects SET title = $2 WHERE id = $1")
        .bind(id)
        .bind(title.to_string())
        .execute(c)
        .await
        .map(drop))
    .unwrap();
}

/// A company and its draft project, titled "Data platform".
async fn acme_with_draft(m: &Market) -> (Account, i64) {
    let acme = m.company("acme").await;
    let draft = j!({"title": "Data platform", "description": "Build it", "budget": 500.0,
        "deadline": "2099-01-01T00:00:00", "skills_required": ["Rust"],
        "project_type": "curated", "status": "draft"});
    let id = m.create_project(&acme, draft).await["id"].as_i64().unwrap();
    (acme, id)
}

fn keeps(app: &TestApp) -> bool {
    app.state.kept_projects.is_some()
}

#[actix_web::test]
async fn a_kept_row_gives_way_to_every_committed_write_at_once() {
    let m = Market::open().await;
    if !keeps(&m.app) {
        return; // PostgreSQL without Redis reads every time.
    }
    let (acme, id) = acme_with_draft(&m).await;

    assert_eq!(title(&m, &acme, id).await, "Data platform");
    let before = reads(&m.app);
    assert_eq!(title(&m, &acme, id).await, "Data platform");
    assert_eq!(reads(&m.app).0, before.0 + 1, "the second read is kept");

    // Through the project's workflow.
    let r = m
        .send(
            &acme,
            Method::PUT,
            &format!("/api/projects/{id}"),
            Some(j!({"title": "Renamed platform"})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(title(&m, &acme, id).await, "Renamed platform");

    // Any transaction writing the row, whatever wrote it.
    let mut tx = m.app.db.begin().await.unwrap();
    set_title(tx.exec(), id, "Written in SQL").await;
    tx.commit().await.unwrap();
    assert_eq!(title(&m, &acme, id).await, "Written in SQL");

    // A rolled-back write changes nothing and keeps the row kept.
    assert_eq!(title(&m, &acme, id).await, "Written in SQL");
    let before = reads(&m.app);
    let mut tx = m.app.db.begin().await.unwrap();
    set_title(tx.exec(), id, "Never committed").await;
    tx.rollback().await.unwrap();
    assert_eq!(title(&m, &acme, id).await, "Written in SQL");
    assert_eq!(reads(&m.app), (before.0 + 1, before.1));

    // A deletion: the next read answers 404.
    let r = m
        .send(&acme, Method::DELETE, &format!("/api/projects/{id}"), None)
        .await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    let r = m
        .send(&acme, Method::GET, &format!("/api/projects/{id}"), None)
        .await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    m.app.stop().await;
}

/// A write no transaction of the service told of (an operator's statement outside any
/// transaction here) is served at most `MAX_AGE` after the row was read.
#[actix_web::test]
async fn a_write_from_outside_the_service_shows_within_the_age_limit() {
    let m = Market::open().await;
    if !keeps(&m.app) {
        return;
    }
    let (acme, id) = acme_with_draft(&m).await;
    assert_eq!(title(&m, &acme, id).await, "Data platform");

    let mut conn = m.app.db.conn().await.unwrap();
    set_title(conn.exec(), id, "Changed by hand").await;
    drop(conn);
    m.app.clock.advance(MAX_AGE);
    assert_eq!(title(&m, &acme, id).await, "Changed by hand");
    m.app.stop().await;
}

/// Visibility is decided per caller on every read: a row kept for an administrator shows a
/// private project to nobody outside it, and an applicant (a row of another table) still
/// sees it.
#[actix_web::test]
async fn a_kept_row_shows_nobody_what_the_database_would_not() {
    let m = Market::open().await;
    if !keeps(&m.app) {
        return;
    }
    let acme = m.company("acme").await;
    let rival = m.company("rival").await;
    let ana = m.expert("ana").await;
    let bob = m.expert("bob").await;
    let id = m.published_project(&acme, 600.0, &[&ana, &bob]).await;
    for expert in [&ana, &bob] {
        let r = m.apply(expert, id, [100.0, 200.0, 300.0]).await;
        assert_eq!(r.status(), StatusCode::CREATED);
    }
    let r = m
        .send(
            &acme,
            Method::POST,
            &format!("/api/projects/{id}/select/{}", ana.id),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK, "{}", json(r).await);
    // Bob stands to the project by rows of other tables only: his formal invitation and
    // his application, not the project's legacy list of invitees.
    let mut tx = m.app.db.begin().await.unwrap();
    on_exec!(tx.exec(), c => sqlx::query("UPDATE projects SET invited_experts = $2 WHERE id = $1")
        .bind(id)
        .bind(sqlx::types::Json(j!([])))
        .execute(c)
        .await
        .map(drop))
    .unwrap();
    tx.commit().await.unwrap();

    let path = format!("/api/projects/{id}");
    for _ in 0..2 {
        let r = m.as_admin(Method::GET, &path, None).await;
        assert_eq!(r.status(), StatusCode::OK);
    }
    let r = m.send(&rival, Method::GET, &path, None).await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND, "not the rival's project");
    let r = m.send(&bob, Method::GET, &path, None).await;
    assert_eq!(r.status(), StatusCode::OK, "bob applied");
    assert_eq!(json(r).await["id"], id);
    m.app.stop().await;
}

/// With Redis, a write on one instance holds on another from its very next request.
#[actix_web::test]
async fn another_instance_serves_no_row_a_write_changed() {
    let m = Market::open().await;
    if m.app.state.cache.backend() != "redis" {
        return; // The tokens are shared through Redis.
    }
    let secret = m
        .app
        .state
        .settings
        .jwt_secret
        .as_ref()
        .expect("JWT secret");
    let other = spawn_app_with(&[
        ("DATABASE_URL", &m.app.database_url()),
        ("JWT_SECRET", secret.expose()),
        ("CACHE_PREFIX", &m.app.state.settings.cache_prefix),
    ])
    .await;
    let (acme, id) = acme_with_draft(&m).await;
    let path = format!("/api/projects/{id}");
    let read_there = || async {
        let r = send(&other, Method::GET, &path, &acme, None).await;
        (r.status(), json(r).await)
    };

    for round in 0..5 {
        for _ in 0..2 {
            read_there().await;
        }
        let renamed = format!("Round {round}");
        let r = m
            .send(&acme, Method::PUT, &path, Some(j!({"title": renamed})))
            .await;
        assert_eq!(r.status(), StatusCode::OK);
        let (status, body) = read_there().await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body["title"], renamed.as_str(), "round {round}");
    }
    assert!(reads(&other).0 >= 5, "the other instance kept its rows");

    let r = m.send(&acme, Method::DELETE, &path, None).await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert_eq!(read_there().await.0, StatusCode::NOT_FOUND);
    other.stop().await;
    m.app.stop().await;
}
