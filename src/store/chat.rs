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

/// A message to write: its author, its text (empty beside a file) and its file.
#[derive(Debug, Clone)]
pub struct NewMessage {
    pub sender_id: i64,
    pub content: String,
    pub file: Option<NewFile>,
}

/// A file attached to a message, stored under the uploads directory at `path`.
#[derive(Debug, Clone)]
pub struct NewFile {
    pub path: String,
    pub name: String,
    pub mime: &'static str,
    pub size: i64,
}

/// Writes `messages`, each to its project, in one statement, and answers them as stored, in
/// the order given: their ids increase in that order. The list is padded to a power of two
/// with rows the statement leaves out (no position), so a handful of texts stay prepared
/// whatever the group's size (`super::list_len`).
pub async fn insert_all(
    ex: Exec<'_>,
    messages: &[(i64, &NewMessage)],
    now: DateTime<Utc>,
) -> StoreResult<Vec<Message>> {
    if messages.is_empty() {
        return Ok(Vec::new());
    }
    // Selected from `VALUES` (column1, … on both engines) in the order of their position;
    // the padding rows have none.
    let sql = format!(
        "INSERT INTO chat_messages (project_id, sender_id, content, file_path, file_name,
                                    file_mime, file_size, created_at)
         SELECT v.column2, v.column3, v.column4, v.column5, v.column6, v.column7, v.column8, $1
         FROM (VALUES {}) AS v WHERE v.column1 IS NOT NULL ORDER BY v.column1
         RETURNING id, project_id, sender_id, content, file_path, file_name, file_mime,
                   file_size, edited_at, deleted_at, created_at",
        super::value_rows(2, super::list_len(messages.len()), 8)
    );
    let mut stored = on_exec!(ex, c => {
        // Placeholders only: the values are bound.
        let mut query = sqlx::query_as::<_, Message>(sqlx::AssertSqlSafe(sql.as_str()))
            .bind(now);
        for position in 0..super::list_len(messages.len()) {
            let m = messages.get(position);
            let file = m.and_then(|(_, m)| m.file.as_ref());
            query = query
                .bind(m.map(|_| position as i64))
                .bind(m.map(|(project_id, _)| *project_id))
                .bind(m.map(|(_, m)| m.sender_id))
                .bind(m.map(|(_, m)| m.content.as_str()))
                .bind(file.map(|f| f.path.as_str()))
                .bind(file.map(|f| f.name.as_str()))
                .bind(file.map(|f| f.mime))
                .bind(file.map(|f| f.size));
        }
        query.fetch_all(c).await
    })?;
    // RETURNING's order is the engine's; the ids follow the positions.
    stored.sort_by_key(|m| m.id);
    let in_order = stored.len() == messages.len()
        && stored.iter().zip(messages).all(|(s, (project_id, m))| {
            s.project_id == *project_id
                && s.sender_id == Some(m.sender_id)
                && s.content == m.content
                && s.file_path.as_deref() == m.file.as_ref().map(|f| f.path.as_str())
        });
    if !in_order {
        return Err(sqlx::Error::Protocol(
            "chat messages were not stored in the order given".into(),
        )
        .into());
    }
    Ok(stored)
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
/// given (scrolling back); and how many there are in that range: the room's kept count, or
/// the place in the room of the newest message before `before_id` (migration 0018), never a
/// count of the room.
pub async fn list(
    mut ex: Exec<'_>,
    project_id: i64,
    before_id: Option<i64>,
    limit: i64,
    offset: i64,
) -> StoreResult<(Vec<Message>, i64)> {
    // Two statements, not `($2 IS NULL OR id < $2)`: PostgreSQL's generic plan of that one
    // filters every message of the room after the index instead of starting at `before_id`.
    let items = match before_id {
        None => on_exec!(ex.re(), c => sqlx::query_as::<_, Message>(select_messages!(
            "WHERE project_id = $1 ORDER BY id DESC LIMIT $2 OFFSET $3"
        ))
        .bind(project_id)
        .bind(limit)
        .bind(offset)
        .fetch_all(c)
        .await)?,
        Some(before_id) => on_exec!(ex.re(), c => sqlx::query_as::<_, Message>(select_messages!(
            "WHERE project_id = $1 AND id < $2 ORDER BY id DESC LIMIT $3 OFFSET $4"
        ))
        .bind(project_id)
        .bind(before_id)
        .bind(limit)
        .bind(offset)
        .fetch_all(c)
        .await)?,
    };
    let total: Option<i64> = match before_id {
        None => on_exec!(ex, c => sqlx::query_scalar(
            "SELECT n FROM chat_room_counts WHERE project_id = $1",
        )
        .bind(project_id)
        .fetch_optional(c)
        .await)?,
        Some(before_id) => on_exec!(ex, c => sqlx::query_scalar(
            "SELECT room_seq FROM chat_messages WHERE project_id = $1 AND id < $2
             ORDER BY id DESC LIMIT 1",
        )
        .bind(project_id)
        .bind(before_id)
        .fetch_optional(c)
        .await)?
        .flatten(),
    };
    Ok((items, total.unwrap_or(0)))
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

/// Messages of others, not deleted, after the user's read mark: the room's messages after
/// the mark, less the user's own after it, less the others' deleted after it — each read
/// from the counts and places migrations 0018 and 0021 keep, never by counting the room.
pub async fn unread(ex: Exec<'_>, project_id: i64, user_id: i64) -> StoreResult<i64> {
    Ok(on_exec!(ex, c => sqlx::query_scalar(
        // The mark is a scalar subquery in each condition, so the engine reads it first and
        // seeks to it (joined, PostgreSQL walked the room back from its newest message).
        "SELECT CAST(
             COALESCE((SELECT n FROM chat_room_counts WHERE project_id = $1), 0)
           - COALESCE((SELECT m.room_seq FROM chat_messages m
                        WHERE m.project_id = $1
                          AND m.id <= COALESCE((SELECT last_read_message_id FROM chat_reads
                                                WHERE project_id = $1 AND user_id = $2), 0)
                        ORDER BY m.id DESC LIMIT 1), 0)
           - COALESCE((SELECT n FROM chat_sender_counts WHERE project_id = $1 AND sender_id = $2), 0)
           + COALESCE((SELECT m.sender_seq FROM chat_messages m
                        WHERE m.project_id = $1 AND m.sender_id = $2
                          AND m.id <= COALESCE((SELECT last_read_message_id FROM chat_reads
                                                WHERE project_id = $1 AND user_id = $2), 0)
                        ORDER BY m.id DESC LIMIT 1), 0)
           - (SELECT COUNT(*) FROM chat_messages m
               WHERE m.project_id = $1 AND m.deleted_at IS NOT NULL
                 AND m.id > COALESCE((SELECT last_read_message_id FROM chat_reads
                                      WHERE project_id = $1 AND user_id = $2), 0)
                 AND (m.sender_id IS NULL OR m.sender_id <> $2))
         AS BIGINT)",
    )
    .bind(project_id)
    .bind(user_id)
    .fetch_one(c)
    .await)?)
}
