//! Proposals under `/api/projects/{project_id}/…`: apply, the expert's own proposal, the
//! company's list, revision requests, resubmission, rejection, and selection of an expert
//! (with its undoing).

use actix_web::{HttpResponse, get, post, put, web};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::domain::money::{minor_to_number, parse_number};
use crate::domain::project::{ApplicationStatus, MAX_MILESTONES, parse_deadline};
use crate::domain::text::Feedback;
use crate::http::auth::{AuthUser, CsrfChecked};
use crate::http::error::{ApiError, ApiResult, ErrorBody, FieldError};
use crate::http::pagination::{PageQuery, Paginated};
use crate::http::routes::escrow_views::{
    InvoiceBreakdownView, MilestoneView, PaymentView, payment_view,
};
use crate::http::routes::projects::{ProjectView, caller};
use crate::state::AppState;
use crate::store::applications::{self, Application, Proposal, ProposedMilestone};
use crate::workflows::invoice_terms::{self, Terms};
use crate::workflows::{applications as flow, projects as project_flow, selection};

const MAX_COVER_LETTER: usize = 10_000;

#[derive(Serialize, Deserialize, ToSchema)]
pub struct ProposedMilestoneView {
    pub title: String,
    pub description: Option<String>,
    pub amount: f64,
    pub due_date: Option<DateTime<Utc>>,
    /// The invoices this milestone's release issues, from both parties' fiscal data and the
    /// expert's level as they stand: shown before the company selects and the expert agrees.
    /// In the answers to the project's parties, not in webhooks' payloads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invoices: Option<InvoiceBreakdownView>,
}

/// A proposal.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct ApplicationView {
    pub id: i64,
    pub project_id: i64,
    pub expert_id: i64,
    pub cover_letter: String,
    pub proposed_budget: f64,
    pub proposed_milestones: Vec<ProposedMilestoneView>,
    /// `pending`, `needs_revision`, `accepted`, `rejected`.
    #[schema(value_type = String)]
    pub status: ApplicationStatus,
    pub attempt_number: i64,
    /// The company's requested changes; cleared on resubmission.
    pub feedback: Option<String>,
    pub revision_requested_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<Application> for ApplicationView {
    fn from(a: Application) -> Self {
        ApplicationView::with_terms(a, None)
    }
}

impl ApplicationView {
    /// The view, each milestone with its invoices when the parties' terms are given.
    fn with_terms(a: Application, terms: Option<&Terms>) -> Self {
        Self {
            id: a.id,
            project_id: a.project_id,
            expert_id: a.expert_id,
            cover_letter: a.cover_letter,
            proposed_budget: minor_to_number(a.proposed_budget_minor),
            proposed_milestones: a
                .proposed_milestones
                .0
                .into_iter()
                .map(|m| ProposedMilestoneView {
                    title: m.title,
                    description: m.description,
                    amount: minor_to_number(m.amount_minor),
                    due_date: m.due_date,
                    invoices: terms.map(|t| t.preview(m.amount_minor, None).into()),
                })
                .collect(),
            status: a.status,
            attempt_number: a.attempt_number,
            feedback: a.feedback,
            revision_requested_at: a.revision_requested_at,
            created_at: a.created_at,
            updated_at: a.updated_at,
        }
    }
}

/// Proposals' views for the project's parties, each milestone with its invoices (the
/// parties' terms read once for the page).
pub async fn application_views(
    state: &AppState,
    apps: Vec<Application>,
) -> ApiResult<Vec<ApplicationView>> {
    let terms = invoice_terms::of_applications(state, &apps).await?;
    Ok(apps
        .into_iter()
        .map(|a| {
            let t = terms.get(&a.id);
            ApplicationView::with_terms(a, t)
        })
        .collect())
}

/// One proposal's view for the project's parties.
async fn application_view(state: &AppState, a: Application) -> ApiResult<ApplicationView> {
    let mut views = application_views(state, vec![a]).await?;
    Ok(views.remove(0))
}

