//! Idempotency keys and their kept answers (`domain::idempotency`, migration 0014), and the
//! claim of the request that holds one.
//!
//! A request holding a key runs with its [`Claim`] in a task-local; every transaction it
//! begins (`Db::begin`, here or in a project's or payment's actor, which carry the claim)
//! first marks the key `work_committed` under the claim's owner. The mark commits with the
//! work or not at all; and a run whose key was taken over finds no row of its own and stops
//! before doing anything.

use chrono::{DateTime, Utc};

use super::{Db, Exec, StoreError, StoreResult};
use crate::on_exec;

/// The key held by the running request: its row and the run's own name.
#[derive(Debug, Clone)]
pub struct Claim {
    pub id: i64,
    pub owner: String,
}

tokio::task_local! {
    static CLAIM: Option<Claim>;
}

/// The claim of the request running on this task, if it holds a key.
pub fn current() -> Option<Claim> {
    CLAIM.try_with(Clone::clone).ok().flatten()
}

/// Runs `work` holding `claim`: how a request runs under its key, and how a job given to an
/// actor keeps its caller's key on the actor's task.
pub fn carry<F: Future>(claim: Option<Claim>, work: F) -> impl Future<Output = F::Output> {
    CLAIM.scope(claim, work)
}

/// Marks the claim's key as having committed work, in the transaction of `ex`: refused with
/// [`StoreError::KeyTakenOver`] when the key is no longer this run's.
pub async fn mark_work(ex: Exec<'_>, claim: &Claim) -> StoreResult<()> {
    let marked = on_exec!(ex, c => sqlx::query(
        "UPDATE idempotency_keys SET work_committed = TRUE WHERE id = $1 AND owner = $2",
    )
    .bind(claim.id)
    .bind(&claim.owner)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    if marked == 0 {
        return Err(StoreError::KeyTakenOver);
    }
    Ok(())
}

/// A key as a new request asks for it.
pub struct NewKey<'a> {
    pub user_id: i64,
    pub key: &'a str,
    pub fingerprint: &'a str,
    pub owner: &'a str,
    pub now: DateTime<Utc>,
    pub locked_until: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

/// A key some request holds or held.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct KeptKey {
    pub id: i64,
    pub fingerprint: String,
    pub owner: String,
    pub locked_until: DateTime<Utc>,
    pub work_committed: bool,
    pub status: Option<i32>,
    pub content_type: Option<String>,
    pub location: Option<String>,
    pub body: Option<Vec<u8>>,
}

pub enum Claimed {
    /// The key was free: the request holds it now.
    Fresh(Claim),
    /// Another request has it.
    Found(KeptKey),
}

/// Takes `new.key` for its user, or finds who has it. An expired key is as good as absent.
pub async fn claim(db: &Db, new: &NewKey<'_>) -> StoreResult<Claimed> {
    let mut conn = db.conn().await?;
    on_exec!(conn.exec(), c => sqlx::query(
        "DELETE FROM idempotency_keys
         WHERE user_id = $1 AND idempotency_key = $2 AND expires_at <= $3",
    )
    .bind(new.user_id)
    .bind(new.key)
    .bind(new.now)
    .execute(c)
    .await
    .map(|_| ()))?;
    // Twice at most: a key found on the first try may expire and be swept before it is read.
    for _ in 0..2 {
        let inserted: Option<i64> = on_exec!(conn.exec(), c => sqlx::query_scalar(
            "INSERT INTO idempotency_keys
                 (user_id, idempotency_key, fingerprint, owner, locked_until, created_at, expires_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (user_id, idempotency_key) DO NOTHING
             RETURNING id",
        )
        .bind(new.user_id)
        .bind(new.key)
        .bind(new.fingerprint)
        .bind(new.owner)
        .bind(new.locked_until)
        .bind(new.now)
        .bind(new.expires_at)
        .fetch_optional(c)
        .await)?;
        if let Some(id) = inserted {
            return Ok(Claimed::Fresh(Claim {
                id,
                owner: new.owner.to_owned(),
            }));
        }
        let found: Option<KeptKey> = on_exec!(conn.exec(), c => sqlx::query_as(
            "SELECT id, fingerprint, owner, locked_until, work_committed, status, content_type,
                    location, body
             FROM idempotency_keys WHERE user_id = $1 AND idempotency_key = $2",
        )
        .bind(new.user_id)
        .bind(new.key)
        .fetch_optional(c)
        .await)?;
        if let Some(found) = found {
            return Ok(Claimed::Found(found));
        }
    }
    Err(StoreError::KeyTakenOver)
}

/// Takes over the key of a run that stopped having committed nothing; false when that run
/// committed, answered or renewed in the meantime (or another retry was first).
pub async fn take_over(
    db: &Db,
    found: &KeptKey,
    owner: &str,
    now: DateTime<Utc>,
    locked_until: DateTime<Utc>,
) -> StoreResult<Option<Claim>> {
    let mut conn = db.conn().await?;
    let moved = on_exec!(conn.exec(), c => sqlx::query(
        "UPDATE idempotency_keys SET owner = $1, locked_until = $2
         WHERE id = $3 AND owner = $4 AND status IS NULL AND NOT work_committed
           AND locked_until <= $5",
    )
    .bind(owner)
    .bind(locked_until)
    .bind(found.id)
    .bind(&found.owner)
    .bind(now)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok((moved == 1).then(|| Claim {
        id: found.id,
        owner: owner.to_owned(),
    }))
}

/// The answer a run keeps for the repeats of its key.
pub struct Answer<'a> {
    pub status: u16,
    pub content_type: Option<&'a str>,
    pub location: Option<&'a str>,
    pub body: &'a [u8],
}

/// Keeps the claim's answer; false when the key is no longer this run's.
pub async fn keep_answer(db: &Db, claim: &Claim, answer: &Answer<'_>) -> StoreResult<bool> {
    let mut conn = db.conn().await?;
    let kept = on_exec!(conn.exec(), c => sqlx::query(
        "UPDATE idempotency_keys SET status = $1, content_type = $2, location = $3, body = $4
         WHERE id = $5 AND owner = $6",
    )
    .bind(i32::from(answer.status))
    .bind(answer.content_type)
    .bind(answer.location)
    .bind(answer.body)
    .bind(claim.id)
    .bind(&claim.owner)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(kept == 1)
}

/// Lets go of a key whose run ends with no answer to keep (a refusal before its route ran, or
/// a server failure): a retry runs afresh, as the workflows are written to be retried after
/// their own failures.
pub async fn release(db: &Db, claim: &Claim) -> StoreResult<()> {
    let mut conn = db.conn().await?;
    on_exec!(conn.exec(), c => sqlx::query(
        "DELETE FROM idempotency_keys WHERE id = $1 AND owner = $2",
    )
    .bind(claim.id)
    .bind(&claim.owner)
    .execute(c)
    .await
    .map(|_| ()))?;
    Ok(())
}

/// Deletes up to `limit` keys expired by `now`; how many.
pub async fn sweep(db: &Db, now: DateTime<Utc>, limit: i64) -> StoreResult<u64> {
    let mut conn = db.conn().await?;
    let swept = on_exec!(conn.exec(), c => sqlx::query(
        "DELETE FROM idempotency_keys WHERE id IN (
             SELECT id FROM idempotency_keys WHERE expires_at <= $1 ORDER BY expires_at LIMIT $2)",
    )
    .bind(now)
    .bind(limit)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(swept)
}
