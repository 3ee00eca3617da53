//! Timed transitions (issue 20): a delivery the company leaves unreviewed is approved by the
//! service after two reminders, an expert's dispute the company ignores is escalated, an
//! unfunded milestone reminds the company and lets the expert end the engagement. Time moves
//! with `state.clock.advance`; the timer job runs at once with `state.jobs.trigger`.

use chrono::{DateTime, Utc};
use marketplace::workflows::deadlines::TIMERS;
use marketplace::workflows::escrow_jobs;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json as j};

use crate::escrow::{Deal, connect, deal, fund, intent_in, poll, sandbox_ledger, transfers_of};
use crate::helpers::{Account, PASSWORD, TestApp, json, login, request_as};
use crate::market::{Market, code, notifications_of, wait_notification};

// The clock moves by days, past every access token's lifetime: each request signs in again.

async fn send(
    m: &Market,
    who: &Account,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> reqwest::Response {
    let token = login(&m.app, &who.username, PASSWORD).await;
    request_as(&m.app, method, path, &token, body.as_ref()).await
}

async fn admin(m: &Market, method: Method, path: &str, body: Option<&Value>) -> reqwest::Response {
    let token = login(&m.app, "root", PASSWORD).await;
    request_as(&m.app, method, path, &token, body).await
}

async fn pay(m: &Market, id: i64) -> Value {
    let r = admin(m, Method::GET, &format!("/api/admin/payments/{id}"), None).await;
    assert_eq!(r.status(), StatusCode::OK);
    json(r).await
}

/// A deal whose first milestone is funded, held and handed in: the delivery under review.
struct Delivered {
    d: Deal,
    milestone_id: i64,
    delivery_id: i64,
}

async fn delivered(m: &Market, name: &str) -> Delivered {
    let d = deal(m, name, [100.0, 50.0, 50.0]).await;
    connect(m, &d.expert).await;
    fund(m, &d.company, d.first_payment).await;
    let milestone_id = pay(m, d.first_payment).await["milestone_id"]
        .as_i64()
        .unwrap();
    let r = send(
        m,
        &d.expert,
        Method::POST,
        "/api/milestones/deliveries",
        Some(j!({"milestone_id": milestone_id, "description": "The schema, done"})),
    )
    .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let delivery_id = json(r).await["id"].as_i64().unwrap();
    Delivered {
        d,
        milestone_id,
        delivery_id,
    }
}

async fn delivery(m: &Market, w: &Delivered) -> Value {
    let r = send(
        m,
        &w.d.company,
        Method::GET,
        &format!("/api/milestones/deliveries/{}", w.delivery_id),
        None,
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    json(r).await
}

fn at(value: &Value) -> DateTime<Utc> {
    value
        .as_str()
        .unwrap_or_else(|| panic!("not a time: {value}"))
        .parse()
        .unwrap()
}

/// Moves `app`'s clock to `offset` from `instant` (forward only).
fn move_to(app: &TestApp, instant: DateTime<Utc>, offset: chrono::Duration) {
    let by = instant + offset - app.state.clock.now();
    assert!(
        by > chrono::Duration::zero(),
        "the clock only moves forward"
    );
    app.state.clock.advance(by);
}

/// Half a day before the card authorisation of a payment held at about `held` lapses, the
/// authorisation watch (the one place for card expiry) captures it into the platform balance,
/// so escrow still holds the money when the timer releases it a week later.
async fn keep_authorised(m: &Market, held: DateTime<Utc>) {
    move_to(
        &m.app,
        held,
        chrono::Duration::days(6) + chrono::Duration::hours(12),
    );
    m.app
        .state
        .jobs
        .trigger(escrow_jobs::AUTHORISATION_WATCH)
        .await
        .expect("the authorisation watch runs");
}

async fn fire(app: &TestApp) {
    app.state
        .jobs
        .trigger(TIMERS)
        .await
        .expect("the timer job runs");
}

async fn events(m: &Market, kind: &'static str) -> i64 {
    let mut conn = m.app.db.conn().await.unwrap();
    marketplace::on_exec!(conn.exec(), c => sqlx::query_scalar::<_, i64>(
        "SELECT COUNT(*) FROM events WHERE kind = $1")
        .bind(kind).fetch_one(c).await)
    .unwrap()
}

/// Runs the outbox until it has nothing left, so notification counts are final.
async fn drained(m: &Market) {
    poll(m, "the outbox drained", || async {
        let left = m
            .count(
                "SELECT COUNT(*) FROM events WHERE dispatched_at IS NULL AND $1 = $1",
                0,
            )
            .await;
        (left == 0).then_some(())
    })
    .await;
}

#[actix_web::test]
async fn an_unreviewed_delivery_is_reminded_twice_then_approved_once_at_its_deadline() {
    let m = Market::open().await;
    let w = delivered(&m, "auto").await;
    let company = &w.d.company;

    let view = delivery(&m, &w).await;
    assert_eq!(view["status"], "submitted");
    assert_eq!(view["auto_approved"], false);
    let deadline = at(&view["auto_approve_at"]);
    let created = at(&view["created_at"]);
    assert_eq!(deadline - created, chrono::Duration::days(14));
    keep_authorised(&m, created).await;

    // Day 7, one second early: nothing; at day 7: the first reminder, once.
    move_to(
        &m.app,
        created,
        chrono::Duration::days(7) - chrono::Duration::seconds(1),
    );
    fire(&m.app).await;
    drained(&m).await;
    assert_eq!(
        notifications_of(&m.app, company.id, "delivery_review_reminder").await,
        0
    );
    move_to(&m.app, created, chrono::Duration::days(7));
    fire(&m.app).await;
    fire(&m.app).await;
    wait_notification(&m.app, company.id, "delivery_review_reminder").await;
    let mails = m
        .app
        .mails_about(&company.email, "A delivery waits for your review")
        .await;
    let reminder = &mails[0];
    assert!(
        reminder.text.contains("approved automatically"),
        "{}",
        reminder.text
    );

    // Day 13: the second reminder, once.
    move_to(&m.app, created, chrono::Duration::days(13));
    fire(&m.app).await;
    fire(&m.app).await;
    drained(&m).await;
    assert_eq!(
        notifications_of(&m.app, company.id, "delivery_review_reminder").await,
        2
    );
    assert_eq!(events(&m, "delivery.review_reminder").await, 2);

    // One second before the deadline: still waiting.
    move_to(&m.app, deadline, -chrono::Duration::seconds(1));
    fire(&m.app).await;
    assert_eq!(delivery(&m, &w).await["status"], "submitted");
    assert_eq!(pay(&m, w.d.first_payment).await["status"], "held");

    // At the deadline: approved by the service, as a company approval would.
    move_to(&m.app, deadline, chrono::Duration::seconds(1));
    fire(&m.app).await;
    fire(&m.app).await;
    let view = delivery(&m, &w).await;
    assert_eq!(view["status"], "approved");
    assert_eq!(view["auto_approved"], true);
    assert!(view["reviewed_by"].is_null());
    assert!(view["auto_approve_at"].is_null());
    assert!(
        view["feedback"]
            .as_str()
            .is_some_and(|f| f.contains("did not review this delivery within 14 days")),
        "{view}"
    );
    let y = pay(&m, w.d.first_payment).await;
    assert_eq!(y["status"], "released");
    assert_eq!(y["payout_status"], "transferred");
    assert_eq!(
        m.text(
            "SELECT status FROM milestones WHERE id = $1",
            w.milestone_id
        )
        .await,
        "approved"
    );
    // The next milestone waits for its payment, its funding clock started.
    let r = send(
        &m,
        company,
        Method::GET,
        &format!("/api/milestones/project/{}", w.d.project_id),
        None,
    )
    .await;
    let plan = json(r).await;
    let second = plan["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["position"] == 2)
        .unwrap()
        .clone();
    assert_eq!(second["status"], "awaiting_payment");
    assert!(second["funding_due_at"].is_string(), "{second}");

    // The money matches the sandbox: captured once in full, 95 transferred once.
    let ledger = sandbox_ledger(&m).await;
    let intent = y["processor_payment_intent_id"].as_str().unwrap();
    assert_eq!(intent_in(&ledger, intent)["captures"], 1);
    assert_eq!(intent_in(&ledger, intent)["captured"], 10_000);
    let transfers = transfers_of(&ledger, w.d.first_payment);
    assert_eq!(transfers.len(), 1);
    assert_eq!(transfers[0]["amount"], 9_500);
    assert_eq!(y["expert_amount"], 95.0);
    assert_eq!(y["commission_amount"], 5.0);

    // Told: the expert (approved, paid) and the company; the approval recorded once.
    wait_notification(&m.app, w.d.expert.id, "delivery_reviewed").await;
    wait_notification(&m.app, company.id, "delivery_auto_approved").await;
    drained(&m).await;
    assert_eq!(
        notifications_of(&m.app, w.d.expert.id, "payment_released").await,
        1
    );
    assert_eq!(
        notifications_of(&m.app, company.id, "delivery_auto_approved").await,
        1
    );
    assert_eq!(
        m.count(
            "SELECT COUNT(*) FROM events WHERE kind = 'delivery.reviewed' AND aggregate_id = $1",
            w.d.project_id
        )
        .await,
        1
    );
    // No third reminder after the approval.
    assert_eq!(
        notifications_of(&m.app, company.id, "delivery_review_reminder").await,
        2
    );
}

#[actix_web::test]
async fn the_company_acting_one_second_before_the_deadline_wins() {
    let m = Market::open().await;
    let w = delivered(&m, "early").await;
    let deadline = at(&delivery(&m, &w).await["auto_approve_at"]);

    move_to(&m.app, deadline, -chrono::Duration::seconds(1));
    let r = send(
        &m,
        &w.d.company,
        Method::PUT,
        &format!("/api/milestones/deliveries/{}/review", w.delivery_id),
        Some(j!({"decision": "request_revision", "feedback": "One more table"})),
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    move_to(&m.app, deadline, chrono::Duration::seconds(5));
    fire(&m.app).await;

    let view = delivery(&m, &w).await;
    assert_eq!(view["status"], "needs_revision");
    assert_eq!(view["auto_approved"], false);
    assert!(view["auto_approve_at"].is_null());
    assert_eq!(pay(&m, w.d.first_payment).await["status"], "held");
    let ledger = sandbox_ledger(&m).await;
    let intent = pay(&m, w.d.first_payment).await["processor_payment_intent_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(intent_in(&ledger, &intent)["captures"], 0);

    // The new version starts a new window from now.
    let r = send(
        &m,
        &w.d.expert,
        Method::PUT,
        &format!("/api/milestones/deliveries/{}", w.delivery_id),
        Some(j!({"description": "With one more table"})),
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    let view = delivery(&m, &w).await;
    let renewed = at(&view["auto_approve_at"]);
    assert!(renewed - m.app.state.clock.now() > chrono::Duration::days(13));
}

#[actix_web::test]
async fn a_dispute_stops_the_auto_approval_clock() {
    let m = Market::open().await;
    let w = delivered(&m, "paused").await;
    let deadline = at(&delivery(&m, &w).await["auto_approve_at"]);
    let r = send(
        &m,
        &w.d.company,
        Method::POST,
        &format!("/api/projects/{}/dispute", w.d.project_id),
        Some(j!({"reason": "The delivery misses the agreed scope."})),
    )
    .await;
    assert_eq!(r.status(), StatusCode::CREATED);

    move_to(&m.app, deadline, chrono::Duration::days(1));
    fire(&m.app).await;
    assert_eq!(delivery(&m, &w).await["status"], "submitted");
    let y = pay(&m, w.d.first_payment).await;
    assert_eq!(y["status"], "disputed");
    let ledger = sandbox_ledger(&m).await;
    let intent = y["processor_payment_intent_id"].as_str().unwrap();
    assert_eq!(intent_in(&ledger, intent)["captures"], 0);
    assert!(transfers_of(&ledger, w.d.first_payment).is_empty());
    // The company raised it: no reply clock on its own dispute.
    let r = send(
        &m,
        &w.d.company,
        Method::GET,
        &format!("/api/projects/{}/dispute", w.d.project_id),
        None,
    )
    .await;
    let dispute = json(r).await;
    assert!(dispute["response_due_at"].is_null(), "{dispute}");

    // Decided for the company: the milestone is cancelled, so no timer is left on its
    // delivery, and the job runs cleanly past it.
    let r = admin(
        &m,
        Method::PUT,
        &format!("/api/admin/disputes/{}/resolve", dispute["id"]),
        Some(&j!({"resolution": "Refunded: the scope was missed.",
                  "resolution_action": "refund_company"})),
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    fire(&m.app).await;
    fire(&m.app).await;
    let view = delivery(&m, &w).await;
    assert_eq!(view["auto_approved"], false);
    assert_ne!(view["status"], "approved");
    assert_eq!(pay(&m, w.d.first_payment).await["status"], "refunded");
    assert_eq!(intent_in(&sandbox_ledger(&m).await, intent)["captures"], 0);
}

async fn expert_raises(m: &Market, d: &Deal) -> Value {
    let r = send(
        m,
        &d.expert,
        Method::POST,
        &format!("/api/projects/{}/dispute", d.project_id),
        Some(j!({"reason": "The company stopped answering."})),
    )
    .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let r = send(
        m,
        &d.expert,
        Method::GET,
        &format!("/api/projects/{}/dispute", d.project_id),
        None,
    )
    .await;
    json(r).await
}

#[actix_web::test]
async fn an_expert_dispute_the_company_ignores_is_escalated_once_and_an_answered_one_is_not() {
    let m = Market::open().await;
    let ignored = deal(&m, "silent", [100.0, 50.0, 50.0]).await;
    let answered = deal(&m, "talks", [100.0, 50.0, 50.0]).await;
    let dispute = expert_raises(&m, &ignored).await;
    let other = expert_raises(&m, &answered).await;
    let due = at(&dispute["response_due_at"]);
    assert_eq!(due - at(&dispute["created_at"]), chrono::Duration::days(7));
    assert!(dispute["escalated_at"].is_null());

    // The other company answers in the project's chat.
    {
        let mut conn = m.app.db.conn().await.unwrap();
        let now = m.app.state.clock.now();
        marketplace::on_exec!(conn.exec(), c => sqlx::query(
            "INSERT INTO chat_messages (project_id, sender_id, content, created_at)
             VALUES ($1, $2, 'We are looking into it', $3)")
            .bind(answered.project_id).bind(answered.company.id).bind(now)
            .execute(c).await.map(drop))
        .unwrap();
    }

    move_to(&m.app, due, -chrono::Duration::seconds(1));
    fire(&m.app).await;
    drained(&m).await;
    assert_eq!(
        notifications_of(&m.app, m.admin_id, "dispute_escalated").await,
        0
    );

    move_to(&m.app, due, chrono::Duration::seconds(1));
    fire(&m.app).await;
    fire(&m.app).await;
    wait_notification(&m.app, m.admin_id, "dispute_escalated").await;
    drained(&m).await;
    assert_eq!(
        notifications_of(&m.app, m.admin_id, "dispute_escalated").await,
        1
    );
    assert_eq!(events(&m, "dispute.escalated").await, 1);

    let r = admin(
        &m,
        Method::GET,
        &format!("/api/admin/disputes/{}", dispute["id"]),
        None,
    )
    .await;
    let escalated = json(r).await;
    assert!(escalated["escalated_at"].is_string(), "{escalated}");
    assert_eq!(escalated["priority"], "urgent");
    assert_eq!(
        escalated["status"], "open",
        "no decision without an administrator"
    );
    let r = admin(
        &m,
        Method::GET,
        &format!("/api/admin/disputes/{}", other["id"]),
        None,
    )
    .await;
    let calm = json(r).await;
    assert!(calm["escalated_at"].is_null(), "{calm}");
    assert!(
        calm["response_due_at"].is_null(),
        "answered: the clock stopped"
    );
    // Nothing moved money: the payments stay as the dispute left them.
    assert_eq!(pay(&m, ignored.first_payment).await["status"], "disputed");
}

#[actix_web::test]
async fn an_unfunded_milestone_reminds_the_company_and_lets_the_expert_end_the_engagement() {
    let m = Market::open().await;
    let d = deal(&m, "unfunded", [100.0, 50.0, 50.0]).await;
    let milestone_id = pay(&m, d.first_payment).await["milestone_id"]
        .as_i64()
        .unwrap();
    let r = send(
        &m,
        &d.company,
        Method::GET,
        &format!("/api/milestones/{milestone_id}"),
        None,
    )
    .await;
    let view = json(r).await;
    assert_eq!(view["status"], "awaiting_payment");
    let due = at(&view["funding_due_at"]);
    let left = due - m.app.state.clock.now();
    assert!(
        left <= chrono::Duration::days(3)
            && left > chrono::Duration::days(3) - chrono::Duration::minutes(1)
    );

    move_to(&m.app, due, -chrono::Duration::seconds(1));
    fire(&m.app).await;
    drained(&m).await;
    assert_eq!(
        notifications_of(&m.app, d.company.id, "funding_reminder").await,
        0
    );
    move_to(&m.app, due, chrono::Duration::seconds(1));
    fire(&m.app).await;
    fire(&m.app).await;
    wait_notification(&m.app, d.company.id, "funding_reminder").await;
    drained(&m).await;
    assert_eq!(
        notifications_of(&m.app, d.company.id, "funding_reminder").await,
        1
    );
    m.app
        .mails_about(&d.company.email, "Milestone still awaiting payment")
        .await;

    // Before 14 days the expert cannot end it; the company never can.
    let path = format!("/api/milestones/{milestone_id}/release-engagement");
    let r = send(&m, &d.expert, Method::POST, &path, None).await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    assert_eq!(code(&json(r).await), "FUNDING_NOT_OVERDUE");
    let since = due - chrono::Duration::days(3);
    move_to(
        &m.app,
        since,
        chrono::Duration::days(14) + chrono::Duration::seconds(1),
    );
    let r = send(&m, &d.company, Method::POST, &path, None).await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);

    // Two requests at once end it once.
    let (a, b) = tokio::join!(
        send(&m, &d.expert, Method::POST, &path, None),
        send(&m, &d.expert, Method::POST, &path, None)
    );
    let (ok, refused) = if a.status() == StatusCode::OK {
        (a, b)
    } else {
        (b, a)
    };
    assert_eq!(ok.status(), StatusCode::OK);
    assert_eq!(refused.status(), StatusCode::CONFLICT);
    assert_eq!(code(&json(refused).await), "INVALID_STATE");
    assert_eq!(json(ok).await["status"], "cancelled");
    assert_eq!(events(&m, "project.engagement_released").await, 1);
    let y = pay(&m, d.first_payment).await;
    assert_eq!(y["status"], "failed");
    let intent = y["processor_payment_intent_id"]
        .as_str()
        .unwrap()
        .to_owned();
    poll(&m, "the unfunded intent cancelled", || {
        let intent = intent.clone();
        let m = &m;
        async move {
            let ledger = sandbox_ledger(m).await;
            (intent_in(&ledger, &intent)["status"] == "canceled").then_some(())
        }
    })
    .await;
    assert_eq!(
        m.count(
            "SELECT COUNT(*) FROM milestones WHERE project_id = $1 AND status <> 'cancelled'",
            d.project_id
        )
        .await,
        0
    );
    wait_notification(&m.app, d.company.id, "engagement_released").await;
    // Once: the milestone no longer waits.
    let r = send(&m, &d.expert, Method::POST, &path, None).await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
}

/// A second instance of the service on the same database and the same processor sandbox.
async fn second_instance(m: &Market) -> TestApp {
    let sandbox = m.app.state.processor.sandbox.as_ref().expect("the sandbox");
    let database = m.app.database_url();
    crate::helpers::spawn_app_with(&[
        ("DATABASE_URL", &database),
        ("PROCESSOR_SECRET_KEY", sandbox.secret_key().expose()),
        (
            "PROCESSOR_WEBHOOK_SECRET",
            sandbox.webhook_secret().expose(),
        ),
        ("PROCESSOR_API_BASE", sandbox.base_url()),
    ])
    .await
}

#[actix_web::test]
async fn two_instances_racing_one_due_timer_approve_once() {
    let m = Market::open().await;
    let w = delivered(&m, "twins").await;
    let other = second_instance(&m).await;
    let view = delivery(&m, &w).await;
    let deadline = at(&view["auto_approve_at"]);
    keep_authorised(&m, at(&view["created_at"])).await;
    move_to(&m.app, deadline, chrono::Duration::seconds(1));
    move_to(&other, deadline, chrono::Duration::seconds(1));

    let (a, b) = tokio::join!(
        m.app.state.jobs.trigger(TIMERS),
        other.state.jobs.trigger(TIMERS)
    );
    assert!(a.is_ok() && b.is_ok(), "{a:?} {b:?}");
    let view = delivery(&m, &w).await;
    assert_eq!(view["status"], "approved");
    assert_eq!(view["auto_approved"], true);

    let y = pay(&m, w.d.first_payment).await;
    assert_eq!(y["status"], "released");
    let ledger = sandbox_ledger(&m).await;
    let intent = y["processor_payment_intent_id"].as_str().unwrap();
    assert_eq!(intent_in(&ledger, intent)["captures"], 1);
    assert_eq!(transfers_of(&ledger, w.d.first_payment).len(), 1);
    assert_eq!(
        m.count(
            "SELECT COUNT(*) FROM events WHERE kind = 'payment.released' AND aggregate_id = $1",
            w.d.first_payment
        )
        .await,
        1
    );
    assert_eq!(
        m.count(
            "SELECT COUNT(*) FROM events WHERE kind = 'delivery.reviewed' AND aggregate_id = $1",
            w.d.project_id
        )
        .await,
        1
    );
    assert_eq!(
        m.count(
            "SELECT COUNT(*) FROM payments WHERE project_id = $1 AND milestone_id IS NOT NULL",
            w.d.project_id
        )
        .await,
        2,
        "one next payment prepared"
    );
    other.stop().await;
}

#[actix_web::test]
async fn with_a_short_window_the_job_wakes_by_itself_and_fires_within_seconds() {
    // 0.00003 days is 2.592 s: reminders at 1.3 s and 2.4 s, approval at 2.6 s. Nobody
    // triggers the job: the submission wakes it and it sleeps until each deadline.
    let m = Market::open_with(&[("AUTO_APPROVE_DAYS", "0.00003")]).await;
    let w = delivered(&m, "live").await;
    let deadline = at(&delivery(&m, &w).await["auto_approve_at"]);
    let approved = poll(&m, "the delivery approved by the running job", || async {
        let view = delivery(&m, &w).await;
        (view["status"] == "approved").then_some(view)
    })
    .await;
    assert_eq!(approved["auto_approved"], true);
    let late = m.app.state.clock.now() - deadline;
    assert!(
        late < chrono::Duration::seconds(5),
        "fired {late} after its deadline"
    );
    assert!(
        at(&approved["reviewed_at"]) >= deadline,
        "not before its deadline"
    );
    drained(&m).await;
    assert_eq!(
        notifications_of(&m.app, w.d.company.id, "delivery_review_reminder").await,
        2
    );
}
