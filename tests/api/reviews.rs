//! Reviews (issue 13): who may review whom and when, the double-blind reveal (counterpart or
//! lapsed window, the clock moved), edits and responses, moderation, statistics, the review
//! requests of a completed project; administrators' internal ratings and the lead score.

use marketplace::workflows::reviews::REVEAL_JOB;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json as j};

use crate::escrow::{Deal, deal, fund};
use crate::helpers::{Account, PASSWORD, json, login, request_as};
use crate::market::{Market, code, notifications_of};

/// A deal whose project the service considers finished at the clock's now (its rules are
/// tested here, not the escrow that completes it: see `a_completed_project_asks_…`).
async fn finished(m: &Market, name: &str) -> Deal {
    let d = deal(m, name, [100.0, 100.0, 100.0]).await;
    let mut conn = m.app.db.conn().await.unwrap();
    let now = m.app.state.clock.now();
    marketplace::on_exec!(conn.exec(), c => sqlx::query(
        "UPDATE projects SET status = 'completed', completed_at = $1 WHERE id = $2")
        .bind(now).bind(d.project_id).execute(c).await.map(drop))
    .unwrap();
    d
}

async fn review(
    m: &Market,
    who: &Account,
    project_id: i64,
    reviewee: i64,
    rating: Value,
) -> reqwest::Response {
    // Signed in afresh: tests move the clock past access tokens' lifetime.
    let token = login(&m.app, &who.username, PASSWORD).await;
    let body = j!({"project_id": project_id, "reviewee_id": reviewee, "rating": rating,
                   "comment": "Clear brief, paid on time, a pleasure."});
    request_as(&m.app, Method::POST, "/api/reviews", &token, Some(&body)).await
}

async fn as_user(
    m: &Market,
    who: &Account,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> reqwest::Response {
    let token = login(&m.app, &who.username, PASSWORD).await;
    request_as(&m.app, method, path, &token, body.as_ref()).await
}

async fn public(m: &Market, path: &str) -> Value {
    let r = m.app.get(path).await;
    assert_eq!(r.status(), StatusCode::OK, "{path}");
    json(r).await
}

async fn count(m: &Market, sql: &'static str, id: i64) -> i64 {
    m.count(sql, id).await
}

#[actix_web::test]
async fn only_the_parties_of_a_finished_project_review_each_other_once() {
    let m = Market::open().await;
    let d = deal(&m, "rvrules", [100.0, 100.0, 100.0]).await;

    // Not finished yet.
    let r = review(&m, &d.company, d.project_id, d.expert.id, j!(5)).await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert_eq!(code(&json(r).await), "PROJECT_NOT_FINISHED");

    let d = finished(&m, "rvrules2").await;
    // An outsider: not a party (the published project is visible to experts).
    let outsider = m.expert("rvoutsider").await;
    let r = review(&m, &outsider, d.project_id, d.expert.id, j!(5)).await;
    assert!(
        matches!(r.status(), StatusCode::FORBIDDEN | StatusCode::NOT_FOUND),
        "{}",
        r.status()
    );
    // The wrong reviewee: the company reviews the expert, not itself.
    let r = review(&m, &d.company, d.project_id, d.company.id, j!(5)).await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert_eq!(code(&json(r).await), "WRONG_REVIEWEE");
    // Ratings are whole stars from 1 to 5; comments 10 to 2000 characters.
    for bad in [j!(0), j!(6), j!(4.5), j!("5")] {
        let r = review(&m, &d.company, d.project_id, d.expert.id, bad.clone()).await;
        assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY, "{bad}");
    }
    let token = login(&m.app, &d.company.username, PASSWORD).await;
    for comment in ["too short", &"x".repeat(2001)] {
        let body = j!({"project_id": d.project_id, "reviewee_id": d.expert.id, "rating": 4, "comment": comment});
        let r = request_as(&m.app, Method::POST, "/api/reviews", &token, Some(&body)).await;
        assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(json(r).await["errors"][0]["field"], "comment");
    }

    // Two reviews by the company at the same moment: one is written.
    let (a, b) = tokio::join!(
        review(&m, &d.company, d.project_id, d.expert.id, j!(5)),
        review(&m, &d.company, d.project_id, d.expert.id, j!(4)),
    );
    let mut statuses = [a.status(), b.status()];
    statuses.sort();
    assert_eq!(statuses, [StatusCode::CREATED, StatusCode::CONFLICT]);
    let loser = if a.status() == StatusCode::CONFLICT {
        a
    } else {
        b
    };
    assert_eq!(code(&json(loser).await), "REVIEW_EXISTS");
    assert_eq!(
        count(
            &m,
            "SELECT COUNT(*) FROM reviews WHERE project_id = $1",
            d.project_id
        )
        .await,
        1
    );
}

