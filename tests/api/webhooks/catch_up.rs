//! Catch-up (issue 34): a receiver that was down reads exactly the events it missed from
//! `GET /api/users/me/events`, each with the id and body its webhook carries; a delivery that
//! gave up points there; an endpoint switched off still collects its events; 30 days kept.

use reqwest::{Method, StatusCode};
use serde_json::Value;

use super::receiver::{Receiver, Reply};
use super::{configured, deliveries, open, project, pump, wait_hits};
use crate::helpers::{Account, json};
use crate::market::{Market, code};

async fn events(m: &Market, who: &Account, query: &str) -> Value {
    let r = m
        .send(
            who,
            Method::GET,
            &format!("/api/users/me/events{query}"),
            None,
        )
        .await;
    let status = r.status();
    let body = json(r).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

fn ids(page: &Value) -> Vec<String> {
    page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect()
}

#[actix_web::test]
async fn a_receiver_back_from_an_outage_reads_exactly_what_it_missed() {
    let m = open().await;
    let rx = Receiver::start().await;
    let company = m.company("outageco").await;
    configured(&m, &company, &rx, "JWT").await;

    // Up: two events delivered.
    project(&m, &company).await;
    project(&m, &company).await;
    let mut seen: Vec<Value> = wait_hits(&m, &rx, 2)
        .await
        .iter()
        .map(|h| h.json())
        .collect();
    seen.sort_by_key(|e| e["created_at"].as_str().unwrap().to_owned());
    let last_seen = seen[1]["id"].as_str().unwrap().to_owned();

    // Down: the next three fail (and keep failing).
    rx.always(Reply::Status(503));
    for _ in 0..3 {
        project(&m, &company).await;
    }
    wait_hits(&m, &rx, 5).await;
    // Delivered side by side, so they may arrive in any order; catch-up gives them oldest first.
    let mut missed: Vec<Value> = rx.hits()[2..].iter().map(|h| h.json()).collect();
    missed.sort_by_key(|e| e["created_at"].as_str().unwrap().to_owned());

    // Back: everything after the last event it saw, oldest first, as the webhooks carried it.
    let page = events(&m, &company, &format!("?after={last_seen}")).await;
    assert_eq!(page["total"], 3, "{page}");
    assert_eq!(page["items"].as_array().unwrap(), &missed);
    // The whole log: the five, in order; a filter by type and a page of two.
    let all = events(&m, &company, "").await;
    let mut expected: Vec<String> = seen
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect();
    expected.extend(missed.iter().map(|e| e["id"].as_str().unwrap().to_owned()));
    assert_eq!(ids(&all), expected);
    let typed = events(&m, &company, "?type=project.created&size=2&page=2").await;
    assert_eq!(
        (typed["total"].as_i64(), typed["pages"].as_i64()),
        (Some(5), Some(3))
    );
    assert_eq!(ids(&typed), expected[2..4].to_vec());
    assert_eq!(events(&m, &company, "?type=payment.held").await["total"], 0);

    // A delivery still being retried does not point at the catch-up yet.
    let log = deliveries(&m, &company, "").await;
    assert_eq!(log["items"][0]["state"], "pending");
    assert!(log["items"][0]["catch_up"].is_null());

    // Another user reads none of it; a made-up `after`, a bad `since` or type are refused.
    let other = m.company("otherco").await;
    assert_eq!(events(&m, &other, "").await["total"], 0);
    for query in [
        format!("?after={last_seen}"),
        "?since=yesterday".to_owned(),
        "?type=project.deleted".to_owned(),
    ] {
        let r = m
            .send(
                &other,
                Method::GET,
                &format!("/api/users/me/events{query}"),
                None,
            )
            .await;
        assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY, "{query}");
        assert_eq!(code(&json(r).await), "VALIDATION_ERROR");
    }
    m.app.stop().await;
}

/// An endpoint switched off is sent nothing, but its events are kept for the catch-up; after
/// 30 days they are pruned.
#[actix_web::test]
async fn events_of_a_switched_off_endpoint_are_kept_thirty_days() {
    let m = open().await;
    let rx = Receiver::start().await;
    let company = m.company("offco").await;
    configured(&m, &company, &rx, "JWT").await;
    let r = m
        .send(
            &company,
            Method::PUT,
            "/api/users/me/webhook",
            Some(serde_json::json!({"url": rx.url(&format!("/hooks/{}", company.id)), "enabled": false, "auth_method": "JWT"})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    project(&m, &company).await;
    let mut kept = Value::Null;
    for _ in 0..50 {
        pump(&m).await;
        kept = events(&m, &company, "").await;
        if kept["total"] == 1 {
            break;
        }
    }
    assert_eq!(kept["total"], 1, "{kept}");
    assert_eq!(kept["items"][0]["type"], "project.created");
    assert!(
        rx.hits().is_empty(),
        "nothing sent to a switched-off endpoint"
    );
    // The log says it was not sent and points at the catch-up, whose link finds it.
    let log = deliveries(&m, &company, "").await;
    let unsent = &log["items"][0];
    assert_eq!(unsent["state"], "disabled");
    let link = unsent["catch_up"].as_str().expect("a link");
    let from_link = json(m.send(&company, Method::GET, link, None).await).await;
    assert_eq!(
        from_link["items"][0]["id"], unsent["message_id"],
        "{from_link}"
    );

    let prune = marketplace::workflows::webhooks::catch_up::PRUNE_JOB;
    m.app.state.clock.advance(chrono::Duration::days(29));
    m.app.state.jobs.trigger(prune).await.unwrap();
    assert_eq!(
        m.count(
            "SELECT COUNT(*) FROM webhook_deliveries WHERE user_id = $1",
            company.id
        )
        .await,
        1
    );
    m.app.state.clock.advance(chrono::Duration::days(2));
    m.app.state.jobs.trigger(prune).await.unwrap();
    assert_eq!(
        m.count(
            "SELECT COUNT(*) FROM webhook_deliveries WHERE user_id = $1",
            company.id
        )
        .await,
        0
    );
    m.app.stop().await;
}
