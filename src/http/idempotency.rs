//! `Idempotency-Key` at the edge (`domain::idempotency`, `workflows::idempotency`): a
//! mutating request of an authenticated user that names a key takes it before its route runs,
//! runs holding it, and leaves its answer for the repeats; a repeat gets that answer again
//! with `Idempotent-Replayed: true`, or a refusal. The session routes (`/api/auth/…`) are
//! not covered: their answers carry credentials, which are never stored, and each is safe
//! to repeat.
//!
//! A request with no valid bearer token goes on untouched: its route refuses it (401), and
//! its key is neither taken nor spent.

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{Payload, ServiceRequest, ServiceResponse};
use actix_web::http::{StatusCode, header};
use actix_web::middleware::Next;
use actix_web::web::Bytes;
use actix_web::{Error, HttpMessage as _, HttpResponse, ResponseError as _, web};

use super::auth::{AuthUser, Authenticated};
use super::error::ApiError;
use super::raw_body::read_limited;
use super::{DeclaredBody, KnownRoutes};
use crate::domain::idempotency::{self as rules, Repeat};
use crate::state::AppState;
use crate::store::idempotency::{Answer, Claim, KeptKey, carry};
use crate::workflows::idempotency::{self as keys, Start};

/// Paths whose operations take no key (see the module's comment).
pub const UNCOVERED_PREFIX: &str = "/api/auth/";

