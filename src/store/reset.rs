//! Emptying the database for the end-to-end reset (`POST /api/v1/testing/reset-e2e`): every
//! table but the migration history; the commission levels return to their defaults.
//!
//! Identities keep counting: an id is never handed out twice, because the processor and the
//! CRM know our objects by idempotency keys and metadata made of our ids, and a reused id
//! would replay an answer meant for an object that no longer exists.

use super::tallies::Tally;
use super::{Db, StoreResult, TxConn};

/// Tables the reset keeps: the migrations' record and the backfills' (which columns are
/// filled: the rows left are emptied anyway), the commission levels (reset to the defaults
/// the first migration seeds) and the kept project counts (reset to zero: a truncation fires
/// no trigger).
const KEPT: [&str; 4] = [
    "_sqlx_migrations",
    "backfills",
    "commission_config",
    "project_counts",
];

pub async fn empty_all(db: &Db) -> StoreResult<usize> {
    let mut tx = db.begin().await?;
    // The counts of writes to projects, experts and search texts keep counting too, one more
    // for the reset: each instance's kept answers are checked against them, and a count that
    // started over could meet one of them again.
    let mut writes = Vec::new();
    for tally in [
        Tally::ProjectWrites,
        Tally::ExpertWrites,
        Tally::AccountSearchWrites,
    ] {
        writes.push((tally, super::tallies::written(tx.exec(), tally).await?));
    }
    // A truncation fires no row trigger: every kept project row is to be forgotten.
    tx.note_every_project_written();
    let emptied = match tx.conn() {
        TxConn::Postgres(t) => {
            let tables: Vec<String> = sqlx::query_scalar(
                "SELECT tablename::text FROM pg_tables WHERE schemaname = current_schema()
                 ORDER BY tablename",
            )
            .fetch_all(&mut **t)
            .await?;
            let tables: Vec<String> = tables
                .into_iter()
                .filter(|name| !KEPT.contains(&name.as_str()))
                .collect();
            if !tables.is_empty() {
                let list = tables
                    .iter()
                    .map(|name| format!("\"{}\"", name.replace('"', "")))
                    .collect::<Vec<_>>()
                    .join(", ");
                // Names come from the catalogue, quoted: nothing of the caller reaches this text.
                sqlx::query(sqlx::AssertSqlSafe(format!("TRUNCATE {list} CASCADE")))
                    .execute(&mut **t)
                    .await?;
            }
            tables.len()
        }
        TxConn::Sqlite(t) => {
            // Ordinary tables only: the search index (a virtual table and its shadow tables)
            // is emptied through its own command below.
            let tables: Vec<String> = sqlx::query_scalar(
                "SELECT name FROM pragma_table_list WHERE schema = 'main' AND type = 'table'
                 AND name NOT LIKE 'sqlite_%' ORDER BY name",
            )
            .fetch_all(&mut **t)
            .await?;
            let tables: Vec<String> = tables
                .into_iter()
                .filter(|name| !KEPT.contains(&name.as_str()))
                .collect();
            // Foreign keys are checked at commit, when every table is empty.
            sqlx::query("PRAGMA defer_foreign_keys = ON")
                .execute(&mut **t)
                .await?;
            // Issued invoices refuse deletion to everyone but this reset (migration 0059);
            // the mark goes with the table's own turn below.
            sqlx::query("INSERT OR IGNORE INTO resets_running (id) VALUES (1)")
                .execute(&mut **t)
                .await?;
            for name in &tables {
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "DELETE FROM \"{}\"",
                    name.replace('"', "")
                )))
                .execute(&mut **t)
                .await?;
            }
            let indexes: Vec<String> = sqlx::query_scalar(
                "SELECT name FROM pragma_table_list WHERE schema = 'main' AND type = 'virtual'",
            )
            .fetch_all(&mut **t)
            .await?;
            for name in indexes {
                let name = name.replace('"', "");
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "INSERT INTO \"{name}\" (\"{name}\") VALUES ('delete-all')"
                )))
                .execute(&mut **t)
                .await?;
            }
            tables.len()
        }
    };
    for (tally, count) in writes {
        crate::on_exec!(tx.exec(), c => sqlx::query(
            "INSERT INTO tally_deltas (name, key, user_id, n, total) VALUES ($1, '', 0, $2, 0)",
        )
        .bind(tally.as_str())
        .bind(count + 1)
        .execute(c)
        .await
        .map(drop))?;
    }
    crate::on_exec!(tx.exec(), c => sqlx::query("UPDATE project_counts SET n = 0")
        .execute(c)
        .await
        .map(drop))?;
    for (level, rate_bp) in [("Global", 500_i64), ("Pro", 400), ("Enterprise", 300)] {
        crate::on_exec!(tx.exec(), c => sqlx::query(
            "UPDATE commission_config SET rate_bp = $1, updated_at = NULL, updated_by = NULL
             WHERE level = $2",
        )
        .bind(rate_bp)
        .bind(level)
        .execute(c)
        .await
        .map(drop))?;
    }
    tx.commit().await?;
    Ok(emptied)
}
