//! Two server processes on one PostgreSQL database and one Redis, raced: the same approval,
//! the same selection, the same processor webhook delivered to both, the same dispute
//! decision; a logout on one then a request on the other; rate limits counted across both.
//! Each race has exactly one effect.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use marketplace::integrations::processor::webhook::{SIGNATURE_HEADER, sign};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json as j};

use crate::harness::*;

/// Rounds of each race.
const ROUNDS: usize = 3;

/// Sends `requests` (instance base, account, method, path, body) all at once; the statuses.
async fn race(
    http: &reqwest::Client,
    requests: Vec<(String, Account, Method, String, Option<Value>)>,
) -> Vec<StatusCode> {
    let mut tasks = Vec::new();
    for (base, who, method, path, body) in requests {
        let http = http.clone();
        tasks.push(tokio::spawn(async move {
            send(&http, &base, &who, method, &path, body.as_ref())
                .await
                .map(|r| r.status())
                .unwrap_or(StatusCode::BAD_GATEWAY)
        }));
    }
    let mut statuses = Vec::new();
    for t in tasks {
        statuses.push(t.await.expect("request task"));
    }
    statuses
}

fn one_winner(statuses: &[StatusCode], what: &str) {
    let ok = statuses.iter().filter(|s| s.is_success()).count();
    assert_eq!(ok, 1, "{what}: exactly one succeeds, got {statuses:?}");
    assert!(
        statuses
            .iter()
            .all(|s| s.is_success() || s.is_client_error()),
        "{what}: the others are refused, not failed: {statuses:?}"
    );
}

