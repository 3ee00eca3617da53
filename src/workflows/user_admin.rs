//! Administrators acting on accounts: base fields, status and suspension, passwords,
//! recontacts, roles, and removal in three steps (request, confirm, erase).
//!
//! Every change that ends someone's access revokes their sessions in the same transaction,
//! so no request succeeds after it (authentication reads the session on every request).
//! Changes that could leave the platform without an active administrator serialise on one
//! lock and re-count inside it.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::json;

use crate::domain::access_token::revoke_reason;
use crate::domain::text::AccountReason;
use crate::domain::user::AccountStatus;
use crate::domain::user::{EmailAddress, Role, Username, check_password_policy};
use crate::integrations::mail::Template;
use crate::state::AppState;
use crate::store::events::{self, NewEvent};
use crate::store::user_admin::{self, BaseUpdate};
use crate::store::users::{self, User};
use crate::store::{LockScope, Tx, sessions};
use crate::workflows::auth::sessions_ended;
use crate::workflows::emails::email;
use crate::workflows::error::{FieldError, FlowError, FlowResult};
use crate::workflows::{notify, passwords};

/// The account `id`, or 404 (erased accounts included: they are kept for the records).
async fn target(tx: &mut Tx, id: i64) -> FlowResult<User> {
    users::find(tx.exec(), id)
        .await?
        .ok_or_else(|| FlowError::not_found("User not found"))
}

fn refuse_erased(user: &User) -> FlowResult<()> {
    if user.deleted_at.is_some() {
        return Err(FlowError::conflict(
            "USER_DELETED",
            "This account has been deleted",
        ));
    }
    Ok(())
}

fn refuse_self(admin_id: i64, user_id: i64, what: &str) -> FlowResult<()> {
    if admin_id == user_id {
        return Err(FlowError::conflict(
            "CANNOT_TARGET_SELF",
            format!("Administrators cannot {what} their own account"),
        ));
    }
    Ok(())
}

/// Refuses to take away the last active administrator. Runs under the administrators' lock.
async fn keep_an_administrator(tx: &mut Tx, user: &User) -> FlowResult<()> {
    if !user.roles.contains(&Role::Admin) || !user.is_active {
        return Ok(());
    }
    if user_admin::other_active_admins(tx.exec(), user.id).await? == 0 {
        return Err(FlowError::conflict(
            "LAST_ADMINISTRATOR",
            "The platform must keep at least one active administrator",
        ));
    }
    Ok(())
}

async fn record_event(
    tx: &mut Tx,
    kind: &str,
    user_id: i64,
    payload: serde_json::Value,
    now: DateTime<Utc>,
) -> FlowResult<()> {
    events::record(tx.exec(), NewEvent::of_user(kind, user_id, payload), now).await?;
    Ok(())
}

/// Login of an account whose suspension has run out: the suspension ends, the account is
/// active again.
pub async fn lift_lapsed_suspension(state: &AppState, user: User) -> FlowResult<User> {
    let mut conn = state.db.conn().await?;
    user_admin::lift_lapsed_suspension(conn.exec(), user.id, state.clock.now()).await?;
    Ok(users::find(conn.exec(), user.id).await?.unwrap_or(user))
}

/// Base fields an administrator may change.
#[derive(Debug, Default)]
pub struct BaseChange {
    pub email: Option<String>,
    pub username: Option<String>,
    pub email_verified: Option<bool>,
}

pub async fn update_base(
    state: &AppState,
    admin_id: i64,
    id: i64,
    change: BaseChange,
) -> FlowResult<User> {
    let mut errors = Vec::new();
    let email = match change.email.as_deref().map(EmailAddress::parse) {
        Some(Err(e)) => {
            errors.push(FieldError::new("email", e));
            None
        }
        Some(Ok(e)) => Some(e.into_inner()),
        None => None,
    };
    let username = match change.username.as_deref().map(Username::parse) {
        Some(Err(e)) => {
            errors.push(FieldError::new("username", e));
            None
        }
        Some(Ok(u)) => Some(u.as_str().to_owned()),
        None => None,
    };
    if !errors.is_empty() {
        return Err(FlowError::Invalid(errors));
    }
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    let user = target(&mut tx, id).await?;
    refuse_erased(&user)?;
    let update = BaseUpdate {
        email: email.as_deref(),
        username: username.as_deref(),
        email_verified: change.email_verified,
    };
    user_admin::update_base(tx.exec(), id, &update, now)
        .await
        .map_err(|e| {
            e.duplicate_as(|| {
                FlowError::conflict("ALREADY_EXISTS", "E-mail or username already in use")
            })
        })?;
    if email.as_deref().is_some_and(|new| new != user.email) {
        // Links mailed to the old address must not act on the account any more.
        crate::store::tokens::retire_credential_links(tx.exec(), id, now).await?;
    }
    let details = json!({"email": email.is_some(), "username": username, "email_verified": change.email_verified});
    user_admin::record_action(
        tx.exec(),
        admin_id,
        Some(id),
        None,
        "update",
        &details.to_string(),
        now,
    )
    .await?;
    if email.is_some() || username.is_some() {
        record_event(&mut tx, "user.updated", id, json!({"user_id": id}), now).await?;
    }
    let user = target(&mut tx, id).await?;
    state.commit(tx).await?;
    Ok(user)
}

