//! Administrators' public team profiles.

use serde::Deserialize;
use utoipa::ToSchema;

use crate::state::AppState;
use crate::store::profiles::{self, TeamProfile};
use crate::workflows::error::{FieldError, FlowError, FlowResult};

use super::*;

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

fn apply_team(t: &mut TeamProfile, input: &TeamProfileInput) -> FlowResult<()> {
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
        Err(FlowError::Invalid(errors))
    }
}

/// Creates `admin_id`'s team profile (slug `admin-{id}`): 409 `PROFILE_EXISTS` on a second.
pub async fn create_team(
    state: &AppState,
    admin_id: i64,
    input: &TeamProfileInput,
) -> FlowResult<TeamProfile> {
    let mut team = TeamProfile {
        user_id: admin_id,
        slug: Some(format!("admin-{admin_id}")),
        ..TeamProfile::default()
    };
    apply_team(&mut team, input)?;
    let now = state.clock.now();
    let mut conn = state.db.conn().await?;
    let exists = || FlowError::conflict("PROFILE_EXISTS", "Your team profile already exists");
    if profiles::find_team_by_user(conn.exec(), admin_id)
        .await?
        .is_some()
    {
        return Err(exists());
    }
    profiles::insert_team(conn.exec(), &team, now)
        .await
        .map_err(|e| e.duplicate_as(exists))?;
    profiles::find_team_by_user(conn.exec(), admin_id)
        .await?
        .ok_or_else(|| FlowError::not_found("Team profile not found"))
}

/// Updates `admin_id`'s team profile: 404 before it is created.
pub async fn update_team(
    state: &AppState,
    admin_id: i64,
    input: &TeamProfileInput,
) -> FlowResult<TeamProfile> {
    let mut conn = state.db.conn().await?;
    let mut team = profiles::find_team_by_user(conn.exec(), admin_id)
        .await?
        .ok_or_else(|| FlowError::not_found("You have no team profile yet"))?;
    apply_team(&mut team, input)?;
    profiles::update_team(conn.exec(), &team, state.clock.now()).await?;
    profiles::find_team_by_user(conn.exec(), admin_id)
        .await?
        .ok_or_else(|| FlowError::not_found("Team profile not found"))
}
