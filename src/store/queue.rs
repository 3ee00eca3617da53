//! The leased queue: one engine for every table of work that workers of several instances
//! take from (the outbox's `events`, `mail_queue`, `crm_queue`, `webhook_deliveries`).
//!
//! A row is due when its due column is past; a worker claims due rows by moving that column
//! to the end of its lease, so a worker that stops midway leaves its rows due again once the
//! lease lapses. A claim is one conditional update that checks again that each row is still
//! due, so of several claimers exactly one gets each row. Each queue is a [`Queue`] static
//! describing its table; its statements are written from that description once.

use chrono::{DateTime, Utc};
use std::marker::PhantomData;
use std::sync::OnceLock;

use super::{Exec, StoreResult};
use crate::domain::backoff::Backoff;
use crate::on_exec;

/// The columns and conditions of a queue's table.
#[derive(Debug)]
pub struct Table {
    pub name: &'static str,
    /// When a row is due next: its due time, or the end of its lease while claimed.
    pub due: &'static str,
    /// The condition of a row not done yet (`sent_at IS NULL`); `None` when every row is
    /// (done rows are deleted). One comparison of one column: the SQLite claim writes it
    /// after a unary `+`.
    pub pending: Option<&'static str>,
    /// The order rows are claimed in (oldest first).
    pub order: &'static str,
    /// What a claim answers for each row, in the order of its row type's fields.
    pub columns: &'static str,
    /// How a row leaves the queue when handled; `None` when the queue's own statement does
    /// it (see [`Queue::mark_done`]).
    pub done: Option<Done>,
    /// How failures are counted and spaced; `None` for a queue that never fails a row.
    pub failures: Option<Failures>,
}

