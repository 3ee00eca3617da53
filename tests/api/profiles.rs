//! Profiles: creation per role, the owner's and the public views, updates (owner only, CSRF),
//! expert slugs, money, fiscal data, administrators' moderation, team profiles, skills and
//! expert search.

use crate::helpers::{Account, TestApp, admin, json, register, spawn_app};
use crate::market::send;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json as j};

/// A request with a bearer token only (administrators log in with the standard flavour).
async fn bearer(
    app: &TestApp,
    method: Method,
    path: &str,
    token: &str,
    body: Option<&Value>,
) -> reqwest::Response {
    crate::helpers::request_as(app, method, path, token, body).await
}

async fn create_profile(app: &TestApp, account: &Account, body: Value) -> Value {
    let response = send(app, Method::POST, "/api/profiles/", account, Some(&body)).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    json(response).await
}

fn code(body: &Value) -> &str {
    body["code"].as_str().unwrap_or_default()
}

#[actix_web::test]
async fn an_expert_creates_reads_and_updates_their_profile() {
    let app = spawn_app().await;
    let ana = register(&app, "ana", &["experto"]).await;
    let created = create_profile(
        &app,
        &ana,
        j!({"profile_type": "experto", "full_name": "Ana García", "bio": "Rust",
            "skills": ["Rust", "PostgreSQL", "rust"], "availability": "full_time",
            "hourly_rate": 45.5, "phone": "+34 600 000 000"}),
    )
    .await;
    assert_eq!(created["profile_type"], "experto");
    assert_eq!(created["slug"], "ana-garcia");
    assert_eq!(created["expert_level"], "Global");
    assert_eq!(created["hourly_rate"], 45.5);
    assert_eq!(created["is_verified"], false);
    assert_eq!(created["fiscal_data_complete"], false);
    assert_eq!(created["skills"].as_array().unwrap().len(), 2);
    assert!(created.get("verification_notes").is_none());
    let id = created["id"].as_i64().unwrap();

    for path in ["/api/profiles/me", "/api/profiles/me/profile"] {
        let response = send(&app, Method::GET, path, &ana, None).await;
        assert_eq!(response.status(), 200);
        let body = json(response).await;
        assert_eq!(body["id"], id);
        assert_eq!(body["phone"], "+34 600 000 000");
        assert!(body.get("verification_notes").is_none());
    }

    let response = send(
        &app,
        Method::PUT,
        &format!("/api/profiles/{id}"),
        &ana,
        Some(&j!({"bio": "Rust and Go", "hourly_rate": 60, "skills": ["Go"], "phone": ""})),
    )
    .await;
    assert_eq!(response.status(), 200);
    let body = json(response).await;
    assert_eq!(body["bio"], "Rust and Go");
    assert_eq!(body["hourly_rate"], 60.0);
    assert_eq!(
        body["full_name"], "Ana García",
        "absent fields keep their value"
    );
    assert_eq!(body["phone"], Value::Null, "an empty string clears");
    assert_eq!(body["skills"][0]["slug"], "go");
    assert_eq!(body["slug"], "ana-garcia", "the slug stays");
    app.stop().await;
}

#[actix_web::test]
async fn the_public_view_hides_private_data() {
    let app = spawn_app().await;
    let ana = register(&app, "ana", &["experto"]).await;
    let created = create_profile(
        &app,
        &ana,
        j!({"profile_type": "experto", "full_name": "Ana", "phone": "123"}),
    )
    .await;
    let id = created["id"].as_i64().unwrap();
    let response = send(
        &app,
        Method::PUT,
        &format!("/api/profiles/{id}/fiscal-data"),
        &ana,
        Some(&j!({"tax_id": "12345678Z", "fiscal_name": "Ana", "irpf_rate": 15})),
    )
    .await;
    assert_eq!(response.status(), 200);

    let response = app.get(&format!("/api/profiles/{id}")).await;
    assert_eq!(response.status(), 200, "public, no authentication");
    let body = json(response).await;
    assert_eq!(body["full_name"], "Ana");
    for hidden in [
        "verification_notes",
        "tax_id",
        "fiscal_name",
        "irpf_rate",
        "vat_number",
        "fiscal_data_complete",
        "phone",
        "processor_connect_account_id",
        "internal_rating",
    ] {
        assert!(body.get(hidden).is_none(), "{hidden} is not public");
    }
    let response = app.get("/api/profiles/999999").await;
    assert_eq!(response.status(), 404);
    assert_eq!(code(&json(response).await), "NOT_FOUND");
    app.stop().await;
}

