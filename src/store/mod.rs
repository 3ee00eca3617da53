//! Storage: one code path for SQLite and PostgreSQL (DESIGN §2).
//!
//! Query text is written once with `$N` placeholders where the engines agree, once per engine
//! where they do not (the text searches, `tallies::fold`); [`on_exec!`] compiles each query
//! for both engines. A query function takes an [`Exec`], obtained from a pooled [`Conn`] for
//! reads or from a [`Tx`] for writes that must commit together (state change plus its
//! events); the few that run transactions of their own (`tallies::fold`,
//! `backfills::run_batch`, `idempotency::claim`) take the [`Db`].
//!
//! Store modules hold the SQL per aggregate, no business rules, and what serves it:
//! - the list builder and its cost model (`listing::ListQuery`; `listing::SetTest`, which
//!   chooses between looking a set's members up and probing each row walked, from counts
//!   read first) and the figures the writes keep (`tallies`);
//! - the leased queues' one engine (`queue`);
//! - copies kept in memory between requests, each served only under a stamp read before it:
//!   `page_cache` (answers under a count of committed writes) and its uses `kept_projects`
//!   (under tokens in the shared cache), `profiles::KeptCandidates`,
//!   `user_admin::SearchesKept`, `project_lists::SearchCounts`; `session_cache` (under the
//!   sessions' epoch);
//! - the connections' plumbing: `pg_tx` (a commit that also reads which projects it wrote),
//!   `written` (told after the commit), `probe`, `sqlite_timeout`.

use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{PgConnection, PgPool, Postgres, Sqlite, SqliteConnection, SqlitePool, Transaction};
use std::str::FromStr as _;
use std::sync::Arc;
use std::time::Duration;

use crate::availability::Availability;
use crate::config::DatabaseTarget;
use crate::domain::state::{Lifecycle, State, check_move};

pub mod applications;
pub mod backfills;
pub mod chat;
pub mod chat_digests;
pub mod commission;
pub mod crm;
pub mod dac7;
pub mod deliveries;
pub mod disputes;
pub mod documents;
pub mod events;
pub mod expert_lists;
pub mod idempotency;
pub mod invitations;
pub mod invoices;
pub mod kept_projects;
pub mod listing;
pub mod mail_queue;
pub mod milestones;
pub mod notifications;
pub mod page_cache;
pub mod payments;
mod pg_tx;
pub mod platform_metrics;
mod probe;
pub mod processor_events;
pub mod profiles;
pub mod project_lists;
pub mod projects;
pub mod queue;
pub mod reputation;
pub mod reset;
pub mod reviews;
pub mod session_cache;
pub mod sessions;
pub mod skills;
mod sqlite_timeout;
pub mod tallies;
pub mod timers;
pub mod tokens;
pub mod user_admin;
pub mod users;
pub mod webhook_deliveries;
pub mod webhooks;
pub mod written;

use pg_tx::PgTx;
use probe::PgProbe;
use written::CommitWatch;
pub use written::{AfterCommit, Written};

/// Runs the same query code on whichever engine backs an [`Exec`]:
/// `on_exec!(ex, c => sqlx::query("…").bind(x).execute(c).await)`.
#[macro_export]
macro_rules! on_exec {
    ($exec:expr, $conn:ident => $body:expr) => {
        match $exec {
            $crate::store::Exec::Postgres($conn) => $body,
            $crate::store::Exec::Sqlite($conn) => $body,
        }
    };
}

static PG_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/postgres");
static SQLITE_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/sqlite");

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Sqlx(#[from] sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("cannot prepare the database directory: {0}")]
    Io(#[from] std::io::Error),
    /// A transition its state's lifecycle does not allow: refused before any SQL runs.
    #[error(transparent)]
    IllegalMove(#[from] crate::domain::state::IllegalMove),
    /// The running request's idempotency key was taken over by a retry (`idempotency`).
    #[error("the idempotency key was taken over by another request")]
    KeyTakenOver,
    /// `serve` without `MIGRATE_ON_START` found migrations of its version not applied.
    #[error(
        "the database lacks this version's migrations {first} to {last}: run `marketplace migrate` (the upgrade step) first, or set MIGRATE_ON_START=true"
    )]
    NotMigrated { first: i64, last: i64 },
    /// The database is away (its probe says so): refused without waiting on it.
    #[error("the database is unavailable")]
    Unavailable,
}

