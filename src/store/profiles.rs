//! Profiles (one per role per user) and administrators' team profiles.

use chrono::{DateTime, Utc};
use std::collections::HashMap;

use super::listing::{self, ListQuery, Order, Seek, Sql, Total};
use super::tallies::{self, Tally};
use super::{Exec, StoreResult};
use crate::domain::dac7::Dac7ReviewStatus;
use crate::domain::profile::{ConnectStatus, VerificationStatus};
use crate::domain::user::Role;
use crate::on_exec;

/// A profile as stored.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Profile {
    pub id: i64,
    pub user_id: i64,
    pub profile_type: String,
    pub full_name: Option<String>,
    pub bio: Option<String>,
    pub phone: Option<String>,
    pub location: Option<String>,
    pub profile_picture: Option<String>,
    pub is_verified: bool,
    pub verification_status: VerificationStatus,
    pub verification_notes: Option<String>,
    pub slug: Option<String>,
    pub expert_level: String,
    pub availability: Option<String>,
    pub internal_rating: Option<f64>,
    pub hourly_rate_minor: Option<i64>,
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
    pub tax_id: Option<String>,
    pub fiscal_name: Option<String>,
    pub fiscal_address: Option<String>,
    pub fiscal_postal_code: Option<String>,
    pub fiscal_city: Option<String>,
    pub fiscal_province: Option<String>,
    pub fiscal_country: Option<String>,
    pub fiscal_type: Option<String>,
    pub birth_date: Option<String>,
    pub vat_number: Option<String>,
    pub irpf_rate: Option<i64>,
    pub commercial_registry: Option<String>,
    pub fiscal_data_complete: bool,
    pub dac7_review_status: Option<Dac7ReviewStatus>,
    pub dac7_review_period: Option<i64>,
    pub dac7_reviewed_at: Option<DateTime<Utc>>,
    pub processor_connect_account_id: Option<String>,
    pub processor_connect_status: Option<ConnectStatus>,
    pub verified_at: Option<DateTime<Utc>>,
    pub verified_by: Option<i64>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// `SELECT <profile columns> FROM profiles p <rest>` as one static string.
/// The columns of [`Profile`], over `profiles p`.
macro_rules! profile_columns {
    () => {
        concat!(
            "p.id, p.user_id, p.profile_type, p.full_name, p.bio, p.phone, p.location, ",
            "p.profile_picture, p.is_verified, p.verification_status, p.verification_notes, p.slug, ",
            "p.expert_level, p.availability, p.internal_rating, p.hourly_rate_minor, ",
            "p.experience_years, p.main_area, p.work_language, p.portfolio_url, p.linkedin_url, ",
            "p.company_name, p.company_website, p.contact_person, p.company_type, p.industry, ",
            "p.company_size, p.company_email, p.preferred_language, p.tax_id, p.fiscal_name, ",
            "p.fiscal_address, p.fiscal_postal_code, p.fiscal_city, p.fiscal_province, ",
            "p.fiscal_country, p.fiscal_type, p.birth_date, p.vat_number, p.irpf_rate, ",
            "p.commercial_registry, p.fiscal_data_complete, p.dac7_review_status, ",
            "p.dac7_review_period, p.dac7_reviewed_at, p.processor_connect_account_id, ",
            "p.processor_connect_status, p.verified_at, p.verified_by, p.created_at, p.updated_at"
        )
    };
}

/// [`profile_columns!`] as a value, for statements assembled at run time.
pub const PROFILE_COLUMNS: &str = profile_columns!();

macro_rules! select_profiles {
    ($($rest:expr),* $(,)?) => {
        concat!("SELECT ", profile_columns!(), " FROM profiles p ", $($rest),*)
    };
}

/// Inserts an empty profile of `profile_type` for `user_id`; a second profile of the same
/// type, or a taken slug, fails with a unique violation.
pub async fn insert(
    ex: Exec<'_>,
    user_id: i64,
    profile_type: &str,
    slug: Option<&str>,
    now: DateTime<Utc>,
) -> StoreResult<i64> {
    let id: i64 = on_exec!(ex, c => sqlx::query_scalar(
        "INSERT INTO profiles (user_id, profile_type, slug, expert_level, created_at, updated_at)
         VALUES ($1, $2, $3, 'Global', $4, $4) RETURNING id",
    )
    .bind(user_id)
    .bind(profile_type)
    .bind(slug)
    .bind(now)
    .fetch_one(c)
    .await)?;
    Ok(id)
}

