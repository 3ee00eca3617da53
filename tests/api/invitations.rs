//! `/api/admin/invitations` and `POST /api/auth/accept-admin-invitation`.

use crate::helpers::{
    PASSWORD, TestApp, admin, json, json_keys, login, register, request_as, spawn_app,
};
use chrono::{DateTime, Duration, Utc};
use futures_util::future::join_all;
use marketplace::domain::token::hash_token;
use marketplace::on_exec;
use marketplace::store::users;
use reqwest::Method;
use serde_json::{Value, json as j};

const INVITATIONS: &str = "/api/admin/invitations";

async fn invite(app: &TestApp, token: &str, body: Value) -> reqwest::Response {
    request_as(app, Method::POST, INVITATIONS, token, Some(&body)).await
}

/// Invites `email` (valid for `hours`, default when `None`); the record and the mailed token.
async fn invited(app: &TestApp, token: &str, email: &str, hours: Option<i64>) -> (Value, String) {
    let before = app.mails().iter().filter(|m| m.to.contains(email)).count();
    let mut body = j!({"email": email});
    if let Some(hours) = hours {
        body["expires_hours"] = j!(hours);
    }
    let response = invite(app, token, body).await;
    assert_eq!(response.status(), 201, "invitation of {email}");
    let record = json(response).await;
    let mails = app.mails_to(email, before + 1).await;
    let token = mails
        .last()
        .unwrap()
        .token()
        .expect("a token in the e-mail");
    (record, token)
}

async fn accept(app: &TestApp, token: &str, username: &str, password: &str) -> reqwest::Response {
    app.post_json(
        "/api/auth/accept-admin-invitation",
        &j!({"token": token, "username": username, "password": password}),
    )
    .await
}

async fn get_as(app: &TestApp, token: &str, path: &str) -> reqwest::Response {
    request_as(app, Method::GET, path, token, None).await
}

async fn assert_error(response: reqwest::Response, status: u16, code: &str) -> Value {
    assert_eq!(response.status(), status);
    let body = json(response).await;
    assert_eq!(body["code"], code, "{body}");
    body
}

async fn assert_invalid(response: reqwest::Response, field: &str) {
    let body = assert_error(response, 422, "VALIDATION_ERROR").await;
    assert_eq!(body["errors"][0]["field"], field, "{body}");
}

fn time(value: &Value) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(value.as_str().expect("a time"))
        .expect("RFC 3339")
        .with_timezone(&Utc)
}

