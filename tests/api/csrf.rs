//! The CSRF value of a cookie session (issue 62): a random nonce tagged for the session.
//! Refresh and verify keep the cookie's own value and renew its max age; without the cookie,
//! or with one that is not this session's, they make a new one. Every value made for a
//! session passes its double submit for the session's life; no other session's does.

use crate::helpers::{PASSWORD, TestApp, cookie_value, json, register, set_cookie, spawn_app};
use Renewal::{Refresh, Verify};
use serde_json::json as j;

/// One cookie session: its window's id, its current access and refresh tokens, and the CSRF
/// value its login handed out.
struct Window {
    session_id: &'static str,
    access: String,
    refresh: String,
    csrf: String,
}

async fn login(app: &TestApp, username: &str, session_id: &'static str) -> Window {
    let response = app
        .client
        .post(app.url("/api/auth/login_secure"))
        .header("X-Session-ID", session_id)
        .json(&j!({"username": username, "password": PASSWORD}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "login_secure of {username}");
    let refresh = cookie_value(&response, "refresh_token").unwrap();
    let body = json(response).await;
    Window {
        session_id,
        access: body["access_token"].as_str().unwrap().to_owned(),
        refresh,
        csrf: body["csrf_token"].as_str().unwrap().to_owned(),
    }
}

/// The two routes that hand out a session's CSRF value again.
#[derive(Clone, Copy, Debug)]
enum Renewal {
    Refresh,
    Verify,
}

/// `refresh_secure` or `verify_secure` of `window`, sending `csrf` as the `csrf_token` cookie
/// when given. Checks the answer, keeps the window's new tokens and returns the CSRF value
/// handed out (body and cookie agree, the cookie's max age renewed).
async fn renew(app: &TestApp, window: &mut Window, via: Renewal, csrf: Option<&str>) -> String {
    let cookie = match csrf {
        Some(csrf) => format!("refresh_token={}; csrf_token={csrf}", window.refresh),
        None => format!("refresh_token={}", window.refresh),
    };
    let request = match via {
        Renewal::Refresh => app.client.post(app.url("/api/auth/refresh_secure")),
        Renewal::Verify => app.client.get(app.url("/api/auth/verify_secure")),
    };
    let response = request
        .header("X-Session-ID", window.session_id)
        .header("Cookie", cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{via:?}");
    let set = set_cookie(&response, "csrf_token").expect("csrf cookie set");
    assert!(
        set.contains("Max-Age=900"),
        "{via:?} renews the max age: {set}"
    );
    let cookie = cookie_value(&response, "csrf_token").unwrap();
    if let Some(rotated) = cookie_value(&response, "refresh_token") {
        window.refresh = rotated;
    }
    let body = json(response).await;
    assert_eq!(
        body["csrf_token"],
        cookie.as_str(),
        "{via:?}: body and cookie"
    );
    window.access = body["access_token"].as_str().unwrap().to_owned();
    cookie
}

/// A mutating request of `window` sending `csrf` as cookie and header: the status and code.
async fn mutate(app: &TestApp, window: &Window, csrf: &str) -> (u16, String) {
    let response = app
        .client
        .put(app.url("/api/users/me"))
        .bearer_auth(&window.access)
        .header("Cookie", format!("csrf_token={csrf}"))
        .header("X-CSRF-Token", csrf)
        .json(&j!({}))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let code = json(response).await["code"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    (status, code)
}

async fn accepted(app: &TestApp, window: &Window, csrf: &str) -> bool {
    mutate(app, window, csrf).await.0 == 200
}

async fn refused(app: &TestApp, window: &Window, csrf: &str) -> bool {
    mutate(app, window, csrf).await == (403, "CSRF_FAILED".into())
}

#[actix_web::test]
async fn refresh_and_verify_keep_the_cookies_own_value() {
    let app = spawn_app().await;
    register(&app, "ana", &["experto"]).await;
    let mut ana = login(&app, "ana", "sess_keep").await;
    let first = ana.csrf.clone();

    // The session's first value, sent as the cookie, comes back as it is.
    assert_eq!(renew(&app, &mut ana, Refresh, Some(&first)).await, first);
    assert_eq!(renew(&app, &mut ana, Verify, Some(&first)).await, first);
    // A second value of the session (made by a refresh without the cookie) is kept in turn:
    // the cookie's value is echoed, not one value per session.
    let second = renew(&app, &mut ana, Refresh, None).await;
    assert_ne!(
        second, first,
        "a refresh without the cookie makes a new value"
    );
    assert_eq!(renew(&app, &mut ana, Refresh, Some(&second)).await, second);
    assert_eq!(renew(&app, &mut ana, Verify, Some(&second)).await, second);
    assert!(accepted(&app, &ana, &second).await);
    app.stop().await;
}

/// Values made for a session all stay valid until it ends: the binding is to the session,
/// with no value kept on the server, so a value a refresh replaced (still held by a request
/// in flight, or another tab of the window) keeps working; the session's end (logout,
/// revocation) ends them all.
#[actix_web::test]
async fn without_the_cookie_a_new_value_is_made_and_both_work() {
    let app = spawn_app().await;
    register(&app, "ana", &["experto"]).await;
    let mut ana = login(&app, "ana", "sess_new").await;
    let login_value = ana.csrf.clone();

    let refreshed = renew(&app, &mut ana, Refresh, None).await;
    assert_ne!(
        refreshed, login_value,
        "refresh without the cookie: a new value"
    );
    assert!(
        accepted(&app, &ana, &refreshed).await,
        "the new value works"
    );
    assert!(accepted(&app, &ana, &login_value).await, "the old one too");

    let verified = renew(&app, &mut ana, Verify, None).await;
    assert!(
        ![&login_value, &refreshed].contains(&&verified),
        "verify: a new value"
    );
    assert!(accepted(&app, &ana, &verified).await);

    // Cookie and header must still be one value, even two of the session's own.
    let mixed = app
        .client
        .put(app.url("/api/users/me"))
        .bearer_auth(&ana.access)
        .header("Cookie", format!("csrf_token={login_value}"))
        .header("X-CSRF-Token", &refreshed)
        .json(&j!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(mixed.status(), 403, "cookie and header differ");
    app.stop().await;
}

#[actix_web::test]
async fn another_sessions_value_is_refused_and_never_echoed() {
    let app = spawn_app().await;
    register(&app, "ana", &["experto"]).await;
    register(&app, "bob", &["empresa"]).await;
    let mut ana = login(&app, "ana", "sess_ana1").await;
    let ana_again = login(&app, "ana", "sess_ana2").await;
    let bob = login(&app, "bob", "sess_bob").await;
    let own = ana.csrf.clone();

    let foreign = [
        (ana_again.csrf.as_str(), "the same user's second session"),
        (bob.csrf.as_str(), "another user's session"),
        ("attackerchosen1234", "a value the client chose"),
    ];
    for (value, whose) in foreign {
        assert!(refused(&app, &ana, value).await, "{whose}: refused");
        for via in [Refresh, Verify] {
            let made = renew(&app, &mut ana, via, Some(value)).await;
            assert_ne!(made, value, "{whose}: not echoed ({via:?})");
            assert_ne!(made, own, "{whose}: a new value ({via:?})");
            assert!(
                accepted(&app, &ana, &made).await,
                "{whose}: the new one works"
            );
        }
    }
    // The other sessions keep their own values.
    assert!(accepted(&app, &ana_again, &ana_again.csrf).await);
    assert!(refused(&app, &ana_again, &own).await);
    assert!(accepted(&app, &bob, &bob.csrf).await);
    app.stop().await;
}
