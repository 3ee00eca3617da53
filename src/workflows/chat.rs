//! A project's chat: its company, its selected expert and administrators (as mediators) read
//! and write; to anyone else the chat does not exist (404). Each new message, edit and
//! deletion is recorded as an event, for the live rooms and the e-mail digest to follow.

use serde_json::json;

use crate::domain::token::random_token;
use crate::domain::upload::{DocumentType, clean_file_name};
use crate::state::AppState;
use crate::store::chat::{self, Attachment, Message};
use crate::store::events::{self, NewEvent};
use crate::store::{Exec, Tx, projects};
use crate::workflows::error::{FlowError, FlowResult};
use crate::workflows::projects::Caller;

/// Longest message, in characters.
pub const MAX_CONTENT_CHARS: usize = 5000;

fn not_found() -> FlowError {
    FlowError::not_found("Chat not found")
}

/// Refuses anyone who is not the project's company, its selected expert or an administrator.
pub async fn require_participant(ex: Exec<'_>, caller: &Caller, project_id: i64) -> FlowResult<()> {
    let p = projects::find(ex, project_id)
        .await?
        .ok_or_else(not_found)?;
    let party = p.company_id == Some(caller.id) || p.expert_id == Some(caller.id);
    if party || caller.admin {
        Ok(())
    } else {
        Err(not_found())
    }
}

fn check_content(content: &str) -> FlowResult<String> {
    let n = content.trim().chars().count();
    if n == 0 || content.chars().count() > MAX_CONTENT_CHARS {
        return Err(FlowError::invalid(
            "content",
            "must be 1 to 5000 characters",
        ));
    }
    Ok(content.to_owned())
}

async fn record(
    tx: &mut Tx,
    kind: &str,
    m: &Message,
    now: chrono::DateTime<chrono::Utc>,
) -> FlowResult<()> {
    events::record(
        tx.exec(),
        NewEvent {
            kind,
            aggregate: "project",
            aggregate_id: Some(m.project_id),
            payload: json!({"project_id": m.project_id, "message_id": m.id, "sender_id": m.sender_id}),
        },
        now,
    )
    .await?;
    Ok(())
}

async fn insert(
    state: &AppState,
    caller: &Caller,
    project_id: i64,
    content: &str,
    file: Option<&Attachment<'_>>,
) -> FlowResult<Message> {
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    require_participant(tx.exec(), caller, project_id).await?;
    let id = chat::insert(tx.exec(), project_id, caller.id, content, file, now).await?;
    let message = chat::find(tx.exec(), project_id, id)
        .await?
        .ok_or_else(not_found)?;
    record(&mut tx, "chat.message_created", &message, now).await?;
    tx.commit().await?;
    state.outbox.wake();
    Ok(message)
}

pub async fn post(
    state: &AppState,
    caller: &Caller,
    project_id: i64,
    content: &str,
) -> FlowResult<Message> {
    let content = check_content(content)?;
    insert(state, caller, project_id, &content, None).await
}

/// Stores the file under `UPLOADS_DIR/chat/{project_id}/` with a name of ours, then the
/// message; a file whose message could not be written is removed again.
pub async fn post_file(
    state: &AppState,
    caller: &Caller,
    project_id: i64,
    doc_type: DocumentType,
    client_name: Option<&str>,
    bytes: &[u8],
) -> FlowResult<Message> {
    {
        let mut conn = state.db.conn().await?;
        require_participant(conn.exec(), caller, project_id).await?;
    }
    let relative = format!(
        "chat/{project_id}/{}.{}",
        random_token(16),
        doc_type.extension()
    );
    let path = state.settings.uploads_dir.join(&relative);
    if let Some(dir) = path.parent() {
        tokio::fs::create_dir_all(dir)
            .await
            .map_err(anyhow::Error::from)?;
    }
    tokio::fs::write(&path, bytes)
        .await
        .map_err(anyhow::Error::from)?;
    let name = clean_file_name(client_name);
    let attachment = Attachment {
        path: &relative,
        name: &name,
        mime: doc_type.mime(),
        size: bytes.len() as i64,
    };
    let stored = insert(state, caller, project_id, "", Some(&attachment)).await;
    if stored.is_err() {
        let _ = tokio::fs::remove_file(&path).await;
    }
    stored
}

