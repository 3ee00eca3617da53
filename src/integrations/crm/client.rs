//! [`CrmClient`]: the CRM's REST protocol (LeadConnector API v2) over HTTPS, or over loopback
//! HTTP to the sandbox. Bearer key, `Version` header, JSON bodies, a 10 s timeout; a
//! client-side limiter keeps the location under its burst quota, and a 429 is waited out as
//! its headers say.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::metrics::CrmMetrics;
use super::types::{Contact, CustomField, Opportunity};
use crate::clock::Clock;
use crate::config::Secret;

/// The production API.
pub const DEFAULT_API_BASE: &str = "https://services.leadconnectorhq.com";
/// The API version every request pins (`Version`).
pub const DEFAULT_API_VERSION: &str = "2021-07-28";
/// The CRM's burst quota: requests per window per location.
pub const BURST_LIMIT: usize = 100;
pub const BURST_WINDOW: Duration = Duration::from_secs(10);

const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Answers of 429 waited out before the call is reported as failed.
const MAX_RATE_LIMIT_RETRIES: u32 = 3;
/// The longest single wait a 429 may impose.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CrmError {
    /// 401: the key is wrong or revoked. Not worth retrying until it is fixed.
    #[error("the CRM rejected the API key (401): {0}")]
    Unauthorized(String),
    #[error("not found in the CRM (404): {0}")]
    NotFound(String),
    /// 422 with the CRM's list of messages.
    #[error("the CRM refused the request (422): {}", .0.join("; "))]
    Validation(Vec<String>),
    /// 429 still after waiting as told.
    #[error("the CRM rate limit was hit (429): {0}")]
    RateLimited(String),
    #[error("the CRM answered {status}: {message}")]
    Api { status: u16, message: String },
    #[error("the CRM is unreachable: {0}")]
    Network(String),
    #[error("unexpected answer from the CRM: {0}")]
    Decode(String),
    /// The client-side limiter would wait longer than the caller allows.
    #[error("the CRM request budget of this window is spent; try again later")]
    Throttled,
}

