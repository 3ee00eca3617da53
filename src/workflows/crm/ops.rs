//! The operations a sync-log entry names, and how each is performed against the CRM. An
//! operation carries only what the user's state cannot tell (tags asked for, a project, an
//! opportunity): performing it, first time or on a retry, reads the user as they are now.

use serde_json::{Value, json};

use super::CrmService;
use crate::domain::crm::{self as rules, UserFacts};
use crate::domain::crm::{OpportunityStatus, SyncStatus};
use crate::integrations::crm::{CrmClient, CrmError};
use crate::store::crm::{self as store, OpportunityRecord, Outcome};
use crate::workflows::error::FlowResult;

/// One synchronisation, named by its sync-log event type. Serialised (tagged `op`) in the CRM
/// queue.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// A fresh registration: minimal contact, registration tags, `id_platform`.
    RegistrationMinimal,
    /// A profile was created: contact enriched, registration tags replaced.
    ProfileEnriched {
        profile_type: Option<String>,
    },
    /// Anything else of the user changed (role, level, username, e-mail, profile, rating).
    ContactUpdate {
        rating: Option<f64>,
    },
    TagAdd {
        tags: Vec<String>,
    },
    TagRemove {
        tags: Vec<String>,
    },
    /// Final deletion: the contact (known from before anonymisation) is tagged.
    UserDeleted {
        contact_id: Option<String>,
        email: Option<String>,
    },
    OpportunityCreate {
        project_id: i64,
        name: Option<String>,
        status: String,
    },
    OpportunityUpdate {
        opportunity_id: String,
        status: Option<String>,
        monetary_value_minor: Option<i64>,
    },
}

impl Op {
    pub fn event_type(&self) -> &'static str {
        match self {
            Op::RegistrationMinimal => "registration_minimal",
            Op::ProfileEnriched { .. } => "profile_enriched",
            Op::ContactUpdate { .. } => "contact_update",
            Op::TagAdd { .. } => "tag_add",
            Op::TagRemove { .. } => "tag_remove",
            Op::UserDeleted { .. } => "user_deleted",
            Op::OpportunityCreate { .. } => "opportunity_create",
            Op::OpportunityUpdate { .. } => "opportunity_update",
        }
    }

    /// What the log keeps of the request: the operation's own parameters (no secrets; the
    /// contact's fields are read again from the user on a retry).
    pub fn payload(&self) -> Value {
        match self {
            Op::RegistrationMinimal => json!({}),
            Op::ProfileEnriched { profile_type } => json!({ "profile_type": profile_type }),
            Op::ContactUpdate { rating } => json!({ "rating": rating }),
            Op::TagAdd { tags } | Op::TagRemove { tags } => json!({ "tags": tags }),
            Op::UserDeleted { contact_id, .. } => json!({ "contact_id": contact_id }),
            Op::OpportunityCreate {
                project_id,
                name,
                status,
            } => {
                json!({ "project_id": project_id, "name": name, "status": status })
            }
            Op::OpportunityUpdate {
                opportunity_id,
                status,
                monetary_value_minor,
            } => json!({
                "opportunity_id": opportunity_id, "status": status,
                "monetary_value_minor": monetary_value_minor,
            }),
        }
    }

    /// The operation a stored entry names (for a retry).
    pub fn from_entry(entry: &store::SyncEntry) -> Option<Op> {
        let p = &entry.payload.0;
        let text = |k: &str| p.get(k).and_then(Value::as_str).map(str::to_owned);
        let tags = || -> Vec<String> {
            p.get("tags")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|t| t.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        };
        Some(match entry.event_type.as_str() {
            "registration_minimal" => Op::RegistrationMinimal,
            "profile_enriched" => Op::ProfileEnriched {
                profile_type: text("profile_type"),
            },
            "contact_update" => Op::ContactUpdate {
                rating: p.get("rating").and_then(Value::as_f64),
            },
            "tag_add" => Op::TagAdd { tags: tags() },
            "tag_remove" => Op::TagRemove { tags: tags() },
            "user_deleted" => Op::UserDeleted {
                contact_id: text("contact_id").or_else(|| entry.crm_contact_id.clone()),
                email: None,
            },
            "opportunity_create" => Op::OpportunityCreate {
                project_id: p.get("project_id")?.as_i64()?,
                name: text("name"),
                status: text("status").unwrap_or_else(|| OpportunityStatus::Open.to_string()),
            },
            "opportunity_update" => Op::OpportunityUpdate {
                opportunity_id: text("opportunity_id")?,
                status: text("status"),
                monetary_value_minor: p.get("monetary_value_minor").and_then(Value::as_i64),
            },
            _ => return None,
        })
    }

    /// Whether performing it needs the user to exist.
    pub fn needs_user(&self) -> bool {
        !matches!(self, Op::UserDeleted { .. } | Op::OpportunityUpdate { .. })
    }
}

