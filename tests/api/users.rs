//! `/api/users/*`: the caller's account, public views, the webhook configuration.

use crate::helpers::{
    PASSWORD, TestApp, json, json_keys, login, login_secure_session, register, request_as,
    spawn_app,
};
use futures_util::future::join_all;
use marketplace::store::users;
use reqwest::Method;
use serde_json::{Value, json as j};

async fn me(app: &TestApp, token: &str) -> reqwest::Response {
    request_as(app, Method::GET, "/api/users/me", token, None).await
}

async fn put_me(app: &TestApp, token: &str, body: Value) -> reqwest::Response {
    request_as(app, Method::PUT, "/api/users/me", token, Some(&body)).await
}

/// A mutating request of a cookie session: bearer token plus whatever CSRF cookie and header
/// the test chooses to send.
async fn cookie_request(
    app: &TestApp,
    method: Method,
    path: &str,
    access_token: &str,
    cookie: Option<&str>,
    header: Option<&str>,
    body: Option<Value>,
) -> reqwest::Response {
    let mut request = app
        .client
        .request(method, app.url(path))
        .bearer_auth(access_token);
    if let Some(value) = cookie {
        request = request.header("Cookie", format!("csrf_token={value}"));
    }
    if let Some(value) = header {
        request = request.header("X-CSRF-Token", value);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    request.send().await.expect("request")
}

async fn username_in_db(app: &TestApp, id: i64) -> String {
    let mut conn = app.db.conn().await.unwrap();
    users::find(conn.exec(), id)
        .await
        .unwrap()
        .expect("user exists")
        .username
}

async fn assert_error(response: reqwest::Response, status: u16, code: &str) -> Value {
    assert_eq!(response.status(), status);
    let body = json(response).await;
    assert_eq!(body["code"], code, "{body}");
    body
}

#[actix_web::test]
async fn me_shows_the_account_and_requires_a_valid_token() {
    let app = spawn_app().await;
    let ana = register(&app, "ana", &["empresa"]).await;
    let token = login(&app, "ana", PASSWORD).await;

    let response = me(&app, &token).await;
    assert_eq!(response.status(), 200);
    let body = json(response).await;
    assert_eq!(body["id"], ana.id);
    assert_eq!(body["email"], "ana@example.com");
    assert_eq!(body["username"], "ana");
    assert_eq!(body["roles"], j!(["empresa"]));
    assert_eq!(body["active_role"], "empresa");
    assert_eq!(body["role"], body["active_role"]);
    assert_eq!(body["is_active"], true);
    assert_eq!(body["email_verified"], false);
    let text = body.to_string().to_lowercase();
    assert!(
        !text.contains("password") && !text.contains("hash"),
        "{text}"
    );

    let anonymous = app.get("/api/users/me").await;
    assert_error(anonymous, 401, "NOT_AUTHENTICATED").await;
    let garbage = me(&app, "not.a.jwt").await;
    assert_error(garbage, 401, "INVALID_TOKEN").await;
    // A real token whose signature was altered.
    let dot = token.rfind('.').unwrap() + 1;
    let flipped = if token[dot..].starts_with('A') {
        "B"
    } else {
        "A"
    };
    let forged = format!("{}{flipped}{}", &token[..dot], &token[dot + 1..]);
    assert_eq!(me(&app, &forged).await.status(), 401);
    app.stop().await;
}

#[actix_web::test]
async fn username_change_conflict_and_validation() {
    let app = spawn_app().await;
    let ana = register(&app, "ana", &["empresa"]).await;
    register(&app, "bob", &["empresa"]).await;
    let token = login(&app, "ana", PASSWORD).await;

    // A bearer-only session needs no CSRF token.
    let response = put_me(&app, &token, j!({"username": "ana_new"})).await;
    assert_eq!(response.status(), 200);
    let body = json(response).await;
    assert_eq!(body["username"], "ana_new");
    assert_eq!(body["id"], ana.id);
    assert_eq!(json(me(&app, &token).await).await["username"], "ana_new");
    assert_eq!(username_in_db(&app, ana.id).await, "ana_new");
    login(&app, "ana_new", PASSWORD).await;

    // Setting the username one already has is no conflict.
    assert_eq!(
        put_me(&app, &token, j!({"username": "ana_new"}))
            .await
            .status(),
        200
    );

    let taken = put_me(&app, &token, j!({"username": "bob"})).await;
    assert_error(taken, 409, "USERNAME_EXISTS").await;

    for bad in ["a b", "ab", "bad-name", &"x".repeat(51)] {
        let invalid = put_me(&app, &token, j!({"username": bad})).await;
        let body = assert_error(invalid, 422, "VALIDATION_ERROR").await;
        assert_eq!(body["errors"][0]["field"], "username", "{bad}: {body}");
    }
    assert_eq!(username_in_db(&app, ana.id).await, "ana_new");
    app.stop().await;
}

#[actix_web::test]
async fn cookie_session_needs_the_csrf_double_submit() {
    let app = spawn_app().await;
    let ana = register(&app, "ana", &["empresa"]).await;
    let session = login_secure_session(&app, "ana", PASSWORD).await;
    let (access, csrf) = (session.access_token.as_str(), session.csrf_token.as_str());
    let put = |cookie: bool, header: Option<String>, name: &'static str| {
        let app = &app;
        async move {
            cookie_request(
                app,
                Method::PUT,
                "/api/users/me",
                access,
                cookie.then_some(csrf),
                header.as_deref(),
                Some(j!({"username": name})),
            )
            .await
        }
    };

    // The cookie without the header, nothing at all, a wrong header, the header alone.
    let refused = [
        put(true, None, "ana_one").await,
        put(false, None, "ana_two").await,
        put(true, Some(format!("{csrf}x")), "ana_three").await,
        put(false, Some(csrf.to_owned()), "ana_four").await,
    ];
    for response in refused {
        assert_error(response, 403, "CSRF_FAILED").await;
    }
    assert_eq!(username_in_db(&app, ana.id).await, "ana");

    // The password and e-mail changes are protected the same way.
    let password = cookie_request(
        &app,
        Method::POST,
        "/api/users/me/change-password",
        access,
        Some(csrf),
        None,
        Some(j!({"current_password": PASSWORD, "new_password": "Another456?"})),
    )
    .await;
    assert_error(password, 403, "CSRF_FAILED").await;
    let email = cookie_request(
        &app,
        Method::PUT,
        "/api/users/me/email",
        access,
        Some(csrf),
        Some("wrong-value-000000000000"),
        Some(j!({"new_email": "elsewhere@example.com", "current_password": PASSWORD})),
    )
    .await;
    assert_error(email, 403, "CSRF_FAILED").await;
    login(&app, "ana@example.com", PASSWORD).await;

    let accepted = put(true, Some(csrf.to_owned()), "ana_csrf").await;
    assert_eq!(accepted.status(), 200);
    assert_eq!(json(accepted).await["username"], "ana_csrf");
    assert_eq!(username_in_db(&app, ana.id).await, "ana_csrf");

    // A bearer session that sends a csrf cookie anyway is held to it too.
    let bearer = login(&app, "ana_csrf", PASSWORD).await;
    let response = cookie_request(
        &app,
        Method::PUT,
        "/api/users/me",
        &bearer,
        Some("some-cookie-value-123456"),
        None,
        Some(j!({"username": "ana_bearer"})),
    )
    .await;
    assert_error(response, 403, "CSRF_FAILED").await;
    app.stop().await;
}

