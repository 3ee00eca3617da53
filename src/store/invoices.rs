//! Invoices and credit notes, and their series (migration 0059). Issued rows are never
//! updated or deleted (the tables' triggers refuse it); a pending row is issued once.

use chrono::{DateTime, Utc};

use super::{Exec, StoreResult};
use crate::domain::invoice::{DocumentKind, GENESIS_HASH, InvoiceRole, InvoiceStatus};
use crate::on_exec;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Invoice {
    pub id: i64,
    pub doc_kind: DocumentKind,
    pub role: InvoiceRole,
    pub status: InvoiceStatus,
    pub payment_id: i64,
    pub project_id: i64,
    pub milestone_id: Option<i64>,
    pub corrects_id: Option<i64>,
    pub issuer_user_id: Option<i64>,
    pub recipient_user_id: i64,
    pub issuer_key: String,
    pub currency: String,
    pub payable_minor: i64,
    pub year: Option<i32>,
    pub number_in_series: Option<i64>,
    pub number: Option<String>,
    pub issued_at: Option<DateTime<Utc>>,
    pub tax_case: Option<String>,
    pub base_minor: Option<i64>,
    pub vat_rate_bp: Option<i64>,
    pub vat_minor: Option<i64>,
    pub irpf_rate_bp: Option<i64>,
    pub irpf_minor: Option<i64>,
    pub total_minor: Option<i64>,
    pub content: Option<String>,
    pub prev_hash: Option<String>,
    pub record_hash: Option<String>,
    pub created_at: DateTime<Utc>,
}

macro_rules! select_invoices {
    ($rest:literal) => {
        concat!(
            "SELECT i.id, i.doc_kind, i.role, i.status, i.payment_id, i.project_id, i.milestone_id,
                i.corrects_id, i.issuer_user_id, i.recipient_user_id, i.issuer_key, i.currency,
                i.payable_minor, i.year, i.number_in_series, i.number, i.issued_at, i.tax_case,
                i.base_minor, i.vat_rate_bp, i.vat_minor, i.irpf_rate_bp, i.irpf_minor,
                i.total_minor, i.content, i.prev_hash, i.record_hash, i.created_at
             FROM invoices i ",
            $rest
        )
    };
}

/// A document before it is issued: who, what for, and the money that moved.
#[derive(Debug, Clone)]
pub struct NewDocument<'a> {
    pub doc_kind: DocumentKind,
    pub role: InvoiceRole,
    pub payment_id: i64,
    pub project_id: i64,
    pub milestone_id: Option<i64>,
    pub corrects_id: Option<i64>,
    pub issuer_user_id: Option<i64>,
    pub recipient_user_id: i64,
    pub issuer_key: &'a str,
    pub currency: &'a str,
    pub payable_minor: i64,
}

/// What issuing writes.
#[derive(Debug, Clone)]
pub struct Issued<'a> {
    pub year: i32,
    pub number_in_series: i64,
    pub number: &'a str,
    pub issued_at: DateTime<Utc>,
    pub tax_case: &'a str,
    pub base_minor: i64,
    pub vat_rate_bp: i64,
    pub vat_minor: i64,
    pub irpf_rate_bp: i64,
    pub irpf_minor: i64,
    pub total_minor: i64,
    pub content: &'a str,
    pub prev_hash: &'a str,
    pub record_hash: &'a str,
}

/// Inserts a document `pending_fiscal_data`; answers its id.
pub async fn insert_pending(
    ex: Exec<'_>,
    doc: &NewDocument<'_>,
    now: DateTime<Utc>,
) -> StoreResult<i64> {
    Ok(on_exec!(ex, c => sqlx::query_scalar(
        "INSERT INTO invoices (doc_kind, role, status, payment_id, project_id, milestone_id,
             corrects_id, issuer_user_id, recipient_user_id, issuer_key, currency, payable_minor,
             created_at)
         VALUES ($1, $2, 'pending_fiscal_data', $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
         RETURNING id",
    )
    .bind(doc.doc_kind)
    .bind(doc.role)
    .bind(doc.payment_id)
    .bind(doc.project_id)
    .bind(doc.milestone_id)
    .bind(doc.corrects_id)
    .bind(doc.issuer_user_id)
    .bind(doc.recipient_user_id)
    .bind(doc.issuer_key)
    .bind(doc.currency)
    .bind(doc.payable_minor)
    .bind(now)
    .fetch_one(c)
    .await)?)
}

