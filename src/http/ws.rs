//! WebSockets: `GET /api/ws/notifications` (the caller's notifications as they are stored)
//! and `GET /api/ws/chat/{project_id}` (the project's chat room). DESIGN §9 fixes the paths,
//! the token rule and the frames.
//!
//! Each socket is one session task: it joins its rooms in `state.realtime` (a bounded queue;
//! a slow consumer is dropped and its socket closed), pings every `WS_PING_SECONDS` (never a
//! second ping while one is unanswered) and closes after three intervals without a pong, timed
//! on the process's monotonic clock (the service's clock, which tests move, plays no part), and
//! at every ping checks its session again, so a logout, a suspension or an expired token closes
//! the socket with code 1008 (policy); a check the store or the cache could not answer closes
//! nothing. Frames over 64 KiB close it with 1009; anything else it cannot read gets an `error`
//! frame. Whatever ends a socket on the server's side (a panicking session task included, 1011)
//! sends a close frame with a code and a reason first (issue #31).
//!
//! Bounds (issue #31), all checked before the upgrade, so past any of them HTTP keeps
//! answering: a place among the process's sockets (`WS_MAX_SOCKETS`, else 503), then the
//! account's and the client address's places on every instance (`WS_MAX_SOCKETS_PER_USER`,
//! `WS_MAX_SOCKETS_PER_ADDRESS`, else 429 with `Retry-After`), held in
//! `integrations::socket_registry` and renewed at every ping. A new socket past a cap is
//! refused rather than an old one closed: closing a socket held by another instance would
//! need a channel to kill it there, and a refusal is decided once, atomically, and heard by
//! the client that asked. On a chat socket a `message` frame spends the account's chat budget
//! (`CHAT_MESSAGES_PER_MINUTE`, shared with REST posts): past it the frame gets the `error`
//! frame of REST's 429 body and nothing is stored, and the tenth refusal within a minute
//! closes the socket with 1008. Typing frames are relayed at most three a second per socket;
//! the rest are dropped without an answer.

use std::time::Instant;

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, ResponseError as _, get, web};
use actix_ws::{CloseCode, CloseReason, Message};
use serde::Deserialize;
use serde_json::json;
use utoipa::IntoParams;

use super::auth::{REFRESH_COOKIE, bearer_token};
use super::error::{ApiError, ApiResult, ErrorBody};
use crate::domain::realtime_limits::{RefusedFrames, TYPING_RATE, Take};
use crate::domain::text::ChatText;
use crate::domain::token::{constant_time_eq, random_token};
use crate::integrations::realtime::{Frame, SocketKind, chat_room, user_room};
use crate::integrations::socket_registry::{Admission, FrameRefusal, ProcessSlot, Refusal};
use crate::state::AppState;
use crate::store::notifications;
use crate::store::users::User;
use crate::workflows::auth::{self as sessions, AuthError, SessionError};
use crate::workflows::chat;
use crate::workflows::projects::Caller;

/// Largest frame a client may send.
const MAX_FRAME: usize = 64 * 1024;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct TokenQuery {
    /// The access token (or send `Authorization: Bearer …`, or the session cookie from an
    /// allowed `Origin`). Never logged.
    pub token: Option<String>,
}

/// Who is on the socket, and how to check again that they still may be.
struct Socket {
    user: User,
    session_id: i64,
    /// The access token, when the socket was opened with one: its expiry ends the socket.
    token: Option<String>,
}

impl Socket {
    fn caller(&self) -> Caller {
        use crate::domain::user::Role;
        Caller {
            id: self.user.id,
            admin: self.user.roles.contains(&Role::Admin),
            company: self.user.roles.contains(&Role::Empresa),
            expert: self.user.roles.contains(&Role::Experto),
        }
    }