#[actix_web::test]
async fn password_change_checks_policy_and_ends_other_sessions() {
    let app = spawn_app().await;
    let ana = register(&app, "ana", &["empresa"]).await;
    let earlier = login(&app, "ana", PASSWORD).await;
    let current = login(&app, "ana", PASSWORD).await;
    let change = |current_password: &'static str, new_password: &'static str| {
        let body = j!({"current_password": current_password, "new_password": new_password});
        let token = current.clone();
        let app = &app;
        async move {
            request_as(
                app,
                Method::POST,
                "/api/users/me/change-password",
                &token,
                Some(&body),
            )
            .await
        }
    };

    assert_error(
        change("Wrong123!", "Another456?").await,
        400,
        "INVALID_PASSWORD",
    )
    .await;
    for weak in ["short1!", "alllowercase1!", "NoDigitsHere!", "NoSpecial123"] {
        let body = j!({"current_password": PASSWORD, "new_password": weak});
        let response = request_as(
            &app,
            Method::POST,
            "/api/users/me/change-password",
            &current,
            Some(&body),
        )
        .await;
        let body = assert_error(response, 422, "VALIDATION_ERROR").await;
        assert_eq!(body["errors"][0]["field"], "new_password");
    }
    // Nothing changed so far.
    assert_eq!(me(&app, &earlier).await.status(), 200);

    let response = change(PASSWORD, "Another456?").await;
    assert_eq!(response.status(), 200);
    assert!(json(response).await["message"].is_string());

    login(&app, "ana", "Another456?").await;
    let old = app
        .post_json(
            "/api/auth/login",
            &j!({"username": "ana", "password": PASSWORD}),
        )
        .await;
    assert_eq!(old.status(), 401);

    assert_eq!(
        me(&app, &current).await.status(),
        200,
        "this session lives on"
    );
    assert_eq!(me(&app, &earlier).await.status(), 401, "other sessions end");
    assert_eq!(me(&app, &ana.access_token).await.status(), 401);
    // The ended sessions cannot be renewed either.
    let renewed = app
        .post_json(
            "/api/auth/refresh",
            &j!({"refresh_token": ana.refresh_cookie}),
        )
        .await;
    assert_eq!(renewed.status(), 401);
    app.stop().await;
}

