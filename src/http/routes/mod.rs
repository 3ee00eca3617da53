//! Routes, one module per resource.

pub mod auth;
pub mod invitations;
pub mod users;
pub mod views;