pub async fn find(ex: Exec<'_>, id: i64) -> StoreResult<Option<Profile>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, Profile>(select_profiles!("WHERE p.id = $1"))
        .bind(id)
        .fetch_optional(c)
        .await)?,
    )
}

pub async fn find_by_user(ex: Exec<'_>, user_id: i64, role: Role) -> StoreResult<Option<Profile>> {
    Ok(on_exec!(ex, c => sqlx::query_as::<_, Profile>(
        select_profiles!("WHERE p.user_id = $1 AND p.profile_type = $2"),
    )
    .bind(user_id)
    .bind(role.as_str())
    .fetch_optional(c)
    .await)?)
}

/// The profiles of a user, oldest first.
pub async fn list_by_user(ex: Exec<'_>, user_id: i64) -> StoreResult<Vec<Profile>> {
    Ok(on_exec!(ex, c => sqlx::query_as::<_, Profile>(
        select_profiles!("WHERE p.user_id = $1 ORDER BY p.id"),
    )
    .bind(user_id)
    .fetch_all(c)
    .await)?)
}

/// Every profile of the given users, in one read (a page of answers naming many parties).
pub async fn of_users(ex: Exec<'_>, user_ids: &[i64]) -> StoreResult<Vec<Profile>> {
    if user_ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut sql = Sql::default();
    let users = sql.arg_set(user_ids);
    sql.with_text(&format!(select_profiles!("WHERE p.user_id IN ({})"), users))
        .same_plan()
        .fetch_all(ex)
        .await
}

/// An expert found by slug; `key` is the slug with hyphens removed, so a legacy slug written
/// without hyphens matches too.
pub async fn find_expert_by_slug(
    ex: Exec<'_>,
    slug: &str,
    key: &str,
) -> StoreResult<Option<Profile>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, Profile>(select_profiles!(
        "WHERE p.profile_type = 'experto' AND (p.slug = $1 OR REPLACE(p.slug, '-', '') = $2)
         ORDER BY CASE WHEN p.slug = $1 THEN 0 ELSE 1 END, p.id LIMIT 1"
    ))
    .bind(slug)
    .bind(key)
    .fetch_optional(c)
    .await)?,
    )
}

/// Slugs equal to `base` or of the form `base-…`, to pick the next free suffix.
pub async fn slugs_like(ex: Exec<'_>, base: &str) -> StoreResult<Vec<String>> {
    let pattern = format!("{base}-%");
    Ok(on_exec!(ex, c => sqlx::query_scalar(
        "SELECT slug FROM profiles WHERE slug = $1 OR slug LIKE $2",
    )
    .bind(base)
    .bind(&pattern)
    .fetch_all(c)
    .await)?)
}