impl CrmError {
    /// The HTTP status the CRM answered, when it answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Unauthorized(_) => Some(401),
            Self::NotFound(_) => Some(404),
            Self::Validation(_) => Some(422),
            Self::RateLimited(_) => Some(429),
            Self::Api { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// `{statusCode, message, error}`; `message` is a list for 422.
#[derive(Deserialize)]
struct ErrorBody {
    #[serde(default)]
    message: Option<Value>,
    #[serde(default)]
    error: Option<String>,
}

/// Keeps requests under [`BURST_LIMIT`] in any [`BURST_WINDOW`] as the CRM counts them: a log
/// of the last `BURST_LIMIT` requests, read on the service clock. A request enters the log
/// when it is allowed out and is moved to the time its answer came back ([`Limiter::settle`]):
/// the CRM saw it at some moment in between, so a window counted from the answers never holds
/// more than the CRM's. A sliding log, not a token bucket: a bucket of 100 refilled at 10/s
/// lets almost 200 through in one 10 s window.
#[derive(Debug)]
struct Limiter {
    sent: tokio::sync::Mutex<VecDeque<chrono::DateTime<chrono::Utc>>>,
    /// Set when the CRM said to wait (a 429, or no requests remaining in its window): no
    /// request is sent before it.
    paused_until: std::sync::Mutex<Option<chrono::DateTime<chrono::Utc>>>,
    clock: Clock,
    limit: usize,
    window: chrono::Duration,
}

impl Limiter {
    fn new(clock: Clock, limit: usize, window: Duration) -> Self {
        Self {
            sent: tokio::sync::Mutex::new(VecDeque::with_capacity(limit)),
            paused_until: std::sync::Mutex::new(None),
            clock,
            limit,
            window: chrono::Duration::from_std(window).unwrap_or(chrono::Duration::seconds(10)),
        }
    }

    /// Waits (at most `max_wait`) for a slot and takes it. The log is not held while waiting,
    /// so answers coming back meanwhile can settle their slots. Answers the slot's time, for
    /// [`Limiter::settle`].
    async fn acquire(&self, max_wait: Duration) -> Result<chrono::DateTime<chrono::Utc>, CrmError> {
        loop {
            let wait = {
                let mut sent = self.sent.lock().await;
                let now = self.clock.now();
                let paused = *self.paused_until.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(until) = paused.filter(|u| *u > now) {
                    until - now
                } else {
                    while sent.front().is_some_and(|t| *t + self.window <= now) {
                        sent.pop_front();
                    }
                    if sent.len() < self.limit {
                        sent.push_back(now);
                        return Ok(now);
                    }
                    *sent.front().expect("full log") + self.window - now
                }
            };
            let wait = wait
                .to_std()
                .unwrap_or(Duration::from_millis(1))
                .max(Duration::from_millis(1));
            if wait > max_wait {
                return Err(CrmError::Throttled);
            }
            tokio::time::sleep(wait).await;
        }
    }

    /// The request allowed out at `slot` has its answer (or failed): its entry moves to now.
    /// Now is the latest time in the log, so it stays ordered.
    async fn settle(&self, slot: chrono::DateTime<chrono::Utc>) {
        let mut sent = self.sent.lock().await;
        if let Some(at) = sent.iter().position(|t| *t == slot) {
            sent.remove(at);
            sent.push_back(self.clock.now());
        }
    }

    /// Holds every request back for `wait` (as the CRM asked).
    fn pause(&self, wait: Duration) {
        let until = self.clock.now() + chrono::Duration::from_std(wait).unwrap_or_default();
        let mut paused = self.paused_until.lock().unwrap_or_else(|e| e.into_inner());
        if paused.is_none_or(|p| p < until) {
            *paused = Some(until);
        }
    }

    /// Requests sent in the current window.
    async fn in_window(&self) -> usize {
        let sent = self.sent.lock().await;
        let now = self.clock.now();
        sent.iter().filter(|t| **t + self.window > now).count()
    }
}

/// A client of the CRM for one location. Cheap to share behind an `Arc`.
pub struct CrmClient {
    http: reqwest::Client,
    base_url: String,
    api_key: Secret,
    version: String,
    location_id: String,
    limiter: Limiter,
    metrics: Arc<CrmMetrics>,
    /// Ids of the location's custom fields by key (without `contact.`), resolved once.
    field_ids: tokio::sync::RwLock<Option<HashMap<String, String>>>,
    /// Set by a 401, cleared by any success: the health check reports it, the retry
    /// scheduler does not hammer a rejected key.
    auth_failed: AtomicBool,
    /// The longest a call waits for the limiter before giving up with `Throttled`.
    max_limiter_wait: Duration,
}

impl std::fmt::Debug for CrmClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrmClient")
            .field("base_url", &self.base_url)
            .field("location_id", &self.location_id)
            .finish_non_exhaustive()
    }
}

/// What builds a [`CrmClient`].
#[derive(Debug, Clone)]
pub struct ClientConfig {
    pub base_url: String,
    pub api_key: Secret,
    pub version: String,
    pub location_id: String,
    pub clock: Clock,
    pub burst_limit: usize,
    pub burst_window: Duration,
    pub max_limiter_wait: Duration,
}

impl CrmClient {
    pub fn new(config: ClientConfig, metrics: Arc<CrmMetrics>) -> Result<Self, CrmError> {
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .user_agent(concat!("marketplace/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| CrmError::Network(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self {
            http,
            base_url: config.base_url.trim_end_matches('/').to_owned(),
            api_key: config.api_key,
            version: config.version,
            location_id: config.location_id,
            limiter: Limiter::new(config.clock, config.burst_limit, config.burst_window),
            metrics,
            field_ids: tokio::sync::RwLock::new(None),
            auth_failed: AtomicBool::new(false),
            max_limiter_wait: config.max_limiter_wait,
        })
    }

    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    pub fn location_id(&self) -> &str {
        &self.location_id
    }

    /// Whether the last answer of the CRM was a 401.
    pub fn auth_failed(&self) -> bool {
        self.auth_failed.load(Ordering::Relaxed)
    }

    /// Requests sent in the current burst window (metrics, bench).
    pub async fn requests_in_window(&self) -> usize {
        self.limiter.in_window().await
    }

