//! Outgoing user webhooks (issue 15) against a real HTTPS receiver: every event type reaches
//! its user once, signed; `none` sends no authorisation; retries on the service clock; a
//! hanging receiver holds up no request; the request-forgery guard at configuration and at
//! delivery; the delivery log, redelivery, and an endpoint disabled after three days. Secret
//! rotation (issue 34) is in `rotation`.

pub mod catch_up;
pub mod receiver;
mod rotation;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use base64::Engine as _;
use hmac::{Hmac, Mac};
use marketplace::workflows::webhooks::JOB;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json as j};
use sha2::{Digest, Sha256};

use crate::escrow::{connect, fund, payment, wait_payment};
use crate::helpers::{Account, PASSWORD, json, login, request_as};
use crate::market::{Market, code, notifications_of, wait_notification};
use receiver::{Hit, Receiver, Reply};

/// A market whose webhooks may reach the local receivers, trusting their CA.
async fn open() -> Market {
    open_with(&[]).await
}

/// [`open`] with more settings.
async fn open_with(vars: &[(&str, &str)]) -> Market {
    let ca = receiver::ca_file();
    let mut all = vec![
        ("WEBHOOK_ALLOW_PRIVATE_TARGETS", "true"),
        ("WEBHOOK_CA_FILE", ca.as_str()),
    ];
    all.extend_from_slice(vars);
    Market::open_with(&all).await
}

async fn configure(m: &Market, who: &Account, url: &str, method: &str) -> reqwest::Response {
    m.send(
        who,
        Method::PUT,
        "/api/users/me/webhook",
        Some(j!({"url": url, "enabled": true, "auth_method": method})),
    )
    .await
}

async fn configured(m: &Market, who: &Account, rx: &Receiver, method: &str) -> String {
    let r = configure(m, who, &rx.url(&format!("/hooks/{}", who.id)), method).await;
    let status = r.status();
    assert_eq!(status, StatusCode::OK, "{}", json(r).await);
    secret(m, who).await
}

async fn secret(m: &Market, who: &Account) -> String {
    let r = m
        .send(who, Method::GET, "/api/users/me/webhook/secret", None)
        .await;
    json(r).await["secret"].as_str().unwrap().to_owned()
}

/// Runs the outbox and a dispatcher pass.
async fn pump(m: &Market) {
    let _ = m.app.state.outbox.trigger().await;
    let _ = m.app.state.jobs.trigger(JOB).await;
}

/// Pumps until `probe` holds (15 s at most).
async fn until(m: &Market, what: &str, mut probe: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        pump(m).await;
        if probe() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for {what}");
}

async fn wait_hits(m: &Market, rx: &Receiver, n: usize) -> Vec<Hit> {
    until(m, &format!("{n} deliveries"), || rx.hits().len() >= n).await;
    rx.hits()
}

/// The Standard Webhooks check, written here from the specification, not with the service's
/// own code.
fn standard_signature_verifies(hit: &Hit, secret: &str) -> bool {
    let (Some(id), Some(ts), Some(sig)) = (
        hit.header("webhook-id"),
        hit.header("webhook-timestamp"),
        hit.header("webhook-signature"),
    ) else {
        return false;
    };
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("{id}.{ts}.").as_bytes());
    mac.update(&hit.body);
    let expected = format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
    );
    sig.split(' ').any(|s| s == expected)
}

/// The bearer JWT's claims when it verifies with `secret` and its `body_sha256` matches.
fn jwt_claims(hit: &Hit, secret: &str) -> Option<Value> {
    let token = hit.header("authorization")?.strip_prefix("Bearer ")?;
    let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::HS256);
    validation.set_required_spec_claims(&["exp", "iat", "iss", "sub", "jti"]);
    validation.validate_exp = false;
    let data = jsonwebtoken::decode::<Value>(
        token,
        &jsonwebtoken::DecodingKey::from_secret(secret.as_bytes()),
        &validation,
    )
    .ok()?;
    let claims = data.claims;
    (claims["body_sha256"] == hex::encode(Sha256::digest(&hit.body))).then_some(claims)
}

/// Checks one JWT delivery: body shape, headers, both signatures with `secret` and not with
/// another.
fn assert_signed(hit: &Hit, user_id: i64, secret: &str) -> Value {
    let body = hit.json();
    assert_eq!(hit.header("content-type"), Some("application/json"));
    assert_eq!(hit.header("webhook-id"), body["id"].as_str());
    assert!(
        body["created_at"].is_string() && body["data"].is_object(),
        "{body}"
    );
    assert!(standard_signature_verifies(hit, secret), "{body}");
    assert!(!standard_signature_verifies(hit, "another-secret"));
    let claims = jwt_claims(hit, secret).expect("JWT verifies with the user's secret");
    assert!(jwt_claims(hit, "another-secret").is_none());
    assert_eq!(claims["sub"], user_id.to_string());
    assert_eq!(claims["jti"], body["id"]);
    assert_eq!(claims["iss"], "marketplace");
    assert_eq!(
        claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap(),
        300
    );
    body
}

