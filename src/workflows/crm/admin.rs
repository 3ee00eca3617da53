//! What administrators ask of the CRM directly: a contact synchronised now, an opportunity,
//! tags, a contact's status, expected against actual tags, a diagnosis, a forced tag sync.

use serde::Serialize;
use utoipa::ToSchema;

use super::ops::Lookup;
use super::{CrmService, Op};
use crate::domain::crm::{self as rules, UserFacts};
use crate::domain::crm::{OpportunityStatus, SyncStatus};
use crate::integrations::crm::{Contact, CrmClient, CrmError};
use crate::store::crm::{self as store, LogFilter, OpportunityRecord, Outcome, SyncEntry};
use crate::workflows::error::{FlowError, FlowResult};

/// Expected against actual tags of a user's contact.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TagReport {
    pub user_id: i64,
    pub contact_id: Option<String>,
    pub expected: Vec<String>,
    /// Read live from the CRM.
    pub actual: Vec<String>,
    pub missing: Vec<String>,
    pub extra: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct Diagnosis {
    pub user_id: i64,
    pub linked: bool,
    pub contact_id: Option<String>,
    pub lookups: Vec<Lookup>,
    pub contact: Option<Contact>,
    pub last_syncs: Vec<SyncEntry>,
    pub problems: Vec<String>,
}

/// Everything known of one contact.
#[derive(Debug, Clone)]
pub struct ContactStatus {
    pub contact_id: String,
    pub contact: Option<Contact>,
    pub contact_error: Option<String>,
    pub user: Option<UserFacts>,
    pub tags: Vec<String>,
    pub opportunities: Vec<OpportunityRecord>,
    pub last_syncs: Vec<SyncEntry>,
}

fn unavailable(e: CrmError) -> FlowError {
    FlowError::unavailable(format!("the CRM did not answer as expected: {e}"))
}

impl CrmService {
    fn require(&self) -> FlowResult<std::sync::Arc<CrmClient>> {
        self.client().cloned().ok_or_else(|| {
            FlowError::unavailable(self.setup().off_reason.unwrap_or("the CRM is off"))
        })
    }

    pub async fn facts(&self, user_id: i64) -> FlowResult<UserFacts> {
        let mut conn = self.db.conn().await?;
        store::user_facts(conn.exec(), user_id)
            .await?
            .ok_or_else(|| FlowError::not_found("User not found"))
    }

    /// Runs `op` now (an administrator asked) and answers the log entry.
    pub async fn run_now(&self, user_id: Option<i64>, op: &Op) -> FlowResult<SyncEntry> {
        self.require()?;
        let (id, _) = self.run(user_id, op).await?.map_err(unavailable)?;
        let mut conn = self.db.conn().await?;
        store::find_log(conn.exec(), id)
            .await?
            .ok_or_else(|| FlowError::not_found("Sync log entry not found"))
    }

    /// A contact sync: the minimal contact when the user has no profile, else enriched.
    pub async fn sync_contact(&self, user_id: i64) -> FlowResult<SyncEntry> {
        let facts = self.facts(user_id).await?;
        let op = if facts.profiles.is_empty() {
            Op::RegistrationMinimal
        } else {
            Op::ProfileEnriched { profile_type: None }
        };
        self.run_now(Some(user_id), &op).await
    }

    /// The opportunity of a project, on its company's contact.
    pub async fn opportunity_for_project(
        &self,
        project_id: i64,
        name: Option<String>,
        status: OpportunityStatus,
    ) -> FlowResult<SyncEntry> {
        let brief = {
            let mut conn = self.db.conn().await?;
            store::project_brief(conn.exec(), project_id).await?
        };
        let (_, _, company) = brief.ok_or_else(|| FlowError::not_found("Project not found"))?;
        let company =
            company.ok_or_else(|| FlowError::rule("NO_COMPANY", "The project has no company"))?;
        if self.setup().pipeline_id.is_none() {
            return Err(FlowError::rule("NO_PIPELINE", "CRM_PIPELINE_ID is not set"));
        }
        self.run_now(
            Some(company),
            &Op::OpportunityCreate {
                project_id,
                name,
                status: status.to_string(),
            },
        )
        .await
    }

    pub async fn status(&self, contact_id: &str) -> FlowResult<ContactStatus> {
        let client = self.require()?;
        let (contact, contact_error) = match client.get_contact(contact_id).await {
            Ok(c) => (Some(c), None),
            Err(CrmError::NotFound(_)) => (None, Some("not found in the CRM".to_owned())),
            Err(e) => (None, Some(e.to_string())),
        };
        let mut conn = self.db.conn().await?;
        let user_id = match store::user_by_contact(conn.exec(), contact_id).await? {
            Some(id) => Some(id),
            None => store::contact_state(conn.exec(), contact_id)
                .await?
                .and_then(|s| s.user_id),
        };
        let user = match user_id {
            Some(id) => store::user_facts(conn.exec(), id).await?,
            None => None,
        };
        let stored = store::contact_state(conn.exec(), contact_id).await?;
        let opportunities = store::opportunities_of_contact(conn.exec(), contact_id).await?;
        let filter = LogFilter {
            contact_id: Some(contact_id.to_owned()),
            ..Default::default()
        };
        let (last_syncs, _) = store::list_logs(conn.exec(), &filter, 1, 10).await?;
        if contact.is_none() && user.is_none() && last_syncs.is_empty() && stored.is_none() {
            return Err(FlowError::not_found("Unknown CRM contact"));
        }
        let tags = match (&contact, stored.and_then(|s| s.tags)) {
            (Some(c), _) => c.tags.clone(),
            (None, Some(t)) => t.0,
            (None, None) => Vec::new(),
        };
        Ok(ContactStatus {
            contact_id: contact_id.to_owned(),
            contact,
            contact_error,
            user,
            tags,
            opportunities,
            last_syncs,
        })
    }

