//! Platform metrics and growth on a prepared data set whose numbers are known: revenue is
//! the sum of the commissions released, every period answers, and an empty previous period
//! gives 100 (or 0).

use reqwest::{Method, StatusCode};
use serde_json::{Value, json as j};

use crate::escrow::{Deal, released};
use crate::helpers::{PASSWORD, json, request_as};
use crate::market::Market;

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

/// What a window counts, from its rows alone: the statement the growth view ran before the
/// day tallies (migration 0040), kept as the recount they must agree with.
const PLAIN_WINDOW: &str = "SELECT
    (SELECT CAST(COALESCE(SUM(COALESCE(commission_minor, 0)), 0) AS BIGINT) FROM payments
      WHERE status = 'released' AND released_at >= $1 AND released_at < $2) AS revenue_minor,
    (SELECT CAST(COALESCE(SUM(amount_minor), 0) AS BIGINT) FROM payments
      WHERE status = 'released' AND released_at >= $1 AND released_at < $2) AS released_minor,
    (SELECT COUNT(DISTINCT project_id) FROM payments
      WHERE status = 'released' AND released_at >= $1 AND released_at < $2) AS released_projects,
    (SELECT COUNT(*) FROM projects WHERE created_at >= $1 AND created_at < $2) AS projects_created,
    (SELECT COUNT(*) FROM projects WHERE project_type = 'private'
      AND created_at >= $1 AND created_at < $2) AS private_created,
    (SELECT COUNT(*) FROM projects WHERE project_type = 'curated'
      AND created_at >= $1 AND created_at < $2) AS curated_created,
    (SELECT COUNT(*) FROM users WHERE created_at >= $1 AND created_at < $2) AS users_registered,
    (SELECT COUNT(*) FROM projects WHERE status = 'completed'
      AND completed_at >= $1 AND completed_at < $2) AS completed,
    (SELECT COUNT(*) FROM projects WHERE status = 'cancelled'
      AND cancelled_at >= $1 AND cancelled_at < $2) AS cancelled,
    (SELECT COUNT(*) FROM projects WHERE assigned_at IS NOT NULL AND assigned_at < $2
       AND (completed_at IS NULL OR completed_at >= $1)
       AND (cancelled_at IS NULL OR cancelled_at >= $1)) AS active_projects,
    (SELECT COUNT(*) FROM disputes WHERE created_at >= $1 AND created_at < $2) AS disputes_opened,
    (SELECT CAST(ROUND(AVG(rating) * 100) AS BIGINT) FROM reviews
      WHERE reviewer_role = 'empresa' AND visibility = 'published'
        AND (revealed_at IS NOT NULL OR blind_until <= $3)
        AND created_at >= $1 AND created_at < $2) AS expert_rating_x100,
    (SELECT CAST(ROUND(AVG(rating) * 100) AS BIGINT) FROM reviews
      WHERE reviewer_role = 'experto' AND visibility = 'published'
        AND (revealed_at IS NOT NULL OR blind_until <= $3)
        AND created_at >= $1 AND created_at < $2) AS company_rating_x100";