/// `active` or `inactive`. Deactivating ends every session of the account.
pub async fn set_status(
    state: &AppState,
    admin_id: i64,
    id: i64,
    active: bool,
) -> FlowResult<User> {
    if !active {
        refuse_self(admin_id, id, "deactivate")?;
    }
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    tx.lock(LockScope::Administrators, 0).await?;
    let user = target(&mut tx, id).await?;
    refuse_erased(&user)?;
    if !active {
        keep_an_administrator(&mut tx, &user).await?;
    }
    if !user_admin::set_status(tx.exec(), id, active, now).await? {
        return Err(FlowError::conflict(
            "DELETION_CONFIRMED",
            "The account's removal was confirmed; it stays inactive",
        ));
    }
    if !active {
        sessions::revoke_all_of_user(tx.exec(), id, None, revoke_reason::DEACTIVATED, now).await?;
    }
    let status = if active {
        AccountStatus::Active
    } else {
        AccountStatus::Inactive
    };
    let status = status.as_str();
    user_admin::record_action(tx.exec(), admin_id, Some(id), None, "status", status, now).await?;
    let user = target(&mut tx, id).await?;
    tx.commit().await?;
    sessions_ended(state, id).await?;
    Ok(user)
}

/// Suspends the account until `until` (or until lifted), ending its sessions at once.
pub async fn suspend(
    state: &AppState,
    admin_id: i64,
    id: i64,
    reason: AccountReason,
    until: Option<DateTime<Utc>>,
) -> FlowResult<User> {
    let now = state.clock.now();
    if until.is_some_and(|u| u <= now) {
        return Err(FlowError::invalid("until", "must be in the future"));
    }
    refuse_self(admin_id, id, "suspend")?;
    let mut tx = state.db.begin().await?;
    tx.lock(LockScope::Administrators, 0).await?;
    let user = target(&mut tx, id).await?;
    refuse_erased(&user)?;
    keep_an_administrator(&mut tx, &user).await?;
    user_admin::suspend(tx.exec(), id, &reason, until, admin_id, now).await?;
    sessions::revoke_all_of_user(tx.exec(), id, None, revoke_reason::SUSPENDED, now).await?;
    let details = json!({"reason": reason.as_str(), "until": until}).to_string();
    user_admin::record_action(
        tx.exec(),
        admin_id,
        Some(id),
        None,
        "suspend",
        &details,
        now,
    )
    .await?;
    let user = target(&mut tx, id).await?;
    tx.commit().await?;
    sessions_ended(state, id).await?;
    Ok(user)
}

/// Sets a new password (policy checked), ends every session, spends the mailed verification
/// and reset links, and tells the user by e-mail.
/// Not an administrator's own: that needs the current password
/// (`POST /api/users/me/change-password`), so a stolen token cannot take the account over.
pub async fn change_password(
    state: &AppState,
    admin_id: i64,
    id: i64,
    new_password: &str,
) -> FlowResult<()> {
    refuse_self(admin_id, id, "set the password of")?;
    check_password_policy(new_password).map_err(|e| FlowError::invalid("new_password", e))?;
    let hash = passwords::hash(new_password.to_owned(), state.settings.bcrypt_cost).await?;
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    let user = target(&mut tx, id).await?;
    refuse_erased(&user)?;
    users::set_password(tx.exec(), id, &hash, now).await?;
    crate::store::tokens::retire_credential_links(tx.exec(), id, now).await?;
    sessions::revoke_all_of_user(
        tx.exec(),
        id,
        None,
        revoke_reason::PASSWORD_SET_BY_ADMIN,
        now,
    )
    .await?;
    user_admin::record_action(
        tx.exec(),
        admin_id,
        Some(id),
        None,
        "change_password",
        "",
        now,
    )
    .await?;
    let mail = email(
        &user.email,
        Template::PasswordChangedByAdmin,
        json!({"name": user.username}),
    );
    record_event(
        &mut tx,
        "user.password_set_by_admin",
        id,
        json!({"user_id": id, "email": [mail]}),
        now,
    )
    .await?;
    state.commit(tx).await?;
    sessions_ended(state, id).await?;
    Ok(())
}

/// When and by whom a company was last recontacted.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Recontact {
    pub user_id: i64,
    pub recontacted_at: DateTime<Utc>,
    pub recontacted_by: i64,
}

