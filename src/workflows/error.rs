//! Why a use case refused or failed, in words the HTTP layer maps to its statuses
//! (DESIGN §6) without the workflows knowing about HTTP.

use std::borrow::Cow;

use serde::Serialize;
use utoipa::ToSchema;

use crate::store::StoreError;

/// The kind of refusal, which decides the status code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A business rule was broken (400).
    Rule,
    /// The caller may not do this (403).
    Forbidden,
    /// Unknown, or not visible to the caller (404).
    NotFound,
    /// The state does not allow it, or a duplicate (409).
    Conflict,
    /// A field of the input is invalid (422).
    Invalid,
    /// A dependency (the processor, the actor system) is unavailable (503).
    Unavailable,
}

/// One invalid field of a request.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FlowError {
    /// Fields of the input are invalid (422), each named with what is wrong.
    #[error("invalid input")]
    Invalid(Vec<FieldError>),
    #[error("{detail}")]
    Refused {
        kind: Refusal,
        code: Cow<'static, str>,
        detail: Cow<'static, str>,
        /// The field an `Invalid` refusal is about.
        field: Option<&'static str>,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

pub type FlowResult<T> = Result<T, FlowError>;

impl FlowError {
    fn refused(
        kind: Refusal,
        code: impl Into<Cow<'static, str>>,
        detail: impl Into<Cow<'static, str>>,
    ) -> Self {
        Self::Refused {
            kind,
            code: code.into(),
            detail: detail.into(),
            field: None,
        }
    }

    pub fn rule(code: impl Into<Cow<'static, str>>, detail: impl Into<Cow<'static, str>>) -> Self {
        Self::refused(Refusal::Rule, code, detail)
    }

    pub fn forbidden(detail: impl Into<Cow<'static, str>>) -> Self {
        Self::refused(Refusal::Forbidden, "FORBIDDEN", detail)
    }

    pub fn forbidden_code(
        code: impl Into<Cow<'static, str>>,
        detail: impl Into<Cow<'static, str>>,
    ) -> Self {
        Self::refused(Refusal::Forbidden, code, detail)
    }

    pub fn not_found(detail: impl Into<Cow<'static, str>>) -> Self {
        Self::refused(Refusal::NotFound, "NOT_FOUND", detail)
    }

    pub fn conflict(
        code: impl Into<Cow<'static, str>>,
        detail: impl Into<Cow<'static, str>>,
    ) -> Self {
        Self::refused(Refusal::Conflict, code, detail)
    }

    pub fn invalid(field: &'static str, message: impl Into<Cow<'static, str>>) -> Self {
        Self::Refused {
            kind: Refusal::Invalid,
            code: "VALIDATION_ERROR".into(),
            detail: message.into(),
            field: Some(field),
        }
    }

    /// One invalid field, named at run time (several: [`FlowError::Invalid`]).
    pub fn invalid_field(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Invalid(vec![FieldError::new(field, message)])
    }

    pub fn unavailable(detail: impl Into<Cow<'static, str>>) -> Self {
        Self::refused(Refusal::Unavailable, "UNAVAILABLE", detail)
    }

    /// The machine code of a refusal.
    pub fn code(&self) -> Option<&str> {
        match self {
            Self::Refused { code, .. } => Some(code),
            _ => None,
        }
    }
}

impl From<crate::integrations::cache::CacheError> for FlowError {
    fn from(err: crate::integrations::cache::CacheError) -> Self {
        Self::Internal(err.into())
    }
}

impl From<actors::ActorError> for FlowError {
    fn from(err: actors::ActorError) -> Self {
        match err {
            actors::ActorError::Unavailable => {
                Self::unavailable("The service is shutting down; try again")
            }
            actors::ActorError::Panicked => Self::Internal(anyhow::anyhow!("project actor: {err}")),
        }
    }
}
