//! Projects and proposals: the creation checks in order, validation, the applying rules,
//! the milestone plan, revisions, selection in the project actor (and a race on it), the
//! undoing of a selection, visibility and the expert's dashboard.

use crate::helpers::{json, register};
use crate::market::{Market, code, wait_notification};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json as j};

fn project_body() -> Value {
    j!({"title": "Data platform", "description": "Build it", "budget": 1500.5,
        "deadline": "2099-01-01T00:00:00", "skills_required": ["Rust"], "project_type": "curated"})
}

#[actix_web::test]
async fn creation_checks_run_in_the_specified_order() {
    let m = Market::open().await;
    let create = |a| {
        let m = &m;
        async move {
            let r = m
                .send(a, Method::POST, "/api/projects/", Some(project_body()))
                .await;
            let status = r.status();
            (status, json(r).await)
        }
    };

    // (1) e-mail not verified.
    let company = register(&m.app, "acme", &["empresa"]).await;
    let (status, body) = create(&company).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::FORBIDDEN, "EMAIL_NOT_VERIFIED")
    );

    // (2) no company profile.
    m.confirm_email(&company).await;
    let (status, body) = create(&company).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::FORBIDDEN, "PROFILE_REQUIRED")
    );

    // (3) profile not verified.
    let response = m
        .send(
            &company,
            Method::POST,
            "/api/profiles/",
            Some(j!({"profile_type": "empresa", "company_name": "Acme SL"})),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let (status, body) = create(&company).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::FORBIDDEN, "PROFILE_NOT_VERIFIED")
    );

    // (4) first project without fiscal data: 400 and a FISCAL_DATA_REQUIRED notification.
    let response = m
        .as_admin(
            Method::PUT,
            &format!("/api/admin/users/{}/verify", company.id),
            Some(&j!({})),
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let (status, body) = create(&company).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::BAD_REQUEST, "FISCAL_DATA_REQUIRED")
    );
    wait_notification(&m.app, company.id, "FISCAL_DATA_REQUIRED").await;

    // (5) the deadline: not ISO, then in the past.
    let profile_id = m
        .count("SELECT id FROM profiles WHERE user_id = $1", company.id)
        .await;
    let response = m
        .send(
            &company,
            Method::PUT,
            &format!("/api/profiles/{profile_id}/fiscal-data"),
            Some(serde_json::from_str(crate::market::FISCAL).unwrap()),
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    for deadline in ["next week", "2001-01-01T00:00:00"] {
        let mut body = project_body();
        body["deadline"] = j!(deadline);
        let r = m
            .send(&company, Method::POST, "/api/projects/", Some(body))
            .await;
        assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(json(r).await["errors"][0]["field"], "deadline");
    }
    assert_eq!(
        m.count(
            "SELECT COUNT(*) FROM projects WHERE company_id = $1",
            company.id
        )
        .await,
        0
    );

    // All checks pass: a draft.
    let (status, body) = create(&company).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["status"], "draft");
    assert_eq!(body["budget"], 1500.5);
    assert_eq!(body["validation_status"], Value::Null);

    // An expert cannot create projects.
    let expert = m.expert("ana").await;
    let (status, _) = create(&expert).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

