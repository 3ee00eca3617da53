//! Invoices (issue #65): the release of a payment issues, in its own transaction, the
//! expert's invoice to the company and the platform's invoice for the commission; a refund
//! of a released payment issues a credit note for each, in the refund's transaction. A
//! document whose parties' fiscal data is incomplete is kept `pending_fiscal_data` (the money
//! moves regardless) and issued when the data is completed.
//!
//! Issuing takes the series' next number and the hash of its last record in the same
//! transaction, writes the canonical content with its chained hash, and records the event
//! (`invoice.issued` or `credit_note.issued`) that notifies the recipient.

use chrono::{DateTime, Datelike, Utc};
use serde::Serialize;
use serde_json::json;

use crate::config::{PlatformFiscal, Settings};
use crate::domain::invoice::{
    self as rules, Breakdown, Country, DocumentKind, InvoiceRole, InvoiceStatus, Issuer, TaxCase,
    TaxParty,
};
use crate::domain::money::minor_to_number;
use crate::domain::project::format_minor;
use crate::domain::user::Role;
use crate::integrations::mail::Template;
use crate::state::AppState;
use crate::store::events::{self, NewEvent};
use crate::store::invoices::{self, Filters, Invoice, Issued, NewDocument};
use crate::store::payments::Payment;
use crate::store::profiles::{self, Profile};
use crate::store::{Db, Tx, milestones, projects, users};
use crate::workflows::emails::email_with_invoice;
use crate::workflows::error::{FlowError, FlowResult};
use crate::workflows::invoice_documents::{self, Content, PartyOnDocument};
use crate::workflows::notify::for_user;

/// Issues the released payment `y`'s two invoices in the release's transaction (each kept
/// pending when a party's fiscal data is incomplete). The commission invoice is left out
/// when no commission was kept.
pub(crate) async fn on_release(
    tx: &mut Tx,
    settings: &Settings,
    y: &Payment,
    now: DateTime<Utc>,
) -> FlowResult<()> {
    let (Some(expert_id), Some(company_id)) = (y.expert_id, y.company_id) else {
        return Ok(());
    };
    let expert_key = Issuer::Expert(expert_id).key();
    let platform_key = Issuer::Platform.key();
    let mut documents = vec![NewDocument {
        doc_kind: DocumentKind::Invoice,
        role: InvoiceRole::ExpertService,
        payment_id: y.id,
        project_id: y.project_id,
        milestone_id: y.milestone_id,
        corrects_id: None,
        issuer_user_id: Some(expert_id),
        recipient_user_id: company_id,
        issuer_key: &expert_key,
        currency: &y.currency,
        payable_minor: y.amount_minor,
    }];
    let commission = y.commission_minor.unwrap_or(0);
    if commission > 0 {
        documents.push(NewDocument {
            role: InvoiceRole::PlatformFee,
            issuer_user_id: None,
            recipient_user_id: expert_id,
            issuer_key: &platform_key,
            payable_minor: commission,
            ..documents[0].clone()
        });
    }
    // A payment has one invoice of each role, whatever happens to it: a release that runs
    // again (records restored to before it) issues none a second time.
    let existing = invoices::of_payment(tx.exec(), y.id).await?;
    for doc in &documents {
        if existing
            .iter()
            .any(|d| d.doc_kind == DocumentKind::Invoice && d.role == doc.role)
        {
            continue;
        }
        let id = invoices::insert_pending(tx.exec(), doc, now).await?;
        issue_or_keep(tx, Some(settings), id, now).await?;
    }
    Ok(())
}

/// A refund of payment `y`: every invoice of it still carrying money gets a credit note for
/// what it carries (the whole, or what earlier partial notes left), in the refund's
/// transaction. A note correcting a pending invoice waits with it.
pub(crate) async fn on_refund(tx: &mut Tx, y: &Payment, now: DateTime<Utc>) -> FlowResult<()> {
    let documents = invoices::of_payment(tx.exec(), y.id).await?;
    for invoice in documents
        .iter()
        .filter(|d| d.doc_kind == DocumentKind::Invoice)
    {
        let credited: i64 = documents
            .iter()
            .filter(|d| d.corrects_id == Some(invoice.id))
            .map(|d| d.payable_minor)
            .sum();
        let left = invoice.payable_minor + credited;
        if left <= 0 {
            continue;
        }
        credit(tx, invoice, left, now).await?;
    }
    Ok(())
}

