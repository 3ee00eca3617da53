//! The projects released on in a growth window (the average project value's divisor): each
//! release linked to its project's previous one and the pairs the writes count by day
//! (migration 0052), checked against a count of the rows however the releases came.

use chrono::{DateTime, Duration, SubsecRound, Utc};

use marketplace::store::platform_metrics::window;
use marketplace::store::{Exec, Pool, tallies};

use crate::market::Market;

/// A small deterministic generator: the same histories on every run and engine.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }
}

async fn payment(m: &Market, project: i64, amount: i64) -> i64 {
    let now = m.app.clock.now();
    let mut conn = m.app.db.conn().await.unwrap();
    marketplace::on_exec!(conn.exec(), c => sqlx::query_scalar::<_, i64>(
        "INSERT INTO payments (project_id, amount_minor, status, created_at, updated_at)
         VALUES ($1, $2, 'held', $3, $3) RETURNING id")
        .bind(project).bind(amount).bind(now).fetch_one(c).await)
    .unwrap()
}

/// One statement on payment `id`, with `at` as `$2`.
async fn change(m: &Market, sql: &'static str, id: i64, at: DateTime<Utc>) {
    let mut conn = m.app.db.conn().await.unwrap();
    marketplace::on_exec!(conn.exec(), c => sqlx::query(sql)
        .bind(id).bind(at).execute(c).await.map(drop))
    .unwrap();
}

const RELEASE: &str = "UPDATE payments SET status = 'released', released_at = $2 WHERE id = $1";

/// Released payments whose link is not the release just before them in their project (by
/// `released_at`, then id), and payments not released that hold a link.
async fn wrong_links(m: &Market) -> i64 {
    let mut conn = m.app.db.conn().await.unwrap();
    marketplace::on_exec!(conn.exec(), c => sqlx::query_scalar::<_, i64>(
        "SELECT (SELECT COUNT(*) FROM (
                   SELECT prev_released_at, LAG(released_at) OVER (
                              PARTITION BY project_id ORDER BY released_at, id) AS expected
                     FROM payments WHERE status = 'released' AND released_at IS NOT NULL) x
                  WHERE (prev_released_at IS NULL) <> (expected IS NULL)
                     OR prev_released_at <> expected)
              + (SELECT COUNT(*) FROM payments
                  WHERE status <> 'released' AND prev_released_at IS NOT NULL)")
        .fetch_one(c).await)
    .unwrap()
}

