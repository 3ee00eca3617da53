//! Disputes over HTTP with the processor sandbox: raised by a participant (only one active
//! per project, also when two are raised at once), read by the parties, listed and mediated
//! by administrators, resolved each of the four ways with the sandbox ledger showing the
//! money moved once, and chargebacks (including a resolution racing the bank's decision).

use reqwest::{Method, StatusCode};
use serde_json::{Value, json as j};

use crate::escrow::{
    Deal, connect, deal, fund, intent_in, payment, poll, sandbox_ledger, transfers_of,
    unprocessed_events, wait_payment,
};
use crate::helpers::{Account, json};
use crate::market::{Market, code, notifications_of, wait_notification};

fn dispute_path(project_id: i64) -> String {
    format!("/api/projects/{project_id}/dispute")
}

async fn raise(m: &Market, who: &Account, project_id: i64, body: Value) -> reqwest::Response {
    m.send(who, Method::POST, &dispute_path(project_id), Some(body))
        .await
}

/// The company raises a dispute; its id.
async fn company_raises(m: &Market, d: &Deal) -> i64 {
    let r = raise(
        m,
        &d.company,
        d.project_id,
        j!({"title": "Late delivery", "reason": "The first milestone was not delivered on time.",
            "dispute_type": "delivery", "priority": "high", "evidence": "Chat of 3 March",
            "requested_resolution": "Refund of the milestone", "contact_preference": "email"}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    json(r).await["dispute_id"].as_i64().unwrap()
}

/// The company releases a payment (`POST /api/payments/release`).
async fn release(m: &Market, company: &Account, payment_id: i64) -> reqwest::Response {
    m.send(
        company,
        Method::POST,
        "/api/payments/release",
        Some(j!({"payment_id": payment_id})),
    )
    .await
}

async fn admin_put(m: &Market, path: &str, body: Value) -> reqwest::Response {
    m.as_admin(Method::PUT, path, Some(&body)).await
}

async fn resolve(m: &Market, dispute_id: i64, action: &str) -> reqwest::Response {
    admin_put(
        m,
        &format!("/api/admin/disputes/{dispute_id}/resolve"),
        j!({"resolution": format!("Decided after hearing both parties: {action}."),
            "resolution_action": action}),
    )
    .await
}

async fn project_status(m: &Market, id: i64) -> String {
    m.text("SELECT status FROM projects WHERE id = $1", id)
        .await
}

async fn milestone_status(m: &Market, project_id: i64, position: i64) -> String {
    let sql = match position {
        1 => "SELECT status FROM milestones WHERE project_id = $1 AND position = 1",
        2 => "SELECT status FROM milestones WHERE project_id = $1 AND position = 2",
        _ => unreachable!(),
    };
    m.text(sql, project_id).await
}

async fn dispute_lines(m: &Market, project_id: i64) -> usize {
    m.text("SELECT admin_notes FROM projects WHERE id = $1", project_id)
        .await
        .lines()
        .filter(|l| l.starts_with("[DISPUTE_EVENT]"))
        .count()
}

async fn all_applied(m: &Market) {
    poll(m, "every processor event applied", || async {
        (unprocessed_events(m).await == 0).then_some(())
    })
    .await;
}

#[actix_web::test]
async fn a_participant_raises_one_dispute_that_freezes_the_project_and_its_payments() {
    let m = Market::open().await;
    let d = deal(&m, "raise", [100.0, 50.0, 50.0]).await;
    connect(&m, &d.expert).await;
    fund(&m, &d.company, d.first_payment).await;
    let outsider = m.company("raiseout").await;

    // Neither reason nor description: a validation error naming the field.
    let r = raise(&m, &d.company, d.project_id, j!({"title": "Nothing said"})).await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let body = json(r).await;
    assert_eq!(body["errors"][0]["field"], "reason");
    let r = raise(
        &m,
        &d.company,
        d.project_id,
        j!({"reason": "x".repeat(5_001)}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    // Someone outside the project does not even see it; an administrator is no party.
    let r = raise(&m, &outsider, d.project_id, j!({"reason": "Not mine"})).await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let r = m
        .as_admin(
            Method::POST,
            &dispute_path(d.project_id),
            Some(&j!({"reason": "Admins mediate"})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert_eq!(project_status(&m, d.project_id).await, "in_progress");
    let r = m
        .send(&d.company, Method::GET, &dispute_path(d.project_id), None)
        .await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND, "no dispute yet");

    // The expert raises it with a description only.
    let r = raise(
        &m,
        &d.expert,
        d.project_id,
        j!({"description": "The company keeps asking for work outside the scope."}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let body = json(r).await;
    assert!(body["message"].is_string());
    let id = body["dispute_id"].as_i64().unwrap();
    assert_eq!(project_status(&m, d.project_id).await, "disputed");
    let y = payment(&m, d.first_payment).await;
    assert_eq!(y["status"], "disputed", "the held payment is frozen");
    assert_eq!(dispute_lines(&m, d.project_id).await, 1);

    // Administrators and the counterpart are told, with an e-mail; the raiser is not.
    wait_notification(&m.app, m.admin_id, "dispute_created").await;
    wait_notification(&m.app, d.company.id, "dispute_created").await;
    assert_eq!(
        notifications_of(&m.app, d.expert.id, "dispute_created").await,
        0
    );
    m.app
        .mails_about(&d.company.email, "Dispute opened on Data platform")
        .await;
    m.app
        .mails_about("root@example.com", "Dispute opened")
        .await;

    // The parties and administrators read it; nobody else.
    for reader in [&d.company, &d.expert] {
        let r = m
            .send(reader, Method::GET, &dispute_path(d.project_id), None)
            .await;
        assert_eq!(r.status(), StatusCode::OK);
        let got = json(r).await;
        assert_eq!(got["id"], id);
        assert_eq!(got["status"], "open");
        assert_eq!(got["raised_by"], d.expert.id);
        assert_eq!(got["payment_id"], d.first_payment);
        assert_eq!(
            got["reason"],
            "The company keeps asking for work outside the scope."
        );
        for field in [
            "project_id",
            "evidence",
            "requested_resolution",
            "resolution",
            "resolution_action",
            "resolved_by",
            "created_at",
            "resolved_at",
        ] {
            assert!(got.get(field).is_some(), "{field} missing");
        }
        assert!(
            got.get("mediation_notes").is_none(),
            "admins' notes stay theirs"
        );
    }
    let r = m
        .as_admin(Method::GET, &dispute_path(d.project_id), None)
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let r = m
        .send(&outsider, Method::GET, &dispute_path(d.project_id), None)
        .await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);

    // One active dispute: the project is disputed, so a second is refused.
    let r = raise(&m, &d.company, d.project_id, j!({"reason": "Me too"})).await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    assert_eq!(code(&json(r).await), "DISPUTE_NOT_ALLOWED");
    // No payment starts while disputed.
    let second = m
        .count(
            "SELECT id FROM milestones WHERE project_id = $1 AND position = 2",
            d.project_id,
        )
        .await;
    let r = m
        .send(
            &d.company,
            Method::POST,
            "/api/payments/initiate",
            Some(j!({"project_id": d.project_id, "milestone_id": second})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    assert_eq!(code(&json(r).await), "PROJECT_DISPUTED");
    // Nor is a payment released.
    let r = release(&m, &d.company, d.first_payment).await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    assert_eq!(payment(&m, d.first_payment).await["status"], "disputed");
}

#[actix_web::test]
async fn two_disputes_raised_at_once_open_exactly_one() {
    let m = Market::open().await;
    for round in 0..3 {
        let d = deal(&m, &format!("twice{round}"), [10.0, 10.0, 10.0]).await;
        let (a, b) = tokio::join!(
            raise(
                &m,
                &d.company,
                d.project_id,
                j!({"reason": "Company's complaint"})
            ),
            raise(
                &m,
                &d.expert,
                d.project_id,
                j!({"reason": "Expert's complaint"})
            ),
        );
        let mut statuses = [a.status(), b.status()];
        statuses.sort();
        assert_eq!(statuses, [StatusCode::CREATED, StatusCode::CONFLICT]);
        let active = m
            .count(
                "SELECT COUNT(*) FROM disputes WHERE project_id = $1 AND status IN ('open', 'in_review')",
                d.project_id,
            )
            .await;
        assert_eq!(active, 1);
        assert_eq!(dispute_lines(&m, d.project_id).await, 1);

        // The database refuses a second active dispute on its own, whatever the caller.
        let mut conn = m.app.db.conn().await.unwrap();
        let second = marketplace::store::disputes::insert(
            conn.exec(),
            &marketplace::store::disputes::NewDispute {
                project_id: d.project_id,
                payment_id: None,
                raised_by: d.company.id,
                title: None,
                reason: "Around the actor",
                description: None,
                dispute_type: None,
                priority: None,
                evidence: None,
                requested_resolution: None,
                contact_preference: None,
            },
            chrono::Utc::now(),
        )
        .await;
        assert!(second.is_err_and(|e| e.is_unique_violation()));
    }
}

#[actix_web::test]
async fn administrators_list_read_and_mediate_disputes() {
    let m = Market::open().await;
    let first = deal(&m, "lista", [10.0, 10.0, 10.0]).await;
    let second = deal(&m, "listb", [10.0, 10.0, 10.0]).await;
    let a = company_raises(&m, &first).await;
    let r = raise(
        &m,
        &second.expert,
        second.project_id,
        j!({"title": "Unpaid overtime", "reason": "Hours beyond the proposal were asked for."}),
    )
    .await;
    let b = json(r).await["dispute_id"].as_i64().unwrap();

    // Only administrators.
    let r = m
        .send(&first.company, Method::GET, "/api/admin/disputes", None)
        .await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let list = |query: &'static str| {
        let m = &m;
        async move {
            let r = m
                .as_admin(Method::GET, &format!("/api/admin/disputes{query}"), None)
                .await;
            assert_eq!(r.status(), StatusCode::OK, "{query}");
            json(r).await
        }
    };
    let ids = |page: &Value| -> Vec<i64> {
        page["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["id"].as_i64().unwrap())
            .collect()
    };
    let all = list("").await;
    assert_eq!(all["total"], 2);
    assert_eq!(ids(&all), [b, a], "newest first");
    assert_eq!(
        ids(&list("?sort_by=created_at&sort_order=asc").await),
        [a, b]
    );
    assert_eq!(ids(&list("?search=OVERTIME").await), [b]);
    assert_eq!(ids(&list("?search=100%25").await), Vec::<i64>::new());
    let page = list("?page=2&size=1").await;
    assert_eq!((ids(&page), page["pages"].as_i64()), (vec![a], Some(2)));
    for bad in [
        "?sort_by=title",
        "?sort_order=up",
        "?status=lost",
        "?size=101",
    ] {
        let r = m
            .as_admin(Method::GET, &format!("/api/admin/disputes{bad}"), None)
            .await;
        assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY, "{bad}");
    }
    let r = m
        .as_admin(Method::GET, "/api/admin/disputes/999999", None)
        .await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);

    // Mediation: notes of 10 to 2,000 characters; `open` → `in_review` once.
    for notes in ["too short", &"n".repeat(2_001)] {
        let r = admin_put(
            &m,
            &format!("/api/admin/disputes/{a}/mediate"),
            j!({"notes": notes}),
        )
        .await;
        assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    }
    let r = admin_put(
        &m,
        &format!("/api/admin/disputes/{a}/mediate"),
        j!({"notes": "Called both parties; waiting for the delivery log."}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    let got = json(r).await;
    assert_eq!(got["status"], "in_review");
    assert_eq!(got["mediated_by"], m.admin_id);
    assert_eq!(
        got["mediation_notes"],
        "Called both parties; waiting for the delivery log."
    );
    let r = admin_put(
        &m,
        &format!("/api/admin/disputes/{a}/mediate"),
        j!({"notes": "Second round of mediation."}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    assert_eq!(code(&json(r).await), "DISPUTE_NOT_OPEN");
    wait_notification(&m.app, first.company.id, "dispute_in_review").await;
    wait_notification(&m.app, first.expert.id, "dispute_in_review").await;
    assert_eq!(dispute_lines(&m, first.project_id).await, 2);
    assert_eq!(ids(&list("?status=in_review").await), [a]);
    assert_eq!(ids(&list("?sort_by=status&sort_order=asc").await), [b, a]);
    let r = m
        .as_admin(Method::GET, &format!("/api/admin/disputes/{a}"), None)
        .await;
    assert_eq!(json(r).await["status"], "in_review");

    // Resolution text and action are checked before anything moves.
    let r = admin_put(
        &m,
        &format!("/api/admin/disputes/{a}/resolve"),
        j!({"resolution": "short", "resolution_action": "split_it"}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(json(r).await["errors"].as_array().unwrap().len(), 2);
    let r = m
        .send(
            &first.company,
            Method::PUT,
            &format!("/api/admin/disputes/{a}/resolve"),
            Some(j!({"resolution": "I decide for myself.", "resolution_action": "refund_company"})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert_eq!(project_status(&m, first.project_id).await, "disputed");
}

/// The resolution's answer after checking the dispute, the project and the parties' news.
async fn resolved(m: &Market, d: &Deal, dispute_id: i64, action: &str) -> Value {
    let r = resolve(m, dispute_id, action).await;
    let status = r.status();
    let body = json(r).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "resolved");
    assert_eq!(body["resolution_action"], action);
    assert_eq!(body["resolved_by"], m.admin_id);
    assert!(body["resolved_at"].is_string());
    assert_eq!(project_status(m, d.project_id).await, "in_progress");
    for party in [&d.company, &d.expert] {
        wait_notification(&m.app, party.id, "dispute_resolved").await;
        let mails = m.app.mails_about(&party.email, "Dispute resolved").await;
        assert!(
            mails
                .iter()
                .all(|mail| mail.subject == "Dispute resolved on Data platform")
        );
    }
    // Decided once: no second decision, no mediation afterwards.
    let r = resolve(m, dispute_id, action).await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    assert_eq!(code(&json(r).await), "DISPUTE_NOT_ACTIVE");
    let r = admin_put(
        m,
        &format!("/api/admin/disputes/{dispute_id}/mediate"),
        j!({"notes": "Trying to reopen it."}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    body
}

#[actix_web::test]
async fn each_resolution_moves_the_held_money_exactly_once() {
    let m = Market::open().await;
    for (round, action) in [
        "resolve_favor_expert",
        "release_to_expert",
        "resolve_favor_company",
        "refund_company",
    ]
    .into_iter()
    .enumerate()
    {
        let d = deal(&m, &format!("res{round}"), [100.0, 50.0, 50.0]).await;
        connect(&m, &d.expert).await;
        let held = fund(&m, &d.company, d.first_payment).await;
        let intent = held["processor_payment_intent_id"]
            .as_str()
            .unwrap()
            .to_owned();
        let id = company_raises(&m, &d).await;
        if round % 2 == 1 {
            let r = admin_put(
                &m,
                &format!("/api/admin/disputes/{id}/mediate"),
                j!({"notes": "Reviewing the delivery history."}),
            )
            .await;
            assert_eq!(r.status(), StatusCode::OK);
        }
        let body = resolved(&m, &d, id, action).await;
        assert_eq!(body["payments"][0]["id"], d.first_payment);
        let y = payment(&m, d.first_payment).await;
        let ledger = sandbox_ledger(&m).await;
        let at_processor = intent_in(&ledger, &intent);
        let transfers = transfers_of(&ledger, d.first_payment);
        if action.contains("expert") {
            assert_eq!(y["status"], "released");
            assert_eq!(y["payout_status"], "transferred");
            assert_eq!(y["commission_amount"], 5.0);
            assert_eq!(at_processor["captured"], 10_000);
            assert_eq!(at_processor["captures"], 1);
            assert_eq!(transfers.len(), 1, "transferred once");
            assert_eq!(transfers[0]["amount"], 9_500);
            assert_eq!(transfers[0]["reversed"], 0);
            assert_eq!(milestone_status(&m, d.project_id, 1).await, "approved");
            // The work goes on: the next milestone waits for its payment.
            assert_eq!(
                milestone_status(&m, d.project_id, 2).await,
                "awaiting_payment"
            );
            wait_notification(&m.app, d.expert.id, "payment_released").await;
        } else {
            assert_eq!(y["status"], "refunded");
            assert_eq!(y["payout_status"], "pending");
            assert_eq!(at_processor["captured"], 0);
            assert_eq!(at_processor["released"], 10_000, "authorisation let go");
            assert_eq!(at_processor["status"], "canceled");
            assert!(transfers.is_empty());
            assert_eq!(milestone_status(&m, d.project_id, 1).await, "cancelled");
            assert_eq!(milestone_status(&m, d.project_id, 2).await, "pending");
            wait_notification(&m.app, d.company.id, "payment_refunded").await;
        }
        assert_eq!(
            dispute_lines(&m, d.project_id).await,
            if round % 2 == 1 { 3 } else { 2 }
        );
    }
}

/// A deal whose first milestone is released and transferred; the second milestone's payment
/// (`pending`) and its intent.
async fn first_released(m: &Market, name: &str) -> (Deal, i64, String) {
    let d = deal(m, name, [100.0, 50.0, 50.0]).await;
    connect(m, &d.expert).await;
    fund(m, &d.company, d.first_payment).await;
    let r = release(m, &d.company, d.first_payment).await;
    assert_eq!(r.status(), StatusCode::OK);
    let second = json(r).await["next_payment"]["id"].as_i64().unwrap();
    let intent = payment(m, second).await["processor_payment_intent_id"]
        .as_str()
        .unwrap()
        .to_owned();
    (d, second, intent)
}

#[actix_web::test]
async fn a_transferred_payment_is_reversed_before_a_refund_and_unfunded_ones_move_no_money() {
    let m = Market::open().await;
    // Milestone 1 released and transferred; milestone 2's payment waits unfunded.
    for (round, action) in ["resolve_favor_company", "release_to_expert"]
        .into_iter()
        .enumerate()
    {
        let (d, second, intent) = first_released(&m, &format!("unf{round}")).await;
        let id = company_raises(&m, &d).await;
        assert_eq!(payment(&m, second).await["status"], "disputed");
        let got = m
            .as_admin(Method::GET, &format!("/api/admin/disputes/{id}"), None)
            .await;
        assert_eq!(json(got).await["payment_id"], second);
        resolved(&m, &d, id, action).await;
        let ledger = sandbox_ledger(&m).await;
        let y = payment(&m, second).await;
        if action == "release_to_expert" {
            // Nothing was paid: back to `pending`, for the company to fund as before.
            assert_eq!(y["status"], "pending");
            assert!(transfers_of(&ledger, second).is_empty());
            assert_eq!(
                milestone_status(&m, d.project_id, 2).await,
                "awaiting_payment"
            );
            let y = fund(&m, &d.company, second).await;
            assert_eq!(y["status"], "held");
        } else {
            // Nothing was taken: the intent is cancelled so it cannot be paid later.
            assert_eq!(y["status"], "refunded");
            assert_eq!(intent_in(&ledger, &intent)["status"], "canceled");
            assert_eq!(intent_in(&ledger, &intent)["captured"], 0);
            assert_eq!(milestone_status(&m, d.project_id, 2).await, "cancelled");
        }
        // Milestone 1's money stays with the expert either way.
        let first = payment(&m, d.first_payment).await;
        assert_eq!(
            (first["status"].as_str(), first["payout_status"].as_str()),
            (Some("released"), Some("transferred"))
        );
        assert_eq!(transfers_of(&ledger, d.first_payment)[0]["reversed"], 0);
    }

    // Frozen unfunded, then paid while disputed: the authorisation is kept for the decision,
    // and a decision for the expert captures and transfers it.
    let (d, second, intent) = first_released(&m, "meanwhile").await;
    let id = company_raises(&m, &d).await;
    m.app
        .post_json(
            &format!("/api/sandbox/payment_intents/{intent}/confirm"),
            &j!({"payment_method": "pm_card_visa"}),
        )
        .await;
    let y = wait_payment(&m, second, "authorisation kept", |y| {
        y["held_at"].is_string()
    })
    .await;
    assert_eq!(y["status"], "disputed");
    assert_eq!(milestone_status(&m, d.project_id, 2).await, "pending");
    resolved(&m, &d, id, "release_to_expert").await;
    let y = payment(&m, second).await;
    assert_eq!(
        (y["status"].as_str(), y["payout_status"].as_str()),
        (Some("released"), Some("transferred"))
    );
    let ledger = sandbox_ledger(&m).await;
    assert_eq!(intent_in(&ledger, &intent)["captures"], 1);
    assert_eq!(transfers_of(&ledger, second)[0]["amount"], 4_750);

    // The dispute is about a released, transferred payment when nothing else is open: a
    // refund reverses the transfer first.
    let (d, second, intent) = first_released(&m, "rev").await;
    // The company's card is declined for milestone 2: that payment fails.
    m.app
        .post_json(
            &format!("/api/sandbox/payment_intents/{intent}/confirm"),
            &j!({"payment_method": "pm_card_chargeDeclined"}),
        )
        .await;
    wait_payment(&m, second, "failed", |y| y["status"] == "failed").await;
    let id = company_raises(&m, &d).await;
    let got = m
        .as_admin(Method::GET, &format!("/api/admin/disputes/{id}"), None)
        .await;
    assert_eq!(json(got).await["payment_id"], d.first_payment);
    resolved(&m, &d, id, "refund_company").await;
    let y = payment(&m, d.first_payment).await;
    assert_eq!(y["status"], "refunded");
    assert_eq!(y["payout_status"], "pending");
    assert!(y["payment_metadata"]["reversal_id"].is_string());
    let ledger = sandbox_ledger(&m).await;
    assert_eq!(transfers_of(&ledger, d.first_payment)[0]["reversed"], 9_500);
    let first_intent = y["processor_payment_intent_id"].as_str().unwrap();
    assert_eq!(intent_in(&ledger, first_intent)["refunded"], 10_000);
}

/// Opens a chargeback on the payment's charge; the processor's dispute id once recorded.
async fn chargeback(m: &Market, payment_id: i64) -> String {
    let y = payment(m, payment_id).await;
    let charge = y["processor_charge_id"].as_str().unwrap().to_owned();
    let r = m
        .app
        .post_json(
            &format!("/api/sandbox/charges/{charge}/dispute"),
            &j!({"reason": "product_not_received"}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let id = json(r).await["id"].as_str().unwrap().to_owned();
    let project_id = y["project_id"].as_i64().unwrap();
    let id = &id;
    poll(m, "the chargeback recorded", || async move {
        (dispute_of(m, project_id).await["processor_dispute_id"] == id.as_str()).then_some(())
    })
    .await;
    if y["status"] == "held" {
        wait_payment(m, payment_id, "disputed", |y| y["status"] == "disputed").await;
    }
    id.clone()
}

async fn close(m: &Market, chargeback: &str, outcome: &str) -> reqwest::Response {
    m.app
        .post_json(
            &format!("/api/sandbox/disputes/{chargeback}/close"),
            &j!({"outcome": outcome}),
        )
        .await
}

/// The administrators' view of the project's latest dispute (`null` without one).
async fn dispute_of(m: &Market, project_id: i64) -> Value {
    let r = m
        .as_admin(Method::GET, &dispute_path(project_id), None)
        .await;
    if r.status() == StatusCode::NOT_FOUND {
        return Value::Null;
    }
    let id = json(r).await["id"].as_i64().unwrap();
    let r = m
        .as_admin(Method::GET, &format!("/api/admin/disputes/{id}"), None)
        .await;
    json(r).await
}

#[actix_web::test]
async fn chargebacks_wait_for_the_bank_then_an_administrator_decides() {
    let m = Market::open().await;

    // Lost: the card holder has the money back; the dispute is decided by the bank and the
    // authorisation let go.
    let d = deal(&m, "cbl", [40.0, 30.0, 30.0]).await;
    connect(&m, &d.expert).await;
    let held = fund(&m, &d.company, d.first_payment).await;
    let cb = chargeback(&m, d.first_payment).await;
    let ours = dispute_of(&m, d.project_id).await;
    assert_eq!(ours["processor_dispute_id"], cb.as_str());
    assert_eq!(ours["status"], "open");
    assert!(ours["evidence_details"].is_string());
    let r = resolve(&m, ours["id"].as_i64().unwrap(), "release_to_expert").await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    assert_eq!(code(&json(r).await), "CHARGEBACK_OPEN");
    assert_eq!(close(&m, &cb, "lost").await.status(), StatusCode::OK);
    all_applied(&m).await;
    let y = payment(&m, d.first_payment).await;
    assert_eq!(y["status"], "refunded");
    let ours = dispute_of(&m, d.project_id).await;
    assert_eq!(ours["status"], "resolved");
    assert_eq!(ours["resolution_action"], "refund_company");
    assert_eq!(ours["processor_dispute_status"], "lost");
    let ledger = sandbox_ledger(&m).await;
    let intent = intent_in(
        &ledger,
        held["processor_payment_intent_id"].as_str().unwrap(),
    );
    assert_eq!(intent["status"], "canceled");
    assert_eq!(intent["captured"], 0);
    assert!(transfers_of(&ledger, d.first_payment).is_empty());
    wait_notification(&m.app, d.company.id, "dispute_resolved").await;

    // Lost after the expert was paid: the refund is recorded, the transfer stands, and the
    // administrators are told to recover it.
    let (d, _, _) = first_released(&m, "cbt").await;
    let cb = chargeback(&m, d.first_payment).await;
    assert_eq!(payment(&m, d.first_payment).await["status"], "released");
    assert_eq!(close(&m, &cb, "lost").await.status(), StatusCode::OK);
    all_applied(&m).await;
    let y = payment(&m, d.first_payment).await;
    assert_eq!(y["status"], "refunded");
    wait_notification(&m.app, m.admin_id, "chargeback_after_transfer").await;
    let ledger = sandbox_ledger(&m).await;
    assert_eq!(transfers_of(&ledger, d.first_payment)[0]["reversed"], 0);
    assert_eq!(dispute_of(&m, d.project_id).await["status"], "resolved");

    // Won, on a project whose company had raised a dispute: the chargeback joins it; after
    // the bank's decision the administrator releases the money to the expert.
    let d = deal(&m, "cbw", [40.0, 30.0, 30.0]).await;
    connect(&m, &d.expert).await;
    fund(&m, &d.company, d.first_payment).await;
    let id = company_raises(&m, &d).await;
    let cb = chargeback(&m, d.first_payment).await;
    let ours = dispute_of(&m, d.project_id).await;
    assert_eq!(ours["id"], id, "one dispute for the project");
    assert_eq!(ours["processor_dispute_id"], cb.as_str());
    m.app
        .post_json(
            &format!("/api/sandbox/disputes/{cb}/update"),
            &j!({"status": "under_review"}),
        )
        .await;
    all_applied(&m).await;
    assert_eq!(dispute_of(&m, d.project_id).await["status"], "in_review");
    assert_eq!(close(&m, &cb, "won").await.status(), StatusCode::OK);
    all_applied(&m).await;
    assert_eq!(payment(&m, d.first_payment).await["status"], "disputed");
    wait_notification(&m.app, m.admin_id, "dispute_chargeback_won").await;
    resolved(&m, &d, id, "resolve_favor_expert").await;
    let y = payment(&m, d.first_payment).await;
    assert_eq!(
        (y["status"].as_str(), y["payout_status"].as_str()),
        (Some("released"), Some("transferred"))
    );
    let ledger = sandbox_ledger(&m).await;
    assert_eq!(transfers_of(&ledger, d.first_payment).len(), 1);
}

#[actix_web::test]
async fn a_resolution_racing_the_banks_decision_ends_in_one_outcome() {
    let m = Market::open().await;
    let cases = [
        ("lost", "release_to_expert"),
        ("lost", "refund_company"),
        ("won", "resolve_favor_expert"),
        ("won", "resolve_favor_company"),
    ];
    let orders = ["together", "decision_first", "bank_first"];
    let runs = orders
        .into_iter()
        .flat_map(|order| cases.into_iter().map(move |case| (order, case)));
    for (round, (order, (outcome, action))) in runs.enumerate() {
        let d = deal(&m, &format!("race{round}"), [40.0, 30.0, 30.0]).await;
        connect(&m, &d.expert).await;
        let held = fund(&m, &d.company, d.first_payment).await;
        let intent = held["processor_payment_intent_id"]
            .as_str()
            .unwrap()
            .to_owned();
        let cb = chargeback(&m, d.first_payment).await;
        let id = dispute_of(&m, d.project_id).await["id"].as_i64().unwrap();
        m.app
            .post_json(
                &format!("/api/sandbox/disputes/{cb}/update"),
                &j!({"status": "under_review"}),
            )
            .await;
        all_applied(&m).await;

        let (closed, decided) = match order {
            "together" => tokio::join!(close(&m, &cb, outcome), resolve(&m, id, action)),
            "decision_first" => {
                let decided = resolve(&m, id, action).await;
                (close(&m, &cb, outcome).await, decided)
            }
            _ => {
                let closed = close(&m, &cb, outcome).await;
                all_applied(&m).await;
                (closed, resolve(&m, id, action).await)
            }
        };
        assert_eq!(closed.status(), StatusCode::OK);
        let decided_status = decided.status();
        let decided_body = json(decided).await;
        all_applied(&m).await;
        let _ = m.app.state.outbox.trigger().await;

        let y = payment(&m, d.first_payment).await;
        let ours = dispute_of(&m, d.project_id).await;
        let ledger = sandbox_ledger(&m).await;
        let at_processor = intent_in(&ledger, &intent);
        let transfers = transfers_of(&ledger, d.first_payment);
        if outcome == "lost" {
            assert_eq!(ours["status"], "resolved", "{order}: decided by the bank");
            // The bank decides; the administrator is refused whichever came first.
            assert_eq!(decided_status, StatusCode::CONFLICT, "{decided_body}");
            assert!(
                [
                    "CHARGEBACK_OPEN",
                    "CHARGEBACK_CLOSING",
                    "DISPUTE_NOT_ACTIVE"
                ]
                .contains(&code(&decided_body)),
                "{decided_body}"
            );
            assert_eq!(y["status"], "refunded");
            assert_eq!(ours["resolution_action"], "refund_company");
            assert_eq!(at_processor["captures"], 0);
            assert!(transfers.is_empty());
        } else {
            // Refused while the bank was still deciding: decided again afterwards.
            if decided_status != StatusCode::OK {
                assert_eq!(code(&decided_body), "CHARGEBACK_OPEN", "{decided_body}");
                assert_eq!(y["status"], "disputed");
                resolved(&m, &d, id, action).await;
            }
            let ours = dispute_of(&m, d.project_id).await;
            assert_eq!(ours["status"], "resolved");
            assert_eq!(ours["resolution_action"], action);
            let y = payment(&m, d.first_payment).await;
            let ledger = sandbox_ledger(&m).await;
            let at_processor = intent_in(&ledger, &intent);
            let transfers = transfers_of(&ledger, d.first_payment);
            if action.contains("expert") {
                assert_eq!(y["status"], "released");
                assert_eq!(at_processor["captures"], 1);
                assert_eq!(transfers.len(), 1);
            } else {
                assert_eq!(y["status"], "refunded");
                assert_eq!(at_processor["captures"], 0);
                assert!(transfers.is_empty());
            }
        }
    }
}

#[actix_web::test]
async fn two_decisions_at_once_decide_once() {
    let m = Market::open().await;
    for round in 0..3 {
        let d = deal(&m, &format!("twodec{round}"), [40.0, 30.0, 30.0]).await;
        connect(&m, &d.expert).await;
        let held = fund(&m, &d.company, d.first_payment).await;
        let intent = held["processor_payment_intent_id"]
            .as_str()
            .unwrap()
            .to_owned();
        let id = company_raises(&m, &d).await;
        let (a, b) = tokio::join!(
            resolve(&m, id, "release_to_expert"),
            resolve(&m, id, "refund_company")
        );
        let (a_status, b_status) = (a.status(), b.status());
        let mut statuses = [a_status, b_status];
        statuses.sort();
        assert_eq!(statuses, [StatusCode::OK, StatusCode::CONFLICT]);
        let (winner, loser) = if a_status == StatusCode::OK {
            ("release_to_expert", b)
        } else {
            ("refund_company", a)
        };
        assert_eq!(code(&json(loser).await), "DISPUTE_NOT_ACTIVE");
        let ours = dispute_of(&m, d.project_id).await;
        assert_eq!(ours["resolution_action"], winner);
        let y = payment(&m, d.first_payment).await;
        let ledger = sandbox_ledger(&m).await;
        let at_processor = intent_in(&ledger, &intent);
        let transfers = transfers_of(&ledger, d.first_payment);
        if winner == "release_to_expert" {
            assert_eq!(y["status"], "released");
            assert_eq!(
                (at_processor["captures"].as_i64(), transfers.len()),
                (Some(1), 1)
            );
        } else {
            assert_eq!(y["status"], "refunded");
            assert_eq!(
                (at_processor["captures"].as_i64(), transfers.len()),
                (Some(0), 0)
            );
        }
        assert_eq!(dispute_lines(&m, d.project_id).await, 2);
    }
}

#[actix_web::test]
async fn two_mediations_at_once_take_the_dispute_up_once() {
    let m = Market::open().await;
    let d = deal(&m, "twomed", [10.0, 10.0, 10.0]).await;
    let id = company_raises(&m, &d).await;
    let path = format!("/api/admin/disputes/{id}/mediate");
    let (a, b) = tokio::join!(
        admin_put(&m, &path, j!({"notes": "First mediator takes it up."})),
        admin_put(&m, &path, j!({"notes": "Second mediator takes it up."}))
    );
    let mut statuses = [a.status(), b.status()];
    statuses.sort();
    assert_eq!(statuses, [StatusCode::OK, StatusCode::CONFLICT]);
    assert_eq!(dispute_of(&m, d.project_id).await["status"], "in_review");
    assert_eq!(
        dispute_lines(&m, d.project_id).await,
        2,
        "one mediation line"
    );
}
