//! Routes, one module per resource.

pub mod applications;
pub mod auth;
pub mod commission;
pub mod connect;
pub mod crm;
pub mod disputes;
pub mod documents;
pub mod escrow_views;
pub mod expert;
pub mod invitations;
pub mod milestones;
pub mod notifications;
pub mod payment_methods;
pub mod payments;
pub mod profiles;
pub mod projects;
pub mod reputation;
pub mod reviews;
pub mod sandbox;
pub mod timers;
pub mod users;
pub mod views;
pub mod webhook_deliveries;