#[derive(Deserialize, ToSchema)]
pub struct MilestoneInput {
    #[schema(min_length = 1, max_length = 200)]
    pub title: String,
    pub description: Option<String>,
    /// A positive decimal number with at most 2 decimals.
    #[schema(value_type = f64)]
    pub amount: serde_json::Number,
    /// `YYYY-MM-DDTHH:MM:SS` or RFC 3339.
    pub due_date: Option<String>,
}

/// `POST …/apply` and `PUT …/applications/{application_id}`.
#[derive(Deserialize, ToSchema)]
pub struct ProposalRequest {
    #[serde(default)]
    pub cover_letter: String,
    /// The proposal's total; the milestone amounts must add up to it exactly.
    #[schema(value_type = f64)]
    pub proposed_budget: serde_json::Number,
    /// At least 3.
    pub proposed_milestones: Vec<MilestoneInput>,
}

/// Field checks of a proposal; the plan rule (≥ 3 milestones adding up to the budget) is the
/// domain's, checked by the workflow.
fn proposal_from(req: ProposalRequest) -> ApiResult<Proposal> {
    let mut errors = Vec::new();
    if req.cover_letter.chars().count() > MAX_COVER_LETTER {
        errors.push(FieldError::new(
            "cover_letter",
            format!("must be at most {MAX_COVER_LETTER} characters"),
        ));
    }
    let proposed_budget_minor = parse_number(&req.proposed_budget).unwrap_or_else(|message| {
        errors.push(FieldError::new("proposed_budget", message));
        0
    });
    if req.proposed_milestones.len() > MAX_MILESTONES {
        errors.push(FieldError::new(
            "proposed_milestones",
            format!("at most {MAX_MILESTONES} milestones"),
        ));
    }
    let mut milestones = Vec::with_capacity(req.proposed_milestones.len());
    for (i, m) in req.proposed_milestones.into_iter().enumerate() {
        let field = |name: &str| format!("proposed_milestones[{i}].{name}");
        let title = m.title.trim().to_owned();
        if title.is_empty() || title.chars().count() > 200 {
            errors.push(FieldError::new(
                field("title"),
                "must be 1 to 200 characters",
            ));
        }
        let amount_minor = parse_number(&m.amount).unwrap_or_else(|message| {
            errors.push(FieldError::new(field("amount"), message));
            0
        });
        let due_date = match m.due_date.as_deref() {
            None => None,
            Some(text) => parse_deadline(text).or_else(|| {
                errors.push(FieldError::new(
                    field("due_date"),
                    "must be an ISO datetime",
                ));
                None
            }),
        };
        milestones.push(ProposedMilestone {
            title,
            description: m
                .description
                .map(|d| d.trim().to_owned())
                .filter(|d| !d.is_empty()),
            amount_minor,
            due_date,
        });
    }
    if !errors.is_empty() {
        return Err(ApiError::validation(errors));
    }
    Ok(Proposal {
        cover_letter: req.cover_letter.trim().to_owned(),
        proposed_budget_minor,
        milestones,
    })
}

/// An expert applies (201). Who may apply depends on the project's state: invited experts on
/// `published_curated`, `bidding`, `published` and `pending_publication`; only the target
/// expert on `published_private`. One proposal per expert and project.
#[utoipa::path(
    tag = "applications",
    params(("project_id" = i64, Path)),
    request_body = ProposalRequest,
    security(("bearer" = [])),
    responses(
        (status = 201, body = ApplicationView),
        (status = 400, body = ErrorBody, description = "PROJECT_NOT_OPEN"),
        (status = 403, body = ErrorBody, description = "Not an expert, or NOT_INVITED"),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "ALREADY_APPLIED"),
    )
)]
#[post("/api/projects/{project_id}/apply")]
pub async fn apply(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    path: web::Path<i64>,
    body: web::Json<ProposalRequest>,
) -> ApiResult<HttpResponse> {
    let proposal = proposal_from(body.into_inner())?;
    let a = flow::apply(&state, &caller(&auth), path.into_inner(), proposal).await?;
    Ok(HttpResponse::Created().json(application_view(&state, a).await?))
}