#[actix_web::test]
async fn a_cancelled_project_is_reviewable_only_after_a_release() {
    let m = Market::open().await;
    let d = deal(&m, "rvcancel", [100.0, 100.0, 100.0]).await;
    let mut conn = m.app.db.conn().await.unwrap();
    let now = m.app.state.clock.now();
    marketplace::on_exec!(conn.exec(), c => sqlx::query(
        "UPDATE projects SET status = 'cancelled', cancelled_at = $1 WHERE id = $2")
        .bind(now).bind(d.project_id).execute(c).await.map(drop))
    .unwrap();
    let r = review(&m, &d.expert, d.project_id, d.company.id, j!(3)).await;
    assert_eq!(code(&json(r).await), "PROJECT_NOT_FINISHED");
    marketplace::on_exec!(conn.exec(), c => sqlx::query(
        "UPDATE payments SET status = 'released' WHERE id = $1")
        .bind(d.first_payment).execute(c).await.map(drop))
    .unwrap();
    let r = review(&m, &d.expert, d.project_id, d.company.id, j!(3)).await;
    assert_eq!(r.status(), StatusCode::CREATED);
}

#[actix_web::test]
async fn a_review_is_sealed_until_the_counterpart_reviews_then_both_are_revealed_and_told() {
    let m = Market::open().await;
    let d = finished(&m, "rvblind").await;
    let r = review(&m, &d.company, d.project_id, d.expert.id, j!(4)).await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let mine = json(r).await;
    let id = mine["id"].as_i64().unwrap();
    assert_eq!(
        (mine["rating"].clone(), mine["revealed"].clone()),
        (j!(4), j!(false))
    );

    // The reviewee and the public see that it exists and when it opens, not what it says.
    let sealed = public(&m, &format!("/api/reviews/{id}")).await;
    assert_eq!(
        (sealed["rating"].clone(), sealed["comment"].clone()),
        (Value::Null, Value::Null)
    );
    assert!(sealed["reveal_at"].is_string());
    let r = as_user(
        &m,
        &d.expert,
        Method::GET,
        &format!("/api/reviews/{id}"),
        None,
    )
    .await;
    assert_eq!(json(r).await["rating"], Value::Null);
    // The author and administrators read it.
    let r = m
        .as_admin(Method::GET, &format!("/api/reviews/{id}"), None)
        .await;
    assert_eq!(json(r).await["rating"], 4);
    // Statistics count revealed reviews only; nobody is told yet.
    let stats = public(&m, &format!("/api/reviews/stats/{}", d.expert.id)).await;
    assert_eq!(stats["total_reviews"], 0);
    assert_eq!(stats["average_rating"], Value::Null);
    // Nothing to answer while sealed.
    let r = as_user(
        &m,
        &d.expert,
        Method::POST,
        &format!("/api/reviews/{id}/respond"),
        Some(j!({"response": "Thank you, likewise!"})),
    )
    .await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    assert_eq!(code(&json(r).await), "REVIEW_NOT_REVEALED");

    // The counterpart reviews: both open, each reviewee told once (notification, e-mail,
    // `review.received`).
    let r = review(&m, &d.expert, d.project_id, d.company.id, j!(5)).await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let opened = public(&m, &format!("/api/reviews/{id}")).await;
    assert_eq!(
        (opened["rating"].clone(), opened["revealed"].clone()),
        (j!(4), j!(true))
    );
    let stats = public(&m, &format!("/api/reviews/stats/{}", d.expert.id)).await;
    assert_eq!(stats["total_reviews"], 1);
    assert_eq!(stats["average_rating"], 4.0);
    assert_eq!(
        stats["distribution"],
        j!({"1": 0, "2": 0, "3": 0, "4": 1, "5": 0})
    );
    assert_eq!(stats["recent"][0]["id"], id);
    let _ = m.app.state.outbox.trigger().await;
    assert_eq!(
        notifications_of(&m.app, d.expert.id, "review_received").await,
        1
    );
    assert_eq!(
        notifications_of(&m.app, d.company.id, "review_received").await,
        1
    );
    m.app.mails_about(&d.expert.email, "reviewed you").await;
    m.app.mails_about(&d.company.email, "reviewed you").await;
    let received = |to: &str| {
        m.app
            .mails()
            .into_iter()
            .filter(|x| x.to.contains(to) && x.subject.contains("reviewed you"))
            .count()
    };
    assert_eq!(
        (received(&d.expert.email), received(&d.company.email)),
        (1, 1)
    );
    assert_eq!(
        count(
            &m,
            "SELECT COUNT(*) FROM events WHERE kind = 'review.received' AND aggregate_id = $1",
            id
        )
        .await,
        1
    );
    // The job has nothing left to tell.
    m.app.state.jobs.trigger(REVEAL_JOB).await.unwrap();
    let _ = m.app.state.outbox.trigger().await;
    assert_eq!(
        notifications_of(&m.app, d.expert.id, "review_received").await,
        1
    );
}

