//! Backfills (migration 0056): the rows a migration's new column must be filled for, done by a
//! job in batches instead of by the migration, which must finish within its lock timeout while
//! the previous version serves. The migration registers a row in `backfills` with `upto`, the
//! last source id that existed before its triggers kept the column; [`run_batch`] fills the
//! rows of the next [`BATCH_IDS`] source ids in one transaction and moves `done_through` on
//! with a conditional update, so a stop loses at most one batch and two instances never count
//! one twice. The code reads the old shape until [`Finished`] says the backfill is done.
//!
//! A batch only fills what is still NULL: the triggers write the value from the migration on,
//! and a value they wrote is never replaced by the batch's older read of it.

use std::collections::HashSet;
use std::sync::{Arc, RwLock};

use chrono::{DateTime, Utc};

use super::{Db, Exec, StoreResult};
use crate::on_exec;

/// A backfill this version knows: the name its migration registered and the statement that
/// fills the rows of the source ids in `($1, $2]`, per engine.
#[derive(Debug)]
pub struct Backfill {
    pub name: &'static str,
    postgres: &'static str,
    sqlite: &'static str,
}

/// A project's budget beside each of its skills (migration 0057), for the lists' skill and
/// budget filters together (`store::project_lists`).
pub const PROJECT_SKILL_BUDGETS: Backfill = Backfill {
    name: "project_skill_budgets",
    postgres: "UPDATE project_skills s SET budget_minor = p.budget_minor
                 FROM projects p
                WHERE s.project_id > $1 AND s.project_id <= $2
                  AND p.id = s.project_id AND s.budget_minor IS NULL",
    sqlite: "UPDATE project_skills
                SET budget_minor = (SELECT p.budget_minor FROM projects p
                                     WHERE p.id = project_skills.project_id)
              WHERE project_id > $1 AND project_id <= $2 AND budget_minor IS NULL",
};

/// Every backfill this version can run. A registered name not here belongs to another
/// version (a newer one, migrated while this one still serves) and is left to it.
pub const ALL: &[Backfill] = &[PROJECT_SKILL_BUDGETS];

/// Source ids one transaction covers: at most a few thousand rows changed, so a batch holds
/// its row locks for milliseconds.
pub const BATCH_IDS: i64 = 2_000;

/// Where a registered backfill stands, for `/metrics`.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Progress {
    pub name: String,
    pub upto: i64,
    pub done_through: i64,
    pub rows_changed: i64,
    pub finished_at: Option<DateTime<Utc>>,
}

/// Every registered backfill, by name.
pub async fn progress(ex: Exec<'_>) -> StoreResult<Vec<Progress>> {
    Ok(on_exec!(ex, c => sqlx::query_as(
        "SELECT name, upto, done_through, rows_changed, finished_at FROM backfills ORDER BY name",
    )
    .fetch_all(c)
    .await)?)
}

/// One batch [`run_batch`] ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    pub name: &'static str,
    /// Rows the batch filled.
    pub rows: u64,
    /// Whether it was the backfill's last.
    pub finished: bool,
}

/// Runs the next batch of the first unfinished backfill this version knows, in one
/// transaction; `None` when none is left to this instance (on PostgreSQL, a backfill whose
/// row another instance holds is skipped until its batch commits).
pub async fn run_batch(db: &Db, now: DateTime<Utc>) -> StoreResult<Option<Batch>> {
    for backfill in ALL {
        let mut tx = db.begin().await?;
        // On PostgreSQL a row another instance holds is passed over, not waited for.
        let select = match tx.exec() {
            Exec::Postgres(_) => {
                "SELECT upto, done_through FROM backfills
                  WHERE name = $1 AND finished_at IS NULL FOR UPDATE SKIP LOCKED"
            }
            Exec::Sqlite(_) => {
                "SELECT upto, done_through FROM backfills WHERE name = $1 AND finished_at IS NULL"
            }
        };
        let pending: Option<(i64, i64)> = on_exec!(tx.exec(), c => sqlx::query_as(select)
            .bind(backfill.name)
            .fetch_optional(c)
            .await)?;
        let Some((upto, from)) = pending else {
            continue;
        };
        let through = upto.min(from.saturating_add(BATCH_IDS));
        let fill = match tx.exec() {
            Exec::Postgres(_) => backfill.postgres,
            Exec::Sqlite(_) => backfill.sqlite,
        };
        let rows = on_exec!(tx.exec(), c => sqlx::query(fill)
            .bind(from)
            .bind(through)
            .execute(c)
            .await
            .map(|done| done.rows_affected()))?;
        let finished = through >= upto;
        // The guard in SQL: the batch counts only if `done_through` is still where it began.
        let moved = on_exec!(tx.exec(), c => sqlx::query(
            "UPDATE backfills
                SET done_through = $1, rows_changed = rows_changed + $2,
                    finished_at = CASE WHEN $3 THEN $4 END
              WHERE name = $5 AND done_through = $6 AND finished_at IS NULL",
        )
        .bind(through)
        .bind(rows as i64)
        .bind(finished)
        .bind(now)
        .bind(backfill.name)
        .bind(from)
        .execute(c)
        .await
        .map(|done| done.rows_affected()))?;
        if moved == 0 {
            tx.rollback().await?;
            continue;
        }
        tx.commit().await?;
        return Ok(Some(Batch {
            name: backfill.name,
            rows,
            finished,
        }));
    }
    Ok(None)
}

/// The backfills this instance has seen finished: the readers' choice of shape. Refreshed by
/// the backfills job; a backfill is never unfinished again, so a stale answer only means the
/// old shape a little longer.
#[derive(Debug, Clone, Default)]
pub struct Finished(Arc<RwLock<HashSet<&'static str>>>);

impl Finished {
    /// Whether `backfill` is done, so its column may be read.
    pub fn is_finished(&self, backfill: &Backfill) -> bool {
        self.0
            .read()
            .map(|done| done.contains(backfill.name))
            .unwrap_or(false)
    }

    /// Reads which backfills are finished.
    pub async fn refresh(&self, ex: Exec<'_>) -> StoreResult<()> {
        let names: Vec<String> = on_exec!(ex, c => sqlx::query_scalar(
            "SELECT name FROM backfills WHERE finished_at IS NOT NULL",
        )
        .fetch_all(c)
        .await)?;
        let done = ALL
            .iter()
            .filter(|b| names.iter().any(|n| n == b.name))
            .map(|b| b.name);
        if let Ok(mut finished) = self.0.write() {
            finished.extend(done);
        }
        Ok(())
    }
}
