//! Accounts as administrators see and change them: the filtered list, suspension, status,
//! the steps of a removal, role sets, and the record of each administrator action.

use chrono::{DateTime, Utc};

use super::listing::{self, Keyed, ListQuery, Order, Seek, SetTest, Sql, Total};
use super::page_cache::PageCache;
use super::tallies::{self, Tally};
use super::users::{self, User};
use super::{Exec, StoreResult};
use crate::domain::cursor::Cursor;
use crate::domain::user::{AccountStatus, Role};
use crate::on_exec;

/// What only administrators see of an account, beside the `User`.
#[derive(Debug, Clone, Default, sqlx::FromRow)]
pub struct Standing {
    pub suspension_reason: Option<String>,
    pub suspended_by: Option<i64>,
    pub deletion_reason: Option<String>,
    pub deletion_requested_at: Option<DateTime<Utc>>,
    pub deletion_requested_by: Option<i64>,
    pub deletion_confirmed_at: Option<DateTime<Utc>>,
    pub deletion_confirmed_by: Option<i64>,
    pub accept_marketing: bool,
    pub source: Option<String>,
}

pub async fn standing(ex: Exec<'_>, id: i64) -> StoreResult<Standing> {
    Ok(on_exec!(ex, c => sqlx::query_as::<_, Standing>(
        "SELECT suspension_reason, suspended_by, deletion_reason, deletion_requested_at,
                deletion_requested_by, deletion_confirmed_at, deletion_confirmed_by,
                accept_marketing, source
         FROM users WHERE id = $1",
    )
    .bind(id)
    .fetch_optional(c)
    .await)?
    .unwrap_or_default())
}

/// Filters of the administrators' user list.
#[derive(Debug, Default, Clone)]
pub struct UserFilter {
    pub role: Option<String>,
    /// `active`, `inactive`, `suspended` or `deleted`.
    pub status: Option<String>,
    /// A profile verification status any of the user's profiles has.
    pub verification: Option<String>,
    /// Text in the e-mail, username or a profile's name; `%` and `_` are literal.
    pub search: Option<String>,
}

impl UserFilter {
    /// The text searched for, trimmed; `None` when blank.
    fn search_text(&self) -> Option<&str> {
        self.search
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
    }
}

/// An account's place in the list: what its order reads.
#[derive(sqlx::FromRow)]
struct Listed {
    id: i64,
    created_at: DateTime<Utc>,
}

impl Keyed for Listed {
    fn cursor(&self) -> Cursor {
        Cursor {
            rank: 0,
            at: self.created_at,
            id: self.id,
        }
    }
}