impl StoreError {
    /// A unique constraint refused the write (a duplicate).
    pub fn is_unique_violation(&self) -> bool {
        matches!(self, Self::Sqlx(sqlx::Error::Database(e)) if e.is_unique_violation())
    }

    /// `duplicate()` when a unique constraint refused the write, else this error as `E`: the
    /// one way a caller turns a duplicate into its own refusal.
    pub fn duplicate_as<E: From<StoreError>>(self, duplicate: impl FnOnce() -> E) -> E {
        if self.is_unique_violation() {
            duplicate()
        } else {
            self.into()
        }
    }

    /// A foreign key refused the write (e.g. a delete of something history refers to).
    pub fn is_foreign_key_violation(&self) -> bool {
        match self {
            Self::Sqlx(sqlx::Error::Database(e)) => {
                // SQLite enforces `ON DELETE RESTRICT` with a trigger of its own: that refusal
                // comes as SQLITE_CONSTRAINT_TRIGGER (1811), which sqlx does not count as a
                // foreign key violation; only its message tells the two apart.
                e.is_foreign_key_violation()
                    || (e.code().as_deref() == Some("1811")
                        && e.message().contains("FOREIGN KEY constraint failed"))
            }
            _ => false,
        }
    }

    /// The database is away, or the connection to it broke or could not be made (a server
    /// stopped, restarting or refusing connections): answered 503 `SERVICE_UNAVAILABLE`, never
    /// 500. A transaction cut this way rolled back whole.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Self::Unavailable => true,
            Self::Sqlx(e) => connection_lost(e),
            _ => false,
        }
    }

    /// The statement was cancelled: it ran past `DATABASE_STATEMENT_TIMEOUT_SECONDS`
    /// (PostgreSQL's `query_canceled`, SQLite's `SQLITE_INTERRUPT` from `sqlite_timeout`).
    pub fn is_timeout(&self) -> bool {
        matches!(self, Self::Sqlx(sqlx::Error::Database(e))
            if matches!(e.code().as_deref(), Some("57014" | "9")))
    }

    /// The database was busy or locked past its timeout, or a serialisation conflict: the
    /// caller may try again.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Sqlx(sqlx::Error::Database(e)) => {
                let code = e.code().unwrap_or_default();
                // SQLite: 5 BUSY, 6 LOCKED (and extended codes); PostgreSQL: serialization
                // failure and deadlock.
                code == "5"
                    || code == "6"
                    || code.ends_with("_BUSY")
                    || code == "40001"
                    || code == "40P01"
            }
            Self::Sqlx(sqlx::Error::PoolTimedOut) => true,
            _ => false,
        }
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

/// The connection to the database broke or could not be made: I/O, TLS or protocol failures,
/// a closed pool, PostgreSQL's connection exceptions (class 08), a server shutting down,
/// crashed or still starting (57P01-57P03), and a write reaching a server that became a
/// read-only standby (25006, a failover under way).
pub fn connection_lost(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(e) => e.code().is_some_and(|code| {
            code.starts_with("08") || matches!(&*code, "57P01" | "57P02" | "57P03" | "25006")
        }),
        _ => false,
    }
}

/// How many entries a statement's list is written with for `n` values: `n` rounded up to a
/// power of two, the spare places filled by [`padded`]. A statement taking a list then has a
/// few texts whatever the list's length, each prepared once per connection and kept in its
/// cache of prepared statements; one text per length (every group of processor events is a
/// different length) would be prepared again and again, each pushing others out of the cache.
pub fn list_len(n: usize) -> usize {
    n.next_power_of_two()
}

/// `items`, then items again from the first, up to [`list_len`] entries: what is bound to a
/// padded list. Only for lists read as sets, where an entry twice changes nothing: `IN (…)`,
/// `UPDATE … FROM (VALUES …)` (a row matched twice is updated once, with the same values),
/// `INSERT … ON CONFLICT DO NOTHING`.
pub fn padded<T>(items: &[T]) -> impl Iterator<Item = &T> {
    items.iter().cycle().take(list_len(items.len()))
}