/// The caller's own proposal for the project.
#[utoipa::path(
    tag = "applications",
    params(("project_id" = i64, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = ApplicationView),
        (status = 404, body = ErrorBody),
    )
)]
#[get("/api/projects/{project_id}/my-application")]
pub async fn my_application(
    state: web::Data<AppState>,
    auth: AuthUser,
    path: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let mut conn = state.db.conn().await?;
    let a = applications::find_by_expert(conn.exec(), path.into_inner(), auth.id())
        .await?
        .ok_or_else(|| ApiError::not_found("You have not applied to this project"))?;
    drop(conn);
    Ok(HttpResponse::Ok().json(application_view(&state, a).await?))
}

#[derive(Deserialize, IntoParams)]
pub struct ApplicationListQuery {
    pub page: Option<i64>,
    pub size: Option<i64>,
    /// `pending`, `needs_revision`, `accepted`, `rejected`.
    pub status: Option<String>,
}

/// The project's proposals: its company and administrators only.
#[utoipa::path(
    tag = "applications",
    params(("project_id" = i64, Path), ApplicationListQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, body = Paginated<ApplicationView>),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 422, body = ErrorBody),
    )
)]
#[get("/api/projects/{project_id}/applications")]
pub async fn list(
    state: web::Data<AppState>,
    auth: AuthUser,
    path: web::Path<i64>,
    query: web::Query<ApplicationListQuery>,
) -> ApiResult<HttpResponse> {
    let page = PageQuery {
        page: query.page,
        size: query.size,
    }
    .validate()?;
    let status = match query.status.as_deref() {
        None => None,
        Some(text) => Some(
            ApplicationStatus::parse(text)
                .ok_or_else(|| ApiError::invalid_field("status", "is not an application status"))?,
        ),
    };
    let c = caller(&auth);
    let mut conn = state.db.conn().await?;
    let p = project_flow::load_owned(conn.exec(), &c, path.into_inner(), true).await?;
    let (items, total) =
        applications::list_for_project(conn.exec(), p.id, status, page.limit(), page.offset())
            .await?;
    drop(conn);
    let items = application_views(&state, items).await?;
    Ok(HttpResponse::Ok().json(Paginated::new(items, total, page)))
}

#[derive(Deserialize, ToSchema)]
pub struct RevisionRequest {
    /// What the expert should change (1 to 5000 characters).
    #[schema(min_length = 1, max_length = 5000)]
    pub feedback: String,
}

/// The company asks for changes to a pending proposal (`needs_revision`).
#[utoipa::path(
    tag = "applications",
    params(("project_id" = i64, Path), ("application_id" = i64, Path)),
    request_body = RevisionRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, body = ApplicationView),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody),
    )
)]
#[post("/api/projects/{project_id}/applications/{application_id}/request-revision")]
pub async fn request_revision(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    path: web::Path<(i64, i64)>,
    body: web::Json<RevisionRequest>,
) -> ApiResult<HttpResponse> {
    let feedback = Feedback::parse(body.into_inner().feedback)
        .map_err(|e| ApiError::invalid_field("feedback", e.to_string()))?;
    let (project_id, application_id) = path.into_inner();
    let a = flow::request_revision(
        &state,
        &caller(&auth),
        project_id,
        application_id,
        &feedback,
    )
    .await?;
    Ok(HttpResponse::Ok().json(application_view(&state, a).await?))
}

