//! Use cases run end to end: the project and payment actors, services, and the event
//! dispatcher with its consumers.

pub mod accounts;
pub mod applications;
pub mod auth;
pub mod commission;
pub mod connect;
pub mod crm;
pub mod deliveries;
pub mod disputes;
pub mod documents;
pub mod emails;
pub mod error;
pub mod escrow;
pub mod escrow_jobs;
pub mod invitations;
pub mod jobs;
pub mod milestones;
pub mod notify;
pub mod outbox;
pub mod passwords;
pub mod payment_methods;
pub mod payments;
pub mod processor_events;
pub mod profiles;
pub mod projects;
pub mod reputation;
pub mod reviews;
pub mod selection;
pub mod timers;
pub mod webhook_config;
pub mod webhooks;