/// The pool's options for `url`. When neither the URL nor `PGSSLMODE` names an `sslmode`, a
/// server on this host's loopback is reached without TLS: sqlx's default (`prefer`) speaks TLS
/// whenever the server offers it, which on loopback protects nothing (the traffic never
/// leaves the host) and costs both sides a large share of a busy service's CPU (measured in
/// `benches/README.md`). Any other host keeps the default, and a named `sslmode` is obeyed.
fn postgres_options(url: &str, sslmode_in_env: bool) -> StoreResult<PgConnectOptions> {
    let options = PgConnectOptions::from_str(url)?;
    let named = sslmode_in_env || url.contains("sslmode=");
    let host = options.get_host().trim_matches(['[', ']']);
    let loopback = host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    Ok(if loopback && !named {
        options.ssl_mode(sqlx::postgres::PgSslMode::Disable)
    } else {
        options
    })
}

/// `$first, $first+1, …`: `count` numbered placeholders for an `IN (…)` list whose values are
/// bound one by one after the `first - 1` fixed ones (the same text suits both engines).
pub fn placeholders(first: usize, count: usize) -> String {
    (first..first + count)
        .map(|n| format!("${n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `($first, …), (…), …`: `rows` tuples of `columns` numbered placeholders for a multi-row
/// `VALUES` list whose values are bound row by row after the `first - 1` fixed ones. `VALUES`
/// names its columns column1, column2, … on both engines.
pub fn value_rows(first: usize, rows: usize, columns: usize) -> String {
    (0..rows)
        .map(|row| format!("({})", placeholders(first + row * columns, columns)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Moves the rows of `ids` from `from` to `to` with `update`, an `UPDATE … SET status = $1,
/// updated_at = $2 … WHERE status = $3 AND id IN ({})` whose list is filled here; how many
/// moved. The one statement of every set-based transition (`milestones`, `projects`). A
/// move the state's lifecycle does not allow is refused before the statement runs.
pub(crate) async fn transition_rows<S: Lifecycle>(
    ex: Exec<'_>,
    update: &str,
    ids: &[i64],
    from: S,
    to: S,
    now: chrono::DateTime<chrono::Utc>,
) -> StoreResult<u64> {
    check_move(from, to)?;
    forced_transition_rows(ex, update, ids, from, to, now).await
}

/// [`transition_rows`] without the lifecycle's check: only for a move whose own rules were
/// checked by its caller (an administrator's forced move).
pub(crate) async fn forced_transition_rows<S: State>(
    ex: Exec<'_>,
    update: &str,
    ids: &[i64],
    from: S,
    to: S,
    now: chrono::DateTime<chrono::Utc>,
) -> StoreResult<u64> {
    let (from, to) = (from.text(), to.text());
    if ids.is_empty() {
        return Ok(0);
    }
    let sql = update.replace("{}", &placeholders(4, list_len(ids.len())));
    Ok(on_exec!(ex, c => {
        // Placeholders only: the values are bound.
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql.as_str()))
            .bind(to)
            .bind(now)
            .bind(from);
        for id in padded(ids) {
            query = query.bind(*id);
        }
        query.execute(c).await.map(|r| r.rows_affected())
    })?)
}

/// Escapes a search term for `LIKE … ESCAPE '\'`: `%` and `_` are literal characters, not
/// wildcards.
pub fn escape_like(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('%', "\\%")
        .replace('_', "\\_")
}

/// The database pool, and who is told which projects each commit wrote (`written`).
#[derive(Clone, Debug)]
pub struct Db {
    pool: Pool,
    watch: CommitWatch,
    /// Whether the database answers (`availability`): read before waiting on the pool.
    availability: Arc<Availability>,
    /// PostgreSQL's probe, which alone sets `availability` (an SQLite file does not go away).
    probe: Option<Arc<PgProbe>>,
}

/// The pool of either engine.
#[derive(Clone, Debug)]
pub enum Pool {
    Postgres(PgPool),
    Sqlite(SqlitePool),
}

impl Pool {
    /// `"postgres"` or `"sqlite"`.
    pub fn engine(&self) -> &'static str {
        match self {
            Pool::Postgres(_) => "postgres",
            Pool::Sqlite(_) => "sqlite",
        }
    }
}

/// A pooled connection, for reads that need no transaction.
pub enum Conn {
    Postgres(PoolConnection<Postgres>),
    Sqlite(PoolConnection<Sqlite>),
}

/// A transaction, and who its commit tells which projects it wrote.
pub struct Tx {
    conn: TxConn,
    watch: CommitWatch,
    /// Rows changed without their triggers (a truncation): every project counts as written.
    all_written: bool,
}

/// A transaction's connection. On SQLite it began `IMMEDIATE`, so two writers queue on the
/// busy timeout instead of failing when a read lock cannot be upgraded.
pub enum TxConn {
    Postgres(PgTx),
    Sqlite(Transaction<'static, Sqlite>),
}

/// A borrowed connection of either engine: what store functions run queries on.
pub enum Exec<'c> {
    Postgres(&'c mut PgConnection),
    Sqlite(&'c mut SqliteConnection),
}

impl Exec<'_> {
    /// Reborrows, so one function can run several queries on the same connection.
    pub fn re(&mut self) -> Exec<'_> {
        match self {
            Exec::Postgres(c) => Exec::Postgres(c),
            Exec::Sqlite(c) => Exec::Sqlite(c),
        }
    }
}

impl Conn {
    pub fn exec(&mut self) -> Exec<'_> {
        match self {
            Conn::Postgres(c) => Exec::Postgres(c),
            Conn::Sqlite(c) => Exec::Sqlite(c),
        }
    }
}

impl Tx {
    pub fn exec(&mut self) -> Exec<'_> {
        match &mut self.conn {
            TxConn::Postgres(t) => Exec::Postgres(t),
            TxConn::Sqlite(t) => Exec::Sqlite(t),
        }
    }

    /// Commits, then tells the pool's [`AfterCommit`] which projects were written, before
    /// the caller goes on to answer.
    pub async fn commit(self) -> StoreResult<()> {
        let Tx {
            conn,
            watch,
            all_written,
        } = self;
        let noted = match conn {
            // Read only when someone is told it: it ends with the transaction.
            TxConn::Postgres(t) => {
                let read = watch.installed() && !all_written;
                Written::parse(t.commit(read).await?.as_deref())
            }
            // Taken whoever commits, so the table never holds more than one transaction's.
            TxConn::Sqlite(mut t) => {
                let noted = written::take_sqlite_note(&mut t).await?;
                t.commit().await?;
                noted
            }
        };
        watch
            .tell(if all_written {
                Some(Written::All)
            } else {
                noted
            })
            .await;
        Ok(())
    }

    /// The connection of either engine, for what a store module writes per engine.
    pub fn conn(&mut self) -> &mut TxConn {
        &mut self.conn
    }

    /// Counts every project as written by this transaction (one that changes rows without
    /// their triggers).
    pub fn note_every_project_written(&mut self) {
        self.all_written = true;
    }

    pub async fn rollback(self) -> StoreResult<()> {
        match self.conn {
            TxConn::Postgres(t) => t.rollback().await?,
            TxConn::Sqlite(t) => t.rollback().await?,
        }
        Ok(())
    }

    /// Serialises this transaction with every other one locking the same `(scope, id)` until
    /// commit, across instances (PostgreSQL advisory lock). On SQLite the transaction already
    /// holds the database's single write lock, so nothing more is needed.
    pub async fn lock(&mut self, scope: LockScope, id: i64) -> StoreResult<()> {
        if let TxConn::Postgres(t) = &mut self.conn {
            sqlx::query("SELECT pg_advisory_xact_lock($1, $2)")
                .bind(scope as i32)
                .bind(lock_key(id))
                .execute(&mut **t)
                .await?;
        }
        Ok(())
    }

    /// [`lock`](Self::lock) of every id in `ids`, in one statement, in ascending order (as
    /// every transaction taking several of one scope must, lest two wait for each other).
    pub async fn lock_all(&mut self, scope: LockScope, ids: &[i64]) -> StoreResult<()> {
        if let TxConn::Postgres(t) = &mut self.conn {
            let mut keys: Vec<i32> = ids.iter().map(|id| lock_key(*id)).collect();
            keys.sort_unstable();
            keys.dedup();
            sqlx::query("SELECT pg_advisory_xact_lock($1, k) FROM unnest($2::int4[]) AS k")
                .bind(scope as i32)
                .bind(keys)
                .execute(&mut **t)
                .await?;
        }
        Ok(())
    }
}

/// An id as the second key of an advisory lock (an `int4`).
fn lock_key(id: i64) -> i32 {
    i32::try_from(id.rem_euclid(i64::from(i32::MAX))).unwrap_or_default()
}

/// Namespaces of advisory locks.
#[derive(Debug, Clone, Copy)]
#[repr(i32)]
pub enum LockScope {
    Project = 1,
    Payment = 2,
    User = 3,
    /// The set of active administrators (id 0): changes that could leave none serialise here.
    Administrators = 4,
}

/// How long a request waits for one of PostgreSQL's pooled connections: short, because a
/// request is better refused (503, `Retry-After`) than held when the pool is exhausted or the
/// database is going away (the probe cuts the wait short once it knows).
const PG_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(2);

/// A pooled connection unused for longer than this is pinged before it is handed out.
pub const PING_AFTER_IDLE: Duration = Duration::from_millis(500);

/// sqlx pings every connection before handing it out (`test_before_acquire`), and again when
/// it comes back: two round trips beside a request's one query. Only the first is ours to
/// drop, and only for connections in recent use, as HikariCP's alive-bypass window does: one
/// unused for [`PING_AFTER_IDLE`] is still checked, so a database restarted while the service
/// was quiet costs no request; one broken while busy fails the use that finds it (its
/// transaction rolls back whole) and is closed on its way back.
fn checked_when_idle<DB: sqlx::Database>(
    options: sqlx::pool::PoolOptions<DB>,
) -> sqlx::pool::PoolOptions<DB> {
    use sqlx::Connection as _;
    options
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for > PING_AFTER_IDLE {
                    conn.ping().await?;
                }
                Ok(true)
            })
        })
}

