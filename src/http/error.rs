//! The one error type of the HTTP layer and its body (DESIGN §6):
//! `{"detail": "<sentence for a person>", "code": "<MACHINE_CODE>"}`, validation adds
//! `"errors": [{"field", "message"}]`, 429 carries `Retry-After`.

use actix_web::http::StatusCode;
use actix_web::http::header::{HeaderValue, RETRY_AFTER};
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;
use std::borrow::Cow;
use utoipa::ToSchema;

use crate::store::StoreError;

pub use crate::workflows::error::FieldError;

/// The error body every failing request answers with.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// A sentence for a person.
    #[schema(example = "Project not found")]
    pub detail: String,
    /// A stable machine code.
    #[schema(example = "NOT_FOUND")]
    pub code: String,
    /// Present on validation errors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errors: Option<Vec<FieldError>>,
}

#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: Cow<'static, str>,
    detail: Cow<'static, str>,
    errors: Option<Vec<FieldError>>,
    retry_after: Option<u64>,
    /// The cause of an internal error: logged, never sent.
    cause: Option<anyhow::Error>,
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn new(
        status: StatusCode,
        code: impl Into<Cow<'static, str>>,
        detail: impl Into<Cow<'static, str>>,
    ) -> Self {
        Self {
            status,
            code: code.into(),
            detail: detail.into(),
            errors: None,
            retry_after: None,
            cause: None,
        }
    }

    /// 400: a business rule was broken.
    pub fn bad_request(
        code: impl Into<Cow<'static, str>>,
        detail: impl Into<Cow<'static, str>>,
    ) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, detail)
    }

    /// 401: not authenticated, or the session is gone.
    pub fn unauthorized(
        code: impl Into<Cow<'static, str>>,
        detail: impl Into<Cow<'static, str>>,
    ) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, code, detail)
    }

    /// 403: authenticated but not allowed.
    pub fn forbidden(detail: impl Into<Cow<'static, str>>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "FORBIDDEN", detail)
    }

    /// 404: unknown, or not visible to the caller.
    pub fn not_found(detail: impl Into<Cow<'static, str>>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "NOT_FOUND", detail)
    }

    /// 409: a state conflict or a duplicate.
    pub fn conflict(
        code: impl Into<Cow<'static, str>>,
        detail: impl Into<Cow<'static, str>>,
    ) -> Self {
        Self::new(StatusCode::CONFLICT, code, detail)
    }

    /// 422: malformed or invalid input, field by field.
    pub fn validation(errors: Vec<FieldError>) -> Self {
        let detail = match errors.as_slice() {
            [one] => format!("{}: {}", one.field, one.message),
            _ => "The request has invalid fields".to_owned(),
        };
        Self {
            errors: Some(errors),
            ..Self::new(StatusCode::UNPROCESSABLE_ENTITY, "VALIDATION_ERROR", detail)
        }
    }

    /// 422 for one field.
    pub fn invalid_field(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::validation(vec![FieldError::new(field, message)])
    }

    /// 429 with `Retry-After` in seconds.
    pub fn too_many_requests(retry_after_secs: u64) -> Self {
        Self {
            retry_after: Some(retry_after_secs.max(1)),
            ..Self::new(
                StatusCode::TOO_MANY_REQUESTS,
                "RATE_LIMITED",
                "Too many requests; try again later",
            )
        }
    }

    /// 500: the cause is logged with the request's span, the client sees a generic sentence.
    /// A cause that is an outage of the database or the cache, wherever a layer wrapped it, is
    /// answered 503 [`ApiError::dependency_away`] instead: not a fault of the service.
    pub fn internal(cause: impl Into<anyhow::Error>) -> Self {
        let cause = cause.into();
        if dependency_away(&cause) {
            tracing::warn!(error = %format!("{cause:#}"), "refused: a dependency is unavailable");
            return Self::dependency_away();
        }
        Self {
            cause: Some(cause),
            ..Self::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "INTERNAL_ERROR",
                "Internal server error",
            )
        }
    }

    /// 503: a dependency is unavailable.
    pub fn unavailable(detail: impl Into<Cow<'static, str>>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE", detail)
    }

    /// 503 `SERVICE_UNAVAILABLE`: the database or the shared cache is away; answered at once,
    /// with `Retry-After`, and nothing of the request was applied.
    pub fn dependency_away() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "SERVICE_UNAVAILABLE",
            "The service cannot reach a store it needs; nothing was changed, try again shortly",
        )
        .with_retry_after(crate::availability::RETRY_AFTER_SECS)
    }

    pub fn with_retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs.max(1));
        self
    }

    pub fn code(&self) -> &str {
        &self.code
    }

    /// The body this error answers with (an internal error's cause is never in it).
    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            detail: self.detail.to_string(),
            code: self.code.to_string(),
            errors: self.errors.clone(),
        }
    }

    /// What went wrong inside, for the log only.
    pub fn cause(&self) -> Option<&anyhow::Error> {
        self.cause.as_ref()
    }
}

