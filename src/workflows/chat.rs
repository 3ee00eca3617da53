//! A project's chat: its company, its selected expert and administrators (as mediators) read
//! and write; to anyone else the chat does not exist (404). Each new message, edit and
//! deletion is recorded as an event.
//!
//! Every change of a room (post, edit, deletion, read mark) runs in that room's actor
//! (`state.chat_rooms`, one per project, started on first use, stopped when idle, restarted
//! after a panic): stored, committed, then fanned out, so each room's frames go out in the
//! order of the store. Posts go in groups (a group commit): a post joins its room's line
//! (`state.chat_posts`) and asks the actor to store what waits there; the first such job takes
//! up to [`GROUP`] posts and hands them to the commit the rooms share (`state.chat_commits`),
//! where the groups of every room waiting at that moment are written in one statement with
//! their events in one transaction (so many quiet rooms share commits as one busy room's posts
//! do). After that commit the room's actor publishes its frames in line order, as one message,
//! and answers each post. A new message also e-mails the participants not connected to the
//! room (`chat_digest`).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;

use std::collections::HashMap;
use std::future::Future;

use tokio::sync::oneshot;

use crate::domain::text::ChatText;
use crate::domain::token::random_token;
use crate::domain::upload::{DocumentType, display_name};
use crate::integrations::realtime::chat_room;
use crate::state::{AppState, Asked, ChatPost, RoomGroup};
use crate::store::chat::{self, Message, NewFile, NewMessage};
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

/// The event of a change of `m`; `emails` are the e-mails it causes (sent by the outbox after
/// commit).
fn event<'a>(kind: &'a str, m: &Message, emails: Vec<serde_json::Value>) -> NewEvent<'a> {
    let mut payload =
        json!({"project_id": m.project_id, "message_id": m.id, "sender_id": m.sender_id});
    if !emails.is_empty() {
        payload[crate::workflows::emails::EMAIL_KEY] = serde_json::Value::Array(emails);
    }
    NewEvent {
        kind,
        aggregate: "project",
        aggregate_id: Some(m.project_id),
        payload,
    }
}

/// Records the change as an event.
async fn record(
    tx: &mut Tx,
    kind: &str,
    m: &Message,
    now: chrono::DateTime<chrono::Utc>,
) -> FlowResult<()> {
    events::record(tx.exec(), event(kind, m, Vec::new()), now).await?;
    Ok(())
}

/// Sends `frames` to the project's room (every instance), in order; a lost frame is found by
/// the client's next read over REST, so it never fails the change itself.
async fn publish(state: &AppState, project_id: i64, frames: &[String]) {
    if let Err(e) = state
        .realtime
        .publish_all(&chat_room(project_id), frames)
        .await
    {
        tracing::warn!(error = %e, project_id, "chat frames not pushed");
    }
}

/// What a room's frame tells its members (its `type` on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoomFrame {
    MessageCreated,
    MessageUpdated,
    MessageDeleted,
    /// A member is typing (relayed, never stored).
    Typing,
    /// A member read the room up to a message.
    Read,
}

impl RoomFrame {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::MessageCreated => "message.created",
            Self::MessageUpdated => "message.updated",
            Self::MessageDeleted => "message.deleted",
            Self::Typing => "typing",
            Self::Read => "read",
        }
    }
}

/// A frame of the room: `{type, data}`.
fn frame(kind: RoomFrame, data: serde_json::Value) -> String {
    json!({"type": kind.as_str(), "data": data}).to_string()
}

async fn push(state: &AppState, project_id: i64, kind: RoomFrame, data: serde_json::Value) {
    publish(state, project_id, &[frame(kind, data)]).await;
}

/// The frame of a change `kind` of message `m`.
fn message_frame(kind: RoomFrame, m: &Message) -> String {
    frame(
        kind,
        serde_json::to_value(MessageView::from(m.clone())).unwrap_or_default(),
    )
}