/// How a handled row leaves the queue.
#[derive(Debug, Clone, Copy)]
pub enum Done {
    /// The row stays, with this column set to the time it was done.
    Stamped(&'static str),
    /// The row is deleted.
    Deleted,
}

/// The columns a failed attempt is noted in, and the wait before the next one.
#[derive(Debug, Clone, Copy)]
pub struct Failures {
    pub attempts: &'static str,
    pub last_error: &'static str,
    pub backoff: Backoff,
}

/// A row a claim answers: its id sorts a claimed batch (`RETURNING` keeps no order).
pub trait Claimed {
    fn id(&self) -> i64;
}

/// A leased queue over one table; `Row` is what a claim answers.
pub struct Queue<Row> {
    table: Table,
    statements: OnceLock<Statements>,
    row: PhantomData<fn() -> Row>,
}

/// The statements of one queue, written once from its [`Table`].
struct Statements {
    /// The claim, per engine: (PostgreSQL, SQLite).
    claim: (String, String),
    claim_row: String,
    /// Up to the `IN (` of a statement whose id list is written per call.
    done: Option<String>,
    release: String,
    failed: Option<String>,
    pending_count: String,
}

impl Statements {
    fn of(t: &Table) -> Self {
        let name = t.name;
        let due = t.due;
        // `<pending> AND `, or nothing when every row is pending.
        let pending_and = t.pending.map(|p| format!("{p} AND ")).unwrap_or_default();
        Self {
            // The rows to claim are chosen first, then found by id; the update checks again
            // that each is due (of several claimers, one claims each row). Each engine is told
            // to find them by id: left to itself, PostgreSQL read every due row of the table
            // through the due condition and matched each against the chosen ones (a nested
            // loop, 14,000 rows × 200 a claim when the outbox had fallen behind), and SQLite
            // read the due rows through their index likewise. On PostgreSQL the chosen ids
            // are one array, read once; on SQLite the unary `+` keeps the due condition off
            // the indexes, so the rowid is what is searched.
            claim: (
                format!(
                    "UPDATE {name} SET {due} = $1
                     WHERE id = ANY(ARRAY(SELECT id FROM {name} WHERE {pending_and}{due} <= $2
                                          ORDER BY {order} LIMIT $3))
                       AND {pending_and}{due} <= $2
                     RETURNING {columns}",
                    order = t.order,
                    columns = t.columns,
                ),
                format!(
                    "UPDATE {name} SET {due} = $1
                     WHERE id IN (SELECT id FROM {name} WHERE {pending_and}{due} <= $2
                                  ORDER BY {order} LIMIT $3)
                       AND {plus_pending_and}+{due} <= $2
                     RETURNING {columns}",
                    order = t.order,
                    columns = t.columns,
                    plus_pending_and = t.pending.map(|p| format!("+{p} AND ")).unwrap_or_default(),
                ),
            ),
            claim_row: format!(
                "UPDATE {name} SET {due} = $1 WHERE id = $2 AND {pending_and}{due} = $3"
            ),
            done: t.done.map(|done| match done {
                Done::Stamped(column) => {
                    format!("UPDATE {name} SET {column} = $1 WHERE id IN (")
                }
                Done::Deleted => format!("DELETE FROM {name} WHERE id IN ("),
            }),
            release: format!("UPDATE {name} SET {due} = $1 WHERE id IN ("),
            failed: t.failures.map(|f| {
                format!(
                    "UPDATE {name} SET {attempts} = {attempts} + 1, {error} = $1, {due} = $2
                     WHERE id = $3",
                    attempts = f.attempts,
                    error = f.last_error,
                )
            }),
            pending_count: match t.pending {
                Some(pending) => format!("SELECT COUNT(*) FROM {name} WHERE {pending}"),
                None => format!("SELECT COUNT(*) FROM {name}"),
            },
        }
    }
}

/// Runs `prefix` (a statement up to `IN (`) over `ids`, after `first` when given (`$1`); the
/// list padded ([`super::padded`]) so the statement has a few texts whatever its length.
async fn over_ids(
    ex: Exec<'_>,
    prefix: &str,
    first: Option<DateTime<Utc>>,
    ids: &[i64],
) -> StoreResult<u64> {
    if ids.is_empty() {
        return Ok(0);
    }
    let from = if first.is_some() { 2 } else { 1 };
    let sql = format!(
        "{prefix}{})",
        super::placeholders(from, super::list_len(ids.len()))
    );
    Ok(on_exec!(ex, c => {
        // Placeholders only: the values are bound.
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql.as_str()));
        if let Some(first) = first {
            query = query.bind(first);
        }
        for id in super::padded(ids) {
            query = query.bind(*id);
        }
        query.execute(c).await.map(|r| r.rows_affected())
    })?)
}

