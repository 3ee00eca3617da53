//! The outbox consumer that keeps the CRM in step with the users: each domain event below
//! becomes one [`Op`], recorded in the CRM queue (once per event) for the CRM worker, so the
//! outbox never waits on the CRM. A failed sync is logged by the worker and left to the retry
//! scheduler.

use async_trait::async_trait;
use serde_json::Value;

use super::{CrmService, Op};
use crate::domain::crm as rules;
use crate::store::events::Event;

/// Event kinds the CRM follows.
const KINDS: [&str; 11] = [
    "user.registered",
    "profile.created",
    "profile.updated",
    "profile.expert_level_changed",
    "user.role_added",
    "user.username_changed",
    "user.email_changed",
    "user.deletion_requested",
    "user.deletion_confirmed",
    "user.deleted",
    "user.internal_rating_changed",
];

pub struct CrmConsumer {
    crm: CrmService,
}

impl CrmConsumer {
    pub fn new(crm: CrmService) -> Self {
        Self { crm }
    }
}

/// The operation an event asks for, and the user it is about.
pub fn op_of(event: &Event, sync_rating: bool) -> Option<(Option<i64>, Op)> {
    let p = &event.payload.0;
    let user_id = p
        .get("user_id")
        .and_then(Value::as_i64)
        .or(event.aggregate_id.filter(|_| event.aggregate == "user"));
    let text = |k: &str| p.get(k).and_then(Value::as_str).map(str::to_owned);
    let op = match event.kind.as_str() {
        "user.registered" => Op::RegistrationMinimal,
        "profile.created" => Op::ProfileEnriched {
            profile_type: text("profile_type"),
        },
        "profile.updated"
        | "profile.expert_level_changed"
        | "user.role_added"
        | "user.username_changed"
        | "user.email_changed" => Op::ContactUpdate { rating: None },
        "user.internal_rating_changed" if sync_rating => Op::ContactUpdate {
            rating: p.get("rating").and_then(Value::as_f64),
        },
        "user.deletion_requested" => Op::TagAdd {
            tags: vec![rules::TAG_DELETION_REQUESTED.into()],
        },
        "user.deletion_confirmed" => Op::TagAdd {
            tags: vec![rules::TAG_DELETION_CONFIRMED.into()],
        },
        "user.deleted" => Op::UserDeleted {
            contact_id: text("crm_id"),
            email: text("email"),
        },
        _ => return None,
    };
    Some((user_id, op))
}

#[async_trait]
impl crate::workflows::outbox::Consumer for CrmConsumer {
    fn name(&self) -> &'static str {
        "crm"
    }

    fn wants(&self, kind: &str) -> bool {
        // With the CRM off nothing is sent; the health check says why.
        self.crm.client().is_some() && KINDS.contains(&kind)
    }

    async fn handle(&self, event: &Event) -> anyhow::Result<()> {
        let Some((user_id, op)) = op_of(event, self.crm.settings.crm_sync_internal_rating) else {
            return Ok(());
        };
        if op.needs_user() && user_id.is_none() {
            tracing::warn!(event_id = event.id, kind = %event.kind, "CRM: event names no user; ignored");
            return Ok(());
        }
        super::worker::enqueue(&self.crm, Some(event.id), user_id, &op).await?;
        Ok(())
    }
}
