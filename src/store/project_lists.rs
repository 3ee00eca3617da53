//! The project lists: the public marketplace, what a user may see, their own projects and
//! the administrators' list, each newest first (a search: title matches first), a page at a
//! time through `store::listing`. Their totals come from `project_counts` (kept by triggers
//! on every write) for the fixed filters, for a skill filter from the projects by skill
//! (`Tally::ProjectsBySkill`, migration 0034), for a search from the projects by word that the
//! writes keep (PostgreSQL, one word: `Tally::ProjectWords`, migration 0030) or from the FTS5
//! index alone (SQLite, a search with no other filter: the public listings' by the index's
//! `listed` column, migration 0048; kept until a project is written, [`SearchCounts`]), for
//! an expert's invited projects from `Tally::InvitationsByExpert` (0034), and from a count of
//! the rows that match otherwise.
//! Text is searched by word: PostgreSQL's full-text index over the folded text (migration
//! 0016), SQLite's FTS5 table (0048); both fold case and accents.

use std::sync::LazyLock;

use chrono::{DateTime, Utc};

use super::listing::{self, Keyed, ListQuery, Order, Seek, SetTest, Sql, Tier, Total};
use super::page_cache::PageCache;
use super::projects::Project;
use super::tallies::{self, Tally};
use super::{Exec, StoreResult};
use crate::domain::cursor::Cursor;
use crate::domain::project::{ProjectStatus, ProjectType, may_apply};
use crate::domain::visibility;

/// Filters of a project list; `None` matches everything.
#[derive(Debug, Default, Clone, PartialEq, Eq, Hash)]
pub struct ProjectFilter {
    pub status: Option<ProjectStatus>,
    pub project_type: Option<ProjectType>,
    /// A skill name, matched case-insensitively against `skills_required`.
    pub skill: Option<String>,
    pub min_budget_minor: Option<i64>,
    pub max_budget_minor: Option<i64>,
    /// Words in the title or description.
    pub search: Option<String>,
    pub company_id: Option<i64>,
}

/// Who is asking, for the visibility rule of lists.
#[derive(Debug, Clone, Copy)]
pub enum Viewer {
    /// Sees every project.
    Admin,
    /// Sees public listings plus the projects they take part in.
    User(i64),
    /// Sees public listings only.
    Anonymous,
}

/// Filters of the administrators' project list.
#[derive(Debug, Default, Clone)]
pub struct AdminProjectFilter {
    pub status: Option<ProjectStatus>,
    pub project_type: Option<ProjectType>,
    pub company_id: Option<i64>,
    pub expert_id: Option<i64>,
    pub created_from: Option<DateTime<Utc>>,
    pub created_to: Option<DateTime<Utc>>,
    /// Words in the title or description.
    pub search: Option<String>,
}

/// The public listing over `projects p` ([`visibility::listed_sql`], written as migration
/// 0016's partial index `idx_projects_listed_newest` is, so that SQLite uses it too).
static LISTED: LazyLock<String> = LazyLock::new(|| visibility::listed_sql("p."));

/// The same rule over `project_counts`.
static LISTED_COUNTS: LazyLock<String> = LazyLock::new(|| visibility::listed_sql(""));

/// The same rule kept off SQLite's indexes (see [`listed_or`]).
static LISTED_UNINDEXED: LazyLock<String> = LazyLock::new(|| visibility::listed_sql("+p."));

/// The projects user `user_id` takes part in ([`visibility::involving_sql`]).
fn involving(sql: &mut Sql, user_id: i64) -> String {
    let u = sql.arg(user_id);
    format!("p.id IN ({})", visibility::involving_sql(&u))
}

/// Listed or `involved`, written for each engine's planner to walk the order's index and
/// test each row. SQLite reads an `OR` of two indexed terms through both indexes (a
/// `MULTI-INDEX OR`) and then sorts every visible project: an expert's first page at M took
/// 202 ms that way, 0.3 ms with the terms kept off the indexes by a unary `+`.
fn listed_or(engine: &Exec<'_>, involved: &str) -> String {
    match engine {
        Exec::Postgres(_) => format!("({} OR {involved})", *LISTED),
        Exec::Sqlite(_) => format!("({} OR +{involved})", *LISTED_UNINDEXED),
    }
}