/// How the contact of a user was found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct Lookup {
    /// `crm_id`, `sync_log` or `email_search`.
    pub method: &'static str,
    /// `found`, `not_found`, or the error.
    pub result: String,
    pub contact_id: Option<String>,
}

fn outcome_ok(contact: Option<String>, response: Value) -> Outcome {
    Outcome {
        status: SyncStatus::Success,
        crm_contact_id: contact,
        response: Some(response),
        response_status: Some(200),
        error: None,
    }
}

pub(crate) fn outcome_failed(contact: Option<String>, error: &CrmError) -> Outcome {
    Outcome {
        status: SyncStatus::Failed,
        crm_contact_id: contact,
        response: None,
        response_status: error.status().map(i64::from),
        error: Some(error.to_string()),
    }
}

pub(crate) fn outcome_skipped(contact: Option<String>, why: &str) -> Outcome {
    Outcome {
        status: SyncStatus::Skipped,
        crm_contact_id: contact,
        response: None,
        response_status: None,
        error: Some(why.to_owned()),
    }
}

impl CrmService {
    /// Performs `op` for `user_id` and writes the sync-log entry. A throttled call (the
    /// limiter's budget spent) is not logged: it is returned so the caller tries later.
    pub async fn run(
        &self,
        user_id: Option<i64>,
        op: &Op,
    ) -> FlowResult<Result<(i64, Outcome), CrmError>> {
        let outcome = match self.perform(user_id, op).await? {
            Err(CrmError::Throttled) => return Ok(Err(CrmError::Throttled)),
            Err(other) => outcome_failed(None, &other),
            Ok(outcome) => outcome,
        };
        let mut conn = self.db.conn().await?;
        let id = store::insert_log(
            conn.exec(),
            user_id,
            op.event_type(),
            &op.payload(),
            &outcome,
            self.clock.now(),
        )
        .await?;
        self.setup.metrics.sync_outcome(outcome.status);
        if outcome.status == SyncStatus::Failed {
            tracing::warn!(
                user_id,
                event_type = op.event_type(),
                error = outcome.error.as_deref().unwrap_or(""),
                "CRM sync failed; the retry scheduler will replay it"
            );
        }
        Ok(Ok((id, outcome)))
    }

