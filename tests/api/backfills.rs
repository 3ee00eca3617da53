//! Backfills (`store::backfills`, issue #63): the rows a new column was added to are filled by
//! the backfills job in batches, not by the migration; a batch at a time, resumable where the
//! last one stopped; never counted twice by instances racing; never overwriting what a trigger
//! wrote since the migration; and the lists read the old shape until the backfill is done.
//! The first backfill, `project_skill_budgets` (migration 0057), is the one exercised.

use chrono::Utc;
use serde_json::json as j;

use super::helpers::{TestApp, fresh_db, spawn_app};
use marketplace::domain::user::Role;
use marketplace::on_exec;
use marketplace::store::backfills::{self, BATCH_IDS, Batch, Finished, PROJECT_SKILL_BUDGETS};
use marketplace::store::listing::Seek;
use marketplace::store::project_lists::{self, ProjectFilter, Viewer};
use marketplace::store::users::{self, NewUser};
use marketplace::store::{Db, Exec};

/// Projects whose ids spread over four batches: (id, budget in cents). Each requires two
/// skills, so each has two rows in `project_skills`.
const PROJECTS: [(i64, i64); 5] = [
    (1, 10_000),
    (2, 50_000),
    (BATCH_IDS + 7, 20_000),
    (2 * BATCH_IDS + 1, 80_000),
    (3 * BATCH_IDS + 500, 30_000),
];

/// A company and its listed projects of `projects`, requiring Rust and Python.
async fn seed(db: &Db, projects: &[(i64, i64)]) {
    let now = Utc::now();
    let mut tx = db.begin().await.unwrap();
    let user = NewUser {
        email: "company@example.com",
        username: "company",
        password_hash: "$2b$04$abcdefghijklmnopqrstuu",
        roles: &[Role::Empresa],
        email_verified: true,
        accept_marketing: false,
        source: None,
    };
    let company = users::insert(tx.exec(), &user, now).await.unwrap();
    for &(id, budget) in projects {
        on_exec!(tx.exec(), c => sqlx::query(
            "INSERT INTO projects (id, company_id, title, description, budget_minor, currency,
                                   project_type, status, invited_experts, skills_required,
                                   created_at, updated_at)
             VALUES ($1, $2, 'Site', 'A web site', $3, 'eur', 'curated', 'bidding', $4, $5,
                     $6, $6)",
        )
        .bind(id)
        .bind(company)
        .bind(budget)
        .bind(sqlx::types::Json(j!([])))
        .bind(sqlx::types::Json(j!(["Rust", "Python"])))
        .bind(now)
        .execute(c)
        .await
        .map(drop))
        .unwrap();
    }
    tx.commit().await.unwrap();
}

/// Runs `sql` on its own connection.
async fn exec(db: &Db, sql: &'static str) {
    let mut conn = db.conn().await.unwrap();
    on_exec!(conn.exec(), c => sqlx::query(sql).execute(c).await.map(drop)).unwrap();
}

/// Leaves the database as migration 0057 leaves one that already held these projects: the
/// column empty, and the backfill registered up to the last project's id.
async fn as_if_just_migrated(db: &Db) {
    exec(db, "UPDATE project_skills SET budget_minor = NULL").await;
    exec(
        db,
        "UPDATE backfills
            SET upto = (SELECT MAX(id) FROM projects), done_through = 0, rows_changed = 0,
                finished_at = NULL
          WHERE name = 'project_skill_budgets'",
    )
    .await;
}

/// Each skill row's project, its budget there, and the project's own budget.
async fn skill_budgets(db: &Db) -> Vec<(i64, Option<i64>, i64)> {
    let mut conn = db.conn().await.unwrap();
    on_exec!(conn.exec(), c => sqlx::query_as(
        "SELECT s.project_id, s.budget_minor, p.budget_minor
           FROM project_skills s JOIN projects p ON p.id = s.project_id
          ORDER BY s.project_id, s.skill",
    )
    .fetch_all(c)
    .await)
    .unwrap()
}

async fn progress(db: &Db) -> backfills::Progress {
    let mut conn = db.conn().await.unwrap();
    let all = backfills::progress(conn.exec()).await.unwrap();
    all.into_iter()
        .find(|p| p.name == PROJECT_SKILL_BUDGETS.name)
        .expect("migration 0057 registers its backfill")
}

/// Runs batches until none is left; the batches run.
async fn run_to_the_end(db: &Db) -> Vec<Batch> {
    let mut ran = Vec::new();
    while let Some(batch) = backfills::run_batch(db, Utc::now()).await.unwrap() {
        ran.push(batch);
        assert!(ran.len() < 100, "a backfill of a few ids ends");
    }
    ran
}

