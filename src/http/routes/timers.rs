//! Timed transitions (issue 20) as routes: the expert ends an engagement whose milestone has
//! waited too long for its payment. The deadlines themselves show in the delivery, dispute
//! and milestone views.

use actix_web::{HttpResponse, post, web};

use crate::http::auth::CsrfChecked;
use crate::http::error::{ApiResult, ErrorBody};
use crate::http::routes::projects::{ProjectView, caller};
use crate::state::AppState;
use crate::workflows::timers as flow;

/// The project's expert ends the engagement for a milestone `awaiting_payment` for 14 days or
/// more: the milestone's unfunded payment intent is cancelled, every open milestone cancelled
/// and the project `cancelled`; what was paid for earlier milestones stays paid. Answers the
/// project.
#[utoipa::path(
    tag = "milestones",
    params(("milestone_id" = i64, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = ProjectView),
        (status = 403, body = ErrorBody, description = "Not the project's expert"),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "`FUNDING_NOT_OVERDUE` before the 14 days, `MONEY_AUTHORISED` when the payment is held, `INVALID_STATE` when the milestone no longer awaits its payment"),
    )
)]
#[post("/api/milestones/{milestone_id}/release-engagement")]
pub async fn release_engagement(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    path: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let who = caller(&auth);
    let project = flow::release_engagement(&state, who, path.into_inner()).await?;
    Ok(HttpResponse::Ok().json(ProjectView::for_caller(project, Some(&who))))
}

/// Mounts the release of a milestone's engagement.
pub fn mount(cfg: &mut utoipa_actix_web::service_config::ServiceConfig) {
    cfg.service(release_engagement);
}
