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

/// A statement being assembled: text from constants only (and integers the store computed,
/// such as a page's limit and offset), every other value bound.
///
/// With values bound, it is planned for them each time it runs (an unnamed statement, never
/// cached): how many rows a search word or a user holds decides whether an index's order or a
/// bitmap is the right start, and a cached statement's generic plan, which PostgreSQL
/// switches to after five runs, guesses alike for all values (a common word's title matches
/// at M: 2 ms planned for the word, 203 ms on the generic plan).
///
/// Without a bound value nothing in it varies, so it is prepared once per connection and its
/// plan kept: planning the public list's page took 0.5 of the 0.7 ms PostgreSQL spent on it.
/// A statement marked [`Sql::same_plan`] is prepared too, and one marked
/// [`Sql::planned_once`] also keeps its generic plan from the first run.
#[derive(Debug, Clone, Default)]
pub struct Sql {
    text: String,
    args: Vec<Arg>,
    /// Prepared even with values: its plan is the same for all of them ([`Sql::same_plan`]).
    same_plan: bool,
    /// Planned for no values from its first run on PostgreSQL ([`Sql::planned_once`]).
    planned_once: bool,
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

/// Runs `$query` with the statement's values and `$fetch`: prepared or not as
/// [`Sql::prepared`] says, and a [`Sql::planned_once`] statement on PostgreSQL under
/// [`generic_plans`].
macro_rules! run {
    ($sql:expr, $ex:expr, $query:expr, $fetch:ident) => {
        match $ex {
            Exec::Postgres(c) if $sql.planned_once => {
                let mut planned_once = generic_plans(c).await?;
                let out = bind_all!($query.persistent(true), &$sql.args)
                    .$fetch(&mut *planned_once)
                    .await?;
                planned_once.rollback().await?;
                out
            }
            Exec::Postgres(c) => {
                bind_all!($query.persistent($sql.prepared()), &$sql.args)
                    .$fetch(c)
                    .await?
            }
            Exec::Sqlite(c) => {
                bind_all!($query.persistent($sql.prepared()), &$sql.args)
                    .$fetch(c)
                    .await?
            }
        }
    };
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

    /// [`Sql::arg_list`] for a list read as a set (`IN`), padded as [`super::padded`] pads
    /// it: a few statement texts whatever its length, so a [`Sql::same_plan`] statement
    /// taking it is prepared a few times per connection, not once per length.
    pub fn arg_set<T: Into<Arg> + Copy>(&mut self, values: &[T]) -> String {
        let padded: Vec<T> = super::padded(values).copied().collect();
        self.arg_list(&padded)
    }

    /// Marks a statement whose best plan is the same whatever its values (a lookup of a few
    /// keys in a primary key): it is prepared once per connection like one without values,
    /// and PostgreSQL keeps its generic plan after five runs planned for their values, as
    /// it does when that plan costs no more.
    pub fn same_plan(mut self) -> Self {
        self.same_plan = true;
        self
    }

    /// [`Sql::same_plan`] for a statement PostgreSQL would plan on every run: after the first
    /// five it keeps planning for the values while that plan looks cheaper than the generic
    /// one, which for the growth view's thirty range reads was always (0 generic plans in 8
    /// runs, 7.5 ms planned for 5 ms read at M). So it runs with `plan_cache_mode =
    /// force_generic_plan`, set in a (sub)transaction of its own that is rolled back after
    /// the read: the setting never outlives the statement, even when the request is dropped
    /// half way (the connection rolls back before it is reused). That costs three round trips
    /// more (0.25 ms here), so only a statement whose planning costs more is marked.
    pub fn planned_once(mut self) -> Self {
        self.planned_once = true;
        self.same_plan()
    }

    /// Whether the statement is prepared and its plan kept (see [`Sql`]).
    fn prepared(&self) -> bool {
        self.same_plan || self.args.is_empty()
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
        Ok(run!(self, ex, sqlx::query_as::<_, T>(text), fetch_all))
    }

    pub async fn fetch_count(&self, ex: Exec<'_>) -> StoreResult<i64> {
        let text = sqlx::AssertSqlSafe(self.text.as_str());
        Ok(run!(
            self,
            ex,
            sqlx::query_scalar::<_, i64>(text),
            fetch_one
        ))
    }
}

/// A (sub)transaction on `c` whose prepared statements keep their generic plan
/// ([`Sql::planned_once`]); rolled back when done with, or when dropped.
async fn generic_plans(
    c: &mut sqlx::PgConnection,
) -> StoreResult<sqlx::Transaction<'_, sqlx::Postgres>> {
    let mut tx = sqlx::Connection::begin(c).await?;
    sqlx::query("SET LOCAL plan_cache_mode = force_generic_plan")
        .execute(&mut *tx)
        .await?;
    Ok(tx)
}

