//! The guards around an account's credentials (issue 31): mailed links retired when the
//! password or the address changes, the previous address's undo of an e-mail change, the
//! login budget shared by the current-password checks, the lock-out notice, and the
//! per-address budget of refused registrations.

use marketplace::domain::token::hash_token;
use reqwest::Method;
use serde_json::{Value, json as j};

use crate::helpers::{
    PASSWORD, TestApp, admin, json, login, register, request_as, spawn_app, spawn_app_with,
};
use crate::market::send;

const RESET_SUBJECT: &str = "Reset your password";
const VERIFY_SUBJECT: &str = "Confirm your e-mail address";
const CHANGED_SUBJECT: &str = "Your e-mail address was changed";

/// The token of the newest e-mail to `to` about `subject`.
async fn mailed_token(app: &TestApp, to: &str, subject: &str) -> String {
    app.mails_about(to, subject)
        .await
        .pop()
        .unwrap()
        .token()
        .expect("a token in the link")
}

/// How many e-mails to `to` about `subject` have been written so far.
fn mails_about_now(app: &TestApp, to: &str, subject: &str) -> usize {
    app.mails()
        .iter()
        .filter(|m| m.to.contains(to) && m.subject.contains(subject))
        .count()
}

async fn forgot(app: &TestApp, email: &str) -> String {
    let r = app
        .post_json("/api/auth/forgot-password", &j!({"email": email}))
        .await;
    assert_eq!(r.status(), 200);
    mailed_token(app, email, RESET_SUBJECT).await
}

async fn reset(app: &TestApp, token: &str, new_password: &str) -> reqwest::Response {
    app.post_json(
        "/api/auth/reset-password",
        &j!({"token": token, "new_password": new_password}),
    )
    .await
}

async fn verify(app: &TestApp, token: &str) -> reqwest::Response {
    app.post_json("/api/auth/verify-email", &j!({"token": token}))
        .await
}

async fn undo(app: &TestApp, token: &str) -> reqwest::Response {
    app.post_json("/api/auth/undo-email-change", &j!({"token": token}))
        .await
}

async fn change_email(app: &TestApp, token: &str, new_email: &str) -> reqwest::Response {
    request_as(
        app,
        Method::PUT,
        "/api/users/me/email",
        token,
        Some(&j!({"new_email": new_email, "current_password": PASSWORD})),
    )
    .await
}

async fn change_password(
    app: &TestApp,
    token: &str,
    current: &str,
    new_password: &str,
) -> reqwest::Response {
    request_as(
        app,
        Method::POST,
        "/api/users/me/change-password",
        token,
        Some(&j!({"current_password": current, "new_password": new_password})),
    )
    .await
}

async fn me(app: &TestApp, token: &str) -> reqwest::Response {
    request_as(app, Method::GET, "/api/users/me", token, None).await
}

async fn assert_refused(response: reqwest::Response, status: u16, code: &str) -> Value {
    assert_eq!(response.status(), status);
    let body = json(response).await;
    assert_eq!(body["code"], code, "{body}");
    body
}

/// (e-mail, verified) as stored.
async fn stored_address(app: &TestApp, id: i64) -> (String, bool) {
    let mut conn = app.db.conn().await.unwrap();
    let user = marketplace::store::users::find(conn.exec(), id)
        .await
        .unwrap()
        .expect("user exists");
    (user.email, user.email_verified)
}

/// Rows of `one_time_tokens` whose `token_hash` is `value`.
async fn token_rows(app: &TestApp, value: &str) -> i64 {
    let mut conn = app.db.conn().await.unwrap();
    marketplace::on_exec!(conn.exec(), c => sqlx::query_scalar::<_, i64>(
        "SELECT COUNT(*) FROM one_time_tokens WHERE token_hash = $1",
    )
    .bind(value)
    .fetch_one(c)
    .await)
    .unwrap()
}

// --- D22: mailed links retired; the previous address can undo an e-mail change ---