/// Sends the recontact e-mail to a company and records it.
pub async fn recontact(state: &AppState, admin_id: i64, id: i64) -> FlowResult<Recontact> {
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    let user = target(&mut tx, id).await?;
    refuse_erased(&user)?;
    if !user_admin::mark_recontacted(tx.exec(), id, admin_id, now).await? {
        return Err(FlowError::rule(
            "NOT_A_COMPANY",
            "Only a company with a profile can be recontacted",
        ));
    }
    let contact = users::contact(tx.exec(), id, Role::Empresa)
        .await?
        .ok_or_else(|| FlowError::not_found("User not found"))?;
    let mail = email(
        &contact.email,
        Template::RecontactCompany,
        json!({"name": contact.name}),
    );
    record_event(
        &mut tx,
        "user.recontacted",
        id,
        json!({"user_id": id, "email": [mail]}),
        now,
    )
    .await?;
    user_admin::record_action(tx.exec(), admin_id, Some(id), None, "recontact", "", now).await?;
    state.commit(tx).await?;
    Ok(Recontact {
        user_id: id,
        recontacted_at: now,
        recontacted_by: admin_id,
    })
}

/// Replaces the user's roles. At least one role stays; the active role is `active` when
/// given, else the current one when kept, else the first remaining. An administrator
/// cannot drop their own `admin` role, nor the last active administrator's.
pub async fn set_roles(
    state: &AppState,
    admin_id: i64,
    id: i64,
    roles: &[String],
    active: Option<&str>,
) -> FlowResult<User> {
    let mut wanted: Vec<Role> = Vec::new();
    for name in roles {
        let role = Role::parse(name).ok_or_else(|| {
            FlowError::invalid("roles", "allowed roles are empresa, experto and admin")
        })?;
        if !wanted.contains(&role) {
            wanted.push(role);
        }
    }
    if wanted.is_empty() {
        return Err(FlowError::invalid(
            "roles",
            "a user keeps at least one role",
        ));
    }
    let active = match active {
        Some(name) => {
            let role = Role::parse(name)
                .filter(|r| wanted.contains(r))
                .ok_or_else(|| FlowError::invalid("active_role", "must be one of the roles"))?;
            Some(role)
        }
        None => None,
    };
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    tx.lock(LockScope::Administrators, 0).await?;
    let user = target(&mut tx, id).await?;
    refuse_erased(&user)?;
    if user.roles.contains(&Role::Admin) && !wanted.contains(&Role::Admin) {
        if admin_id == id {
            return Err(FlowError::conflict(
                "CANNOT_REMOVE_OWN_ADMIN",
                "Administrators cannot remove their own admin role",
            ));
        }
        keep_an_administrator(&mut tx, &user).await?;
    }
    let active = active.unwrap_or(if wanted.contains(&user.active_role) {
        user.active_role
    } else {
        wanted[0]
    });
    user_admin::set_roles(tx.exec(), id, &wanted, active, now).await?;
    let names: Vec<&str> = wanted.iter().map(|r| r.as_str()).collect();
    let details = json!({"roles": names, "active_role": active.as_str()}).to_string();
    user_admin::record_action(tx.exec(), admin_id, Some(id), None, "roles", &details, now).await?;
    let user = target(&mut tx, id).await?;
    tx.commit().await?;
    sessions_ended(state, id).await?;
    Ok(user)
}

/// Where an account's removal stands.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DeletionRequest {
    pub user_id: i64,
    pub reason: Option<String>,
    pub requested_at: Option<DateTime<Utc>>,
    pub requested_by: Option<i64>,
    pub confirmed_at: Option<DateTime<Utc>>,
    pub confirmed_by: Option<i64>,
    pub deleted_at: Option<DateTime<Utc>>,
}

async fn deletion_of(tx: &mut Tx, id: i64) -> FlowResult<DeletionRequest> {
    let user = target(tx, id).await?;
    let standing = user_admin::standing(tx.exec(), id).await?;
    Ok(DeletionRequest {
        user_id: id,
        reason: standing.deletion_reason,
        requested_at: standing.deletion_requested_at,
        requested_by: standing.deletion_requested_by,
        confirmed_at: standing.deletion_confirmed_at,
        confirmed_by: standing.deletion_confirmed_by,
        deleted_at: user.deleted_at,
    })
}

