//! The expert list (`GET /api/profiles/experts`, `GET /api/skills/{slug}/experts`): active
//! users' expert profiles, verified first, then newest, a page at a time through
//! `store::listing`. A skill alone starts from `profile_skills`. Words are searched in the
//! listed experts' search documents (name, bio, main area and skill names, case and accents
//! folded; migration 0046: PostgreSQL's `expert_search`, SQLite's FTS5 `profile_search`), a
//! skill beside them being one more term of the same match. The totals of the whole
//! directory and of one skill's experts are kept by the writes (migrations 0027 and 0030), a
//! one-word search's on PostgreSQL too (`Tally::ExpertWords`, 0046); SQLite counts a search's
//! matches in its index alone.

use super::listing::{self, Keyed, ListQuery, Order, Seek, SetTest, Sql, Tier, Total};
use super::profiles::{ExpertFilter, PROFILE_COLUMNS, Profile};
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

/// Where a list of experts reads its rows, and the columns its order reads there.
struct Rows {
    from: &'static str,
    verified: &'static str,
    at: &'static str,
    id: &'static str,
}

/// Profiles with their users: the directory, and every search on SQLite.
const PROFILES: Rows = Rows {
    from: "profiles p JOIN users u ON u.id = p.user_id",
    verified: "p.is_verified",
    at: "p.created_at",
    id: "p.id",
};

/// [`PROFILES`] as SQLite reads them: from the profiles, then each one's user (`CROSS JOIN`
/// fixes SQLite's join order). Left to choose, its planner at L read every user and sorted
/// their expert profiles: 1.5 s for the directory's first page, against 0.03 ms walking the
/// directory's index, and 1.5 s against 0.1 for a search's.
const PROFILES_ON_SQLITE: Rows = Rows {
    from: "profiles p CROSS JOIN users u ON u.id = p.user_id",
    ..PROFILES
};

/// Where `engine` reads the directory and its searches by profile.
fn profiles(engine: &Exec<'_>) -> &'static Rows {
    match engine {
        Exec::Sqlite(_) => &PROFILES_ON_SQLITE,
        Exec::Postgres(_) => &PROFILES,
    }
}

/// A search on PostgreSQL: the listed experts' documents (migration 0046), each beside its
/// profile. The join is LEFT so that the planner drops it wherever the statement reads no
/// column of the profile (every row has its profile: its key references it), and a total or a
/// page's ids read the narrow rows alone.
const DOCUMENTS: Rows = Rows {
    from: "expert_search e LEFT JOIN profiles p ON p.id = e.profile_id",
    verified: "e.is_verified",
    at: "e.created_at",
    id: "e.profile_id",
};

impl Rows {
    fn newest(&self) -> Order {
        Order::newest(self.at, self.id)
    }

    /// The condition of one verification.
    fn verified_is(&self, verified: bool) -> String {
        format!(
            "{} = {}",
            self.verified,
            if verified { "TRUE" } else { "FALSE" }
        )
    }

    /// Verified experts first (counted by `verified`), then the others.
    fn verified_first(&self, verified: Total) -> Order {
        Order {
            tiers: vec![
                Tier {
                    rank: 1,
                    condition: self.verified_is(true),
                    total: Some(verified),
                },
                Tier {
                    rank: 0,
                    condition: self.verified_is(false),
                    total: None,
                },
            ],
            ..self.newest()
        }
    }

    /// The list of the rows passing `filter` (values in `args`), in the directory's order: its
    /// total, and its verified tier's, from `kept` (a count the writes keep or an index's, for
    /// one verification or both) when given, else counted.
    fn list(
        &self,
        f: &ExpertFilter,
        filter: Vec<String>,
        args: Sql,
        kept: Option<Kept<'_>>,
    ) -> ListQuery {
        let counted = |extra: Option<String>| {
            let mut filter = filter.clone();
            filter.extend(extra);
            listing::count_rows(self.from, &filter, &args)
        };
        let total = match kept {
            Some(kept) => kept(f.verified),
            None => counted(None),
        };
        // A list of one verification is one tier.
        let order = match (f.verified, kept) {
            (Some(_), _) => self.newest(),
            (None, Some(kept)) => self.verified_first(kept(Some(true))),
            (None, None) => self.verified_first(counted(Some(self.verified_is(true)))),
        };
        ListQuery {
            columns: PROFILE_COLUMNS.to_owned(),
            from: self.from,
            filter,
            args,
            order,
            total,
        }
    }
}

/// The directory's rule over `PROFILES`: expert profiles of active accounts, written as the
/// partial index `idx_profiles_experts_listed` is.
fn listed() -> Vec<String> {
    vec![
        "p.profile_type = 'experto'".to_owned(),
        "u.is_active = TRUE".to_owned(),
    ]
}

/// A total the list need not count, of one verification or both.
type Kept<'a> = &'a dyn Fn(Option<bool>) -> Total;

/// The filters past the skill and the words, over `rows`.
fn narrowed(sql: &mut Sql, f: &ExpertFilter, rows: &Rows) -> Vec<String> {
    let mut filter = Vec::new();
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
        filter.push(format!("{} = {}", rows.verified, sql.arg(verified)));
    }
    filter
}

