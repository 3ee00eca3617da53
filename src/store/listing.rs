//! Lists read at production volumes (issue #32). A list's statement is assembled from the
//! filters a request has, so each engine plans it for those filters (a `$n IS NULL OR …` the
//! planner cannot see through keeps it from starting at the right index), and a page is
//! found by seeking in the index of the list's order:
//! - after a [`Cursor`]: the rows past the cursor's sort key, whatever was added meanwhile;
//! - by page number: the ids of the page are read from the order's index alone (a deferred
//!   join), and pages past the middle are read from the other end, so no request walks more
//!   than half a list.

use chrono::{DateTime, Utc};
use sqlx::{FromRow, postgres::PgRow, sqlite::SqliteRow};

use super::{Exec, StoreResult};
use crate::domain::cursor::Cursor;
use crate::on_exec;

/// A value bound to a statement.
#[derive(Debug, Clone)]
pub enum Arg {
    Bool(bool),
    Int(i64),
    Text(String),
    Time(DateTime<Utc>),
}

impl From<bool> for Arg {
    fn from(v: bool) -> Self {
        Self::Bool(v)
    }
}

impl From<i64> for Arg {
    fn from(v: i64) -> Self {
        Self::Int(v)
    }
}

impl From<String> for Arg {
    fn from(v: String) -> Self {
        Self::Text(v)
    }
}

impl From<&str> for Arg {
    fn from(v: &str) -> Self {
        Self::Text(v.to_owned())
    }
}

impl From<DateTime<Utc>> for Arg {
    fn from(v: DateTime<Utc>) -> Self {
        Self::Time(v)
    }
}

/// A statement being assembled: text from constants only, every value bound.
#[derive(Debug, Clone, Default)]
pub struct Sql {
    text: String,
    args: Vec<Arg>,
}

macro_rules! bind_all {
    ($query:expr, $args:expr) => {{
        let mut query = $query;
        for arg in $args {
            query = match arg {
                Arg::Bool(v) => query.bind(*v),
                Arg::Int(v) => query.bind(*v),
                Arg::Text(v) => query.bind(v.as_str()),
                Arg::Time(v) => query.bind(*v),
            };
        }
        query
    }};
}

impl Sql {
    /// Binds `arg` and answers its placeholder.
    pub fn arg(&mut self, arg: impl Into<Arg>) -> String {
        self.args.push(arg.into());
        format!("${}", self.args.len())
    }

    /// Binds each of `values` and answers their placeholders as a list (`$1, $2`), for `IN`.
    pub fn arg_list<T: Into<Arg> + Copy>(&mut self, values: &[T]) -> String {
        let placeholders: Vec<String> = values.iter().map(|v| self.arg(*v)).collect();
        placeholders.join(", ")
    }

    /// The same bound values under another statement (which must use every one of them).
    pub fn with_text(mut self, text: &str) -> Self {
        text.clone_into(&mut self.text);
        self
    }

