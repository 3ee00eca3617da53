//! Types and rules with no I/O.

pub mod token;
pub mod user;
