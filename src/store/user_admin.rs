//! Accounts as administrators see and change them: the filtered list, suspension, status,
//! the steps of a removal, role sets, and the record of each administrator action.

use chrono::{DateTime, Utc};

use super::users::{self, User};
use super::{Exec, StoreResult};
use crate::domain::user::Role;
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
    /// Free text in e-mail, username and profile names; `%` and `_` are literal.
    pub search: Option<String>,
}

macro_rules! user_where {
    () => {
        "WHERE ($1 IS NULL OR EXISTS (SELECT 1 FROM user_roles r WHERE r.user_id = u.id AND r.role = $1))
           AND ($2 IS NULL
                OR ($2 = 'active' AND u.is_active = TRUE AND u.deleted_at IS NULL)
                OR ($2 = 'inactive' AND u.is_active = FALSE AND u.suspended_at IS NULL AND u.deleted_at IS NULL)
                OR ($2 = 'suspended' AND u.suspended_at IS NOT NULL AND u.deleted_at IS NULL)
                OR ($2 = 'deleted' AND u.deleted_at IS NOT NULL))
           AND ($3 IS NULL OR EXISTS (SELECT 1 FROM profiles p WHERE p.user_id = u.id AND p.verification_status = $3))
           AND ($4 IS NULL OR LOWER(u.email) LIKE $4 ESCAPE '\\' OR LOWER(u.username) LIKE $4 ESCAPE '\\'
                OR EXISTS (SELECT 1 FROM profiles p2 WHERE p2.user_id = u.id
                           AND (LOWER(COALESCE(p2.full_name, '')) LIKE $4 ESCAPE '\\'
                                OR LOWER(COALESCE(p2.company_name, '')) LIKE $4 ESCAPE '\\'))) "
    };
}

/// One page of users, newest first, and the total. Roles come in one more query for the page.
pub async fn list(
    mut ex: Exec<'_>,
    f: &UserFilter,
    limit: i64,
    offset: i64,
) -> StoreResult<(Vec<User>, i64)> {
    let search = f
        .search
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| format!("%{}%", super::escape_like(&s.to_lowercase())));
    let ids: Vec<i64> = on_exec!(ex.re(), c => sqlx::query_scalar(concat!(
        "SELECT u.id FROM users u ",
        user_where!(),
        "ORDER BY u.created_at DESC, u.id DESC LIMIT $5 OFFSET $6"
    ))
    .bind(&f.role)
    .bind(&f.status)
    .bind(&f.verification)
    .bind(&search)
    .bind(limit)
    .bind(offset)
    .fetch_all(c)
    .await)?;
    let total: i64 = on_exec!(ex.re(), c => sqlx::query_scalar(concat!(
        "SELECT COUNT(*) FROM users u ",
        user_where!()
    ))
    .bind(&f.role)
    .bind(&f.status)
    .bind(&f.verification)
    .bind(&search)
    .fetch_one(c)
    .await)?;
    let mut items = Vec::with_capacity(ids.len());
    for id in ids {
        if let Some(user) = users::find(ex.re(), id).await? {
            items.push(user);
        }
    }
    Ok((items, total))
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
    for role in [Role::Empresa, Role::Experto, Role::Admin] {
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