impl Db {
    fn new(pool: Pool, probe: Option<PgProbe>) -> Self {
        Db {
            availability: Arc::new(Availability::new(pool.engine())),
            pool,
            watch: CommitWatch::default(),
            probe: probe.map(Arc::new),
        }
    }

    /// Whether the database answers, as its probe last found.
    pub fn availability(&self) -> &Arc<Availability> {
        &self.availability
    }

    /// Asks the database once on the probe's own connection and records the answer (the
    /// `postgres_probe` job); nothing on SQLite.
    pub async fn probe(&self) {
        if let Some(probe) = &self.probe {
            probe.run(&self.availability).await;
        }
    }

    /// The pool of either engine, for what is written per engine.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Installs who is told, after each commit on this pool, which projects it wrote (once,
    /// when the service starts).
    pub fn watch_commits(&self, watcher: std::sync::Arc<dyn AfterCommit>) -> bool {
        self.watch.install(watcher)
    }

    /// Opens the database (creating an SQLite file and its directory when needed) and runs the
    /// embedded migrations.
    pub async fn connect(target: &DatabaseTarget) -> StoreResult<Self> {
        Self::connect_sized(target, None).await
    }

    /// [`Db::connect`] with a pool of at most `max_connections` (default: 20 on PostgreSQL,
    /// 8 on SQLite; `DATABASE_MAX_CONNECTIONS`).
    pub async fn connect_sized(
        target: &DatabaseTarget,
        max_connections: Option<u32>,
    ) -> StoreResult<Self> {
        Self::connect_tuned(target, max_connections, None).await
    }

