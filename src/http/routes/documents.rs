//! Profile documents: `POST /api/profiles/upload` and the owner's (or an administrator's)
//! download. Files are kept under `UPLOADS_DIR/documents/{user_id}/` with names the service
//! chooses; they are never served publicly.

use actix_web::{HttpResponse, get, post, web};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::domain::upload::{DocumentType, MAX_DOCUMENT_BYTES};
use crate::domain::user::Role;
use crate::http::auth::{AuthUser, CsrfChecked};
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::multipart::{FormError, read_form};
use crate::state::AppState;
use crate::store::documents::{self, Document};

/// The form of an upload.
#[derive(ToSchema)]
#[allow(dead_code)] // documents the multipart form only
pub struct DocumentUpload {
    /// The file: an image (JPEG, PNG, WebP, GIF), PDF, DOCX or ZIP, at most 10 MB.
    #[schema(value_type = String, format = Binary)]
    file: Vec<u8>,
    /// `verification`, `portfolio` or `other` (default).
    kind: Option<String>,
}

#[derive(Serialize, Deserialize, ToSchema)]
pub struct DocumentView {
    pub id: i64,
    pub profile_id: Option<i64>,
    pub kind: String,
    /// The client's file name, cleaned.
    pub file_name: String,
    /// Read from the content.
    pub content_type: String,
    pub size: i64,
    /// Where the owner and administrators download it.
    pub url: String,
    pub created_at: DateTime<Utc>,
}

impl From<Document> for DocumentView {
    fn from(d: Document) -> Self {
        Self {
            url: format!("/api/profiles/documents/{}", d.id),
            id: d.id,
            profile_id: d.profile_id,
            kind: d.kind,
            file_name: d.file_name,
            content_type: d.file_mime,
            size: d.file_size,
            created_at: d.created_at,
        }
    }
}

fn too_large() -> ApiError {
    ApiError::new(
        actix_web::http::StatusCode::PAYLOAD_TOO_LARGE,
        "PAYLOAD_TOO_LARGE",
        "The file is larger than 10 MB",
    )
}

/// Uploads a document to the caller's profile (CSRF protected, 201). The type comes from the
/// content: a renamed executable is refused with 415.
#[utoipa::path(
    tag = "profiles",
    request_body(content = DocumentUpload, content_type = "multipart/form-data"),
    security(("bearer" = [])),
    responses(
        (status = 201, body = DocumentView),
        (status = 403, body = ErrorBody),
        (status = 413, body = ErrorBody, description = "Larger than 10 MB"),
        (status = 415, body = ErrorBody, description = "Not an image, PDF, DOCX or ZIP"),
        (status = 422, body = ErrorBody, description = "No file, or an unknown kind"),
    )
)]
#[post("/api/profiles/upload")]
pub async fn upload(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    req: actix_web::HttpRequest,
    payload: actix_multipart::Multipart,
) -> ApiResult<HttpResponse> {
    let upload = read_document(&req, payload).await?;
    let kind = upload.fields.get("kind").map_or("other", |k| k.trim());
    if !["verification", "portfolio", "other"].contains(&kind) {
        return Err(ApiError::invalid_field(
            "kind",
            "must be verification, portfolio or other",
        ));
    }
    let (bytes, client_name, doc_type) = (upload.bytes, upload.client_name, upload.doc_type);

    let document = crate::workflows::documents::store(
        &state,
        &auth.user,
        kind,
        doc_type,
        client_name.as_deref(),
        &bytes,
    )
    .await?;
    Ok(HttpResponse::Created().json(DocumentView::from(document)))
}

/// Downloads a document: its owner and administrators only (404 for anyone else).
#[utoipa::path(
    tag = "profiles",
    params(("document_id" = i64, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The file, as an attachment"),
        (status = 404, body = ErrorBody),
    )
)]
#[get("/api/profiles/documents/{document_id}")]
pub async fn download(
    state: web::Data<AppState>,
    auth: AuthUser,
    path: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let not_found = || ApiError::not_found("Document not found");
    let document = {
        let mut conn = state.db.conn().await?;
        documents::find(conn.exec(), path.into_inner()).await?
    }
    .filter(|d| d.user_id == auth.id() || auth.has_role(Role::Admin))
    .ok_or_else(not_found)?;
    let bytes = tokio::fs::read(state.settings.uploads_dir.join(&document.file_path))
        .await
        .map_err(|_| not_found())?;
    Ok(attachment(&document.file_mime, &document.file_name, bytes))
}

/// A document upload read and typed: the file, the client's name for it, its type from the
/// content, and the form's other fields. 413 over 10 MB, 415 outside the allowed types, 422
/// without a file.
pub(crate) struct DocumentUploadForm {
    pub bytes: Vec<u8>,
    pub client_name: Option<String>,
    pub doc_type: DocumentType,
    pub fields: std::collections::HashMap<String, String>,
}

pub(crate) async fn read_document(
    req: &actix_web::HttpRequest,
    payload: actix_multipart::Multipart,
) -> ApiResult<DocumentUploadForm> {
    if crate::http::multipart::declared_too_large(req) {
        return Err(too_large());
    }
    let malformed = || ApiError::invalid_field("file", "expected multipart/form-data with a file");
    let form = match read_form(payload, MAX_DOCUMENT_BYTES).await {
        Ok(form) => form,
        Err(FormError::TooLarge) => return Err(too_large()),
        Err(FormError::Malformed) => return Err(malformed()),
    };
    let (bytes, client_name) = form
        .file
        .filter(|(b, _)| !b.is_empty())
        .ok_or_else(malformed)?;
    let doc_type = DocumentType::sniff(&bytes).ok_or_else(|| {
        ApiError::new(
            actix_web::http::StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UNSUPPORTED_MEDIA_TYPE",
            "Only images, PDF, DOCX and ZIP files are accepted",
        )
    })?;
    Ok(DocumentUploadForm {
        bytes,
        client_name,
        doc_type,
        fields: form.fields,
    })
}

/// A stored file as a download: always an attachment (never rendered by the browser), its
/// type as detected at upload, not cached, the name reduced to safe ASCII.
pub(crate) fn attachment(mime: &str, file_name: &str, bytes: Vec<u8>) -> HttpResponse {
    let ascii_name: String = file_name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || ".-_ ".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    HttpResponse::Ok()
        .content_type(mime)
        .insert_header(("X-Content-Type-Options", "nosniff"))
        .insert_header((
            "Content-Disposition",
            format!("attachment; filename=\"{ascii_name}\""),
        ))
        .insert_header(("Cache-Control", "private, no-store"))
        .body(bytes)
}

/// Mounts the profile documents.
pub fn mount(cfg: &mut utoipa_actix_web::service_config::ServiceConfig) {
    cfg.service(upload).service(download);
}