impl<Row> Queue<Row>
where
    Row: Claimed
        + Send
        + Unpin
        + for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow>
        + for<'r> sqlx::FromRow<'r, sqlx::sqlite::SqliteRow>,
{
    pub const fn new(table: Table) -> Self {
        Self {
            table,
            statements: OnceLock::new(),
            row: PhantomData,
        }
    }

    pub fn table(&self) -> &Table {
        &self.table
    }

    fn statements(&'static self) -> &'static Statements {
        self.statements.get_or_init(|| Statements::of(&self.table))
    }

    /// The claim's text for the engine of `ex`.
    fn claim_statement(&'static self, ex: &Exec<'_>) -> &'static str {
        let (postgres, sqlite) = &self.statements().claim;
        match ex {
            Exec::Postgres(_) => postgres,
            Exec::Sqlite(_) => sqlite,
        }
    }

    /// The engine's plan of a claim at `now` ([`Queue::claim`]), as text: what an operator
    /// (and a test) reads to see that a claim reads the due rows alone, not the whole table.
    pub async fn claim_plan(
        &'static self,
        ex: Exec<'_>,
        now: DateTime<Utc>,
    ) -> StoreResult<String> {
        let claim = self.claim_statement(&ex);
        let lines: Vec<String> = match ex {
            Exec::Postgres(c) => {
                let sql = format!("EXPLAIN {claim}");
                sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
                    .bind(now)
                    .bind(now)
                    .bind(50_i64)
                    .fetch_all(c)
                    .await?
            }
            Exec::Sqlite(c) => {
                let sql = format!("EXPLAIN QUERY PLAN {claim}");
                let rows: Vec<(i64, i64, i64, String)> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
                    .bind(now)
                    .bind(now)
                    .bind(50_i64)
                    .fetch_all(c)
                    .await?;
                rows.into_iter().map(|(_, _, _, detail)| detail).collect()
            }
        };
        Ok(lines.join("\n"))
    }

    /// Claims up to `limit` due rows, in the queue's order, until `lease_until`, in one
    /// statement; answers them by id. The update checks again that each row is due, so of
    /// several claimers (other instances) exactly one claims each attempt.
    pub async fn claim(
        &'static self,
        ex: Exec<'_>,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
        limit: i64,
    ) -> StoreResult<Vec<Row>> {
        let sql = self.claim_statement(&ex);
        let mut claimed = on_exec!(ex, c => sqlx::query_as::<_, Row>(sql)
            .bind(lease_until)
            .bind(now)
            .bind(limit)
            .fetch_all(c)
            .await)?;
        claimed.sort_by_key(Row::id);
        Ok(claimed)
    }

    /// Claims one row read due at `expected` until `lease_until`; false when another claimer
    /// moved it first. For a queue that picks its rows one by one before claiming them.
    pub async fn claim_row(
        &'static self,
        ex: Exec<'_>,
        id: i64,
        expected: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> StoreResult<bool> {
        let sql = self.statements().claim_row.as_str();
        let moved = on_exec!(ex, c => sqlx::query(sql)
            .bind(lease_until)
            .bind(id)
            .bind(expected)
            .execute(c)
            .await
            .map(|r| r.rows_affected()))?;
        Ok(moved == 1)
    }

    /// Marks rows done, in one statement.
    ///
    /// # Panics
    /// On a queue whose own statement marks its rows done (`Table::done` is `None`).
    pub async fn mark_done(
        &'static self,
        ex: Exec<'_>,
        ids: &[i64],
        now: DateTime<Utc>,
    ) -> StoreResult<()> {
        let prefix =
            self.statements().done.as_deref().unwrap_or_else(|| {
                panic!("the {} queue marks its rows done itself", self.table.name)
            });
        let stamp = match self.table.done {
            Some(Done::Deleted) => None,
            _ => Some(now),
        };
        over_ids(ex, prefix, stamp, ids).await?;
        Ok(())
    }

    /// Makes claimed rows due again at `at` without counting an attempt (the worker put them
    /// back untried).
    pub async fn release(
        &'static self,
        ex: Exec<'_>,
        ids: &[i64],
        at: DateTime<Utc>,
    ) -> StoreResult<()> {
        over_ids(ex, &self.statements().release, Some(at), ids).await?;
        Ok(())
    }

    /// Records a failed attempt of a row that had `attempts` before it, and makes it due
    /// again after the queue's backoff.
    ///
    /// # Panics
    /// On a queue that counts no failures (`Table::failures` is `None`).
    pub async fn mark_failed(
        &'static self,
        ex: Exec<'_>,
        id: i64,
        attempts: i64,
        error: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<()> {
        let (Some(sql), Some(failures)) =
            (self.statements().failed.as_deref(), self.table.failures)
        else {
            panic!("the {} queue counts no failures", self.table.name);
        };
        let retry_at = now + failures.backoff.delay(attempts);
        on_exec!(ex, c => sqlx::query(sql)
            .bind(error)
            .bind(retry_at)
            .bind(id)
            .execute(c)
            .await
            .map(|r| r.rows_affected()))?;
        Ok(())
    }

    /// Rows not done yet (due, waiting or leased), for `/metrics`.
    pub async fn pending_count(&'static self, ex: Exec<'_>) -> StoreResult<i64> {
        let sql = self.statements().pending_count.as_str();
        Ok(on_exec!(ex, c => sqlx::query_scalar(sql).fetch_one(c).await)?)
    }
}
