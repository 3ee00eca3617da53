//! The store on both engines: migrations, constraints the specification implies.

use crate::helpers::spawn_app;
use marketplace::domain::user::Role;
use marketplace::store::Exec;
use marketplace::store::users::{self, NewUser};
use marketplace::{on_exec, store::Tx};

fn new_user<'a>(email: &'a str, username: &'a str, roles: &'a [Role]) -> NewUser<'a> {
    NewUser {
        email,
        username,
        password_hash: "$2b$04$abcdefghijklmnopqrstuu",
        roles,
        email_verified: false,
        accept_marketing: false,
        source: None,
    }
}

#[actix_web::test]
async fn users_round_trip_with_roles_and_times() {
    let app = spawn_app().await;
    let now = app.clock.now();
    let mut tx = app.db.begin().await.unwrap();
    let id = users::insert(
        tx.exec(),
        &new_user("ana@example.com", "ana", &[Role::Experto, Role::Empresa]),
        now,
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();

    let mut conn = app.db.conn().await.unwrap();
    let user = users::find(conn.exec(), id).await.unwrap().unwrap();
    assert_eq!(user.active_role, Role::Experto);
    assert_eq!(user.roles, vec![Role::Empresa, Role::Experto]);
    assert_eq!(user.created_at, now, "times read back exactly as written");
    let by_name = users::find_by_login(conn.exec(), "ana")
        .await
        .unwrap()
        .unwrap();
    let by_mail = users::find_by_login(conn.exec(), "ANA@example.com")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((by_name.id, by_mail.id), (id, id));
    app.stop().await;
}

#[actix_web::test]
async fn duplicate_email_or_username_is_a_unique_violation() {
    let app = spawn_app().await;
    let now = app.clock.now();
    let mut tx = app.db.begin().await.unwrap();
    users::insert(
        tx.exec(),
        &new_user("a@example.com", "first", &[Role::Empresa]),
        now,
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    for (email, name) in [("a@example.com", "second"), ("b@example.com", "first")] {
        let mut tx = app.db.begin().await.unwrap();
        let err = users::insert(tx.exec(), &new_user(email, name, &[Role::Empresa]), now)
            .await
            .unwrap_err();
        assert!(err.is_unique_violation(), "{err}");
        tx.rollback().await.unwrap();
    }
    app.stop().await;
}

async fn exec_sql(tx: &mut Tx, sql: &'static str) -> Result<u64, sqlx::Error> {
    on_exec!(tx.exec(), c => sqlx::query(sql).execute(c).await.map(|r| r.rows_affected()))
}

#[actix_web::test]
async fn one_active_dispute_per_project_is_enforced_in_sql() {
    let app = spawn_app().await;
    let now = app.clock.now();
    let mut tx = app.db.begin().await.unwrap();
    let company = users::insert(
        tx.exec(),
        &new_user("c@example.com", "company", &[Role::Empresa]),
        now,
    )
    .await
    .unwrap();
    let project: i64 = on_exec!(tx.exec(), c => sqlx::query_scalar(
        "INSERT INTO projects (company_id, title, description, budget_minor, currency, deadline,
                               project_type, status, invited_experts, skills_required, created_at, updated_at)
         VALUES ($1, 'Site', 'A web site', 100000, 'eur', $2, 'curated', 'in_progress', $3, $3, $2, $2)
         RETURNING id",
    )
    .bind(company)
    .bind(now)
    .bind(sqlx::types::Json(serde_json::json!([])))
    .fetch_one(c)
    .await)
    .unwrap();
    tx.commit().await.unwrap();

    let insert_dispute = |status: &'static str| {
        let db = app.db.clone();
        async move {
            let mut tx = db.begin().await.unwrap();
            let result = on_exec!(tx.exec(), c => sqlx::query(
                "INSERT INTO disputes (project_id, raised_by, status, reason, created_at, updated_at)
                 VALUES ($1, $2, $3, 'Work not delivered', $4, $4)",
            )
            .bind(project)
            .bind(company)
            .bind(status)
            .bind(now)
            .execute(c)
            .await
            .map(|r| r.rows_affected()));
            if result.is_ok() {
                tx.commit().await.unwrap();
            }
            result
        }
    };
    insert_dispute("resolved")
        .await
        .expect("history is not limited");
    insert_dispute("open").await.expect("first active dispute");
    let second = insert_dispute("in_review").await.unwrap_err();
    assert!(second.as_database_error().unwrap().is_unique_violation());

    let mut tx = app.db.begin().await.unwrap();
    exec_sql(
        &mut tx,
        "UPDATE disputes SET status = 'resolved' WHERE status = 'open'",
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    insert_dispute("open")
        .await
        .expect("a new dispute after resolution");
    app.stop().await;
}

#[actix_web::test]
async fn commission_defaults_are_seeded() {
    let app = spawn_app().await;
    let mut conn = app.db.conn().await.unwrap();
    let rows: Vec<(String, i64)> = on_exec!(conn.exec(), c => sqlx::query_as(
        "SELECT level, rate_bp FROM commission_config ORDER BY rate_bp DESC",
    )
    .fetch_all(c)
    .await)
    .unwrap();
    assert_eq!(
        rows,
        vec![
            ("Global".into(), 500),
            ("Pro".into(), 400),
            ("Enterprise".into(), 300)
        ]
    );
    app.stop().await;
}

/// A statement running past `DATABASE_STATEMENT_TIMEOUT_SECONDS` is cancelled and answered 503
/// `QUERY_TIMEOUT`, on both engines; the connection and the service go on, and a short
/// statement after it, or many short ones together longer than the limit, are not cut.
#[actix_web::test]
async fn a_statement_past_the_timeout_is_cut_with_a_clear_error() {
    use std::time::{Duration, Instant};
    let app = crate::helpers::spawn_app_with(&[("DATABASE_STATEMENT_TIMEOUT_SECONDS", "1")]).await;
    let mut conn = app.db.conn().await.unwrap();
    // Five seconds of work: a sleep, or SQLite counting (a hundred million rows is about ten).
    let slow = match conn.exec() {
        Exec::Postgres(_) => "SELECT CAST(COUNT(*) AS BIGINT) FROM (SELECT pg_sleep(5)) s",
        Exec::Sqlite(_) => {
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100000000)
             SELECT COUNT(*) FROM n"
        }
    };
    let started = Instant::now();
    let cut: Result<i64, marketplace::store::StoreError> = on_exec!(conn.exec(), c =>
        sqlx::query_scalar(slow).fetch_one(c).await)
    .map_err(Into::into);
    let err = cut.expect_err("cancelled");
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(900), "{took:?}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    assert!(err.is_timeout(), "{err}");
    let answer = marketplace::http::error::ApiError::from(err);
    assert_eq!(answer.code(), "QUERY_TIMEOUT");
    // The limit is each statement's: short ones, two seconds of them in all, run to the end.
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(2) {
        let one: i64 = on_exec!(conn.exec(), c =>
            sqlx::query_scalar("SELECT CAST(1 AS BIGINT)").fetch_one(c).await)
        .unwrap();
        assert_eq!(one, 1);
    }
    drop(conn);
    assert_eq!(app.get("/health").await.status(), 200);
    app.stop().await;
}