/// Issues a credit note for `amount_minor` (positive) of `invoice`.
pub(crate) async fn credit(
    tx: &mut Tx,
    invoice: &Invoice,
    amount_minor: i64,
    now: DateTime<Utc>,
) -> FlowResult<()> {
    let note = NewDocument {
        doc_kind: DocumentKind::CreditNote,
        role: invoice.role,
        payment_id: invoice.payment_id,
        project_id: invoice.project_id,
        milestone_id: invoice.milestone_id,
        corrects_id: Some(invoice.id),
        issuer_user_id: invoice.issuer_user_id,
        recipient_user_id: invoice.recipient_user_id,
        issuer_key: &invoice.issuer_key,
        currency: &invoice.currency,
        payable_minor: -amount_minor,
    };
    let id = invoices::insert_pending(tx.exec(), &note, now).await?;
    issue_or_keep(tx, None, id, now).await?;
    Ok(())
}

/// After `user_id`'s fiscal data changed: issues the pending documents they are a party
/// of that can now be issued, oldest first (an invoice before the notes correcting it), each
/// in a transaction of its own. Answers how many were issued.
pub async fn issue_pending_of(state: &AppState, user_id: i64) -> FlowResult<usize> {
    let pending = {
        let mut conn = state.db.conn().await?;
        invoices::pending_of_user(conn.exec(), user_id).await?
    };
    let mut issued = 0;
    for doc in pending {
        let now = state.clock.now();
        let mut tx = state.db.begin().await?;
        if issue_or_keep(&mut tx, Some(&state.settings), doc.id, now).await? {
            issued += 1;
        }
        state.commit(tx).await?;
    }
    Ok(issued)
}

/// Issues pending document `id` when it can be: an invoice when both parties' fiscal data
/// is complete (`settings` give the VAT rate and the platform's identity), a credit note once
/// the invoice it corrects is issued (it names the same parties, at the same rates).
/// Otherwise tells the party whose data is missing (once, when the document is new) and keeps
/// it pending. Answers whether it was issued.
async fn issue_or_keep(
    tx: &mut Tx,
    settings: Option<&Settings>,
    id: i64,
    now: DateTime<Utc>,
) -> FlowResult<bool> {
    let Some(doc) = invoices::find(tx.exec(), id).await? else {
        return Ok(false);
    };
    if doc.status == InvoiceStatus::Issued {
        return Ok(false);
    }
    let prepared = match doc.corrects_id {
        Some(original) => match invoices::find(tx.exec(), original).await? {
            Some(o) if o.status == InvoiceStatus::Issued => correction_of(&doc, &o)?,
            // Waits for the invoice it corrects.
            _ => return Ok(false),
        },
        None => match settings {
            Some(settings) => match invoice_of(tx, settings, &doc, now).await? {
                Some(prepared) => prepared,
                None => return Ok(false),
            },
            None => return Ok(false),
        },
    };
    let Prepared {
        issuer,
        recipient,
        case,
        breakdown,
        corrects,
        self_billing_agreed_at,
    } = prepared;
    let series_issuer = match doc.issuer_user_id {
        Some(user) => Issuer::Expert(user),
        None => Issuer::Platform,
    };
    let year = now.year();
    let (n, prev_hash) =
        invoices::take_number(tx.exec(), &doc.issuer_key, doc.doc_kind, year).await?;
    let number = series_issuer.number(doc.doc_kind, year, n);
    let content = Content {
        number: number.clone(),
        kind: doc.doc_kind,
        role: doc.role,
        issued_at: now,
        self_billed: doc.role == InvoiceRole::ExpertService,
        self_billing_agreed_at,
        issuer,
        recipient,
        description: description(tx, &doc).await?,
        project_id: doc.project_id,
        milestone_id: doc.milestone_id,
        payment_id: doc.payment_id,
        currency: doc.currency.clone(),
        tax_case: case,
        legend: case.legend().to_owned(),
        breakdown,
        corrects,
    };
    let text = serde_json::to_string(&content).map_err(anyhow::Error::from)?;
    let hash = rules::record_hash(&prev_hash, &text);
    let issued = Issued {
        year,
        number_in_series: n,
        number: &number,
        issued_at: now,
        tax_case: case.as_str(),
        base_minor: breakdown.base_minor,
        vat_rate_bp: breakdown.vat_rate_bp,
        vat_minor: breakdown.vat_minor,
        irpf_rate_bp: breakdown.irpf_rate_bp,
        irpf_minor: breakdown.irpf_minor,
        total_minor: breakdown.total_minor,
        content: &text,
        prev_hash: &prev_hash,
        record_hash: &hash,
    };
    if !invoices::issue(tx.exec(), doc.id, &issued).await? {
        return Ok(false);
    }
    invoices::set_head(tx.exec(), &doc.issuer_key, doc.doc_kind, year, &hash).await?;
    announce(tx, &doc, &content, now).await?;
    Ok(true)
}

