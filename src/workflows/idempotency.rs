//! Idempotency keys (`domain::idempotency`): a request carrying one takes it before its route
//! runs, and settles it after: its answer kept, or the key let go. The keys live in the
//! database, so they hold across restarts and instances; expired ones are swept by a job.
//!
//! Crash safety: while a request holds its key, each transaction it begins marks the key in
//! that same transaction (`store::idempotency`, `Db::begin`; a project's or payment's actor
//! carries the caller's key). A run that crashed having committed nothing is taken over by
//! the next retry; one that committed and then crashed before keeping its answer is never run
//! again (`IDEMPOTENCY_KEY_INTERRUPTED`). A run that answers a server failure lets its key go,
//! so the retry runs again: the workflows are written to be retried after their own failures
//! (each resumes from what it recorded). Work outside the database is covered by its own keys: calls
//! to the processor carry idempotency keys made of our ids, so a run taken over gets the same
//! processor objects back; a lone statement outside a transaction only sets values (a profile's
//! fields, read marks), which a second run sets again to the same.

use crate::domain::idempotency::{self as rules, Found, Repeat};
use crate::state::AppState;
use crate::store::idempotency::{self as keys, Answer, Claim, Claimed, KeptKey, NewKey};
use crate::workflows::error::FlowResult;

/// The sweeping job's name, in `/metrics`.
pub const SWEEP_JOB: &str = "idempotency_sweep";

/// How a request with a key goes on.
pub enum Start {
    /// It runs, holding the key.
    Run(Claim),
    /// It gets the first run's answer.
    Replay(KeptKey),
    /// It is refused.
    Refuse(Repeat),
}

/// Takes `key` of `user_id` for a request of `fingerprint`, or says why not.
pub async fn start(
    state: &AppState,
    user_id: i64,
    key: &str,
    fingerprint: &str,
) -> FlowResult<Start> {
    let now = state.clock.now();
    let owner = crate::domain::token::random_token(16);
    let new = NewKey {
        user_id,
        key,
        fingerprint,
        owner: &owner,
        now,
        locked_until: now + rules::LEASE,
        expires_at: now + state.settings.idempotency_key_ttl,
    };
    let found = match keys::claim(&state.db, &new).await? {
        Claimed::Fresh(claim) => return Ok(Start::Run(claim)),
        Claimed::Found(found) => found,
    };
    let repeat = rules::on_repeat(Found {
        same_request: found.fingerprint == fingerprint,
        answered: found.status.is_some(),
        committed: found.work_committed,
        lease_over: found.locked_until <= now,
    });
    Ok(match repeat {
        Repeat::Replay => Start::Replay(found),
        Repeat::TakeOver => {
            match keys::take_over(&state.db, &found, &owner, now, new.locked_until).await? {
                Some(claim) => Start::Run(claim),
                // Another retry took it first, or the first run came back.
                None => Start::Refuse(Repeat::InUse),
            }
        }
        refused => Start::Refuse(refused),
    })
}

/// Settles the key a request held: its answer kept for the repeats when there is one to keep,
/// else the key let go. A failure here is logged, never the request's: the key then waits
/// out its lease, and a retry is told what it finds.
pub async fn finish(state: &AppState, claim: &Claim, answer: Option<Answer<'_>>) {
    let letting_go = answer.is_none();
    let settled = match answer {
        Some(answer) => keys::keep_answer(&state.db, claim, &answer)
            .await
            .map(|_| ()),
        None => keys::release(&state.db, claim).await,
    };
    if let Err(error) = settled {
        tracing::warn!(%error, key_id = claim.id, "could not settle an idempotency key");
        // The database went away under the run (a failover): the client was told 503 with
        // `Retry-After`, and its retry would be refused `IDEMPOTENCY_KEY_IN_USE` for the rest
        // of the lease. So the key is let go as soon as the database answers again.
        if letting_go && error.is_unavailable() {
            tokio::spawn(release_when_back(state.clone(), claim.clone()));
        }
    }
}

/// How long [`release_when_back`] keeps trying: past the lease, a retry takes the key over
/// anyway (and the release, made for the run's own name, then deletes nothing).
const RELEASE_RETRIES: [std::time::Duration; 7] = {
    use std::time::Duration;
    [
        Duration::from_millis(250),
        Duration::from_millis(500),
        Duration::from_secs(1),
        Duration::from_secs(2),
        Duration::from_secs(4),
        Duration::from_secs(8),
        Duration::from_secs(16),
    ]
};

/// Lets `claim`'s key go once the database's probe finds it back, trying again a few times.
async fn release_when_back(state: AppState, claim: Claim) {
    for pause in RELEASE_RETRIES {
        let _ = tokio::time::timeout(pause, state.db.availability().back()).await;
        match keys::release(&state.db, &claim).await {
            Ok(()) => {
                tracing::info!(
                    key_id = claim.id,
                    "idempotency key let go after the database came back"
                );
                return;
            }
            Err(_) => tokio::time::sleep(pause).await,
        }
    }
}

/// Deletes the keys past their time; how many.
pub async fn sweep_expired(state: &AppState) -> FlowResult<u64> {
    let now = state.clock.now();
    super::retention::in_batches(|limit| keys::sweep(&state.db, now, limit)).await
}