/// A pooled connection in recent use is handed out without a ping (a round trip a request
/// saved), one unused for longer is pinged first: a connection the database dropped is
/// replaced unseen after a quiet spell, and fails only the one use that finds it while busy.
#[actix_web::test]
async fn the_pool_pings_only_connections_left_idle() {
    use marketplace::store::{Db, Exec, PING_AFTER_IDLE};
    let (target, _dir) = crate::helpers::fresh_target().await;
    let marketplace::config::DatabaseTarget::Postgres(url) = &target else {
        return;
    };
    let admin = sqlx::PgPool::connect(url).await.unwrap();
    let db = Db::connect_sized(&target, Some(1)).await.unwrap();
    async fn backend(db: &Db) -> Result<i32, sqlx::Error> {
        let mut conn = db.conn().await.unwrap();
        let Exec::Postgres(c) = conn.exec() else {
            unreachable!()
        };
        sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&mut *c)
            .await
    }
    async fn terminate(admin: &sqlx::PgPool, pid: i32) {
        let ended: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1, 5000)")
            .bind(pid)
            .fetch_one(admin)
            .await
            .unwrap();
        assert!(ended);
    }

    // On a loaded machine ending the backend, or the acquire itself, can outlast the idle
    // spell: then the connection handed out was no longer one used moments ago, and the round
    // starts again with the one the pool put in its place. How long it sat idle is known only
    // once the acquire is over (time read before it misses a stall inside it).
    let mut first = backend(&db).await.unwrap();
    let mut used = std::time::Instant::now();
    loop {
        terminate(&admin, first).await;
        let found = backend(&db).await;
        let idle_at_most = used.elapsed();
        if idle_at_most < PING_AFTER_IDLE / 2 {
            assert!(
                found.is_err(),
                "a connection used moments ago is handed out as it is"
            );
            break;
        }
        let replaced = match found {
            Ok(replaced) => replaced,
            // Handed out unchecked after all, and closed as broken.
            Err(_) => backend(&db).await.expect("the broken one was closed"),
        };
        assert_ne!(replaced, first);
        (first, used) = (replaced, std::time::Instant::now());
    }
    let second = backend(&db).await.expect("the broken one was closed");
    assert_ne!(second, first);

    terminate(&admin, second).await;
    tokio::time::sleep(PING_AFTER_IDLE + std::time::Duration::from_millis(100)).await;
    let third = backend(&db)
        .await
        .expect("an idle connection is checked first");
    assert_ne!(third, second);
    admin.close().await;
    db.close().await;
}

/// Records what each commit tells.
#[derive(Default)]
struct Told(std::sync::Mutex<Vec<marketplace::store::Written>>);

#[async_trait::async_trait]
impl marketplace::store::AfterCommit for Told {
    async fn projects_written(&self, written: &marketplace::store::Written) {
        self.0.lock().unwrap().push(written.clone());
    }
}