/// The administrators' user list, newest first, for `f`: each filter starts from its own
/// index (roles, profile verification, trigram indexes for the search), never a scan of
/// every account.
fn users(engine: &Exec<'_>, f: &UserFilter, test: SetTest) -> ListQuery {
    let mut sql = Sql::default();
    let mut filter = Vec::new();
    if let Some(role) = &f.role {
        let role = sql.arg(role.as_str());
        filter.push(match test {
            SetTest::Lookup => {
                format!("u.id IN (SELECT user_id FROM user_roles WHERE role = {role})")
            }
            SetTest::Probe => format!(
                "EXISTS (SELECT 1 FROM user_roles r WHERE r.user_id = u.id AND r.role = {role})"
            ),
        });
    }
    // `AccountStatus::of`, as conditions on the account's dates and flag.
    match f.status.as_deref().map(AccountStatus::parse) {
        None => {}
        Some(Some(AccountStatus::Active)) => {
            filter.push("u.is_active = TRUE AND u.deleted_at IS NULL".into());
        }
        Some(Some(AccountStatus::Inactive)) => filter
            .push("u.is_active = FALSE AND u.suspended_at IS NULL AND u.deleted_at IS NULL".into()),
        Some(Some(AccountStatus::Suspended)) => {
            filter.push("u.suspended_at IS NOT NULL AND u.deleted_at IS NULL".into());
        }
        Some(Some(AccountStatus::Deleted)) => filter.push("u.deleted_at IS NOT NULL".into()),
        // No account is in a status that does not exist.
        Some(None) => filter.push("1 = 0".into()),
    }
    if let Some(status) = &f.verification {
        let status = sql.arg(status.as_str());
        filter.push(format!(
            "u.id IN (SELECT user_id FROM profiles WHERE verification_status = {status})"
        ));
    }
    let matches = f
        .search_text()
        .map(|search| matching(engine, &mut sql, search));
    if let Some(matches) = &matches {
        // Probed, the unary plus keeps SQLite from starting at the matches, which it then
        // reads once as the accounts are walked.
        filter.push(match test {
            SetTest::Lookup => format!("u.id IN ({matches})"),
            SetTest::Probe => format!("+u.id IN ({matches})"),
        });
    }
    // No filter, one role or one status: the count the writes keep (migration 0026); a
    // search alone: its matches counted in the search index, each an account.
    let status = f.status.as_deref().map(AccountStatus::parse);
    let total = match (&f.role, status, &f.verification, &matches) {
        (None, None, None, None) => tallies::total(Tally::Users, None),
        (Some(role), None, None, None) => tallies::total(Tally::AccountsByRole, Some(role)),
        (None, Some(Some(status)), None, None) => {
            tallies::total(Tally::UsersByStatus, Some(status.as_str()))
        }
        (None, None, None, Some(matches)) => Total::Query(
            sql.clone()
                .with_text(&format!("SELECT COUNT(*) FROM ({matches}) m")),
        ),
        _ => listing::count_rows("users u", &filter, &sql),
    };
    ListQuery {
        columns: "u.id, u.created_at".to_owned(),
        from: "users u",
        filter,
        args: sql,
        order: Order::newest("u.created_at", "u.id"),
        total,
    }
}

/// The ids of the accounts whose e-mail, username or a profile's name holds `search` (`%` and
/// `_` literal, case and accents folded), from each account's search text (migration 0039).
fn matching(engine: &Exec<'_>, sql: &mut Sql, search: &str) -> String {
    match engine {
        Exec::Postgres(_) => {
            let pattern = format!("%{}%", super::escape_like(search));
            let p = sql.arg(pattern);
            format!("SELECT user_id FROM account_search WHERE text LIKE fold_text({p}) ESCAPE '\\'")
        }
        // The trigram index answers a quoted string as a substring (three characters at
        // least); a shorter term is looked for row by row.
        Exec::Sqlite(_) if search.chars().count() >= 3 => {
            let q = sql.arg(format!("\"{}\"", search.replace('"', "\"\"")));
            format!("SELECT rowid FROM account_search WHERE account_search MATCH {q}")
        }
        Exec::Sqlite(_) => {
            let pattern = format!("%{}%", super::escape_like(&search.to_lowercase()));
            let p = sql.arg(pattern);
            format!(
                "SELECT id FROM users WHERE LOWER(email) LIKE {p} ESCAPE '\\'
                    OR LOWER(username) LIKE {p} ESCAPE '\\'
                 UNION SELECT user_id FROM profiles
                  WHERE LOWER(COALESCE(full_name, '')) LIKE {p} ESCAPE '\\'
                     OR LOWER(COALESCE(company_name, '')) LIKE {p} ESCAPE '\\'"
            )
        }
    }
}