    /// Still allowed: the token unexpired, the session live, the account in good standing.
    /// An error when the store or the cache could not say (then nothing is known of it).
    async fn still_valid(&self, state: &AppState) -> Result<bool, SessionError> {
        let checked = match &self.token {
            Some(token) => sessions::authenticate(state, token).await.map(|_| ()),
            None => sessions::still_valid(state, self.session_id, self.user.id)
                .await
                .map(|_| ()),
        };
        match checked {
            Ok(()) => Ok(true),
            Err(SessionError::Auth(_)) => Ok(false),
            Err(other) => Err(other),
        }
    }
}

/// The origin (`scheme://host[:port]`) of a URL.
fn origin_of(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    match url[after_scheme..].find('/') {
        Some(i) => &url[..after_scheme + i],
        None => url,
    }
}

/// The answer to an upgrade past a cap: 429 for the account's and the address's (the
/// client's own doing), 503 for the process's (the server's). `Retry-After` is a lease: by
/// then a socket that vanished without closing no longer counts.
fn refused(state: &AppState, refusal: Refusal) -> ApiError {
    let retry_after = state.sockets.lease().as_secs().max(1);
    let error = match refusal {
        Refusal::Account => ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "TOO_MANY_SOCKETS",
            "This account has as many WebSockets open as it may; close one first",
        ),
        Refusal::Address => ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "TOO_MANY_SOCKETS_FROM_ADDRESS",
            "Too many WebSockets are open from this address",
        ),
        Refusal::Process => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "SOCKETS_AT_CAPACITY",
            "The server holds as many WebSockets as it can; try again later",
        ),
    };
    error.with_retry_after(retry_after)
}

/// A place among this process's sockets: the first thing an upgrade takes, before any work.
fn process_slot(state: &web::Data<AppState>) -> ApiResult<ProcessSlot> {
    // A draining instance takes no new socket: the client retries, and the load balancer
    // sends it to another instance.
    if state.readiness.is_draining() {
        return Err(
            ApiError::unavailable("This server is restarting; reconnect").with_retry_after(1),
        );
    }
    state
        .sockets
        .process_slot()
        .map_err(|refusal| refused(state, refusal))
}

async fn authenticate(
    state: &AppState,
    req: &HttpRequest,
    token: Option<String>,
) -> ApiResult<Socket> {
    if let Some(token) = token.or_else(|| bearer_token(req)) {
        let (_, session, user) = sessions::authenticate(state, &token).await?;
        return Ok(Socket {
            user,
            session_id: session.id,
            token: Some(token),
        });
    }
    // The session cookie rides along on any request the browser makes, so it only counts
    // from the front end's own origin (cross-site WebSocket hijacking).
    let cookie = req.cookie(REFRESH_COOKIE).ok_or(AuthError::Missing)?;
    let origin = req
        .headers()
        .get(actix_web::http::header::ORIGIN)
        .and_then(|o| o.to_str().ok())
        .unwrap_or_default();
    let allowed = origin_of(&state.settings.frontend_url);
    if !constant_time_eq(origin.as_bytes(), allowed.as_bytes()) {
        return Err(ApiError::forbidden(
            "The session cookie is accepted only from the front end's origin",
        ));
    }
    let (session, user) = sessions::session_of_refresh(state, cookie.value(), None).await?;
    Ok(Socket {
        user,
        session_id: session.id,
        token: None,
    })
}

