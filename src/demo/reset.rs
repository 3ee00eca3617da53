//! The end-to-end reset (`POST /api/v1/testing/reset-e2e`, development only): every table
//! emptied, the uploads and this instance's cache keys removed, then the demo accounts and,
//! with the processor sandbox, the demo story loaded.

use serde::Serialize;

use crate::demo::seed::{self, DEMO_PASSWORD, DEMO_USERS};
use crate::demo::story::{self, Story};
use crate::state::AppState;
use crate::store::reset;
use crate::workflows::error::FlowResult;

/// A demo account the reset leaves ready to log in.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DemoAccount {
    pub username: &'static str,
    pub email: &'static str,
    pub roles: Vec<&'static str>,
    pub password: &'static str,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ResetReport {
    pub tables_emptied: usize,
    pub cache_keys_removed: u64,
    pub accounts: Vec<DemoAccount>,
    /// The projects of the demo story, one per state (none without the processor sandbox).
    pub story: Story,
}

pub async fn reset_e2e(state: &AppState) -> FlowResult<ResetReport> {
    let tables_emptied = empty_database(state).await?;
    empty_dir(&state.settings.uploads_dir).await?;
    // The cache is already under this instance's `CACHE_PREFIX`: "" is everything of ours.
    let cache_keys_removed = state
        .cache
        .delete_prefix("")
        .await
        .map_err(anyhow::Error::from)?;
    seed::seed_demo(&state.db, &state.clock, state.settings.bcrypt_cost).await?;
    let story = if state.processor.sandbox.is_some() {
        story::load(state).await?
    } else {
        Story::default()
    };
    tracing::warn!(
        tables_emptied,
        "end-to-end reset: database emptied and demo data loaded"
    );
    Ok(ResetReport {
        tables_emptied,
        cache_keys_removed,
        accounts: DEMO_USERS
            .iter()
            .map(|(username, email, roles)| DemoAccount {
                username,
                email,
                roles: roles.iter().map(|r| r.as_str()).collect(),
                password: DEMO_PASSWORD,
            })
            .collect(),
        story,
    })
}

/// Empties the database, again when PostgreSQL chose the reset's truncation to break a
/// deadlock (it locks every table in turn while the instance's background jobs lock rows of
/// several): the truncation rolled back whole, so trying again is safe.
async fn empty_database(state: &AppState) -> FlowResult<usize> {
    let mut attempt = 1;
    loop {
        match reset::empty_all(&state.db).await {
            Err(e) if e.is_retryable() && attempt < 5 => {
                tracing::warn!(error = %e, attempt, "end-to-end reset: emptying again");
                attempt += 1;
                tokio::time::sleep(std::time::Duration::from_millis(50 * attempt)).await;
            }
            done => return Ok(done?),
        }
    }
}

/// Removes what `dir` holds, keeping the directory.
async fn empty_dir(dir: &std::path::Path) -> anyhow::Result<()> {
    let mut entries = match tokio::fs::read_dir(dir).await {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    while let Some(entry) = entries.next_entry().await? {
        let path = entry.path();
        if entry.file_type().await?.is_dir() {
            tokio::fs::remove_dir_all(&path).await?;
        } else {
            tokio::fs::remove_file(&path).await?;
        }
    }
    Ok(())
}
