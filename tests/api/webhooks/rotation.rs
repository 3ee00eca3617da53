//! Webhook secret rotation without a gap (issue 34): after a regeneration every delivery (an
//! event, the test event, a redelivery) carries a signature with the new secret and one with
//! the replaced secret until the window ends, then the new one only; the JWT is signed with
//! the new secret alone and names it in `kid`; the configuration shows when the old secret
//! stops. Each signature is checked here from the specification, entry by entry.

use base64::Engine as _;
use hmac::{Hmac, Mac};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json as j};
use sha2::{Digest, Sha256};

use super::receiver::{Hit, Receiver};
use super::{configured, deliveries, jwt_claims, open, project, secret, wait_hits};
use crate::helpers::{Account, PASSWORD, json, login, request_as};
use crate::market::Market;

/// `v1,<base64 HMAC-SHA256 of "id.timestamp.body">` keyed by `secret`, computed here.
fn expected_signature(hit: &Hit, secret: &str) -> String {
    let id = hit.header("webhook-id").expect("webhook-id");
    let ts = hit.header("webhook-timestamp").expect("webhook-timestamp");
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("{id}.{ts}.").as_bytes());
    mac.update(&hit.body);
    format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
    )
}

/// The `v1,` entries of `webhook-signature`, in order.
fn signature_entries(hit: &Hit) -> Vec<String> {
    let header = hit.header("webhook-signature").expect("webhook-signature");
    let entries: Vec<String> = header.split(' ').map(str::to_owned).collect();
    assert!(
        entries.iter().all(|e| e.starts_with("v1,") && e.len() > 3),
        "{header}"
    );
    entries
}

/// Whether one of the delivery's signatures verifies with `secret`.
fn verifies(hit: &Hit, secret: &str) -> bool {
    let expected = expected_signature(hit, secret);
    signature_entries(hit).contains(&expected)
}

/// The key id a receiver computes: the first 16 hex digits of the secret's SHA-256.
fn key_id(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))[..16].to_owned()
}

/// The `kid` of the delivery JWT's header.
fn jwt_kid(hit: &Hit) -> Option<String> {
    let token = hit.header("authorization")?.strip_prefix("Bearer ")?;
    jsonwebtoken::decode_header(token).ok()?.kid
}

/// During a rotation: both entries, new first, each verifying with its own secret; the JWT
/// verifies with the new secret only and names it.
fn assert_rotating(hit: &Hit, new: &str, old: &str) {
    assert_eq!(
        signature_entries(hit),
        vec![expected_signature(hit, new), expected_signature(hit, old)],
        "{}",
        String::from_utf8_lossy(&hit.body)
    );
    assert!(verifies(hit, new) && verifies(hit, old));
    assert!(!verifies(hit, "another-secret"));
    assert!(
        jwt_claims(hit, new).is_some(),
        "the JWT verifies with the new secret"
    );
    assert!(jwt_claims(hit, old).is_none(), "and not with the old one");
    assert_eq!(jwt_kid(hit), Some(key_id(new)));
}

/// Outside a rotation: one entry, the current secret's; the JWT names it.
fn assert_only(hit: &Hit, current: &str, others: &[&str]) {
    assert_eq!(
        signature_entries(hit),
        vec![expected_signature(hit, current)]
    );
    for other in others {
        assert!(!verifies(hit, other));
        assert!(jwt_claims(hit, other).is_none());
    }
    assert!(jwt_claims(hit, current).is_some());
    assert_eq!(jwt_kid(hit), Some(key_id(current)));
}

async fn regenerate(m: &Market, who: &Account) -> Value {
    let r = m
        .send(who, Method::POST, "/api/users/me/webhook/secret", None)
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    json(r).await
}

async fn webhook_config(m: &Market, token: &str) -> Value {
    let r = request_as(&m.app, Method::GET, "/api/users/me/webhook", token, None).await;
    assert_eq!(r.status(), StatusCode::OK);
    json(r).await
}

fn instant(value: &Value) -> chrono::DateTime<chrono::Utc> {
    value
        .as_str()
        .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
        .unwrap_or_else(|| panic!("an RFC 3339 instant: {value}"))
        .with_timezone(&chrono::Utc)
}

