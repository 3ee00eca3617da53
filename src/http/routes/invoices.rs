//! `/api/invoices` and `/api/admin/invoices`: the invoices and credit notes the releases and
//! refunds issued. A party reads the documents it issued (in its name) or received; another
//! caller gets 404. Administrators read them all, and the pending ones.

use actix_web::{HttpResponse, get, post, web};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::domain::invoice::{DocumentKind, InvoiceStatus};
use crate::domain::money::minor_to_number;
use crate::domain::user::Role;
use crate::http::auth::{AdminUser, AuthUser, CsrfChecked};
use crate::http::error::{ApiError, ApiResult, ErrorBody, FieldError};
use crate::http::spooled::Spool;
use crate::state::AppState;
use crate::store::invoices::{Filters, Invoice};
use crate::workflows::invoice_documents::{Content, PartyOnDocument};
use crate::workflows::invoices as flow;

/// The filters of a list of invoices, and its keyset page.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct InvoiceQuery {
    /// The year of issue.
    pub year: Option<i32>,
    /// `invoice` or `credit_note`.
    #[serde(rename = "type")]
    pub doc_type: Option<String>,
    pub project_id: Option<i64>,
    /// Administrators: `pending_fiscal_data`, `pending_agreement` or `issued`.
    pub status: Option<String>,
    /// Administrators: documents this user issued or received.
    pub user_id: Option<i64>,
    /// The `next_before` of the previous page.
    pub before: Option<i64>,
    /// 1–100, default 20.
    pub limit: Option<i64>,
}

/// An invoice or credit note. Amounts are in the currency's units (2 decimals); a credit
/// note's are negative. While `pending_fiscal_data` only the amount that moved is known.
#[derive(Debug, Serialize, ToSchema)]
pub struct InvoiceView {
    pub id: i64,
    /// `invoice` or `credit_note`.
    #[serde(rename = "type")]
    pub doc_type: String,
    /// `expert_service` (the expert's invoice to the company, self-billed) or
    /// `platform_fee` (the platform's commission invoice to the expert).
    pub role: String,
    /// `issued`, `pending_fiscal_data` or `pending_agreement` (the expert's acceptance of
    /// self-billing).
    pub status: String,
    pub number: Option<String>,
    pub issued_at: Option<DateTime<Utc>>,
    pub payment_id: i64,
    pub project_id: i64,
    pub milestone_id: Option<i64>,
    /// The invoice a credit note corrects.
    pub corrects_id: Option<i64>,
    /// `None`: the platform.
    pub issuer_user_id: Option<i64>,
    pub recipient_user_id: i64,
    pub currency: String,
    /// The money that moved: the total less the IRPF withheld.
    pub payable: f64,
    pub base: Option<f64>,
    /// Percent.
    pub vat_rate: Option<f64>,
    pub vat: Option<f64>,
    /// Percent.
    pub irpf_rate: Option<f64>,
    pub irpf: Option<f64>,
    pub total: Option<f64>,
    /// `domestic`, `reverse_charge`, `not_subject` or `eu_consumer`.
    pub tax_case: Option<String>,
    pub legend: Option<String>,
    pub description: Option<String>,
    /// The expert's invoice: when they accepted that the platform issues it in their name.
    pub self_billing_agreed_at: Option<DateTime<Utc>>,
    pub issuer: Option<PartyOnDocument>,
    pub recipient: Option<PartyOnDocument>,
    /// SHA-256 of the previous record's hash and this document's content.
    pub record_hash: Option<String>,
    pub prev_hash: Option<String>,
}

impl From<Invoice> for InvoiceView {
    fn from(d: Invoice) -> Self {
        let content: Option<Content> = d
            .content
            .as_deref()
            .and_then(|c| serde_json::from_str(c).ok());
        let money = |v: Option<i64>| v.map(minor_to_number);
        let (description, legend, agreed_at, issuer, recipient) = match content {
            Some(c) => (
                Some(c.description),
                Some(c.legend),
                c.self_billing_agreed_at,
                Some(c.issuer),
                Some(c.recipient),
            ),
            None => (None, None, None, None, None),
        };
        Self {
            id: d.id,
            doc_type: d.doc_kind.as_str().to_owned(),
            role: d.role.as_str().to_owned(),
            status: d.status.as_str().to_owned(),
            number: d.number,
            issued_at: d.issued_at,
            payment_id: d.payment_id,
            project_id: d.project_id,
            milestone_id: d.milestone_id,
            corrects_id: d.corrects_id,
            issuer_user_id: d.issuer_user_id,
            recipient_user_id: d.recipient_user_id,
            currency: d.currency,
            payable: minor_to_number(d.payable_minor),
            base: money(d.base_minor),
            vat_rate: money(d.vat_rate_bp),
            vat: money(d.vat_minor),
            irpf_rate: money(d.irpf_rate_bp),
            irpf: money(d.irpf_minor),
            total: money(d.total_minor),
            tax_case: d.tax_case,
            legend,
            description,
            self_billing_agreed_at: agreed_at,
            issuer,
            recipient,
            record_hash: d.record_hash,
            prev_hash: d.prev_hash,
        }
    }
}