/// The keys of a tally by verification, `key` writing one from its suffix's placeholder: of
/// one verification, or both.
fn by_verification(
    sql: &mut Sql,
    verified: Option<bool>,
    key: impl Fn(String) -> String,
) -> Vec<String> {
    let suffixes = match verified {
        Some(v) => vec![v],
        None => vec![true, false],
    };
    suffixes
        .into_iter()
        .map(|v| key(sql.arg(format!(":{v}"))))
        .collect()
}

/// Experts matching `f`, verified first, then newest.
pub fn experts(engine: &Exec<'_>, f: &ExpertFilter) -> ListQuery {
    experts_with(engine, f, SetTest::Lookup)
}

/// [`experts`] for a page ending at row `window`. On SQLite a skill or a search with no other
/// filter but verification is tested as [`SetTest::cheaper`] says from the kept counts and the
/// index's: Python's 10,210 experts at M, of 74,129, took 25 ms looked up and sorted, 0.1 ms
/// probed; `q=data`'s 25,636, 32 ms and 2.8 ms.
pub async fn experts_for_page(
    ex: Exec<'_>,
    f: &ExpertFilter,
    window: i64,
) -> StoreResult<ListQuery> {
    let searched = f.q.as_deref().is_some_and(|q| !q.trim().is_empty());
    let set_alone =
        (f.skill.is_some() || searched) && f.level.is_none() && f.availability.is_none();
    if !matches!(ex, Exec::Sqlite(_)) || !set_alone {
        return Ok(experts(&ex, f));
    }
    let without = ExpertFilter {
        skill: None,
        q: None,
        ..f.clone()
    };
    let whole = experts(&ex, &without);
    let build = |engine: &Exec<'_>, test| experts_with(engine, f, test);
    SetTest::choose(ex, window, &whole, build).await
}

