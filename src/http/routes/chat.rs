//! `/api/chat/{project_id}…`: a project's chat for its company, its selected expert and
//! administrators; 404 for anyone else.

use actix_web::{HttpResponse, delete, get, post, put, web};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::documents::{attachment, read_document};
use super::projects::caller;
use crate::domain::text::ChatText;
use crate::http::auth::{AuthUser, CsrfChecked};
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::pagination::PageQuery;
use crate::http::rate_limit;
use crate::state::AppState;
use crate::store::chat as store;
use crate::workflows::chat::{self as flow, MessageView};

/// One page of messages, newest first, and the caller's unread count.
#[derive(Debug, Serialize, ToSchema)]
pub struct ChatPage {
    pub items: Vec<MessageView>,
    pub total: i64,
    pub page: i64,
    pub size: i64,
    pub pages: i64,
    /// Messages of others after the caller's read mark.
    pub unread: i64,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ScrollQuery {
    /// Only messages older than this one (scrolling back).
    pub before_id: Option<i64>,
}

/// The project's messages, newest first (`before_id` scrolls back).
#[utoipa::path(
    tag = "chat",
    params(("project_id" = i64, Path), ScrollQuery, PageQuery),
    security(("bearer" = [])),
    responses((status = 200, body = ChatPage))
)]
#[get("/api/chat/{project_id}")]
pub async fn list(
    state: web::Data<AppState>,
    auth: AuthUser,
    project_id: web::Path<i64>,
    scroll: web::Query<ScrollQuery>,
    page: web::Query<PageQuery>,
) -> ApiResult<HttpResponse> {
    let page = page.into_inner().validate()?;
    let project_id = project_id.into_inner();
    let mut conn = state.db.conn().await?;
    flow::require_participant(conn.exec(), &caller(&auth), project_id).await?;
    let (items, total) = store::list(
        conn.exec(),
        project_id,
        scroll.before_id,
        page.limit(),
        page.offset(),
    )
    .await?;
    let unread = store::unread(conn.exec(), project_id, auth.id()).await?;
    Ok(HttpResponse::Ok().json(ChatPage {
        items: items.into_iter().map(MessageView::from).collect(),
        total,
        page: page.page,
        size: page.size,
        pages: if total == 0 {
            0
        } else {
            (total + page.size - 1) / page.size
        },
        unread,
    }))
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct MessageRequest {
    /// 1 to 5000 characters.
    #[schema(min_length = 1, max_length = 5000)]
    pub content: String,
}

fn message_text(body: MessageRequest) -> ApiResult<ChatText> {
    ChatText::parse(body.content).map_err(|e| ApiError::invalid_field("content", e.to_string()))
}

/// Posts a message (201). Each post spends one of the account's `CHAT_MESSAGES_PER_MINUTE`,
/// the budget its socket `message` frames spend too.
#[utoipa::path(
    tag = "chat",
    params(("project_id" = i64, Path)),
    request_body = MessageRequest,
    security(("bearer" = [])),
    responses(
        (status = 201, body = MessageView),
        (status = 403, body = ErrorBody, description = "CSRF"),
        (status = 429, body = ErrorBody, description = "`RATE_LIMITED`: the account's chat messages of the minute are spent (`Retry-After`)"),
    )
)]
#[post("/api/chat/{project_id}")]
pub async fn post_message(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    project_id: web::Path<i64>,
    body: web::Json<MessageRequest>,
) -> ApiResult<HttpResponse> {
    rate_limit::chat_message(&state, auth.id()).await?;
    let content = message_text(body.into_inner())?;
    let m = flow::post(&state, &caller(&auth), project_id.into_inner(), content).await?;
    Ok(HttpResponse::Created().json(MessageView::from(m)))
}

/// One message.
#[utoipa::path(
    tag = "chat",
    params(("project_id" = i64, Path), ("message_id" = i64, Path)),
    security(("bearer" = [])),
    responses((status = 200, body = MessageView))
)]
#[get("/api/chat/{project_id}/messages/{message_id}")]
pub async fn get_message(
    state: web::Data<AppState>,
    auth: AuthUser,
    path: web::Path<(i64, i64)>,
) -> ApiResult<HttpResponse> {
    let (project_id, id) = path.into_inner();
    let m = flow::get(&state, &caller(&auth), project_id, id).await?;
    Ok(HttpResponse::Ok().json(MessageView::from(m)))
}

/// The author edits their message (`edited_at` is set).
#[utoipa::path(
    tag = "chat",
    params(("project_id" = i64, Path), ("message_id" = i64, Path)),
    request_body = MessageRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, body = MessageView),
        (status = 403, body = ErrorBody, description = "`NOT_THE_AUTHOR`, or CSRF"),
        (status = 409, body = ErrorBody, description = "`MESSAGE_DELETED`"),
    )
)]
#[put("/api/chat/{project_id}/messages/{message_id}")]
pub async fn edit_message(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    path: web::Path<(i64, i64)>,
    body: web::Json<MessageRequest>,
) -> ApiResult<HttpResponse> {
    let (project_id, id) = path.into_inner();
    let content = message_text(body.into_inner())?;
    let m = flow::edit(&state, &caller(&auth), project_id, id, content).await?;
    Ok(HttpResponse::Ok().json(MessageView::from(m)))
}