async fn push_message(state: &AppState, kind: RoomFrame, m: &Message) {
    publish(state, m.project_id, &[message_frame(kind, m)]).await;
}

/// The most posts one commit of a room stores.
pub const GROUP: usize = 64;

/// Posts a message; REST and WebSocket alike hand it text they parsed as a [`ChatText`]. The
/// message takes its place in its room's line before this returns (see [`in_line`]), so a
/// socket may wait for several of its messages at once and they keep the order it sent them.
pub fn post(
    state: &AppState,
    caller: &Caller,
    project_id: i64,
    content: ChatText,
) -> impl Future<Output = FlowResult<Message>> + 'static + use<> {
    let message = NewMessage {
        sender_id: caller.id,
        content: content.into_string(),
        file: None,
    };
    in_line(state, caller, project_id, message)
}

/// Puts the message in its room's line and asks the room's actor to store what waits there,
/// both before it returns: the message's place among the room's posts is taken now, and a
/// future dropped unpolled still has it stored. The future answers the message as stored, or
/// why not.
fn in_line(
    state: &AppState,
    caller: &Caller,
    project_id: i64,
    message: NewMessage,
) -> impl Future<Output = FlowResult<Message>> + 'static + use<> {
    let (answer, answered) = oneshot::channel();
    let post = ChatPost {
        message,
        admin: caller.admin,
        key: crate::store::idempotency::current(),
    };
    let queued = state
        .chat_posts
        .push(project_id, Asked { item: post, answer })
        .map(|ticket| {
            let st = state.clone();
            let stored = state.chat_rooms.call(project_id, move || async move {
                store_waiting(&st, project_id, ticket).await;
            });
            (ticket, stored)
        });
    let state = state.clone();
    async move {
        let Some((ticket, stored)) = queued else {
            tracing::warn!(project_id, "chat room line full; the post is refused");
            return Err(FlowError::unavailable(
                "The chat room is busy; send the message again",
            ));
        };
        if let Err(e) = stored.await {
            // The job did not end normally: a post still in the line is taken back (nothing
            // was stored); one already taken is answered by its group (with an error if that
            // group is what failed).
            if state.chat_posts.withdraw(project_id, ticket).is_some() {
                return Err(e.into());
            }
        }
        match answered.await {
            Ok(Ok(message)) => Ok(message),
            Ok(Err(e)) => Err(e
                .downcast::<FlowError>()
                .unwrap_or_else(FlowError::Internal)),
            Err(_) => Err(FlowError::Internal(anyhow::anyhow!(
                "the chat room stopped before storing the message"
            ))),
        }
    }
}

/// The room actor's job for the post of `ticket`: stores the posts waiting in the room's line,
/// a group of up to [`GROUP`] at a time, until that post's group is done (or none waits: an
/// earlier job took it). So a job whose post an earlier group took ends at once.
async fn store_waiting(state: &AppState, project_id: i64, ticket: u64) {
    loop {
        let group = state.chat_posts.take(project_id, GROUP);
        let Some(&(last, _)) = group.last() else {
            return;
        };
        store_group(
            state,
            project_id,
            group.into_iter().map(|(_, p)| p).collect(),
        )
        .await;
        if last >= ticket {
            return;
        }
    }
}

type Waiting = Asked<ChatPost, anyhow::Result<Message>>;

/// The most posts one commit stores, over the groups of every room in it.
pub const COMMIT: usize = 512;

/// Stores a group of the room's posts (in the commit it shares with the groups of other rooms
/// waiting then), publishes their frames in order as one message, then answers each post.
async fn store_group(state: &AppState, project_id: i64, group: Vec<Waiting>) {
    let (posts, answers): (Vec<ChatPost>, Vec<_>) =
        group.into_iter().map(|a| (a.item, a.answer)).unzip();
    let outcomes = stored_with_other_rooms(state, project_id, posts).await;
    let frames: Vec<String> = outcomes
        .iter()
        .flatten()
        .map(|m| message_frame(RoomFrame::MessageCreated, m))
        .collect();
    publish(state, project_id, &frames).await;
    for (outcome, answer) in outcomes.into_iter().zip(answers) {
        // The poster may have stopped waiting; the message is stored all the same.
        let _ = answer.send(outcome.map_err(anyhow::Error::from));
    }
}

