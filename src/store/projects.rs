//! Projects and their formal invitations.
//!
//! Invitations exist in two forms (specification, Versioning 2): formal records in
//! `project_invitations` and the legacy JSON list `projects.invited_experts`. Every check and
//! list honours both; the lists (`store::project_lists`) read the legacy list through
//! `project_legacy_invitees`, the one row per invited expert its triggers keep.

use chrono::{DateTime, Utc};
use sqlx::types::Json;

use super::listing::Sql;
use super::{Exec, StoreResult};
use crate::domain::project::{ProjectStatus, ValidationStatus};
use crate::on_exec;

/// A project as stored.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Project {
    pub id: i64,
    pub company_id: Option<i64>,
    pub expert_id: Option<i64>,
    pub target_expert_id: Option<i64>,
    pub title: String,
    pub description: String,
    pub budget_minor: i64,
    pub currency: String,
    pub deadline: Option<DateTime<Utc>>,
    pub skills_required: Json<Vec<String>>,
    pub project_type: String,
    pub status: ProjectStatus,
    pub validation_status: Option<ValidationStatus>,
    pub validation_notes: Option<String>,
    pub submitted_at: Option<DateTime<Utc>>,
    pub validated_at: Option<DateTime<Utc>>,
    pub validated_by: Option<i64>,
    pub published_at: Option<DateTime<Utc>>,
    pub assigned_at: Option<DateTime<Utc>>,
    pub completed_at: Option<DateTime<Utc>>,
    pub cancelled_at: Option<DateTime<Utc>>,
    pub invited_experts: Json<Vec<i64>>,
    pub admin_notes: String,
    pub status_before_selection: Option<ProjectStatus>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// The columns of [`Project`], over `projects p`.
macro_rules! project_columns {
    () => {
        concat!(
            "p.id, p.company_id, p.expert_id, p.target_expert_id, p.title, p.description, ",
            "p.budget_minor, p.currency, p.deadline, p.skills_required, p.project_type, p.status, ",
            "p.validation_status, p.validation_notes, p.submitted_at, p.validated_at, ",
            "p.validated_by, p.published_at, p.assigned_at, p.completed_at, p.cancelled_at, ",
            "p.invited_experts, p.admin_notes, p.status_before_selection, p.created_at, ",
            "p.updated_at"
        )
    };
}

/// [`project_columns!`] as a value, for statements assembled at run time.
pub const PROJECT_COLUMNS: &str = project_columns!();

/// `SELECT <project columns> FROM projects p <rest>` as one static string.
macro_rules! select_projects {
    (with $extra:literal; $($rest:expr),* $(,)?) => {
        concat!("SELECT ", project_columns!(), $extra, " FROM projects p ", $($rest),*)
    };
    ($($rest:expr),* $(,)?) => {
        select_projects!(with ""; $($rest),*)
    };
}

/// A new project.
#[derive(Debug, Clone)]
pub struct NewProject<'a> {
    pub company_id: i64,
    pub target_expert_id: Option<i64>,
    pub title: &'a str,
    pub description: &'a str,
    pub budget_minor: i64,
    pub currency: &'a str,
    pub deadline: Option<DateTime<Utc>>,
    pub skills_required: &'a [String],
    pub project_type: &'a str,
    pub status: ProjectStatus,
    pub validation_status: Option<ValidationStatus>,
    pub submitted_at: Option<DateTime<Utc>>,
}

pub async fn insert(ex: Exec<'_>, p: &NewProject<'_>, now: DateTime<Utc>) -> StoreResult<i64> {
    Ok(on_exec!(ex, c => sqlx::query_scalar(
        "INSERT INTO projects (company_id, target_expert_id, title, description, budget_minor,
             currency, deadline, skills_required, project_type, status, validation_status,
             submitted_at, invited_experts, admin_notes, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, '[]', '', $13, $13)
         RETURNING id",
    )
    .bind(p.company_id)
    .bind(p.target_expert_id)
    .bind(p.title)
    .bind(p.description)
    .bind(p.budget_minor)
    .bind(p.currency)
    .bind(p.deadline)
    .bind(Json(p.skills_required))
    .bind(p.project_type)
    .bind(p.status)
    .bind(p.validation_status)
    .bind(p.submitted_at)
    .bind(now)
    .fetch_one(c)
    .await)?)
}

