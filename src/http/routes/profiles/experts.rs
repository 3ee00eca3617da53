//! Expert search and pages, and the skills catalogue: `/api/profiles/experts*`, `/api/skills/*`.

use crate::domain::search::SearchTerm;
use actix_web::{HttpResponse, get, web};
use serde::Deserialize;
use utoipa::IntoParams;

use crate::domain::profile::{self as rules, EXPERT_LEVELS};
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::pagination::{Page, PageQuery, Paginated, kept};
use crate::state::AppState;
use crate::store::Conn;
use crate::store::listing::Seek;
use crate::store::profiles::{self, ExpertFilter};
use crate::store::{expert_lists, skills};

use super::*;

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
    /// Words in the name, bio or main area, or a skill's name (case and accents ignored).
    pub q: Option<SearchTerm>,
    pub page: Option<i64>,
    pub size: Option<i64>,
    /// A `next_cursor` of this list: the page after it (`page` is then ignored).
    pub cursor: Option<String>,
}

/// A page of the directory as JSON. The same answer goes to everyone, so each instance keeps
/// it until an expert changes: the count of committed writes to what the directory shows is
/// read first, and an answer kept under that count is served as it is (`store::page_cache`).
async fn expert_page(
    state: &AppState,
    filter: ExpertFilter,
    page: Page,
    seek: Seek,
) -> ApiResult<HttpResponse> {
    let mut conn = state.db.conn().await?;
    let writes = expert_lists::writes(conn.exec()).await?;
    let key = (seek, page.size, filter.clone());
    let read = read_page(&mut conn, &filter, page, seek);
    kept(&state.expert_directory, key, writes, read).await
}

async fn read_page(
    conn: &mut Conn,
    filter: &ExpertFilter,
    page: Page,
    seek: Seek,
) -> ApiResult<Paginated<PublicProfile>> {
    let window = seek.window(page.size);
    let query = expert_lists::experts_for_page(conn.exec(), filter, window).await?;
    let (items, next, total) = expert_lists::page(conn.exec(), query, seek, page.size).await?;
    let ids: Vec<i64> = items.iter().map(|p| p.id).collect();
    let mut held = skills::of_profiles(conn.exec(), &ids).await?;
    let views = items
        .iter()
        .map(|p| public_view(p, held.remove(&p.id).unwrap_or_default()))
        .collect();
    Ok(Paginated::new(views, total, page).with_next(next))
}

/// Searches experts: by skill, level, availability, verification and free text. No
/// authentication.
///
/// The same answer goes to everyone, so each instance keeps it until an expert changes (a
/// profile, a skill held or renamed, an account's activity): the count of committed writes to
/// those is read first, and an answer kept under that count is served as it is.
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
        q: q.q.map(SearchTerm::into_string),
    };
    let seek = crate::http::pagination::seek(q.cursor.as_deref(), page)?;
    expert_page(&state, filter, page, seek).await
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

/// The experts holding a skill, paginated; kept by each instance as the expert search is.
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
    let seek = Seek::Page(page.page);
    expert_page(&state, filter, page, seek).await
}
