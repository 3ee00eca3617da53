//! The edges of the service (issue 19): what reaches a handler, from where, in which shape.
//! Forbidden characters, body limits, unknown methods, forwarding headers, cross-origin calls
//! and forged tokens are each refused in the error shape, before anything is stored.

use reqwest::{Method, StatusCode};
use serde_json::json as j;

use crate::helpers::{
    Account, ChildGuard, free_port, json, register, service_command, spawn_app, spawn_app_with,
};

/// Sends `chunks` chunks of `size` spaces as a chunked JSON body and returns the head of the
/// answer, read while the upload is still going on.
async fn chunked_upload(
    app: &crate::helpers::TestApp,
    path: &str,
    chunks: usize,
    size: usize,
) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let address = app.address.trim_start_matches("http://").to_owned();
    let stream = tokio::net::TcpStream::connect(&address).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n\
         Transfer-Encoding: chunked\r\n\r\n"
    );
    let sender = tokio::spawn(async move {
        writer.write_all(head.as_bytes()).await?;
        let chunk = format!("{size:x}\r\n{}\r\n", " ".repeat(size));
        for _ in 0..chunks {
            writer.write_all(chunk.as_bytes()).await?;
        }
        writer.write_all(b"0\r\n\r\n").await
    });
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::time::timeout(std::time::Duration::from_secs(10), reader.read(&mut buf))
            .await
            .expect("an answer in time")
            .unwrap_or(0);
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&buf[..n]);
    }
    sender.abort();
    String::from_utf8_lossy(&answer).into_owned()
}

fn assert_error_shape(body: &serde_json::Value, code: &str) {
    assert_eq!(body["code"], code, "{body}");
    assert!(body["detail"].is_string(), "{body}");
}

#[actix_web::test]
async fn control_and_bidirectional_characters_are_refused_everywhere_before_storage() {
    let m = crate::market::Market::open().await;
    let app = &m.app;
    let company = m.company("acme").await;
    let post = |body: &'static str| {
        app.client
            .post(app.url("/api/projects/"))
            .bearer_auth(&company.access_token)
            .header("Cookie", format!("csrf_token={}", company.csrf_token))
            .header("X-CSRF-Token", &company.csrf_token)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let refused_bodies: [&'static str; 5] = [
        r#"{"title": "Audit\u0000", "budget": 100}"#,
        r#"{"title": "Invoice \u202Egnp.exe", "budget": 100}"#,
        r#"{"title": "Bell", "description": "ring\u0007", "budget": 100}"#,
        r#"{"title": "Back\bspace", "budget": 100}"#,
        "{\"title\": \"raw\u{2066}isolate\", \"budget\": 100}",
    ];
    for body in refused_bodies {
        let r = post(body).await.unwrap();
        assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        let answer = json(r).await;
        assert_error_shape(&answer, "VALIDATION_ERROR");
        assert_eq!(answer["errors"][0]["field"], "body");
    }
    assert_eq!(
        m.count(
            "SELECT COUNT(*) FROM projects WHERE company_id = $1",
            company.id
        )
        .await,
        0,
        "nothing was stored"
    );
    // Line breaks, tabs, accents, right-to-left script and an escaped backslash are text.
    let r = post(
        r#"{"title": "Zoë \\u0000 עברית", "description": "line\r\nbreak\ttab", "budget": 100}"#,
    )
    .await
    .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let project = json(r).await;
    assert_eq!(project["title"], "Zoë \\u0000 עברית");
    assert_eq!(project["description"], "line\r\nbreak\ttab");

    // The address is checked too, percent-decoded: a query is invalid, a path names nothing.
    for path in [
        "/api/projects/public?search=a%00b",
        "/api/profiles/experts?q=%E2%80%AE",
    ] {
        let r = app.get(path).await;
        assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY, "{path}");
        assert_error_shape(&json(r).await, "VALIDATION_ERROR");
    }
    for path in ["/api/projects/%00", "/api/profiles/experts/slug/a%C2%85b"] {
        let r = app.get(path).await;
        assert_eq!(r.status(), StatusCode::NOT_FOUND, "{path}");
        assert_error_shape(&json(r).await, "NOT_FOUND");
    }
    let r = app.get("/api/projects/public?search=caf%C3%A9").await;
    assert_eq!(r.status(), StatusCode::OK);
}