#[actix_web::test]
async fn a_password_change_or_reset_retires_the_mailed_links() {
    let app = spawn_app().await;
    // Change: the reset link and the verification link mailed before stop working.
    let ana = register(&app, "ana", &["experto"]).await;
    let verification = mailed_token(&app, &ana.email, VERIFY_SUBJECT).await;
    let reset_link = forgot(&app, &ana.email).await;
    let session = login(&app, "ana", PASSWORD).await;
    let r = change_password(&app, &session, PASSWORD, "Changed123!").await;
    assert_eq!(r.status(), 200);
    assert_refused(
        reset(&app, &reset_link, "Taken0ver!").await,
        400,
        "TOKEN_USED",
    )
    .await;
    assert_refused(verify(&app, &verification).await, 400, "TOKEN_USED").await;
    login(&app, "ana", "Changed123!").await;

    // Reset: the verification link mailed before stops working too.
    let bob = register(&app, "bob", &["empresa"]).await;
    let verification = mailed_token(&app, &bob.email, VERIFY_SUBJECT).await;
    let reset_link = forgot(&app, &bob.email).await;
    assert_eq!(reset(&app, &reset_link, "Changed123!").await.status(), 200);
    assert_refused(verify(&app, &verification).await, 400, "TOKEN_USED").await;
    app.stop().await;
}

#[actix_web::test]
async fn an_administrator_setting_the_password_retires_the_mailed_links() {
    let app = spawn_app().await;
    let (_, admin_token) = admin(&app, "root").await;
    let ana = register(&app, "ana", &["experto"]).await;
    let verification = mailed_token(&app, &ana.email, VERIFY_SUBJECT).await;
    let reset_link = forgot(&app, &ana.email).await;
    let r = request_as(
        &app,
        Method::PUT,
        &format!("/api/admin/users/{}/change-password", ana.id),
        &admin_token,
        Some(&j!({"new_password": "Admin5et!"})),
    )
    .await;
    assert_eq!(r.status(), 200);
    assert_refused(
        reset(&app, &reset_link, "Taken0ver!").await,
        400,
        "TOKEN_USED",
    )
    .await;
    assert_refused(verify(&app, &verification).await, 400, "TOKEN_USED").await;
    login(&app, "ana", "Admin5et!").await;
    app.stop().await;
}

#[actix_web::test]
async fn an_email_change_retires_links_and_the_previous_address_can_undo_it() {
    let app = spawn_app().await;
    let ana = register(&app, "ana", &["empresa"]).await;
    let first_verification = mailed_token(&app, &ana.email, VERIFY_SUBJECT).await;
    let reset_link = forgot(&app, &ana.email).await;
    let session = login(&app, "ana", PASSWORD).await;
    let other_session = login(&app, "ana", PASSWORD).await;

    let r = change_email(&app, &session, "ana.new@example.com").await;
    assert_eq!(r.status(), 200);
    // The links read in the old mailbox no longer act on the account.
    assert_refused(
        reset(&app, &reset_link, "Taken0ver!").await,
        400,
        "TOKEN_USED",
    )
    .await;
    assert_refused(verify(&app, &first_verification).await, 400, "TOKEN_USED").await;

    // The previous address is told, with a link that undoes the change.
    let notice = app
        .mails_about(&ana.email, CHANGED_SUBJECT)
        .await
        .pop()
        .unwrap();
    assert!(
        notice.text.contains("ana.new@example.com"),
        "{}",
        notice.text
    );
    assert!(
        notice
            .text
            .contains("http://frontend.test/undo-email-change?token=")
    );
    let undo_token = notice.token().expect("an undo link");
    // Kept only as a hash, like the other mailed tokens.
    assert_eq!(token_rows(&app, &undo_token).await, 0);
    assert_eq!(token_rows(&app, &hash_token(&undo_token)).await, 1);
    let new_verification = mailed_token(&app, "ana.new@example.com", VERIFY_SUBJECT).await;

    // While the undo link is valid, nobody else may take the previous address.
    let squatter = app
        .post_json(
            "/api/auth/register",
            &j!({"email": ana.email, "username": "squatter", "password": PASSWORD, "roles": ["empresa"]}),
        )
        .await;
    assert_refused(squatter, 409, "EMAIL_EXISTS").await;

    assert_refused(undo(&app, "not-a-token").await, 400, "INVALID_TOKEN").await;
    let r = undo(&app, &undo_token).await;
    assert_eq!(r.status(), 200);
    assert!(json(r).await["message"].is_string());
    assert_eq!(
        stored_address(&app, ana.id).await,
        (ana.email.clone(), true),
        "the previous address is back, verified by its mailbox"
    );
    // Every session ended; the link to the new address and the undo link are spent.
    for token in [&session, &other_session, &ana.access_token] {
        assert_refused(me(&app, token).await, 401, "TOKEN_REVOKED").await;
    }
    assert_refused(verify(&app, &new_verification).await, 400, "TOKEN_USED").await;
    assert_refused(undo(&app, &undo_token).await, 400, "TOKEN_USED").await;
    login(&app, &ana.email, PASSWORD).await;
    let refused = app
        .post_json(
            "/api/auth/login",
            &j!({"username": "ana.new@example.com", "password": PASSWORD}),
        )
        .await;
    assert_eq!(refused.status(), 401);
    app.stop().await;
}

