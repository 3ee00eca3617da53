//! The processor adapter against its sandbox: the client obtained from the running service,
//! the `/api/sandbox/*` controls, signed events and the ledger.

use serde_json::{Value, json};

use crate::helpers::{TestApp, json, spawn_app, spawn_app_with};
use marketplace::integrations::processor::types::PaymentIntent;
use marketplace::integrations::processor::webhook;
use marketplace::integrations::processor::{
    AccountLinkType, CreateAccount, CreateAccountLink, CreatePaymentIntent, CreateTransfer,
    CreateTransferReversal, ProcessorClient,
};

fn client(app: &TestApp) -> &ProcessorClient {
    &app.state.processor.client
}

async fn control(app: &TestApp, path: &str, body: Value) -> (u16, Value) {
    let response = app.post_json(path, &body).await;
    let status = response.status().as_u16();
    (status, json(response).await)
}

async fn ledger(app: &TestApp) -> Value {
    let response = app.get("/api/sandbox/ledger").await;
    assert_eq!(response.status(), 200);
    json(response).await
}

async fn events(app: &TestApp) -> Vec<Value> {
    let response = app.get("/api/sandbox/events").await;
    assert_eq!(response.status(), 200);
    json(response).await.as_array().cloned().unwrap_or_default()
}

async fn event_types(app: &TestApp) -> Vec<String> {
    events(app)
        .await
        .iter()
        .map(|e| e["type"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// A manual-capture intent of `amount` with `metadata[payment_id]`.
async fn intent(app: &TestApp, amount: i64, payment_id: &str) -> PaymentIntent {
    client(app)
        .create_payment_intent(
            &CreatePaymentIntent {
                amount,
                currency: "EUR".into(),
                metadata: [("payment_id".to_owned(), payment_id.to_owned())].into(),
                description: Some(format!("payment {payment_id}")),
                ..Default::default()
            },
            &format!("payment_{payment_id}_intent"),
        )
        .await
        .expect("intent created")
}

/// An intent confirmed with `pm_card_visa` through the sandbox control.
async fn authorised(app: &TestApp, amount: i64, payment_id: &str) -> PaymentIntent {
    let created = intent(app, amount, payment_id).await;
    let (status, body) = control(
        app,
        &format!("/api/sandbox/payment_intents/{}/confirm", created.id),
        json!({"payment_method": "pm_card_visa"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_value(body).expect("a payment intent")
}

async fn onboarded_account(app: &TestApp, email: &str) -> String {
    let account = client(app)
        .create_account(
            &CreateAccount {
                email: email.into(),
                ..Default::default()
            },
            &format!("account_{email}"),
        )
        .await
        .expect("account created");
    let (status, _) = control(
        app,
        &format!("/api/sandbox/accounts/{}/complete-onboarding", account.id),
        json!({}),
    )
    .await;
    assert_eq!(status, 200);
    account.id
}

#[actix_web::test]
async fn an_escrow_payment_authorises_captures_once_transfers_and_reverses() {
    let app = spawn_app().await;
    let processor = &app.state.processor;
    assert!(processor.sandbox.is_some());
    assert_eq!(processor.publishable_key, "pk_test_sandbox");
    let expert = onboarded_account(&app, "expert@example.com").await;

    let created = intent(&app, 150_000, "42").await;
    assert_eq!(created.status, "requires_payment_method");
    assert_eq!(created.capture_method.as_deref(), Some("manual"));
    assert_eq!(created.currency, "eur");

    let held = authorised(&app, 150_000, "42").await;
    assert_eq!(held.id, created.id, "same idempotency key, same intent");
    assert_eq!(held.status, "requires_capture");
    assert_eq!(held.amount_capturable, 150_000);
    let charge_id = held.latest_charge_id().expect("latest charge").to_owned();
    let charge = client(&app).retrieve_charge(&charge_id).await.unwrap();
    assert!(!charge.captured);
    assert!(charge.capture_before().expect("capture_before") > app.clock.now().timestamp());
    let expanded = client(&app)
        .retrieve_payment_intent_with_charge(&held.id)
        .await
        .unwrap();
    assert_eq!(
        expanded.latest_charge.unwrap().object().unwrap().id,
        charge_id
    );

    // The authorisation event is stored, signed with the webhook secret, and was delivered
    // (the service's receiver is not part of this module: any HTTP answer is recorded).
    let stored = events(&app).await;
    let event = stored
        .iter()
        .find(|e| e["type"] == "payment_intent.amount_capturable_updated")
        .expect("authorisation event");
    let payload = event["payload"].as_str().unwrap();
    let delivered: Value = serde_json::from_str(payload).unwrap();
    assert_eq!(delivered["data"]["object"]["id"], held.id.as_str());
    assert_eq!(delivered["data"]["object"]["status"], "requires_capture");
    assert_eq!(delivered["api_version"], "2024-12-18.acacia");
    let delivery = &event["deliveries"][0];
    assert!(delivery["status"].is_u64() || delivery["error"].is_string());
    webhook::verify(
        delivery["signature"].as_str().unwrap(),
        payload.as_bytes(),
        processor.webhook_secret.expose(),
        delivery["at"].as_i64().unwrap(),
        webhook::DEFAULT_TOLERANCE_SECS,
    )
    .expect("signature verifies");

    let captured = client(&app)
        .capture_payment_intent(&held.id, "payment_42_capture")
        .await
        .unwrap();
    assert_eq!(captured.status, "succeeded");
    assert_eq!(captured.amount_received, 150_000);
    let second = client(&app)
        .capture_payment_intent(&held.id, "payment_42_capture_again")
        .await
        .unwrap_err();
    assert_eq!(second.code(), Some("payment_intent_unexpected_state"));
    assert!(!second.is_retryable());

    let transfer = client(&app)
        .create_transfer(
            &CreateTransfer {
                amount: 135_000,
                currency: "eur".into(),
                destination: expert.clone(),
                transfer_group: Some("project_1".into()),
                metadata: [("payment_id".to_owned(), "42".to_owned())].into(),
                ..Default::default()
            },
            "transfer_42_1763700000",
        )
        .await
        .unwrap();
    let reversal = client(&app)
        .create_transfer_reversal(
            &transfer.id,
            &CreateTransferReversal {
                amount: Some(35_000),
                ..Default::default()
            },
            "reversal_42",
        )
        .await
        .unwrap();
    assert_eq!(reversal.transfer, transfer.id);

    let ledger = ledger(&app).await;
    let entry = &ledger["intents"][0];
    assert_eq!(entry["id"], held.id.as_str());
    assert_eq!(entry["captures"], 1);
    assert_eq!(entry["captured"], 150_000);
    assert_eq!(entry["authorised"], 0);
    assert_eq!(entry["refunded"], 0);
    assert_eq!(entry["metadata"]["payment_id"], "42");
    let moved = &ledger["transfers"][0];
    assert_eq!(moved["amount"], 135_000);
    assert_eq!(moved["destination"], expert.as_str());
    assert_eq!(moved["reversed"], 35_000);
    assert_eq!(moved["failed"], false);
    assert_eq!(ledger["balance"]["pending"], 150_000);
    assert_eq!(ledger["balance"]["available"], 100_000_000 - 100_000);
    assert_eq!(ledger["calls"]["capture"], 2);
    assert_eq!(
        event_types(&app).await,
        [
            "account.updated",
            "payment_intent.amount_capturable_updated",
            "charge.captured",
            "payment_intent.succeeded",
            "transfer.created",
            "transfer.reversed"
        ]
    );
    app.stop().await;
}

#[actix_web::test]
async fn a_replayed_idempotency_key_answers_the_same_object_and_changes_nothing() {
    let app = spawn_app().await;
    let expert = onboarded_account(&app, "replay@example.com").await;
    let held = authorised(&app, 20_000, "7").await;
    let first = client(&app)
        .capture_payment_intent(&held.id, "payment_7_capture")
        .await
        .unwrap();
    let params = CreateTransfer {
        amount: 18_000,
        currency: "eur".into(),
        destination: expert,
        ..Default::default()
    };
    let transfer = client(&app)
        .create_transfer(&params, "transfer_7_1")
        .await
        .unwrap();
    let before = ledger(&app).await;
    let before_events = events(&app).await.len();

    // A retry after a crash: same keys, same answers, nothing repeated.
    let again = client(&app)
        .capture_payment_intent(&held.id, "payment_7_capture")
        .await
        .unwrap();
    assert_eq!(again, first);
    let replayed = client(&app)
        .create_transfer(&params, "transfer_7_1")
        .await
        .unwrap();
    assert_eq!(replayed, transfer);

    let after = ledger(&app).await;
    for part in ["intents", "transfers", "refunds", "balance"] {
        assert_eq!(after[part], before[part], "{part} changed on replay");
    }
    assert_eq!(after["intents"][0]["captures"], 1);
    assert_eq!(events(&app).await.len(), before_events);
    app.stop().await;
}

#[actix_web::test]
async fn an_insufficient_balance_and_a_declined_card_are_reported_as_such() {
    let app = spawn_app().await;
    let expert = onboarded_account(&app, "short@example.com").await;
    let (status, balance) = control(&app, "/api/sandbox/balance", json!({"available": 100})).await;
    assert_eq!(status, 200);
    assert_eq!(balance["available"][0]["amount"], 100);
    let err = client(&app)
        .create_transfer(
            &CreateTransfer {
                amount: 500,
                currency: "eur".into(),
                destination: expert,
                ..Default::default()
            },
            "transfer_short",
        )
        .await
        .unwrap_err();
    assert!(err.is_balance_insufficient(), "{err}");
    assert!(
        ledger(&app).await["transfers"]
            .as_array()
            .unwrap()
            .is_empty()
    );

    let created = intent(&app, 9_000, "9").await;
    let (status, declined) = control(
        &app,
        &format!("/api/sandbox/payment_intents/{}/confirm", created.id),
        json!({"payment_method": "pm_card_chargeDeclined"}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(declined["status"], "requires_payment_method");
    assert_eq!(declined["last_payment_error"]["code"], "card_declined");
    let (_, action) = control(
        &app,
        &format!("/api/sandbox/payment_intents/{}/confirm", created.id),
        json!({"payment_method": "pm_card_authenticationRequired"}),
    )
    .await;
    assert_eq!(action["status"], "requires_action");
    let (status, cancelled) = control(
        &app,
        &format!("/api/sandbox/payment_intents/{}/cancel", created.id),
        json!({}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(cancelled["status"], "canceled");
    let (status, refused) = control(
        &app,
        &format!("/api/sandbox/payment_intents/{}/cancel", created.id),
        json!({}),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(refused["code"], "PAYMENT_INTENT_UNEXPECTED_STATE");
    let types = event_types(&app).await;
    assert_eq!(
        types[types.len() - 3..],
        [
            "payment_intent.payment_failed",
            "payment_intent.requires_action",
            "payment_intent.canceled"
        ]
    );
    app.stop().await;
}

#[actix_web::test]
async fn an_update_link_is_refused_until_onboarding_is_complete() {
    let app = spawn_app().await;
    let account = client(&app)
        .create_account(
            &CreateAccount {
                email: "new@example.com".into(),
                ..Default::default()
            },
            "account_new",
        )
        .await
        .unwrap();
    assert!(!account.details_submitted && !account.charges_enabled);
    let link = |kind| CreateAccountLink {
        account: account.id.clone(),
        kind,
        refresh_url: "http://frontend.test/connect/refresh".into(),
        return_url: "http://frontend.test/connect/done".into(),
    };
    let refused = client(&app)
        .create_account_link(&link(AccountLinkType::Update), "link_update_1")
        .await
        .unwrap_err();
    assert_eq!(refused.status(), Some(400));
    // The fallback.
    let onboarding = client(&app)
        .create_account_link(&link(AccountLinkType::Onboarding), "link_onboarding_1")
        .await
        .unwrap();
    assert!(onboarding.url.starts_with("http://127.0.0.1:"));
    assert!(onboarding.expires_at > onboarding.created);

    let (status, updated) = control(
        &app,
        &format!("/api/sandbox/accounts/{}/complete-onboarding", account.id),
        json!({}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(updated["details_submitted"], true);
    client(&app)
        .create_account_link(&link(AccountLinkType::Update), "link_update_2")
        .await
        .expect("update links once onboarded");

    let (_, restricted) = control(
        &app,
        &format!("/api/sandbox/accounts/{}/update", account.id),
        json!({"payouts_enabled": false}),
    )
    .await;
    assert_eq!(restricted["payouts_enabled"], false);
    let fetched = client(&app).retrieve_account(&account.id).await.unwrap();
    assert!(fetched.charges_enabled && !fetched.payouts_enabled);

    let (status, payout) = control(
        &app,
        "/api/sandbox/payouts",
        json!({"account": account.id, "amount": 5000, "outcome": "paid"}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(payout["status"], "paid");
    let stored = events(&app).await;
    let last: Value =
        serde_json::from_str(stored.last().unwrap()["payload"].as_str().unwrap()).unwrap();
    assert_eq!(last["type"], "payout.paid");
    assert_eq!(last["account"], account.id.as_str());
    assert_eq!(stored[1]["type"], "account.updated");
    assert_eq!(stored[1]["account"], account.id.as_str());
    let (status, missing) = control(
        &app,
        "/api/sandbox/payouts",
        json!({"account": "acct_nope", "amount": 5000, "outcome": "paid"}),
    )
    .await;
    assert_eq!(status, 404);
    assert_eq!(missing["code"], "NOT_FOUND");
    app.stop().await;
}

#[actix_web::test]
async fn a_chargeback_opens_moves_and_closes_with_its_events() {
    let app = spawn_app().await;
    let held = authorised(&app, 40_000, "11").await;
    client(&app)
        .capture_payment_intent(&held.id, "payment_11_capture")
        .await
        .unwrap();
    let charge = held.latest_charge_id().unwrap();

    let (status, dispute) = control(
        &app,
        &format!("/api/sandbox/charges/{charge}/dispute"),
        json!({"reason": "fraudulent"}),
    )
    .await;
    assert_eq!(status, 200, "{dispute}");
    assert_eq!(dispute["status"], "needs_response");
    assert_eq!(dispute["payment_intent"], held.id.as_str());
    let id = dispute["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("dp_"));
    let fetched = client(&app).retrieve_dispute(&id).await.unwrap();
    assert_eq!(fetched.evidence_details.unwrap().submission_count, 0);

    let (status, review) = control(
        &app,
        &format!("/api/sandbox/disputes/{id}/update"),
        json!({"status": "under_review"}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(review["status"], "under_review");
    let (status, invalid) = control(
        &app,
        &format!("/api/sandbox/disputes/{id}/update"),
        json!({"status": "won"}),
    )
    .await;
    assert_eq!(status, 422, "{invalid}");
    let (_, closed) = control(
        &app,
        &format!("/api/sandbox/disputes/{id}/close"),
        json!({"outcome": "lost"}),
    )
    .await;
    assert_eq!(closed["status"], "lost");

    let types = event_types(&app).await;
    assert_eq!(
        types[types.len() - 3..],
        [
            "charge.dispute.created",
            "charge.dispute.updated",
            "charge.dispute.closed"
        ]
    );
    let ledger = ledger(&app).await;
    assert_eq!(ledger["intents"][0]["refunded"], 40_000);
    assert_eq!(ledger["intents"][0]["dispute_lost"], 40_000);
    assert_eq!(ledger["disputes"][0]["status"], "lost");
    app.stop().await;
}

#[actix_web::test]
async fn injected_failures_leave_state_alone_until_the_retry() {
    let app = spawn_app().await;
    let held = authorised(&app, 12_000, "5").await;
    let (status, armed) = control(
        &app,
        "/api/sandbox/failures",
        json!({"operation": "capture", "count": 1}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(armed["status"], 500);
    let failed = client(&app)
        .capture_payment_intent(&held.id, "payment_5_capture")
        .await
        .unwrap_err();
    assert!(failed.is_retryable(), "{failed}");
    let still = client(&app)
        .retrieve_payment_intent(&held.id)
        .await
        .unwrap();
    assert_eq!(still.status, "requires_capture");

    let retried = client(&app)
        .capture_payment_intent(&held.id, "payment_5_capture")
        .await
        .unwrap();
    assert_eq!(retried.status, "succeeded");
    let ledger = ledger(&app).await;
    assert_eq!(ledger["calls"]["capture"], 2);
    assert_eq!(ledger["intents"][0]["captures"], 1);

    let (_, coded) = control(
        &app,
        "/api/sandbox/failures",
        json!({"operation": "transfer", "count": 1, "status": 400, "code": "balance_insufficient"}),
    )
    .await;
    assert_eq!(coded["code"], "balance_insufficient");
    let (status, unknown) = control(
        &app,
        "/api/sandbox/failures",
        json!({"operation": "teleport", "count": 1}),
    )
    .await;
    assert_eq!(status, 422, "{unknown}");

    // A stored event delivered twice keeps its id and body.
    let first = events(&app).await[0].clone();
    let id = first["id"].as_str().unwrap();
    let response = app
        .client
        .post(app.url(&format!("/api/sandbox/events/{id}/resend")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let resent = json(response).await;
    assert_eq!(resent["payload"], first["payload"]);
    assert_eq!(resent["deliveries"].as_array().unwrap().len(), 2);
    let missing = app
        .client
        .post(app.url("/api/sandbox/events/evt_nope/resend"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    app.stop().await;
}

#[actix_web::test]
async fn with_a_real_processor_configured_the_sandbox_controls_are_not_found() {
    let app = spawn_app_with(&[
        ("PROCESSOR_SECRET_KEY", "sk_test_configured"),
        ("PROCESSOR_WEBHOOK_SECRET", "whsec_configured"),
        ("PROCESSOR_PUBLISHABLE_KEY", "pk_test_configured"),
        ("PROCESSOR_API_BASE", "http://127.0.0.1:9"),
    ])
    .await;
    assert!(app.state.processor.sandbox.is_none());
    assert_eq!(app.state.processor.client.base_url(), "http://127.0.0.1:9");
    assert_eq!(app.state.processor.publishable_key, "pk_test_configured");
    for path in ["/api/sandbox/ledger", "/api/sandbox/events"] {
        let response = app.get(path).await;
        assert_eq!(response.status(), 404, "{path}");
        let body = json(response).await;
        assert_eq!(body["code"], "NOT_FOUND");
        assert!(body["detail"].is_string());
    }
    let (status, body) = control(&app, "/api/sandbox/balance", json!({"available": 1})).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("NOT_FOUND")));
    // Nothing listens on the configured base: a network error, retryable, without the key.
    let err = app
        .state
        .processor
        .client
        .retrieve_balance()
        .await
        .unwrap_err();
    assert!(err.is_retryable());
    assert!(!err.to_string().contains("sk_test_configured"));
    app.stop().await;
}