fn experts_with(engine: &Exec<'_>, f: &ExpertFilter, test: SetTest) -> ListQuery {
    if let Some(search) = f.q.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        let words = listing::words(search);
        if words.is_empty() {
            return ListQuery::nothing(PROFILES.newest());
        }
        return searched(engine, f, &words, test);
    }
    let mut sql = Sql::default();
    let mut filter = listed();
    if let Some(slug) = &f.skill {
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
    let rows = profiles(engine);
    filter.extend(narrowed(&mut sql, f, rows));
    // The whole directory or one skill's experts, or only their verified or unverified
    // part: the counts the writes keep (migrations 0027 and 0030).
    let tally = |verified: Option<bool>| match &f.skill {
        None => tallies::total(
            Tally::ListedExperts,
            verified.map(|v| v.to_string()).as_deref(),
        ),
        Some(slug) => tallies::total_of(Tally::ExpertsBySkill, |sql| {
            let skill = sql.arg(slug.as_str());
            by_verification(sql, verified, |suffix| {
                format!("(SELECT CAST(id AS TEXT) FROM skills WHERE slug = {skill}) || {suffix}")
            })
        }),
    };
    let kept = f.level.is_none() && f.availability.is_none();
    rows.list(f, filter, sql, kept.then_some(&tally as Kept<'_>))
}

/// Listed experts whose search document (migration 0046) holds every one of `words`, in
/// their text or their skills' names, and with `f.skill` the skill of that slug: one match in
/// the full-text index, which intersects the words' and the skill's entries; with the rest of
/// `f`. On SQLite the matches are looked up and sorted, or probed as the order is walked
/// (`test`); PostgreSQL's planner chooses from its statistics.
fn searched(engine: &Exec<'_>, f: &ExpertFilter, words: &[&str], test: SetTest) -> ListQuery {
    let mut sql = Sql::default();
    let skill = f.skill.as_deref().map(|slug| sql.arg(slug));
    let alone = f.level.is_none() && f.availability.is_none();
    match engine {
        Exec::Postgres(_) => {
            let mut q = listing::tsquery(&mut sql, words);
            // A skill's token, `#<id>`, is no word a search can hold; an unknown slug
            // makes the query NULL, which matches nothing.
            if let Some(slug) = &skill {
                q = format!(
                    "({q} && (SELECT CAST(quote_literal('#' || id) AS tsquery)
                               FROM skills WHERE slug = {slug}))"
                );
            }
            let mut filter = vec![format!("e.words @@ {q}")];
            filter.extend(narrowed(&mut sql, f, &DOCUMENTS));
            // One word: the listed experts holding it (beside the skill) that the writes keep.
            let tally = |verified: Option<bool>| {
                tallies::total_of(Tally::ExpertWords, |sql| {
                    let word = sql.arg(words[0]);
                    let skill = f.skill.as_deref().map(|slug| sql.arg(slug));
                    by_verification(sql, verified, |suffix| match &skill {
                        None => format!("fold_text({word}) || {suffix}"),
                        Some(slug) => format!(
                            "fold_text({word}) || ' #' || \
                             (SELECT CAST(id AS TEXT) FROM skills WHERE slug = {slug}) || {suffix}"
                        ),
                    })
                })
            };
            let kept = alone && words.len() == 1;
            DOCUMENTS.list(f, filter, sql, kept.then_some(&tally as Kept<'_>))
        }
        Exec::Sqlite(_) => {
            let mut q = listing::fts5_query(&mut sql, words, Some("words"));
            // An unknown slug asks for skill 0, which no profile holds.
            if let Some(slug) = &skill {
                q = format!(
                    "{q} || ' AND skills : \"' ||
                       COALESCE((SELECT id FROM skills WHERE slug = {slug}), 0) || '\"'"
                );
            }
            // The index holds listed experts only, with their verification: it counts a
            // search's matches, of one verification or both, without reading a row.
            let matched = sql.clone();
            let counted = |verified: Option<bool>| {
                let mut sql = matched.clone();
                let query = match verified {
                    None => q.clone(),
                    Some(v) => format!("{q} || {}", sql.arg(format!(" AND verified : \"{v}\""))),
                };
                Total::Query(sql.with_text(&format!(
                    "SELECT COUNT(*) FROM profile_search WHERE profile_search MATCH {query}"
                )))
            };
            // Either way the matches are read from the index once; probed, the unary plus
            // keeps SQLite from starting at them, so it walks the order and tests each row
            // against them.
            let member = match test {
                SetTest::Lookup => "p.id",
                SetTest::Probe => "+p.id",
            };
            let mut filter = listed();
            filter.push(format!(
                "{member} IN (SELECT rowid FROM profile_search WHERE profile_search MATCH {q})"
            ));
            filter.extend(narrowed(&mut sql, f, &PROFILES_ON_SQLITE));
            PROFILES_ON_SQLITE.list(f, filter, sql, alone.then_some(&counted as Kept<'_>))
        }
    }
}

/// The directory's page `seek` of `size` items under `filter`: what its answers are kept by
/// (`AppState::expert_directory`).
pub type DirectoryPage = (Seek, i64, ExpertFilter);

/// How many writes to what the directory shows have committed (migration 0047): read before
/// a page, the count its answer is kept under ([`super::page_cache`]).
pub async fn writes(ex: Exec<'_>) -> StoreResult<i64> {
    tallies::written(ex, Tally::ExpertWrites).await
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