/// The caller's notifications, pushed as they are stored (`{type, id, title, message, data,
/// created_at}`); the first frame is `{"type": "unread_count", "data": {"unread": n}}`.
#[utoipa::path(
    tag = "realtime",
    params(TokenQuery),
    security(("bearer" = [])),
    responses(
        (status = 101, description = "Switching to the WebSocket protocol"),
        (status = 400, body = ErrorBody, description = "NOT_A_WEBSOCKET: not a WebSocket upgrade request"),
        (status = 403, body = ErrorBody, description = "Session cookie from another origin"),
        (status = 429, body = ErrorBody, description = "`TOO_MANY_SOCKETS`: the account holds `WS_MAX_SOCKETS_PER_USER` sockets (both kinds, every instance); `TOO_MANY_SOCKETS_FROM_ADDRESS`: the client address holds `WS_MAX_SOCKETS_PER_ADDRESS` (`Retry-After`)"),
        (status = 503, body = ErrorBody, description = "`SOCKETS_AT_CAPACITY`: this server holds `WS_MAX_SOCKETS` sockets; `UNAVAILABLE`: it is restarting (both with `Retry-After`)"),
    )
)]
#[get("/api/ws/notifications")]
pub async fn notifications_socket(
    state: web::Data<AppState>,
    req: HttpRequest,
    query: web::Query<TokenQuery>,
    body: web::Payload,
) -> ApiResult<HttpResponse> {
    let slot = process_slot(&state)?;
    let socket = authenticate(&state, &req, query.into_inner().token).await?;
    let unread = {
        let mut conn = state.db.conn().await?;
        notifications::unread_count(conn.exec(), socket.user.id).await?
    };
    let greeting = json!({"type": "unread_count", "id": null, "title": "", "message": "",
                          "data": {"unread": unread}, "created_at": state.clock.now()})
    .to_string();
    let room = user_room(socket.user.id);
    let place = (slot, room, None);
    open(state, req, body, socket, place, Some(greeting)).await
}

/// The project's chat room for its company, its selected expert and administrators (404
/// otherwise). Frames `{type: message.created | message.updated | message.deleted | read |
/// typing | error, data}`. The client sends `{"type": "message", "content": "…"}` (stored,
/// then fanned out like a REST post) or `{"type": "typing"}` (relayed, never stored).
#[utoipa::path(
    tag = "realtime",
    params(("project_id" = i64, Path), TokenQuery),
    security(("bearer" = [])),
    responses(
        (status = 101, description = "Switching to the WebSocket protocol"),
        (status = 400, body = ErrorBody, description = "NOT_A_WEBSOCKET: not a WebSocket upgrade request"),
        (status = 403, body = ErrorBody, description = "Session cookie from another origin"),
        (status = 429, body = ErrorBody, description = "`TOO_MANY_SOCKETS`: the account holds `WS_MAX_SOCKETS_PER_USER` sockets (both kinds, every instance); `TOO_MANY_SOCKETS_FROM_ADDRESS`: the client address holds `WS_MAX_SOCKETS_PER_ADDRESS` (`Retry-After`)"),
        (status = 503, body = ErrorBody, description = "`SOCKETS_AT_CAPACITY`: this server holds `WS_MAX_SOCKETS` sockets; `UNAVAILABLE`: it is restarting (both with `Retry-After`)"),
    )
)]
#[get("/api/ws/chat/{project_id}")]
pub async fn chat_socket(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<i64>,
    query: web::Query<TokenQuery>,
    body: web::Payload,
) -> ApiResult<HttpResponse> {
    let project_id = path.into_inner();
    let slot = process_slot(&state)?;
    let socket = authenticate(&state, &req, query.into_inner().token).await?;
    {
        let mut conn = state.db.conn().await?;
        chat::require_participant(conn.exec(), &socket.caller(), project_id).await?;
    }
    let place = (slot, chat_room(project_id), Some(project_id));
    open(state, req, body, socket, place, None).await
}

/// Where a socket goes: its place in the process, its room, and its project for a chat.
type Place = (ProcessSlot, String, Option<i64>);