/// Hands the room's posts to the commit the rooms share (`AppState::chat_commits`): the room
/// actor whose turn it is stores the groups of every room waiting then in one transaction and
/// answers each, so a hundred rooms that each post a little share commits as one busy room's
/// posts do. One outcome per post, in order.
async fn stored_with_other_rooms(
    state: &AppState,
    project_id: i64,
    posts: Vec<ChatPost>,
) -> Vec<FlowResult<Message>> {
    let count = posts.len();
    let commits = &state.chat_commits;
    let (answer, mut answered) = oneshot::channel();
    let group = RoomGroup { project_id, posts };
    if !commits.waiting.push(Asked {
        item: group,
        answer,
    }) {
        let busy = FlowError::unavailable("The chat is busy; send the message again");
        return copies(busy, count);
    }
    loop {
        tokio::select! {
            // Answered by an earlier turn, or by this room's own.
            biased;
            outcomes = &mut answered => {
                return match outcomes {
                    Ok(outcomes) => outcomes
                        .into_iter()
                        .map(|o| {
                            o.map_err(|e| e.downcast::<FlowError>().unwrap_or_else(FlowError::Internal))
                        })
                        .collect(),
                    // The turn that took the group stopped half-way (its transaction is
                    // rolled back unless it was committing).
                    Err(_) => copies(
                        FlowError::Internal(anyhow::anyhow!(
                            "the chat's commit stopped before storing the message"
                        )),
                        count,
                    ),
                };
            }
            _turn = commits.turn.lock() => write_waiting(state).await,
        }
    }
}

/// A turn's work: takes the groups waiting (up to [`COMMIT`] posts in all), stores them in one
/// transaction and answers each. When that transaction fails, each room's group is tried
/// alone, so a room whose posts cannot be stored fails alone.
async fn write_waiting(state: &AppState) {
    let taken = state
        .chat_commits
        .waiting
        .take_weighing(COMMIT, |asked| asked.item.posts.len());
    if taken.is_empty() {
        return;
    }
    let (groups, answers): (Vec<RoomGroup>, Vec<_>) =
        taken.into_iter().map(|a| (a.item, a.answer)).unzip();
    let rooms: Vec<(i64, &[ChatPost])> = groups
        .iter()
        .map(|g| (g.project_id, g.posts.as_slice()))
        .collect();
    let outcomes = if let [(project_id, posts)] = rooms[..] {
        vec![write_room(state, project_id, posts).await]
    } else {
        match write_rooms(state, &rooms).await {
            Ok(outcomes) => outcomes,
            Err(Failed::Refused(e)) => {
                tracing::warn!(error = %e, rooms = rooms.len(),
                    "chat commit not stored; storing its rooms one by one");
                let mut outcomes = Vec::with_capacity(rooms.len());
                for &(project_id, posts) in &rooms {
                    outcomes.push(write_room(state, project_id, posts).await);
                }
                outcomes
            }
            // No connection, or a commit that failed (it may have happened all the same: not
            // written again): each post answered the error.
            Err(failed) => {
                let e = failed.into_error();
                tracing::warn!(error = %e, rooms = rooms.len(), "chat commit not stored");
                rooms
                    .iter()
                    .map(|(_, posts)| (0..posts.len()).map(|_| Err(again(&e))).collect())
                    .collect()
            }
        }
    };
    for (outcome, answer) in outcomes.into_iter().zip(answers) {
        let outcome = outcome
            .into_iter()
            .map(|o| o.map_err(anyhow::Error::from))
            .collect();
        // A room whose actor stopped waiting: its messages are stored all the same.
        let _ = answer.send(outcome);
    }
}

