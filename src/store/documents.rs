//! Documents users upload to their profiles (verification, portfolio).

use chrono::{DateTime, Utc};

use super::{Exec, StoreResult};
use crate::on_exec;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Document {
    pub id: i64,
    pub profile_id: Option<i64>,
    pub user_id: i64,
    pub kind: String,
    pub file_path: String,
    pub file_name: String,
    pub file_mime: String,
    pub file_size: i64,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Clone)]
pub struct NewDocument<'a> {
    pub profile_id: Option<i64>,
    pub user_id: i64,
    pub kind: &'a str,
    pub file_path: &'a str,
    pub file_name: &'a str,
    pub file_mime: &'a str,
    pub file_size: i64,
}

pub async fn insert(ex: Exec<'_>, d: &NewDocument<'_>, now: DateTime<Utc>) -> StoreResult<i64> {
    Ok(on_exec!(ex, c => sqlx::query_scalar(
        "INSERT INTO profile_documents (profile_id, user_id, kind, file_path, file_name,
             file_mime, file_size, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id",
    )
    .bind(d.profile_id)
    .bind(d.user_id)
    .bind(d.kind)
    .bind(d.file_path)
    .bind(d.file_name)
    .bind(d.file_mime)
    .bind(d.file_size)
    .bind(now)
    .fetch_one(c)
    .await)?)
}

pub async fn find(ex: Exec<'_>, id: i64) -> StoreResult<Option<Document>> {
    Ok(on_exec!(ex, c => sqlx::query_as::<_, Document>(
        "SELECT id, profile_id, user_id, kind, file_path, file_name, file_mime, file_size, created_at
         FROM profile_documents WHERE id = $1",
    )
    .bind(id)
    .fetch_optional(c)
    .await)?)
}