/// The company of each of the given projects: `(project id, company id)`.
pub async fn companies_of(ex: Exec<'_>, project_ids: &[i64]) -> StoreResult<Vec<(i64, i64)>> {
    if project_ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut sql = Sql::default();
    let projects = sql.arg_set(project_ids);
    sql.with_text(&format!(
        "SELECT id, company_id FROM projects WHERE id IN ({projects}) AND company_id IS NOT NULL"
    ))
    .same_plan()
    .fetch_all(ex)
    .await
}

pub async fn find(ex: Exec<'_>, id: i64) -> StoreResult<Option<Project>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, Project>(select_projects!("WHERE p.id = $1"))
        .bind(id)
        .fetch_optional(c)
        .await)?,
    )
}

/// The projects of `ids` that exist, in no particular order.
pub async fn find_many(ex: Exec<'_>, ids: &[i64]) -> StoreResult<Vec<Project>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let sql = select_projects!("WHERE p.id IN ({})")
        .replace("{}", &super::placeholders(1, super::list_len(ids.len())));
    Ok(on_exec!(ex, c => {
        let mut query = sqlx::query_as::<_, Project>(sqlx::AssertSqlSafe(sql.as_str()));
        for id in super::padded(ids) {
            query = query.bind(*id);
        }
        query.fetch_all(c).await
    })?)
}

/// How many projects a company has (its first project needs complete fiscal data).
/// A project and how `user_id` stands to it beyond its own columns (formally invited,
/// applied), in one round trip: what every read of one project needs.
pub async fn find_with_ties(
    ex: Exec<'_>,
    id: i64,
    user_id: i64,
) -> StoreResult<Option<(Project, bool, bool)>> {
    #[derive(sqlx::FromRow)]
    struct Row {
        #[sqlx(flatten)]
        project: Project,
        invited_formally: bool,
        applied: bool,
    }
    let row = on_exec!(ex, c => sqlx::query_as::<_, Row>(select_projects!(
        with ", EXISTS (SELECT 1 FROM project_invitations i WHERE i.project_id = p.id AND i.expert_id = $2) AS invited_formally, EXISTS (SELECT 1 FROM applications a WHERE a.project_id = p.id AND a.expert_id = $2) AS applied";
        "WHERE p.id = $1"
    ))
    .bind(id)
    .bind(user_id)
    .fetch_optional(c)
    .await)?;
    Ok(row.map(|r| (r.project, r.invited_formally, r.applied)))
}

pub async fn count_by_company(ex: Exec<'_>, company_id: i64) -> StoreResult<i64> {
    Ok(on_exec!(ex, c => sqlx::query_scalar(
        "SELECT COUNT(*) FROM projects WHERE company_id = $1",
    )
    .bind(company_id)
    .fetch_one(c)
    .await)?)
}

/// Whether an expert was ever selected for a project (the first needs complete fiscal data).
pub async fn ever_assigned(ex: Exec<'_>, expert_id: i64) -> StoreResult<bool> {
    Ok(on_exec!(ex, c => sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM projects WHERE expert_id = $1)",
    )
    .bind(expert_id)
    .fetch_one(c)
    .await)?)
}

/// How many projects an expert was selected for, by project status.
pub async fn assigned_counts(
    ex: Exec<'_>,
    expert_id: i64,
) -> StoreResult<Vec<(ProjectStatus, i64)>> {
    // Kept by the writes (migration 0032): the busiest expert's 45,000 projects at L took
    // 160 ms to count.
    super::tallies::by_state_of(
        ex,
        super::tallies::Tally::ProjectsByParty,
        expert_id,
        "expert:",
        &ProjectStatus::ALL,
        ProjectStatus::as_str,
    )
    .await
}

