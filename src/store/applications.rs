//! Applications (proposals) of experts to projects.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::types::Json;

use super::listing::{self, Keyed, ListQuery, Order, Seek, Sql};
use super::tallies::{self, Tally};
use super::{Exec, StoreResult};
use crate::domain::cursor::Cursor;
use crate::domain::project::ApplicationStatus;
use crate::on_exec;

/// One milestone of a proposal, as stored in `proposed_milestones`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProposedMilestone {
    pub title: String,
    #[serde(default)]
    pub description: Option<String>,
    pub amount_minor: i64,
    #[serde(default)]
    pub due_date: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Application {
    pub id: i64,
    pub project_id: i64,
    pub expert_id: i64,
    pub cover_letter: String,
    pub proposed_budget_minor: i64,
    pub proposed_milestones: Json<Vec<ProposedMilestone>>,
    pub status: ApplicationStatus,
    pub attempt_number: i64,
    pub feedback: Option<String>,
    pub revision_requested_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// The columns of [`Application`], over `applications a`.
macro_rules! application_columns {
    () => {
        concat!(
            "a.id, a.project_id, a.expert_id, a.cover_letter, a.proposed_budget_minor, ",
            "a.proposed_milestones, a.status, a.attempt_number, a.feedback, ",
            "a.revision_requested_at, a.created_at, a.updated_at"
        )
    };
}

/// [`application_columns!`] as a value, for statements assembled at run time.
const APPLICATION_COLUMNS: &str = application_columns!();

macro_rules! select_applications {
    ($($rest:expr),* $(,)?) => {
        concat!("SELECT ", application_columns!(), " FROM applications a ", $($rest),*)
    };
}

/// The proposal an expert writes (on applying and on resubmitting).
#[derive(Debug, Clone)]
pub struct Proposal {
    pub cover_letter: String,
    pub proposed_budget_minor: i64,
    pub milestones: Vec<ProposedMilestone>,
}

/// Inserts a `pending` application; a second one by the same expert on the same project
/// fails with a unique violation.
pub async fn insert(
    ex: Exec<'_>,
    project_id: i64,
    expert_id: i64,
    proposal: &Proposal,
    now: DateTime<Utc>,
) -> StoreResult<i64> {
    Ok(on_exec!(ex, c => sqlx::query_scalar(
        "INSERT INTO applications (project_id, expert_id, cover_letter, proposed_budget_minor,
             proposed_milestones, status, attempt_number, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, 'pending', 1, $6, $6) RETURNING id",
    )
    .bind(project_id)
    .bind(expert_id)
    .bind(&proposal.cover_letter)
    .bind(proposal.proposed_budget_minor)
    .bind(Json(&proposal.milestones))
    .bind(now)
    .fetch_one(c)
    .await)?)
}

pub async fn find(ex: Exec<'_>, id: i64) -> StoreResult<Option<Application>> {
    Ok(on_exec!(ex, c => sqlx::query_as::<_, Application>(
        select_applications!("WHERE a.id = $1")
    )
    .bind(id)
    .fetch_optional(c)
    .await)?)
}

pub async fn find_by_expert(
    ex: Exec<'_>,
    project_id: i64,
    expert_id: i64,
) -> StoreResult<Option<Application>> {
    Ok(on_exec!(ex, c => sqlx::query_as::<_, Application>(
        select_applications!("WHERE a.project_id = $1 AND a.expert_id = $2")
    )
    .bind(project_id)
    .bind(expert_id)
    .fetch_optional(c)
    .await)?)
}

/// Whether the user has applied to the project.
pub async fn exists(ex: Exec<'_>, project_id: i64, expert_id: i64) -> StoreResult<bool> {
    Ok(on_exec!(ex, c => sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM applications WHERE project_id = $1 AND expert_id = $2)",
    )
    .bind(project_id)
    .bind(expert_id)
    .fetch_one(c)
    .await)?)
}

/// The applications whose `column` is `owner`, of `status` when given: the conditions, their
/// values bound.
fn owned_by(column: &str, owner: i64, status: Option<ApplicationStatus>) -> (Vec<String>, Sql) {
    let mut sql = Sql::default();
    let mut filter = vec![format!("a.{column} = {}", sql.arg(owner))];
    if let Some(status) = status {
        filter.push(format!("a.status = {}", sql.arg(status.as_str())));
    }
    (filter, sql)
}

/// One page of a project's applications, oldest first, optionally of one status. (Oldest
/// first is no `listing::Order`: the page is read by offset, its filter assembled all the
/// same.)
pub async fn list_for_project(
    mut ex: Exec<'_>,
    project_id: i64,
    status: Option<ApplicationStatus>,
    limit: i64,
    offset: i64,
) -> StoreResult<(Vec<Application>, i64)> {
    let (filter, mut sql) = owned_by("project_id", project_id, status);
    let filter = listing::where_clause(&filter);
    let total = sql
        .clone()
        .with_text(&format!("SELECT COUNT(*) FROM applications a {filter}"))
        .fetch_count(ex.re())
        .await?;
    let (limit, offset) = (sql.arg(limit), sql.arg(offset));
    let items = sql
        .with_text(&format!(
            "{} {filter} ORDER BY a.created_at, a.id LIMIT {limit} OFFSET {offset}",
            select_applications!()
        ))
        .fetch_all(ex)
        .await?;
    Ok((items, total))
}

