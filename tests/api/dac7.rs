//! DAC7 tax-reporting review: the expert's yearly summary from released payments, the
//! confirmation (once, also when sent twice at once), administrators asking experts to
//! review, and the annual report of reportable sellers.

use chrono::Datelike;
use reqwest::{Method, StatusCode};
use serde_json::json as j;

use crate::escrow::released;
use crate::helpers::json;
use crate::market::{Market, code, notifications_of, wait_notification};

#[actix_web::test]
async fn the_summary_review_notification_and_report_follow_released_money() {
    let m = Market::open().await;
    let year = m.app.clock.now().year();
    let d = released(&m, "tax", 2500.0).await;

    let summary_path = format!("/api/dac7/expert/dac7-summary?year={year}");
    let r = m
        .send(
            &d.expert,
            Method::GET,
            "/api/dac7/expert/dac7-summary",
            None,
        )
        .await;
    assert_eq!(
        r.status(),
        StatusCode::UNPROCESSABLE_ENTITY,
        "the year is required"
    );
    let r = m.send(&d.company, Method::GET, &summary_path, None).await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN, "experts only");

    let r = m.send(&d.expert, Method::GET, &summary_path, None).await;
    assert_eq!(r.status(), StatusCode::OK);
    let s = json(r).await;
    let income = &s["income_summary"];
    assert_eq!(income["total_gross"], 2500.0);
    assert_eq!(income["total_commission"], 125.0);
    assert_eq!(income["total_net"], 2375.0);
    assert_eq!(income["paid_milestones"], 1);
    let quarter = (m.app.clock.now().month0() / 3) as usize;
    assert_eq!(income["quarters"][quarter]["gross"], 2500.0);
    assert_eq!(income["quarters"][quarter]["paid_milestones"], 1);
    let others: f64 = (0..4)
        .filter(|q| *q != quarter)
        .map(|q| income["quarters"][q]["gross"].as_f64().unwrap())
        .sum();
    assert_eq!(others, 0.0);
    assert_eq!(s["review_status"], "pending_review");
    assert_eq!(s["reportable"], true, "more than EUR 2,000 in the year");
    assert_eq!(s["fiscal_data"]["tax_id"], "B12345678");

    // Administrators ask for the review: one expert with income, none without.
    let deadline = format!("{}-03-31", year + 1);
    let notify = j!({"year": year, "review_deadline": deadline});
    let r = m
        .as_admin(
            Method::POST,
            "/api/dac7/admin/notify-experts",
            Some(&notify),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let outcome = json(r).await;
    assert_eq!(outcome["notified_count"], 1);
    assert_eq!(outcome["skipped_count"], 0);
    wait_notification(&m.app, d.expert.id, "dac7_review_requested").await;
    m.app.mails_about(&d.expert.email, "DAC7").await;
    let s = json(m.send(&d.expert, Method::GET, &summary_path, None).await).await;
    assert_eq!(s["review_status"], "notified");
    assert_eq!(
        m.count(
            "SELECT COUNT(*) FROM profiles WHERE user_id = $1 AND profile_type = 'experto'
                AND dac7_review_status = 'notified' AND dac7_reviewed_at IS NULL",
            d.expert.id
        )
        .await,
        1,
        "a request to review stamps no review time"
    );
    assert_eq!(s["review_deadline"], deadline.as_str());

    // The expert confirms once.
    let review = |confirmed: bool| j!({"period": year, "confirmed": confirmed});
    let r = m
        .send(
            &d.expert,
            Method::POST,
            "/api/dac7/expert/dac7-review",
            Some(review(false)),
        )
        .await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert_eq!(code(&json(r).await), "CONFIRMATION_REQUIRED");
    let (a, b) = tokio::join!(
        m.send(
            &d.expert,
            Method::POST,
            "/api/dac7/expert/dac7-review",
            Some(review(true))
        ),
        m.send(
            &d.expert,
            Method::POST,
            "/api/dac7/expert/dac7-review",
            Some(review(true))
        ),
    );
    let mut statuses = [a.status(), b.status()];
    statuses.sort();
    assert_eq!(statuses, [StatusCode::OK, StatusCode::CONFLICT]);
    assert_eq!(
        m.count(
            "SELECT COUNT(*) FROM dac7_reviews WHERE user_id = $1 AND status = 'reviewed'",
            d.expert.id
        )
        .await,
        1
    );
    assert_eq!(
        m.count(
            "SELECT COUNT(*) FROM profiles WHERE user_id = $1 AND profile_type = 'experto'
                AND dac7_review_status = 'reviewed' AND dac7_reviewed_at IS NOT NULL",
            d.expert.id
        )
        .await,
        1,
        "the profile keeps the review and its time"
    );
    let r = m
        .as_admin(
            Method::POST,
            "/api/dac7/admin/notify-experts",
            Some(&notify),
        )
        .await;
    let outcome = json(r).await;
    assert_eq!(
        (
            outcome["notified_count"].as_i64(),
            outcome["skipped_count"].as_i64()
        ),
        (Some(0), Some(1))
    );

    // A fiscal name that would be a formula in a spreadsheet splitting on `;` (probe D23).
    let profile_id = m
        .count(
            "SELECT id FROM profiles WHERE user_id = $1 AND profile_type = 'experto'",
            d.expert.id,
        )
        .await;
    let mut fiscal: serde_json::Value = serde_json::from_str(crate::market::FISCAL).unwrap();
    fiscal["fiscal_name"] = j!("x;=cmd|' /C calc'!A0;y");
    let r = m
        .send(
            &d.expert,
            Method::PUT,
            &format!("/api/profiles/{profile_id}/fiscal-data"),
            Some(fiscal),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);

    // The annual report lists the reportable seller.
    let r = report(&m, year).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/csv")
    );
    let csv = r.text().await.unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 2, "{csv}");
    assert!(lines[1].contains("B12345678"));
    assert!(lines[1].contains(",2500.00,125.00,2375.00,1,reviewed"));
    assert!(
        lines[1].contains(r#","x;'=cmd|' /C calc'!A0;y","#),
        "{}",
        lines[1]
    );
    for cell in lines[1].split([',', ';']) {
        assert!(
            !cell.trim_start_matches('"').starts_with(['=', '+', '@']),
            "a cell starts a formula: {cell}"
        );
    }
    let r = report(&m, year - 1).await;
    assert_eq!(
        r.text().await.unwrap().lines().count(),
        1,
        "nothing the year before"
    );
}