/// Newest first, each project read with its tier's rank as `search_rank`.
fn newest() -> Order {
    Order::newest("p.created_at", "p.id").ranked_as("search_rank")
}

/// A project as a list reads it: with its search rank (1 for a title match, else 0).
#[derive(Debug, sqlx::FromRow)]
pub struct Listed {
    #[sqlx(flatten)]
    pub project: Project,
    pub search_rank: i64,
}

impl Keyed for Listed {
    fn cursor(&self) -> Cursor {
        Cursor {
            rank: self.search_rank,
            at: self.project.created_at,
            id: self.project.id,
        }
    }
}

/// The conditions of a word search, or `None` when it has no word: the words anywhere, and
/// in the title.
struct TextSearch {
    matches: String,
    in_title: String,
}

fn text_search(engine: &Exec<'_>, sql: &mut Sql, search: &str) -> Option<TextSearch> {
    let words = listing::words(search);
    if words.is_empty() {
        return None;
    }
    Some(match engine {
        Exec::Postgres(_) => {
            let query = listing::tsquery(sql, &words);
            TextSearch {
                matches: format!("p.text_words @@ {query}"),
                in_title: format!("p.title_words @@ {query}"),
            }
        }
        Exec::Sqlite(_) => {
            let all = listing::fts5_query(sql, &words, None);
            let title = listing::fts5_query(sql, &words, Some("title"));
            TextSearch {
                matches: in_index("p.id", &all),
                in_title: in_index("p.id", &title),
            }
        }
    })
}

/// `member` (the project's id, or `+p.id` to keep SQLite from starting at the matches) among
/// the matches of the search index's query bound as `query`.
fn in_index(member: &str, query: &str) -> String {
    format!("{member} IN (SELECT rowid FROM projects_fts WHERE projects_fts MATCH {query})")
}

/// How many projects of `project_counts` pass `conditions` (over its type and status).
fn counted(conditions: &[String], args: &Sql) -> Total {
    let filter = listing::where_clause(conditions);
    Total::Query(args.clone().with_text(&format!(
        "SELECT CAST(COALESCE(SUM(n), 0) AS BIGINT) FROM project_counts {filter}"
    )))
}

/// How many rows of `projects p` pass `filter`.
fn count(filter: &[String], args: &Sql) -> Total {
    listing::count_rows("projects p", filter, args)
}

/// The list of the projects passing `filter`, newest first; with a search, its title
/// matches (`in_title`) first, counted apart.
fn list(filter: Vec<String>, args: Sql, in_title: Option<String>, total: Total) -> ListQuery {
    let mut order = newest();
    if let Some(t) = &in_title {
        let mut titled = filter.clone();
        titled.push(t.clone());
        order.tiers = vec![
            Tier {
                rank: 1,
                condition: t.clone(),
                total: Some(count(&titled, &args)),
            },
            Tier {
                rank: 0,
                condition: format!("NOT ({t})"),
                total: None,
            },
        ];
    }
    ListQuery {
        columns: super::projects::PROJECT_COLUMNS.to_owned(),
        from: "projects p",
        filter,
        args,
        order,
        total,
    }
}

/// The filters both the visible and the administrators' lists have: those
/// `project_counts` answers (`fixed`, over its type and status) and the others.
struct Filters {
    sql: Sql,
    filter: Vec<String>,
    fixed: Vec<String>,
    fixed_args: Sql,
    /// Whether `project_counts` answers the total (no filter past type and status).
    counted: bool,
    /// A search's words in the title: its first tier.
    in_title: Option<String>,
    /// The projects' types and statuses the fixed filters leave.
    types: Vec<ProjectType>,
    statuses: Vec<ProjectStatus>,
    /// A search's words when it has no filter past type and status: its total is then had
    /// without reading its matches (see [`Filters::kept_total`]).
    words: Option<Vec<String>>,
    /// The skill, when it is the one filter past type and status (see
    /// [`Filters::kept_total`]).
    skill: Option<String>,
}