/// The list of `f` for a page ending at row `window`. On SQLite, which has no statistics to
/// choose by, a role or a search with no other filter is tested as [`SetTest::cheaper`] says
/// from its count (kept, or the search index's) and every account's: the 75,000 experts of
/// 100,000 accounts at M took 29 ms looked up and sorted, 0.1 ms probed as the accounts are
/// walked newest first; `garcia`'s 2,621 accounts 15.6 and 7.5 ms (6 of them reading the
/// matches from the index, either way).
///
/// `known` is the list's total when the caller knows it (a search's, kept).
async fn users_for_page(
    ex: Exec<'_>,
    f: &UserFilter,
    window: i64,
    known: Option<i64>,
) -> StoreResult<ListQuery> {
    let build = |engine: &Exec<'_>, test| {
        let mut query = users(engine, f, test);
        if let Some(total) = known {
            query.total = Total::Known(total);
        }
        query
    };
    let set_alone = f.role.is_some() != f.search_text().is_some()
        && f.status.is_none()
        && f.verification.is_none();
    if !matches!(ex, Exec::Sqlite(_)) || !set_alone {
        return Ok(build(&ex, SetTest::Lookup));
    }
    let without = UserFilter {
        role: None,
        search: None,
        ..f.clone()
    };
    let whole = users(&ex, &without, SetTest::Lookup);
    SetTest::choose(ex, window, &whole, build).await
}

/// The administrators' searches (a search alone, by its text), kept by each instance under the
/// count of committed writes to the accounts' search texts read before each (migration 0054,
/// [`PageCache`]): which accounts match changes only with those writes, and their order,
/// newest first, with none (an account's creation time never changes).
/// - `totals`, by search text: an exact count of a common word's matches rechecks every one
///   of them (25,923 accounts hold `garcia` at L: 40 ms on PostgreSQL);
/// - `pages`, the accounts of a page by search text, page and size: on SQLite a page reads
///   every match from the trigram index (2,621 for `garcia` at M: 7 ms).
///
/// A search paged through, or asked again, while no account's text changed counts and walks
/// nothing; what a page shows of each account is read at every request.
#[derive(Default)]
pub struct SearchesKept {
    pub totals: PageCache<String, i64>,
    pub pages: PageCache<(String, i64, i64), Vec<i64>>,
}

/// One page of users, newest first, with what only administrators see of each, and the
/// total: four statements whatever the page's size (five for a search, whose total and pages
/// are kept in `kept` while the accounts' search texts are unchanged; three for a page kept).
pub async fn list(
    mut ex: Exec<'_>,
    f: &UserFilter,
    page: i64,
    size: i64,
    kept: &SearchesKept,
) -> StoreResult<(Vec<(User, Standing)>, i64)> {
    let searched_alone = f.role.is_none() && f.status.is_none() && f.verification.is_none();
    // Read before the total and the page, so what is kept under it holds every write it
    // covers.
    let stamp = match f.search_text() {
        Some(search) if searched_alone => {
            let writes = tallies::written(ex.re(), Tally::AccountSearchWrites).await?;
            Some((search.to_owned(), writes))
        }
        _ => None,
    };
    let page_key = |search: &str| (search.to_owned(), page, size);
    let total = stamp
        .as_ref()
        .and_then(|(search, writes)| kept.totals.get(search, writes));
    let kept_page = stamp
        .as_ref()
        .zip(total)
        .and_then(|((search, writes), _)| kept.pages.get(&page_key(search), writes));
    let (ids, total) = match (kept_page, total) {
        (Some(ids), Some(total)) => (ids, total),
        _ => {
            let seek = Seek::Page(page);
            let query = users_for_page(ex.re(), f, seek.window(size), total).await?;
            let (window, counted) = query.run::<Listed>(ex.re(), seek, size).await?;
            let ids: Vec<i64> = window.items.iter().map(|l| l.id).collect();
            if let Some((search, writes)) = stamp {
                let bytes = search.len() + size_of::<i64>() * (ids.len() + 3);
                kept.pages
                    .put(page_key(&search), writes, ids.clone(), bytes);
                if total.is_none() {
                    let bytes = search.len() + size_of::<i64>();
                    kept.totals.put(search, writes, counted, bytes);
                }
            }
            (ids, counted)
        }
    };
    let found = users::find_all(ex.re(), &ids).await?;
    let mut standings = standings(ex, &ids).await?;
    let items = found
        .into_iter()
        .map(|user| {
            let standing = standings.remove(&user.id).unwrap_or_default();
            (user, standing)
        })
        .collect();
    Ok((items, total))
}

