//! Password hashing on the blocking pool: bcrypt at cost 12 takes a quarter of a second of CPU
//! and must never run on an HTTP worker.

use anyhow::Context as _;

pub async fn hash(password: String, cost: u32) -> anyhow::Result<String> {
    tokio::task::spawn_blocking(move || bcrypt::hash(password, cost))
        .await
        .context("password hashing task failed")?
        .context("cannot hash password")
}

/// Whether `password` matches `hash`. A malformed hash matches nothing.
pub async fn verify(password: String, hash: String) -> anyhow::Result<bool> {
    tokio::task::spawn_blocking(move || bcrypt::verify(password, &hash).unwrap_or(false))
        .await
        .context("password verification task failed")
}

/// Spends the time of one verification without a user, so a login for an unknown name takes
/// as long as one for a known name with a wrong password.
pub async fn verify_nothing(password: String, cost: u32) {
    let _ = tokio::task::spawn_blocking(move || {
        // A fixed, valid hash of an unguessable value at the configured cost.
        let salt = [7u8; 16];
        let _ = bcrypt::hash_with_salt(password, cost, salt);
    })
    .await;
}
