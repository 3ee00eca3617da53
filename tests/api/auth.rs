//! Registration, both login flavours, tokens, sessions, CSRF, rate limits, e-mail
//! verification and password recovery.

use crate::helpers::{
    Account, PASSWORD, TestApp, cookie_value, json, login, register, set_cookie, spawn_app,
    spawn_app_with,
};
use reqwest::StatusCode;
use serde_json::json as j;

async fn me(app: &TestApp, token: &str) -> reqwest::Response {
    app.client
        .get(app.url("/api/users/me"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
}

async fn login_secure(app: &TestApp, username: &str, session: &str) -> reqwest::Response {
    app.client
        .post(app.url("/api/auth/login_secure"))
        .header("X-Session-ID", session)
        .json(&j!({"username": username, "password": PASSWORD}))
        .send()
        .await
        .unwrap()
}

/// A cookie session: (access, csrf, refresh cookie).
async fn secure_session(app: &TestApp, username: &str, session: &str) -> (String, String, String) {
    let response = login_secure(app, username, session).await;
    assert_eq!(response.status(), 200);
    let refresh = cookie_value(&response, "refresh_token").unwrap();
    let csrf_cookie = cookie_value(&response, "csrf_token").unwrap();
    let body = json(response).await;
    assert_eq!(body["csrf_token"], csrf_cookie.as_str());
    (
        body["access_token"].as_str().unwrap().into(),
        csrf_cookie,
        refresh,
    )
}

fn code(body: &serde_json::Value) -> &str {
    body["code"].as_str().unwrap_or_default()
}

#[actix_web::test]
async fn registration_logs_in_sets_cookies_and_sends_verification() {
    let app = spawn_app().await;
    let response = app
        .client
        .post(app.url("/api/auth/register"))
        .header("X-Session-ID", "sess_window1")
        .json(&j!({"email": "Ana@Example.com", "username": "ana", "password": PASSWORD, "roles": ["experto", "empresa"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let refresh = set_cookie(&response, "refresh_token").unwrap();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=604800"] {
        assert!(refresh.contains(attribute), "{refresh}");
    }
    assert!(
        !refresh.contains("Secure") && !refresh.contains("Domain"),
        "development cookies: {refresh}"
    );
    let csrf = set_cookie(&response, "csrf_token").unwrap();
    assert!(
        csrf.contains("HttpOnly")
            && csrf.contains("SameSite=Strict")
            && csrf.contains("Max-Age=900")
    );
    let body = json(response).await;
    assert_eq!(body["user"]["email"], "ana@example.com");
    assert_eq!(
        body["user"]["role"], "experto",
        "the first selected role is active"
    );
    assert!(body.get("refresh_token").is_none());
    assert_eq!(body["csrf_token"].as_str().unwrap(), cookie_value_of(&csrf));

    let me_body = json(me(&app, body["access_token"].as_str().unwrap()).await).await;
    assert_eq!(me_body["roles"], j!(["empresa", "experto"]));
    assert_eq!(me_body["active_role"], "experto");
    assert_eq!(me_body["email_verified"], false);

    let mail = &app.mails_to("ana@example.com", 1).await[0];
    let token = mail.token().expect("verification link");
    assert!(
        mail.text
            .contains(&format!("http://frontend.test/verify-email?token={token}"))
    );
    app.stop().await;
}

fn cookie_value_of(set_cookie: &str) -> &str {
    set_cookie
        .split(';')
        .next()
        .unwrap()
        .split_once('=')
        .unwrap()
        .1
}

#[actix_web::test]
async fn registration_rejects_bad_input_and_duplicates() {
    let app = spawn_app().await;
    let cases = [
        (
            j!({"email": "nope", "username": "u1", "password": PASSWORD, "roles": ["empresa"]}),
            "email",
        ),
        (
            j!({"email": "a@b.com", "username": "u!", "password": PASSWORD, "roles": ["empresa"]}),
            "username",
        ),
        (
            j!({"email": "a@b.com", "username": "u1", "password": "weakpass", "roles": ["empresa"]}),
            "password",
        ),
        (
            j!({"email": "a@b.com", "username": "u1", "password": PASSWORD, "roles": []}),
            "roles",
        ),
        (
            j!({"email": "a@b.com", "username": "u1", "password": PASSWORD, "roles": ["admin"]}),
            "roles",
        ),
        (
            j!({"email": "a@b.com", "username": "u1", "password": PASSWORD}),
            "roles",
        ),
    ];
    for (body, field) in cases {
        let response = app.post_json("/api/auth/register", &body).await;
        assert_eq!(response.status(), 422, "{body}");
        let body = json(response).await;
        assert_eq!(code(&body), "VALIDATION_ERROR");
        assert!(
            body["errors"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["field"] == field),
            "{field}: {body}"
        );
    }
    register(&app, "taken", &["empresa"]).await;
    let same_email = j!({"email": "taken@example.com", "username": "other", "password": PASSWORD, "roles": ["empresa"]});
    let response = app.post_json("/api/auth/register", &same_email).await;
    assert_eq!(response.status(), 409);
    assert_eq!(code(&json(response).await), "EMAIL_EXISTS");
    let same_name = j!({"email": "other@example.com", "username": "taken", "password": PASSWORD, "roles": ["empresa"]});
    let response = app.post_json("/api/auth/register", &same_name).await;
    assert_eq!(response.status(), 409);
    assert_eq!(code(&json(response).await), "USERNAME_EXISTS");
    let malformed = app
        .client
        .post(app.url("/api/auth/register"))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(malformed.status(), 422);
    app.stop().await;
}

#[actix_web::test]
async fn email_verification_once_within_48_hours_then_welcome() {
    let app = spawn_app().await;
    let ana = register(&app, "ana", &["empresa"]).await;
    let token = app.mails_to(&ana.email, 1).await[0].token().unwrap();

    let response = app
        .post_json("/api/auth/verify-email", &j!({"token": token}))
        .await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        json(me(&app, &ana.access_token).await).await["email_verified"],
        true
    );
    let mails = app.mails_to(&ana.email, 2).await;
    assert!(
        mails[1].subject.to_lowercase().contains("welcome"),
        "{}",
        mails[1].subject
    );

    let again = app
        .post_json("/api/auth/verify-email", &j!({"token": token}))
        .await;
    assert_eq!(again.status(), 400);
    assert_eq!(code(&json(again).await), "TOKEN_USED");
    let unknown = app
        .post_json("/api/auth/verify-email", &j!({"token": "nope"}))
        .await;
    assert_eq!(unknown.status(), 400);

    let bea = register(&app, "bea", &["experto"]).await;
    let token = app.mails_to(&bea.email, 1).await[0].token().unwrap();
    app.clock.advance(chrono::Duration::hours(49));
    let late = app
        .post_json("/api/auth/verify-email", &j!({"token": token}))
        .await;
    assert_eq!(late.status(), 400);
    assert_eq!(code(&json(late).await), "TOKEN_EXPIRED");
    app.stop().await;
}

#[actix_web::test]
async fn verification_resend_is_limited_to_once_per_two_minutes() {
    let app = spawn_app().await;
    let ana = register(&app, "ana", &["empresa"]).await;
    let response = app
        .client
        .post(app.url("/api/auth/send-verification-email"))
        .bearer_auth(&ana.access_token)
        .header("Cookie", format!("csrf_token={}", ana.csrf_token))
        .header("X-CSRF-Token", &ana.csrf_token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429, "registration sent one a moment ago");
    let retry: u64 = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=120).contains(&retry));
    assert_eq!(app.mails_to(&ana.email, 1).await.len(), 1);
    app.stop().await;
}

#[actix_web::test]
async fn standard_login_refresh_rotation_and_logout() {
    let app = spawn_app().await;
    register(&app, "ana", &["experto"]).await;

    let wrong = app
        .post_json(
            "/api/auth/login",
            &j!({"username": "ana", "password": "Wrong123!"}),
        )
        .await;
    assert_eq!(wrong.status(), 401);
    assert_eq!(code(&json(wrong).await), "INVALID_CREDENTIALS");
    let unknown = app
        .post_json(
            "/api/auth/login",
            &j!({"username": "nobody", "password": PASSWORD}),
        )
        .await;
    assert_eq!(unknown.status(), 401);

    let response = app
        .post_json(
            "/api/auth/login",
            &j!({"username": "ana@example.com", "password": PASSWORD}),
        )
        .await;
    assert_eq!(response.status(), 200);
    assert!(
        set_cookie(&response, "refresh_token").is_none(),
        "the standard flavour sets no cookies"
    );
    let body = json(response).await;
    assert_eq!(body["token_type"], "bearer");
    assert_eq!(body["user"]["username"], "ana");
    let first_refresh = body["refresh_token"].as_str().unwrap().to_owned();

    let rotated = json(
        app.post_json("/api/auth/refresh", &j!({"refresh_token": first_refresh}))
            .await,
    )
    .await;
    let second_refresh = rotated["refresh_token"].as_str().unwrap().to_owned();
    assert_ne!(second_refresh, first_refresh);
    let access = rotated["access_token"].as_str().unwrap().to_owned();
    assert_eq!(me(&app, &access).await.status(), 200);

    let logout = app
        .client
        .post(app.url("/api/auth/logout"))
        .bearer_auth(&access)
        .json(&j!({"refresh_token": second_refresh}))
        .send()
        .await
        .unwrap();
    assert_eq!(logout.status(), 200);
    let after = app
        .post_json("/api/auth/refresh", &j!({"refresh_token": second_refresh}))
        .await;
    assert_eq!(after.status(), 401, "blacklisted after logout");
    let revoked = me(&app, &access).await;
    assert_eq!(revoked.status(), 401);
    assert_eq!(code(&json(revoked).await), "TOKEN_REVOKED");
    // Reused after rotation (last: the reuse ends the session).
    let reused = app
        .post_json("/api/auth/refresh", &j!({"refresh_token": first_refresh}))
        .await;
    assert_eq!(
        reused.status(),
        401,
        "a refresh token reused after rotation"
    );
    app.stop().await;
}

#[actix_web::test]
async fn reusing_a_rotated_refresh_token_ends_its_whole_session() {
    let app = spawn_app().await;
    register(&app, "ana", &["experto"]).await;
    let credentials = j!({"username": "ana", "password": PASSWORD});
    let other_session =
        json(app.post_json("/api/auth/login", &credentials).await).await["access_token"]
            .as_str()
            .unwrap()
            .to_owned();
    let first = json(app.post_json("/api/auth/login", &credentials).await).await["refresh_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let rotated = json(
        app.post_json("/api/auth/refresh", &j!({"refresh_token": first}))
            .await,
    )
    .await;
    let (second, access) = (
        rotated["refresh_token"].as_str().unwrap().to_owned(),
        rotated["access_token"].as_str().unwrap().to_owned(),
    );
    assert_eq!(me(&app, &access).await.status(), 200);

    // A copy of the old token comes back: the session it was rotated in ends.
    let replay = app
        .post_json("/api/auth/refresh", &j!({"refresh_token": first}))
        .await;
    assert_eq!(replay.status(), 401);
    assert_eq!(me(&app, &access).await.status(), 401, "newer access token");
    let newer = app
        .post_json("/api/auth/refresh", &j!({"refresh_token": second}))
        .await;
    assert_eq!(newer.status(), 401, "newer refresh token");
    // Other sessions of the user are not that family.
    assert_eq!(me(&app, &other_session).await.status(), 200);
    app.stop().await;
}

#[actix_web::test]
async fn concurrent_refreshes_with_one_token_have_one_winner() {
    let app = spawn_app().await;
    register(&app, "ana", &["experto"]).await;
    let body = json(
        app.post_json(
            "/api/auth/login",
            &j!({"username": "ana", "password": PASSWORD}),
        )
        .await,
    )
    .await;
    let token = body["refresh_token"].as_str().unwrap().to_owned();
    let body = j!({"refresh_token": token});
    let attempts = (0..8).map(|_| app.post_json("/api/auth/refresh", &body));
    let statuses: Vec<StatusCode> = futures_util::future::join_all(attempts)
        .await
        .iter()
        .map(|r| r.status())
        .collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == StatusCode::OK).count(),
        1,
        "{statuses:?}"
    );
    assert!(
        statuses
            .iter()
            .all(|s| *s == StatusCode::OK || *s == StatusCode::UNAUTHORIZED),
        "{statuses:?}"
    );
    app.stop().await;
}