async fn events_of(db: &TestDb, kind: &str, aggregate: &str, id: i64) -> i64 {
    sqlx::query_scalar::<_, i64>(
        "SELECT COUNT(*) FROM events WHERE kind = $1 AND aggregate = $2 AND aggregate_id = $3",
    )
    .bind(kind)
    .bind(aggregate)
    .bind(id)
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

/// Confirms payment `id`'s intent with a card the sandbox authorises; waits for `held`.
async fn fund(m: &Market, db: &TestDb, id: i64) -> String {
    let intent = poll("an intent", Duration::from_secs(20), || intent_of(db, id)).await;
    let r = m
        .http
        .post(format!(
            "{}/api/sandbox/payment_intents/{intent}/confirm",
            m.sandbox_base
        ))
        .json(&j!({"payment_method": "pm_card_visa"}))
        .send()
        .await;
    expect(r, StatusCode::OK, "confirmation").await;
    poll("the payment held", Duration::from_secs(20), || async {
        (status_of(db, id).await == "held").then_some(())
    })
    .await;
    intent
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_race_with_one_effect_each() {
    let Some(infra) = infra("two_instances_race_with_one_effect_each") else {
        return;
    };
    let started = Instant::now();
    let http = client();
    let dir = tempfile::tempdir().expect("temporary directory");
    let db = TestDb::create(&infra.pg_url, "inst").await;
    let keys = Keys::fresh();
    let prefix = format!("res:inst:{}:", random(6));
    let (port_a, port_b) = (free_port(), free_port());
    let webhook_a = format!("http://127.0.0.1:{port_a}/api/payments/webhooks/processor");
    let sandbox = SandboxProc::start(dir.path(), &keys, &webhook_a, &http).await;
    let start = |port: u16, name: &str, limit: &str| {
        let data = dir.path().join(name);
        std::fs::create_dir_all(&data).unwrap();
        let mut env = server_env(
            &db.url,
            &infra.redis_url,
            &prefix,
            &keys,
            &sandbox.base,
            &data,
            port,
        );
        env.insert("LOGIN_RATE_LIMIT_MAX_ATTEMPTS_PER_USER".into(), "5".into());
        env.insert("RATE_LIMIT_PER_MINUTE".into(), limit.into());
        (env, data)
    };
    let (env_a, data_a) = start(port_a, "a", "0");
    let (env_b, data_b) = start(port_b, "b", "0");
    let (a, b) = tokio::join!(
        ServerProc::start(env_a, &data_a, "server.log", &http),
        ServerProc::start(env_b, &data_b, "server.log", &http),
    );
    let (ua, ub) = (a.base.clone(), b.base.clone());
    let m = Market::open(http.clone(), &ua, &sandbox.base, &db).await;
    let mut races: BTreeMap<&str, usize> = BTreeMap::new();

    // 1. The same approval on both: one capture, one transfer, one release event.
    for round in 0..ROUNDS {
        let d = m
            .deal(
                &db,
                &format!("ap{round}{}", random(2)),
                &[5_000, 7_000, 2_000],
            )
            .await;
        fund(&m, &db, d.first_payment).await;
        let body = Some(j!({"payment_id": d.first_payment}));
        let requests = [&ua, &ub, &ua, &ub]
            .into_iter()
            .map(|base| {
                (
                    base.clone(),
                    d.company.clone(),
                    Method::POST,
                    "/api/payments/release".to_owned(),
                    body.clone(),
                )
            })
            .collect();
        one_winner(&race(&http, requests).await, "the same release");
        let ledger = sandbox.ledger(&http).await;
        let intent = intent_of(&db, d.first_payment).await.unwrap();
        assert_eq!(intent_in(&ledger, &intent).unwrap()["captures"], 1);
        assert_eq!(
            transfers_of(&ledger, d.first_payment).len(),
            1,
            "one transfer"
        );
        assert_eq!(
            events_of(&db, "payment.released", "payment", d.first_payment).await,
            1
        );
        // The next milestone's payment exists once.
        assert_eq!(
            db.count1(
                "SELECT COUNT(*) FROM payments WHERE project_id = $1",
                d.project_id
            )
            .await,
            2
        );
        *races.entry("approval").or_default() += 1;
    }

    // 2. The same selection on both (and a rival expert's): one accepted proposal, one payment.
    for round in 0..ROUNDS {
        let (company, x, project_id, _) = m
            .parties(
                &db,
                &format!("se{round}{}", random(2)),
                &[4_000, 6_000, 1_000],
            )
            .await;
        let y = m
            .member(&db, &format!("se{round}y{}", random(2)), "experto")
            .await;
        let r = m
            .as_admin(
                Method::POST,
                &format!("/api/admin/projects/{project_id}/invite-experts"),
                Some(j!({"expert_ids": [y.id]})),
            )
            .await;
        expect(r, StatusCode::OK, "invitation").await;
        m.apply(&y, project_id, &[4_000, 6_000, 1_000]).await;
        let requests = [(&ua, x.id), (&ub, x.id), (&ub, y.id), (&ua, y.id)]
            .into_iter()
            .map(|(base, expert)| {
                (
                    base.clone(),
                    company.clone(),
                    Method::POST,
                    format!("/api/projects/{project_id}/select/{expert}"),
                    None,
                )
            })
            .collect();
        one_winner(&race(&http, requests).await, "the same selection");
        assert_eq!(
            db.count1(
                "SELECT COUNT(*) FROM payments WHERE project_id = $1",
                project_id
            )
            .await,
            1,
            "one first payment"
        );
        assert_eq!(
            db.count1(
                "SELECT COUNT(*) FROM applications WHERE project_id = $1 AND status = 'accepted'",
                project_id
            )
            .await,
            1,
            "one accepted proposal"
        );
        *races.entry("selection").or_default() += 1;
    }

    // 3. The same processor webhook delivered to both, twice each: applied once.
    for round in 0..ROUNDS {
        let d = m
            .deal(
                &db,
                &format!("wh{round}{}", random(2)),
                &[3_000, 1_000, 1_000],
            )
            .await;
        let intent = poll("an intent", Duration::from_secs(20), || {
            intent_of(&db, d.first_payment)
        })
        .await;
        let off = sandbox
            .control(&http, "webhook-target", j!({"url": null}))
            .await;
        expect(off, StatusCode::OK, "webhooks held back").await;
        let r = sandbox
            .control(
                &http,
                &format!("payment_intents/{intent}/confirm"),
                j!({"payment_method": "pm_card_visa"}),
            )
            .await;
        expect(r, StatusCode::OK, "confirmation").await;
        let events: Vec<Value> = sandbox
            .events(&http)
            .await
            .into_iter()
            .filter(|e| {
                serde_json::from_str::<Value>(e["payload"].as_str().unwrap_or("{}"))
                    .is_ok_and(|p| p["data"]["object"]["id"] == intent.as_str())
            })
            .collect();
        assert!(!events.is_empty(), "the authorisation's events");
        for event in &events {
            let payload = event["payload"].as_str().unwrap().to_owned();
            let mut tasks = Vec::new();
            for base in [&ua, &ub, &ua, &ub] {
                let http = http.clone();
                let url = format!("{base}/api/payments/webhooks/processor");
                let signature = sign(
                    payload.as_bytes(),
                    &keys.webhook_secret,
                    chrono::Utc::now().timestamp(),
                );
                let payload = payload.clone();
                tasks.push(tokio::spawn(async move {
                    http.post(url)
                        .header(SIGNATURE_HEADER, signature)
                        .header("content-type", "application/json")
                        .body(payload)
                        .send()
                        .await
                        .map(|r| r.status())
                        .unwrap_or(StatusCode::BAD_GATEWAY)
                }));
            }
            for t in tasks {
                let status = t.await.unwrap();
                assert_eq!(status, StatusCode::OK, "every delivery is answered");
            }
            let id = event["id"].as_str().unwrap().to_owned();
            let stored =
                sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM processor_events WHERE id = $1")
                    .bind(&id)
                    .fetch_one(&db.pool)
                    .await
                    .unwrap();
            assert_eq!(stored, 1, "event {id} stored once");
        }
        let on = sandbox
            .control(&http, "webhook-target", j!({"url": webhook_a}))
            .await;
        expect(on, StatusCode::OK, "webhooks flowing again").await;
        poll("the payment held", Duration::from_secs(20), || async {
            (status_of(&db, d.first_payment).await == "held").then_some(())
        })
        .await;
        // The sandbox's own (late) delivery arrives too; still one effect.
        poll(
            "every processor event applied",
            Duration::from_secs(90),
            || async {
                (db.count("SELECT COUNT(*) FROM processor_events WHERE processed_at IS NULL")
                    .await
                    == 0)
                    .then_some(())
            },
        )
        .await;
        assert_eq!(
            events_of(&db, "payment.held", "payment", d.first_payment).await,
            1
        );
        let held_event = db
            .count1(
                "SELECT id FROM events WHERE kind = 'payment.held' AND aggregate = 'payment' AND aggregate_id = $1",
                d.first_payment,
            )
            .await;
        poll("the held notification", Duration::from_secs(20), || async {
            (db.count1(
                "SELECT COUNT(*) FROM notifications WHERE event_id = $1",
                held_event,
            )
            .await
                > 0)
            .then_some(())
        })
        .await;
        let per_user = db
            .count1(
                "SELECT COALESCE(MAX(n), 0) FROM (SELECT COUNT(*) AS n FROM notifications
                 WHERE user_id = $1 AND type = 'payment_held' GROUP BY user_id) c",
                d.expert.id,
            )
            .await;
        assert_eq!(per_user, 1, "the expert told once");
        *races.entry("webhook to both").or_default() += 1;
    }

    // 4. The same dispute decided on both, one each way: one decision, the money moved once.
    for round in 0..ROUNDS {
        let d = m
            .deal(
                &db,
                &format!("di{round}{}", random(2)),
                &[8_000, 1_000, 1_000],
            )
            .await;
        let intent = fund(&m, &db, d.first_payment).await;
        let r = m
            .send(
                &d.expert,
                Method::POST,
                &format!("/api/projects/{}/dispute", d.project_id),
                Some(j!({"title": "Not paid", "reason": "The company does not approve the delivered work."})),
            )
            .await;
        let dispute = expect(r, StatusCode::CREATED, "dispute").await["dispute_id"]
            .as_i64()
            .unwrap();
        let admin = m.admin.clone();
        let requests = [(&ua, "refund_company"), (&ub, "release_to_expert"), (&ub, "refund_company"), (&ua, "release_to_expert")]
            .into_iter()
            .map(|(base, action)| {
                (
                    base.clone(),
                    admin.clone(),
                    Method::PUT,
                    format!("/api/admin/disputes/{dispute}/resolve"),
                    Some(j!({"resolution": "Decided after reading both parties.", "resolution_action": action})),
                )
            })
            .collect();
        one_winner(&race(&http, requests).await, "the same dispute decision");
        assert_eq!(
            events_of(&db, "dispute.resolved", "dispute", dispute).await,
            1,
            "one decision recorded"
        );
        let status = status_of(&db, d.first_payment).await;
        let ledger = sandbox.ledger(&http).await;
        let at = intent_in(&ledger, &intent).unwrap();
        let transfers = transfers_of(&ledger, d.first_payment);
        match status.as_str() {
            "released" => {
                assert_eq!(at["captures"], 1);
                assert_eq!(transfers.len(), 1, "one transfer");
                assert_eq!(at["refunded"], 0);
            }
            "refunded" => {
                let statuses: Vec<(String, String)> = sqlx::query_as(
                    "SELECT status, payout_status FROM payments WHERE project_id = $1 ORDER BY id",
                )
                .bind(d.project_id)
                .fetch_all(&db.pool)
                .await
                .unwrap();
                assert!(
                    transfers.is_empty(),
                    "no transfer for refunded money: {transfers:?} {at} {statuses:?}"
                );
                assert!(
                    at["status"] == "canceled" || at["refunded"] == 8_000,
                    "the authorisation released or the charge refunded: {at}"
                );
            }
            other => panic!("the disputed payment is {other}"),
        }
        *races.entry("dispute decision").or_default() += 1;
    }

    // 5. Logout on one instance, the next request on the other: refused at once.
    for round in 0..ROUNDS {
        let user = m
            .member(&db, &format!("lo{round}{}", random(2)), "empresa")
            .await;
        let r = http
            .post(format!("{ua}/api/auth/login"))
            .json(&j!({"username": user.username, "password": PASSWORD}))
            .send()
            .await;
        let body = expect(r, StatusCode::OK, "login").await;
        let access = body["access_token"].as_str().unwrap().to_owned();
        let refresh = body["refresh_token"].as_str().unwrap().to_owned();
        let me = |base: String| {
            let http = http.clone();
            let access = access.clone();
            async move {
                http.get(format!("{base}/api/users/me"))
                    .bearer_auth(access)
                    .send()
                    .await
                    .unwrap()
                    .status()
            }
        };
        assert_eq!(
            me(ub.clone()).await,
            StatusCode::OK,
            "the session works on B"
        );
        let r = http
            .post(format!("{ua}/api/auth/logout"))
            .bearer_auth(&access)
            .json(&j!({"refresh_token": refresh}))
            .send()
            .await;
        expect(r, StatusCode::OK, "logout on A").await;
        assert_eq!(
            me(ub.clone()).await,
            StatusCode::UNAUTHORIZED,
            "revoked on B at once"
        );
        let r = http
            .post(format!("{ub}/api/auth/refresh"))
            .json(&j!({"refresh_token": refresh}))
            .send()
            .await
            .unwrap();
        assert_eq!(
            r.status(),
            StatusCode::UNAUTHORIZED,
            "the refresh token too"
        );
        *races.entry("logout then request").or_default() += 1;
    }

    // 6a. Login attempts per user, counted across both: five answered, the rest refused.
    for round in 0..ROUNDS {
        let user = m
            .member(&db, &format!("rl{round}{}", random(2)), "empresa")
            .await;
        let mut tasks = Vec::new();
        for i in 0..12 {
            let http = http.clone();
            let base = if i % 2 == 0 { ua.clone() } else { ub.clone() };
            let username = user.username.clone();
            tasks.push(tokio::spawn(async move {
                http.post(format!("{base}/api/auth/login"))
                    .json(&j!({"username": username, "password": "Wrong-password-1"}))
                    .send()
                    .await
                    .unwrap()
                    .status()
            }));
        }
        let mut statuses = Vec::new();
        for t in tasks {
            statuses.push(t.await.unwrap());
        }
        let limited = statuses
            .iter()
            .filter(|s| **s == StatusCode::TOO_MANY_REQUESTS)
            .count();
        let refused = statuses
            .iter()
            .filter(|s| **s == StatusCode::UNAUTHORIZED)
            .count();
        assert_eq!(
            (refused, limited),
            (5, 7),
            "per-user login limit across both: {statuses:?}"
        );
        *races.entry("login limit across both").or_default() += 1;
    }

    // 6b. The global limit per address, counted across two more instances that enforce it.
    let (port_c, port_d) = (free_port(), free_port());
    let (env_c, data_c) = start(port_c, "c", "25");
    let (env_d, data_d) = start(port_d, "d", "25");
    let (c, d) = tokio::join!(
        ServerProc::start(env_c, &data_c, "server.log", &http),
        ServerProc::start(env_d, &data_d, "server.log", &http),
    );
    let mut tasks = Vec::new();
    for i in 0..40 {
        let http = http.clone();
        let url = if i % 2 == 0 {
            c.url("/api/projects")
        } else {
            d.url("/api/projects")
        };
        tasks.push(tokio::spawn(async move {
            http.get(url).send().await.unwrap().status()
        }));
    }
    let mut statuses = Vec::new();
    for t in tasks {
        statuses.push(t.await.unwrap());
    }
    let limited = statuses
        .iter()
        .filter(|s| **s == StatusCode::TOO_MANY_REQUESTS)
        .count();
    assert_eq!(
        limited, 15,
        "25 of 40 requests pass across both: {statuses:?}"
    );
    *races.entry("global limit across both").or_default() += 1;

    let total: usize = races.values().sum();
    eprintln!(
        "instances: RESULT {total} races, one effect each: {races:?}, in {:?}",
        started.elapsed()
    );
    drop((a, b, c, d, sandbox));
    db.drop_now().await;
    eprintln!("instances: cleaned up at {:?}", started.elapsed());
}