/// Writes the descriptive (non-fiscal, non-moderation) columns of `p`.
pub async fn update_details(ex: Exec<'_>, p: &Profile, now: DateTime<Utc>) -> StoreResult<bool> {
    let rows = on_exec!(ex, c => sqlx::query(
        "UPDATE profiles SET full_name = $2, bio = $3, phone = $4, location = $5, slug = $6,
            availability = $7, hourly_rate_minor = $8, experience_years = $9, main_area = $10,
            work_language = $11, portfolio_url = $12, linkedin_url = $13, company_name = $14,
            company_website = $15, contact_person = $16, company_type = $17, industry = $18,
            company_size = $19, company_email = $20, preferred_language = $21, updated_at = $22
         WHERE id = $1",
    )
    .bind(p.id)
    .bind(&p.full_name)
    .bind(&p.bio)
    .bind(&p.phone)
    .bind(&p.location)
    .bind(&p.slug)
    .bind(&p.availability)
    .bind(p.hourly_rate_minor)
    .bind(p.experience_years)
    .bind(&p.main_area)
    .bind(&p.work_language)
    .bind(&p.portfolio_url)
    .bind(&p.linkedin_url)
    .bind(&p.company_name)
    .bind(&p.company_website)
    .bind(&p.contact_person)
    .bind(&p.company_type)
    .bind(&p.industry)
    .bind(&p.company_size)
    .bind(&p.company_email)
    .bind(&p.preferred_language)
    .bind(now)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(rows == 1)
}

/// Writes the fiscal columns of `p`, `fiscal_data_complete` included.
pub async fn update_fiscal(ex: Exec<'_>, p: &Profile, now: DateTime<Utc>) -> StoreResult<bool> {
    let rows = on_exec!(ex, c => sqlx::query(
        "UPDATE profiles SET tax_id = $2, fiscal_name = $3, fiscal_address = $4,
            fiscal_postal_code = $5, fiscal_city = $6, fiscal_province = $7, fiscal_country = $8,
            fiscal_type = $9, birth_date = $10, vat_number = $11, irpf_rate = $12,
            commercial_registry = $13, fiscal_data_complete = $14, updated_at = $15
         WHERE id = $1",
    )
    .bind(p.id)
    .bind(&p.tax_id)
    .bind(&p.fiscal_name)
    .bind(&p.fiscal_address)
    .bind(&p.fiscal_postal_code)
    .bind(&p.fiscal_city)
    .bind(&p.fiscal_province)
    .bind(&p.fiscal_country)
    .bind(&p.fiscal_type)
    .bind(&p.birth_date)
    .bind(&p.vat_number)
    .bind(p.irpf_rate)
    .bind(&p.commercial_registry)
    .bind(p.fiscal_data_complete)
    .bind(now)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(rows == 1)
}

/// Records an administrator's verdict.
pub async fn set_verification(
    ex: Exec<'_>,
    id: i64,
    is_verified: bool,
    status: VerificationStatus,
    notes: Option<&str>,
    admin_id: i64,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let rows = on_exec!(ex, c => sqlx::query(
        "UPDATE profiles SET is_verified = $2, verification_status = $3,
            verification_notes = COALESCE($4, verification_notes),
            verified_at = CASE WHEN $2 THEN $6 ELSE NULL END,
            verified_by = CASE WHEN $2 THEN $5 ELSE NULL END,
            updated_at = $6
         WHERE id = $1",
    )
    .bind(id)
    .bind(is_verified)
    .bind(status)
    .bind(notes)
    .bind(admin_id)
    .bind(now)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(rows == 1)
}

/// Filters of the administrators' profile list. `search` is matched, case-insensitively, in
/// names, company name, slug and the user's e-mail and username.
#[derive(Debug, Default, Clone)]
pub struct AdminFilter {
    pub profile_type: Option<String>,
    pub is_verified: Option<bool>,
    pub verification_status: Option<VerificationStatus>,
    pub search: Option<String>,
}

/// What the administrators' profile list reads: profiles with their user (whose e-mail and
/// username are searched).
const ADMIN_FROM: &str = "profiles p JOIN users u ON u.id = p.user_id";

/// The conditions of the filters `f` has, their values bound.
fn admin_conditions(f: &AdminFilter) -> (Vec<String>, Sql) {
    let mut sql = Sql::default();
    let mut filter = Vec::new();
    if let Some(kind) = &f.profile_type {
        filter.push(format!("p.profile_type = {}", sql.arg(kind.as_str())));
    }
    if let Some(verified) = f.is_verified {
        filter.push(format!("p.is_verified = {}", sql.arg(verified)));
    }
    if let Some(status) = f.verification_status {
        filter.push(format!(
            "p.verification_status = {}",
            sql.arg(status.as_str())
        ));
    }
    if let Some(search) = f.search.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        let p = sql.arg(format!("%{}%", super::escape_like(&search.to_lowercase())));
        filter.push(format!(
            "(LOWER(COALESCE(p.full_name, '')) LIKE {p} ESCAPE '\\'
              OR LOWER(COALESCE(p.company_name, '')) LIKE {p} ESCAPE '\\'
              OR LOWER(COALESCE(p.slug, '')) LIKE {p} ESCAPE '\\'
              OR LOWER(u.email) LIKE {p} ESCAPE '\\' OR LOWER(u.username) LIKE {p} ESCAPE '\\')"
        ));
    }
    (filter, sql)
}

/// How many profiles pass the filters of `f` but its search: the sum of the kinds
/// (`Tally::Profiles`, type, verification and verification status) they leave.
fn kinds_total(f: &AdminFilter) -> Total {
    let types: Vec<&str> = match &f.profile_type {
        Some(kind) => vec![kind.as_str()],
        None => Role::ALL.iter().map(|r| r.as_str()).collect(),
    };
    let verified: Vec<bool> = f.is_verified.map_or(vec![true, false], |v| vec![v]);
    let statuses: Vec<VerificationStatus> = f
        .verification_status
        .map_or(VerificationStatus::ALL.to_vec(), |s| vec![s]);
    tallies::total_of(Tally::Profiles, |sql| {
        let mut keys = Vec::new();
        for kind in &types {
            for v in &verified {
                for status in &statuses {
                    keys.push(sql.arg(format!("{kind}:{v}:{}", status.as_str())));
                }
            }
        }
        keys
    })
}

/// The administrators' profile list under `f`, newest first.
pub fn admin_list(f: &AdminFilter) -> ListQuery {
    let (filter, args) = admin_conditions(f);
    // Without a search, the total is the count the writes keep of each kind of profile.
    let searched = f.search.as_deref().is_some_and(|s| !s.trim().is_empty());
    let total = if searched {
        listing::count_rows(ADMIN_FROM, &filter, &args)
    } else {
        kinds_total(f)
    };
    ListQuery {
        columns: PROFILE_COLUMNS.to_owned(),
        from: ADMIN_FROM,
        total,
        filter,
        args,
        order: Order::newest("p.created_at", "p.id"),
    }
}

/// One page (from 1) of profiles for administrators, newest first, and the total.
pub async fn list_admin(
    ex: Exec<'_>,
    f: &AdminFilter,
    page: i64,
    size: i64,
) -> StoreResult<(Vec<Profile>, i64)> {
    let (window, total) = admin_list(f).run(ex, Seek::Page(page), size).await?;
    Ok((window.items, total))
}

/// Filters of the public expert search.
#[derive(Debug, Default, Clone, PartialEq, Eq, Hash)]
pub struct ExpertFilter {
    /// A skill slug.
    pub skill: Option<String>,
    pub level: Option<String>,
    pub availability: Option<String>,
    pub verified: Option<bool>,
    /// Free text in name, bio, main area and skill names.
    pub q: Option<String>,
}

/// An administrator's team profile.
#[derive(Debug, Clone, Default, sqlx::FromRow)]
pub struct TeamProfile {
    pub id: i64,
    pub user_id: i64,
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

macro_rules! select_team {
    ($rest:literal) => {
        concat!(
            "SELECT id, user_id, slug, full_name, team_role, bio, profile_picture, location, ",
            "linkedin_url, twitter_url, github_url, instagram_url, tiktok_url, personal_website, ",
            "display_order, is_visible_in_team, created_at, updated_at FROM admin_team_profiles ",
            $rest
        )
    };
}

/// Inserts a team profile; a second one for the same user fails with a unique violation.
pub async fn insert_team(ex: Exec<'_>, t: &TeamProfile, now: DateTime<Utc>) -> StoreResult<i64> {
    Ok(on_exec!(ex, c => sqlx::query_scalar(
        "INSERT INTO admin_team_profiles (user_id, slug, full_name, team_role, bio, profile_picture,
            location, linkedin_url, twitter_url, github_url, instagram_url, tiktok_url,
            personal_website, display_order, is_visible_in_team, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $16)
         RETURNING id",
    )
    .bind(t.user_id)
    .bind(&t.slug)
    .bind(&t.full_name)
    .bind(&t.team_role)
    .bind(&t.bio)
    .bind(&t.profile_picture)
    .bind(&t.location)
    .bind(&t.linkedin_url)
    .bind(&t.twitter_url)
    .bind(&t.github_url)
    .bind(&t.instagram_url)
    .bind(&t.tiktok_url)
    .bind(&t.personal_website)
    .bind(t.display_order)
    .bind(t.is_visible_in_team)
    .bind(now)
    .fetch_one(c)
    .await)?)
}

pub async fn update_team(ex: Exec<'_>, t: &TeamProfile, now: DateTime<Utc>) -> StoreResult<bool> {
    let rows = on_exec!(ex, c => sqlx::query(
        "UPDATE admin_team_profiles SET full_name = $2, team_role = $3, bio = $4,
            profile_picture = $5, location = $6, linkedin_url = $7, twitter_url = $8,
            github_url = $9, instagram_url = $10, tiktok_url = $11, personal_website = $12,
            display_order = $13, is_visible_in_team = $14, updated_at = $15
         WHERE user_id = $1",
    )
    .bind(t.user_id)
    .bind(&t.full_name)
    .bind(&t.team_role)
    .bind(&t.bio)
    .bind(&t.profile_picture)
    .bind(&t.location)
    .bind(&t.linkedin_url)
    .bind(&t.twitter_url)
    .bind(&t.github_url)
    .bind(&t.instagram_url)
    .bind(&t.tiktok_url)
    .bind(&t.personal_website)
    .bind(t.display_order)
    .bind(t.is_visible_in_team)
    .bind(now)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(rows == 1)
}

pub async fn find_team_by_user(ex: Exec<'_>, user_id: i64) -> StoreResult<Option<TeamProfile>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, TeamProfile>(select_team!("WHERE user_id = $1"))
        .bind(user_id)
        .fetch_optional(c)
        .await)?,
    )
}