    /// [`Db::connect_sized`] whose connections cancel any statement running past
    /// `statement_timeout` (`DATABASE_STATEMENT_TIMEOUT_SECONDS`; on SQLite, which has no such
    /// setting, `sqlite_timeout`); migrations run without it.
    pub async fn connect_tuned(
        target: &DatabaseTarget,
        max_connections: Option<u32>,
        statement_timeout: Option<Duration>,
    ) -> StoreResult<Self> {
        let db = Self::open_tuned(target, max_connections, statement_timeout).await?;
        db.migrate().await?;
        Ok(db)
    }

    /// [`Db::connect_tuned`] without migrating: the database must already hold every migration
    /// this version knows (`marketplace migrate` ran), else [`StoreError::NotMigrated`].
    /// Migrations it does not know, applied by a newer version, are expected during a rolling
    /// upgrade: each is written so that the version before it still works (expand, migrate,
    /// contract; README, "Running in production").
    pub async fn connect_migrated(
        target: &DatabaseTarget,
        max_connections: Option<u32>,
        statement_timeout: Option<Duration>,
    ) -> StoreResult<Self> {
        let db = Self::open_tuned(target, max_connections, statement_timeout).await?;
        let missing = db.missing_migrations().await?;
        if let (Some(first), Some(last)) = (missing.first(), missing.last()) {
            return Err(StoreError::NotMigrated {
                first: *first,
                last: *last,
            });
        }
        Ok(db)
    }

