//! `/docs`: the API reference page (Swagger UI, vendored in `assets/docs/`, see its
//! `VERSIONS`) rendering `/openapi.json`. Its files are built into the binary, so the page
//! needs no assets folder, no CDN and no network: it works offline and under a strict
//! Content-Security-Policy. On unless `APP_ENV=production`; `ENABLE_API_DOCS` decides
//! (404 when off).

use actix_web::{HttpResponse, get, web};
use utoipa_actix_web::service_config::ServiceConfig;

use crate::http::error::{ApiError, ApiResult};
use crate::state::AppState;

/// Scripts and styles from this origin only; `data:` images for the icons the stylesheet
/// draws; nothing inline, nothing evaluated, no framing.
const POLICY: &str = "default-src 'self'; img-src 'self' data:; object-src 'none'; \
                      base-uri 'none'; frame-ancestors 'none'";

/// The page's files: name, content type, bytes.
const FILES: [(&str, &str, &[u8]); 4] = [
    (
        "index.html",
        "text/html; charset=utf-8",
        include_bytes!("../../../assets/docs/index.html"),
    ),
    (
        "docs.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../../assets/docs/docs.js"),
    ),
    (
        "swagger-ui-bundle.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../../assets/docs/swagger-ui-bundle.js"),
    ),
    (
        "swagger-ui.css",
        "text/css; charset=utf-8",
        include_bytes!("../../../assets/docs/swagger-ui.css"),
    ),
];

fn serve(state: &AppState, name: &str) -> ApiResult<HttpResponse> {
    let file = FILES
        .iter()
        .find(|(file, _, _)| *file == name)
        .filter(|_| state.settings.enable_api_docs);
    let Some((_, content_type, bytes)) = file else {
        return Err(ApiError::not_found("No such page"));
    };
    Ok(HttpResponse::Ok()
        .content_type(*content_type)
        .insert_header(("Content-Security-Policy", POLICY))
        // The files change only with the binary.
        .insert_header(("Cache-Control", "public, max-age=3600"))
        .body(*bytes))
}

/// The API reference page (HTML). 404 where `ENABLE_API_DOCS` is off (production's default).
#[utoipa::path(
    tag = "system",
    responses(
        (status = 200, description = "The reference page", content_type = "text/html"),
        (status = 404, description = "The page is off on this instance", body = crate::http::error::ErrorBody),
    )
)]
#[get("/docs")]
pub async fn page(state: web::Data<AppState>) -> ApiResult<HttpResponse> {
    serve(&state, "index.html")
}

/// A file of the reference page: `docs.js`, `swagger-ui-bundle.js` or `swagger-ui.css`.
#[utoipa::path(
    tag = "system",
    params(("file" = String, Path, description = "The file's name")),
    responses(
        (status = 200, description = "The file (JavaScript or CSS)", content_type = "text/javascript"),
        (status = 404, description = "No such file, or the page is off", body = crate::http::error::ErrorBody),
    )
)]
#[get("/docs/{file}")]
pub async fn asset(state: web::Data<AppState>, file: web::Path<String>) -> ApiResult<HttpResponse> {
    match file.as_str() {
        "index.html" => Err(ApiError::not_found("No such file")),
        name => serve(&state, name),
    }
}

pub fn mount(cfg: &mut ServiceConfig) {
    cfg.service(page).service(asset);
}
