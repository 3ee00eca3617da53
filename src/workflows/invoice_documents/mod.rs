//! An issued invoice or credit note as people read it: its canonical content (what its
//! record's hash covers), its PDF, and the address its QR code opens. Below `invoices` (which
//! issues them) and `emails` (which attaches the PDF when it sends).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::domain::invoice::{Breakdown, DocumentKind, InvoiceRole, TaxCase};
use crate::store::invoices::Invoice;
use crate::workflows::error::{FlowError, FlowResult};

mod pdf;

/// A party as the document shows it (the fiscal data at the time of issue).
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PartyOnDocument {
    pub name: String,
    pub tax_id: String,
    pub vat_number: Option<String>,
    pub address: String,
    pub postal_code: String,
    pub city: String,
    pub province: Option<String>,
    pub country: String,
}

/// The canonical content of an issued document: what its record's hash covers, and what
/// the PDF and the API show. Field order is fixed by this type.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Content {
    pub number: String,
    pub kind: DocumentKind,
    pub role: InvoiceRole,
    pub issued_at: DateTime<Utc>,
    /// Self-billing: issued by the platform on the issuer's behalf.
    pub self_billed: bool,
    /// When the expert accepted self-billing (their invoices only).
    #[serde(default)]
    pub self_billing_agreed_at: Option<DateTime<Utc>>,
    pub issuer: PartyOnDocument,
    pub recipient: PartyOnDocument,
    pub description: String,
    pub project_id: i64,
    pub milestone_id: Option<i64>,
    pub payment_id: i64,
    pub currency: String,
    pub tax_case: TaxCase,
    pub legend: String,
    pub breakdown: Breakdown,
    /// The invoice a credit note corrects (its number).
    pub corrects: Option<String>,
}

/// The address an issued document's QR code opens: the verification page, given its number
/// and record hash.
pub fn verify_url(base: &str, number: &str, record_hash: &str) -> String {
    match url::Url::parse(base) {
        Ok(mut url) => {
            url.query_pairs_mut()
                .append_pair("number", number)
                .append_pair("hash", record_hash);
            url.into()
        }
        // Checked when the settings were read.
        Err(_) => base.to_owned(),
    }
}

/// Renders an issued document's PDF on the blocking pool.
pub async fn render_issued(verify_base: &str, d: Invoice) -> FlowResult<(String, Vec<u8>)> {
    let (Some(number), Some(hash), Some(content)) = (d.number, d.record_hash, d.content) else {
        return Err(FlowError::conflict(
            "INVOICE_PENDING",
            "The invoice waits for a party's fiscal data; it has no document yet",
        ));
    };
    let content: Content = serde_json::from_str(&content).map_err(anyhow::Error::from)?;
    let url = verify_url(verify_base, &number, &hash);
    let bytes = tokio::task::spawn_blocking(move || pdf::render(&content, &hash, &url))
        .await
        .map_err(anyhow::Error::from)?
        .map_err(anyhow::Error::from)?;
    Ok((number, bytes))
}
