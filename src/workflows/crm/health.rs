//! The CRM health check (specification, "CRM integration"): checks 1 config, 2 sync logs (last
//! 100), 3 last sync, 4 API ping, 5 tag drift, 6 custom fields, 7 webhook coverage, 8
//! aggregate. `quick` runs 1–3 and 8, `full` all eight.

use std::time::Instant;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Value, json};
use utoipa::ToSchema;

use super::CrmService;
use crate::domain::crm as rules;
use crate::domain::crm::SyncStatus;
use crate::integrations::crm::CrmError;
use crate::store::crm as store;
use crate::workflows::error::FlowResult;

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Check {
    pub name: &'static str,
    /// `pass`, `fail` or `warning`.
    pub status: &'static str,
    pub message: String,
    #[schema(value_type = Object)]
    pub details: Value,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Summary {
    pub total: usize,
    pub passed: usize,
    pub warnings: usize,
    pub failed: usize,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct HealthReport {
    /// `healthy`, `degraded` or `unhealthy`.
    pub status: &'static str,
    pub checks: Vec<Check>,
    pub summary: Summary,
    pub checked_at: DateTime<Utc>,
}

fn check(
    name: &'static str,
    status: &'static str,
    message: impl Into<String>,
    details: Value,
) -> Check {
    Check {
        name,
        status,
        message: message.into(),
        details,
    }
}

/// Users whose tags are compared in the drift check.
const DRIFT_SAMPLE: i64 = 5;
/// Webhook event types the service uses.
const WEBHOOK_TYPES: [&str; 6] = [
    "ContactCreate",
    "ContactUpdate",
    "ContactTagUpdate",
    "ContactDndUpdate",
    "OpportunityCreate",
    "OpportunityUpdate",
];

impl CrmService {
    pub async fn health(&self, full: bool) -> FlowResult<HealthReport> {
        let mut checks = vec![
            self.check_config(),
            self.check_logs().await?,
            self.check_last_sync().await?,
        ];
        if full {
            checks.push(self.check_ping().await);
            checks.push(self.check_drift().await?);
            checks.push(self.check_fields().await);
            checks.push(self.check_webhooks().await?);
        }
        let failed = checks.iter().filter(|c| c.status == "fail").count();
        let warnings = checks.iter().filter(|c| c.status == "warning").count();
        let (status, message) = match (failed, warnings) {
            (0, 0) => ("pass", "every check passed".to_owned()),
            (0, w) => ("warning", format!("{w} check(s) with warnings")),
            (f, _) => ("fail", format!("{f} check(s) failed")),
        };
        checks.push(check(
            "aggregate",
            status,
            message,
            json!({ "checks_run": checks.len() }),
        ));
        let summary = Summary {
            total: checks.len(),
            passed: checks.iter().filter(|c| c.status == "pass").count(),
            warnings: checks.iter().filter(|c| c.status == "warning").count(),
            failed: checks.iter().filter(|c| c.status == "fail").count(),
        };
        let status = match (summary.failed, summary.warnings) {
            (0, 0) => "healthy",
            (0, _) => "degraded",
            _ => "unhealthy",
        };
        Ok(HealthReport {
            status,
            checks,
            summary,
            checked_at: self.clock.now(),
        })
    }

    fn check_config(&self) -> Check {
        let s = &self.settings;
        let details = json!({
            "enabled": self.client().is_some(),
            "sandbox": self.sandbox().is_some(),
            "api_base": self.client().map(|c| c.base_url().to_owned()),
            "api_version": s.crm_api_version,
            "location_id": self.client().map(|c| c.location_id().to_owned()),
            "pipeline_id": self.setup().pipeline_id,
            "webhook_secret_set": s.crm_webhook_secret.is_some(),
            "retry_enabled": s.crm_retry_enabled,
            "retry_interval_minutes": s.crm_retry_interval_minutes,
        });
        let Some(client) = self.client() else {
            return check(
                "config",
                "fail",
                self.setup().off_reason.unwrap_or("the CRM is off"),
                details,
            );
        };
        if client.auth_failed() {
            return check(
                "config",
                "fail",
                "the CRM rejected CRM_API_KEY (401): replace the key",
                details,
            );
        }
        let mut missing = Vec::new();
        if s.crm_webhook_secret.is_none() {
            missing.push("CRM_WEBHOOK_SECRET");
        }
        if self.setup().pipeline_id.is_none() {
            missing.push("CRM_PIPELINE_ID");
        }
        if missing.is_empty() {
            check("config", "pass", "the CRM is configured", details)
        } else {
            check(
                "config",
                "warning",
                format!("not set: {}", missing.join(", ")),
                details,
            )
        }
    }

    async fn check_logs(&self) -> FlowResult<Check> {
        let (statuses, queued) = {
            let mut conn = self.db.conn().await?;
            (
                store::recent_statuses(conn.exec(), 100).await?,
                store::QUEUE.pending_count(conn.exec()).await?,
            )
        };
        let count = |s| statuses.iter().filter(|x| **x == s).count();
        let (ok, failed, skipped) = (
            count(SyncStatus::Success),
            count(SyncStatus::Failed),
            count(SyncStatus::Skipped),
        );
        let details = json!({
            "total": statuses.len(), "success": ok, "failed": failed, "skipped": skipped,
            "queued": queued,
        });
        let attempted = ok + failed;
        Ok(if attempted == 0 {
            check(
                "sync_logs",
                "pass",
                "no synchronisation attempted among the last 100 entries",
                details,
            )
        } else {
            let rate = failed as f64 / attempted as f64;
            let message = format!("{failed} of the last {attempted} synchronisations failed");
            match rate {
                r if r >= 0.5 => check("sync_logs", "fail", message, details),
                r if r >= 0.1 => check("sync_logs", "warning", message, details),
                _ => check("sync_logs", "pass", message, details),
            }
        })
    }

    async fn check_last_sync(&self) -> FlowResult<Check> {
        let last = {
            let mut conn = self.db.conn().await?;
            store::last_success(conn.exec()).await?
        };
        let details = json!({ "last_success_at": last });
        Ok(match last {
            None => check(
                "last_sync",
                "warning",
                "no successful synchronisation yet",
                details,
            ),
            Some(at) if self.clock.now() - at > chrono::Duration::hours(24) => check(
                "last_sync",
                "warning",
                "no successful synchronisation in the last 24 hours",
                details,
            ),
            Some(_) => check(
                "last_sync",
                "pass",
                "a synchronisation succeeded in the last 24 hours",
                details,
            ),
        })
    }

    async fn check_ping(&self) -> Check {
        let Some(client) = self.client() else {
            return check("api_ping", "fail", "the CRM is off", json!({}));
        };
        let started = Instant::now();
        let result = client.custom_fields().await;
        let details = json!({ "latency_ms": started.elapsed().as_millis() as u64 });
        match result {
            Ok(_) => check("api_ping", "pass", "the CRM answered", details),
            Err(e @ CrmError::Unauthorized(_)) => check("api_ping", "fail", e.to_string(), details),
            Err(e) => check("api_ping", "fail", e.to_string(), details),
        }
    }

    async fn check_drift(&self) -> FlowResult<Check> {
        let Some(client) = self.client() else {
            return Ok(check("tag_drift", "fail", "the CRM is off", json!({})));
        };
        let users = {
            let mut conn = self.db.conn().await?;
            store::linked_users(conn.exec(), DRIFT_SAMPLE).await?
        };
        let mut drifted = Vec::new();
        let mut errors = Vec::new();
        for user_id in &users {
            let facts = {
                let mut conn = self.db.conn().await?;
                store::user_facts(conn.exec(), *user_id).await?
            };
            let Some(facts) = facts else { continue };
            let Some(contact) = facts.crm_id.clone() else {
                continue;
            };
            match client.get_contact(&contact).await {
                Ok(c) => {
                    let expected = rules::expected_tags(&facts);
                    let missing: Vec<&String> =
                        expected.iter().filter(|t| !c.tags.contains(t)).collect();
                    if !missing.is_empty() {
                        drifted.push(json!({ "user_id": user_id, "contact_id": contact, "missing": missing }));
                    }
                }
                Err(e) => errors.push(json!({ "user_id": user_id, "error": e.to_string() })),
            }
        }
        let details = json!({ "sampled": users.len(), "drifted": drifted, "errors": errors });
        Ok(if !errors.is_empty() {
            check("tag_drift", "fail", "contacts could not be read", details)
        } else if !drifted.is_empty() {
            check(
                "tag_drift",
                "warning",
                format!(
                    "{} of {} sampled contacts miss expected tags",
                    drifted.len(),
                    users.len()
                ),
                details,
            )
        } else {
            check(
                "tag_drift",
                "pass",
                format!("{} sampled contacts carry their expected tags", users.len()),
                details,
            )
        })
    }

    async fn check_fields(&self) -> Check {
        let Some(client) = self.client() else {
            return check("custom_fields", "fail", "the CRM is off", json!({}));
        };
        match client.custom_fields().await {
            Err(e) => check("custom_fields", "fail", e.to_string(), json!({})),
            Ok(fields) => {
                let keys: Vec<String> = fields
                    .iter()
                    .filter_map(|f| f.field_key.as_deref())
                    .map(|k| k.strip_prefix("contact.").unwrap_or(k).to_owned())
                    .collect();
                let missing: Vec<&str> = rules::REQUIRED_FIELDS
                    .into_iter()
                    .filter(|k| !keys.iter().any(|x| x == k))
                    .collect();
                let details = json!({ "defined": keys.len(), "missing": missing });
                if missing.is_empty() {
                    check(
                        "custom_fields",
                        "pass",
                        "the location defines the required custom fields",
                        details,
                    )
                } else {
                    check(
                        "custom_fields",
                        "fail",
                        format!("the location lacks custom fields: {}", missing.join(", ")),
                        details,
                    )
                }
            }
        }
    }

    async fn check_webhooks(&self) -> FlowResult<Check> {
        let since = self.clock.now() - chrono::Duration::days(7);
        let seen = {
            let mut conn = self.db.conn().await?;
            store::webhook_types_since(conn.exec(), since).await?
        };
        let missing: Vec<&str> = WEBHOOK_TYPES
            .into_iter()
            .filter(|t| !seen.iter().any(|(s, _)| s == t))
            .collect();
        let received: serde_json::Map<String, Value> =
            seen.into_iter().map(|(t, n)| (t, Value::from(n))).collect();
        let details = json!({ "received_last_7_days": received, "not_seen": missing });
        Ok(if self.settings.crm_webhook_secret.is_none() {
            check(
                "webhook_coverage",
                "fail",
                "CRM_WEBHOOK_SECRET is not set: inbound events are refused",
                details,
            )
        } else if missing.len() == WEBHOOK_TYPES.len() {
            check(
                "webhook_coverage",
                "warning",
                "no inbound CRM event in the last 7 days",
                details,
            )
        } else if !missing.is_empty() {
            check(
                "webhook_coverage",
                "warning",
                format!("not received in 7 days: {}", missing.join(", ")),
                details,
            )
        } else {
            check(
                "webhook_coverage",
                "pass",
                "every event type used was received in the last 7 days",
                details,
            )
        })
    }
}