/// [`standing`] of each of `ids`, in one statement.
async fn standings(
    ex: Exec<'_>,
    ids: &[i64],
) -> StoreResult<std::collections::HashMap<i64, Standing>> {
    if ids.is_empty() {
        return Ok(std::collections::HashMap::new());
    }
    #[derive(sqlx::FromRow)]
    struct Row {
        id: i64,
        #[sqlx(flatten)]
        standing: Standing,
    }
    let mut sql = Sql::default();
    let list = sql.arg_list(ids);
    let rows: Vec<Row> = sql
        .with_text(&format!(
            "SELECT id, suspension_reason, suspended_by, deletion_reason, deletion_requested_at,
                    deletion_requested_by, deletion_confirmed_at, deletion_confirmed_by,
                    accept_marketing, source
             FROM users WHERE id IN ({list})"
        ))
        .fetch_all(ex)
        .await?;
    Ok(rows.into_iter().map(|r| (r.id, r.standing)).collect())
}

/// Base fields an administrator may change; `None` keeps the stored value.
#[derive(Debug, Default, Clone)]
pub struct BaseUpdate<'a> {
    pub email: Option<&'a str>,
    pub username: Option<&'a str>,
    pub email_verified: Option<bool>,
}

/// A duplicate e-mail or username fails with a unique violation.
pub async fn update_base(
    ex: Exec<'_>,
    id: i64,
    u: &BaseUpdate<'_>,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let rows = on_exec!(ex, c => sqlx::query(
        "UPDATE users SET email = COALESCE($2, email), username = COALESCE($3, username),
                email_verified = COALESCE($4, email_verified),
                email_verified_at = CASE WHEN $4 = TRUE AND email_verified = FALSE THEN $5
                                         WHEN $4 = FALSE THEN NULL ELSE email_verified_at END,
                updated_at = $5
         WHERE id = $1 AND deleted_at IS NULL",
    )
    .bind(id)
    .bind(u.email)
    .bind(u.username)
    .bind(u.email_verified)
    .bind(now)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(rows == 1)
}