#[actix_web::test]
async fn the_blind_window_lapses_on_the_service_clock() {
    let m = Market::open().await;
    let d = finished(&m, "rvlapse").await;
    let r = review(&m, &d.expert, d.project_id, d.company.id, j!(2)).await;
    let id = json(r).await["id"].as_i64().unwrap();

    // One second before the 14 days: still sealed, nobody told.
    m.app
        .state
        .clock
        .advance(chrono::Duration::days(14) - chrono::Duration::seconds(1));
    assert_eq!(
        public(&m, &format!("/api/reviews/{id}")).await["rating"],
        Value::Null
    );
    m.app.state.jobs.trigger(REVEAL_JOB).await.unwrap();
    let _ = m.app.state.outbox.trigger().await;
    assert_eq!(
        notifications_of(&m.app, d.company.id, "review_received").await,
        0
    );

    // At the deadline it opens for everyone and the job tells the reviewee once.
    m.app.state.clock.advance(chrono::Duration::seconds(2));
    let opened = public(&m, &format!("/api/reviews/{id}")).await;
    assert_eq!(
        (opened["rating"].clone(), opened["revealed"].clone()),
        (j!(2), j!(true))
    );
    for _ in 0..2 {
        m.app.state.jobs.trigger(REVEAL_JOB).await.unwrap();
        let _ = m.app.state.outbox.trigger().await;
    }
    assert_eq!(
        notifications_of(&m.app, d.company.id, "review_received").await,
        1
    );
    assert_eq!(
        public(&m, &format!("/api/reviews/stats/{}", d.company.id)).await["total_reviews"],
        1
    );

    // The author can no longer edit it; the reviewee answers once, then edits the answer.
    let r = as_user(
        &m,
        &d.expert,
        Method::PUT,
        &format!("/api/reviews/{id}"),
        Some(j!({"rating": 3})),
    )
    .await;
    assert_eq!(code(&json(r).await), "REVIEW_LOCKED");
    let path = format!("/api/reviews/{id}/respond");
    let r = as_user(
        &m,
        &d.expert,
        Method::POST,
        &path,
        Some(j!({"response": "I am the author, not the reviewee"})),
    )
    .await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let r = as_user(
        &m,
        &d.company,
        Method::POST,
        &path,
        Some(j!({"response": "short"})),
    )
    .await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let r = as_user(
        &m,
        &d.company,
        Method::POST,
        &path,
        Some(j!({"response": "We disagree, politely."})),
    )
    .await;
    assert_eq!(json(r).await["response"], "We disagree, politely.");
    let r = as_user(
        &m,
        &d.company,
        Method::POST,
        &path,
        Some(j!({"response": "A second answer"})),
    )
    .await;
    assert_eq!(code(&json(r).await), "RESPONSE_EXISTS");
    let r = as_user(
        &m,
        &d.company,
        Method::PUT,
        &path,
        Some(j!({"response": "We disagree, kindly."})),
    )
    .await;
    assert_eq!(json(r).await["response"], "We disagree, kindly.");
}