#[actix_web::test]
async fn secure_flavour_session_id_refresh_verify_and_logout() {
    let app = spawn_app().await;
    register(&app, "ana", &["experto"]).await;

    let missing = app
        .post_json(
            "/api/auth/login_secure",
            &j!({"username": "ana", "password": PASSWORD}),
        )
        .await;
    assert_eq!(missing.status(), 422, "X-Session-ID is required");

    let (access, csrf, refresh) = secure_session(&app, "ana", "sess_tab1").await;
    let claims = decode_claims(&access);
    assert_eq!(claims["session_id"], "sess_tab1");

    let refresh_with = |session: &'static str, cookie: String| {
        app.client
            .post(app.url("/api/auth/refresh_secure"))
            .header("X-Session-ID", session)
            .header("Cookie", cookie)
            .send()
    };
    let mismatch = refresh_with("sess_other", format!("refresh_token={refresh}"))
        .await
        .unwrap();
    assert_eq!(mismatch.status(), 401);
    assert_eq!(code(&json(mismatch).await), "SESSION_MISMATCH");

    let ok = refresh_with(
        "sess_tab1",
        format!("refresh_token={refresh}; csrf_token={csrf}"),
    )
    .await
    .unwrap();
    assert_eq!(ok.status(), 200);
    let new_refresh = cookie_value(&ok, "refresh_token").unwrap();
    assert_ne!(new_refresh, refresh, "rotated");
    assert_eq!(
        cookie_value(&ok, "csrf_token").unwrap(),
        csrf,
        "existing CSRF value reused, max age renewed"
    );
    let body = json(ok).await;
    assert_eq!(body["csrf_token"], csrf.as_str());
    assert!(body["access_token"].is_string());

    // Without a CSRF cookie, refresh makes a new value of the session (`csrf.rs`).
    let fresh = app
        .client
        .post(app.url("/api/auth/refresh_secure"))
        .header("X-Session-ID", "sess_tab1")
        .header("Cookie", format!("refresh_token={new_refresh}"))
        .send()
        .await
        .unwrap();
    assert_eq!(fresh.status(), 200);
    let newest_refresh = cookie_value(&fresh, "refresh_token").unwrap();
    let new_csrf = cookie_value(&fresh, "csrf_token").unwrap();
    assert_ne!(new_csrf, csrf);

    let verify = app
        .client
        .get(app.url("/api/auth/verify_secure"))
        .header("X-Session-ID", "sess_tab1")
        .header(
            "Cookie",
            format!("refresh_token={newest_refresh}; csrf_token={new_csrf}"),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(verify.status(), 200);
    let body = json(verify).await;
    assert_eq!(
        (body["valid"].clone(), body["authenticated"].clone()),
        (j!(true), j!(true))
    );
    assert_eq!(body["user"]["username"], "ana");
    assert_eq!(body["csrf_token"], new_csrf.as_str());
    let verify_mismatch = app
        .client
        .get(app.url("/api/auth/verify_secure"))
        .header("X-Session-ID", "sess_nope")
        .header("Cookie", format!("refresh_token={newest_refresh}"))
        .send()
        .await
        .unwrap();
    assert_eq!(verify_mismatch.status(), 401);

    let logout = |csrf_header: Option<String>| {
        let mut request = app
            .client
            .post(app.url("/api/auth/logout_secure"))
            .header("X-Session-ID", "sess_tab1")
            .header(
                "Cookie",
                format!("refresh_token={newest_refresh}; csrf_token={new_csrf}"),
            );
        if let Some(value) = csrf_header {
            request = request.header("X-CSRF-Token", value);
        }
        request.send()
    };
    assert_eq!(logout(None).await.unwrap().status(), 403);
    assert_eq!(logout(Some("forged".into())).await.unwrap().status(), 403);
    let out = logout(Some(new_csrf.clone())).await.unwrap();
    assert_eq!(out.status(), 200);
    for name in ["refresh_token", "csrf_token"] {
        assert!(
            set_cookie(&out, name).unwrap().contains("Max-Age=0"),
            "{name} removed"
        );
    }
    let after = refresh_with("sess_tab1", format!("refresh_token={newest_refresh}"))
        .await
        .unwrap();
    assert_eq!(after.status(), 401);
    assert_eq!(me(&app, &access).await.status(), 401);
    // Reused after rotation (last: the reuse ends the session).
    let reused = refresh_with("sess_tab1", format!("refresh_token={refresh}"))
        .await
        .unwrap();
    assert_eq!(reused.status(), 401);
    app.stop().await;
}