/// One page of documents, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct InvoicePage {
    pub items: Vec<InvoiceView>,
    /// Pass as `before` for the next page; absent on the last.
    pub next_before: Option<i64>,
}

/// Reads the query into the store's filters; `party` narrows to one account.
fn filters(q: &InvoiceQuery, party: Option<i64>) -> ApiResult<(Filters, i64)> {
    let mut errors = Vec::new();
    let doc_kind = match q.doc_type.as_deref() {
        None => None,
        Some(text) => DocumentKind::parse(text).or_else(|| {
            errors.push(FieldError::new("type", "must be invoice or credit_note"));
            None
        }),
    };
    let status = match q.status.as_deref() {
        None => None,
        Some(text) => InvoiceStatus::parse(text).or_else(|| {
            errors.push(FieldError::new(
                "status",
                "must be pending_fiscal_data, pending_agreement or issued",
            ));
            None
        }),
    };
    let limit = q.limit.unwrap_or(20);
    if !(1..=100).contains(&limit) {
        errors.push(FieldError::new("limit", "must be between 1 and 100"));
    }
    if !errors.is_empty() {
        return Err(ApiError::validation(errors));
    }
    Ok((
        Filters {
            party,
            year: q.year,
            doc_kind,
            project_id: q.project_id,
            status,
            before_id: q.before,
        },
        limit,
    ))
}

async fn page(state: &AppState, f: Filters, limit: i64) -> ApiResult<InvoicePage> {
    let mut items = flow::list(state, &f, limit + 1).await?;
    let next_before = if items.len() as i64 > limit {
        items.truncate(limit as usize);
        items.last().map(|d| d.id)
    } else {
        None
    };
    Ok(InvoicePage {
        items: items.into_iter().map(InvoiceView::from).collect(),
        next_before,
    })
}

/// The caller's invoices and credit notes, issued (in their name) and received, newest
/// first; by year of issue, type and project.
#[utoipa::path(
    tag = "invoices",
    params(InvoiceQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, body = InvoicePage),
        (status = 422, body = ErrorBody, description = "A filter out of its range"),
    )
)]
#[get("/api/invoices")]
pub async fn list(
    state: web::Data<AppState>,
    auth: AuthUser,
    query: web::Query<InvoiceQuery>,
) -> ApiResult<HttpResponse> {
    let (mut f, limit) = filters(&query, Some(auth.id()))?;
    // `status` and `user_id` are the administrators' filters.
    f.status = None;
    Ok(HttpResponse::Ok().json(page(&state, f, limit).await?))
}

/// One invoice or credit note of the caller's (issued in their name or received); an
/// administrator reads any. Another caller gets 404.
#[utoipa::path(
    tag = "invoices",
    params(("invoice_id" = i64, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = InvoiceView),
        (status = 404, body = ErrorBody),
    )
)]
#[get("/api/invoices/{invoice_id}")]
pub async fn detail(
    state: web::Data<AppState>,
    auth: AuthUser,
    path: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let admin = auth.has_role(Role::Admin);
    let d = flow::visible(&state, path.into_inner(), auth.id(), admin).await?;
    Ok(HttpResponse::Ok().json(InvoiceView::from(d)))
}