    /// The versions of this binary's migrations the database has not applied, in order.
    pub async fn missing_migrations(&self) -> StoreResult<Vec<i64>> {
        let migrator = match &self.pool {
            Pool::Postgres(_) => &PG_MIGRATOR,
            Pool::Sqlite(_) => &SQLITE_MIGRATOR,
        };
        let mut conn = self.conn().await?;
        // A database never migrated has no ledger table: every migration is missing.
        let ledger = "SELECT version FROM _sqlx_migrations WHERE success";
        let applied: Vec<i64> = match on_exec!(conn.exec(), c => sqlx::query_scalar(ledger).fetch_all(c).await)
        {
            Ok(applied) => applied,
            Err(sqlx::Error::Database(e))
                if matches!(e.code().as_deref(), Some("42P01") | Some("1")) =>
            {
                Vec::new()
            }
            Err(e) => return Err(e.into()),
        };
        Ok(migrator
            .iter()
            .filter(|m| m.migration_type.is_up_migration())
            .map(|m| m.version)
            .filter(|version| !applied.contains(version))
            .collect())
    }

    /// Opens the pool without migrating.
    pub async fn open(target: &DatabaseTarget) -> StoreResult<Self> {
        Self::open_sized(target, None).await
    }

    async fn open_sized(
        target: &DatabaseTarget,
        max_connections: Option<u32>,
    ) -> StoreResult<Self> {
        Self::open_tuned(target, max_connections, None).await
    }

