//! Administrators' verification decisions and profiles created for a user.

use crate::domain::profile::VerificationAction;
use crate::domain::user::Role;
use crate::state::AppState;
use crate::store::profiles::{self, Profile};
use crate::store::{Exec, users};
use crate::workflows::error::{FlowError, FlowResult};

use super::*;

/// The user's profile for their active role, else their first profile.
pub async fn profile_of_user(mut ex: Exec<'_>, user_id: i64) -> FlowResult<Profile> {
    let user = users::find(ex.re(), user_id)
        .await?
        .ok_or_else(|| FlowError::not_found("User not found"))?;
    if let Some(p) = profiles::find_by_user(ex.re(), user_id, user.active_role).await? {
        return Ok(p);
    }
    profiles::list_by_user(ex, user_id)
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| FlowError::not_found("This user has no profile"))
}

/// An administrator's verification decision on the user's profile (the active role's, else
/// the first), with optional notes (at most 5000 characters).
pub async fn moderate(
    state: &AppState,
    admin_id: i64,
    user_id: i64,
    notes: Option<String>,
    action: VerificationAction,
) -> FlowResult<Profile> {
    let notes = notes.map(|n| n.trim().to_owned()).filter(|n| !n.is_empty());
    if notes.as_ref().is_some_and(|n| n.chars().count() > 5000) {
        return Err(FlowError::invalid_field(
            "notes",
            "must be at most 5000 characters",
        ));
    }
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    let profile = profile_of_user(tx.exec(), user_id).await?;
    let (verified, status) = action.outcome();
    profiles::set_verification(
        tx.exec(),
        profile.id,
        verified,
        status,
        notes.as_deref(),
        admin_id,
        now,
    )
    .await?;
    let profile = profiles::find(tx.exec(), profile.id)
        .await?
        .ok_or_else(|| FlowError::not_found("Profile not found"))?;
    tx.commit().await?;
    Ok(profile)
}

/// An administrator creates the `role` profile of a user, who gains the role if they lacked it.
pub async fn create_for_user(
    state: &AppState,
    user_id: i64,
    role: Role,
    input: &ProfileInput,
) -> FlowResult<Profile> {
    let user = {
        let mut conn = state.db.conn().await?;
        users::find(conn.exec(), user_id)
            .await?
            .ok_or_else(|| FlowError::not_found("User not found"))?
    };
    if !user.roles.contains(&role) {
        let mut conn = state.db.conn().await?;
        users::add_role(conn.exec(), user_id, role, state.clock.now()).await?;
        crate::workflows::auth::user_changed(state, user_id);
    }
    create_profile(state, user_id, &user.username, role, input).await
}