/// The projects released on in `[start, end)` and the amount, counted from the rows.
async fn counted(m: &Market, start: DateTime<Utc>, end: DateTime<Utc>) -> (i64, i64) {
    let mut conn = m.app.db.conn().await.unwrap();
    marketplace::on_exec!(conn.exec(), c => sqlx::query_as::<_, (i64, i64)>(
        "SELECT COUNT(DISTINCT project_id), CAST(COALESCE(SUM(amount_minor), 0) AS BIGINT)
           FROM payments
          WHERE status = 'released' AND released_at >= $1 AND released_at < $2")
        .bind(start).bind(end).fetch_one(c).await)
    .unwrap()
}

/// Releases in any order, at the same instant, moved, refunded, released again and deleted,
/// with the tallies folded half way: every link is the release before, and every window —
/// within a day, across a few, over all — counts each project released on once.
#[actix_web::test]
async fn each_project_released_on_in_a_window_is_counted_once() {
    let m = Market::open().await;
    let company = m.company("linkco").await;
    let mut projects = Vec::new();
    for _ in 0..4 {
        projects.push(m.published_project(&company, 1000.0, &[]).await);
    }
    let origin = m.app.clock.now() - Duration::days(40);
    // Few instants, so releases share them, and ends of windows fall inside days.
    let instant = |rng: &mut Lcg| {
        origin + Duration::days(rng.below(40) as i64) + Duration::hours(rng.pick(&[0, 9, 23]))
    };
    let mut rng = Lcg(52);
    let mut ids: Vec<i64> = Vec::new();
    for step in 1..=240 {
        let project = rng.pick(&projects);
        match rng.below(8) {
            0..=2 => ids.push(payment(&m, project, 100 + rng.below(900) as i64).await),
            3..=5 if !ids.is_empty() => {
                let id = rng.pick(&ids);
                change(&m, RELEASE, id, instant(&mut rng)).await;
            }
            6 if !ids.is_empty() => {
                let id = rng.pick(&ids);
                let refund =
                    "UPDATE payments SET status = 'refunded', refunded_at = $2 WHERE id = $1";
                change(&m, refund, id, instant(&mut rng)).await;
            }
            7 if !ids.is_empty() => {
                let id = ids.swap_remove(rng.below(ids.len() as u64) as usize);
                change(
                    &m,
                    "DELETE FROM payments WHERE id = $1 AND $2 IS NOT NULL",
                    id,
                    origin,
                )
                .await;
            }
            _ => {}
        }
        if step == 120 {
            tallies::fold(&m.app.db, 10_000).await.unwrap();
        }
        if step % 40 != 0 {
            continue;
        }
        assert_eq!(wrong_links(&m).await, 0, "after step {step}");
        for _ in 0..12 {
            let start = instant(&mut rng) - Duration::minutes(rng.pick(&[0, 30]));
            let length = rng.pick(&[1, 14, 24, 72, 30 * 24, 60 * 24]);
            let end = start + Duration::hours(length);
            let mut conn = m.app.db.conn().await.unwrap();
            let w = window(conn.exec(), start, end, m.app.clock.now())
                .await
                .unwrap();
            assert_eq!(
                (w.released_projects, w.released_minor),
                counted(&m, start, end).await,
                "[{start}, {end}) after step {step}"
            );
        }
    }
    let (everything, _) =
        counted(&m, origin - Duration::days(1), origin + Duration::days(41)).await;
    assert!(everything >= 3, "the history released on most projects");
    m.app.stop().await;
}

/// Two releases of one project committing at once (PostgreSQL; SQLite has one writer): the
/// second waits in its trigger for the project's lock, as the workflows take it, then links to
/// the first, so the project is counted once.
#[actix_web::test]
async fn two_releases_of_one_project_at_once_are_linked_one_to_the_other() {
    let m = Market::open().await;
    let Pool::Postgres(pool) = m.app.db.pool() else {
        return;
    };
    let company = m.company("raceco").await;
    let project = m.published_project(&company, 1000.0, &[]).await;
    let (a, b) = (
        payment(&m, project, 300).await,
        payment(&m, project, 700).await,
    );
    let now = m.app.clock.now().trunc_subsecs(0);
    let mut first = pool.begin().await.unwrap();
    sqlx::query(RELEASE)
        .bind(a)
        .bind(now)
        .execute(&mut *first)
        .await
        .unwrap();
    let second = tokio::spawn({
        let pool = pool.clone();
        async move {
            let mut tx = pool.begin().await.unwrap();
            sqlx::query(RELEASE)
                .bind(b)
                .bind(now + Duration::seconds(1))
                .execute(&mut *tx)
                .await
                .unwrap();
            tx.commit().await.unwrap();
        }
    });
    assert!(
        crate::lists_at_scale::a_statement_waits(pool).await,
        "the second release waits for the first"
    );
    first.commit().await.unwrap();
    second.await.unwrap();
    assert_eq!(wrong_links(&m).await, 0);
    let mut conn = m.app.db.conn().await.unwrap();
    let Exec::Postgres(c) = conn.exec() else {
        unreachable!()
    };
    let linked: Option<DateTime<Utc>> =
        sqlx::query_scalar("SELECT prev_released_at FROM payments WHERE id = $1")
            .bind(b)
            .fetch_one(&mut *c)
            .await
            .unwrap();
    assert_eq!(linked, Some(now));
    let w = window(
        conn.exec(),
        now - Duration::hours(1),
        now + Duration::hours(1),
        now,
    )
    .await
    .unwrap();
    assert_eq!((w.released_projects, w.released_minor), (1, 1000));
    m.app.stop().await;
}
