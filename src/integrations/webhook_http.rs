//! The HTTP client of outgoing user webhooks, guarded against server-side request forgery:
//! every name is resolved here and only allowed addresses are handed to the connector, so the
//! connection goes to an address that was checked (no second lookup an attacker's DNS could
//! answer differently). Redirects are never followed, calls time out after 10 s, at most
//! 64 KiB of a response is read, and at most [`PER_HOST`] calls run at once per host.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use crate::domain::webhook_rules::{self, DeliveryFailure, Destination};

/// Calls in flight per destination host at most.
pub const PER_HOST: usize = 4;
/// Whole-call time limit.
pub const TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes of a response read at most (then discarded).
pub const MAX_RESPONSE: usize = 64 * 1024;

/// What one call came to.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub status: Option<u16>,
    pub error: Option<String>,
    pub duration: Duration,
}

impl Outcome {
    pub fn success(&self) -> bool {
        self.error.is_none() && self.status.is_some_and(|s| (200..300).contains(&s))
    }

    fn refused() -> Self {
        Self {
            status: None,
            error: Some(DeliveryFailure::Refused.to_string()),
            duration: Duration::ZERO,
        }
    }
}

/// Resolves names and keeps only the addresses the guard allows.
struct GuardedResolver {
    allow_private: bool,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allow_private = self.allow_private;
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> = found
                .iter()
                .copied()
                .filter(|a| webhook_rules::address_allowed(a.ip(), allow_private))
                .collect();
            // Every resolved address must pass: a name answering one public and one private
            // address is refused rather than connected to its public half only.
            if allowed.is_empty() || allowed.len() != found.len() {
                let reason = if found.is_empty() {
                    "the host has no address"
                } else {
                    "the host resolves to a private or reserved address"
                };
                return Err(reason.into());
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}

/// The guarded client and the per-host in-flight counts.
pub struct WebhookHttp {
    client: reqwest::Client,
    allow_private: bool,
    in_flight: Arc<Mutex<HashMap<String, usize>>>,
}

/// A reserved place among a host's [`PER_HOST`] calls; released when dropped.
pub struct HostSlot {
    host: String,
    in_flight: Arc<Mutex<HashMap<String, usize>>>,
}

impl Drop for HostSlot {
    fn drop(&mut self) {
        if let Ok(mut map) = self.in_flight.lock()
            && let Some(n) = map.get_mut(&self.host)
        {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.host);
            }
        }
    }
}

impl WebhookHttp {
    /// `extra_root_pem`: one more trusted root (PEM), for test receivers.
    pub fn new(allow_private: bool, extra_root_pem: Option<&[u8]>) -> anyhow::Result<Self> {
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(TIMEOUT)
            .connect_timeout(TIMEOUT)
            .no_proxy()
            .user_agent("marketplace-webhooks/1")
            .dns_resolver(Arc::new(GuardedResolver { allow_private }));
        if let Some(pem) = extra_root_pem {
            for cert in reqwest::Certificate::from_pem_bundle(pem)? {
                builder = builder.add_root_certificate(cert);
            }
        }
        Ok(Self {
            client: builder.build()?,
            allow_private,
            in_flight: Arc::default(),
        })
    }

    pub fn allow_private(&self) -> bool {
        self.allow_private
    }

    /// Checks a URL's shape and literal address. A host name is never resolved here: its
    /// addresses are checked by [`GuardedResolver`] at each connection, the one check that
    /// holds (a name may resolve differently by then), and a lookup outside it would only
    /// tell the caller which names resolve where.
    pub fn check(&self, url: &str) -> Result<Destination, &'static str> {
        webhook_rules::check_url(url, self.allow_private)
    }

    /// Reserves one of `host`'s places, or `None` when [`PER_HOST`] calls run already.
    pub fn reserve(&self, host: &str) -> Option<HostSlot> {
        let mut map = self.in_flight.lock().ok()?;
        let n = map.entry(host.to_owned()).or_default();
        if *n >= PER_HOST {
            return None;
        }
        *n += 1;
        Some(HostSlot {
            host: host.to_owned(),
            in_flight: self.in_flight.clone(),
        })
    }

    /// Calls in flight to `host` now.
    pub fn in_flight(&self, host: &str) -> usize {
        self.in_flight
            .lock()
            .map(|m| m.get(host).copied().unwrap_or(0))
            .unwrap_or(0)
    }

    /// POSTs `body` with `headers`; never errors: the outcome says what happened, coarsely
    /// ([`DeliveryFailure`]); the cause goes to the log, never with the URL (it may hold a
    /// receiver's token).
    pub async fn post(&self, url: &str, headers: &[(&str, String)], body: Vec<u8>) -> Outcome {
        if let Err(reason) = self.check(url) {
            tracing::info!(reason, "webhook delivery refused before the call");
            return Outcome::refused();
        }
        let started = Instant::now();
        let mut request = self
            .client
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        let result = async {
            let mut response = request.send().await?;
            let status = response.status().as_u16();
            let mut read = 0usize;
            while read < MAX_RESPONSE {
                match response.chunk().await? {
                    Some(chunk) => read += chunk.len(),
                    None => break,
                }
            }
            Ok::<u16, reqwest::Error>(status)
        }
        .await;
        let duration = started.elapsed();
        match result {
            Ok(status) => Outcome {
                status: Some(status),
                error: (!(200..300).contains(&status))
                    .then(|| DeliveryFailure::Http(status).to_string()),
                duration,
            },
            Err(err) => Outcome {
                status: err.status().map(|s| s.as_u16()),
                error: Some(failure_of(&err).to_string()),
                duration,
            },
        }
    }
}

/// What a failed call comes to for its owner; the whole cause, without the URL, goes to the
/// log for operators.
fn failure_of(err: &reqwest::Error) -> DeliveryFailure {
    let mut causes = Vec::new();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        let text = cause.to_string();
        if !causes.contains(&text) {
            causes.push(text);
        }
        source = cause.source();
    }
    let chain = causes.join(": ").to_lowercase();
    let failure = if err.is_timeout() {
        DeliveryFailure::Timeout
    } else if chain.contains("dns error")
        || chain.contains("lookup address")
        || chain.contains("the host has no address")
        || chain.contains("resolves to a private")
    {
        DeliveryFailure::Dns
    } else if ["certificate", "tls", "handshake", "alert"]
        .iter()
        .any(|word| chain.contains(word))
    {
        DeliveryFailure::Tls
    } else if err.is_connect() {
        DeliveryFailure::Connect
    } else {
        DeliveryFailure::Request
    };
    tracing::info!(%failure, cause = %chain, "webhook delivery failed");
    failure
}
