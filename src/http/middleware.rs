//! Request-wide middleware: request id, tracing span, access log and metrics.

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::middleware::Next;
use actix_web::{Error, HttpMessage as _, web};
use futures_util::FutureExt as _;
use std::panic::AssertUnwindSafe;
use std::time::Instant;
use tracing::Instrument as _;

use crate::http::error::ApiError;
use crate::http::metrics::{HttpMetrics, OTHER_METHOD};

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
) -> Result<ServiceResponse<BoxBody>, Error> {
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

    let method = crate::http::metrics::method_label(req.method());
    let credentialed = req
        .headers()
        .contains_key(actix_web::http::header::AUTHORIZATION)
        || req.headers().contains_key(actix_web::http::header::COOKIE)
        || req.path().starts_with("/api/auth/");
    let span = tracing::info_span!(
        "request",
        request_id = %request_id,
        method = %method,
        path = %req.path(),
    );
    let client = crate::http::client_ip::client_ip(req.request());
    let metrics = req.app_data::<web::Data<HttpMetrics>>().cloned();
    let started = Instant::now();

    // A panicking handler is answered 500 in the error shape (the server renders an `Err`
    // through `ApiError`) instead of dropping the connection; the panic hook (telemetry) has
    // logged where it happened. The request cannot be kept aside for the answer: routing
    // needs it unshared.
    //
    // A method HTTP does not define is answered at once, before the limiters, routing and
    // body, as the router would answer it (405 with `Allow` at a route's address, else 404):
    // no route takes one. Not 501: that would read as the server failing, to clients and to
    // the 5xx alerts alike.
    let result = if method == OTHER_METHOD {
        let answer = match req.app_data::<web::Data<crate::http::KnownRoutes>>() {
            Some(routes) => crate::http::unrouted(req.path(), routes),
            None => actix_web::HttpResponse::MethodNotAllowed().finish(),
        };
        Ok(req.into_response(answer))
    } else {
        match AssertUnwindSafe(next.call(req).instrument(span.clone()))
            .catch_unwind()
            .await
        {
            Ok(result) => result.map(ServiceResponse::map_into_boxed_body),
            Err(_) => Err(ApiError::internal(anyhow::anyhow!("a handler panicked")).into()),
        }
    };
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
        metrics.observe(method, &route, status, elapsed);
    }
    span.in_scope(|| {
        tracing::info!(
            status,
            latency_ms = elapsed.as_secs_f64() * 1000.0,
            route = %route,
            client = client.map(|ip| ip.to_string()).unwrap_or_default(),
            "request finished"
        );
    });

    let mut res = result?;
    // A draining instance ends each connection after its answer, so keep-alive connections
    // (a load balancer's among them) are gone by the time it stops listening.
    if res
        .request()
        .app_data::<web::Data<crate::state::AppState>>()
        .is_some_and(|state| state.readiness.is_draining())
    {
        res.response_mut()
            .head_mut()
            .set_connection_type(actix_web::http::ConnectionType::Close);
    }
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        res.headers_mut()
            .insert(HeaderName::from_static(REQUEST_ID_HEADER), value);
    }
    secure_headers(&mut res, credentialed);
    Ok(res)
}

/// Headers every answer carries: no content sniffing, no referrer leaving the site, no
/// framing; and, for a request that carried credentials, no caching of what it answered
/// (tokens, personal data) unless the route said otherwise.
fn secure_headers<B>(res: &mut ServiceResponse<B>, credentialed: bool) {
    use actix_web::http::header;
    let headers = res.headers_mut();
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    if credentialed && !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
}

#[cfg(test)]
mod tests {
    use actix_web::dev::Service as _;
    use actix_web::middleware::from_fn;
    use actix_web::{App, HttpResponse, test, web};

    #[actix_web::test]
    async fn a_panicking_handler_is_answered_500_in_the_error_shape() {
        let app = test::init_service(
            App::new()
                .route(
                    "/boom",
                    web::get().to(|| async {
                        if true {
                            panic!("handler bug");
                        }
                        HttpResponse::Ok().finish()
                    }),
                )
                .route("/fine", web::get().to(HttpResponse::Ok))
                .wrap(from_fn(super::request_context)),
        )
        .await;
        // The server answers a service's error with the error's own response.
        let Err(error) = app
            .call(test::TestRequest::get().uri("/boom").to_request())
            .await
        else {
            panic!("a panic must not pass as an answer");
        };
        let response = error.error_response();
        assert_eq!(response.status(), 500);
        let body = actix_web::body::to_bytes(response.into_body())
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["code"], "INTERNAL_ERROR");
        assert!(
            !body.to_string().contains("handler bug"),
            "the panic stays private"
        );
        // The worker keeps serving.
        let response =
            test::call_service(&app, test::TestRequest::get().uri("/fine").to_request()).await;
        assert_eq!(response.status(), 200);
    }
}