/// Issues pending document `id`; false when it was issued already.
pub async fn issue(ex: Exec<'_>, id: i64, d: &Issued<'_>) -> StoreResult<bool> {
    let done = on_exec!(ex, c => sqlx::query(
        "UPDATE invoices SET status = 'issued', year = $2, number_in_series = $3, number = $4,
             issued_at = $5, tax_case = $6, base_minor = $7, vat_rate_bp = $8, vat_minor = $9,
             irpf_rate_bp = $10, irpf_minor = $11, total_minor = $12, content = $13,
             prev_hash = $14, record_hash = $15
         WHERE id = $1 AND status <> 'issued'",
    )
    .bind(id)
    .bind(d.year)
    .bind(d.number_in_series)
    .bind(d.number)
    .bind(d.issued_at)
    .bind(d.tax_case)
    .bind(d.base_minor)
    .bind(d.vat_rate_bp)
    .bind(d.vat_minor)
    .bind(d.irpf_rate_bp)
    .bind(d.irpf_minor)
    .bind(d.total_minor)
    .bind(d.content)
    .bind(d.prev_hash)
    .bind(d.record_hash)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}

/// Records what pending document `id` waits for; false when it was issued meanwhile.
pub async fn set_waiting(ex: Exec<'_>, id: i64, status: InvoiceStatus) -> StoreResult<bool> {
    let done = on_exec!(ex, c => sqlx::query(
        "UPDATE invoices SET status = $2 WHERE id = $1 AND status <> 'issued' AND status <> $2",
    )
    .bind(id)
    .bind(status)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}

/// Takes the next number of a series (issuer, kind, year) and answers it with the hash of
/// the series' last record. The series' row stays locked until the transaction ends, so
/// concurrent issuers wait in turn, and a transaction that rolls back gives its number back:
/// no gap, no duplicate.
pub async fn take_number(
    ex: Exec<'_>,
    issuer_key: &str,
    kind: DocumentKind,
    year: i32,
) -> StoreResult<(i64, String)> {
    Ok(on_exec!(ex, c => sqlx::query_as(
        "INSERT INTO invoice_series (issuer_key, doc_kind, year, last_number, last_hash)
         VALUES ($1, $2, $3, 1, $4)
         ON CONFLICT (issuer_key, doc_kind, year)
         DO UPDATE SET last_number = invoice_series.last_number + 1
         RETURNING last_number, last_hash",
    )
    .bind(issuer_key)
    .bind(kind)
    .bind(year)
    .bind(GENESIS_HASH)
    .fetch_one(c)
    .await)?)
}

/// Moves a series' chain head to the record just written.
pub async fn set_head(
    ex: Exec<'_>,
    issuer_key: &str,
    kind: DocumentKind,
    year: i32,
    hash: &str,
) -> StoreResult<()> {
    on_exec!(ex, c => sqlx::query(
        "UPDATE invoice_series SET last_hash = $4
         WHERE issuer_key = $1 AND doc_kind = $2 AND year = $3",
    )
    .bind(issuer_key)
    .bind(kind)
    .bind(year)
    .bind(hash)
    .execute(c)
    .await
    .map(drop))?;
    Ok(())
}

pub async fn find(ex: Exec<'_>, id: i64) -> StoreResult<Option<Invoice>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, Invoice>(select_invoices!("WHERE i.id = $1"))
        .bind(id)
        .fetch_optional(c)
        .await)?,
    )
}

pub async fn find_by_number(ex: Exec<'_>, number: &str) -> StoreResult<Option<Invoice>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, Invoice>(select_invoices!("WHERE i.number = $1"))
        .bind(number)
        .fetch_optional(c)
        .await)?,
    )
}

/// A payment's documents, oldest first.
pub async fn of_payment(ex: Exec<'_>, payment_id: i64) -> StoreResult<Vec<Invoice>> {
    Ok(on_exec!(ex, c => sqlx::query_as::<_, Invoice>(
        select_invoices!("WHERE i.payment_id = $1 ORDER BY i.id"),
    )
    .bind(payment_id)
    .fetch_all(c)
    .await)?)
}

/// The documents waiting (for fiscal data or an agreement) a user is a party of, oldest
/// first.
pub async fn pending_of_user(ex: Exec<'_>, user_id: i64) -> StoreResult<Vec<Invoice>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, Invoice>(select_invoices!(
        "WHERE i.status <> 'issued'
           AND (i.issuer_user_id = $1 OR i.recipient_user_id = $1)
         ORDER BY i.id"
    ))
    .bind(user_id)
    .fetch_all(c)
    .await)?,
    )
}

/// What a list narrows by; each `None` leaves it open.
#[derive(Debug, Clone, Default)]
pub struct Filters {
    /// Documents this user issued or received.
    pub party: Option<i64>,
    pub year: Option<i32>,
    pub doc_kind: Option<DocumentKind>,
    pub project_id: Option<i64>,
    pub status: Option<InvoiceStatus>,
    /// Keyset: ids below this one (newest first).
    pub before_id: Option<i64>,
}

/// Documents newest first, at most `limit`.
pub async fn list(ex: Exec<'_>, f: &Filters, limit: i64) -> StoreResult<Vec<Invoice>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, Invoice>(select_invoices!(
        "WHERE (CAST($1 AS BIGINT) IS NULL OR i.issuer_user_id = $1 OR i.recipient_user_id = $1)
           AND (CAST($2 AS INTEGER) IS NULL OR i.year = $2)
           AND (CAST($3 AS TEXT) IS NULL OR i.doc_kind = $3)
           AND (CAST($4 AS BIGINT) IS NULL OR i.project_id = $4)
           AND (CAST($5 AS TEXT) IS NULL OR i.status = $5)
           AND (CAST($6 AS BIGINT) IS NULL OR i.id < $6)
         ORDER BY i.id DESC LIMIT $7"
    ))
    .bind(f.party)
    .bind(f.year)
    .bind(f.doc_kind)
    .bind(f.project_id)
    .bind(f.status)
    .bind(f.before_id)
    .bind(limit)
    .fetch_all(c)
    .await)?,
    )
}

/// Every issued document in chain order: series by series, each by number.
pub async fn chain(ex: Exec<'_>) -> StoreResult<Vec<Invoice>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, Invoice>(select_invoices!(
        "WHERE i.status = 'issued'
         ORDER BY i.issuer_key, i.doc_kind, i.year, i.number_in_series"
    ))
    .fetch_all(c)
    .await)?,
    )
}

/// Each series' head as the series table keeps it: (issuer, kind, year, last number, hash).
pub async fn series_heads(
    ex: Exec<'_>,
) -> StoreResult<Vec<(String, DocumentKind, i32, i64, String)>> {
    Ok(on_exec!(ex, c => sqlx::query_as(
        "SELECT issuer_key, doc_kind, year, last_number, last_hash FROM invoice_series
         ORDER BY issuer_key, doc_kind, year",
    )
    .fetch_all(c)
    .await)?)
}
