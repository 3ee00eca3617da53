//! Hostile input the issue lists (19), each sent the way an attacker would and answered in
//! the error shape: never a 5xx, never a dropped connection, never a file outside the uploads.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::json as j;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::helpers::{json, spawn_app, spawn_app_with};
use crate::market::Market;

fn assert_refused(status: StatusCode, body: &serde_json::Value, what: &str) {
    assert!(status.is_client_error(), "{what}: {status} {body}");
    assert!(
        body["code"].is_string() && body["detail"].is_string(),
        "{what}: {body}"
    );
}

#[actix_web::test]
async fn money_fields_refuse_non_numbers_non_finite_and_out_of_range_values() {
    let m = Market::open().await;
    let company = m.company("acme").await;
    // JSON has no NaN or Infinity: sent as text they are refused as the wrong type, written
    // bare they are not JSON; exponents past any amount are refused, not overflowed.
    let raw_bodies = [
        r#"{"title": "T", "budget": NaN}"#,
        r#"{"title": "T", "budget": Infinity}"#,
        r#"{"title": "T", "budget": -Infinity}"#,
        r#"{"title": "T", "budget": 1e400}"#,
        r#"{"title": "T", "budget": -1e400}"#,
        r#"{"title": "T", "budget": 1e-400}"#,
        r#"{"title": "T", "budget": "NaN"}"#,
        r#"{"title": "T", "budget": "1e3"}"#,
        r#"{"title": "T", "budget": -5}"#,
        r#"{"title": "T", "budget": 100000000}"#,
        r#"{"title": "T", "budget": 12.345}"#,
        r#"{"title": "T", "budget": 123456789012345678901234567890}"#,
    ];
    for body in raw_bodies {
        let r = m
            .app
            .client
            .post(m.app.url("/api/projects/"))
            .bearer_auth(&company.access_token)
            .header("Cookie", format!("csrf_token={}", company.csrf_token))
            .header("X-CSRF-Token", &company.csrf_token)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = r.status();
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        assert_refused(status, &json(r).await, body);
    }
    assert_eq!(
        m.count(
            "SELECT COUNT(*) FROM projects WHERE company_id = $1",
            company.id
        )
        .await,
        0
    );
    // The same in a query.
    for value in ["NaN", "inf", "-1e400", "1e400", "0x10", "1,5"] {
        let r = m
            .app
            .get(&format!("/api/projects/public?min_budget={value}"))
            .await;
        let status = r.status();
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{value}");
        assert_refused(status, &json(r).await, value);
    }
}

