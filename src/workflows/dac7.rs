//! DAC7 tax-reporting review: each expert's yearly summary (fiscal data, income per quarter,
//! review status), the expert's confirmation, administrators asking experts to review, and
//! the annual report of reportable sellers.

use std::collections::HashSet;

use chrono::NaiveDate;
use serde::Serialize;
use serde_json::json;
use utoipa::ToSchema;

use crate::domain::dac7::{self, Dac7ReviewStatus, amount, csv_field, is_reportable};
use crate::domain::money::minor_to_number;
use crate::domain::user::Role;
use crate::integrations::mail::Template;
use crate::state::AppState;
use crate::store::dac7::{self as store, SellerYear};
use crate::store::events::{self, NewEvent};
use crate::store::profiles::{self, Profile};
use crate::workflows::emails::email;
use crate::workflows::error::{FlowError, FlowResult};
use crate::workflows::notify;

/// A tax year the service reports: from `dac7::FIRST_YEAR` to `dac7::LAST_YEAR`.
fn check_year(year: i32) -> FlowResult<()> {
    if (dac7::FIRST_YEAR..=dac7::LAST_YEAR).contains(&year) {
        Ok(())
    } else {
        Err(FlowError::invalid(
            "year",
            format!("must be from {} to {}", dac7::FIRST_YEAR, dac7::LAST_YEAR),
        ))
    }
}

fn fiscal_required() -> FlowError {
    FlowError::rule(
        "FISCAL_DATA_REQUIRED",
        "Complete your fiscal data before the DAC7 review",
    )
}

/// The expert's profile, which must carry complete fiscal data.
async fn expert_profile(state: &AppState, user_id: i64) -> FlowResult<Profile> {
    let mut conn = state.db.conn().await?;
    let profile = profiles::find_by_user(conn.exec(), user_id, Role::Experto)
        .await?
        .ok_or_else(fiscal_required)?;
    if !profile.fiscal_data_complete {
        return Err(fiscal_required());
    }
    Ok(profile)
}

#[derive(Debug, Serialize, ToSchema)]
pub struct FiscalData {
    pub fiscal_name: Option<String>,
    pub tax_id: Option<String>,
    pub vat_number: Option<String>,
    pub fiscal_type: Option<String>,
    pub fiscal_address: Option<String>,
    pub fiscal_postal_code: Option<String>,
    pub fiscal_city: Option<String>,
    pub fiscal_province: Option<String>,
    pub fiscal_country: Option<String>,
    pub birth_date: Option<String>,
}

