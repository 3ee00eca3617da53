//! Refuses forbidden characters (`domain::text`) in the address and in JSON bodies before any
//! handler runs. The rule itself is the domain's `Text` types, parsed once at the edge of REST
//! and WebSocket alike; this is the second net, for every field that is still a plain string
//! (names, searches, labels), so nothing with a NUL or a bidirectional override reaches the
//! store through HTTP.

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{Payload, ServiceRequest, ServiceResponse};
use actix_web::http::{Method, header};
use actix_web::middleware::Next;
use actix_web::{Error, ResponseError as _};

use super::error::{ApiError, extract::JSON_BODY_LIMIT};
use super::raw_body::read_limited;
use crate::domain::text;

/// Signed bodies are checked by their own routes (raw bytes under a signature, with their own
/// smaller limit) and never stored as free text.
const SIGNED_ROUTES: [&str; 2] = ["/api/payments/webhooks/processor", "/api/webhooks/crm"];

pub async fn refuse_forbidden_text(
    mut req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, Error> {
    if forbidden_in_path(&req) {
        // No resource is named so: the same answer as any path parameter of the wrong form.
        let error = ApiError::not_found("No resource at this address");
        return Ok(req.into_response(error.error_response()));
    }
    if let Some(c) = req.uri().query().and_then(forbidden_in) {
        return Ok(refuse(req, "query", c));
    }
    if carries_json(&req) && !SIGNED_ROUTES.contains(&req.path()) {
        let (http_req, payload) = req.parts_mut();
        let body = match read_limited(&*http_req, payload, JSON_BODY_LIMIT).await {
            Ok(body) => body,
            Err(refusal) => return Ok(req.into_response(refusal.error_response())),
        };
        if let Some(c) = text::first_forbidden_in_json(&body) {
            return Ok(refuse(req, "body", c));
        }
        req.set_payload(Payload::from(body));
    }
    Ok(next.call(req).await?.map_into_boxed_body())
}

fn carries_json(req: &ServiceRequest) -> bool {
    matches!(*req.method(), Method::POST | Method::PUT | Method::PATCH)
        && req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                let essence = v.split(';').next().unwrap_or_default().trim();
                essence.eq_ignore_ascii_case("application/json") || essence.ends_with("+json")
            })
}

/// Whether the path, percent-decoded as the router will, holds a forbidden character.
fn forbidden_in_path(req: &ServiceRequest) -> bool {
    forbidden_in(req.uri().path()).is_some()
}

/// The first forbidden character of a path or query string, percent-decoded.
fn forbidden_in(raw: &str) -> Option<char> {
    // Plain ASCII without escapes cannot hold a control character (HTTP refuses them raw).
    if raw.is_ascii() && !raw.contains('%') {
        return None;
    }
    url::form_urlencoded::parse(raw.as_bytes())
        .flat_map(|(k, v)| [k, v])
        .find_map(|part| text::first_forbidden(&part))
}

fn refuse(req: ServiceRequest, part: &'static str, c: char) -> ServiceResponse<BoxBody> {
    let message = text::TextError::Forbidden(c).to_string();
    req.into_response(ApiError::invalid_field(part, message).error_response())
}