pub async fn get(
    state: &AppState,
    caller: &Caller,
    project_id: i64,
    id: i64,
) -> FlowResult<Message> {
    let mut conn = state.db.conn().await?;
    require_participant(conn.exec(), caller, project_id).await?;
    chat::find(conn.exec(), project_id, id)
        .await?
        .ok_or_else(|| FlowError::not_found("Message not found"))
}

/// The author changes the text of their message (not once it is deleted).
pub async fn edit(
    state: &AppState,
    caller: &Caller,
    project_id: i64,
    id: i64,
    content: &str,
) -> FlowResult<Message> {
    let content = check_content(content)?;
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    require_participant(tx.exec(), caller, project_id).await?;
    let m = chat::find(tx.exec(), project_id, id)
        .await?
        .ok_or_else(|| FlowError::not_found("Message not found"))?;
    if m.sender_id != Some(caller.id) {
        return Err(FlowError::forbidden_code(
            "NOT_THE_AUTHOR",
            "Only the author edits a message",
        ));
    }
    if !chat::edit(tx.exec(), id, caller.id, &content, now).await? {
        return Err(FlowError::conflict(
            "MESSAGE_DELETED",
            "A deleted message cannot be edited",
        ));
    }
    let m = chat::find(tx.exec(), project_id, id)
        .await?
        .ok_or_else(not_found)?;
    record(&mut tx, "chat.message_updated", &m, now).await?;
    tx.commit().await?;
    state.outbox.wake();
    Ok(m)
}

/// The author, or an administrator, deletes a message: a tombstone keeps its place and its
/// file is removed from disk.
pub async fn delete(
    state: &AppState,
    caller: &Caller,
    project_id: i64,
    id: i64,
) -> FlowResult<Message> {
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    require_participant(tx.exec(), caller, project_id).await?;
    let m = chat::find(tx.exec(), project_id, id)
        .await?
        .ok_or_else(|| FlowError::not_found("Message not found"))?;
    if m.sender_id != Some(caller.id) && !caller.admin {
        return Err(FlowError::forbidden_code(
            "NOT_THE_AUTHOR",
            "Only the author or an administrator deletes a message",
        ));
    }
    if !chat::tombstone(tx.exec(), id, now).await? {
        return Err(FlowError::conflict(
            "MESSAGE_DELETED",
            "The message is already deleted",
        ));
    }
    let gone = chat::find(tx.exec(), project_id, id)
        .await?
        .ok_or_else(not_found)?;
    record(&mut tx, "chat.message_deleted", &gone, now).await?;
    tx.commit().await?;
    state.outbox.wake();
    if let Some(file) = &m.file_path {
        let _ = tokio::fs::remove_file(state.settings.uploads_dir.join(file)).await;
    }
    Ok(gone)
}

/// Marks the chat read up to `up_to` (by default its newest message); the unread count after.
pub async fn mark_read(
    state: &AppState,
    caller: &Caller,
    project_id: i64,
    up_to: Option<i64>,
) -> FlowResult<i64> {
    let mut conn = state.db.conn().await?;
    require_participant(conn.exec(), caller, project_id).await?;
    let up_to = match up_to {
        Some(id) => Some(
            chat::find(conn.exec(), project_id, id)
                .await?
                .ok_or_else(|| {
                    FlowError::invalid("up_to_message_id", "is not a message of this chat")
                })?
                .id,
        ),
        None => chat::latest_id(conn.exec(), project_id).await?,
    };
    if let Some(up_to) = up_to {
        chat::mark_read(conn.exec(), project_id, caller.id, up_to, state.clock.now()).await?;
    }
    Ok(chat::unread(conn.exec(), project_id, caller.id).await?)
}