impl Told {
    fn take(&self) -> Vec<marketplace::store::Written> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

async fn insert_project(tx: &mut Tx, now: chrono::DateTime<chrono::Utc>) -> i64 {
    on_exec!(tx.exec(), c => sqlx::query_scalar(
        "INSERT INTO projects (company_id, title, description, budget_minor, currency,
                               project_type, status, invited_experts, skills_required, created_at, updated_at)
         VALUES (NULL, 'Site', 'A web site', 100000, 'eur', 'curated', 'draft', $2, $2, $1, $1)
         RETURNING id",
    )
    .bind(now)
    .bind(sqlx::types::Json(serde_json::json!([])))
    .fetch_one(c)
    .await)
    .unwrap()
}

async fn rename(tx: &mut Tx, id: i64) {
    on_exec!(tx.exec(), c => sqlx::query("UPDATE projects SET title = title || '.' WHERE id = $1")
        .bind(id)
        .execute(c)
        .await
        .map(drop))
    .unwrap();
}

/// Each commit tells, once committed, the projects whose rows it updated or deleted (triggers
/// of migration 0050), however the rows were written; inserts, rolled-back work and
/// transactions that wrote no project tell nothing, and more than `MAX_NAMED` projects are
/// told as all of them.
#[actix_web::test]
async fn a_commit_tells_which_projects_it_wrote() {
    use marketplace::store::Written;
    let (db, _dir) = crate::helpers::fresh_db().await;
    let told = std::sync::Arc::new(Told::default());
    assert!(db.watch_commits(told.clone()));
    let now = chrono::Utc::now();

    let mut tx = db.begin().await.unwrap();
    let ids = [
        insert_project(&mut tx, now).await,
        insert_project(&mut tx, now).await,
        insert_project(&mut tx, now).await,
    ];
    tx.commit().await.unwrap();
    assert_eq!(told.take(), [], "new rows: nobody can keep them yet");

    let mut tx = db.begin().await.unwrap();
    rename(&mut tx, ids[2]).await;
    rename(&mut tx, ids[0]).await;
    rename(&mut tx, ids[2]).await;
    assert_eq!(told.take(), [], "nothing before the commit");
    tx.commit().await.unwrap();
    assert_eq!(told.take(), [Written::These(vec![ids[0], ids[2]])]);

    let mut tx = db.begin().await.unwrap();
    rename(&mut tx, ids[1]).await;
    tx.rollback().await.unwrap();
    let mut tx = db.begin().await.unwrap();
    exec_sql(&mut tx, "UPDATE users SET username = username WHERE id = 0")
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(told.take(), [], "rolled back, or no project written");

    let mut tx = db.begin().await.unwrap();
    on_exec!(tx.exec(), c => sqlx::query("DELETE FROM projects WHERE id = $1")
        .bind(ids[1])
        .execute(c)
        .await
        .map(drop))
    .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(told.take(), [Written::These(vec![ids[1]])], "a deletion");

    let mut tx = db.begin().await.unwrap();
    for _ in 0..marketplace::store::written::MAX_NAMED {
        insert_project(&mut tx, now).await;
    }
    tx.commit().await.unwrap();
    let mut tx = db.begin().await.unwrap();
    exec_sql(&mut tx, "UPDATE projects SET title = 'Every one'")
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(told.take(), [Written::All], "too many to name");

    let mut tx = db.begin().await.unwrap();
    rename(&mut tx, ids[0]).await;
    tx.commit().await.unwrap();
    assert_eq!(
        told.take(),
        [Written::These(vec![ids[0]])],
        "each transaction tells its own"
    );
}

/// A transaction dropped without a commit or a rollback (an error, a cancelled request)
/// leaves nothing behind, and its connection goes back to the pool out of the transaction.
#[actix_web::test]
async fn a_transaction_dropped_unfinished_rolls_back() {
    let (db, _dir) = crate::helpers::fresh_db().await;
    // A connection back in the pool inside its transaction makes the next ones wait.
    tokio::time::timeout(
        std::time::Duration::from_secs(30),
        dropped_transactions(&db),
    )
    .await
    .expect("the pool answers");
}

async fn dropped_transactions(db: &marketplace::store::Db) {
    let now = chrono::Utc::now();
    for round in 0..3 {
        let mut tx = db.begin().await.unwrap();
        let id = insert_project(&mut tx, now).await;
        drop(tx);
        let mut conn = db.conn().await.unwrap();
        let found: Option<i64> = on_exec!(conn.exec(), c => sqlx::query_scalar(
            "SELECT id FROM projects WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(c)
        .await)
        .unwrap();
        assert_eq!(found, None, "round {round}");
    }
    if let marketplace::store::Pool::Postgres(pool) = db.pool() {
        let open = || async {
            sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND state LIKE 'idle in transaction%'",
            )
            .fetch_one(pool)
            .await
            .unwrap()
        };
        let mut left = open().await;
        for _ in 0..50 {
            if left == 0 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            left = open().await;
        }
        assert_eq!(left, 0, "a connection left inside its transaction");
    }
}