/// What a document is issued with, besides its number.
struct Prepared {
    issuer: PartyOnDocument,
    recipient: PartyOnDocument,
    case: TaxCase,
    breakdown: Breakdown,
    corrects: Option<String>,
    self_billing_agreed_at: Option<DateTime<Utc>>,
}

/// An invoice's parties and figures, or `None` (after telling whoever must complete their
/// fiscal data, when the document is new) while a party's fiscal data is incomplete.
async fn invoice_of(
    tx: &mut Tx,
    settings: &Settings,
    doc: &Invoice,
    now: DateTime<Utc>,
) -> FlowResult<Option<Prepared>> {
    let issuer = match doc.issuer_user_id {
        Some(user) => profiles::find_by_user(tx.exec(), user, Role::Experto)
            .await?
            .as_ref()
            .and_then(party_of_profile),
        None => Some(party_of_platform(&settings.platform_fiscal)),
    };
    let recipient = profiles::find_by_user(tx.exec(), doc.recipient_user_id, recipient_role(doc))
        .await?
        .as_ref()
        .and_then(party_of_profile);
    // Self-billing needs the expert's acceptance (given with their first proposal, or
    // `POST /api/invoices/self-billing-agreement`).
    let agreed_at = match (doc.role, doc.issuer_user_id) {
        (InvoiceRole::ExpertService, Some(expert)) => {
            profiles::self_billing_accepted_at(tx.exec(), expert).await?
        }
        _ => None,
    };
    let agreement_missing = doc.role == InvoiceRole::ExpertService && agreed_at.is_none();
    match (issuer, recipient) {
        (Some(_), Some(_)) if agreement_missing => {
            if invoices::set_waiting(tx.exec(), doc.id, InvoiceStatus::PendingAgreement).await? {
                tell_waiting(
                    tx,
                    doc,
                    doc.issuer_user_id.into_iter().collect(),
                    "The platform issues your invoices in your name once you accept self-billing; accept it to have this one issued.",
                    now,
                )
                .await?;
            }
            Ok(None)
        }
        (Some((issuer_facts, issuer)), Some((recipient_facts, recipient))) => {
            let taxes = rules::taxes(
                &issuer_facts,
                &recipient_facts,
                settings.invoice_vat_rate_bp,
            );
            Ok(Some(Prepared {
                issuer,
                recipient,
                case: taxes.case,
                breakdown: Breakdown::of_payable(doc.payable_minor, &taxes),
                corrects: None,
                self_billing_agreed_at: agreed_at,
            }))
        }
        (issuer, recipient) => {
            if doc.created_at == now {
                let mut missing = Vec::new();
                if let (Some(user), None) = (doc.issuer_user_id, &issuer) {
                    missing.push(user);
                }
                if recipient.is_none() {
                    missing.push(doc.recipient_user_id);
                }
                tell_waiting(
                    tx,
                    doc,
                    missing,
                    "An invoice for a released payment waits for complete fiscal data; complete your profile's fiscal data to have it issued.",
                    now,
                )
                .await?;
            }
            Ok(None)
        }
    }
}

/// A credit note of `original`: its parties and tax case, for the note's amount.
fn correction_of(doc: &Invoice, original: &Invoice) -> FlowResult<Prepared> {
    let content: Content = serde_json::from_str(original.content.as_deref().unwrap_or_default())
        .map_err(anyhow::Error::from)?;
    Ok(Prepared {
        issuer: content.issuer,
        recipient: content.recipient,
        case: content.tax_case,
        breakdown: rules::credit(&content.breakdown, content.tax_case, -doc.payable_minor),
        corrects: Some(content.number),
        self_billing_agreed_at: content.self_billing_agreed_at,
    })
}