async fn deliveries(m: &Market, who: &Account, query: &str) -> Value {
    let r = m
        .send(
            who,
            Method::GET,
            &format!("/api/users/me/webhook/deliveries{query}"),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    json(r).await
}

async fn project(m: &Market, company: &Account) -> i64 {
    let p = m
        .create_project(
            company,
            j!({"title": "Hook", "description": "Test", "budget": 300.0,
                "deadline": "2099-01-01T00:00:00", "skills_required": ["Rust"],
                "project_type": "curated", "status": "draft"}),
        )
        .await;
    p["id"].as_i64().unwrap()
}

#[actix_web::test]
async fn every_event_type_reaches_its_user_once_signed_with_their_secret() {
    let m = open().await;
    let rx = Receiver::start().await;
    let company = m.company("hookco").await;
    let expert = m.expert("hookex").await;
    let reviser = m.expert("hookrev").await;
    let rejected = m.expert("hookrej").await;
    let mut secrets = BTreeMap::new();
    for who in [&company, &expert, &reviser, &rejected] {
        secrets.insert(who.id, configured(&m, who, &rx, "JWT").await);
    }
    connect(&m, &expert).await;

    // Projects and proposals.
    let project_id = m
        .published_project(&company, 200.0, &[&expert, &reviser, &rejected])
        .await;
    let mut applications = BTreeMap::new();
    for who in [&expert, &reviser, &rejected] {
        let r = m.apply(who, project_id, [100.0, 50.0, 50.0]).await;
        assert_eq!(r.status(), StatusCode::CREATED);
        applications.insert(who.id, json(r).await["id"].as_i64().unwrap());
    }
    let base = format!("/api/projects/{project_id}/applications");
    let r = m
        .send(
            &company,
            Method::POST,
            &format!("{base}/{}/request-revision", applications[&reviser.id]),
            Some(j!({"feedback": "More detail"})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let r = m
        .send(
            &company,
            Method::POST,
            &format!("{base}/{}/reject", applications[&rejected.id]),
            Some(j!({})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK, "{}", json(r).await);
    let r = m
        .send(
            &company,
            Method::POST,
            &format!("/api/projects/{project_id}/select/{}", expert.id),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let first = json(r).await["payment"]["id"].as_i64().unwrap();

    // Money and work: held, delivered, reviewed, released; the next one declined.
    fund(&m, &company, first).await;
    let milestone_id = payment(&m, first).await["milestone_id"].as_i64().unwrap();
    let r = m
        .send(
            &expert,
            Method::POST,
            "/api/milestones/deliveries/",
            Some(j!({"milestone_id": milestone_id, "description": "Report attached"})),
        )
        .await;
    let status = r.status();
    let delivery = json(r).await;
    assert_eq!(status, StatusCode::CREATED, "{delivery}");
    let r = m
        .send(
            &company,
            Method::PUT,
            &format!("/api/milestones/deliveries/{}/review", delivery["id"]),
            Some(j!({"decision": "request_revision", "feedback": "Add the appendix"})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK, "{}", json(r).await);
    let r = m
        .send(
            &company,
            Method::POST,
            "/api/payments/release",
            Some(j!({"payment_id": first})),
        )
        .await;
    let status = r.status();
    let released = json(r).await;
    assert_eq!(status, StatusCode::OK, "{released}");
    let second = released["next_payment"]["id"].as_i64().unwrap();
    let intent = payment(&m, second).await["processor_payment_intent_id"]
        .as_str()
        .unwrap()
        .to_owned();
    m.app
        .post_json(
            &format!("/api/sandbox/payment_intents/{intent}/confirm"),
            &j!({"payment_method": "pm_card_chargeDeclined"}),
        )
        .await;
    wait_payment(&m, second, "failed", |y| y["status"] == "failed").await;

    // A dispute, resolved with a refund.
    let r = m
        .send(
            &company,
            Method::POST,
            &format!("/api/projects/{project_id}/dispute"),
            Some(
                j!({"title": "Late", "reason": "The first milestone came late and incomplete.",
                     "dispute_type": "delivery", "priority": "high"}),
            ),
        )
        .await;
    let status = r.status();
    let dispute = json(r).await;
    assert_eq!(status, StatusCode::CREATED, "{dispute}");
    let r = m
        .as_admin(
            Method::PUT,
            &format!("/api/admin/disputes/{}/resolve", dispute["dispute_id"]),
            Some(&j!({"resolution": "Refunded after hearing both parties.",
                      "resolution_action": "refund_company"})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK, "{}", json(r).await);
    wait_payment(&m, first, "refunded", |y| y["status"] == "refunded").await;

    // A review once the project is over.
    {
        let mut conn = m.app.db.conn().await.unwrap();
        let now = m.app.state.clock.now();
        marketplace::on_exec!(conn.exec(), c => sqlx::query(
            "UPDATE projects SET status = 'completed', completed_at = $1 WHERE id = $2")
            .bind(now).bind(project_id).execute(c).await.map(drop))
        .unwrap();
    }
    let r = m
        .send(
            &company,
            Method::POST,
            "/api/reviews",
            Some(
                j!({"project_id": project_id, "reviewee_id": expert.id, "rating": 4,
                     "comment": "Good work overall."}),
            ),
        )
        .await;
    assert_eq!(r.status(), StatusCode::CREATED, "{}", json(r).await);
    // The counterpart's review reveals both: each reviewee is told.
    let r = m
        .send(
            &expert,
            Method::POST,
            "/api/reviews",
            Some(
                j!({"project_id": project_id, "reviewee_id": company.id, "rating": 5,
                     "comment": "Clear brief."}),
            ),
        )
        .await;
    assert_eq!(r.status(), StatusCode::CREATED, "{}", json(r).await);

    let mut expected: BTreeMap<(i64, &str), usize> = BTreeMap::new();
    for (who, kinds) in [
        (
            company.id,
            &[
                "project.created",
                "project.published",
                "application.received",
                "application.received",
                "application.received",
                "milestone.payment_required",
                "milestone.payment_required",
                "payment.held",
                "delivery.submitted",
                "payment.released",
                // The expert's invoice for the release, and its credit note after the refund.
                "invoice.issued",
                "credit_note.issued",
                "payment.failed",
                "dispute.created",
                "dispute.resolved",
                "payment.refunded",
                "review.received",
            ][..],
        ),
        (
            expert.id,
            &[
                "application.accepted",
                "payment.held",
                "delivery.reviewed",
                "payment.released",
                // Their invoice issued in their name and the platform's to them, and the two
                // credit notes of the refund.
                "invoice.issued",
                "invoice.issued",
                "credit_note.issued",
                "credit_note.issued",
                "payment.failed",
                "dispute.created",
                "dispute.resolved",
                "payment.refunded",
                "review.received",
            ][..],
        ),
        // Still waiting for the revision when another proposal is selected: turned down.
        (
            reviser.id,
            &["application.revision_requested", "application.rejected"][..],
        ),
        (rejected.id, &["application.rejected"][..]),
    ] {
        for kind in kinds {
            *expected.entry((who, kind)).or_default() += 1;
        }
    }
    let total: usize = expected.values().sum();
    let deadline = Instant::now() + Duration::from_secs(15);
    while rx.hits().len() < total && Instant::now() < deadline {
        pump(&m).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Nothing more comes in a few more passes.
    for _ in 0..10 {
        pump(&m).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let hits = rx.hits();

    let mut got: BTreeMap<(i64, String), usize> = BTreeMap::new();
    let mut ids = std::collections::BTreeSet::new();
    for hit in &hits {
        let user: i64 = hit.path.trim_start_matches("/hooks/").parse().unwrap();
        let body = assert_signed(hit, user, &secrets[&user]);
        assert!(
            ids.insert(body["id"].as_str().unwrap().to_owned()),
            "one delivery per id: {body}"
        );
        *got.entry((user, body["type"].as_str().unwrap().to_owned()))
            .or_default() += 1;
        // `data` is the resource as the REST API shows it to that user.
        match body["type"].as_str().unwrap() {
            "project.created" | "project.published" => assert_eq!(body["data"]["id"], project_id),
            "payment.held" | "payment.released" | "payment.refunded" => {
                assert_eq!(body["data"]["id"], first)
            }
            "payment.failed" => assert_eq!(body["data"]["id"], second),
            "application.accepted" => {
                assert_eq!(body["data"]["id"], applications[&expert.id])
            }
            "dispute.created" | "dispute.resolved" => {
                assert_eq!(body["data"]["id"], dispute["dispute_id"])
            }
            "invoice.issued" | "credit_note.issued" => {
                assert_eq!(body["data"]["payment_id"], first);
                assert!(
                    body["data"]["recipient_user_id"] == user
                        || body["data"]["issuer_user_id"] == user
                );
            }
            "review.received" => {
                assert_eq!(body["data"]["reviewee_id"], user);
                assert_eq!(body["data"]["revealed"], true);
                let rating = if user == expert.id { 4 } else { 5 };
                assert_eq!(body["data"]["rating"], rating);
            }
            _ => {}
        }
        assert!(body["data"].get("admin_notes").is_none_or(Value::is_null));
    }
    let expected: BTreeMap<(i64, String), usize> = expected
        .into_iter()
        .map(|((u, k), n)| ((u, k.to_owned()), n))
        .collect();
    assert_eq!(got, expected);
    let kinds: std::collections::BTreeSet<&str> = got.keys().map(|(_, k)| k.as_str()).collect();
    assert_eq!(kinds.len(), 18, "all eighteen event types: {kinds:?}");
}

#[actix_web::test]
async fn method_none_sends_no_authorisation_and_a_new_secret_signs_the_next_delivery() {
    // Without a rotation window the replaced secret stops at once (the window: `rotation`).
    let m = open_with(&[("WEBHOOK_SECRET_ROTATION_HOURS", "0")]).await;
    let rx = Receiver::start().await;
    let company = m.company("nonco").await;
    let old = configured(&m, &company, &rx, "none").await;
    project(&m, &company).await;
    let hits = wait_hits(&m, &rx, 1).await;
    assert_eq!(hits[0].header("authorization"), None);
    assert!(standard_signature_verifies(&hits[0], &old));
    assert_eq!(hits[0].json()["type"], "project.created");

    let r = m
        .send(&company, Method::POST, "/api/users/me/webhook/secret", None)
        .await;
    let new = json(r).await["secret"].as_str().unwrap().to_owned();
    assert_ne!(new, old);
    let r = m
        .send(
            &company,
            Method::POST,
            "/api/notifications/webhook/test",
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let answer = json(r).await;
    assert_eq!(answer["delivered"], true, "{answer}");
    assert_eq!(answer["status_code"], 200);
    assert!(answer["duration_ms"].is_u64());
    assert_eq!(answer["error"], Value::Null);
    let hits = rx.hits();
    assert_eq!(hits.len(), 2);
    assert_eq!(hits[1].json()["type"], "webhook.test");
    assert_eq!(hits[1].header("authorization"), None);
    assert!(standard_signature_verifies(&hits[1], &new));
    assert!(!standard_signature_verifies(&hits[1], &old));

    // JWT from now on: the test delivery carries it, signed with the new secret.
    let url = rx.url(&format!("/hooks/{}", company.id));
    assert_eq!(
        configure(&m, &company, &url, "JWT").await.status(),
        StatusCode::OK
    );
    let r = m
        .send(
            &company,
            Method::POST,
            "/api/notifications/webhook/test",
            None,
        )
        .await;
    assert_eq!(json(r).await["delivered"], true);
    let hit = rx.hits().pop().unwrap();
    assert_signed(&hit, company.id, &new);
    assert!(jwt_claims(&hit, &old).is_none());

    // Without a URL the test answers 422.
    let bare = m.company("nonbare").await;
    let r = m
        .send(&bare, Method::POST, "/api/notifications/webhook/test", None)
        .await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
}

#[actix_web::test]
async fn a_failing_receiver_is_retried_on_the_clock_and_delivered_once() {
    let m = open().await;
    let rx = Receiver::start().await;
    rx.script([Reply::Status(500)]);
    let company = m.company("retryco").await;
    let secret = configured(&m, &company, &rx, "JWT").await;
    project(&m, &company).await;
    let first = wait_hits(&m, &rx, 1).await.remove(0);

    let mut log = Value::Null;
    until(&m, "the failure recorded", || true).await;
    for _ in 0..250 {
        log = deliveries(&m, &company, "").await;
        if log["items"][0]["attempt_count"] == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let item = &log["items"][0];
    assert_eq!(item["state"], "pending", "{log}");
    assert_eq!(item["last_status_code"], 500);
    assert_eq!(item["event_type"], "project.created");
    let next: chrono::DateTime<chrono::Utc> =
        item["next_attempt_at"].as_str().unwrap().parse().unwrap();
    let wait = next - m.app.state.clock.now();
    assert!(
        wait > chrono::Duration::seconds(40) && wait <= chrono::Duration::seconds(75),
        "about a minute: {wait}"
    );

    // Not before its time.
    for _ in 0..5 {
        pump(&m).await;
    }
    assert_eq!(rx.hits().len(), 1);
    m.app.state.clock.advance(chrono::Duration::seconds(90));
    let hits = wait_hits(&m, &rx, 2).await;
    let second = &hits[1];
    assert_eq!(second.header("webhook-id"), first.header("webhook-id"));
    assert_eq!(second.body, first.body);
    assert_signed(second, company.id, &secret);
    for _ in 0..250 {
        log = deliveries(&m, &company, "").await;
        if log["items"][0]["state"] == "delivered" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(log["items"][0]["state"], "delivered", "{log}");
    assert_eq!(log["items"][0]["attempt_count"], 2);
    assert_eq!(log["items"][0]["last_status_code"], 200);
    m.app.state.clock.advance(chrono::Duration::days(2));
    for _ in 0..5 {
        pump(&m).await;
    }
    assert_eq!(rx.hits().len(), 2, "delivered once");

    let metrics = m.app.get("/metrics").await.text().await.unwrap();
    for series in [
        "webhook_deliveries_sent_total",
        "webhook_deliveries_failed_total",
        "webhook_deliveries_retried_total",
        "webhook_endpoints_disabled_total",
    ] {
        let value: f64 = metrics
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{series} ")))
            .unwrap_or_else(|| panic!("{series} in /metrics"))
            .parse()
            .unwrap();
        if series != "webhook_endpoints_disabled_total" {
            assert!(value >= 1.0, "{series} {value}");
        }
    }
    assert!(
        metrics.contains(&format!("kind=\"{JOB}\"")),
        "the dispatcher's actor"
    );
}

#[actix_web::test]
async fn a_receiver_that_never_answers_holds_up_no_request() {
    let m = open().await;
    let rx = Receiver::start().await;
    rx.always(Reply::Hang(Duration::from_secs(60)));
    let company = m.company("hangco").await;
    configured(&m, &company, &rx, "JWT").await;
    project(&m, &company).await;
    wait_hits(&m, &rx, 1).await;
    // The dispatcher is now waiting on the receiver; the API answers as ever.
    for _ in 0..6 {
        let started = Instant::now();
        project(&m, &company).await;
        let r = m
            .send(
                &company,
                Method::GET,
                "/api/users/me/webhook/deliveries",
                None,
            )
            .await;
        assert_eq!(r.status(), StatusCode::OK);
        pump(&m).await;
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "a request took {:?}",
            started.elapsed()
        );
    }
    // At most four calls in flight to the host.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(rx.hits().len() <= 4, "{} calls at once", rx.hits().len());
    // Another user's receiver, on another host, is served meanwhile.
    let quick = Receiver::start().await;
    let other = m.company("hangother").await;
    let url = format!("https://localhost:{}/hooks/{}", quick.port, other.id);
    assert_eq!(
        configure(&m, &other, &url, "JWT").await.status(),
        StatusCode::OK
    );
    let started = Instant::now();
    project(&m, &other).await;
    wait_hits(&m, &quick, 1).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // The first call times out after ten seconds and is scheduled again.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let log = deliveries(&m, &company, "?size=100").await;
        let timed_out = log["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["attempt_count"] == 1);
        if let Some(item) = timed_out {
            assert_eq!(item["state"], "pending");
            assert!(item["last_error"] == "timeout", "{item}");
            break;
        }
        assert!(Instant::now() < deadline, "no timeout recorded: {log}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[actix_web::test]
async fn private_and_reserved_targets_are_refused_when_configured_and_when_delivered() {
    let m = Market::open_with(&[("WEBHOOK_CA_FILE", &receiver::ca_file())]).await;
    let rx = Receiver::start().await;
    let company = m.company("ssrfco").await;
    let port = rx.port;
    for url in [
        format!("https://127.0.0.1:{port}/"),
        "https://10.0.0.1/hook".to_owned(),
        "https://169.254.169.254/latest/meta-data".to_owned(),
        format!("https://[::1]:{port}/"),
        format!("https://[::ffff:127.0.0.1]:{port}/"),
        format!("https://localhost:{port}/"),
        "https://0x7f000001/".to_owned(),
        "https://user:pass@example.com/".to_owned(),
        "http://example.com/hook".to_owned(),
    ] {
        let r = configure(&m, &company, &url, "JWT").await;
        assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY, "{url}");
        let body = json(r).await;
        assert_eq!(body["errors"][0]["field"], "url", "{url}: {body}");
    }
    assert_eq!(rx.hits().len(), 0);

    // A URL stored before the rule (or a name that resolves differently later) is checked
    // again at delivery: a literal address, and a name resolving to loopback.
    for url in [
        format!("https://127.0.0.1:{port}/literal"),
        format!("https://localhost:{port}/resolved"),
    ] {
        let mut conn = m.app.db.conn().await.unwrap();
        let now = m.app.state.clock.now();
        marketplace::on_exec!(conn.exec(), c => sqlx::query(
            "INSERT INTO webhook_configs (user_id, url, enabled, auth_method, secret, created_at, updated_at)
             VALUES ($1, $2, TRUE, 'JWT', 'secret', $3, $3)
             ON CONFLICT (user_id) DO UPDATE SET url = excluded.url, enabled = TRUE")
            .bind(company.id).bind(&url).bind(now).execute(c).await.map(drop))
        .unwrap();
        let r = m
            .send(
                &company,
                Method::POST,
                "/api/notifications/webhook/test",
                None,
            )
            .await;
        let answer = json(r).await;
        assert_eq!(answer["delivered"], false, "{url}: {answer}");
        // Refused before the call (a literal address), or by the resolver (a name): coarse
        // either way.
        assert!(
            matches!(answer["error"].as_str(), Some("refused" | "dns")),
            "{url}: {answer}"
        );
        project(&m, &company).await;
    }
    for _ in 0..20 {
        pump(&m).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(rx.hits().len(), 0, "nothing reached the loopback receiver");
    let log = deliveries(&m, &company, "").await;
    assert!(log["total"].as_i64().unwrap() >= 3, "{log}");

    // With private targets allowed, a redirect to another address is not followed, and
    // link-local stays refused.
    let open = open().await;
    let target = Receiver::start().await;
    let redirecting = Receiver::start().await;
    redirecting.always(Reply::Redirect(target.url("/stolen")));
    let owner = open.company("ssrfredir").await;
    configured(&open, &owner, &redirecting, "JWT").await;
    let r = open
        .send(
            &owner,
            Method::POST,
            "/api/notifications/webhook/test",
            None,
        )
        .await;
    let answer = json(r).await;
    assert_eq!(answer["delivered"], false, "{answer}");
    assert_eq!(answer["status_code"], 302);
    assert_eq!(redirecting.hits().len(), 1);
    assert_eq!(target.hits().len(), 0, "the redirect was not followed");
    for url in ["https://169.254.169.254/", "https://[fe80::1]/"] {
        let r = configure(&open, &owner, url, "JWT").await;
        assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY, "{url}");
    }
}

#[actix_web::test]
async fn the_delivery_log_pages_and_a_redelivery_keeps_the_id() {
    let m = open().await;
    let rx = Receiver::start().await;
    let company = m.company("logco").await;
    let secret = configured(&m, &company, &rx, "JWT").await;
    for _ in 0..3 {
        project(&m, &company).await;
    }
    let hits = wait_hits(&m, &rx, 3).await;
    let page = deliveries(&m, &company, "?page=2&size=2").await;
    assert_eq!(
        (page["total"].clone(), page["pages"].clone()),
        (j!(3), j!(2))
    );
    assert_eq!(page["items"].as_array().unwrap().len(), 1);
    let r = m
        .send(
            &company,
            Method::GET,
            "/api/users/me/webhook/deliveries?size=500",
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);

    let oldest = &page["items"][0];
    let id = oldest["id"].as_i64().unwrap();
    let message_id = oldest["message_id"].as_str().unwrap().to_owned();
    let r = m
        .send(
            &company,
            Method::POST,
            &format!("/api/users/me/webhook/deliveries/{id}/redeliver"),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let again = wait_hits(&m, &rx, 4).await.pop().unwrap();
    assert_eq!(again.header("webhook-id"), Some(message_id.as_str()));
    let original = hits
        .iter()
        .find(|h| h.header("webhook-id") == Some(message_id.as_str()))
        .unwrap();
    assert_eq!(again.body, original.body);
    assert_signed(&again, company.id, &secret);

    // Another user's delivery is not found.
    let other = m.company("logother").await;
    let r = m
        .send(
            &other,
            Method::POST,
            &format!("/api/users/me/webhook/deliveries/{id}/redeliver"),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert_eq!(code(&json(r).await), "NOT_FOUND");
    assert_eq!(deliveries(&m, &other, "").await["total"], 0);
}

#[actix_web::test]
async fn an_endpoint_failing_for_three_days_is_disabled_and_its_owner_told() {
    let m = open().await;
    let rx = Receiver::start().await;
    rx.always(Reply::Status(503));
    let company = m.company("downco").await;
    configured(&m, &company, &rx, "JWT").await;
    project(&m, &company).await;
    wait_hits(&m, &rx, 1).await;
    let mut attempts = 1;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        // Read from the database: the clock runs past the access token's lifetime.
        let enabled = m
            .count(
                "SELECT COUNT(*) FROM webhook_configs WHERE user_id = $1 AND enabled = TRUE",
                company.id,
            )
            .await;
        if enabled == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still enabled after {attempts} attempts"
        );
        // Move time only once the attempt's failure is recorded: advanced earlier, the
        // failure would be stamped a day late and the schedule would shift under the test.
        let recorded = m
            .count(
                "SELECT COALESCE(MAX(failures), 0) FROM webhook_deliveries WHERE user_id = $1",
                company.id,
            )
            .await;
        if rx.hits().len() >= attempts && recorded >= attempts as i64 {
            m.app.state.clock.advance(chrono::Duration::hours(25));
            attempts += 1;
        }
        pump(&m).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(rx.hits().len(), 4, "day 0, 1, 2, then 3 disables it");
    wait_notification(&m.app, company.id, "webhook_disabled").await;
    assert_eq!(
        notifications_of(&m.app, company.id, "webhook_disabled").await,
        1
    );
    m.app.mails_about(&company.email, "[Alert]").await;
    // Nothing more is sent to a disabled endpoint.
    m.app.state.clock.advance(chrono::Duration::days(2));
    let token = login(&m.app, &company.username, PASSWORD).await;
    let r = request_as(
        &m.app,
        Method::GET,
        "/api/users/me/webhook/deliveries",
        &token,
        None,
    )
    .await;
    let log = json(r).await;
    assert_eq!(log["items"][0]["state"], "failed", "{log}");
    assert_eq!(log["items"][0]["attempt_count"], 4, "{log}");
    let body = j!({"title": "Hook", "description": "Test", "budget": 300.0,
                   "deadline": "2099-01-01T00:00:00", "skills_required": ["Rust"],
                   "project_type": "curated", "status": "draft"});
    let r = request_as(&m.app, Method::POST, "/api/projects/", &token, Some(&body)).await;
    assert_eq!(r.status(), StatusCode::CREATED);
    for _ in 0..10 {
        pump(&m).await;
    }
    assert_eq!(rx.hits().len(), 4);
}

#[actix_web::test]
async fn a_retry_survives_a_restart() {
    let m = open().await;
    let rx = Receiver::start().await;
    rx.script([Reply::Status(500)]);
    let company = m.company("restartco").await;
    let secret = configured(&m, &company, &rx, "JWT").await;
    project(&m, &company).await;
    let first = wait_hits(&m, &rx, 1).await.remove(0);
    let recorded = "SELECT COUNT(*) FROM webhook_deliveries WHERE user_id = $1 AND attempts = 1 AND state = 'pending'";
    let deadline = Instant::now() + Duration::from_secs(10);
    while m.count(recorded, company.id).await == 0 {
        assert!(
            Instant::now() < deadline,
            "the failed attempt was not recorded"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // This instance's dispatcher stops; another instance on the same database takes over.
    m.app.state.jobs.stop_all();
    let database = m.app.database_url();
    let ca = receiver::ca_file();
    let next = crate::helpers::spawn_app_with(&[
        ("DATABASE_URL", &database),
        ("WEBHOOK_ALLOW_PRIVATE_TARGETS", "true"),
        ("WEBHOOK_CA_FILE", &ca),
    ])
    .await;
    let _ = next.state.jobs.trigger(JOB).await;
    assert_eq!(rx.hits().len(), 1, "not before its time");
    next.clock.advance(chrono::Duration::minutes(2));
    let deadline = Instant::now() + Duration::from_secs(10);
    while rx.hits().len() < 2 {
        assert!(Instant::now() < deadline, "the retry was not made");
        let _ = next.state.jobs.trigger(JOB).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let second = rx.hits().remove(1);
    assert_eq!(second.header("webhook-id"), first.header("webhook-id"));
    assert_signed(&second, company.id, &secret);
}

/// D29: the answers a user reads are no oracle. What is refused without a lookup (a literal
/// address, a `localhost` name) is refused in one sentence; a name is never looked up when
/// saved, so one that does not resolve is accepted, as it may resolve later (and one resolving
/// to a private address alike: see the next test); test deliveries answer coarse outcomes.
#[actix_web::test]
async fn webhook_answers_are_coarse_and_never_say_a_name_resolved() {
    let guarded = Market::open_with(&[("WEBHOOK_CA_FILE", &receiver::ca_file())]).await;
    let company = guarded.company("oracleco").await;
    for url in [
        "https://localhost:8443/",
        "https://127.0.0.1/",
        "https://vm.localhost/",
    ] {
        let r = configure(&guarded, &company, url, "JWT").await;
        assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY, "{url}");
        let body = json(r).await;
        assert_eq!(
            body["errors"][0]["message"], "cannot be used as a webhook destination",
            "{url}: {body}"
        );
    }
    let unresolvable = "https://does-not-exist-zz9.invalid/hook";
    assert_eq!(
        configure(&guarded, &company, unresolvable, "JWT")
            .await
            .status(),
        StatusCode::OK
    );
    assert_eq!(test_outcome(&guarded, &company).await, "dns");

    // Private targets allowed (a test set-up): a closed port, an answer outside 2xx.
    let open = open().await;
    let owner = open.company("coarseco").await;
    let closed = crate::helpers::free_port();
    let url = format!("https://127.0.0.1:{closed}/hook");
    assert_eq!(
        configure(&open, &owner, &url, "JWT").await.status(),
        StatusCode::OK
    );
    assert_eq!(test_outcome(&open, &owner).await, "connect");
    let rx = Receiver::start().await;
    rx.script([Reply::Status(503)]);
    configured(&open, &owner, &rx, "JWT").await;
    assert_eq!(test_outcome(&open, &owner).await, "http 503");

    // A receiver whose certificate the service does not trust.
    let untrusting = Market::open_with(&[("WEBHOOK_ALLOW_PRIVATE_TARGETS", "true")]).await;
    let wary = untrusting.company("tlsco").await;
    configured(&untrusting, &wary, &rx, "JWT").await;
    assert_eq!(test_outcome(&untrusting, &wary).await, "tls");
}

/// D29 at save time: a host name is not looked up when a URL is saved, so a name resolving
/// to a private address and a name that does not resolve get the same answer; the guard
/// decides when a delivery connects, refusing the private one (test delivery and event alike)
/// in the same coarse word as the unresolvable one.
#[actix_web::test]
async fn a_saved_name_is_never_looked_up_and_the_guard_decides_at_delivery() {
    let m = Market::open_with(&[("WEBHOOK_CA_FILE", &receiver::ca_file())]).await;
    let rx = Receiver::start().await;
    let private = private_name().await;
    let mut saved = Vec::new();
    for (username, host) in [
        ("hostsco", private.as_str()),
        ("nowhereco", "does-not-exist-zz9.invalid"),
    ] {
        let company = m.company(username).await;
        let url = format!("https://{host}:{}/hook", rx.port);
        let r = configure(&m, &company, &url, "JWT").await;
        let status = r.status();
        let mut body = json(r).await;
        assert_eq!(body["url"], url.as_str(), "{body}");
        // The URL echoed and the time of saving aside, the answers are the same.
        body["url"] = Value::Null;
        body["updated_at"] = Value::Null;
        saved.push((company, status, body));
    }
    assert_eq!(saved[0].1, StatusCode::OK, "{}", saved[0].2);
    assert_eq!((saved[0].1, &saved[0].2), (saved[1].1, &saved[1].2));
    for (company, _, _) in &saved {
        let outcome = test_outcome(&m, company).await;
        assert_eq!(outcome, "dns", "{}", company.username);
    }
    let hosts = &saved[0].0;
    project(&m, hosts).await;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        pump(&m).await;
        let log = deliveries(&m, hosts, "?size=100").await;
        let attempted = log["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["event_type"] != "webhook.test" && i["attempt_count"] == 1)
            .cloned();
        if let Some(item) = attempted {
            assert_eq!(item["last_error"], "dns", "{item}");
            break;
        }
        assert!(Instant::now() < deadline, "no attempt recorded: {log}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(rx.hits().len(), 0, "nothing reached the loopback receiver");
}

/// A host name this machine resolves without DNS to non-public addresses only (its own name
/// in `/etc/hosts`, or a loopback alias): the kind of internal name D29 probed. Not a
/// `localhost` name, which is refused before any lookup.
async fn private_name() -> String {
    use marketplace::domain::webhook_rules::{AddressClass, classify};
    let own = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    for name in [own.trim(), "ip6-localhost", "localhost.localdomain"] {
        let name = name.to_ascii_lowercase();
        if name.is_empty() || name == "localhost" || name.ends_with(".localhost") {
            continue;
        }
        let Ok(found) = tokio::net::lookup_host((name.as_str(), 443)).await else {
            continue;
        };
        let public = |a: &std::net::SocketAddr| classify(a.ip()) == AddressClass::Public;
        let found: Vec<_> = found.collect();
        if !found.is_empty() && !found.iter().any(public) {
            return name;
        }
    }
    panic!("no name of this machine resolves to a private address only (see /etc/hosts)");
}

/// The `error` a test delivery answers.
async fn test_outcome(m: &Market, who: &Account) -> Value {
    let r = m
        .send(who, Method::POST, "/api/notifications/webhook/test", None)
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    json(r).await["error"].clone()
}
