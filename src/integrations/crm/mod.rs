//! The CRM (specification part 9): [`CrmClient`] speaks HighLevel's LeadConnector API v2
//! (`fixtures/crm/README.md`) against the CRM itself when `CRM_API_KEY` is set, or against the
//! in-process [`sandbox`] when `CRM_API_BASE=sandbox`. With neither the CRM is off: nothing is
//! sent and [`CrmSetup::off_reason`] says why.

mod client;
pub mod metrics;
pub mod types;
pub mod webhook;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;

pub use self::client::{
    BURST_LIMIT, BURST_WINDOW, ClientConfig, CrmClient, CrmError, DEFAULT_API_BASE,
    DEFAULT_API_VERSION,
};
pub use self::metrics::CrmMetrics;
pub use self::types::{Contact, CustomField, Opportunity};
pub use super::standins::crm::CrmSandbox;
use crate::clock::Clock;
use crate::config::{Secret, Settings};

/// The value of `CRM_API_BASE` that mounts the sandbox.
pub const SANDBOX: &str = "sandbox";
const SANDBOX_LOCATION: &str = "sandbox-location";

/// Everything the service needs to work with the CRM.
#[derive(Debug)]
pub struct CrmSetup {
    /// `None` when the CRM is off.
    pub client: Option<Arc<CrmClient>>,
    /// Why the CRM is off, when it is.
    pub off_reason: Option<&'static str>,
    pub webhook_secret: Option<Secret>,
    pub pipeline_id: Option<String>,
    pub sandbox: Option<CrmSandbox>,
    pub metrics: Arc<CrmMetrics>,
}

impl CrmSetup {
    pub async fn stop(&self) {
        if let Some(sandbox) = &self.sandbox {
            sandbox.stop().await;
        }
    }
}

/// The CRM as the settings describe it: the sandbox, the real API, or off.
pub async fn connect(settings: &Settings, clock: Clock) -> anyhow::Result<CrmSetup> {
    let metrics = Arc::new(CrmMetrics::default());
    let config = |base_url: String, api_key: Secret, location_id: String| ClientConfig {
        base_url,
        api_key,
        version: settings.crm_api_version.clone(),
        location_id,
        clock: clock.clone(),
        burst_limit: BURST_LIMIT,
        burst_window: BURST_WINDOW,
        // Only the CRM worker (and administrators' direct calls) wait on it.
        max_limiter_wait: Duration::from_secs(15),
    };
    let mut setup = CrmSetup {
        client: None,
        off_reason: None,
        webhook_secret: settings.crm_webhook_secret.clone(),
        pipeline_id: settings.crm_pipeline_id.clone(),
        sandbox: None,
        metrics: metrics.clone(),
    };
    if settings.crm_api_base.as_deref() == Some(SANDBOX) {
        let key = Secret::new(format!(
            "pit-sandbox-{}",
            crate::domain::token::random_token(24)
        ));
        let location = settings
            .crm_location_id
            .clone()
            .unwrap_or_else(|| SANDBOX_LOCATION.to_owned());
        let sandbox = CrmSandbox::start(key.clone(), location.clone())
            .await
            .context("cannot start the CRM sandbox")?;
        let client = CrmClient::new(
            config(sandbox.base_url().to_owned(), key, location),
            metrics,
        )
        .context("cannot build the CRM client")?;
        setup.client = Some(Arc::new(client));
        setup
            .pipeline_id
            .get_or_insert_with(|| "sandbox-pipeline".to_owned());
        setup.sandbox = Some(sandbox);
        return Ok(setup);
    }
    let Some(key) = settings.crm_api_key.clone() else {
        setup.off_reason =
            Some("CRM_API_KEY is not set (and CRM_API_BASE is not `sandbox`): the CRM is off");
        return Ok(setup);
    };
    let Some(location) = settings.crm_location_id.clone() else {
        setup.off_reason =
            Some("CRM_LOCATION_ID is not set: contacts cannot be addressed, the CRM is off");
        return Ok(setup);
    };
    let base = settings
        .crm_api_base
        .clone()
        .unwrap_or_else(|| DEFAULT_API_BASE.to_owned());
    tracing::info!(api_base = %base, "CRM: live API");
    let client = CrmClient::new(config(base, key, location), metrics)
        .context("cannot build the CRM client")?;
    setup.client = Some(Arc::new(client));
    Ok(setup)
}
