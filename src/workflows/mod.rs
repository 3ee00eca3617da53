//! Use cases run end to end: the project and payment actors, services, and the event
//! dispatcher with its consumers.

pub mod accounts;
pub mod applications;
pub mod auth;
pub mod connect;
pub mod deliveries;
pub mod disputes;
pub mod emails;
pub mod error;
pub mod escrow;
pub mod escrow_jobs;
pub mod milestones;
pub mod notify;
pub mod outbox;
pub mod passwords;
pub mod payment_methods;
pub mod payments;
pub mod processor_events;
pub mod projects;
pub mod selection;
