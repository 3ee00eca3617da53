//! Routes, one module per resource.

pub mod auth;
pub mod invitations;
pub mod notifications;
pub mod profiles;
pub mod sandbox;
pub mod users;
pub mod views;