pub async fn find_team_by_slug(ex: Exec<'_>, slug: &str) -> StoreResult<Option<TeamProfile>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, TeamProfile>(select_team!("WHERE slug = $1"))
        .bind(slug)
        .fetch_optional(c)
        .await)?,
    )
}

/// The public team: visible profiles by `display_order`, then id.
pub async fn list_team(ex: Exec<'_>) -> StoreResult<Vec<TeamProfile>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, TeamProfile>(select_team!(
        "WHERE is_visible_in_team = TRUE ORDER BY display_order, id"
    ))
    .fetch_all(c)
    .await)?,
    )
}

/// Sets the picture path of a profile; the previous path, if any.
pub async fn set_picture(
    ex: Exec<'_>,
    id: i64,
    path: &str,
    now: DateTime<Utc>,
) -> StoreResult<Option<String>> {
    swap_picture(
        ex,
        "SELECT profile_picture FROM profiles WHERE id = $1",
        "UPDATE profiles SET profile_picture = $2, updated_at = $3 WHERE id = $1",
        id,
        path,
        now,
    )
    .await
}

/// Sets the picture path of an administrator's team profile; the previous path, if any.
pub async fn set_team_picture(
    ex: Exec<'_>,
    user_id: i64,
    path: &str,
    now: DateTime<Utc>,
) -> StoreResult<Option<String>> {
    swap_picture(
        ex,
        "SELECT profile_picture FROM admin_team_profiles WHERE user_id = $1",
        "UPDATE admin_team_profiles SET profile_picture = $2, updated_at = $3 WHERE user_id = $1",
        user_id,
        path,
        now,
    )
    .await
}