#[actix_web::test]
async fn an_undo_link_outlives_later_changes_but_not_seven_days() {
    let app = spawn_app().await;
    let ana = register(&app, "ana", &["experto"]).await;
    let session = login(&app, "ana", PASSWORD).await;
    // A → B → C → D, a password change in between: each previous address gets its link.
    let mut links = Vec::new();
    for (from, to) in [
        ("ana@example.com", "b@example.com"),
        ("b@example.com", "c@example.com"),
        ("c@example.com", "d@example.com"),
    ] {
        assert_eq!(change_email(&app, &session, to).await.status(), 200);
        links.push(mailed_token(&app, from, CHANGED_SUBJECT).await);
        if to == "b@example.com" {
            let r = change_password(&app, &session, PASSWORD, PASSWORD).await;
            assert_eq!(r.status(), 200);
        }
    }
    // Undoing the middle change spends the link of the change after it, never the one before:
    // whoever made the later changes cannot cancel the owner's undo.
    assert_eq!(undo(&app, &links[1]).await.status(), 200);
    assert_eq!(stored_address(&app, ana.id).await.0, "b@example.com");
    assert_refused(undo(&app, &links[2]).await, 400, "TOKEN_USED").await;
    assert_eq!(undo(&app, &links[0]).await.status(), 200);
    assert_eq!(stored_address(&app, ana.id).await.0, "ana@example.com");

    let session = login(&app, "ana", PASSWORD).await;
    assert_eq!(
        change_email(&app, &session, "e@example.com").await.status(),
        200
    );
    // The notice leaves beside the answer, not before it.
    crate::helpers::wait_for(std::time::Duration::from_secs(5), || {
        (mails_about_now(&app, "ana@example.com", CHANGED_SUBJECT) == 2).then_some(())
    })
    .await
    .expect("a second notice to the first address");
    let link = mailed_token(&app, "ana@example.com", CHANGED_SUBJECT).await;
    app.clock
        .advance(chrono::Duration::days(7) + chrono::Duration::minutes(1));
    assert_refused(undo(&app, &link).await, 400, "TOKEN_EXPIRED").await;
    assert_eq!(stored_address(&app, ana.id).await.0, "e@example.com");
    // Once lapsed, the address is free again.
    let r = app
        .post_json(
            "/api/auth/register",
            &j!({"email": "ana@example.com", "username": "other_ana", "password": PASSWORD, "roles": ["experto"]}),
        )
        .await;
    assert_eq!(r.status(), 201);
    app.stop().await;
}

// --- D25: the current-password check is limited like a login ---

async fn login_status(app: &TestApp, name: &str, password: &str) -> reqwest::Response {
    app.post_json(
        "/api/auth/login",
        &j!({"username": name, "password": password}),
    )
    .await
}

fn assert_rate_limited(response: &reqwest::Response) {
    assert_eq!(response.status(), 429);
    let retry: u64 = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry), "Retry-After {retry}");
}