async fn open(
    state: web::Data<AppState>,
    req: HttpRequest,
    body: web::Payload,
    socket: Socket,
    (slot, room, chat_project): Place,
    greeting: Option<String>,
) -> ApiResult<HttpResponse> {
    let address = super::client_ip::client_ip(&req);
    let admission = state
        .sockets
        .admit(slot, socket.user.id, address)
        .await?
        .map_err(|refusal| refused(&state, refusal))?;
    let (response, session, stream) = match actix_ws::handle(&req, body) {
        Ok(handled) => handled,
        Err(e) => {
            admission.release().await;
            return Err(ApiError::bad_request("NOT_A_WEBSOCKET", e.to_string()));
        }
    };
    let stream = stream.max_frame_size(MAX_FRAME);
    let half_close = super::half_close::of(&req);
    drop(req);
    let state = state.into_inner();
    // Every idle socket holds its session future for its whole life, so the futures it only
    // runs now and then (a client's text, the session check, presence) are boxed when they
    // run rather than sized into it (6 KiB to 2 KiB in a debug build).
    let kind = match chat_project {
        Some(_) => SocketKind::Chat,
        None => SocketKind::Notifications,
    };
    let live = state.realtime.socket_opened(kind);
    // Joined and present before the client hears 101: a frame published right after the
    // handshake reaches it, and a message posted then sends the member no e-mail.
    let joined = state.realtime.join(&room);
    if let Some(project_id) = chat_project {
        // Present while the socket lives and answers pings; a pong-less socket is closed
        // after three intervals, so the presence outlives it by at most that.
        let ttl = state.settings.ws_ping_interval * 3;
        chat::arrive(&state, project_id, socket.user.id, ttl).await;
    }
    actix_web::rt::spawn(async move {
        use futures_util::FutureExt as _;
        let user_id = socket.user.id;
        let (member, frames) = joined;
        // A clone shares the session's state: once `serve` has closed it, this one's close
        // does nothing; if `serve` panicked, the client still gets a close frame (1011)
        // rather than a connection that ends without one.
        let closer = session.clone();
        let served = std::panic::AssertUnwindSafe(serve(
            &state,
            socket,
            &admission,
            frames,
            chat_project,
            greeting,
            session,
            stream,
            half_close,
        ))
        .catch_unwind()
        .await;
        if served.is_err() {
            tracing::error!(user_id, "WebSocket session panicked");
            let every = state.settings.ws_ping_interval;
            let reason = close(CloseCode::Error, "internal error: reconnect");
            let _ = tokio::time::timeout(every, closer.close(reason)).await;
        } else {
            drop(closer);
        }
        admission.release().await;
        state.realtime.leave(member);
        if let Some(project_id) = chat_project {
            Box::pin(chat::depart(&state, project_id, user_id)).await;
        }
        drop(live);
    });
    Ok(response)
}

fn close(code: CloseCode, description: &str) -> Option<CloseReason> {
    Some(CloseReason {
        code,
        description: Some(description.to_owned()),
    })
}