    /// Performs `op`: `Ok(outcome)` for success, a logged failure or a skip; `Err` only for an
    /// error the caller must see before anything is logged (the limiter).
    pub(crate) async fn perform(
        &self,
        user_id: Option<i64>,
        op: &Op,
    ) -> FlowResult<Result<Outcome, CrmError>> {
        let Some(client) = self.client().cloned() else {
            return Ok(Ok(outcome_skipped(
                None,
                self.setup.off_reason.unwrap_or("the CRM is off"),
            )));
        };
        let facts = match user_id {
            Some(id) => {
                let mut conn = self.db.conn().await?;
                store::user_facts(conn.exec(), id).await?
            }
            None => None,
        };
        if op.needs_user() && facts.is_none() {
            return Ok(Ok(outcome_skipped(None, "the user no longer exists")));
        }
        let result = match op {
            Op::RegistrationMinimal => {
                self.register(&client, facts.as_ref().expect("checked"))
                    .await
            }
            Op::ProfileEnriched { .. } | Op::ContactUpdate { .. } => {
                let rating = match op {
                    Op::ContactUpdate { rating } => *rating,
                    _ => None,
                };
                self.enrich(&client, facts.as_ref().expect("checked"), rating)
                    .await
            }
            Op::TagAdd { tags } | Op::TagRemove { tags } => {
                let facts = facts.as_ref().expect("checked");
                let add = matches!(op, Op::TagAdd { .. });
                self.change_tags(&client, facts, tags, add).await
            }
            Op::UserDeleted { contact_id, email } => {
                self.tag_deleted(&client, contact_id.clone(), email.clone())
                    .await
            }
            Op::OpportunityCreate {
                project_id,
                name,
                status,
            } => {
                self.create_opportunity(
                    &client,
                    facts.as_ref().expect("checked"),
                    *project_id,
                    name.as_deref(),
                    status,
                )
                .await
            }
            Op::OpportunityUpdate {
                opportunity_id,
                status,
                monetary_value_minor,
            } => {
                self.update_opportunity(
                    &client,
                    opportunity_id,
                    status.as_deref(),
                    *monetary_value_minor,
                )
                .await
            }
        };
        Ok(match result {
            Ok(outcome) => Ok(outcome),
            Err(CrmError::Throttled) => Err(CrmError::Throttled),
            Err(e) => Ok(outcome_failed(facts.and_then(|f| f.crm_id), &e)),
        })
    }

    /// The user's contact: `crm_id` first, then the sync log, then a duplicate search by
    /// e-mail. A contact found by the last two is linked. Every lookup tried is reported.
    pub async fn find_contact(
        &self,
        client: &CrmClient,
        facts: &UserFacts,
    ) -> FlowResult<(Option<String>, Vec<Lookup>)> {
        let mut lookups = Vec::new();
        if let Some(id) = &facts.crm_id {
            lookups.push(Lookup {
                method: "crm_id",
                result: "found".into(),
                contact_id: Some(id.clone()),
            });
            return Ok((Some(id.clone()), lookups));
        }
        lookups.push(Lookup {
            method: "crm_id",
            result: "not_found".into(),
            contact_id: None,
        });
        let logged = {
            let mut conn = self.db.conn().await?;
            store::contact_from_log(conn.exec(), facts.user_id).await?
        };
        if let Some(id) = logged {
            lookups.push(Lookup {
                method: "sync_log",
                result: "found".into(),
                contact_id: Some(id.clone()),
            });
            self.link(facts.user_id, &id).await?;
            return Ok((Some(id), lookups));
        }
        lookups.push(Lookup {
            method: "sync_log",
            result: "not_found".into(),
            contact_id: None,
        });
        match client.find_by_email(&facts.email).await {
            Ok(Some(contact)) => {
                lookups.push(Lookup {
                    method: "email_search",
                    result: "found".into(),
                    contact_id: Some(contact.id.clone()),
                });
                self.link(facts.user_id, &contact.id).await?;
                Ok((Some(contact.id), lookups))
            }
            Ok(None) => {
                lookups.push(Lookup {
                    method: "email_search",
                    result: "not_found".into(),
                    contact_id: None,
                });
                Ok((None, lookups))
            }
            Err(e) => {
                lookups.push(Lookup {
                    method: "email_search",
                    result: e.to_string(),
                    contact_id: None,
                });
                Ok((None, lookups))
            }
        }
    }

