//! Administrators invite administrators: a single-use token, stored hashed, reaches the
//! invitee by e-mail (sent directly: the token must not be kept in the events table).

use chrono::Duration;

use crate::domain::token::{hash_token, random_token};
use crate::domain::user::EmailAddress;
use crate::integrations::mail::Template;
use crate::state::AppState;
use crate::store::invitations::{self, Invitation};
use crate::store::users::{self, User};
use crate::workflows::error::{FlowError, FlowResult};

/// Invites `email` on behalf of `admin` for `hours`: 409 `EMAIL_EXISTS` when a user has it.
/// The e-mail failing is logged; the invitation stands (it can be cancelled and sent again).
pub async fn invite_admin(
    state: &AppState,
    admin: &User,
    email: &EmailAddress,
    message: Option<&str>,
    hours: i64,
) -> FlowResult<Invitation> {
    let token = random_token(32);
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    if users::find_by_email(tx.exec(), email.as_str())
        .await?
        .is_some()
    {
        return Err(FlowError::conflict(
            "EMAIL_EXISTS",
            "A user with this e-mail already exists",
        ));
    }
    let id = invitations::insert(
        tx.exec(),
        &invitations::NewInvitation {
            email: email.as_str(),
            invited_by: admin.id,
            message,
            token_hash: &hash_token(&token),
            expires_at: now + Duration::hours(hours),
        },
        now,
    )
    .await?;
    let invitation = invitations::find(tx.exec(), id)
        .await?
        .ok_or_else(|| FlowError::not_found("Invitation not found"))?;
    tx.commit().await?;
    let expires_at = invitation.expires_at;

    let ctx = serde_json::json!({
        "invited_by": admin.username,
        "message": message,
        "expires_at": expires_at.to_rfc3339(),
        "token": token,
    });
    if let Err(err) = state
        .mailer
        .send(email.as_str(), Template::AdminInvitation, ctx)
        .await
    {
        tracing::warn!(invitation_id = id, error = %err, "invitation e-mail not sent");
    }
    Ok(invitation)
}

/// Cancels an invitation: 404 when unknown.
pub async fn cancel(state: &AppState, id: i64) -> FlowResult<()> {
    let mut conn = state.db.conn().await?;
    if invitations::delete(conn.exec(), id).await? {
        Ok(())
    } else {
        Err(FlowError::not_found("Invitation not found"))
    }
}