    pub async fn fetch_all<T>(&self, ex: Exec<'_>) -> StoreResult<Vec<T>>
    where
        T: for<'r> FromRow<'r, PgRow> + for<'r> FromRow<'r, SqliteRow> + Send + Unpin,
    {
        let text = sqlx::AssertSqlSafe(self.text.as_str());
        Ok(
            on_exec!(ex, c => bind_all!(sqlx::query_as::<_, T>(text), &self.args)
            .fetch_all(c)
            .await)?,
        )
    }

    pub async fn fetch_count(&self, ex: Exec<'_>) -> StoreResult<i64> {
        let text = sqlx::AssertSqlSafe(self.text.as_str());
        Ok(
            on_exec!(ex, c => bind_all!(sqlx::query_scalar::<_, i64>(text), &self.args)
            .fetch_one(c)
            .await)?,
        )
    }
}

/// The order of a list: an optional rank (higher first), then `at` and `id`, newest first.
/// Each is an SQL expression over the list's rows (the rank's values bound with the filter's).
#[derive(Debug, Clone)]
pub struct Order {
    pub rank: Option<String>,
    /// The rank is a boolean column (true first), compared with a bound boolean.
    pub rank_is_flag: bool,
    pub at: &'static str,
    pub id: &'static str,
}

/// Which page: after a cursor, or a page number (from 1).
#[derive(Debug, Clone, Copy)]
pub enum Seek {
    After(Cursor),
    Page(i64),
}

/// One page of a list, with the cursor of its last item when more follow.
pub struct Window<T> {
    pub items: Vec<T>,
    pub next: Option<Cursor>,
}

/// The sort key of an item, as a cursor.
pub trait Keyed {
    fn cursor(&self) -> Cursor;
}

/// The words of a search: what both engines index (runs of letters and digits), at most 16.
/// No word, no match: a search of only punctuation finds nothing rather than everything.
pub fn words(search: &str) -> Vec<&str> {
    search
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .take(16)
        .collect()
}

/// PostgreSQL's query of `words` (all of them), folded as the indexed text is.
pub fn tsquery(sql: &mut Sql, words: &[&str]) -> String {
    let q = sql.arg(words.join(" "));
    format!("plainto_tsquery('simple', fold_text({q}))")
}

/// An FTS5 query of `words` (all of them), each a quoted string (letters and digits only:
/// nothing to escape), limited to `column` when given.
pub fn fts5_query(sql: &mut Sql, words: &[&str], column: Option<&str>) -> String {
    let phrase: Vec<String> = words.iter().map(|w| format!("\"{w}\"")).collect();
    let phrase = phrase.join(" ");
    sql.arg(match column {
        Some(column) => format!("{column} : ({phrase})"),
        None => phrase,
    })
}

/// `WHERE` and `conditions` joined by `AND`, or nothing without a condition.
pub fn where_clause(conditions: &[String]) -> String {
    if conditions.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", conditions.join(" AND "))
    }
}

/// The total of a list counted: how many rows of `from` pass `filter` (values in `args`).
pub fn count_rows(from: &str, filter: &[String], args: &Sql) -> Total {
    let filter = where_clause(filter);
    Total::Query(
        args.clone()
            .with_text(&format!("SELECT COUNT(*) FROM {from} {filter}")),
    )
}

/// How a list's total is had.
#[derive(Debug, Clone)]
pub enum Total {
    /// A statement answering it: a count, or a sum of the counts writes keep.
    Query(Sql),
    /// The sum of several.
    Sum(Vec<Total>),
    /// Known without asking.
    Known(i64),
}

impl Total {
    async fn read(&self, mut ex: Exec<'_>) -> StoreResult<i64> {
        match self {
            Self::Query(sql) => sql.fetch_count(ex).await,
            Self::Known(n) => Ok(*n),
            Self::Sum(parts) => {
                let mut sum = 0;
                for part in parts {
                    sum += Box::pin(part.read(ex.re())).await?;
                }
                Ok(sum)
            }
        }
    }

    fn statements<'a>(&'a self, out: &mut Vec<&'a Sql>) {
        match self {
            Self::Query(sql) => out.push(sql),
            Self::Sum(parts) => parts.iter().for_each(|p| p.statements(out)),
            Self::Known(_) => {}
        }
    }
}

/// A list as a request asks for it: `SELECT {columns} FROM {from}` narrowed by `filter`
/// (conditions over the rows, joined by `AND`; their values bound in `args`), in `order`,
/// with its total.
#[derive(Debug, Clone)]
pub struct ListQuery {
    pub columns: String,
    pub from: &'static str,
    pub filter: Vec<String>,
    pub args: Sql,
    pub order: Order,
    pub total: Total,
}

/// The statement of one page, and whether it reads the list from its end.
struct PageStatement {
    sql: Sql,
    reversed: bool,
}

impl ListQuery {
    /// A list that holds nothing (a search without a word).
    pub fn nothing(order: Order) -> Self {
        Self {
            columns: String::new(),
            from: "",
            filter: Vec::new(),
            args: Sql::default(),
            order,
            total: Total::Known(0),
        }
    }

