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
    let release_month = months[11]["month"].clone();
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
    // The month of the releases is still among the twelve, under its own label.
    let then = g["monthly_revenue"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["month"] == release_month)
        .unwrap();
    assert_eq!(
        (then["revenue"].as_f64(), then["projects"].as_i64()),
        (Some(15.0), Some(2))
    );
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

/// What the overview's tallies stand for, counted from the rows themselves: users by role,
/// money by status, the top lists (user id, value in minor units or rating ×100, count).
async fn recount(app: &crate::helpers::TestApp) -> Value {
    let mut conn = app.db.conn().await.unwrap();
    let now = app.clock.now();
    let roles: Vec<(String, i64)> = marketplace::on_exec!(conn.exec(), c => sqlx::query_as(
        "SELECT r.role, COUNT(*) FROM user_roles r JOIN users u ON u.id = r.user_id
          WHERE u.deleted_at IS NULL GROUP BY r.role ORDER BY r.role")
        .fetch_all(c).await)
    .unwrap();
    let profiles: Vec<(String, i64)> = marketplace::on_exec!(conn.exec(), c => sqlx::query_as(
        "SELECT p.profile_type || ':' || p.verification_status, COUNT(*) FROM profiles p
           JOIN users u ON u.id = p.user_id WHERE u.deleted_at IS NULL
          GROUP BY p.profile_type, p.verification_status ORDER BY 1")
        .fetch_all(c).await)
    .unwrap();
    let money: (i64, i64, i64, i64) = marketplace::on_exec!(conn.exec(), c => sqlx::query_as(
        "SELECT
           CAST(COALESCE(SUM(CASE WHEN status = 'released' THEN COALESCE(commission_minor, 0) END), 0) AS BIGINT),
           CAST(COALESCE(SUM(CASE WHEN status = 'released' THEN amount_minor END), 0) AS BIGINT),
           CAST(COALESCE(SUM(CASE WHEN status IN ('held', 'disputed') THEN amount_minor END), 0) AS BIGINT),
           CAST(COALESCE(SUM(CASE WHEN status = 'refunded' THEN amount_minor END), 0) AS BIGINT)
         FROM payments")
        .fetch_one(c).await)
    .unwrap();
    let top = |sql: &'static str| async move {
        let mut conn = app.db.conn().await.unwrap();
        let rows: Vec<(i64, i64, i64)> = marketplace::on_exec!(conn.exec(), c =>
                sqlx::query_as(sql).bind(now).fetch_all(c).await)
        .unwrap();
        Value::from(
            rows.into_iter()
                .map(|(u, v, n)| j!([u, v, n]))
                .collect::<Vec<_>>(),
        )
    };
    j!({
        "users_by_role": roles.into_iter().map(|(k, n)| (k, j!(n))).collect::<serde_json::Map<_, _>>(),
        "profiles_by_verification": profiles.into_iter().map(|(k, n)| (k, j!(n))).collect::<serde_json::Map<_, _>>(),
        "money_minor": [money.0, money.1, money.2, money.3],
        "top_experts_by_earnings": top(
            "SELECT expert_id, CAST(SUM(COALESCE(expert_amount_minor, amount_minor)) AS BIGINT), COUNT(*)
               FROM payments WHERE status = 'released' AND expert_id IS NOT NULL AND $1 IS NOT NULL
              GROUP BY expert_id ORDER BY 2 DESC, expert_id LIMIT 5").await,
        "top_companies_by_spend": top(
            "SELECT company_id, CAST(SUM(amount_minor) AS BIGINT), COUNT(*)
               FROM payments WHERE status = 'released' AND company_id IS NOT NULL AND $1 IS NOT NULL
              GROUP BY company_id ORDER BY 2 DESC, company_id LIMIT 5").await,
        "top_experts_by_rating": top(
            "SELECT reviewee_id, CAST(ROUND(AVG(rating) * 100) AS BIGINT) AS v, COUNT(*) AS n
               FROM reviews WHERE reviewer_role = 'empresa' AND visibility = 'published'
                AND reviewee_id IS NOT NULL AND (revealed_at IS NOT NULL OR blind_until <= $1)
              GROUP BY reviewee_id ORDER BY v DESC, n DESC, reviewee_id LIMIT 5").await,
    })
}

/// The overview in the recount's shape.
fn as_recounted(o: &Value) -> Value {
    let minor = |v: &Value| (v.as_f64().unwrap() * 100.0).round() as i64;
    let top = |list: &Value, money: bool| {
        Value::from(
            list.as_array()
                .unwrap()
                .iter()
                .map(|r| {
                    let v = if money {
                        minor(&r["value"])
                    } else {
                        (r["value"].as_f64().unwrap() * 100.0).round() as i64
                    };
                    j!([r["user_id"], v, r["count"]])
                })
                .collect::<Vec<_>>(),
        )
    };
    j!({
        "users_by_role": o["users_by_role"],
        "profiles_by_verification": o["profiles_by_verification"],
        "money_minor": [minor(&o["total_revenue"]), minor(&o["gross_volume"]),
                        minor(&o["in_escrow"]), minor(&o["refunded"])],
        "top_experts_by_earnings": top(&o["top_experts_by_earnings"], true),
        "top_companies_by_spend": top(&o["top_companies_by_spend"], true),
        "top_experts_by_rating": top(&o["top_experts_by_rating"], false),
    })
}

async fn sql(app: &crate::helpers::TestApp, text: &'static str, args: &[i64]) {
    let mut conn = app.db.conn().await.unwrap();
    let now = app.clock.now();
    marketplace::on_exec!(conn.exec(), c => {
        let mut q = sqlx::query(text);
        for a in args {
            q = q.bind(*a);
        }
        q.bind(now).execute(c).await.map(drop)
    })
    .unwrap();
}

async fn unfolded(app: &crate::helpers::TestApp) -> i64 {
    let mut conn = app.db.conn().await.unwrap();
    marketplace::on_exec!(conn.exec(), c =>
        sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM tally_deltas").fetch_one(c).await)
    .unwrap()
}

/// A company's review of an expert on `project`, rated `rating`: revealed at once, or blind
/// until `blind_days` from now (and not announced).
async fn review(m: &Market, d: &Deal, rating: i64, blind_days: Option<i64>) {
    let now = m.app.clock.now();
    let mut conn = m.app.db.conn().await.unwrap();
    let (revealed, blind) = match blind_days {
        None => (Some(now), None),
        Some(days) => (None, Some(now + chrono::Duration::days(days))),
    };
    marketplace::on_exec!(conn.exec(), c => sqlx::query(
        "INSERT INTO reviews (project_id, reviewer_id, reviewee_id, rating, visibility,
                              created_at, updated_at, reviewer_role, revealed_at, blind_until)
         VALUES ($1, $2, $3, $4, 'published', $5, $5, 'empresa', $6, $7)")
        .bind(d.project_id).bind(d.company.id).bind(d.expert.id).bind(rating).bind(now)
        .bind(revealed).bind(blind)
        .execute(c).await.map(drop))
    .unwrap();
}

#[actix_web::test]
async fn the_overview_reads_kept_tallies_that_match_a_recount_folded_or_not() {
    let m = Market::open().await;
    let a = released(&m, "tallied", 100.0).await;
    let b = released(&m, "counted", 200.0).await;
    let c = released(&m, "summed", 150.0).await;
    review(&m, &a, 5, None).await;
    review(&m, &b, 3, Some(-1)).await; // past its blind window, not announced yet
    review(&m, &c, 4, Some(7)).await; // still blind: not counted
    // A deleted user leaves the counts by role and profile; a verification moves its profile.
    sql(
        &m.app,
        "UPDATE users SET deleted_at = $2 WHERE id = $1",
        &[c.company.id],
    )
    .await;
    sql(
        &m.app,
        "UPDATE profiles SET verification_status = 'rejected', updated_at = $2 WHERE user_id = $1",
        &[a.expert.id],
    )
    .await;

    let before_fold = get(&m, &m.admin_token, "/api/admin/metrics").await;
    let counted = recount(&m.app).await;
    assert_eq!(as_recounted(&before_fold), counted);
    assert_eq!(before_fold["users_by_role"]["empresa"], 2);
    assert_eq!(
        before_fold["top_experts_by_rating"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert!(unfolded(&m.app).await > 0, "the writes left deltas");

    m.app
        .state
        .jobs
        .trigger(marketplace::workflows::tallies::FOLD_JOB)
        .await
        .unwrap();
    assert_eq!(unfolded(&m.app).await, 0);
    let folded = get(&m, &m.admin_token, "/api/admin/metrics").await;
    assert_eq!(folded, before_fold);

    // After the fold, new deltas on top of the folded totals: a refund, a hidden review, and
    // the blind window of the third review passing on the service clock.
    sql(
        &m.app,
        "UPDATE payments SET status = 'refunded', updated_at = $2 WHERE id = $1",
        &[b.first_payment],
    )
    .await;
    sql(
        &m.app,
        "UPDATE reviews SET visibility = 'hidden', updated_at = $2 WHERE reviewee_id = $1",
        &[a.expert.id],
    )
    .await;
    m.app.clock.advance(chrono::Duration::days(8));
    let token = crate::helpers::login(&m.app, "root", PASSWORD).await;
    let after = get(&m, &token, "/api/admin/metrics").await;
    assert_eq!(as_recounted(&after), recount(&m.app).await);
    assert_eq!(after["refunded"], 200.0);
    assert_eq!(
        after["top_experts_by_earnings"].as_array().unwrap().len(),
        2
    );
    let rated: Vec<i64> = after["top_experts_by_rating"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["user_id"].as_i64().unwrap())
        .collect();
    assert_eq!(rated, [c.expert.id, b.expert.id]);
}

/// Payments released from many connections at once while the tallies are folded in small
/// batches alongside: every delta is counted once.
#[actix_web::test]
async fn tallies_stay_exact_under_concurrent_releases_and_folds() {
    let m = Market::open().await;
    let d = released(&m, "racing", 100.0).await;
    let experts = [
        m.expert("racer1").await.id,
        m.expert("racer2").await.id,
        d.expert.id,
    ];
    let now = m.app.clock.now();
    let mut ids = Vec::new();
    {
        let mut conn = m.app.db.conn().await.unwrap();
        for i in 0..48i64 {
            let id: i64 = marketplace::on_exec!(conn.exec(), c => sqlx::query_scalar(
                "INSERT INTO payments (project_id, company_id, expert_id, amount_minor, status,
                                       created_at, updated_at)
                 VALUES ($1, $2, $3, $4, 'held', $5, $5) RETURNING id")
                .bind(d.project_id).bind(d.company.id).bind(experts[(i % 3) as usize])
                .bind(1_000 + i).bind(now)
                .fetch_one(c).await)
            .unwrap();
            ids.push(id);
        }
    }
    let folding = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let folder = {
        let (db, folding) = (m.app.db.clone(), folding.clone());
        tokio::spawn(async move {
            while folding.load(std::sync::atomic::Ordering::Relaxed) {
                marketplace::store::tallies::fold(&db, 3).await.unwrap();
                tokio::task::yield_now().await;
            }
        })
    };
    let releases = ids.chunks(6).map(|chunk| {
        let (db, chunk) = (m.app.db.clone(), chunk.to_vec());
        tokio::spawn(async move {
            for id in chunk {
                let mut tx = db.begin().await.unwrap();
                marketplace::on_exec!(tx.exec(), c => sqlx::query(
                    "UPDATE payments SET status = 'released', commission_minor = amount_minor / 10,
                                         expert_amount_minor = amount_minor - amount_minor / 10
                      WHERE id = $1")
                    .bind(id).execute(c).await.map(drop))
                .unwrap();
                tx.commit().await.unwrap();
            }
        })
    });
    for r in futures_util::future::join_all(releases).await {
        r.unwrap();
    }
    folding.store(false, std::sync::atomic::Ordering::Relaxed);
    folder.await.unwrap();

    let o = get(&m, &m.admin_token, "/api/admin/metrics").await;
    assert_eq!(as_recounted(&o), recount(&m.app).await);
    m.app
        .state
        .jobs
        .trigger(marketplace::workflows::tallies::FOLD_JOB)
        .await
        .unwrap();
    assert_eq!(unfolded(&m.app).await, 0);
    let o = get(&m, &m.admin_token, "/api/admin/metrics").await;
    assert_eq!(as_recounted(&o), recount(&m.app).await);
    // 100 € released before, then 48 payments of 10.00 € to 10.47 €.
    assert_eq!(
        o["gross_volume"],
        100.0 + (0..48).map(|i| 1000 + i).sum::<i64>() as f64 / 100.0
    );
}

/// The growth view counts the projects under way in a window as three disjoint indexed sets;
/// on every combination of assignment, completion and cancellation times around two windows
/// that count is the plain predicate's.
#[actix_web::test]
async fn projects_under_way_in_a_window_are_counted_as_the_plain_predicate_counts_them() {
    use marketplace::domain::project::ProjectStatus;
    use marketplace::store::platform_metrics::window;
    use marketplace::store::projects::{self, NewProject};
    let app = crate::helpers::spawn_app().await;
    let company = crate::helpers::register(&app, "underway", &["empresa"]).await;
    let now = app.clock.now();
    let day = |d: Option<i64>| d.map(|d| now + chrono::Duration::days(d));
    let mut conn = app.db.conn().await.unwrap();
    for assigned in [None, Some(-60), Some(-10), Some(5)] {
        for completed in [None, Some(-40), Some(-20), Some(2)] {
            for cancelled in [None, Some(-40), Some(-5)] {
                let id = projects::insert(
                    conn.exec(),
                    &NewProject {
                        company_id: company.id,
                        target_expert_id: None,
                        title: "Under way",
                        description: "",
                        budget_minor: 100_000,
                        currency: "eur",
                        deadline: None,
                        skills_required: &[],
                        project_type: "curated",
                        status: ProjectStatus::InProgress,
                        validation_status: None,
                        submitted_at: None,
                    },
                    now,
                )
                .await
                .unwrap();
                marketplace::on_exec!(conn.exec(), c => sqlx::query(
                    "UPDATE projects SET assigned_at = $2, completed_at = $3, cancelled_at = $4
                      WHERE id = $1")
                    .bind(id).bind(day(assigned)).bind(day(completed)).bind(day(cancelled))
                    .execute(c).await.map(drop))
                .unwrap();
            }
        }
    }
    for (start, end) in [(-30, 0), (-60, -30), (-45, -15)] {
        let (start, end) = (day(Some(start)).unwrap(), day(Some(end)).unwrap());
        let plain: i64 = marketplace::on_exec!(conn.exec(), c => sqlx::query_scalar(
            "SELECT COUNT(*) FROM projects WHERE assigned_at IS NOT NULL AND assigned_at < $2
               AND (completed_at IS NULL OR completed_at >= $1)
               AND (cancelled_at IS NULL OR cancelled_at >= $1)")
            .bind(start).bind(end).fetch_one(c).await)
        .unwrap();
        let figures = window(conn.exec(), start, end, now).await.unwrap();
        assert_eq!(figures.active_projects, plain, "window {start} – {end}");
        assert!(plain > 0);
    }
    drop(conn);
    app.stop().await;
}
