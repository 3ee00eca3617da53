//! Project rows kept in memory for `GET /api/projects/{id}`, the most read answer of all
//! (issue #32), so that reading one is no round trip to the database.
//!
//! A row is kept under [`Tokens`] read from the shared cache before the row was read: the
//! project's own and the one of every project. `workflows::kept_projects` replaces the
//! project's token after every commit that wrote its row, before that request answers (the
//! note of `store::written`), on the cache every instance reads; a kept row is served only
//! under the very tokens it was kept under, so never after the answer of a write that
//! changed it. It is served for [`MAX_AGE`] at most: the bound on what a token cannot tell, a
//! write from outside the service (psql) or one whose token the cache did not take.

use std::cmp::Ordering;
use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};

use super::page_cache::PageCache;
use super::projects::Project;

/// The rows kept, by project id.
pub type KeptProjects = PageCache<i64, Kept, Tokens>;

/// Rows kept at most per instance (32 MiB at most in all, `store::page_cache`): many more
/// than the public list's pages, since each project is an answer of its own.
pub const MAX_ROWS: usize = 16_384;

/// The longest a kept row is served.
pub const MAX_AGE: TimeDelta = TimeDelta::seconds(5);

/// A row as read, and when (the service's clock).
#[derive(Debug, Clone)]
pub struct Kept {
    pub project: Arc<Project>,
    pub read_at: DateTime<Utc>,
}

impl Kept {
    pub fn new(project: Project, read_at: DateTime<Utc>) -> Self {
        Kept {
            project: Arc::new(project),
            read_at,
        }
    }

    /// The row, if read no longer than [`MAX_AGE`] before `now`.
    pub fn fresh_at(&self, now: DateTime<Utc>) -> Option<&Project> {
        (now - self.read_at < MAX_AGE).then_some(&*self.project)
    }

    /// About what the row holds in memory.
    pub fn bytes(&self) -> usize {
        let p = &self.project;
        std::mem::size_of::<Project>()
            + p.title.len()
            + p.description.len()
            + p.admin_notes.len()
            + p.validation_notes.as_ref().map_or(0, String::len)
            + p.skills_required
                .0
                .iter()
                .map(|s| s.len() + 24)
                .sum::<usize>()
            + p.invited_experts.0.len() * 8
    }
}

/// The tokens a row was kept under: random values, replaced by writes, equal or not and
/// never older or newer (so the last row kept stays, `store::page_cache`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tokens {
    /// Replaced when every project counts as written (`store::Written::All`).
    pub every: String,
    pub project: String,
}

impl PartialOrd for Tokens {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        (self == other).then_some(Ordering::Equal)
    }
}
