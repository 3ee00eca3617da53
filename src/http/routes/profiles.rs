//! Profiles: `/api/profiles/*` (one profile per role per user, fiscal data, expert search,
//! administrators' team profiles), `/api/skills/*`, and the administrators' profile
//! moderation under `/api/admin/users/{user_id}/…` and `/api/admin/profiles`.
//!
//! Three views of a profile: [`PublicProfile`] for everyone (no contact, fiscal, payout or
//! moderation data), [`ProfileView`] for its owner (adds contact and fiscal data) and
//! [`AdminProfileView`] for administrators (adds `verification_notes` and the internal
//! rating).

use actix_web::{HttpResponse, get, post, put, web};
use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::domain::profile::{
    self as rules, EXPERT_LEVELS, FISCAL_TYPES, FiscalFields, IRPF_RATES, VerificationAction,
};
use crate::domain::user::Role;
use crate::http::auth::{AdminUser, AuthUser, CsrfChecked};
use crate::http::error::{ApiError, ApiResult, ErrorBody, FieldError};
use crate::http::pagination::{Page, PageQuery, Paginated};
use crate::state::AppState;
use crate::store::profiles::{self, AdminFilter, ExpertFilter, Profile, TeamProfile};
use crate::store::{Exec, skills, users};

// ---------------------------------------------------------------------------------------
// Views
// ---------------------------------------------------------------------------------------

#[derive(Serialize, ToSchema)]
pub struct SkillView {
    pub id: i64,
    pub name: String,
    pub slug: String,
    pub category: Option<String>,
}

impl From<skills::Skill> for SkillView {
    fn from(s: skills::Skill) -> Self {
        Self {
            id: s.id,
            name: s.name,
            slug: s.slug,
            category: s.category,
        }
    }
}

/// What anyone may see of a profile.
#[derive(Serialize, ToSchema)]
pub struct PublicProfile {
    pub id: i64,
    pub user_id: i64,
    /// `empresa`, `experto` or `admin`.
    pub profile_type: String,
    pub full_name: Option<String>,
    pub bio: Option<String>,
    pub location: Option<String>,
    pub profile_picture: Option<String>,
    pub is_verified: bool,
    /// `pending`, `pre_evaluated`, `verified`, `rejected` or `resubmitted`.
    pub verification_status: String,
    pub slug: Option<String>,
    /// `Global`, `Pro` or `Enterprise`.
    pub expert_level: String,
    pub availability: Option<String>,
    /// A decimal number with at most 2 decimals.
    pub hourly_rate: Option<f64>,
    pub experience_years: Option<i64>,
    pub main_area: Option<String>,
    pub work_language: Option<String>,
    pub portfolio_url: Option<String>,
    pub linkedin_url: Option<String>,
    pub company_name: Option<String>,
    pub company_website: Option<String>,
    pub company_type: Option<String>,
    pub industry: Option<String>,
    pub company_size: Option<String>,
    pub preferred_language: Option<String>,
    pub skills: Vec<SkillView>,
    pub created_at: DateTime<Utc>,
}

/// A profile as its owner sees it.
#[derive(Serialize, ToSchema)]
pub struct ProfileView {
    #[serde(flatten)]
    pub public: PublicProfile,
    pub phone: Option<String>,
    pub contact_person: Option<String>,
    pub company_email: Option<String>,
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
    /// 0, 7 or 15 (percent).
    pub irpf_rate: Option<i64>,
    pub commercial_registry: Option<String>,
    pub fiscal_data_complete: bool,
    pub dac7_review_status: Option<String>,
    pub dac7_review_period: Option<i64>,
    pub dac7_reviewed_at: Option<DateTime<Utc>>,
    pub processor_connect_account_id: Option<String>,
    pub processor_connect_status: Option<String>,
    pub updated_at: DateTime<Utc>,
}

/// A profile as administrators see it.
#[derive(Serialize, ToSchema)]
pub struct AdminProfileView {
    #[serde(flatten)]
    pub profile: ProfileView,
    pub verification_notes: Option<String>,
    /// 1.0 to 5.0.
    pub internal_rating: Option<f64>,
    pub verified_at: Option<DateTime<Utc>>,
    pub verified_by: Option<i64>,
}

fn public_view(p: &Profile, skills: Vec<skills::Skill>) -> PublicProfile {
    PublicProfile {
        id: p.id,
        user_id: p.user_id,
        profile_type: p.profile_type.clone(),
        full_name: p.full_name.clone(),
        bio: p.bio.clone(),
        location: p.location.clone(),
        profile_picture: p.profile_picture.clone(),
        is_verified: p.is_verified,
        verification_status: p.verification_status.clone(),
        slug: p.slug.clone(),
        expert_level: p.expert_level.clone(),
        availability: p.availability.clone(),
        hourly_rate: p
            .hourly_rate_minor
            .map(crate::domain::money::minor_to_number),
        experience_years: p.experience_years,
        main_area: p.main_area.clone(),
        work_language: p.work_language.clone(),
        portfolio_url: p.portfolio_url.clone(),
        linkedin_url: p.linkedin_url.clone(),
        company_name: p.company_name.clone(),
        company_website: p.company_website.clone(),
        company_type: p.company_type.clone(),
        industry: p.industry.clone(),
        company_size: p.company_size.clone(),
        preferred_language: p.preferred_language.clone(),
        skills: skills.into_iter().map(SkillView::from).collect(),
        created_at: p.created_at,
    }
}

fn owner_view(p: Profile, skills: Vec<skills::Skill>) -> ProfileView {
    ProfileView {
        public: public_view(&p, skills),
        phone: p.phone,
        contact_person: p.contact_person,
        company_email: p.company_email,
        tax_id: p.tax_id,
        fiscal_name: p.fiscal_name,
        fiscal_address: p.fiscal_address,
        fiscal_postal_code: p.fiscal_postal_code,
        fiscal_city: p.fiscal_city,
        fiscal_province: p.fiscal_province,
        fiscal_country: p.fiscal_country,
        fiscal_type: p.fiscal_type,
        birth_date: p.birth_date,
        vat_number: p.vat_number,
        irpf_rate: p.irpf_rate,
        commercial_registry: p.commercial_registry,
        fiscal_data_complete: p.fiscal_data_complete,
        dac7_review_status: p.dac7_review_status,
        dac7_review_period: p.dac7_review_period,
        dac7_reviewed_at: p.dac7_reviewed_at,
        processor_connect_account_id: p.processor_connect_account_id,
        processor_connect_status: p.processor_connect_status,
        updated_at: p.updated_at,
    }
}

fn admin_view(p: Profile, skills: Vec<skills::Skill>) -> AdminProfileView {
    let verification_notes = p.verification_notes.clone();
    let internal_rating = p.internal_rating;
    let verified_at = p.verified_at;
    let verified_by = p.verified_by;
    AdminProfileView {
        profile: owner_view(p, skills),
        verification_notes,
        internal_rating,
        verified_at,
        verified_by,
    }
}