#[actix_web::test]
async fn the_author_edits_while_sealed_and_administrators_moderate() {
    let m = Market::open().await;
    let d = finished(&m, "rvedit").await;
    let id = json(review(&m, &d.company, d.project_id, d.expert.id, j!(3)).await).await["id"]
        .as_i64()
        .unwrap();
    let path = format!("/api/reviews/{id}");
    let r = as_user(&m, &d.expert, Method::PUT, &path, Some(j!({"rating": 5}))).await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN, "only the author edits");
    let r = as_user(
        &m,
        &d.company,
        Method::PUT,
        &path,
        Some(j!({"rating": 4, "comment": "Better than I first wrote."})),
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    let edited = json(r).await;
    assert_eq!(
        (edited["rating"].clone(), edited["edited_at"].is_string()),
        (j!(4), true)
    );
    let r = as_user(&m, &d.company, Method::PUT, &path, Some(j!({"rating": 9}))).await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);

    // Revealed by the counterpart, then hidden: out of every public list and statistic.
    review(&m, &d.expert, d.project_id, d.company.id, j!(5)).await;
    assert_eq!(
        public(&m, &format!("/api/reviews/stats/{}", d.expert.id)).await["total_reviews"],
        1
    );
    let r = as_user(&m, &d.expert, Method::POST, &format!("{path}/hide"), None).await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN, "administrators only");
    let r = m
        .as_admin(Method::POST, &format!("{path}/hide"), None)
        .await;
    assert_eq!(json(r).await["visibility"], "hidden");
    assert_eq!(
        public(&m, &format!("/api/reviews/stats/{}", d.expert.id)).await["total_reviews"],
        0
    );
    let listed = public(
        &m,
        &format!("/api/reviews/user/{}?role=reviewee", d.expert.id),
    )
    .await;
    assert_eq!(listed["total"], 0);
    assert_eq!(m.app.get(&path).await.status(), StatusCode::NOT_FOUND);
    assert_eq!(
        public(&m, &format!("/api/reviews/project/{}", d.project_id))
            .await
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // Published again, then deleted; each action recorded with who and when.
    let r = m
        .as_admin(Method::POST, &format!("{path}/publish"), None)
        .await;
    assert_eq!(json(r).await["visibility"], "published");
    assert_eq!(
        public(&m, &format!("/api/reviews/stats/{}", d.expert.id)).await["total_reviews"],
        1
    );
    let r = m.as_admin(Method::DELETE, &path, None).await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert_eq!(m.app.get(&path).await.status(), StatusCode::NOT_FOUND);
    assert_eq!(
        count(
            &m,
            "SELECT COUNT(*) FROM review_moderation WHERE review_id = $1 AND admin_id IS NOT NULL",
            id
        )
        .await,
        3
    );
    let r = m.as_admin(Method::DELETE, &path, None).await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
}

