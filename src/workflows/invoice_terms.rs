//! What a milestone's invoices will say, shown to both parties before they agree: the
//! proposal's and the payment's answers carry it. Computed from the parties' fiscal data and
//! the expert's commission level as they stand, with the same rules the release issues the
//! documents with (`domain::invoice::taxes`, `Breakdown::of_payable`), so an answer and the
//! invoice issued later agree unless a party changes its data in between.

use std::collections::HashMap;

use crate::domain::commission::{self, Level};
use crate::domain::invoice::{self as rules, Breakdown, TaxCase, TaxParty, Taxes};
use crate::domain::user::Role;
use crate::state::AppState;
use crate::store::applications::Application;
use crate::store::payments::Payment;
use crate::store::profiles::{self, Profile};
use crate::store::{commission as rates, projects};
use crate::workflows::error::FlowResult;
use crate::workflows::invoices::{party_of_platform, party_of_profile};

/// A party whose fiscal data the invoices wait for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiting {
    Expert,
    Company,
}

impl Waiting {
    pub fn as_str(self) -> &'static str {
        match self {
            Waiting::Expert => "expert",
            Waiting::Company => "company",
        }
    }
}

/// The terms between one expert and one company: each document's taxes (`None` while a
/// party's fiscal data is incomplete) and the commission rate at the expert's level.
#[derive(Debug, Clone)]
pub struct Terms {
    expert_invoice: Option<Taxes>,
    platform_invoice: Option<Taxes>,
    commission_rate_bp: i64,
    waiting: Vec<Waiting>,
}

/// One document's figures and tax case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Figures {
    pub case: TaxCase,
    pub breakdown: Breakdown,
}

/// The two invoices of one amount the company pays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preview {
    /// The expert's invoice to the company; its payable is the amount.
    pub expert_invoice: Option<Figures>,
    /// The platform's commission invoice to the expert; none when no commission is kept.
    pub platform_invoice: Option<Figures>,
    pub commission_minor: i64,
    pub waiting: Vec<Waiting>,
}

impl Terms {
    /// The invoices of `amount_minor`; `commission_minor` when the release already fixed it,
    /// else the commission at the expert's level now.
    pub fn preview(&self, amount_minor: i64, commission_minor: Option<i64>) -> Preview {
        let commission_minor = commission_minor
            .unwrap_or_else(|| commission::split(amount_minor, self.commission_rate_bp).0);
        let figures = |taxes: &Taxes, payable: i64| Figures {
            case: taxes.case,
            breakdown: Breakdown::of_payable(payable, taxes),
        };
        Preview {
            expert_invoice: self.expert_invoice.map(|t| figures(&t, amount_minor)),
            platform_invoice: self
                .platform_invoice
                .filter(|_| commission_minor > 0)
                .map(|t| figures(&t, commission_minor)),
            commission_minor,
            waiting: self.waiting.clone(),
        }
    }
}

/// The terms of each `(expert, company)` pair, read in three statements whatever their
/// number.
pub async fn between(
    state: &AppState,
    pairs: &[(i64, i64)],
) -> FlowResult<HashMap<(i64, i64), Terms>> {
    let mut users: Vec<i64> = pairs.iter().flat_map(|&(e, c)| [e, c]).collect();
    users.sort_unstable();
    users.dedup();
    let mut conn = state.db.conn().await?;
    let found = profiles::of_users(conn.exec(), &users).await?;
    let rate_of: HashMap<Level, i64> = rates::rates_bp(conn.exec()).await?.into_iter().collect();
    drop(conn);
    let profile = |user: i64, role: Role| -> Option<&Profile> {
        found
            .iter()
            .find(|p| p.user_id == user && p.profile_type == role.as_str())
    };
    let vat_bp = state.settings.invoice_vat_rate_bp;
    let (platform, _) = party_of_platform(&state.settings.platform_fiscal);
    let mut terms = HashMap::new();
    for &(expert_id, company_id) in pairs {
        let expert_profile = profile(expert_id, Role::Experto);
        let expert: Option<TaxParty> = expert_profile.and_then(party_of_profile).map(|p| p.0);
        let company: Option<TaxParty> = profile(company_id, Role::Empresa)
            .and_then(party_of_profile)
            .map(|p| p.0);
        let level = expert_profile
            .and_then(|p| Level::parse(&p.expert_level))
            .unwrap_or(Level::Global);
        let mut waiting = Vec::new();
        if expert.is_none() {
            waiting.push(Waiting::Expert);
        }
        if company.is_none() {
            waiting.push(Waiting::Company);
        }
        terms.insert(
            (expert_id, company_id),
            Terms {
                expert_invoice: expert
                    .zip(company)
                    .map(|(e, c)| rules::taxes(&e, &c, vat_bp)),
                platform_invoice: expert.map(|e| rules::taxes(&platform, &e, vat_bp)),
                // Every level is in the table (`rates_bp`).
                commission_rate_bp: rate_of[&level],
                waiting,
            },
        );
    }
    Ok(terms)
}

/// The terms of each proposal (by its id), its company being its project's.
pub async fn of_applications(
    state: &AppState,
    apps: &[Application],
) -> FlowResult<HashMap<i64, Terms>> {
    let mut project_ids: Vec<i64> = apps.iter().map(|a| a.project_id).collect();
    project_ids.sort_unstable();
    project_ids.dedup();
    let company_of: HashMap<i64, i64> = {
        let mut conn = state.db.conn().await?;
        projects::companies_of(conn.exec(), &project_ids)
            .await?
            .into_iter()
            .collect()
    };
    let pair_of = |a: &Application| company_of.get(&a.project_id).map(|&c| (a.expert_id, c));
    let pairs: Vec<(i64, i64)> = apps.iter().filter_map(pair_of).collect();
    let terms = between(state, &pairs).await?;
    Ok(apps
        .iter()
        .filter_map(|a| Some((a.id, terms.get(&pair_of(a)?)?.clone())))
        .collect())
}

/// The terms of each payment (by its id).
pub async fn of_payments(
    state: &AppState,
    payments: &[Payment],
) -> FlowResult<HashMap<i64, Terms>> {
    let pair_of = |y: &Payment| y.expert_id.zip(y.company_id);
    let pairs: Vec<(i64, i64)> = payments.iter().filter_map(pair_of).collect();
    let terms = between(state, &pairs).await?;
    Ok(payments
        .iter()
        .filter_map(|y| Some((y.id, terms.get(&pair_of(y)?)?.clone())))
        .collect())
}