async fn public_of(mut ex: Exec<'_>, p: &Profile) -> ApiResult<PublicProfile> {
    let skills = skills::of_profile(ex.re(), p.id).await?;
    Ok(public_view(p, skills))
}

async fn owner_of(mut ex: Exec<'_>, p: Profile) -> ApiResult<ProfileView> {
    let skills = skills::of_profile(ex.re(), p.id).await?;
    Ok(owner_view(p, skills))
}

async fn admin_of(mut ex: Exec<'_>, p: Profile) -> ApiResult<AdminProfileView> {
    let skills = skills::of_profile(ex.re(), p.id).await?;
    Ok(admin_view(p, skills))
}

// ---------------------------------------------------------------------------------------
// Input
// ---------------------------------------------------------------------------------------

/// The descriptive fields of a profile (create and update). On update an absent field keeps
/// its value and an empty string clears it.
#[derive(Deserialize, ToSchema, Default)]
pub struct ProfileInput {
    /// `empresa`, `experto` or `admin`; required on create, must be one of the caller's roles.
    pub profile_type: Option<String>,
    pub full_name: Option<String>,
    pub bio: Option<String>,
    pub phone: Option<String>,
    pub location: Option<String>,
    pub availability: Option<String>,
    /// A JSON number with at most 2 decimals.
    #[schema(value_type = Option<f64>)]
    pub hourly_rate: Option<serde_json::Number>,
    pub experience_years: Option<i64>,
    pub main_area: Option<String>,
    pub work_language: Option<String>,
    pub portfolio_url: Option<String>,
    pub linkedin_url: Option<String>,
    pub company_name: Option<String>,
    pub company_website: Option<String>,
    pub contact_person: Option<String>,
    pub company_type: Option<String>,
    pub industry: Option<String>,
    pub company_size: Option<String>,
    pub company_email: Option<String>,
    pub preferred_language: Option<String>,
    /// Skill names; unknown skills are created. Replaces the profile's skills.
    pub skills: Option<Vec<String>>,
}

/// Sets `target` from `value` when given: trimmed, empty clears, at most `max` characters.
fn set_text(
    target: &mut Option<String>,
    value: &Option<String>,
    field: &str,
    max: usize,
    errors: &mut Vec<FieldError>,
) {
    if let Some(value) = value {
        let value = value.trim();
        if value.chars().count() > max {
            errors.push(FieldError::new(
                field,
                format!("must be at most {max} characters"),
            ));
        } else {
            *target = (!value.is_empty()).then(|| value.to_owned());
        }
    }
}

/// Applies `input` to `p`, validating every field; the skill names (trimmed, distinct) to set.
fn apply_input(p: &mut Profile, input: &ProfileInput) -> ApiResult<Option<Vec<String>>> {
    let mut errors = Vec::new();
    set_text(
        &mut p.full_name,
        &input.full_name,
        "full_name",
        200,
        &mut errors,
    );
    set_text(&mut p.bio, &input.bio, "bio", 5000, &mut errors);
    set_text(&mut p.phone, &input.phone, "phone", 50, &mut errors);
    set_text(
        &mut p.location,
        &input.location,
        "location",
        200,
        &mut errors,
    );
    set_text(
        &mut p.availability,
        &input.availability,
        "availability",
        100,
        &mut errors,
    );
    set_text(
        &mut p.main_area,
        &input.main_area,
        "main_area",
        200,
        &mut errors,
    );
    set_text(
        &mut p.work_language,
        &input.work_language,
        "work_language",
        100,
        &mut errors,
    );
    set_text(
        &mut p.portfolio_url,
        &input.portfolio_url,
        "portfolio_url",
        2048,
        &mut errors,
    );
    set_text(
        &mut p.linkedin_url,
        &input.linkedin_url,
        "linkedin_url",
        2048,
        &mut errors,
    );
    set_text(
        &mut p.company_name,
        &input.company_name,
        "company_name",
        200,
        &mut errors,
    );
    set_text(
        &mut p.company_website,
        &input.company_website,
        "company_website",
        2048,
        &mut errors,
    );
    set_text(
        &mut p.contact_person,
        &input.contact_person,
        "contact_person",
        200,
        &mut errors,
    );
    set_text(
        &mut p.company_type,
        &input.company_type,
        "company_type",
        100,
        &mut errors,
    );
    set_text(
        &mut p.industry,
        &input.industry,
        "industry",
        100,
        &mut errors,
    );
    set_text(
        &mut p.company_size,
        &input.company_size,
        "company_size",
        100,
        &mut errors,
    );
    set_text(
        &mut p.company_email,
        &input.company_email,
        "company_email",
        254,
        &mut errors,
    );
    set_text(
        &mut p.preferred_language,
        &input.preferred_language,
        "preferred_language",
        50,
        &mut errors,
    );
    if let Some(rate) = &input.hourly_rate {
        match crate::domain::money::parse_number(rate) {
            Ok(minor) => p.hourly_rate_minor = Some(minor),
            Err(message) => errors.push(FieldError::new("hourly_rate", message)),
        }
    }
    if let Some(years) = input.experience_years {
        if (0..=100).contains(&years) {
            p.experience_years = Some(years);
        } else {
            errors.push(FieldError::new("experience_years", "must be from 0 to 100"));
        }
    }
    let skills = match &input.skills {
        None => None,
        Some(names) => {
            let mut out: Vec<String> = Vec::new();
            for name in names {
                let name = name.trim();
                if name.is_empty() {
                    continue;
                }
                if name.chars().count() > 100 || rules::slugify(name).is_empty() {
                    errors.push(FieldError::new(
                        "skills",
                        "each skill needs letters or digits and at most 100 characters",
                    ));
                    break;
                }
                if !out
                    .iter()
                    .any(|n| rules::slugify(n) == rules::slugify(name))
                {
                    out.push(name.to_owned());
                }
            }
            if out.len() > 50 {
                errors.push(FieldError::new("skills", "at most 50 skills"));
            }
            Some(out)
        }
    };
    if errors.is_empty() {
        Ok(skills)
    } else {
        Err(ApiError::validation(errors))
    }
}

async fn save_skills(
    mut ex: Exec<'_>,
    profile_id: i64,
    names: &[String],
    now: DateTime<Utc>,
) -> ApiResult<()> {
    let mut ids = Vec::with_capacity(names.len());
    for name in names {
        ids.push(skills::ensure(ex.re(), name, &rules::slugify(name), now).await?);
    }
    skills::set_for_profile(ex, profile_id, &ids).await?;
    Ok(())
}

fn parse_profile_type(value: Option<&str>) -> ApiResult<Role> {
    value
        .and_then(Role::parse)
        .ok_or_else(|| ApiError::invalid_field("profile_type", "must be empresa, experto or admin"))
}