/// The session itself: frames out, client frames in, pings, until either side ends it.
#[allow(clippy::too_many_arguments)]
async fn serve(
    state: &std::sync::Arc<AppState>,
    socket: Socket,
    admission: &Admission,
    mut frames: tokio::sync::mpsc::Receiver<Frame>,
    chat_project: Option<i64>,
    greeting: Option<String>,
    mut session: actix_ws::Session,
    mut stream: actix_ws::MessageStream,
    half_close: Option<super::half_close::HalfClose>,
) {
    let every = state.settings.ws_ping_interval;
    let mut ping = tokio::time::interval(every);
    // After a stall (a slow session check), the next ping an interval later, not a burst.
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ping.tick().await;
    // Liveness is judged on the process's monotonic time, never on the service's clock
    // (which tests move by hours): the client's pongs renew it.
    let mut last_pong = Instant::now();
    // At most one ping unanswered at a time: a client that stops reading finds one ping
    // before the close frame when it comes back, so it answers one pong, not a pile of them
    // (after the server has let go of the connection, the second pong written meets a reset
    // and the client loses the close frame still waiting in its buffer: issue #31).
    let mut awaiting_pong = false;
    let mut reason = None;
    // Whether the client reads what it is sent (false once it is closed for not reading).
    let mut keeps_up = true;
    let mut budgets = FrameBudgets::default();
    // The socket's messages waiting for their commits, answered (an error frame when one is
    // not stored) in the order they were sent.
    let mut posting = futures_util::stream::FuturesOrdered::<Posting>::new();
    let mut draining = state.readiness.watch();
    if let Some(greeting) = greeting
        && session.text(greeting).await.is_err()
    {
        return;
    }
    loop {
        tokio::select! {
            _ = draining.wait_for(|draining| *draining) => {
                // The instance is stopping: the client reconnects, through the load
                // balancer, to another one.
                reason = close(CloseCode::Away, "server restarting: reconnect");
                break;
            }
            frame = frames.recv() => match frame {
                Some(frame) => {
                    // A client that has not taken a frame for three ping intervals is not
                    // reading: give up on it rather than hold its session (and its queue)
                    // for as long as the TCP connection stays up.
                    let sent = tokio::time::timeout(
                        every * 3,
                        session.text(Frame::as_ref(&frame).to_owned()),
                    )
                    .await;
                    match sent {
                        Ok(Ok(())) => {}
                        // The connection is gone: nobody to tell.
                        Ok(Err(_)) => break,
                        Err(_) => {
                            reason = close(CloseCode::Again, "not reading: reconnect and read over REST");
                            keeps_up = false;
                            break;
                        }
                    }
                }
                None => {
                    // The hub dropped this socket: it fell too far behind.
                    reason = close(CloseCode::Again, "too slow: reconnect and read over REST");
                    keeps_up = false;
                    break;
                }
            },
            // A message waiting for its commit does not hold up the frames going out.
            Some(stored) = futures_util::StreamExt::next(&mut posting), if !posting.is_empty() => {
                if let Err(error) = stored {
                    let frame = refusal_frame(error, &socket, chat_project.unwrap_or_default());
                    if session.text(frame).await.is_err() {
                        break;
                    }
                }
            }
            // Past `POSTS_IN_FLIGHT` waiting, the client's frames wait in the connection.
            message = stream.recv(), if posting.len() < POSTS_IN_FLIGHT => match message {
                Some(Ok(Message::Ping(bytes))) => {
                    if session.pong(&bytes).await.is_err() {
                        break;
                    }
                }
                Some(Ok(Message::Pong(_))) => {
                    last_pong = Instant::now();
                    awaiting_pong = false;
                }
                Some(Ok(Message::Text(text))) => {
                    let handled =
                        Box::pin(handle_text(state, &socket, &mut budgets, chat_project, &text))
                            .await;
                    let answer = match handled {
                        Handled::Done => continue,
                        Handled::Posted(stored) => {
                            posting.push_back(stored);
                            continue;
                        }
                        Handled::Answer(answer) => answer,
                    };
                    if session.text(answer.frame).await.is_err() {
                        break;
                    }
                    if answer.over_budget
                        && budgets.refused.record(state.clock.now().timestamp_millis())
                    {
                        state.sockets.closed_for_refusals();
                        reason = close(CloseCode::Policy, "too many refused messages: slow down");
                        break;
                    }
                }
                Some(Ok(Message::Close(why))) => {
                    reason = why;
                    break;
                }
                Some(Ok(Message::Binary(_) | Message::Continuation(_))) => {
                    if session.text(error_frame("binary frames are not accepted")).await.is_err() {
                        break;
                    }
                }
                Some(Ok(Message::Nop)) => {}
                Some(Err(actix_ws::ProtocolError::Overflow)) => {
                    reason = close(CloseCode::Size, "frame over 64 KiB");
                    break;
                }
                Some(Err(_)) => {
                    reason = close(CloseCode::Protocol, "malformed frame");
                    break;
                }
                None => break,
            },
            due = ping.tick() => {
                // A tick the loop comes to late (it was busy) may have the client's pongs
                // waiting unread behind it: judge at the next one, when they have been read.
                let on_time = due.elapsed() < every / 2;
                if on_time && last_pong.elapsed() > every * 3 {
                    reason = close(CloseCode::Away, "no pong");
                    keeps_up = false;
                    break;
                }
                match Box::pin(socket.still_valid(state)).await {
                    Ok(true) => {}
                    Ok(false) => {
                        reason = close(CloseCode::Policy, "the session has ended");
                        break;
                    }
                    // The store or the cache did not answer: that says nothing of the
                    // session, so the socket lives on and the next ping asks again.
                    Err(e) => tracing::warn!(error = %e, "WebSocket session not re-checked"),
                }
                if let Some(project_id) = chat_project {
                    Box::pin(chat::still_here(state, project_id, socket.user.id, every * 3)).await;
                }
                Box::pin(admission.renew()).await;
                if !awaiting_pong {
                    match tokio::time::timeout(every, session.ping(b"")).await {
                        Ok(Ok(())) => awaiting_pong = true,
                        Ok(Err(_)) => break,
                        // Its frames are not going out: the client is not reading, and the
                        // pong check above ends it.
                        Err(_) => {}
                    }
                }
            }
        }
    }
    // The close frame waits behind unsent frames; a client that does not read never gets it.
    let closed = tokio::time::timeout(every, session.close(reason)).await;
    if let (Ok(Ok(())), true, Some(half_close)) = (closed, keeps_up, half_close) {
        // The response ends with the close frame, and actix writes it to the socket in the
        // same turn as it drops the response, which ends `stream`: from then on the FIN can
        // only follow the frame. (A client that is not reading is left to the linger: its
        // frame may still wait in actix's buffer.)
        let ended = tokio::time::timeout(every, async { while stream.recv().await.is_some() {} });
        if ended.await.is_ok() {
            half_close.shutdown_write();
        }
    }
}