#[actix_web::test]
async fn wrong_current_passwords_spend_the_login_budget_and_end_the_session() {
    let app = spawn_app_with(&[("LOGIN_RATE_LIMIT_MAX_ATTEMPTS_PER_USER", "5")]).await;
    // The session registration opened (a thief's stolen token, say): no login spent yet.
    let ana = register(&app, "ana", &["experto"]).await;
    for attempt in 1..=5 {
        let r = send(
            &app,
            Method::POST,
            "/api/users/me/change-password",
            &ana,
            Some(&j!({"current_password": format!("Guess{attempt}23!"), "new_password": "Taken0ver!"})),
        )
        .await;
        assert_refused(r, 400, "INVALID_PASSWORD").await;
    }
    // The fifth wrong guess ended the session that made them …
    let r = send(&app, Method::GET, "/api/users/me", &ana, None).await;
    assert_refused(r, 401, "TOKEN_REVOKED").await;
    let r = app
        .post_json(
            "/api/auth/refresh",
            &j!({"refresh_token": ana.refresh_cookie}),
        )
        .await;
    assert_eq!(r.status(), 401, "nor can it be renewed");
    // … and spent the account's login budget: a login waits out the window, as after five
    // wrong logins.
    let r = login_status(&app, "ana", PASSWORD).await;
    assert_rate_limited(&r);
    assert_eq!(json(r).await["code"], "RATE_LIMITED");
    app.stop().await;
}

#[actix_web::test]
async fn the_email_change_check_shares_the_budget_with_logins() {
    let app = spawn_app_with(&[("LOGIN_RATE_LIMIT_MAX_ATTEMPTS_PER_USER", "3")]).await;
    register(&app, "ana", &["empresa"]).await;
    let session = login(&app, "ana", PASSWORD).await;
    for _ in 0..2 {
        let r = request_as(
            &app,
            Method::PUT,
            "/api/users/me/email",
            &session,
            Some(&j!({"new_email": "thief@example.com", "current_password": "Guess123!"})),
        )
        .await;
        assert_refused(r, 400, "INVALID_PASSWORD").await;
    }
    // One login and two checks: the budget of three is spent, whichever route asks next.
    let r = change_email(&app, &session, "thief@example.com").await;
    assert_rate_limited(&r);
    assert_eq!(json(r).await["code"], "RATE_LIMITED");
    let r = change_password(&app, &session, PASSWORD, "Taken0ver!").await;
    assert_rate_limited(&r);
    assert_rate_limited(&login_status(&app, "ana", PASSWORD).await);
    // Two failures are fewer than the budget: the session lives on, the address unchanged.
    assert_eq!(me(&app, &session).await.status(), 200);
    let mut conn = app.db.conn().await.unwrap();
    let user = marketplace::store::users::find_by_login(conn.exec(), "ana")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(user.email, "ana@example.com");
    app.stop().await;
}

// --- D6: the owner hears of a lock-out, at most once an hour ---

const LOCKED_SUBJECT: &str = "Sign-in to your account is paused";

/// Lock-out notices recorded for `user_id` (each carries one e-mail to the owner).
async fn lockout_notices(app: &TestApp, user_id: i64) -> i64 {
    let mut conn = app.db.conn().await.unwrap();
    marketplace::on_exec!(conn.exec(), c => sqlx::query_scalar::<_, i64>(
        "SELECT COUNT(*) FROM events WHERE kind = 'user.login_locked' AND aggregate_id = $1",
    )
    .bind(user_id)
    .fetch_one(c)
    .await)
    .unwrap()
}

/// Wrong logins for `name` until one is refused 429 after at least one was answered 401: the
/// account was locked by a wrong password of this call (a lock still running from an earlier
/// call is waited out). The 401 answers' bodies.
async fn lock_out(app: &TestApp, name: &str) -> Vec<Value> {
    let mut refused = Vec::new();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while std::time::Instant::now() < until {
        let r = login_status(app, name, "Wrong-guess1").await;
        match r.status().as_u16() {
            401 => refused.push(json(r).await),
            429 if !refused.is_empty() => return refused,
            429 => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
            other => panic!("unexpected {other}"),
        }
    }
    panic!("{name} was not locked out");
}