    /// `POST /contacts/upsert`: finds the contact by e-mail in the location or creates it.
    /// Answers whether it is new and the contact.
    pub async fn upsert_contact(&self, mut body: Value) -> Result<(bool, Contact), CrmError> {
        body["locationId"] = Value::from(self.location_id.clone());
        #[derive(Deserialize)]
        struct Upserted {
            #[serde(default)]
            new: bool,
            contact: Contact,
        }
        let answer: Upserted = self
            .call(Method::POST, "/contacts/upsert", &[], Some(&body))
            .await?;
        Ok((answer.new, answer.contact))
    }

    pub async fn get_contact(&self, id: &str) -> Result<Contact, CrmError> {
        #[derive(Deserialize)]
        struct One {
            contact: Contact,
        }
        let path = format!("/contacts/{}", segment(id)?);
        let one: One = self.call(Method::GET, &path, &[], None).await?;
        Ok(one.contact)
    }

    /// `PUT /contacts/{id}`: never carries `locationId` or `source` (removed here whatever
    /// the caller built).
    pub async fn update_contact(&self, id: &str, mut body: Value) -> Result<Contact, CrmError> {
        if let Some(map) = body.as_object_mut() {
            map.remove("locationId");
            map.remove("source");
        }
        #[derive(Deserialize)]
        struct Updated {
            contact: Contact,
        }
        let path = format!("/contacts/{}", segment(id)?);
        let updated: Updated = self.call(Method::PUT, &path, &[], Some(&body)).await?;
        Ok(updated.contact)
    }

    pub async fn delete_contact(&self, id: &str) -> Result<(), CrmError> {
        let path = format!("/contacts/{}", segment(id)?);
        let _: Value = self.call(Method::DELETE, &path, &[], None).await?;
        Ok(())
    }

    /// `GET /contacts/search/duplicate`: the location's contact with this e-mail, if any.
    pub async fn find_by_email(&self, email: &str) -> Result<Option<Contact>, CrmError> {
        #[derive(Deserialize)]
        struct Found {
            contact: Option<Contact>,
        }
        let query = [("locationId", self.location_id.as_str()), ("email", email)];
        let found: Found = self
            .call(Method::GET, "/contacts/search/duplicate", &query, None)
            .await?;
        Ok(found.contact)
    }

    /// `POST /contacts/{id}/tags`; answers the contact's tags after.
    pub async fn add_tags(&self, id: &str, tags: &[String]) -> Result<Vec<String>, CrmError> {
        self.tags(Method::POST, id, tags).await
    }

    /// `DELETE /contacts/{id}/tags`; answers the contact's tags after.
    pub async fn remove_tags(&self, id: &str, tags: &[String]) -> Result<Vec<String>, CrmError> {
        self.tags(Method::DELETE, id, tags).await
    }

    async fn tags(
        &self,
        method: Method,
        id: &str,
        tags: &[String],
    ) -> Result<Vec<String>, CrmError> {
        #[derive(Deserialize)]
        struct Tags {
            #[serde(default)]
            tags: Vec<String>,
        }
        let path = format!("/contacts/{}/tags", segment(id)?);
        let body = json!({ "tags": tags });
        let answer: Tags = self.call(method, &path, &[], Some(&body)).await?;
        Ok(answer.tags)
    }

    /// `GET /locations/{id}/customFields?model=contact`.
    pub async fn custom_fields(&self) -> Result<Vec<CustomField>, CrmError> {
        #[derive(Deserialize)]
        struct Fields {
            #[serde(default, rename = "customFields")]
            custom_fields: Vec<CustomField>,
        }
        let path = format!("/locations/{}/customFields", segment(&self.location_id)?);
        let fields: Fields = self
            .call(Method::GET, &path, &[("model", "contact")], None)
            .await?;
        Ok(fields.custom_fields)
    }

    /// The id of each custom field by key (`id_platform`, …), asked once and cached.
    pub async fn field_ids(&self) -> Result<HashMap<String, String>, CrmError> {
        if let Some(ids) = self.field_ids.read().await.as_ref() {
            return Ok(ids.clone());
        }
        let mut cached = self.field_ids.write().await;
        if let Some(ids) = cached.as_ref() {
            return Ok(ids.clone());
        }
        let ids: HashMap<String, String> = self
            .custom_fields()
            .await?
            .into_iter()
            .filter_map(|f| {
                let key = f.field_key.as_deref()?;
                let key = key.strip_prefix("contact.").unwrap_or(key).to_owned();
                Some((key, f.id))
            })
            .collect();
        *cached = Some(ids.clone());
        Ok(ids)
    }