#[actix_web::test]
async fn file_routes_never_leave_the_uploads_directory() {
    let app = spawn_app().await;
    // A file beside the uploads directory that a traversal would reach.
    let secret = app.state.settings.data_dir.join("secret.txt");
    std::fs::write(&secret, "TOP-SECRET").unwrap();
    let account = crate::helpers::register(&app, "walker", &["experto"]).await;
    let traversals = [
        "..%2F..%2Fsecret.txt",
        "..%2f..%2f..%2fsecret.txt",
        "%2e%2e%2f%2e%2e%2fsecret.txt",
        "..%5C..%5Csecret.txt",
        "....%2F%2F....%2F%2Fsecret.txt",
        "%252e%252e%252fsecret.txt",
        "..",
        ".",
        "secret.txt%00.jpg",
    ];
    let templates = [
        "/api/uploads/profiles/{id}/{x}",
        "/api/uploads/profiles/{x}/picture.jpg",
        "/api/profiles/documents/{x}",
        "/api/chat/{x}/files/1",
        "/api/chat/1/files/{x}",
    ];
    let mut tried = 0;
    for template in templates {
        for t in traversals {
            let path = template
                .replace("{id}", &account.id.to_string())
                .replace("{x}", t);
            let r = app
                .client
                .get(app.url(&path))
                .bearer_auth(&account.access_token)
                .send()
                .await
                .unwrap();
            let status = r.status();
            let text = r.text().await.unwrap();
            assert!(!text.contains("TOP-SECRET"), "{path} served the file");
            // 405 where the remains name a route under another method (`documents/..` is the
            // upload address), never a success.
            assert!(
                matches!(status.as_u16(), 404 | 405 | 422),
                "{path}: {status} {text}"
            );
            tried += 1;
        }
    }
    // Raw dot segments are resolved by the router before any route sees them.
    let mut stream = tokio::net::TcpStream::connect(app.address.trim_start_matches("http://"))
        .await
        .unwrap();
    stream
        .write_all(b"GET /api/uploads/profiles/1/../../../secret.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    assert!(!answer.contains("TOP-SECRET"));
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
    assert_eq!(tried, templates.len() * traversals.len());
    app.stop().await;
}

#[actix_web::test]
async fn search_strings_are_data_whatever_they_contain_and_bounded_in_length() {
    let m = Market::open().await;
    m.expert("o_reilly").await;
    let injections = [
        "' OR 1=1 --",
        "'; DROP TABLE users; --",
        "\" OR \"\"=\"",
        "1) UNION SELECT password_hash FROM users --",
        "%' AND 1=CAST((SELECT password_hash FROM users LIMIT 1) AS INT) --",
        "\\",
        "[a-z]*",
        "😀' OR '😀'='😀",
    ];
    for q in injections {
        for path in ["/api/profiles/experts?q=", "/api/projects/public?search="] {
            let url = format!("{path}{}", urlencode(q));
            let r = m.app.get(&url).await;
            let status = r.status();
            let body = json(r).await;
            assert_eq!(status, StatusCode::OK, "{url}: {body}");
            assert_eq!(body["total"], 0, "{url} matched as SQL: {body}");
        }
        let r = m
            .as_admin(
                Method::GET,
                &format!("/api/admin/users?search={}", urlencode(q)),
                None,
            )
            .await;
        assert_eq!(r.status(), StatusCode::OK, "{q}");
    }
    // The apostrophe is an ordinary character.
    let r = m.app.get("/api/profiles/experts?q=o_reilly").await;
    assert_eq!(json(r).await["total"], 1);
    // Over-long terms are refused when the query is read (a 60,000-character pattern once
    // reached SQLite, which refuses LIKE patterns past 50,000 bytes: a 500).
    for length in [201, 10_000, 60_000] {
        let long = "a".repeat(length);
        for path in ["/api/profiles/experts?q=", "/api/projects/public?search="] {
            let r = m.app.get(&format!("{path}{long}")).await;
            let status = r.status();
            assert_eq!(
                status,
                StatusCode::UNPROCESSABLE_ENTITY,
                "{path} with {length} characters"
            );
            assert_refused(status, &json(r).await, path);
        }
        let r = m
            .as_admin(
                Method::GET,
                &format!("/api/admin/users?search={long}"),
                None,
            )
            .await;
        assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    }
    let r = m
        .app
        .get(&format!("/api/profiles/experts?q={}", "a".repeat(200)))
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    // Still all there.
    assert!(
        m.count("SELECT COUNT(*) FROM users WHERE id >= $1", 0)
            .await
            >= 2
    );
}

fn urlencode(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

#[actix_web::test]
async fn header_and_query_injection_cannot_split_answers() {
    let app = spawn_app().await;
    // A request id carrying CRLF is replaced, not echoed.
    let mut stream = tokio::net::TcpStream::connect(app.address.trim_start_matches("http://"))
        .await
        .unwrap();
    stream
        .write_all(
            b"GET /health HTTP/1.1\r\nHost: x\r\nX-Request-ID: abc%0d%0aSet-Cookie: evil=1\r\nConnection: close\r\n\r\n",
        )
        .await
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        !answer.to_lowercase().contains("set-cookie: evil"),
        "{answer}"
    );
    assert!(!answer.contains("abc%0d%0a"), "{answer}");
    // A raw CR LF inside a header value is a malformed request.
    let mut stream = tokio::net::TcpStream::connect(app.address.trim_start_matches("http://"))
        .await
        .unwrap();
    stream
        .write_all(
            b"GET /health HTTP/1.1\r\nHost: x\r\nX-Request-ID: a\rSet-Cookie: evil=1\r\n\r\n",
        )
        .await
        .unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        !answer.to_lowercase().contains("set-cookie: evil"),
        "{answer}"
    );
    // Percent-encoded CR LF in a query reaches no header: redirects and downloads build
    // their headers from ids, and the token links in e-mails are the service's own.
    let r = app
        .get("/api/auth/verify?token=x%0d%0aSet-Cookie:%20evil=1")
        .await;
    assert!(r.status().is_client_error(), "{}", r.status());
    assert!(
        r.headers()
            .get("set-cookie")
            .is_none_or(|v| !v.to_str().unwrap().contains("evil"))
    );
    app.stop().await;
}

#[actix_web::test]
async fn slow_clients_are_cut_off_and_idle_connections_do_not_starve_others() {
    let app = spawn_app().await;
    let address = app.address.trim_start_matches("http://").to_owned();
    // Slowloris: headers that never finish are cut off by the server (actix's request
    // timeout, 5 s), answered 408 or closed.
    let mut slow = tokio::net::TcpStream::connect(&address).await.unwrap();
    slow.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let ended = tokio::time::timeout(Duration::from_secs(15), slow.read_to_end(&mut answer)).await;
    assert!(ended.is_ok(), "the server kept a half-sent request open");
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
        "{answer}"
    );

    // A body that never arrives: the handler's read gives up and the connection ends.
    let mut stalled = tokio::net::TcpStream::connect(&address).await.unwrap();
    stalled
        .write_all(b"POST /api/auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"us")
        .await
        .unwrap();

    // Many idle connections (2,000 here; the bench holds 10,000) and the service still answers.
    let mut idle = Vec::new();
    for _ in 0..2_000 {
        match tokio::net::TcpStream::connect(&address).await {
            Ok(s) => idle.push(s),
            Err(e) => panic!("connection {} refused: {e}", idle.len()),
        }
    }
    let started = std::time::Instant::now();
    let r = app.get("/health").await;
    assert_eq!(r.status(), StatusCode::OK);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let r = app
        .post_json(
            "/api/auth/login",
            &j!({"username": "nobody", "password": "x"}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    drop(idle);
    drop(stalled);
    app.stop().await;
}

#[actix_web::test]
async fn a_flood_of_signature_candidates_is_refused_cheaply() {
    let app = spawn_app_with(&[]).await;
    // 2,000 candidates keep the header (12 KB) under the server's header limit, so the route
    // itself must refuse them; a bigger header is cut off by the HTTP parser before any route.
    let flood = format!("t=1{}", ",v1=00".repeat(2_000));
    let started = std::time::Instant::now();
    let r = app
        .client
        .post(app.url("/api/payments/webhooks/processor"))
        .header("processor-signature", flood)
        .header("content-type", "application/json")
        .body(vec![b' '; 200 * 1024])
        .send()
        .await
        .unwrap();
    let status = r.status();
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "the candidates are refused unread"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    app.stop().await;
}
