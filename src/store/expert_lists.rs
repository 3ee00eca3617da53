//! The expert list (`GET /api/profiles/experts`, `GET /api/skills/{slug}/experts`): active
//! users' expert profiles, verified first, then newest, a page at a time through
//! `store::listing`. A skill alone starts from `profile_skills`. Words are searched in the
//! profile's search document (migration 0038: name, bio, main area and skill names, case and
//! accents folded; PostgreSQL's `search_words`, SQLite's FTS5 `profile_search`), a skill
//! beside them being one more term of the same match. The totals of the whole directory and
//! of one skill's experts are kept by the writes (migrations 0027 and 0030).

use super::listing::{self, Keyed, ListQuery, Order, SetTest, Sql, Tier, Total};
use super::profiles::{ExpertFilter, Profile};
use super::tallies::{self, Tally};
use super::{Exec, StoreResult};
use crate::domain::cursor::Cursor;

impl Keyed for Profile {
    fn cursor(&self) -> Cursor {
        Cursor {
            rank: i64::from(self.is_verified),
            at: self.created_at,
            id: self.id,
        }
    }
}

fn newest() -> Order {
    Order::newest("p.created_at", "p.id")
}

/// The first tier of the directory.
const VERIFIED: &str = "p.is_verified = TRUE";

/// Verified experts first (counted by `verified`), then the others.
fn verified_first(verified: Total) -> Order {
    Order {
        tiers: vec![
            Tier {
                rank: 1,
                condition: VERIFIED.to_owned(),
                total: Some(verified),
            },
            Tier {
                rank: 0,
                condition: "p.is_verified = FALSE".to_owned(),
                total: None,
            },
        ],
        ..newest()
    }
}

const FROM: &str = "profiles p JOIN users u ON u.id = p.user_id";

/// Experts matching `f`, verified first, then newest.
pub fn experts(engine: &Exec<'_>, f: &ExpertFilter) -> ListQuery {
    experts_with(engine, f, SetTest::Lookup)
}

/// [`experts`] for a page ending at row `window`. On SQLite a skill with no other filter but
/// verification is tested as [`SetTest::cheaper`] says from the kept counts: Python's 10,210
/// experts at M, of 74,129, took 25 ms looked up and sorted, 0.1 ms probed.
pub async fn experts_for_page(
    ex: Exec<'_>,
    f: &ExpertFilter,
    window: i64,
) -> StoreResult<ListQuery> {
    let searched = f.q.as_deref().is_some_and(|q| !q.trim().is_empty());
    let skill_alone =
        f.skill.is_some() && f.level.is_none() && f.availability.is_none() && !searched;
    if !matches!(ex, Exec::Sqlite(_)) || !skill_alone {
        return Ok(experts(&ex, f));
    }
    let without = ExpertFilter {
        skill: None,
        ..f.clone()
    };
    let whole = experts(&ex, &without);
    let build = |engine: &Exec<'_>, test| experts_with(engine, f, test);
    SetTest::choose(ex, window, &whole, build).await
}

