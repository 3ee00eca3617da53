//! Commission configuration, the expert's connected payout account and a company's saved
//! cards, against the processor sandbox: status codes, bodies, the database and the ledger.

use crate::helpers::{Account, PASSWORD, json, login_secure_session, register};
use crate::market::{Market, code, wait_notification};
use marketplace::integrations::processor::types::Account as ProcessorAccount;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json as j};

async fn body_of(r: reqwest::Response) -> (StatusCode, Value) {
    let status = r.status();
    let text = r.text().await.expect("body");
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

async fn admin(m: &Market, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
    body_of(m.as_admin(method, path, body.as_ref()).await).await
}

async fn call(
    m: &Market,
    who: &Account,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    body_of(m.send(who, method, path, body).await).await
}

/// Stored rates in basis points, Global, Pro, Enterprise.
async fn stored_rates(m: &Market) -> Vec<i64> {
    let mut conn = m.app.db.conn().await.unwrap();
    marketplace::on_exec!(conn.exec(), c => sqlx::query_scalar::<_, i64>(
        "SELECT rate_bp FROM commission_config
         ORDER BY CASE level WHEN 'Global' THEN 0 WHEN 'Pro' THEN 1 ELSE 2 END")
        .fetch_all(c).await)
    .unwrap()
}

/// The processor columns of a user's profile of `kind`.
#[derive(Debug, sqlx::FromRow)]
struct Row {
    processor_connect_account_id: Option<String>,
    processor_connect_status: Option<String>,
    processor_charges_enabled: bool,
    processor_payouts_enabled: bool,
    processor_customer_id: Option<String>,
}

async fn row(m: &Market, user_id: i64, kind: &'static str) -> Row {
    let mut conn = m.app.db.conn().await.unwrap();
    marketplace::on_exec!(conn.exec(), c => sqlx::query_as::<_, Row>(
        "SELECT processor_connect_account_id, processor_connect_status, processor_charges_enabled,
                processor_payouts_enabled, processor_customer_id
         FROM profiles WHERE user_id = $1 AND profile_type = $2")
        .bind(user_id).bind(kind).fetch_one(c).await)
    .unwrap()
}

async fn ledger(m: &Market) -> Value {
    json(m.app.get("/api/sandbox/ledger").await).await
}

fn rates(list: &Value) -> Vec<(String, f64)> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["level"].as_str().unwrap().to_owned(),
                e["rate"].as_f64().unwrap(),
            )
        })
        .collect()
}

fn levels(values: [f64; 3]) -> Vec<(String, f64)> {
    ["Global", "Pro", "Enterprise"]
        .iter()
        .zip(values)
        .map(|(l, v)| ((*l).to_owned(), v))
        .collect()
}

// ---------------------------------------------------------------------------------------
// Commission configuration
// ---------------------------------------------------------------------------------------

