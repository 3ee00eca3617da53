//! Types and rules with no I/O.

pub mod commission;
pub mod money;
pub mod profile;
pub mod project;
pub mod token;
pub mod upload;
pub mod user;
