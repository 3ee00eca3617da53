//! Milestones and deliveries: the company's plan (only pending, unfunded milestones change),
//! the older direct actions, delivery submission on funded milestones, the revision cycle,
//! rejections up to the automatic cancellation, a race on one review, and nobody seeing or
//! acting on what is not theirs.

use crate::helpers::{Account, json};
use crate::market::{Market, code, wait_notification};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json as j};

/// A company, its expert selected on a 300 project planned as three milestones of 100: the
/// first `awaiting_payment` with a `pending` payment, the others `pending` and unfunded.
struct Work {
    m: Market,
    company: Account,
    expert: Account,
    project_id: i64,
    milestones: Vec<i64>,
}

async fn assigned_project() -> Work {
    let m = Market::open().await;
    let company = m.company("acme").await;
    let expert = m.expert("ana").await;
    let project_id = m.published_project(&company, 300.0, &[&expert]).await;
    assert_eq!(
        m.apply(&expert, project_id, [100.0, 100.0, 100.0])
            .await
            .status(),
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
    let s = json(r).await;
    let milestones = s["milestones"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["id"].as_i64().unwrap())
        .collect();
    Work {
        m,
        company,
        expert,
        project_id,
        milestones,
    }
}

/// Funds a milestone the way a company does: its open payment's intent is authorised at
/// the processor sandbox and the webhook makes it `held`.
async fn fund(m: &Market, milestone_id: i64) {
    let payment_id = m
        .count(
            "SELECT id FROM payments WHERE milestone_id = $1 AND status = 'pending'",
            milestone_id,
        )
        .await;
    crate::escrow::authorise(m, payment_id).await;
}

async fn milestone_status(m: &Market, id: i64) -> String {
    m.text("SELECT status FROM milestones WHERE id = $1", id)
        .await
}

async fn project_status(m: &Market, id: i64) -> String {
    m.text("SELECT status FROM projects WHERE id = $1", id)
        .await
}

async fn submit(m: &Market, expert: &Account, milestone_id: i64) -> reqwest::Response {
    m.send(
        expert,
        Method::POST,
        "/api/milestones/deliveries/",
        Some(
            j!({"milestone_id": milestone_id, "description": "Report attached",
                 "attachments": ["/api/uploads/docs/report.pdf"]}),
        ),
    )
    .await
}

/// Submits and answers the new delivery's id (asserting 201).
async fn submitted(m: &Market, expert: &Account, milestone_id: i64) -> i64 {
    let r = submit(m, expert, milestone_id).await;
    let status = r.status();
    let body = json(r).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body["id"].as_i64().unwrap()
}

async fn act(m: &Market, who: &Account, id: i64, what: &str) -> reqwest::Response {
    m.send(
        who,
        Method::POST,
        &format!("/api/milestones/{id}/{what}"),
        None,
    )
    .await
}

async fn review(
    m: &Market,
    who: &Account,
    delivery_id: i64,
    decision: &str,
    feedback: Option<&str>,
) -> reqwest::Response {
    m.send(
        who,
        Method::PUT,
        &format!("/api/milestones/deliveries/{delivery_id}/review"),
        Some(j!({"decision": decision, "feedback": feedback})),
    )
    .await
}

#[actix_web::test]
async fn only_pending_unfunded_milestones_can_be_changed() {
    let m = Market::open().await;
    let acme = m.company("acme").await;
    let rival = m.company("rival").await;
    let ana = m.expert("ana").await;
    let id = m.published_project(&acme, 300.0, &[&ana]).await;
    let create = |body: Value| m.send(&acme, Method::POST, "/api/milestones/", Some(body));

    let r = create(j!({"project_id": id, "title": "Design", "amount": 150.5})).await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let first = json(r).await;
    assert_eq!(first["status"], "pending");
    assert_eq!(first["position"], 1);
    assert_eq!(first["amount"], 150.5);
    let first_id = first["id"].as_i64().unwrap();
    for bad in [j!(0), j!(1.234), j!(-5)] {
        let r = create(j!({"project_id": id, "title": "X", "amount": bad})).await;
        assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY, "{bad}");
    }
    let r = create(j!({"project_id": id, "title": "Build", "amount": 149.5,
                       "due_date": "2098-01-01T00:00:00"}))
    .await;
    let second = json(r).await;
    assert_eq!(second["position"], 2);
    let second_id = second["id"].as_i64().unwrap();

    // Another company: 403 on a project it can see, 404 on milestones it cannot.
    let r = m
        .send(
            &rival,
            Method::POST,
            "/api/milestones/",
            Some(j!({"project_id": id, "title": "Mine", "amount": 10})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let path = format!("/api/milestones/{first_id}");
    for (method, body) in [
        (Method::GET, None),
        (Method::PUT, Some(j!({"title": "Hijacked"}))),
        (Method::DELETE, None),
    ] {
        let r = m.send(&rival, method.clone(), &path, body).await;
        assert_eq!(r.status(), StatusCode::NOT_FOUND, "{method}");
    }
    let list = format!("/api/milestones/project/{id}");
    let r = m.send(&rival, Method::GET, &list, None).await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);

    let r = m
        .send(
            &acme,
            Method::PUT,
            &path,
            Some(j!({"title": "Design v2", "amount": 100})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let edited = json(r).await;
    assert_eq!(
        (edited["title"].as_str(), edited["amount"].as_f64()),
        (Some("Design v2"), Some(100.0))
    );
    let r = m
        .send(
            &acme,
            Method::DELETE,
            &format!("/api/milestones/{second_id}"),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    let r = m.send(&acme, Method::GET, &list, None).await;
    let page = json(r).await;
    assert_eq!(
        (page["total"].as_i64(), page["page"].as_i64()),
        (Some(1), Some(1))
    );

    // Selection takes the company's plan; the first milestone now waits for its money.
    m.apply(&ana, id, [100.0, 100.0, 100.0]).await;
    let r = m
        .send(
            &acme,
            Method::POST,
            &format!("/api/projects/{id}/select/{}", ana.id),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(milestone_status(&m, first_id).await, "awaiting_payment");
    let r = m
        .send(&acme, Method::PUT, &path, Some(j!({"amount": 1})))
        .await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    let r = m.send(&acme, Method::DELETE, &path, None).await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    // Funded, it is `pending` again, and still not editable: its money was authorised.
    fund(&m, first_id).await;
    assert_eq!(milestone_status(&m, first_id).await, "pending");
    let r = m
        .send(&acme, Method::PUT, &path, Some(j!({"amount": 1})))
        .await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    // The selected expert sees the plan now; a milestone added later is editable.
    let r = m.send(&ana, Method::GET, &path, None).await;
    assert_eq!(r.status(), StatusCode::OK);
    let r = create(j!({"project_id": id, "title": "Extra", "amount": 50})).await;
    let extra = json(r).await;
    assert_eq!(extra["position"], 2, "at the end of the plan");
    let r = m
        .send(
            &acme,
            Method::PUT,
            &format!("/api/milestones/{}", extra["id"]),
            Some(j!({"description": "More work"})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let r = m
        .send(
            &ana,
            Method::PUT,
            &format!("/api/milestones/{}", extra["id"]),
            Some(j!({"title": "Mine"})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
}

#[actix_web::test]
async fn deliveries_need_a_funded_milestone_and_one_review_at_a_time() {
    let w = assigned_project().await;
    let (m, ana, acme) = (&w.m, &w.expert, &w.company);
    let bob = m.expert("bob").await;
    let first = w.milestones[0];

    // Not funded: the first waits for its payment, the second has none yet.
    for id in [first, w.milestones[1]] {
        let r = submit(m, ana, id).await;
        assert_eq!(r.status(), StatusCode::CONFLICT);
        assert_eq!(code(&json(r).await), "MILESTONE_NOT_FUNDED");
    }
    fund(m, first).await;
    assert_eq!(submit(m, acme, first).await.status(), StatusCode::FORBIDDEN);
    assert_eq!(submit(m, &bob, first).await.status(), StatusCode::NOT_FOUND);
    let r = m
        .send(
            ana,
            Method::POST,
            "/api/milestones/deliveries",
            Some(j!({"milestone_id": first, "description": "  "})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);

    let r = submit(m, ana, first).await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let d = json(r).await;
    assert_eq!(d["status"], "submitted");
    assert_eq!(d["attachments"], j!(["/api/uploads/docs/report.pdf"]));
    assert_eq!(d["expert_id"], ana.id);
    let delivery_id = d["id"].as_i64().unwrap();
    assert_eq!(milestone_status(m, first).await, "in_progress");
    assert_eq!(project_status(m, w.project_id).await, "in_review");
    let r = submit(m, ana, first).await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    assert_eq!(code(&json(r).await), "DELIVERY_UNDER_REVIEW");

    wait_notification(&m.app, acme.id, "delivery_submitted").await;
    m.app.mails_about(&acme.email, "Delivery to review").await;

    let get = format!("/api/milestones/deliveries/{delivery_id}");
    assert_eq!(
        m.send(acme, Method::GET, &get, None).await.status(),
        StatusCode::OK
    );
    assert_eq!(
        m.as_admin(Method::GET, &get, None).await.status(),
        StatusCode::OK
    );
    assert_eq!(
        m.send(&bob, Method::GET, &get, None).await.status(),
        StatusCode::NOT_FOUND
    );
    for path in [
        format!("/api/milestones/deliveries/milestone/{first}"),
        format!("/api/milestones/deliveries/project/{}", w.project_id),
        "/api/milestones/deliveries/expert/me".to_owned(),
    ] {
        let page = json(m.send(ana, Method::GET, &path, None).await).await;
        assert_eq!(page["total"], 1, "{path}");
        assert_eq!(page["items"][0]["id"], delivery_id, "{path}");
    }
    let mine = json(
        m.send(
            &bob,
            Method::GET,
            "/api/milestones/deliveries/expert/me",
            None,
        )
        .await,
    )
    .await;
    assert_eq!(mine["total"], 0);
    let r = m
        .send(
            acme,
            Method::GET,
            "/api/milestones/deliveries/expert/me",
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
}

#[actix_web::test]
async fn a_revision_request_sends_the_delivery_back_and_the_new_version_is_reviewed() {
    let w = assigned_project().await;
    let (m, ana, acme) = (&w.m, &w.expert, &w.company);
    let first = w.milestones[0];
    fund(m, first).await;
    let id = submitted(m, ana, first).await;
    let put = format!("/api/milestones/deliveries/{id}");

    let r = m
        .send(ana, Method::PUT, &put, Some(j!({"description": "v2"})))
        .await;
    assert_eq!(
        r.status(),
        StatusCode::CONFLICT,
        "only when a revision was asked"
    );
    let r = review(m, acme, id, "request_revision", None).await;
    assert_eq!(
        r.status(),
        StatusCode::UNPROCESSABLE_ENTITY,
        "feedback required"
    );
    let r = review(m, acme, id, "accept", None).await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let r = review(m, ana, id, "request_revision", Some("self")).await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);

    let r = review(m, acme, id, "request_revision", Some("Add the tests")).await;
    assert_eq!(r.status(), StatusCode::OK);
    let d = json(r).await;
    assert_eq!(d["status"], "needs_revision");
    assert_eq!(d["feedback"], "Add the tests");
    assert_eq!(d["reviewed_by"], acme.id);
    assert!(d["payment"].is_null());
    assert_eq!(milestone_status(m, first).await, "in_progress");
    assert_eq!(project_status(m, w.project_id).await, "in_progress");
    assert_eq!(
        m.count(
            "SELECT rejection_count FROM milestones WHERE id = $1",
            first
        )
        .await,
        0
    );
    wait_notification(&m.app, ana.id, "delivery_reviewed").await;
    let r = review(m, acme, id, "reject", None).await;
    assert_eq!(r.status(), StatusCode::CONFLICT, "not submitted any more");

    let r = m
        .send(acme, Method::PUT, &put, Some(j!({"description": "mine"})))
        .await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let r = m
        .send(
            ana,
            Method::PUT,
            &put,
            Some(j!({"description": "v2 with tests", "attachments": ["a.zip", "b.pdf"]})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let d = json(r).await;
    assert_eq!(d["status"], "submitted");
    assert_eq!(d["description"], "v2 with tests");
    assert_eq!(d["attachments"], j!(["a.zip", "b.pdf"]));
    assert_eq!(project_status(m, w.project_id).await, "in_review");
    let r = review(m, acme, id, "request_revision", Some("Again")).await;
    assert_eq!(json(r).await["status"], "needs_revision");
}

#[actix_web::test]
async fn the_third_rejection_cancels_the_milestone_the_later_ones_and_the_project() {
    let w = assigned_project().await;
    let (m, ana, acme) = (&w.m, &w.expert, &w.company);
    let first = w.milestones[0];
    fund(m, first).await;

    for round in 1..=2 {
        let id = submitted(m, ana, first).await;
        let r = review(m, acme, id, "reject", Some("Not what we asked")).await;
        assert_eq!(r.status(), StatusCode::OK);
        let d = json(r).await;
        assert_eq!(d["status"], "rejected");
        assert_eq!(d["feedback"], "Not what we asked");
        assert_eq!(
            milestone_status(m, first).await,
            "in_progress",
            "round {round}"
        );
        assert_eq!(
            m.count(
                "SELECT rejection_count FROM milestones WHERE id = $1",
                first
            )
            .await,
            round
        );
        assert_eq!(project_status(m, w.project_id).await, "in_progress");
    }
    wait_notification(&m.app, ana.id, "delivery_reviewed").await;
    m.app.mails_about(&ana.email, "not accepted").await;

    // The company already started paying the second milestone.
    crate::escrow::connect(m, ana).await;
    let r = m
        .send(
            acme,
            Method::POST,
            "/api/payments/initiate",
            Some(j!({"project_id": w.project_id, "milestone_id": w.milestones[1]})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let ahead = json(r).await;
    let ahead_intent = ahead["processor_payment_intent_id"]
        .as_str()
        .unwrap()
        .to_owned();

    // The third: the refund is escrow's and may fail, the cancellation is committed anyway.
    let id = submitted(m, ana, first).await;
    let r = review(m, acme, id, "reject", None).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(json(r).await["status"], "rejected");
    assert_eq!(milestone_status(m, first).await, "cancelled");
    assert_eq!(
        m.count(
            "SELECT rejection_count FROM milestones WHERE id = $1",
            first
        )
        .await,
        3
    );
    for later in &w.milestones[1..] {
        assert_eq!(milestone_status(m, *later).await, "cancelled");
    }
    assert_eq!(project_status(m, w.project_id).await, "cancelled");
    let payment = m
        .text("SELECT status FROM payments WHERE milestone_id = $1", first)
        .await;
    assert!(
        ["held", "refunded"].contains(&payment.as_str()),
        "{payment}"
    );
    wait_notification(&m.app, acme.id, "project_cancelled").await;
    // The payment started ahead failed, and its intent can no longer be paid.
    assert_eq!(
        crate::escrow::payment(m, ahead["id"].as_i64().unwrap()).await["status"],
        "failed"
    );
    let ledger = crate::escrow::sandbox_ledger(m).await;
    assert_eq!(
        crate::escrow::intent_in(&ledger, &ahead_intent)["status"],
        "canceled"
    );

    // Nothing more happens on a cancelled project.
    let r = submit(m, ana, first).await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    let r = m
        .send(
            acme,
            Method::POST,
            &format!("/api/milestones/{first}/reject"),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
}

#[actix_web::test]
async fn older_direct_actions_complete_and_reject() {
    let w = assigned_project().await;
    let (m, ana, acme) = (&w.m, &w.expert, &w.company);
    let first = w.milestones[0];
    let r = act(m, ana, first, "complete").await;
    assert_eq!(r.status(), StatusCode::CONFLICT, "not funded");
    fund(m, first).await;
    assert_eq!(
        act(m, acme, first, "complete").await.status(),
        StatusCode::FORBIDDEN
    );
    let r = act(m, ana, first, "complete").await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(json(r).await["status"], "completed");
    assert_eq!(project_status(m, w.project_id).await, "in_review");
    wait_notification(&m.app, acme.id, "milestone_completed").await;
    assert_eq!(
        act(m, ana, first, "complete").await.status(),
        StatusCode::CONFLICT
    );

    assert_eq!(
        act(m, ana, first, "reject").await.status(),
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        act(m, ana, first, "approve").await.status(),
        StatusCode::FORBIDDEN
    );
    let r = m
        .send(
            acme,
            Method::POST,
            &format!("/api/milestones/{first}/reject"),
            Some(j!({"feedback": "Missing the report"})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let body = json(r).await;
    assert_eq!(body["status"], "in_progress");
    assert_eq!(body["rejection_count"], 1);
    assert_eq!(project_status(m, w.project_id).await, "in_progress");

    // A rejection with a delivery waiting rejects that delivery too, and counts once.
    let id = submitted(m, ana, first).await;
    let r = act(m, acme, first, "reject").await;
    assert_eq!(json(r).await["rejection_count"], 2);
    let r = m
        .send(
            acme,
            Method::GET,
            &format!("/api/milestones/deliveries/{id}"),
            None,
        )
        .await;
    assert_eq!(json(r).await["status"], "rejected");

    // Nothing handed in, nothing to reject; a waiting delivery is reviewed, not completed.
    assert_eq!(
        act(m, acme, first, "reject").await.status(),
        StatusCode::CONFLICT
    );
    submitted(m, ana, first).await;
    let r = act(m, ana, first, "complete").await;
    assert_eq!(code(&json(r).await), "DELIVERY_UNDER_REVIEW");

    // Approval needs a funded milestone that is done or under way.
    let second = w.milestones[1];
    let r = act(m, acme, second, "approve").await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
}

#[actix_web::test]
async fn approval_is_refused_without_held_money_or_by_anyone_but_the_company() {
    let w = assigned_project().await;
    let (m, ana, acme) = (&w.m, &w.expert, &w.company);
    let rival = m.company("rival").await;
    let first = w.milestones[0];
    fund(m, first).await;
    let id = submitted(m, ana, first).await;

    assert_eq!(
        review(m, ana, id, "approve", None).await.status(),
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        review(m, &rival, id, "approve", None).await.status(),
        StatusCode::NOT_FOUND
    );

    // The payment left escrow meanwhile (here: a dispute on it): nothing to release.
    let mut conn = m.app.db.conn().await.unwrap();
    marketplace::on_exec!(conn.exec(), c => sqlx::query(
        "UPDATE payments SET status = 'disputed' WHERE milestone_id = $1")
        .bind(first).execute(c).await.map(|_| ()))
    .unwrap();
    let r = review(m, acme, id, "approve", Some("Great")).await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    assert_eq!(code(&json(r).await), "MILESTONE_NOT_FUNDED");
    let r = m
        .send(
            acme,
            Method::POST,
            &format!("/api/milestones/{first}/approve"),
            None,
        )
        .await;
    assert_eq!(code(&json(r).await), "MILESTONE_NOT_FUNDED");
    let d = json(
        m.send(
            acme,
            Method::GET,
            &format!("/api/milestones/deliveries/{id}"),
            None,
        )
        .await,
    )
    .await;
    assert_eq!(d["status"], "submitted");
    assert_eq!(milestone_status(m, first).await, "in_progress");
}

#[actix_web::test]
async fn approval_releases_the_payment_and_prepares_the_next() {
    let w = assigned_project().await;
    let (m, ana, acme) = (&w.m, &w.expert, &w.company);
    let first = w.milestones[0];
    fund(m, first).await;
    let id = submitted(m, ana, first).await;

    let r = review(m, acme, id, "approve", Some("Great work")).await;
    assert_eq!(r.status(), StatusCode::OK);
    let body = json(r).await;
    assert_eq!(body["status"], "approved");
    assert_eq!(body["feedback"], "Great work");
    assert_eq!(body["payment"]["status"], "released");
    assert_eq!(body["payment"]["milestone_id"], first);
    assert_eq!(body["next_payment"]["status"], "pending");
    assert_eq!(body["next_payment"]["milestone_id"], w.milestones[1]);
    assert_eq!(milestone_status(m, first).await, "approved");
    assert_eq!(
        milestone_status(m, w.milestones[1]).await,
        "awaiting_payment"
    );
    assert_eq!(project_status(m, w.project_id).await, "in_progress");
    wait_notification(&m.app, ana.id, "delivery_reviewed").await;
    assert_eq!(
        review(m, acme, id, "approve", None).await.status(),
        StatusCode::CONFLICT
    );
}

#[actix_web::test]
async fn concurrent_reviews_of_one_delivery_apply_once() {
    let w = assigned_project().await;
    let (m, ana, acme) = (&w.m, &w.expert, &w.company);
    let first = w.milestones[0];
    fund(m, first).await;
    let id = submitted(m, ana, first).await;
    let decisions = ["reject", "request_revision", "reject", "request_revision"];
    let calls = decisions
        .iter()
        .map(|d| review(m, acme, id, d, Some("Once")));
    let statuses: Vec<StatusCode> = futures_util::future::join_all(calls)
        .await
        .into_iter()
        .map(|r| r.status())
        .collect();
    let winners: Vec<usize> = (0..statuses.len())
        .filter(|i| statuses[*i] == StatusCode::OK)
        .collect();
    assert_eq!(winners.len(), 1, "{statuses:?}");
    assert!(
        statuses
            .iter()
            .all(|s| *s == StatusCode::OK || *s == StatusCode::CONFLICT),
        "{statuses:?}"
    );
    let rejected = decisions[winners[0]] == "reject";
    let status = m
        .text("SELECT status FROM deliveries WHERE id = $1", id)
        .await;
    assert_eq!(
        status,
        if rejected {
            "rejected"
        } else {
            "needs_revision"
        }
    );
    assert_eq!(
        m.count(
            "SELECT rejection_count FROM milestones WHERE id = $1",
            first
        )
        .await,
        i64::from(rejected)
    );
    assert_eq!(
        m.count(
            "SELECT COUNT(*) FROM events WHERE kind = 'delivery.reviewed' AND aggregate_id = $1",
            w.project_id
        )
        .await,
        1
    );
}

#[actix_web::test]
async fn nobody_sees_or_acts_on_another_projects_work() {
    let w = assigned_project().await;
    let (m, ana) = (&w.m, &w.expert);
    let rival = m.company("rival").await;
    let bob = m.expert("bob").await;
    let first = w.milestones[0];
    fund(m, first).await;
    let id = submitted(m, ana, first).await;

    for outsider in [&rival, &bob] {
        for (method, path, body) in [
            (Method::GET, format!("/api/milestones/{first}"), None),
            (
                Method::GET,
                format!("/api/milestones/project/{}", w.project_id),
                None,
            ),
            (
                Method::GET,
                format!("/api/milestones/deliveries/{id}"),
                None,
            ),
            (
                Method::GET,
                format!("/api/milestones/deliveries/milestone/{first}"),
                None,
            ),
            (
                Method::GET,
                format!("/api/milestones/deliveries/project/{}", w.project_id),
                None,
            ),
            (
                Method::PUT,
                format!("/api/milestones/deliveries/{id}"),
                Some(j!({"description": "x"})),
            ),
            (
                Method::PUT,
                format!("/api/milestones/deliveries/{id}/review"),
                Some(j!({"decision": "reject"})),
            ),
            (
                Method::POST,
                format!("/api/milestones/{first}/complete"),
                None,
            ),
            (
                Method::POST,
                format!("/api/milestones/{first}/approve"),
                None,
            ),
            (
                Method::POST,
                format!("/api/milestones/{first}/reject"),
                None,
            ),
            (
                Method::PUT,
                format!("/api/milestones/{first}"),
                Some(j!({"title": "x"})),
            ),
            (Method::DELETE, format!("/api/milestones/{first}"), None),
        ] {
            let r = m.send(outsider, method.clone(), &path, body).await;
            assert_eq!(
                r.status(),
                StatusCode::NOT_FOUND,
                "{} {method} {path}",
                outsider.username
            );
        }
    }
    assert_eq!(
        m.text("SELECT status FROM deliveries WHERE id = $1", id)
            .await,
        "submitted"
    );
    // Unknown ids are 404 too.
    let r = m
        .send(ana, Method::GET, "/api/milestones/deliveries/999999", None)
        .await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
}