#[actix_web::test]
async fn publication_goes_through_validation_and_tells_everyone() {
    let m = Market::open().await;
    let company = m.company("acme").await;
    let mut body = project_body();
    body["status"] = j!("pending_publication");
    let project = m.create_project(&company, body).await;
    let id = project["id"].as_i64().unwrap();
    assert_eq!(project["status"], "pending_publication");
    assert_eq!(project["validation_status"], "pending");
    assert!(project["submitted_at"].is_string());
    wait_notification(&m.app, m.admin_id, "project_pending_publication").await;

    // Only administrators validate; rejection needs notes and returns to draft.
    let r = m
        .send(
            &company,
            Method::POST,
            &format!("/api/projects/{id}/validate"),
            Some(j!({"approved": true})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let r = m
        .as_admin(
            Method::POST,
            &format!("/api/projects/{id}/validate"),
            Some(&j!({"approved": false})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let r = m
        .as_admin(
            Method::POST,
            &format!("/api/projects/{id}/validate"),
            Some(&j!({"approved": false, "notes": "Add a budget breakdown"})),
        )
        .await;
    let rejected = json(r).await;
    assert_eq!(rejected["status"], "draft");
    assert_eq!(rejected["validation_status"], "rejected");
    wait_notification(&m.app, company.id, "project_rejected").await;
    let mails = m.app.mails_about(&company.email, "needs changes").await;
    assert!(
        mails
            .iter()
            .any(|mail| mail.text.contains("Add a budget breakdown"))
    );

    // Submit again; a second submit is a conflict; approval publishes it.
    let r = m
        .send(
            &company,
            Method::POST,
            &format!("/api/projects/{id}/submit"),
            None,
        )
        .await;
    assert_eq!(json(r).await["status"], "pending_publication");
    let r = m
        .send(
            &company,
            Method::POST,
            &format!("/api/projects/{id}/submit"),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    let r = m
        .as_admin(
            Method::POST,
            &format!("/api/projects/{id}/validate"),
            Some(&j!({"approved": true})),
        )
        .await;
    let approved = json(r).await;
    assert_eq!(approved["status"], "published_curated");
    assert_eq!(approved["validation_status"], "approved");
    wait_notification(&m.app, company.id, "project_approved").await;
    m.app.mails_about(&company.email, "approved").await;

    // Public listing shows it to anyone.
    let r = m
        .app
        .client
        .get(m.app.url("/api/projects/public"))
        .send()
        .await
        .unwrap();
    let page = json(r).await;
    assert_eq!(page["total"], 1);
    assert_eq!(page["items"][0]["id"], id);
    assert!(page["items"][0].get("admin_notes").is_none());

    // Manual moves: published → bidding allowed, bidding → completed refused.
    let path = format!("/api/projects/{id}/status");
    let r = m
        .send(
            &company,
            Method::PATCH,
            &path,
            Some(j!({"status": "bidding"})),
        )
        .await;
    assert_eq!(json(r).await["status"], "bidding");
    let r = m
        .send(
            &company,
            Method::PATCH,
            &path,
            Some(j!({"status": "completed"})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    assert_eq!(code(&json(r).await), "INVALID_TRANSITION");
}

#[actix_web::test]
async fn applying_rules_per_state_and_the_milestone_plan() {
    let m = Market::open().await;
    let company = m.company("acme").await;
    let invited = m.expert("ana").await;
    let outsider = m.expert("bob").await;
    let id = m.published_project(&company, 0.6, &[&invited]).await;

    // Curated: invited experts only.
    let r = m.apply(&outsider, id, [0.1, 0.2, 0.3]).await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert_eq!(code(&json(r).await), "NOT_INVITED");

    // The plan: at least three milestones adding up exactly (0.1 + 0.2 + 0.3 = 0.6).
    let bad = j!({"proposed_budget": 0.61, "proposed_milestones": [
        {"title": "a", "amount": 0.1}, {"title": "b", "amount": 0.2}, {"title": "c", "amount": 0.3}]});
    let r = m
        .send(
            &invited,
            Method::POST,
            &format!("/api/projects/{id}/apply"),
            Some(bad),
        )
        .await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(json(r).await["errors"][0]["field"], "proposed_milestones");
    let two = j!({"proposed_budget": 0.3, "proposed_milestones": [
        {"title": "a", "amount": 0.1}, {"title": "b", "amount": 0.2}]});
    let r = m
        .send(
            &invited,
            Method::POST,
            &format!("/api/projects/{id}/apply"),
            Some(two),
        )
        .await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let r = m.apply(&invited, id, [0.1, 0.2, 0.3]).await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let application = json(r).await;
    assert_eq!(application["status"], "pending");
    assert_eq!(application["proposed_budget"], 0.6);
    assert_eq!(application["attempt_number"], 1);

    // One proposal per expert and project.
    let r = m.apply(&invited, id, [0.1, 0.2, 0.3]).await;
    assert_eq!(r.status(), StatusCode::CONFLICT);

    // The company hears of it by notification and e-mail.
    wait_notification(&m.app, company.id, "new_proposal").await;
    let mails = m.app.mails_about(&company.email, "New proposal for").await;
    assert!(mails.iter().any(|mail| mail.text.contains("0.60")));

    // Private: only the target expert; others do not even see the project.
    let private = m
        .create_project(&company, j!({"title": "Private", "budget": 30, "project_type": "private",
                                     "target_expert_id": invited.id, "status": "pending_publication"}))
        .await;
    let pid = private["id"].as_i64().unwrap();
    // Pending publication: the target is not invited, so not yet.
    let r = m.apply(&invited, pid, [10.0, 10.0, 10.0]).await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let r = m
        .as_admin(
            Method::POST,
            &format!("/api/projects/{pid}/validate"),
            Some(&j!({"approved": true})),
        )
        .await;
    assert_eq!(json(r).await["status"], "published_private");
    let r = m.apply(&outsider, pid, [10.0, 10.0, 10.0]).await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let r = m
        .send(
            &outsider,
            Method::GET,
            &format!("/api/projects/{pid}"),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let r = m.apply(&invited, pid, [10.0, 10.0, 10.0]).await;
    assert_eq!(r.status(), StatusCode::CREATED);

    // Pending publication with a formal invitation (a budget request) is open to that expert.
    let draft = m.create_project(&company, project_body()).await;
    let did = draft["id"].as_i64().unwrap();
    let r = m.apply(&outsider, did, [1.0, 1.0, 1.0]).await;
    assert_eq!(
        r.status(),
        StatusCode::NOT_FOUND,
        "a draft is invisible to experts"
    );
    let r = m
        .send(
            &company,
            Method::POST,
            &format!("/api/projects/{did}/request-budget"),
            Some(j!({"expert_id": outsider.id, "message": "Could you quote?"})),
        )
        .await;
    assert_eq!(json(r).await["status"], "pending_publication");
    wait_notification(&m.app, outsider.id, "expert_invited").await;
    let r = m.apply(&outsider, did, [1.0, 1.0, 1.0]).await;
    assert_eq!(r.status(), StatusCode::CREATED);

    // The legacy list counts as an invitation too.
    let legacy = m.create_project(&company, project_body()).await;
    let lid = legacy["id"].as_i64().unwrap();
    let r = m
        .send(
            &company,
            Method::PUT,
            &format!("/api/projects/{lid}"),
            Some(j!({"invited_experts": [outsider.id]})),
        )
        .await;
    assert_eq!(json(r).await["invited_experts"], j!([outsider.id]));
    let r = m
        .send(
            &company,
            Method::POST,
            &format!("/api/projects/{lid}/submit"),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let r = m.apply(&outsider, lid, [1.0, 1.0, 1.0]).await;
    assert_eq!(r.status(), StatusCode::CREATED);
}

#[actix_web::test]
async fn revisions_resubmissions_and_rejections() {
    let m = Market::open().await;
    let company = m.company("acme").await;
    let ana = m.expert("ana").await;
    let id = m.published_project(&company, 300.0, &[&ana]).await;
    let application = json(m.apply(&ana, id, [100.0, 100.0, 100.0]).await).await;
    let aid = application["id"].as_i64().unwrap();
    let base = format!("/api/projects/{id}/applications/{aid}");

    let resubmission = j!({"cover_letter": "Better", "proposed_budget": 400, "proposed_milestones": [
        {"title": "a", "amount": 100}, {"title": "b", "amount": 100}, {"title": "c", "amount": 200}]});
    let r = m
        .send(&ana, Method::PUT, &base, Some(resubmission.clone()))
        .await;
    assert_eq!(r.status(), StatusCode::CONFLICT, "only in needs_revision");

    let r = m
        .send(
            &ana,
            Method::POST,
            &format!("{base}/request-revision"),
            Some(j!({"feedback": "Cheaper"})),
        )
        .await;
    assert_eq!(
        r.status(),
        StatusCode::FORBIDDEN,
        "the company asks, not the expert"
    );
    let r = m
        .send(
            &company,
            Method::POST,
            &format!("{base}/request-revision"),
            Some(j!({"feedback": "More detail"})),
        )
        .await;
    let revised = json(r).await;
    assert_eq!(revised["status"], "needs_revision");
    assert_eq!(revised["feedback"], "More detail");
    assert!(revised["revision_requested_at"].is_string());
    wait_notification(&m.app, ana.id, "application_revision_requested").await;

    let r = m.send(&ana, Method::PUT, &base, Some(resubmission)).await;
    let resubmitted = json(r).await;
    assert_eq!(resubmitted["status"], "pending");
    assert_eq!(resubmitted["attempt_number"], 2);
    assert_eq!(resubmitted["feedback"], Value::Null);
    assert_eq!(resubmitted["proposed_budget"], 400.0);

    let r = m
        .send(&company, Method::POST, &format!("{base}/reject"), None)
        .await;
    assert_eq!(json(r).await["status"], "rejected");
    let r = m
        .send(&company, Method::POST, &format!("{base}/reject"), None)
        .await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    let r = m
        .send(
            &ana,
            Method::GET,
            &format!("/api/projects/{id}/my-application"),
            None,
        )
        .await;
    assert_eq!(json(r).await["status"], "rejected");
}

#[actix_web::test]
async fn selection_creates_the_plan_and_the_first_payment() {
    let m = Market::open().await;
    let company = m.company("acme").await;
    let ana = m.expert("ana").await;
    let bob = m.expert("bob").await;
    let newcomer = m.member("carl", "experto", false, true).await;

    // From pending_publication: 400 with an explanation.
    let mut body = project_body();
    body["status"] = j!("pending_publication");
    let pending = m.create_project(&company, body).await;
    let r = m
        .send(
            &company,
            Method::POST,
            &format!("/api/projects/{}/select/{}", pending["id"], ana.id),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(
        json(r).await["detail"]
            .as_str()
            .unwrap()
            .contains("published")
    );

    let id = m
        .published_project(&company, 600.0, &[&ana, &bob, &newcomer])
        .await;
    for e in [&ana, &bob, &newcomer] {
        assert_eq!(
            m.apply(e, id, [100.0, 200.0, 300.0]).await.status(),
            StatusCode::CREATED
        );
    }

    // The expert's first project needs their fiscal data.
    let r = m
        .send(
            &company,
            Method::POST,
            &format!("/api/projects/{id}/select/{}", newcomer.id),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert_eq!(code(&json(r).await), "FISCAL_DATA_REQUIRED");
    wait_notification(&m.app, newcomer.id, "FISCAL_DATA_REQUIRED").await;

    // Only the company selects.
    let r = m
        .send(
            &ana,
            Method::POST,
            &format!("/api/projects/{id}/select/{}", ana.id),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);

    let r = m
        .send(
            &company,
            Method::POST,
            &format!("/api/projects/{id}/select/{}", ana.id),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let s = json(r).await;
    assert_eq!(s["project"]["status"], "assigned");
    assert_eq!(s["project"]["expert_id"], ana.id);
    assert_eq!(s["application"]["status"], "accepted");
    let statuses: Vec<&str> = s["milestones"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["awaiting_payment", "pending", "pending"]);
    assert_eq!(s["payment"]["status"], "pending");
    assert_eq!(s["payment"]["payout_status"], "pending");
    assert_eq!(s["payment"]["amount"], 100.0);
    assert_eq!(s["payment"]["currency"], "eur");
    assert_eq!(s["payment"]["milestone_id"], s["milestones"][0]["id"]);
    // The payment intent exists at the processor: manual capture, lower-case currency,
    // minor units, waiting for the company's card.
    let intent_id = s["payment"]["processor_payment_intent_id"]
        .as_str()
        .expect("intent id")
        .to_owned();
    let r = m
        .app
        .client
        .get(m.app.url("/api/sandbox/ledger"))
        .send()
        .await
        .unwrap();
    let ledger = json(r).await;
    let intent = ledger["intents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["id"] == intent_id.as_str())
        .expect("intent in the ledger")
        .clone();
    assert_eq!(intent["amount"], 10000);
    assert_eq!(intent["currency"], "eur");
    assert_eq!(intent["status"], "requires_payment_method");
    assert_eq!(
        intent["metadata"]["payment_id"],
        s["payment"]["id"].to_string()
    );

    // The others are turned down; a second selection is a conflict.
    let r = m
        .send(
            &bob,
            Method::GET,
            &format!("/api/projects/{id}/my-application"),
            None,
        )
        .await;
    assert_eq!(json(r).await["status"], "rejected");
    let r = m
        .send(
            &company,
            Method::POST,
            &format!("/api/projects/{id}/select/{}", bob.id),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    wait_notification(&m.app, ana.id, "expert_selected").await;
    m.app
        .mails_about(&ana.email, "You have been selected")
        .await;

    // The project can no longer be edited or deleted.
    let r = m
        .send(
            &company,
            Method::PUT,
            &format!("/api/projects/{id}"),
            Some(j!({"title": "New"})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    let r = m
        .send(
            &company,
            Method::DELETE,
            &format!("/api/projects/{id}"),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::CONFLICT);

    // Cancelling the unfunded selection restores the proposals and fails the payment.
    let r = m
        .send(
            &company,
            Method::POST,
            &format!("/api/projects/{id}/selection/cancel"),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let project = json(r).await;
    assert_eq!(project["status"], "published_curated");
    assert_eq!(project["expert_id"], Value::Null);
    let r = m
        .send(
            &bob,
            Method::GET,
            &format!("/api/projects/{id}/my-application"),
            None,
        )
        .await;
    assert_eq!(json(r).await["status"], "pending");
    assert_eq!(
        m.count(
            "SELECT COUNT(*) FROM payments WHERE project_id = $1 AND status = 'failed'",
            id
        )
        .await,
        1
    );
    assert_eq!(
        m.count(
            "SELECT COUNT(*) FROM milestones WHERE project_id = $1 AND status = 'cancelled'",
            id
        )
        .await,
        3
    );

    let r = m
        .app
        .client
        .get(m.app.url("/api/sandbox/ledger"))
        .send()
        .await
        .unwrap();
    let ledger = json(r).await;
    let intent = ledger["intents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["id"] == intent_id.as_str())
        .unwrap()
        .clone();
    assert_eq!(
        intent["status"], "canceled",
        "the company's card can no longer be charged"
    );

    // A new selection builds a fresh plan after the cancelled one.
    let r = m
        .send(
            &company,
            Method::POST,
            &format!("/api/projects/{id}/select/{}", bob.id),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let s = json(r).await;
    assert_eq!(s["milestones"].as_array().unwrap().len(), 3);
    assert_eq!(s["milestones"][0]["position"], 4);

    // Once the company's card is authorised, the selection stands.
    let intent_id = s["payment"]["processor_payment_intent_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = m
        .app
        .client
        .post(
            m.app
                .url(&format!("/api/sandbox/payment_intents/{intent_id}/confirm")),
        )
        .json(&j!({"payment_method": "pm_card_visa"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let r = m
        .send(
            &company,
            Method::POST,
            &format!("/api/projects/{id}/selection/cancel"),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    assert_eq!(code(&json(r).await), "MONEY_AUTHORISED");
    // The selection stands: still assigned, or already under way if the authorisation's
    // webhook was applied first.
    assert_eq!(
        m.count(
            "SELECT COUNT(*) FROM projects WHERE id = $1 AND expert_id IS NOT NULL
             AND status IN ('assigned', 'in_progress')",
            id
        )
        .await,
        1
    );
}

#[actix_web::test]
async fn concurrent_selections_leave_exactly_one_of_everything() {
    let m = Market::open().await;
    let company = m.company("acme").await;
    let mut experts = Vec::new();
    for i in 0..6 {
        experts.push(m.expert(&format!("expert{i}")).await);
    }
    let refs: Vec<&crate::helpers::Account> = experts.iter().collect();
    let id = m.published_project(&company, 600.0, &refs).await;
    for e in &experts {
        assert_eq!(
            m.apply(e, id, [100.0, 200.0, 300.0]).await.status(),
            StatusCode::CREATED
        );
    }
    let paths: Vec<String> = experts
        .iter()
        .map(|e| format!("/api/projects/{id}/select/{}", e.id))
        .collect();
    let calls = paths
        .iter()
        .map(|path| m.send(&company, Method::POST, path, None));
    let statuses: Vec<StatusCode> = futures_util::future::join_all(calls)
        .await
        .into_iter()
        .map(|r| r.status())
        .collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == StatusCode::OK).count(),
        1,
        "{statuses:?}"
    );
    assert!(
        statuses
            .iter()
            .all(|s| *s == StatusCode::OK || *s == StatusCode::CONFLICT),
        "{statuses:?}"
    );
    assert_eq!(
        m.count(
            "SELECT COUNT(*) FROM applications WHERE project_id = $1 AND status = 'accepted'",
            id
        )
        .await,
        1
    );
    assert_eq!(
        m.count("SELECT COUNT(*) FROM milestones WHERE project_id = $1", id)
            .await,
        3
    );
    assert_eq!(
        m.count("SELECT COUNT(*) FROM payments WHERE project_id = $1", id)
            .await,
        1
    );
}

#[actix_web::test]
async fn nobody_reads_or_changes_what_is_not_theirs() {
    let m = Market::open().await;
    let acme = m.company("acme").await;
    let rival = m.company("rival").await;
    let ana = m.expert("ana").await;
    let bob = m.expert("bob").await;
    let id = m.published_project(&acme, 300.0, &[&ana, &bob]).await;
    let aid = json(m.apply(&ana, id, [100.0, 100.0, 100.0]).await).await["id"]
        .as_i64()
        .unwrap();
    m.apply(&bob, id, [100.0, 100.0, 100.0]).await;

    // Another company: public project visible, but its proposals and controls are not theirs.
    let r = m
        .send(
            &rival,
            Method::GET,
            &format!("/api/projects/{id}/applications"),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    for (method, path, body) in [
        (
            Method::PUT,
            format!("/api/projects/{id}"),
            Some(j!({"title": "Mine"})),
        ),
        (Method::DELETE, format!("/api/projects/{id}"), None),
        (
            Method::POST,
            format!("/api/projects/{id}/select/{}", ana.id),
            None,
        ),
        (
            Method::POST,
            format!("/api/projects/{id}/applications/{aid}/reject"),
            None,
        ),
        (
            Method::POST,
            format!("/api/projects/{id}/applications/{aid}/request-revision"),
            Some(j!({"feedback": "x"})),
        ),
    ] {
        let r = m.send(&rival, method.clone(), &path, body).await;
        assert_eq!(r.status(), StatusCode::FORBIDDEN, "{method} {path}");
    }

    // An expert cannot read the other proposals, nor resubmit someone else's.
    let r = m
        .send(
            &bob,
            Method::GET,
            &format!("/api/projects/{id}/applications"),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let r = m
        .send(
            &bob,
            Method::GET,
            &format!("/api/projects/{id}/my-application"),
            None,
        )
        .await;
    assert_ne!(json(r).await["id"], aid);

    // A private project of acme: invisible (404) to the rival and to other experts.
    let private = m
        .create_project(
            &acme,
            j!({"title": "Secret", "budget": 30, "project_type": "private",
                                   "target_expert_id": ana.id}),
        )
        .await;
    let pid = private["id"].as_i64().unwrap();
    for path in [
        format!("/api/projects/{pid}"),
        format!("/api/projects/{pid}/applications"),
    ] {
        for who in [&rival, &bob] {
            let r = m.send(who, Method::GET, &path, None).await;
            assert_eq!(r.status(), StatusCode::NOT_FOUND, "{path}");
        }
    }
    let r = m
        .send(
            &rival,
            Method::PUT,
            &format!("/api/projects/{pid}"),
            Some(j!({"title": "Mine"})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let r = m.send(&rival, Method::GET, "/api/projects/", None).await;
    let page = json(r).await;
    assert!(
        page["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["id"] != pid)
    );

    // The company and administrators see its proposals.
    let r = m
        .send(
            &acme,
            Method::GET,
            &format!("/api/projects/{id}/applications"),
            None,
        )
        .await;
    assert_eq!(json(r).await["total"], 2);
    let r = m
        .as_admin(
            Method::GET,
            &format!("/api/projects/{id}/applications"),
            None,
        )
        .await;
    assert_eq!(json(r).await["total"], 2);
}

#[actix_web::test]
async fn the_expert_dashboard_and_curation() {
    let m = Market::open().await;
    let company = m.company("acme").await;
    let ana = m.expert("ana").await;
    let bob = m.expert("bob").await;
    let id = m.published_project(&company, 300.0, &[&ana]).await;

    // Ana is invited, so the project is available to her; Bob sees nothing.
    let r = m
        .send(&ana, Method::GET, "/api/expert/available-projects", None)
        .await;
    assert_eq!(json(r).await["total"], 1);
    let r = m
        .send(&bob, Method::GET, "/api/expert/available-projects", None)
        .await;
    assert_eq!(json(r).await["total"], 0);
    let r = m
        .send(&ana, Method::GET, "/api/expert/invitations", None)
        .await;
    assert_eq!(json(r).await["items"][0]["id"], id);

    // Curation ranks verified experts with the skill; auto-curate invites them.
    let r = m
        .as_admin(
            Method::GET,
            &format!("/api/projects/{id}/curation-suggestions"),
            None,
        )
        .await;
    let suggestions = json(r).await;
    let ids: Vec<i64> = suggestions
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["expert_id"].as_i64().unwrap())
        .collect();
    assert!(
        ids.contains(&ana.id) && ids.contains(&bob.id),
        "{suggestions}"
    );
    assert!(suggestions[0]["score"].as_f64().unwrap() > 0.0);
    // Each suggestion shows the expert's whole profile and skills, though only the required
    // skill held (Rust of Rust and SQL) is scored.
    for s in suggestions.as_array().unwrap() {
        let mut skills: Vec<&str> = s["skills"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k.as_str().unwrap())
            .collect();
        skills.sort_unstable();
        assert_eq!(skills, ["Rust", "SQL"], "{s}");
        assert_eq!(s["matched_skills"], 1, "{s}");
        assert_eq!(s["score_parts"]["skills"], 50.0, "{s}");
    }
    let ana_suggested = suggestions
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["expert_id"] == ana.id)
        .unwrap();
    assert_eq!(ana_suggested["full_name"], "Expert ana");
    assert_eq!(ana_suggested["already_invited"], true);
    let r = m
        .as_admin(
            Method::POST,
            &format!("/api/projects/{id}/auto-curate"),
            Some(&j!({"limit": 5})),
        )
        .await;
    let curated = json(r).await;
    assert_eq!(
        curated["invited_expert_ids"],
        j!([bob.id]),
        "Ana was already invited"
    );
    let r = m
        .send(&bob, Method::GET, "/api/expert/available-projects", None)
        .await;
    assert_eq!(json(r).await["total"], 1);

    m.apply(&ana, id, [100.0, 100.0, 100.0]).await;
    let r = m
        .send(
            &company,
            Method::POST,
            &format!("/api/projects/{id}/select/{}", ana.id),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let r = m.send(&ana, Method::GET, "/api/expert/stats", None).await;
    let stats = json(r).await;
    assert_eq!(stats["applications"]["accepted"], 1);
    assert_eq!(stats["projects"]["total"], 1);
    assert_eq!(stats["projects"]["active"], 1);
    assert_eq!(stats["earnings"]["released"], 0.0);
    let r = m
        .send(&ana, Method::GET, "/api/expert/assigned-projects", None)
        .await;
    assert_eq!(json(r).await["items"][0]["status"], "assigned");
    let r = m
        .send(
            &ana,
            Method::GET,
            "/api/expert/applications?status=accepted",
            None,
        )
        .await;
    assert_eq!(json(r).await["total"], 1);
    let r = m
        .send(&company, Method::GET, "/api/expert/stats", None)
        .await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
}

/// Undoing a selection leaves the project open again but its payment on record: the history
/// is kept and the delete refused (on SQLite a `RESTRICT` refusal comes from a trigger, once
/// a 500 here).
#[actix_web::test]
async fn a_project_with_payment_records_is_not_deleted() {
    let m = Market::open().await;
    let company = m.company("acme").await;
    let ana = m.expert("ana").await;
    let id = m.published_project(&company, 300.0, &[&ana]).await;
    m.apply(&ana, id, [100.0, 100.0, 100.0]).await;
    let select = format!("/api/projects/{id}/select/{}", ana.id);
    let r = m.send(&company, Method::POST, &select, None).await;
    assert_eq!(r.status(), StatusCode::OK);
    // The milestone a payment was prepared for stays while the payment is on record.
    let milestone = m
        .count(
            "SELECT MIN(milestone_id) FROM payments WHERE project_id = $1",
            id,
        )
        .await;
    let r = m
        .send(
            &company,
            Method::DELETE,
            &format!("/api/milestones/{milestone}"),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    assert_eq!(code(&json(r).await), "INVALID_STATE");
    assert_eq!(
        m.count("SELECT COUNT(*) FROM milestones WHERE id = $1", milestone)
            .await,
        1
    );

    let cancel = format!("/api/projects/{id}/selection/cancel");
    let r = m.send(&company, Method::POST, &cancel, None).await;
    assert_eq!(r.status(), StatusCode::OK);

    let path = format!("/api/projects/{id}");
    let r = m.send(&company, Method::DELETE, &path, None).await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    assert_eq!(code(&json(r).await), "PROJECT_HAS_PAYMENTS");
    let r = m.as_admin(Method::DELETE, &path, None).await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    assert_eq!(code(&json(r).await), "PROJECT_HAS_PAYMENTS");
    let sql = "SELECT COUNT(*) FROM projects WHERE id = $1";
    assert_eq!(m.count(sql, id).await, 1);
    let sql = "SELECT COUNT(*) FROM milestones WHERE project_id = $1";
    assert!(
        m.count(sql, id).await > 0,
        "the delete's cascade was rolled back"
    );
}

#[actix_web::test]
async fn concurrent_cancellations_undo_a_selection_once() {
    let m = Market::open().await;
    let company = m.company("acme").await;
    let ana = m.expert("ana").await;
    let id = m.published_project(&company, 300.0, &[&ana]).await;
    m.apply(&ana, id, [100.0, 100.0, 100.0]).await;
    let r = m
        .send(
            &company,
            Method::POST,
            &format!("/api/projects/{id}/select/{}", ana.id),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let path = format!("/api/projects/{id}/selection/cancel");
    let calls = (0..4).map(|_| m.send(&company, Method::POST, &path, None));
    let statuses: Vec<StatusCode> = futures_util::future::join_all(calls)
        .await
        .into_iter()
        .map(|r| r.status())
        .collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == StatusCode::OK).count(),
        1,
        "{statuses:?}"
    );
    assert!(
        statuses
            .iter()
            .all(|s| *s == StatusCode::OK || *s == StatusCode::CONFLICT),
        "{statuses:?}"
    );
    assert_eq!(
        m.count(
            "SELECT COUNT(*) FROM payments WHERE project_id = $1 AND status = 'failed'",
            id
        )
        .await,
        1
    );
    assert_eq!(
        m.count(
            "SELECT COUNT(*) FROM applications WHERE project_id = $1 AND status = 'pending'",
            id
        )
        .await,
        1
    );
}
