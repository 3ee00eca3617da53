//! The outbox consumer: one delivery row per (event, concerned user with a webhook address,
//! type), written once whatever how often the event is replayed: `pending` for an enabled
//! endpoint, `disabled` (never sent, kept for the catch-up) for one that is off.

use async_trait::async_trait;
use serde_json::{Value, json};
use std::sync::Arc;

use crate::clock::Clock;
use crate::domain::webhook_rules::WebhookDeliveryState;
use crate::store::events::Event;
use crate::store::webhook_deliveries::{self, NewDelivery};
use crate::store::{Db, webhooks};
use crate::workflows::outbox::{self, Consumer};

/// One user an event concerns, the webhook type it reaches them as, and the resource as the
/// REST API shows it to that user.
#[derive(Debug, Clone, PartialEq)]
pub struct Recipient {
    pub user_id: i64,
    pub event_type: &'static str,
    pub data: Value,
}

/// Who an event concerns and what each of them sees: built by the HTTP layer with the same
/// views its routes answer with (the workflows cannot import them).
#[async_trait]
pub trait EventViews: Send + Sync + 'static {
    /// Whether events of `kind` may concern anyone.
    fn wants(&self, kind: &str) -> bool;
    async fn recipients(&self, db: &Db, event: &Event) -> anyhow::Result<Vec<Recipient>>;
}

/// The stable id of the delivery of `event_type` for event `event_id` to `user_id`: the body's
/// `id` and the `webhook-id` header, the same on every attempt and redelivery.
pub fn message_id(event_id: i64, user_id: i64, event_type: &str) -> String {
    format!("msg_{event_id}_{user_id}_{}", event_type.replace('.', "_"))
}

pub struct WebhookConsumer {
    db: Db,
    clock: Clock,
    views: Arc<dyn EventViews>,
    jobs: actors::Jobs,
}

impl WebhookConsumer {
    pub fn new(db: Db, clock: Clock, views: Arc<dyn EventViews>, jobs: actors::Jobs) -> Self {
        Self {
            db,
            clock,
            views,
            jobs,
        }
    }
}

#[async_trait]
impl Consumer for WebhookConsumer {
    fn name(&self) -> &'static str {
        "webhooks"
    }

    fn wants(&self, kind: &str) -> bool {
        self.views.wants(kind)
    }

    async fn handle(&self, event: &Event) -> anyhow::Result<()> {
        let recipients = self.views.recipients(&self.db, event).await?;
        if recipients.is_empty() {
            return Ok(());
        }
        let mut conn = self.db.conn().await?;
        let now = self.clock.now();
        let users: Vec<i64> = recipients.iter().map(|r| r.user_id).collect();
        let configured = webhooks::configured_among(conn.exec(), &users).await?;
        let mut queued = 0;
        for r in recipients {
            // Every user with a webhook address gets the event in their log, so a receiver
            // that was off catches up on it (`GET /api/users/me/events`); only an enabled
            // one is sent it.
            let Some(&(_, enabled)) = configured.iter().find(|(id, _)| *id == r.user_id) else {
                continue;
            };
            let state = if enabled {
                WebhookDeliveryState::Pending
            } else {
                WebhookDeliveryState::Disabled
            };
            let id = message_id(event.id, r.user_id, r.event_type);
            let body = json!({
                "id": id,
                "type": r.event_type,
                "created_at": event.created_at,
                "data": r.data,
            })
            .to_string();
            let inserted = webhook_deliveries::insert(
                conn.exec(),
                &NewDelivery {
                    message_id: &id,
                    user_id: r.user_id,
                    event_id: Some(event.id),
                    event_type: r.event_type,
                    body: &body,
                    state,
                },
                now,
            )
            .await?;
            queued += usize::from(inserted.is_some() && enabled);
        }
        if queued > 0 {
            self.jobs.wake(super::JOB);
        }
        Ok(())
    }

    /// One by one, in order; but when no user has a webhook address at all (one query), a
    /// batch needs none of its events' lookups.
    async fn handle_all(&self, events: &[&Event]) -> Vec<anyhow::Result<()>> {
        let any = match self.db.conn().await {
            Ok(mut conn) => webhooks::any_configured(conn.exec()).await,
            Err(e) => Err(e),
        };
        match any {
            Ok(true) => outbox::one_by_one(self, events).await,
            Ok(false) => outbox::alike(events, Ok(())),
            Err(e) => outbox::alike(events, Err(format!("webhook receivers not read: {e}"))),
        }
    }
}
