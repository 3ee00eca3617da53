//! The sandbox's rules, on the state directly and through the HTTP protocol with the real
//! client.

use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::state::{Operation, State};
use super::{FailureSpec, Sandbox, SandboxConfig, SandboxHandle};
use crate::clock::Clock;
use crate::config::Secret;
use crate::integrations::processor::form::FormParams;
use crate::integrations::processor::webhook::{self, SIGNATURE_HEADER};
use crate::integrations::processor::{
    AccountLinkType, CreateAccount, CreateAccountLink, CreatePaymentIntent, CreateRefund,
    CreateTransfer, CreateTransferReversal, ProcessorClient, ProcessorError, RefundTarget,
};

fn params(body: &str) -> FormParams {
    FormParams::parse(body.as_bytes())
}

fn state() -> State {
    let mut state = State::new(Clock::system(), "http://sandbox.test".into());
    state.begin_request(None, false);
    state
}

fn event_types(state: &State) -> Vec<String> {
    state.events.iter().map(|e| e.kind.clone()).collect()
}

/// A manual-capture intent of `amount`, authorised with `pm_card_visa`.
fn authorised_intent(state: &mut State, amount: i64) -> String {
    let intent = state
        .create_payment_intent(&params(&format!(
            "amount={amount}&currency=EUR&capture_method=manual&metadata[payment_id]=7"
        )))
        .unwrap();
    let id = intent["id"].as_str().unwrap().to_owned();
    state.confirm_intent(&id, Some("pm_card_visa")).unwrap();
    id
}

fn account(state: &mut State) -> String {
    let account = state
        .create_account(&params("type=express&email=e%40x.test"))
        .unwrap();
    account["id"].as_str().unwrap().to_owned()
}