impl Keyed for Application {
    fn cursor(&self) -> Cursor {
        Cursor {
            rank: 0,
            at: self.created_at,
            id: self.id,
        }
    }
}

/// One page (from 1) of an expert's applications, newest first, optionally of one status.
pub async fn list_for_expert(
    ex: Exec<'_>,
    expert_id: i64,
    status: Option<ApplicationStatus>,
    page: i64,
    size: i64,
) -> StoreResult<(Vec<Application>, i64)> {
    let (filter, args) = owned_by("expert_id", expert_id, status);
    // Kept by the writes (migration 0032): the busiest expert's 48,000 at L took 11 ms and
    // more to count.
    let statuses = status.map_or(ApplicationStatus::ALL.to_vec(), |s| vec![s]);
    let keys = tallies::state_keys("", &statuses, ApplicationStatus::as_str);
    let query = ListQuery {
        columns: APPLICATION_COLUMNS.to_owned(),
        from: "applications a",
        total: tallies::user_total(Tally::ApplicationsByExpert, expert_id, &keys),
        filter,
        args,
        order: Order::newest("a.created_at", "a.id"),
    };
    let (window, total) = query.run(ex, Seek::Page(page), size).await?;
    Ok((window.items, total))
}

/// Counts of an expert's applications by status.
pub async fn counts_for_expert(
    ex: Exec<'_>,
    expert_id: i64,
) -> StoreResult<Vec<(ApplicationStatus, i64)>> {
    // Kept by the writes (migration 0032), as the expert's projects are.
    super::tallies::by_state_of(
        ex,
        super::tallies::Tally::ApplicationsByExpert,
        expert_id,
        "",
        &ApplicationStatus::ALL,
        ApplicationStatus::as_str,
    )
    .await
}

/// `pending` → `needs_revision` with the company's feedback.
pub async fn request_revision(
    ex: Exec<'_>,
    id: i64,
    feedback: &str,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let done = on_exec!(ex, c => sqlx::query(
        "UPDATE applications SET status = 'needs_revision', feedback = $1,
             revision_requested_at = $2, updated_at = $2
         WHERE id = $3 AND status = 'pending'",
    )
    .bind(feedback)
    .bind(now)
    .bind(id)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}

/// `needs_revision` → `pending` with the new proposal, one more attempt, feedback cleared.
pub async fn resubmit(
    ex: Exec<'_>,
    id: i64,
    proposal: &Proposal,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let done = on_exec!(ex, c => sqlx::query(
        "UPDATE applications SET status = 'pending', cover_letter = $1,
             proposed_budget_minor = $2, proposed_milestones = $3,
             attempt_number = attempt_number + 1, feedback = NULL, updated_at = $4
         WHERE id = $5 AND status = 'needs_revision'",
    )
    .bind(&proposal.cover_letter)
    .bind(proposal.proposed_budget_minor)
    .bind(Json(&proposal.milestones))
    .bind(now)
    .bind(id)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}

/// The company turns a proposal down (`pending` or `needs_revision` → `rejected`).
pub async fn reject(ex: Exec<'_>, id: i64, now: DateTime<Utc>) -> StoreResult<bool> {
    let done = on_exec!(ex, c => sqlx::query(
        "UPDATE applications SET status = 'rejected', rejected_by_selection = FALSE, updated_at = $1
         WHERE id = $2 AND status IN ('pending', 'needs_revision')",
    )
    .bind(now)
    .bind(id)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}

/// Selection: `pending` → `accepted`.
pub async fn accept(ex: Exec<'_>, id: i64, now: DateTime<Utc>) -> StoreResult<bool> {
    let done = on_exec!(ex, c => sqlx::query(
        "UPDATE applications SET status = 'accepted', updated_at = $1
         WHERE id = $2 AND status = 'pending'",
    )
    .bind(now)
    .bind(id)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}

/// Selection turns down every other open proposal of the project, marked so that cancelling
/// the selection can reopen them. Returns the experts turned down.
pub async fn reject_others_on_selection(
    ex: Exec<'_>,
    project_id: i64,
    accepted_id: i64,
    now: DateTime<Utc>,
) -> StoreResult<Vec<i64>> {
    Ok(on_exec!(ex, c => sqlx::query_scalar(
        "UPDATE applications SET status = 'rejected', rejected_by_selection = TRUE, updated_at = $1
         WHERE project_id = $2 AND id <> $3 AND status IN ('pending', 'needs_revision')
         RETURNING expert_id",
    )
    .bind(now)
    .bind(project_id)
    .bind(accepted_id)
    .fetch_all(c)
    .await)?)
}

/// Undoes a selection's effect on proposals: the accepted one and those it turned down are
/// `pending` again.
pub async fn reopen_after_selection(
    ex: Exec<'_>,
    project_id: i64,
    now: DateTime<Utc>,
) -> StoreResult<u64> {
    Ok(on_exec!(ex, c => sqlx::query(
        "UPDATE applications SET status = 'pending', rejected_by_selection = FALSE, updated_at = $1
         WHERE project_id = $2
           AND (status = 'accepted' OR (status = 'rejected' AND rejected_by_selection))",
    )
    .bind(now)
    .bind(project_id)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?)
}