    /// `customFields` of a contact body: by id when the location reported one for the key,
    /// by `key` (`contact.<key>`) otherwise, as the API accepts both.
    pub async fn custom_fields_body(&self, values: &[(&str, Value)]) -> Result<Value, CrmError> {
        let ids = self.field_ids().await?;
        let fields: Vec<Value> = values
            .iter()
            .map(|(key, value)| match ids.get(*key) {
                Some(id) => json!({ "id": id, "field_value": value }),
                None => json!({ "key": format!("contact.{key}"), "field_value": value }),
            })
            .collect();
        Ok(Value::Array(fields))
    }

    /// `POST /opportunities/` (the location id added here).
    pub async fn create_opportunity(&self, mut body: Value) -> Result<Opportunity, CrmError> {
        body["locationId"] = Value::from(self.location_id.clone());
        #[derive(Deserialize)]
        struct One {
            opportunity: Opportunity,
        }
        let one: One = self
            .call(Method::POST, "/opportunities/", &[], Some(&body))
            .await?;
        Ok(one.opportunity)
    }

    pub async fn update_opportunity(&self, id: &str, body: Value) -> Result<Opportunity, CrmError> {
        #[derive(Deserialize)]
        struct One {
            opportunity: Opportunity,
        }
        let path = format!("/opportunities/{}", segment(id)?);
        let one: One = self.call(Method::PUT, &path, &[], Some(&body)).await?;
        Ok(one.opportunity)
    }

    /// One request: limiter slot, headers, timeout; a 429 is waited out as `Retry-After`
    /// (or the rate-limit interval) says, up to [`MAX_RATE_LIMIT_RETRIES`] times.
    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
        body: Option<&Value>,
    ) -> Result<T, CrmError> {
        let url = format!("{}{}", self.base_url, path);
        let mut rate_limited = 0;
        loop {
            let slot = self.limiter.acquire(self.max_limiter_wait).await?;
            let mut request = self
                .http
                .request(method.clone(), &url)
                .bearer_auth(self.api_key.expose())
                .header("Version", &self.version)
                .header("Accept", "application/json");
            if !query.is_empty() {
                request = request.query(query);
            }
            if let Some(body) = body {
                request = request.json(body);
            }
            let started = Instant::now();
            let sent = request.send().await;
            self.limiter.settle(slot).await;
            self.metrics.observe_latency(started.elapsed());
            let response = sent.map_err(|e| {
                CrmError::Network(if e.is_timeout() {
                    "timed out".into()
                } else {
                    e.without_url().to_string()
                })
            })?;
            let status = response.status();
            if status == StatusCode::TOO_MANY_REQUESTS && rate_limited < MAX_RATE_LIMIT_RETRIES {
                rate_limited += 1;
                self.metrics.rate_limited();
                let wait = retry_after(response.headers());
                tracing::info!(
                    path,
                    wait_ms = wait.as_millis() as u64,
                    "CRM rate limit: waiting"
                );
                // Every caller waits, not only this one; the limiter holds them back.
                self.limiter.pause(wait);
                continue;
            }
            if status.is_success() && remaining(response.headers()) == Some(0) {
                // The CRM's window is spent (another client of the location shares it).
                self.limiter.pause(retry_after(response.headers()));
            }
            let text = response
                .text()
                .await
                .map_err(|e| CrmError::Network(e.without_url().to_string()))?;
            if status.is_success() {
                self.auth_failed.store(false, Ordering::Relaxed);
                let text = if text.trim().is_empty() {
                    "{}"
                } else {
                    text.as_str()
                };
                return serde_json::from_str(text).map_err(|e| CrmError::Decode(e.to_string()));
            }
            return Err(self.error_of(status, &text));
        }
    }

    fn error_of(&self, status: StatusCode, text: &str) -> CrmError {
        let body: Option<ErrorBody> = serde_json::from_str(text).ok();
        let messages: Vec<String> = match body.as_ref().and_then(|b| b.message.clone()) {
            Some(Value::Array(items)) => items
                .into_iter()
                .map(|m| {
                    m.as_str()
                        .map(str::to_owned)
                        .unwrap_or_else(|| m.to_string())
                })
                .collect(),
            Some(Value::String(s)) => vec![s],
            _ => body.and_then(|b| b.error).into_iter().collect(),
        };
        let message = if messages.is_empty() {
            status.canonical_reason().unwrap_or("error").to_owned()
        } else {
            messages.join("; ")
        };
        match status.as_u16() {
            401 => {
                self.auth_failed.store(true, Ordering::Relaxed);
                CrmError::Unauthorized(message)
            }
            404 => CrmError::NotFound(message),
            422 => CrmError::Validation(messages),
            429 => CrmError::RateLimited(message),
            s => CrmError::Api { status: s, message },
        }
    }
}

