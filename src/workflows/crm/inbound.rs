//! Inbound CRM webhooks (`POST /api/webhooks/crm`): the signature is checked first, the
//! event stored by its `webhookId` and answered; it is applied afterwards. A repeated
//! `webhookId` has no second effect; another location or an unknown contact is ignored and
//! logged.

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::CrmService;
use crate::domain::crm as rules;
use crate::domain::crm::OpportunityStatus;
use crate::integrations::crm::webhook;
use crate::store::crm::{self as store, OpportunityRecord};
use crate::workflows::error::FlowResult;

/// How far an event's `timestamp` may be from now.
pub const TOLERANCE: chrono::Duration = chrono::Duration::minutes(5);

/// Why an inbound event was refused.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error("missing or invalid signature")]
    Signature,
    #[error("{0}")]
    Invalid(&'static str),
    #[error("the event's timestamp is more than 5 minutes from now")]
    Stale,
}

/// A verified, stored event waiting to be applied.
#[derive(Debug, Clone)]
pub struct Received {
    pub webhook_id: String,
    pub payload: Value,
}

fn timestamp_of(v: &Value) -> Option<DateTime<Utc>> {
    match v {
        Value::String(s) => DateTime::parse_from_rfc3339(s)
            .ok()
            .map(|t| t.with_timezone(&Utc)),
        Value::Number(n) => {
            let n = n.as_i64()?;
            // Milliseconds since the epoch, or seconds.
            if n > 100_000_000_000 {
                DateTime::from_timestamp_millis(n)
            } else {
                DateTime::from_timestamp(n, 0)
            }
        }
        _ => None,
    }
}

impl CrmService {
    /// Verifies and stores an event. `Ok(None)`: a repeated `webhookId`, nothing to do.
    pub async fn receive_webhook(
        &self,
        signature: Option<&str>,
        body: &[u8],
    ) -> FlowResult<Result<Option<Received>, Refused>> {
        let Some(secret) = &self.setup().webhook_secret else {
            return Ok(Err(Refused::Signature));
        };
        if !webhook::verify(secret, signature, body) {
            return Ok(Err(Refused::Signature));
        }
        let Ok(payload) = serde_json::from_slice::<Value>(body) else {
            return Ok(Err(Refused::Invalid("the body is not a JSON object")));
        };
        let text = |k: &str| payload.get(k).and_then(Value::as_str).map(str::to_owned);
        let (Some(kind), Some(webhook_id)) = (text("type"), text("webhookId")) else {
            return Ok(Err(Refused::Invalid("`type` and `webhookId` are required")));
        };
        let Some(at) = payload.get("timestamp").and_then(timestamp_of) else {
            return Ok(Err(Refused::Invalid("`timestamp` is required")));
        };
        let now = self.clock.now();
        if (now - at).abs() > TOLERANCE {
            return Ok(Err(Refused::Stale));
        }
        let contact = match kind.as_str() {
            k if k.starts_with("Opportunity") => text("contactId"),
            _ => text("id").or_else(|| text("contactId")),
        };
        let mut conn = self.db.conn().await?;
        let fresh = store::insert_webhook(
            conn.exec(),
            &webhook_id,
            &kind,
            text("locationId").as_deref(),
            contact.as_deref(),
            &payload,
            now,
        )
        .await?;
        Ok(Ok(fresh.then_some(Received {
            webhook_id,
            payload,
        })))
    }

    /// Applies a stored event once; answers its outcome (`applied` or `ignored: …`).
    pub async fn apply_webhook(&self, event: &Received) -> FlowResult<String> {
        let outcome = self.effect(&event.payload).await?;
        if outcome != "applied" {
            tracing::info!(webhook_id = %event.webhook_id, outcome, "CRM webhook ignored");
        }
        let mut conn = self.db.conn().await?;
        store::finish_webhook(conn.exec(), &event.webhook_id, &outcome, self.clock.now()).await?;
        Ok(outcome)
    }

    /// Applies events stored but never applied (the process stopped in between); run by the
    /// retry scheduler. Answers how many.
    pub async fn sweep_webhooks(&self) -> FlowResult<usize> {
        let stale = {
            let mut conn = self.db.conn().await?;
            store::unprocessed_webhooks(
                conn.exec(),
                self.clock.now() - chrono::Duration::minutes(1),
                100,
            )
            .await?
        };
        let count = stale.len();
        for (webhook_id, payload) in stale {
            self.apply_webhook(&Received {
                webhook_id,
                payload: payload.0,
            })
            .await?;
        }
        Ok(count)
    }

