//! Transactional e-mail through the outbox: a transition lists the e-mails it causes in its
//! event's `email` array, and [`EmailConsumer`] sends them after commit, so an e-mail goes
//! out only for a change that happened.
//!
//! An entry is `{"to": "<address>", "template": "<template name>", "context": {…}}`; build it
//! with [`email`]. Delivery is at least once: each sent entry is remembered in the cache by
//! `(event id, index)`, so a retry after a partial failure resends only what did not go.

use async_trait::async_trait;
use futures_util::StreamExt as _;
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

use crate::integrations::cache::Cache;
use crate::integrations::mail::{Mailer, SENDS_AT_ONCE, Template};
use crate::store::events::Event;
use crate::workflows::outbox::Consumer;

/// The payload key whose array the consumer sends.
pub const EMAIL_KEY: &str = "email";

/// How long a sent entry is remembered (longer than any retry of its event).
const SENT_MEMORY: Duration = Duration::from_secs(30 * 24 * 3600);

/// An `email` entry.
pub fn email(to: &str, template: Template, context: Value) -> Value {
    json!({"to": to, "template": template.name(), "context": context})
}

#[derive(Debug, Deserialize)]
struct Entry {
    to: String,
    template: String,
    #[serde(default)]
    context: Value,
}

pub struct EmailConsumer {
    mailer: Mailer,
    cache: Arc<dyn Cache>,
}

impl EmailConsumer {
    pub fn new(mailer: Mailer, cache: Arc<dyn Cache>) -> Self {
        Self { mailer, cache }
    }
}

#[async_trait]
impl Consumer for EmailConsumer {
    fn name(&self) -> &'static str {
        "email"
    }

    fn wants(&self, _kind: &str) -> bool {
        true
    }

    async fn handle(&self, event: &Event) -> anyhow::Result<()> {
        let Some(list) = event.payload.0.get(EMAIL_KEY).and_then(Value::as_array) else {
            return Ok(());
        };
        for (index, raw) in list.iter().enumerate() {
            let entry = match Entry::deserialize(raw) {
                Ok(entry) => entry,
                Err(error) => {
                    // A retry cannot fix a malformed entry.
                    tracing::warn!(event_id = event.id, index, %error, "malformed email entry; skipped");
                    continue;
                }
            };
            let Some(template) = Template::from_name(&entry.template) else {
                tracing::warn!(event_id = event.id, index, template = %entry.template, "unknown e-mail template; skipped");
                continue;
            };
            let marker = format!("mail_sent:{}:{index}", event.id);
            if self.cache.get(&marker).await?.is_some() {
                continue;
            }
            // Named by the event and entry (time first, as the outbox sorts): a crash after
            // sending and before the marker sends the same message again, not a second one.
            let key = format!(
                "{}-event{}-{index}",
                event.created_at.format("%Y%m%dT%H%M%S%.6fZ"),
                event.id
            );
            self.mailer
                .send_keyed(&entry.to, template, entry.context, Some(key))
                .await?;
            self.cache.set(&marker, "1", SENT_MEMORY).await?;
        }
        Ok(())
    }

    /// A batch's events are sent [`SENDS_AT_ONCE`] at a time, the next starting as soon as
    /// one is done: they do not depend on one another, and each waits on the mail server or
    /// the disk rather than on a core.
    async fn handle_all(&self, events: &[&Event]) -> Vec<anyhow::Result<()>> {
        let sends: Vec<_> = events.iter().map(|event| self.handle(event)).collect();
        futures_util::stream::iter(sends)
            .buffered(SENDS_AT_ONCE)
            .collect()
            .await
    }
}
