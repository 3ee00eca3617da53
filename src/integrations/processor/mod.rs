//! The payment processor (DESIGN §5): [`ProcessorClient`] speaks the processor's real REST
//! protocol, against the processor itself when `PROCESSOR_SECRET_KEY` is set, or against the
//! in-process [`sandbox`] otherwise; [`webhook`] verifies (and, for the sandbox, signs) the
//! events it sends; [`types`] are the objects the service reads.
//!
//! This adapter is the only place that names the vendor (its header, API host and version);
//! everything outside says "processor".

pub(crate) mod client;
mod error;
pub(crate) mod form;
pub mod types;
pub mod webhook;

use std::sync::Arc;

use anyhow::Context as _;

pub use self::client::{
    API_VERSION, AccountLinkType, CreateAccount, CreateAccountLink, CreateCustomer,
    CreatePaymentIntent, CreateRefund, CreateTransfer, CreateTransferReversal, DEFAULT_API_BASE,
    ProcessorClient, RefundTarget,
};
pub use self::error::ProcessorError;
pub use self::types::{Account, Charge, Dispute, Event, PaymentIntent, Transfer};
pub use super::standins::processor::{Sandbox, SandboxConfig, SandboxHandle};
use crate::clock::Clock;
use crate::config::{Secret, Settings};

/// The publishable key handed to browsers while the sandbox is the processor.
pub const SANDBOX_PUBLISHABLE_KEY: &str = "pk_test_sandbox";

/// Everything the service needs to work with the processor.
#[derive(Debug)]
pub struct ProcessorSetup {
    pub client: Arc<ProcessorClient>,
    /// Verifies inbound webhook signatures.
    pub webhook_secret: Secret,
    /// For `GET /api/payments/public-key`.
    pub publishable_key: String,
    /// Present when the sandbox is the processor.
    pub sandbox: Option<SandboxHandle>,
}

impl ProcessorSetup {
    /// Stops the sandbox, if one runs.
    pub async fn stop(&self) {
        if let Some(sandbox) = &self.sandbox {
            sandbox.stop().await;
        }
    }
}

/// [`connect_with_clock`] on the system clock.
pub async fn connect(settings: &Settings) -> anyhow::Result<ProcessorSetup> {
    connect_with_clock(settings, Clock::system()).await
}

/// With `PROCESSOR_SECRET_KEY`: the real processor at `PROCESSOR_API_BASE` (default
/// [`DEFAULT_API_BASE`]), and `PROCESSOR_WEBHOOK_SECRET` is required. Without: the sandbox,
/// started on a loopback port with a fresh secret key, the configured webhook secret or a
/// fresh one, on `clock`.
pub async fn connect_with_clock(
    settings: &Settings,
    clock: Clock,
) -> anyhow::Result<ProcessorSetup> {
    if let Some(secret_key) = &settings.processor_secret_key {
        let webhook_secret = settings.processor_webhook_secret.clone().context(
            "PROCESSOR_WEBHOOK_SECRET is required when PROCESSOR_SECRET_KEY is set \
             (webhooks cannot be verified without it)",
        )?;
        let base = settings
            .processor_api_base
            .as_deref()
            .unwrap_or(DEFAULT_API_BASE);
        let client = ProcessorClient::new(base, secret_key.clone())
            .context("cannot build the processor client")?;
        tracing::info!(api_base = base, "processor: live API");
        if settings.processor_publishable_key.is_none() {
            tracing::warn!("PROCESSOR_PUBLISHABLE_KEY is not set: browsers cannot collect cards");
        }
        return Ok(ProcessorSetup {
            client: Arc::new(client),
            webhook_secret,
            publishable_key: settings
                .processor_publishable_key
                .clone()
                .unwrap_or_default(),
            sandbox: None,
        });
    }

    let secret_key = Secret::new(format!(
        "sk_test_sandbox_{}",
        crate::domain::token::random_token(24)
    ));
    let webhook_secret = settings
        .processor_webhook_secret
        .clone()
        .unwrap_or_else(|| {
            Secret::new(format!(
                "whsec_sandbox_{}",
                crate::domain::token::random_token(24)
            ))
        });
    let sandbox = Sandbox::start(SandboxConfig::new(
        secret_key.clone(),
        webhook_secret.clone(),
        clock,
    ))
    .await
    .context("cannot start the processor sandbox")?;
    let client = ProcessorClient::new(sandbox.base_url(), secret_key)
        .context("cannot build the processor client")?;
    Ok(ProcessorSetup {
        client: Arc::new(client),
        webhook_secret,
        publishable_key: settings
            .processor_publishable_key
            .clone()
            .unwrap_or_else(|| SANDBOX_PUBLISHABLE_KEY.to_owned()),
        sandbox: Some(sandbox),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn settings(vars: &[(&str, &str)]) -> Settings {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Settings::from_lookup(|k| map.get(k).cloned()).unwrap()
    }

    #[actix_web::test]
    async fn a_real_key_needs_the_webhook_secret() {
        let err = connect(&settings(&[("PROCESSOR_SECRET_KEY", "sk_live_x")]))
            .await
            .unwrap_err();
        assert!(format!("{err:#}").contains("PROCESSOR_WEBHOOK_SECRET"));
        assert!(!format!("{err:#}").contains("sk_live_x"));

        let setup = connect(&settings(&[
            ("PROCESSOR_SECRET_KEY", "sk_live_x"),
            ("PROCESSOR_WEBHOOK_SECRET", "whsec_x"),
        ]))
        .await
        .unwrap();
        assert_eq!(setup.client.base_url(), DEFAULT_API_BASE);
        assert!(setup.sandbox.is_none());
        assert!(!format!("{setup:?}").contains("sk_live_x"));
    }

    #[actix_web::test]
    async fn without_a_key_the_sandbox_is_the_processor() {
        let setup = connect(&settings(&[("PROCESSOR_WEBHOOK_SECRET", "whsec_fixed")]))
            .await
            .unwrap();
        let sandbox = setup.sandbox.as_ref().expect("sandbox");
        assert_eq!(setup.client.base_url(), sandbox.base_url());
        assert_eq!(setup.webhook_secret.expose(), "whsec_fixed");
        assert_eq!(setup.publishable_key, SANDBOX_PUBLISHABLE_KEY);
        let balance = setup.client.retrieve_balance().await.unwrap();
        assert_eq!(balance.available_in("eur"), 100_000_000);
        setup.stop().await;

        let fresh = connect(&settings(&[])).await.unwrap();
        assert!(fresh.webhook_secret.expose().starts_with("whsec_sandbox_"));
        fresh.stop().await;
    }
}