    /// Expected tags against the contact's actual tags, read live.
    pub async fn tag_report(&self, user_id: i64) -> FlowResult<TagReport> {
        let client = self.require()?;
        let facts = self.facts(user_id).await?;
        let expected: Vec<String> = rules::expected_tags(&facts).into_iter().collect();
        let (contact_id, _) = self.find_contact(&client, &facts).await?;
        let actual = match &contact_id {
            Some(id) => client.get_contact(id).await.map_err(unavailable)?.tags,
            None => Vec::new(),
        };
        let missing = expected
            .iter()
            .filter(|t| !actual.contains(t))
            .cloned()
            .collect();
        let extra = actual
            .iter()
            .filter(|t| !expected.contains(t))
            .cloned()
            .collect();
        Ok(TagReport {
            user_id,
            contact_id,
            expected,
            actual,
            missing,
            extra,
        })
    }

    /// Makes the contact's tags the expected ones (a PUT replaces them), logged as a
    /// `contact_update`; answers the report after.
    pub async fn sync_tags(&self, user_id: i64) -> FlowResult<TagReport> {
        let client = self.require()?;
        let facts = self.facts(user_id).await?;
        let expected: Vec<String> = rules::expected_tags(&facts).into_iter().collect();
        let (contact_id, _) = self.find_contact(&client, &facts).await?;
        let contact_id = contact_id.ok_or_else(|| {
            FlowError::not_found("The user has no CRM contact; sync the contact first")
        })?;
        let result = client
            .update_contact(&contact_id, serde_json::json!({ "tags": expected }))
            .await;
        let outcome = match &result {
            Ok(c) => Outcome {
                status: SyncStatus::Success,
                crm_contact_id: Some(contact_id.clone()),
                response: Some(serde_json::json!({ "tags": c.tags })),
                response_status: Some(200),
                error: None,
            },
            Err(e) => super::ops::outcome_failed(Some(contact_id.clone()), e),
        };
        {
            let mut conn = self.db.conn().await?;
            let payload = serde_json::json!({ "forced_tags": expected });
            store::insert_log(
                conn.exec(),
                Some(user_id),
                "contact_update",
                &payload,
                &outcome,
                self.clock.now(),
            )
            .await?;
        }
        self.setup().metrics.sync_outcome(outcome.status);
        result.map_err(unavailable)?;
        self.tag_report(user_id).await
    }

    pub async fn diagnose(&self, user_id: i64) -> FlowResult<Diagnosis> {
        let facts = self.facts(user_id).await?;
        let mut problems = Vec::new();
        let (contact_id, lookups, contact) = match self.client().cloned() {
            None => {
                problems.push(
                    self.setup()
                        .off_reason
                        .unwrap_or("the CRM is off")
                        .to_owned(),
                );
                (facts.crm_id.clone(), Vec::new(), None)
            }
            Some(client) => {
                let (id, lookups) = self.find_contact(&client, &facts).await?;
                let contact = match &id {
                    Some(id) => match client.get_contact(id).await {
                        Ok(c) => Some(c),
                        Err(e) => {
                            problems.push(format!("contact {id} could not be read: {e}"));
                            None
                        }
                    },
                    None => {
                        problems.push("no CRM contact found by crm_id, sync log or e-mail".into());
                        None
                    }
                };
                if let Some(c) = &contact {
                    let expected = rules::expected_tags(&facts);
                    let missing: Vec<&String> =
                        expected.iter().filter(|t| !c.tags.contains(t)).collect();
                    if !missing.is_empty() {
                        problems.push(format!(
                            "expected tags missing: {}",
                            missing
                                .iter()
                                .map(|s| s.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ));
                    }
                    if c.email
                        .as_deref()
                        .is_some_and(|e| !e.eq_ignore_ascii_case(&facts.email))
                    {
                        problems.push("the contact's e-mail differs from the user's".into());
                    }
                }
                (id, lookups, contact)
            }
        };
        let linked = {
            let mut conn = self.db.conn().await?;
            store::user_facts(conn.exec(), user_id)
                .await?
                .and_then(|f| f.crm_id)
                .is_some()
        };
        let (last_syncs, _) = {
            let mut conn = self.db.conn().await?;
            let filter = LogFilter {
                user_id: Some(user_id),
                ..Default::default()
            };
            store::list_logs(conn.exec(), &filter, 1, 10).await?
        };
        let failed = last_syncs
            .iter()
            .filter(|e| e.status == SyncStatus::Failed)
            .count();
        if failed > 0 {
            problems.push(format!(
                "{failed} of the last {} synchronisations failed",
                last_syncs.len()
            ));
        }
        if last_syncs.iter().any(|e| e.exhausted_at.is_some()) {
            problems.push("a synchronisation was given up after 5 attempts".into());
        }
        Ok(Diagnosis {
            user_id,
            linked,
            contact_id,
            lookups,
            contact,
            last_syncs,
            problems,
        })
    }
}