fn profile_exists() -> ApiError {
    ApiError::conflict(
        "PROFILE_EXISTS",
        "This user already has a profile of this type",
    )
}

/// Creates the `role` profile of `user_id` from `input` in one transaction: 409 when one
/// exists. Experts get a unique slug from their name (or username) and the level `Global`.
async fn create_profile(
    state: &AppState,
    user_id: i64,
    username: &str,
    role: Role,
    input: &ProfileInput,
) -> ApiResult<ProfileView> {
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    if profiles::find_by_user(tx.exec(), user_id, role.as_str())
        .await?
        .is_some()
    {
        return Err(profile_exists());
    }
    let slug = if role == Role::Experto {
        let name = input
            .full_name
            .as_deref()
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .unwrap_or(username);
        let base = rules::expert_base_slug(Some(name));
        let taken = profiles::slugs_like(tx.exec(), &base).await?;
        Some(rules::unique_slug(&base, &taken))
    } else {
        None
    };
    let id = profiles::insert(tx.exec(), user_id, role.as_str(), slug.as_deref(), now)
        .await
        .map_err(|e| {
            if e.is_unique_violation() {
                profile_exists()
            } else {
                e.into()
            }
        })?;
    let mut profile = profiles::find(tx.exec(), id)
        .await?
        .ok_or_else(|| ApiError::not_found("Profile not found"))?;
    let skill_names = apply_input(&mut profile, input)?;
    profiles::update_details(tx.exec(), &profile, now).await?;
    if let Some(names) = &skill_names {
        save_skills(tx.exec(), id, names, now).await?;
    }
    let profile = profiles::find(tx.exec(), id)
        .await?
        .ok_or_else(|| ApiError::not_found("Profile not found"))?;
    if role != Role::Admin {
        // Administrators are told, so verification can start.
        let who = profile
            .company_name
            .clone()
            .or_else(|| profile.full_name.clone())
            .unwrap_or_else(|| username.to_owned());
        let kind = if role == Role::Empresa {
            "company"
        } else {
            "expert"
        };
        crate::store::events::record(
            tx.exec(),
            crate::store::events::NewEvent {
                kind: "profile.created",
                aggregate: "profile",
                aggregate_id: Some(id),
                payload: serde_json::json!({
                    "profile_id": id, "user_id": user_id, "profile_type": role.as_str(),
                    "notify": [crate::workflows::notify::for_admins(
                        "profile_created",
                        "New profile to verify",
                        &format!("{who} created a {kind} profile."),
                        serde_json::json!({"profile_id": id, "user_id": user_id,
                                           "profile_type": role.as_str()}),
                    )],
                }),
            },
            now,
        )
        .await?;
    }
    let view = owner_of(tx.exec(), profile).await?;
    tx.commit().await?;
    state.outbox.wake();
    Ok(view)
}

/// The profile `id`, when `user` owns it: 404 unknown, 403 someone else's.
async fn owned_profile(ex: Exec<'_>, id: i64, user_id: i64) -> ApiResult<Profile> {
    let profile = profiles::find(ex, id)
        .await?
        .ok_or_else(|| ApiError::not_found("Profile not found"))?;
    if profile.user_id != user_id {
        return Err(ApiError::forbidden("This profile belongs to someone else"));
    }
    Ok(profile)
}

// ---------------------------------------------------------------------------------------
// Own profiles
// ---------------------------------------------------------------------------------------

/// Creates a profile for one of the caller's roles (CSRF protected).
#[utoipa::path(
    tag = "profiles",
    request_body = ProfileInput,
    security(("bearer" = [])),
    responses(
        (status = 201, body = ProfileView),
        (status = 403, body = ErrorBody, description = "Not one of the caller's roles, or CSRF"),
        (status = 409, body = ErrorBody, description = "A profile of this type exists"),
        (status = 422, body = ErrorBody),
    )
)]
#[post("/api/profiles")]
pub async fn create(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    body: web::Json<ProfileInput>,
) -> ApiResult<HttpResponse> {
    let role = parse_profile_type(body.profile_type.as_deref())?;
    if !auth.has_role(role) {
        return Err(ApiError::forbidden(
            "The profile type must be one of your roles",
        ));
    }
    let view = create_profile(&state, auth.id(), &auth.user.username, role, &body).await?;
    Ok(HttpResponse::Created().json(view))
}

async fn my_profile(state: &AppState, auth: &AuthUser) -> ApiResult<HttpResponse> {
    let mut conn = state.db.conn().await?;
    let profile = profiles::find_by_user(conn.exec(), auth.id(), auth.user.active_role.as_str())
        .await?
        .ok_or_else(|| ApiError::not_found("No profile for the active role"))?;
    Ok(HttpResponse::Ok().json(owner_of(conn.exec(), profile).await?))
}

/// The caller's profile for the active role.
#[utoipa::path(
    tag = "profiles",
    security(("bearer" = [])),
    responses((status = 200, body = ProfileView), (status = 404, body = ErrorBody))
)]
#[get("/api/profiles/me")]
pub async fn me(state: web::Data<AppState>, auth: AuthUser) -> ApiResult<HttpResponse> {
    my_profile(&state, &auth).await
}

/// Alias of `/api/profiles/me`.
#[utoipa::path(
    tag = "profiles",
    security(("bearer" = [])),
    responses((status = 200, body = ProfileView), (status = 404, body = ErrorBody))
)]
#[get("/api/profiles/me/profile")]
pub async fn me_profile(state: web::Data<AppState>, auth: AuthUser) -> ApiResult<HttpResponse> {
    my_profile(&state, &auth).await
}

/// A profile's public view: no contact, fiscal, payout or moderation data.
#[utoipa::path(
    tag = "profiles",
    params(("id" = i64, Path)),
    responses((status = 200, body = PublicProfile), (status = 404, body = ErrorBody))
)]
#[get("/api/profiles/{id}")]
pub async fn public_profile(
    state: web::Data<AppState>,
    id: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let mut conn = state.db.conn().await?;
    let profile = profiles::find(conn.exec(), id.into_inner())
        .await?
        .ok_or_else(|| ApiError::not_found("Profile not found"))?;
    Ok(HttpResponse::Ok().json(public_of(conn.exec(), &profile).await?))
}

