//! What every handler shares.

use std::sync::Arc;

use crate::clock::Clock;
use crate::config::Settings;
use crate::http::metrics::HttpMetrics;
use crate::integrations::cache::Cache;
use crate::integrations::mail::Mailer;
use crate::integrations::processor::ProcessorSetup;
use crate::store::Db;
use crate::workflows::auth::AuthService;
use crate::workflows::outbox::Outbox;

#[derive(Clone)]
pub struct AppState {
    pub settings: Arc<Settings>,
    pub db: Db,
    pub cache: Arc<dyn Cache>,
    pub mailer: Mailer,
    pub clock: Clock,
    pub auth: Arc<AuthService>,
    pub outbox: Outbox,
    /// The processor client, webhook secret and publishable key; the sandbox when it is the
    /// processor.
    pub processor: Arc<ProcessorSetup>,
    pub http_metrics: Arc<HttpMetrics>,
    /// One actor per project: every transition of a project runs inside it (DESIGN §3).
    pub project_actors: actors::Registry<i64>,
    /// One actor per payment: every processor-driven change of a payment runs inside it.
    pub payment_actors: actors::Registry<i64>,
    /// The escrow's periodic jobs, once started.
    pub jobs: Arc<std::sync::OnceLock<crate::workflows::escrow_jobs::EscrowJobs>>,
}