/// Administrators asking a year's experts to review while the experts confirm it: whichever
/// comes first, every confirmation stands (a request never takes a year back from `reviewed`),
/// and only experts marked by the request are told.
#[actix_web::test]
async fn a_request_to_review_racing_the_experts_confirmations_leaves_every_year_reviewed() {
    let m = Market::open().await;
    let year = m.app.clock.now().year();
    let mut experts = Vec::new();
    for k in 0..6 {
        experts.push(released(&m, &format!("race{k}"), 2500.0).await.expert);
    }
    // Two confirm first, so the request meets a reviewed year on either engine; the others
    // confirm while it runs.
    let confirm = |expert| {
        m.send(
            expert,
            Method::POST,
            "/api/dac7/expert/dac7-review",
            Some(j!({"period": year, "confirmed": true})),
        )
    };
    for expert in &experts[..2] {
        assert_eq!(confirm(expert).await.status(), StatusCode::OK);
    }
    let confirmations = experts[2..].iter().map(confirm);
    let ask = j!({"year": year, "review_deadline": format!("{}-03-31", year + 1)});
    let request = m.as_admin(Method::POST, "/api/dac7/admin/notify-experts", Some(&ask));
    let (outcome, confirmed) = tokio::join!(request, futures_util::future::join_all(confirmations));
    assert_eq!(outcome.status(), StatusCode::OK);
    let outcome = json(outcome).await;
    for r in confirmed {
        assert_eq!(r.status(), StatusCode::OK);
    }
    let notified = outcome["notified_count"].as_i64().unwrap();
    assert_eq!(notified + outcome["skipped_count"].as_i64().unwrap(), 6);
    for expert in &experts {
        assert_eq!(
            m.count(
                "SELECT COUNT(*) FROM dac7_reviews d JOIN profiles p
                     ON p.user_id = d.user_id AND p.profile_type = 'experto'
                  WHERE d.user_id = $1 AND d.status = 'reviewed'
                    AND p.dac7_review_status = 'reviewed' AND p.dac7_reviewed_at IS NOT NULL",
                expert.id
            )
            .await,
            1,
            "expert {} keeps the year reviewed",
            expert.id
        );
    }
    // Once the request's events are out, the experts it marked are told, once each.
    let mut told = Vec::new();
    for _ in 0..250 {
        let _ = m.app.state.outbox.trigger().await;
        told.clear();
        for expert in &experts {
            told.push(notifications_of(&m.app, expert.id, "dac7_review_requested").await);
        }
        if told.iter().sum::<i64>() >= notified {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(told.iter().all(|n| *n <= 1), "{told:?}");
    assert_eq!(told.iter().sum::<i64>(), notified);
}

#[actix_web::test]
async fn incomplete_fiscal_data_is_refused() {
    let m = Market::open().await;
    let expert = m.member("nofiscal", "experto", false, true).await;
    let r = m
        .send(
            &expert,
            Method::GET,
            "/api/dac7/expert/dac7-summary?year=2026",
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert_eq!(code(&json(r).await), "FISCAL_DATA_REQUIRED");
    let r = m
        .send(
            &expert,
            Method::POST,
            "/api/dac7/expert/dac7-review",
            Some(j!({"period": 2026, "confirmed": true})),
        )
        .await;
    assert_eq!(code(&json(r).await), "FISCAL_DATA_REQUIRED");
}

/// A report longer than one piece of the stream lists each reportable seller once, by
/// account id; sellers under both thresholds stay out.
#[actix_web::test]
async fn the_report_lists_every_reportable_seller_once_by_account() {
    let m = Market::open().await;
    let year = m.app.clock.now().year();
    // Every third account under both thresholds (one activity, EUR 1.00); the others above
    // the consideration threshold (EUR 2,500.00).
    let ids: Vec<i64> = (0..3_000).rev().map(|k| 4_000 + 7 * k).collect();
    let reportable = |id: i64| id % 3 != 0;
    store_rows(
        &m,
        &[
            expert_accounts(&ids),
            format!(
                "INSERT INTO tallies (name, key, user_id, n, total) VALUES {}",
                values(&ids, |id| {
                    let total = if reportable(id) { 250_000 } else { 100 };
                    format!("('seller_income', '{year}-Q2 gross', {id}, 1, {total})")
                })
            ),
        ],
    )
    .await;

    let r = report(&m, year).await;
    assert_eq!(r.status(), StatusCode::OK);
    let csv = r.text().await.unwrap();
    assert!(csv.len() > 64 * 1024, "more than one piece: {}", csv.len());
    let listed: Vec<i64> = csv
        .lines()
        .skip(1)
        .map(|line| line.split(',').nth(1).unwrap().parse().unwrap())
        .collect();
    let mut expected: Vec<i64> = ids.into_iter().filter(|id| reportable(*id)).collect();
    expected.sort_unstable();
    let first_difference = listed.iter().zip(&expected).find(|(got, want)| got != want);
    assert!(
        listed == expected,
        "{} listed, {} expected; first difference (listed, expected): {first_difference:?}",
        listed.len(),
        expected.len()
    );
    assert!(
        csv.lines()
            .skip(1)
            .all(|line| line
                .ends_with(",eur,0.00,2500.00,0.00,0.00,2500.00,0.00,0.00,1,pending_review")),
        "{}",
        csv.lines().nth(1).unwrap()
    );
}

/// A client reading the report slower than the statement timeout still gets all of it, with
/// its length: the report is read from the database at the database's pace, not the
/// client's. The client's socket takes a few kilobytes at a time, so the reading of a report
/// sent as it is read would wait on the client past the limit.
#[actix_web::test]
async fn a_client_slower_than_the_statement_timeout_gets_the_whole_report() {
    let m = Market::open_with(&[("DATABASE_STATEMENT_TIMEOUT_SECONDS", "3")]).await;
    let year = m.app.clock.now().year();
    let ids: Vec<i64> = (0..1_000).map(|k| 30_000 + k).collect();
    let address = "Calle Mayor 1 ".repeat(70);
    store_rows(
        &m,
        &[
            expert_accounts(&ids),
            format!(
                "INSERT INTO profiles (user_id, profile_type, fiscal_data_complete, fiscal_name,
                                       fiscal_address, created_at, updated_at) VALUES {}",
                values(&ids, |id| format!(
                    "({id}, 'experto', TRUE, 'Seller {id}', '{address}', $1, $1)"
                ))
            ),
            format!(
                "INSERT INTO tallies (name, key, user_id, n, total) VALUES {}",
                values(&ids, |id| format!(
                    "('seller_income', '{year}-Q3 gross', {id}, 1, 250000)"
                ))
            ),
        ],
    )
    .await;

    let path = format!("/api/dac7/admin/report?year={year}");
    let (head, body) = read_slowly(&m, &path, std::time::Duration::from_secs(4)).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let length: usize = head
        .lines()
        .find_map(|line| {
            line.to_ascii_lowercase()
                .strip_prefix("content-length: ")
                .map(str::to_owned)
        })
        .unwrap_or_else(|| panic!("no length: {head}"))
        .parse()
        .unwrap();
    assert!(length > 1_000_000, "{length}");
    assert_eq!(body.len(), length, "the whole report, however slowly read");
    let listed: Vec<i64> = String::from_utf8(body)
        .unwrap()
        .lines()
        .skip(1)
        .map(|line| line.split(',').nth(1).unwrap().parse().unwrap())
        .collect();
    assert!(listed == ids, "{} of {} sellers", listed.len(), ids.len());
}

/// `path` downloaded as an administrator through a socket that takes a few kilobytes at a
/// time, waiting `pause` between the answer's head and its body: the head as text, and the
/// body as far as it came.
async fn read_slowly(m: &Market, path: &str, pause: std::time::Duration) -> (String, Vec<u8>) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let address: std::net::SocketAddr =
        m.app.address.trim_start_matches("http://").parse().unwrap();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4 * 1024).unwrap();
    let mut stream = socket.connect(address).await.unwrap();
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {}\r\n\
         Connection: close\r\n\r\n",
        m.admin_token
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        head.push(stream.read_u8().await.unwrap());
    }
    tokio::time::sleep(pause).await;
    let mut body = Vec::new();
    // A cut answer ends in an error or early: what came is the body.
    let _ = stream.read_to_end(&mut body).await;
    (String::from_utf8(head).unwrap(), body)
}

