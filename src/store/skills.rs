//! Skills, created when a profile names them, and the skills of each profile.

use chrono::{DateTime, Utc};

use super::{Exec, StoreResult};
use crate::on_exec;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Skill {
    pub id: i64,
    pub name: String,
    pub slug: String,
    pub is_active: bool,
    pub category: Option<String>,
    pub created_at: DateTime<Utc>,
}

macro_rules! select_skills {
    ($rest:literal) => {
        concat!(
            "SELECT s.id, s.name, s.slug, s.is_active, s.category, s.created_at FROM skills s ",
            $rest
        )
    };
}

/// The id of the skill with `slug`, creating it (named `name`) when it does not exist.
pub async fn ensure(
    mut ex: Exec<'_>,
    name: &str,
    slug: &str,
    now: DateTime<Utc>,
) -> StoreResult<i64> {
    on_exec!(ex.re(), c => sqlx::query(
        "INSERT INTO skills (name, slug, is_active, created_at) VALUES ($1, $2, TRUE, $3)
         ON CONFLICT (slug) DO NOTHING",
    )
    .bind(name)
    .bind(slug)
    .bind(now)
    .execute(c)
    .await
    .map(|_| ()))?;
    Ok(
        on_exec!(ex, c => sqlx::query_scalar("SELECT id FROM skills WHERE slug = $1")
        .bind(slug)
        .fetch_one(c)
        .await)?,
    )
}

/// Replaces the skills of a profile with `skill_ids`.
pub async fn set_for_profile(
    mut ex: Exec<'_>,
    profile_id: i64,
    skill_ids: &[i64],
) -> StoreResult<()> {
    on_exec!(ex.re(), c => sqlx::query("DELETE FROM profile_skills WHERE profile_id = $1")
        .bind(profile_id)
        .execute(c)
        .await
        .map(|_| ()))?;
    for skill_id in skill_ids {
        on_exec!(ex.re(), c => sqlx::query(
            "INSERT INTO profile_skills (profile_id, skill_id) VALUES ($1, $2) ON CONFLICT DO NOTHING",
        )
        .bind(profile_id)
        .bind(skill_id)
        .execute(c)
        .await
        .map(|_| ()))?;
    }
    Ok(())
}

/// The skills of a profile, by name.
pub async fn of_profile(ex: Exec<'_>, profile_id: i64) -> StoreResult<Vec<Skill>> {
    let mut held = of_profiles(ex, &[profile_id]).await?;
    Ok(held.remove(&profile_id).unwrap_or_default())
}

/// The skills of each of `profile_ids` (by name), in one statement: a page of profiles reads
/// its skills at once, never profile by profile.
pub async fn of_profiles(
    ex: Exec<'_>,
    profile_ids: &[i64],
) -> StoreResult<std::collections::HashMap<i64, Vec<Skill>>> {
    #[derive(sqlx::FromRow)]
    struct Held {
        profile_id: i64,
        #[sqlx(flatten)]
        skill: Skill,
    }
    let mut held = std::collections::HashMap::new();
    if profile_ids.is_empty() {
        return Ok(held);
    }
    let mut sql = super::listing::Sql::default();
    let list = sql.arg_list(profile_ids);
    let rows: Vec<Held> = sql
        .with_text(&format!(
            "SELECT ps.profile_id, s.id, s.name, s.slug, s.is_active, s.category, s.created_at
               FROM skills s JOIN profile_skills ps ON ps.skill_id = s.id
              WHERE ps.profile_id IN ({list}) ORDER BY s.name"
        ))
        .fetch_all(ex)
        .await?;
    for row in rows {
        held.entry(row.profile_id).or_default().push(row.skill);
    }
    Ok(held)
}

/// Every active skill, by name.
pub async fn list_active(ex: Exec<'_>) -> StoreResult<Vec<Skill>> {
    Ok(on_exec!(ex, c => sqlx::query_as::<_, Skill>(select_skills!(
        "WHERE s.is_active = TRUE ORDER BY s.name, s.id"
    ))
    .fetch_all(c)
    .await)?)
}

pub async fn find_by_slug(ex: Exec<'_>, slug: &str) -> StoreResult<Option<Skill>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, Skill>(select_skills!("WHERE s.slug = $1"))
            .bind(slug)
            .fetch_optional(c)
            .await)?,
    )
}
