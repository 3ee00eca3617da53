//! CRM synchronisation (issue 17) against a fake LeadConnector server started by each test:
//! wire format and headers, tags and custom fields, the retry scheduler, 429s, deletion tags,
//! inbound webhooks, the health check and tag drift. One test runs the in-process sandbox.

mod fake;

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use self::fake::{FakeCrm, KEY, LOCATION, field_id};
use crate::helpers::{Account, PASSWORD, TestApp, cookie_value, json as body_of, register};
use crate::market::{Market, send};
use marketplace::integrations::crm::webhook::sign;
use marketplace::workflows::crm::CrmService;

const SECRET: &str = "crm-webhook-secret";

async fn market(fake: &FakeCrm, extra: &[(&str, &str)]) -> Market {
    let mut vars = vec![
        ("CRM_API_BASE", fake.url.as_str()),
        ("CRM_API_KEY", KEY),
        ("CRM_LOCATION_ID", LOCATION),
        ("CRM_WEBHOOK_SECRET", SECRET),
        ("CRM_PIPELINE_ID", "pipe-1"),
    ];
    vars.extend_from_slice(extra);
    Market::open_with(&vars).await
}

/// Registers with marketing consent and a source.
async fn sign_up(
    app: &TestApp,
    username: &str,
    roles: &[&str],
    marketing: bool,
    source: &str,
) -> Account {
    let email = format!("{username}@example.com");
    let response = app
        .post_json(
            "/api/auth/register",
            &json!({"email": email, "username": username, "password": PASSWORD, "roles": roles,
                    "accept_marketing": marketing, "source": source}),
        )
        .await;
    assert_eq!(response.status(), 201);
    let refresh_cookie = cookie_value(&response, "refresh_token").unwrap();
    let body = body_of(response).await;
    Account {
        id: body["user"]["id"].as_i64().unwrap(),
        email,
        username: username.to_owned(),
        access_token: body["access_token"].as_str().unwrap().to_owned(),
        csrf_token: body["csrf_token"].as_str().unwrap().to_owned(),
        refresh_cookie,
    }
}

/// (event_type, status, retry_count, exhausted) of a user's sync-log entries, oldest first.
async fn logs(app: &TestApp, user_id: i64) -> Vec<(String, String, i64, bool)> {
    let mut conn = app.db.conn().await.unwrap();
    let rows: Vec<(String, String, i64, Option<chrono::DateTime<chrono::Utc>>)> =
        marketplace::on_exec!(conn.exec(), c => sqlx::query_as(
            "SELECT event_type, status, retry_count, exhausted_at FROM crm_sync_log WHERE user_id = $1 ORDER BY id")
            .bind(user_id).fetch_all(c).await)
        .unwrap();
    rows.into_iter()
        .map(|(e, s, r, x)| (e, s, r, x.is_some()))
        .collect()
}

