//! Administration of accounts and projects: filtered lists, suspension and status ending
//! sessions at once, roles at their edges, removal in three steps, forced project states.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json as j};

use crate::escrow::{authorise, deal};
use crate::helpers::{Account, PASSWORD, json, register, request_as};
use crate::market::{Market, code, wait_notification};

async fn admin_put(m: &Market, path: &str, body: Value) -> reqwest::Response {
    m.as_admin(Method::PUT, path, Some(&body)).await
}

async fn put_as(m: &Market, token: &str, path: &str, body: Value) -> reqwest::Response {
    request_as(&m.app, Method::PUT, path, token, Some(&body)).await
}

async fn login_status(m: &Market, username: &str, password: &str) -> (StatusCode, Value) {
    let r = m
        .app
        .post_json(
            "/api/auth/login",
            &j!({"username": username, "password": password}),
        )
        .await;
    let status = r.status();
    (status, json(r).await)
}

/// Runs the outbox until `to` has an e-mail whose subject contains `part`.
async fn mail_with_subject(m: &Market, to: &str, part: &str) {
    for _ in 0..250 {
        let _ = m.app.state.outbox.trigger().await;
        if m.app
            .mails()
            .iter()
            .any(|mail| mail.to.contains(to) && mail.subject.contains(part))
        {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("no e-mail to {to} about {part}");
}

async fn me_status(m: &Market, account: &Account) -> StatusCode {
    m.send(account, Method::GET, "/api/users/me", None)
        .await
        .status()
}

#[actix_web::test]
async fn the_user_list_filters_by_role_status_verification_and_literal_text() {
    let m = Market::open().await;
    let company = m.company("acme_co").await;
    let _expert = m.member("pct_expert", "experto", false, false).await;
    let other = register(&m.app, "plain_user", &["experto"]).await;

    let list = |q: &str| {
        let m = &m;
        let q = q.to_owned();
        async move {
            let r = m
                .as_admin(Method::GET, &format!("/api/admin/users{q}"), None)
                .await;
            assert_eq!(r.status(), StatusCode::OK, "{q}");
            let body = json(r).await;
            let names: Vec<String> = body["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|u| u["username"].as_str().unwrap().to_owned())
                .collect();
            (body["total"].as_i64().unwrap(), names)
        }
    };
    let (total, names) = list("?role=empresa").await;
    assert_eq!((total, names), (1, vec!["acme_co".to_owned()]));

    let (_, names) = list("?verification=verified").await;
    assert_eq!(names, vec!["acme_co".to_owned()]);
    let (_, names) = list("?search=PCT_").await;
    assert_eq!(names, vec!["pct_expert".to_owned()]);
    // `%` and `_` are characters, not wildcards.
    assert_eq!(list("?search=%25").await.0, 0);
    assert_eq!(list("?search=e_c").await.1, vec!["acme_co".to_owned()]);
    assert_eq!(list("?search=a_m").await.0, 0);
    // A profile's name, case and accents folded both ways, by substring.
    {
        let mut conn = m.app.db.conn().await.unwrap();
        let id = marketplace::store::profiles::insert(
            conn.exec(),
            other.id,
            "experto",
            None,
            m.app.clock.now(),
        )
        .await
        .unwrap();
        marketplace::on_exec!(conn.exec(), c => sqlx::query(
            "UPDATE profiles SET full_name = 'María García' WHERE id = $1")
            .bind(id).execute(c).await.map(drop))
        .unwrap();
    }
    for found in [
        "?search=garcia",
        "?search=GARC%C3%8DA",
        "?search=ia%20garc",
        "?search=ar%C3%AD",
    ] {
        assert_eq!(
            list(found).await.1,
            vec!["plain_user".to_owned()],
            "{found}"
        );
    }
    // Each account's search text (migration 0039) follows its names, its username and its
    // profiles; a search beside another filter is counted through the accounts.
    let exec = |sql: &'static str| {
        let m = &m;
        async move {
            let mut conn = m.app.db.conn().await.unwrap();
            marketplace::on_exec!(conn.exec(), c => sqlx::query(sql)
                .bind(other.id).execute(c).await.map(drop))
            .unwrap();
        }
    };
    exec("UPDATE profiles SET full_name = 'Núñez' WHERE user_id = $1").await;
    assert_eq!(list("?search=garcia").await, (0, vec![]));
    assert_eq!(list("?search=NUNEZ").await.1, vec!["plain_user".to_owned()]);
    exec("UPDATE users SET username = 'renamed_user' WHERE id = $1").await;
    assert_eq!(
        list("?search=renamed").await,
        (1, vec!["renamed_user".to_owned()])
    );
    // Still found by its e-mail; the old username alone is gone.
    assert_eq!(list("?search=plain_user@").await.0, 1);
    exec("UPDATE users SET email = 'renamed@example.com' WHERE id = $1").await;
    assert_eq!(list("?search=plain_").await.0, 0);
    assert_eq!(list("?search=nunez&role=experto").await.0, 1);
    assert_eq!(list("?search=nunez&role=empresa").await.0, 0);
    exec("DELETE FROM profiles WHERE user_id = $1").await;
    assert_eq!(list("?search=nunez").await.0, 0);
    assert_eq!(list("?search=renamed").await.0, 1);

    let r = admin_put(
        &m,
        &format!("/api/admin/users/{}/suspend", company.id),
        j!({"reason": "Unpaid invoices pending review"}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        list("?status=suspended").await.1,
        vec!["acme_co".to_owned()]
    );
    assert!(
        !list("?status=active")
            .await
            .1
            .contains(&"acme_co".to_owned())
    );

    let r = m
        .as_admin(Method::GET, "/api/admin/users?status=gone", None)
        .await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let r = m
        .send(&company, Method::GET, "/api/admin/users", None)
        .await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "its session ended");
    let outsider = register(&m.app, "outsider", &["empresa"]).await;
    let r = m
        .send(&outsider, Method::GET, "/api/admin/users", None)
        .await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);

    // A role held by most accounts, or a search matching most, paged one at a time (on
    // SQLite probed as the accounts are walked newest first, then looked up as the page's end
    // grows), gives what one page of all gives.
    for name in ["role_a", "role_b", "role_c", "role_d"] {
        register(&m.app, name, &["experto"]).await;
    }
    for (filter, expected) in [("role=experto", 6), ("search=role_", 4)] {
        let (total, all) = list(&format!("?{filter}")).await;
        assert_eq!(total, expected, "{filter}: {all:?}");
        let mut paged = Vec::new();
        for number in 1..=total {
            let path = format!("?{filter}&size=1&page={number}");
            let r = m
                .as_admin(Method::GET, &format!("/api/admin/users{path}"), None)
                .await;
            let body = json(r).await;
            assert_eq!(body["total"], total, "{path}");
            paged.push(body["items"][0]["username"].as_str().unwrap().to_owned());
        }
        assert_eq!(paged, all, "{filter}");
    }
}

#[actix_web::test]
async fn suspension_ends_sessions_at_once_and_lapses_on_the_service_clock() {
    let m = Market::open().await;
    let user = register(&m.app, "suspect", &["empresa"]).await;
    assert_eq!(me_status(&m, &user).await, StatusCode::OK);

    let r = admin_put(
        &m,
        &format!("/api/admin/users/{}/suspend", user.id),
        j!({"reason": "short"}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);

    let until = m.app.clock.now() + chrono::Duration::days(3);
    let r = admin_put(
        &m,
        &format!("/api/admin/users/{}/suspend", user.id),
        j!({"reason": "Suspicious payments under review", "until": until}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    let body = json(r).await;
    assert_eq!(body["status"], "suspended");
    assert_eq!(
        body["suspension_reason"],
        "Suspicious payments under review"
    );

    // The existing access token and the refresh cookie stop working at once.
    assert_eq!(me_status(&m, &user).await, StatusCode::UNAUTHORIZED);
    let r = m
        .app
        .client
        .post(m.app.url("/api/auth/refresh_secure"))
        .header("Cookie", format!("refresh_token={}", user.refresh_cookie))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let (status, body) = login_status(&m, "suspect", PASSWORD).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(code(&body), "ACCOUNT_SUSPENDED");

    // Once the suspension's end has passed, login works and lifts it.
    m.app
        .clock
        .advance(chrono::Duration::days(3) + chrono::Duration::seconds(1));
    let (status, _) = login_status(&m, "suspect", PASSWORD).await;
    assert_eq!(status, StatusCode::OK);
    let admin_token = crate::helpers::login(&m.app, "root", PASSWORD).await;
    let r = request_as(
        &m.app,
        Method::GET,
        &format!("/api/admin/users/{}", user.id),
        &admin_token,
        None,
    )
    .await;
    assert_eq!(json(r).await["status"], "active");

    // Deactivation: 403 ACCOUNT_INACTIVE at login; reactivation lets the user back in.
    let r = put_as(
        &m,
        &admin_token,
        &format!("/api/admin/users/{}/status", user.id),
        j!({"status": "inactive"}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    let (status, body) = login_status(&m, "suspect", PASSWORD).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::FORBIDDEN, "ACCOUNT_INACTIVE")
    );
    let r = put_as(
        &m,
        &admin_token,
        &format!("/api/admin/users/{}/status", user.id),
        j!({"status": "active"}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        login_status(&m, "suspect", PASSWORD).await.0,
        StatusCode::OK
    );

    // Administrators cannot suspend themselves.
    let r = put_as(
        &m,
        &admin_token,
        &format!("/api/admin/users/{}/suspend", m.admin_id),
        j!({"reason": "Testing my own suspension"}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
}

#[actix_web::test]
async fn an_administrator_sets_a_password_and_recontacts_a_company() {
    let m = Market::open().await;
    let company = m.company("quiet_co").await;
    let r = admin_put(
        &m,
        &format!("/api/admin/users/{}/change-password", company.id),
        j!({"new_password": "weak"}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let r = admin_put(
        &m,
        &format!("/api/admin/users/{}/change-password", company.id),
        j!({"new_password": "N3w-Secret!"}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(me_status(&m, &company).await, StatusCode::UNAUTHORIZED);
    assert_eq!(
        login_status(&m, "quiet_co", PASSWORD).await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        login_status(&m, "quiet_co", "N3w-Secret!").await.0,
        StatusCode::OK
    );
    mail_with_subject(&m, &company.email, "changed by an administrator").await;
    // Not their own password: that needs the current one, so a stolen token cannot take the
    // account over (nor end the administrator's own sessions).
    let r = admin_put(
        &m,
        &format!("/api/admin/users/{}/change-password", m.admin_id),
        j!({"new_password": "N3w-Secret!"}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    assert_eq!(code(&json(r).await), "CANNOT_TARGET_SELF");
    let r = m.as_admin(Method::GET, "/api/users/me", None).await;
    assert_eq!(
        r.status(),
        StatusCode::OK,
        "the administrator's session lives on"
    );

    let r = m
        .as_admin(
            Method::POST,
            &format!("/api/admin/users/{}/recontact", company.id),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let body = json(r).await;
    assert_eq!(body["recontacted_by"], m.admin_id);
    assert_eq!(
        m.count(
            "SELECT COUNT(*) FROM profiles WHERE user_id = $1 AND recontacted_at IS NOT NULL AND recontacted_by IS NOT NULL",
            company.id
        )
        .await,
        1
    );
    mail_with_subject(&m, &company.email, "next project").await;

    let expert = m.expert("busy_ex").await;
    let r = m
        .as_admin(
            Method::POST,
            &format!("/api/admin/users/{}/recontact", expert.id),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
}

#[actix_web::test]
async fn roles_keep_one_role_an_active_role_and_an_administrator() {
    let m = Market::open().await;
    let user = register(&m.app, "dual_user", &["empresa", "experto"]).await;
    let path = format!("/api/admin/users/{}/roles", user.id);
    let r = admin_put(&m, &path, j!({"roles": []})).await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let r = admin_put(&m, &path, j!({"roles": ["owner"]})).await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    // Removing the active role (empresa, the first chosen) makes the first remaining active.
    let r = admin_put(&m, &path, j!({"roles": ["experto"]})).await;
    assert_eq!(r.status(), StatusCode::OK);
    let body = json(r).await;
    assert_eq!(body["roles"], j!(["experto"]));
    assert_eq!(body["active_role"], "experto");
    let r = admin_put(
        &m,
        &path,
        j!({"roles": ["experto", "admin"], "active_role": "admin"}),
    )
    .await;
    assert_eq!(json(r).await["active_role"], "admin");

    // Nobody removes their own admin role.
    let r = admin_put(
        &m,
        &format!("/api/admin/users/{}/roles", m.admin_id),
        j!({"roles": ["empresa"]}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    assert_eq!(code(&json(r).await), "CANNOT_REMOVE_OWN_ADMIN");

    // Two administrators removing each other at once: one wins, one administrator stays.
    let second = crate::helpers::login(&m.app, "dual_user", PASSWORD).await;
    let root_path = format!("/api/admin/users/{}/roles", m.admin_id);
    let body = j!({"roles": ["empresa"]});
    let (a, b) = tokio::join!(
        request_as(&m.app, Method::PUT, &path, &m.admin_token, Some(&body)),
        request_as(&m.app, Method::PUT, &root_path, &second, Some(&body)),
    );
    let statuses = [a.status(), b.status()];
    assert!(
        statuses.contains(&StatusCode::OK),
        "one removal goes through: {statuses:?}"
    );
    assert_eq!(
        m.count(
            "SELECT COUNT(*) FROM user_roles r JOIN users u ON u.id = r.user_id
             WHERE r.role = 'admin' AND u.is_active = TRUE AND $1 = $1",
            0
        )
        .await,
        1,
        "exactly one administrator remains"
    );
}

#[actix_web::test]
async fn removal_waits_for_money_then_erases_personal_data_and_keeps_payments() {
    let m = Market::open().await;
    let d = deal(&m, "gone", [100.0, 100.0, 100.0]).await;
    authorise(&m, d.first_payment).await;
    let expert = d.expert.clone();
    let (_, second_admin) = crate::helpers::admin(&m.app, "second_admin").await;
    let second_id = m
        .count(
            "SELECT id FROM users WHERE username = 'second_admin' AND $1 = $1",
            0,
        )
        .await;

    let base = format!("/api/admin/users/{}", expert.id);
    let r = m.as_admin(Method::DELETE, &base, None).await;
    assert_eq!(code(&json(r).await), "DELETION_NOT_CONFIRMED");
    let r = m
        .as_admin(
            Method::POST,
            &format!("{base}/deletion-request"),
            Some(&j!({"reason": "The expert asked to leave the platform"})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    wait_notification(&m.app, second_id, "user_deletion_requested").await;
    let r = m
        .as_admin(
            Method::POST,
            &format!("{base}/deletion-request"),
            Some(&j!({"reason": "The expert asked to leave the platform"})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    let r = request_as(
        &m.app,
        Method::POST,
        &format!("{base}/deletion-confirm"),
        &second_admin,
        None,
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(me_status(&m, &expert).await, StatusCode::UNAUTHORIZED);
    let (status, _) = login_status(&m, &expert.username, PASSWORD).await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // Money held for the expert: the erasure waits.
    let r = m.as_admin(Method::DELETE, &base, None).await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    assert_eq!(code(&json(r).await), "USER_HAS_ACTIVE_WORK");

    // The administrator refunds the company and cancels the project: nothing is under way.
    let r = m
        .as_admin(
            Method::POST,
            &format!("/api/admin/payments/{}/refund", d.first_payment),
            Some(&j!({"reason": "Expert leaving the platform"})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK, "{}", json(r).await);
    let r = admin_put(
        &m,
        &format!("/api/admin/projects/{}/status", d.project_id),
        j!({"status": "cancelled", "reason": "Expert left the platform"}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK, "{}", json(r).await);

    let r = m.as_admin(Method::DELETE, &base, None).await;
    assert_eq!(r.status(), StatusCode::OK, "{}", json(r).await);
    assert!(json(r).await["deleted_at"].is_string());
    let email = m
        .text("SELECT email FROM users WHERE id = $1", expert.id)
        .await;
    assert!(email.ends_with("@deleted.invalid"), "{email}");
    assert_eq!(
        m.count(
            "SELECT COUNT(*) FROM profiles WHERE user_id = $1 AND full_name IS NULL",
            expert.id
        )
        .await,
        1
    );
    assert_eq!(
        m.count(
            "SELECT COUNT(*) FROM payments WHERE expert_id = $1",
            expert.id
        )
        .await,
        1,
        "the payment keeps pointing at the anonymised account"
    );
    assert_eq!(
        m.count(
            "SELECT COUNT(*) FROM events WHERE kind = 'user.deleted' AND aggregate_id = $1",
            expert.id
        )
        .await,
        1
    );
    let (status, _) = login_status(&m, &expert.email, PASSWORD).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let r = m.as_admin(Method::DELETE, &base, None).await;
    assert_eq!(code(&json(r).await), "USER_DELETED");
}

#[actix_web::test]
async fn forced_project_states_never_strand_money() {
    let m = Market::open().await;
    let d = deal(&m, "force", [50.0, 50.0, 50.0]).await;
    authorise(&m, d.first_payment).await;
    let path = format!("/api/admin/projects/{}/status", d.project_id);
    let r = admin_put(&m, &path, j!({"status": "completed", "reason": "Done"})).await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    assert_eq!(code(&json(r).await), "MONEY_STRANDED");
    let r = admin_put(&m, &path, j!({"status": "cancelled", "reason": "Stop"})).await;
    assert_eq!(code(&json(r).await), "MONEY_STRANDED");
    let r = admin_put(&m, &path, j!({"status": "nowhere", "reason": "x"})).await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let r = admin_put(
        &m,
        &path,
        j!({"status": "in_review", "reason": "Checking the work"}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    let body = json(r).await;
    assert_eq!(body["status"], "in_review");
    assert!(
        body["admin_notes"]
            .as_str()
            .unwrap()
            .contains("[ADMIN_STATUS]")
    );
    assert_eq!(body["payments"].as_array().unwrap().len(), 1);
    assert_eq!(body["milestones"].as_array().unwrap().len(), 3);
    assert_eq!(body["applications"].as_array().unwrap().len(), 1);

    let r = m
        .as_admin(
            Method::GET,
            &format!(
                "/api/admin/projects?status=in_review&company_id={}",
                d.company.id
            ),
            None,
        )
        .await;
    let list = json(r).await;
    assert_eq!(list["total"], 1);
    assert_eq!(list["items"][0]["id"], d.project_id);
    let r = m
        .as_admin(Method::GET, "/api/admin/projects?search=%25", None)
        .await;
    assert_eq!(json(r).await["total"], 0);
}

const RESET_TOKEN: &str = "reset-token-0123456789";

#[actix_web::test]
async fn the_reset_is_hidden_unless_enabled_and_guarded_by_its_token() {
    let app = crate::helpers::spawn_app().await;
    let r = app.post_json("/api/v1/testing/reset-e2e", &j!({})).await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);

    let app = crate::helpers::spawn_app_with(&[
        ("ENABLE_TEST_RESET_ENDPOINT", "true"),
        ("TEST_RESET_TOKEN", RESET_TOKEN),
    ])
    .await;
    let reset = |token: &'static str| {
        app.client
            .post(app.url("/api/v1/testing/reset-e2e"))
            .header("X-Test-Reset-Token", token)
            .send()
    };
    assert_eq!(
        reset("reset-token-0123456780").await.unwrap().status(),
        StatusCode::FORBIDDEN
    );

    // Artefacts of a test run: an account, a cache entry, an upload.
    let leftover = register(&app, "e2e_leftover", &["empresa"]).await;
    app.state
        .cache
        .set("e2e:marker", "1", std::time::Duration::from_secs(60))
        .await
        .unwrap();
    let upload = app.state.settings.uploads_dir.join("documents");
    std::fs::create_dir_all(&upload).unwrap();
    std::fs::write(upload.join("left.pdf"), b"%PDF-1.4").unwrap();

    let r = reset(RESET_TOKEN).await.unwrap();
    let status = r.status();
    let body = json(r).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let names: Vec<&str> = body["accounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["username"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"demo_admin") && names.contains(&"demo_experto"));
    // The story: a project in each state, money held, released and refunded in the sandbox.
    let mut statuses: Vec<&str> = body["story"]["projects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["status"].as_str().unwrap())
        .collect();
    statuses.sort();
    statuses.dedup();
    for state in [
        "draft",
        "pending_publication",
        "published_curated",
        "cancelled",
        "in_progress",
        "completed",
        "disputed",
    ] {
        assert!(
            statuses.contains(&state),
            "{state} missing from {statuses:?}"
        );
    }
    let mut conn = app.db.conn().await.unwrap();
    let payment_states: Vec<String> = marketplace::on_exec!(conn.exec(), c =>
        sqlx::query_scalar("SELECT DISTINCT status FROM payments ORDER BY status").fetch_all(c).await)
    .unwrap();
    for state in ["held", "refunded", "released"] {
        assert!(
            payment_states.iter().any(|s| s == state),
            "{payment_states:?}"
        );
    }
    let reviews: i64 = marketplace::on_exec!(conn.exec(), c =>
        sqlx::query_scalar("SELECT COUNT(*) FROM reviews").fetch_one(c).await)
    .unwrap();
    assert_eq!(reviews, 2);
    let messages: i64 = marketplace::on_exec!(conn.exec(), c =>
        sqlx::query_scalar("SELECT COUNT(*) FROM chat_messages").fetch_one(c).await)
    .unwrap();
    assert_eq!(messages, 2);
    drop(conn);

    assert_eq!(
        me_status_of(&app, &leftover).await,
        StatusCode::UNAUTHORIZED
    );
    assert!(app.state.cache.get("e2e:marker").await.unwrap().is_none());
    assert!(!upload.exists());
    // The demo accounts log in, with verified profiles and complete fiscal data.
    let token = crate::helpers::login(&app, "demo_experto", "Demo1234!").await;
    let r = request_as(&app, Method::GET, "/api/profiles/me", &token, None).await;
    let profile = json(r).await;
    assert_eq!(profile["is_verified"], true, "{profile}");
    assert_eq!(profile["fiscal_data_complete"], true);
    crate::helpers::login(&app, "demo_admin", "Demo1234!").await;

    // A second reset gives the same accounts back.
    assert_eq!(reset(RESET_TOKEN).await.unwrap().status(), StatusCode::OK);
    crate::helpers::login(&app, "demo_empresa", "Demo1234!").await;
}

async fn me_status_of(app: &crate::helpers::TestApp, account: &Account) -> StatusCode {
    app.client
        .get(app.url("/api/users/me"))
        .bearer_auth(&account.access_token)
        .send()
        .await
        .unwrap()
        .status()
}

const SCRAPE_TOKEN: &str = "scrape-secret-0123456789";

/// Ten wrong tokens a minute from one address; then every attempt is refused unchecked, the
/// right token too, so guessing learns nothing.
#[actix_web::test]
async fn metrics_refuse_an_address_that_keeps_guessing() {
    let app = crate::helpers::spawn_app_with(&[("METRICS_TOKEN", SCRAPE_TOKEN)]).await;
    let scrape = |token: &'static str| {
        app.client
            .get(app.url("/metrics"))
            .bearer_auth(token)
            .send()
    };
    for guess in 0..10 {
        let r = scrape("scrape-secret-guess").await.unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "guess {guess}");
    }
    let r = scrape(SCRAPE_TOKEN).await.unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(r.headers().contains_key("retry-after"));
    assert_eq!(json(r).await["code"], "RATE_LIMITED");
}

#[actix_web::test]
async fn metrics_ask_for_the_token_when_one_is_set() {
    let app = crate::helpers::spawn_app_with(&[("METRICS_TOKEN", SCRAPE_TOKEN)]).await;
    assert_eq!(app.get("/metrics").await.status(), StatusCode::UNAUTHORIZED);
    let r = app
        .client
        .get(app.url("/metrics"))
        .bearer_auth("scrape-wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let r = app
        .client
        .get(app.url("/metrics"))
        .bearer_auth(SCRAPE_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.text().await.unwrap().contains("http_requests_total"));
}

/// Every path of the specification's Administration, DAC7 and Testing utility tables.
#[actix_web::test]
async fn every_administration_path_of_the_specification_is_described() {
    let app = crate::helpers::spawn_app().await;
    let doc = json(app.get("/openapi.json").await).await;
    let paths = doc["paths"].as_object().unwrap();
    let expected: &[(&str, &str)] = &[
        ("get", "/api/admin/users"),
        ("get", "/api/admin/users/{user_id}"),
        ("get", "/api/admin/users/{user_id}/profile"),
        ("put", "/api/admin/users/{user_id}"),
        ("put", "/api/admin/users/{user_id}/verify"),
        ("put", "/api/admin/users/{user_id}/unverify"),
        ("put", "/api/admin/users/{user_id}/reject"),
        ("put", "/api/admin/users/{user_id}/resubmit"),
        ("put", "/api/admin/users/{user_id}/status"),
        ("put", "/api/admin/users/{user_id}/suspend"),
        ("put", "/api/admin/users/{user_id}/change-password"),
        ("put", "/api/admin/users/{user_id}/pre-evaluation"),
        ("post", "/api/admin/users/{user_id}/recontact"),
        ("post", "/api/admin/users/{user_id}/deletion-request"),
        ("post", "/api/admin/users/{user_id}/deletion-confirm"),
        ("delete", "/api/admin/users/{user_id}"),
        ("put", "/api/admin/users/{user_id}/roles"),
        ("put", "/api/admin/users/{user_id}/internal-rating"),
        ("get", "/api/admin/users/{user_id}/internal-rating-history"),
        ("get", "/api/admin/users/{user_id}/reputation"),
        ("get", "/api/admin/users/{user_id}/suggest-level"),
        ("post", "/api/admin/profiles/expert/{user_id}"),
        ("post", "/api/admin/profiles/company/{user_id}"),
        ("get", "/api/admin/profiles"),
        ("get", "/api/admin/projects"),
        ("get", "/api/admin/projects/{project_id}"),
        ("put", "/api/admin/projects/{project_id}/status"),
        ("get", "/api/admin/payments"),
        ("get", "/api/admin/payments/{payment_id}"),
        ("post", "/api/admin/payments/{payment_id}/refund"),
        ("post", "/api/admin/payments/reconcile"),
        ("get", "/api/admin/commission-config"),
        ("put", "/api/admin/commission-config/bulk"),
        ("get", "/api/admin/commission-config/{level}"),
        ("put", "/api/admin/commission-config/{level}"),
        ("get", "/api/admin/metrics"),
        ("get", "/api/admin/metrics/growth"),
        ("get", "/api/dac7/expert/dac7-summary"),
        ("post", "/api/dac7/expert/dac7-review"),
        ("post", "/api/dac7/admin/notify-experts"),
        ("post", "/api/v1/testing/reset-e2e"),
    ];
    let missing: Vec<_> = expected
        .iter()
        .filter(|(method, path)| paths.get(*path).and_then(|p| p.get(*method)).is_none())
        .collect();
    assert!(missing.is_empty(), "not in /openapi.json: {missing:?}");
}