/// Reads the current picture with `select` and stores `path` with `update` (both keyed by `$1`).
async fn swap_picture(
    mut ex: Exec<'_>,
    select: &'static str,
    update: &'static str,
    key: i64,
    path: &str,
    now: DateTime<Utc>,
) -> StoreResult<Option<String>> {
    let previous: Option<Option<String>> = on_exec!(ex.re(), c => sqlx::query_scalar(select)
        .bind(key)
        .fetch_optional(c)
        .await)?;
    on_exec!(ex, c => sqlx::query(update)
        .bind(key)
        .bind(path)
        .bind(now)
        .execute(c)
        .await
        .map(|_| ()))?;
    Ok(previous.flatten())
}

/// A profile's links to the processor: the connected payout account (experts) and the
/// customer that holds saved cards (companies).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ProcessorLink {
    pub profile_id: i64,
    pub user_id: i64,
    pub connect_account_id: Option<String>,
    /// `pending`, `active`, `restricted` or `disconnected`; `None` before any account.
    pub connect_status: Option<ConnectStatus>,
    pub charges_enabled: bool,
    pub payouts_enabled: bool,
    pub customer_id: Option<String>,
}

/// The processor links of `user_id`'s profile of `profile_type`.
pub async fn processor_link(
    ex: Exec<'_>,
    user_id: i64,
    role: Role,
) -> StoreResult<Option<ProcessorLink>> {
    Ok(on_exec!(ex, c => sqlx::query_as::<_, ProcessorLink>(
        "SELECT id AS profile_id, user_id, processor_connect_account_id AS connect_account_id,
                processor_connect_status AS connect_status,
                processor_charges_enabled AS charges_enabled,
                processor_payouts_enabled AS payouts_enabled,
                processor_customer_id AS customer_id
         FROM profiles WHERE user_id = $1 AND profile_type = $2",
    )
    .bind(user_id)
    .bind(role.as_str())
    .fetch_optional(c)
    .await)?)
}