    /// The statement of a page of `size` items; `None` past the end.
    fn page_statement(&self, seek: Seek, size: i64, total: i64) -> Option<PageStatement> {
        let mut sql = self.args.clone();
        let mut filter = self.filter.clone();
        let Order {
            rank,
            rank_is_flag,
            at,
            id,
        } = &self.order;
        let (newest_first, oldest_first) = match rank {
            Some(rank) => (
                format!("{rank} DESC, {at} DESC, {id} DESC"),
                format!("{rank} ASC, {at} ASC, {id} ASC"),
            ),
            None => (
                format!("{at} DESC, {id} DESC"),
                format!("{at} ASC, {id} ASC"),
            ),
        };
        let (ordering, limit, offset, reversed) = match seek {
            Seek::After(cursor) => {
                let (a, i) = (sql.arg(cursor.at), sql.arg(cursor.id));
                let after = format!("({at}, {id}) < ({a}, {i})");
                filter.push(match rank {
                    Some(rank) => {
                        let r = if *rank_is_flag {
                            sql.arg(cursor.rank != 0)
                        } else {
                            sql.arg(cursor.rank)
                        };
                        format!("({rank} < {r} OR ({rank} = {r} AND {after}))")
                    }
                    None => after,
                });
                (newest_first, size + 1, 0, false)
            }
            Seek::Page(number) => {
                let offset = (number - 1).saturating_mul(size);
                if offset >= total {
                    return None;
                }
                if offset > total / 2 {
                    // Past the middle: the same page counted from the other end.
                    let from_end = total - offset - size;
                    let (limit, offset) = if from_end < 0 {
                        (size + from_end, 0)
                    } else {
                        (size, from_end)
                    };
                    (oldest_first, limit, offset, true)
                } else {
                    (newest_first, size + 1, offset, false)
                }
            }
        };
        let filter = where_clause(&filter);
        let (limit, offset) = (sql.arg(limit), sql.arg(offset));
        let (columns, from) = (&self.columns, self.from);
        // The page's ids first, from the order's index alone where it covers the filter;
        // then only those rows are read in full.
        sql.text = format!(
            "SELECT {columns} FROM {from} WHERE {id} IN \
             (SELECT {id} FROM {from} {filter} ORDER BY {ordering} \
              LIMIT {limit} OFFSET {offset}) \
             ORDER BY {ordering}"
        );
        Some(PageStatement { sql, reversed })
    }

    /// How many items the list holds.
    pub async fn count(&self, ex: Exec<'_>) -> StoreResult<i64> {
        self.total.read(ex).await
    }

    /// One page of `size` items and the list's total.
    pub async fn run<T>(
        self,
        mut ex: Exec<'_>,
        seek: Seek,
        size: i64,
    ) -> StoreResult<(Window<T>, i64)>
    where
        T: for<'r> FromRow<'r, PgRow> + for<'r> FromRow<'r, SqliteRow> + Send + Unpin + Keyed,
    {
        let total = self.total.read(ex.re()).await?;
        let Some(page) = self.page_statement(seek, size, total) else {
            let nothing = Window {
                items: Vec::new(),
                next: None,
            };
            return Ok((nothing, total));
        };
        let mut items: Vec<T> = page.sql.fetch_all(ex).await?;
        let more = if page.reversed {
            items.reverse();
            matches!(seek, Seek::Page(number) if number.saturating_mul(size) < total)
        } else {
            let more = items.len() as i64 > size;
            items.truncate(usize::try_from(size).unwrap_or(0));
            more
        };
        let next = if more {
            items.last().map(Keyed::cursor)
        } else {
            None
        };
        Ok((Window { items, next }, total))
    }

    /// PostgreSQL's plans (`EXPLAIN (FORMAT JSON)`, with the values bound) of the statements
    /// [`run`](Self::run) would send for this page, total first: what the plan test holds
    /// against sequential scans.
    pub async fn explain(
        &self,
        mut ex: Exec<'_>,
        seek: Seek,
        size: i64,
    ) -> StoreResult<Vec<serde_json::Value>> {
        let total = self.total.read(ex.re()).await?;
        let mut statements = Vec::new();
        self.total.statements(&mut statements);
        let page = self.page_statement(seek, size, total);
        if let Some(page) = &page {
            statements.push(&page.sql);
        }
        let mut plans = Vec::new();
        for statement in statements {
            let explain = statement
                .clone()
                .with_text(&format!("EXPLAIN (FORMAT JSON) {}", statement.text));
            let text = sqlx::AssertSqlSafe(explain.text.as_str());
            let plan: sqlx::types::Json<serde_json::Value> = match ex.re() {
                Exec::Postgres(c) => {
                    bind_all!(sqlx::query_scalar(text), &explain.args)
                        .fetch_one(&mut *c)
                        .await?
                }
                Exec::Sqlite(_) => continue,
            };
            plans.push(serde_json::json!({"statement": statement.text, "plan": plan.0}));
        }
        Ok(plans)
    }
}
