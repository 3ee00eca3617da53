//! Hostile input found by probing the service (issue 19): each answered in the error shape,
//! never a dropped connection, never unbounded growth.

use reqwest::{Method, StatusCode};

use crate::helpers::{json, spawn_app};

#[actix_web::test]
async fn amounts_beyond_the_processor_maximum_are_refused_not_overflowed() {
    let app = spawn_app().await;
    for huge in ["1e27", "8e26", "7.9e28", "100000000", "9007199254740993"] {
        let r = app
            .get(&format!("/api/projects/public?min_budget={huge}"))
            .await;
        assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY, "{huge}");
        let body = json(r).await;
        assert!(
            body["detail"].is_string() && body["code"].is_string(),
            "{body}"
        );
    }
    let r = app.get("/api/projects/public?min_budget=99999999.99").await;
    assert_eq!(r.status(), StatusCode::OK);
    app.stop().await;
}

#[actix_web::test]
async fn invented_methods_do_not_grow_the_metrics() {
    let app = spawn_app().await;
    for i in 0..50 {
        let method = Method::from_bytes(format!("PROBE{i}").as_bytes()).unwrap();
        let _ = app.client.request(method, app.url("/health")).send().await;
    }
    let text = app.get("/metrics").await.text().await.unwrap();
    assert!(!text.contains("PROBE"), "methods leak into labels");
    assert!(text.contains(r#"method="other""#));
    app.stop().await;
}

/// D3: a made-up method, however long, is refused at once, as the router refuses a method a
/// route lacks (405 with `Allow`, or 404 where no route is), and never copied into the log;
/// the log names it `other`, as the metrics do.
#[actix_web::test]
async fn invented_methods_are_refused_at_once_and_logged_as_other() {
    let app = spawn_app().await;
    let invented = format!("Q{}", "Z".repeat(2_000));
    let method = Method::from_bytes(invented.as_bytes()).unwrap();
    for (path, status, code, allow) in [
        ("/health", 405, "METHOD_NOT_ALLOWED", Some("GET")),
        (
            "/api/projects/public",
            405,
            "METHOD_NOT_ALLOWED",
            Some("GET"),
        ),
        ("/api/nowhere", 404, "ROUTE_NOT_FOUND", None),
    ] {
        let r = app
            .client
            .request(method.clone(), app.url(path))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), status, "{path}");
        let allowed = r
            .headers()
            .get("allow")
            .map(|v| v.to_str().unwrap().to_owned());
        assert_eq!(allowed.is_some(), allow.is_some(), "{path}");
        if let (Some(allowed), Some(method)) = (allowed, allow) {
            assert!(
                allowed.split(", ").any(|m| m == method),
                "{path}: {allowed}"
            );
        }
        assert_eq!(json(r).await["code"], code, "{path}");
    }
    // The methods HTTP defines still reach the router: a known address answers 405.
    let r = app
        .client
        .request(Method::PATCH, app.url("/health"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
    let logs = crate::helpers::captured_logs();
    assert!(!logs.contains("ZZZZZZZZ"), "the method reached the log");
    assert!(
        logs.contains(r#""method":"other""#),
        "the refusal is logged as `other`"
    );
    app.stop().await;
}

#[actix_web::test]
async fn percent_and_underscore_are_literal_in_profile_searches() {
    let m = crate::market::Market::open().await;
    m.expert("wild_card").await;
    let experts = |q: &'static str| {
        let app = &m.app;
        async move {
            let r = app.get(&format!("/api/profiles/experts?q={q}")).await;
            assert_eq!(r.status(), StatusCode::OK);
            json(r).await["total"].as_i64().unwrap()
        }
    };
    assert_eq!(experts("wild").await, 1);
    assert_eq!(
        experts("%25").await,
        0,
        "a percent sign matches only itself"
    );
    assert_eq!(experts("i_d").await, 0, "an underscore matches only itself");
    let admin = |q: &'static str| {
        let m = &m;
        async move {
            let r = m
                .as_admin(
                    Method::GET,
                    &format!("/api/admin/profiles?search={q}"),
                    None,
                )
                .await;
            assert_eq!(r.status(), StatusCode::OK);
            json(r).await["total"].as_i64().unwrap()
        }
    };
    assert_eq!(admin("wild_card").await, 1);
    assert_eq!(admin("wild%25card").await, 0);
    assert_eq!(admin("wil__card").await, 0);
}

#[actix_web::test]
async fn answers_carry_security_headers_and_credentialed_ones_are_not_cached() {
    let app = spawn_app().await;
    let open = app.get("/health").await;
    let h = open.headers();
    assert_eq!(h["x-content-type-options"], "nosniff");
    assert_eq!(h["referrer-policy"], "no-referrer");
    assert_eq!(h["x-frame-options"], "DENY");
    assert!(h.get("cache-control").is_none());
    // Answers to credentialed requests (and every token answer) are never cached.
    let account = crate::helpers::register(&app, "headers", &["experto"]).await;
    let me = app
        .client
        .get(app.url("/api/users/me"))
        .bearer_auth(&account.access_token)
        .send()
        .await
        .unwrap();
    assert_eq!(me.status(), StatusCode::OK);
    assert_eq!(me.headers()["cache-control"], "no-store");
    let login = app
        .post_json(
            "/api/auth/login",
            &serde_json::json!({"username": "headers", "password": crate::helpers::PASSWORD}),
        )
        .await;
    assert_eq!(login.headers()["cache-control"], "no-store");
    app.stop().await;
}

#[actix_web::test]
async fn usernames_are_unique_whatever_their_case() {
    let app = spawn_app().await;
    crate::helpers::register(&app, "EnumUser", &["empresa"]).await;
    let r = app
        .post_json(
            "/api/auth/register",
            &serde_json::json!({"email": "other@example.com", "username": "enumuser",
                                "password": crate::helpers::PASSWORD, "roles": ["experto"]}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    // Nor by rename.
    let other = crate::helpers::register(&app, "someone_else", &["empresa"]).await;
    let r = crate::market::send(
        &app,
        Method::PUT,
        "/api/users/me",
        &other,
        Some(&serde_json::json!({"username": "ENUMUSER"})),
    )
    .await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    // Login finds the account whatever the case typed.
    crate::helpers::login(&app, "enumUSER", crate::helpers::PASSWORD).await;
    app.stop().await;
}