/// Stores one room's posts in one commit; when that fails, post by post, so one post that
/// cannot be stored fails alone.
async fn write_room(
    state: &AppState,
    project_id: i64,
    posts: &[ChatPost],
) -> Vec<FlowResult<Message>> {
    match write_rooms(state, &[(project_id, posts)]).await {
        Ok(mut outcomes) => outcomes.remove(0),
        Err(Failed::Refused(e)) if posts.len() > 1 => {
            tracing::warn!(error = %e, project_id, posts = posts.len(),
                "chat group not stored; storing its posts one by one");
            let mut outcomes = Vec::with_capacity(posts.len());
            let mut unavailable = false;
            for post in posts {
                if unavailable {
                    outcomes.push(Err(FlowError::unavailable(
                        "The message could not be stored; send it again",
                    )));
                    continue;
                }
                let alone = [(project_id, std::slice::from_ref(post))];
                outcomes.push(match write_rooms(state, &alone).await {
                    Ok(mut one) => one.remove(0).remove(0),
                    Err(failed) => {
                        // Without a connection, the rest are not tried.
                        unavailable = matches!(failed, Failed::Unavailable(_));
                        Err(failed.into_error())
                    }
                });
            }
            outcomes
        }
        // A post alone, no connection, or a commit that failed: each post answered the error.
        Err(failed) => {
            let e = failed.into_error();
            tracing::warn!(error = %e, project_id, posts = posts.len(), "chat group not stored");
            copies(e, posts.len())
        }
    }
}

/// `e` again, for another post it fails: a refusal as itself, anything else as an internal
/// error of the same text.
fn again(e: &FlowError) -> FlowError {
    match e {
        FlowError::Refused {
            kind,
            code,
            detail,
            field,
        } => FlowError::Refused {
            kind: *kind,
            code: code.clone(),
            detail: detail.clone(),
            field: *field,
        },
        other => FlowError::Internal(anyhow::anyhow!("{other}")),
    }
}

/// `e` as the outcome of each of `n` posts.
fn copies(e: FlowError, n: usize) -> Vec<FlowResult<Message>> {
    let mut outcomes: Vec<FlowResult<Message>> = (1..n).map(|_| Err(again(&e))).collect();
    outcomes.push(Err(e));
    outcomes
}

/// Why a group was not stored.
enum Failed {
    /// No transaction could be opened: nothing was written, and a post alone would fare no
    /// better.
    Unavailable(FlowError),
    /// A statement failed: nothing was written.
    Refused(FlowError),
    /// The commit answered an error: it may have been written all the same.
    AtCommit(FlowError),
}

impl Failed {
    fn into_error(self) -> FlowError {
        match self {
            Failed::Unavailable(e) | Failed::Refused(e) | Failed::AtCommit(e) => e,
        }
    }
}

/// Writes the posts of each room whose authors take part in its chat (the others are
/// answered 404) in one statement, their events (e-mails included) in a second, and commits:
/// for each room, one outcome per post, in order. An error fails them all.
async fn write_rooms(
    state: &AppState,
    rooms: &[(i64, &[ChatPost])],
) -> Result<Vec<Vec<FlowResult<Message>>>, Failed> {
    let now = state.clock.now();
    let mut tx = state
        .db
        .begin()
        .await
        .map_err(|e| Failed::Unavailable(e.into()))?;
    // The posts' idempotency keys commit with them (a key taken over fails its post alone,
    // when the group is tried again post by post).
    let posts = rooms.iter().flat_map(|(_, posts)| posts.iter());
    for key in posts.filter_map(|p| p.key.as_ref()) {
        crate::store::idempotency::mark_work(tx.exec(), key)
            .await
            .map_err(|e| Failed::Refused(e.into()))?;
    }
    let written = write_in(state, &mut tx, rooms, now).await;
    let (outcomes, stored) = written.map_err(Failed::Refused)?;
    if stored > 0 {
        state
            .commit(tx)
            .await
            .map_err(|e| Failed::AtCommit(e.into()))?;
        state.chat_groups.committed(stored);
    }
    Ok(outcomes)
}