impl Filters {
    fn new(status: Option<ProjectStatus>, project_type: Option<ProjectType>) -> Self {
        let mut f = Self {
            sql: Sql::default(),
            filter: Vec::new(),
            fixed: Vec::new(),
            fixed_args: Sql::default(),
            counted: true,
            in_title: None,
            types: vec![ProjectType::Private, ProjectType::Curated],
            statuses: ProjectStatus::ALL.to_vec(),
            words: None,
            skill: None,
        };
        if let Some(status) = status {
            f.statuses = vec![status];
            f.filter
                .push(format!("p.status = {}", f.sql.arg(status.as_str())));
            f.fixed
                .push(format!("status = {}", f.fixed_args.arg(status.as_str())));
        }
        if let Some(kind) = project_type {
            f.types = vec![kind];
            f.filter
                .push(format!("p.project_type = {}", f.sql.arg(kind.as_str())));
            f.fixed.push(format!(
                "project_type = {}",
                f.fixed_args.arg(kind.as_str())
            ));
        }
        f
    }

    /// A condition `project_counts` cannot answer, over the value bound as `{}`.
    fn other(&mut self, condition: &str, value: impl Into<super::listing::Arg>) {
        let placeholder = self.sql.arg(value);
        self.uncounted(condition.replace("{}", &placeholder));
    }

    /// Adds a condition no kept count answers: the total is counted from the rows.
    fn uncounted(&mut self, condition: String) {
        self.filter.push(condition);
        self.counted = false;
        self.words = None;
        self.skill = None;
    }

    /// Narrows to the projects requiring `skill` (as `project_skills` holds it, lower-cased),
    /// tested as `test` says.
    fn skill(&mut self, skill: &str, test: SetTest) {
        let alone = self.counted;
        let skill = skill.to_lowercase();
        let condition = match test {
            SetTest::Lookup => "p.id IN (SELECT project_id FROM project_skills WHERE skill = {})",
            SetTest::Probe => {
                "EXISTS (SELECT 1 FROM project_skills s WHERE s.skill = {} AND s.project_id = p.id)"
            }
        };
        self.other(condition, skill.as_str());
        self.skill = alone.then_some(skill);
    }

    /// Narrows to the projects requiring `skill` whose budget is within `min..=max`, read
    /// together from `project_skills`' index of both (migration 0058). The budget conditions on
    /// `p` stay beside it: the same answer, which the planner may also use.
    fn skill_in_budget(&mut self, skill: &str, min: Option<i64>, max: Option<i64>) {
        let skill = self.sql.arg(skill.to_lowercase());
        let mut within = format!("skill = {skill}");
        if let Some(min) = min {
            within.push_str(&format!(" AND budget_minor >= {}", self.sql.arg(min)));
        }
        if let Some(max) = max {
            within.push_str(&format!(" AND budget_minor <= {}", self.sql.arg(max)));
        }
        self.uncounted(format!(
            "p.id IN (SELECT project_id FROM project_skills WHERE {within})"
        ));
    }

    /// Narrows to a word search; `false` when the search has no word (it matches nothing).
    fn search(&mut self, engine: &Exec<'_>, search: Option<&str>) -> bool {
        let Some(search) = search.map(str::trim).filter(|s| !s.is_empty()) else {
            return true;
        };
        let Some(found) = text_search(engine, &mut self.sql, search) else {
            return false;
        };
        if self.counted {
            let words = listing::words(search).into_iter().map(str::to_owned);
            self.words = Some(words.collect());
        }
        self.filter.push(found.matches);
        self.in_title = Some(found.in_title);
        self.counted = false;
        self.skill = None;
        true
    }

    /// The total of a search or of a skill filter without reading its matches, over the
    /// types and statuses the filters leave (the public listings only with `listed_only`), or
    /// `None`:
    /// - a skill, the one filter past type and status: from the projects by skill the writes
    ///   keep (`Tally::ProjectsBySkill`);
    /// - PostgreSQL, one word: from the projects by word the writes keep
    ///   (`Tally::ProjectWords`).
    ///
    /// (On SQLite a search with no other filter is [`searched_on_sqlite`].)
    fn kept_total(&self, engine: &Exec<'_>, listed_only: bool) -> Option<Total> {
        if let Some(skill) = &self.skill {
            let key = |sql: &mut Sql, skill: &str, kind: &str| {
                format!("{} || {skill}", sql.arg(format!("{kind} ")))
            };
            return Some(self.tally_total(Tally::ProjectsBySkill, listed_only, skill, key));
        }
        let words = self.words.as_deref()?;
        match (engine, words) {
            (Exec::Postgres(_), [word]) => {
                let key = |sql: &mut Sql, word: &str, kind: &str| {
                    format!("fold_text({word}) || {}", sql.arg(format!(" {kind}")))
                };
                Some(self.tally_total(Tally::ProjectWords, listed_only, word, key))
            }
            _ => None,
        }
    }

