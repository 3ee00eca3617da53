//! Platform metrics and growth on a prepared data set whose numbers are known: revenue is
//! the sum of the commissions released, every period answers, and an empty previous period
//! gives 100 (or 0).

use reqwest::{Method, StatusCode};
use serde_json::{Value, json as j};

use crate::escrow::{Deal, authorise, connect, deal};
use crate::helpers::{PASSWORD, json, request_as};
use crate::market::Market;

async fn released(m: &Market, name: &str, first: f64) -> Deal {
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
    assert_eq!(r.status(), StatusCode::OK);
    d
}

async fn get(m: &Market, token: &str, path: &str) -> Value {
    let r = request_as(&m.app, Method::GET, path, token, None).await;
    assert_eq!(r.status(), StatusCode::OK, "{path}");
    json(r).await
}

#[actix_web::test]
async fn metrics_and_growth_add_up_on_a_known_data_set() {
    let m = Market::open().await;
    let a = released(&m, "alpha", 100.0).await;
    let b = released(&m, "beta", 200.0).await;
    let token = m.admin_token.clone();

    let o = get(&m, &token, "/api/admin/metrics").await;
    // Global level: 5 % of 100 and of 200.
    assert_eq!(o["total_revenue"], 15.0);
    assert_eq!(o["gross_volume"], 300.0);
    assert_eq!(o["users_by_role"]["empresa"], 2);
    assert_eq!(o["users_by_role"]["experto"], 2);
    assert_eq!(o["users_by_role"]["admin"], 1);
    assert_eq!(o["projects_by_status"]["in_progress"], 2);
    assert_eq!(o["profiles_by_verification"]["experto:verified"], 2);
    assert_eq!(o["top_experts_by_earnings"][0]["user_id"], b.expert.id);
    assert_eq!(o["top_experts_by_earnings"][0]["value"], 190.0);
    assert_eq!(o["top_experts_by_earnings"][1]["value"], 95.0);
    assert_eq!(o["top_companies_by_spend"][0]["user_id"], b.company.id);
    assert_eq!(o["top_companies_by_spend"][0]["value"], 200.0);

    let g = get(&m, &token, "/api/admin/metrics/growth").await;
    assert_eq!(g["period"], "30d");
    assert_eq!(g["total_revenue"], 15.0);
    assert_eq!(g["total_projects"], 2);
    assert_eq!(g["total_users"], 5);
    assert_eq!(g["active_projects"], 2);
    assert_eq!(g["average_project_value"], 150.0);
    assert_eq!(g["dispute_rate"], 0.0);
    assert_eq!(g["completion_rate"], 0.0);
    // Nothing before: growth is 100 where there is data now, 0 where there is none.
    assert_eq!(g["revenue_growth"], 100.0);
    assert_eq!(g["users_growth"], 100.0);
    assert_eq!(g["projects_growth"], 100.0);
    assert_eq!(g["completion_rate_growth"], 0.0);
    assert_eq!(g["project_types"]["curated"], 2);
    assert_eq!(g["project_types"]["private"], 0);
    let months = g["monthly_revenue"].as_array().unwrap();
    assert_eq!(months.len(), 12);
    assert_eq!(months[11]["revenue"], 15.0);
    assert_eq!(months[11]["projects"], 2);
    assert!(months[0]["month"].as_str().unwrap() < months[11]["month"].as_str().unwrap());
    for period in ["7d", "90d", "1y"] {
        let g = get(
            &m,
            &token,
            &format!("/api/admin/metrics/growth?period={period}"),
        )
        .await;
        assert_eq!(g["period"], period);
        assert_eq!(g["total_revenue"], 15.0);
    }
    let r = m
        .as_admin(Method::GET, "/api/admin/metrics/growth?period=2w", None)
        .await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);

    // An administrator cancels one project (its next payment was only pending): one of one
    // ended projects completed is 0 %, the statuses follow.
    let r = m
        .as_admin(
            Method::PUT,
            &format!("/api/admin/projects/{}/status", a.project_id),
            Some(&j!({"status": "cancelled", "reason": "The company withdrew"})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK, "{}", json(r).await);
    let g = get(&m, &token, "/api/admin/metrics/growth").await;
    assert_eq!(g["project_statuses"]["cancelled"], 1);
    assert_eq!(g["completion_rate"], 0.0);

    // Thirty-one days on, the figures belong to the previous period: growth is −100 %.
    m.app.clock.advance(chrono::Duration::days(31));
    let token = crate::helpers::login(&m.app, "root", PASSWORD).await;
    let g = get(&m, &token, "/api/admin/metrics/growth").await;
    assert_eq!(g["total_revenue"], 0.0);
    assert_eq!(g["revenue_growth"], -100.0);
    assert_eq!(g["users_growth"], -100.0);
    let o = get(&m, &token, "/api/admin/metrics").await;
    assert_eq!(o["total_revenue"], 15.0, "the overview counts all time");
}

#[actix_web::test]
async fn the_money_audit_finds_a_record_that_no_longer_matches_the_processor() {
    use marketplace::workflows::money_audit::MONEY_AUDIT;
    let m = Market::open().await;
    let d = released(&m, "audited", 100.0).await;
    let r = m
        .as_admin(Method::GET, "/api/admin/payments/audit", None)
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let report = json(r).await;
    assert!(
        report["payments_checked"].as_i64().unwrap() >= 2,
        "{report}"
    );
    assert_eq!(report["mismatches"], j!([]), "everything adds up");

    // Our record now says the commission was 4.00: captured ≠ transferred + commission.
    let mut conn = m.app.db.conn().await.unwrap();
    marketplace::on_exec!(conn.exec(), c => sqlx::query(
        "UPDATE payments SET commission_minor = 400, expert_amount_minor = 9600 WHERE id = $1")
        .bind(d.first_payment).execute(c).await.map(drop))
    .unwrap();
    drop(conn);
    let report = json(
        m.as_admin(Method::GET, "/api/admin/payments/audit", None)
            .await,
    )
    .await;
    let found = report["mismatches"].as_array().unwrap();
    assert_eq!(found.len(), 1, "{report}");
    assert_eq!(found[0]["payment_id"], d.first_payment);
    assert_eq!(found[0]["invariant"], "captured = transferred + commission");

    // The daily run alerts the administrators, and operators through /metrics (a counter of
    // this process, which other tests' audits may also move: it grows by at least one).
    use marketplace::workflows::money_audit::MISMATCHES_FOUND;
    use std::sync::atomic::Ordering;
    let counted_before = MISMATCHES_FOUND.load(Ordering::Relaxed);
    m.app.state.jobs.trigger(MONEY_AUDIT).await.unwrap();
    crate::market::wait_notification(&m.app, m.admin_id, "money_audit_mismatch").await;
    assert!(MISMATCHES_FOUND.load(Ordering::Relaxed) > counted_before);

    let r = m
        .as_admin(
            Method::GET,
            "/api/admin/payments/audit?from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z",
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
}
