//! Bodies read as bytes under a limit, refused past it in the error shape (413) without
//! reading further: the signed webhooks (their signature covers the bytes as sent) and the
//! JSON bodies the text guard scans.

use actix_web::dev::Payload;
use actix_web::http::{StatusCode, header};
use actix_web::web::{Bytes, BytesMut};
use actix_web::{FromRequest, HttpRequest};
use futures_util::StreamExt as _;
use std::future::Future;
use std::pin::Pin;

use super::error::ApiError;

/// The largest signed webhook body (the processor's and the CRM's events are a few KiB).
pub const SIGNED_BODY_LIMIT: usize = 256 * 1024;

/// Reads `payload` whole, or refuses once it is known to pass `limit`: from the declared
/// `Content-Length` before reading anything, else as soon as the bytes read cross it.
pub async fn read_limited(
    req: &HttpRequest,
    payload: &mut Payload,
    limit: usize,
) -> Result<Bytes, ApiError> {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    let mut body = BytesMut::with_capacity(declared.unwrap_or(0));
    while let Some(chunk) = payload.next().await {
        let chunk =
            chunk.map_err(|e| ApiError::invalid_field("body", format!("unreadable body: {e}")))?;
        if body.len() + chunk.len() > limit {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

pub fn too_large() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "PAYLOAD_TOO_LARGE",
        "The request body is too large",
    )
}

/// The bytes of a signed webhook, at most [`SIGNED_BODY_LIMIT`].
pub struct SignedBody(pub Bytes);

impl FromRequest for SignedBody {
    type Error = ApiError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, ApiError>>>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let req = req.clone();
        let mut payload = payload.take();
        Box::pin(async move {
            read_limited(&req, &mut payload, SIGNED_BODY_LIMIT)
                .await
                .map(SignedBody)
        })
    }
}