#[test]
fn intents_authorise_then_capture_exactly_once() {
    let mut s = state();
    let created = s
        .create_payment_intent(&params("amount=15000&currency=EUR&capture_method=manual"))
        .unwrap();
    assert_eq!(created["status"], "requires_payment_method");
    assert_eq!(created["currency"], "eur");
    let id = created["id"].as_str().unwrap().to_owned();
    assert!(
        created["client_secret"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{id}_secret_"))
    );

    s.confirm_intent(&id, Some("pm_card_visa")).unwrap();
    let intent = s.intent_json(&id);
    assert_eq!(intent["status"], "requires_capture");
    assert_eq!(intent["amount_capturable"], 15000);
    let charge = s.charge_json(intent["latest_charge"].as_str().unwrap());
    assert_eq!(charge["captured"], false);
    let capture_before = charge["payment_method_details"]["card"]["capture_before"]
        .as_i64()
        .unwrap();
    assert_eq!(capture_before - s.now(), 7 * 24 * 3600);
    assert_eq!(
        event_types(&s),
        ["payment_intent.amount_capturable_updated"]
    );

    let captured = s.capture_intent(&id, &params("")).unwrap();
    assert_eq!(captured["status"], "succeeded");
    assert_eq!(captured["amount_received"], 15000);
    let again = s.capture_intent(&id, &params("")).unwrap_err();
    assert_eq!(
        again.code.as_deref(),
        Some("payment_intent_unexpected_state")
    );
    assert_eq!(again.status, 400);
    assert_eq!(
        event_types(&s),
        [
            "payment_intent.amount_capturable_updated",
            "charge.captured",
            "payment_intent.succeeded"
        ]
    );
    let ledger = s.ledger();
    assert_eq!(ledger["intents"][0]["captures"], 1);
    assert_eq!(ledger["intents"][0]["captured"], 15000);
    assert_eq!(ledger["intents"][0]["authorised"], 0);
    // Captured money is pending, not available.
    assert_eq!(ledger["balance"]["pending"], 15000);
    assert_eq!(ledger["balance"]["available"], 100_000_000);
}

#[test]
fn declines_and_authentication_are_outcomes_of_confirmation() {
    let mut s = state();
    let id = s
        .create_payment_intent(&params("amount=5000&currency=eur&capture_method=manual"))
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    s.confirm_intent(&id, Some("pm_card_chargeDeclined"))
        .unwrap();
    let intent = s.intent_json(&id);
    assert_eq!(intent["status"], "requires_payment_method");
    assert_eq!(intent["last_payment_error"]["code"], "card_declined");
    assert_eq!(intent["amount_capturable"], 0);

    s.confirm_intent(&id, Some("pm_card_authenticationRequired"))
        .unwrap();
    assert_eq!(s.intent_json(&id)["status"], "requires_action");
    // The customer authenticates with a card that authorises.
    s.confirm_intent(&id, Some("pm_card_visa")).unwrap();
    assert_eq!(s.intent_json(&id)["status"], "requires_capture");
    assert_eq!(
        event_types(&s),
        [
            "payment_intent.payment_failed",
            "payment_intent.requires_action",
            "payment_intent.amount_capturable_updated"
        ]
    );
    let unknown = s.confirm_intent(&id, Some("pm_nope")).unwrap_err();
    assert_eq!(
        unknown.code.as_deref(),
        Some("payment_intent_unexpected_state")
    );
}

#[test]
fn cancel_releases_the_authorisation_and_expiry_cancels_by_itself() {
    let mut s = state();
    let id = authorised_intent(&mut s, 1000);
    let cancelled = s.cancel_intent(&id, None).unwrap();
    assert_eq!(cancelled["status"], "canceled");
    assert_eq!(s.ledger()["intents"][0]["released"], 1000);
    assert!(s.cancel_intent(&id, None).is_err());
    assert!(s.capture_intent(&id, &params("")).is_err());

    let clock = Clock::system();
    let mut s = State::new(clock.clone(), "http://sandbox.test".into());
    s.begin_request(None, false);
    let id = authorised_intent(&mut s, 1000);
    clock.advance(chrono::Duration::days(8));
    s.begin_request(None, false);
    let expired = s.intent_json(&id);
    assert_eq!(expired["status"], "canceled");
    assert_eq!(expired["cancellation_reason"], "automatic");
    assert_eq!(
        event_types(&s).last().map(String::as_str),
        Some("payment_intent.canceled")
    );
}

#[test]
fn refunds_only_captured_money_and_never_more_than_is_left() {
    let mut s = state();
    let id = authorised_intent(&mut s, 10_000);
    let uncaptured = s
        .create_refund(&params(&format!("payment_intent={id}")))
        .unwrap_err();
    assert_eq!(
        uncaptured.code.as_deref(),
        Some("payment_intent_unexpected_state")
    );
    s.capture_intent(&id, &params("")).unwrap();

    let partial = s
        .create_refund(&params(&format!("payment_intent={id}&amount=4000")))
        .unwrap();
    assert_eq!(partial["amount"], 4000);
    let too_much = s
        .create_refund(&params(&format!("payment_intent={id}&amount=6001")))
        .unwrap_err();
    assert_eq!(too_much.code.as_deref(), Some("amount_too_large"));
    let rest = s
        .create_refund(&params(&format!("payment_intent={id}")))
        .unwrap();
    assert_eq!(rest["amount"], 6000);
    let again = s
        .create_refund(&params(&format!("payment_intent={id}")))
        .unwrap_err();
    assert_eq!(again.code.as_deref(), Some("charge_already_refunded"));
    let ledger = s.ledger();
    assert_eq!(ledger["intents"][0]["refunded"], 10_000);
    assert_eq!(ledger["refunds"].as_array().unwrap().len(), 2);
    assert_eq!(ledger["balance"]["pending"], 0);
    assert_eq!(
        event_types(&s)
            .iter()
            .filter(|t| *t == "charge.refunded")
            .count(),
        2
    );
    let charge = s.charge_json(s.intent_json(&id)["latest_charge"].as_str().unwrap());
    assert_eq!(charge["refunded"], true);
}

#[test]
fn transfers_draw_on_the_available_balance_and_reversals_give_it_back() {
    let mut s = state();
    let acct = account(&mut s);
    let missing = s
        .create_transfer(&params("amount=100&currency=eur&destination=acct_nope"))
        .unwrap_err();
    assert_eq!(missing.code.as_deref(), Some("resource_missing"));

    s.available = 1000;
    let short = s
        .create_transfer(&params(&format!(
            "amount=1001&currency=eur&destination={acct}"
        )))
        .unwrap_err();
    assert_eq!(short.code.as_deref(), Some("balance_insufficient"));
    assert_eq!(s.available, 1000);

    let transfer = s
        .create_transfer(&params(&format!(
            "amount=800&currency=eur&destination={acct}&metadata[payment_id]=3"
        )))
        .unwrap();
    assert_eq!(s.available, 200);
    let tr = transfer["id"].as_str().unwrap().to_owned();
    let reversal = s.create_reversal(&tr, &params("amount=300")).unwrap();
    assert_eq!(reversal["transfer"], tr.as_str());
    assert_eq!(s.available, 500);
    let over = s.create_reversal(&tr, &params("amount=501")).unwrap_err();
    assert_eq!(over.code.as_deref(), Some("amount_too_large"));
    s.create_reversal(&tr, &params("")).unwrap();
    assert_eq!(s.available, 1000);
    assert_eq!(s.transfer_json(&tr)["reversed"], true);
    assert!(s.create_reversal(&tr, &params("")).is_err());
    assert_eq!(
        event_types(&s),
        ["transfer.created", "transfer.reversed", "transfer.reversed"]
    );
    let ledger = s.ledger();
    assert_eq!(ledger["transfers"][0]["reversed"], 800);
    assert_eq!(ledger["transfers"][0]["metadata"]["payment_id"], "3");
}

#[test]
fn transfers_are_listed_by_group_newest_first() {
    let mut s = state();
    let acct = account(&mut s);
    s.available = 1000;
    let mut made = Vec::new();
    for group in ["project_1", "project_2", "project_1"] {
        let t = s
            .create_transfer(&params(&format!(
                "amount=10&currency=eur&destination={acct}&transfer_group={group}"
            )))
            .unwrap();
        made.push(t["id"].as_str().unwrap().to_owned());
    }
    let ids = |list: &Value| -> Vec<String> {
        list["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let of_one = s
        .list_transfers(&params("transfer_group=project_1"))
        .unwrap();
    let mut expected = vec![made[0].clone(), made[2].clone()];
    let mut listed = ids(&of_one);
    listed.sort();
    expected.sort();
    assert_eq!(listed, expected);
    assert_eq!(of_one["has_more"], false);
    let page = s.list_transfers(&params("limit=2")).unwrap();
    assert_eq!(ids(&page).len(), 2);
    assert_eq!(page["has_more"], true);
    let refused = s.list_transfers(&params("limit=101")).unwrap_err();
    assert_eq!(refused.code.as_deref(), Some("parameter_invalid_integer"));
}

#[test]
fn source_transaction_transfers_use_the_charge_even_while_pending() {
    let mut s = state();
    let acct = account(&mut s);
    let id = authorised_intent(&mut s, 5000);
    let charge = s.intent_json(&id)["latest_charge"]
        .as_str()
        .unwrap()
        .to_owned();
    let uncaptured = s
        .create_transfer(&params(&format!(
            "amount=100&currency=eur&destination={acct}&source_transaction={charge}"
        )))
        .unwrap_err();
    assert_eq!(uncaptured.status, 400);
    s.capture_intent(&id, &params("")).unwrap();
    s.available = 0;
    s.create_transfer(&params(&format!(
        "amount=4000&currency=eur&destination={acct}&source_transaction={charge}"
    )))
    .unwrap();
    assert_eq!((s.available, s.pending), (0, 1000));
    let beyond = s
        .create_transfer(&params(&format!(
            "amount=1001&currency=eur&destination={acct}&source_transaction={charge}"
        )))
        .unwrap_err();
    assert_eq!(beyond.code.as_deref(), Some("balance_insufficient"));
}

#[test]
fn account_update_links_need_completed_onboarding() {
    let mut s = state();
    let acct = account(&mut s);
    let link = |kind: &str| {
        params(&format!(
            "account={acct}&type={kind}&refresh_url=http%3A%2F%2Fr&return_url=http%3A%2F%2Fd"
        ))
    };
    let refused = s.create_account_link(&link("account_update")).unwrap_err();
    assert_eq!(refused.status, 400);
    assert_eq!(refused.param(), Some("type"));
    let onboarding = s.create_account_link(&link("account_onboarding")).unwrap();
    let url = onboarding["url"].as_str().unwrap();
    assert!(url.starts_with("http://sandbox.test/connect/onboarding/"));

    // Opening the link completes onboarding and goes to the return URL; once only.
    let token = url.rsplit('/').next().unwrap();
    assert_eq!(s.follow_link(token).as_deref(), Some("http://d"));
    assert_eq!(s.follow_link(token).as_deref(), Some("http://r"));
    let account = s.account_json(&acct);
    assert_eq!(account["details_submitted"], true);
    assert_eq!(account["charges_enabled"], true);
    assert_eq!(
        account["requirements"]["currently_due"],
        serde_json::json!([])
    );
    s.create_account_link(&link("account_update")).unwrap();
    let events = s.events.iter().collect::<Vec<_>>();
    assert_eq!(events[0].kind, "account.updated");
    assert_eq!(events[0].account.as_deref(), Some(acct.as_str()));
}

#[test]
fn payment_methods_attach_list_and_detach() {
    let mut s = state();
    let cus = s.create_customer(&params("email=c%40x.test")).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let pm = s
        .attach_payment_method("pm_card_visa", &params(&format!("customer={cus}")))
        .unwrap();
    assert_eq!(pm["card"]["last4"], "4242");
    assert_eq!(pm["customer"], cus.as_str());
    let pm_id = pm["id"].as_str().unwrap().to_owned();
    assert!(pm_id.starts_with("pm_") && pm_id != "pm_card_visa");
    let list = s
        .list_payment_methods(&params(&format!("customer={cus}&type=card")))
        .unwrap();
    assert_eq!(list["data"].as_array().unwrap().len(), 1);
    s.detach_payment_method(&pm_id).unwrap();
    assert!(s.detach_payment_method(&pm_id).is_err());
    let list = s
        .list_payment_methods(&params(&format!("customer={cus}")))
        .unwrap();
    assert!(list["data"].as_array().unwrap().is_empty());
}

fn rt_params() -> (Clock, SandboxConfig) {
    let clock = Clock::system();
    let config = SandboxConfig::new(
        Secret::new("sk_test_unit"),
        Secret::new("whsec_unit"),
        clock.clone(),
    );
    (clock, config)
}

async fn started() -> (SandboxHandle, ProcessorClient) {
    let (_, config) = rt_params();
    let sandbox = Sandbox::start(config).await.expect("sandbox starts");
    let client = ProcessorClient::new(sandbox.base_url(), Secret::new("sk_test_unit")).unwrap();
    (sandbox, client)
}

/// A receiver that verifies each delivery's signature and remembers (type, valid).
async fn receiver(secret: &'static str) -> (String, Arc<Mutex<Vec<(String, bool)>>>) {
    use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
    let seen: Arc<Mutex<Vec<(String, bool)>>> = Arc::default();
    let store = seen.clone();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = HttpServer::new(move || {
        let store = store.clone();
        App::new().route(
            "/hook",
            web::post().to(move |req: HttpRequest, body: web::Bytes| {
                let store = store.clone();
                async move {
                    let header = req
                        .headers()
                        .get(SIGNATURE_HEADER)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("");
                    let now = chrono::Utc::now().timestamp();
                    let valid = webhook::verify(header, &body, secret, now, 300).is_ok();
                    let event: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    let kind = event["type"].as_str().unwrap_or("").to_owned();
                    store.lock().unwrap().push((kind, valid));
                    HttpResponse::Ok().finish()
                }
            }),
        )
    })
    .workers(1)
    .disable_signals()
    .listen(listener)
    .unwrap()
    .run();
    tokio::spawn(server);
    (format!("http://127.0.0.1:{port}/hook"), seen)
}

#[actix_web::test]
async fn the_protocol_authenticates_and_replays_idempotent_requests() {
    let (sandbox, client) = started().await;
    let wrong = ProcessorClient::new(sandbox.base_url(), Secret::new("sk_test_wrong")).unwrap();
    let err = wrong.retrieve_balance().await.unwrap_err();
    assert_eq!(err.status(), Some(401));
    assert!(!err.to_string().contains("sk_test_wrong"));

    let params = CreatePaymentIntent {
        amount: 2500,
        currency: "EUR".into(),
        metadata: [("payment_id".to_owned(), "42".to_owned())].into(),
        ..Default::default()
    };
    let first = client
        .create_payment_intent(&params, "pi_42")
        .await
        .unwrap();
    let replay = client
        .create_payment_intent(&params, "pi_42")
        .await
        .unwrap();
    assert_eq!(first, replay);
    assert_eq!(first.capture_method.as_deref(), Some("manual"));
    assert_eq!(first.metadata["payment_id"], "42");
    assert_eq!(sandbox.ledger()["intents"].as_array().unwrap().len(), 1);
    // The same key for a different request is refused.
    let other = CreatePaymentIntent {
        amount: 2600,
        ..params.clone()
    };
    let err = client
        .create_payment_intent(&other, "pi_42")
        .await
        .unwrap_err();
    assert!(matches!(&err, ProcessorError::Api { kind, .. } if kind == "idempotency_error"));
    assert_eq!(sandbox.ledger()["calls"]["create_payment_intent"], 3);
    sandbox.stop().await;
}

#[actix_web::test]
async fn events_are_signed_delivered_in_order_and_recorded() {
    let (sandbox, client) = started().await;
    let (target, seen) = receiver("whsec_unit").await;

    // Before a target is set, events are kept as undelivered.
    let intent = client
        .create_payment_intent(
            &CreatePaymentIntent {
                amount: 9900,
                currency: "eur".into(),
                ..Default::default()
            },
            "k1",
        )
        .await
        .unwrap();
    sandbox
        .confirm_payment_intent(&intent.id, "pm_card_visa")
        .await
        .unwrap();
    let events = sandbox.events();
    assert_eq!(
        events[0].deliveries[0].error.as_deref(),
        Some("no webhook target set")
    );

    sandbox.set_webhook_target(target);
    client
        .capture_payment_intent(&intent.id, "k2")
        .await
        .unwrap();
    // Awaited before the capture answered: no waiting needed.
    assert_eq!(
        *seen.lock().unwrap(),
        [
            ("charge.captured".to_owned(), true),
            ("payment_intent.succeeded".to_owned(), true)
        ]
    );
    let resent = sandbox.resend_event(&events[0].id).await.unwrap();
    assert_eq!(resent["deliveries"].as_array().unwrap().len(), 2);
    assert_eq!(resent["deliveries"][1]["status"], 200);
    assert_eq!(
        seen.lock().unwrap().last().unwrap().0,
        "payment_intent.amount_capturable_updated"
    );
    let event = sandbox.events()[1].event();
    assert_eq!(event["api_version"], "2024-12-18.acacia");
    assert_eq!(event["request"]["idempotency_key"], "k2");
    sandbox.stop().await;
}

#[actix_web::test]
async fn injected_failures_change_nothing_and_a_retry_with_the_same_key_succeeds() {
    let (sandbox, client) = started().await;
    let account = client
        .create_account(
            &CreateAccount {
                email: "x@example.com".into(),
                ..Default::default()
            },
            "acct_1",
        )
        .await
        .unwrap();
    sandbox
        .inject_failure(FailureSpec {
            operation: Operation::Transfer,
            count: 1,
            status: Some(503),
            code: None,
        })
        .await
        .unwrap();
    let params = CreateTransfer {
        amount: 700,
        currency: "eur".into(),
        destination: account.id.clone(),
        ..Default::default()
    };
    let err = client.create_transfer(&params, "tr_1").await.unwrap_err();
    assert!(err.is_retryable());
    assert!(sandbox.ledger()["transfers"].as_array().unwrap().is_empty());
    let transfer = client.create_transfer(&params, "tr_1").await.unwrap();
    assert_eq!(transfer.amount, 700);
    assert_eq!(
        client
            .retrieve_transfer(&transfer.id)
            .await
            .unwrap()
            .destination,
        Some(account.id.clone())
    );

    let reversal = client
        .create_transfer_reversal(&transfer.id, &CreateTransferReversal::default(), "rv_1")
        .await
        .unwrap();
    assert_eq!(reversal.amount, 700);
    let refund = client
        .create_refund(
            &CreateRefund {
                target: RefundTarget::PaymentIntent("pi_missing".into()),
                amount: None,
                reason: None,
                metadata: Default::default(),
            },
            "re_1",
        )
        .await
        .unwrap_err();
    assert_eq!(refund.code(), Some("resource_missing"));
    let link = client
        .create_account_link(
            &CreateAccountLink {
                account: account.id.clone(),
                kind: AccountLinkType::Update,
                refresh_url: "http://r".into(),
                return_url: "http://d".into(),
            },
            "link_1",
        )
        .await
        .unwrap_err();
    assert_eq!(link.status(), Some(400));
    sandbox.stop().await;
}

#[test]
fn chargebacks_withdraw_money_and_a_lost_one_counts_as_refunded() {
    use super::{DisputeOutcome, DisputeUpdate};
    let mut s = state();
    let id = authorised_intent(&mut s, 3000);
    s.capture_intent(&id, &params("")).unwrap();
    let charge = s.intent_json(&id)["latest_charge"]
        .as_str()
        .unwrap()
        .to_owned();
    let dispute = s.dispute_charge(&charge, "fraudulent").unwrap();
    assert_eq!(dispute["status"], "needs_response");
    assert_eq!(dispute["payment_intent"], id.as_str());
    assert_eq!(dispute["evidence_details"]["has_evidence"], false);
    assert!(dispute["evidence_details"]["due_by"].as_i64().unwrap() > s.now());
    assert_eq!(s.available, 100_000_000 - 3000);
    assert_eq!(
        s.dispute_charge(&charge, "fraudulent")
            .unwrap_err()
            .code
            .as_deref(),
        Some("charge_disputed")
    );
    let refund = s
        .create_refund(&params(&format!("charge={charge}")))
        .unwrap_err();
    assert_eq!(refund.code.as_deref(), Some("charge_disputed"));

    let dp = dispute["id"].as_str().unwrap().to_owned();
    let updated = s.update_dispute(&dp, DisputeUpdate::UnderReview).unwrap();
    assert_eq!(updated["status"], "under_review");
    assert_eq!(updated["evidence_details"]["submission_count"], 1);
    s.close_dispute(&dp, DisputeOutcome::Lost).unwrap();
    assert!(s.close_dispute(&dp, DisputeOutcome::Won).is_err());
    assert_eq!(s.available, 100_000_000 - 3000);
    let ledger = s.ledger();
    assert_eq!(ledger["intents"][0]["refunded"], 3000);
    assert_eq!(ledger["intents"][0]["dispute_lost"], 3000);
    assert_eq!(ledger["disputes"][0]["status"], "lost");
    assert_eq!(
        event_types(&s)[3..],
        [
            "charge.dispute.created",
            "charge.dispute.updated",
            "charge.dispute.closed"
        ]
    );
    let updated_event = s.events.iter().nth(4).unwrap().event();
    assert_eq!(
        updated_event["data"]["previous_attributes"]["status"],
        "needs_response"
    );

    // An authorisation not yet captured can be disputed too; winning moves no money.
    let held = authorised_intent(&mut s, 2000);
    let charge = s.intent_json(&held)["latest_charge"]
        .as_str()
        .unwrap()
        .to_owned();
    let before = s.available;
    let dp = s.dispute_charge(&charge, "general").unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    s.close_dispute(&dp, DisputeOutcome::Won).unwrap();
    assert_eq!(s.available, before);
}

#[test]
fn failed_transfers_return_their_money_and_payouts_carry_the_account() {
    use super::PayoutOutcome;
    let mut s = state();
    let acct = account(&mut s);
    let tr = s
        .create_transfer(&params(&format!(
            "amount=1500&currency=eur&destination={acct}"
        )))
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    s.create_reversal(&tr, &params("amount=500")).unwrap();
    assert_eq!(s.available, 100_000_000 - 1000);
    s.fail_transfer(&tr).unwrap();
    assert_eq!(s.available, 100_000_000);
    assert!(s.fail_transfer(&tr).is_err());
    assert!(s.create_reversal(&tr, &params("")).is_err());
    assert_eq!(s.ledger()["transfers"][0]["failed"], true);

    let payout = s.payout(&acct, 900, PayoutOutcome::Failed).unwrap();
    assert_eq!(payout["status"], "failed");
    assert_eq!(payout["failure_code"], "could_not_process");
    let last = s.events.iter().last().unwrap();
    assert_eq!(last.kind, "payout.failed");
    assert_eq!(last.account.as_deref(), Some(acct.as_str()));
    assert_eq!(last.event()["account"], acct.as_str());
    assert_eq!(
        s.payout("acct_missing", 1, PayoutOutcome::Paid)
            .unwrap_err()
            .status,
        404
    );
}
