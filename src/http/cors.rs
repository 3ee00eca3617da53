//! Cross-origin requests: only the front end (`FRONTEND_URL`) may call the API from a
//! browser, with its cookies. Any other origin's preflight is refused and its answers carry
//! no `Access-Control-Allow-Origin`, so the browser withholds them from the page.

use actix_cors::Cors;
use actix_web::http::{Method, header};

use super::auth::CSRF_HEADER;

pub fn allow_list(frontend_url: &str) -> Cors {
    Cors::default()
        .allowed_origin(&origin_of(frontend_url))
        .allowed_methods([
            Method::GET,
            Method::POST,
            Method::PUT,
            Method::PATCH,
            Method::DELETE,
        ])
        .allowed_headers([
            "authorization",
            "content-type",
            "accept",
            CSRF_HEADER,
            "x-session-id",
            "x-request-id",
        ])
        .expose_headers([
            header::HeaderName::from_static("x-request-id"),
            header::RETRY_AFTER,
        ])
        .supports_credentials()
        .max_age(600)
        // Other origins' simple requests are answered as usual but without CORS headers:
        // the browser hides the answer from their page, and non-browser clients are unaffected.
        .block_on_origin_mismatch(false)
}

/// `scheme://host[:port]` of a URL, as browsers send it in `Origin`.
fn origin_of(url: &str) -> String {
    url::Url::parse(url)
        .map(|u| u.origin().ascii_serialization())
        .unwrap_or_else(|_| url.trim_end_matches('/').to_owned())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_origin_drops_path_and_keeps_port() {
        assert_eq!(
            super::origin_of("https://app.example.com/x/"),
            "https://app.example.com"
        );
        assert_eq!(
            super::origin_of("http://localhost:3000"),
            "http://localhost:3000"
        );
    }
}