/// The author or an administrator deletes a message; its tombstone is answered.
#[utoipa::path(
    tag = "chat",
    params(("project_id" = i64, Path), ("message_id" = i64, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = MessageView),
        (status = 403, body = ErrorBody, description = "`NOT_THE_AUTHOR`, or CSRF"),
        (status = 409, body = ErrorBody, description = "`MESSAGE_DELETED`"),
    )
)]
#[delete("/api/chat/{project_id}/messages/{message_id}")]
pub async fn delete_message(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    path: web::Path<(i64, i64)>,
) -> ApiResult<HttpResponse> {
    let (project_id, id) = path.into_inner();
    let m = flow::delete(&state, &caller(&auth), project_id, id).await?;
    Ok(HttpResponse::Ok().json(MessageView::from(m)))
}

/// The form of a chat upload.
#[derive(ToSchema)]
#[allow(dead_code)] // documents the multipart form only
pub struct ChatUpload {
    /// An image (JPEG, PNG, WebP, GIF), PDF, DOCX or ZIP, at most 10 MB; the type is read
    /// from the content.
    #[schema(value_type = String, format = Binary)]
    file: Vec<u8>,
}

/// Posts a file as a message (201).
#[utoipa::path(
    tag = "chat",
    params(("project_id" = i64, Path)),
    request_body(content = ChatUpload, content_type = "multipart/form-data"),
    security(("bearer" = [])),
    responses(
        (status = 201, body = MessageView),
        (status = 403, body = ErrorBody, description = "CSRF"),
        (status = 413, body = ErrorBody, description = "Larger than 10 MB"),
        (status = 415, body = ErrorBody, description = "Not an image, PDF, DOCX or ZIP"),
        (status = 422, body = ErrorBody, description = "No file part in the multipart body"),
    )
)]
#[post("/api/chat/{project_id}/files")]
pub async fn upload_file(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    project_id: web::Path<i64>,
    req: actix_web::HttpRequest,
    payload: actix_multipart::Multipart,
) -> ApiResult<HttpResponse> {
    let project_id = project_id.into_inner();
    let c = caller(&auth);
    {
        // Outsiders learn nothing, not even the size limit.
        let mut conn = state.db.conn().await?;
        flow::require_participant(conn.exec(), &c, project_id).await?;
    }
    let upload = read_document(&req, payload).await?;
    let m = flow::post_file(
        &state,
        &c,
        project_id,
        upload.doc_type,
        upload.client_name.as_deref(),
        &upload.bytes,
    )
    .await?;
    Ok(HttpResponse::Created().json(MessageView::from(m)))
}

/// Downloads a message's file: participants only, always as an attachment.
#[utoipa::path(
    tag = "chat",
    params(("project_id" = i64, Path), ("message_id" = i64, Path)),
    security(("bearer" = [])),
    responses((status = 200, description = "The file, as an attachment"))
)]
#[get("/api/chat/{project_id}/files/{message_id}")]
pub async fn download_file(
    state: web::Data<AppState>,
    auth: AuthUser,
    path: web::Path<(i64, i64)>,
) -> ApiResult<HttpResponse> {
    let (project_id, id) = path.into_inner();
    let m = flow::get(&state, &caller(&auth), project_id, id).await?;
    let not_found = || ApiError::not_found("File not found");
    let (Some(file), Some(mime)) = (m.file_path.as_deref(), m.file_mime.as_deref()) else {
        return Err(not_found());
    };
    let bytes = tokio::fs::read(state.settings.uploads_dir.join(file))
        .await
        .map_err(|_| not_found())?;
    let name = m.file_name.as_deref().unwrap_or("file");
    Ok(attachment(mime, name, bytes))
}
#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct ChatReadRequest {
    /// Read up to this message (default: the newest).
    pub up_to_message_id: Option<i64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Unread {
    pub unread: i64,
}

/// Marks the chat read (up to a message, or all of it); the caller's unread count after.
#[utoipa::path(
    tag = "chat",
    params(("project_id" = i64, Path)),
    request_body = ChatReadRequest,
    security(("bearer" = [])),
    responses((status = 200, body = Unread), (status = 403, body = ErrorBody, description = "CSRF"))
)]
#[post("/api/chat/{project_id}/mark-read")]
pub async fn mark_read(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    project_id: web::Path<i64>,
    body: Option<web::Json<ChatReadRequest>>,
) -> ApiResult<HttpResponse> {
    let up_to = body.and_then(|b| b.into_inner().up_to_message_id);
    let unread = flow::mark_read(&state, &caller(&auth), project_id.into_inner(), up_to).await?;
    Ok(HttpResponse::Ok().json(Unread { unread }))
}

/// Mounts a project's chat.
pub fn mount(cfg: &mut utoipa_actix_web::service_config::ServiceConfig) {
    cfg.service(list)
        .service(post_message)
        .service(upload_file)
        .service(download_file)
        .service(mark_read)
        .service(get_message)
        .service(edit_message)
        .service(delete_message);
}
