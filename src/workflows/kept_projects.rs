//! `GET /api/projects/{id}` from the rows each instance keeps (`store::kept_projects`), and
//! the tokens that tell when a kept row may be served.
//!
//! A read takes the project's token and the one of every project from the shared cache, in
//! one round trip, and only then the row: a row kept under the tokens just read was read
//! after them, and every write to it since would have replaced one (below). A token missing
//! (expired, or a cache started empty) is set afresh first, so the next write replaces it.
//!
//! After each commit that wrote project rows (`store::written`), [`ProjectTokens`] forgets
//! them here and sets fresh tokens for them, before the workflow answers: the next request, on
//! any instance, reads the new token and the row again. Tokens are random, never counters, so
//! a cache restarted empty cannot hand out again a token an old row was kept under. When the
//! cache fails, a read goes to the database and keeps nothing, and a write forgets every row
//! kept here; other instances serve theirs for `kept_projects::MAX_AGE` at most.

use std::sync::Arc;
use std::time::Duration;

use crate::integrations::cache::{Cache, CacheError, fresh_token, token_or_fresh};
use crate::state::AppState;
use crate::store::kept_projects::{Kept, KeptProjects, Tokens};
use crate::store::projects::Project;
use crate::store::{AfterCommit, Written};
use crate::workflows::error::FlowResult;
use crate::workflows::projects::{Caller, load_visible, relation_by_row, sees};

/// The shared cache's key of every project's token, and its prefix of one project's.
const EVERY_KEY: &str = "projects:token:every";
const PROJECT_KEY: &str = "projects:token:";

/// How long a token lives unreplaced; a read sets a new one after.
const TOKEN_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// The project `id` if `caller` may see it, as `workflows::projects::load_visible` answers,
/// from the kept row when it is current and tells enough: a caller who stands to a private
/// project only by a formal invitation or an application is read from the database (those
/// are rows of their own tables, not kept).
pub async fn load_visible_kept(state: &AppState, caller: &Caller, id: i64) -> FlowResult<Project> {
    let Some(rows) = &state.kept_projects else {
        return read_visible(state, caller, id).await;
    };
    let now = state.clock.now();
    let tokens = tokens_of(state.cache.as_ref(), id).await;
    if let Some(tokens) = &tokens
        && let Some(kept) = rows.get(&id, tokens)
        && let Some(p) = kept.fresh_at(now)
        && sees(caller, p, &relation_by_row(p, caller))
    {
        return Ok(p.clone());
    }
    let p = read_visible(state, caller, id).await?;
    if let Some(tokens) = tokens {
        let kept = Kept::new(p.clone(), now);
        let bytes = kept.bytes();
        rows.put(id, tokens, kept, bytes);
    }
    Ok(p)
}

async fn read_visible(state: &AppState, caller: &Caller, id: i64) -> FlowResult<Project> {
    let mut conn = state.db.conn().await?;
    Ok(load_visible(conn.exec(), caller, id).await?.0)
}

/// The current tokens of project `id`, or `None` when the cache fails (then nothing is kept).
async fn tokens_of(cache: &dyn Cache, id: i64) -> Option<Tokens> {
    let keys = [EVERY_KEY.to_string(), project_key(id)];
    let read = async {
        let mut found = cache.get_all(&keys).await?.into_iter();
        let every = found.next().flatten();
        let project = found.next().flatten();
        Ok::<_, CacheError>(Tokens {
            every: token_or_fresh(cache, &keys[0], every, TOKEN_TTL).await?,
            project: token_or_fresh(cache, &keys[1], project, TOKEN_TTL).await?,
        })
    };
    match read.await {
        Ok(tokens) => Some(tokens),
        Err(err) => {
            tracing::warn!(error = %err, "project tokens unreadable: reading from the database");
            None
        }
    }
}

fn project_key(id: i64) -> String {
    format!("{PROJECT_KEY}{id}")
}

/// Told by the store after each commit that wrote project rows: forgets them here and
/// replaces their tokens for every instance.
pub struct ProjectTokens {
    pub kept: Arc<KeptProjects>,
    pub cache: Arc<dyn Cache>,
}

#[async_trait::async_trait]
impl AfterCommit for ProjectTokens {
    async fn projects_written(&self, written: &Written) {
        let replaced = match written {
            Written::These(ids) => {
                for id in ids {
                    self.kept.forget(id);
                }
                let mut replaced = Ok(());
                for id in ids {
                    replaced = replaced.and(
                        self.cache
                            .set(&project_key(*id), &fresh_token(), TOKEN_TTL)
                            .await,
                    );
                }
                replaced
            }
            Written::All => {
                self.kept.clear();
                self.cache.set(EVERY_KEY, &fresh_token(), TOKEN_TTL).await
            }
        };
        if let Err(err) = replaced {
            // Rows read here before this commit go; other instances' for MAX_AGE at most.
            self.kept.clear();
            tracing::warn!(error = %err, "project tokens not replaced after a commit");
        }
    }
}