#[actix_web::test]
async fn email_change_sends_a_verification_to_the_new_address() {
    let app = spawn_app().await;
    let ana = register(&app, "ana", &["empresa"]).await;
    register(&app, "bob", &["empresa"]).await;
    let token = login(&app, "ana", PASSWORD).await;
    let change = |new_email: &'static str, current_password: &'static str| {
        let body = j!({"new_email": new_email, "current_password": current_password});
        let token = token.clone();
        let app = &app;
        async move { request_as(app, Method::PUT, "/api/users/me/email", &token, Some(&body)).await }
    };

    // Verify the first address, so the change visibly resets the flag.
    let first = app.mails_to("ana@example.com", 1).await[0].token().unwrap();
    let verified = app
        .post_json("/api/auth/verify-email", &j!({"token": first}))
        .await;
    assert_eq!(verified.status(), 200);
    assert_eq!(json(me(&app, &token).await).await["email_verified"], true);

    assert_error(
        change("ana2@example.com", "Wrong123!").await,
        400,
        "INVALID_PASSWORD",
    )
    .await;
    assert_error(
        change("bob@example.com", PASSWORD).await,
        409,
        "EMAIL_EXISTS",
    )
    .await;
    let invalid = assert_error(
        change("not-an-address", PASSWORD).await,
        422,
        "VALIDATION_ERROR",
    )
    .await;
    assert_eq!(invalid["errors"][0]["field"], "new_email");
    let still = json(me(&app, &token).await).await;
    assert_eq!(
        (still["email"].as_str(), still["email_verified"].as_bool()),
        (Some("ana@example.com"), Some(true))
    );
    assert!(
        app.mails()
            .iter()
            .all(|m| !m.to.contains("ana2@example.com")),
        "refused changes send nothing"
    );

    let response = change("Ana2@Example.com", PASSWORD).await;
    assert_eq!(response.status(), 200);
    let body = json(response).await;
    assert_eq!(body["email"], "ana2@example.com");
    assert_eq!(body["email_verified"], false);
    assert_eq!(body["id"], ana.id);
    assert_eq!(json(me(&app, &token).await).await["email_verified"], false);

    let mails = app.mails_to("ana2@example.com", 1).await;
    assert_eq!(mails.len(), 1);
    let new_token = mails[0]
        .token()
        .expect("a token in the verification e-mail");
    assert_ne!(new_token, first);
    let verified = app
        .post_json("/api/auth/verify-email", &j!({"token": new_token}))
        .await;
    assert_eq!(verified.status(), 200);
    let after = json(me(&app, &token).await).await;
    assert_eq!(after["email"], "ana2@example.com");
    assert_eq!(after["email_verified"], true);
    // The new address is the login now.
    login(&app, "ana2@example.com", PASSWORD).await;
    app.stop().await;
}