/// Whether `cause` is, or wraps, the database or the cache being unavailable.
fn dependency_away(cause: &anyhow::Error) -> bool {
    use crate::integrations::cache::CacheError;
    cause.chain().any(|error| {
        error
            .downcast_ref::<StoreError>()
            .is_some_and(StoreError::is_unavailable)
            || error
                .downcast_ref::<CacheError>()
                .is_some_and(CacheError::is_unavailable)
            || error
                .downcast_ref::<sqlx::Error>()
                .is_some_and(crate::store::connection_lost)
    })
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.status.as_u16(), self.code, self.detail)
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.status
    }

    fn error_response(&self) -> HttpResponse {
        if let Some(cause) = &self.cause {
            tracing::error!(error = %format!("{cause:#}"), "request failed");
        }
        let mut response = HttpResponse::build(self.status);
        if let Some(secs) = self.retry_after
            && let Ok(value) = HeaderValue::from_str(&secs.to_string())
        {
            response.insert_header((RETRY_AFTER, value));
        }
        response.json(self.body())
    }
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> Self {
        if matches!(err, StoreError::KeyTakenOver) {
            return Self::conflict(
                "IDEMPOTENCY_KEY_IN_USE",
                "Another request with this Idempotency-Key holds it now",
            );
        }
        if err.is_retryable() {
            return Self::unavailable("The service is busy; try again").with_retry_after(1);
        }
        if err.is_timeout() {
            tracing::warn!(error = %err, "a statement ran past the database's statement timeout");
            return Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "QUERY_TIMEOUT",
                "The database took too long to answer; narrow the request (filters, a smaller page) or try again later",
            );
        }
        // The last answer, after the refusals above: an outage becomes 503 there.
        Self::internal(err)
    }
}

impl From<crate::workflows::error::FlowError> for ApiError {
    fn from(err: crate::workflows::error::FlowError) -> Self {
        use crate::workflows::error::{FlowError, Refusal};
        match err {
            FlowError::Refused {
                kind,
                code,
                detail,
                field,
            } => match kind {
                Refusal::Invalid => Self::invalid_field(field.unwrap_or("body"), detail),
                Refusal::Rule => Self::bad_request(code, detail),
                Refusal::Forbidden => Self::new(StatusCode::FORBIDDEN, code, detail),
                Refusal::NotFound => Self::new(StatusCode::NOT_FOUND, code, detail),
                Refusal::Conflict => Self::conflict(code, detail),
                Refusal::Unavailable => Self::unavailable(detail).with_retry_after(1),
            },
            FlowError::Invalid(errors) => Self::validation(errors),
            FlowError::Store(err) => err.into(),
            FlowError::Internal(err) => Self::internal(err),
        }
    }
}

impl From<crate::integrations::cache::CacheError> for ApiError {
    fn from(err: crate::integrations::cache::CacheError) -> Self {
        // An outage becomes 503 there, as every cause does.
        Self::internal(err)
    }
}

/// Turns actix's body/query/path extraction failures into the error shape above.
pub mod extract {
    use super::{ApiError, FieldError};
    use actix_web::error::{JsonPayloadError, PathError, QueryPayloadError};
    use actix_web::{HttpRequest, web};

    /// The largest JSON body any route reads.
    pub const JSON_BODY_LIMIT: usize = 1024 * 1024;

    pub fn json_config() -> web::JsonConfig {
        web::JsonConfig::default()
            .limit(JSON_BODY_LIMIT)
            .error_handler(|err, _req: &HttpRequest| {
                let error = match &err {
                    JsonPayloadError::ContentType => ApiError::new(
                        actix_web::http::StatusCode::UNSUPPORTED_MEDIA_TYPE,
                        "UNSUPPORTED_MEDIA_TYPE",
                        "Expected a JSON body (Content-Type: application/json)",
                    ),
                    JsonPayloadError::Overflow { .. }
                    | JsonPayloadError::OverflowKnownLength { .. } => ApiError::new(
                        actix_web::http::StatusCode::PAYLOAD_TOO_LARGE,
                        "PAYLOAD_TOO_LARGE",
                        "The request body is too large",
                    ),
                    JsonPayloadError::Deserialize(e) => {
                        ApiError::validation(vec![FieldError::new(
                            field_of(&e.to_string(), "body"),
                            e.to_string(),
                        )])
                    }
                    other => ApiError::validation(vec![FieldError::new("body", other.to_string())]),
                };
                error.into()
            })
    }

    pub fn query_config() -> web::QueryConfig {
        web::QueryConfig::default().error_handler(|err: QueryPayloadError, _req| {
            let message = err.to_string();
            ApiError::validation(vec![FieldError::new(field_of(&message, "query"), message)]).into()
        })
    }

    pub fn path_config() -> web::PathConfig {
        web::PathConfig::default().error_handler(|_err: PathError, _req| {
            ApiError::not_found("No resource at this address").into()
        })
    }

    /// serde names the offending field in its message (`missing field \`x\``,
    /// `unknown variant` …); pick it out when it is there.
    fn field_of(message: &str, fallback: &str) -> String {
        message
            .split('`')
            .nth(1)
            .filter(|_| message.contains("field"))
            .unwrap_or(fallback)
            .to_owned()
    }
}
