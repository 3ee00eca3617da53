//! `/api/processor-connect/*`: the expert's connected payout account at the processor.

use actix_web::{HttpResponse, get, post, web};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::domain::profile::ConnectStatus;
use crate::domain::user::Role;
use crate::http::auth::{AdminUser, AuthUser, CsrfChecked};
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::state::AppState;
use crate::store::profiles::ProcessorLink;
use crate::workflows::connect::{self as flow, Link};

/// The expert's payout account as the service last saw it.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct ConnectStatusView {
    pub has_account: bool,
    /// True until the account is `active` (no account, onboarding unfinished, or restricted).
    pub requires_onboarding: bool,
    pub charges_enabled: bool,
    pub payouts_enabled: bool,
    /// `pending`, `active`, `restricted`, `disconnected`, or `null` before any account.
    #[schema(value_type = Option<String>)]
    pub status: Option<ConnectStatus>,
    /// The connected account (`acct_…`).
    pub account_id: Option<String>,
}

impl ConnectStatusView {
    /// The view of a profile's link; no profile reads as no account.
    pub fn of(link: Option<ProcessorLink>) -> Self {
        let link = link.as_ref();
        let account_id = link.and_then(|l| l.connect_account_id.clone());
        let status = link.and_then(|l| l.connect_status);
        Self {
            has_account: account_id.is_some(),
            requires_onboarding: account_id.is_none() || status != Some(ConnectStatus::Active),
            charges_enabled: link.is_some_and(|l| l.charges_enabled),
            payouts_enabled: link.is_some_and(|l| l.payouts_enabled),
            status,
            account_id,
        }
    }
}

/// A hosted page of the processor; open `url` before `expires_at`.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct AccountLinkView {
    pub url: String,
    pub expires_at: DateTime<Utc>,
    /// `account_onboarding` or `account_update`.
    #[serde(rename = "type")]
    #[schema(example = "account_onboarding")]
    pub kind: String,
}

impl From<Link> for AccountLinkView {
    fn from(l: Link) -> Self {
        Self {
            url: l.url,
            expires_at: l.expires_at,
            kind: l.kind.as_str().to_owned(),
        }
    }
}

fn expert(auth: &AuthUser) -> ApiResult<()> {
    if auth.has_role(Role::Experto) {
        Ok(())
    } else {
        Err(ApiError::forbidden("Experts only"))
    }
}

/// The caller's payout account, refreshed from the processor when there is one (the stored
/// state answers while the processor is unreachable).
#[utoipa::path(
    tag = "processor-connect",
    security(("bearer" = [])),
    responses(
        (status = 200, body = ConnectStatusView),
        (status = 403, body = ErrorBody, description = "Not an expert"),
    )
)]
#[get("/api/processor-connect/status")]
pub async fn get_status(state: web::Data<AppState>, auth: AuthUser) -> ApiResult<HttpResponse> {
    expert(&auth)?;
    let link = flow::status(&state, auth.id()).await?;
    Ok(HttpResponse::Ok().json(ConnectStatusView::of(link)))
}

/// The onboarding link (`account_onboarding`), creating the caller's express account first
/// when there is none (its status is then `pending`).
#[utoipa::path(
    tag = "processor-connect",
    security(("bearer" = [])),
    responses(
        (status = 200, body = AccountLinkView),
        (status = 400, body = ErrorBody, description = "EXPERT_PROFILE_REQUIRED"),
        (status = 403, body = ErrorBody, description = "Not an expert, or CSRF"),
        (status = 503, body = ErrorBody, description = "The processor is unavailable"),
    )
)]
#[post("/api/processor-connect/account-link")]
pub async fn account_link(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
) -> ApiResult<HttpResponse> {
    expert(&auth)?;
    let link = flow::account_link(&state, &auth.user).await?;
    Ok(HttpResponse::Ok().json(AccountLinkView::from(link)))
}

/// The link to change the account's details (`account_update`); while onboarding is
/// unfinished the processor does not permit it and the onboarding link comes instead.
#[utoipa::path(
    tag = "processor-connect",
    security(("bearer" = [])),
    responses(
        (status = 200, body = AccountLinkView),
        (status = 400, body = ErrorBody, description = "PROCESSOR_CONNECT_NOT_STARTED"),
        (status = 403, body = ErrorBody, description = "Not an expert, or CSRF"),
        (status = 503, body = ErrorBody, description = "The processor is unavailable"),
    )
)]
#[post("/api/processor-connect/account-update-link")]
pub async fn account_update_link(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
) -> ApiResult<HttpResponse> {
    expert(&auth)?;
    let link = flow::account_update_link(&state, auth.id()).await?;
    Ok(HttpResponse::Ok().json(AccountLinkView::from(link)))
}

/// Detaches an expert's payout account (administrators): no account, status
/// `disconnected`, flags off; the expert is notified. Answers the expert's new status.
#[utoipa::path(
    tag = "processor-connect",
    params(("user_id" = i64, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = ConnectStatusView),
        (status = 403, body = ErrorBody, description = "Not an administrator, or CSRF"),
        (status = 404, body = ErrorBody, description = "No expert profile"),
    )
)]
#[post("/api/processor-connect/admin/disconnect/{user_id}")]
pub async fn admin_disconnect(
    state: web::Data<AppState>,
    AdminUser(admin): AdminUser,
    path: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let link = flow::disconnect(&state, admin.id(), path.into_inner()).await?;
    Ok(HttpResponse::Ok().json(ConnectStatusView::of(Some(link))))
}

/// Mounts the experts' connected payout account routes.
pub fn mount(cfg: &mut utoipa_actix_web::service_config::ServiceConfig) {
    cfg.service(get_status)
        .service(account_link)
        .service(account_update_link)
        .service(admin_disconnect);
}