/// Sends the test event with `token` (of a standard login: no CSRF pair) and answers the
/// delivery the receiver got.
async fn test_event(m: &Market, rx: &Receiver, token: &str) -> Hit {
    let before = rx.hits().len();
    let r = request_as(
        &m.app,
        Method::POST,
        "/api/notifications/webhook/test",
        token,
        None,
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(json(r).await["delivered"], true);
    let hits = rx.hits();
    assert_eq!(hits.len(), before + 1);
    let hit = hits.last().unwrap().clone();
    assert_eq!(hit.json()["type"], "webhook.test");
    hit
}

#[actix_web::test]
async fn during_the_window_deliveries_carry_both_signatures_and_after_it_only_the_new() {
    let m = open().await;
    let rx = Receiver::start().await;
    let company = m.company("rotco").await;
    let old = configured(&m, &company, &rx, "JWT").await;
    let token = login(&m.app, &company.username, PASSWORD).await;
    assert_eq!(
        webhook_config(&m, &token).await["previous_secret_expires_at"],
        Value::Null
    );
    // Before any regeneration: one signature, and the JWT names its key.
    project(&m, &company).await;
    let first = wait_hits(&m, &rx, 1).await.remove(0);
    assert_only(&first, &old, &[]);

    let answer = regenerate(&m, &company).await;
    let new = answer["secret"].as_str().unwrap().to_owned();
    assert_ne!(new, old);
    assert_eq!(secret(&m, &company).await, new);
    let expires = instant(&answer["previous_secret_expires_at"]);
    let expected = m.app.state.clock.now() + chrono::Duration::hours(24);
    assert!(
        (expires - expected).num_seconds().abs() < 60,
        "{expires} about 24 h from now"
    );
    let config = webhook_config(&m, &token).await;
    assert_eq!(
        instant(&config["previous_secret_expires_at"]),
        expires,
        "{config}"
    );

    // An event, the test event and a redelivery all carry both signatures.
    project(&m, &company).await;
    let event = wait_hits(&m, &rx, 2).await.remove(1);
    assert_eq!(event.json()["type"], "project.created");
    assert_rotating(&event, &new, &old);
    assert_rotating(&test_event(&m, &rx, &token).await, &new, &old);
    let log = deliveries(&m, &company, "?size=100").await;
    let original = log["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["message_id"].as_str() == first.header("webhook-id"))
        .expect("the first delivery in the log")["id"]
        .as_i64()
        .unwrap();
    let r = m
        .send(
            &company,
            Method::POST,
            &format!("/api/users/me/webhook/deliveries/{original}/redeliver"),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let again = wait_hits(&m, &rx, 4).await.remove(3);
    assert_eq!(again.header("webhook-id"), first.header("webhook-id"));
    assert_eq!(again.body, first.body);
    assert_rotating(&again, &new, &old);

    // Just before the end the old secret still signs; at the end it stops.
    m.app
        .state
        .clock
        .advance(expires - m.app.state.clock.now() - chrono::Duration::seconds(30));
    // Past the access token's lifetime: sign in again.
    let token = login(&m.app, &company.username, PASSWORD).await;
    assert_eq!(
        instant(&webhook_config(&m, &token).await["previous_secret_expires_at"]),
        expires
    );
    assert_rotating(&test_event(&m, &rx, &token).await, &new, &old);
    m.app.state.clock.advance(chrono::Duration::seconds(31));
    assert_eq!(
        webhook_config(&m, &token).await["previous_secret_expires_at"],
        Value::Null
    );
    assert_only(&test_event(&m, &rx, &token).await, &new, &[&old]);
    let body = j!({"title": "Hook", "description": "Test", "budget": 300.0,
                   "deadline": "2099-01-01T00:00:00", "skills_required": ["Rust"],
                   "project_type": "curated", "status": "draft"});
    let r = request_as(&m.app, Method::POST, "/api/projects/", &token, Some(&body)).await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let after = wait_hits(&m, &rx, 7).await.remove(6);
    assert_eq!(after.json()["type"], "project.created");
    assert_only(&after, &new, &[&old]);
}

#[actix_web::test]
async fn a_second_regeneration_keeps_only_the_secret_it_replaces() {
    let m = open().await;
    let rx = Receiver::start().await;
    let company = m.company("rot2co").await;
    let first = configured(&m, &company, &rx, "JWT").await;
    let one = regenerate(&m, &company).await;
    let second = one["secret"].as_str().unwrap().to_owned();
    m.app.state.clock.advance(chrono::Duration::minutes(10));
    let two = regenerate(&m, &company).await;
    let third = two["secret"].as_str().unwrap().to_owned();
    // The window starts again with the second regeneration.
    let (until_one, until_two) = (
        instant(&one["previous_secret_expires_at"]),
        instant(&two["previous_secret_expires_at"]),
    );
    assert!(until_two - until_one >= chrono::Duration::minutes(10));
    let token = login(&m.app, &company.username, PASSWORD).await;
    let hit = test_event(&m, &rx, &token).await;
    assert_rotating(&hit, &third, &second);
    assert!(!verifies(&hit, &first), "only one old secret at a time");
}

#[actix_web::test]
async fn with_a_zero_window_the_new_secret_alone_signs_at_once() {
    let m = super::open_with(&[("WEBHOOK_SECRET_ROTATION_HOURS", "0")]).await;
    let rx = Receiver::start().await;
    let company = m.company("rot0co").await;
    let old = configured(&m, &company, &rx, "JWT").await;
    let answer = regenerate(&m, &company).await;
    assert_eq!(answer["previous_secret_expires_at"], Value::Null);
    let new = answer["secret"].as_str().unwrap().to_owned();
    let token = login(&m.app, &company.username, PASSWORD).await;
    assert_eq!(
        webhook_config(&m, &token).await["previous_secret_expires_at"],
        Value::Null
    );
    assert_only(&test_event(&m, &rx, &token).await, &new, &[&old]);
}
