//! Users and their roles.

use chrono::{DateTime, Utc};

use super::{Exec, StoreResult};
use crate::domain::user::Role;
use crate::on_exec;

/// A user as stored, with its roles.
#[derive(Debug, Clone)]
pub struct User {
    pub id: i64,
    pub email: String,
    pub username: String,
    pub password_hash: String,
    pub active_role: Role,
    pub roles: Vec<Role>,
    pub is_active: bool,
    pub email_verified: bool,
    pub crm_id: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub last_login_at: Option<DateTime<Utc>>,
    pub suspended_at: Option<DateTime<Utc>>,
    /// End of a suspension (none: until an administrator lifts it).
    pub suspended_until: Option<DateTime<Utc>>,
    pub deleted_at: Option<DateTime<Utc>>,
}

/// Why an account may not sign in or use a session, as the API names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    Suspended,
    Inactive,
}

impl User {
    /// Whether the account is refused at `now`. A suspension whose end has passed no longer
    /// refuses (login lifts it, see `workflows::user_admin::lift_lapsed_suspension`).
    pub fn refusal(&self, now: DateTime<Utc>) -> Option<Refusal> {
        if self.is_active {
            return None;
        }
        match (self.suspended_at, self.suspended_until) {
            (Some(_), Some(until)) if until <= now => None,
            (Some(_), _) => Some(Refusal::Suspended),
            (None, _) => Some(Refusal::Inactive),
        }
    }
}

#[derive(sqlx::FromRow)]
struct UserRow {
    id: i64,
    email: String,
    username: String,
    password_hash: String,
    active_role: String,
    is_active: bool,
    email_verified: bool,
    crm_id: Option<String>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    last_login_at: Option<DateTime<Utc>>,
    suspended_at: Option<DateTime<Utc>>,
    suspended_until: Option<DateTime<Utc>>,
    deleted_at: Option<DateTime<Utc>>,
}

/// `SELECT <user columns> FROM users <filter>` as one static string.
macro_rules! select_users {
    ($filter:literal) => {
        concat!(
            "SELECT id, email, username, password_hash, active_role, is_active, email_verified, ",
            "crm_id, created_at, updated_at, last_login_at, suspended_at, suspended_until, ",
            "deleted_at FROM users ",
            $filter
        )
    };
}

/// What registration (or an administrator) creates.
#[derive(Debug, Clone)]
pub struct NewUser<'a> {
    pub email: &'a str,
    pub username: &'a str,
    pub password_hash: &'a str,
    pub roles: &'a [Role],
    pub email_verified: bool,
    pub accept_marketing: bool,
    pub source: Option<&'a str>,
}

/// Inserts a user and its roles; the first role becomes the active one. A duplicate e-mail or
/// username fails with a unique violation.
pub async fn insert(mut ex: Exec<'_>, user: &NewUser<'_>, now: DateTime<Utc>) -> StoreResult<i64> {
    let active = user.roles.first().copied().unwrap_or(Role::Empresa);
    let id: i64 = on_exec!(ex.re(), c => sqlx::query_scalar(
        "INSERT INTO users (email, username, password_hash, active_role, is_active, email_verified,
                            accept_marketing, source, created_at, updated_at)
         VALUES ($1, $2, $3, $4, TRUE, $5, $6, $7, $8, $8) RETURNING id",
    )
    .bind(user.email)
    .bind(user.username)
    .bind(user.password_hash)
    .bind(active.as_str())
    .bind(user.email_verified)
    .bind(user.accept_marketing)
    .bind(user.source)
    .bind(now)
    .fetch_one(c)
    .await)?;
    for role in user.roles {
        add_role(ex.re(), id, *role, now).await?;
    }
    Ok(id)
}