/// The profile a document's recipient is addressed as: the company for the expert's
/// invoice, the expert for the platform's.
fn recipient_role(doc: &Invoice) -> Role {
    match doc.role {
        InvoiceRole::ExpertService => Role::Empresa,
        InvoiceRole::PlatformFee => Role::Experto,
    }
}

/// The figures an issued document carries.
pub fn figures_of(d: &Invoice) -> Breakdown {
    Breakdown {
        base_minor: d.base_minor.unwrap_or(0),
        vat_rate_bp: d.vat_rate_bp.unwrap_or(0),
        vat_minor: d.vat_minor.unwrap_or(0),
        irpf_rate_bp: d.irpf_rate_bp.unwrap_or(0),
        irpf_minor: d.irpf_minor.unwrap_or(0),
        total_minor: d.total_minor.unwrap_or(0),
        payable_minor: d.payable_minor,
    }
}

/// "Project «title» — milestone «title»".
async fn description(tx: &mut Tx, doc: &Invoice) -> FlowResult<String> {
    let project = projects::find(tx.exec(), doc.project_id)
        .await?
        .map(|p| p.title)
        .unwrap_or_default();
    let milestone = match doc.milestone_id {
        Some(id) => milestones::find(tx.exec(), id).await?.map(|m| m.title),
        None => None,
    };
    let what = match doc.role {
        InvoiceRole::ExpertService => "Professional services",
        InvoiceRole::PlatformFee => "Marketplace commission",
    };
    Ok(match milestone {
        Some(m) => format!("{what}: project \"{project}\", milestone \"{m}\""),
        None => format!("{what}: project \"{project}\""),
    })
}

/// The tax facts and the shown identity of a profile whose fiscal data is complete.
pub(crate) fn party_of_profile(p: &Profile) -> Option<(TaxParty, PartyOnDocument)> {
    if !p.fiscal_data_complete {
        return None;
    }
    let country = Country::parse(p.fiscal_country.as_deref()?)?;
    let kind = p.fiscal_type.as_deref();
    let business = p.profile_type == Role::Empresa.as_str() && kind != Some("individual")
        || matches!(kind, Some("autonomo" | "empresa"));
    let vat_number = p
        .vat_number
        .as_deref()
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_owned);
    let facts = TaxParty {
        country,
        business,
        vat_registered: vat_number.is_some(),
        autonomo: kind == Some("autonomo"),
        irpf_percent: p.irpf_rate.unwrap_or(0),
    };
    let shown = PartyOnDocument {
        name: p.fiscal_name.clone()?,
        tax_id: p.tax_id.clone()?,
        vat_number,
        address: p.fiscal_address.clone()?,
        postal_code: p.fiscal_postal_code.clone()?,
        city: p.fiscal_city.clone()?,
        province: p.fiscal_province.clone(),
        country: p.fiscal_country.clone()?,
    };
    Some((facts, shown))
}

pub(crate) fn party_of_platform(f: &PlatformFiscal) -> (TaxParty, PartyOnDocument) {
    let facts = TaxParty {
        country: Country::parse(&f.country).unwrap_or(Country::Eu("ES")),
        business: true,
        vat_registered: true,
        autonomo: false,
        irpf_percent: 0,
    };
    let shown = PartyOnDocument {
        name: f.name.clone(),
        tax_id: f.tax_id.clone(),
        vat_number: Some(f.tax_id.clone()),
        address: f.address.clone(),
        postal_code: f.postal_code.clone(),
        city: f.city.clone(),
        province: None,
        country: f.country.clone(),
    };
    (facts, shown)
}