fn decode_claims(token: &str) -> serde_json::Value {
    use base64::Engine as _;
    let payload = token.split('.').nth(1).unwrap();
    serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .unwrap(),
    )
    .unwrap()
}

#[actix_web::test]
async fn csrf_double_submit_guards_cookie_sessions() {
    let app = spawn_app().await;
    register(&app, "ana", &["experto"]).await;
    let (access, csrf, _) = secure_session(&app, "ana", "sess_a").await;
    let put = |cookie: Option<String>, header: Option<&str>| {
        let mut request = app
            .client
            .put(app.url("/api/users/me"))
            .bearer_auth(&access)
            .json(&j!({"username": "ana_2"}));
        if let Some(cookie) = cookie {
            request = request.header("Cookie", cookie);
        }
        if let Some(header) = header {
            request = request.header("X-CSRF-Token", header);
        }
        request.send()
    };
    let missing = put(Some(format!("csrf_token={csrf}")), None).await.unwrap();
    assert_eq!(missing.status(), 403);
    assert_eq!(code(&json(missing).await), "CSRF_FAILED");
    assert_eq!(
        put(Some(format!("csrf_token={csrf}")), Some("x"))
            .await
            .unwrap()
            .status(),
        403
    );
    assert_eq!(
        put(None, Some(&csrf)).await.unwrap().status(),
        403,
        "header without cookie"
    );
    assert_eq!(
        put(Some(format!("csrf_token={csrf}")), Some(&csrf))
            .await
            .unwrap()
            .status(),
        200
    );
    // D14: the pair is bound to the session. A pair of the client's choosing, or the pair of
    // another session of the same account, is refused.
    let chosen = "attackerchosen1234";
    assert_eq!(
        put(Some(format!("csrf_token={chosen}")), Some(chosen))
            .await
            .unwrap()
            .status(),
        403,
        "a pair the client chose"
    );
    let (_, other_csrf, _) = secure_session(&app, "ana_2", "sess_b").await;
    assert_ne!(other_csrf, csrf, "each session has its own token");
    assert_eq!(
        put(Some(format!("csrf_token={other_csrf}")), Some(&other_csrf))
            .await
            .unwrap()
            .status(),
        403,
        "another session's pair"
    );

    // A bearer-only session (standard flavour) carries nothing a browser attaches by itself.
    let bearer = login(&app, "ana_2", PASSWORD).await;
    let response = app
        .client
        .put(app.url("/api/users/me"))
        .bearer_auth(&bearer)
        .json(&j!({"username": "ana_3"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    app.stop().await;
}

#[actix_web::test]
async fn expired_tampered_and_unsigned_tokens_are_refused() {
    let app = spawn_app().await;
    let ana: Account = register(&app, "ana", &["experto"]).await;
    assert_eq!(me(&app, &ana.access_token).await.status(), 200);

    let mut parts: Vec<String> = ana.access_token.split('.').map(str::to_owned).collect();
    let mut claims = decode_claims(&ana.access_token);
    claims["sub"] = j!("999");
    use base64::Engine as _;
    parts[1] = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(claims.to_string());
    let tampered = parts.join(".");
    let response = me(&app, &tampered).await;
    assert_eq!(response.status(), 401);
    assert_eq!(code(&json(response).await), "INVALID_TOKEN");

    let none_header =
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(r#"{"alg":"none","typ":"JWT"}"#);
    let unsigned = format!("{none_header}.{}.", parts[1]);
    assert_eq!(me(&app, &unsigned).await.status(), 401, "alg none");

    app.clock.advance(chrono::Duration::minutes(16));
    let expired = me(&app, &ana.access_token).await;
    assert_eq!(expired.status(), 401);
    assert_eq!(code(&json(expired).await), "TOKEN_EXPIRED");
    app.stop().await;
}

#[actix_web::test]
async fn the_oldest_session_over_the_cap_expires_except_for_companies() {
    let app = spawn_app_with(&[("MAX_CONCURRENT_SESSIONS", "2")]).await;
    register(&app, "ana", &["experto"]).await; // registration is session 1
    let second = login(&app, "ana", PASSWORD).await;
    let third = login(&app, "ana", PASSWORD).await;
    let fourth = login(&app, "ana", PASSWORD).await;
    let evicted = me(&app, &second).await;
    assert_eq!(evicted.status(), 401);
    assert_eq!(code(&json(evicted).await), "SESSION_EXPIRED");
    assert_eq!(me(&app, &third).await.status(), 200);
    assert_eq!(me(&app, &fourth).await.status(), 200);

    let company = register(&app, "acme", &["empresa"]).await;
    let mut tokens = vec![company.access_token.clone()];
    for _ in 0..3 {
        tokens.push(login(&app, "acme", PASSWORD).await);
    }
    for token in &tokens {
        assert_eq!(me(&app, token).await.status(), 200, "companies have no cap");
    }
    app.stop().await;
}

#[actix_web::test]
async fn login_rate_limits_per_user_and_per_ip() {
    let app = spawn_app_with(&[
        ("LOGIN_RATE_LIMIT_MAX_ATTEMPTS_PER_USER", "3"),
        ("LOGIN_RATE_LIMIT_MAX_ATTEMPTS_PER_IP", "6"),
    ])
    .await;
    register(&app, "ana", &["experto"]).await;
    for _ in 0..3 {
        let r = app
            .post_json(
                "/api/auth/login",
                &j!({"username": "ana", "password": "Wrong123!"}),
            )
            .await;
        assert_eq!(r.status(), 401);
    }
    let limited = app
        .post_json(
            "/api/auth/login",
            &j!({"username": "ana", "password": PASSWORD}),
        )
        .await;
    assert_eq!(
        limited.status(),
        429,
        "even the right password waits out the window"
    );
    let retry: u64 = limited.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry));
    assert_eq!(code(&json(limited).await), "RATE_LIMITED");
    // The limit is the account's: its e-mail, in any case, is the same bucket.
    let by_email = app
        .post_json(
            "/api/auth/login",
            &j!({"username": "ANA@example.com", "password": PASSWORD}),
        )
        .await;
    assert_eq!(by_email.status(), 429);

    // Attempts 6 and 7 from this address, for other names: the per-IP limit is 6.
    let other = app
        .post_json("/api/auth/login", &j!({"username": "bob", "password": "x"}))
        .await;
    assert_eq!(other.status(), 401);
    let over_ip = app
        .post_json(
            "/api/auth/login",
            &j!({"username": "carl", "password": "x"}),
        )
        .await;
    assert_eq!(over_ip.status(), 429);
    app.stop().await;
}

#[actix_web::test]
async fn global_rate_limit_per_address() {
    let app = spawn_app_with(&[("RATE_LIMIT_PER_MINUTE", "5")]).await;
    for _ in 0..5 {
        assert_eq!(app.get("/api/users/me").await.status(), 401);
    }
    let limited = app.get("/api/users/me").await;
    assert_eq!(limited.status(), 429);
    assert!(limited.headers().contains_key("retry-after"));
    assert_eq!(app.get("/health").await.status(), 200, "health is exempt");
    app.stop().await;
}

#[actix_web::test]
async fn password_reset_never_reveals_accounts_and_ends_sessions() {
    let app = spawn_app().await;
    let ana = register(&app, "ana", &["experto"]).await;
    let unknown = app
        .post_json(
            "/api/auth/forgot-password",
            &j!({"email": "ghost@example.com"}),
        )
        .await;
    assert_eq!(unknown.status(), 200);
    let unknown_body = json(unknown).await;
    let known = app
        .post_json("/api/auth/forgot-password", &j!({"email": ana.email}))
        .await;
    assert_eq!(known.status(), 200);
    assert_eq!(json(known).await, unknown_body, "same answer either way");

    let mail = app.mails_to(&ana.email, 2).await.pop().unwrap();
    assert!(mail.text.contains("reset-password?token="));
    let token = mail.token().unwrap();

    let weak = app
        .post_json(
            "/api/auth/reset-password",
            &j!({"token": token, "new_password": "short"}),
        )
        .await;
    assert_eq!(weak.status(), 422);
    let done = app
        .post_json(
            "/api/auth/reset-password",
            &j!({"token": token, "new_password": "Changed123!"}),
        )
        .await;
    assert_eq!(done.status(), 200);
    assert_eq!(
        me(&app, &ana.access_token).await.status(),
        401,
        "sessions end on reset"
    );
    login(&app, "ana", "Changed123!").await;
    let old = app
        .post_json(
            "/api/auth/login",
            &j!({"username": "ana", "password": PASSWORD}),
        )
        .await;
    assert_eq!(old.status(), 401);
    let reuse = app
        .post_json(
            "/api/auth/reset-password",
            &j!({"token": token, "new_password": "Again123!"}),
        )
        .await;
    assert_eq!(reuse.status(), 400);
    app.stop().await;
}

#[actix_web::test]
async fn reset_tokens_expire_after_an_hour() {
    let app = spawn_app().await;
    let ana = register(&app, "ana", &["experto"]).await;
    app.post_json("/api/auth/forgot-password", &j!({"email": ana.email}))
        .await;
    let token = app
        .mails_to(&ana.email, 2)
        .await
        .pop()
        .unwrap()
        .token()
        .unwrap();
    app.clock.advance(chrono::Duration::minutes(61));
    let late = app
        .post_json(
            "/api/auth/reset-password",
            &j!({"token": token, "new_password": "Changed123!"}),
        )
        .await;
    assert_eq!(late.status(), 400);
    assert_eq!(code(&json(late).await), "TOKEN_EXPIRED");
    app.stop().await;
}

#[actix_web::test]
async fn roles_are_added_and_switched_only_to_held_ones() {
    let app = spawn_app().await;
    let ana = register(&app, "ana", &["empresa"]).await;
    let post = |path: &'static str, role: &'static str| {
        app.client
            .post(app.url(path))
            .bearer_auth(&ana.access_token)
            .header("Cookie", format!("csrf_token={}", ana.csrf_token))
            .header("X-CSRF-Token", &ana.csrf_token)
            .json(&j!({"role": role}))
            .send()
    };
    let switched = post("/api/auth/switch-role", "experto").await.unwrap();
    assert_eq!(switched.status(), 403);
    assert_eq!(
        post("/api/auth/add-role", "admin").await.unwrap().status(),
        422
    );
    let added = json(post("/api/auth/add-role", "experto").await.unwrap()).await;
    assert_eq!(added["roles"], j!(["empresa", "experto"]));
    assert_eq!(added["active_role"], "empresa");
    assert_eq!(
        post("/api/auth/add-role", "experto")
            .await
            .unwrap()
            .status(),
        409
    );
    let switched = json(post("/api/auth/switch-role", "experto").await.unwrap()).await;
    assert_eq!(
        (switched["active_role"].clone(), switched["role"].clone()),
        (j!("experto"), j!("experto"))
    );
    assert_eq!(
        post("/api/auth/switch-role", "admin")
            .await
            .unwrap()
            .status(),
        403
    );
    app.stop().await;
}

#[actix_web::test]
async fn verify_endpoints_check_access_tokens() {
    let app = spawn_app().await;
    let ana = register(&app, "ana", &["empresa"]).await;
    let by_query = app
        .get(&format!("/api/auth/verify?token={}", ana.access_token))
        .await;
    assert_eq!(by_query.status(), 200);
    assert_eq!(json(by_query).await["user"]["username"], "ana");
    assert_eq!(
        app.get("/api/auth/verify?token=garbage").await.status(),
        401
    );
    let bearer = app
        .client
        .get(app.url("/api/auth/verify_token"))
        .bearer_auth(&ana.access_token)
        .send()
        .await
        .unwrap();
    assert_eq!(json(bearer).await["valid"], true);
    assert_eq!(app.get("/api/auth/verify_token").await.status(), 401);
    app.stop().await;
}

#[actix_web::test]
async fn no_secret_reaches_the_logs() {
    let app = spawn_app().await;
    let password = "Unique-Pass-4821!";
    let registered = app
        .post_json(
            "/api/auth/register",
            &j!({"email": "sec@example.com", "username": "sec", "password": password, "roles": ["experto"]}),
        )
        .await;
    let refresh_cookie = cookie_value(&registered, "refresh_token").unwrap();
    let registered = json(registered).await;
    let verification = app.mails_to("sec@example.com", 1).await[0].token().unwrap();
    app.post_json("/api/auth/verify-email", &j!({"token": verification}))
        .await;
    let login = json(
        app.post_json(
            "/api/auth/login",
            &j!({"username": "sec", "password": password}),
        )
        .await,
    )
    .await;
    let refresh = login["refresh_token"].as_str().unwrap().to_owned();
    let rotated = json(
        app.post_json("/api/auth/refresh", &j!({"refresh_token": refresh}))
            .await,
    )
    .await;
    let access = rotated["access_token"].as_str().unwrap().to_owned();
    app.client
        .post(app.url("/api/auth/logout"))
        .bearer_auth(&access)
        .json(&j!({"refresh_token": rotated["refresh_token"]}))
        .send()
        .await
        .unwrap();
    app.get(&format!("/api/auth/verify?token={access}")).await;

    let logs = crate::helpers::captured_logs();
    assert!(logs.contains("/api/auth/refresh"), "the capture works");
    let secrets = [
        password.to_owned(),
        registered["access_token"].as_str().unwrap().to_owned(),
        registered["csrf_token"].as_str().unwrap().to_owned(),
        refresh_cookie,
        verification,
        refresh,
        rotated["refresh_token"].as_str().unwrap().to_owned(),
        access,
    ];
    for secret in secrets {
        assert!(!logs.contains(&secret), "a secret reached the logs");
    }
    app.stop().await;
}

#[actix_web::test]
async fn production_cookies_are_secure_and_scoped_to_the_domain() {
    let app = spawn_app_with(&[
        ("APP_ENV", "production"),
        ("JWT_SECRET", "a-production-secret-of-at-least-32-chars"),
        ("COOKIE_DOMAIN", ".marketplace.example"),
        // Production never runs the processor sandbox: a real (here unreachable) processor.
        ("PROCESSOR_SECRET_KEY", "sk_test_production_cookies"),
        ("PROCESSOR_API_BASE", "http://127.0.0.1:9"),
        ("PROCESSOR_WEBHOOK_SECRET", "whsec_production_cookies"),
    ])
    .await;
    let response = app
        .post_json(
            "/api/auth/register",
            &j!({"email": "p@example.com", "username": "prod", "password": PASSWORD, "roles": ["empresa"]}),
        )
        .await;
    assert_eq!(response.status(), 201);
    for name in ["refresh_token", "csrf_token"] {
        let cookie = set_cookie(&response, name).unwrap();
        assert!(cookie.contains("Domain="), "{cookie}");
        for attribute in [
            "HttpOnly",
            "SameSite=Strict",
            "Secure",
            "marketplace.example",
        ] {
            assert!(cookie.contains(attribute), "{name}: {cookie}");
        }
    }
    app.stop().await;
}

#[actix_web::test]
async fn the_registration_session_refreshes_with_its_session_id() {
    let app = spawn_app().await;
    let ana = register(&app, "ana", &["experto"]).await;
    let claims = decode_claims(&ana.access_token);
    let session_id = claims["session_id"].as_str().unwrap();
    assert!(
        session_id.starts_with("sess_"),
        "a session id is made when the client sends none"
    );
    let response = app
        .client
        .post(app.url("/api/auth/refresh_secure"))
        .header("X-Session-ID", session_id)
        .header(
            "Cookie",
            format!(
                "refresh_token={}; csrf_token={}",
                ana.refresh_cookie, ana.csrf_token
            ),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(json(response).await["csrf_token"], ana.csrf_token.as_str());
    app.stop().await;
}

/// The sessions' epoch lost from the shared cache (expired, or Redis restarted empty) is set
/// afresh by the next request that keeps a session in memory, and differently each time: no
/// session kept in memory before stays tagged with the epoch in force, and none is tagged
/// with a value a missing key would read as. Only PostgreSQL with Redis keeps sessions.
#[actix_web::test]
async fn a_lost_session_epoch_is_set_afresh() {
    use marketplace::store::session_cache::EPOCH_KEY;
    let app = spawn_app().await;
    let held = app.state.db.engine() == "postgres" && app.state.cache.backend() == "redis";
    if held {
        let listening = || app.state.sessions.is_listening().then_some(());
        crate::helpers::wait_for(std::time::Duration::from_secs(10), listening)
            .await
            .expect("the instance listens for session changes");
    }
    register(&app, "epochs", &["empresa"]).await;
    let token = login(&app, "epochs", PASSWORD).await;
    let mut seen = Vec::new();
    for round in 0..2 {
        app.state.cache.delete(EPOCH_KEY).await.unwrap();
        assert_eq!(me(&app, &token).await.status(), 200, "round {round}");
        let epoch = app.state.cache.get(EPOCH_KEY).await.unwrap();
        assert_eq!(epoch.is_some(), held, "round {round}: {epoch:?}");
        if let Some(epoch) = epoch {
            assert!(epoch.len() >= 16, "round {round}: {epoch}");
            assert!(!seen.contains(&epoch), "round {round}: {epoch} again");
            seen.push(epoch);
        }
        assert_eq!(me(&app, &token).await.status(), 200, "round {round}");
    }
    app.stop().await;
}

/// On PostgreSQL with Redis each instance keeps sessions in memory between requests; a change made on
/// one instance holds on the other from its very next request: a logout, a change of the
/// user's roles and a suspension, each right after the other instance served that session.
#[actix_web::test]
async fn an_instance_holding_a_session_sees_its_end_at_once() {
    let app = spawn_app().await;
    let database = app.database_url();
    let secret = app.state.settings.jwt_secret.as_ref().expect("JWT secret");
    let other = spawn_app_with(&[
        ("DATABASE_URL", &database),
        ("JWT_SECRET", secret.expose()),
        ("CACHE_PREFIX", &app.state.settings.cache_prefix),
    ])
    .await;
    let (_, admin) = crate::helpers::admin(&app, "root").await;
    let user = register(&app, "twin", &["empresa", "experto"]).await;
    // Kept in memory on PostgreSQL with Redis (the epoch shared); read every time otherwise.
    let held = app.state.db.engine() == "postgres" && app.state.cache.backend() == "redis";
    if held {
        let listening = || other.state.sessions.is_listening().then_some(());
        crate::helpers::wait_for(std::time::Duration::from_secs(10), listening)
            .await
            .expect("the other instance listens for session changes");
    }

    for round in 0..10 {
        let token = login(&app, "twin", PASSWORD).await;
        // Served by the other instance, which keeps the session in memory where it can. The
        // login's own change of the account may reach it late and empty its memory once, so
        // it is asked again until it holds the session (a few times at most).
        for _ in 0..2 {
            assert_eq!(me(&other, &token).await.status(), 200, "round {round}");
        }
        for _ in 0..5 {
            if other.state.sessions.is_empty() != held {
                break;
            }
            assert_eq!(me(&other, &token).await.status(), 200, "round {round}");
        }
        assert_eq!(!other.state.sessions.is_empty(), held);
        let logout = app
            .client
            .post(app.url("/api/auth/logout"))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        assert_eq!(logout.status(), 200);
        let after = me(&other, &token).await;
        assert_eq!(
            after.status(),
            401,
            "round {round}: served after its logout"
        );
    }

    let token = login(&app, "twin", PASSWORD).await;
    assert_eq!(
        json(me(&other, &token).await).await["roles"],
        j!(["empresa", "experto"])
    );
    let roles = app
        .client
        .put(app.url(&format!("/api/admin/users/{}/roles", user.id)))
        .bearer_auth(&admin)
        .json(&j!({"roles": ["experto"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(roles.status(), 200);
    assert_eq!(
        json(me(&other, &token).await).await["roles"],
        j!(["experto"])
    );

    // A change that ends nothing reaches the other instance through the database's
    // announcement (the listener), not the epoch.
    let verified = app
        .client
        .put(app.url(&format!("/api/admin/users/{}", user.id)))
        .bearer_auth(&admin)
        .json(&j!({"email_verified": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(verified.status(), 200);
    let mut seen = false;
    for _ in 0..100 {
        if json(me(&other, &token).await).await["email_verified"] == true {
            seen = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(seen, "the other instance kept serving the user as it was");

    let suspend = app
        .client
        .put(app.url(&format!("/api/admin/users/{}/suspend", user.id)))
        .bearer_auth(&admin)
        .json(&j!({"reason": "Chargebacks under review"}))
        .send()
        .await
        .unwrap();
    assert_eq!(suspend.status(), 200);
    assert_eq!(
        me(&other, &token).await.status(),
        401,
        "served after the suspension"
    );
}