fn error_frame(detail: &str) -> String {
    json!({"type": "error", "data": {"detail": detail}}).to_string()
}

/// A refusal as an `error` frame whose `data` is the body REST answers it with (`detail`,
/// `code`, `errors`). An internal error's cause goes to the log under a fresh request id, and
/// the client gets the generic sentence and that id, never the cause's text.
fn refusal_frame(error: ApiError, socket: &Socket, project_id: i64) -> String {
    let request_id = error.cause().map(|cause| {
        let request_id = random_token(12);
        tracing::error!(
            request_id = %request_id,
            user_id = socket.user.id,
            project_id,
            error = %format!("{cause:#}"),
            "chat frame failed"
        );
        request_id
    });
    refusal_json(&error, request_id.as_deref())
}

fn refusal_json(error: &ApiError, request_id: Option<&str>) -> String {
    let mut data = serde_json::to_value(error.body()).unwrap_or_default();
    if let Some(request_id) = request_id {
        data["request_id"] = request_id.into();
    }
    json!({"type": "error", "data": data}).to_string()
}

/// What a socket's client frames have spent: its typing rate's bucket, and the chat
/// messages refused in its current window.
#[derive(Default)]
struct FrameBudgets {
    typing: Option<i64>,
    refused: RefusedFrames,
}

/// Messages one socket may have waiting for their commits at once.
const POSTS_IN_FLIGHT: usize = 32;

/// A message of the socket in its room's line: nothing to answer once stored, else the error.
type Posting = std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), ApiError>>>>;

/// What a client's text frame comes to.
enum Handled {
    /// Nothing to answer.
    Done,
    /// A frame to answer now.
    Answer(Answer),
    /// A message in its room's line, answered only if it is not stored.
    Posted(Posting),
}

impl From<String> for Handled {
    fn from(frame: String) -> Self {
        Handled::Answer(frame.into())
    }
}

/// A frame to answer a client's frame with; `over_budget` when it refuses a message past the
/// account's chat budget.
struct Answer {
    frame: String,
    over_budget: bool,
}

impl From<String> for Answer {
    fn from(frame: String) -> Self {
        Self {
            frame,
            over_budget: false,
        }
    }
}

#[derive(Deserialize)]
struct ClientFrame {
    #[serde(rename = "type")]
    kind: ClientFrameKind,
    content: Option<String>,
}

