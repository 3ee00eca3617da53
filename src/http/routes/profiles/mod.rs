//! Profiles: `/api/profiles/*` (one profile per role per user, fiscal data, expert search,
//! administrators' team profiles), `/api/skills/*`, and the administrators' profile
//! moderation under `/api/admin/users/{user_id}/…` and `/api/admin/profiles`.
//!
//! Three views of a profile: [`PublicProfile`] for everyone (no contact, fiscal, payout or
//! moderation data), [`ProfileView`] for its owner (adds contact and fiscal data) and
//! [`AdminProfileView`] for administrators (adds `verification_notes` and the internal
//! rating).

use actix_web::{HttpResponse, get, post, put, web};
use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;

use crate::domain::dac7::Dac7ReviewStatus;
use crate::domain::profile::{ConnectStatus, VerificationStatus};
use crate::domain::user::Role;
use crate::http::auth::{AuthUser, CsrfChecked};
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::state::AppState;
use crate::store::profiles::{self, Profile};
use crate::store::{Exec, skills};
use crate::workflows::profiles::{self as flow, ProfileInput};

mod experts;
mod fiscal;
mod moderation;
mod pictures;
mod team;

pub use experts::*;
pub use fiscal::*;
pub use moderation::*;
pub use pictures::*;
pub use team::*;

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
    #[schema(value_type = String)]
    pub verification_status: VerificationStatus,
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
    #[schema(value_type = Option<String>)]
    pub dac7_review_status: Option<Dac7ReviewStatus>,
    pub dac7_review_period: Option<i64>,
    pub dac7_reviewed_at: Option<DateTime<Utc>>,
    pub processor_connect_account_id: Option<String>,
    #[schema(value_type = Option<String>)]
    pub processor_connect_status: Option<ConnectStatus>,
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
        verification_status: p.verification_status,
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

fn parse_profile_type(value: Option<&str>) -> ApiResult<Role> {
    value
        .and_then(Role::parse)
        .ok_or_else(|| ApiError::invalid_field("profile_type", "must be empresa, experto or admin"))
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
    let profile = flow::create_profile(&state, auth.id(), &auth.user.username, role, &body).await?;
    let mut conn = state.db.conn().await?;
    Ok(HttpResponse::Created().json(owner_of(conn.exec(), profile).await?))
}

async fn my_profile(state: &AppState, auth: &AuthUser) -> ApiResult<HttpResponse> {
    let mut conn = state.db.conn().await?;
    let profile = profiles::find_by_user(conn.exec(), auth.id(), auth.user.active_role)
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
    )
)]
#[put("/api/profiles/{id}")]
pub async fn update(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    id: web::Path<i64>,
    body: web::Json<ProfileInput>,
) -> ApiResult<HttpResponse> {
    let profile = flow::update_profile(&state, &auth.user, id.into_inner(), &body).await?;
    let mut conn = state.db.conn().await?;
    let view = owner_of(conn.exec(), profile).await?;
    Ok(HttpResponse::Ok().json(view))
}

/// Mounts the profile routes: fixed paths before `{id}`, `active` before `{slug}`.
pub fn mount(cfg: &mut utoipa_actix_web::service_config::ServiceConfig) {
    cfg.service(create)
        .service(me)
        .service(me_profile)
        .service(fiscal_status)
        .service(upload_picture)
        .service(picture_file)
        .service(search_experts)
        .service(expert_by_slug)
        .service(public_team)
        .service(create_team_profile)
        .service(update_team_profile)
        .service(get_team_profile)
        .service(team_profile_by_slug)
        .service(public_profile)
        .service(update)
        .service(update_fiscal)
        .service(active_skills)
        .service(skill)
        .service(skill_experts)
        .service(verify)
        .service(unverify)
        .service(reject)
        .service(resubmit)
        .service(pre_evaluate)
        .service(admin_user_profile)
        .service(admin_list)
        .service(admin_create_expert)
        .service(admin_create_company);
}