    /// A total from a tally keyed by `value` (a word, a skill) and a project's type and
    /// status: the sum of the keys `key` writes from `value`'s placeholder and each
    /// `<type> <status>` the filters leave (the public listings only with `listed_only`).
    fn tally_total(
        &self,
        tally: Tally,
        listed_only: bool,
        value: &str,
        key: impl Fn(&mut Sql, &str, &str) -> String,
    ) -> Total {
        let types = self
            .types
            .iter()
            .filter(|t| !listed_only || **t == ProjectType::Curated);
        tallies::total_of(tally, |sql| {
            let value = sql.arg(value);
            let mut keys = Vec::new();
            for kind in types {
                for status in &self.statuses {
                    if listed_only && !visibility::is_listed(*kind, *status) {
                        continue;
                    }
                    let kind = format!("{} {}", kind.as_str(), status.as_str());
                    keys.push(key(sql, &value, &kind));
                }
            }
            keys
        })
    }
}

/// Projects visible to `viewer` and matching `f`: newest first (with a search, title
/// matches first).
///
/// Visible: public listings (curated projects in `published_curated`, `bidding`,
/// `published`, `open`), and for a user the projects they own, are assigned to, are the
/// target of, are invited to (formally or in the legacy list) or have applied to.
///
/// `skill_budgets`: whether `project_skills.budget_minor` is filled (the backfill
/// `store::backfills::PROJECT_SKILL_BUDGETS` finished), so a skill and a budget range are read
/// together from its index; before, the budget is tested on each project of the skill.
pub fn visible(
    engine: &Exec<'_>,
    viewer: Viewer,
    f: &ProjectFilter,
    skill_budgets: bool,
) -> ListQuery {
    visible_with(engine, viewer, f, SetTest::Lookup, skill_budgets)
}

/// [`visible`] for a page ending at row `window`. On SQLite a skill that is the one filter
/// past type and status is tested as [`SetTest::cheaper`] says from its kept count:
/// `skill=python` at M, 1,383 of 19,247 listed projects, took 24 ms looked up and sorted,
/// 0.3 ms probed, and the rarest skill 3.4 ms looked up, 24 ms probed. A search alone is
/// [`searched_on_sqlite`], its index's counts kept in `kept`.
pub async fn visible_for_page(
    ex: Exec<'_>,
    viewer: Viewer,
    f: &ProjectFilter,
    window: i64,
    kept: &SearchCounts,
    skill_budgets: bool,
) -> StoreResult<ListQuery> {
    if matches!(ex, Exec::Sqlite(_)) {
        let search_alone = ProjectFilter {
            search: None,
            ..f.clone()
        } == ProjectFilter::default();
        // A blank search is no filter, as `Filters::search` reads it.
        let search = f.search.as_deref().filter(|s| !s.trim().is_empty());
        if let Some(words) = search.filter(|_| search_alone) {
            return searched_on_sqlite(ex, viewer, words, window, kept).await;
        }
    }
    let skill_alone = f.skill.as_deref().is_some_and(|s| !s.trim().is_empty())
        && f.min_budget_minor.is_none()
        && f.max_budget_minor.is_none()
        && f.company_id.is_none()
        && f.search.is_none();
    if !matches!(ex, Exec::Sqlite(_)) || matches!(viewer, Viewer::User(_)) || !skill_alone {
        return Ok(visible(&ex, viewer, f, skill_budgets));
    }
    let without = ProjectFilter {
        skill: None,
        ..f.clone()
    };
    let whole = visible(&ex, viewer, &without, skill_budgets);
    let build = |engine: &Exec<'_>, test| visible_with(engine, viewer, f, test, skill_budgets);
    SetTest::choose(ex, window, &whole, build).await
}