/// The order of a list: its tiers in turn (every item of a tier before any of the next: a
/// search's title matches before its other matches, verified experts before the others),
/// each newest first by `at` then `id` (SQL expressions over the list's rows).
///
/// Each tier is read as a list of its own, narrowed by its condition, so the index of
/// `(at, id)` orders it and a page reads only its rows. Ranking by an expression instead
/// (`ORDER BY rank DESC, at DESC`) evaluates the rank on every match before the first page
/// can be sorted: 137 ms for a common word at M.
///
/// With `rank_as`, each row is read with its tier's rank as that column (0 in a list of one
/// tier): a tier is known as it is read, so its rank is never computed from the row again.
#[derive(Debug, Clone)]
pub struct Order {
    pub tiers: Vec<Tier>,
    pub at: &'static str,
    pub id: &'static str,
    pub rank_as: Option<&'static str>,
}

impl Order {
    /// Newest first, in one tier.
    pub fn newest(at: &'static str, id: &'static str) -> Self {
        Self {
            tiers: Vec::new(),
            at,
            id,
            rank_as: None,
        }
    }

    /// The same order, each row read with its tier's rank as the column `name`.
    pub fn ranked_as(self, name: &'static str) -> Self {
        Self {
            rank_as: Some(name),
            ..self
        }
    }
}

/// One tier of a list: the rank its items carry in a cursor (tiers come in falling rank),
/// the condition that selects them (over the list's bound values, each tier's the negation
/// of the ones before), and how many items it holds; `None` for the one tier that holds what
/// the list's total leaves.
#[derive(Debug, Clone)]
pub struct Tier {
    pub rank: i64,
    pub condition: String,
    pub total: Option<Total>,
}

/// Which page: after a cursor, or a page number (from 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Seek {
    After(Cursor),
    Page(i64),
}

impl Seek {
    /// The row a page of `size` ends at, counted from the list's start (from the cursor for a
    /// page after one, with the one more read to tell whether more follow).
    pub fn window(self, size: i64) -> i64 {
        match self {
            Self::Page(number) => number.saturating_mul(size),
            Self::After(_) => size.saturating_add(1),
        }
    }
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

/// How a list tests that a row belongs to a set, such as a skill's projects or experts: by
/// looking up the set's members and sorting them (cost: the set), or by walking the list's
/// order and probing each row with one index lookup (cost: the page's end × the list ÷ the
/// set). Chosen from counts known beforehand where the engine cannot choose (SQLite has no
/// statistics); PostgreSQL's planner chooses from its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetTest {
    Lookup,
    Probe,
}

impl SetTest {
    /// The cheaper test for a set of `members` among a list of `rows`, for a page ending at
    /// row `window`: probing when `members² > window × rows`.
    pub fn cheaper(members: i64, window: i64, rows: i64) -> Self {
        if members.saturating_mul(members) > window.saturating_mul(rows) {
            Self::Probe
        } else {
            Self::Lookup
        }
    }