#[actix_web::test]
async fn public_view_hides_private_fields() {
    let app = spawn_app().await;
    let ana = register(&app, "ana", &["empresa", "experto"]).await;
    register(&app, "bob", &["experto"]).await;
    let bob = login(&app, "bob", PASSWORD).await;

    let response = request_as(
        &app,
        Method::GET,
        &format!("/api/users/{}", ana.id),
        &bob,
        None,
    )
    .await;
    assert_eq!(response.status(), 200);
    let body = json(response).await;
    assert_eq!(body["id"], ana.id);
    assert_eq!(body["username"], "ana");
    assert_eq!(body["roles"], j!(["empresa", "experto"]));
    for private in ["email", "is_active", "email_verified"] {
        assert!(body.get(private).is_none(), "{private} leaked: {body}");
    }
    let text = body.to_string().to_lowercase();
    for secret in ["password", "hash", "ana@example.com", "$2"] {
        assert!(!text.contains(secret), "{secret} in {text}");
    }

    let unknown = request_as(&app, Method::GET, "/api/users/987654", &bob, None).await;
    assert_error(unknown, 404, "NOT_FOUND").await;
    app.stop().await;
}

#[actix_web::test]
async fn webhook_configuration_and_secret() {
    let app = spawn_app().await;
    register(&app, "ana", &["empresa"]).await;
    register(&app, "bob", &["empresa"]).await;
    let ana = login(&app, "ana", PASSWORD).await;
    let bob = login(&app, "bob", PASSWORD).await;
    let get_config = |token: String| {
        let app = &app;
        async move {
            let response =
                request_as(app, Method::GET, "/api/users/me/webhook", &token, None).await;
            assert_eq!(response.status(), 200);
            response.text().await.unwrap()
        }
    };
    let secret_of = |method: Method, token: String| {
        let app = &app;
        async move {
            let response =
                request_as(app, method, "/api/users/me/webhook/secret", &token, None).await;
            assert_eq!(response.status(), 200);
            let secret = json(response).await["secret"].as_str().unwrap().to_owned();
            assert!(secret.len() >= 32, "{secret}");
            secret
        }
    };
    let put = |body: Value| {
        let token = ana.clone();
        let app = &app;
        async move {
            request_as(
                app,
                Method::PUT,
                "/api/users/me/webhook",
                &token,
                Some(&body),
            )
            .await
        }
    };

    let default: Value = serde_json::from_str(&get_config(ana.clone()).await).unwrap();
    assert_eq!(default["enabled"], false);
    assert_eq!(default["has_secret"], false);
    assert!(default["url"].is_null());

    let plain =
        put(j!({"url": "http://hooks.example.com/x", "enabled": true, "auth_method": "JWT"})).await;
    let body = assert_error(plain, 422, "VALIDATION_ERROR").await;
    assert_eq!(body["errors"][0]["field"], "url");
    let basic =
        put(j!({"url": "https://hooks.example.com/x", "enabled": true, "auth_method": "basic"}))
            .await;
    let body = assert_error(basic, 422, "VALIDATION_ERROR").await;
    assert_eq!(body["errors"][0]["field"], "auth_method");
    let unchanged: Value = serde_json::from_str(&get_config(ana.clone()).await).unwrap();
    assert_eq!(
        unchanged["has_secret"], false,
        "refused updates store nothing"
    );

    let ok = put(j!({"url": "https://hooks.example.com/x", "enabled": true, "auth_method": "JWT"}))
        .await;
    assert_eq!(ok.status(), 200);
    let body = json(ok).await;
    assert_eq!(body["url"], "https://hooks.example.com/x");
    assert_eq!(body["enabled"], true);
    assert_eq!(body["auth_method"], "JWT");
    assert_eq!(body["has_secret"], true);
    assert!(body.get("secret").is_none());

    let first = secret_of(Method::GET, ana.clone()).await;
    assert_eq!(
        secret_of(Method::GET, ana.clone()).await,
        first,
        "reading is stable"
    );
    let second = secret_of(Method::POST, ana.clone()).await;
    assert_ne!(second, first);
    assert_eq!(secret_of(Method::GET, ana.clone()).await, second);
    // Reconfiguring keeps the secret.
    let again =
        put(j!({"url": "https://hooks.example.com/y", "enabled": false, "auth_method": "none"}))
            .await;
    assert_eq!(again.status(), 200);
    assert_eq!(secret_of(Method::GET, ana.clone()).await, second);

    let bobs = secret_of(Method::GET, bob.clone()).await;
    assert_ne!(bobs, first);
    assert_ne!(bobs, second);
    assert_eq!(
        secret_of(Method::GET, ana.clone()).await,
        second,
        "bob's read changes nothing of ana's"
    );

    let config_text = get_config(ana.clone()).await;
    let config: Value = serde_json::from_str(&config_text).unwrap();
    assert_eq!(config["url"], "https://hooks.example.com/y");
    assert_eq!(config["enabled"], false);
    assert_eq!(config["auth_method"], "none");
    assert_eq!(config["has_secret"], true);
    assert!(!config_text.contains(&second) && !config_text.contains(&first));
    assert!(!json_keys(&config).iter().any(|k| k == "secret"));
    assert!(!get_config(bob.clone()).await.contains(&bobs));

    // A cookie session must pass the CSRF check to change either.
    let session = login_secure_session(&app, "ana", PASSWORD).await;
    let refused = cookie_request(
        &app,
        Method::PUT,
        "/api/users/me/webhook",
        &session.access_token,
        Some(&session.csrf_token),
        None,
        Some(j!({"url": "https://evil.example.com/", "enabled": true, "auth_method": "none"})),
    )
    .await;
    assert_error(refused, 403, "CSRF_FAILED").await;
    let refused = cookie_request(
        &app,
        Method::POST,
        "/api/users/me/webhook/secret",
        &session.access_token,
        Some(&session.csrf_token),
        None,
        None,
    )
    .await;
    assert_error(refused, 403, "CSRF_FAILED").await;
    assert_eq!(secret_of(Method::GET, ana.clone()).await, second);
    let config: Value = serde_json::from_str(&get_config(ana.clone()).await).unwrap();
    assert_eq!(config["url"], "https://hooks.example.com/y");
    let accepted = cookie_request(
        &app,
        Method::PUT,
        "/api/users/me/webhook",
        &session.access_token,
        Some(&session.csrf_token),
        Some(&session.csrf_token),
        Some(j!({"url": "https://hooks.example.com/z", "enabled": true, "auth_method": "JWT"})),
    )
    .await;
    assert_eq!(accepted.status(), 200);
    app.stop().await;
}