/// Step one: records the request and tells the other administrators.
pub async fn request_deletion(
    state: &AppState,
    admin_id: i64,
    id: i64,
    reason: AccountReason,
) -> FlowResult<DeletionRequest> {
    refuse_self(admin_id, id, "remove")?;
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    let user = target(&mut tx, id).await?;
    refuse_erased(&user)?;
    if !user_admin::request_deletion(tx.exec(), id, &reason, admin_id, now).await? {
        return Err(FlowError::conflict(
            "DELETION_ALREADY_REQUESTED",
            "A removal of this account was already requested",
        ));
    }
    let notify: Vec<_> = users::administrator_contacts(tx.exec())
        .await?
        .into_iter()
        .filter(|a| a.id != admin_id)
        .map(|a| {
            notify::for_user(
                a.id,
                "user_deletion_requested",
                "Account removal requested",
                &format!(
                    "The removal of account {} was requested; another administrator confirms it.",
                    user.username
                ),
                json!({"user_id": id, "requested_by": admin_id}),
            )
        })
        .collect();
    record_event(
        &mut tx,
        "user.deletion_requested",
        id,
        json!({"user_id": id, "notify": notify}),
        now,
    )
    .await?;
    user_admin::record_action(
        tx.exec(),
        admin_id,
        Some(id),
        None,
        "deletion_request",
        &reason,
        now,
    )
    .await?;
    let request = deletion_of(&mut tx, id).await?;
    state.commit(tx).await?;
    Ok(request)
}

/// Step two: the account is deactivated and its sessions end.
pub async fn confirm_deletion(
    state: &AppState,
    admin_id: i64,
    id: i64,
) -> FlowResult<DeletionRequest> {
    refuse_self(admin_id, id, "remove")?;
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    tx.lock(LockScope::Administrators, 0).await?;
    let user = target(&mut tx, id).await?;
    refuse_erased(&user)?;
    keep_an_administrator(&mut tx, &user).await?;
    if !user_admin::confirm_deletion(tx.exec(), id, admin_id, now).await? {
        return Err(FlowError::conflict(
            "DELETION_NOT_REQUESTED",
            "Confirm a removal that was requested and not yet confirmed",
        ));
    }
    sessions::revoke_all_of_user(tx.exec(), id, None, revoke_reason::DELETION_CONFIRMED, now)
        .await?;
    record_event(
        &mut tx,
        "user.deletion_confirmed",
        id,
        json!({"user_id": id}),
        now,
    )
    .await?;
    user_admin::record_action(
        tx.exec(),
        admin_id,
        Some(id),
        None,
        "deletion_confirm",
        "",
        now,
    )
    .await?;
    let request = deletion_of(&mut tx, id).await?;
    state.commit(tx).await?;
    sessions_ended(state, id).await?;
    Ok(request)
}

/// Final step: personal data erased, files removed, money and tax records kept on the
/// anonymised account. Refused while money or work is under way.
pub async fn delete(state: &AppState, admin_id: i64, id: i64) -> FlowResult<DeletionRequest> {
    refuse_self(admin_id, id, "remove")?;
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    tx.lock(LockScope::User, id).await?;
    let user = target(&mut tx, id).await?;
    refuse_erased(&user)?;
    let standing = user_admin::standing(tx.exec(), id).await?;
    if standing.deletion_confirmed_at.is_none() {
        return Err(FlowError::conflict(
            "DELETION_NOT_CONFIRMED",
            "Request and confirm the removal before deleting the account",
        ));
    }
    let blockers = user_admin::blockers(tx.exec(), id).await?;
    if blockers.any() {
        return Err(FlowError::conflict(
            "USER_HAS_ACTIVE_WORK",
            format!(
                "The account has {} payment(s) in escrow or dispute, {} active dispute(s) and {} project(s) under way",
                blockers.money_in_escrow, blockers.active_disputes, blockers.projects_in_progress
            ),
        ));
    }
    let chat_files = user_admin::chat_files_of(tx.exec(), id).await?;
    // The CRM learns of the removal with the identifiers it knows the contact by.
    record_event(
        &mut tx,
        "user.deleted",
        id,
        json!({"user_id": id, "email": user.email, "crm_id": user.crm_id}),
        now,
    )
    .await?;
    user_admin::anonymise(tx.exec(), id, now).await?;
    user_admin::record_action(tx.exec(), admin_id, Some(id), None, "delete", "", now).await?;
    let request = deletion_of(&mut tx, id).await?;
    state.commit(tx).await?;
    sessions_ended(state, id).await?;
    remove_files(state, id, &chat_files).await;
    Ok(request)
}

/// Removes the user's uploads. A file left behind is logged, never a reason to fail: the
/// records no longer point at it.
async fn remove_files(state: &AppState, id: i64, chat_files: &[String]) {
    let uploads = &state.settings.uploads_dir;
    for dir in ["profiles", "documents"] {
        let path = uploads.join(dir).join(id.to_string());
        if let Err(e) = tokio::fs::remove_dir_all(&path).await
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(user_id = id, error = %e, "cannot remove the uploads of a deleted user");
        }
    }
    for file in chat_files {
        let relative = file.trim_start_matches('/');
        if relative.split('/').any(|part| part == "..") {
            continue;
        }
        let _ = tokio::fs::remove_file(uploads.join(relative)).await;
    }
}