/// How long a 429 asks to wait: `Retry-After` (seconds), else the rate-limit interval, else a
/// second; never more than [`MAX_RETRY_AFTER`].
fn retry_after(headers: &reqwest::header::HeaderMap) -> Duration {
    let number = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|v| v.is_finite() && *v >= 0.0)
    };
    let wait = number("retry-after")
        .map(Duration::from_secs_f64)
        .or_else(|| {
            number("x-ratelimit-interval-milliseconds")
                .map(|ms| Duration::from_secs_f64(ms / 1000.0))
        })
        .unwrap_or(Duration::from_secs(1));
    wait.min(MAX_RETRY_AFTER)
}

/// `X-RateLimit-Remaining`, when the answer carries it.
fn remaining(headers: &reqwest::header::HeaderMap) -> Option<u64> {
    headers
        .get("x-ratelimit-remaining")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
}

/// A path segment from an id; ids never hold `/`, `?` or `#`.
fn segment(id: &str) -> Result<&str, CrmError> {
    if id.is_empty() || id.contains(['/', '?', '#', '%']) || id.contains("..") {
        return Err(CrmError::NotFound(format!("invalid id `{id}`")));
    }
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_limiter_never_lets_more_than_the_limit_into_a_window() {
        let clock = Clock::system();
        let limiter = Limiter::new(clock.clone(), 3, Duration::from_millis(300));
        for _ in 0..3 {
            limiter.acquire(Duration::ZERO).await.unwrap();
        }
        assert_eq!(
            limiter.acquire(Duration::ZERO).await,
            Err(CrmError::Throttled)
        );
        let started = Instant::now();
        limiter.acquire(Duration::from_secs(2)).await.unwrap();
        assert!(started.elapsed() >= Duration::from_millis(250));
        clock.advance(chrono::Duration::seconds(1));
        assert_eq!(limiter.in_window().await, 0);

        // A pause the CRM asked for holds every request back.
        limiter.pause(Duration::from_millis(200));
        assert_eq!(
            limiter.acquire(Duration::ZERO).await,
            Err(CrmError::Throttled)
        );
        let started = Instant::now();
        limiter.acquire(Duration::from_secs(2)).await.unwrap();
        assert!(started.elapsed() >= Duration::from_millis(150));
    }

    #[tokio::test]
    async fn a_slow_answer_holds_its_slot_from_when_it_came_back() {
        let clock = Clock::system();
        let limiter = Limiter::new(clock.clone(), 1, Duration::from_secs(10));
        let slot = limiter.acquire(Duration::ZERO).await.unwrap();
        // The answer takes 8 s: the CRM may have counted it at any moment until then.
        clock.advance(chrono::Duration::seconds(8));
        limiter.settle(slot).await;
        clock.advance(chrono::Duration::seconds(3));
        assert_eq!(
            limiter.acquire(Duration::ZERO).await,
            Err(CrmError::Throttled),
            "10 s from the answer, not from the send"
        );
        clock.advance(chrono::Duration::seconds(8));
        assert!(limiter.acquire(Duration::ZERO).await.is_ok());
    }

    #[test]
    fn retry_after_reads_the_headers_and_is_capped() {
        let mut headers = reqwest::header::HeaderMap::new();
        assert_eq!(retry_after(&headers), Duration::from_secs(1));
        headers.insert("x-ratelimit-interval-milliseconds", "250".parse().unwrap());
        assert_eq!(retry_after(&headers), Duration::from_millis(250));
        headers.insert("retry-after", "2".parse().unwrap());
        assert_eq!(retry_after(&headers), Duration::from_secs(2));
        headers.insert("retry-after", "9999".parse().unwrap());
        assert_eq!(retry_after(&headers), MAX_RETRY_AFTER);
    }
}