#[actix_web::test]
async fn creation_requires_one_of_the_users_roles_and_one_profile_per_role() {
    let app = spawn_app().await;
    let bob = register(&app, "bob", &["empresa"]).await;
    let response = send(
        &app,
        Method::POST,
        "/api/profiles",
        &bob,
        Some(&j!({"profile_type": "experto"})),
    )
    .await;
    assert_eq!(response.status(), 403, "not one of bob's roles");
    let response = send(
        &app,
        Method::POST,
        "/api/profiles",
        &bob,
        Some(&j!({"profile_type": "admin"})),
    )
    .await;
    assert_eq!(response.status(), 403);
    let response = send(
        &app,
        Method::POST,
        "/api/profiles",
        &bob,
        Some(&j!({"profile_type": "boss"})),
    )
    .await;
    assert_eq!(response.status(), 422);

    let created = create_profile(
        &app,
        &bob,
        j!({"profile_type": "empresa", "company_name": "Acme"}),
    )
    .await;
    assert_eq!(created["company_name"], "Acme");
    assert_eq!(created["slug"], Value::Null, "only experts get slugs");
    let response = send(
        &app,
        Method::POST,
        "/api/profiles",
        &bob,
        Some(&j!({"profile_type": "empresa"})),
    )
    .await;
    assert_eq!(response.status(), 409);
    assert_eq!(code(&json(response).await), "PROFILE_EXISTS");

    // No profile for the active role yet: 404.
    let carl = register(&app, "carl", &["experto"]).await;
    let response = send(&app, Method::GET, "/api/profiles/me", &carl, None).await;
    assert_eq!(response.status(), 404);
    let response = app.get("/api/profiles/me").await;
    assert_eq!(response.status(), 401);
    app.stop().await;
}

#[actix_web::test]
async fn money_is_rejected_with_more_than_two_decimals() {
    let app = spawn_app().await;
    let ana = register(&app, "ana", &["experto"]).await;
    for bad in [j!(45.555), j!(-1), j!("45")] {
        let response = send(
            &app,
            Method::POST,
            "/api/profiles",
            &ana,
            Some(&j!({"profile_type": "experto", "hourly_rate": bad})),
        )
        .await;
        assert_eq!(response.status(), 422, "hourly_rate {bad}");
        assert_eq!(code(&json(response).await), "VALIDATION_ERROR");
    }
    let created = create_profile(
        &app,
        &ana,
        j!({"profile_type": "experto", "hourly_rate": 0.1}),
    )
    .await;
    assert_eq!(created["hourly_rate"], 0.1);
    let id = created["id"].as_i64().unwrap();
    let response = send(
        &app,
        Method::PUT,
        &format!("/api/profiles/{id}"),
        &ana,
        Some(&j!({"hourly_rate": 10.001, "experience_years": -3})),
    )
    .await;
    assert_eq!(response.status(), 422);
    let body = json(response).await;
    assert_eq!(body["errors"].as_array().unwrap().len(), 2);
    app.stop().await;
}