    /// The list `build` makes (for the engine of `ex`) for a page ending at row `window`, its
    /// set tested the cheaper way: the set's members counted by the list's own total, the rows
    /// by `whole`'s (the same list without the set). The list returned carries its total, read
    /// here, as known.
    pub async fn choose(
        mut ex: Exec<'_>,
        window: i64,
        whole: &ListQuery,
        build: impl Fn(&Exec<'_>, SetTest) -> ListQuery,
    ) -> StoreResult<ListQuery> {
        let looked_up = build(&ex, Self::Lookup);
        let members = looked_up.total.read(ex.re()).await?;
        let rows = whole.total.read(ex.re()).await?;
        let mut query = match Self::cheaper(members, window, rows) {
            Self::Lookup => looked_up,
            Self::Probe => build(&ex, Self::Probe),
        };
        query.total = Total::Known(members);
        Ok(query)
    }
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
    let phrase = fts5_words(words);
    sql.arg(match column {
        Some(column) => format!("{column} : ({phrase})"),
        None => phrase,
    })
}

/// `words` as FTS5 query terms, all of them required: each a quoted string (letters and
/// digits only: nothing to escape).
pub fn fts5_words(words: &[&str]) -> String {
    let terms: Vec<String> = words.iter().map(|w| format!("\"{w}\"")).collect();
    terms.join(" ")
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
    pub async fn read(&self, mut ex: Exec<'_>) -> StoreResult<i64> {
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

/// A tier as a page reads it: its condition (none for a list of one tier), its rank, and how
/// its items are counted (`None`: what the list's total leaves once the tiers before it are
/// counted).
struct Part<'a> {
    condition: Option<&'a str>,
    rank: i64,
    counted: Option<&'a Total>,
}

/// Within this many items of a tier's start, a page is read forward without counting the tier
/// first: the read itself tells where the tier ends, and the first pages of a search then
/// cost no count of its title matches.
const SHALLOW: i64 = 1_000;

/// Where a page reads within a part: `limit` items from `offset`, or the items after a
/// cursor's `(at, id)`.
#[derive(Clone, Copy)]
enum Slice {
    At { offset: i64, limit: i64 },
    After { cursor: Cursor, limit: i64 },
}

/// The statement of one slice of a part, and whether it reads the part from its end.
struct PageStatement {
    sql: Sql,
    reversed: bool,
}

/// Rows a statement's plan is asked for only: nothing of them is decoded.
struct Unread;

impl<'r, R: sqlx::Row> FromRow<'r, R> for Unread {
    fn from_row(_: &'r R) -> Result<Self, sqlx::Error> {
        Ok(Self)
    }
}

impl ListQuery {
    /// A list that holds nothing (a search without a word).
    pub fn nothing(order: Order) -> Self {
        Self {
            columns: String::new(),
            from: "",
            filter: Vec::new(),
            args: Sql::default(),
            order: Order {
                tiers: Vec::new(),
                ..order
            },
            total: Total::Known(0),
        }
    }

    /// The list's parts in order: its tiers, or the whole list as one.
    fn parts(&self) -> Vec<Part<'_>> {
        if self.order.tiers.is_empty() {
            let whole = Part {
                condition: None,
                rank: 0,
                counted: None,
            };
            return vec![whole];
        }
        self.order
            .tiers
            .iter()
            .map(|tier| Part {
                condition: Some(&tier.condition),
                rank: tier.rank,
                counted: tier.total.as_ref(),
            })
            .collect()
    }

    /// The statement reading `slice` of `part`, which holds `len` items when counted.
    fn statement(&self, part: &Part<'_>, len: Option<i64>, slice: Slice) -> PageStatement {
        let mut sql = self.args.clone();
        let mut filter = self.filter.clone();
        filter.extend(part.condition.map(str::to_owned));
        let Order { at, id, .. } = &self.order;
        let newest_first = format!("{at} DESC, {id} DESC");
        let (ordering, limit, offset, reversed) = match (slice, len) {
            (Slice::After { cursor, limit }, _) => {
                let (a, i) = (sql.arg(cursor.at), sql.arg(cursor.id));
                filter.push(format!("({at}, {id}) < ({a}, {i})"));
                (newest_first, limit, 0, false)
            }
            // Past the middle of the part: the same items counted from its other end.
            (Slice::At { offset, limit }, Some(len)) if offset > len / 2 => {
                let from_end = len - offset - limit;
                let (limit, offset) = if from_end < 0 {
                    (limit + from_end, 0)
                } else {
                    (limit, from_end)
                };
                (format!("{at} ASC, {id} ASC"), limit, offset, true)
            }
            (Slice::At { offset, limit }, _) => (newest_first, limit, offset, false),
        };
        let filter = where_clause(&filter);
        // Written into the text: they are the store's own integers, and a list with no other
        // value is then a statement prepared once (see `Sql`).
        let (limit, offset) = (limit.to_string(), offset.to_string());
        let columns = match self.order.rank_as {
            Some(name) => format!("{}, CAST({} AS BIGINT) AS {name}", self.columns, part.rank),
            None => self.columns.clone(),
        };
        let from = self.from;
        // The page's ids first, from the order's index alone where it covers the filter;
        // then only those rows are read in full.
        sql.text = format!(
            "SELECT {columns} FROM {from} WHERE {id} IN \
             (SELECT {id} FROM {from} {filter} ORDER BY {ordering} \
              LIMIT {limit} OFFSET {offset}) \
             ORDER BY {ordering}"
        );
        PageStatement { sql, reversed }
    }

    /// Reads `slice` of `part` in the list's order; each statement sent is also put in `sent`
    /// when given.
    async fn read<T>(
        &self,
        ex: Exec<'_>,
        part: &Part<'_>,
        len: Option<i64>,
        slice: Slice,
        sent: &mut Option<&mut Vec<Sql>>,
    ) -> StoreResult<Vec<T>>
    where
        T: for<'r> FromRow<'r, PgRow> + for<'r> FromRow<'r, SqliteRow> + Send + Unpin,
    {
        let page = self.statement(part, len, slice);
        let mut items: Vec<T> = page.sql.fetch_all(ex).await?;
        if page.reversed {
            items.reverse();
        }
        if let Some(sent) = sent {
            sent.push(page.sql);
        }
        Ok(items)
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
        let mut items: Vec<T> = self.page(ex, seek, size, total, None).await?;
        let more = match seek {
            Seek::Page(number) => number.saturating_mul(size) < total,
            Seek::After(_) => {
                let more = items.len() as i64 > size;
                items.truncate(usize::try_from(size).unwrap_or(0));
                more
            }
        };
        let next = if more {
            items.last().map(Keyed::cursor)
        } else {
            None
        };
        Ok((Window { items, next }, total))
    }

    /// The items of a page (after a cursor, one more than `size` when more follow), the
    /// statements sent for them put in `sent` when given.
    async fn page<T>(
        &self,
        ex: Exec<'_>,
        seek: Seek,
        size: i64,
        total: i64,
        mut sent: Option<&mut Vec<Sql>>,
    ) -> StoreResult<Vec<T>>
    where
        T: for<'r> FromRow<'r, PgRow> + for<'r> FromRow<'r, SqliteRow> + Send + Unpin,
    {
        match seek {
            Seek::Page(number) => self.numbered(ex, number, size, total, &mut sent).await,
            Seek::After(cursor) => self.after(ex, cursor, size, &mut sent).await,
        }
    }

    /// Page `number` of `size` items of a list of `total`, tier by tier. A tier is counted
    /// only when the page starts deep in it, or past its end.
    async fn numbered<T>(
        &self,
        mut ex: Exec<'_>,
        number: i64,
        size: i64,
        total: i64,
        sent: &mut Option<&mut Vec<Sql>>,
    ) -> StoreResult<Vec<T>>
    where
        T: for<'r> FromRow<'r, PgRow> + for<'r> FromRow<'r, SqliteRow> + Send + Unpin,
    {
        let mut items = Vec::new();
        let mut skip = (number - 1).saturating_mul(size);
        if skip >= total {
            return Ok(items);
        }
        // Items in the tiers passed: the last tier holds the rest of the total.
        let mut before = 0;
        for part in self.parts() {
            let want = size - items.len() as i64;
            if want <= 0 {
                break;
            }
            let len = match part.counted {
                None => Some((total - before).max(0)),
                Some(count) if skip >= SHALLOW => Some(count.read(ex.re()).await?),
                Some(_) => None,
            };
            let len = match len {
                Some(len) if skip >= len => len,
                Some(len) => {
                    let slice = Slice::At {
                        offset: skip,
                        limit: want.min(len - skip),
                    };
                    items.extend(self.read(ex.re(), &part, Some(len), slice, sent).await?);
                    len
                }
                None => {
                    // Forward from near the tier's start: a short read is the tier's end.
                    let slice = Slice::At {
                        offset: skip,
                        limit: want,
                    };
                    let read: Vec<T> = self.read(ex.re(), &part, None, slice, sent).await?;
                    let got = read.len() as i64;
                    items.extend(read);
                    match part.counted {
                        Some(count) if got == 0 && skip > 0 => count.read(ex.re()).await?,
                        _ => skip + got,
                    }
                }
            };
            skip = (skip - len).max(0);
            before += len;
        }
        Ok(items)
    }

    /// Up to `size + 1` items after `cursor`: the rest of its tier, then the tiers after it.
    async fn after<T>(
        &self,
        mut ex: Exec<'_>,
        cursor: Cursor,
        size: i64,
        sent: &mut Option<&mut Vec<Sql>>,
    ) -> StoreResult<Vec<T>>
    where
        T: for<'r> FromRow<'r, PgRow> + for<'r> FromRow<'r, SqliteRow> + Send + Unpin,
    {
        let mut items = Vec::new();
        for part in self.parts() {
            let limit = size + 1 - items.len() as i64;
            if limit <= 0 {
                break;
            }
            let slice = match part.rank.cmp(&cursor.rank) {
                std::cmp::Ordering::Greater => continue,
                std::cmp::Ordering::Equal => Slice::After { cursor, limit },
                std::cmp::Ordering::Less => Slice::At { offset: 0, limit },
            };
            items.extend(self.read(ex.re(), &part, None, slice, sent).await?);
        }
        Ok(items)
    }

    /// The engine's plans, with the values bound, of the statements [`run`](Self::run) sends
    /// for this page, after those of the list's and its tiers' totals (a tier's is sent only
    /// for deep pages): PostgreSQL's `EXPLAIN (FORMAT JSON)`, SQLite's `EXPLAIN QUERY PLAN`
    /// as its lines' details. What the plan tests hold against reading a large table whole.
    /// The page is read as `run` reads it, to find which statements it sends.
    pub async fn explain(
        &self,
        mut ex: Exec<'_>,
        seek: Seek,
        size: i64,
    ) -> StoreResult<Vec<serde_json::Value>> {
        let total = self.total.read(ex.re()).await?;
        let mut totals = Vec::new();
        self.total.statements(&mut totals);
        for part in self.parts() {
            part.counted
                .into_iter()
                .for_each(|t| t.statements(&mut totals));
        }
        let mut statements: Vec<Sql> = totals.into_iter().cloned().collect();
        let mut sent = Vec::new();
        self.page::<Unread>(ex.re(), seek, size, total, Some(&mut sent))
            .await?;
        statements.extend(sent);
        let mut plans = Vec::new();
        for statement in &statements {
            let plan = match ex.re() {
                Exec::Postgres(c) => {
                    let text = format!("EXPLAIN (FORMAT JSON) {}", statement.text);
                    let plan: sqlx::types::Json<serde_json::Value> = bind_all!(
                        sqlx::query_scalar(sqlx::AssertSqlSafe(text)),
                        &statement.args
                    )
                    .fetch_one(&mut *c)
                    .await?;
                    plan.0
                }
                Exec::Sqlite(c) => {
                    let text = format!("EXPLAIN QUERY PLAN {}", statement.text);
                    let lines: Vec<(i64, i64, i64, String)> =
                        bind_all!(sqlx::query_as(sqlx::AssertSqlSafe(text)), &statement.args)
                            .fetch_all(&mut *c)
                            .await?;
                    lines.into_iter().map(|(_, _, _, detail)| detail).collect()
                }
            };
            plans.push(serde_json::json!({"statement": statement.text, "plan": plan}));
        }
        Ok(plans)
    }
}