    async fn effect(&self, p: &Value) -> FlowResult<String> {
        let text = |k: &str| p.get(k).and_then(Value::as_str).map(str::to_owned);
        let kind = text("type").unwrap_or_default();
        let ours = self
            .client()
            .map(|c| c.location_id().to_owned())
            .or_else(|| self.settings.crm_location_id.clone());
        if text("locationId").is_some_and(|l| Some(&l) != ours.as_ref()) || ours.is_none() {
            return Ok("ignored: another location".into());
        }
        let now = self.clock.now();
        let mut conn = self.db.conn().await?;
        let contact_id = if kind.starts_with("Opportunity") {
            text("contactId")
        } else {
            text("id")
        };
        let Some(contact_id) = contact_id else {
            return Ok("ignored: no contact id".into());
        };
        let mut user = store::user_by_contact(conn.exec(), &contact_id).await?;
        let tags: Option<Vec<String>> = p.get("tags").and_then(Value::as_array).map(|a| {
            a.iter()
                .filter_map(|t| t.as_str().map(str::to_owned))
                .collect()
        });
        match kind.as_str() {
            "ContactCreate" | "ContactUpdate" => {
                if user.is_none() {
                    user = self.user_of_contact_event(p).await?;
                    let Some(id) = user else {
                        return Ok("ignored: unknown contact".into());
                    };
                    drop(conn);
                    self.link(id, &contact_id).await?;
                    conn = self.db.conn().await?;
                }
                store::save_contact_state(
                    conn.exec(),
                    &contact_id,
                    user,
                    tags.as_deref(),
                    None,
                    now,
                )
                .await?;
            }
            "ContactTagUpdate" => {
                let Some(id) = user else {
                    return Ok("ignored: unknown contact".into());
                };
                let Some(tags) = tags else {
                    return Ok("ignored: no tags".into());
                };
                store::save_contact_state(
                    conn.exec(),
                    &contact_id,
                    Some(id),
                    Some(&tags),
                    None,
                    now,
                )
                .await?;
            }
            "ContactDndUpdate" => {
                let Some(id) = user else {
                    return Ok("ignored: unknown contact".into());
                };
                let email_status = p
                    .pointer("/dndSettings/Email/status")
                    .and_then(Value::as_str);
                let email_dnd = match email_status {
                    Some(status) => crate::domain::crm::dnd_is_on(status),
                    None => p.get("dnd").and_then(Value::as_bool).unwrap_or(false),
                };
                store::save_contact_state(
                    conn.exec(),
                    &contact_id,
                    Some(id),
                    None,
                    Some(email_dnd),
                    now,
                )
                .await?;
                if email_dnd && store::withdraw_marketing(conn.exec(), id, now).await? {
                    tracing::info!(
                        user_id = id,
                        "marketing consent withdrawn: e-mail DND set in the CRM"
                    );
                }
            }
            "OpportunityCreate" | "OpportunityUpdate" => {
                let Some(id) = user else {
                    return Ok("ignored: unknown contact".into());
                };
                let Some(opportunity_id) = text("id") else {
                    return Ok("ignored: no opportunity id".into());
                };
                let value = p
                    .get("monetaryValue")
                    .and_then(Value::as_f64)
                    .map(|v| (v * 100.0).round() as i64);
                store::save_opportunity(
                    conn.exec(),
                    &OpportunityRecord {
                        id: opportunity_id,
                        contact_id: Some(contact_id),
                        user_id: Some(id),
                        project_id: None,
                        name: text("name"),
                        status: text("status")
                            .unwrap_or_else(|| OpportunityStatus::Open.to_string()),
                        monetary_value_minor: value,
                        pipeline_id: text("pipelineId"),
                        pipeline_stage_id: text("pipelineStageId"),
                        created_at: now,
                        updated_at: now,
                    },
                )
                .await?;
            }
            _ => return Ok(format!("ignored: event type {kind} not used")),
        }
        Ok("applied".into())
    }

    /// The user a contact event names: `id_platform` among its custom fields, else its e-mail.
    async fn user_of_contact_event(&self, p: &Value) -> FlowResult<Option<i64>> {
        let field_id = match self.client() {
            Some(client) => client
                .field_ids()
                .await
                .ok()
                .and_then(|ids| ids.get(rules::FIELD_ID_PLATFORM).cloned()),
            None => None,
        };
        let platform_id = p
            .get("customFields")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|f| {
                let id = f.get("id").and_then(Value::as_str);
                let key = f.get("key").and_then(Value::as_str);
                (id.is_some() && id == field_id.as_deref())
                    || key == Some("contact.id_platform")
                    || key == Some("id_platform")
            })
            .and_then(|f| f.get("value").or_else(|| f.get("field_value")))
            .and_then(|v| {
                v.as_str()
                    .and_then(|s| s.parse::<i64>().ok())
                    .or_else(|| v.as_i64())
            });
        let mut conn = self.db.conn().await?;
        if let Some(id) = platform_id
            && store::user_facts(conn.exec(), id).await?.is_some()
        {
            return Ok(Some(id));
        }
        match p.get("email").and_then(Value::as_str) {
            Some(email) => Ok(store::user_by_email(conn.exec(), email).await?),
            None => Ok(None),
        }
    }
}