    /// Stores `crm_id`; a contact already linked to another user is left alone (logged).
    pub(crate) async fn link(&self, user_id: i64, contact_id: &str) -> FlowResult<()> {
        let mut conn = self.db.conn().await?;
        match store::link_contact(conn.exec(), user_id, contact_id, self.clock.now()).await {
            Ok(_) => Ok(()),
            Err(e) if e.is_unique_violation() => {
                tracing::warn!(
                    user_id,
                    contact_id,
                    "CRM contact already linked to another user; not linked"
                );
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    async fn contact_or_create(
        &self,
        client: &CrmClient,
        facts: &UserFacts,
    ) -> Result<String, CrmError> {
        let found = self
            .find_contact(client, facts)
            .await
            .map_err(|e| CrmError::Network(e.to_string()))?
            .0;
        match found {
            Some(id) => Ok(id),
            None => {
                let outcome = self.register(client, facts).await?;
                outcome
                    .crm_contact_id
                    .ok_or_else(|| CrmError::Decode("upsert gave no contact".into()))
            }
        }
    }

    /// Upsert of the minimal contact (never replacing an existing contact's tags: they are
    /// added afterwards), then the tags the user's state expects. A contact linked already is
    /// updated instead (no location, no source).
    async fn register(&self, client: &CrmClient, facts: &UserFacts) -> Result<Outcome, CrmError> {
        let custom = client
            .custom_fields_body(&[(
                rules::FIELD_ID_PLATFORM,
                Value::from(facts.user_id.to_string()),
            )])
            .await?;
        let (new, id) = match &facts.crm_id {
            // Known already (a replay): an update, so no location and no source.
            Some(id) => {
                let body = json!({ "email": facts.email, "customFields": custom });
                (false, client.update_contact(id, body).await?.id)
            }
            None => {
                let body = json!({
                    "email": facts.email,
                    "name": facts.username,
                    "source": rules::source_tag(facts.source.as_deref()),
                    "customFields": custom,
                });
                let (new, contact) = client.upsert_contact(body).await?;
                self.link(facts.user_id, &contact.id)
                    .await
                    .map_err(|e| CrmError::Network(e.to_string()))?;
                (new, contact.id)
            }
        };
        let tags: Vec<String> = rules::expected_tags(facts).into_iter().collect();
        let after = client.add_tags(&id, &tags).await?;
        Ok(outcome_ok(
            Some(id.clone()),
            json!({ "new": new, "contact_id": id, "tags": after }),
        ))
    }

    /// PUT of the contact's fields (no location, no source, no tags), then the managed tag
    /// families made right: stale registration, pending and level tags removed, expected
    /// ones added. Other tags accumulate.
    async fn enrich(
        &self,
        client: &CrmClient,
        facts: &UserFacts,
        rating: Option<f64>,
    ) -> Result<Outcome, CrmError> {
        let id = self.contact_or_create(client, facts).await?;
        let with_rating = self.settings.crm_sync_internal_rating;
        let mut values = rules::custom_field_values(facts, with_rating);
        if with_rating && let Some(r) = rating.and_then(serde_json::Number::from_f64) {
            values.retain(|(k, _)| *k != rules::FIELD_INTERNAL_RATING);
            values.push((rules::FIELD_INTERNAL_RATING, Value::Number(r)));
        }
        let mut body = Value::Object(rules::standard_fields(facts));
        body["customFields"] = client.custom_fields_body(&values).await?;
        client.update_contact(&id, body).await?;
        let expected = rules::expected_tags(facts);
        let stale: Vec<String> = [
            rules::TAG_REGISTRATION_INCOMPLETE,
            rules::TAG_COMPANY_PENDING,
            rules::TAG_EXPERT_PENDING,
        ]
        .into_iter()
        .chain(rules::LEVEL_TAGS)
        .filter(|t| !expected.contains(*t))
        .map(str::to_owned)
        .collect();
        if !stale.is_empty() {
            client.remove_tags(&id, &stale).await?;
        }
        let tags: Vec<String> = expected.into_iter().collect();
        let after = client.add_tags(&id, &tags).await?;
        Ok(outcome_ok(
            Some(id),
            json!({ "fields": values.iter().map(|(k, _)| *k).collect::<Vec<_>>(), "tags": after }),
        ))
    }

    async fn change_tags(
        &self,
        client: &CrmClient,
        facts: &UserFacts,
        tags: &[String],
        add: bool,
    ) -> Result<Outcome, CrmError> {
        let id = self.contact_or_create(client, facts).await?;
        let after = if add {
            client.add_tags(&id, tags).await?
        } else {
            client.remove_tags(&id, tags).await?
        };
        Ok(outcome_ok(Some(id), json!({ "tags": after })))
    }

    async fn tag_deleted(
        &self,
        client: &CrmClient,
        contact_id: Option<String>,
        email: Option<String>,
    ) -> Result<Outcome, CrmError> {
        let id = match (contact_id, email) {
            (Some(id), _) => id,
            (None, Some(email)) => match client.find_by_email(&email).await? {
                Some(c) => c.id,
                None => return Ok(outcome_skipped(None, "no CRM contact for the deleted user")),
            },
            (None, None) => {
                return Ok(outcome_skipped(None, "no CRM contact for the deleted user"));
            }
        };
        let after = client
            .add_tags(&id, &[rules::TAG_USER_DELETED.to_owned()])
            .await?;
        Ok(outcome_ok(Some(id), json!({ "tags": after })))
    }

    async fn create_opportunity(
        &self,
        client: &CrmClient,
        facts: &UserFacts,
        project_id: i64,
        name: Option<&str>,
        status: &str,
    ) -> Result<Outcome, CrmError> {
        let brief = {
            let mut conn = self
                .db
                .conn()
                .await
                .map_err(|e| CrmError::Network(e.to_string()))?;
            store::project_brief(conn.exec(), project_id)
                .await
                .map_err(|e| CrmError::Network(e.to_string()))?
        };
        let Some((title, budget_minor, _)) = brief else {
            return Ok(outcome_skipped(None, "the project no longer exists"));
        };
        let Some(pipeline) = self.setup.pipeline_id.clone() else {
            return Ok(outcome_skipped(None, "CRM_PIPELINE_ID is not set"));
        };
        let contact = self.contact_or_create(client, facts).await?;
        let body = json!({
            "pipelineId": pipeline,
            "name": name.unwrap_or(&title),
            "status": status,
            "contactId": contact,
            "monetaryValue": rules::minor_to_number(budget_minor),
        });
        let opportunity = client.create_opportunity(body).await?;
        let now = self.clock.now();
        let record = OpportunityRecord {
            id: opportunity.id.clone(),
            contact_id: Some(contact.clone()),
            user_id: Some(facts.user_id),
            project_id: Some(project_id),
            name: opportunity.name.clone().or_else(|| Some(title.clone())),
            status: opportunity
                .status
                .clone()
                .unwrap_or_else(|| status.to_owned()),
            monetary_value_minor: Some(budget_minor),
            pipeline_id: opportunity.pipeline_id.clone().or(Some(pipeline)),
            pipeline_stage_id: opportunity.pipeline_stage_id.clone(),
            created_at: now,
            updated_at: now,
        };
        let mut conn = self
            .db
            .conn()
            .await
            .map_err(|e| CrmError::Network(e.to_string()))?;
        store::save_opportunity(conn.exec(), &record)
            .await
            .map_err(|e| CrmError::Network(e.to_string()))?;
        Ok(outcome_ok(
            Some(contact),
            json!({ "opportunity_id": opportunity.id }),
        ))
    }

    async fn update_opportunity(
        &self,
        client: &CrmClient,
        id: &str,
        status: Option<&str>,
        value_minor: Option<i64>,
    ) -> Result<Outcome, CrmError> {
        let mut body = json!({});
        if let Some(s) = status {
            body["status"] = Value::from(s);
        }
        if let Some(v) = value_minor {
            body["monetaryValue"] = rules::minor_to_number(v);
        }
        let opportunity = client.update_opportunity(id, body).await?;
        Ok(outcome_ok(
            opportunity.contact_id.clone(),
            json!({ "opportunity_id": opportunity.id, "status": opportunity.status }),
        ))
    }
}