fn visible_with(
    engine: &Exec<'_>,
    viewer: Viewer,
    f: &ProjectFilter,
    test: SetTest,
    skill_budgets: bool,
) -> ListQuery {
    let mut q = Filters::new(f.status, f.project_type);
    if let Some(skill) = f.skill.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        let (min, max) = (f.min_budget_minor, f.max_budget_minor);
        if skill_budgets && (min.is_some() || max.is_some()) {
            q.skill_in_budget(skill, min, max);
        } else {
            q.skill(skill, test);
        }
    }
    if let Some(min) = f.min_budget_minor {
        q.other("p.budget_minor >= {}", min);
    }
    if let Some(max) = f.max_budget_minor {
        q.other("p.budget_minor <= {}", max);
    }
    if let Some(company) = f.company_id {
        q.other("p.company_id = {}", company);
    }
    if !q.search(engine, f.search.as_deref()) {
        return ListQuery::nothing(newest());
    }
    let all_kept = q.kept_total(engine, false);
    let listed_kept = q.kept_total(engine, true);
    let Filters {
        mut sql,
        mut filter,
        mut fixed,
        fixed_args,
        counted: by_counts,
        in_title,
        ..
    } = q;
    let total = match viewer {
        Viewer::Admin if by_counts => counted(&fixed, &fixed_args),
        Viewer::Admin => all_kept.unwrap_or_else(|| count(&filter, &sql)),
        Viewer::Anonymous => {
            filter.push(LISTED.clone());
            fixed.push(LISTED_COUNTS.clone());
            if by_counts {
                counted(&fixed, &fixed_args)
            } else {
                listed_kept.unwrap_or_else(|| count(&filter, &sql))
            }
        }
        Viewer::User(user_id) => {
            let involved = involving(&mut sql, user_id);
            let mut own = filter.clone();
            filter.push(listed_or(engine, &involved));
            // The public listings, kept, plus the user's own that are not listed, counted.
            let listed = if by_counts {
                fixed.push(LISTED_COUNTS.clone());
                Some(counted(&fixed, &fixed_args))
            } else {
                listed_kept
            };
            match listed {
                Some(listed) => {
                    own.push(format!("NOT ({})", *LISTED));
                    own.push(involved);
                    Total::Sum(vec![listed, count(&own, &sql)])
                }
                None => count(&filter, &sql),
            }
        }
    };
    list(filter, sql, in_title, total)
}

/// A word search with no other filter, on SQLite, which has no statistics to plan it by. Its
/// two tiers, the title matches and the other matches, are each one query of the search index,
/// which counts them alone (the public listings' by its `listed` column, migration 0048; a
/// user's own projects that are not listed are counted from their few), those counts kept in
/// `kept` until a project is written. Each tier is then tested the cheaper way for the page
/// ([`SetTest::cheaper`]): its matches looked up and sorted, or probed while the projects the
/// viewer may see are walked newest first.
async fn searched_on_sqlite(
    mut ex: Exec<'_>,
    viewer: Viewer,
    search: &str,
    window: i64,
    kept: &SearchCounts,
) -> StoreResult<ListQuery> {
    let words = listing::words(search);
    if words.is_empty() {
        return Ok(ListQuery::nothing(newest()));
    }
    let terms = listing::fts5_words(&words);
    let in_title = format!("title : ({terms})");
    // Read before the counts, so a count kept under it holds every write it covers.
    let writes = writes(ex.re()).await?;
    let counts = KeptCounts { kept, writes };
    // The other matches are counted as all of them less the title's: the index counts a
    // `NOT` at twice the cost of either.
    let titled = search_members(ex.re(), viewer, &in_title, &counts).await?;
    let total = search_members(ex.re(), viewer, &terms, &counts).await?;
    let tiers = [
        (1, in_title.clone(), titled),
        (0, format!("({terms}) NOT {in_title}"), total - titled),
    ];
    // What a probe walks: the listings' own index for the public, else every project.
    let walked = match viewer {
        Viewer::Anonymous => counted(std::slice::from_ref(&*LISTED_COUNTS), &Sql::default()),
        Viewer::Admin | Viewer::User(_) => counted(&[], &Sql::default()),
    };
    let rows = walked.read(ex.re()).await?;
    let mut sql = Sql::default();
    let filter = match viewer {
        Viewer::Admin => Vec::new(),
        Viewer::Anonymous => vec![LISTED.clone()],
        Viewer::User(user_id) => vec![listed_or(&ex, &involving(&mut sql, user_id))],
    };
    let mut order = newest();
    let mut before = 0;
    for (rank, set, members) in tiers {
        // A numbered page reads the later tier up to its part of the window; a page after a
        // cursor in it reads a window's worth.
        let reach = if window > before {
            window - before
        } else {
            window
        };
        let member = match SetTest::cheaper(members, reach, rows) {
            SetTest::Lookup => "p.id",
            SetTest::Probe => "+p.id",
        };
        // The public's matches are the listings' alone; a user's include their own.
        let set = sql.arg(match viewer {
            Viewer::Anonymous => listings(&set),
            Viewer::Admin | Viewer::User(_) => set,
        });
        order.tiers.push(Tier {
            rank,
            condition: in_index(member, &set),
            total: Some(Total::Known(members)),
        });
        before += members;
    }
    Ok(ListQuery {
        columns: super::projects::PROJECT_COLUMNS.to_owned(),
        from: "projects p",
        filter,
        args: sql,
        order,
        total: Total::Known(total),
    })
}

