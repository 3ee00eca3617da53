//! Shapes of milestones and payments on the wire. Amounts are decimal numbers (DESIGN §10),
//! converted from the integer minor units they are kept in.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::domain::milestone::MilestoneStatus;
use crate::domain::money::minor_to_number;
use crate::domain::payment::{PaymentStatus, PayoutStatus};
use crate::store::milestones::Milestone;
use crate::store::payments::Payment;

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct MilestoneView {
    pub id: i64,
    pub project_id: i64,
    /// Order within the project, from 1.
    pub position: i64,
    pub title: String,
    pub description: Option<String>,
    pub amount: f64,
    pub currency: String,
    pub due_date: Option<DateTime<Utc>>,
    /// `awaiting_payment`, `pending`, `in_progress`, `completed`, `approved`, `rejected`,
    /// `cancelled`.
    #[schema(value_type = String)]
    pub status: MilestoneStatus,
    pub rejection_count: i64,
    pub started_at: Option<DateTime<Utc>>,
    pub approved_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// While `awaiting_payment`: when the company is reminded to fund it
    /// (`FUNDING_REMINDER_DAYS`); the expert may end the engagement 14 days after it began
    /// waiting.
    pub funding_due_at: Option<DateTime<Utc>>,
}

impl From<Milestone> for MilestoneView {
    fn from(m: Milestone) -> Self {
        let waits = m.status == MilestoneStatus::AwaitingPayment;
        let funding_due_at = waits.then_some(m.funding_due_at).flatten();
        Self {
            id: m.id,
            project_id: m.project_id,
            position: m.position,
            title: m.title,
            description: m.description,
            amount: minor_to_number(m.amount_minor),
            currency: m.currency,
            due_date: m.due_date,
            status: m.status,
            rejection_count: m.rejection_count,
            started_at: m.started_at,
            approved_at: m.approved_at,
            created_at: m.created_at,
            updated_at: m.updated_at,
            funding_due_at,
        }
    }
}

/// A payment with every field of the specification's Payment resource.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PaymentView {
    pub id: i64,
    pub project_id: i64,
    pub milestone_id: Option<i64>,
    pub company_id: Option<i64>,
    pub expert_id: Option<i64>,
    pub amount: f64,
    pub currency: String,
    pub processor_payment_intent_id: Option<String>,
    pub processor_charge_id: Option<String>,
    /// `pending`, `held`, `released`, `refunded`, `failed`, `disputed`.
    #[schema(value_type = String)]
    pub status: PaymentStatus,
    pub commission_amount: Option<f64>,
    pub expert_level_used: Option<String>,
    pub application_fee_amount: Option<f64>,
    pub expert_amount: Option<f64>,
    pub processor_transfer_id: Option<String>,
    /// `pending`, `transferred`, `failed`.
    #[schema(value_type = String)]
    pub payout_status: PayoutStatus,
    #[schema(value_type = Object)]
    pub payment_metadata: Value,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub held_at: Option<DateTime<Utc>>,
    pub released_at: Option<DateTime<Utc>>,
    pub refunded_at: Option<DateTime<Utc>>,
    pub capture_before: Option<DateTime<Utc>>,
    pub failure_reason: Option<String>,
    pub refund_reason: Option<String>,
}

impl From<Payment> for PaymentView {
    fn from(y: Payment) -> Self {
        Self {
            id: y.id,
            project_id: y.project_id,
            milestone_id: y.milestone_id,
            company_id: y.company_id,
            expert_id: y.expert_id,
            amount: minor_to_number(y.amount_minor),
            currency: y.currency,
            processor_payment_intent_id: y.processor_payment_intent_id,
            processor_charge_id: y.processor_charge_id,
            status: y.status,
            commission_amount: y.commission_minor.map(minor_to_number),
            expert_level_used: y.expert_level_used,
            application_fee_amount: y.application_fee_minor.map(minor_to_number),
            expert_amount: y.expert_amount_minor.map(minor_to_number),
            processor_transfer_id: y.processor_transfer_id,
            payout_status: y.payout_status,
            payment_metadata: y.payment_metadata.0,
            created_at: y.created_at,
            updated_at: y.updated_at,
            held_at: y.held_at,
            released_at: y.released_at,
            refunded_at: y.refunded_at,
            capture_before: y.capture_before,
            failure_reason: y.failure_reason,
            refund_reason: y.refund_reason,
        }
    }
}
