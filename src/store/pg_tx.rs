//! A PostgreSQL transaction whose commit also takes the note of the projects it wrote
//! (`store::written`) in the same round trip: one simple-query message, `SELECT` the note,
//! then `COMMIT`. sqlx's own transaction keeps its state on the client and commits alone,
//! so reading the note there was one round trip more on every write (a fifth of a one-row
//! write transaction, measured with pgbench).

use std::ops::{Deref, DerefMut};

use sqlx::pool::PoolConnection;
use sqlx::{PgConnection, PgPool, Postgres, Row as _};

use super::StoreResult;

/// What a commit reads of the note, and commits after (a simple query: no parameters).
const NOTE_THEN_COMMIT: &str =
    "SELECT current_setting('marketplace.written_projects', true); COMMIT";

/// A pooled connection inside `BEGIN`. Dropped without a commit or a rollback (an error, a
/// cancelled request), it rolls back before going back to the pool, or is closed.
pub struct PgTx(Option<PoolConnection<Postgres>>);

impl PgTx {
    pub(super) async fn begin(pool: &PgPool) -> StoreResult<Self> {
        let mut conn = pool.acquire().await?;
        sqlx::raw_sql("BEGIN").execute(&mut *conn).await?;
        Ok(PgTx(Some(conn)))
    }

    /// Commits; with `noted`, answers the note of written projects read just before.
    pub(super) async fn commit(mut self, noted: bool) -> StoreResult<Option<String>> {
        let conn = self.conn();
        let note = if noted {
            // Every result is read, so an error of the COMMIT itself is seen.
            let rows = sqlx::raw_sql(NOTE_THEN_COMMIT)
                .fetch_all(&mut *conn)
                .await?;
            match rows.first() {
                Some(row) => row.try_get::<Option<String>, _>(0)?,
                None => None,
            }
        } else {
            sqlx::raw_sql("COMMIT").execute(&mut *conn).await?;
            None
        };
        self.0 = None;
        Ok(note)
    }

    pub(super) async fn rollback(mut self) -> StoreResult<()> {
        sqlx::raw_sql("ROLLBACK").execute(self.conn()).await?;
        self.0 = None;
        Ok(())
    }

    fn conn(&mut self) -> &mut PgConnection {
        self.0.as_mut().expect("a transaction ends once")
    }
}

impl Deref for PgTx {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        self.0.as_ref().expect("a transaction ends once")
    }
}

impl DerefMut for PgTx {
    fn deref_mut(&mut self) -> &mut PgConnection {
        self.conn()
    }
}

impl Drop for PgTx {
    fn drop(&mut self) {
        let Some(mut conn) = self.0.take() else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    if sqlx::raw_sql("ROLLBACK").execute(&mut *conn).await.is_err() {
                        conn.close_on_drop();
                    }
                });
            }
            // No runtime to roll back on: closing the connection ends the transaction.
            Err(_) => conn.close_on_drop(),
        }
    }
}
