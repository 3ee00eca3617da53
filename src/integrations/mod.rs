//! Everything that talks to the outside world: cache, mail, payment processor, CRM.

pub mod cache;
pub mod crm;
pub mod mail;
pub mod processor;
pub mod realtime;
pub mod socket_registry;
pub mod standins;
pub mod webhook_http;