/// Updates the caller's own profile (CSRF protected); `profile_type` cannot change.
#[utoipa::path(
    tag = "profiles",
    params(("id" = i64, Path)),
    request_body = ProfileInput,
    security(("bearer" = [])),
    responses(
        (status = 200, body = ProfileView),
        (status = 403, body = ErrorBody, description = "Someone else's profile, or CSRF"),
        (status = 404, body = ErrorBody),
        (status = 422, body = ErrorBody),
    )
)]
#[put("/api/profiles/{id}")]
pub async fn update(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    id: web::Path<i64>,
    body: web::Json<ProfileInput>,
) -> ApiResult<HttpResponse> {
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    let mut profile = owned_profile(tx.exec(), id.into_inner(), auth.id()).await?;
    if let Some(kind) = body.profile_type.as_deref()
        && kind != profile.profile_type
    {
        return Err(ApiError::invalid_field(
            "profile_type",
            "the type of a profile cannot change",
        ));
    }
    let skill_names = apply_input(&mut profile, &body)?;
    if profile.profile_type == Role::Experto.as_str() && profile.slug.is_none() {
        let base = rules::expert_base_slug(
            profile
                .full_name
                .as_deref()
                .or(Some(auth.user.username.as_str())),
        );
        let taken = profiles::slugs_like(tx.exec(), &base).await?;
        profile.slug = Some(rules::unique_slug(&base, &taken));
    }
    profiles::update_details(tx.exec(), &profile, now).await?;
    if let Some(names) = &skill_names {
        save_skills(tx.exec(), profile.id, names, now).await?;
    }
    let profile = profiles::find(tx.exec(), profile.id)
        .await?
        .ok_or_else(|| ApiError::not_found("Profile not found"))?;
    let view = owner_of(tx.exec(), profile).await?;
    tx.commit().await?;
    Ok(HttpResponse::Ok().json(view))
}

// ---------------------------------------------------------------------------------------
// Fiscal data
// ---------------------------------------------------------------------------------------

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

fn fiscal_fields(p: &Profile) -> FiscalFields<'_> {
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

fn role_of(p: &Profile) -> Role {
    Role::parse(&p.profile_type).unwrap_or(Role::Empresa)
}

fn apply_fiscal(p: &mut Profile, input: &FiscalInput) -> ApiResult<()> {
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
        return Err(ApiError::validation(errors));
    }
    p.fiscal_data_complete = rules::fiscal_data_complete(role_of(p), &fiscal_fields(p));
    Ok(())
}

/// Updates the fiscal data of the caller's own profile (CSRF protected) and recomputes
/// `fiscal_data_complete`.
#[utoipa::path(
    tag = "profiles",
    params(("id" = i64, Path)),
    request_body = FiscalInput,
    security(("bearer" = [])),
    responses(
        (status = 200, body = ProfileView),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 422, body = ErrorBody, description = "fiscal_type or irpf_rate outside the allowed values"),
    )
)]
#[put("/api/profiles/{id}/fiscal-data")]
pub async fn update_fiscal(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    id: web::Path<i64>,
    body: web::Json<FiscalInput>,
) -> ApiResult<HttpResponse> {
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    let mut profile = owned_profile(tx.exec(), id.into_inner(), auth.id()).await?;
    apply_fiscal(&mut profile, &body)?;
    profiles::update_fiscal(tx.exec(), &profile, now).await?;
    let profile = profiles::find(tx.exec(), profile.id)
        .await?
        .ok_or_else(|| ApiError::not_found("Profile not found"))?;
    let view = owner_of(tx.exec(), profile).await?;
    tx.commit().await?;
    Ok(HttpResponse::Ok().json(view))
}

#[derive(Serialize, ToSchema)]
pub struct FiscalStatus {
    pub profile_id: i64,
    pub profile_type: String,
    pub fiscal_data_complete: bool,
    /// Required fields still missing.
    pub missing_fields: Vec<String>,
}

/// Fiscal completeness of the caller's active-role profile.
#[utoipa::path(
    tag = "profiles",
    security(("bearer" = [])),
    responses((status = 200, body = FiscalStatus), (status = 404, body = ErrorBody))
)]
#[get("/api/profiles/me/fiscal-status")]
pub async fn fiscal_status(state: web::Data<AppState>, auth: AuthUser) -> ApiResult<HttpResponse> {
    let mut conn = state.db.conn().await?;
    let profile = profiles::find_by_user(conn.exec(), auth.id(), auth.user.active_role.as_str())
        .await?
        .ok_or_else(|| ApiError::not_found("No profile for the active role"))?;
    let missing = rules::missing_fiscal_fields(role_of(&profile), &fiscal_fields(&profile));
    Ok(HttpResponse::Ok().json(FiscalStatus {
        profile_id: profile.id,
        profile_type: profile.profile_type.clone(),
        fiscal_data_complete: missing.is_empty(),
        missing_fields: missing.into_iter().map(str::to_owned).collect(),
    }))
}

// ---------------------------------------------------------------------------------------
// Experts and skills
// ---------------------------------------------------------------------------------------

/// A public expert profile by slug; a legacy slug without hyphens finds it too.
#[utoipa::path(
    tag = "profiles",
    params(("slug" = String, Path)),
    responses((status = 200, body = PublicProfile), (status = 404, body = ErrorBody))
)]
#[get("/api/profiles/experts/slug/{slug}")]
pub async fn expert_by_slug(
    state: web::Data<AppState>,
    slug: web::Path<String>,
) -> ApiResult<HttpResponse> {
    let raw = slug.into_inner();
    let normalised = rules::slugify(&raw);
    let key = rules::slug_key(&raw);
    if key.is_empty() {
        return Err(ApiError::not_found("Expert not found"));
    }
    let mut conn = state.db.conn().await?;
    let profile = profiles::find_expert_by_slug(conn.exec(), &normalised, &key)
        .await?
        .ok_or_else(|| ApiError::not_found("Expert not found"))?;
    Ok(HttpResponse::Ok().json(public_of(conn.exec(), &profile).await?))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ExpertQuery {
    /// A skill slug (or name).
    pub skill: Option<String>,
    /// `Global`, `Pro` or `Enterprise`.
    pub level: Option<String>,
    pub availability: Option<String>,
    pub verified: Option<bool>,
    /// Free text in name, bio, main area and skills.
    pub q: Option<String>,
    pub page: Option<i64>,
    pub size: Option<i64>,
}

async fn expert_page(
    state: &AppState,
    filter: &ExpertFilter,
    page: Page,
) -> ApiResult<Paginated<PublicProfile>> {
    let mut conn = state.db.conn().await?;
    let (items, total) =
        profiles::search_experts(conn.exec(), filter, page.limit(), page.offset()).await?;
    let mut views = Vec::with_capacity(items.len());
    for p in &items {
        views.push(public_of(conn.exec(), p).await?);
    }
    Ok(Paginated::new(views, total, page))
}

/// Searches experts: by skill, level, availability, verification and free text.
#[utoipa::path(
    tag = "profiles",
    params(ExpertQuery),
    responses((status = 200, body = Paginated<PublicProfile>), (status = 422, body = ErrorBody))
)]
#[get("/api/profiles/experts")]
pub async fn search_experts(
    state: web::Data<AppState>,
    query: web::Query<ExpertQuery>,
) -> ApiResult<HttpResponse> {
    let q = query.into_inner();
    let page = PageQuery {
        page: q.page,
        size: q.size,
    }
    .validate()?;
    if let Some(level) = &q.level
        && !EXPERT_LEVELS.contains(&level.as_str())
    {
        return Err(ApiError::invalid_field(
            "level",
            "must be Global, Pro or Enterprise",
        ));
    }
    let filter = ExpertFilter {
        skill: q
            .skill
            .as_deref()
            .map(rules::slugify)
            .filter(|s| !s.is_empty()),
        level: q.level,
        availability: q.availability.filter(|a| !a.trim().is_empty()),
        verified: q.verified,
        q: q.q,
    };
    Ok(HttpResponse::Ok().json(expert_page(&state, &filter, page).await?))
}

