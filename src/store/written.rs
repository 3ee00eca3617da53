//! Which projects a transaction wrote, told after its commit to whoever keeps copies of
//! project rows (issue #32: `workflows::kept_projects`).
//!
//! The database notes each project row updated or deleted (triggers of migration 0050: a
//! setting local to the transaction on PostgreSQL, read in the commit's own round trip by
//! `store::pg_tx`; a table only the one writer sees on SQLite).
//! [`Tx::commit`](super::Tx::commit) takes the note just before committing and,
//! once committed, hands it to the [`AfterCommit`] the service installed, before the
//! workflow answers: so the next request, on any instance, finds every copy it may be
//! served already replaced. Inserts are not noted: nobody keeps a row not yet read.

use std::sync::{Arc, OnceLock};

use super::StoreResult;

/// Projects named one by one at most; a transaction writing more tells [`Written::All`].
pub const MAX_NAMED: usize = 100;

/// The projects a committed transaction wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Written {
    These(Vec<i64>),
    /// Too many to name, or rows changed without their triggers (the end-to-end reset).
    All,
}

impl Written {
    /// The PostgreSQL note: `,12,57,`, `*` for every project, empty or absent for none.
    pub(super) fn parse(note: Option<&str>) -> Option<Self> {
        let note = note.unwrap_or_default();
        if note == "*" {
            return Some(Written::All);
        }
        let ids: Vec<i64> = note.split(',').filter_map(|id| id.parse().ok()).collect();
        Self::named(ids)
    }

    fn named(mut ids: Vec<i64>) -> Option<Self> {
        ids.sort_unstable();
        ids.dedup();
        match ids.len() {
            0 => None,
            n if n > MAX_NAMED => Some(Written::All),
            _ => Some(Written::These(ids)),
        }
    }
}

/// Told, after each commit that wrote projects, which ones.
#[async_trait::async_trait]
pub trait AfterCommit: Send + Sync + 'static {
    async fn projects_written(&self, written: &Written);
}

/// The [`AfterCommit`] of a pool, installed once when the service starts; shared by every
/// clone of the pool's [`Db`](super::Db). A pool without one (a tool, a bench) tells nobody.
#[derive(Clone, Default)]
pub struct CommitWatch(Arc<OnceLock<Arc<dyn AfterCommit>>>);

impl std::fmt::Debug for CommitWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("CommitWatch")
            .field(&self.0.get().is_some())
            .finish()
    }
}

impl CommitWatch {
    /// Installs `watcher`; false when one already was (it stays).
    pub fn install(&self, watcher: Arc<dyn AfterCommit>) -> bool {
        self.0.set(watcher).is_ok()
    }

    /// Whether a watcher is installed: without one, a commit takes no note.
    pub(super) fn installed(&self) -> bool {
        self.0.get().is_some()
    }

    pub(super) async fn tell(&self, written: Option<Written>) {
        if let (Some(watcher), Some(written)) = (self.0.get(), written) {
            watcher.projects_written(&written).await;
        }
    }
}

/// Takes SQLite's note of written projects, just before the commit: the rows of its table,
/// which only the one writer sees.
pub(super) async fn take_sqlite_note(
    conn: &mut sqlx::SqliteConnection,
) -> StoreResult<Option<Written>> {
    let ids: Vec<i64> = sqlx::query_scalar("DELETE FROM written_projects RETURNING project_id")
        .fetch_all(conn)
        .await?;
    Ok(Written::named(ids))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_names_its_projects_once_or_all_of_them() {
        assert_eq!(Written::parse(None), None);
        assert_eq!(Written::parse(Some("")), None);
        assert_eq!(
            Written::parse(Some(",12,7,12,")),
            Some(Written::These(vec![7, 12]))
        );
        assert_eq!(Written::parse(Some("*")), Some(Written::All));
        let many = (1..=MAX_NAMED as i64 + 1)
            .map(|id| id.to_string())
            .collect::<Vec<_>>()
            .join(",");
        assert_eq!(Written::parse(Some(&many)), Some(Written::All));
    }
}
