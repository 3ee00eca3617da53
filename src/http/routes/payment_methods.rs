//! The processor's publishable key and a company's saved cards (`/api/payments/public-key`,
//! `/api/payments/saved-methods*`, `/api/payments/attach-method`).

use actix_web::{HttpResponse, delete, get, post, web};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::domain::user::Role;
use crate::http::auth::{AuthUser, CsrfChecked};
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::integrations::processor::types::PaymentMethod;
use crate::state::AppState;
use crate::workflows::payment_methods as flow;

#[derive(Serialize, Deserialize, ToSchema)]
pub struct PublicKeyView {
    /// For the browser's card form.
    #[schema(example = "pk_test_sandbox")]
    pub publishable_key: String,
}

/// A saved card.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct SavedMethodView {
    /// The payment method (`pm_…`).
    pub id: String,
    #[schema(example = "visa")]
    pub brand: Option<String>,
    #[schema(example = "4242")]
    pub last4: Option<String>,
    pub exp_month: Option<u32>,
    pub exp_year: Option<i32>,
}

impl From<PaymentMethod> for SavedMethodView {
    fn from(m: PaymentMethod) -> Self {
        let (brand, last4, exp_month, exp_year) = m.card.map_or((None, None, None, None), |c| {
            (c.brand, c.last4, c.exp_month, c.exp_year)
        });
        Self {
            id: m.id,
            brand,
            last4,
            exp_month,
            exp_year,
        }
    }
}

#[derive(Deserialize, ToSchema)]
pub struct AttachRequest {
    /// The payment method the browser obtained from the processor (`pm_…`).
    pub payment_method_id: String,
}

fn company(auth: &AuthUser) -> ApiResult<()> {
    if auth.has_role(Role::Empresa) {
        Ok(())
    } else {
        Err(ApiError::forbidden("Companies only"))
    }
}

/// The processor's publishable key. No authentication.
#[utoipa::path(tag = "payments", responses((status = 200, body = PublicKeyView)))]
#[get("/api/payments/public-key")]
pub async fn public_key(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok().json(PublicKeyView {
        publishable_key: state.processor.publishable_key.clone(),
    })
}

/// The company's saved cards (empty before the first one is saved).
#[utoipa::path(
    tag = "payments",
    security(("bearer" = [])),
    responses(
        (status = 200, body = Vec<SavedMethodView>),
        (status = 403, body = ErrorBody, description = "Not a company"),
        (status = 503, body = ErrorBody, description = "The processor is unavailable"),
    )
)]
#[get("/api/payments/saved-methods")]
pub async fn saved_methods(state: web::Data<AppState>, auth: AuthUser) -> ApiResult<HttpResponse> {
    company(&auth)?;
    let cards = flow::saved_cards(&state, auth.id()).await?;
    Ok(HttpResponse::Ok().json(
        cards
            .into_iter()
            .map(SavedMethodView::from)
            .collect::<Vec<_>>(),
    ))
}

/// Removes one of the company's saved cards (204); any other id is 404.
#[utoipa::path(
    tag = "payments",
    params(("payment_method_id" = String, Path)),
    security(("bearer" = [])),
    responses(
        (status = 204),
        (status = 403, body = ErrorBody, description = "Not a company, or CSRF"),
        (status = 404, body = ErrorBody),
        (status = 503, body = ErrorBody, description = "The processor is unavailable"),
    )
)]
#[delete("/api/payments/saved-methods/{payment_method_id}")]
pub async fn delete_saved_method(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    path: web::Path<String>,
) -> ApiResult<HttpResponse> {
    company(&auth)?;
    flow::detach(&state, auth.id(), &path).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// Saves a payment method for later payments, on the company's processor customer (created
/// with the first method). Answers the saved card.
#[utoipa::path(
    tag = "payments",
    request_body = AttachRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, body = SavedMethodView),
        (status = 400, body = ErrorBody, description = "COMPANY_PROFILE_REQUIRED, PAYMENT_METHOD_INVALID"),
        (status = 403, body = ErrorBody, description = "Not a company, or CSRF"),
        (status = 503, body = ErrorBody, description = "The processor is unavailable"),
    )
)]
#[post("/api/payments/attach-method")]
pub async fn attach_method(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    body: web::Json<AttachRequest>,
) -> ApiResult<HttpResponse> {
    company(&auth)?;
    let id = body.payment_method_id.trim();
    if id.is_empty() || id.len() > 255 {
        return Err(ApiError::invalid_field(
            "payment_method_id",
            "must be 1 to 255 characters",
        ));
    }
    let method = flow::attach(&state, &auth.user, id).await?;
    Ok(HttpResponse::Ok().json(SavedMethodView::from(method)))
}

/// Mounts the saved payment methods.
pub fn mount(cfg: &mut utoipa_actix_web::service_config::ServiceConfig) {
    cfg.service(public_key)
        .service(saved_methods)
        .service(delete_saved_method)
        .service(attach_method);
}