/// The editable fields of a project, written only while its state is still `status`.
pub async fn update_details(
    ex: Exec<'_>,
    p: &Project,
    expected_status: ProjectStatus,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let done = on_exec!(ex, c => sqlx::query(
        "UPDATE projects SET title = $1, description = $2, budget_minor = $3, deadline = $4,
             skills_required = $5, project_type = $6, target_expert_id = $7, invited_experts = $8,
             updated_at = $9
         WHERE id = $10 AND status = $11",
    )
    .bind(&p.title)
    .bind(&p.description)
    .bind(p.budget_minor)
    .bind(p.deadline)
    .bind(&p.skills_required)
    .bind(&p.project_type)
    .bind(p.target_expert_id)
    .bind(&p.invited_experts)
    .bind(now)
    .bind(p.id)
    .bind(expected_status)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}

/// The statement of every project move, `from` (`$3`) to `to` (`$1`).
const MOVE: &str = "UPDATE projects SET status = $1, updated_at = $2,
         cancelled_at = CASE WHEN $1 = 'cancelled' THEN $2 ELSE cancelled_at END,
         completed_at = CASE WHEN $1 = 'completed' THEN $2 ELSE completed_at END
     WHERE status = $3 AND id IN ({})";

/// Moves a project from `from` to `to` (the conditional update every transition is guarded by).
pub async fn transition(
    ex: Exec<'_>,
    id: i64,
    from: ProjectStatus,
    to: ProjectStatus,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    Ok(transition_all(ex, &[id], from, to, now).await? == 1)
}

/// Moves the projects of `ids` that are `from` to `to`, in one statement; how many moved.
pub async fn transition_all(
    ex: Exec<'_>,
    ids: &[i64],
    from: ProjectStatus,
    to: ProjectStatus,
    now: DateTime<Utc>,
) -> StoreResult<u64> {
    super::transition_rows(ex, MOVE, ids, from, to, now).await
}

/// An administrator's forced move, outside the lifecycle (its own rules are
/// `domain::project::admin_move`), still only from `from`.
pub async fn force(
    ex: Exec<'_>,
    id: i64,
    from: ProjectStatus,
    to: ProjectStatus,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    Ok(super::forced_transition_rows(ex, MOVE, &[id], from, to, now).await? == 1)
}

/// Sends a project for validation: `pending_publication`, validation `pending`, submitted now.
pub async fn submit_for_validation(
    ex: Exec<'_>,
    id: i64,
    from: ProjectStatus,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let done = on_exec!(ex, c => sqlx::query(
        "UPDATE projects SET status = 'pending_publication', validation_status = 'pending',
             submitted_at = $1, updated_at = $1
         WHERE id = $2 AND status = $3",
    )
    .bind(now)
    .bind(id)
    .bind(from)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}

/// Records an administrator's validation: approved (published in `to`) or rejected (back to
/// `draft`), only from `pending_publication`.
pub async fn record_validation(
    ex: Exec<'_>,
    id: i64,
    to: ProjectStatus,
    approved: bool,
    notes: Option<&str>,
    admin_id: i64,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let done = on_exec!(ex, c => sqlx::query(
        "UPDATE projects SET status = $1, validation_status = $2, validation_notes = $3,
             validated_at = $4, validated_by = $5, updated_at = $4,
             published_at = CASE WHEN $6 THEN $4 ELSE published_at END
         WHERE id = $7 AND status = 'pending_publication'",
    )
    .bind(to)
    .bind(if approved {
        ValidationStatus::Approved
    } else {
        ValidationStatus::Rejected
    })
    .bind(notes)
    .bind(now)
    .bind(admin_id)
    .bind(approved)
    .bind(id)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}

/// Assigns the expert: only from `from` and while no expert is assigned.
pub async fn assign(
    ex: Exec<'_>,
    id: i64,
    from: ProjectStatus,
    expert_id: i64,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let done = on_exec!(ex, c => sqlx::query(
        "UPDATE projects SET status = 'assigned', expert_id = $1, assigned_at = $2,
             status_before_selection = $3, updated_at = $2
         WHERE id = $4 AND status = $3 AND expert_id IS NULL",
    )
    .bind(expert_id)
    .bind(now)
    .bind(from)
    .bind(id)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}

/// Undoes [`assign`]: back to the state before selection, only from `assigned`.
pub async fn unassign(ex: Exec<'_>, id: i64, now: DateTime<Utc>) -> StoreResult<bool> {
    let done = on_exec!(ex, c => sqlx::query(
        "UPDATE projects SET status = COALESCE(status_before_selection, 'bidding'),
             expert_id = NULL, assigned_at = NULL, status_before_selection = NULL, updated_at = $1
         WHERE id = $2 AND status = 'assigned'",
    )
    .bind(now)
    .bind(id)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}

/// Deletes a project while it is still in `status` (its children go with it; a payment or a
/// dispute would block it by foreign key).
pub async fn delete(ex: Exec<'_>, id: i64, status: ProjectStatus) -> StoreResult<bool> {
    let done = on_exec!(ex, c => sqlx::query(
        "DELETE FROM projects WHERE id = $1 AND status = $2 AND expert_id IS NULL",
    )
    .bind(id)
    .bind(status)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}

/// Appends `line` to the administrators' notes (audit lines such as `[DISPUTE_EVENT] …`).
pub async fn append_admin_note(
    ex: Exec<'_>,
    id: i64,
    line: &str,
    now: DateTime<Utc>,
) -> StoreResult<()> {
    on_exec!(ex, c => sqlx::query(
        "UPDATE projects SET admin_notes = CASE WHEN admin_notes = '' THEN $1
             ELSE admin_notes || $2 END, updated_at = $3
         WHERE id = $4",
    )
    .bind(line)
    // The separator travels with the value: the engines spell the newline function apart.
    .bind(format!("\n{line}"))
    .bind(now)
    .bind(id)
    .execute(c)
    .await
    .map(|_| ()))?;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Invitations
// ---------------------------------------------------------------------------------------

/// A formal invitation of an expert to a project.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Invitation {
    pub id: i64,
    pub project_id: i64,
    pub expert_id: i64,
    pub invited_by: Option<i64>,
    pub source: String,
    pub message: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// Invites `expert_id`; `false` when the invitation already existed (it is kept as it was).
pub async fn invite(
    ex: Exec<'_>,
    project_id: i64,
    expert_id: i64,
    invited_by: Option<i64>,
    source: &str,
    message: Option<&str>,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let done = on_exec!(ex, c => sqlx::query(
        "INSERT INTO project_invitations (project_id, expert_id, invited_by, source, message, created_at)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (project_id, expert_id) DO NOTHING",
    )
    .bind(project_id)
    .bind(expert_id)
    .bind(invited_by)
    .bind(source)
    .bind(message)
    .bind(now)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}

/// Whether `expert_id` has a formal invitation to the project (the legacy list is on the
/// project row itself).
pub async fn has_formal_invitation(
    ex: Exec<'_>,
    project_id: i64,
    expert_id: i64,
) -> StoreResult<bool> {
    Ok(on_exec!(ex, c => sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM project_invitations WHERE project_id = $1 AND expert_id = $2)",
    )
    .bind(project_id)
    .bind(expert_id)
    .fetch_one(c)
    .await)?)
}

/// Formal invitations of a project, oldest first.
pub async fn invitations_of(ex: Exec<'_>, project_id: i64) -> StoreResult<Vec<Invitation>> {
    Ok(on_exec!(ex, c => sqlx::query_as::<_, Invitation>(
        "SELECT id, project_id, expert_id, invited_by, source, message, created_at
         FROM project_invitations WHERE project_id = $1 ORDER BY id",
    )
    .bind(project_id)
    .fetch_all(c)
    .await)?)
}

/// Replaces the legacy invitation list.
pub async fn set_invited_experts(
    ex: Exec<'_>,
    id: i64,
    experts: &[i64],
    now: DateTime<Utc>,
) -> StoreResult<()> {
    on_exec!(ex, c => sqlx::query(
        "UPDATE projects SET invited_experts = $1, updated_at = $2 WHERE id = $3",
    )
    .bind(Json(experts))
    .bind(now)
    .bind(id)
    .execute(c)
    .await
    .map(|_| ()))?;
    Ok(())
}

/// Projects assigned to an expert, newest first.
pub async fn list_assigned_to(
    mut ex: Exec<'_>,
    expert_id: i64,
    limit: i64,
    offset: i64,
) -> StoreResult<(Vec<Project>, i64)> {
    let items = on_exec!(ex.re(), c => sqlx::query_as::<_, Project>(select_projects!(
        "WHERE p.expert_id = $1 ORDER BY p.assigned_at DESC, p.id DESC LIMIT $2 OFFSET $3"
    ))
    .bind(expert_id)
    .bind(limit)
    .bind(offset)
    .fetch_all(c)
    .await)?;
    // Kept by the writes (migration 0032), as `assigned_counts` reads them.
    let keys = super::tallies::state_keys("expert:", &ProjectStatus::ALL, ProjectStatus::as_str);
    let total =
        super::tallies::user_total(super::tallies::Tally::ProjectsByParty, expert_id, &keys)
            .read(ex)
            .await?;
    Ok((items, total))
}

/// Whether any payment of the project was released to the expert.
pub async fn has_released_payment(ex: Exec<'_>, id: i64) -> StoreResult<bool> {
    Ok(on_exec!(ex, c => sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM payments WHERE project_id = $1 AND status = 'released')",
    )
    .bind(id)
    .fetch_one(c)
    .await)?)
}

/// How many projects `user_id` completed, as their company or their expert.
pub async fn completed_count(ex: Exec<'_>, user_id: i64) -> StoreResult<i64> {
    Ok(on_exec!(ex, c => sqlx::query_scalar(
        "SELECT COUNT(*) FROM projects
         WHERE status = 'completed' AND (company_id = $1 OR expert_id = $1)",
    )
    .bind(user_id)
    .fetch_one(c)
    .await)?)
}
