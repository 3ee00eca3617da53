//! Shapes of users on the wire. Nothing secret is ever in them: no password hash, token or
//! webhook secret.

use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;

use crate::domain::user::Role;
use crate::store::users::User;

/// The caller's own account.
#[derive(Debug, Serialize, ToSchema)]
pub struct UserView {
    pub id: i64,
    pub email: String,
    pub username: String,
    pub roles: Vec<Role>,
    pub active_role: Role,
    /// Alias of `active_role`, kept for compatibility.
    pub role: Role,
    pub is_active: bool,
    pub email_verified: bool,
    pub created_at: DateTime<Utc>,
}

impl From<&User> for UserView {
    fn from(u: &User) -> Self {
        Self {
            id: u.id,
            email: u.email.clone(),
            username: u.username.clone(),
            roles: u.roles.clone(),
            active_role: u.active_role,
            role: u.active_role,
            is_active: u.is_active,
            email_verified: u.email_verified,
            created_at: u.created_at,
        }
    }
}

/// The user summary of the secure-flavour bodies: `{id, email, username, role}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionUser {
    pub id: i64,
    pub email: String,
    pub username: String,
    pub role: Role,
}

impl From<&User> for SessionUser {
    fn from(u: &User) -> Self {
        Self {
            id: u.id,
            email: u.email.clone(),
            username: u.username.clone(),
            role: u.active_role,
        }
    }
}

/// Another user as anyone may see them: no e-mail, no flags.
#[derive(Debug, Serialize, ToSchema)]
pub struct PublicUser {
    pub id: i64,
    pub username: String,
    pub roles: Vec<Role>,
    pub active_role: Role,
    pub role: Role,
    pub created_at: DateTime<Utc>,
}

impl From<&User> for PublicUser {
    fn from(u: &User) -> Self {
        Self {
            id: u.id,
            username: u.username.clone(),
            roles: u.roles.clone(),
            active_role: u.active_role,
            role: u.active_role,
            created_at: u.created_at,
        }
    }
}

/// `{"message": "…"}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Message {
    pub message: String,
}

impl Message {
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}
