//! Who may see a project: the one rule, as a Rust predicate and as its SQL form.
//!
//! A project is *listed* (on the public marketplace) when it is curated and in one of the
//! listed states. Administrators see every project; anyone sees a listed one; a user also
//! sees the projects they take part in (owner, assigned expert, target expert, invited,
//! applicant). `workflows::projects` checks one project with [`sees`]; the lists
//! (`store::project_lists`) filter with [`listed_sql`] and [`involving_sql`]. The schema holds
//! the listed rule twice more, where SQL cannot call Rust: migration 0016's partial index
//! `idx_projects_listed_newest` (both engines) and SQLite's search view of 0048; the tests
//! below hold their text to [`listed_sql`], and `tests/api/lists_at_scale.rs` evaluates
//! [`listed_sql`] on every kind of row against [`is_listed`], and [`involving_sql`] on every
//! tie against the project check.

use super::project::{ProjectStatus, ProjectType};

/// The type a listed project has.
pub const LISTED_TYPE: ProjectType = ProjectType::Curated;

/// The states a listed project is in (curated projects open for proposals).
pub const LISTED_STATUSES: [ProjectStatus; 4] = [
    ProjectStatus::PublishedCurated,
    ProjectStatus::Bidding,
    ProjectStatus::Published,
    ProjectStatus::Open,
];

/// Whether a project of `kind` in `status` is on the public marketplace.
pub fn is_listed(kind: ProjectType, status: ProjectStatus) -> bool {
    kind == LISTED_TYPE && LISTED_STATUSES.contains(&status)
}

/// How a user stands to a project.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Relation {
    pub owner: bool,
    pub assigned: bool,
    pub target: bool,
    /// Invited formally or in the legacy `invited_experts` list.
    pub invited: bool,
    pub applicant: bool,
}

impl Relation {
    pub fn takes_part(&self) -> bool {
        self.owner || self.assigned || self.target || self.invited || self.applicant
    }
}

/// Whether a caller (an administrator or not) standing as `rel` to a project that is
/// `listed` or not may see it.
pub fn sees(admin: bool, listed: bool, rel: &Relation) -> bool {
    admin || listed || rel.takes_part()
}

/// [`is_listed`] over a row whose columns are named `{prefix}project_type` and
/// `{prefix}status`, written as the partial index is (so SQLite's planner matches the two):
/// `project_type = 'curated' AND status IN ('published_curated', 'bidding', 'published',
/// 'open')`. A prefix of `+p.` keeps SQLite off the columns' indexes.
pub fn listed_sql(prefix: &str) -> String {
    let states: Vec<String> = LISTED_STATUSES
        .iter()
        .map(|s| format!("'{}'", s.as_str()))
        .collect();
    format!(
        "{prefix}project_type = '{}' AND {prefix}status IN ({})",
        LISTED_TYPE.as_str(),
        states.join(", ")
    )
}

/// [`Relation::takes_part`] as SQL: the ids of the projects user `{u}` (a placeholder) takes
/// part in, each part read from an index (an `OR` of these would make PostgreSQL read every
/// project): owns, is assigned to, is the target of, is invited to (formally or in the legacy
/// list) or applied to.
pub fn involving_sql(u: &str) -> String {
    format!(
        "SELECT id FROM projects WHERE company_id = {u}
            UNION ALL SELECT id FROM projects WHERE expert_id = {u}
            UNION ALL SELECT id FROM projects WHERE target_expert_id = {u}
            UNION ALL SELECT project_id FROM project_invitations WHERE expert_id = {u}
            UNION ALL SELECT project_id FROM applications WHERE expert_id = {u}
            UNION ALL SELECT project_id FROM project_legacy_invitees WHERE expert_id = {u}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whitespace folded, for comparing SQL written over several lines.
    fn folded(text: &str) -> String {
        text.split_whitespace().collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn the_listing_is_the_curated_projects_open_for_proposals() {
        let listed: Vec<_> = [ProjectType::Private, ProjectType::Curated]
            .into_iter()
            .flat_map(|k| ProjectStatus::ALL.into_iter().map(move |s| (k, s)))
            .filter(|&(k, s)| is_listed(k, s))
            .map(|(_, s)| s.as_str())
            .collect();
        assert_eq!(
            listed,
            ["published_curated", "bidding", "published", "open"]
        );
        assert_eq!(
            listed_sql("p."),
            "p.project_type = 'curated' AND p.status IN ('published_curated', 'bidding', 'published', 'open')"
        );
    }

    #[test]
    fn the_partial_index_and_the_search_view_say_what_listed_sql_says() {
        let rule = listed_sql("");
        for migration in [
            include_str!("../../migrations/postgres/0016_lists_at_scale.sql"),
            include_str!("../../migrations/sqlite/0016_lists_at_scale.sql"),
        ] {
            assert!(
                folded(migration).contains(&format!(
                    "idx_projects_listed_newest ON projects (created_at DESC, id DESC) WHERE {rule};"
                )),
                "the partial index is not {rule}"
            );
        }
        let view = folded(include_str!(
            "../../migrations/sqlite/0048_project_search_listed.sql"
        ));
        assert!(
            view.contains(&format!(
                "CASE WHEN {rule} THEN 'true' ELSE 'false' END AS listed"
            )),
            "SQLite's search view does not list by {rule}"
        );
    }

    #[test]
    fn administrators_see_all_anyone_the_listing_users_what_they_take_part_in() {
        let none = Relation::default();
        let ties = [
            Relation {
                owner: true,
                ..none
            },
            Relation {
                assigned: true,
                ..none
            },
            Relation {
                target: true,
                ..none
            },
            Relation {
                invited: true,
                ..none
            },
            Relation {
                applicant: true,
                ..none
            },
        ];
        assert!(sees(true, false, &none));
        assert!(sees(false, true, &none));
        assert!(!sees(false, false, &none));
        for rel in ties {
            assert!(sees(false, false, &rel), "{rel:?}");
        }
    }
}