/// The public listings among the matches of `set`, a query of the search index.
fn listings(set: &str) -> String {
    format!("listed : \"true\" AND ({set})")
}

/// The counts of SQLite's project search index by query (its text), kept by each instance
/// under the count of committed writes to projects read before each ([`PageCache`]): the
/// index's rows are the projects' own, so no other write changes them. A common word's count
/// reads every entry it has (2 ms for `data` at M), and each search asks for two.
pub type SearchCounts = PageCache<String, i64>;

/// [`SearchCounts`] with the count of writes this request read before any.
struct KeptCounts<'a> {
    kept: &'a SearchCounts,
    writes: i64,
}

/// How many projects `viewer` may see match `set`, a query of the search index: counted in
/// the index alone (the public listings by its `listed` column) or kept from such a count,
/// plus for a user their own projects that are not listed, counted from their few.
async fn search_members(
    mut ex: Exec<'_>,
    viewer: Viewer,
    set: &str,
    counts: &KeptCounts<'_>,
) -> StoreResult<i64> {
    let query = match viewer {
        Viewer::Admin => set.to_owned(),
        Viewer::Anonymous | Viewer::User(_) => listings(set),
    };
    let bytes = query.len() + size_of::<i64>();
    let mut sql = Sql::default();
    let arg = sql.arg(query.as_str());
    let read = async {
        let text = format!("SELECT COUNT(*) FROM projects_fts WHERE projects_fts MATCH {arg}");
        sql.with_text(&text).fetch_count(ex.re()).await
    };
    let indexed = counts
        .kept
        .get_or_read(query, counts.writes, |_| bytes, read)
        .await?;
    let Viewer::User(user_id) = viewer else {
        return Ok(indexed);
    };
    let mut sql = Sql::default();
    let involved = involving(&mut sql, user_id);
    let set = sql.arg(set);
    // The unary plus keeps SQLite from starting at the matches: it starts at the user's few.
    let own = vec![
        involved,
        format!("NOT ({})", *LISTED),
        in_index("+p.id", &set),
    ];
    Ok(indexed + count(&own, &sql).read(ex).await?)
}

/// The public list's page `seek` of `size` items under `filter`: what its answers are kept by
/// (`AppState::public_projects`).
pub type PublicPage = (Seek, i64, ProjectFilter);

/// How many writes to projects have committed (migration 0043): read before a public page,
/// the count its answer is kept under ([`super::page_cache`]).
pub async fn writes(ex: Exec<'_>) -> StoreResult<i64> {
    tallies::written(ex, Tally::ProjectWrites).await
}