#[actix_web::test]
async fn a_lock_out_by_wrong_passwords_is_mailed_to_the_owner_at_most_once_an_hour() {
    let app = spawn_app_with(&[
        ("LOGIN_RATE_LIMIT_MAX_ATTEMPTS_PER_USER", "3"),
        ("LOGIN_RATE_LIMIT_WINDOW_SECONDS", "1"),
    ])
    .await;
    let ana = register(&app, "ana", &["experto"]).await;
    let bob = register(&app, "bob", &["experto"]).await;

    let answers = lock_out(&app, "ana").await;
    // The attacker hears nothing new: every wrong password got the same answer.
    assert!(answers.len() >= 3);
    assert!(answers.iter().all(|a| a == &answers[0]), "{answers:?}");
    assert_eq!(answers[0]["code"], "INVALID_CREDENTIALS");

    let mail = app
        .mails_about(&ana.email, LOCKED_SUBJECT)
        .await
        .pop()
        .unwrap();
    assert!(
        mail.text.contains("http://frontend.test/forgot-password"),
        "{}",
        mail.text
    );
    assert!(
        mail.token().is_none(),
        "no reset token travels through the outbox"
    );
    assert!(!mail.text.contains("Wrong-guess1"));
    assert_eq!(lockout_notices(&app, ana.id).await, 1);
    assert_eq!(lockout_notices(&app, bob.id).await, 0);

    // Locked again within the hour: no second notice.
    lock_out(&app, "ana").await;
    assert_eq!(lockout_notices(&app, ana.id).await, 1);
    // An hour later by the service clock, the next lock-out is told again.
    app.clock.advance(chrono::Duration::minutes(61));
    lock_out(&app, "ana").await;
    assert_eq!(lockout_notices(&app, ana.id).await, 2);
    crate::helpers::wait_for(std::time::Duration::from_secs(5), || {
        (mails_about_now(&app, &ana.email, LOCKED_SUBJECT) == 2).then_some(())
    })
    .await
    .expect("the second notice is sent");
    // A name of no account locks nothing anybody is told of.
    lock_out(&app, "nobody").await;
    app.stop().await;
}

#[actix_web::test]
async fn wrong_current_passwords_that_lock_the_account_are_told_too() {
    let app = spawn_app_with(&[("LOGIN_RATE_LIMIT_MAX_ATTEMPTS_PER_USER", "2")]).await;
    let ana = register(&app, "ana", &["empresa"]).await;
    let session = login(&app, "ana", PASSWORD).await;
    let r = change_password(&app, &session, "Guess123!", "Taken0ver!").await;
    assert_refused(r, 400, "INVALID_PASSWORD").await;
    app.mails_about(&ana.email, LOCKED_SUBJECT).await;
    assert_eq!(lockout_notices(&app, ana.id).await, 1);
    app.stop().await;
}

// --- D16: refused registrations spend the address's login budget ---

async fn register_as(app: &TestApp, email: &str, username: &str) -> reqwest::Response {
    app.post_json(
        "/api/auth/register",
        &j!({"email": email, "username": username, "password": PASSWORD, "roles": ["experto"]}),
    )
    .await
}

#[actix_web::test]
async fn refused_registrations_spend_the_address_login_budget() {
    let app = spawn_app_with(&[("LOGIN_RATE_LIMIT_MAX_ATTEMPTS_PER_IP", "3")]).await;
    // Registrations that succeed count nothing.
    let ana = register(&app, "ana", &["experto"]).await;
    register(&app, "bob", &["experto"]).await;
    // Three refusals, each still told apart.
    assert_refused(
        register_as(&app, "ANA@example.com", "ana2").await,
        409,
        "EMAIL_EXISTS",
    )
    .await;
    assert_refused(
        register_as(&app, "new@example.com", "Bob").await,
        409,
        "USERNAME_EXISTS",
    )
    .await;
    assert_refused(
        register_as(&app, &ana.email, "ana3").await,
        409,
        "EMAIL_EXISTS",
    )
    .await;
    // The budget is spent: a free address answers as a taken one does, and nothing is created.
    let free = register_as(&app, "carl@example.com", "carl").await;
    assert_rate_limited(&free);
    assert_eq!(json(free).await["code"], "RATE_LIMITED");
    let taken = register_as(&app, &ana.email, "dave").await;
    assert_rate_limited(&taken);
    let mut conn = app.db.conn().await.unwrap();
    let carl = marketplace::store::users::find_by_login(conn.exec(), "carl")
        .await
        .unwrap();
    assert!(carl.is_none());
    drop(conn);
    // The same budget as logins from the address.
    assert_rate_limited(&login_status(&app, "ana", PASSWORD).await);
    app.stop().await;
}