pub async fn idempotent(
    mut req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, Error> {
    let Some(raw_key) = req.headers().get(rules::HEADER).cloned() else {
        return pass(req, next).await;
    };
    if !rules::applies_to(req.method().as_str()) || req.path().starts_with(UNCOVERED_PREFIX) {
        return pass(req, next).await;
    }
    let Some(state) = req.app_data::<web::Data<AppState>>().cloned() else {
        return pass(req, next).await;
    };
    let Some(caller) = caller(&state, &req).await else {
        return pass(req, next).await;
    };
    let user_id = caller.id();
    // The route's `AuthUser` takes this one rather than checking the token again.
    req.extensions_mut().insert(Authenticated(caller));
    let key = match rules::parse_key(raw_key.as_bytes()) {
        Ok(key) => key.to_owned(),
        Err(invalid) => {
            return Ok(refuse(
                req,
                ApiError::invalid_field(rules::HEADER, invalid.to_string()),
            ));
        }
    };
    let fingerprint = match fingerprint(&mut req).await {
        Ok(fingerprint) => fingerprint,
        Err(refusal) => return Ok(refuse(req, refusal)),
    };

    let start = match keys::start(&state, user_id, &key, &fingerprint).await {
        Ok(start) => start,
        Err(error) => return Ok(refuse(req, error.into())),
    };
    match start {
        Start::Run(claim) => run(&state, claim, req, next).await,
        Start::Replay(kept) => Ok(req.into_response(replay(kept))),
        Start::Refuse(repeat) => Ok(refuse(req, refusal(repeat))),
    }
}

/// Bodies up to this size are fingerprinted where they were read; a larger one is hashed on
/// the blocking pool, so a 16 MiB upload never holds the worker that serves other requests.
const INLINE_FINGERPRINT_BYTES: usize = 64 * 1024;

/// The request's fingerprint (`domain::idempotency::fingerprint`), over the body its route
/// accepts and no more: a route that declares no body has none read (the route ignores it, so
/// it is no part of the request), a JSON route at most the JSON limit, an upload at most the
/// uploads' limit (413 past it). The bytes read are handed on to the route.
async fn fingerprint(req: &mut ServiceRequest) -> Result<String, ApiError> {
    let content_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    // Refused before any byte of the body is read.
    rules::multipart_boundary(&content_type).map_err(long_boundary)?;
    let declared = req
        .app_data::<web::Data<KnownRoutes>>()
        .map_or(DeclaredBody::None, |routes| {
            routes.body_of(req.method().as_str(), req.path())
        });
    let body = match declared {
        DeclaredBody::None => Bytes::new(),
        _ => {
            let (http_req, payload) = req.parts_mut();
            let body = read_limited(http_req, payload, declared.limit()).await?;
            req.set_payload(Payload::from(body.clone()));
            body
        }
    };
    let (method, path, query) = (
        req.method().as_str().to_owned(),
        req.path().to_owned(),
        req.query_string().to_owned(),
    );
    let inline = body.len() <= INLINE_FINGERPRINT_BYTES;
    let print = move || rules::fingerprint(&method, &path, &query, &content_type, &body);
    let printed = if inline {
        print()
    } else {
        web::block(print)
            .await
            .map_err(|e| ApiError::internal(anyhow::anyhow!("fingerprint not computed: {e}")))?
    };
    printed.map_err(long_boundary)
}

fn long_boundary(error: rules::LongBoundary) -> ApiError {
    ApiError::bad_request("INVALID_MULTIPART_BOUNDARY", error.to_string())
}

/// The caller, when the request carries a valid access token of a live session.
async fn caller(state: &AppState, req: &ServiceRequest) -> Option<AuthUser> {
    let token = super::auth::bearer_token(req.request())?;
    let (claims, session, user) = crate::workflows::auth::authenticate(state, &token)
        .await
        .ok()?;
    Some(AuthUser {
        user,
        claims,
        session,
    })
}

async fn pass(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, Error> {
    Ok(next.call(req).await?.map_into_boxed_body())
}

/// Runs the request holding `claim`, then keeps its answer or lets the key go.
async fn run(
    state: &AppState,
    claim: Claim,
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, Error> {
    let res = match carry(Some(claim.clone()), next.call(req)).await {
        Ok(res) => res,
        Err(error) => {
            keys::finish(state, &claim, None).await;
            return Err(error);
        }
    };
    let status = res.status().as_u16();
    if !rules::keeps_answer(status, None) {
        keys::finish(state, &claim, None).await;
        return Ok(res.map_into_boxed_body());
    }
    let (http_req, response) = res.into_parts();
    let (head, body) = response.into_parts();
    let body = match actix_web::body::to_bytes(body).await {
        Ok(body) => body,
        Err(error) => {
            keys::finish(state, &claim, None).await;
            let error: Box<dyn std::error::Error> = error.into();
            let error = ApiError::internal(anyhow::anyhow!("unreadable answer: {error}"));
            return Ok(ServiceResponse::new(http_req, error.error_response()));
        }
    };
    // An answer that sets a cookie carries credentials: never stored.
    let keep = !head.headers().contains_key(header::SET_COOKIE)
        && rules::keeps_answer(status, error_code(status, &body).as_deref());
    let answer = keep.then(|| Answer {
        status,
        content_type: header_text(&head, header::CONTENT_TYPE),
        location: header_text(&head, header::LOCATION),
        body: &body,
    });
    keys::finish(state, &claim, answer).await;
    let response = head.set_body(body).map_into_boxed_body();
    Ok(ServiceResponse::new(http_req, response))
}

fn header_text(res: &HttpResponse<()>, name: header::HeaderName) -> Option<&str> {
    res.headers().get(name).and_then(|v| v.to_str().ok())
}

/// The `code` of an error body (DESIGN §6).
fn error_code(status: u16, body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Coded {
        code: Option<String>,
    }
    (status >= 400)
        .then(|| serde_json::from_slice::<Coded>(body).ok())
        .flatten()
        .and_then(|b| b.code)
}

/// The first run's answer, again.
fn replay(kept: KeptKey) -> HttpResponse {
    let status = kept
        .status
        .and_then(|s| u16::try_from(s).ok())
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(StatusCode::OK);
    let mut res = HttpResponse::build(status);
    res.insert_header((rules::REPLAYED_HEADER, "true"));
    if let Some(content_type) = kept.content_type {
        res.insert_header((header::CONTENT_TYPE, content_type));
    }
    if let Some(location) = kept.location {
        res.insert_header((header::LOCATION, location));
    }
    res.body(kept.body.unwrap_or_default())
}

fn refusal(repeat: Repeat) -> ApiError {
    match repeat {
        Repeat::Reused => ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "IDEMPOTENCY_KEY_REUSED",
            "This Idempotency-Key was used for another request; use a new key",
        ),
        Repeat::Interrupted => ApiError::conflict(
            "IDEMPOTENCY_KEY_INTERRUPTED",
            "The request with this Idempotency-Key changed data, then stopped before it \
             answered; read the resource to see where it stands, and use a new key to try again",
        ),
        Repeat::InUse | Repeat::Replay | Repeat::TakeOver => ApiError::conflict(
            "IDEMPOTENCY_KEY_IN_USE",
            "A request with this Idempotency-Key is still running; retry when it has answered",
        ),
    }
}

fn refuse(req: ServiceRequest, error: ApiError) -> ServiceResponse<BoxBody> {
    req.into_response(error.error_response())
}