/// Runs the outbox until the user has a log entry of `event_type` (five seconds at most).
async fn wait_log(app: &TestApp, user_id: i64, event_type: &str) -> (String, String, i64, bool) {
    for _ in 0..250 {
        let _ = app.state.outbox.trigger().await;
        CrmService::of(&app.state).flush().await;
        if let Some(entry) = logs(app, user_id)
            .await
            .into_iter()
            .rev()
            .find(|l| l.0 == event_type)
        {
            return entry;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "no {event_type} sync for user {user_id}: {:?}",
        logs(app, user_id).await
    );
}

async fn crm_id(app: &TestApp, user_id: i64) -> Option<String> {
    let mut conn = app.db.conn().await.unwrap();
    marketplace::on_exec!(conn.exec(), c => sqlx::query_scalar::<_, Option<String>>(
        "SELECT crm_id FROM users WHERE id = $1").bind(user_id).fetch_one(c).await)
    .unwrap()
}

async fn retry_now(app: &TestApp) {
    app.state
        .jobs
        .trigger(marketplace::workflows::crm::retry::JOB_NAME)
        .await
        .expect("retry cycle ran");
}

fn sorted(tags: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = tags.iter().map(|t| t.to_string()).collect();
    v.sort();
    v
}

#[actix_web::test]
async fn registration_then_profile_leave_exactly_the_specified_tags_and_master_key() {
    let fake = FakeCrm::start().await;
    let m = market(&fake, &[]).await;
    let app = &m.app;
    let ana = sign_up(app, "ana_exp", &["experto"], true, "linkedin").await;

    assert_eq!(
        wait_log(app, ana.id, "registration_minimal").await.1,
        "success"
    );
    let contact = crm_id(app, ana.id).await.expect("crm_id stored");
    assert_eq!(
        fake.tags(&contact),
        sorted(&[
            "registro-incompleto",
            "experto-pendiente",
            "marketing-opt-in",
            "src-linkedin"
        ])
    );
    let c = fake.contact(&contact);
    assert!(
        c["customFields"]
            .as_array()
            .unwrap()
            .contains(&json!({"id": field_id("id_platform"), "value": ana.id.to_string()})),
        "{c}"
    );

    let response = send(app, Method::POST, "/api/profiles/", &ana,
        Some(&json!({"profile_type": "experto", "full_name": "Ana Expert", "hourly_rate": 45.5, "main_area": "Data"}))).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    assert_eq!(wait_log(app, ana.id, "profile_enriched").await.1, "success");
    assert_eq!(
        fake.tags(&contact),
        sorted(&[
            "exp-solicitud",
            "exp-nivel-global",
            "marketing-opt-in",
            "src-linkedin"
        ])
    );
    let c = fake.contact(&contact);
    assert_eq!(c["name"], "Ana Expert");
    let fields = c["customFields"].as_array().unwrap();
    assert!(
        fields.contains(&json!({"id": field_id("tipo_de_usuario"), "value": "experto"})),
        "{c}"
    );
    assert!(
        fields.contains(&json!({"id": field_id("hourly_rate"), "value": 45.5})),
        "decimal as a number: {c}"
    );

    let requests = fake.requests();
    assert!(requests.len() >= 6);
    for r in &requests {
        assert_eq!(
            r.authorization.as_deref(),
            Some("Bearer pit-test-key"),
            "{} {}",
            r.method,
            r.path
        );
        assert_eq!(
            r.version.as_deref(),
            Some("2021-07-28"),
            "{} {}",
            r.method,
            r.path
        );
    }
    let puts: Vec<_> = requests.iter().filter(|r| r.method == "PUT").collect();
    assert!(!puts.is_empty());
    for put in puts {
        assert!(
            put.body.get("locationId").is_none() && put.body.get("source").is_none(),
            "{}",
            put.body
        );
    }
    let upsert = requests
        .iter()
        .find(|r| r.path == "/contacts/upsert")
        .unwrap();
    assert_eq!(upsert.body["locationId"], LOCATION);

    // A second role adds its pending tag and the combined user type.
    let response = send(
        app,
        Method::POST,
        "/api/auth/add-role",
        &ana,
        Some(&json!({"role": "empresa"})),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    for _ in 0..250 {
        let _ = app.state.outbox.trigger().await;
        CrmService::of(&app.state).flush().await;
        if fake
            .tags(&contact)
            .contains(&"empresa-pendiente".to_string())
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        fake.tags(&contact),
        sorted(&[
            "empresa-pendiente",
            "exp-solicitud",
            "exp-nivel-global",
            "marketing-opt-in",
            "src-linkedin"
        ])
    );
    let c = fake.contact(&contact);
    assert!(
        c["customFields"]
            .as_array()
            .unwrap()
            .contains(&json!({"id": field_id("tipo_de_usuario"), "value": "empresa_experto"})),
        "{c}"
    );
    fake.stop().await;
}

#[actix_web::test]
async fn a_failed_sync_is_replayed_by_the_retry_actor_and_given_up_after_five_attempts() {
    let fake = FakeCrm::start().await;
    let m = market(&fake, &[]).await;
    let app = &m.app;
    fake.with(|s| s.down = true);
    let bea = register(app, "bea_co", &["empresa"]).await;
    assert_eq!(
        wait_log(app, bea.id, "registration_minimal").await.1,
        "failed"
    );
    assert!(crm_id(app, bea.id).await.is_none());

    // The CRM is back: the retry replays it with the user's current state.
    fake.with(|s| s.down = false);
    retry_now(app).await;
    assert_eq!(
        logs(app, bea.id).await,
        vec![("registration_minimal".into(), "success".into(), 1, false)]
    );
    let contact = crm_id(app, bea.id).await.expect("linked by the retry");
    assert_eq!(
        fake.tags(&contact),
        sorted(&["registro-incompleto", "empresa-pendiente", "src-web"])
    );

    // A CRM that stays down: five attempts, then the entry stays failed, marked exhausted.
    fake.with(|s| s.down = true);
    let carl = register(app, "carl_co", &["empresa"]).await;
    assert_eq!(
        wait_log(app, carl.id, "registration_minimal").await.1,
        "failed"
    );
    for attempt in 1..=5 {
        retry_now(app).await;
        let entry = logs(app, carl.id).await.remove(0);
        assert_eq!((entry.2, entry.3), (attempt, attempt == 5));
    }
    assert_eq!(
        logs(app, carl.id).await,
        vec![("registration_minimal".into(), "failed".into(), 5, true)]
    );
    // Exhausted entries are not replayed again.
    fake.with(|s| s.down = false);
    let before = fake.requests().len();
    retry_now(app).await;
    assert_eq!(fake.requests().len(), before);
    assert_eq!(logs(app, carl.id).await[0].2, 5);

    let metrics = app.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains("kind=\"crm_retry\""),
        "retry actor among the actor metrics"
    );
    assert!(metrics.contains("crm_sync_retries_total 6"), "{metrics}");
    assert!(metrics.contains("crm_syncs_total{status=\"success\"}"));
    assert!(metrics.contains("crm_request_duration_seconds_count"));
    fake.stop().await;
}

#[actix_web::test]
async fn a_429_is_waited_out_as_retry_after_says_and_nothing_is_lost() {
    let fake = FakeCrm::start().await;
    let m = market(&fake, &[]).await;
    let app = &m.app;
    // The first call (custom fields) is refused once with Retry-After: 1.
    fake.with(|s| s.scripted.push_back((429, Some(1))));
    let dan = register(app, "dan_exp", &["experto"]).await;
    assert_eq!(
        wait_log(app, dan.id, "registration_minimal").await.1,
        "success"
    );
    let requests = fake.requests();
    assert_eq!(
        requests[0].path,
        format!("/locations/{LOCATION}/customFields")
    );
    assert_eq!(
        requests[1].path, requests[0].path,
        "the refused call is repeated"
    );
    assert!(
        requests[1].at - requests[0].at >= Duration::from_millis(950),
        "waited out"
    );
    assert!(crm_id(app, dan.id).await.is_some());
    fake.stop().await;
}

#[actix_web::test]
async fn removal_tags_follow_the_deletion_events_and_never_block_on_a_crm_that_is_down() {
    let fake = FakeCrm::start().await;
    let m = market(&fake, &[]).await;
    let app = &m.app;
    let eva = register(app, "eva_exp", &["experto"]).await;
    wait_log(app, eva.id, "registration_minimal").await;
    let contact = crm_id(app, eva.id).await.unwrap();

    let record = |kind: &'static str, payload: Value| async move {
        let mut tx = app.db.begin().await.unwrap();
        marketplace::store::events::record(
            tx.exec(),
            marketplace::store::events::NewEvent {
                kind,
                aggregate: "user",
                aggregate_id: Some(eva.id),
                payload,
            },
            app.clock.now(),
        )
        .await
        .unwrap();
        tx.commit().await.unwrap();
    };
    record("user.deletion_requested", json!({"user_id": eva.id})).await;
    wait_log(app, eva.id, "tag_add").await;
    record("user.deletion_confirmed", json!({"user_id": eva.id})).await;
    for _ in 0..250 {
        let _ = app.state.outbox.trigger().await;
        CrmService::of(&app.state).flush().await;
        if fake.tags(&contact).contains(&"baja-confirmada".to_string()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(fake.tags(&contact).contains(&"baja-solicitada".to_string()));
    assert!(fake.tags(&contact).contains(&"baja-confirmada".to_string()));

    // Final deletion while the CRM is down: the event is dispatched at once (the deletion
    // waits on nothing), the sync is logged failed, and the retry tags the contact later.
    fake.with(|s| s.down = true);
    record(
        "user.deleted",
        json!({"user_id": eva.id, "email": eva.email, "crm_id": contact}),
    )
    .await;
    assert_eq!(wait_log(app, eva.id, "user_deleted").await.1, "failed");
    let mut conn = app.db.conn().await.unwrap();
    let pending = marketplace::store::events::OUTBOX
        .pending_count(conn.exec())
        .await
        .unwrap();
    assert_eq!(pending, 0, "the outbox is not held up by the CRM");
    drop(conn);
    fake.with(|s| s.down = false);
    retry_now(app).await;
    assert!(
        fake.tags(&contact)
            .contains(&"usuario-eliminado".to_string())
    );
    assert_eq!(wait_log(app, eva.id, "user_deleted").await.1, "success");
    fake.stop().await;
}

async fn post_webhook(app: &TestApp, body: &Value, signature: Option<String>) -> reqwest::Response {
    let raw = serde_json::to_vec(body).unwrap();
    let mut request = app
        .client
        .post(app.url("/api/webhooks/crm"))
        .header("Content-Type", "application/json")
        .body(raw);
    if let Some(sig) = signature {
        request = request.header("X-CRM-Signature", sig);
    }
    request.send().await.unwrap()
}

async fn signed(app: &TestApp, body: &Value) -> reqwest::Response {
    let sig = sign(
        &marketplace::config::Secret::new(SECRET),
        &serde_json::to_vec(body).unwrap(),
    );
    post_webhook(app, body, Some(sig)).await
}

async fn webhook_outcome(app: &TestApp, webhook_id: &str) -> Option<String> {
    for _ in 0..250 {
        let mut conn = app.db.conn().await.unwrap();
        let outcome: Option<Option<String>> = marketplace::on_exec!(conn.exec(), c => sqlx::query_scalar(
            "SELECT outcome FROM crm_webhook_events WHERE webhook_id = $1").bind(webhook_id).fetch_optional(c).await)
        .unwrap();
        match outcome {
            None => return None,
            Some(Some(o)) => return Some(o),
            Some(None) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    panic!("webhook {webhook_id} never processed");
}

#[actix_web::test]
async fn inbound_webhooks_are_verified_fresh_applied_once_and_scoped_to_the_location() {
    let fake = FakeCrm::start().await;
    let m = market(&fake, &[]).await;
    let app = &m.app;
    let fay = sign_up(app, "fay_co", &["empresa"], true, "ads").await;
    wait_log(app, fay.id, "registration_minimal").await;
    let contact = crm_id(app, fay.id).await.unwrap();
    let now = chrono::Utc::now().to_rfc3339();
    let tags_event = json!({"type": "ContactTagUpdate", "locationId": LOCATION, "id": contact, "email": fay.email,
        "tags": ["vip", "src-ads"], "dateAdded": now, "timestamp": now, "webhookId": "wh-1"});

    // No signature, a wrong one: 401, nothing stored.
    assert_eq!(
        post_webhook(app, &tags_event, None).await.status(),
        StatusCode::UNAUTHORIZED
    );
    let wrong = sign(
        &marketplace::config::Secret::new("other"),
        &serde_json::to_vec(&tags_event).unwrap(),
    );
    assert_eq!(
        post_webhook(app, &tags_event, Some(wrong)).await.status(),
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(webhook_outcome(app, "wh-1").await, None);

    // Stale: 400.
    let mut stale = tags_event.clone();
    stale["timestamp"] = json!((chrono::Utc::now() - chrono::Duration::minutes(6)).to_rfc3339());
    stale["webhookId"] = json!("wh-stale");
    assert_eq!(signed(app, &stale).await.status(), StatusCode::BAD_REQUEST);
    assert_eq!(webhook_outcome(app, "wh-stale").await, None);

    // Applied once; the repeat is answered 200 and changes nothing.
    let response = signed(app, &tags_event).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        webhook_outcome(app, "wh-1").await.as_deref(),
        Some("applied")
    );
    let mut repeat = tags_event.clone();
    repeat["tags"] = json!(["changed"]);
    let sig = sign(
        &marketplace::config::Secret::new(SECRET),
        &serde_json::to_vec(&repeat).unwrap(),
    );
    let response = post_webhook(app, &repeat, Some(sig)).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(body_of(response).await["duplicate"], true);
    let status = m
        .as_admin(
            Method::GET,
            &format!("/api/integrations/crm/status/{contact}"),
            None,
        )
        .await;
    assert_eq!(status.status(), StatusCode::OK);
    let status = body_of(status).await;
    assert_eq!(status["user"]["id"], fay.id);
    let mut conn = app.db.conn().await.unwrap();
    let stored = marketplace::store::crm::contact_state(conn.exec(), &contact)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.tags.unwrap().0, vec!["vip", "src-ads"]);
    drop(conn);

    // E-mail DND on: marketing consent off.
    let dnd = json!({"type": "ContactDndUpdate", "locationId": LOCATION, "id": contact, "dnd": true,
        "dndSettings": {"Email": {"status": "active"}}, "timestamp": now, "webhookId": "wh-2"});
    assert_eq!(signed(app, &dnd).await.status(), StatusCode::OK);
    assert_eq!(
        webhook_outcome(app, "wh-2").await.as_deref(),
        Some("applied")
    );
    let mut conn = app.db.conn().await.unwrap();
    let marketing: bool = marketplace::on_exec!(conn.exec(), c => sqlx::query_scalar(
        "SELECT accept_marketing FROM users WHERE id = $1").bind(fay.id).fetch_one(c).await)
    .unwrap();
    assert!(!marketing);
    drop(conn);

    // An opportunity shows in the contact's status; another location and an unknown contact
    // are answered 200 and ignored.
    let opp = json!({"type": "OpportunityUpdate", "locationId": LOCATION, "id": "opp-9", "contactId": contact,
        "pipelineId": "pipe-1", "pipelineStageId": "st-2", "status": "won", "monetaryValue": 1500.5,
        "timestamp": now, "webhookId": "wh-3"});
    assert_eq!(signed(app, &opp).await.status(), StatusCode::OK);
    assert_eq!(
        webhook_outcome(app, "wh-3").await.as_deref(),
        Some("applied")
    );
    let status = body_of(
        m.as_admin(
            Method::GET,
            &format!("/api/integrations/crm/status/{contact}"),
            None,
        )
        .await,
    )
    .await;
    assert_eq!(status["opportunities"][0]["id"], "opp-9");
    assert_eq!(status["opportunities"][0]["status"], "won");
    assert_eq!(status["opportunities"][0]["monetary_value"], 1500.5);
    let mut elsewhere = tags_event.clone();
    elsewhere["locationId"] = json!("other-location");
    elsewhere["webhookId"] = json!("wh-4");
    assert_eq!(signed(app, &elsewhere).await.status(), StatusCode::OK);
    assert_eq!(
        webhook_outcome(app, "wh-4").await.as_deref(),
        Some("ignored: another location")
    );
    let mut stranger = tags_event.clone();
    stranger["id"] = json!("contact-unknown");
    stranger["webhookId"] = json!("wh-5");
    assert_eq!(signed(app, &stranger).await.status(), StatusCode::OK);
    assert_eq!(
        webhook_outcome(app, "wh-5").await.as_deref(),
        Some("ignored: unknown contact")
    );
    fake.stop().await;
}

#[actix_web::test]
async fn the_health_check_runs_four_or_eight_checks_and_a_wrong_key_makes_it_unhealthy() {
    let fake = FakeCrm::start().await;
    let m = market(&fake, &[]).await;
    let app = &m.app;
    let gus = register(app, "gus_exp", &["experto"]).await;
    wait_log(app, gus.id, "registration_minimal").await;

    let quick = body_of(
        m.as_admin(Method::GET, "/api/integrations/crm/health-check", None)
            .await,
    )
    .await;
    let names: Vec<&str> = quick["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["config", "sync_logs", "last_sync", "aggregate"]);
    assert_eq!(quick["status"], "healthy", "{quick}");
    assert_eq!(quick["summary"]["total"], 4);
    assert!(quick["checked_at"].is_string());

    let full = body_of(
        m.as_admin(
            Method::GET,
            "/api/integrations/crm/health-check?detail_level=full",
            None,
        )
        .await,
    )
    .await;
    assert_eq!(full["checks"].as_array().unwrap().len(), 8);
    assert_eq!(full["summary"]["total"], 8);
    let check = |body: &Value, name: &str| {
        body["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(check(&full, "api_ping")["status"], "pass");
    assert_eq!(check(&full, "custom_fields")["status"], "pass");
    assert_eq!(check(&full, "tag_drift")["status"], "pass", "{full}");
    assert_ne!(full["status"], "unhealthy", "{full}");

    // The key is revoked at the CRM.
    fake.with(|s| s.key = "another-key".into());
    let full = body_of(
        m.as_admin(
            Method::GET,
            "/api/integrations/crm/health-check?detail_level=full",
            None,
        )
        .await,
    )
    .await;
    assert_eq!(full["status"], "unhealthy");
    assert_eq!(check(&full, "api_ping")["status"], "fail");
    let quick = body_of(
        m.as_admin(Method::GET, "/api/integrations/crm/health-check", None)
            .await,
    )
    .await;
    assert_eq!(quick["status"], "unhealthy", "the 401 is reported: {quick}");
    assert_eq!(check(&quick, "config")["status"], "fail");

    // Not an administrator: 403.
    let response = send(
        app,
        Method::GET,
        "/api/integrations/crm/health-check",
        &gus,
        None,
    )
    .await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    let response = m
        .as_admin(
            Method::GET,
            "/api/integrations/crm/health-check?detail_level=deep",
            None,
        )
        .await;
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    fake.stop().await;
}

#[actix_web::test]
async fn tag_drift_made_in_the_crm_is_reported_and_repaired() {
    let fake = FakeCrm::start().await;
    let m = market(&fake, &[]).await;
    let app = &m.app;
    let hal = register(app, "hal_co", &["empresa"]).await;
    wait_log(app, hal.id, "registration_minimal").await;
    let contact = crm_id(app, hal.id).await.unwrap();
    // Someone edits the contact in the CRM.
    fake.with(|s| {
        s.contacts.get_mut(&contact).unwrap()["tags"] = json!(["registro-incompleto", "manual"])
    });

    let report = body_of(
        m.as_admin(
            Method::GET,
            &format!("/api/admin/users/{}/crm-tags", hal.id),
            None,
        )
        .await,
    )
    .await;
    assert_eq!(
        report["expected"],
        json!(["empresa-pendiente", "registro-incompleto", "src-web"])
    );
    assert_eq!(report["actual"], json!(["registro-incompleto", "manual"]));
    assert_eq!(report["missing"], json!(["empresa-pendiente", "src-web"]));
    assert_eq!(report["extra"], json!(["manual"]));

    let diagnosis = body_of(
        m.as_admin(
            Method::GET,
            &format!("/api/admin/users/{}/crm-diagnosis", hal.id),
            None,
        )
        .await,
    )
    .await;
    assert_eq!(diagnosis["linked"], true);
    assert_eq!(diagnosis["lookups"][0]["method"], "crm_id");
    assert!(
        diagnosis["problems"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p.as_str().unwrap().contains("expected tags missing")),
        "{diagnosis}"
    );

    let response = m
        .as_admin(
            Method::POST,
            &format!("/api/admin/users/{}/crm-sync-tags", hal.id),
            None,
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let report = body_of(response).await;
    assert_eq!(report["missing"], json!([]));
    assert_eq!(report["extra"], json!([]));
    assert_eq!(
        fake.tags(&contact),
        sorted(&["empresa-pendiente", "registro-incompleto", "src-web"])
    );

    let response = send(
        app,
        Method::GET,
        &format!("/api/admin/users/{}/crm-tags", hal.id),
        &hal,
        None,
    )
    .await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);

    // The sync log lists it, filtered.
    let page = body_of(
        m.as_admin(
            Method::GET,
            &format!(
                "/api/integrations/crm/sync-logs?user_id={}&event_type=contact_update",
                hal.id
            ),
            None,
        )
        .await,
    )
    .await;
    assert_eq!(page["total"], 1);
    assert_eq!(page["items"][0]["status"], "success");
    let response = m
        .as_admin(
            Method::GET,
            "/api/integrations/crm/sync-logs?status=bogus",
            None,
        )
        .await;
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    fake.stop().await;
}

#[actix_web::test]
async fn a_contact_found_by_email_is_linked_and_tags_accumulate() {
    let fake = FakeCrm::start().await;
    // The lead exists in the CRM before registering, with a tag of its own.
    fake.with(|s| {
        s.contacts.insert("lead-1".into(), json!({"id": "lead-1", "email": "ivy_exp@example.com", "tags": ["webinar"], "customFields": []}));
    });
    let m = market(&fake, &[]).await;
    let app = &m.app;
    let ivy = register(app, "ivy_exp", &["experto"]).await;
    assert_eq!(
        wait_log(app, ivy.id, "registration_minimal").await.1,
        "success"
    );
    assert_eq!(crm_id(app, ivy.id).await.as_deref(), Some("lead-1"));
    assert_eq!(
        fake.tags("lead-1"),
        sorted(&[
            "webinar",
            "registro-incompleto",
            "experto-pendiente",
            "src-web"
        ])
    );

    let response = m
        .as_admin(
            Method::POST,
            "/api/integrations/crm/tag",
            Some(&json!({"user_id": ivy.id, "tags": ["Priority"]})),
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(body_of(response).await["status"], "success");
    assert!(fake.tags("lead-1").contains(&"priority".to_string()));
    fake.stop().await;
}

#[actix_web::test]
async fn with_the_sandbox_the_whole_sync_works_in_process_and_off_means_nothing_sent() {
    let m = Market::open_with(&[("CRM_API_BASE", "sandbox"), ("CRM_WEBHOOK_SECRET", SECRET)]).await;
    let app = &m.app;
    let company = m.company("jay_co").await;
    wait_log(app, company.id, "profile_enriched").await;
    let contact = crm_id(app, company.id).await.unwrap();
    let sandbox = app.state.crm.sandbox.as_ref().expect("sandbox");
    let tags = sandbox.with_state(|s| s.contacts[&contact]["tags"].clone());
    let mut tags: Vec<String> = serde_json::from_value(tags).unwrap();
    tags.sort();
    assert_eq!(tags, sorted(&["emp-nuevo-registro", "src-web"]));

    let project = m
        .create_project(&company, json!({"title": "Data platform", "description": "Build it", "budget": 2500.75,
            "deadline": "2030-01-01T00:00:00", "skills_required": ["Rust"], "project_type": "curated"}))
        .await;
    let response = m
        .as_admin(
            Method::POST,
            "/api/integrations/crm/opportunity",
            Some(&json!({"project_id": project["id"]})),
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let entry = body_of(response).await;
    assert_eq!(entry["status"], "success", "{entry}");
    let opportunity = entry["response"]["opportunity_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let value = sandbox.with_state(|s| s.opportunities[&opportunity]["monetaryValue"].clone());
    assert_eq!(value, json!(2500.75));
    let status = body_of(
        m.as_admin(
            Method::GET,
            &format!("/api/integrations/crm/status/{contact}"),
            None,
        )
        .await,
    )
    .await;
    assert_eq!(status["opportunities"][0]["id"], opportunity.as_str());
    assert_eq!(status["contact"]["id"], contact.as_str());

    let full = body_of(
        m.as_admin(
            Method::GET,
            "/api/integrations/crm/health-check?detail_level=full",
            None,
        )
        .await,
    )
    .await;
    assert_ne!(full["status"], "unhealthy", "{full}");

    // Off: nothing sent, the health check says why.
    let off = Market::open().await;
    let kim = register(&off.app, "kim_co", &["empresa"]).await;
    let _ = off.app.state.outbox.trigger().await;
    CrmService::of(&app.state).flush().await;
    assert!(logs(&off.app, kim.id).await.is_empty());
    let quick = body_of(
        off.as_admin(Method::GET, "/api/integrations/crm/health-check", None)
            .await,
    )
    .await;
    assert_eq!(quick["status"], "unhealthy");
    assert!(
        quick["checks"][0]["message"]
            .as_str()
            .unwrap()
            .contains("CRM_API_KEY")
    );
    let response = off
        .as_admin(
            Method::POST,
            "/api/integrations/crm/contact",
            Some(&json!({"user_id": kim.id})),
        )
        .await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
}

/// Runs the outbox until `probe` holds on the fake (five seconds at most).
async fn wait_fake(app: &TestApp, fake: &FakeCrm, what: &str, probe: impl Fn(&FakeCrm) -> bool) {
    for _ in 0..250 {
        let _ = app.state.outbox.trigger().await;
        CrmService::of(&app.state).flush().await;
        if probe(fake) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{what} never reached the CRM");
}

#[actix_web::test]
async fn username_email_level_and_rating_changes_follow_the_contact() {
    let fake = FakeCrm::start().await;
    let m = market(&fake, &[]).await;
    let app = &m.app;
    let leo = register(app, "leo_exp", &["experto"]).await;
    wait_log(app, leo.id, "registration_minimal").await;
    let contact = crm_id(app, leo.id).await.unwrap();

    let response = send(
        app,
        Method::PUT,
        "/api/users/me",
        &leo,
        Some(&json!({"username": "leo_renamed"})),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    wait_fake(app, &fake, "the username", |f| {
        f.contact(&contact)["name"] == "leo_renamed"
    })
    .await;

    let response = send(
        app,
        Method::PUT,
        "/api/users/me/email",
        &leo,
        Some(&json!({"new_email": "leo.new@example.com", "current_password": PASSWORD})),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    wait_fake(app, &fake, "the e-mail", |f| {
        f.contact(&contact)["email"] == "leo.new@example.com"
    })
    .await;

    // Profile, then a level change recorded by whoever changes levels.
    let response = send(
        app,
        Method::POST,
        "/api/profiles/",
        &leo,
        Some(&json!({"profile_type": "experto"})),
    )
    .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    wait_fake(app, &fake, "the profile", |f| {
        f.tags(&contact).contains(&"exp-nivel-global".to_string())
    })
    .await;
    let mut tx = app.db.begin().await.unwrap();
    marketplace::on_exec!(tx.exec(), c => sqlx::query("UPDATE profiles SET expert_level = 'Pro' WHERE user_id = $1")
        .bind(leo.id).execute(c).await.map(|r| r.rows_affected())).unwrap();
    for (kind, payload) in [
        (
            "profile.expert_level_changed",
            json!({"user_id": leo.id, "level": "Pro"}),
        ),
        (
            "user.internal_rating_changed",
            json!({"user_id": leo.id, "rating": 4.5}),
        ),
    ] {
        marketplace::store::events::record(
            tx.exec(),
            marketplace::store::events::NewEvent {
                kind,
                aggregate: "user",
                aggregate_id: Some(leo.id),
                payload,
            },
            app.clock.now(),
        )
        .await
        .unwrap();
    }
    tx.commit().await.unwrap();
    let rating = json!({"id": field_id("internal_rating"), "value": 4.5});
    wait_fake(app, &fake, "the rating", |f| {
        f.contact(&contact)["customFields"]
            .as_array()
            .unwrap()
            .contains(&rating)
    })
    .await;
    let levels: Vec<String> = fake
        .tags(&contact)
        .into_iter()
        .filter(|t| t.starts_with("exp-nivel-"))
        .collect();
    assert_eq!(levels, ["exp-nivel-pro"], "exactly one level tag");
    // Every change was logged.
    let kinds: Vec<String> = logs(app, leo.id).await.into_iter().map(|l| l.0).collect();
    assert!(
        kinds.iter().filter(|k| *k == "contact_update").count() >= 4,
        "{kinds:?}"
    );
    fake.stop().await;
}

#[actix_web::test]
async fn two_retry_cycles_at_once_count_each_attempt_once() {
    let fake = FakeCrm::start().await;
    let m = market(&fake, &[]).await;
    let app = &m.app;
    fake.with(|s| s.down = true);
    let mia = register(app, "mia_co", &["empresa"]).await;
    assert_eq!(
        wait_log(app, mia.id, "registration_minimal").await.1,
        "failed"
    );
    fake.with(|s| s.down = false);
    let crm = &CrmService::of(&app.state);
    let (a, b) = tokio::join!(
        marketplace::workflows::crm::retry_failed(crm),
        marketplace::workflows::crm::retry_failed(crm)
    );
    assert_eq!(
        a.unwrap().attempted + b.unwrap().attempted,
        1,
        "one cycle records the attempt"
    );
    assert_eq!(
        logs(app, mia.id).await,
        vec![("registration_minimal".into(), "success".into(), 1, false)]
    );
    fake.stop().await;
}

#[actix_web::test]
async fn an_inbound_event_stored_but_never_applied_is_applied_by_the_retry_cycle() {
    let fake = FakeCrm::start().await;
    let m = market(&fake, &[]).await;
    let app = &m.app;
    let ned = sign_up(app, "ned_co", &["empresa"], true, "web").await;
    wait_log(app, ned.id, "registration_minimal").await;
    let contact = crm_id(app, ned.id).await.unwrap();
    // Stored as the receiver does, then the process stopped before applying it.
    let payload = json!({"type": "ContactDndUpdate", "locationId": LOCATION, "id": contact,
        "dndSettings": {"Email": {"status": "active"}}, "webhookId": "wh-lost"});
    let mut conn = app.db.conn().await.unwrap();
    let earlier = app.clock.now() - chrono::Duration::minutes(10);
    assert!(
        marketplace::store::crm::insert_webhook(
            conn.exec(),
            "wh-lost",
            "ContactDndUpdate",
            Some(LOCATION),
            Some(&contact),
            &payload,
            earlier
        )
        .await
        .unwrap()
    );
    drop(conn);
    retry_now(app).await;
    assert_eq!(
        webhook_outcome(app, "wh-lost").await.as_deref(),
        Some("applied")
    );
    let mut conn = app.db.conn().await.unwrap();
    let marketing: bool = marketplace::on_exec!(conn.exec(), c => sqlx::query_scalar(
        "SELECT accept_marketing FROM users WHERE id = $1").bind(ned.id).fetch_one(c).await)
    .unwrap();
    assert!(!marketing);
    fake.stop().await;
}

#[actix_web::test]
async fn a_slow_crm_never_holds_up_the_outbox() {
    let fake = FakeCrm::start().await;
    fake.with(|s| s.delay = Duration::from_millis(700));
    let m = market(&fake, &[]).await;
    let app = &m.app;
    let ola = register(app, "ola_exp", &["experto"]).await;
    let response = send(
        app,
        Method::POST,
        "/api/profiles/",
        &ola,
        Some(&json!({"profile_type": "experto"})),
    )
    .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    // The administrators' notification goes out at once, while the CRM takes 700 ms a call.
    let started = std::time::Instant::now();
    crate::market::wait_notification(app, m.admin_id, "profile_created").await;
    assert!(
        started.elapsed() < Duration::from_millis(700),
        "{:?}",
        started.elapsed()
    );
    // The CRM gets there too, in order.
    assert_eq!(wait_log(app, ola.id, "profile_enriched").await.1, "success");
    let kinds: Vec<String> = logs(app, ola.id).await.into_iter().map(|l| l.0).collect();
    assert_eq!(kinds, ["registration_minimal", "profile_enriched"]);
    fake.stop().await;
}

#[actix_web::test]
async fn a_user_deleted_before_the_sync_runs_is_logged_without_them() {
    let fake = FakeCrm::start().await;
    let m = market(&fake, &[]).await;
    let app = &m.app;
    let pia = register(app, "pia_co", &["empresa"]).await;
    wait_log(app, pia.id, "registration_minimal").await;
    let contact = crm_id(app, pia.id).await.unwrap();
    let mut tx = app.db.begin().await.unwrap();
    marketplace::store::events::record(
        tx.exec(),
        marketplace::store::events::NewEvent {
            kind: "user.deleted",
            aggregate: "user",
            aggregate_id: Some(pia.id),
            payload: json!({"user_id": pia.id, "email": pia.email, "crm_id": contact}),
        },
        app.clock.now(),
    )
    .await
    .unwrap();
    marketplace::on_exec!(tx.exec(), c => sqlx::query("DELETE FROM users WHERE id = $1")
        .bind(pia.id).execute(c).await.map(|r| r.rows_affected()))
    .unwrap();
    tx.commit().await.unwrap();
    wait_fake(app, &fake, "the deletion tag", |f| {
        f.tags(&contact).contains(&"usuario-eliminado".to_string())
    })
    .await;
    let page = body_of(
        m.as_admin(
            Method::GET,
            "/api/integrations/crm/sync-logs?event_type=user_deleted",
            None,
        )
        .await,
    )
    .await;
    assert_eq!(page["total"], 1);
    assert_eq!(page["items"][0]["status"], "success");
    assert_eq!(page["items"][0]["user_id"], Value::Null);
    assert_eq!(page["items"][0]["crm_contact_id"], contact.as_str());
    fake.stop().await;
}

#[actix_web::test]
async fn the_contact_is_looked_up_by_crm_id_then_sync_log_then_email_and_linked() {
    let fake = FakeCrm::start().await;
    let m = market(&fake, &[]).await;
    let app = &m.app;
    let diagnose = |id: i64| {
        let m = &m;
        async move {
            body_of(
                m.as_admin(
                    Method::GET,
                    &format!("/api/admin/users/{id}/crm-diagnosis"),
                    None,
                )
                .await,
            )
            .await
        }
    };
    let methods = |d: &Value| -> Vec<(String, String)> {
        d["lookups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| {
                (
                    l["method"].as_str().unwrap().to_owned(),
                    l["result"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };

    // Known to the sync log only (crm_id lost): found there, and linked again.
    let quin = register(app, "quin_co", &["empresa"]).await;
    wait_log(app, quin.id, "registration_minimal").await;
    let contact = crm_id(app, quin.id).await.unwrap();
    let mut conn = app.db.conn().await.unwrap();
    marketplace::on_exec!(conn.exec(), c => sqlx::query("UPDATE users SET crm_id = NULL WHERE id = $1")
        .bind(quin.id).execute(c).await.map(|r| r.rows_affected())).unwrap();
    drop(conn);
    let d = diagnose(quin.id).await;
    assert_eq!(
        methods(&d),
        [
            ("crm_id".into(), "not_found".into()),
            ("sync_log".into(), "found".into())
        ]
    );
    assert_eq!(d["contact_id"], contact.as_str());
    assert_eq!(
        crm_id(app, quin.id).await.as_deref(),
        Some(contact.as_str())
    );

    // Never synchronised (the CRM was down), but a contact with the e-mail exists: found by
    // the duplicate search, and linked.
    fake.with(|s| s.down = true);
    let rex = register(app, "rex_co", &["empresa"]).await;
    assert_eq!(
        wait_log(app, rex.id, "registration_minimal").await.1,
        "failed"
    );
    fake.with(|s| {
        s.down = false;
        s.contacts.insert("lead-rex".into(), json!({"id": "lead-rex", "email": "rex_co@example.com", "tags": [], "customFields": []}));
    });
    let d = diagnose(rex.id).await;
    assert_eq!(
        methods(&d),
        [
            ("crm_id".into(), "not_found".into()),
            ("sync_log".into(), "not_found".into()),
            ("email_search".into(), "found".into())
        ]
    );
    assert_eq!(crm_id(app, rex.id).await.as_deref(), Some("lead-rex"));
    let search = fake
        .requests()
        .into_iter()
        .rfind(|r| r.path == "/contacts/search/duplicate")
        .unwrap();
    assert_eq!(search.method, "GET");
    assert!(
        d["problems"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p.as_str().unwrap().contains("failed")),
        "{d}"
    );
    fake.stop().await;
}