#[actix_web::test]
async fn bodies_over_the_limit_are_refused_without_being_read() {
    let app = spawn_app().await;
    // Declared too large: refused from the header.
    let big = "x".repeat(1024 * 1024 + 10);
    let r = app
        .client
        .post(app.url("/api/auth/register"))
        .header("content-type", "application/json")
        .body(format!(r#"{{"email": "{big}"}}"#))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_error_shape(&json(r).await, "PAYLOAD_TOO_LARGE");
    // Streamed without a length: refused once the limit is crossed, while the client is
    // still sending.
    let head = chunked_upload(&app, "/api/auth/register", 40, 64 * 1024).await;
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
    // The processor's webhook has its own, smaller limit, answered in the same shape.
    let r = app
        .client
        .post(app.url("/api/payments/webhooks/processor"))
        .header("content-type", "application/json")
        .header("processor-signature", "t=1,v1=00")
        .body(vec![b' '; 300 * 1024])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json")
    );
    assert_error_shape(&json(r).await, "PAYLOAD_TOO_LARGE");
    // Nesting ten thousand deep is a validation error, not a stack overflow.
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let r = app
        .client
        .post(app.url("/api/auth/login"))
        .header("content-type", "application/json")
        .body(deep)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    // Invalid UTF-8 likewise.
    let r = app
        .client
        .post(app.url("/api/auth/login"))
        .header("content-type", "application/json")
        .body(b"{\"username\": \"\xff\xfe\", \"password\": \"x\"}".to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_error_shape(&json(r).await, "VALIDATION_ERROR");
    app.stop().await;
}

#[actix_web::test]
async fn a_known_address_under_another_method_answers_405_with_allow() {
    let app = spawn_app().await;
    let r = app
        .client
        .request(Method::PATCH, app.url("/api/users/me"))
        .send()
        .await
        .unwrap();
    if r.status() != StatusCode::METHOD_NOT_ALLOWED {
        panic!("{}: {}", r.status(), r.text().await.unwrap());
    }
    let allow = r.headers()["allow"].to_str().unwrap().to_owned();
    assert!(allow.contains("GET") && allow.contains("PUT"), "{allow}");
    assert_error_shape(&json(r).await, "METHOD_NOT_ALLOWED");
    // Templates match too.
    let r = app
        .client
        .request(Method::PUT, app.url("/api/projects/42/dispute"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(r.headers()["allow"], "GET, POST");
    // An unknown address stays 404.
    let r = app.get("/api/no/such/route").await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert_error_shape(&json(r).await, "ROUTE_NOT_FOUND");
    app.stop().await;
}

#[actix_web::test]
async fn forwarding_headers_count_only_from_trusted_proxies() {
    async fn hits(app: &crate::helpers::TestApp, forwarded_for: &str) -> StatusCode {
        app.client
            .get(app.url("/api/projects/public"))
            .header("x-forwarded-for", forwarded_for)
            .send()
            .await
            .unwrap()
            .status()
    }
    // Not trusted (the default): a client cannot pick its own bucket.
    let app = spawn_app_with(&[("RATE_LIMIT_PER_MINUTE", "3")]).await;
    for i in 0..3 {
        assert_eq!(hits(&app, &format!("203.0.113.{i}")).await, StatusCode::OK);
    }
    assert_eq!(
        hits(&app, "203.0.113.99").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    app.stop().await;

    // Behind a trusted proxy (the test client is the proxy): one bucket per forwarded client,
    // and the client's own claims left of the proxy's entry are ignored.
    let app = spawn_app_with(&[
        ("RATE_LIMIT_PER_MINUTE", "3"),
        ("TRUSTED_PROXIES", "127.0.0.0/8, ::1"),
    ])
    .await;
    for _ in 0..3 {
        assert_eq!(hits(&app, "203.0.113.1").await, StatusCode::OK);
    }
    assert_eq!(
        hits(&app, "203.0.113.1").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        hits(&app, "10.9.9.9, 203.0.113.1").await,
        StatusCode::TOO_MANY_REQUESTS,
        "a spoofed left-most entry does not open a new bucket"
    );
    assert_eq!(hits(&app, "203.0.113.2").await, StatusCode::OK);
    let r = app
        .client
        .get(app.url("/api/projects/public"))
        .header("x-forwarded-for", "2001:db8::7")
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        StatusCode::OK,
        "an IPv6 client has its own bucket"
    );
    assert!(
        crate::helpers::captured_logs().contains("2001:db8::7"),
        "the access log names the forwarded client"
    );
    // A `Forwarded` header (RFC 7239) is the client's own claim, passed on by a proxy that
    // writes only X-Forwarded-For: it picks nothing.
    let r = app
        .client
        .get(app.url("/api/projects/public"))
        .header("forwarded", "for=198.51.100.77")
        .header("x-forwarded-for", "203.0.113.1")
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "still 203.0.113.1's spent bucket"
    );
    app.stop().await;
}

#[actix_web::test]
async fn only_the_front_end_may_call_from_a_browser_with_credentials() {
    let app = spawn_app().await;
    let preflight = |origin: &'static str| {
        app.client
            .request(Method::OPTIONS, app.url("/api/users/me"))
            .header("origin", origin)
            .header("access-control-request-method", "PUT")
            .header(
                "access-control-request-headers",
                "authorization, content-type, x-csrf-token",
            )
            .send()
    };
    let r = preflight("http://frontend.test").await.unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let h = r.headers();
    assert_eq!(h["access-control-allow-origin"], "http://frontend.test");
    assert_eq!(h["access-control-allow-credentials"], "true");
    let r = preflight("https://evil.example").await.unwrap();
    assert!(r.headers().get("access-control-allow-origin").is_none());
    assert!(!r.status().is_success(), "{}", r.status());
    // A simple request from elsewhere is answered without the header: the browser hides it.
    let r = app
        .client
        .get(app.url("/api/projects/public"))
        .header("origin", "https://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.headers().get("access-control-allow-origin").is_none());
    app.stop().await;
}

#[actix_web::test]
async fn tokens_signed_otherwise_or_naming_another_session_are_refused() {
    const KEY: &str = "edges-test-secret-of-at-least-thirty-two-chars";
    let app = spawn_app_with(&[("JWT_SECRET", KEY)]).await;
    let ana: Account = register(&app, "ana", &["experto"]).await;
    let bob: Account = register(&app, "bob", &["experto"]).await;
    let me = |token: String| {
        let app = &app;
        async move {
            app.client
                .get(app.url("/api/users/me"))
                .bearer_auth(token)
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    assert_eq!(me(ana.access_token.clone()).await, StatusCode::OK);
    let claims = |token: &str| -> serde_json::Value {
        use base64::Engine as _;
        let payload = token.split('.').nth(1).unwrap();
        serde_json::from_slice(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(payload)
                .unwrap(),
        )
        .unwrap()
    };
    let sign = |claims: &serde_json::Value, key: &str, alg: jsonwebtoken::Algorithm| {
        jsonwebtoken::encode(
            &jsonwebtoken::Header::new(alg),
            claims,
            &jsonwebtoken::EncodingKey::from_secret(key.as_bytes()),
        )
        .unwrap()
    };
    let ana_claims = claims(&ana.access_token);
    // The same claims re-signed by the service's own key still pass: the checks below fail
    // for the reason they name, not for a difference in encoding.
    assert_eq!(
        me(sign(&ana_claims, KEY, jsonwebtoken::Algorithm::HS256)).await,
        StatusCode::OK
    );
    assert_eq!(
        me(sign(
            &ana_claims,
            "another-key-of-at-least-thirty-two-chars!",
            jsonwebtoken::Algorithm::HS256
        ))
        .await,
        StatusCode::UNAUTHORIZED,
        "another key"
    );
    assert_eq!(
        me(sign(&ana_claims, KEY, jsonwebtoken::Algorithm::HS512)).await,
        StatusCode::UNAUTHORIZED,
        "another algorithm"
    );
    // Ana's token pointing at Bob's session, validly signed: the session is not hers.
    let mut swapped = ana_claims.clone();
    let bob_claims = claims(&bob.access_token);
    for field in ["sid", "session_id"] {
        swapped[field] = bob_claims[field].clone();
    }
    assert_eq!(
        me(sign(&swapped, KEY, jsonwebtoken::Algorithm::HS256)).await,
        StatusCode::UNAUTHORIZED,
        "a session of another user"
    );
    let mut unknown = ana_claims.clone();
    unknown["sid"] = j!(987_654_321);
    assert_eq!(
        me(sign(&unknown, KEY, jsonwebtoken::Algorithm::HS256)).await,
        StatusCode::UNAUTHORIZED,
        "an unknown session"
    );
    app.stop().await;
}

/// `rediss://` works: the service, as its binary runs, keeps its rate-limit counters in a
/// Redis that only speaks TLS, trusting that server's private CA through `SSL_CERT_FILE`.
#[actix_web::test]
async fn the_cache_speaks_tls_to_redis() {
    use std::process::{Command, Stdio};
    if Command::new("redis-server")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("redis-server is not installed: rediss:// not exercised");
        return;
    }
    let ca = crate::webhooks::receiver::ca_file();
    let (cert, key) = crate::webhooks::receiver::server_cert_files();
    let tls_port = free_port();
    let redis = ChildGuard(
        Command::new("redis-server")
            .args(["--port", "0", "--tls-port", &tls_port.to_string()])
            .args(["--tls-cert-file", &cert.display().to_string()])
            .args(["--tls-key-file", &key.display().to_string()])
            .args(["--tls-ca-cert-file", &ca, "--tls-auth-clients", "no"])
            .args(["--save", "", "--appendonly", "no", "--bind", "127.0.0.1"])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server starts"),
    );
    let data = tempfile::tempdir().unwrap();
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let mut server = None;
    // redis-server may take a moment to listen: the service refuses to start without its cache.
    for _ in 0..50 {
        let mut child = service_command(data.path(), port)
            .env("SSL_CERT_FILE", &ca)
            .env("REDIS_URL", format!("rediss://localhost:{tls_port}"))
            .env("CACHE_PREFIX", "tls-test:")
            .env("RATE_LIMIT_PER_MINUTE", "2")
            .spawn()
            .expect("the service starts");
        let up = crate::helpers::wait_for(std::time::Duration::from_secs(10), || {
            match child.try_wait() {
                Ok(Some(_)) => Some(false),
                _ => std::net::TcpStream::connect(("127.0.0.1", port))
                    .ok()
                    .map(|_| true),
            }
        })
        .await;
        if up == Some(true) {
            server = Some(ChildGuard(child));
            break;
        }
        let _ = child.kill();
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let _server = server.expect("the service came up with a TLS cache");
    let statuses = {
        let mut statuses = Vec::new();
        for _ in 0..3 {
            let r = client
                .get(format!("{base}/api/projects/public"))
                .send()
                .await
                .unwrap();
            statuses.push(r.status());
        }
        statuses
    };
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
    // The counter lives in the TLS server.
    let keys = Command::new("redis-cli")
        .args([
            "--tls",
            "--cacert",
            &ca,
            "-h",
            "localhost",
            "-p",
            &tls_port.to_string(),
        ])
        .args(["--scan", "--pattern", "tls-test:*"])
        .output()
        .expect("redis-cli runs");
    let keys = String::from_utf8_lossy(&keys.stdout);
    assert!(keys.contains("ratelimit"), "keys: {keys}");
    drop(redis);
}

#[actix_web::test]
async fn a_login_answer_does_not_tell_an_unknown_account_from_a_wrong_password() {
    let app = spawn_app().await;
    register(&app, "known", &["experto"]).await;
    let attempt = |username: &'static str| {
        let app = &app;
        async move {
            let body = j!({"username": username, "password": "Wrong-password-1"});
            app.post_json("/api/auth/login", &body).await
        }
    };
    let known = attempt("known").await;
    let unknown = attempt("nobody-here").await;
    assert_eq!(known.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(known.status(), unknown.status());
    assert_eq!(json(known).await, json(unknown).await);
    app.stop().await;
}

/// A whole money flow (sign-ups, a deal, a card payment held in escrow) leaves none of its
/// secrets in the log: tokens, the intent's client secret, the processor's keys.
#[actix_web::test]
async fn a_money_flow_leaves_no_secret_in_the_logs() {
    let m = crate::market::Market::open().await;
    let deal = crate::escrow::deal(&m, "logged", [10.0, 20.0, 30.0]).await;
    let intent =
        crate::escrow::payment(&m, deal.first_payment).await["processor_payment_intent_id"]
            .as_str()
            .unwrap()
            .to_owned();
    let details = json(
        m.send(
            &deal.company,
            Method::GET,
            &format!("/api/payments/intent/{intent}"),
            None,
        )
        .await,
    )
    .await;
    let client_secret = details["client_secret"].as_str().unwrap().to_owned();
    crate::escrow::authorise(&m, deal.first_payment).await;
    let sandbox = m.app.state.processor.sandbox.as_ref().expect("the sandbox");
    let logs = crate::helpers::captured_logs();
    assert!(logs.contains(&intent), "the capture holds this flow");
    let secrets = [
        ("client secret", client_secret),
        ("company token", deal.company.access_token.clone()),
        ("expert token", deal.expert.access_token.clone()),
        ("processor key", sandbox.secret_key().expose().to_owned()),
        (
            "webhook secret",
            sandbox.webhook_secret().expose().to_owned(),
        ),
    ];
    for (what, secret) in secrets {
        assert!(secret.len() >= 8, "{what} is a real value");
        assert!(!logs.contains(&secret), "the {what} reached the logs");
    }
}
