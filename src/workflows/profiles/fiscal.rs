//! Fiscal data of a profile and its completeness.

use serde::Deserialize;
use utoipa::ToSchema;

use chrono::NaiveDate;

use crate::domain::profile::{self as rules, FISCAL_TYPES, FiscalFields, IRPF_RATES};
use crate::domain::user::Role;
use crate::state::AppState;
use crate::store::profiles::{self, Profile};
use crate::workflows::error::{FieldError, FlowError, FlowResult};

use super::*;

/// The fiscal fields of a profile. An absent field keeps its value; an empty string (or
/// `null` for `irpf_rate`, which cannot be cleared here) clears a text field.
#[derive(Deserialize, ToSchema)]
pub struct FiscalInput {
    pub tax_id: Option<String>,
    pub fiscal_name: Option<String>,
    pub fiscal_address: Option<String>,
    pub fiscal_postal_code: Option<String>,
    pub fiscal_city: Option<String>,
    pub fiscal_province: Option<String>,
    pub fiscal_country: Option<String>,
    /// `autonomo`, `empresa` or `individual`.
    pub fiscal_type: Option<String>,
    /// `YYYY-MM-DD`.
    pub birth_date: Option<String>,
    pub vat_number: Option<String>,
    /// 0, 7 or 15.
    pub irpf_rate: Option<i64>,
    pub commercial_registry: Option<String>,
}

pub fn fiscal_fields(p: &Profile) -> FiscalFields<'_> {
    FiscalFields {
        tax_id: p.tax_id.as_deref(),
        fiscal_name: p.fiscal_name.as_deref(),
        fiscal_address: p.fiscal_address.as_deref(),
        fiscal_postal_code: p.fiscal_postal_code.as_deref(),
        fiscal_city: p.fiscal_city.as_deref(),
        fiscal_country: p.fiscal_country.as_deref(),
        fiscal_type: p.fiscal_type.as_deref(),
    }
}

pub fn role_of(p: &Profile) -> Role {
    Role::parse(&p.profile_type).unwrap_or(Role::Empresa)
}

fn apply_fiscal(p: &mut Profile, input: &FiscalInput) -> FlowResult<()> {
    let mut errors = Vec::new();
    set_text(&mut p.tax_id, &input.tax_id, "tax_id", 50, &mut errors);
    set_text(
        &mut p.fiscal_name,
        &input.fiscal_name,
        "fiscal_name",
        200,
        &mut errors,
    );
    set_text(
        &mut p.fiscal_address,
        &input.fiscal_address,
        "fiscal_address",
        300,
        &mut errors,
    );
    set_text(
        &mut p.fiscal_postal_code,
        &input.fiscal_postal_code,
        "fiscal_postal_code",
        20,
        &mut errors,
    );
    set_text(
        &mut p.fiscal_city,
        &input.fiscal_city,
        "fiscal_city",
        100,
        &mut errors,
    );
    set_text(
        &mut p.fiscal_province,
        &input.fiscal_province,
        "fiscal_province",
        100,
        &mut errors,
    );
    set_text(
        &mut p.fiscal_country,
        &input.fiscal_country,
        "fiscal_country",
        100,
        &mut errors,
    );
    set_text(
        &mut p.vat_number,
        &input.vat_number,
        "vat_number",
        50,
        &mut errors,
    );
    set_text(
        &mut p.commercial_registry,
        &input.commercial_registry,
        "commercial_registry",
        200,
        &mut errors,
    );
    if let Some(kind) = &input.fiscal_type {
        let kind = kind.trim();
        if kind.is_empty() {
            p.fiscal_type = None;
        } else if FISCAL_TYPES.contains(&kind) {
            p.fiscal_type = Some(kind.to_owned());
        } else {
            errors.push(FieldError::new(
                "fiscal_type",
                "must be autonomo, empresa or individual",
            ));
        }
    }
    if let Some(date) = &input.birth_date {
        let date = date.trim();
        if date.is_empty() {
            p.birth_date = None;
        } else if let Ok(parsed) = NaiveDate::parse_from_str(date, "%Y-%m-%d") {
            p.birth_date = Some(parsed.format("%Y-%m-%d").to_string());
        } else {
            errors.push(FieldError::new("birth_date", "must be a date YYYY-MM-DD"));
        }
    }
    if let Some(rate) = input.irpf_rate {
        if IRPF_RATES.contains(&rate) {
            p.irpf_rate = Some(rate);
        } else {
            errors.push(FieldError::new("irpf_rate", "must be 0, 7 or 15"));
        }
    }
    if !errors.is_empty() {
        return Err(FlowError::Invalid(errors));
    }
    p.fiscal_data_complete = rules::fiscal_data_complete(role_of(p), &fiscal_fields(p));
    Ok(())
}

/// Updates the fiscal data of `user_id`'s own profile `id` and recomputes
/// `fiscal_data_complete`.
pub async fn update_fiscal(
    state: &AppState,
    user_id: i64,
    id: i64,
    input: &FiscalInput,
) -> FlowResult<Profile> {
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    let mut profile = owned_profile(tx.exec(), id, user_id).await?;
    apply_fiscal(&mut profile, input)?;
    profiles::update_fiscal(tx.exec(), &profile, now).await?;
    let profile = profiles::find(tx.exec(), profile.id)
        .await?
        .ok_or_else(|| FlowError::not_found("Profile not found"))?;
    tx.commit().await?;
    // Documents kept waiting for this data are issued now; the update stands either way (a
    // failure leaves them pending for the next change, and the administrators' list).
    if profile.fiscal_data_complete
        && let Err(error) = crate::workflows::invoices::issue_pending_of(state, user_id).await
    {
        tracing::warn!(user_id, %error, "pending invoices not issued yet");
    }
    Ok(profile)
}