/// Income of one quarter (amounts as decimal numbers).
#[derive(Debug, Serialize, ToSchema)]
pub struct QuarterIncome {
    pub quarter: u8,
    /// What companies paid for the expert's milestones, before commission.
    pub gross: f64,
    /// The platform's commission withheld.
    pub commission: f64,
    /// What the expert received.
    pub net: f64,
    pub paid_milestones: i64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct IncomeSummary {
    pub currency: &'static str,
    pub quarters: Vec<QuarterIncome>,
    pub total_gross: f64,
    pub total_commission: f64,
    pub total_net: f64,
    pub paid_milestones: i64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Dac7Summary {
    pub year: i32,
    pub fiscal_data: FiscalData,
    pub income_summary: IncomeSummary,
    /// `pending_review`, `notified` or `reviewed`.
    pub review_status: String,
    pub review_deadline: Option<String>,
    pub notified_at: Option<chrono::DateTime<chrono::Utc>>,
    pub reviewed_at: Option<chrono::DateTime<chrono::Utc>>,
    /// Whether the platform reports this expert for the year: 30 or more paid milestones, or
    /// more than EUR 2,000 gross.
    pub reportable: bool,
}

fn income_of(row: Option<&SellerYear>) -> IncomeSummary {
    let q = |quarter: u8, gross: i64, commission: i64, count: i64| QuarterIncome {
        quarter,
        gross: minor_to_number(gross),
        commission: minor_to_number(commission),
        net: minor_to_number(gross - commission),
        paid_milestones: count,
    };
    match row {
        None => IncomeSummary {
            currency: "eur",
            quarters: (1..=4).map(|n| q(n, 0, 0, 0)).collect(),
            total_gross: 0.0,
            total_commission: 0.0,
            total_net: 0.0,
            paid_milestones: 0,
        },
        Some(r) => IncomeSummary {
            currency: "eur",
            quarters: vec![
                q(1, r.q1_minor, r.q1_commission_minor, r.q1_count),
                q(2, r.q2_minor, r.q2_commission_minor, r.q2_count),
                q(3, r.q3_minor, r.q3_commission_minor, r.q3_count),
                q(4, r.q4_minor, r.q4_commission_minor, r.q4_count),
            ],
            total_gross: minor_to_number(r.gross_minor),
            total_commission: minor_to_number(r.commission_minor),
            total_net: minor_to_number(r.net_minor),
            paid_milestones: r.paid_activities,
        },
    }
}

pub async fn summary(state: &AppState, user_id: i64, year: i32) -> FlowResult<Dac7Summary> {
    check_year(year)?;
    let profile = expert_profile(state, user_id).await?;
    let mut conn = state.db.conn().await?;
    let rows = store::year_income(conn.exec(), year, Some(user_id)).await?;
    let review = store::review(conn.exec(), user_id, i64::from(year)).await?;
    let row = rows.first();
    Ok(Dac7Summary {
        year,
        fiscal_data: FiscalData {
            fiscal_name: profile.fiscal_name,
            tax_id: profile.tax_id,
            vat_number: profile.vat_number,
            fiscal_type: profile.fiscal_type,
            fiscal_address: profile.fiscal_address,
            fiscal_postal_code: profile.fiscal_postal_code,
            fiscal_city: profile.fiscal_city,
            fiscal_province: profile.fiscal_province,
            fiscal_country: profile.fiscal_country,
            birth_date: profile.birth_date,
        },
        income_summary: income_of(row),
        review_status: review
            .as_ref()
            .map_or(Dac7ReviewStatus::PendingReview, |r| r.status)
            .to_string(),
        review_deadline: review.as_ref().and_then(|r| r.review_deadline.clone()),
        notified_at: review.as_ref().and_then(|r| r.notified_at),
        reviewed_at: review.as_ref().and_then(|r| r.reviewed_at),
        reportable: row.is_some_and(|r| is_reportable(r.paid_activities, r.gross_minor)),
    })
}

/// The expert confirms their data for `period`; once per year (409 after).
pub async fn confirm(
    state: &AppState,
    user_id: i64,
    period: i32,
    confirmed: bool,
) -> FlowResult<Dac7Summary> {
    check_year(period)?;
    if !confirmed {
        return Err(FlowError::rule(
            "CONFIRMATION_REQUIRED",
            "Confirm that your fiscal data and income summary are correct",
        ));
    }
    expert_profile(state, user_id).await?;
    let mut tx = state.db.begin().await?;
    if !store::mark_reviewed(tx.exec(), user_id, i64::from(period), state.clock.now()).await? {
        return Err(FlowError::conflict(
            "ALREADY_REVIEWED",
            format!("The DAC7 data of {period} was already reviewed"),
        ));
    }
    tx.commit().await?;
    summary(state, user_id, period).await
}

#[derive(Debug, Serialize, ToSchema)]
pub struct NotifyOutcome {
    pub notified_count: i64,
    pub skipped_count: i64,
}

/// Experts asked to review together, in two statements and one event: a year's sellers at L
/// are 148,000, and one event for every expert asked was a payload of 3.3 MB at M.
const NOTIFIED_PER_EVENT: usize = 1_000;

/// Asks every expert with complete fiscal data and income in `year` to review it, by e-mail
/// and notification; experts who already reviewed the year are skipped. All or none: one
/// transaction, a few statements and one event per thousand experts.
pub async fn notify_experts(
    state: &AppState,
    year: i32,
    review_deadline: &str,
) -> FlowResult<NotifyOutcome> {
    check_year(year)?;
    let deadline = NaiveDate::parse_from_str(review_deadline, "%Y-%m-%d")
        .map_err(|_| FlowError::invalid("review_deadline", "must be a date, YYYY-MM-DD"))?
        .format("%Y-%m-%d")
        .to_string();
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    let sellers = store::year_income(tx.exec(), year, None).await?;
    let eligible: Vec<&SellerYear> = sellers
        .iter()
        .filter(|s| s.fiscal_data_complete && s.gross_minor > 0)
        .collect();
    let mut outcome = NotifyOutcome {
        notified_count: 0,
        skipped_count: 0,
    };
    for batch in eligible.chunks(NOTIFIED_PER_EVENT) {
        let ids: Vec<i64> = batch.iter().map(|s| s.user_id).collect();
        let marked: HashSet<i64> =
            store::mark_notified(tx.exec(), &ids, i64::from(year), &deadline, now)
                .await?
                .into_iter()
                .collect();
        outcome.notified_count += marked.len() as i64;
        outcome.skipped_count += (batch.len() - marked.len()) as i64;
        let (mails, notes): (Vec<_>, Vec<_>) = batch
            .iter()
            .filter(|s| marked.contains(&s.user_id))
            .map(|s| {
                let name = s.fiscal_name.clone().unwrap_or_default();
                (
                    email(
                        &s.email,
                        Template::Dac7ReviewRequest,
                        json!({"name": name, "year": year, "review_deadline": deadline}),
                    ),
                    notify::for_user(
                        s.user_id,
                        "dac7_review_requested",
                        "Review your DAC7 data",
                        &format!(
                            "Please review your {year} fiscal data and income before {deadline}."
                        ),
                        json!({"year": year, "review_deadline": deadline}),
                    ),
                )
            })
            .unzip();
        if !mails.is_empty() {
            events::record(
                tx.exec(),
                NewEvent {
                    kind: "dac7.experts_notified",
                    aggregate: "dac7",
                    aggregate_id: Some(i64::from(year)),
                    payload: json!({"year": year, "email": mails, "notify": notes}),
                },
                now,
            )
            .await?;
        }
    }
    state.commit(tx).await?;
    Ok(outcome)
}

/// The report's first line.
const REPORT_HEADER: &str = "year,user_id,fiscal_name,tax_id,vat_number,fiscal_type,birth_date,\
     fiscal_address,fiscal_postal_code,fiscal_city,fiscal_country,currency,gross_q1,gross_q2,\
     gross_q3,gross_q4,gross_total,commission_total,net_total,paid_activities,review_status\n";

/// The report is written in pieces of about this many bytes, not a piece per line.
const REPORT_PIECE_BYTES: usize = 64 * 1024;

/// Writes the annual report to `out`: a CSV header, then one line per reportable seller of
/// `year` by account id, as the database answers them, so a report of any size takes the
/// memory of one piece. `out` should take the pieces at the database's pace (a file, not the
/// client): the statement runs until its last row is read, under the statement timeout.
pub async fn write_report_csv(
    state: &AppState,
    year: i32,
    out: &mut (impl tokio::io::AsyncWrite + Unpin),
) -> FlowResult<()> {
    use anyhow::Context as _;
    use futures_util::StreamExt as _;
    use tokio::io::AsyncWriteExt as _;
    check_year(year)?;
    let mut piece = String::from(REPORT_HEADER);
    let mut conn = state.db.conn().await?;
    let mut sellers = store::year_income_stream(conn.exec(), year);
    while let Some(seller) = sellers.next().await {
        let seller = seller?;
        if is_reportable(seller.paid_activities, seller.gross_minor) {
            piece.push_str(&report_line(year, &seller));
        }
        if piece.len() >= REPORT_PIECE_BYTES {
            out.write_all(piece.as_bytes())
                .await
                .context("writing the DAC7 report")?;
            piece.clear();
        }
    }
    out.write_all(piece.as_bytes())
        .await
        .context("writing the DAC7 report")?;
    Ok(())
}

/// One seller's line of the report.
fn report_line(year: i32, s: &store::SellerYear) -> String {
    let text = |v: &Option<String>| csv_field(v.as_deref().unwrap_or_default());
    let fields = [
        year.to_string(),
        s.user_id.to_string(),
        text(&s.fiscal_name),
        text(&s.tax_id),
        text(&s.vat_number),
        text(&s.fiscal_type),
        text(&s.birth_date),
        text(&s.fiscal_address),
        text(&s.fiscal_postal_code),
        text(&s.fiscal_city),
        text(&s.fiscal_country),
        "eur".to_owned(),
        amount(s.q1_minor),
        amount(s.q2_minor),
        amount(s.q3_minor),
        amount(s.q4_minor),
        amount(s.gross_minor),
        amount(s.commission_minor),
        amount(s.net_minor),
        s.paid_activities.to_string(),
        text(&Some(
            s.review_status
                .unwrap_or(Dac7ReviewStatus::PendingReview)
                .to_string(),
        )),
    ];
    let mut line = fields.join(",");
    line.push('\n');
    line
}