/// Records the issue's event, which notifies the recipient (and the expert, for an invoice
/// issued in their name).
async fn announce(
    tx: &mut Tx,
    doc: &Invoice,
    content: &Content,
    now: DateTime<Utc>,
) -> FlowResult<()> {
    let (kind, title) = match doc.doc_kind {
        DocumentKind::Invoice => ("invoice.issued", "Invoice issued"),
        DocumentKind::CreditNote => ("credit_note.issued", "Credit note issued"),
    };
    let data = json!({
        "invoice_id": doc.id, "number": content.number, "type": doc.doc_kind,
        "role": doc.role, "payment_id": doc.payment_id, "project_id": doc.project_id,
        "total": minor_to_number(content.breakdown.total_minor),
        "payable": minor_to_number(content.breakdown.payable_minor),
        "currency": doc.currency,
    });
    let mut notify = vec![for_user(
        doc.recipient_user_id,
        "invoice_issued",
        title,
        &format!("{} {} was issued to you.", title, content.number),
        data.clone(),
    )];
    if let Some(issuer) = doc.issuer_user_id {
        notify.push(for_user(
            issuer,
            "invoice_issued",
            title,
            &format!("{} {} was issued in your name.", title, content.number),
            data.clone(),
        ));
    }
    let mut mails = Vec::new();
    if let Some(to) = users::contact(tx.exec(), doc.recipient_user_id, recipient_role(doc)).await? {
        let project_title = projects::find(tx.exec(), doc.project_id)
            .await?
            .map(|p| p.title)
            .unwrap_or_default();
        mails.push(email_with_invoice(
            &to.email,
            Template::InvoiceIssued,
            json!({"name": to.name, "title": title, "number": content.number,
                   "project_title": project_title,
                   "total": format_minor(content.breakdown.total_minor),
                   "currency": doc.currency, "invoice_id": doc.id}),
            doc.id,
        ));
    }
    let mut payload = data;
    payload["issuer_user_id"] = json!(doc.issuer_user_id);
    payload["recipient_user_id"] = json!(doc.recipient_user_id);
    payload["notify"] = json!(notify);
    payload["email"] = json!(mails);
    events::record(
        tx.exec(),
        NewEvent {
            kind,
            aggregate: AGGREGATE,
            aggregate_id: Some(doc.id),
            payload,
        },
        now,
    )
    .await?;
    Ok(())
}

/// Tells `users` what keeps a document waiting (`message`).
async fn tell_waiting(
    tx: &mut Tx,
    doc: &Invoice,
    users: Vec<i64>,
    message: &str,
    now: DateTime<Utc>,
) -> FlowResult<()> {
    let data = json!({"invoice_id": doc.id, "payment_id": doc.payment_id,
                      "project_id": doc.project_id});
    let notify: Vec<_> = users
        .into_iter()
        .map(|user| {
            for_user(
                user,
                "invoice_waiting",
                "Invoice waiting",
                message,
                data.clone(),
            )
        })
        .collect();
    events::record(
        tx.exec(),
        NewEvent {
            kind: "invoice.waiting",
            aggregate: AGGREGATE,
            aggregate_id: Some(doc.id),
            payload: json!({"invoice_id": doc.id, "notify": notify}),
        },
        now,
    )
    .await?;
    Ok(())
}

/// `POST /api/invoices/self-billing-agreement`: expert `user_id` accepts that the platform
/// issues their invoices in their name (once; the first date stays). Their documents waiting
/// for it are issued. Answers the acceptance's date.
pub async fn accept_self_billing(state: &AppState, user_id: i64) -> FlowResult<DateTime<Utc>> {
    let accepted = {
        let mut conn = state.db.conn().await?;
        profiles::accept_self_billing(conn.exec(), user_id, state.clock.now()).await?
    }
    .ok_or_else(|| FlowError::not_found("No expert profile to accept self-billing for"))?;
    if let Err(error) = issue_pending_of(state, user_id).await {
        tracing::warn!(user_id, %error, "waiting invoices not issued yet");
    }
    Ok(accepted)
}