/// The growth view adds up whole days from the tallies kept by day and counts the parts of a
/// day at a window's ends from the rows. On rows placed around the windows' bounds and
/// midnights — projects of both types in every state, payments, disputes, accounts, revealed,
/// blind and unannounced reviews, a project reopened after it ended — every figure of every
/// window is the recount's, before and after the tallies are folded, and again after rows move
/// and are deleted.
#[actix_web::test]
async fn growth_windows_from_day_tallies_match_a_recount_of_the_rows() {
    use chrono::Duration;
    use marketplace::domain::growth::{Period, Window};
    use marketplace::domain::project::ProjectStatus;
    use marketplace::store::platform_metrics::{WindowFigures, window};
    use marketplace::store::projects::{self, NewProject};
    let app = crate::helpers::spawn_app().await;
    let company = crate::helpers::register(&app, "daily", &["empresa"]).await;
    let expert = crate::helpers::register(&app, "dailyx", &["experto"]).await;
    let now = app.clock.now();
    let at = |hours: i64| now + Duration::hours(hours);
    let day = 24;
    let offsets = [
        -61 * day - 3,
        -60 * day - 1,
        -60 * day + 2,
        -45 * day + 7,
        -31 * day + 5,
        -30 * day - 2,
        -30 * day + 1,
        -20 * day - 11,
        -2 * day + 13,
        -5,
        -1,
    ];
    let mut conn = app.db.conn().await.unwrap();
    let mut ids = Vec::new();
    for (i, &h) in offsets.iter().enumerate() {
        let i = i as i64;
        let id = projects::insert(
            conn.exec(),
            &NewProject {
                company_id: company.id,
                target_expert_id: None,
                title: "Daily",
                description: "",
                budget_minor: 100_000,
                currency: "eur",
                deadline: None,
                skills_required: &[],
                project_type: if i % 2 == 0 { "private" } else { "curated" },
                status: ProjectStatus::InProgress,
                validation_status: None,
                submitted_at: None,
            },
            now,
        )
        .await
        .unwrap();
        ids.push(id);
        // Assigned three hours after creation; then completed, cancelled, still under way,
        // or cancelled long before its assignment (reopened by an administrator).
        let (status, completed, cancelled) = match i % 4 {
            0 => ("completed", Some(at(h + 26 * (i % 5))), None),
            1 => ("cancelled", None, Some(at(h + 30 * (i % 3) + 7))),
            2 => ("in_progress", None, None),
            _ => ("in_progress", None, Some(at(h - 20 * day))),
        };
        // Revealed, past its blind window but not announced, or still blind.
        let (revealed, blind) = match i % 3 {
            0 => (Some(at(h + 1)), None),
            1 => (None, Some(at(-2))),
            _ => (None, Some(at(3 * day))),
        };
        marketplace::on_exec!(conn.exec(), c => async {
            sqlx::query(
                "UPDATE projects SET created_at = $2, status = $3, assigned_at = $4,
                        completed_at = $5, cancelled_at = $6, expert_id = $7 WHERE id = $1")
                .bind(id).bind(at(h)).bind(status).bind(at(h + 3)).bind(completed)
                .bind(cancelled).bind(expert.id)
                .execute(&mut *c).await?;
            for (reviewer, reviewee, role, rating) in
                [(company.id, expert.id, "empresa", 1 + i % 5), (expert.id, company.id, "experto", 5 - i % 3)]
            {
                sqlx::query(
                    "INSERT INTO reviews (project_id, reviewer_id, reviewee_id, rating, visibility,
                                          created_at, updated_at, reviewer_role, revealed_at, blind_until)
                     VALUES ($1, $2, $3, $4, 'published', $5, $5, $6, $7, $8)")
                    .bind(id).bind(reviewer).bind(reviewee).bind(rating).bind(at(h + 2))
                    .bind(role).bind(revealed).bind(blind)
                    .execute(&mut *c).await?;
            }
            for (status, amount) in [("released", 1_000 + i), ("released", 500), ("held", 700)] {
                sqlx::query(
                    "INSERT INTO payments (project_id, company_id, expert_id, amount_minor, status,
                                           commission_minor, released_at, created_at, updated_at)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8)")
                    .bind(id).bind(company.id).bind(expert.id).bind(amount).bind(status)
                    .bind(amount / 10).bind((status == "released").then(|| at(h + 2 * i)))
                    .bind(at(h))
                    .execute(&mut *c).await?;
            }
            sqlx::query(
                "INSERT INTO disputes (project_id, raised_by, status, reason, created_at, updated_at)
                 VALUES ($1, $2, 'resolved', 'Late', $3, $3)")
                .bind(id).bind(company.id).bind(at(h + 4))
                .execute(&mut *c).await?;
            sqlx::query(
                "INSERT INTO users (email, username, password_hash, active_role, created_at, updated_at)
                 VALUES ($1, $1, 'x', 'empresa', $2, $2)")
                .bind(format!("daily{i}@example.com")).bind(at(h - 5))
                .execute(&mut *c).await.map(drop)
        }
        .await)
        .unwrap();
    }
    let windows = |now| {
        let mut all: Vec<Window> = [Period::Week, Period::Month, Period::Quarter, Period::Year]
            .into_iter()
            .flat_map(|p| {
                let (current, previous) = p.windows(now);
                [current, previous]
            })
            .collect();
        all.push(Window {
            start: at(-45 * day + 3),
            end: at(-15 * day + 9),
        });
        all.push(Window {
            start: at(-6),
            end: at(-2),
        });
        all
    };
    let agree = |label: &'static str| {
        let app = &app;
        let windows = windows(now);
        async move {
            let mut conn = app.db.conn().await.unwrap();
            for w in windows {
                let plain: WindowFigures = marketplace::on_exec!(conn.exec(), c =>
                    sqlx::query_as(PLAIN_WINDOW).bind(w.start).bind(w.end).bind(now)
                        .fetch_one(c).await)
                .unwrap();
                let kept = window(conn.exec(), w.start, w.end, now).await.unwrap();
                assert_eq!(kept, plain, "{label}: window {} – {}", w.start, w.end);
            }
        }
    };
    agree("unfolded").await;
    marketplace::store::tallies::fold(&app.db, 10_000)
        .await
        .unwrap();
    assert_eq!(unfolded(&app).await, 0);
    agree("folded").await;

    // Rows move and go: an assignment undone, a payment refunded, a review hidden and one
    // announced, a completion moved across a midnight, a project with nothing of its own deleted.
    let lone = projects::insert(
        conn.exec(),
        &NewProject {
            company_id: company.id,
            target_expert_id: None,
            title: "Lone",
            description: "",
            budget_minor: 100_000,
            currency: "eur",
            deadline: None,
            skills_required: &[],
            project_type: "curated",
            status: ProjectStatus::Open,
            validation_status: None,
            submitted_at: None,
        },
        at(-3 * day),
    )
    .await
    .unwrap();
    agree("a new project").await;
    marketplace::on_exec!(conn.exec(), c => async {
        sqlx::query("UPDATE projects SET assigned_at = NULL WHERE id = $1")
            .bind(ids[2]).execute(&mut *c).await?;
        sqlx::query("UPDATE payments SET status = 'refunded' WHERE project_id = $1 AND amount_minor = 500")
            .bind(ids[6]).execute(&mut *c).await?;
        sqlx::query("UPDATE reviews SET visibility = 'hidden' WHERE project_id = $1")
            .bind(ids[3]).execute(&mut *c).await?;
        sqlx::query("UPDATE reviews SET announced_at = $2 WHERE project_id = $1")
            .bind(ids[7]).bind(at(-1)).execute(&mut *c).await?;
        sqlx::query("UPDATE projects SET completed_at = $2 WHERE id = $1")
            .bind(ids[4]).bind(at(-30 * day + 20)).execute(&mut *c).await?;
        sqlx::query("DELETE FROM projects WHERE id = $1").bind(lone).execute(&mut *c).await.map(drop)
    }
    .await)
    .unwrap();
    agree("moved, unfolded").await;
    marketplace::store::tallies::fold(&app.db, 10_000)
        .await
        .unwrap();
    agree("moved, folded").await;
    drop(conn);
    app.stop().await;
}

/// The growth view's statement is planned once per connection on PostgreSQL (`Sql::planned_once`:
/// its generic plan kept from the first run, never a plan per run), and the setting that asks
/// for it ends with the statement, on a connection and inside a caller's transaction alike.
#[actix_web::test]
async fn the_growth_window_is_planned_once_and_leaves_the_connection_as_it_was() {
    use marketplace::store::platform_metrics::window;
    let m = Market::open().await;
    if !matches!(m.app.db.pool(), marketplace::store::Pool::Postgres(_)) {
        return;
    }
    let now = m.app.clock.now();
    let (start, end) = (now - chrono::Duration::days(30), now);
    let mut conn = m.app.db.conn().await.unwrap();
    let first = window(conn.exec(), start, end, now).await.unwrap();
    let again = window(conn.exec(), start, end, now).await.unwrap();
    assert_eq!(first, again);
    let marketplace::store::Exec::Postgres(c) = conn.exec() else {
        unreachable!()
    };
    let (generic, custom): (i64, i64) = sqlx::query_as(
        "SELECT generic_plans, custom_plans FROM pg_prepared_statements
          WHERE statement LIKE '%AS released_again_after_head%'
            AND statement NOT LIKE '%pg_prepared_statements%'",
    )
    .fetch_one(&mut *c)
    .await
    .unwrap();
    assert_eq!((generic, custom), (2, 0));
    assert_eq!(plan_mode(c).await, "auto");
    drop(conn);

    let mut tx = m.app.db.begin().await.unwrap();
    window(tx.exec(), start, end, now).await.unwrap();
    let marketplace::store::Exec::Postgres(c) = tx.exec() else {
        unreachable!()
    };
    assert_eq!(plan_mode(c).await, "auto");
    tx.rollback().await.unwrap();
    m.app.stop().await;
}

async fn plan_mode(c: &mut sqlx::PgConnection) -> String {
    sqlx::query_scalar("SHOW plan_cache_mode")
        .fetch_one(c)
        .await
        .unwrap()
}
