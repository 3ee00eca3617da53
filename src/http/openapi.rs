//! The OpenAPI document: its header, the bearer scheme, and the error answers every route
//! shares, added here once from what the operation declares (security, body, parameters)
//! instead of repeated in each route's `utoipa::path`. A route lists its own answers only:
//! success, and the refusals of its rules with their codes.

use std::collections::BTreeMap;

use utoipa::openapi::path::{Operation, ParameterIn};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, Response, ResponseBuilder};
use utoipa::{OpenApi, ToSchema as _};

use super::error::{ErrorBody, FieldError};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Expert marketplace API",
        description = "Companies post projects, experts propose milestones, payments are held in escrow and released on approval."
    ),
    components(schemas(ErrorBody, FieldError, crate::domain::search::SearchTerm)),
    modifiers(&BearerAuth)
)]
pub struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .build(),
            ),
        );
    }
}

/// The answer any API operation may give while PostgreSQL or Redis is away (`availability`).
const DEPENDENCY_AWAY: &str = "`SERVICE_UNAVAILABLE`: the database or the shared cache is away; \
     nothing was applied. `Retry-After` says when to try again";

/// Adds to every operation the error answers its extractors give, where the route did not
/// describe them itself:
/// - a bearer-secured operation: 401 (no token, a bad or expired one, or an ended session);
/// - a JSON body: 413 (over the body limit), 415 (not `application/json`), 422 (malformed or
///   invalid, with `errors`);
/// - query parameters: 422 (malformed);
/// - path parameters: 404 (unknown, not visible, or not of the parameter's type);
/// - every secured operation under `/api/admin/`: 403 for callers who are not administrators;
/// - every operation under `/api/`: 503 while a dependency is away.
///
/// Runs on the finished document: utoipa-actix-web adds the paths after `ApiDoc`'s modifiers.
pub fn complete(openapi: &mut utoipa::openapi::OpenApi) {
    for (template, item) in openapi.paths.paths.iter_mut() {
        let administrators_only = template.starts_with("/api/admin/");
        let keyed = !template.starts_with(super::idempotency::UNCOVERED_PREFIX);
        let operations = [
            (&mut item.get, false),
            (&mut item.put, true),
            (&mut item.post, true),
            (&mut item.delete, true),
            (&mut item.patch, true),
        ];
        for (operation, mutating) in operations {
            let Some(operation) = operation else { continue };
            add_shared_errors(operation, administrators_only);
            if template.starts_with("/api/") {
                operation
                    .responses
                    .responses
                    .entry("503".to_owned())
                    .or_insert_with(|| error_response(DEPENDENCY_AWAY));
            }
            if mutating && keyed && is_secured(operation) {
                add_idempotency_key(operation);
            }
            describe_answers(operation);
        }
    }
    unique_operation_ids(openapi);
    super::pushed_docs::describe(openapi);
}

/// OpenAPI requires a description on every answer: one a route left blank gets its status's
/// standard phrase.
fn describe_answers(op: &mut Operation) {
    for (status, response) in op.responses.responses.iter_mut() {
        if let RefOr::T(response) = response
            && response.description.trim().is_empty()
        {
            response.description = status
                .parse::<u16>()
                .ok()
                .and_then(|s| actix_web::http::StatusCode::from_u16(s).ok())
                .and_then(|s| s.canonical_reason())
                .unwrap_or("Answer")
                .to_owned();
        }
    }
}

/// Operation ids are unique, as OpenAPI requires and client generators rely on: a handler name
/// several modules share (`list`, `create`, …) is qualified by its path's fixed segments after
/// `/api/` that the name does not already say (`list` at `/api/admin/invitations` becomes
/// `list_admin_invitations`).
fn unique_operation_ids(openapi: &mut utoipa::openapi::OpenApi) {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for item in openapi.paths.paths.values() {
        for op in [&item.get, &item.put, &item.post, &item.delete, &item.patch]
            .into_iter()
            .flatten()
        {
            if let Some(id) = &op.operation_id {
                *seen.entry(id.clone()).or_default() += 1;
            }
        }
    }
    for (template, item) in openapi.paths.paths.iter_mut() {
        for op in [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.patch,
        ]
        .into_iter()
        .flatten()
        {
            let Some(id) = op.operation_id.as_mut() else {
                continue;
            };
            if seen.get(id.as_str()).is_some_and(|n| *n > 1) {
                *id = qualified(id, template);
            }
        }
    }
}

