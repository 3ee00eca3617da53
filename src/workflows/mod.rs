//! Use cases run end to end: the project and payment actors, services, and the event
//! dispatcher with its consumers.

pub mod accounts;
pub mod auth;
pub mod notify;
pub mod outbox;
pub mod passwords;