#[actix_web::test]
async fn only_the_owner_updates_a_profile_and_csrf_is_checked() {
    let app = spawn_app().await;
    let ana = register(&app, "ana", &["experto"]).await;
    let eve = register(&app, "eve", &["experto"]).await;
    let created = create_profile(&app, &ana, j!({"profile_type": "experto"})).await;
    let id = created["id"].as_i64().unwrap();

    for path in [
        format!("/api/profiles/{id}"),
        format!("/api/profiles/{id}/fiscal-data"),
    ] {
        let response = send(&app, Method::PUT, &path, &eve, Some(&j!({"bio": "mine"}))).await;
        assert_eq!(response.status(), 403, "IDOR on {path}");
    }
    let response = send(
        &app,
        Method::PUT,
        "/api/profiles/999999",
        &ana,
        Some(&j!({})),
    )
    .await;
    assert_eq!(response.status(), 404);

    // A cookie session without the header, or with a different one: 403.
    let response = app
        .client
        .put(app.url(&format!("/api/profiles/{id}")))
        .bearer_auth(&ana.access_token)
        .header("Cookie", format!("csrf_token={}", ana.csrf_token))
        .json(&j!({"bio": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    assert_eq!(code(&json(response).await), "CSRF_FAILED");
    let response = app
        .client
        .put(app.url(&format!("/api/profiles/{id}")))
        .bearer_auth(&ana.access_token)
        .header("Cookie", format!("csrf_token={}", ana.csrf_token))
        .header("X-CSRF-Token", "wrong")
        .json(&j!({"bio": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    // The profile type cannot change.
    let response = send(
        &app,
        Method::PUT,
        &format!("/api/profiles/{id}"),
        &ana,
        Some(&j!({"profile_type": "empresa"})),
    )
    .await;
    assert_eq!(response.status(), 422);
    let me = json(send(&app, Method::GET, "/api/profiles/me", &ana, None).await).await;
    assert_eq!(me["bio"], Value::Null, "nothing changed");
    app.stop().await;
}

#[actix_web::test]
async fn expert_slugs_are_unique_and_legacy_slugs_are_found() {
    let app = spawn_app().await;
    let mut slugs = Vec::new();
    for name in ["ana", "ana2", "ana3"] {
        let account = register(&app, name, &["experto"]).await;
        let created = create_profile(
            &app,
            &account,
            j!({"profile_type": "experto", "full_name": "Ána  María!"}),
        )
        .await;
        slugs.push(created["slug"].as_str().unwrap().to_owned());
    }
    assert_eq!(slugs, ["ana-maria", "ana-maria-2", "ana-maria-3"]);

    for (slug, expected) in [
        ("ana-maria", "ana-maria"),
        ("anamaria", "ana-maria"),
        ("Ana-Maria", "ana-maria"),
        ("anamaria2", "ana-maria-2"),
    ] {
        let response = app.get(&format!("/api/profiles/experts/slug/{slug}")).await;
        assert_eq!(response.status(), 200, "{slug}");
        let body = json(response).await;
        assert_eq!(body["slug"], expected);
        assert!(body.get("tax_id").is_none());
    }
    let response = app.get("/api/profiles/experts/slug/nobody").await;
    assert_eq!(response.status(), 404);
    app.stop().await;
}

#[actix_web::test]
async fn fiscal_data_is_validated_and_completeness_recomputed() {
    let app = spawn_app().await;
    let ana = register(&app, "ana", &["experto"]).await;
    let id = create_profile(&app, &ana, j!({"profile_type": "experto"})).await["id"]
        .as_i64()
        .unwrap();
    let path = format!("/api/profiles/{id}/fiscal-data");

    let status = json(
        send(
            &app,
            Method::GET,
            "/api/profiles/me/fiscal-status",
            &ana,
            None,
        )
        .await,
    )
    .await;
    assert_eq!(status["fiscal_data_complete"], false);
    assert_eq!(status["missing_fields"].as_array().unwrap().len(), 7);

    for bad in [
        j!({"irpf_rate": 10}),
        j!({"fiscal_type": "sociedad"}),
        j!({"birth_date": "31/12/1990"}),
        j!({"irpf_rate": 7.5}),
    ] {
        let response = send(&app, Method::PUT, &path, &ana, Some(&bad)).await;
        assert_eq!(response.status(), 422, "{bad}");
    }

    let response = send(
        &app,
        Method::PUT,
        &path,
        &ana,
        Some(
            &j!({"tax_id": "12345678Z", "fiscal_name": "Ana López", "fiscal_address": "Calle 1",
                   "fiscal_postal_code": "28001", "fiscal_city": "Madrid", "fiscal_country": "ES",
                   "irpf_rate": 15, "birth_date": "1990-12-31"}),
        ),
    )
    .await;
    assert_eq!(response.status(), 200);
    let body = json(response).await;
    assert_eq!(
        body["fiscal_data_complete"], false,
        "experts need fiscal_type"
    );
    assert_eq!(body["irpf_rate"], 15);
    let status = json(
        send(
            &app,
            Method::GET,
            "/api/profiles/me/fiscal-status",
            &ana,
            None,
        )
        .await,
    )
    .await;
    assert_eq!(status["missing_fields"], j!(["fiscal_type"]));

    let response = send(
        &app,
        Method::PUT,
        &path,
        &ana,
        Some(&j!({"fiscal_type": "autonomo"})),
    )
    .await;
    let body = json(response).await;
    assert_eq!(body["fiscal_data_complete"], true);
    assert_eq!(body["tax_id"], "12345678Z");
    let status = json(
        send(
            &app,
            Method::GET,
            "/api/profiles/me/fiscal-status",
            &ana,
            None,
        )
        .await,
    )
    .await;
    assert_eq!(status["fiscal_data_complete"], true);
    assert_eq!(status["missing_fields"], j!([]));

    // Clearing a required field makes it incomplete again.
    let body = json(
        send(
            &app,
            Method::PUT,
            &path,
            &ana,
            Some(&j!({"fiscal_city": ""})),
        )
        .await,
    )
    .await;
    assert_eq!(body["fiscal_data_complete"], false);

    // Companies: no fiscal_type needed.
    let bob = register(&app, "bob", &["empresa"]).await;
    let id = create_profile(&app, &bob, j!({"profile_type": "empresa"})).await["id"]
        .as_i64()
        .unwrap();
    let body = json(
        send(
            &app,
            Method::PUT,
            &format!("/api/profiles/{id}/fiscal-data"),
            &bob,
            Some(&j!({"tax_id": "B12345678", "fiscal_name": "Acme SL", "fiscal_address": "Calle 2",
                       "fiscal_postal_code": "08001", "fiscal_city": "Barcelona", "fiscal_country": "ES"})),
        )
        .await,
    )
    .await;
    assert_eq!(body["fiscal_data_complete"], true);
    app.stop().await;
}

#[actix_web::test]
async fn administrators_moderate_profiles() {
    let app = spawn_app().await;
    let (_, root) = admin(&app, "root").await;
    let ana = register(&app, "ana", &["experto"]).await;
    create_profile(
        &app,
        &ana,
        j!({"profile_type": "experto", "full_name": "Ana"}),
    )
    .await;

    let response = bearer(
        &app,
        Method::PUT,
        &format!("/api/admin/users/{}/verify", ana.id),
        &root,
        Some(&j!({"notes": "documents checked"})),
    )
    .await;
    assert_eq!(response.status(), 200);
    let body = json(response).await;
    assert_eq!(body["is_verified"], true);
    assert_eq!(body["verification_status"], "verified");
    assert_eq!(body["verification_notes"], "documents checked");

    // The owner sees the verification but never the notes.
    let me = json(send(&app, Method::GET, "/api/profiles/me", &ana, None).await).await;
    assert_eq!(me["is_verified"], true);
    assert!(me.get("verification_notes").is_none());

    for (action, verified, status) in [
        ("unverify", false, "pending"),
        ("reject", false, "rejected"),
        ("resubmit", false, "resubmitted"),
        ("pre-evaluation", false, "pre_evaluated"),
    ] {
        let response = bearer(
            &app,
            Method::PUT,
            &format!("/api/admin/users/{}/{action}", ana.id),
            &root,
            None,
        )
        .await;
        assert_eq!(response.status(), 200, "{action}");
        let body = json(response).await;
        assert_eq!(body["is_verified"], verified);
        assert_eq!(body["verification_status"], status);
    }

    let response = bearer(
        &app,
        Method::GET,
        &format!("/api/admin/users/{}/profile", ana.id),
        &root,
        None,
    )
    .await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        json(response).await["verification_notes"],
        "documents checked"
    );

    // Unknown user, user without profile.
    let response = bearer(
        &app,
        Method::PUT,
        "/api/admin/users/999999/verify",
        &root,
        None,
    )
    .await;
    assert_eq!(response.status(), 404);
    let bob = register(&app, "bob", &["empresa"]).await;
    let response = bearer(
        &app,
        Method::GET,
        &format!("/api/admin/users/{}/profile", bob.id),
        &root,
        None,
    )
    .await;
    assert_eq!(response.status(), 404);

    // Not for non-administrators.
    for (method, path) in [
        (Method::PUT, format!("/api/admin/users/{}/verify", ana.id)),
        (Method::GET, format!("/api/admin/users/{}/profile", ana.id)),
        (Method::GET, "/api/admin/profiles".to_owned()),
        (
            Method::POST,
            format!("/api/admin/profiles/expert/{}", bob.id),
        ),
    ] {
        let response = send(&app, method.clone(), &path, &ana, Some(&j!({}))).await;
        assert_eq!(response.status(), 403, "{method} {path}");
    }
    app.stop().await;
}

#[actix_web::test]
async fn administrators_list_and_create_profiles() {
    let app = spawn_app().await;
    let (_, root) = admin(&app, "root").await;
    let ana = register(&app, "ana", &["experto"]).await;
    let bob = register(&app, "bob", &["empresa"]).await;
    create_profile(
        &app,
        &ana,
        j!({"profile_type": "experto", "full_name": "Ana Pérez"}),
    )
    .await;
    create_profile(
        &app,
        &bob,
        j!({"profile_type": "empresa", "company_name": "Acme"}),
    )
    .await;

    let list = json(bearer(&app, Method::GET, "/api/admin/profiles", &root, None).await).await;
    assert_eq!(list["total"], 2);
    assert!(list["items"][0].get("verification_notes").is_some());
    let list = json(
        bearer(
            &app,
            Method::GET,
            "/api/admin/profiles?profile_type=empresa",
            &root,
            None,
        )
        .await,
    )
    .await;
    assert_eq!(list["total"], 1);
    assert_eq!(list["items"][0]["company_name"], "Acme");
    let list = json(
        bearer(
            &app,
            Method::GET,
            "/api/admin/profiles?search=P%C3%A9REZ&size=1",
            &root,
            None,
        )
        .await,
    )
    .await;
    assert_eq!(list["total"], 1);
    assert_eq!(list["size"], 1);
    let by_username = format!("/api/admin/profiles?search={}", bob.username);
    let list = json(bearer(&app, Method::GET, &by_username, &root, None).await).await;
    assert_eq!(list["total"], 1, "search covers the username");
    assert_eq!(list["items"][0]["user_id"], bob.id);
    let list = json(
        bearer(
            &app,
            Method::GET,
            "/api/admin/profiles?is_verified=true",
            &root,
            None,
        )
        .await,
    )
    .await;
    assert_eq!(list["total"], 0);
    let response = bearer(
        &app,
        Method::GET,
        "/api/admin/profiles?profile_type=boss",
        &root,
        None,
    )
    .await;
    assert_eq!(response.status(), 422);

    // The administrator creates an expert profile for bob (a company), who gains the role.
    let response = bearer(
        &app,
        Method::POST,
        &format!("/api/admin/profiles/expert/{}", bob.id),
        &root,
        Some(&j!({"full_name": "Ana Pérez"})),
    )
    .await;
    assert_eq!(response.status(), 201);
    let body = json(response).await;
    assert_eq!(body["profile_type"], "experto");
    assert_eq!(body["slug"], "ana-perez-2");
    let response = bearer(
        &app,
        Method::POST,
        &format!("/api/admin/profiles/expert/{}", bob.id),
        &root,
        Some(&j!({})),
    )
    .await;
    assert_eq!(response.status(), 409);
    let response = bearer(
        &app,
        Method::POST,
        &format!("/api/admin/profiles/company/{}", ana.id),
        &root,
        Some(&j!({"company_name": "Ana SL"})),
    )
    .await;
    assert_eq!(response.status(), 201);
    let response = bearer(
        &app,
        Method::POST,
        "/api/admin/profiles/company/999999",
        &root,
        Some(&j!({})),
    )
    .await;
    assert_eq!(response.status(), 404);
    app.stop().await;
}

#[actix_web::test]
async fn administrators_have_team_profiles() {
    let app = spawn_app().await;
    let (root_id, root) = admin(&app, "root").await;
    let (_, second) = admin(&app, "second").await;
    let ana = register(&app, "ana", &["experto"]).await;

    let response = bearer(&app, Method::GET, "/api/profiles/admin/me", &root, None).await;
    assert_eq!(response.status(), 404);
    let response = bearer(
        &app,
        Method::PUT,
        "/api/profiles/admin/me",
        &root,
        Some(&j!({})),
    )
    .await;
    assert_eq!(response.status(), 404);

    let response = bearer(
        &app,
        Method::POST,
        "/api/profiles/admin/me",
        &root,
        Some(&j!({"full_name": "Root", "team_role": "CTO", "display_order": 2})),
    )
    .await;
    assert_eq!(response.status(), 201);
    let body = json(response).await;
    assert_eq!(body["slug"], format!("admin-{root_id}"));
    assert_eq!(body["is_visible_in_team"], false);
    let response = bearer(
        &app,
        Method::POST,
        "/api/profiles/admin/me",
        &root,
        Some(&j!({})),
    )
    .await;
    assert_eq!(response.status(), 409);

    bearer(
        &app,
        Method::POST,
        "/api/profiles/admin/me",
        &second,
        Some(&j!({"full_name": "Second", "display_order": 1, "is_visible_in_team": true})),
    )
    .await;

    // Hidden profiles are not public.
    let team = json(app.get("/api/profiles/team").await).await;
    assert_eq!(team.as_array().unwrap().len(), 1);
    let response = app
        .get(&format!("/api/profiles/admin/slug/admin-{root_id}"))
        .await;
    assert_eq!(response.status(), 404);

    let response = bearer(
        &app,
        Method::PUT,
        "/api/profiles/admin/me",
        &root,
        Some(&j!({"is_visible_in_team": true, "bio": "Builds things"})),
    )
    .await;
    assert_eq!(response.status(), 200);
    let body = json(response).await;
    assert_eq!(body["team_role"], "CTO", "absent fields keep their value");
    let team = json(app.get("/api/profiles/team").await).await;
    let names: Vec<_> = team
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["full_name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["Second", "Root"], "ordered by display_order");
    let response = app
        .get(&format!("/api/profiles/admin/slug/admin-{root_id}"))
        .await;
    assert_eq!(response.status(), 200);
    assert_eq!(json(response).await["bio"], "Builds things");

    let got = json(bearer(&app, Method::GET, "/api/profiles/admin/me", &root, None).await).await;
    assert_eq!(got["full_name"], "Root");

    // Not for others.
    for method in [Method::GET, Method::POST, Method::PUT] {
        let response = send(
            &app,
            method.clone(),
            "/api/profiles/admin/me",
            &ana,
            Some(&j!({})),
        )
        .await;
        assert_eq!(response.status(), 403, "{method}");
    }
    let response = bearer(
        &app,
        Method::POST,
        "/api/profiles/admin/me",
        &second,
        Some(&j!({"display_order": "first"})),
    )
    .await;
    assert_eq!(response.status(), 422);
    app.stop().await;
}

#[actix_web::test]
async fn skills_and_expert_search() {
    let app = spawn_app().await;
    let (_, root) = admin(&app, "root").await;
    let ana = register(&app, "ana", &["experto"]).await;
    let leo = register(&app, "leo", &["experto"]).await;
    let bob = register(&app, "bob", &["empresa"]).await;
    create_profile(
        &app,
        &ana,
        j!({"profile_type": "experto", "full_name": "Ana", "skills": ["Rust", "Machine Learning"],
            "availability": "full_time", "bio": "Systems programmer"}),
    )
    .await;
    create_profile(
        &app,
        &leo,
        j!({"profile_type": "experto", "full_name": "Leo", "skills": ["Go"], "availability": "part_time"}),
    )
    .await;
    create_profile(
        &app,
        &bob,
        j!({"profile_type": "empresa", "company_name": "Rust Corp"}),
    )
    .await;

    let skills = json(app.get("/api/skills/active").await).await;
    let slugs: Vec<_> = skills
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["slug"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(slugs, ["go", "machine-learning", "rust"]);
    let skill = json(app.get("/api/skills/machine-learning").await).await;
    assert_eq!(skill["name"], "Machine Learning");
    assert_eq!(app.get("/api/skills/cobol").await.status(), 404);
    assert_eq!(app.get("/api/skills/cobol/experts").await.status(), 404);

    let experts = json(app.get("/api/skills/rust/experts").await).await;
    assert_eq!(experts["total"], 1);
    assert_eq!(experts["items"][0]["full_name"], "Ana");
    assert!(experts["items"][0].get("tax_id").is_none());

    let all = json(app.get("/api/profiles/experts").await).await;
    assert_eq!(all["total"], 2, "companies are not experts");
    for (query, expected) in [
        ("skill=go", vec!["Leo"]),
        ("availability=full_time", vec!["Ana"]),
        ("q=systems", vec!["Ana"]),
        ("q=machine", vec!["Ana"]),
        // By word, case and accents folded, in the bio or a skill's name; never a substring,
        // and no word matches nothing.
        ("q=PROGRAMMER", vec!["Ana"]),
        ("q=m%C3%A1chine%20learning", vec!["Ana"]),
        ("q=learn", vec![]),
        ("q=%25", vec![]),
        ("level=Global&size=1", vec!["Leo"]),
        ("verified=true", vec![]),
    ] {
        let page = json(app.get(&format!("/api/profiles/experts?{query}")).await).await;
        let names: Vec<_> = page["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["full_name"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(names, expected, "{query}");
    }
    let response = bearer(
        &app,
        Method::PUT,
        &format!("/api/admin/users/{}/verify", ana.id),
        &root,
        None,
    )
    .await;
    assert_eq!(response.status(), 200);
    let page = json(app.get("/api/profiles/experts?verified=true").await).await;
    assert_eq!(page["total"], 1);
    // Verified first, then newest; walked by cursor.
    let first = json(app.get("/api/profiles/experts?size=1").await).await;
    assert_eq!(first["items"][0]["full_name"], "Ana");
    let cursor = first["next_cursor"].as_str().unwrap();
    let second = json(
        app.get(&format!("/api/profiles/experts?size=1&cursor={cursor}"))
            .await,
    )
    .await;
    assert_eq!(second["items"][0]["full_name"], "Leo");
    assert!(second["next_cursor"].is_null(), "{second}");
    assert_eq!(
        app.get("/api/profiles/experts?level=Master").await.status(),
        422
    );
    assert_eq!(
        app.get("/api/profiles/experts?size=500").await.status(),
        422
    );
    app.stop().await;
}

fn encoded(width: u32, height: u32, rgba: [u8; 4], format: image::ImageFormat) -> Vec<u8> {
    let img = image::RgbaImage::from_pixel(width, height, image::Rgba(rgba));
    let mut out = std::io::Cursor::new(Vec::new());
    match format {
        image::ImageFormat::Jpeg => image::DynamicImage::ImageRgba8(img)
            .to_rgb8()
            .write_to(&mut out, format)
            .unwrap(),
        _ => img.write_to(&mut out, format).unwrap(),
    }
    out.into_inner()
}

/// Posts `bytes` as the `file` part of a multipart form named `filename`.
async fn upload(
    app: &TestApp,
    account: &Account,
    filename: &str,
    bytes: &[u8],
    csrf: bool,
) -> reqwest::Response {
    let boundary = "----profiletestboundary7MA4YWxkTrZu0gW";
    let mut body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nhello\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{filename}\"\r\nContent-Type: image/png\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(bytes);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    let mut request = app
        .client
        .post(app.url("/api/profiles/me/picture"))
        .bearer_auth(&account.access_token)
        .header("Cookie", format!("csrf_token={}", account.csrf_token))
        .header(
            "Content-Type",
            format!("multipart/form-data; boundary={boundary}"),
        );
    if csrf {
        request = request.header("X-CSRF-Token", &account.csrf_token);
    }
    request.body(body).send().await.expect("request")
}

#[actix_web::test]
async fn experts_upload_pictures_that_are_resized_flattened_and_served() {
    let app = spawn_app().await;
    let ana = register(&app, "ana", &["experto"]).await;
    let response = upload(
        &app,
        &ana,
        "a.png",
        &encoded(10, 10, [0; 4], image::ImageFormat::Png),
        true,
    )
    .await;
    assert_eq!(response.status(), 404, "no profile yet");
    create_profile(&app, &ana, j!({"profile_type": "experto"})).await;

    // A wide, fully transparent PNG: scaled to 1024 px wide, white, JPEG.
    let png = encoded(2000, 1000, [255, 0, 0, 0], image::ImageFormat::Png);
    let response = upload(&app, &ana, "photo.png", &png, true).await;
    assert_eq!(response.status(), 200);
    let path = json(response).await["profile_picture"]
        .as_str()
        .unwrap()
        .to_owned();
    let prefix = format!("/api/uploads/profiles/{}/", ana.id);
    assert!(
        path.starts_with(&prefix) && path.ends_with(".jpg"),
        "{path}"
    );
    let file = app
        .state
        .settings
        .uploads_dir
        .join(format!("profiles/{}", ana.id))
        .join(path.rsplit('/').next().unwrap());
    assert!(
        file.exists(),
        "stored under UPLOADS_DIR/profiles/{{user_id}}"
    );

    let response = app.get(&path).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "image/jpeg");
    let bytes = response.bytes().await.unwrap();
    let img = image::load_from_memory_with_format(&bytes, image::ImageFormat::Jpeg)
        .unwrap()
        .to_rgb8();
    assert_eq!((img.width(), img.height()), (1024, 512));
    assert!(
        img.get_pixel(5, 5).0.iter().all(|c| *c > 245),
        "flattened onto white"
    );

    let me = json(send(&app, Method::GET, "/api/profiles/me", &ana, None).await).await;
    assert_eq!(me["profile_picture"], path.as_str());

    // JPEG and WebP are accepted too; a new picture replaces the old file.
    for format in [image::ImageFormat::Jpeg, image::ImageFormat::WebP] {
        let response = upload(
            &app,
            &ana,
            "x.bin",
            &encoded(64, 48, [0, 0, 255, 255], format),
            true,
        )
        .await;
        assert_eq!(response.status(), 200, "{format:?}");
    }
    assert!(!file.exists(), "the replaced file is removed");

    assert_eq!(app.get(&format!("{prefix}nothing.jpg")).await.status(), 404);
    assert_eq!(
        app.get(&format!("{prefix}..%2F..%2Fsecret")).await.status(),
        404
    );
    app.stop().await;
}

#[actix_web::test]
async fn picture_uploads_are_checked() {
    let app = spawn_app().await;
    let ana = register(&app, "ana", &["experto"]).await;
    create_profile(&app, &ana, j!({"profile_type": "experto"})).await;
    let png = encoded(10, 10, [0, 0, 0, 255], image::ImageFormat::Png);

    // A renamed executable, and text: 415 whatever the name says.
    let mut exe = b"MZ\x90\x00\x03\x00\x00\x00".to_vec();
    exe.resize(4096, 0);
    let response = upload(&app, &ana, "photo.png", &exe, true).await;
    assert_eq!(response.status(), 415);
    assert_eq!(code(&json(response).await), "UNSUPPORTED_MEDIA_TYPE");
    let response = upload(
        &app,
        &ana,
        "photo.jpg",
        b"\x89PNG\r\n\x1a\nnot really",
        true,
    )
    .await;
    assert_eq!(
        response.status(),
        415,
        "the content must really be an image"
    );

    // Over 2 MB: 413.
    let mut big = png.clone();
    big.resize(2 * 1024 * 1024 + 10, 0);
    let response = upload(&app, &ana, "big.png", &big, true).await;
    assert_eq!(response.status(), 413);

    // No CSRF header in a cookie session: 403; no file part: 422.
    let response = upload(&app, &ana, "a.png", &png, false).await;
    assert_eq!(response.status(), 403);
    let response = app
        .client
        .post(app.url("/api/profiles/me/picture"))
        .bearer_auth(&ana.access_token)
        .header("Cookie", format!("csrf_token={}", ana.csrf_token))
        .header("X-CSRF-Token", &ana.csrf_token)
        .json(&j!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 422);

    // Companies have no pictures.
    let bob = register(&app, "bob", &["empresa"]).await;
    create_profile(&app, &bob, j!({"profile_type": "empresa"})).await;
    let response = upload(&app, &bob, "a.png", &png, true).await;
    assert_eq!(response.status(), 403);

    // An administrator's picture goes to the team profile.
    let (_, root) = admin(&app, "root").await;
    bearer(
        &app,
        Method::POST,
        "/api/profiles/admin/me",
        &root,
        Some(&j!({"full_name": "Root"})),
    )
    .await;
    let boundary = "b0undary";
    let mut body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"r.png\"\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(&png);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    let response = app
        .client
        .post(app.url("/api/profiles/me/picture"))
        .bearer_auth(&root)
        .header(
            "Content-Type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let path = json(response).await["profile_picture"]
        .as_str()
        .unwrap()
        .to_owned();
    let team = json(bearer(&app, Method::GET, "/api/profiles/admin/me", &root, None).await).await;
    assert_eq!(team["profile_picture"], path.as_str());
    app.stop().await;
}

async fn upload_document(
    app: &TestApp,
    account: &Account,
    filename: &str,
    kind: &str,
    bytes: &[u8],
) -> reqwest::Response {
    let boundary = "----documenttestboundary0123456789";
    let mut body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"kind\"\r\n\r\n{kind}\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{filename}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(bytes);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    app.client
        .post(app.url("/api/profiles/upload"))
        .bearer_auth(&account.access_token)
        .header("Cookie", format!("csrf_token={}", account.csrf_token))
        .header("X-CSRF-Token", &account.csrf_token)
        .header(
            "Content-Type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(body)
        .send()
        .await
        .expect("request")
}

#[actix_web::test]
async fn documents_are_checked_by_content_and_private_to_their_owner() {
    let app = spawn_app().await;
    let ana = register(&app, "ana", &["experto"]).await;
    let bob = register(&app, "bob", &["experto"]).await;
    create_profile(
        &app,
        &ana,
        j!({"profile_type": "experto", "full_name": "Ana"}),
    )
    .await;

    let pdf = b"%PDF-1.7\n1 0 obj << >> endobj\n%%EOF\n";
    let response = upload_document(&app, &ana, "../../cv.pdf", "verification", pdf).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let doc = json(response).await;
    assert_eq!(doc["content_type"], "application/pdf");
    assert_eq!(doc["file_name"], "cv.pdf");
    assert_eq!(doc["kind"], "verification");
    assert_eq!(doc["size"], pdf.len());
    let url = doc["url"].as_str().unwrap().to_owned();

    // The owner downloads it; someone else gets 404.
    let response = bearer(&app, Method::GET, &url, &ana.access_token, None).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-type"], "application/pdf");
    assert_eq!(response.bytes().await.unwrap().as_ref(), pdf);
    let response = bearer(&app, Method::GET, &url, &bob.access_token, None).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);

    // A renamed executable, an unknown kind and an oversized file are refused.
    let exe = b"MZ\x90\x00\x03\x00\x00\x00\x04\x00\x00\x00\xff\xff";
    let response = upload_document(&app, &ana, "photo.png", "other", exe).await;
    assert_eq!(response.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let response = upload_document(&app, &ana, "cv.pdf", "secret", pdf).await;
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let mut big = b"%PDF-1.7\n".to_vec();
    big.resize(10 * 1024 * 1024 + 1, b'0');
    let response = upload_document(&app, &ana, "big.pdf", "other", &big).await;
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);

    // A GIF named as a batch file is stored and offered as a GIF (probe D24).
    let polyglot = b"GIF89a\r\n@echo off\r\ncalc.exe\r\n";
    let response = upload_document(&app, &ana, "invoice.bat", "other", polyglot).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let doc = json(response).await;
    assert_eq!(doc["file_name"], "invoice.bat.gif");
    let url = doc["url"].as_str().unwrap().to_owned();
    let response = bearer(&app, Method::GET, &url, &ana.access_token, None).await;
    assert_eq!(response.headers()["content-type"], "image/gif");
    let disposition = response.headers()["content-disposition"].to_str().unwrap();
    assert!(
        disposition.contains("invoice.bat.gif") && !disposition.contains("bat\""),
        "{disposition}"
    );

    // A DOCX is recognised inside its ZIP container.
    let docx = b"PK\x03\x04\x14\x00\x00\x00\x08\x00word/document.xml....";
    let response = upload_document(&app, &ana, "letter.docx", "portfolio", docx).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    assert!(
        json(response).await["content_type"]
            .as_str()
            .unwrap()
            .contains("wordprocessingml")
    );
}

#[actix_web::test]
async fn administrators_hear_of_new_profiles() {
    let app = spawn_app().await;
    let (admin_id, _) = admin(&app, "root").await;
    let ana = register(&app, "ana", &["experto"]).await;
    create_profile(
        &app,
        &ana,
        j!({"profile_type": "experto", "full_name": "Ana"}),
    )
    .await;
    crate::market::wait_notification(&app, admin_id, "profile_created").await;
    assert_eq!(
        crate::market::notifications_of(&app, admin_id, "profile_created").await,
        1,
        "the administrator is told of the new profile, once"
    );
}