#[actix_web::test]
async fn lists_by_user_project_and_reviewer_page_newest_first() {
    let m = Market::open().await;
    let a = finished(&m, "rvlista").await;
    let b = finished(&m, "rvlistb").await;
    review(&m, &a.company, a.project_id, a.expert.id, j!(5)).await;
    review(&m, &a.expert, a.project_id, a.company.id, j!(4)).await;
    m.app.state.clock.advance(chrono::Duration::seconds(1));
    review(&m, &b.expert, b.project_id, b.company.id, j!(3)).await;

    let about = public(
        &m,
        &format!("/api/reviews/user/{}?role=reviewee", a.expert.id),
    )
    .await;
    assert_eq!(
        (about["total"].clone(), about["items"][0]["rating"].clone()),
        (j!(1), j!(5))
    );
    let by = public(
        &m,
        &format!("/api/reviews/user/{}?role=author&size=1", a.expert.id),
    )
    .await;
    assert_eq!(
        (
            by["total"].clone(),
            by["pages"].clone(),
            by["items"][0]["reviewee_id"].clone()
        ),
        (j!(1), j!(1), j!(a.company.id))
    );
    let r = m
        .app
        .get(&format!("/api/reviews/user/{}?role=owner", a.expert.id))
        .await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let one = public(
        &m,
        &format!(
            "/api/reviews/project/{}/reviewer/{}",
            a.project_id, a.company.id
        ),
    )
    .await;
    assert_eq!(one["reviewee_id"], a.expert.id);
    let r = m
        .app
        .get(&format!(
            "/api/reviews/project/{}/reviewer/{}",
            b.project_id, b.company.id
        ))
        .await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    // A sealed review is listed (it exists) without its words.
    let sealed = public(&m, &format!("/api/reviews/project/{}", b.project_id)).await;
    assert_eq!(
        (sealed[0]["revealed"].clone(), sealed[0]["rating"].clone()),
        (j!(false), Value::Null)
    );
}

#[actix_web::test]
async fn a_completed_project_asks_both_parties_for_a_review_once() {
    let m = Market::open().await;
    let d = deal(&m, "rvask", [100.0, 100.0, 100.0]).await;
    let mut payment = d.first_payment;
    for _ in 0..3 {
        fund(&m, &d.company, payment).await;
        let r = m
            .send(
                &d.company,
                Method::POST,
                "/api/payments/release",
                Some(j!({"payment_id": payment})),
            )
            .await;
        assert_eq!(r.status(), StatusCode::OK);
        let body = json(r).await;
        if let Some(next) = body["next_payment"]["id"].as_i64() {
            payment = next;
        }
    }
    assert_eq!(
        m.text("SELECT status FROM projects WHERE id = $1", d.project_id)
            .await,
        "completed"
    );
    let _ = m.app.state.outbox.trigger().await;
    for who in [&d.company, &d.expert] {
        assert_eq!(notifications_of(&m.app, who.id, "review_request").await, 1);
        let asked = m.app.mails_about(&who.email, "How was working with").await;
        assert_eq!(asked.len(), 1);
    }
    assert_eq!(
        count(
            &m,
            "SELECT COUNT(*) FROM review_requests WHERE project_id = $1",
            d.project_id
        )
        .await,
        2
    );
    let r = review(&m, &d.company, d.project_id, d.expert.id, j!(5)).await;
    assert_eq!(r.status(), StatusCode::CREATED);
}