/// The result of walking every series' chain.
#[derive(Debug, Clone, Serialize)]
pub struct Verification {
    pub series: usize,
    pub documents: usize,
    /// The first broken link: the document's number and why.
    pub broken: Option<(i64, String, &'static str)>,
}

/// Walks each series' documents in number order: each must link to the one before (the
/// first to the genesis hash), hash to its record, carry the figures its content states, be
/// numbered 1..N, and the series' head must be its last record.
pub async fn verify(db: &Db) -> FlowResult<Verification> {
    let mut conn = db.conn().await?;
    let documents = invoices::chain(conn.exec()).await?;
    let heads = invoices::series_heads(conn.exec()).await?;
    drop(conn);
    let mut result = Verification {
        series: heads.len(),
        documents: documents.len(),
        broken: None,
    };
    for (key, kind, year, last, head) in heads {
        let series: Vec<&Invoice> = documents
            .iter()
            .filter(|d| d.issuer_key == key && d.doc_kind == kind && d.year == Some(year))
            .collect();
        let links: Vec<rules::Link<'_>> = series
            .iter()
            .map(|d| rules::Link {
                id: d.id,
                number: d.number.as_deref().unwrap_or_default(),
                prev_hash: d.prev_hash.as_deref().unwrap_or_default(),
                record_hash: d.record_hash.as_deref().unwrap_or_default(),
                content: d.content.as_deref().unwrap_or_default(),
            })
            .collect();
        if let Some(b) = rules::first_broken(&links) {
            result.broken = Some((b.id, b.number, b.reason));
            return Ok(result);
        }
        for (position, d) in series.iter().enumerate() {
            let number = d.number.clone().unwrap_or_default();
            if d.number_in_series != Some(position as i64 + 1) {
                result.broken = Some((d.id, number, "its number leaves a gap in its series"));
                return Ok(result);
            }
            if !stated_figures_match(d) {
                result.broken = Some((d.id, number, "its figures differ from its content"));
                return Ok(result);
            }
        }
        let last_hash = series.last().and_then(|d| d.record_hash.clone());
        if series.len() as i64 != last
            || last_hash.as_deref().unwrap_or(rules::GENESIS_HASH) != head
        {
            let (id, number) = series
                .last()
                .map(|d| (d.id, d.number.clone().unwrap_or_default()))
                .unwrap_or((0, key.clone()));
            result.broken = Some((id, number, "the series' last record is missing"));
            return Ok(result);
        }
    }
    Ok(result)
}

/// Whether a document's columns say what its hashed content says.
fn stated_figures_match(d: &Invoice) -> bool {
    let Some(content) = d.content.as_deref() else {
        return false;
    };
    let Ok(value) = serde_json::from_str::<serde_json::Value>(content) else {
        return false;
    };
    let b = &value["breakdown"];
    let figures = figures_of(d);
    value["number"].as_str() == d.number.as_deref()
        && value["payment_id"].as_i64() == Some(d.payment_id)
        && value["currency"].as_str() == Some(d.currency.as_str())
        && b["base_minor"].as_i64() == Some(figures.base_minor)
        && b["vat_minor"].as_i64() == Some(figures.vat_minor)
        && b["irpf_minor"].as_i64() == Some(figures.irpf_minor)
        && b["total_minor"].as_i64() == Some(figures.total_minor)
        && b["payable_minor"].as_i64() == Some(figures.payable_minor)
        && value["tax_case"].as_str() == d.tax_case.as_deref()
}

/// Documents matching `f`, newest first.
pub async fn list(state: &AppState, f: &Filters, limit: i64) -> FlowResult<Vec<Invoice>> {
    let mut conn = state.db.conn().await?;
    Ok(invoices::list(conn.exec(), f, limit).await?)
}

/// Document `id` when `user_id` issued (in their name) or received it, or is an
/// administrator; otherwise not found, as if it did not exist.
pub async fn visible(state: &AppState, id: i64, user_id: i64, admin: bool) -> FlowResult<Invoice> {
    let mut conn = state.db.conn().await?;
    invoices::find(conn.exec(), id)
        .await?
        .filter(|d| admin || d.issuer_user_id == Some(user_id) || d.recipient_user_id == user_id)
        .ok_or_else(|| FlowError::not_found("No such invoice"))
}

/// The events' aggregate: invoices and credit notes alike, by the documents' own name.
const AGGREGATE: &str = DocumentKind::Invoice.as_str();

/// The periodic job that walks the chains.
pub const CHAIN_JOB: &str = "invoice_chain";

/// 1 while the last walk of this instance found a broken link, else 0 (`/metrics`:
/// `invoice_chain_broken`).
pub static CHAIN_BROKEN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// When this instance last finished a walk, Unix seconds (`/metrics`:
/// `invoice_chain_verified_unix_seconds`); 0 before the first.
pub static CHAIN_VERIFIED_AT: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

/// [`CHAIN_JOB`]'s run: [`verify`], its result kept for `/metrics`, a broken link logged.
/// Answers the documents checked.
pub async fn verify_chains(state: &AppState) -> FlowResult<usize> {
    use std::sync::atomic::Ordering::Relaxed;
    let checked = verify(&state.db).await?;
    if let Some((id, number, reason)) = &checked.broken {
        tracing::error!(invoice_id = id, %number, reason, "invoice chain broken");
    }
    CHAIN_BROKEN.store(u64::from(checked.broken.is_some()), Relaxed);
    CHAIN_VERIFIED_AT.store(state.clock.now().timestamp(), Relaxed);
    Ok(checked.documents)
}

/// The PDF of document `id` for a caller who may read it (see [`visible`]): its number and
/// bytes, rendered on the blocking pool. A pending document has none yet (409).
pub async fn pdf_of(
    state: &AppState,
    id: i64,
    user_id: i64,
    admin: bool,
) -> FlowResult<(String, Vec<u8>)> {
    let d = visible(state, id, user_id, admin).await?;
    invoice_documents::render_issued(&state.settings.invoice_verify_url, d).await
}

/// What the public verification answers for a number and a record hash: the document when
/// one was issued with that number and that hash, else nothing (a wrong hash and an unknown
/// number read the same).
pub async fn check(state: &AppState, number: &str, hash: &str) -> FlowResult<Option<Invoice>> {
    let mut conn = state.db.conn().await?;
    Ok(invoices::find_by_number(conn.exec(), number)
        .await?
        .filter(|d| {
            d.record_hash.as_deref().is_some_and(|h| {
                crate::domain::token::constant_time_eq(h.as_bytes(), hash.as_bytes())
            })
        }))
}

/// The export's columns.
const EXPORT_HEADER: &str = "id,type,role,status,number,issued_at,payment_id,project_id,corrects_id,\
issuer_user_id,issuer_name,issuer_tax_id,recipient_user_id,recipient_name,recipient_tax_id,\
currency,tax_case,base,vat_rate,vat,irpf_rate,irpf,total,payable,record_hash\n";

/// Documents read per query of the export.
const EXPORT_BATCH: i64 = 500;

/// Writes every document matching `f` as CSV, newest first, a batch at a time: amounts in
/// units with 2 decimals, text fields formula-safe (`domain::dac7::csv_field`).
pub async fn write_export_csv(
    state: &AppState,
    f: &Filters,
    out: &mut (impl tokio::io::AsyncWrite + Unpin),
) -> FlowResult<()> {
    use crate::domain::dac7::{amount, csv_field};
    use anyhow::Context as _;
    use tokio::io::AsyncWriteExt as _;
    let mut piece = String::from(EXPORT_HEADER);
    let mut filters = f.clone();
    loop {
        let batch = list(state, &filters, EXPORT_BATCH).await?;
        for d in &batch {
            let content: Option<Content> = d
                .content
                .as_deref()
                .and_then(|c| serde_json::from_str(c).ok());
            let party = |p: Option<&PartyOnDocument>| {
                p.map(|p| (csv_field(&p.name), csv_field(&p.tax_id)))
                    .unwrap_or_default()
            };
            let (issuer_name, issuer_tax_id) = party(content.as_ref().map(|c| &c.issuer));
            let (recipient_name, recipient_tax_id) = party(content.as_ref().map(|c| &c.recipient));
            let optional = |v: Option<i64>| v.map(|v| v.to_string()).unwrap_or_default();
            let money = |v: Option<i64>| v.map(amount).unwrap_or_default();
            let fields = [
                d.id.to_string(),
                d.doc_kind.as_str().to_owned(),
                d.role.as_str().to_owned(),
                d.status.as_str().to_owned(),
                csv_field(d.number.as_deref().unwrap_or_default()),
                d.issued_at.map(|t| t.to_rfc3339()).unwrap_or_default(),
                d.payment_id.to_string(),
                d.project_id.to_string(),
                optional(d.corrects_id),
                optional(d.issuer_user_id),
                issuer_name,
                issuer_tax_id,
                d.recipient_user_id.to_string(),
                recipient_name,
                recipient_tax_id,
                csv_field(&d.currency),
                csv_field(d.tax_case.as_deref().unwrap_or_default()),
                money(d.base_minor),
                money(d.vat_rate_bp),
                money(d.vat_minor),
                money(d.irpf_rate_bp),
                money(d.irpf_minor),
                money(d.total_minor),
                amount(d.payable_minor),
                d.record_hash.clone().unwrap_or_default(),
            ];
            piece.push_str(&fields.join(","));
            piece.push('\n');
        }
        out.write_all(piece.as_bytes())
            .await
            .context("writing the invoices' export")?;
        piece.clear();
        match batch.last() {
            Some(last) if batch.len() as i64 == EXPORT_BATCH => filters.before_id = Some(last.id),
            _ => return Ok(()),
        }
    }
}