/// Every active skill.
#[utoipa::path(tag = "skills", responses((status = 200, body = Vec<SkillView>)))]
#[get("/api/skills/active")]
pub async fn active_skills(state: web::Data<AppState>) -> ApiResult<HttpResponse> {
    let mut conn = state.db.conn().await?;
    let list: Vec<SkillView> = skills::list_active(conn.exec())
        .await?
        .into_iter()
        .map(SkillView::from)
        .collect();
    Ok(HttpResponse::Ok().json(list))
}

/// One skill by slug.
#[utoipa::path(
    tag = "skills",
    params(("slug" = String, Path)),
    responses((status = 200, body = SkillView), (status = 404, body = ErrorBody))
)]
#[get("/api/skills/{slug}")]
pub async fn skill(state: web::Data<AppState>, slug: web::Path<String>) -> ApiResult<HttpResponse> {
    let mut conn = state.db.conn().await?;
    let skill = skills::find_by_slug(conn.exec(), &rules::slugify(&slug))
        .await?
        .ok_or_else(|| ApiError::not_found("Skill not found"))?;
    Ok(HttpResponse::Ok().json(SkillView::from(skill)))
}

/// The experts holding a skill, paginated.
#[utoipa::path(
    tag = "skills",
    params(("slug" = String, Path), PageQuery),
    responses((status = 200, body = Paginated<PublicProfile>), (status = 404, body = ErrorBody))
)]
#[get("/api/skills/{slug}/experts")]
pub async fn skill_experts(
    state: web::Data<AppState>,
    slug: web::Path<String>,
    query: web::Query<PageQuery>,
) -> ApiResult<HttpResponse> {
    let page = query.into_inner().validate()?;
    let slug = rules::slugify(&slug);
    {
        let mut conn = state.db.conn().await?;
        skills::find_by_slug(conn.exec(), &slug)
            .await?
            .ok_or_else(|| ApiError::not_found("Skill not found"))?;
    }
    let filter = ExpertFilter {
        skill: Some(slug),
        ..ExpertFilter::default()
    };
    Ok(HttpResponse::Ok().json(expert_page(&state, &filter, page).await?))
}

// ---------------------------------------------------------------------------------------
// Administration
// ---------------------------------------------------------------------------------------

#[derive(Deserialize, ToSchema, Default)]
pub struct NotesRequest {
    /// Kept as the profile's verification notes (visible to administrators only).
    pub notes: Option<String>,
}

/// The user's profile for their active role, else their first profile.
async fn profile_of_user(mut ex: Exec<'_>, user_id: i64) -> ApiResult<Profile> {
    let user = users::find(ex.re(), user_id)
        .await?
        .ok_or_else(|| ApiError::not_found("User not found"))?;
    if let Some(p) = profiles::find_by_user(ex.re(), user_id, user.active_role.as_str()).await? {
        return Ok(p);
    }
    profiles::list_by_user(ex, user_id)
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| ApiError::not_found("This user has no profile"))
}

async fn moderate(
    state: &AppState,
    admin: &AuthUser,
    user_id: i64,
    body: Option<web::Json<NotesRequest>>,
    action: VerificationAction,
) -> ApiResult<HttpResponse> {
    let notes = body
        .and_then(|b| b.into_inner().notes)
        .map(|n| n.trim().to_owned())
        .filter(|n| !n.is_empty());
    if notes.as_ref().is_some_and(|n| n.chars().count() > 5000) {
        return Err(ApiError::invalid_field(
            "notes",
            "must be at most 5000 characters",
        ));
    }
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    let profile = profile_of_user(tx.exec(), user_id).await?;
    let (verified, status) = action.outcome();
    profiles::set_verification(
        tx.exec(),
        profile.id,
        verified,
        status,
        notes.as_deref(),
        admin.id(),
        now,
    )
    .await?;
    let profile = profiles::find(tx.exec(), profile.id)
        .await?
        .ok_or_else(|| ApiError::not_found("Profile not found"))?;
    let view = admin_of(tx.exec(), profile).await?;
    tx.commit().await?;
    Ok(HttpResponse::Ok().json(view))
}

macro_rules! moderation_route {
    ($name:ident, $path:literal, $action:expr, $doc:literal) => {
        #[doc = $doc]
        #[utoipa::path(
            tag = "admin",
            params(("user_id" = i64, Path)),
            request_body = NotesRequest,
            security(("bearer" = [])),
            responses(
                (status = 200, body = AdminProfileView),
                (status = 403, body = ErrorBody),
                (status = 404, body = ErrorBody, description = "Unknown user, or no profile"),
            )
        )]
        #[put($path)]
        pub async fn $name(
            state: web::Data<AppState>,
            AdminUser(admin): AdminUser,
            user_id: web::Path<i64>,
            body: Option<web::Json<NotesRequest>>,
        ) -> ApiResult<HttpResponse> {
            moderate(&state, &admin, user_id.into_inner(), body, $action).await
        }
    };
}

moderation_route!(
    verify,
    "/api/admin/users/{user_id}/verify",
    VerificationAction::Verify,
    "Verifies the user's active-role profile."
);
moderation_route!(
    unverify,
    "/api/admin/users/{user_id}/unverify",
    VerificationAction::Unverify,
    "Withdraws the verification of the user's active-role profile (back to `pending`)."
);
moderation_route!(
    reject,
    "/api/admin/users/{user_id}/reject",
    VerificationAction::Reject,
    "Rejects the user's active-role profile."
);
moderation_route!(
    resubmit,
    "/api/admin/users/{user_id}/resubmit",
    VerificationAction::Resubmit,
    "Asks the user to resubmit their active-role profile."
);
moderation_route!(
    pre_evaluate,
    "/api/admin/users/{user_id}/pre-evaluation",
    VerificationAction::PreEvaluate,
    "Marks the user's active-role profile pre-evaluated."
);