fn qualified(id: &str, template: &str) -> String {
    let words: Vec<&str> = id.split('_').collect();
    let mut out = id.to_owned();
    for segment in template.trim_start_matches("/api/").split('/') {
        let segment = segment.replace('-', "_");
        let said = segment.split('_').all(|w| words.contains(&w));
        if segment.is_empty() || segment.starts_with('{') || said {
            continue;
        }
        out.push('_');
        out.push_str(&segment);
    }
    out
}

fn is_secured(op: &Operation) -> bool {
    op.security.as_ref().is_some_and(|s| !s.is_empty())
}

/// The optional `Idempotency-Key` header of a mutating operation of a signed-in user
/// (`http::idempotency`), and the refusals it adds.
fn add_idempotency_key(op: &mut Operation) {
    use utoipa::openapi::Required;
    use utoipa::openapi::path::ParameterBuilder;
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    let key = crate::domain::idempotency::HEADER;
    let schema = ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .max_length(Some(crate::domain::idempotency::MAX_KEY_LEN))
        .pattern(Some("^[!-~]+$"));
    let parameter = ParameterBuilder::new()
        .name(key)
        .parameter_in(ParameterIn::Header)
        .required(Required::False)
        .description(Some(
            "Makes a retry safe: the first request with a key runs and its answer is kept \
             (24 hours by default); a retry with the same key and the same request gets that \
             answer again, marked `Idempotent-Replayed: true`, and does nothing. Keys are each \
             user's own. Answers of refused credentials, CSRF, rate limits and server errors \
             are not kept: a retry runs.",
        ))
        .schema(Some(schema))
        .build();
    op.parameters
        .get_or_insert_with(Vec::new)
        .push(RefOr::T(parameter));
    let responses = &mut op.responses.responses;
    for (status, refusal) in [
        (
            "400",
            "INVALID_MULTIPART_BOUNDARY: with a key, a `multipart/*` content type whose \
             boundary is over 70 characters (RFC 2046)",
        ),
        (
            "409",
            "IDEMPOTENCY_KEY_IN_USE: a request with this key is still running; \
             IDEMPOTENCY_KEY_INTERRUPTED: it changed data and stopped before answering",
        ),
        (
            "422",
            "IDEMPOTENCY_KEY_REUSED: the key was used for another request; or the key is not \
             1 to 255 visible characters",
        ),
    ] {
        match responses.entry(status.to_owned()) {
            std::collections::btree_map::Entry::Vacant(place) => {
                place.insert(error_response(refusal));
            }
            std::collections::btree_map::Entry::Occupied(mut place) => {
                if let RefOr::T(response) = place.get_mut() {
                    response.description = format!("{}; or {refusal}", response.description);
                }
            }
        }
    }
}

fn add_shared_errors(op: &mut Operation, administrators_only: bool) {
    let mut shared: Vec<(&str, &str)> = Vec::new();
    let secured = is_secured(op);
    if secured {
        shared.push((
            "401",
            "Not authenticated, the token invalid or expired, or the session ended",
        ));
    }
    if secured && administrators_only {
        shared.push(("403", "Administrators only"));
    }
    let json_body = matches!(&op.request_body, Some(RefOr::T(body))
        if body.content.keys().any(|c| c == "application/json"));
    if json_body {
        shared.push(("413", "The body is over the size limit"));
        shared.push(("415", "The body is not `application/json`"));
        shared.push((
            "422",
            "The body is malformed or invalid; `errors` names the fields",
        ));
    }
    let params = op.parameters.iter().flatten().filter_map(|p| match p {
        RefOr::T(p) => Some(&p.parameter_in),
        RefOr::Ref(_) => None,
    });
    let (mut query, mut path) = (false, false);
    for place in params {
        query |= matches!(place, ParameterIn::Query);
        path |= matches!(place, ParameterIn::Path);
    }
    if query {
        shared.push(("422", "A query parameter is malformed or invalid"));
    }
    if path {
        shared.push(("404", "Unknown, or not visible to the caller"));
    }
    let responses: &mut BTreeMap<String, RefOr<Response>> = &mut op.responses.responses;
    for (status, description) in shared {
        responses
            .entry(status.to_owned())
            .or_insert_with(|| error_response(description));
    }
}

/// An answer with the error body of DESIGN §6.
pub fn error_response(description: &str) -> RefOr<Response> {
    let content = ContentBuilder::new()
        .schema(Some(Ref::from_schema_name(ErrorBody::name())))
        .build();
    RefOr::T(
        ResponseBuilder::new()
            .description(description)
            .content("application/json", content)
            .build(),
    )
}