/// The e-mails of a list answer, in order.
fn emails(page: &Value) -> Vec<String> {
    page["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| i["email"].as_str().unwrap().to_owned())
        .collect()
}

async fn users_with_email(app: &TestApp, email: &str) -> i64 {
    let mut conn = app.db.conn().await.unwrap();
    on_exec!(conn.exec(), c => sqlx::query_scalar("SELECT COUNT(*) FROM users WHERE email = $1")
        .bind(email)
        .fetch_one(c)
        .await)
    .unwrap()
}

#[actix_web::test]
async fn only_administrators_reach_invitations() {
    let app = spawn_app().await;
    let (_, admin_token) = admin(&app, "boss").await;
    let (record, _) = invited(&app, &admin_token, "someone@example.com", None).await;
    let one = format!("{INVITATIONS}/{}", record["id"]);
    register(&app, "acme", &["empresa"]).await;
    let company = login(&app, "acme", PASSWORD).await;
    let body = j!({"email": "other@example.com"});
    let routes = [
        (Method::POST, INVITATIONS.to_owned(), Some(&body)),
        (Method::GET, INVITATIONS.to_owned(), None),
        (Method::GET, format!("{INVITATIONS}?status=all"), None),
        (Method::GET, one.clone(), None),
        (Method::DELETE, one.clone(), None),
    ];
    for (method, path, body) in routes {
        let response = request_as(&app, method.clone(), &path, &company, body).await;
        assert_error(response, 403, "FORBIDDEN").await;
        let mut anonymous = app.client.request(method, app.url(&path));
        if let Some(body) = body {
            anonymous = anonymous.json(body);
        }
        let response = anonymous.send().await.unwrap();
        assert_error(response, 401, "NOT_AUTHENTICATED").await;
    }
    // Nothing was created or cancelled on the way.
    assert_eq!(get_as(&app, &admin_token, &one).await.status(), 200);
    let list = json(get_as(&app, &admin_token, INVITATIONS).await).await;
    assert_eq!(list["total"], 1);
    assert!(
        app.mails()
            .iter()
            .all(|m| !m.to.contains("other@example.com"))
    );
    app.stop().await;
}

#[actix_web::test]
async fn creating_returns_the_record_and_mails_a_token() {
    let app = spawn_app().await;
    let (admin_id, admin_token) = admin(&app, "boss").await;
    let before = app.clock.now();
    let response = invite(
        &app,
        &admin_token,
        j!({"email": " New.Admin@Example.com ", "message": "Join the moderation team", "expires_hours": 48}),
    )
    .await;
    assert_eq!(response.status(), 201);
    let body = json(response).await;
    assert!(body["id"].as_i64().unwrap() > 0);
    assert_eq!(body["email"], "new.admin@example.com");
    assert_eq!(body["invited_by"], admin_id);
    assert_eq!(body["inviter_username"], "boss");
    assert_eq!(body["message"], "Join the moderation team");
    assert_eq!(body["used"], false);
    assert!(body["used_at"].is_null());
    let created = time(&body["created_at"]);
    assert!(created >= before - Duration::seconds(1) && created <= app.clock.now());
    let expires = time(&body["expires_at"]);
    assert!(
        (expires - (created + Duration::hours(48)))
            .num_seconds()
            .abs()
            <= 1
    );
    let keys = json_keys(&body);
    assert!(!keys.iter().any(|k| k.contains("token")), "{keys:?}");

    let mails = app.mails_to("new.admin@example.com", 1).await;
    assert_eq!(mails.len(), 1);
    let token = mails[0].token().expect("a token in the e-mail");
    assert!(token.len() >= 32);
    let text = &mails[0].text;
    assert!(text.contains("boss"), "names the inviter: {text}");
    assert!(text.contains("Join the moderation team"), "{text}");
    assert!(text.contains("/accept-invitation?token="), "{text}");
    assert!(!body.to_string().contains(&token));

    // Without expires_hours the invitation lasts 168 hours.
    let (default, _) = invited(&app, &admin_token, "later@example.com", None).await;
    let span = time(&default["expires_at"]) - time(&default["created_at"]);
    assert!(
        (span - Duration::hours(168)).num_seconds().abs() <= 1,
        "{span}"
    );
    assert!(default["message"].is_null());
    app.stop().await;
}

#[actix_web::test]
async fn creating_validates_the_request() {
    let app = spawn_app().await;
    let (_, admin_token) = admin(&app, "boss").await;
    register(&app, "member", &["experto"]).await;

    for hours in [0, 721, -5] {
        let response = invite(
            &app,
            &admin_token,
            j!({"email": "x@example.com", "expires_hours": hours}),
        )
        .await;
        assert_invalid(response, "expires_hours").await;
    }
    for bad in ["not-an-email", "", "a@b", "two@@example.com"] {
        assert_invalid(
            invite(&app, &admin_token, j!({"email": bad})).await,
            "email",
        )
        .await;
    }
    let long = invite(
        &app,
        &admin_token,
        j!({"email": "x@example.com", "message": "m".repeat(2001)}),
    )
    .await;
    assert_invalid(long, "message").await;
    for existing in [
        "member@example.com",
        "MEMBER@example.com",
        "boss@example.com",
    ] {
        let response = invite(&app, &admin_token, j!({"email": existing})).await;
        assert_error(response, 409, "EMAIL_EXISTS").await;
    }
    let list = json(get_as(&app, &admin_token, INVITATIONS).await).await;
    assert_eq!(list["total"], 0, "nothing refused was stored");
    assert!(app.mails().iter().all(|m| !m.to.contains("x@example.com")));

    // The bounds themselves are accepted.
    invited(&app, &admin_token, "one@example.com", Some(1)).await;
    invited(&app, &admin_token, "max@example.com", Some(720)).await;
    app.stop().await;
}

#[actix_web::test]
async fn the_token_is_stored_only_as_its_hash() {
    let app = spawn_app().await;
    let (_, admin_token) = admin(&app, "boss").await;
    let (_, first) = invited(&app, &admin_token, "first@example.com", None).await;
    let (_, second) = invited(&app, &admin_token, "second@example.com", None).await;
    assert_ne!(first, second);

    let mut conn = app.db.conn().await.unwrap();
    let stored: Vec<(String, String)> = on_exec!(conn.exec(), c => sqlx::query_as(
        "SELECT email, token_hash FROM admin_invitations ORDER BY id"
    )
    .fetch_all(c)
    .await)
    .unwrap();
    drop(conn);
    assert_eq!(
        stored,
        vec![
            ("first@example.com".to_owned(), hash_token(&first)),
            ("second@example.com".to_owned(), hash_token(&second)),
        ]
    );
    for (_, hash) in &stored {
        assert_ne!(hash, &first);
        assert_ne!(hash, &second);
        assert_eq!(hash.len(), 64);
        assert!(hash.chars().all(|c| c.is_ascii_hexdigit()));
    }
    // The hash itself is not a token.
    let response = accept(&app, &stored[0].1, "hash_user", PASSWORD).await;
    assert_error(response, 400, "INVALID_INVITATION").await;
    app.stop().await;
}

#[actix_web::test]
async fn listing_filters_paginates_and_searches() {
    let app = spawn_app().await;
    let (_, admin_token) = admin(&app, "boss").await;
    let (pending, _) = invited(&app, &admin_token, "pending_x@example.com", None).await;
    let (used, used_token) = invited(&app, &admin_token, "usedx@example.com", None).await;
    let (expired, _) = invited(&app, &admin_token, "expiredx@example.com", Some(1)).await;
    assert_eq!(
        accept(&app, &used_token, "new_admin", PASSWORD)
            .await
            .status(),
        201
    );
    app.clock.advance(Duration::hours(2));
    // The access token expired with the clock; sign in again.
    let token = login(&app, "boss", PASSWORD).await;
    let list = |query: &str| {
        let path = format!("{INVITATIONS}{query}");
        let token = token.clone();
        let app = &app;
        async move {
            let response = get_as(app, &token, &path).await;
            assert_eq!(response.status(), 200, "{path}");
            json(response).await
        }
    };

    let all = list("").await;
    assert_eq!(
        (&all["total"], &all["page"], &all["size"], &all["pages"]),
        (&j!(3), &j!(1), &j!(20), &j!(1))
    );
    assert_eq!(
        emails(&all),
        [
            "expiredx@example.com",
            "usedx@example.com",
            "pending_x@example.com"
        ],
        "newest first"
    );
    assert_eq!(list("?status=all").await["total"], 3);
    let item = &all["items"][1];
    assert_eq!(item["id"], used["id"]);
    assert_eq!(item["used"], true);
    assert!(!item["used_at"].is_null());
    assert!(!json_keys(&all).iter().any(|k| k.contains("token")));

    let pages = list("?size=2").await;
    assert_eq!((&pages["total"], &pages["pages"]), (&j!(3), &j!(2)));
    assert_eq!(pages["items"].as_array().unwrap().len(), 2);
    let second = list("?size=2&page=2").await;
    assert_eq!(emails(&second), ["pending_x@example.com"]);
    assert_eq!(second["page"], 2);
    assert_eq!(list("?page=5").await["items"], j!([]));

    let by_status = [
        ("pending", &pending),
        ("used", &used),
        ("expired", &expired),
    ];
    for (status, record) in by_status {
        let page = list(&format!("?status={status}")).await;
        assert_eq!(page["total"], 1, "{status}: {page}");
        assert_eq!(page["items"][0]["id"], record["id"], "{status}");
    }

    let bad = [
        ("?size=101", "size"),
        ("?size=0", "size"),
        ("?page=0", "page"),
        ("?status=bogus", "status"),
    ];
    for (query, field) in bad {
        let response = get_as(&app, &token, &format!("{INVITATIONS}{query}")).await;
        assert_invalid(response, field).await;
    }

    let search = [
        ("?search=usedx", vec!["usedx@example.com"]),
        ("?search=EXPIRED", vec!["expiredx@example.com"]),
        (
            "?search=dx%40",
            vec!["expiredx@example.com", "usedx@example.com"],
        ),
        // `_` and `%` are literal characters, not wildcards.
        ("?search=_", vec!["pending_x@example.com"]),
        ("?search=g_x", vec!["pending_x@example.com"]),
        ("?search=%25", vec![]),
        ("?search=d%25x", vec![]),
        ("?search=e_x", vec![]),
        ("?search=nobody", vec![]),
        ("?search=%5C", vec![]),
    ];
    for (query, expected) in search {
        let page = list(query).await;
        assert_eq!(emails(&page), expected, "{query}");
        assert_eq!(page["total"], expected.len(), "{query}");
    }
    let combined = list("?status=pending&search=x%40").await;
    assert_eq!(emails(&combined), ["pending_x@example.com"]);
    app.stop().await;
}

#[actix_web::test]
async fn reading_and_cancelling_one_invitation() {
    let app = spawn_app().await;
    let (_, admin_token) = admin(&app, "boss").await;
    let (record, token) = invited(&app, &admin_token, "guest@example.com", None).await;
    let path = format!("{INVITATIONS}/{}", record["id"]);

    let response = get_as(&app, &admin_token, &path).await;
    assert_eq!(response.status(), 200);
    assert_eq!(json(response).await, record);
    let unknown = get_as(&app, &admin_token, &format!("{INVITATIONS}/987654")).await;
    assert_error(unknown, 404, "NOT_FOUND").await;

    let cancelled = request_as(&app, Method::DELETE, &path, &admin_token, None).await;
    assert_eq!(cancelled.status(), 200);
    assert!(json(cancelled).await["message"].is_string());
    assert_error(get_as(&app, &admin_token, &path).await, 404, "NOT_FOUND").await;
    let again = request_as(&app, Method::DELETE, &path, &admin_token, None).await;
    assert_error(again, 404, "NOT_FOUND").await;

    let response = accept(&app, &token, "guest", PASSWORD).await;
    assert_error(response, 400, "INVALID_INVITATION").await;
    assert_eq!(users_with_email(&app, "guest@example.com").await, 0);
    app.stop().await;
}

#[actix_web::test]
async fn accepting_creates_a_verified_administrator_once() {
    let app = spawn_app().await;
    let (_, admin_token) = admin(&app, "boss").await;
    register(&app, "taken_name", &["empresa"]).await;
    let (record, token) = invited(&app, &admin_token, "newadmin@example.com", None).await;

    // Refusals that leave the invitation usable.
    for bad in ["ab", "bad-name", "white space", &"u".repeat(51)] {
        assert_invalid(accept(&app, &token, bad, PASSWORD).await, "username").await;
    }
    assert_invalid(
        accept(&app, &token, "fresh_admin", "Abc123!").await,
        "password",
    )
    .await;
    assert_invalid(accept(&app, "", "fresh_admin", PASSWORD).await, "token").await;
    let unknown = accept(&app, "no-such-token-0123456789", "fresh_admin", PASSWORD).await;
    assert_error(unknown, 400, "INVALID_INVITATION").await;
    for taken in ["taken_name", "boss"] {
        let response = accept(&app, &token, taken, PASSWORD).await;
        assert_error(response, 409, "USERNAME_EXISTS").await;
    }
    assert_eq!(users_with_email(&app, "newadmin@example.com").await, 0);

    let response = accept(&app, &token, "fresh_admin", PASSWORD).await;
    assert_eq!(response.status(), 201);
    let body = json(response).await;
    let user = &body["user"];
    assert_eq!(user["email"], "newadmin@example.com");
    assert_eq!(user["username"], "fresh_admin");
    assert_eq!(user["roles"], j!(["admin"]));
    assert_eq!(user["active_role"], "admin");
    assert_eq!(user["email_verified"], true);
    assert_eq!(user["is_active"], true);
    let text = body.to_string().to_lowercase();
    assert!(!text.contains("password") && !text.contains(&token.to_lowercase()));

    let mut conn = app.db.conn().await.unwrap();
    let stored = users::find_by_email(conn.exec(), "newadmin@example.com")
        .await
        .unwrap()
        .expect("stored");
    drop(conn);
    assert_eq!(stored.id, user["id"].as_i64().unwrap());
    assert!(stored.email_verified && stored.is_active);

    // The new administrator signs in and may use the admin routes.
    let new_token = login(&app, "fresh_admin", PASSWORD).await;
    assert_eq!(get_as(&app, &new_token, INVITATIONS).await.status(), 200);

    let shown = json(
        get_as(
            &app,
            &admin_token,
            &format!("{INVITATIONS}/{}", record["id"]),
        )
        .await,
    )
    .await;
    assert_eq!(shown["used"], true);
    assert!(time(&shown["used_at"]) >= time(&shown["created_at"]));

    let reused = accept(&app, &token, "second_admin", PASSWORD).await;
    assert_error(reused, 400, "INVITATION_USED").await;
    assert_eq!(users_with_email(&app, "newadmin@example.com").await, 1);
    app.stop().await;
}

#[actix_web::test]
async fn expired_or_overtaken_invitations_are_refused() {
    let app = spawn_app().await;
    let (_, admin_token) = admin(&app, "boss").await;
    let (_, short) = invited(&app, &admin_token, "late@example.com", Some(1)).await;
    let (_, overtaken) = invited(&app, &admin_token, "overtaken@example.com", None).await;

    // Someone registered the invited address in the meantime.
    let response = app
        .post_json(
            "/api/auth/register",
            &j!({"email": "overtaken@example.com", "username": "walker", "password": PASSWORD, "roles": ["empresa"]}),
        )
        .await;
    assert_eq!(response.status(), 201);
    let response = accept(&app, &overtaken, "overtaker", PASSWORD).await;
    assert_error(response, 409, "EMAIL_EXISTS").await;

    app.clock.advance(Duration::minutes(61));
    let response = accept(&app, &short, "late_admin", PASSWORD).await;
    assert_error(response, 400, "INVITATION_EXPIRED").await;
    assert_eq!(users_with_email(&app, "late@example.com").await, 0);
    app.stop().await;
}

#[actix_web::test]
async fn concurrent_acceptances_create_one_administrator() {
    let app = spawn_app().await;
    let (_, admin_token) = admin(&app, "boss").await;
    let (record, token) = invited(&app, &admin_token, "racer@example.com", None).await;

    let attempts = (0..8).map(|i| {
        let token = token.clone();
        let app = &app;
        async move {
            let response = accept(app, &token, &format!("racer_{i}"), PASSWORD).await;
            let status = response.status().as_u16();
            (status, json(response).await)
        }
    });
    let results = join_all(attempts).await;
    let created: Vec<_> = results.iter().filter(|(s, _)| *s == 201).collect();
    assert_eq!(created.len(), 1, "{results:?}");
    for (status, body) in &results {
        assert!(matches!(status, 201 | 400 | 409), "{status}: {body}");
    }

    assert_eq!(users_with_email(&app, "racer@example.com").await, 1);
    let winner = created[0].1["user"]["username"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut conn = app.db.conn().await.unwrap();
    let stored = users::find_by_email(conn.exec(), "racer@example.com")
        .await
        .unwrap()
        .unwrap();
    drop(conn);
    assert_eq!(stored.username, winner);
    assert_eq!(stored.roles, vec![marketplace::domain::user::Role::Admin]);
    let racers: i64 = {
        let mut conn = app.db.conn().await.unwrap();
        on_exec!(conn.exec(), c => sqlx::query_scalar(
            "SELECT COUNT(*) FROM users WHERE username LIKE 'racer%'"
        )
        .fetch_one(c)
        .await)
        .unwrap()
    };
    assert_eq!(racers, 1, "no stray accounts");
    let shown = json(
        get_as(
            &app,
            &admin_token,
            &format!("{INVITATIONS}/{}", record["id"]),
        )
        .await,
    )
    .await;
    assert_eq!(shown["used"], true);
    app.stop().await;
}