/// Records a new connected account on a profile that has none; `false` when it already had
/// one (a concurrent request won: read it back).
pub async fn set_connect_account(
    ex: Exec<'_>,
    profile_id: i64,
    account_id: &str,
    status: ConnectStatus,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let rows = on_exec!(ex, c => sqlx::query(
        "UPDATE profiles SET processor_connect_account_id = $2, processor_connect_status = $3,
            processor_charges_enabled = FALSE, processor_payouts_enabled = FALSE, updated_at = $4
         WHERE id = $1 AND processor_connect_account_id IS NULL",
    )
    .bind(profile_id)
    .bind(account_id)
    .bind(status)
    .bind(now)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(rows == 1)
}

/// Stores the processor's view of a connected account on the profile that holds it, found
/// by account id (so a late update of a disconnected account changes nothing). `false` when
/// no profile holds it.
pub async fn set_connect_state(
    ex: Exec<'_>,
    account_id: &str,
    status: ConnectStatus,
    charges_enabled: bool,
    payouts_enabled: bool,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let rows = on_exec!(ex, c => sqlx::query(
        "UPDATE profiles SET processor_connect_status = $2, processor_charges_enabled = $3,
            processor_payouts_enabled = $4, updated_at = $5
         WHERE processor_connect_account_id = $1",
    )
    .bind(account_id)
    .bind(status)
    .bind(charges_enabled)
    .bind(payouts_enabled)
    .bind(now)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(rows >= 1)
}

/// Forgets a profile's connected account: no id, `status`, both flags off.
pub async fn clear_connect_account(
    ex: Exec<'_>,
    profile_id: i64,
    status: ConnectStatus,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let rows = on_exec!(ex, c => sqlx::query(
        "UPDATE profiles SET processor_connect_account_id = NULL, processor_connect_status = $2,
            processor_charges_enabled = FALSE, processor_payouts_enabled = FALSE, updated_at = $3
         WHERE id = $1",
    )
    .bind(profile_id)
    .bind(status)
    .bind(now)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(rows == 1)
}

/// Records the processor customer of a profile that has none; `false` when it already had
/// one (a concurrent request won: read it back).
pub async fn set_customer(
    ex: Exec<'_>,
    profile_id: i64,
    customer_id: &str,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let rows = on_exec!(ex, c => sqlx::query(
        "UPDATE profiles SET processor_customer_id = $2, updated_at = $3
         WHERE id = $1 AND processor_customer_id IS NULL",
    )
    .bind(profile_id)
    .bind(customer_id)
    .bind(now)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(rows == 1)
}

/// Curation's order past the skills held: level, then internal rating, as migration 0051's
/// index holds the verified experts.
const CURATION_RANK: &str = "CASE p.expert_level WHEN 'Enterprise' THEN 2 WHEN 'Pro' THEN 1 \
                             ELSE 0 END DESC, COALESCE(p.internal_rating, 3.0) DESC, p.user_id";

/// An expert curation may suggest, with what the score needs and no more: the profiles of the
/// few suggested are read afterwards ([`curated`]).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct CurationCandidate {
    pub profile_id: i64,
    pub user_id: i64,
    pub expert_level: String,
    pub internal_rating: Option<f64>,
    /// The ids of every skill the expert holds, as migration 0051 keeps them (`,4,24,`).
    skill_ids: Option<String>,
    /// The names of the required skills the expert holds (the score weighs no other).
    #[sqlx(skip)]
    pub skills: Vec<String>,
}

impl CurationCandidate {
    /// Whether the expert holds the skill whose id is `pattern` (`,<id>,`).
    fn holds(&self, pattern: &str) -> bool {
        self.skill_ids
            .as_deref()
            .is_some_and(|ids| ids.contains(pattern))
    }

    /// About how many bytes the candidate takes in memory.
    pub fn bytes(&self) -> usize {
        size_of::<Self>()
            + self.expert_level.len()
            + self.skill_ids.as_ref().map_or(0, String::len)
            + self
                .skills
                .iter()
                .map(|s| size_of::<String>() + s.len())
                .sum::<usize>()
    }
}

/// Curation's candidates ([`curation_candidates`]) by the required skills and the user left
/// out, kept per instance under the count of committed writes to what they are chosen from
/// ([`super::expert_lists::writes`], migration 0047: profiles, their skills, the skills and
/// accounts' activity), read before them ([`super::page_cache`]). The reviews that order
/// them, and the suggested profiles, are read at every request.
pub type KeptCandidates =
    super::page_cache::PageCache<(Vec<String>, Option<i64>), Vec<CurationCandidate>>;

/// A skill a project requires, as curation reads it: with the kept counts that choose how its
/// holders are found (`listing::SetTest`).
#[derive(Debug, sqlx::FromRow)]
struct RequiredSkill {
    id: i64,
    name: String,
    /// The listed experts who hold it (`Tally::ExpertsBySkill`).
    holders: i64,
    /// Every listed expert (`Tally::ListedExperts`), the same on each row.
    listed: i64,
}

/// The skills named `names` (lower-cased) that exist, each with its kept counts: one lookup
/// by key, whatever the names, so its plan is kept.
async fn required_skills(ex: Exec<'_>, names: &[String]) -> StoreResult<Vec<RequiredSkill>> {
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let mut sql = Sql::default();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let names = sql.arg_set(&names);
    let holders = tallies::count_in(
        &mut sql,
        Tally::ExpertsBySkill,
        "CAST(s.id AS TEXT) || ':true'",
    );
    let listed = sql.arg("true");
    let listed = tallies::count_in(&mut sql, Tally::ListedExperts, &listed);
    sql.with_text(&format!(
        "SELECT s.id, s.name, {holders} AS holders, {listed} AS listed
           FROM skills s WHERE LOWER(s.name) IN ({names})"
    ))
    .same_plan()
    .fetch_all(ex)
    .await
}

/// The experts curation may suggest for a project requiring `required` skills (lower-cased),
/// at most `bound` of them: verified expert profiles of active users whose availability does
/// not say they are unavailable, other than `excluded`, holding at least one required skill
/// when the project names any. Chosen in SQL by what the score weighs most — required skills
/// held, then level, then internal rating — so a request reads a bounded number of experts,
/// never every one; each comes with the required skills it holds (its reviews are the
/// caller's to read, for those that may rank: `reviews::averages`).
///
/// Without required skills, the `bound` best by level and rating (the rank's index of the
/// experts curation may suggest, migrations 0051 and 0055, in that order). With them, every
/// holder is grouped and ranked while they are few; when they are many (`listing::SetTest`,
/// from the kept counts of each skill's experts and of all listed ones), the candidates are
/// the `4 × bound` best holders by level and rating (the `bound` best for one skill), found
/// walking that index, whose entries hold each expert's skills, then ranked by skills held.
/// Either way they come in that order.
pub async fn curation_candidates(
    mut ex: Exec<'_>,
    required: &[String],
    excluded: Option<i64>,
    bound: i64,
) -> StoreResult<Vec<CurationCandidate>> {
    use super::listing::SetTest;
    let skills = required_skills(ex.re(), required).await?;
    if !required.is_empty() && skills.is_empty() {
        return Ok(Vec::new());
    }
    let mut sql = Sql::default();
    let excluded = sql.arg(excluded.unwrap_or(0));
    // Few accounts are inactive: 0051's index of them answers for each expert walked without
    // reading the account (SQLite would read it by its rowid, unless told).
    let inactive = match ex {
        Exec::Sqlite(_) => "users u INDEXED BY idx_users_inactive",
        _ => "users u",
    };
    // SQLite does not see that `eligible` implies the index's own condition (migration 0055).
    let ranked = match ex {
        Exec::Sqlite(_) => "profiles p INDEXED BY idx_profiles_curation_rank",
        _ => "profiles p",
    };
    let eligible = format!(
        "p.profile_type = 'experto' AND p.is_verified = TRUE
         AND LOWER(COALESCE(p.availability, 'available'))
             NOT IN ('unavailable', 'not_available', 'busy')
         AND p.user_id <> {excluded}
         AND NOT EXISTS (SELECT 1 FROM {inactive} WHERE u.id = p.user_id AND u.is_active = FALSE)"
    );
    // With one required skill every holder holds as many, so the first `bound` walked are the
    // candidates; with more, the walk reads four times as many to rank by skills held.
    let walk = match skills.len() {
        1 => bound,
        _ => bound.saturating_mul(4),
    };
    let text = if skills.is_empty() {
        let bound = sql.arg(bound);
        format!(
            "SELECT {CANDIDATE} FROM {ranked}
             WHERE {eligible} ORDER BY {CURATION_RANK} LIMIT {bound}"
        )
    } else {
        let holders = skills.iter().map(|s| s.holders).sum();
        let listed = skills[0].listed;
        match SetTest::cheaper(holders, walk, listed) {
            SetTest::Lookup => {
                let ids: Vec<i64> = skills.iter().map(|s| s.id).collect();
                let ids = sql.arg_list(&ids);
                let bound = sql.arg(bound);
                format!(
                    "SELECT {CANDIDATE} FROM profiles p
                       JOIN profile_skills ps ON ps.profile_id = p.id AND ps.skill_id IN ({ids})
                     WHERE {eligible}
                     GROUP BY p.id, p.user_id, p.expert_level, p.internal_rating, p.skill_ids
                     ORDER BY COUNT(*) DESC, {CURATION_RANK} LIMIT {bound}"
                )
            }
            // Each entry of the rank's index holds the expert's skills: the walk reads no
            // profile and probes no skill. (Ranking the walk by skills held in SQL, so that
            // only `bound` rows cross, cost PostgreSQL more than it saved here: 7.1 ms against
            // 5.2 for 800 entries at M.)
            SetTest::Probe => {
                let held_any: Vec<String> = skills
                    .iter()
                    .map(|s| format!("p.skill_ids LIKE {}", sql.arg(format!("%,{},%", s.id))))
                    .collect();
                let walk = sql.arg(walk);
                format!(
                    "SELECT {CANDIDATE} FROM {ranked}
                     WHERE ({held_any}) AND {eligible}
                     ORDER BY {CURATION_RANK} LIMIT {walk}",
                    held_any = held_any.join(" OR ")
                )
            }
        }
    };
    let mut candidates: Vec<CurationCandidate> = sql.with_text(&text).fetch_all(ex).await?;
    let patterns: Vec<(String, &String)> = skills
        .iter()
        .map(|s| (format!(",{},", s.id), &s.name))
        .collect();
    for c in &mut candidates {
        c.skills = patterns
            .iter()
            .filter(|(pattern, _)| c.holds(pattern))
            .map(|(_, name)| (*name).clone())
            .collect();
    }
    // Walked in rank order: the most skills held first, in that order (a stable sort).
    candidates.sort_by_key(|c| std::cmp::Reverse(c.skills.len()));
    candidates.truncate(usize::try_from(bound).unwrap_or(0));
    Ok(candidates)
}

/// What a curation candidate is read with ([`CurationCandidate`]), from profiles `p`.
const CANDIDATE: &str =
    "p.id AS profile_id, p.user_id, p.expert_level, p.internal_rating, p.skill_ids";

/// The profiles of `ids` that exist, each with its skills' names, by profile id: the experts a
/// curation suggests.
pub async fn curated(
    mut ex: Exec<'_>,
    ids: &[i64],
) -> StoreResult<HashMap<i64, (Profile, Vec<String>)>> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    // Lookups by key, whoever they are: their plans are kept.
    let mut of = Sql::default();
    let list = of.arg_set(ids);
    let profiles: Vec<Profile> = of
        .clone()
        .with_text(&format!("{} WHERE p.id IN ({list})", select_profiles!("")))
        .same_plan()
        .fetch_all(ex.re())
        .await?;
    let skills: Vec<(i64, String)> = of
        .with_text(&format!(
            "SELECT ps.profile_id, s.name FROM profile_skills ps
             JOIN skills s ON s.id = ps.skill_id WHERE ps.profile_id IN ({list})"
        ))
        .same_plan()
        .fetch_all(ex)
        .await?;
    Ok(profiles
        .into_iter()
        .map(|p| {
            let held = skills.iter().filter(|s| s.0 == p.id);
            let names = held.map(|s| s.1.clone()).collect();
            (p.id, (p, names))
        })
        .collect())
}

/// The user whose expert profile holds connected account `account_id`.
pub async fn user_by_connect_account(ex: Exec<'_>, account_id: &str) -> StoreResult<Option<i64>> {
    Ok(on_exec!(ex, c => sqlx::query_scalar(
        "SELECT user_id FROM profiles WHERE processor_connect_account_id = $1",
    )
    .bind(account_id)
    .fetch_optional(c)
    .await)?)
}

/// Records `user_id`'s acceptance of self-billing on their expert profile, once: a later
/// acceptance keeps the first date. Answers the date it holds (`None` without an expert
/// profile).
pub async fn accept_self_billing(
    mut ex: Exec<'_>,
    user_id: i64,
    now: DateTime<Utc>,
) -> StoreResult<Option<DateTime<Utc>>> {
    on_exec!(ex.re(), c => sqlx::query(
        "UPDATE profiles SET self_billing_accepted_at = $2
         WHERE user_id = $1 AND profile_type = 'experto' AND self_billing_accepted_at IS NULL",
    )
    .bind(user_id)
    .bind(now)
    .execute(c)
    .await
    .map(drop))?;
    self_billing_accepted_at(ex, user_id).await
}

/// When `user_id` accepted self-billing, if they did.
pub async fn self_billing_accepted_at(
    ex: Exec<'_>,
    user_id: i64,
) -> StoreResult<Option<DateTime<Utc>>> {
    let at: Option<Option<DateTime<Utc>>> = on_exec!(ex, c => sqlx::query_scalar(
        "SELECT self_billing_accepted_at FROM profiles
         WHERE user_id = $1 AND profile_type = 'experto'",
    )
    .bind(user_id)
    .fetch_optional(c)
    .await)?;
    Ok(at.flatten())
}
