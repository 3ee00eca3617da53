//! Lists whose statements are assembled from the filters a request has (issue #32): a
//! project's and an expert's applications, the administrators' payments, disputes and
//! profiles, the CRM sync log and a user's webhook event feed. For every combination of
//! filters, each page holds exactly the rows a plain read of the table picks, in the list's
//! order, and the total is their number. Rows are written straight to the tables (no event,
//! so no worker adds any meanwhile), with creation times out of id order and tied.

use chrono::{DateTime, Duration, Utc};
use marketplace::domain::crm::SyncStatus;
use marketplace::domain::dispute::DisputeStatus;
use marketplace::domain::payment::{PaymentStatus, PayoutStatus};
use marketplace::domain::profile::VerificationStatus;
use marketplace::domain::project::{ApplicationStatus, ProjectStatus};
use marketplace::domain::user::Role;
use marketplace::domain::webhook_rules::WebhookDeliveryState;
use marketplace::on_exec;
use marketplace::store::projects::{self, NewProject};

use crate::helpers::{TestApp, spawn_app};

/// The creation time of the `i`-th row: out of id order, and every fifth shares one.
fn at(base: DateTime<Utc>, i: usize) -> DateTime<Utc> {
    let i = i as i64;
    base - Duration::minutes((i * 7) % 11) - Duration::seconds(i % 5)
}