pub async fn add_role(
    ex: Exec<'_>,
    user_id: i64,
    role: Role,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let done = on_exec!(ex, c => sqlx::query(
        "INSERT INTO user_roles (user_id, role, created_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
    )
    .bind(user_id)
    .bind(role.as_str())
    .bind(now)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}

pub async fn find(mut ex: Exec<'_>, id: i64) -> StoreResult<Option<User>> {
    let row = on_exec!(ex.re(), c => sqlx::query_as::<_, UserRow>(
        select_users!("WHERE id = $1"),
    )
    .bind(id)
    .fetch_optional(c)
    .await)?;
    with_roles(ex, row).await
}

/// A session and its user with roles, in one round trip: what every authenticated request
/// reads. The user is read by the key the session holds, not joined to it: where the
/// sessions' statistics are older than the session (a young table, a new user), PostgreSQL
/// merge-joined the two, walking the users' key from the first id up to the session's user
/// (13 ms for user 62,553 of 100,000).
pub async fn find_by_session(
    ex: Exec<'_>,
    session_id: i64,
) -> StoreResult<Option<(super::sessions::Session, User)>> {
    #[derive(sqlx::FromRow)]
    struct Row {
        s_id: i64,
        s_user_id: i64,
        s_client_session_id: Option<String>,
        s_created_at: DateTime<Utc>,
        s_last_used_at: DateTime<Utc>,
        s_expires_at: DateTime<Utc>,
        s_revoked_at: Option<DateTime<Utc>>,
        s_revoked_reason: Option<String>,
        #[sqlx(flatten)]
        user: UserRow,
        role_empresa: bool,
        role_experto: bool,
        role_admin: bool,
    }
    let row = on_exec!(ex, c => sqlx::query_as::<_, Row>(
        "SELECT s.id AS s_id, s.user_id AS s_user_id, s.client_session_id AS s_client_session_id,
                s.created_at AS s_created_at, s.last_used_at AS s_last_used_at,
                s.expires_at AS s_expires_at, s.revoked_at AS s_revoked_at,
                s.revoked_reason AS s_revoked_reason,
                u.id, u.email, u.username, u.password_hash, u.active_role, u.is_active,
                u.email_verified, u.crm_id, u.created_at, u.updated_at, u.last_login_at,
                u.suspended_at, u.suspended_until, u.deleted_at,
                EXISTS (SELECT 1 FROM user_roles r WHERE r.user_id = u.id AND r.role = 'empresa') AS role_empresa,
                EXISTS (SELECT 1 FROM user_roles r WHERE r.user_id = u.id AND r.role = 'experto') AS role_experto,
                EXISTS (SELECT 1 FROM user_roles r WHERE r.user_id = u.id AND r.role = 'admin') AS role_admin
         FROM auth_sessions s JOIN users u ON u.id = s.user_id
         WHERE s.id = $1 AND u.id = (SELECT user_id FROM auth_sessions WHERE id = $1)",
    )
    .bind(session_id)
    .fetch_optional(c)
    .await)?;
    Ok(row.map(|r| {
        let session = super::sessions::Session {
            id: r.s_id,
            user_id: r.s_user_id,
            client_session_id: r.s_client_session_id,
            created_at: r.s_created_at,
            last_used_at: r.s_last_used_at,
            expires_at: r.s_expires_at,
            revoked_at: r.s_revoked_at,
            revoked_reason: r.s_revoked_reason,
        };
        let roles = [
            (r.role_empresa, Role::Empresa),
            (r.role_experto, Role::Experto),
            (r.role_admin, Role::Admin),
        ]
        .into_iter()
        .filter_map(|(has, role)| has.then_some(role))
        .collect();
        (session, user_of(r.user, roles))
    }))
}

/// Finds by e-mail (case-insensitive) or by username: login accepts either.
pub async fn find_by_login(mut ex: Exec<'_>, login: &str) -> StoreResult<Option<User>> {
    let row = on_exec!(ex.re(), c => sqlx::query_as::<_, UserRow>(
        select_users!("WHERE email = $1 OR LOWER(username) = LOWER($2)"),
    )
    .bind(login.trim().to_lowercase())
    .bind(login.trim())
    .fetch_optional(c)
    .await)?;
    with_roles(ex, row).await
}

pub async fn find_by_email(mut ex: Exec<'_>, email: &str) -> StoreResult<Option<User>> {
    let row = on_exec!(ex.re(), c => sqlx::query_as::<_, UserRow>(select_users!("WHERE email = $1"))
        .bind(email)
        .fetch_optional(c)
        .await)?;
    with_roles(ex, row).await
}

/// Whether an e-mail or a username is taken.
pub async fn exists(ex: Exec<'_>, email: &str, username: &str) -> StoreResult<bool> {
    let found: Option<i64> = on_exec!(ex, c => sqlx::query_scalar(
        "SELECT id FROM users WHERE email = $1 OR LOWER(username) = LOWER($2) LIMIT 1",
    )
    .bind(email)
    .bind(username)
    .fetch_optional(c)
    .await)?;
    Ok(found.is_some())
}

/// The id of the account holding `username`, if any.
pub async fn username_owner(ex: Exec<'_>, username: &str) -> StoreResult<Option<i64>> {
    Ok(
        on_exec!(ex, c => sqlx::query_scalar("SELECT id FROM users WHERE LOWER(username) = LOWER($1)")
        .bind(username)
        .fetch_optional(c)
        .await)?,
    )
}

pub async fn roles_of(ex: Exec<'_>, user_id: i64) -> StoreResult<Vec<Role>> {
    let names: Vec<String> = on_exec!(ex, c => sqlx::query_scalar(
        "SELECT role FROM user_roles WHERE user_id = $1",
    )
    .bind(user_id)
    .fetch_all(c)
    .await)?;
    let mut roles: Vec<Role> = names.iter().filter_map(|r| Role::parse(r)).collect();
    roles.sort();
    Ok(roles)
}

/// The users of `ids`, in that order (an unknown id is left out), in two statements.
pub async fn find_all(mut ex: Exec<'_>, ids: &[i64]) -> StoreResult<Vec<User>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut sql = super::listing::Sql::default();
    let list = sql.arg_list(ids);
    let rows: Vec<UserRow> = sql
        .clone()
        .with_text(&format!("{} WHERE id IN ({list})", select_users!("")))
        .fetch_all(ex.re())
        .await?;
    let roles: Vec<(i64, String)> = sql
        .with_text(&format!(
            "SELECT user_id, role FROM user_roles WHERE user_id IN ({list})"
        ))
        .fetch_all(ex)
        .await?;
    let mut rows: std::collections::HashMap<i64, UserRow> =
        rows.into_iter().map(|r| (r.id, r)).collect();
    Ok(ids
        .iter()
        .filter_map(|id| rows.remove(id))
        .map(|row| {
            let mut mine: Vec<Role> = roles
                .iter()
                .filter(|(user, _)| *user == row.id)
                .filter_map(|(_, role)| Role::parse(role))
                .collect();
            mine.sort();
            user_of(row, mine)
        })
        .collect())
}

async fn with_roles(ex: Exec<'_>, row: Option<UserRow>) -> StoreResult<Option<User>> {
    let Some(row) = row else { return Ok(None) };
    let roles = roles_of(ex, row.id).await?;
    Ok(Some(user_of(row, roles)))
}

fn user_of(row: UserRow, roles: Vec<Role>) -> User {
    User {
        id: row.id,
        active_role: Role::parse(&row.active_role).unwrap_or(Role::Empresa),
        email: row.email,
        username: row.username,
        password_hash: row.password_hash,
        roles,
        is_active: row.is_active,
        email_verified: row.email_verified,
        crm_id: row.crm_id,
        created_at: row.created_at,
        updated_at: row.updated_at,
        last_login_at: row.last_login_at,
        suspended_at: row.suspended_at,
        suspended_until: row.suspended_until,
        deleted_at: row.deleted_at,
    }
}

/// Runs an `UPDATE users SET … WHERE id = $1` whose other parameters were bound by `bind`.
macro_rules! update_user {
    ($ex:expr, $sql:literal, $id:expr $(, $arg:expr)*) => {{
        let rows = on_exec!($ex, c => sqlx::query($sql)
            .bind($id)
            $(.bind($arg))*
            .execute(c)
            .await
            .map(|r| r.rows_affected()))?;
        Ok(rows == 1)
    }};
}

pub async fn set_password(
    ex: Exec<'_>,
    id: i64,
    hash: &str,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    update_user!(
        ex,
        "UPDATE users SET password_hash = $2, updated_at = $3 WHERE id = $1",
        id,
        hash,
        now
    )
}

/// A new address starts unverified.
pub async fn set_email(
    ex: Exec<'_>,
    id: i64,
    email: &str,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    update_user!(
        ex,
        "UPDATE users SET email = $2, email_verified = FALSE, email_verified_at = NULL, updated_at = $3 WHERE id = $1",
        id,
        email,
        now
    )
}

/// Gives the account back an address it held (an e-mail change undone from that address's
/// mailbox, which proves it is the owner's): verified at once. A unique violation when
/// another account holds it now.
pub async fn restore_email(
    ex: Exec<'_>,
    id: i64,
    email: &str,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    update_user!(
        ex,
        "UPDATE users SET email = $2, email_verified = TRUE, email_verified_at = $3, updated_at = $3 WHERE id = $1",
        id,
        email,
        now
    )
}

/// Claims the account's lock-out notice: true (and `now` recorded) when none was sent after
/// `not_since`. A conditional update, so of concurrent claims on several instances one wins.
pub async fn claim_lockout_notice(
    ex: Exec<'_>,
    id: i64,
    now: DateTime<Utc>,
    not_since: DateTime<Utc>,
) -> StoreResult<bool> {
    update_user!(
        ex,
        "UPDATE users SET lockout_notified_at = $2
         WHERE id = $1 AND (lockout_notified_at IS NULL OR lockout_notified_at <= $3)",
        id,
        now,
        not_since
    )
}

/// Marks the address verified, only if it is still the one the token was sent to.
pub async fn verify_email(
    ex: Exec<'_>,
    id: i64,
    email: &str,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    update_user!(
        ex,
        "UPDATE users SET email_verified = TRUE, email_verified_at = $3, updated_at = $3 WHERE id = $1 AND email = $2",
        id,
        email,
        now
    )
}

pub async fn set_active_role(
    ex: Exec<'_>,
    id: i64,
    role: Role,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    update_user!(
        ex,
        "UPDATE users SET active_role = $2, updated_at = $3 WHERE id = $1",
        id,
        role.as_str(),
        now
    )
}

pub async fn set_username(
    ex: Exec<'_>,
    id: i64,
    username: &str,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    update_user!(
        ex,
        "UPDATE users SET username = $2, updated_at = $3 WHERE id = $1",
        id,
        username,
        now
    )
}

pub async fn set_active(
    ex: Exec<'_>,
    id: i64,
    active: bool,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    update_user!(
        ex,
        "UPDATE users SET is_active = $2, updated_at = $3 WHERE id = $1",
        id,
        active,
        now
    )
}

pub async fn touch_login(ex: Exec<'_>, id: i64, now: DateTime<Utc>) -> StoreResult<bool> {
    update_user!(
        ex,
        "UPDATE users SET last_login_at = $2 WHERE id = $1",
        id,
        now
    )
}

/// How to address a user in a notification or an e-mail.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Contact {
    pub id: i64,
    pub email: String,
    /// The name on the user's profile of `profile_type` (company name for a company), else
    /// the username.
    pub name: String,
}

/// The active administrators' addresses (username as the name).
pub async fn administrator_contacts(ex: Exec<'_>) -> StoreResult<Vec<Contact>> {
    Ok(on_exec!(ex, c => sqlx::query_as::<_, Contact>(
        "SELECT u.id, u.email, u.username AS name FROM users u
         JOIN user_roles r ON r.user_id = u.id
         WHERE r.role = 'admin' AND u.is_active = TRUE ORDER BY u.id",
    )
    .fetch_all(c)
    .await)?)
}

pub async fn contact(ex: Exec<'_>, id: i64, role: Role) -> StoreResult<Option<Contact>> {
    Ok(on_exec!(ex, c => sqlx::query_as::<_, Contact>(
        "SELECT u.id, u.email, COALESCE(
             (SELECT COALESCE(NULLIF(p.company_name, ''), NULLIF(p.full_name, ''))
              FROM profiles p WHERE p.user_id = u.id AND p.profile_type = $2),
             u.username) AS name
         FROM users u WHERE u.id = $1",
    )
    .bind(id)
    .bind(role.as_str())
    .fetch_optional(c)
    .await)?)
}