/// What a member's frame asks for; any other `type` is refused with an `error` frame.
#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum ClientFrameKind {
    /// A message to store and fan out.
    Message,
    /// Typing, to relay.
    Typing,
    #[serde(other)]
    Unknown,
}

/// A client's text frame in a chat room: a message to store (spending the account's chat
/// budget, as a REST post does), or typing to relay (within the socket's typing rate, the
/// rest dropped). Answers an `error` frame when it cannot be done.
async fn handle_text(
    state: &AppState,
    socket: &Socket,
    budgets: &mut FrameBudgets,
    chat_project: Option<i64>,
    text: &str,
) -> Handled {
    let Some(project_id) = chat_project else {
        return error_frame("this socket only receives").into();
    };
    let Ok(frame) = serde_json::from_str::<ClientFrame>(text) else {
        return error_frame("expected {\"type\": \"message\" | \"typing\", …}").into();
    };
    let caller = socket.caller();
    match frame.kind {
        ClientFrameKind::Message => {
            if let Err(error) = super::rate_limit::chat_message(state, caller.id).await {
                let over_budget = error.status_code() == StatusCode::TOO_MANY_REQUESTS;
                if over_budget {
                    state.sockets.frame_refused(FrameRefusal::ChatBudget);
                }
                return Handled::Answer(Answer {
                    frame: refusal_frame(error, socket, project_id),
                    over_budget,
                });
            }
            // The same type as REST's body: the same refusal, and nothing unchecked stored.
            match ChatText::parse(frame.content.unwrap_or_default()) {
                Ok(content) => {
                    let stored = chat::post(state, &caller, project_id, content);
                    Handled::Posted(Box::pin(async move {
                        stored.await.map(|_| ()).map_err(ApiError::from)
                    }))
                }
                Err(e) => {
                    let error = ApiError::invalid_field("content", e.to_string());
                    refusal_frame(error, socket, project_id).into()
                }
            }
        }
        ClientFrameKind::Typing => {
            let now = state.clock.now().timestamp_millis();
            match TYPING_RATE.take(budgets.typing, now) {
                Take::Allowed { full_at_ms } => {
                    budgets.typing = Some(full_at_ms);
                    chat::typing(state, &caller, project_id).await;
                }
                Take::Refused { .. } => state.sockets.frame_refused(FrameRefusal::Typing),
            }
            Handled::Done
        }
        ClientFrameKind::Unknown => error_frame("unknown frame type").into(),
    }
}

