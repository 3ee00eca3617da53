//! Types and rules with no I/O.

pub mod profile;
pub mod token;
pub mod user;