#[actix_web::test]
async fn concurrent_username_claims_have_one_winner() {
    let app = spawn_app().await;
    let ana = register(&app, "ana", &["empresa"]).await;
    let bob = register(&app, "bob", &["empresa"]).await;
    let tokens = [
        (ana.id, login(&app, "ana", PASSWORD).await),
        (bob.id, login(&app, "bob", PASSWORD).await),
    ];
    let attempts = (0..10).map(|i| {
        let (id, token) = tokens[i % 2].clone();
        let app = &app;
        async move {
            let response = put_me(app, &token, j!({"username": "wanted"})).await;
            let status = response.status().as_u16();
            let body = json(response).await;
            (id, status, body)
        }
    });
    let results = join_all(attempts).await;

    let ana_name = username_in_db(&app, ana.id).await;
    let bob_name = username_in_db(&app, bob.id).await;
    let (winner, loser) = match (ana_name.as_str(), bob_name.as_str()) {
        ("wanted", "bob") => (ana.id, bob.id),
        ("ana", "wanted") => (bob.id, ana.id),
        other => panic!("exactly one user should hold the name: {other:?}"),
    };
    // The winner's requests all succeed (repeating one's own name is no conflict); each of
    // the loser's is a clean 409, never a 500.
    for (id, status, body) in &results {
        if *id == winner {
            assert_eq!(*status, 200, "{body}");
            assert_eq!(body["username"], "wanted");
        } else {
            assert_eq!(*id, loser);
            assert_eq!(*status, 409, "{body}");
            assert_eq!(body["code"], "USERNAME_EXISTS");
        }
    }
    app.stop().await;
}

