//! Black-box tests: one binary (linking is minutes per binary on two cores), a module per area.

mod admin;
mod auth;
mod chat;
mod cli;
mod connect;
mod crm;
mod dac7;
mod deliveries;
mod disputes;
mod escrow;
mod hardening;
mod helpers;
mod invitations;
mod market;
mod notifications;
mod outbox;
mod platform_metrics;
mod processor;
mod profiles;
mod projects;
mod reviews;
mod store;
mod system;
mod timers;
mod users;
mod webhooks;
