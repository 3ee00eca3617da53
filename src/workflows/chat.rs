//! A project's chat: its company, its selected expert and administrators (as mediators) read
//! and write; to anyone else the chat does not exist (404). Each new message, edit and
//! deletion is recorded as an event.
//!
//! Every change of a room (post, edit, deletion, read mark) runs in that room's actor
//! (`state.chat_rooms`, one per project, started on first use, stopped when idle, restarted
//! after a panic): stored, committed, then fanned out, so each room's frames go out in the
//! order of the store. A new message also e-mails the participants not connected to the room
//! (`chat_digest`).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;

use std::future::Future;

use crate::domain::text::ChatText;
use crate::domain::token::random_token;
use crate::domain::upload::{DocumentType, display_name};
use crate::integrations::realtime::chat_room;
use crate::state::AppState;
use crate::store::chat::{self, Attachment, Message};
use crate::store::events::{self, NewEvent};
use crate::store::projects::Project;
use crate::store::{Exec, Tx, projects};
use crate::workflows::error::{FlowError, FlowResult};
use crate::workflows::projects::Caller;

/// A message as every participant sees it (DESIGN §10).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct MessageView {
    pub id: i64,
    pub project_id: i64,
    pub sender_id: Option<i64>,
    /// Empty once deleted (the tombstone keeps its place).
    pub content: String,
    pub file_name: Option<String>,
    pub file_type: Option<String>,
    pub file_size: Option<i64>,
    /// Where participants download the file.
    pub file_url: Option<String>,
    pub edited_at: Option<DateTime<Utc>>,
    pub deleted_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

impl From<Message> for MessageView {
    fn from(m: Message) -> Self {
        Self {
            file_url: m
                .file_path
                .as_ref()
                .map(|_| format!("/api/chat/{}/files/{}", m.project_id, m.id)),
            id: m.id,
            project_id: m.project_id,
            sender_id: m.sender_id,
            content: m.content,
            file_name: m.file_name,
            file_type: m.file_mime,
            file_size: m.file_size,
            edited_at: m.edited_at,
            deleted_at: m.deleted_at,
            created_at: m.created_at,
        }
    }
}

/// The metrics kind of the room actors (`/metrics`, `GET /api/admin/actors`).
pub const ROOM_ACTORS: &str = "chat_room";

/// Runs `job` inside the room actor of `project_id` and answers its result. The job keeps the
/// actor busy until it has committed and published, so the next change of the room waits.
pub async fn in_room<T, Fut>(
    state: &AppState,
    project_id: i64,
    job: impl FnOnce(AppState) -> Fut + Send + 'static,
) -> FlowResult<T>
where
    Fut: Future<Output = FlowResult<T>> + 'static,
    T: Send + 'static,
{
    let st = state.clone();
    state.chat_rooms.call(project_id, move || job(st)).await?
}

fn not_found() -> FlowError {
    FlowError::not_found("Chat not found")
}

/// Refuses anyone who is not the project's company, its selected expert or an administrator.
pub async fn require_participant(ex: Exec<'_>, caller: &Caller, project_id: i64) -> FlowResult<()> {
    participant_project(ex, caller, project_id)
        .await
        .map(|_| ())
}

/// The project, when `caller` may take part in its chat.
async fn participant_project(
    ex: Exec<'_>,
    caller: &Caller,
    project_id: i64,
) -> FlowResult<Project> {
    let p = projects::find(ex, project_id)
        .await?
        .ok_or_else(not_found)?;
    let party = p.company_id == Some(caller.id) || p.expert_id == Some(caller.id);
    if party || caller.admin {
        Ok(p)
    } else {
        Err(not_found())
    }
}

/// Records the change as an event; `emails` are the e-mails it causes (sent by the outbox
/// after commit).
async fn record(
    tx: &mut Tx,
    kind: &str,
    m: &Message,
    now: chrono::DateTime<chrono::Utc>,
    emails: Vec<serde_json::Value>,
) -> FlowResult<()> {
    let mut payload =
        json!({"project_id": m.project_id, "message_id": m.id, "sender_id": m.sender_id});
    if !emails.is_empty() {
        payload[crate::workflows::emails::EMAIL_KEY] = serde_json::Value::Array(emails);
    }
    events::record(
        tx.exec(),
        NewEvent {
            kind,
            aggregate: "project",
            aggregate_id: Some(m.project_id),
            payload,
        },
        now,
    )
    .await?;
    Ok(())
}

/// Sends a frame to the project's room (every instance); a lost frame is found by the
/// client's next read over REST, so it never fails the change itself.
async fn push(state: &AppState, project_id: i64, kind: &str, data: serde_json::Value) {
    let frame = json!({"type": kind, "data": data}).to_string();
    if let Err(e) = state.realtime.publish(&chat_room(project_id), &frame).await {
        tracing::warn!(error = %e, project_id, "chat frame not pushed");
    }
}

async fn push_message(state: &AppState, kind: &str, m: &Message) {
    let data = serde_json::to_value(MessageView::from(m.clone())).unwrap_or_default();
    push(state, m.project_id, kind, data).await;
}