/// A report the database cannot finish within the statement timeout is answered 503
/// `QUERY_TIMEOUT`, not a `200` and a cut download. PostgreSQL: the report waits on a lock
/// held on the income tallies (SQLite's readers never wait on a lock; its cut statement is
/// answered the same way, `store::a_statement_past_the_timeout_is_cut_with_a_clear_error`).
#[actix_web::test]
async fn a_report_past_the_statement_timeout_is_answered_as_an_error() {
    let m = Market::open_with(&[("DATABASE_STATEMENT_TIMEOUT_SECONDS", "1")]).await;
    let year = m.app.clock.now().year();
    let mut conn = m.app.db.conn().await.unwrap();
    let marketplace::store::Exec::Postgres(locker) = conn.exec() else {
        return;
    };
    sqlx::query("BEGIN").execute(&mut *locker).await.unwrap();
    sqlx::query("LOCK TABLE tallies IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *locker)
        .await
        .unwrap();

    let r = report(&m, year).await;
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(code(&json(r).await), "QUERY_TIMEOUT");

    sqlx::query("ROLLBACK").execute(&mut *locker).await.unwrap();
    let r = report(&m, year).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        r.text().await.unwrap().lines().count(),
        1,
        "the header alone"
    );
}

/// Asking more experts than one event holds: every expert with income and complete fiscal
/// data is marked and told once, in one event per thousand; one who reviewed is skipped.
#[actix_web::test]
async fn notifying_thousands_of_experts_marks_and_tells_each_once() {
    let m = Market::open().await;
    let year = m.app.clock.now().year();
    let ids: Vec<i64> = (0..1_500).map(|k| 20_000 + k).collect();
    let reviewed = ids[700];
    store_rows(
        &m,
        &[
            expert_accounts(&ids),
            format!(
                "INSERT INTO profiles (user_id, profile_type, fiscal_data_complete, fiscal_name,
                                       created_at, updated_at) VALUES {}",
                values(&ids, |id| format!(
                    "({id}, 'experto', TRUE, 'Seller {id}', $1, $1)"
                ))
            ),
            format!(
                "INSERT INTO tallies (name, key, user_id, n, total) VALUES {}",
                values(&ids, |id| format!(
                    "('seller_income', '{year}-Q1 gross', {id}, 1, 50000)"
                ))
            ),
            format!(
                "INSERT INTO dac7_reviews (user_id, period, status, reviewed_at, created_at,
                                           updated_at)
                 VALUES ({reviewed}, {year}, 'reviewed', $1, $1, $1)"
            ),
        ],
    )
    .await;

    let r = m
        .as_admin(
            Method::POST,
            "/api/dac7/admin/notify-experts",
            Some(&j!({"year": year, "review_deadline": format!("{}-03-31", year + 1)})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let outcome = json(r).await;
    assert_eq!(
        (
            outcome["notified_count"].as_i64(),
            outcome["skipped_count"].as_i64()
        ),
        (Some(1_499), Some(1))
    );
    let count = |sql: &'static str| m.count(sql, i64::from(year));
    assert_eq!(
        count("SELECT COUNT(*) FROM dac7_reviews WHERE period = $1 AND status = 'notified'").await,
        1_499
    );
    assert_eq!(
        count(
            "SELECT COUNT(*) FROM profiles
              WHERE dac7_review_period = $1 AND dac7_review_status = 'notified'"
        )
        .await,
        1_499
    );
    assert_eq!(
        count(
            "SELECT COUNT(*) FROM events
              WHERE kind = 'dac7.experts_notified' AND aggregate_id = $1"
        )
        .await,
        2,
        "one event per thousand experts"
    );
    for expert in [ids[0], ids[999], ids[1_000], ids[1_499]] {
        wait_notification(&m.app, expert, "dac7_review_requested").await;
    }
    let mut conn = m.app.db.conn().await.unwrap();
    let told: Vec<i64> = marketplace::on_exec!(conn.exec(), c => sqlx::query_scalar(
        "SELECT user_id FROM notifications WHERE type = 'dac7_review_requested' ORDER BY user_id")
        .fetch_all(c).await)
    .unwrap();
    let expected: Vec<i64> = ids.iter().copied().filter(|id| *id != reviewed).collect();
    assert_eq!(told.len(), expected.len());
    assert!(
        told == expected,
        "each expert told once, the reviewed one not"
    );
}

/// The annual report of `year`, as an administrator downloads it.
async fn report(m: &Market, year: i32) -> reqwest::Response {
    m.as_admin(
        Method::GET,
        &format!("/api/dac7/admin/report?year={year}"),
        None,
    )
    .await
}

/// The statement writing an expert's account for each of `ids`, created at `$1`.
fn expert_accounts(ids: &[i64]) -> String {
    format!(
        "INSERT INTO users (id, email, username, password_hash, active_role, created_at,
                            updated_at) VALUES {}",
        values(ids, |id| {
            format!("({id}, 'seller{id}@example.com', 'seller{id}', 'x', 'experto', $1, $1)")
        })
    )
}

/// `row` for each of `ids`, as the rows of one `VALUES`.
fn values(ids: &[i64], row: impl Fn(i64) -> String) -> String {
    ids.iter().map(|id| row(*id)).collect::<Vec<_>>().join(", ")
}

/// Writes rows straight into the tables: the report and the review requests read accounts,
/// profiles and the income the writes keep, however they came to be. Each statement runs with
/// the clock's time as `$1`, and holds integers and fixed words only.
async fn store_rows(m: &Market, statements: &[String]) {
    let mut conn = m.app.db.conn().await.unwrap();
    let now = m.app.clock.now();
    marketplace::on_exec!(conn.exec(), c => async {
        for statement in statements {
            sqlx::query(sqlx::AssertSqlSafe(statement.as_str()))
                .bind(now)
                .execute(&mut *c)
                .await?;
        }
        Ok::<_, sqlx::Error>(())
    }
    .await)
    .unwrap();
}