#[actix_web::test]
async fn concurrent_first_secret_reads_agree() {
    let app = spawn_app().await;
    register(&app, "ana", &["empresa"]).await;
    let ana = login(&app, "ana", PASSWORD).await;
    let reads = (0..6).map(|_| {
        let (app, ana) = (&app, ana.clone());
        async move {
            let response =
                request_as(app, Method::GET, "/api/users/me/webhook/secret", &ana, None).await;
            assert_eq!(response.status(), 200);
            json(response).await["secret"].as_str().unwrap().to_owned()
        }
    });
    let secrets = join_all(reads).await;
    let response = request_as(
        &app,
        Method::GET,
        "/api/users/me/webhook/secret",
        &ana,
        None,
    )
    .await;
    let stored = json(response).await["secret"].as_str().unwrap().to_owned();
    assert!(
        secrets.iter().all(|s| *s == stored),
        "every caller got the secret that is kept: {secrets:?} vs {stored}"
    );
    app.stop().await;
}

#[actix_web::test]
async fn deactivating_oneself_ends_access() {
    let app = spawn_app().await;
    let ana = register(&app, "ana", &["empresa"]).await;
    let viewer = register(&app, "bob", &["empresa"]).await;
    let token = login(&app, "ana", PASSWORD).await;
    let response = put_me(&app, &token, j!({"is_active": false})).await;
    assert_eq!(response.status(), 200);
    let body = json(response).await;
    assert_eq!(
        (&body["is_active"], &body["username"]),
        (&j!(false), &j!("ana"))
    );

    assert_error(me(&app, &token).await, 401, "ACCOUNT_INACTIVE").await;
    let refused = app
        .post_json(
            "/api/auth/login",
            &j!({"username": "ana", "password": PASSWORD}),
        )
        .await;
    assert_error(refused, 403, "ACCOUNT_INACTIVE").await;
    let bob = login(&app, "bob", PASSWORD).await;
    let public = request_as(
        &app,
        Method::GET,
        &format!("/api/users/{}", ana.id),
        &bob,
        None,
    )
    .await;
    assert_error(public, 404, "NOT_FOUND").await;
    let own = request_as(
        &app,
        Method::GET,
        &format!("/api/users/{}", viewer.id),
        &bob,
        None,
    )
    .await;
    assert_eq!(own.status(), 200);
    app.stop().await;
}