/// [`write_rooms`]'s statements, in `tx`: the outcomes, and how many messages were written.
async fn write_in(
    state: &AppState,
    tx: &mut Tx,
    rooms: &[(i64, &[ChatPost])],
    now: chrono::DateTime<chrono::Utc>,
) -> FlowResult<(Vec<Vec<FlowResult<Message>>>, usize)> {
    let ids: Vec<i64> = rooms.iter().map(|(id, _)| *id).collect();
    let projects: HashMap<i64, Project> = projects::find_many(tx.exec(), &ids)
        .await?
        .into_iter()
        .map(|p| (p.id, p))
        .collect();
    // Its project's company, its selected expert, or an administrator mediating.
    let takes_part = |project_id: i64, post: &ChatPost| {
        projects.get(&project_id).is_some_and(|project| {
            let sender = post.message.sender_id;
            project.company_id == Some(sender) || project.expert_id == Some(sender) || post.admin
        })
    };
    let admitted: Vec<(i64, &NewMessage)> = rooms
        .iter()
        .flat_map(|&(id, posts)| posts.iter().map(move |post| (id, post)))
        .filter(|&(id, post)| takes_part(id, post))
        .map(|(id, post)| (id, &post.message))
        .collect();
    let stored = chat::insert_all(tx.exec(), &admitted, now).await?;
    if !stored.is_empty() {
        let with_messages: Vec<&Project> = projects.values().collect();
        let mut seen = crate::workflows::chat_digest::Seen::in_rooms(state, &with_messages).await;
        let mut created = Vec::with_capacity(stored.len());
        for m in &stored {
            let project = &projects[&m.project_id];
            let sender = m.sender_id.unwrap_or_default();
            let seen = seen.entry(m.project_id).or_default();
            let emails =
                crate::workflows::chat_digest::emails_for(state, tx, project, sender, now, seen)
                    .await?;
            created.push(event("chat.message_created", m, emails));
        }
        events::record_all(tx.exec(), &created, now).await?;
    }
    let count = stored.len();
    let mut stored = stored.into_iter();
    let outcomes = rooms
        .iter()
        .map(|&(id, posts)| {
            posts
                .iter()
                .map(|post| {
                    if takes_part(id, post) {
                        stored.next().ok_or_else(not_found)
                    } else {
                        Err(not_found())
                    }
                })
                .collect()
        })
        .collect();
    Ok((outcomes, count))
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
    push(
        state,
        project_id,
        RoomFrame::Typing,
        json!({"user_id": caller.id}),
    )
    .await;
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
    let message = NewMessage {
        sender_id: caller.id,
        content: String::new(),
        file: Some(NewFile {
            path: relative,
            name: display_name(client_name, doc_type),
            mime: doc_type.mime(),
            size: bytes.len() as i64,
        }),
    };
    let stored = in_line(state, caller, project_id, message).await;
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
    record(&mut tx, "chat.message_updated", &m, now).await?;
    state.commit(tx).await?;
    push_message(state, RoomFrame::MessageUpdated, &m).await;
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
    record(&mut tx, "chat.message_deleted", &gone, now).await?;
    state.commit(tx).await?;
    if let Some(file) = &m.file_path {
        let _ = tokio::fs::remove_file(state.settings.uploads_dir.join(file)).await;
    }
    push_message(state, RoomFrame::MessageDeleted, &gone).await;
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
            RoomFrame::Read,
            json!({"user_id": caller.id, "up_to_message_id": up_to}),
        )
        .await;
    }
    Ok(chat::unread(conn.exec(), project_id, caller.id).await?)
}