#[actix_web::test]
async fn internal_ratings_keep_their_history_within_limits() {
    let m = Market::open().await;
    let d = finished(&m, "rvrating").await;
    let path = format!("/api/admin/users/{}/internal-rating", d.expert.id);
    for (body, field) in [
        (
            j!({"rating": 5.1, "reason": "Outstanding delivery"}),
            "rating",
        ),
        (
            j!({"rating": 0.9, "reason": "Outstanding delivery"}),
            "rating",
        ),
        (
            j!({"rating": 4.25, "reason": "Outstanding delivery"}),
            "rating",
        ),
        (j!({"rating": 4.5, "reason": "too short"}), "reason"),
    ] {
        let r = m.as_admin(Method::PUT, &path, Some(&body)).await;
        assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        assert_eq!(json(r).await["errors"][0]["field"], field);
    }
    let r = m
        .as_admin(
            Method::PUT,
            &path,
            Some(&j!({"rating": 4.5, "reason": "Outstanding delivery"})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let first = json(r).await;
    assert_eq!(
        (
            first["old_rating"].clone(),
            first["new_rating"].clone(),
            first["changed_by"].clone()
        ),
        (Value::Null, j!(4.5), j!("root"))
    );
    // Also as query parameters.
    m.app.state.clock.advance(chrono::Duration::seconds(1));
    let r = m
        .as_admin(
            Method::PUT,
            &format!("{path}?rating=3.0&reason=Missed%20two%20deadlines"),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(json(r).await["old_rating"], 4.5);
    let r = as_user(
        &m,
        &d.expert,
        Method::PUT,
        &path,
        Some(j!({"rating": 5, "reason": "I deserve better"})),
    )
    .await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);

    let history = json(
        m.as_admin(
            Method::GET,
            &format!(
                "/api/admin/users/{}/internal-rating-history?limit=1",
                d.expert.id
            ),
            None,
        )
        .await,
    )
    .await;
    assert_eq!(history["total"], 2);
    assert_eq!(history["history"].as_array().unwrap().len(), 1);
    assert_eq!(history["history"][0]["new_rating"], 3.0, "newest first");
    assert_eq!(history["history"][0]["changed_by_id"], m.admin_id);
    for bad in ["0", "51"] {
        let r = m
            .as_admin(
                Method::GET,
                &format!(
                    "/api/admin/users/{}/internal-rating-history?limit={bad}",
                    d.expert.id
                ),
                None,
            )
            .await;
        assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    }
    assert_eq!(
        count(&m, "SELECT COUNT(*) FROM events WHERE kind = 'user.internal_rating_changed' AND aggregate_id = $1", d.expert.id).await,
        2
    );
}

#[actix_web::test]
async fn reputation_shows_the_lead_score_components_of_a_prepared_expert() {
    let m = Market::open().await;
    let d = finished(&m, "rvscore").await;
    // One completed project (3), one revealed 5-star review (25 × 1 × 1/5 = 5), e-mail not
    // verified but a verified profile (15), signed in just now (15), new (0): 38.
    review(&m, &d.company, d.project_id, d.expert.id, j!(5)).await;
    review(&m, &d.expert, d.project_id, d.company.id, j!(5)).await;
    let rep = json(
        m.as_admin(
            Method::GET,
            &format!("/api/admin/users/{}/reputation", d.expert.id),
            None,
        )
        .await,
    )
    .await;
    let c = &rep["components"];
    assert_eq!(
        (
            c["completed_projects"].clone(),
            c["reviews"].clone(),
            c["recent_activity"].clone(),
            c["time_on_platform"].clone()
        ),
        (j!(3.0), j!(5.0), j!(15.0), j!(0.0)),
        "{rep}"
    );
    let verification = c["verification"].as_f64().unwrap();
    let email = if rep["email_verified"] == true {
        5.0
    } else {
        0.0
    };
    assert_eq!(verification, email + 15.0, "{rep}");
    assert_eq!(rep["lead_score"], (3.0 + 5.0 + 15.0 + verification) as i64);
    let level = json(
        m.as_admin(
            Method::GET,
            &format!("/api/admin/users/{}/suggest-level", d.expert.id),
            None,
        )
        .await,
    )
    .await;
    assert_eq!(
        (
            level["suggested_level"].clone(),
            level["current_level"].clone()
        ),
        (j!("Global"), j!("Global"))
    );
    assert_eq!(level["lead_score"], rep["lead_score"]);
    let r = as_user(
        &m,
        &d.expert,
        Method::GET,
        &format!("/api/admin/users/{}/reputation", d.expert.id),
        None,
    )
    .await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let r = m
        .as_admin(Method::GET, "/api/admin/users/999999/reputation", None)
        .await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
}
