//! Shapes of milestones and payments on the wire. Amounts are decimal numbers (DESIGN §10),
//! converted from the integer minor units they are kept in.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::domain::milestone::MilestoneStatus;
use crate::domain::money::minor_to_number;
use crate::domain::payment::{PaymentStatus, PayoutStatus};
use crate::http::error::ApiResult;
use crate::state::AppState;
use crate::store::milestones::Milestone;
use crate::store::payments::Payment;
use crate::workflows::invoice_terms::{self, Figures, Preview, Terms};

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
    /// The invoices this payment's release issues, from the parties' fiscal data as it
    /// stands (the issued documents: `GET /api/invoices?project_id=`). In the answers to the
    /// project's parties, not in webhooks' payloads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invoices: Option<InvoiceBreakdownView>,
}

impl From<Payment> for PaymentView {
    fn from(y: Payment) -> Self {
        PaymentView::with_terms(y, None)
    }
}

impl PaymentView {
    /// The view, with its invoices when the parties' terms are given.
    fn with_terms(y: Payment, terms: Option<&Terms>) -> Self {
        let invoices = terms.map(|t| t.preview(y.amount_minor, y.commission_minor).into());
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
            invoices,
        }
    }
}

/// Payments' views, each with its invoices (the parties' terms read once for all).
pub async fn payment_views(state: &AppState, ys: Vec<Payment>) -> ApiResult<Vec<PaymentView>> {
    let terms = invoice_terms::of_payments(state, &ys).await?;
    Ok(ys
        .into_iter()
        .map(|y| {
            let t = terms.get(&y.id);
            PaymentView::with_terms(y, t)
        })
        .collect())
}

/// One payment's view with its invoices.
pub async fn payment_view(state: &AppState, y: Payment) -> ApiResult<PaymentView> {
    let mut views = payment_views(state, vec![y]).await?;
    Ok(views.remove(0))
}

/// What the invoices of an amount the company pays will say (DESIGN-style table in
/// `docs/invoices.md`): the amount is the expert's invoice's amount payable — VAT included,
/// IRPF withheld — and the commission is the platform's invoice's total. Amounts in the
/// currency's units.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct InvoiceBreakdownView {
    /// The expert's invoice to the company, issued in the expert's name; `null` while a
    /// party's fiscal data is incomplete.
    pub expert_invoice: Option<InvoiceFiguresView>,
    /// The platform's invoice to the expert for the commission; `null` while the expert's
    /// fiscal data is incomplete, or when no commission is kept.
    pub platform_invoice: Option<InvoiceFiguresView>,
    /// The commission: the payment's once released, else at the expert's level now.
    pub commission: f64,
    /// Whose fiscal data the invoices wait for: `expert`, `company`.
    pub waiting_for_fiscal_data: Vec<String>,
}

/// One document's figures.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct InvoiceFiguresView {
    /// `domestic`, `reverse_charge`, `not_subject` or `eu_consumer`.
    pub tax_case: String,
    /// The legend the document carries for its tax case (empty when none).
    pub legend: String,
    pub base: f64,
    /// Percent.
    pub vat_rate: f64,
    pub vat: f64,
    /// Percent.
    pub irpf_rate: f64,
    pub irpf: f64,
    /// Base plus VAT.
    pub total: f64,
    /// The total less the IRPF withheld: the money that moves.
    pub payable: f64,
}

impl From<Figures> for InvoiceFiguresView {
    fn from(f: Figures) -> Self {
        let b = f.breakdown;
        Self {
            tax_case: f.case.as_str().to_owned(),
            legend: f.case.legend().to_owned(),
            base: minor_to_number(b.base_minor),
            vat_rate: minor_to_number(b.vat_rate_bp),
            vat: minor_to_number(b.vat_minor),
            irpf_rate: minor_to_number(b.irpf_rate_bp),
            irpf: minor_to_number(b.irpf_minor),
            total: minor_to_number(b.total_minor),
            payable: minor_to_number(b.payable_minor),
        }
    }
}

impl From<Preview> for InvoiceBreakdownView {
    fn from(p: Preview) -> Self {
        Self {
            expert_invoice: p.expert_invoice.map(Into::into),
            platform_invoice: p.platform_invoice.map(Into::into),
            commission: minor_to_number(p.commission_minor),
            waiting_for_fiscal_data: p.waiting.iter().map(|w| w.as_str().to_owned()).collect(),
        }
    }
}