/// The real-time numbers on `/metrics`, beside the actor metrics (the rooms hub and the room
/// actors also appear there under their kinds).
pub fn render_metrics(state: &AppState, out: &mut String) {
    use super::metrics::{render_labeled, render_single};
    use std::fmt::Write as _;

    let realtime = &state.realtime;
    render_single(
        out,
        "realtime_rooms_live",
        "gauge",
        "Rooms with a socket on this instance.",
        realtime.rooms_live() as f64,
    );
    render_labeled(
        out,
        "realtime_sockets_live",
        "gauge",
        "WebSockets open on this instance, by kind.",
        "kind",
        SocketKind::ALL.map(|kind| (kind.label(), realtime.sockets_live(kind) as f64)),
    );
    let sockets = &state.sockets;
    render_labeled(
        out,
        "realtime_sockets_refused_total",
        "counter",
        "WebSocket upgrades refused on this instance, by the cap that refused them (account and \
         address: 429; process: 503).",
        "reason",
        Refusal::ALL.map(|reason| (reason.label(), sockets.refused(reason) as f64)),
    );
    let caps = sockets.caps();
    render_labeled(
        out,
        "realtime_socket_caps",
        "gauge",
        "The WebSocket caps in force, by scope.",
        "scope",
        [
            ("account", f64::from(caps.per_account)),
            ("address", f64::from(caps.per_address)),
            ("process", f64::from(caps.process)),
        ],
    );
    render_single(
        out,
        "realtime_sockets_process",
        "gauge",
        "WebSockets open or being opened in this process (against the process cap).",
        f64::from(sockets.process_live()),
    );
    render_labeled(
        out,
        "realtime_frames_refused_total",
        "counter",
        "Client frames refused by their budget on this instance: chat messages past the \
         account's budget, typing frames past the socket's rate.",
        "reason",
        FrameRefusal::ALL.map(|reason| (reason.label(), sockets.frames_refused(reason) as f64)),
    );
    render_single(
        out,
        "realtime_sockets_closed_for_refusals_total",
        "counter",
        "Sockets closed (1008) for sending refused chat messages on and on.",
        sockets.sockets_closed_for_refusals() as f64,
    );
    render_single(
        out,
        "realtime_frames_fanned_out_total",
        "counter",
        "Frames handed to sockets on this instance.",
        realtime.frames_fanned_out() as f64,
    );
    let (commits, stored, largest) = state.chat_groups.get();
    render_single(
        out,
        "realtime_chat_commits_total",
        "counter",
        "Commits of chat posts by the room actors on this instance: each stores the posts \
         waiting in one room together (a group commit).",
        commits as f64,
    );
    render_single(
        out,
        "realtime_chat_messages_stored_total",
        "counter",
        "Chat messages those commits stored (divided by the commits: messages per commit).",
        stored as f64,
    );
    render_single(
        out,
        "realtime_chat_commit_messages_max",
        "gauge",
        "The most chat messages one commit stored on this instance.",
        largest as f64,
    );
    let (mut dropped, mut restarts) = (0, 0);
    for kind in actors::metrics::snapshot() {
        match kind.values {
            actors::KindValues::Hub(v) if kind.kind == crate::integrations::realtime::HUB_KIND => {
                dropped = v.dropped_slow_members;
            }
            actors::KindValues::Registry(v) if kind.kind == chat::ROOM_ACTORS => {
                restarts = v.restarts;
            }
            _ => {}
        }
    }
    render_single(
        out,
        "realtime_slow_consumers_dropped_total",
        "counter",
        "Sockets dropped because they fell too far behind.",
        dropped as f64,
    );
    out.push_str(
        "# HELP realtime_supervisor_restarts_total Room actors restarted after a panic.\n",
    );
    out.push_str("# TYPE realtime_supervisor_restarts_total counter\n");
    let _ = writeln!(
        out,
        "realtime_supervisor_restarts_total{{supervisor=\"{}\"}} {restarts}",
        chat::ROOM_ACTORS
    );
}

/// Mounts the WebSockets: notifications and chat rooms.
pub fn mount(cfg: &mut utoipa_actix_web::service_config::ServiceConfig) {
    cfg.service(notifications_socket).service(chat_socket);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_internal_error_reaches_the_client_as_a_generic_sentence_and_a_request_id() {
        let cause = anyhow::anyhow!("database error: invalid byte sequence for encoding \"UTF8\"");
        let frame: serde_json::Value =
            serde_json::from_str(&refusal_json(&ApiError::internal(cause), Some("abc123")))
                .unwrap();
        assert_eq!(
            frame,
            json!({"type": "error", "data": {
                "detail": "Internal server error", "code": "INTERNAL_ERROR", "request_id": "abc123"
            }})
        );
    }

    #[test]
    fn a_refused_field_reaches_the_client_as_rest_answers_it() {
        let refusal = ApiError::invalid_field("content", "must be 1 to 5000 characters");
        let frame: serde_json::Value = serde_json::from_str(&refusal_json(&refusal, None)).unwrap();
        assert_eq!(
            frame,
            json!({"type": "error", "data": {
                "detail": "content: must be 1 to 5000 characters",
                "code": "VALIDATION_ERROR",
                "errors": [{"field": "content", "message": "must be 1 to 5000 characters"}]
            }})
        );
    }
}