/// A user's full profile with verification notes (the active role's, else the first).
#[utoipa::path(
    tag = "admin",
    params(("user_id" = i64, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = AdminProfileView),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
    )
)]
#[get("/api/admin/users/{user_id}/profile")]
pub async fn admin_user_profile(
    state: web::Data<AppState>,
    _admin: AdminUser,
    user_id: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let mut conn = state.db.conn().await?;
    let profile = profile_of_user(conn.exec(), user_id.into_inner()).await?;
    Ok(HttpResponse::Ok().json(admin_of(conn.exec(), profile).await?))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AdminProfileQuery {
    /// `empresa`, `experto` or `admin`.
    pub profile_type: Option<String>,
    pub is_verified: Option<bool>,
    /// `pending`, `pre_evaluated`, `verified`, `rejected` or `resubmitted`.
    pub verification_status: Option<String>,
    /// Part of a name, company name, slug, e-mail or username.
    pub search: Option<String>,
    pub page: Option<i64>,
    pub size: Option<i64>,
}

/// Every profile, newest first, with filters.
#[utoipa::path(
    tag = "admin",
    params(AdminProfileQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, body = Paginated<AdminProfileView>),
        (status = 403, body = ErrorBody),
        (status = 422, body = ErrorBody),
    )
)]
#[get("/api/admin/profiles")]
pub async fn admin_list(
    state: web::Data<AppState>,
    _admin: AdminUser,
    query: web::Query<AdminProfileQuery>,
) -> ApiResult<HttpResponse> {
    let q = query.into_inner();
    let page = PageQuery {
        page: q.page,
        size: q.size,
    }
    .validate()?;
    if let Some(kind) = &q.profile_type
        && Role::parse(kind).is_none()
    {
        return Err(ApiError::invalid_field(
            "profile_type",
            "must be empresa, experto or admin",
        ));
    }
    const STATUSES: [&str; 5] = [
        "pending",
        "pre_evaluated",
        "verified",
        "rejected",
        "resubmitted",
    ];
    if let Some(status) = &q.verification_status
        && !STATUSES.contains(&status.as_str())
    {
        return Err(ApiError::invalid_field(
            "verification_status",
            "unknown verification status",
        ));
    }
    let filter = AdminFilter {
        profile_type: q.profile_type,
        is_verified: q.is_verified,
        verification_status: q.verification_status,
        search: q.search,
    };
    let mut conn = state.db.conn().await?;
    let (items, total) =
        profiles::list_admin(conn.exec(), &filter, page.limit(), page.offset()).await?;
    let mut views = Vec::with_capacity(items.len());
    for p in items {
        views.push(admin_of(conn.exec(), p).await?);
    }
    Ok(HttpResponse::Ok().json(Paginated::new(views, total, page)))
}

async fn admin_create(
    state: &AppState,
    user_id: i64,
    role: Role,
    input: &ProfileInput,
) -> ApiResult<HttpResponse> {
    let user = {
        let mut conn = state.db.conn().await?;
        users::find(conn.exec(), user_id)
            .await?
            .ok_or_else(|| ApiError::not_found("User not found"))?
    };
    if !user.roles.contains(&role) {
        let mut conn = state.db.conn().await?;
        users::add_role(conn.exec(), user_id, role, state.clock.now()).await?;
    }
    let view = create_profile(state, user_id, &user.username, role, input).await?;
    Ok(HttpResponse::Created().json(view))
}

/// Creates an expert profile (with a generated unique slug) for a user; the user gains the
/// `experto` role if they lacked it.
#[utoipa::path(
    tag = "admin",
    params(("user_id" = i64, Path)),
    request_body = ProfileInput,
    security(("bearer" = [])),
    responses(
        (status = 201, body = ProfileView),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody),
        (status = 422, body = ErrorBody),
    )
)]
#[post("/api/admin/profiles/expert/{user_id}")]
pub async fn admin_create_expert(
    state: web::Data<AppState>,
    _admin: AdminUser,
    user_id: web::Path<i64>,
    body: web::Json<ProfileInput>,
) -> ApiResult<HttpResponse> {
    admin_create(&state, user_id.into_inner(), Role::Experto, &body).await
}

/// Creates a company profile for a user; the user gains the `empresa` role if they lacked it.
#[utoipa::path(
    tag = "admin",
    params(("user_id" = i64, Path)),
    request_body = ProfileInput,
    security(("bearer" = [])),
    responses(
        (status = 201, body = ProfileView),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody),
        (status = 422, body = ErrorBody),
    )
)]
#[post("/api/admin/profiles/company/{user_id}")]
pub async fn admin_create_company(
    state: web::Data<AppState>,
    _admin: AdminUser,
    user_id: web::Path<i64>,
    body: web::Json<ProfileInput>,
) -> ApiResult<HttpResponse> {
    admin_create(&state, user_id.into_inner(), Role::Empresa, &body).await
}

// ---------------------------------------------------------------------------------------
// Administrators' team profiles
// ---------------------------------------------------------------------------------------

/// An administrator's public team profile (every field optional).
#[derive(Serialize, ToSchema)]
pub struct TeamProfileView {
    pub id: i64,
    pub user_id: i64,
    /// `admin-{user_id}`.
    pub slug: Option<String>,
    pub full_name: Option<String>,
    pub team_role: Option<String>,
    pub bio: Option<String>,
    pub profile_picture: Option<String>,
    pub location: Option<String>,
    pub linkedin_url: Option<String>,
    pub twitter_url: Option<String>,
    pub github_url: Option<String>,
    pub instagram_url: Option<String>,
    pub tiktok_url: Option<String>,
    pub personal_website: Option<String>,
    pub display_order: i64,
    pub is_visible_in_team: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<TeamProfile> for TeamProfileView {
    fn from(t: TeamProfile) -> Self {
        Self {
            id: t.id,
            user_id: t.user_id,
            slug: t.slug,
            full_name: t.full_name,
            team_role: t.team_role,
            bio: t.bio,
            profile_picture: t.profile_picture,
            location: t.location,
            linkedin_url: t.linkedin_url,
            twitter_url: t.twitter_url,
            github_url: t.github_url,
            instagram_url: t.instagram_url,
            tiktok_url: t.tiktok_url,
            personal_website: t.personal_website,
            display_order: t.display_order,
            is_visible_in_team: t.is_visible_in_team,
            created_at: t.created_at,
            updated_at: t.updated_at,
        }
    }
}

/// Team profile fields; on update an absent field keeps its value, an empty string clears it.
#[derive(Deserialize, ToSchema, Default)]
pub struct TeamProfileInput {
    pub full_name: Option<String>,
    pub team_role: Option<String>,
    pub bio: Option<String>,
    pub profile_picture: Option<String>,
    pub location: Option<String>,
    pub linkedin_url: Option<String>,
    pub twitter_url: Option<String>,
    pub github_url: Option<String>,
    pub instagram_url: Option<String>,
    pub tiktok_url: Option<String>,
    pub personal_website: Option<String>,
    /// Lower appears first.
    pub display_order: Option<i64>,
    /// Default false.
    pub is_visible_in_team: Option<bool>,
}

fn apply_team(t: &mut TeamProfile, input: &TeamProfileInput) -> ApiResult<()> {
    let mut errors = Vec::new();
    set_text(
        &mut t.full_name,
        &input.full_name,
        "full_name",
        200,
        &mut errors,
    );
    set_text(
        &mut t.team_role,
        &input.team_role,
        "team_role",
        200,
        &mut errors,
    );
    set_text(&mut t.bio, &input.bio, "bio", 5000, &mut errors);
    set_text(
        &mut t.profile_picture,
        &input.profile_picture,
        "profile_picture",
        2048,
        &mut errors,
    );
    set_text(
        &mut t.location,
        &input.location,
        "location",
        200,
        &mut errors,
    );
    for (target, value, field) in [
        (&mut t.linkedin_url, &input.linkedin_url, "linkedin_url"),
        (&mut t.twitter_url, &input.twitter_url, "twitter_url"),
        (&mut t.github_url, &input.github_url, "github_url"),
        (&mut t.instagram_url, &input.instagram_url, "instagram_url"),
        (&mut t.tiktok_url, &input.tiktok_url, "tiktok_url"),
        (
            &mut t.personal_website,
            &input.personal_website,
            "personal_website",
        ),
    ] {
        set_text(target, value, field, 2048, &mut errors);
    }
    if let Some(order) = input.display_order {
        if (-1_000_000..=1_000_000).contains(&order) {
            t.display_order = order;
        } else {
            errors.push(FieldError::new(
                "display_order",
                "must be from -1000000 to 1000000",
            ));
        }
    }
    if let Some(visible) = input.is_visible_in_team {
        t.is_visible_in_team = visible;
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ApiError::validation(errors))
    }
}