/// A user's own projects: as company (owner) or as the assigned expert, newest first; their
/// total kept by the writes (`Tally::ProjectsByParty`, migration 0032).
pub fn mine(user_id: i64, status: Option<ProjectStatus>) -> ListQuery {
    let mut sql = Sql::default();
    let u = sql.arg(user_id);
    let mut filter = vec![format!("(p.company_id = {u} OR p.expert_id = {u})")];
    if let Some(status) = status {
        filter.push(format!("p.status = {}", sql.arg(status.as_str())));
    }
    let statuses = status.map_or(ProjectStatus::ALL.to_vec(), |s| vec![s]);
    let keys = tallies::state_keys("mine:", &statuses, ProjectStatus::as_str);
    let total = tallies::user_total(Tally::ProjectsByParty, user_id, &keys);
    list(filter, sql, None, total)
}

/// [`admin`] for a page ending at row `window`: on SQLite a search with no other filter is
/// [`searched_on_sqlite`], its index's counts kept in `kept`.
pub async fn admin_for_page(
    ex: Exec<'_>,
    f: &AdminProjectFilter,
    window: i64,
    kept: &SearchCounts,
) -> StoreResult<ListQuery> {
    let search_alone = f.status.is_none()
        && f.project_type.is_none()
        && f.company_id.is_none()
        && f.expert_id.is_none()
        && f.created_from.is_none()
        && f.created_to.is_none();
    // A blank search is no filter, as `Filters::search` reads it.
    match f.search.as_deref().filter(|s| !s.trim().is_empty()) {
        Some(words) if search_alone && matches!(ex, Exec::Sqlite(_)) => {
            searched_on_sqlite(ex, Viewer::Admin, words, window, kept).await
        }
        _ => Ok(admin(&ex, f)),
    }
}

/// Every project for the administrators, newest first (with a search, title matches first).
pub fn admin(engine: &Exec<'_>, f: &AdminProjectFilter) -> ListQuery {
    let mut q = Filters::new(f.status, f.project_type);
    if let Some(company) = f.company_id {
        q.other("p.company_id = {}", company);
    }
    if let Some(expert) = f.expert_id {
        q.other("p.expert_id = {}", expert);
    }
    if let Some(from) = f.created_from {
        q.other("p.created_at >= {}", from);
    }
    if let Some(to) = f.created_to {
        q.other("p.created_at < {}", to);
    }
    if !q.search(engine, f.search.as_deref()) {
        return ListQuery::nothing(newest());
    }
    let total = if q.counted {
        counted(&q.fixed, &q.fixed_args)
    } else if let Some(words) = q.kept_total(engine, false) {
        words
    } else {
        count(&q.filter, &q.sql)
    };
    list(q.filter, q.sql, q.in_title, total)
}

/// Which of an expert's invited projects a list shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invited {
    /// Every project they are invited to, formally or in the legacy list (each once).
    All,
    /// Those they may still apply to and have not, by the applying rules
    /// (`domain::project::may_apply`): invited to a project in a state taking invited
    /// experts' proposals, or the target of a private one.
    Available,
}

/// How many projects an expert is invited to (formally or in the legacy list), kept by the
/// writes (`Tally::InvitationsByExpert`, migration 0034).
pub async fn invitation_count(ex: Exec<'_>, expert_id: i64) -> StoreResult<i64> {
    invited_total(Invited::All, expert_id).read(ex).await
}

/// The states in which invited experts may apply.
fn open_to_invited() -> Vec<ProjectStatus> {
    ProjectStatus::ALL
        .into_iter()
        .filter(|s| may_apply(*s, true, false).is_ok())
        .collect()
}

/// The total of an `Invited` list: the invited projects from `Tally::InvitationsByExpert`
/// (every state, or those open to invited experts and not applied to), plus for `Available`
/// the private projects targeting the expert, counted (a few).
fn invited_total(which: Invited, expert_id: i64) -> Total {
    let keys = |statuses: &[ProjectStatus], applied: &[bool]| -> Vec<String> {
        let states = tallies::state_keys("", statuses, ProjectStatus::as_str);
        applied
            .iter()
            .flat_map(|a| states.iter().map(move |k| format!("{k}:{a}")))
            .collect()
    };
    match which {
        Invited::All => tallies::user_total(
            Tally::InvitationsByExpert,
            expert_id,
            &keys(&ProjectStatus::ALL, &[false, true]),
        ),
        Invited::Available => {
            let mut sql = Sql::default();
            let u = sql.arg(expert_id);
            let targeted = vec![targeted(&u), not_applied(&u)];
            Total::Sum(vec![
                tallies::user_total(
                    Tally::InvitationsByExpert,
                    expert_id,
                    &keys(&open_to_invited(), &[false]),
                ),
                count(&targeted, &sql),
            ])
        }
    }
}

