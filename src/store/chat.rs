//! A project's chat: messages (text or a file), tombstones, and each participant's read mark.

use chrono::{DateTime, Utc};

use super::{Exec, StoreResult};
use crate::on_exec;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Message {
    pub id: i64,
    pub project_id: i64,
    pub sender_id: Option<i64>,
    pub content: String,
    /// Under the uploads directory.
    pub file_path: Option<String>,
    pub file_name: Option<String>,
    pub file_mime: Option<String>,
    pub file_size: Option<i64>,
    pub edited_at: Option<DateTime<Utc>>,
    pub deleted_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

macro_rules! select_messages {
    ($($rest:expr),* $(,)?) => {
        concat!(
            "SELECT id, project_id, sender_id, content, file_path, file_name, file_mime, ",
            "file_size, edited_at, deleted_at, created_at FROM chat_messages ",
            $($rest),*
        )
    };
}

/// A file attached to a message.
#[derive(Debug, Clone)]
pub struct Attachment<'a> {
    pub path: &'a str,
    pub name: &'a str,
    pub mime: &'a str,
    pub size: i64,
}

pub async fn insert(
    ex: Exec<'_>,
    project_id: i64,
    sender_id: i64,
    content: &str,
    file: Option<&Attachment<'_>>,
    now: DateTime<Utc>,
) -> StoreResult<i64> {
    Ok(on_exec!(ex, c => sqlx::query_scalar(
        "INSERT INTO chat_messages (project_id, sender_id, content, file_path, file_name,
                                    file_mime, file_size, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id",
    )
    .bind(project_id)
    .bind(sender_id)
    .bind(content)
    .bind(file.map(|f| f.path))
    .bind(file.map(|f| f.name))
    .bind(file.map(|f| f.mime))
    .bind(file.map(|f| f.size))
    .bind(now)
    .fetch_one(c)
    .await)?)
}

/// Message `id` of project `project_id`.
pub async fn find(ex: Exec<'_>, project_id: i64, id: i64) -> StoreResult<Option<Message>> {
    Ok(
        on_exec!(ex, c => sqlx::query_as::<_, Message>(select_messages!(
        "WHERE id = $1 AND project_id = $2"
    ))
    .bind(id)
    .bind(project_id)
    .fetch_optional(c)
    .await)?,
    )
}

/// One page of the project's messages, newest first, only those before `before_id` when
/// given (scrolling back); and how many there are in that range.
pub async fn list(
    mut ex: Exec<'_>,
    project_id: i64,
    before_id: Option<i64>,
    limit: i64,
    offset: i64,
) -> StoreResult<(Vec<Message>, i64)> {
    let items = on_exec!(ex.re(), c => sqlx::query_as::<_, Message>(select_messages!(
        "WHERE project_id = $1 AND ($2 IS NULL OR id < $2) ORDER BY id DESC LIMIT $3 OFFSET $4"
    ))
    .bind(project_id)
    .bind(before_id)
    .bind(limit)
    .bind(offset)
    .fetch_all(c)
    .await)?;
    let total: i64 = on_exec!(ex, c => sqlx::query_scalar(
        "SELECT COUNT(*) FROM chat_messages WHERE project_id = $1 AND ($2 IS NULL OR id < $2)",
    )
    .bind(project_id)
    .bind(before_id)
    .fetch_one(c)
    .await)?;
    Ok((items, total))
}

/// The author's new text; false unless `sender_id` wrote it and it is not deleted.
pub async fn edit(
    ex: Exec<'_>,
    id: i64,
    sender_id: i64,
    content: &str,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let rows = on_exec!(ex, c => sqlx::query(
        "UPDATE chat_messages SET content = $3, edited_at = $4
         WHERE id = $1 AND sender_id = $2 AND deleted_at IS NULL",
    )
    .bind(id)
    .bind(sender_id)
    .bind(content)
    .bind(now)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(rows == 1)
}

/// Leaves a tombstone in the message's place: content and file gone, `deleted_at` set.
/// False when it was already deleted.
pub async fn tombstone(ex: Exec<'_>, id: i64, now: DateTime<Utc>) -> StoreResult<bool> {
    let rows = on_exec!(ex, c => sqlx::query(
        "UPDATE chat_messages SET content = '', file_path = NULL, file_name = NULL,
                file_mime = NULL, file_size = NULL, deleted_at = $2
         WHERE id = $1 AND deleted_at IS NULL",
    )
    .bind(id)
    .bind(now)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(rows == 1)
}

/// The newest message id of the project.
pub async fn latest_id(ex: Exec<'_>, project_id: i64) -> StoreResult<Option<i64>> {
    Ok(on_exec!(ex, c => sqlx::query_scalar(
        "SELECT MAX(id) FROM chat_messages WHERE project_id = $1",
    )
    .bind(project_id)
    .fetch_one(c)
    .await)?)
}

/// Moves the user's read mark forward to `up_to` (never back, also under concurrent marks).
pub async fn mark_read(
    ex: Exec<'_>,
    project_id: i64,
    user_id: i64,
    up_to: i64,
    now: DateTime<Utc>,
) -> StoreResult<()> {
    on_exec!(ex, c => sqlx::query(
        "INSERT INTO chat_reads (project_id, user_id, last_read_message_id, updated_at)
         VALUES ($1, $2, $3, $4)
         ON CONFLICT (project_id, user_id) DO UPDATE
             SET last_read_message_id = excluded.last_read_message_id, updated_at = excluded.updated_at
             WHERE chat_reads.last_read_message_id IS NULL
                OR chat_reads.last_read_message_id < excluded.last_read_message_id",
    )
    .bind(project_id)
    .bind(user_id)
    .bind(up_to)
    .bind(now)
    .execute(c)
    .await
    .map(drop))?;
    Ok(())
}

/// Messages of others, not deleted, after the user's read mark.
pub async fn unread(ex: Exec<'_>, project_id: i64, user_id: i64) -> StoreResult<i64> {
    Ok(on_exec!(ex, c => sqlx::query_scalar(
        "SELECT COUNT(*) FROM chat_messages m
         WHERE m.project_id = $1 AND m.deleted_at IS NULL
           AND (m.sender_id IS NULL OR m.sender_id <> $2)
           AND m.id > COALESCE((SELECT r.last_read_message_id FROM chat_reads r
                                WHERE r.project_id = $1 AND r.user_id = $2), 0)",
    )
    .bind(project_id)
    .bind(user_id)
    .fetch_one(c)
    .await)?)
}