/// The PDF of an issued invoice or credit note of the caller's (or any, for an
/// administrator): A4, fonts embedded, every field, the legends and a QR code of its
/// verification address. 409 `INVOICE_PENDING` while it waits for fiscal data.
#[utoipa::path(
    tag = "invoices",
    params(("invoice_id" = i64, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The document", content_type = "application/pdf"),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "`INVOICE_PENDING`"),
    )
)]
#[get("/api/invoices/{invoice_id}/pdf")]
pub async fn pdf(
    state: web::Data<AppState>,
    auth: AuthUser,
    path: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let admin = auth.has_role(Role::Admin);
    let (number, bytes) = flow::pdf_of(&state, path.into_inner(), auth.id(), admin).await?;
    Ok(HttpResponse::Ok()
        .content_type("application/pdf")
        .insert_header((
            "Content-Disposition",
            format!("attachment; filename=\"{number}.pdf\""),
        ))
        .body(bytes))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct VerifyQuery {
    /// The document's number, as printed.
    #[param(max_length = 64)]
    pub number: String,
    /// The record hash its QR code carries (64 hex characters).
    #[param(max_length = 64)]
    pub hash: String,
}

/// What the public verification tells: whether a document was issued with this number and
/// record hash, and then its date, type and amounts — nothing of its parties.
#[derive(Debug, Serialize, ToSchema)]
pub struct InvoiceCheck {
    /// False for an unknown number and for a hash that does not match, alike.
    pub valid: bool,
    pub number: String,
    /// `invoice` or `credit_note`.
    #[serde(rename = "type")]
    pub doc_type: Option<String>,
    pub issued_at: Option<DateTime<Utc>>,
    pub currency: Option<String>,
    pub total: Option<f64>,
    pub payable: Option<f64>,
}

/// Public: whether an invoice or credit note was issued with this number and record hash
/// (the QR code printed on it carries both).
#[utoipa::path(
    tag = "invoices",
    params(VerifyQuery),
    responses(
        (status = 200, body = InvoiceCheck),
        (status = 422, body = ErrorBody, description = "A field past its length"),
    )
)]
#[get("/api/invoices/verify")]
pub async fn verify(
    state: web::Data<AppState>,
    query: web::Query<VerifyQuery>,
) -> ApiResult<HttpResponse> {
    for (field, value) in [("number", &query.number), ("hash", &query.hash)] {
        if value.len() > 64 {
            return Err(ApiError::invalid_field(
                field,
                "must be at most 64 characters",
            ));
        }
    }
    let found = flow::check(&state, &query.number, &query.hash).await?;
    let check = match found {
        Some(d) => InvoiceCheck {
            valid: true,
            number: query.number.clone(),
            doc_type: Some(d.doc_kind.as_str().to_owned()),
            issued_at: d.issued_at,
            currency: Some(d.currency),
            total: d.total_minor.map(minor_to_number),
            payable: Some(minor_to_number(d.payable_minor)),
        },
        None => InvoiceCheck {
            valid: false,
            number: query.number.clone(),
            doc_type: None,
            issued_at: None,
            currency: None,
            total: None,
            payable: None,
        },
    };
    Ok(HttpResponse::Ok().json(check))
}

/// When the expert accepted self-billing.
#[derive(Debug, Serialize, ToSchema)]
pub struct SelfBillingAgreement {
    pub accepted_at: DateTime<Utc>,
}

/// The expert accepts that the platform issues their invoices to companies in their name
/// (self-billing, RD 1619/2012 art. 5). Given once — a proposal gives it too — and kept with
/// its first date; invoices waiting for it (`pending_agreement`) are issued.
#[utoipa::path(
    tag = "invoices",
    security(("bearer" = [])),
    responses(
        (status = 200, body = SelfBillingAgreement),
        (status = 403, body = ErrorBody, description = "Not an expert"),
    )
)]
#[post("/api/invoices/self-billing-agreement")]
pub async fn accept_self_billing(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
) -> ApiResult<HttpResponse> {
    if !auth.has_role(Role::Experto) {
        return Err(ApiError::forbidden("Experts only"));
    }
    let accepted_at = flow::accept_self_billing(&state, auth.id()).await?;
    Ok(HttpResponse::Ok().json(SelfBillingAgreement { accepted_at }))
}

/// Every invoice and credit note, newest first: by year, type, project, status (the
/// `pending_fiscal_data` ones wait for a party's fiscal data) and party.
#[utoipa::path(
    tag = "admin",
    params(InvoiceQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, body = InvoicePage),
        (status = 403, body = ErrorBody),
        (status = 422, body = ErrorBody, description = "A filter out of its range"),
    )
)]
#[get("/api/admin/invoices")]
pub async fn admin_list(
    state: web::Data<AppState>,
    _admin: AdminUser,
    query: web::Query<InvoiceQuery>,
) -> ApiResult<HttpResponse> {
    let (f, limit) = filters(&query, query.user_id)?;
    Ok(HttpResponse::Ok().json(page(&state, f, limit).await?))
}

/// Every document matching the filters as CSV (one line each, newest first; `before` and
/// `limit` are ignored), written whole before it is answered. Text fields are formula-safe.
#[utoipa::path(
    tag = "admin",
    params(InvoiceQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "CSV, one line per document", content_type = "text/csv"),
        (status = 403, body = ErrorBody),
        (status = 422, body = ErrorBody, description = "A filter out of its range"),
    )
)]
#[get("/api/admin/invoices/export")]
pub async fn export(
    state: web::Data<AppState>,
    _admin: AdminUser,
    query: web::Query<InvoiceQuery>,
) -> ApiResult<HttpResponse> {
    let (mut f, _) = filters(&query, query.user_id)?;
    f.before_id = None;
    let mut csv = Spool::new().await.map_err(ApiError::internal)?;
    flow::write_export_csv(&state, &f, csv.writer()).await?;
    let mut response = HttpResponse::Ok();
    response
        .content_type("text/csv; charset=utf-8")
        .insert_header((
            "Content-Disposition",
            "attachment; filename=\"invoices.csv\"",
        ));
    csv.answer(response).await.map_err(ApiError::internal)
}

/// Mounts the invoices.
pub fn mount(cfg: &mut utoipa_actix_web::service_config::ServiceConfig) {
    // The fixed path before `{invoice_id}`, which would capture it.
    cfg.service(verify)
        .service(accept_self_billing)
        .service(list)
        .service(detail)
        .service(pdf)
        .service(export)
        .service(admin_list);
}