/// The expert resubmits a proposal sent back for revision: back to `pending`, attempt + 1,
/// feedback cleared.
#[utoipa::path(
    tag = "applications",
    params(("project_id" = i64, Path), ("application_id" = i64, Path)),
    request_body = ProposalRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, body = ApplicationView),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "Not in needs_revision"),
    )
)]
#[put("/api/projects/{project_id}/applications/{application_id}")]
pub async fn resubmit(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    path: web::Path<(i64, i64)>,
    body: web::Json<ProposalRequest>,
) -> ApiResult<HttpResponse> {
    let proposal = proposal_from(body.into_inner())?;
    let (project_id, application_id) = path.into_inner();
    let a = flow::resubmit(&state, &caller(&auth), project_id, application_id, proposal).await?;
    Ok(HttpResponse::Ok().json(application_view(&state, a).await?))
}

/// The company turns a proposal down.
#[utoipa::path(
    tag = "applications",
    params(("project_id" = i64, Path), ("application_id" = i64, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = ApplicationView),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody),
    )
)]
#[post("/api/projects/{project_id}/applications/{application_id}/reject")]
pub async fn reject(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    path: web::Path<(i64, i64)>,
) -> ApiResult<HttpResponse> {
    let (project_id, application_id) = path.into_inner();
    let a = flow::reject(&state, &caller(&auth), project_id, application_id).await?;
    Ok(HttpResponse::Ok().json(application_view(&state, a).await?))
}

/// What a selection produced.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct SelectionResponse {
    pub message: String,
    pub project: ProjectView,
    pub application: ApplicationView,
    pub milestones: Vec<MilestoneView>,
    /// The first milestone's payment, `pending` until the company funds it.
    pub payment: PaymentView,
}

/// The company selects an expert's pending proposal, in the project's actor: the proposal is
/// `accepted`, the other open ones `rejected`, the project `assigned`, milestones created
/// from the proposal if the project has none, the first `awaiting_payment` with its payment
/// `pending`. From `draft`/`pending_publication`: 400. The expert's first project needs their
/// fiscal data (400 `FISCAL_DATA_REQUIRED`).
#[utoipa::path(
    tag = "applications",
    params(("project_id" = i64, Path), ("expert_id" = i64, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = SelectionResponse),
        (status = 400, body = ErrorBody, description = "PROJECT_NOT_PUBLISHED or FISCAL_DATA_REQUIRED"),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "Already selected, or the proposal is not pending"),
    )
)]
#[post("/api/projects/{project_id}/select/{expert_id}")]
pub async fn select(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    path: web::Path<(i64, i64)>,
) -> ApiResult<HttpResponse> {
    let c = caller(&auth);
    let (project_id, expert_id) = path.into_inner();
    let s = selection::select(&state, c, project_id, expert_id).await?;
    Ok(HttpResponse::Ok().json(SelectionResponse {
        message: "Expert selected".to_owned(),
        project: ProjectView::for_caller(s.project, Some(&c)),
        application: application_view(&state, s.application).await?,
        milestones: s.milestones.into_iter().map(MilestoneView::from).collect(),
        payment: payment_view(&state, s.payment).await?,
    }))
}

/// Undoes a selection while no money has been authorised (409 `MONEY_AUTHORISED` after).
#[utoipa::path(
    tag = "applications",
    params(("project_id" = i64, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = ProjectView),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody),
    )
)]
#[post("/api/projects/{project_id}/selection/cancel")]
pub async fn cancel_selection(
    state: web::Data<AppState>,
    CsrfChecked(auth): CsrfChecked,
    path: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let c = caller(&auth);
    let project = selection::cancel(&state, c, path.into_inner()).await?;
    Ok(HttpResponse::Ok().json(ProjectView::for_caller(project, Some(&c))))
}

/// Mounts the proposals and the selection.
pub fn mount(cfg: &mut utoipa_actix_web::service_config::ServiceConfig) {
    cfg.service(apply)
        .service(my_application)
        .service(list)
        .service(request_revision)
        .service(resubmit)
        .service(reject)
        .service(select)
        .service(cancel_selection);
}
