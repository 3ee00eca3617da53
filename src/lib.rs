//! The expert marketplace service: companies post projects, experts propose milestones,
//! payments are held in escrow and released on approval.
//!
//! Layers, each depending only on the ones below it (DESIGN §1): [`http`] → [`workflows`] →
//! [`store`] / [`integrations`] → [`domain`].

pub mod availability;
pub mod background;
pub mod clock;
pub mod config;
pub mod demo;
pub mod domain;
pub mod http;
pub mod integrations;
pub mod startup;
pub mod state;
pub mod store;
pub mod telemetry;
pub mod workflows;