fn experts_with(engine: &Exec<'_>, f: &ExpertFilter, test: SetTest) -> ListQuery {
    let mut sql = Sql::default();
    // Written as the partial index `idx_profiles_experts_listed` is.
    let mut filter = vec![
        "p.profile_type = 'experto'".to_owned(),
        "u.is_active = TRUE".to_owned(),
    ];
    let search = f.q.as_deref().map(str::trim).filter(|s| !s.is_empty());
    if let Some(search) = search {
        let words = listing::words(search);
        if words.is_empty() {
            return ListQuery::nothing(newest());
        }
        filter.push(searched(engine, &mut sql, &words, f.skill.as_deref()));
    } else if let Some(slug) = &f.skill {
        let slug = sql.arg(slug.as_str());
        // The skill's id first, so each profile is tested by one lookup of
        // `(profile_id, skill_id)`; joined to `skills` instead, PostgreSQL read every skill of
        // every profile it walked (71 ms for a page at M, 0.7 ms this way).
        let skill = format!("(SELECT id FROM skills WHERE slug = {slug})");
        filter.push(match test {
            SetTest::Lookup => format!(
                "p.id IN (SELECT ps.profile_id FROM profile_skills ps WHERE ps.skill_id = {skill})"
            ),
            SetTest::Probe => format!(
                "EXISTS (SELECT 1 FROM profile_skills ps
                          WHERE ps.profile_id = p.id AND ps.skill_id = {skill})"
            ),
        });
    }
    if let Some(level) = &f.level {
        filter.push(format!("p.expert_level = {}", sql.arg(level.as_str())));
    }
    if let Some(availability) = &f.availability {
        filter.push(format!(
            "LOWER(COALESCE(p.availability, '')) = {}",
            sql.arg(availability.to_lowercase())
        ));
    }
    if let Some(verified) = f.verified {
        filter.push(format!("p.is_verified = {}", sql.arg(verified)));
    }
    // The whole directory or one skill's experts, or only their verified or unverified
    // part: the counts the writes keep (migrations 0027 and 0030).
    let kept = f.level.is_none() && f.availability.is_none() && search.is_none();
    let tally = |verified: Option<bool>| match &f.skill {
        None => tallies::total(
            Tally::ListedExperts,
            verified.map(|v| v.to_string()).as_deref(),
        ),
        Some(slug) => tallies::total_of(Tally::ExpertsBySkill, |sql| {
            let skill = sql.arg(slug.as_str());
            let key = |sql: &mut Sql, verified: bool| {
                format!(
                    "(SELECT CAST(id AS TEXT) FROM skills WHERE slug = {skill}) || {}",
                    sql.arg(format!(":{verified}"))
                )
            };
            match verified {
                Some(v) => vec![key(sql, v)],
                None => vec![key(sql, true), key(sql, false)],
            }
        }),
    };
    let total = if kept {
        tally(f.verified)
    } else {
        listing::count_rows(FROM, &filter, &sql)
    };
    // A list of one verification is one tier.
    let order = match f.verified {
        Some(_) => newest(),
        None if kept => verified_first(tally(Some(true))),
        None => {
            let mut verified = filter.clone();
            verified.push(VERIFIED.to_owned());
            verified_first(listing::count_rows(FROM, &verified, &sql))
        }
    };
    ListQuery {
        columns: super::profiles::PROFILE_COLUMNS.to_owned(),
        from: FROM,
        filter,
        args: sql,
        order,
        total,
    }
}

/// Profiles whose search document (migration 0038) holds every one of `words`, in their
/// text or their skills' names, and with `skill` the skill of that slug: one match in the
/// full-text index, which intersects the word's and the skill's entries.
fn searched(engine: &Exec<'_>, sql: &mut Sql, words: &[&str], skill: Option<&str>) -> String {
    let skill = skill.map(|slug| sql.arg(slug));
    match engine {
        Exec::Postgres(_) => {
            let mut q = listing::tsquery(sql, words);
            // A skill's token, `#<id>`, is no word a search can hold; an unknown slug
            // makes the query NULL, which matches nothing.
            if let Some(slug) = skill {
                q = format!(
                    "({q} && (SELECT CAST(quote_literal('#' || id) AS tsquery)
                               FROM skills WHERE slug = {slug}))"
                );
            }
            format!("p.search_words @@ {q}")
        }
        Exec::Sqlite(_) => {
            let mut q = listing::fts5_query(sql, words, Some("words"));
            // An unknown slug asks for skill 0, which no profile holds.
            if let Some(slug) = skill {
                q = format!(
                    "{q} || ' AND skills : \"' ||
                       COALESCE((SELECT id FROM skills WHERE slug = {slug}), 0) || '\"'"
                );
            }
            format!("p.id IN (SELECT rowid FROM profile_search WHERE profile_search MATCH {q})")
        }
    }
}

/// One page of `query` and the list's total.
pub async fn page(
    ex: Exec<'_>,
    query: ListQuery,
    seek: listing::Seek,
    size: i64,
) -> StoreResult<(Vec<Profile>, Option<Cursor>, i64)> {
    let (window, total) = query.run::<Profile>(ex, seek, size).await?;
    Ok((window.items, window.next, total))
}
