//! The CRM objects the service reads, as LeadConnector v2 shapes them (unknown fields kept
//! out; missing optional fields default).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A custom field's value on a contact: `{id, value}` when read (`field_value` when written).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FieldValue {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub key: Option<String>,
    #[serde(default, alias = "field_value")]
    pub value: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Contact {
    pub id: String,
    #[serde(default, rename = "locationId")]
    pub location_id: Option<String>,
    #[serde(default)]
    pub email: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default, rename = "customFields")]
    pub custom_fields: Vec<FieldValue>,
    #[serde(default)]
    pub dnd: Option<bool>,
}

impl Contact {
    /// The value of the custom field with this id.
    pub fn field(&self, id: &str) -> Option<&Value> {
        self.custom_fields
            .iter()
            .find(|f| f.id.as_deref() == Some(id))
            .map(|f| &f.value)
    }
}

/// An entry of `GET /locations/{id}/customFields`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CustomField {
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
    /// `contact.<key>`.
    #[serde(default, rename = "fieldKey")]
    pub field_key: Option<String>,
    #[serde(default, rename = "dataType")]
    pub data_type: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Opportunity {
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default, rename = "monetaryValue")]
    pub monetary_value: Option<f64>,
    #[serde(default, rename = "pipelineId")]
    pub pipeline_id: Option<String>,
    #[serde(default, rename = "pipelineStageId")]
    pub pipeline_stage_id: Option<String>,
    #[serde(default, rename = "contactId")]
    pub contact_id: Option<String>,
}