fn admin_only(auth: &AuthUser) -> ApiResult<()> {
    if auth.has_role(Role::Admin) {
        Ok(())
    } else {
        Err(ApiError::forbidden("Administrators only"))
    }
}

/// Creates the caller's team profile (administrators only, CSRF protected); its slug is
/// `admin-{user_id}`.
#[utoipa::path(
    tag = "profiles",
    request_body = TeamProfileInput,
    security(("bearer" = [])),
    responses(
        (status = 201, body = TeamProfileView),
        (status = 403, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "Already created"),
        (status = 422, body = ErrorBody),
    )
)]
#[post("/api/profiles/admin/me")]
pub async fn create_team_profile(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    body: web::Json<TeamProfileInput>,
) -> ApiResult<HttpResponse> {
    admin_only(&auth)?;
    let mut team = TeamProfile {
        user_id: auth.id(),
        slug: Some(format!("admin-{}", auth.id())),
        ..TeamProfile::default()
    };
    apply_team(&mut team, &body)?;
    let now = state.clock.now();
    let mut conn = state.db.conn().await?;
    let exists = || ApiError::conflict("PROFILE_EXISTS", "Your team profile already exists");
    if profiles::find_team_by_user(conn.exec(), auth.id())
        .await?
        .is_some()
    {
        return Err(exists());
    }
    profiles::insert_team(conn.exec(), &team, now)
        .await
        .map_err(|e| {
            if e.is_unique_violation() {
                exists()
            } else {
                e.into()
            }
        })?;
    let team = profiles::find_team_by_user(conn.exec(), auth.id())
        .await?
        .ok_or_else(|| ApiError::not_found("Team profile not found"))?;
    Ok(HttpResponse::Created().json(TeamProfileView::from(team)))
}

/// Updates the caller's team profile (administrators only, CSRF protected).
#[utoipa::path(
    tag = "profiles",
    request_body = TeamProfileInput,
    security(("bearer" = [])),
    responses(
        (status = 200, body = TeamProfileView),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody, description = "Not created yet"),
        (status = 422, body = ErrorBody),
    )
)]
#[put("/api/profiles/admin/me")]
pub async fn update_team_profile(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    body: web::Json<TeamProfileInput>,
) -> ApiResult<HttpResponse> {
    admin_only(&auth)?;
    let mut conn = state.db.conn().await?;
    let mut team = profiles::find_team_by_user(conn.exec(), auth.id())
        .await?
        .ok_or_else(|| ApiError::not_found("You have no team profile yet"))?;
    apply_team(&mut team, &body)?;
    profiles::update_team(conn.exec(), &team, state.clock.now()).await?;
    let team = profiles::find_team_by_user(conn.exec(), auth.id())
        .await?
        .ok_or_else(|| ApiError::not_found("Team profile not found"))?;
    Ok(HttpResponse::Ok().json(TeamProfileView::from(team)))
}

/// The caller's team profile (administrators only).
#[utoipa::path(
    tag = "profiles",
    security(("bearer" = [])),
    responses(
        (status = 200, body = TeamProfileView),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
    )
)]
#[get("/api/profiles/admin/me")]
pub async fn get_team_profile(
    state: web::Data<AppState>,
    AdminUser(auth): AdminUser,
) -> ApiResult<HttpResponse> {
    let mut conn = state.db.conn().await?;
    let team = profiles::find_team_by_user(conn.exec(), auth.id())
        .await?
        .ok_or_else(|| ApiError::not_found("You have no team profile yet"))?;
    Ok(HttpResponse::Ok().json(TeamProfileView::from(team)))
}

/// A team profile by slug (public; only profiles shown in the team).
#[utoipa::path(
    tag = "profiles",
    params(("slug" = String, Path)),
    responses((status = 200, body = TeamProfileView), (status = 404, body = ErrorBody))
)]
#[get("/api/profiles/admin/slug/{slug}")]
pub async fn team_profile_by_slug(
    state: web::Data<AppState>,
    slug: web::Path<String>,
) -> ApiResult<HttpResponse> {
    let mut conn = state.db.conn().await?;
    let team = profiles::find_team_by_slug(conn.exec(), slug.trim())
        .await?
        .filter(|t| t.is_visible_in_team)
        .ok_or_else(|| ApiError::not_found("Team profile not found"))?;
    Ok(HttpResponse::Ok().json(TeamProfileView::from(team)))
}

/// The public team: visible administrators' profiles by `display_order`.
#[utoipa::path(tag = "profiles", responses((status = 200, body = Vec<TeamProfileView>)))]
#[get("/api/profiles/team")]
pub async fn public_team(state: web::Data<AppState>) -> ApiResult<HttpResponse> {
    let mut conn = state.db.conn().await?;
    let list: Vec<TeamProfileView> = profiles::list_team(conn.exec())
        .await?
        .into_iter()
        .map(TeamProfileView::from)
        .collect();
    Ok(HttpResponse::Ok().json(list))
}

// ---------------------------------------------------------------------------------------
// Profile pictures
// ---------------------------------------------------------------------------------------