    async fn open_tuned(
        target: &DatabaseTarget,
        max_connections: Option<u32>,
        statement_timeout: Option<Duration>,
    ) -> StoreResult<Self> {
        match target {
            DatabaseTarget::Postgres(url) => {
                let mut options = postgres_options(url, std::env::var_os("PGSSLMODE").is_some())?;
                // Session settings from the connection's start, no round trip per use. JIT off:
                // our statements are short, and compiling one costs more than it saves (up
                // to seconds on a large aggregate).
                options = options.options([("jit", "off")]);
                if let Some(limit) = statement_timeout {
                    options = options
                        .options([("statement_timeout", format!("{}ms", limit.as_millis()))]);
                }
                let probe = PgProbe::new(options.clone());
                let pool = checked_when_idle(PgPoolOptions::new())
                    .max_connections(max_connections.unwrap_or(20))
                    .acquire_timeout(PG_ACQUIRE_TIMEOUT)
                    .connect_with(options)
                    .await?;
                Ok(Db::new(Pool::Postgres(pool), Some(probe)))
            }
            DatabaseTarget::Sqlite(path) => {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir)?;
                }
                let options = SqliteConnectOptions::new()
                    .filename(path)
                    .create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Wal)
                    .synchronous(SqliteSynchronous::Normal)
                    .foreign_keys(true)
                    .busy_timeout(Duration::from_secs(30));
                let pool = checked_when_idle(SqlitePoolOptions::new())
                    .max_connections(max_connections.unwrap_or(8))
                    .acquire_timeout(Duration::from_secs(30))
                    .after_connect(move |conn, _| {
                        Box::pin(async move {
                            match statement_timeout {
                                Some(limit) => sqlite_timeout::limit(conn, limit).await,
                                None => Ok(()),
                            }
                        })
                    })
                    .connect_with(options)
                    .await?;
                Ok(Db::new(Pool::Sqlite(pool), None))
            }
        }
    }

    pub async fn migrate(&self) -> StoreResult<()> {
        match &self.pool {
            Pool::Postgres(pool) => {
                // A migration may rewrite a large table: no statement timeout for it.
                let mut conn = pool.acquire().await?;
                sqlx::query("SET statement_timeout = 0")
                    .execute(&mut *conn)
                    .await?;
                let migrated = PG_MIGRATOR.run(&mut *conn).await;
                sqlx::query("RESET statement_timeout")
                    .execute(&mut *conn)
                    .await?;
                migrated?
            }
            Pool::Sqlite(pool) => {
                // As on PostgreSQL, no statement timeout for a migration; the connection goes
                // back to the pool without one, to be closed.
                let mut conn = pool.acquire().await?;
                sqlite_timeout::lift(&mut conn).await?;
                let migrated = SQLITE_MIGRATOR.run(&mut *conn).await;
                conn.close_on_drop();
                migrated?
            }
        }
        Ok(())
    }

    pub fn engine(&self) -> &'static str {
        self.pool.engine()
    }

    pub async fn conn(&self) -> StoreResult<Conn> {
        Ok(match &self.pool {
            Pool::Postgres(pool) => Conn::Postgres(self.unless_away(pool.acquire()).await??),
            Pool::Sqlite(pool) => Conn::Sqlite(pool.acquire().await?),
        })
    }

    /// Runs `waiting` (an acquire or a `BEGIN`) unless the database is away, and stops waiting
    /// the moment its probe finds it away: [`StoreError::Unavailable`] either way.
    async fn unless_away<T>(&self, waiting: impl Future<Output = T>) -> StoreResult<T> {
        if self.availability.is_away() {
            self.availability.refused();
            return Err(StoreError::Unavailable);
        }
        tokio::select! {
            done = waiting => Ok(done),
            () = self.availability.gone() => {
                self.availability.refused();
                Err(StoreError::Unavailable)
            }
        }
    }

    /// A transaction; one begun for a request holding an idempotency key first marks the key
    /// (`idempotency::mark_work`), so the mark commits with the work or not at all.
    pub async fn begin(&self) -> StoreResult<Tx> {
        let conn = match &self.pool {
            Pool::Postgres(pool) => TxConn::Postgres(self.unless_away(PgTx::begin(pool)).await??),
            Pool::Sqlite(pool) => TxConn::Sqlite(pool.begin_with("BEGIN IMMEDIATE").await?),
        };
        let mut tx = Tx {
            conn,
            watch: self.watch.clone(),
            all_written: false,
        };
        if let Some(claim) = idempotency::current() {
            idempotency::mark_work(tx.exec(), &claim).await?;
        }
        Ok(tx)
    }

    /// Answers whether the database takes a trivial query.
    pub async fn ping(&self) -> StoreResult<()> {
        let mut conn = self.conn().await?;
        on_exec!(conn.exec(), c => sqlx::query("SELECT 1").execute(c).await.map(|_| ()))?;
        Ok(())
    }

    /// Pool size and idle connections, for `/metrics`.
    pub fn pool_stats(&self) -> (u32, usize) {
        match &self.pool {
            Pool::Postgres(p) => (p.size(), p.num_idle()),
            Pool::Sqlite(p) => (p.size(), p.num_idle()),
        }
    }

    pub async fn close(&self) {
        match &self.pool {
            Pool::Postgres(p) => p.close().await,
            Pool::Sqlite(p) => p.close().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_rows_number_each_row_after_the_fixed_values() {
        assert_eq!(placeholders(3, 2), "$3, $4");
        assert_eq!(value_rows(2, 2, 3), "($2, $3, $4), ($5, $6, $7)");
        assert_eq!(value_rows(1, 1, 1), "($1)");
    }

    #[test]
    fn postgres_on_loopback_is_reached_without_tls_unless_told() {
        use sqlx::postgres::PgSslMode;
        let mode = |url: &str, env: bool| postgres_options(url, env).unwrap().get_ssl_mode();
        for url in [
            "postgres://postgres@127.0.0.1:5432/test",
            "postgres://u@localhost/db",
            "postgres://u@[::1]:5432/db",
        ] {
            assert!(matches!(mode(url, false), PgSslMode::Disable), "{url}");
            assert!(matches!(mode(url, true), PgSslMode::Prefer), "{url}");
        }
        let named = "postgres://u@127.0.0.1/db?sslmode=require";
        assert!(matches!(mode(named, false), PgSslMode::Require));
        let remote = "postgres://u@db.example.com/db";
        assert!(matches!(mode(remote, false), PgSslMode::Prefer));
    }

    #[test]
    fn padded_lists_repeat_their_entries_up_to_a_power_of_two() {
        assert_eq!(list_len(1), 1);
        assert_eq!(list_len(5), 8);
        assert_eq!(list_len(64), 64);
        assert_eq!(
            padded(&[1, 2, 3]).copied().collect::<Vec<_>>(),
            [1, 2, 3, 1]
        );
        assert_eq!(padded(&[7]).count(), 1);
        assert_eq!(padded::<i64>(&[]).count(), 0);
    }
}