/// Suspends the account (inactive until `until`, or until lifted).
pub async fn suspend(
    ex: Exec<'_>,
    id: i64,
    reason: &str,
    until: Option<DateTime<Utc>>,
    by: i64,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let rows = on_exec!(ex, c => sqlx::query(
        "UPDATE users SET is_active = FALSE, suspended_at = $2, suspended_until = $3,
                suspension_reason = $4, suspended_by = $5, updated_at = $2
         WHERE id = $1 AND deleted_at IS NULL",
    )
    .bind(id)
    .bind(now)
    .bind(until)
    .bind(reason)
    .bind(by)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(rows == 1)
}

/// Sets the account active or inactive; either ends a suspension.
pub async fn set_status(
    ex: Exec<'_>,
    id: i64,
    active: bool,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let rows = on_exec!(ex, c => sqlx::query(
        "UPDATE users SET is_active = $2, suspended_at = NULL, suspended_until = NULL,
                suspension_reason = NULL, suspended_by = NULL, updated_at = $3
         WHERE id = $1 AND deleted_at IS NULL AND deletion_confirmed_at IS NULL",
    )
    .bind(id)
    .bind(active)
    .bind(now)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(rows == 1)
}

/// Ends a suspension whose end has passed; false when there was none to end.
pub async fn lift_lapsed_suspension(
    ex: Exec<'_>,
    id: i64,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let rows = on_exec!(ex, c => sqlx::query(
        "UPDATE users SET is_active = TRUE, suspended_at = NULL, suspended_until = NULL,
                suspension_reason = NULL, suspended_by = NULL, updated_at = $2
         WHERE id = $1 AND suspended_at IS NOT NULL AND suspended_until IS NOT NULL
           AND suspended_until <= $2 AND deleted_at IS NULL AND deletion_confirmed_at IS NULL",
    )
    .bind(id)
    .bind(now)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(rows == 1)
}

/// First step of a removal; false when one was already requested.
pub async fn request_deletion(
    ex: Exec<'_>,
    id: i64,
    reason: &str,
    by: i64,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let rows = on_exec!(ex, c => sqlx::query(
        "UPDATE users SET deletion_requested_at = $2, deletion_requested_by = $3,
                deletion_reason = $4, updated_at = $2
         WHERE id = $1 AND deletion_requested_at IS NULL AND deleted_at IS NULL",
    )
    .bind(id)
    .bind(now)
    .bind(by)
    .bind(reason)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(rows == 1)
}

/// Second step: the account is deactivated; false unless requested and not yet confirmed.
pub async fn confirm_deletion(
    ex: Exec<'_>,
    id: i64,
    by: i64,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let rows = on_exec!(ex, c => sqlx::query(
        "UPDATE users SET deletion_confirmed_at = $2, deletion_confirmed_by = $3,
                is_active = FALSE, updated_at = $2
         WHERE id = $1 AND deletion_requested_at IS NOT NULL AND deletion_confirmed_at IS NULL
           AND deleted_at IS NULL",
    )
    .bind(id)
    .bind(now)
    .bind(by)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(rows == 1)
}

/// What keeps an account from being erased: money in escrow or in dispute, an active
/// dispute, a project under way.
#[derive(Debug, Clone, Copy, Default, sqlx::FromRow)]
pub struct Blockers {
    pub money_in_escrow: i64,
    pub active_disputes: i64,
    pub projects_in_progress: i64,
}

impl Blockers {
    pub fn any(&self) -> bool {
        self.money_in_escrow + self.active_disputes + self.projects_in_progress > 0
    }
}

pub async fn blockers(ex: Exec<'_>, id: i64) -> StoreResult<Blockers> {
    Ok(on_exec!(ex, c => sqlx::query_as::<_, Blockers>(
        "SELECT
            (SELECT COUNT(*) FROM payments WHERE (company_id = $1 OR expert_id = $1)
                AND status IN ('held', 'disputed')) AS money_in_escrow,
            (SELECT COUNT(*) FROM disputes d JOIN projects p ON p.id = d.project_id
                WHERE (p.company_id = $1 OR p.expert_id = $1 OR d.raised_by = $1)
                AND d.status IN ('open', 'in_review')) AS active_disputes,
            (SELECT COUNT(*) FROM projects WHERE (company_id = $1 OR expert_id = $1)
                AND status IN ('assigned', 'in_progress', 'in_review', 'disputed')) AS projects_in_progress",
    )
    .bind(id)
    .fetch_one(c)
    .await)?)
}

/// Chat attachments the user sent (paths under the uploads directory).
pub async fn chat_files_of(ex: Exec<'_>, id: i64) -> StoreResult<Vec<String>> {
    Ok(on_exec!(ex, c => sqlx::query_scalar(
        "SELECT file_path FROM chat_messages WHERE sender_id = $1 AND file_path IS NOT NULL",
    )
    .bind(id)
    .fetch_all(c)
    .await)?)
}

/// Erases the personal data of an account, in the caller's transaction. The row stays,
/// anonymised, so payments, commissions, disputes, reviews and DAC7 figures keep pointing
/// at it; the fiscal identity stays as well, because tax law requires it for the years
/// already reported (DAC7). False when the account was already erased.
pub async fn anonymise(mut ex: Exec<'_>, id: i64, now: DateTime<Utc>) -> StoreResult<bool> {
    let rows = on_exec!(ex.re(), c => sqlx::query(
        "UPDATE users SET email = 'deleted-' || CAST(id AS TEXT) || '@deleted.invalid',
                username = 'deleted_' || CAST(id AS TEXT), password_hash = '!',
                crm_id = NULL, accept_marketing = FALSE, source = NULL, is_active = FALSE,
                email_verified = FALSE, email_verified_at = NULL, suspension_reason = NULL,
                deletion_reason = NULL, deleted_at = $2, updated_at = $2
         WHERE id = $1 AND deleted_at IS NULL",
    )
    .bind(id)
    .bind(now)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    if rows != 1 {
        return Ok(false);
    }
    on_exec!(ex.re(), c => sqlx::query(
        "UPDATE profiles SET full_name = NULL, bio = NULL, phone = NULL, location = NULL,
                profile_picture = NULL, slug = NULL, portfolio_url = NULL, linkedin_url = NULL,
                company_name = NULL, company_website = NULL, contact_person = NULL,
                company_email = NULL, verification_notes = NULL, availability = NULL,
                updated_at = $2
         WHERE user_id = $1",
    )
    .bind(id)
    .bind(now)
    .execute(c)
    .await
    .map(|_| ()))?;
    for sql in [
        "DELETE FROM profile_documents WHERE user_id = $1",
        "DELETE FROM admin_team_profiles WHERE user_id = $1",
        "UPDATE chat_messages SET file_path = NULL, file_name = NULL, file_mime = NULL,
                file_size = NULL WHERE sender_id = $1 AND file_path IS NOT NULL",
        "DELETE FROM auth_sessions WHERE user_id = $1",
        "DELETE FROM one_time_tokens WHERE user_id = $1",
        "DELETE FROM notifications WHERE user_id = $1",
        "DELETE FROM webhook_configs WHERE user_id = $1",
    ] {
        on_exec!(ex.re(), c => sqlx::query(sql).bind(id).execute(c).await.map(|_| ()))?;
    }
    Ok(true)
}

/// Active administrators other than `except`.
pub async fn other_active_admins(ex: Exec<'_>, except: i64) -> StoreResult<i64> {
    Ok(on_exec!(ex, c => sqlx::query_scalar(
        "SELECT COUNT(*) FROM users u JOIN user_roles r ON r.user_id = u.id
         WHERE r.role = 'admin' AND u.is_active = TRUE AND u.deleted_at IS NULL AND u.id <> $1",
    )
    .bind(except)
    .fetch_one(c)
    .await)?)
}

/// Replaces the user's roles with `roles` and sets the active role.
pub async fn set_roles(
    mut ex: Exec<'_>,
    id: i64,
    roles: &[Role],
    active: Role,
    now: DateTime<Utc>,
) -> StoreResult<()> {
    for role in Role::ALL {
        if !roles.contains(&role) {
            on_exec!(ex.re(), c => sqlx::query("DELETE FROM user_roles WHERE user_id = $1 AND role = $2")
                .bind(id)
                .bind(role.as_str())
                .execute(c)
                .await
                .map(|_| ()))?;
        }
    }
    for role in roles {
        users::add_role(ex.re(), id, *role, now).await?;
    }
    users::set_active_role(ex, id, active, now).await?;
    Ok(())
}

/// One administrator action, for the record.
pub async fn record_action(
    ex: Exec<'_>,
    admin_id: i64,
    user_id: Option<i64>,
    project_id: Option<i64>,
    action: &str,
    details: &str,
    now: DateTime<Utc>,
) -> StoreResult<()> {
    on_exec!(ex, c => sqlx::query(
        "INSERT INTO admin_actions (admin_id, user_id, project_id, action, details, created_at)
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(admin_id)
    .bind(user_id)
    .bind(project_id)
    .bind(action)
    .bind(details)
    .bind(now)
    .execute(c)
    .await
    .map(|_| ()))?;
    Ok(())
}

/// Marks a company recontacted by `by`; false when the user has no company profile.
pub async fn mark_recontacted(
    ex: Exec<'_>,
    id: i64,
    by: i64,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let rows = on_exec!(ex, c => sqlx::query(
        "UPDATE profiles SET recontacted_at = $2, recontacted_by = $3, updated_at = $2
         WHERE user_id = $1 AND profile_type = 'empresa'",
    )
    .bind(id)
    .bind(now)
    .bind(by)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(rows == 1)
}
