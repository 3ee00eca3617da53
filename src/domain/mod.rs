//! Types and rules with no I/O.

pub mod access_token;
pub mod backoff;
pub mod client_address;
pub mod commission;
pub mod crm;
pub mod cursor;
pub mod dac7;
pub mod delivery;
pub mod dispute;
pub mod growth;
pub mod idempotency;
pub mod milestone;
pub mod money;
pub mod money_audit;
pub mod payment;
pub mod profile;
pub mod project;
pub mod realtime_limits;
pub mod reputation;
pub mod search;
pub mod state;
pub mod text;
pub mod token;
pub mod upload;
pub mod user;
pub mod webhook_rules;