fn targeted(u: &str) -> String {
    format!("p.status = 'published_private' AND p.target_expert_id = {u}")
}

fn not_applied(u: &str) -> String {
    format!(
        "NOT EXISTS (SELECT 1 FROM applications a WHERE a.project_id = p.id AND a.expert_id = {u})"
    )
}

/// An expert's invited projects (`which`), newest first, for a page ending at row `window`.
///
/// Two ways to find them, chosen by their total (read first, from the tally) against every
/// project's: from the expert's invitations, each project looked up and all of them sorted
/// (cost: the total), or walking every project newest first and testing each for an
/// invitation (cost: `window` × projects ÷ total rows walked). The busiest expert at M is
/// invited to 3,866 projects of 100,000: their first page took 34 ms looked up and sorted,
/// 0.5 ms walked; an expert invited to a few has them looked up, and with no more than
/// `window` of them every project's count is not even read.
pub async fn invited(
    mut ex: Exec<'_>,
    which: Invited,
    expert_id: i64,
    window: i64,
) -> StoreResult<ListQuery> {
    // Each walked row is tested by a lookup; PostgreSQL would otherwise read every
    // invitation of the expert into a hash first, which `OFFSET 0` keeps it from doing.
    let probe = if matches!(ex, Exec::Postgres(_)) {
        " OFFSET 0"
    } else {
        ""
    };
    let total = invited_total(which, expert_id).read(ex.re()).await?;
    // Every project counts at least the `total` invited ones, so `total <= window` never walks.
    let walk = total > window && {
        let projects = counted(&[], &Sql::default()).read(ex).await?;
        SetTest::cheaper(total, window, projects) == SetTest::Probe
    };
    let mut sql = Sql::default();
    let u = sql.arg(expert_id);
    let invitation = if walk {
        format!(
            "(EXISTS (SELECT 1 FROM project_invitations i
                       WHERE i.project_id = p.id AND i.expert_id = {u}{probe})
              OR EXISTS (SELECT 1 FROM project_legacy_invitees l
                          WHERE l.expert_id = {u} AND l.project_id = p.id{probe}))"
        )
    } else {
        format!(
            "p.id IN (SELECT project_id FROM project_invitations WHERE expert_id = {u}
                UNION SELECT project_id FROM project_legacy_invitees WHERE expert_id = {u})"
        )
    };
    let filter = match which {
        Invited::All => vec![invitation],
        Invited::Available => {
            let open = open_to_invited()
                .iter()
                .map(|s| format!("'{}'", s.as_str()))
                .collect::<Vec<_>>()
                .join(", ");
            let targeted = targeted(&u);
            let candidates = if walk {
                format!("(({targeted}) OR (p.status IN ({open}) AND {invitation}))")
            } else {
                format!(
                    "p.id IN (SELECT id FROM projects
                              WHERE target_expert_id = {u} AND status = 'published_private'
                              UNION SELECT project_id FROM project_invitations WHERE expert_id = {u}
                              UNION SELECT project_id FROM project_legacy_invitees WHERE expert_id = {u})
                     AND (({targeted}) OR p.status IN ({open}))"
                )
            };
            vec![candidates, not_applied(&u)]
        }
    };
    Ok(list(filter, sql, None, Total::Known(total)))
}

/// Reads one page of `query`: the projects, the cursor of the last when more follow, and the
/// list's total.
pub async fn page(
    ex: Exec<'_>,
    query: ListQuery,
    seek: Seek,
    size: i64,
) -> StoreResult<(Vec<Project>, Option<Cursor>, i64)> {
    let (window, total) = query.run::<Listed>(ex, seek, size).await?;
    let items = window.items.into_iter().map(|l| l.project).collect();
    Ok((items, window.next, total))
}