#[actix_web::test]
async fn a_backfill_fills_in_batches_and_resumes_where_the_last_one_stopped() {
    let (db, _dir) = fresh_db().await;
    seed(&db, &PROJECTS).await;
    as_if_just_migrated(&db).await;
    let finished = Finished::default();
    let mut conn = db.conn().await.unwrap();
    finished.refresh(conn.exec()).await.unwrap();
    assert!(!finished.is_finished(&PROJECT_SKILL_BUDGETS));

    let first = backfills::run_batch(&db, Utc::now()).await.unwrap();
    assert_eq!(
        first,
        Some(Batch {
            name: PROJECT_SKILL_BUDGETS.name,
            rows: 4,
            finished: false
        }),
        "the first batch covers ids 1 to {BATCH_IDS}: two projects of two skills"
    );
    let after_first = progress(&db).await;
    assert_eq!(after_first.done_through, BATCH_IDS);
    assert_eq!(after_first.rows_changed, 4);
    assert!(after_first.finished_at.is_none());
    for (project, in_skills, own) in skill_budgets(&db).await {
        let expected = (project <= BATCH_IDS).then_some(own);
        assert_eq!(in_skills, expected, "project {project} after one batch");
    }

    // The service stopped here; whatever runs next starts from what the first committed.
    let rest = run_to_the_end(&db).await;
    assert_eq!(
        rest.iter().map(|b| b.rows).collect::<Vec<_>>(),
        [2, 2, 2],
        "the ids past the first batch, one project in each of the next three"
    );
    assert_eq!(
        rest.iter().map(|b| b.finished).collect::<Vec<_>>(),
        [false, false, true]
    );
    let done = progress(&db).await;
    assert_eq!(done.done_through, done.upto);
    assert_eq!(done.upto, 3 * BATCH_IDS + 500);
    assert_eq!(done.rows_changed, 10);
    assert!(done.finished_at.is_some());
    for (project, in_skills, own) in skill_budgets(&db).await {
        assert_eq!(in_skills, Some(own), "project {project}");
    }
    assert_eq!(backfills::run_batch(&db, Utc::now()).await.unwrap(), None);
    finished.refresh(conn.exec()).await.unwrap();
    assert!(finished.is_finished(&PROJECT_SKILL_BUDGETS));
}

#[actix_web::test]
async fn what_the_triggers_write_during_a_backfill_is_never_overwritten() {
    let (db, _dir) = fresh_db().await;
    seed(&db, &PROJECTS).await;
    as_if_just_migrated(&db).await;
    backfills::run_batch(&db, Utc::now()).await.unwrap();

    // After the migration, a budget changes and a project's skills are replaced, in ranges
    // the backfill has not reached: the triggers write the new value of each row they touch.
    exec(
        &db,
        "UPDATE projects SET budget_minor = 99000 WHERE id = 4001",
    )
    .await;
    let replaced = match db.engine() {
        "postgres" => {
            "UPDATE projects SET skills_required = '[\"Go\"]'::jsonb, budget_minor = 45000
              WHERE id = 6500"
        }
        _ => {
            "UPDATE projects SET skills_required = '[\"Go\"]', budget_minor = 45000
              WHERE id = 6500"
        }
    };
    let mut conn = db.conn().await.unwrap();
    on_exec!(conn.exec(), c => sqlx::query(replaced).execute(c).await.map(drop)).unwrap();
    drop(conn);

    let rest = run_to_the_end(&db).await;
    // Only project 2007's two rows were left to fill.
    assert_eq!(rest.iter().map(|b| b.rows).sum::<u64>(), 2);
    assert_eq!(progress(&db).await.rows_changed, 6);
    let rows = skill_budgets(&db).await;
    for (project, in_skills, own) in &rows {
        assert_eq!(*in_skills, Some(*own), "project {project}");
    }
    assert!(rows.contains(&(4001, Some(99_000), 99_000)));
    assert!(rows.contains(&(6500, Some(45_000), 45_000)));
}