#[actix_web::test]
async fn commission_defaults_and_one_level_updates() {
    let m = Market::open().await;
    let path = "/api/admin/commission-config";

    let (status, body) = admin(&m, Method::GET, path, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(rates(&body), levels([5.0, 4.0, 3.0]));
    assert_eq!(body[0]["updated_by"], Value::Null);
    assert_eq!(body[0]["updated_at"], Value::Null);

    let (status, body) = admin(
        &m,
        Method::PUT,
        &format!("{path}/Pro/"),
        Some(j!({"rate": 4.5})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["level"], "Pro");
    assert_eq!(body["rate"], 4.5);
    assert_eq!(body["updated_by"], m.admin_id);
    assert!(body["updated_at"].is_string());
    assert_eq!(stored_rates(&m).await, vec![500, 450, 300]);
    let (status, body) = admin(&m, Method::GET, &format!("{path}/Pro"), None).await;
    assert_eq!((status, body["rate"].as_f64()), (StatusCode::OK, Some(4.5)));

    // The bounds are accepted.
    for (rate, bp) in [(j!(0), 0), (j!(100), 10_000), (j!(0.01), 1)] {
        let (status, body) = admin(
            &m,
            Method::PUT,
            &format!("{path}/Enterprise"),
            Some(j!({"rate": rate})),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{rate}: {body}");
        assert_eq!(stored_rates(&m).await[2], bp);
    }

    // Outside 0–100, more than 2 decimals, not a number: 422 with the field, nothing stored.
    for rate in [j!(100.5), j!(-1), j!(4.555), j!("5"), Value::Null] {
        let (status, body) = admin(
            &m,
            Method::PUT,
            &format!("{path}/Global"),
            Some(j!({"rate": rate})),
        )
        .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{rate}: {body}");
        assert_eq!(code(&body), "VALIDATION_ERROR");
        assert_eq!(body["errors"][0]["field"], "rate", "{body}");
    }
    assert_eq!(stored_rates(&m).await, vec![500, 450, 1]);

    // Unknown level.
    let (status, _) = admin(&m, Method::GET, &format!("{path}/Gold"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = admin(
        &m,
        Method::PUT,
        &format!("{path}/gold"),
        Some(j!({"rate": 1})),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[actix_web::test]
async fn commission_bulk_changes_all_levels_or_none() {
    let m = Market::open().await;
    let bulk = "/api/admin/commission-config/bulk";

    let (status, body) = admin(
        &m,
        Method::PUT,
        bulk,
        Some(j!({"rates": {"Global": 6, "Pro": 4.5}})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(rates(&body), levels([6.0, 4.5, 3.0]));
    assert_eq!(body[0]["updated_by"], m.admin_id);
    assert_eq!(body[2]["updated_by"], Value::Null);
    assert_eq!(stored_rates(&m).await, vec![600, 450, 300]);

    // The list forms, bare and wrapped; 0 and 100 are valid.
    let (status, body) = admin(
        &m,
        Method::PUT,
        bulk,
        Some(j!([{"level": "Enterprise", "rate": 2.25}, {"level": "Global", "rate": 0}])),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(rates(&body), levels([0.0, 4.5, 2.25]));
    let (status, body) = admin(
        &m,
        Method::PUT,
        bulk,
        Some(j!({"rates": [{"level": "Pro", "rate": 100}]})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(stored_rates(&m).await, vec![0, 10_000, 225]);

    // One invalid entry refuses the whole change, and each bad entry is named.
    for (bad, fields) in [
        (
            j!({"rates": {"Global": 7, "Pro": 100.5}}),
            vec!["rates.Pro"],
        ),
        (
            j!({"rates": {"Global": 7, "Enterprise": -1}}),
            vec!["rates.Enterprise"],
        ),
        (
            j!([{"level": "Global", "rate": 7}, {"level": "Gold", "rate": 1}, {"level": "Pro", "rate": "x"}]),
            vec!["rates[1]", "rates[2]"],
        ),
        (
            j!([{"level": "Global", "rate": 7}, {"level": "Global", "rate": 8}]),
            vec!["rates[1]"],
        ),
        (j!({"rates": {}}), vec!["rates"]),
    ] {
        let (status, body) = admin(&m, Method::PUT, bulk, Some(bad.clone())).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{bad}: {body}");
        let named: Vec<&str> = body["errors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["field"].as_str().unwrap())
            .collect();
        assert_eq!(named, fields, "{bad}");
        assert_eq!(stored_rates(&m).await, vec![0, 10_000, 225], "{bad}");
    }
    // A body of neither shape.
    let (status, _) = admin(&m, Method::PUT, bulk, Some(j!({"Global": 7}))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(stored_rates(&m).await, vec![0, 10_000, 225]);
}

#[actix_web::test]
async fn commission_config_is_for_administrators_with_csrf() {
    let m = Market::open().await;
    let expert = m.expert("ana").await;
    let company = m.company("acme").await;
    let path = "/api/admin/commission-config";

    let (status, _) = call(&m, &expert, Method::GET, path, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = call(
        &m,
        &company,
        Method::PUT,
        &format!("{path}/Pro"),
        Some(j!({"rate": 1})),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = call(
        &m,
        &company,
        Method::PUT,
        &format!("{path}/bulk"),
        Some(j!({"rates": {"Pro": 1}})),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let response = m.app.get(path).await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(stored_rates(&m).await, vec![500, 400, 300]);

    // An administrator's cookie session needs the double submit on PUT, not on GET.
    let session = login_secure_session(&m.app, "root", PASSWORD).await;
    let put = |header: Option<&str>, path: String| {
        let mut request = m
            .app
            .client
            .put(m.app.url(&path))
            .bearer_auth(&session.access_token)
            .header("Cookie", format!("csrf_token={}", session.csrf_token))
            .json(&j!({"rate": 1}));
        if let Some(h) = header {
            request = request.header("X-CSRF-Token", h);
        }
        request.send()
    };
    for header in [None, Some("wrong")] {
        let (status, body) = body_of(put(header, format!("{path}/Pro")).await.unwrap()).await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::FORBIDDEN, "CSRF_FAILED")
        );
    }
    assert_eq!(stored_rates(&m).await, vec![500, 400, 300]);
    let response = put(Some(&session.csrf_token), format!("{path}/Pro"))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(stored_rates(&m).await, vec![500, 100, 300]);
    let response = m
        .app
        .client
        .get(m.app.url(path))
        .bearer_auth(&session.access_token)
        .header("Cookie", format!("csrf_token={}", session.csrf_token))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
}

#[actix_web::test]
async fn commission_rate_for_a_level_reads_the_configuration() {
    use marketplace::domain::commission::{Level, split};
    use marketplace::store::commission;
    let m = Market::open().await;
    admin(
        &m,
        Method::PUT,
        "/api/admin/commission-config/Pro",
        Some(j!({"rate": 4.5})),
    )
    .await;
    let mut conn = m.app.db.conn().await.unwrap();
    let pro = commission::rate_bp_for(conn.exec(), Level::Pro)
        .await
        .unwrap();
    assert_eq!(pro, 450);
    assert_eq!(split(33_300, pro), (1_499, 31_801)); // 1498.5 rounds up
    assert_eq!(
        commission::rate_bp_for(conn.exec(), Level::Global)
            .await
            .unwrap(),
        500
    );
}

// ---------------------------------------------------------------------------------------
// Connected payout account
// ---------------------------------------------------------------------------------------

const STATUS: &str = "/api/processor-connect/status";
const LINK: &str = "/api/processor-connect/account-link";
const UPDATE_LINK: &str = "/api/processor-connect/account-update-link";

#[actix_web::test]
async fn connect_onboarding_from_no_account_to_active() {
    let m = Market::open().await;
    let expert = m.expert("ana").await;

    let (status, body) = call(&m, &expert, Method::GET, STATUS, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body,
        j!({"has_account": false, "requires_onboarding": true, "charges_enabled": false,
            "payouts_enabled": false, "status": null, "account_id": null})
    );
    let (status, body) = call(&m, &expert, Method::POST, UPDATE_LINK, None).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::BAD_REQUEST, "PROCESSOR_CONNECT_NOT_STARTED")
    );

    // The link creates the account, stored as pending.
    let (status, body) = call(&m, &expert, Method::POST, LINK, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["type"], "account_onboarding");
    assert!(body["url"].as_str().unwrap().starts_with("http"));
    let expires: chrono::DateTime<chrono::Utc> =
        body["expires_at"].as_str().unwrap().parse().unwrap();
    assert!(expires > chrono::Utc::now());
    let stored = row(&m, expert.id, "experto").await;
    let account_id = stored
        .processor_connect_account_id
        .clone()
        .expect("account stored");
    assert!(account_id.starts_with("acct_"));
    assert_eq!(stored.processor_connect_status.as_deref(), Some("pending"));
    assert!(!stored.processor_charges_enabled && !stored.processor_payouts_enabled);

    // The processor has it, for this expert.
    let account = m
        .app
        .state
        .processor
        .client
        .retrieve_account(&account_id)
        .await
        .unwrap();
    assert_eq!(account.email.as_deref(), Some("ana@example.com"));
    assert_eq!(account.metadata["user_id"], expert.id.to_string());
    let ledger = ledger(&m).await;
    assert_eq!(ledger["accounts"].as_array().unwrap().len(), 1);
    assert_eq!(ledger["accounts"][0]["id"], account_id.as_str());

    // A second link reuses the account.
    let (status, body) = call(&m, &expert, Method::POST, LINK, None).await;
    assert_eq!(
        (status, body["type"].as_str()),
        (StatusCode::OK, Some("account_onboarding"))
    );
    let ledger = self::ledger(&m).await;
    assert_eq!(ledger["accounts"].as_array().unwrap().len(), 1);
    assert_eq!(ledger["calls"]["create_account"], 1);
    assert_eq!(ledger["calls"]["create_account_link"], 2);

    let (status, body) = call(&m, &expert, Method::GET, STATUS, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body,
        j!({"has_account": true, "requires_onboarding": true, "charges_enabled": false,
            "payouts_enabled": false, "status": "pending", "account_id": account_id})
    );

    // Before onboarding is complete the update link falls back to onboarding.
    let (status, body) = call(&m, &expert, Method::POST, UPDATE_LINK, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["type"], "account_onboarding");

    let response = m
        .app
        .post_json(
            &format!("/api/sandbox/accounts/{account_id}/complete-onboarding"),
            &j!({}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);

    let (status, body) = call(&m, &expert, Method::POST, UPDATE_LINK, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["type"], "account_update");

    // The refresh reads the processor and stores what it says.
    let (status, body) = call(&m, &expert, Method::GET, STATUS, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body,
        j!({"has_account": true, "requires_onboarding": false, "charges_enabled": true,
            "payouts_enabled": true, "status": "active", "account_id": account_id})
    );
    let stored = row(&m, expert.id, "experto").await;
    assert_eq!(stored.processor_connect_status.as_deref(), Some("active"));
    assert!(stored.processor_charges_enabled && stored.processor_payouts_enabled);

    // Charges disabled by the processor after onboarding: restricted.
    let response = m
        .app
        .post_json(
            &format!("/api/sandbox/accounts/{account_id}/update"),
            &j!({"charges_enabled": false}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let (_, body) = call(&m, &expert, Method::GET, STATUS, None).await;
    assert_eq!(body["status"], "restricted");
    assert_eq!(body["charges_enabled"], false);
    assert_eq!(body["requires_onboarding"], true);
}

#[actix_web::test]
async fn connect_account_updates_are_applied_by_account_id() {
    use marketplace::workflows::connect::apply_account_update;
    let m = Market::open().await;
    let expert = m.expert("ana").await;
    let (status, _) = call(&m, &expert, Method::POST, LINK, None).await;
    assert_eq!(status, StatusCode::OK);
    let account_id = row(&m, expert.id, "experto")
        .await
        .processor_connect_account_id
        .unwrap();

    let client = &m.app.state.processor.client;
    let mut conn = m.app.db.conn().await.unwrap();
    let now = m.app.clock.now();
    let account = client.retrieve_account(&account_id).await.unwrap();
    assert_eq!(
        apply_account_update(conn.exec(), &account, now)
            .await
            .unwrap()
            .map(|s| s.as_str()),
        Some("pending")
    );

    m.app
        .post_json(
            &format!("/api/sandbox/accounts/{account_id}/complete-onboarding"),
            &j!({}),
        )
        .await;
    let account = client.retrieve_account(&account_id).await.unwrap();
    assert_eq!(
        apply_account_update(conn.exec(), &account, now)
            .await
            .unwrap()
            .map(|s| s.as_str()),
        Some("active")
    );
    let stored = row(&m, expert.id, "experto").await;
    assert_eq!(stored.processor_connect_status.as_deref(), Some("active"));
    assert!(stored.processor_charges_enabled && stored.processor_payouts_enabled);

    // The onboarding's own `account.updated` webhooks are applied before the next update is
    // made here, so a late one cannot overwrite it.
    crate::escrow::poll(
        &m,
        "the sandbox's webhooks delivered and applied",
        || async {
            let events = json(m.app.get("/api/sandbox/events").await).await;
            let delivered = events.as_array().unwrap().iter().all(|e| {
                e["deliveries"]
                    .as_array()
                    .is_some_and(|d| d.iter().any(|a| a["status"] == 200))
            });
            (delivered && crate::escrow::unprocessed_events(&m).await == 0).then_some(())
        },
    )
    .await;

    // An `account.updated` object as the webhook carries it.
    let event: ProcessorAccount = serde_json::from_value(j!({
        "id": account_id, "object": "account", "charges_enabled": false, "payouts_enabled": true,
        "details_submitted": true,
        "requirements": {"currently_due": [], "past_due": [], "disabled_reason": "rejected.fraud"}
    }))
    .unwrap();
    assert_eq!(
        apply_account_update(conn.exec(), &event, now)
            .await
            .unwrap()
            .map(|s| s.as_str()),
        Some("restricted")
    );
    let stored = row(&m, expert.id, "experto").await;
    assert_eq!(
        stored.processor_connect_status.as_deref(),
        Some("restricted")
    );
    assert!(!stored.processor_charges_enabled && stored.processor_payouts_enabled);

    // An account no profile holds changes nothing.
    let stranger = ProcessorAccount {
        id: "acct_unknown".into(),
        ..event
    };
    assert_eq!(
        apply_account_update(conn.exec(), &stranger, now)
            .await
            .unwrap(),
        None
    );
}

#[actix_web::test]
async fn connect_admin_disconnect_clears_the_account() {
    let m = Market::open().await;
    let expert = m.expert("ana").await;
    let company = m.company("acme").await;
    let (status, _) = call(&m, &expert, Method::POST, LINK, None).await;
    assert_eq!(status, StatusCode::OK);
    let first = row(&m, expert.id, "experto")
        .await
        .processor_connect_account_id
        .unwrap();
    m.app
        .post_json(
            &format!("/api/sandbox/accounts/{first}/complete-onboarding"),
            &j!({}),
        )
        .await;
    let (_, body) = call(&m, &expert, Method::GET, STATUS, None).await;
    assert_eq!(body["status"], "active");

    let disconnect = format!("/api/processor-connect/admin/disconnect/{}", expert.id);
    // Not for the expert, nor a company.
    for who in [&expert, &company] {
        let (status, _) = call(&m, who, Method::POST, &disconnect, None).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
    }
    assert_eq!(
        row(&m, expert.id, "experto")
            .await
            .processor_connect_account_id,
        Some(first.clone())
    );

    let (status, body) = admin(&m, Method::POST, &disconnect, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body,
        j!({"has_account": false, "requires_onboarding": true, "charges_enabled": false,
            "payouts_enabled": false, "status": "disconnected", "account_id": null})
    );
    let stored = row(&m, expert.id, "experto").await;
    assert_eq!(stored.processor_connect_account_id, None);
    assert_eq!(
        stored.processor_connect_status.as_deref(),
        Some("disconnected")
    );
    assert!(!stored.processor_charges_enabled && !stored.processor_payouts_enabled);
    wait_notification(&m.app, expert.id, "processor_connect_disconnected").await;

    let (_, body) = call(&m, &expert, Method::GET, STATUS, None).await;
    assert_eq!(
        (body["has_account"].as_bool(), body["status"].as_str()),
        (Some(false), Some("disconnected"))
    );

    // A late update of the old account finds no profile.
    let account = m
        .app
        .state
        .processor
        .client
        .retrieve_account(&first)
        .await
        .unwrap();
    let mut conn = m.app.db.conn().await.unwrap();
    let applied = marketplace::workflows::connect::apply_account_update(
        conn.exec(),
        &account,
        m.app.clock.now(),
    )
    .await
    .unwrap();
    assert_eq!(applied, None);
    drop(conn);

    // Connecting again makes a new account.
    let (status, _) = call(&m, &expert, Method::POST, LINK, None).await;
    assert_eq!(status, StatusCode::OK);
    let second = row(&m, expert.id, "experto").await;
    assert_ne!(
        second.processor_connect_account_id.as_deref(),
        Some(first.as_str())
    );
    assert!(second.processor_connect_account_id.is_some());
    assert_eq!(second.processor_connect_status.as_deref(), Some("pending"));

    // No expert profile: 404.
    for user in [company.id, 999_999] {
        let (status, _) = admin(
            &m,
            Method::POST,
            &format!("/api/processor-connect/admin/disconnect/{user}"),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }
}

#[actix_web::test]
async fn connect_is_for_experts_only() {
    let m = Market::open().await;
    let company = m.company("acme").await;
    for (method, path) in [
        (Method::GET, STATUS),
        (Method::POST, LINK),
        (Method::POST, UPDATE_LINK),
    ] {
        let (status, _) = call(&m, &company, method.clone(), path, None).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}");
        let response = m
            .app
            .client
            .request(method, m.app.url(path))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{path}");
    }
    let response = m
        .app
        .client
        .post(m.app.url("/api/processor-connect/admin/disconnect/1"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);

    // An expert without a profile has no account and must create the profile first.
    let newcomer = register(&m.app, "newcomer", &["experto"]).await;
    let (status, body) = call(&m, &newcomer, Method::GET, STATUS, None).await;
    assert_eq!(
        (status, body["has_account"].as_bool()),
        (StatusCode::OK, Some(false))
    );
    let (status, body) = call(&m, &newcomer, Method::POST, LINK, None).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::BAD_REQUEST, "EXPERT_PROFILE_REQUIRED")
    );
    assert_eq!(ledger(&m).await["accounts"].as_array().unwrap().len(), 0);
}

// ---------------------------------------------------------------------------------------
// Publishable key and saved cards
// ---------------------------------------------------------------------------------------

const SAVED: &str = "/api/payments/saved-methods";
const ATTACH: &str = "/api/payments/attach-method";

#[actix_web::test]
async fn payments_public_key_needs_no_authentication() {
    let m = Market::open().await;
    let response = m.app.get("/api/payments/public-key/").await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        json(response).await,
        j!({"publishable_key": "pk_test_sandbox"})
    );
}

#[actix_web::test]
async fn payments_saved_cards_attach_list_and_delete() {
    let m = Market::open().await;
    let acme = m.company("acme").await;
    let beta = m.company("beta").await;
    let expert = m.expert("ana").await;

    let (status, body) = call(&m, &acme, Method::GET, SAVED, None).await;
    assert_eq!((status, body), (StatusCode::OK, j!([])));
    assert_eq!(
        row(&m, acme.id, "empresa").await.processor_customer_id,
        None
    );

    // The first card creates the customer; the second reuses it.
    let (status, visa) = call(
        &m,
        &acme,
        Method::POST,
        ATTACH,
        Some(j!({"payment_method_id": "pm_card_visa"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{visa}");
    assert_eq!(
        (visa["brand"].as_str(), visa["last4"].as_str()),
        (Some("visa"), Some("4242"))
    );
    assert!(visa["exp_month"].is_u64() && visa["exp_year"].is_i64());
    let customer = row(&m, acme.id, "empresa")
        .await
        .processor_customer_id
        .expect("customer");
    let (status, master) = call(
        &m,
        &acme,
        Method::POST,
        ATTACH,
        Some(j!({"payment_method_id": "pm_card_mastercard"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{master}");
    assert_eq!(
        row(&m, acme.id, "empresa").await.processor_customer_id,
        Some(customer.clone())
    );
    assert_eq!(ledger(&m).await["calls"]["create_customer"], 1);

    let (status, list) = call(&m, &acme, Method::GET, SAVED, None).await;
    assert_eq!(status, StatusCode::OK);
    let mut ids: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    ids.sort_unstable();
    let mut expected = vec![visa["id"].as_str().unwrap(), master["id"].as_str().unwrap()];
    expected.sort_unstable();
    assert_eq!(ids, expected);
    assert!(
        list.as_array()
            .unwrap()
            .iter()
            .any(|c| c["last4"] == "4242" && c["brand"] == "visa")
    );

    // Another company's card, or an unknown one, is not acme's to delete.
    let (status, other) = call(
        &m,
        &beta,
        Method::POST,
        ATTACH,
        Some(j!({"payment_method_id": "pm_card_visa"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let beta_customer = row(&m, beta.id, "empresa")
        .await
        .processor_customer_id
        .unwrap();
    assert_ne!(beta_customer, customer);
    for id in [other["id"].as_str().unwrap(), "pm_unknown"] {
        let (status, _) = call(&m, &acme, Method::DELETE, &format!("{SAVED}/{id}"), None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{id}");
    }
    let (_, list) = call(&m, &beta, Method::GET, SAVED, None).await;
    assert_eq!(list.as_array().unwrap().len(), 1);

    // acme deletes its own.
    let visa_id = visa["id"].as_str().unwrap();
    let response = m
        .send(&acme, Method::DELETE, &format!("{SAVED}/{visa_id}"), None)
        .await;
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    let (_, list) = call(&m, &acme, Method::GET, SAVED, None).await;
    assert_eq!(
        card_ids(&list),
        vec![master["id"].as_str().unwrap().to_owned()]
    );
    let (status, _) = call(
        &m,
        &acme,
        Method::DELETE,
        &format!("{SAVED}/{visa_id}"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Bad input, and callers that are not companies.
    let (status, _) = call(
        &m,
        &acme,
        Method::POST,
        ATTACH,
        Some(j!({"payment_method_id": " "})),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (status, body) = call(
        &m,
        &acme,
        Method::POST,
        ATTACH,
        Some(j!({"payment_method_id": "pm_nonexistent"})),
    )
    .await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::BAD_REQUEST, "PAYMENT_METHOD_INVALID")
    );
    let (status, _) = call(&m, &expert, Method::GET, SAVED, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = call(
        &m,
        &expert,
        Method::POST,
        ATTACH,
        Some(j!({"payment_method_id": "pm_card_visa"})),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(m.app.get(SAVED).await.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(ledger(&m).await["calls"]["create_customer"], 2);
}

fn card_ids(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap().to_owned())
        .collect()
}
