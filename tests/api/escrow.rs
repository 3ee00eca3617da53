//! Escrow over HTTP with the processor sandbox: funding, release with commission and
//! transfer, the webhook receiver (alone, duplicated, out of order, badly signed), races on
//! one payment, deferred transfers, refunds with reversal, expiring authorisations and
//! reconciliation. The sandbox ledger is the truth the service's records are held against.

use std::time::Duration;

use marketplace::integrations::processor::webhook::{SIGNATURE_HEADER, sign};
use marketplace::store::processor_events;
use marketplace::workflows::escrow_jobs;
use marketplace::workflows::processor_events as processor_events_flow;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json as j};

use crate::helpers::{Account, json};
use crate::market::{Market, code, notifications_of, wait_notification};

/// A project with an expert selected on a three-milestone proposal; the first payment
/// `pending`.
pub struct Deal {
    pub company: Account,
    pub expert: Account,
    pub project_id: i64,
    pub first_payment: i64,
}

pub async fn deal(m: &Market, name: &str, amounts: [f64; 3]) -> Deal {
    let company = m.company(&format!("{name}co")).await;
    let expert = m.expert(&format!("{name}ex")).await;
    let budget = (amounts.iter().sum::<f64>() * 100.0).round() / 100.0;
    let project_id = m.published_project(&company, budget, &[&expert]).await;
    assert_eq!(
        m.apply(&expert, project_id, amounts).await.status(),
        StatusCode::CREATED
    );
    let r = m
        .send(
            &company,
            Method::POST,
            &format!("/api/projects/{project_id}/select/{}", expert.id),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let first_payment = json(r).await["payment"]["id"].as_i64().unwrap();
    Deal {
        company,
        expert,
        project_id,
        first_payment,
    }
}

/// Gives the expert an onboarded connected account the way experts get one: the account
/// link creates it, the hosted onboarding is completed at the sandbox, and its
/// `account.updated` webhook makes it `active`.
pub async fn connect(m: &Market, expert: &Account) -> String {
    let r = post(m, expert, "/api/processor-connect/account-link", j!({})).await;
    assert_eq!(r.status(), StatusCode::OK);
    let r = m
        .send(expert, Method::GET, "/api/processor-connect/status", None)
        .await;
    let account = json(r).await["account_id"].as_str().unwrap().to_owned();
    let r = m
        .app
        .post_json(
            &format!("/api/sandbox/accounts/{account}/complete-onboarding"),
            &j!({}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let expert_id = expert.id;
    poll(m, "the connected account active", || async move {
        let status = m
            .text(
            "SELECT COALESCE(processor_connect_status, '') FROM profiles WHERE user_id = $1 AND profile_type = 'experto'",
            expert_id,
        )
        .await;
        (status == "active").then_some(())
    })
    .await;
    account
}

async fn sql(m: &Market, statement: &'static str, text: &str, id: i64) {
    let mut conn = m.app.db.conn().await.unwrap();
    marketplace::on_exec!(conn.exec(), c => sqlx::query(statement).bind(text).bind(id).execute(c).await.map(drop))
        .unwrap();
}

/// Polls `probe` (every 20 ms, 10 s at most), running the outbox meanwhile.
pub async fn poll<T, F, Fut>(m: &Market, what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    for _ in 0..500 {
        let _ = m.app.state.outbox.trigger().await;
        if let Some(v) = probe().await {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for {what}");
}

pub async fn payment(m: &Market, id: i64) -> Value {
    let r = m
        .as_admin(Method::GET, &format!("/api/admin/payments/{id}"), None)
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    json(r).await
}

/// Waits until payment `id` satisfies `pred`.
pub async fn wait_payment(m: &Market, id: i64, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let pred = &pred;
    poll(m, what, || async move {
        let y = payment(m, id).await;
        pred(&y).then_some(y)
    })
    .await
}

pub async fn sandbox_ledger(m: &Market) -> Value {
    json(m.app.get("/api/sandbox/ledger").await).await
}

pub fn intent_in<'a>(ledger: &'a Value, intent: &str) -> &'a Value {
    ledger["intents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["id"] == intent)
        .unwrap_or_else(|| panic!("intent {intent} not in the ledger"))
}

pub fn transfers_of(ledger: &Value, payment_id: i64) -> Vec<&Value> {
    ledger["transfers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| {
            t["metadata"]["payment_id"]
                .as_str()
                .and_then(|s| s.parse().ok())
                == Some(payment_id)
        })
        .collect()
}

/// The company pays payment `id` with a card the processor authorises; waits for `held`.
pub async fn fund(m: &Market, company: &Account, id: i64) -> Value {
    let y = payment(m, id).await;
    let intent = y["processor_payment_intent_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = m
        .send(
            company,
            Method::GET,
            &format!("/api/payments/intent/{intent}"),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let details = json(r).await;
    assert!(
        details["client_secret"]
            .as_str()
            .is_some_and(|s| s.starts_with(&intent))
    );
    authorise(m, id).await
}

/// The card holder confirms payment `id`'s intent with a card the sandbox authorises; waits
/// until the webhook made it `held`.
pub async fn authorise(m: &Market, id: i64) -> Value {
    let intent = payment(m, id).await["processor_payment_intent_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = m
        .app
        .post_json(
            &format!("/api/sandbox/payment_intents/{intent}/confirm"),
            &j!({"payment_method": "pm_card_visa"}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    wait_payment(m, id, "payment held", |y| y["status"] == "held").await
}

/// [`deal`] on milestones of `first`, 100 and 100, its first payment funded and released
/// by the company.
pub async fn released(m: &Market, name: &str, first: f64) -> Deal {
    let d = deal(m, name, [first, 100.0, 100.0]).await;
    connect(m, &d.expert).await;
    authorise(m, d.first_payment).await;
    let r = m
        .send(
            &d.company,
            Method::POST,
            "/api/payments/release",
            Some(j!({"payment_id": d.first_payment})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK, "{}", json(r).await);
    d
}

async fn post(m: &Market, who: &Account, path: &str, body: Value) -> reqwest::Response {
    m.send(who, Method::POST, path, Some(body)).await
}

pub async fn unprocessed_events(m: &Market) -> i64 {
    m.count(
        "SELECT COUNT(*) FROM processor_events WHERE processed_at IS NULL AND $1 = $1",
        0,
    )
    .await
}

#[actix_web::test]
async fn three_milestones_end_to_end_agree_with_the_ledger() {
    let m = Market::open().await;
    let d = deal(&m, "e2e", [100.0, 200.5, 99.99]).await;
    connect(&m, &d.expert).await;

    // Milestone 1: funded, held, released with 5 % (Global), transferred.
    let y1 = fund(&m, &d.company, d.first_payment).await;
    assert!(y1["held_at"].is_string());
    assert!(
        y1["processor_charge_id"]
            .as_str()
            .unwrap()
            .starts_with("ch_")
    );
    assert_eq!(y1["payment_metadata"]["amount_capturable"], 10_000);
    wait_notification(&m.app, d.expert.id, "payment_held").await;
    let status = m
        .count(
            "SELECT COUNT(*) FROM projects WHERE id = $1 AND status = 'in_progress'",
            d.project_id,
        )
        .await;
    assert_eq!(
        status, 1,
        "the project is under way once the first payment is held"
    );
    let funded = m
        .count(
            "SELECT COUNT(*) FROM milestones WHERE project_id = $1 AND position = 1 AND status = 'pending'",
            d.project_id,
        )
        .await;
    assert_eq!(funded, 1);

    // Only the company (or an administrator) releases.
    let r = post(
        &m,
        &d.expert,
        "/api/payments/release",
        j!({"payment_id": d.first_payment}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let r = post(
        &m,
        &d.company,
        "/api/payments/release",
        j!({"payment_id": d.first_payment}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    let released = json(r).await;
    assert_eq!(released["status"], "released");
    assert_eq!(released["expert_level_used"], "Global");
    assert_eq!(released["commission_amount"], 5.0);
    assert_eq!(released["application_fee_amount"], 5.0);
    assert_eq!(released["expert_amount"], 95.0);
    assert_eq!(released["payout_status"], "transferred");
    let second = released["next_payment"]["id"].as_i64().unwrap();
    assert_eq!(released["next_payment"]["status"], "pending");
    assert!(released["next_payment"]["client_secret"].is_string());
    wait_notification(&m.app, d.expert.id, "milestone_awaiting_payment").await;
    wait_notification(&m.app, d.expert.id, "payment_released").await;
    let awaiting = m
        .count(
            "SELECT COUNT(*) FROM milestones WHERE project_id = $1 AND position = 2 AND status = 'awaiting_payment'",
            d.project_id,
        )
        .await;
    assert_eq!(awaiting, 1);

    // A second release of the same payment moves nothing.
    let r = post(
        &m,
        &d.company,
        "/api/payments/release",
        j!({"payment_id": d.first_payment}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    assert_eq!(code(&json(r).await), "PAYMENT_NOT_HELD");

    // Milestone 2 with release-and-charge-next.
    fund(&m, &d.company, second).await;
    let r = post(
        &m,
        &d.company,
        "/api/payments/release-and-charge-next",
        j!({"payment_id": second}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    let released = json(r).await;
    assert_eq!(
        released["commission_amount"], 10.03,
        "5 % of 200.50, half up"
    );
    assert_eq!(released["expert_amount"], 190.47);
    let third = released["next_payment"]["id"].as_i64().unwrap();
    assert!(released["next_payment"]["client_secret"].is_string());

    // Milestone 3 at the level the expert has at release: Pro, 4 %.
    sql(
        &m,
        "UPDATE profiles SET expert_level = $1 WHERE user_id = $2 AND profile_type = 'experto'",
        "Pro",
        d.expert.id,
    )
    .await;
    fund(&m, &d.company, third).await;
    let r = post(
        &m,
        &d.company,
        "/api/payments/release",
        j!({"payment_id": third}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    let released = json(r).await;
    assert_eq!(released["expert_level_used"], "Pro");
    assert_eq!(released["commission_amount"], 4.0);
    assert_eq!(released["expert_amount"], 95.99);
    assert!(released["next_payment"].is_null());
    let completed = m
        .count("SELECT COUNT(*) FROM projects WHERE id = $1 AND status = 'completed' AND completed_at IS NOT NULL", d.project_id)
        .await;
    assert_eq!(completed, 1, "the last release completes the project");

    // The ledger agrees, payment by payment: captured = transferred + commission.
    let ledger = sandbox_ledger(&m).await;
    for id in [d.first_payment, second, third] {
        let y = wait_payment(&m, id, "payout transferred", |y| {
            y["payout_status"] == "transferred"
        })
        .await;
        let intent = intent_in(&ledger, y["processor_payment_intent_id"].as_str().unwrap());
        let amount = (y["amount"].as_f64().unwrap() * 100.0).round() as i64;
        let commission = (y["commission_amount"].as_f64().unwrap() * 100.0).round() as i64;
        assert_eq!(intent["captured"], amount);
        assert_eq!(intent["captures"], 1);
        assert_eq!(intent["refunded"], 0);
        let transfers = transfers_of(&ledger, id);
        assert_eq!(transfers.len(), 1, "one transfer for payment {id}");
        assert_eq!(
            transfers[0]["amount"].as_i64().unwrap() + commission,
            amount
        );
        assert_eq!(transfers[0]["id"], y["processor_transfer_id"]);
    }

    // History by role, and the project's payments for its participants only.
    let r = m
        .send(&d.expert, Method::GET, "/api/payments/history", None)
        .await;
    assert_eq!(json(r).await["total"], 3);
    let r = m
        .send(&d.company, Method::GET, "/api/payments/history", None)
        .await;
    assert_eq!(json(r).await["total"], 3);
    let stranger = m.company("strangerco").await;
    let r = m
        .send(
            &stranger,
            Method::GET,
            &format!("/api/payments/project/{}", d.project_id),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let r = m
        .send(
            &stranger,
            Method::GET,
            &format!("/api/payments/{third}"),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let r = m
        .send(&stranger, Method::GET, "/api/payments/history", None)
        .await;
    assert_eq!(json(r).await["total"], 0);
    let r = m
        .send(
            &d.company,
            Method::GET,
            &format!("/api/payments/{third}/receipt"),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert!(json(r).await["receipt_url"].is_string());

    // E-mails: held ×3 and received ×3 to the expert; released ×3 to the company.
    let mails = m.app.mails_to(&d.expert.email, 7).await;
    assert_eq!(
        mails
            .iter()
            .filter(|x| x.subject.contains("held in escrow"))
            .count(),
        3
    );
    assert_eq!(
        mails
            .iter()
            .filter(|x| x.subject.starts_with("You received"))
            .count(),
        3
    );
    // The sandbox's last webhooks are stored before its calls answer, and applied after.
    poll(&m, "every webhook applied", || async {
        (unprocessed_events(&m).await == 0).then_some(())
    })
    .await;
}

/// Posts a signed event to the receiver.
async fn deliver(m: &Market, event: &Value, secret: Option<&str>) -> reqwest::Response {
    let body = event.to_string();
    let secret = secret
        .map(str::to_owned)
        .unwrap_or_else(|| m.app.state.processor.webhook_secret.expose().to_owned());
    let signature = sign(body.as_bytes(), &secret, m.app.clock.now().timestamp());
    m.app
        .client
        .post(m.app.url("/api/payments/webhooks/processor"))
        .header(SIGNATURE_HEADER, signature)
        .header("Content-Type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap()
}

fn event(id: &str, kind: &str, object: Value) -> Value {
    j!({"id": id, "object": "event", "type": kind, "created": 1_700_000_000, "livemode": false,
        "api_version": "2024-12-18.acacia", "data": {"object": object}})
}

/// A test event as the receiver hands it on to be stored.
fn as_received(e: &Value) -> processor_events::NewEvent {
    processor_events::NewEvent {
        id: e["id"].as_str().unwrap().into(),
        kind: e["type"].as_str().unwrap().into(),
        payload: e.clone(),
        created: None,
    }
}

async fn stored_events(m: &Market) -> i64 {
    m.count("SELECT COUNT(*) FROM processor_events WHERE $1 = $1", 0)
        .await
}

#[actix_web::test]
async fn webhooks_verified_stored_once_and_never_backwards() {
    let m = Market::open().await;
    let d = deal(&m, "hook", [10.0, 10.0, 10.0]).await;
    let y = payment(&m, d.first_payment).await;
    let intent_id = y["processor_payment_intent_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let intent = j!({"id": intent_id, "object": "payment_intent", "amount": 1000,
                     "amount_capturable": 1000, "amount_received": 0, "currency": "eur",
                     "status": "requires_capture", "capture_method": "manual",
                     "latest_charge": "ch_unknown", "metadata": {"payment_id": d.first_payment.to_string()}});
    let held = event(
        "evt_test_held",
        "payment_intent.amount_capturable_updated",
        intent.clone(),
    );

    // A bad or missing signature is refused and nothing is stored.
    let before = stored_events(&m).await;
    let r = deliver(&m, &held, Some("whsec_not_ours")).await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert_eq!(code(&json(r).await), "INVALID_SIGNATURE");
    let r = m
        .app
        .client
        .post(m.app.url("/api/payments/webhooks/processor"))
        .body(held.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert_eq!(stored_events(&m).await, before);
    assert_eq!(payment(&m, d.first_payment).await["status"], "pending");

    // Alone: held, once, however often it is delivered.
    for _ in 0..3 {
        assert_eq!(deliver(&m, &held, None).await.status(), StatusCode::OK);
    }
    wait_payment(&m, d.first_payment, "held", |y| y["status"] == "held").await;
    wait_notification(&m.app, d.expert.id, "payment_held").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let _ = m.app.state.outbox.trigger().await;
    assert_eq!(
        notifications_of(&m.app, d.expert.id, "payment_held").await,
        1
    );
    let stored = m
        .count("SELECT COUNT(*) FROM processor_events WHERE id = 'evt_test_held' AND processed_at IS NOT NULL AND payment_id = $1", d.first_payment)
        .await;
    assert_eq!(stored, 1);

    // Out of order: a late failure or cancellation does not move a held payment back.
    let mut failed = intent.clone();
    failed["status"] = j!("requires_payment_method");
    failed["last_payment_error"] = j!({"code": "card_declined", "message": "declined"});
    deliver(
        &m,
        &event(
            "evt_test_late_fail",
            "payment_intent.payment_failed",
            failed,
        ),
        None,
    )
    .await;
    let mut canceled = intent.clone();
    canceled["status"] = j!("canceled");
    deliver(
        &m,
        &event("evt_test_late_cancel", "payment_intent.canceled", canceled),
        None,
    )
    .await;
    poll(&m, "late events applied", || async {
        (unprocessed_events(&m).await == 0).then_some(())
    })
    .await;
    assert_eq!(payment(&m, d.first_payment).await["status"], "held");
    assert_eq!(
        notifications_of(&m.app, d.company.id, "payment_failed").await,
        0
    );
    wait_notification(&m.app, m.admin_id, "payment_authorisation_lost").await;

    // Unknown types are answered and ignored.
    let r = deliver(
        &m,
        &event(
            "evt_test_other",
            "customer.created",
            j!({"id": "cus_1", "object": "customer"}),
        ),
        None,
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    poll(&m, "unknown event noted", || async {
        (m.count("SELECT COUNT(*) FROM processor_events WHERE id = 'evt_test_other' AND processed_at IS NOT NULL AND $1 = $1", 0).await == 1).then_some(())
    })
    .await;

    // A declined card, from the sandbox: failed, the company told; the milestone still waits.
    let d2 = deal(&m, "declined", [10.0, 10.0, 10.0]).await;
    let y2 = payment(&m, d2.first_payment).await;
    let intent2 = y2["processor_payment_intent_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = m
        .app
        .post_json(
            &format!("/api/sandbox/payment_intents/{intent2}/confirm"),
            &j!({"payment_method": "pm_card_chargeDeclined"}),
        )
        .await;
    assert!(r.status().is_client_error() || r.status().is_success());
    wait_payment(&m, d2.first_payment, "failed", |y| y["status"] == "failed").await;
    wait_notification(&m.app, d2.company.id, "payment_failed").await;
    let waiting = m
        .count(
            "SELECT COUNT(*) FROM milestones WHERE project_id = $1 AND position = 1 AND status = 'awaiting_payment'",
            d2.project_id,
        )
        .await;
    assert_eq!(waiting, 1);
    // A success arriving after the failure does not revive it.
    let mut late = intent.clone();
    late["id"] = j!(intent2);
    late["metadata"] = j!({"payment_id": d2.first_payment.to_string()});
    deliver(
        &m,
        &event("evt_test_late_success", "payment_intent.succeeded", late),
        None,
    )
    .await;
    poll(&m, "late success applied", || async {
        (unprocessed_events(&m).await == 0).then_some(())
    })
    .await;
    assert_eq!(payment(&m, d2.first_payment).await["status"], "failed");

    // Cancelled at the processor before authorisation: failed.
    let d3 = deal(&m, "cancelled", [10.0, 10.0, 10.0]).await;
    let intent3 = payment(&m, d3.first_payment).await["processor_payment_intent_id"]
        .as_str()
        .unwrap()
        .to_owned();
    m.app
        .post_json(
            &format!("/api/sandbox/payment_intents/{intent3}/cancel"),
            &j!({}),
        )
        .await;
    let y3 = wait_payment(&m, d3.first_payment, "failed", |y| y["status"] == "failed").await;
    assert!(
        y3["failure_reason"]
            .as_str()
            .unwrap()
            .starts_with("canceled")
    );
}

/// The `amount_capturable_updated` event that holds a deal's first payment, and a later
/// cancellation of the same authorisation (which must come after it: applied first, it would
/// fail the payment instead).
async fn held_then_canceled(m: &Market, d: &Deal, tag: &str) -> (Value, Value) {
    let y = payment(m, d.first_payment).await;
    let intent = j!({"id": y["processor_payment_intent_id"], "object": "payment_intent",
                     "amount": 1000, "amount_capturable": 1000, "amount_received": 0,
                     "currency": "eur", "status": "requires_capture", "capture_method": "manual",
                     "metadata": {"payment_id": d.first_payment.to_string()}});
    let mut canceled = intent.clone();
    canceled["status"] = j!("canceled");
    (
        event(
            &format!("evt_{tag}_held"),
            "payment_intent.amount_capturable_updated",
            intent,
        ),
        event(
            &format!("evt_{tag}_cancel"),
            "payment_intent.canceled",
            canceled,
        ),
    )
}

#[actix_web::test]
async fn webhooks_of_many_payments_at_once_apply_each_once_and_in_order() {
    let m = Market::open().await;
    let mut deals = Vec::new();
    for i in 0..5 {
        deals.push(deal(&m, &format!("burst{i}"), [10.0, 10.0, 10.0]).await);
    }
    let mut pairs = Vec::new();
    for (i, d) in deals.iter().enumerate() {
        pairs.push(held_then_canceled(&m, d, &format!("burst{i}")).await);
    }
    // Every payment's events at once with every other's: the hold three times over, then
    // (once the hold is stored) the cancellation.
    let senders = pairs.iter().map(|(held, canceled)| {
        let m = &m;
        async move {
            let holds = (0..3).map(|_| deliver(m, held, None));
            for r in futures_util::future::join_all(holds).await {
                assert_eq!(r.status(), StatusCode::OK);
            }
            assert_eq!(deliver(m, canceled, None).await.status(), StatusCode::OK);
        }
    });
    futures_util::future::join_all(senders).await;
    poll(&m, "the burst applied", || async {
        (unprocessed_events(&m).await == 0).then_some(())
    })
    .await;
    for d in &deals {
        // Held once (the cancellation came after the hold, so it only alerts).
        let y = payment(&m, d.first_payment).await;
        assert_eq!(y["status"], "held", "{y}");
        let held = "SELECT COUNT(*) FROM events WHERE kind = 'payment.held' AND aggregate_id = $1";
        let alerted = "SELECT COUNT(*) FROM events WHERE kind = 'payment.authorisation_lost' AND aggregate_id = $1";
        assert_eq!(
            m.count(held, d.first_payment).await,
            1,
            "payment.held of {}",
            d.first_payment
        );
        assert_eq!(
            m.count(alerted, d.first_payment).await,
            1,
            "alert of {}",
            d.first_payment
        );
        assert_eq!(
            m.count("SELECT COUNT(*) FROM processor_events WHERE payment_id = $1 AND processed_at IS NOT NULL", d.first_payment).await,
            2
        );
        let _ = m.app.state.outbox.trigger().await;
        assert_eq!(
            notifications_of(&m.app, d.expert.id, "payment_held").await,
            1
        );
    }
}

#[actix_web::test]
async fn an_event_waits_for_the_job_its_payment_actor_is_running() {
    let m = Market::open().await;
    let busy = deal(&m, "busyactor", [10.0, 10.0, 10.0]).await;
    let free = deal(&m, "freeactor", [10.0, 10.0, 10.0]).await;
    let (busy_held, _) = held_then_canceled(&m, &busy, "busyactor").await;
    let (free_held, _) = held_then_canceled(&m, &free, "freeactor").await;
    // A job of the busy payment's actor that lasts until the test lets it end.
    let (started, has_started) = tokio::sync::oneshot::channel::<()>();
    let (end, ended) = tokio::sync::oneshot::channel::<()>();
    let job = m
        .app
        .state
        .payment_actors
        .call(busy.first_payment, move || async move {
            let _ = started.send(());
            let _ = ended.await;
        });
    let job = tokio::spawn(job);
    has_started.await.unwrap();
    for held in [&busy_held, &free_held] {
        assert_eq!(deliver(&m, held, None).await.status(), StatusCode::OK);
    }
    wait_payment(&m, free.first_payment, "the other payment held", |y| {
        y["status"] == "held"
    })
    .await;
    // Received, yet not applied while its payment's actor is busy.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(payment(&m, busy.first_payment).await["status"], "pending");
    end.send(()).unwrap();
    job.await.unwrap().unwrap();
    wait_payment(&m, busy.first_payment, "held once the actor is free", |y| {
        y["status"] == "held"
    })
    .await;
}

/// Stored events applied as one group (the sweep takes them together): two holds with a
/// declined card and a late note of an amount between them. Each takes effect once, as it
/// would alone.
#[actix_web::test]
async fn a_group_of_stored_events_applies_each_as_it_would_alone() {
    let m = Market::open().await;
    let mut deals = Vec::new();
    for i in 0..4 {
        deals.push(deal(&m, &format!("group{i}"), [10.0, 10.0, 10.0]).await);
    }
    let mut held = Vec::new();
    for (i, d) in deals.iter().enumerate() {
        held.push(held_then_canceled(&m, d, &format!("group{i}")).await.0);
    }
    // Payment 3 is held before the group.
    assert_eq!(deliver(&m, &held[3], None).await.status(), StatusCode::OK);
    wait_payment(&m, deals[3].first_payment, "payment 3 held", |y| {
        y["status"] == "held"
    })
    .await;
    let mut declined = held[2].clone();
    declined["id"] = j!("evt_group2_declined");
    declined["type"] = j!("payment_intent.payment_failed");
    declined["data"]["object"]["status"] = j!("requires_payment_method");
    declined["data"]["object"]["last_payment_error"] = j!({"code": "card_declined"});
    let mut late = held[3].clone();
    late["id"] = j!("evt_group3_late");
    late["data"]["object"]["amount_capturable"] = j!(900);
    let group = [&held[0], &declined, &late, &held[1]];
    {
        let now = m.app.clock.now();
        let mut conn = m.app.db.conn().await.unwrap();
        let events: Vec<_> = group.into_iter().map(as_received).collect();
        let stored = processor_events::insert_all_new(conn.exec(), &events, now).await;
        assert_eq!(stored.unwrap().len(), group.len(), "every event new");
    }
    let applied = processor_events_flow::sweep(&m.app.state, chrono::Duration::zero()).await;
    assert_eq!(applied.unwrap(), 4);
    assert_eq!(unprocessed_events(&m).await, 0);
    let held_events =
        "SELECT COUNT(*) FROM events WHERE kind = 'payment.held' AND aggregate_id = $1";
    for d in &deals[..2] {
        let y = payment(&m, d.first_payment).await;
        assert_eq!(y["status"], "held", "{y}");
        assert!(y["held_at"].is_string(), "{y}");
        assert_eq!(y["payment_metadata"]["amount_capturable"], 1000);
        assert_eq!(m.count(held_events, d.first_payment).await, 1);
        let milestone_pending =
            "SELECT COUNT(*) FROM milestones m JOIN payments y ON y.milestone_id = m.id
                                 WHERE y.id = $1 AND m.status = 'pending'";
        assert_eq!(m.count(milestone_pending, d.first_payment).await, 1);
        let in_progress = "SELECT COUNT(*) FROM projects WHERE id = $1 AND status = 'in_progress'";
        assert_eq!(m.count(in_progress, d.project_id).await, 1);
    }
    // The holds' notices went out in the group's order.
    let first = "SELECT id FROM events WHERE kind = 'payment.held' AND aggregate_id = $1";
    assert!(
        m.count(first, deals[0].first_payment).await < m.count(first, deals[1].first_payment).await
    );
    let failed = payment(&m, deals[2].first_payment).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    assert_eq!(m.count(held_events, deals[2].first_payment).await, 0);
    // Held already: only the amount is noted, nothing held twice.
    let again = payment(&m, deals[3].first_payment).await;
    assert_eq!(again["status"], "held");
    assert_eq!(again["payment_metadata"]["amount_capturable"], 900);
    assert_eq!(m.count(held_events, deals[3].first_payment).await, 1);
    let noted = "SELECT COUNT(*) FROM processor_events WHERE id = 'evt_group3_late'
                 AND payment_id = $1 AND error = 'payment already past pending'";
    assert_eq!(m.count(noted, deals[3].first_payment).await, 1);
    let _ = m.app.state.outbox.trigger().await;
    for d in &deals[..2] {
        assert_eq!(
            notifications_of(&m.app, d.expert.id, "payment_held").await,
            1
        );
    }
    assert_eq!(
        notifications_of(&m.app, deals[2].company.id, "payment_failed").await,
        1
    );
}

/// Deliveries of one new event at once: stored once, one answered as new and the others as
/// duplicates, applied once.
#[actix_web::test]
async fn concurrent_deliveries_of_one_event_store_it_once() {
    let m = Market::open().await;
    let d = deal(&m, "same", [10.0, 10.0, 10.0]).await;
    let (held, _) = held_then_canceled(&m, &d, "same").await;
    let answers = futures_util::future::join_all((0..12).map(|_| deliver(&m, &held, None))).await;
    let mut duplicates = 0;
    for r in answers {
        assert_eq!(r.status(), StatusCode::OK);
        let body = json(r).await;
        assert_eq!(body["received"], true, "{body}");
        duplicates += usize::from(body["duplicate"] == true);
    }
    assert_eq!(duplicates, 11);
    assert_eq!(
        m.count(
            "SELECT COUNT(*) FROM processor_events WHERE id = 'evt_same_held' AND $1 = $1",
            0
        )
        .await,
        1
    );
    each_held_once(&m, &[&d]).await;
}

/// Applying claims its events first: only those not applied yet are marked and answered, so
/// an event applied meanwhile elsewhere keeps its mark; a claimed event's note is kept.
#[actix_web::test]
async fn claiming_events_leaves_those_applied_meanwhile() {
    let m = Market::open().await;
    let d = deal(&m, "claim", [10.0, 10.0, 10.0]).await;
    let y = d.first_payment;
    let now = m.app.clock.now();
    let received = |id: &str| processor_events::NewEvent {
        id: id.into(),
        kind: "payment_intent.canceled".into(),
        payload: j!({"id": id}),
        created: None,
    };
    let mut conn = m.app.db.conn().await.unwrap();
    let events = [received("evt_claim_before"), received("evt_claim_now")];
    let stored = processor_events::insert_all_new(conn.exec(), &events, now).await;
    assert_eq!(stored.unwrap().len(), 2);
    let elsewhere = processor_events::mark_processed(
        conn.exec(),
        "evt_claim_before",
        Some(y),
        Some("applied elsewhere"),
        now,
    );
    assert!(elsewhere.await.unwrap());
    drop(conn);

    let mut tx = m.app.db.begin().await.unwrap();
    let claims = [("evt_claim_before", y), ("evt_claim_now", y)];
    let claimed = processor_events::claim_all(tx.exec(), &claims, now).await;
    assert_eq!(claimed.unwrap(), vec!["evt_claim_now".to_owned()]);
    let noted = [("evt_claim_now", "payment no longer pending")];
    processor_events::note_all(tx.exec(), &noted).await.unwrap();
    let again = processor_events::claim_all(tx.exec(), &claims, now).await;
    assert!(again.unwrap().is_empty(), "claimed once");
    tx.commit().await.unwrap();

    let marked = "SELECT COUNT(*) FROM processor_events WHERE processed_at IS NOT NULL
                  AND payment_id = $1 AND id = 'evt_claim_before' AND error = 'applied elsewhere'";
    assert_eq!(m.count(marked, y).await, 1, "the earlier mark is kept");
    let claimed = "SELECT COUNT(*) FROM processor_events WHERE processed_at IS NOT NULL
                   AND payment_id = $1 AND id = 'evt_claim_now'
                   AND error = 'payment no longer pending'";
    assert_eq!(m.count(claimed, y).await, 1);
}

/// Waits until the deals' first payments are held and every stored event is applied, then
/// checks that each payment was held once.
async fn each_held_once(m: &Market, deals: &[&Deal]) {
    for d in deals {
        wait_payment(m, d.first_payment, "held", |y| y["status"] == "held").await;
    }
    poll(m, "every event applied", || async {
        (unprocessed_events(m).await == 0).then_some(())
    })
    .await;
    let held_events =
        "SELECT COUNT(*) FROM events WHERE kind = 'payment.held' AND aggregate_id = $1";
    for d in deals {
        let held = m.count(held_events, d.first_payment).await;
        assert_eq!(held, 1, "payment.held of {}", d.first_payment);
    }
}

/// A receipt that could not be stored is answered 503 with nothing kept; delivered again, it
/// is stored and applied.
#[actix_web::test]
async fn a_receipt_that_cannot_be_stored_is_refused_until_delivered_again() {
    let m = Market::open().await;
    let d = deal(&m, "unstored", [10.0, 10.0, 10.0]).await;
    let (held, _) = held_then_canceled(&m, &d, "unstored").await;
    let rename = |from: &'static str, to: &'static str| {
        let m = &m;
        async move {
            let statement = format!("ALTER TABLE {from} RENAME TO {to}");
            let mut conn = m.app.db.conn().await.unwrap();
            marketplace::on_exec!(conn.exec(), c => sqlx::query(sqlx::AssertSqlSafe(statement)).execute(c).await.map(drop))
                .unwrap();
        }
    };
    rename("processor_events", "processor_events_away").await;
    let r = deliver(&m, &held, None).await;
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(code(&json(r).await), "UNAVAILABLE");
    rename("processor_events_away", "processor_events").await;
    let stored = "SELECT COUNT(*) FROM processor_events WHERE id = 'evt_unstored_held' AND $1 = $1";
    assert_eq!(m.count(stored, 0).await, 0);
    assert_eq!(payment(&m, d.first_payment).await["status"], "pending");

    let r = deliver(&m, &held, None).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(json(r).await, j!({"received": true}));
    each_held_once(&m, &[&d]).await;
}

/// The receipts' writer stores the receipts waiting in one write and answers each: of two
/// receipts of one new id the first is new and the second a duplicate, an id stored before is
/// a duplicate; the new events are handed to the applier.
#[actix_web::test]
async fn the_receipts_writer_answers_a_batch_with_one_id_twice() {
    use marketplace::state::Asked;
    use tokio::sync::oneshot;

    let m = Market::open().await;
    let deals = [
        deal(&m, "batch0", [10.0, 10.0, 10.0]).await,
        deal(&m, "batch1", [10.0, 10.0, 10.0]).await,
    ];
    let (known, _) = held_then_canceled(&m, &deals[0], "batch0").await;
    assert_eq!(deliver(&m, &known, None).await.status(), StatusCode::OK);
    let (new, _) = held_then_canceled(&m, &deals[1], "batch1").await;

    // Queued without waking the writer, then one run of it: one batch.
    let mut answers = Vec::new();
    for e in [&new, &new, &known] {
        let (answer, stored) = oneshot::channel();
        let item = as_received(e);
        assert!(m.app.state.processor_receipts.push(Asked { item, answer }));
        answers.push(stored);
    }
    m.app
        .state
        .jobs
        .trigger(processor_events_flow::RECEIPTS)
        .await
        .unwrap();
    let mut said = Vec::new();
    for stored in answers {
        said.push(stored.await.unwrap());
    }
    assert_eq!(said, [Some(true), Some(false), Some(false)]);
    let stored = "SELECT COUNT(*) FROM processor_events
                  WHERE id IN ('evt_batch0_held', 'evt_batch1_held') AND $1 = $1";
    assert_eq!(m.count(stored, 0).await, 2);
    each_held_once(&m, &[&deals[0], &deals[1]]).await;
}

#[actix_web::test]
async fn transfer_failure_payouts_and_refund_at_the_processor() {
    let m = Market::open().await;
    let d = deal(&m, "tf", [50.0, 50.0, 50.0]).await;
    let account = connect(&m, &d.expert).await;
    fund(&m, &d.company, d.first_payment).await;
    // The company approves the expert's delivery, which releases the payment.
    let milestone = payment(&m, d.first_payment).await["milestone_id"]
        .as_i64()
        .unwrap();
    let r = post(
        &m,
        &d.expert,
        "/api/milestones/deliveries/",
        j!({"milestone_id": milestone, "description": "Done"}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let delivery = json(r).await["id"].as_i64().unwrap();
    let r = m
        .send(
            &d.company,
            Method::PUT,
            &format!("/api/milestones/deliveries/{delivery}/review"),
            Some(j!({"decision": "approve"})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let y = wait_payment(&m, d.first_payment, "transferred", |y| {
        y["payout_status"] == "transferred"
    })
    .await;
    let transfer = y["processor_transfer_id"].as_str().unwrap().to_owned();

    // transfer.failed: back in escrow, milestone back in progress, admins alerted about
    // the next milestone already waiting for its payment.
    let r = m
        .app
        .post_json(&format!("/api/sandbox/transfers/{transfer}/fail"), &j!({}))
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let y = wait_payment(&m, d.first_payment, "payout failed", |y| {
        y["payout_status"] == "failed"
    })
    .await;
    assert_eq!(y["status"], "held");
    assert!(y["processor_transfer_id"].is_null());
    assert_eq!(y["expert_amount"], 47.5);
    assert_eq!(
        m.count(
            "SELECT COUNT(*) FROM milestones WHERE project_id = $1 AND position = 1 AND status = 'in_progress'",
            d.project_id
        )
        .await,
        1
    );
    wait_notification(&m.app, m.admin_id, "payment_transfer_failed").await;
    let alert: String = {
        let mut conn = m.app.db.conn().await.unwrap();
        marketplace::on_exec!(conn.exec(), c => sqlx::query_scalar::<_, String>(
            "SELECT message FROM notifications WHERE user_id = $1 AND type = 'payment_transfer_failed'")
            .bind(m.admin_id).fetch_one(c).await)
        .unwrap()
    };
    assert!(
        alert.contains("Milestone 2"),
        "the orphan next milestone is named: {alert}"
    );
    // The same failure delivered again changes nothing more.
    let events = json(m.app.get("/api/sandbox/events").await).await;
    let failed_event = events
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "transfer.failed")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    m.app
        .post_json(
            &format!("/api/sandbox/events/{failed_event}/resend"),
            &j!({}),
        )
        .await;

    // Only administrators retry, and only what may be retried.
    let r = post(
        &m,
        &d.company,
        &format!("/api/payments/retry-transfer/{}", d.first_payment),
        j!({}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let r = m
        .as_admin(
            Method::POST,
            &format!("/api/payments/retry-transfer/{}", d.first_payment),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let y = json(r).await;
    assert_eq!(y["status"], "released");
    assert_eq!(y["payout_status"], "transferred");
    assert_ne!(y["processor_transfer_id"], transfer);
    // The delivery sent back for review is approved again, by the administrator.
    let reviewer = m
        .count(
            "SELECT COALESCE(reviewed_by, 0) FROM deliveries WHERE id = $1 AND status = 'approved'",
            delivery,
        )
        .await;
    assert_eq!(reviewer, m.admin_id);
    let ledger = sandbox_ledger(&m).await;
    let transfers = transfers_of(&ledger, d.first_payment);
    assert_eq!(transfers.len(), 2);
    assert_eq!(transfers.iter().filter(|t| t["failed"] == true).count(), 1);
    let intent = intent_in(&ledger, y["processor_payment_intent_id"].as_str().unwrap());
    assert_eq!(
        intent["captures"], 1,
        "captured once despite the second release"
    );
    let r = m
        .as_admin(
            Method::POST,
            &format!("/api/payments/retry-transfer/{}", d.first_payment),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::CONFLICT);

    // Payouts: the expert hears of each; administrators of failures.
    for outcome in ["paid", "failed"] {
        let r = m
            .app
            .post_json(
                "/api/sandbox/payouts",
                &j!({"account": account, "amount": 4750, "outcome": outcome}),
            )
            .await;
        assert_eq!(r.status(), StatusCode::OK);
    }
    wait_notification(&m.app, d.expert.id, "EXPERT_PAYOUT_PAID").await;
    wait_notification(&m.app, d.expert.id, "EXPERT_PAYOUT_FAILED").await;
    wait_notification(&m.app, m.admin_id, "EXPERT_PAYOUT_FAILED").await;
    assert_eq!(
        notifications_of(&m.app, m.admin_id, "EXPERT_PAYOUT_PAID").await,
        0
    );

    // A refund made at the processor directly: refunded, both told in their own words.
    let second = payment(&m, d.first_payment + 1).await;
    assert_eq!(second["status"], "pending");
    let second_id = second["id"].as_i64().unwrap();
    fund(&m, &d.company, second_id).await;
    let intent = payment(&m, second_id).await["processor_payment_intent_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let client = &m.app.state.processor.client;
    client
        .capture_payment_intent(&intent, "test_capture")
        .await
        .unwrap();
    client
        .create_refund(
            &marketplace::integrations::processor::CreateRefund {
                target: marketplace::integrations::processor::RefundTarget::PaymentIntent(intent),
                amount: None,
                reason: None,
                metadata: Default::default(),
            },
            "test_refund",
        )
        .await
        .unwrap();
    wait_payment(&m, second_id, "refunded", |y| y["status"] == "refunded").await;
    wait_notification(&m.app, d.company.id, "payment_refunded").await;
    wait_notification(&m.app, d.expert.id, "payment_refunded").await;
    m.app.mails_about(&d.company.email, "Refund of").await;
}

#[actix_web::test]
async fn insufficient_balance_defers_the_transfer_until_the_retry_job() {
    let m = Market::open().await;
    let d = deal(&m, "bal", [30.0, 30.0, 30.0]).await;
    connect(&m, &d.expert).await;
    fund(&m, &d.company, d.first_payment).await;
    m.app
        .post_json("/api/sandbox/balance", &j!({"available": 0}))
        .await;
    let r = post(
        &m,
        &d.company,
        "/api/payments/release",
        j!({"payment_id": d.first_payment}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    let y = json(r).await;
    assert_eq!(y["status"], "released");
    assert_eq!(y["payout_status"], "pending");
    assert_eq!(y["payment_metadata"]["transfer_deferred"], true);
    assert!(transfers_of(&sandbox_ledger(&m).await, d.first_payment).is_empty());

    // Still short: the job leaves it deferred.
    let jobs = &m.app.state.jobs;
    jobs.trigger(escrow_jobs::TRANSFER_RETRY).await.unwrap();
    assert_eq!(
        payment(&m, d.first_payment).await["payout_status"],
        "pending"
    );

    m.app
        .post_json("/api/sandbox/balance", &j!({"available": 1_000_000}))
        .await;
    jobs.trigger(escrow_jobs::TRANSFER_RETRY).await.unwrap();
    let y = wait_payment(&m, d.first_payment, "transferred", |y| {
        y["payout_status"] == "transferred"
    })
    .await;
    let transfers = transfers_of(&sandbox_ledger(&m).await, d.first_payment).len();
    assert_eq!(transfers, 1);
    assert_eq!(y["payment_metadata"].get("transfer_deferred"), None);
}

#[actix_web::test]
async fn refund_reverses_the_transfer_first_and_a_failed_reversal_refunds_nothing() {
    let m = Market::open().await;
    let d = deal(&m, "ref", [40.0, 40.0, 40.0]).await;
    connect(&m, &d.expert).await;
    fund(&m, &d.company, d.first_payment).await;
    post(
        &m,
        &d.company,
        "/api/payments/release",
        j!({"payment_id": d.first_payment}),
    )
    .await;
    wait_payment(&m, d.first_payment, "transferred", |y| {
        y["payout_status"] == "transferred"
    })
    .await;

    // Only administrators refund.
    let r = post(
        &m,
        &d.company,
        "/api/payments/refund",
        j!({"payment_id": d.first_payment}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    // A reason over 1,000 characters is refused before anything moves.
    let r = m
        .as_admin(
            Method::POST,
            "/api/payments/refund",
            Some(&j!({"payment_id": d.first_payment, "reason": "r".repeat(1_001)})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(json(r).await["errors"][0]["field"], "reason");
    assert_eq!(payment(&m, d.first_payment).await["status"], "released");

    // The reversal fails: nothing is refunded and nothing changes.
    let r = m
        .app
        .post_json(
            "/api/sandbox/failures",
            &j!({"operation": "transfer_reversal", "count": 1, "status": 400, "code": "insufficient_funds"}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let r = m
        .as_admin(
            Method::POST,
            "/api/payments/refund",
            Some(&j!({"payment_id": d.first_payment, "reason": "Work not delivered"})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    assert_eq!(code(&json(r).await), "REVERSAL_FAILED");
    let ledger_now = sandbox_ledger(&m).await;
    assert!(ledger_now["refunds"].as_array().unwrap().is_empty());
    assert_eq!(transfers_of(&ledger_now, d.first_payment)[0]["reversed"], 0);
    let y = payment(&m, d.first_payment).await;
    assert_eq!(y["status"], "released");
    assert_eq!(y["payout_status"], "transferred");

    // Again: reversed first, then refunded.
    let r = m
        .as_admin(
            Method::POST,
            &format!("/api/admin/payments/{}/refund", d.first_payment),
            Some(&j!({"reason": "Work not delivered"})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let y = json(r).await;
    assert_eq!(y["status"], "refunded");
    assert_eq!(y["payout_status"], "pending");
    assert_eq!(y["refund_reason"], "Work not delivered");
    assert!(y["payment_metadata"]["reversal_id"].as_str().is_some());
    assert_eq!(y["payment_metadata"]["reversal_amount"], 3800);
    let ledger = sandbox_ledger(&m).await;
    let intent = intent_in(&ledger, y["processor_payment_intent_id"].as_str().unwrap());
    assert_eq!(intent["refunded"], 4000);
    assert_eq!(transfers_of(&ledger, d.first_payment)[0]["reversed"], 3800);
    wait_notification(&m.app, d.company.id, "payment_refunded").await;
    wait_notification(&m.app, d.expert.id, "payment_refunded").await;

    // A second refund finds nothing to refund.
    let r = m
        .as_admin(
            Method::POST,
            "/api/payments/refund",
            Some(&j!({"payment_id": d.first_payment})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::CONFLICT);

    // A held (uncaptured) payment is refunded by releasing the authorisation.
    let second = d.first_payment + 1;
    fund(&m, &d.company, second).await;
    let r = m
        .as_admin(
            Method::POST,
            "/api/payments/refund",
            Some(&j!({"payment_id": second})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let y = json(r).await;
    assert_eq!(y["status"], "refunded");
    let ledger = sandbox_ledger(&m).await;
    let intent = intent_in(&ledger, y["processor_payment_intent_id"].as_str().unwrap());
    assert_eq!(intent["status"], "canceled");
    assert_eq!(intent["captured"], 0);
}

#[actix_web::test]
async fn a_race_on_one_payment_captures_and_transfers_at_most_once() {
    let m = Market::open().await;
    let d = deal(&m, "race", [25.0, 25.0, 25.0]).await;
    connect(&m, &d.expert).await;
    let y = fund(&m, &d.company, d.first_payment).await;
    let intent = y["processor_payment_intent_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let charge = y["processor_charge_id"].as_str().unwrap().to_owned();
    let events = json(m.app.get("/api/sandbox/events").await).await;
    let authorised = events
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "payment_intent.amount_capturable_updated")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();

    // The expert hands in the milestone's work, so the company can approve it too.
    let milestone = payment(&m, d.first_payment).await["milestone_id"]
        .as_i64()
        .unwrap();
    let r = post(
        &m,
        &d.expert,
        "/api/milestones/deliveries/",
        j!({"milestone_id": milestone, "description": "Done"}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let delivery = json(r).await["id"].as_i64().unwrap();

    let body = j!({"payment_id": d.first_payment});
    let review_path = format!("/api/milestones/deliveries/{delivery}/review");
    let approve = j!({"decision": "approve"});
    let dispute_path = format!("/api/sandbox/charges/{charge}/dispute");
    let dispute_body = j!({"reason": "fraudulent"});
    let resend_path = format!("/api/sandbox/events/{authorised}/resend");
    let empty = j!({});
    let release = post(&m, &d.company, "/api/payments/release", body.clone());
    let release_again = m.as_admin(Method::POST, "/api/payments/release", Some(&body));
    let sync = post(&m, &d.company, "/api/payments/sync-status", body.clone());
    let dispute = m.app.post_json(&dispute_path, &dispute_body);
    let duplicate = m.app.post_json(&resend_path, &empty);
    let approval = m.send(&d.company, Method::PUT, &review_path, Some(approve));
    let (a, b, c, e, f, g) =
        tokio::join!(release, release_again, sync, dispute, duplicate, approval);
    let released = [a.status(), b.status(), g.status()]
        .iter()
        .filter(|s| **s == StatusCode::OK)
        .count();
    assert!(released <= 1, "at most one release or approval succeeds");
    assert_eq!(c.status(), StatusCode::OK);
    assert!(e.status().is_success());
    assert!(f.status().is_success());

    poll(&m, "every event applied", || async {
        (unprocessed_events(&m).await == 0).then_some(())
    })
    .await;
    let ledger = sandbox_ledger(&m).await;
    let i = intent_in(&ledger, &intent);
    assert!(i["captures"].as_i64().unwrap() <= 1);
    assert!(transfers_of(&ledger, d.first_payment).len() <= 1);
    let y = payment(&m, d.first_payment).await;
    match y["status"].as_str().unwrap() {
        // Released before the chargeback arrived: captured and transferred once.
        "released" => {
            assert_eq!(i["captures"], 1);
            assert_eq!(transfers_of(&ledger, d.first_payment).len(), 1);
        }
        // The chargeback came first: nothing captured by a release, nothing transferred.
        "disputed" => assert!(transfers_of(&ledger, d.first_payment).is_empty()),
        other => panic!("unexpected end state {other}"),
    }
    assert_eq!(
        m.count("SELECT COUNT(*) FROM disputes WHERE payment_id = $1 AND processor_dispute_id IS NOT NULL", d.first_payment).await,
        1
    );
}

#[actix_web::test]
async fn chargeback_lifecycle_follows_the_processor() {
    let m = Market::open().await;
    for (name, outcome) in [("cblost", "lost"), ("cbwon", "won")] {
        let d = deal(&m, name, [20.0, 20.0, 20.0]).await;
        let y = fund(&m, &d.company, d.first_payment).await;
        let charge = y["processor_charge_id"].as_str().unwrap().to_owned();
        let r = m
            .app
            .post_json(
                &format!("/api/sandbox/charges/{charge}/dispute"),
                &j!({"reason": "fraudulent"}),
            )
            .await;
        assert_eq!(r.status(), StatusCode::OK);
        let dispute = json(r).await["id"].as_str().unwrap().to_owned();
        wait_payment(&m, d.first_payment, "disputed", |y| {
            y["status"] == "disputed"
        })
        .await;
        let open = m
            .count("SELECT COUNT(*) FROM disputes WHERE payment_id = $1 AND status = 'open' AND evidence_details IS NOT NULL", d.first_payment)
            .await;
        assert_eq!(open, 1);
        wait_notification(&m.app, m.admin_id, "dispute_created").await;

        m.app
            .post_json(
                &format!("/api/sandbox/disputes/{dispute}/update"),
                &j!({"status": "under_review"}),
            )
            .await;
        poll(&m, "in review", || async {
            (m.count(
                "SELECT COUNT(*) FROM disputes WHERE payment_id = $1 AND status = 'in_review'",
                d.first_payment,
            )
            .await
                == 1)
                .then_some(())
        })
        .await;
        m.app
            .post_json(
                &format!("/api/sandbox/disputes/{dispute}/update"),
                &j!({"status": "needs_response"}),
            )
            .await;
        poll(&m, "applied", || async {
            (unprocessed_events(&m).await == 0).then_some(())
        })
        .await;
        // `needs_response` reopens only an `open` dispute.
        assert_eq!(
            m.count(
                "SELECT COUNT(*) FROM disputes WHERE payment_id = $1 AND status = 'in_review'",
                d.first_payment
            )
            .await,
            1
        );
        m.app
            .post_json(
                &format!("/api/sandbox/disputes/{dispute}/close"),
                &j!({"outcome": outcome}),
            )
            .await;
        poll(&m, "applied", || async {
            (unprocessed_events(&m).await == 0).then_some(())
        })
        .await;
        let y = payment(&m, d.first_payment).await;
        if outcome == "lost" {
            assert_eq!(y["status"], "refunded");
            wait_notification(&m.app, d.company.id, "payment_refunded").await;
        } else {
            assert_eq!(y["status"], "disputed", "won: an administrator decides");
        }
    }
}

#[actix_web::test]
async fn initiate_needs_the_company_an_unfunded_milestone_and_an_active_account() {
    let m = Market::open().await;
    let d = deal(&m, "init", [20.0, 20.0, 20.0]).await;
    let milestone: i64 = m
        .count(
            "SELECT id FROM milestones WHERE project_id = $1 AND position = 1",
            d.project_id,
        )
        .await;
    let body = j!({"project_id": d.project_id, "milestone_id": milestone});
    let r = post(&m, &d.company, "/api/payments/initiate", body.clone()).await;
    assert_eq!(
        r.status(),
        StatusCode::CONFLICT,
        "the selection's payment is still open"
    );
    assert_eq!(code(&json(r).await), "PAYMENT_PENDING");
    let r = post(&m, &d.expert, "/api/payments/initiate", body.clone()).await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);

    // Once the first payment failed, the company pays again through initiate, which needs
    // the expert's payout account active.
    let intent = payment(&m, d.first_payment).await["processor_payment_intent_id"]
        .as_str()
        .unwrap()
        .to_owned();
    m.app
        .post_json(
            &format!("/api/sandbox/payment_intents/{intent}/cancel"),
            &j!({}),
        )
        .await;
    wait_payment(&m, d.first_payment, "failed", |y| y["status"] == "failed").await;
    let r = post(&m, &d.company, "/api/payments/initiate", body.clone()).await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert_eq!(code(&json(r).await), "PROCESSOR_CONNECT_NOT_ACTIVE");
    connect(&m, &d.expert).await;
    let r = post(&m, &d.company, "/api/payments/initiate", body).await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let y = json(r).await;
    assert_eq!(y["status"], "pending");
    assert_eq!(y["payout_status"], "pending");
    assert_eq!(y["milestone_id"], milestone);
    assert_eq!(y["currency"], "eur");
    assert!(y["client_secret"].is_string());
    // The expert sees the intent but not its secret.
    let r = m
        .send(
            &d.expert,
            Method::GET,
            &format!(
                "/api/payments/intent/{}",
                y["processor_payment_intent_id"].as_str().unwrap()
            ),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert!(json(r).await["client_secret"].is_null());
}

#[actix_web::test]
async fn expiring_authorisations_are_reported_and_captured_and_reconcile_corrects() {
    // A margin longer than the sandbox's 7-day authorisation: every held payment is due.
    let m = Market::open_with(&[("AUTHORISATION_MARGIN_HOURS", "170")]).await;
    let d = deal(&m, "exp", [20.0, 20.0, 20.0]).await;
    connect(&m, &d.expert).await;
    let y = fund(&m, &d.company, d.first_payment).await;
    assert!(y["capture_before"].is_string());
    let jobs = &m.app.state.jobs;
    jobs.trigger(escrow_jobs::AUTHORISATION_WATCH)
        .await
        .unwrap();
    let y = payment(&m, d.first_payment).await;
    assert_eq!(y["status"], "held", "captured early, still in escrow");
    assert!(y["capture_before"].is_null());
    assert!(y["payment_metadata"]["captured_early_at"].is_string());
    wait_notification(&m.app, m.admin_id, "payment_authorisation_expiring").await;
    let intent = y["processor_payment_intent_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        intent_in(&sandbox_ledger(&m).await, &intent)["captured"],
        2000
    );
    // Release later does not capture again.
    let r = post(
        &m,
        &d.company,
        "/api/payments/release",
        j!({"payment_id": d.first_payment}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    let ledger_now = sandbox_ledger(&m).await;
    assert_eq!(intent_in(&ledger_now, &intent)["captures"], 1);
    assert_eq!(transfers_of(&ledger_now, d.first_payment).len(), 1);

    // Reconcile: the processor authorised a payment whose webhook never arrived.
    let next = d.first_payment + 1;
    let sandbox = m.app.state.processor.sandbox.as_ref().unwrap();
    sandbox.set_webhook_target("http://127.0.0.1:9/nowhere");
    let intent = payment(&m, next).await["processor_payment_intent_id"]
        .as_str()
        .unwrap()
        .to_owned();
    m.app
        .post_json(
            &format!("/api/sandbox/payment_intents/{intent}/confirm"),
            &j!({"payment_method": "pm_card_visa"}),
        )
        .await;
    assert_eq!(payment(&m, next).await["status"], "pending");
    let r = post(&m, &d.company, "/api/admin/payments/reconcile", j!({})).await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    for bad in ["-1", "10081", "soon"] {
        let r = m
            .as_admin(
                Method::POST,
                &format!("/api/admin/payments/reconcile?older_than_minutes={bad}"),
                None,
            )
            .await;
        assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY, "{bad}");
    }
    assert_eq!(payment(&m, next).await["status"], "pending");
    let r = m
        .as_admin(
            Method::POST,
            "/api/admin/payments/reconcile?older_than_minutes=0",
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let result = json(r).await;
    let corrected = result["corrected"].as_array().unwrap();
    assert!(
        corrected
            .iter()
            .any(|c| c["payment_id"] == next && c["from"] == "pending" && c["to"] == "held")
    );
    assert_eq!(payment(&m, next).await["status"], "held");
    let recorded = m
        .count(
            "SELECT COUNT(*) FROM events WHERE kind = 'payment.reconciled' AND aggregate_id = $1",
            next,
        )
        .await;
    assert_eq!(recorded, 1);
    // Admin list filters.
    let r = m
        .as_admin(
            Method::GET,
            &format!(
                "/api/admin/payments?project_id={}&status=held",
                d.project_id
            ),
            None,
        )
        .await;
    assert_eq!(json(r).await["total"], 1);
}

#[actix_web::test]
async fn confirm_initial_holds_the_first_payment_and_a_blocked_transfer_waits_for_the_account() {
    let m = Market::open().await;
    let d = deal(&m, "conf", [15.0, 15.0, 15.0]).await;
    // The processor's webhooks do not arrive: only the company's confirmation tells us.
    let sandbox = m.app.state.processor.sandbox.as_ref().unwrap();
    sandbox.set_webhook_target("http://127.0.0.1:9/nowhere");
    let intent = payment(&m, d.first_payment).await["processor_payment_intent_id"]
        .as_str()
        .unwrap()
        .to_owned();
    m.app
        .post_json(
            &format!("/api/sandbox/payment_intents/{intent}/confirm"),
            &j!({"payment_method": "pm_card_visa"}),
        )
        .await;
    let path = format!("/api/payments/confirm-initial/{}", d.project_id);
    let r = post(&m, &d.expert, &path, j!({})).await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let r = post(&m, &d.company, &path, j!({})).await;
    assert_eq!(r.status(), StatusCode::OK);
    let body = json(r).await;
    assert_eq!(body["payment"]["status"], "held");
    assert_eq!(body["project_status"], "in_progress");

    // The expert has no payout account yet: released, not transferred, administrators told.
    let r = post(
        &m,
        &d.company,
        "/api/payments/release",
        j!({"payment_id": d.first_payment}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    let y = json(r).await;
    assert_eq!(y["status"], "released");
    assert_eq!(y["payout_status"], "pending");
    assert_eq!(
        y["payment_metadata"]["transfer_blocked"],
        "processor_connect_not_active"
    );
    wait_notification(&m.app, m.admin_id, "payment_transfer_blocked").await;
    assert!(transfers_of(&sandbox_ledger(&m).await, d.first_payment).is_empty());
    let r = m
        .as_admin(
            Method::POST,
            &format!("/api/payments/retry-transfer/{}", d.first_payment),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert_eq!(code(&json(r).await), "PROCESSOR_CONNECT_NOT_ACTIVE");

    // Once the account is active, the daily job pays the expert.
    sandbox.set_webhook_target(m.app.url("/api/payments/webhooks/processor"));
    connect(&m, &d.expert).await;
    m.app
        .state
        .jobs
        .trigger(escrow_jobs::TRANSFER_RETRY)
        .await
        .unwrap();
    let y = wait_payment(&m, d.first_payment, "transferred", |y| {
        y["payout_status"] == "transferred"
    })
    .await;
    assert!(y["payment_metadata"].get("transfer_blocked").is_none());
    assert_eq!(
        transfers_of(&sandbox_ledger(&m).await, d.first_payment).len(),
        1
    );
}

/// A database restored to before a release was recorded: the payment `held` again while the
/// processor holds its capture and its transfer (what a point-in-time restore leaves when the
/// release came after its target). The company's approval replayed releases it again under a
/// new attempt time, a new key; the expert must not be paid twice: the attempt finds the
/// payment's transfer at the processor and records it. The same for an administrator's retry
/// of a payout whose record was lost.
#[actix_web::test]
async fn a_transfer_the_records_lost_is_found_at_the_processor_not_made_again() {
    let m = Market::open().await;
    let d = released(&m, "restored", 100.0).await;
    let y = wait_payment(&m, d.first_payment, "transferred", |y| {
        y["payout_status"] == "transferred"
    })
    .await;
    let transfer = y["processor_transfer_id"].as_str().unwrap().to_owned();
    let calls = sandbox_ledger(&m).await["calls"]["transfer"].clone();
    // Its `transfer.created` applied, as it was before the restore point.
    poll(&m, "transfer.created applied", || async {
        let applied = m
            .count(
                "SELECT COUNT(*) FROM processor_events
                 WHERE type = 'transfer.created' AND processed_at IS NOT NULL AND $1 = $1",
                0,
            )
            .await;
        (applied == 1).then_some(())
    })
    .await;
    let paid_once = |ledger: &Value| {
        assert_eq!(transfers_of(ledger, d.first_payment).len(), 1, "paid once");
        assert_eq!(ledger["calls"]["transfer"], calls, "no transfer asked for");
    };

    // Restored to before the release.
    sql(
        &m,
        "UPDATE payments SET status = $1, payout_status = 'pending', processor_transfer_id = NULL,
             transfer_attempt_at = NULL, released_at = NULL WHERE id = $2",
        "held",
        d.first_payment,
    )
    .await;
    sql(
        &m,
        "UPDATE milestones SET status = $1
         WHERE id = (SELECT milestone_id FROM payments WHERE id = $2)",
        "pending",
        d.first_payment,
    )
    .await;
    let r = m
        .send(
            &d.company,
            Method::POST,
            "/api/payments/release",
            Some(j!({"payment_id": d.first_payment})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let y = payment(&m, d.first_payment).await;
    assert_eq!(y["status"], "released");
    assert_eq!(y["payout_status"], "transferred");
    assert_eq!(
        y["processor_transfer_id"],
        transfer.as_str(),
        "the same transfer"
    );
    paid_once(&sandbox_ledger(&m).await);

    // Restored to between the release and its transfer's record.
    sql(
        &m,
        "UPDATE payments SET payout_status = $1, processor_transfer_id = NULL,
             transfer_attempt_at = NULL WHERE id = $2",
        "pending",
        d.first_payment,
    )
    .await;
    let r = m
        .as_admin(
            Method::POST,
            &format!("/api/payments/retry-transfer/{}", d.first_payment),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let y = json(r).await;
    assert_eq!(y["payout_status"], "transferred");
    assert_eq!(
        y["processor_transfer_id"],
        transfer.as_str(),
        "the same transfer"
    );
    let ledger = sandbox_ledger(&m).await;
    paid_once(&ledger);
    assert!(ledger["calls"]["list_transfers"].as_i64().unwrap() >= 2);
    m.app.stop().await;
}