/// An account written to the table (registering would record events the workers act on).
async fn user(app: &TestApp, name: &str) -> i64 {
    let mut conn = app.db.conn().await.unwrap();
    on_exec!(conn.exec(), c => sqlx::query_scalar(
        "INSERT INTO users (email, username, password_hash, active_role, created_at, updated_at)
         VALUES ($1, $2, '!', $3, $4, $4) RETURNING id")
        .bind(format!("{name}@example.com"))
        .bind(name)
        .bind(Role::Empresa.as_str())
        .bind(app.clock.now())
        .fetch_one(c).await)
    .unwrap()
}

async fn project(app: &TestApp, company: i64, title: &str) -> i64 {
    let mut conn = app.db.conn().await.unwrap();
    let new = NewProject {
        company_id: company,
        target_expert_id: None,
        title,
        description: "",
        budget_minor: 100_000,
        currency: "eur",
        deadline: None,
        skills_required: &[],
        project_type: "curated",
        status: ProjectStatus::Draft,
        validation_status: None,
        submitted_at: None,
    };
    projects::insert(conn.exec(), &new, app.clock.now())
        .await
        .unwrap()
}

/// `rows` in the list's order: by `key`, ascending or newest first.
fn sorted<R, K: Ord>(mut rows: Vec<R>, newest_first: bool, key: impl Fn(&R) -> K) -> Vec<R> {
    rows.sort_by_key(|r| key(r));
    if newest_first {
        rows.reverse();
    }
    rows
}

/// Reads every page of sizes 2, 3 and 100 (one past the end too) through `read(page, size)`
/// and holds each to its part of `expected`, and the total to its length.
async fn pages(
    what: &str,
    expected: &[i64],
    mut read: impl AsyncFnMut(i64, i64) -> (Vec<i64>, i64),
) {
    for size in [2, 3, 100] {
        let last = expected.len() as i64 / size + 1;
        for page in 1..=last + 1 {
            let (ids, total) = read(page, size).await;
            let from = ((page - 1) * size) as usize;
            let want: Vec<i64> = expected
                .iter()
                .copied()
                .skip(from)
                .take(size as usize)
                .collect();
            assert_eq!(ids, want, "{what}: page {page} of {size}");
            assert_eq!(total, expected.len() as i64, "{what}: total");
        }
    }
}

/// `(page, size)` as `LIMIT` and `OFFSET`.
fn limit_offset(page: i64, size: i64) -> (i64, i64) {
    (size, (page - 1) * size)
}

/// `None`, then each of `values`.
fn or_none<T: Clone>(values: &[T]) -> Vec<Option<T>> {
    std::iter::once(None)
        .chain(values.iter().cloned().map(Some))
        .collect()
}

#[actix_web::test]
async fn applications_of_a_project_and_of_an_expert_follow_their_filters() {
    use marketplace::store::applications;
    let app = spawn_app().await;
    let company = user(&app, "apps_company").await;
    let mut experts = Vec::new();
    for n in 0..4 {
        experts.push(user(&app, &format!("apps_expert{n}")).await);
    }
    let mut projects = Vec::new();
    for n in 0..3 {
        projects.push(project(&app, company, &format!("Applied {n}")).await);
    }
    let base = app.clock.now();
    let mut conn = app.db.conn().await.unwrap();
    let pairs = projects
        .iter()
        .flat_map(|p| experts.iter().map(move |e| (*p, *e)));
    for (i, (p, e)) in pairs.enumerate() {
        let status = ApplicationStatus::ALL[i % ApplicationStatus::ALL.len()];
        on_exec!(conn.exec(), c => sqlx::query(
            "INSERT INTO applications (project_id, expert_id, cover_letter, proposed_budget_minor,
                 proposed_milestones, status, attempt_number, created_at, updated_at)
             VALUES ($1, $2, '', 1000, '[]', $3, 1, $4, $4)")
            .bind(p).bind(e).bind(status.as_str()).bind(at(base, i))
            .execute(c).await.map(drop))
        .unwrap();
    }
    let all: Vec<(i64, i64, i64, String, DateTime<Utc>)> = on_exec!(conn.exec(), c =>
        sqlx::query_as("SELECT id, project_id, expert_id, status, created_at FROM applications")
            .fetch_all(c).await)
    .unwrap();
    for status in or_none(&ApplicationStatus::ALL) {
        let of_status = |s: &str| status.is_none_or(|status| status.as_str() == s);
        for &p in &projects {
            let rows = all.iter().filter(|r| r.1 == p && of_status(&r.3));
            let expected: Vec<i64> = sorted(rows.collect(), false, |r| (r.4, r.0))
                .into_iter()
                .map(|r| r.0)
                .collect();
            pages(
                &format!("project {p}, {status:?}"),
                &expected,
                async |page, size| {
                    let (limit, offset) = limit_offset(page, size);
                    let (items, total) =
                        applications::list_for_project(conn.exec(), p, status, limit, offset)
                            .await
                            .unwrap();
                    (items.iter().map(|a| a.id).collect(), total)
                },
            )
            .await;
        }
        for &e in &experts {
            let rows = all.iter().filter(|r| r.2 == e && of_status(&r.3));
            let expected: Vec<i64> = sorted(rows.collect(), true, |r| (r.4, r.0))
                .into_iter()
                .map(|r| r.0)
                .collect();
            pages(
                &format!("expert {e}, {status:?}"),
                &expected,
                async |page, size| {
                    let (items, total) =
                        applications::list_for_expert(conn.exec(), e, status, page, size)
                            .await
                            .unwrap();
                    (items.iter().map(|a| a.id).collect(), total)
                },
            )
            .await;
        }
    }
    drop(conn);
    app.stop().await;
}

#[actix_web::test]
async fn admin_payments_follow_every_combination_of_filters_newest_id_first() {
    use marketplace::store::payments::{self, PaymentFilter};
    let app = spawn_app().await;
    let companies = [user(&app, "pay_co1").await, user(&app, "pay_co2").await];
    let experts = [user(&app, "pay_ex1").await, user(&app, "pay_ex2").await];
    let projects = [
        project(&app, companies[0], "Paid 1").await,
        project(&app, companies[1], "Paid 2").await,
    ];
    let base = app.clock.now();
    let mut conn = app.db.conn().await.unwrap();
    for i in 0..18 {
        let status = PaymentStatus::ALL[i % PaymentStatus::ALL.len()];
        let payout = PayoutStatus::ALL[(i / 2) % PayoutStatus::ALL.len()];
        let company = (i % 3 < 2).then(|| companies[i % 3]);
        on_exec!(conn.exec(), c => sqlx::query(
            "INSERT INTO payments (project_id, company_id, expert_id, amount_minor, status,
                 payout_status, created_at, updated_at)
             VALUES ($1, $2, $3, 1000, $4, $5, $6, $6)")
            .bind(projects[i % 2]).bind(company).bind(experts[(i / 3) % 2])
            .bind(status.as_str()).bind(payout.as_str()).bind(at(base, i))
            .execute(c).await.map(drop))
        .unwrap();
    }
    type Row = (i64, i64, Option<i64>, Option<i64>, String, String);
    let all: Vec<Row> = on_exec!(conn.exec(), c => sqlx::query_as(
        "SELECT id, project_id, company_id, expert_id, status, payout_status FROM payments")
        .fetch_all(c).await)
    .unwrap();
    let statuses = &PaymentStatus::ALL[..3];
    for company_id in or_none(&companies) {
        for expert_id in or_none(&experts) {
            for project_id in or_none(&projects) {
                for status in or_none(statuses) {
                    for payout_status in or_none(&PayoutStatus::ALL[..2]) {
                        let f = PaymentFilter {
                            company_id,
                            expert_id,
                            project_id,
                            status,
                            payout_status,
                        };
                        let rows = all.iter().filter(|r| {
                            company_id.is_none_or(|c| r.2 == Some(c))
                                && expert_id.is_none_or(|e| r.3 == Some(e))
                                && project_id.is_none_or(|p| r.1 == p)
                                && status.is_none_or(|s| r.4 == s.as_str())
                                && payout_status.is_none_or(|s| r.5 == s.as_str())
                        });
                        let expected: Vec<i64> =
                            sorted(rows.map(|r| r.0).collect(), true, |id| *id);
                        pages(&format!("{f:?}"), &expected, async |page, size| {
                            let (limit, offset) = limit_offset(page, size);
                            let (items, total) = payments::list(conn.exec(), &f, limit, offset)
                                .await
                                .unwrap();
                            (items.iter().map(|y| y.id).collect(), total)
                        })
                        .await;
                    }
                }
            }
        }
    }
    drop(conn);
    app.stop().await;
}

/// A dispute's place among statuses: the order a dispute lives through them.
fn lifecycle_rank(status: &str) -> usize {
    DisputeStatus::ALL
        .iter()
        .position(|s| s.as_str() == status)
        .unwrap()
}

#[actix_web::test]
async fn admin_disputes_follow_status_and_search_in_each_order() {
    use marketplace::store::disputes::{self, DisputeFilter, DisputeOrder};
    let app = spawn_app().await;
    let company = user(&app, "disputing_co").await;
    let base = app.clock.now();
    // (title, reason, description, project title): `%` and `_` are searched as themselves.
    let texts = [
        (Some("Late delivery"), "50% refund", None, "Data pipeline"),
        (None, "500 refund", Some("a_b"), "Web shop"),
        (Some("Quality"), "Broken build", Some("axb"), "Mobile app"),
        (Some("Scope"), "Wanted more", None, "Pipeline rework"),
        (None, "No answer", Some("Silence"), "Design"),
        (Some("Refund please"), "Money", None, "Audit"),
        (Some("Late"), "Again late", None, "Migration"),
        (None, "Other", None, "Search"),
        (
            Some("Billing"),
            "Invoice",
            Some("REFUND owed"),
            "Billing tool",
        ),
        (Some("Tie"), "Same time", None, "Tied"),
    ];
    for (i, (title, reason, description, project_title)) in texts.into_iter().enumerate() {
        let p = project(&app, company, project_title).await;
        let status = DisputeStatus::ALL[i % DisputeStatus::ALL.len()];
        let mut conn = app.db.conn().await.unwrap();
        on_exec!(conn.exec(), c => sqlx::query(
            "INSERT INTO disputes (project_id, raised_by, status, reason, title, description,
                 created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $7)")
            .bind(p).bind(company).bind(status.as_str()).bind(reason).bind(title)
            .bind(description).bind(at(base, i % 9))
            .execute(c).await.map(drop))
        .unwrap();
    }
    let mut conn = app.db.conn().await.unwrap();
    type Row = (
        i64,
        String,
        Option<String>,
        String,
        Option<String>,
        String,
        DateTime<Utc>,
    );
    let all: Vec<Row> = on_exec!(conn.exec(), c => sqlx::query_as(
        "SELECT d.id, d.status, d.title, d.reason, d.description, p.title, d.created_at
         FROM disputes d JOIN projects p ON p.id = d.project_id")
        .fetch_all(c).await)
    .unwrap();
    let searches = [
        "refund",
        "PIPELINE",
        "50%",
        "a_b",
        "_",
        "   ",
        "nothing like it",
    ];
    let orders = [
        DisputeOrder::CreatedDesc,
        DisputeOrder::CreatedAsc,
        DisputeOrder::StatusDesc,
        DisputeOrder::StatusAsc,
    ];
    for status in or_none(&DisputeStatus::ALL) {
        for search in or_none(&searches) {
            for order in orders {
                let term = search.map(|s| s.trim().to_lowercase()).unwrap_or_default();
                let holds = |text: &str| text.to_lowercase().contains(&term);
                let rows = all.iter().filter(|r| {
                    status.is_none_or(|s| r.1 == s.as_str())
                        && (holds(r.2.as_deref().unwrap_or(""))
                            || holds(&r.3)
                            || holds(r.4.as_deref().unwrap_or(""))
                            || holds(&r.5))
                });
                let rows: Vec<&Row> = rows.collect();
                let by_status = matches!(order, DisputeOrder::StatusDesc | DisputeOrder::StatusAsc);
                let newest_first =
                    matches!(order, DisputeOrder::CreatedDesc | DisputeOrder::StatusDesc);
                let expected: Vec<i64> = sorted(rows, newest_first, |r| {
                    let rank = if by_status { lifecycle_rank(&r.1) } else { 0 };
                    (rank, r.6, r.0)
                })
                .into_iter()
                .map(|r| r.0)
                .collect();
                let f = DisputeFilter {
                    status,
                    search,
                    order,
                };
                pages(&format!("{f:?}"), &expected, async |page, size| {
                    let (items, total) = disputes::list(conn.exec(), &f, page, size).await.unwrap();
                    (items.iter().map(|d| d.id).collect(), total)
                })
                .await;
            }
        }
    }
    drop(conn);
    app.stop().await;
}

#[actix_web::test]
async fn admin_profiles_follow_type_verification_and_search() {
    use marketplace::store::profiles::{self, AdminFilter};
    let app = spawn_app().await;
    let base = app.clock.now();
    let names = [
        Some("Ana 50% Ruiz"),
        Some("Ana 500 Ruiz"),
        None,
        Some("a_b studio"),
        Some("axb studio"),
    ];
    let mut owners = Vec::new();
    for i in 0..12 {
        owners.push(user(&app, &format!("profiled{i}")).await);
    }
    let mut conn = app.db.conn().await.unwrap();
    for (i, owner) in owners.into_iter().enumerate() {
        let kind = [Role::Empresa, Role::Experto][i % 2];
        let status = VerificationStatus::ALL[i % VerificationStatus::ALL.len()];
        let company = (i % 3 == 0).then_some("Pipeline Works");
        let slug = (i % 4 == 1).then(|| format!("slug-{i}"));
        on_exec!(conn.exec(), c => sqlx::query(
            "INSERT INTO profiles (user_id, profile_type, full_name, company_name, slug,
                 is_verified, verification_status, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8)")
            .bind(owner).bind(kind.as_str()).bind(names[i % names.len()]).bind(company)
            .bind(slug).bind(i % 3 == 1).bind(status.as_str()).bind(at(base, i))
            .execute(c).await.map(drop))
        .unwrap();
    }
    type Row = (
        i64,
        String,
        bool,
        String,
        Option<String>,
        Option<String>,
        Option<String>,
        String,
        String,
        DateTime<Utc>,
    );
    let all: Vec<Row> = on_exec!(conn.exec(), c => sqlx::query_as(
        "SELECT p.id, p.profile_type, p.is_verified, p.verification_status, p.full_name,
                p.company_name, p.slug, u.email, u.username, p.created_at
         FROM profiles p JOIN users u ON u.id = p.user_id")
        .fetch_all(c).await)
    .unwrap();
    let kinds = [Role::Empresa.as_str(), Role::Experto.as_str()];
    let searches = [
        "50%",
        "a_b",
        "PIPELINE",
        "slug-5",
        "profiled1",
        "@EXAMPLE.com",
        " ",
        "nobody",
    ];
    for profile_type in or_none(&kinds) {
        for is_verified in or_none(&[true, false]) {
            for verification_status in or_none(&VerificationStatus::ALL) {
                for search in or_none(&searches) {
                    let term = search.map(|s| s.trim().to_lowercase()).unwrap_or_default();
                    let holds =
                        |text: Option<&str>| text.unwrap_or("").to_lowercase().contains(&term);
                    let rows = all.iter().filter(|r| {
                        profile_type.is_none_or(|t| r.1 == t)
                            && is_verified.is_none_or(|v| r.2 == v)
                            && verification_status.is_none_or(|s| r.3 == s.as_str())
                            && (holds(r.4.as_deref())
                                || holds(r.5.as_deref())
                                || holds(r.6.as_deref())
                                || holds(Some(r.7.as_str()))
                                || holds(Some(r.8.as_str())))
                    });
                    let expected: Vec<i64> = sorted(rows.collect(), true, |r| (r.9, r.0))
                        .into_iter()
                        .map(|r| r.0)
                        .collect();
                    let f = AdminFilter {
                        profile_type: profile_type.map(str::to_owned),
                        is_verified,
                        verification_status,
                        search: search.map(str::to_owned),
                    };
                    pages(&format!("{f:?}"), &expected, async |page, size| {
                        let (items, total) = profiles::list_admin(conn.exec(), &f, page, size)
                            .await
                            .unwrap();
                        (items.iter().map(|p| p.id).collect(), total)
                    })
                    .await;
                }
            }
        }
    }
    drop(conn);
    app.stop().await;
}

#[actix_web::test]
async fn crm_sync_log_follows_user_event_status_and_contact() {
    use marketplace::store::crm::{self, LogFilter};
    let app = spawn_app().await;
    let users = [user(&app, "synced1").await, user(&app, "synced2").await];
    let base = app.clock.now();
    let kinds = ["contact_update", "tag_add"];
    let contacts = ["contact-1", "contact-2"];
    let mut conn = app.db.conn().await.unwrap();
    for i in 0..16 {
        let owner = (i % 3 < 2).then(|| users[i % 3]);
        let status = SyncStatus::ALL[(i / 2) % SyncStatus::ALL.len()];
        let contact = (i % 4 < 2).then(|| contacts[i % 4]);
        on_exec!(conn.exec(), c => sqlx::query(
            "INSERT INTO crm_sync_log (user_id, crm_contact_id, event_type, status, created_at,
                 updated_at)
             VALUES ($1, $2, $3, $4, $5, $5)")
            .bind(owner).bind(contact).bind(kinds[(i / 5) % 2]).bind(status.as_str())
            .bind(at(base, i))
            .execute(c).await.map(drop))
        .unwrap();
    }
    type Row = (
        i64,
        Option<i64>,
        Option<String>,
        String,
        String,
        DateTime<Utc>,
    );
    let all: Vec<Row> = on_exec!(conn.exec(), c => sqlx::query_as(
        "SELECT id, user_id, crm_contact_id, event_type, status, created_at FROM crm_sync_log")
        .fetch_all(c).await)
    .unwrap();
    for user_id in or_none(&users) {
        for event_type in or_none(&kinds) {
            for status in or_none(&SyncStatus::ALL) {
                for contact_id in or_none(&contacts) {
                    let rows = all.iter().filter(|r| {
                        user_id.is_none_or(|u| r.1 == Some(u))
                            && contact_id.is_none_or(|c| r.2.as_deref() == Some(c))
                            && event_type.is_none_or(|k| r.3 == k)
                            && status.is_none_or(|s| r.4 == s.as_str())
                    });
                    let expected: Vec<i64> = sorted(rows.collect(), true, |r| (r.5, r.0))
                        .into_iter()
                        .map(|r| r.0)
                        .collect();
                    let f = LogFilter {
                        user_id,
                        event_type: event_type.map(str::to_owned),
                        status,
                        contact_id: contact_id.map(str::to_owned),
                    };
                    pages(&format!("{f:?}"), &expected, async |page, size| {
                        let (items, total) =
                            crm::list_logs(conn.exec(), &f, page, size).await.unwrap();
                        (items.iter().map(|e| e.id).collect(), total)
                    })
                    .await;
                }
            }
        }
    }
    drop(conn);
    app.stop().await;
}

#[actix_web::test]
async fn webhook_event_feed_follows_after_type_and_since_oldest_first() {
    use marketplace::store::webhook_deliveries::{self, FeedFilter};
    let app = spawn_app().await;
    let users = [user(&app, "fed1").await, user(&app, "fed2").await];
    let base = app.clock.now();
    let kinds = ["payment.held", "dispute.created"];
    let mut conn = app.db.conn().await.unwrap();
    for i in 0..20 {
        let created = at(base, i);
        // Every fifth is a test delivery: no event.
        let event: Option<i64> = if i % 5 == 4 {
            None
        } else {
            Some(
                on_exec!(conn.exec(), c => sqlx::query_scalar(
                "INSERT INTO events (kind, aggregate, aggregate_id, created_at, available_at,
                     dispatched_at)
                 VALUES ($1, 'user', 0, $2, $2, $2) RETURNING id")
                .bind(kinds[i % 2]).bind(created)
                .fetch_one(c).await)
                .unwrap(),
            )
        };
        on_exec!(conn.exec(), c => sqlx::query(
            "INSERT INTO webhook_deliveries (message_id, user_id, event_id, event_type, body,
                 state, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $7)")
            .bind(format!("msg-{i}")).bind(users[(i / 3) % 2]).bind(event)
            .bind(kinds[i % 2]).bind(format!("{{\"n\":{i}}}"))
            .bind(WebhookDeliveryState::Delivered.as_str()).bind(created)
            .execute(c).await.map(drop))
        .unwrap();
    }
    type Row = (i64, i64, Option<i64>, String, String, DateTime<Utc>);
    let all: Vec<Row> = on_exec!(conn.exec(), c => sqlx::query_as(
        "SELECT id, user_id, event_id, event_type, body, created_at FROM webhook_deliveries")
        .fetch_all(c).await)
    .unwrap();
    let mut ids: Vec<i64> = all.iter().map(|r| r.0).collect();
    ids.sort_unstable();
    let afters = [ids[0], ids[7], ids[19]];
    let sinces = [at(base, 3), at(base, 0) + Duration::seconds(1)];
    for user_id in users {
        for after in or_none(&afters) {
            for event_type in or_none(&kinds) {
                for since in or_none(&sinces) {
                    let f = FeedFilter {
                        user_id,
                        after,
                        event_type,
                        since,
                    };
                    let rows = all.iter().filter(|r| {
                        r.1 == user_id
                            && r.2.is_some()
                            && after.is_none_or(|a| r.0 > a)
                            && event_type.is_none_or(|k| r.3 == k)
                            && since.is_none_or(|s| r.5 >= s)
                    });
                    let rows = sorted(rows.collect(), false, |r| r.0);
                    let expected: Vec<i64> = rows.iter().map(|r| r.0).collect();
                    let bodies: Vec<&str> = rows.iter().map(|r| r.4.as_str()).collect();
                    pages(&format!("{f:?}"), &expected, async |page, size| {
                        let (limit, offset) = limit_offset(page, size);
                        let read = webhook_deliveries::feed(conn.exec(), f, limit, offset)
                            .await
                            .unwrap();
                        let total = webhook_deliveries::feed_count(conn.exec(), f)
                            .await
                            .unwrap();
                        // The bodies stand for their rows' ids.
                        let ids = read
                            .iter()
                            .map(|b| expected[bodies.iter().position(|x| x == b).unwrap()])
                            .collect();
                        (ids, total)
                    })
                    .await;
                }
            }
        }
    }
    drop(conn);
    app.stop().await;
}
