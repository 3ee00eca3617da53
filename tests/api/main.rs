//! Black-box tests: one binary (linking is minutes per binary on two cores), a module per area.

mod helpers;
mod outbox;
mod store;
mod system;
