//! Profiles' writes: creation per role (experts get a unique slug), updates of the
//! descriptive fields and skills, with every field checked and all errors answered at once.

use chrono::{DateTime, Utc};
use serde::Deserialize;
use utoipa::ToSchema;

use crate::domain::profile::{self as rules};
use crate::domain::user::Role;
use crate::state::AppState;
use crate::store::profiles::{self, Profile};
use crate::store::users::User;
use crate::store::{Exec, skills};
use crate::workflows::error::{FieldError, FlowError, FlowResult};

mod fiscal;
mod moderation;
mod pictures;
mod team;

pub use fiscal::*;
pub use moderation::*;
pub use pictures::*;
pub use team::*;

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
pub(crate) fn set_text(
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
pub(crate) fn apply_input(
    p: &mut Profile,
    input: &ProfileInput,
) -> FlowResult<Option<Vec<String>>> {
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
        Err(FlowError::Invalid(errors))
    }
}

pub(crate) async fn save_skills(
    mut ex: Exec<'_>,
    profile_id: i64,
    names: &[String],
    now: DateTime<Utc>,
) -> FlowResult<()> {
    let mut ids = Vec::with_capacity(names.len());
    for name in names {
        ids.push(skills::ensure(ex.re(), name, &rules::slugify(name), now).await?);
    }
    skills::set_for_profile(ex, profile_id, &ids).await?;
    Ok(())
}

fn profile_exists() -> FlowError {
    FlowError::conflict(
        "PROFILE_EXISTS",
        "This user already has a profile of this type",
    )
}

/// Creates the `role` profile of `user_id` from `input` in one transaction: 409 when one
/// exists. Experts get a unique slug from their name (or username) and the level `Global`.
pub async fn create_profile(
    state: &AppState,
    user_id: i64,
    username: &str,
    role: Role,
    input: &ProfileInput,
) -> FlowResult<Profile> {
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    if profiles::find_by_user(tx.exec(), user_id, role)
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
        .map_err(|e| e.duplicate_as(profile_exists))?;
    let mut profile = profiles::find(tx.exec(), id)
        .await?
        .ok_or_else(|| FlowError::not_found("Profile not found"))?;
    let skill_names = apply_input(&mut profile, input)?;
    profiles::update_details(tx.exec(), &profile, now).await?;
    if let Some(names) = &skill_names {
        save_skills(tx.exec(), id, names, now).await?;
    }
    let profile = profiles::find(tx.exec(), id)
        .await?
        .ok_or_else(|| FlowError::not_found("Profile not found"))?;
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
    state.commit(tx).await?;
    Ok(profile)
}

/// The profile `id`, when `user` owns it: 404 unknown, 403 someone else's.
pub(crate) async fn owned_profile(ex: Exec<'_>, id: i64, user_id: i64) -> FlowResult<Profile> {
    let profile = profiles::find(ex, id)
        .await?
        .ok_or_else(|| FlowError::not_found("Profile not found"))?;
    if profile.user_id != user_id {
        return Err(FlowError::forbidden("This profile belongs to someone else"));
    }
    Ok(profile)
}

/// Updates `user`'s own profile `id` from `input` (absent fields kept, empty strings clear);
/// its type cannot change. Recorded as `profile.updated`.
pub async fn update_profile(
    state: &AppState,
    user: &User,
    id: i64,
    input: &ProfileInput,
) -> FlowResult<Profile> {
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    let mut profile = owned_profile(tx.exec(), id, user.id).await?;
    if let Some(kind) = input.profile_type.as_deref()
        && kind != profile.profile_type
    {
        return Err(FlowError::invalid_field(
            "profile_type",
            "the type of a profile cannot change",
        ));
    }
    let skill_names = apply_input(&mut profile, input)?;
    if profile.profile_type == Role::Experto.as_str() && profile.slug.is_none() {
        let base = rules::expert_base_slug(
            profile
                .full_name
                .as_deref()
                .or(Some(user.username.as_str())),
        );
        let taken = profiles::slugs_like(tx.exec(), &base).await?;
        profile.slug = Some(rules::unique_slug(&base, &taken));
    }
    profiles::update_details(tx.exec(), &profile, now).await?;
    if let Some(names) = &skill_names {
        save_skills(tx.exec(), profile.id, names, now).await?;
    }
    // The CRM contact follows the profile (issue 17).
    let event = serde_json::json!({ "profile_id": profile.id, "user_id": user.id });
    crate::store::events::record(tx.exec(), profile_updated(event), now).await?;
    let profile = profiles::find(tx.exec(), profile.id)
        .await?
        .ok_or_else(|| FlowError::not_found("Profile not found"))?;
    state.commit(tx).await?;
    Ok(profile)
}

/// The event a profile update records, for the CRM (issue 17).
fn profile_updated(payload: serde_json::Value) -> crate::store::events::NewEvent<'static> {
    crate::store::events::NewEvent {
        kind: "profile.updated",
        aggregate: "profile",
        aggregate_id: payload
            .get("profile_id")
            .and_then(serde_json::Value::as_i64),
        payload,
    }
}