/// A multipart form with one image file (JPEG, PNG or WebP, at most 2 MB).
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct PictureUpload {
    #[schema(value_type = String, format = Binary)]
    pub file: Vec<u8>,
}

#[derive(Serialize, ToSchema)]
pub struct PictureView {
    /// `/api/uploads/profiles/{user_id}/{filename}`.
    pub profile_picture: String,
}

/// Where a picture goes: an expert's profile, or an administrator's team profile (else
/// their `admin` profile).
enum PictureTarget {
    Profile(i64),
    Team,
}

fn too_large() -> ApiError {
    ApiError::new(
        actix_web::http::StatusCode::PAYLOAD_TOO_LARGE,
        "PAYLOAD_TOO_LARGE",
        "The picture is larger than 2 MB",
    )
}

fn not_an_image() -> ApiError {
    ApiError::new(
        actix_web::http::StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "UNSUPPORTED_MEDIA_TYPE",
        "The file is not a JPEG, PNG or WebP image",
    )
}

/// The bytes of the first file part: 413 past [`rules::MAX_PICTURE_BYTES`], 422 when there
/// is no file.
async fn read_picture(payload: actix_multipart::Multipart) -> ApiResult<Vec<u8>> {
    use crate::http::multipart::{FormError, read_form};
    let malformed =
        || ApiError::invalid_field("file", "expected multipart/form-data with an image file");
    match read_form(payload, rules::MAX_PICTURE_BYTES).await {
        Ok(form) => form
            .file
            .map(|(bytes, _)| bytes)
            .filter(|b| !b.is_empty())
            .ok_or_else(malformed),
        Err(FormError::TooLarge) => Err(too_large()),
        Err(FormError::Malformed) => Err(malformed()),
    }
}

/// Uploads the caller's profile picture (experts and administrators; CSRF protected). The
/// type is read from the content; images over 1024 px are scaled down, transparency is
/// flattened onto white and the result is stored as JPEG (quality 85).
#[utoipa::path(
    tag = "profiles",
    request_body(content = PictureUpload, content_type = "multipart/form-data"),
    security(("bearer" = [])),
    responses(
        (status = 200, body = PictureView),
        (status = 403, body = ErrorBody, description = "Not an expert or administrator, or CSRF"),
        (status = 404, body = ErrorBody, description = "No profile to attach it to"),
        (status = 413, body = ErrorBody, description = "Larger than 2 MB"),
        (status = 415, body = ErrorBody, description = "Not a JPEG, PNG or WebP image"),
        (status = 422, body = ErrorBody, description = "No file in the form"),
    )
)]
#[post("/api/profiles/me/picture")]
pub async fn upload_picture(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    req: actix_web::HttpRequest,
    payload: actix_multipart::Multipart,
) -> ApiResult<HttpResponse> {
    let target = {
        let mut conn = state.db.conn().await?;
        match auth.user.active_role {
            Role::Experto => PictureTarget::Profile(
                profiles::find_by_user(conn.exec(), auth.id(), Role::Experto.as_str())
                    .await?
                    .ok_or_else(|| ApiError::not_found("Create your expert profile first"))?
                    .id,
            ),
            Role::Admin => {
                if profiles::find_team_by_user(conn.exec(), auth.id())
                    .await?
                    .is_some()
                {
                    PictureTarget::Team
                } else {
                    PictureTarget::Profile(
                        profiles::find_by_user(conn.exec(), auth.id(), Role::Admin.as_str())
                            .await?
                            .ok_or_else(|| ApiError::not_found("Create your team profile first"))?
                            .id,
                    )
                }
            }
            Role::Empresa => {
                return Err(ApiError::forbidden(
                    "Profile pictures are for experts and administrators",
                ));
            }
        }
    };
    if crate::http::multipart::declared_too_large(&req) {
        return Err(too_large());
    }
    let bytes = read_picture(payload).await?;
    let kind = rules::PictureKind::sniff(&bytes).ok_or_else(not_an_image)?;
    let jpeg = tokio::task::spawn_blocking(move || rules::normalise_picture(&bytes, kind))
        .await
        .map_err(ApiError::internal)?
        .map_err(|_| not_an_image())?;

    let user_id = auth.id();
    let file = format!("{}.jpg", crate::domain::token::random_token(16));
    let dir = state
        .settings
        .uploads_dir
        .join("profiles")
        .join(user_id.to_string());
    tokio::fs::create_dir_all(&dir)
        .await
        .map_err(ApiError::internal)?;
    tokio::fs::write(dir.join(&file), &jpeg)
        .await
        .map_err(ApiError::internal)?;
    let path = format!("/api/uploads/profiles/{user_id}/{file}");
    let now = state.clock.now();
    let previous = {
        let mut conn = state.db.conn().await?;
        match target {
            PictureTarget::Profile(id) => {
                profiles::set_picture(conn.exec(), id, &path, now).await?
            }
            PictureTarget::Team => {
                profiles::set_team_picture(conn.exec(), user_id, &path, now).await?
            }
        }
    };
    // The replaced file, when it was one of ours.
    let prefix = format!("/api/uploads/profiles/{user_id}/");
    if let Some(old) = previous
        .as_deref()
        .and_then(|p| p.strip_prefix(&prefix))
        .filter(|name| valid_upload_name(name) && *name != file)
    {
        let _ = tokio::fs::remove_file(dir.join(old)).await;
    }
    Ok(HttpResponse::Ok().json(PictureView {
        profile_picture: path,
    }))
}

/// Names the service gives stored pictures: URL-safe characters and `.jpg`, nothing that
/// could leave the directory.
fn valid_upload_name(name: &str) -> bool {
    name.len() <= 100
        && name.strip_suffix(".jpg").is_some_and(|stem| {
            !stem.is_empty()
                && stem
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        })
}

/// A stored profile picture (public).
#[utoipa::path(
    tag = "profiles",
    params(("user_id" = i64, Path), ("file" = String, Path)),
    responses(
        (status = 200, description = "The JPEG image", content_type = "image/jpeg"),
        (status = 404, body = ErrorBody),
    )
)]
#[get("/api/uploads/profiles/{user_id}/{file}")]
pub async fn picture_file(
    state: web::Data<AppState>,
    path: web::Path<(i64, String)>,
) -> ApiResult<HttpResponse> {
    let (user_id, file) = path.into_inner();
    if !valid_upload_name(&file) {
        return Err(ApiError::not_found("No such file"));
    }
    let full = state
        .settings
        .uploads_dir
        .join("profiles")
        .join(user_id.to_string())
        .join(&file);
    let bytes = tokio::fs::read(&full)
        .await
        .map_err(|_| ApiError::not_found("No such file"))?;
    Ok(HttpResponse::Ok()
        .content_type("image/jpeg")
        .insert_header(("X-Content-Type-Options", "nosniff"))
        .insert_header(("Cache-Control", "public, max-age=86400"))
        .body(bytes))
}
