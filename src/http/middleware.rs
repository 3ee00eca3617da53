//! Request-wide middleware: request id, tracing span, access log and metrics.

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::middleware::Next;
use actix_web::{Error, HttpMessage as _, web};
use std::time::Instant;
use tracing::Instrument as _;

use crate::state::AppState;

pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// The id of the current request, readable by handlers through request extensions.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

/// Gives every request an id (the caller's `X-Request-ID` when it is a sane token, else a fresh
/// one), runs it inside a span carrying that id, and records status and latency.
///
/// The span holds the path but never the query string: some links carry tokens there.
pub async fn request_context(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, Error> {
    let request_id = req
        .headers()
        .get(REQUEST_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|v| {
            !v.is_empty()
                && v.len() <= 64
                && v.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        })
        .map(str::to_owned)
        .unwrap_or_else(|| crate::domain::token::random_token(12));
    req.extensions_mut().insert(RequestId(request_id.clone()));

    let method = req.method().to_string();
    let span = tracing::info_span!(
        "request",
        request_id = %request_id,
        method = %method,
        path = %req.path(),
    );
    let metrics = req
        .app_data::<web::Data<AppState>>()
        .map(|state| state.http_metrics.clone());
    let started = Instant::now();

    let result = next.call(req).instrument(span.clone()).await;
    let elapsed = started.elapsed();

    let (status, route) = match &result {
        Ok(res) => (
            res.status().as_u16(),
            res.request()
                .match_pattern()
                .unwrap_or_else(|| "unmatched".into()),
        ),
        Err(err) => (
            err.as_response_error().status_code().as_u16(),
            "unmatched".to_owned(),
        ),
    };
    if let Some(metrics) = metrics {
        metrics.observe(&method, &route, status, elapsed);
    }
    span.in_scope(|| {
        tracing::info!(
            status,
            latency_ms = elapsed.as_secs_f64() * 1000.0,
            route = %route,
            "request finished"
        );
    });

    let mut res = result?;
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        res.headers_mut()
            .insert(HeaderName::from_static(REQUEST_ID_HEADER), value);
    }
    Ok(res)
}