/// Stores a message and fans it out; runs in the room actor.
async fn insert(
    state: &AppState,
    caller: &Caller,
    project_id: i64,
    content: &str,
    file: Option<&Attachment<'_>>,
) -> FlowResult<Message> {
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    let project = participant_project(tx.exec(), caller, project_id).await?;
    let id = chat::insert(tx.exec(), project_id, caller.id, content, file, now).await?;
    let message = chat::find(tx.exec(), project_id, id)
        .await?
        .ok_or_else(not_found)?;
    let emails =
        crate::workflows::chat_digest::emails_for(state, &mut tx, &project, caller, now).await?;
    record(&mut tx, "chat.message_created", &message, now, emails).await?;
    state.commit(tx).await?;
    push_message(state, "message.created", &message).await;
    Ok(message)
}

/// Posts a message; REST and WebSocket alike hand it text they parsed as a [`ChatText`].
pub async fn post(
    state: &AppState,
    caller: &Caller,
    project_id: i64,
    content: ChatText,
) -> FlowResult<Message> {
    let caller = *caller;
    in_room(state, project_id, move |st| async move {
        insert(&st, &caller, project_id, &content, None).await
    })
    .await
}

/// A socket of `user_id` joined the room: its actor starts if it was not running, and the
/// user counts as present on every instance (no e-mail while connected) for `ttl`, which each
/// ping renews ([`still_here`]).
pub async fn arrive(state: &AppState, project_id: i64, user_id: i64, ttl: std::time::Duration) {
    let joined = in_room(state, project_id, move |st| async move {
        st.realtime
            .arrive(&chat_room(project_id), user_id, ttl)
            .await
            .map_err(|e| FlowError::Internal(e.into()))
    })
    .await;
    if let Err(e) = joined {
        tracing::warn!(error = %e, project_id, "chat presence not recorded");
    }
}

pub async fn still_here(state: &AppState, project_id: i64, user_id: i64, ttl: std::time::Duration) {
    if let Err(e) = state
        .realtime
        .still_here(&chat_room(project_id), user_id, ttl)
        .await
    {
        tracing::warn!(error = %e, project_id, "chat presence not renewed");
    }
}

/// A socket of `user_id` left the room (directly: leaving must not wait behind posts).
pub async fn depart(state: &AppState, project_id: i64, user_id: i64) {
    if let Err(e) = state.realtime.depart(&chat_room(project_id), user_id).await {
        tracing::warn!(error = %e, project_id, "chat presence not cleared");
    }
}

/// Tells the room that `caller` is typing; relayed, never stored.
pub async fn typing(state: &AppState, caller: &Caller, project_id: i64) {
    push(state, project_id, "typing", json!({"user_id": caller.id})).await;
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
    let name = display_name(client_name, doc_type);
    let size = bytes.len() as i64;
    let caller = *caller;
    let stored = in_room(state, project_id, move |st| async move {
        let attachment = Attachment {
            path: &relative,
            name: &name,
            mime: doc_type.mime(),
            size,
        };
        insert(&st, &caller, project_id, "", Some(&attachment)).await
    })
    .await;
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
    content: ChatText,
) -> FlowResult<Message> {
    let caller = *caller;
    in_room(state, project_id, move |st| async move {
        edit_now(&st, &caller, project_id, id, &content).await
    })
    .await
}

async fn edit_now(
    state: &AppState,
    caller: &Caller,
    project_id: i64,
    id: i64,
    content: &str,
) -> FlowResult<Message> {
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
    if !chat::edit(tx.exec(), id, caller.id, content, now).await? {
        return Err(FlowError::conflict(
            "MESSAGE_DELETED",
            "A deleted message cannot be edited",
        ));
    }
    let m = chat::find(tx.exec(), project_id, id)
        .await?
        .ok_or_else(not_found)?;
    record(&mut tx, "chat.message_updated", &m, now, Vec::new()).await?;
    state.commit(tx).await?;
    push_message(state, "message.updated", &m).await;
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
    let caller = *caller;
    in_room(state, project_id, move |st| async move {
        delete_now(&st, &caller, project_id, id).await
    })
    .await
}

async fn delete_now(
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
    record(&mut tx, "chat.message_deleted", &gone, now, Vec::new()).await?;
    state.commit(tx).await?;
    if let Some(file) = &m.file_path {
        let _ = tokio::fs::remove_file(state.settings.uploads_dir.join(file)).await;
    }
    push_message(state, "message.deleted", &gone).await;
    Ok(gone)
}

/// Marks the chat read up to `up_to` (by default its newest message); the unread count after.
pub async fn mark_read(
    state: &AppState,
    caller: &Caller,
    project_id: i64,
    up_to: Option<i64>,
) -> FlowResult<i64> {
    let caller = *caller;
    in_room(state, project_id, move |st| async move {
        mark_read_now(&st, &caller, project_id, up_to).await
    })
    .await
}

async fn mark_read_now(
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
        push(
            state,
            project_id,
            "read",
            json!({"user_id": caller.id, "up_to_message_id": up_to}),
        )
        .await;
    }
    Ok(chat::unread(conn.exec(), project_id, caller.id).await?)
}
