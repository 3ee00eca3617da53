//! Resilience of the service as separate processes on PostgreSQL and Redis: the server killed
//! with SIGKILL while escrow flows run (`crash`), and two servers racing on one database and
//! one cache (`instances`). The processor sandbox runs on its own
//! (`marketplace processor-sandbox`), so its ledger survives the kills.
//!
//! They run only when `TEST_DATABASE_URL` names PostgreSQL and `REDIS_URL` is set, and start
//! the binary named by `MARKETPLACE_BIN` (CI: the release build), or else this package's.

mod crash;
mod harness;
mod instances;
mod shutdown;