#[actix_web::test]
async fn instances_racing_on_one_backfill_fill_each_row_once() {
    let (db, _dir) = fresh_db().await;
    // Forty projects, one in each of forty batches.
    let projects: Vec<(i64, i64)> = (0..40)
        .map(|n| (1 + n * BATCH_IDS, 1_000 * (n + 1)))
        .collect();
    seed(&db, &projects).await;
    as_if_just_migrated(&db).await;

    let runners: Vec<_> = (0..4)
        .map(|_| {
            let db = db.clone();
            tokio::spawn(async move {
                let mut ran = Vec::new();
                // On PostgreSQL a runner finding the row held by another passes it over, as a
                // job would until its next wake; it tries again a little later.
                for _ in 0..200 {
                    match backfills::run_batch(&db, Utc::now()).await.unwrap() {
                        Some(batch) => ran.push(batch),
                        None if progress(&db).await.finished_at.is_some() => break,
                        None => tokio::time::sleep(std::time::Duration::from_millis(5)).await,
                    }
                }
                ran
            })
        })
        .collect();
    let mut batches = Vec::new();
    for runner in runners {
        batches.extend(runner.await.unwrap());
    }

    assert_eq!(batches.len(), 40, "each batch ran once: {batches:?}");
    assert_eq!(batches.iter().filter(|b| b.finished).count(), 1);
    assert_eq!(batches.iter().map(|b| b.rows).sum::<u64>(), 80);
    let done = progress(&db).await;
    assert_eq!((done.rows_changed, done.done_through), (80, done.upto));
    for (project, in_skills, own) in skill_budgets(&db).await {
        assert_eq!(in_skills, Some(own), "project {project}");
    }
}

/// The ids of the public list's first page for Rust projects of 150 to 600 euros, read with
/// the budget beside each skill (`skill_budgets`) or on each project.
async fn rust_within_budget(db: &Db, skill_budgets: bool) -> (Vec<i64>, i64) {
    let filter = ProjectFilter {
        skill: Some("rust".into()),
        min_budget_minor: Some(15_000),
        max_budget_minor: Some(60_000),
        ..ProjectFilter::default()
    };
    let mut conn = db.conn().await.unwrap();
    let engine: Exec<'_> = conn.exec();
    let query = project_lists::visible(&engine, Viewer::Anonymous, &filter, skill_budgets);
    let (items, _, total) = project_lists::page(conn.exec(), query, Seek::Page(1), 20)
        .await
        .unwrap();
    let mut ids: Vec<i64> = items.iter().map(|p| p.id).collect();
    ids.sort_unstable();
    (ids, total)
}

#[actix_web::test]
async fn the_lists_read_the_old_shape_until_the_backfill_is_done() {
    let (db, _dir) = fresh_db().await;
    seed(&db, &PROJECTS).await;
    as_if_just_migrated(&db).await;
    let within = (vec![2, BATCH_IDS + 7, 3 * BATCH_IDS + 500], 3);

    assert_eq!(rust_within_budget(&db, false).await, within);
    // Why the readers wait: the new shape, read too early, misses every row not filled yet.
    assert_eq!(rust_within_budget(&db, true).await, (vec![], 0));
    backfills::run_batch(&db, Utc::now()).await.unwrap();
    assert_eq!(rust_within_budget(&db, true).await, (vec![2], 1));

    run_to_the_end(&db).await;
    assert_eq!(rust_within_budget(&db, true).await, within);
    assert_eq!(rust_within_budget(&db, false).await, within);
}

/// `/metrics` once it shows `line` (within ten seconds).
async fn metrics_showing(app: &TestApp, line: &str) -> String {
    let mut text = String::new();
    for _ in 0..100 {
        text = app.get("/metrics").await.text().await.unwrap_or_default();
        if text.contains(line) {
            return text;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("/metrics never showed {line}:\n{text}");
}

/// The service runs the job itself, and `/metrics` shows each backfill's progress.
#[actix_web::test]
async fn the_service_runs_its_backfills_and_reports_them() {
    let app = spawn_app().await;
    // A new database: the backfill was registered with nothing to fill, and the job's first
    // run, a second after the start, finishes it.
    let finished = r#"backfill_finished{backfill="project_skill_budgets"} 1"#;
    let text = metrics_showing(&app, finished).await;
    assert!(text.contains(r#"backfill_remaining_ids{backfill="project_skill_budgets"} 0"#));
    assert!(text.contains("# TYPE backfill_rows_total counter"));

    // Rows from before a migration: the job, woken, fills them and counts them.
    seed(&app.db, &PROJECTS[..2]).await;
    as_if_just_migrated(&app.db).await;
    metrics_showing(
        &app,
        r#"backfill_remaining_ids{backfill="project_skill_budgets"} 2"#,
    )
    .await;
    app.state
        .jobs
        .trigger(marketplace::workflows::backfills::JOB)
        .await
        .unwrap();
    let text = metrics_showing(&app, finished).await;
    assert!(text.contains(r#"backfill_rows_total{backfill="project_skill_budgets"} 4"#));
    for (project, in_skills, own) in skill_budgets(&app.db).await {
        assert_eq!(in_skills, Some(own), "project {project}");
    }
    app.stop().await;
}
