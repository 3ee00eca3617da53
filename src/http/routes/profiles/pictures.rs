//! Profile pictures: upload (resized, re-encoded) and the public files.

use actix_web::{HttpResponse, get, post, web};
use serde::Serialize;
use utoipa::ToSchema;

use crate::domain::profile::{self as rules};
use crate::http::auth::CsrfChecked;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::state::AppState;
use crate::workflows::profiles::{self as flow, valid_upload_name};

// ---------------------------------------------------------------------------------------
// Profile pictures
// ---------------------------------------------------------------------------------------

/// A multipart form with one image file (JPEG, PNG or WebP, at most 2 MB).
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct PictureUpload {
    #[schema(value_type = String, format = Binary)]
    pub file: Vec<u8>,
}

#[derive(Serialize, ToSchema)]
pub struct PictureView {
    /// `/api/uploads/profiles/{user_id}/{filename}`.
    pub profile_picture: String,
}

fn too_large() -> ApiError {
    ApiError::new(
        actix_web::http::StatusCode::PAYLOAD_TOO_LARGE,
        "PAYLOAD_TOO_LARGE",
        "The picture is larger than 2 MB",
    )
}

fn not_an_image() -> ApiError {
    ApiError::new(
        actix_web::http::StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "UNSUPPORTED_MEDIA_TYPE",
        "The file is not a JPEG, PNG or WebP image",
    )
}

/// The bytes of the first file part: 413 past [`rules::MAX_PICTURE_BYTES`], 422 when there
/// is no file.
async fn read_picture(payload: actix_multipart::Multipart) -> ApiResult<Vec<u8>> {
    use crate::http::multipart::{FormError, read_form};
    let malformed =
        || ApiError::invalid_field("file", "expected multipart/form-data with an image file");
    match read_form(payload, rules::MAX_PICTURE_BYTES).await {
        Ok(form) => form
            .file
            .map(|(bytes, _)| bytes)
            .filter(|b| !b.is_empty())
            .ok_or_else(malformed),
        Err(FormError::TooLarge) => Err(too_large()),
        Err(FormError::Malformed) => Err(malformed()),
    }
}

/// Pictures decoded at once, across the process.
static PICTURE_DECODES: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);

/// Uploads the caller's profile picture (experts and administrators; CSRF protected). The
/// type is read from the content; images over 25 megapixels are refused from their header,
/// images over 1024 px are scaled down, transparency is
/// flattened onto white and the result is stored as JPEG (quality 85).
#[utoipa::path(
    tag = "profiles",
    request_body(content = PictureUpload, content_type = "multipart/form-data"),
    security(("bearer" = [])),
    responses(
        (status = 200, body = PictureView),
        (status = 403, body = ErrorBody, description = "Not an expert or administrator, or CSRF"),
        (status = 404, body = ErrorBody, description = "No profile to attach it to"),
        (status = 413, body = ErrorBody, description = "Larger than 2 MB"),
        (status = 415, body = ErrorBody, description = "Not a JPEG, PNG or WebP image, or over 25 megapixels"),
        (status = 422, body = ErrorBody, description = "No file in the form"),
    )
)]
#[post("/api/profiles/me/picture")]
pub async fn upload_picture(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    req: actix_web::HttpRequest,
    payload: actix_multipart::Multipart,
) -> ApiResult<HttpResponse> {
    let target = flow::picture_target(&state, &auth.user).await?;
    if crate::http::multipart::declared_too_large(&req) {
        return Err(too_large());
    }
    let bytes = read_picture(payload).await?;
    let kind = rules::PictureKind::sniff(&bytes).ok_or_else(not_an_image)?;
    // Decodes take up to a hundred megabytes each: a few at a time, the others wait.
    let _permit = PICTURE_DECODES
        .acquire()
        .await
        .map_err(ApiError::internal)?;
    let jpeg = tokio::task::spawn_blocking(move || rules::normalise_picture(&bytes, kind))
        .await
        .map_err(ApiError::internal)?
        .map_err(|_| not_an_image())?;

    let path = flow::store_picture(&state, auth.id(), target, jpeg).await?;
    Ok(HttpResponse::Ok().json(PictureView {
        profile_picture: path,
    }))
}

/// A stored profile picture (public).
#[utoipa::path(
    tag = "profiles",
    params(("user_id" = i64, Path), ("file" = String, Path)),
    responses(
        (status = 200, description = "The JPEG image", content_type = "image/jpeg"),
        (status = 404, body = ErrorBody),
    )
)]
#[get("/api/uploads/profiles/{user_id}/{file}")]
pub async fn picture_file(
    state: web::Data<AppState>,
    path: web::Path<(i64, String)>,
) -> ApiResult<HttpResponse> {
    let (user_id, file) = path.into_inner();
    if !valid_upload_name(&file) {
        return Err(ApiError::not_found("No such file"));
    }
    let full = state
        .settings
        .uploads_dir
        .join("profiles")
        .join(user_id.to_string())
        .join(&file);
    let bytes = tokio::fs::read(&full)
        .await
        .map_err(|_| ApiError::not_found("No such file"))?;
    Ok(HttpResponse::Ok()
        .content_type("image/jpeg")
        .insert_header(("X-Content-Type-Options", "nosniff"))
        .insert_header(("Cache-Control", "public, max-age=86400"))
        .body(bytes))
}
