//! The demo story the end-to-end reset loads after the accounts (`seed::seed_demo`): one
//! project in each state a front-end developer clicks through, built by the same workflows
//! users go through, with the money moved in the processor sandbox of this process.
//!
//! It needs the sandbox (its objects live in this process), so `marketplace seed-demo`
//! loads the accounts only and the reset loads the story.

use std::time::Duration;

use serde::Serialize;

use crate::domain::payment::PaymentStatus;
use crate::domain::profile::ConnectStatus;
use crate::domain::project::{ProjectStatus, ProjectType};
use crate::domain::text::{ChatText, Feedback, RefundReason, ReviewText, StatusReason, Title};
use crate::integrations::processor::SandboxHandle;
use crate::state::AppState;
use crate::store::applications::{Proposal, ProposedMilestone};
use crate::store::payments::{self, Payment};
use crate::store::projects::Project;
use crate::store::users::{self, User};
use crate::workflows::deliveries::{self, Decision};
use crate::workflows::disputes::{self, Complaint};
use crate::workflows::error::{FlowError, FlowResult};
use crate::workflows::escrow::{self, RefundCause};
use crate::workflows::projects::{self, Caller, ProjectDraft};
use crate::workflows::{applications, chat, connect, reviews, selection};

/// How many projects of each state the story left.
#[derive(Debug, Default, Serialize, utoipa::ToSchema)]
pub struct Story {
    pub projects: Vec<StoryProject>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct StoryProject {
    pub id: i64,
    pub title: String,
    #[schema(value_type = String)]
    pub status: ProjectStatus,
}

struct Cast {
    admin: User,
    company: User,
    expert: User,
    other_expert: User,
}

fn caller(user: &User) -> Caller {
    use crate::domain::user::Role;
    Caller {
        id: user.id,
        admin: user.roles.contains(&Role::Admin),
        company: user.roles.contains(&Role::Empresa),
        expert: user.roles.contains(&Role::Experto),
    }
}

async fn user(state: &AppState, username: &str) -> FlowResult<User> {
    let mut conn = state.db.conn().await?;
    users::find_by_login(conn.exec(), username)
        .await?
        .ok_or_else(|| FlowError::not_found(format!("demo account {username} missing")))
}

fn sandbox(state: &AppState) -> FlowResult<&SandboxHandle> {
    state.processor.sandbox.as_ref().ok_or_else(|| {
        FlowError::rule(
            "SANDBOX_REQUIRED",
            "The demo story needs the processor sandbox",
        )
    })
}

fn sandbox_failed(e: impl std::fmt::Display) -> FlowError {
    FlowError::Internal(anyhow::anyhow!("sandbox: {e}"))
}

pub async fn load(state: &AppState) -> FlowResult<Story> {
    let cast = Cast {
        admin: user(state, "demo_admin").await?,
        company: user(state, "demo_empresa").await?,
        expert: user(state, "demo_experto").await?,
        other_expert: user(state, "demo_experta").await?,
    };
    let sandbox = sandbox(state)?;
    sandbox
        .set_balance(100_000_000)
        .await
        .map_err(sandbox_failed)?;
    onboard(state, sandbox, &cast.expert).await?;

    let mut story = Story::default();
    let mut keep = |p: &Project| {
        story.projects.push(StoryProject {
            id: p.id,
            title: p.title.clone(),
            status: p.status,
        })
    };
    keep(&draft(state, &cast, "Brand refresh (draft)", false).await?);
    keep(
        &draft(
            state,
            &cast,
            "Data warehouse audit (awaiting validation)",
            true,
        )
        .await?,
    );
    let open = published(state, &cast, "Mobile app MVP (open for proposals)").await?;
    propose(state, &cast.other_expert, open.id).await?;
    keep(&open);

    let cancelled = draft(state, &cast, "Market study (cancelled)", false).await?;
    keep(
        &projects::change_status(
            state,
            &caller(&cast.company),
            cancelled.id,
            ProjectStatus::Cancelled,
        )
        .await?,
    );

    let (in_progress, _) = engaged(state, sandbox, &cast, "Payment platform (in progress)").await?;
    for (author, text) in [
        (
            &cast.company,
            "Welcome aboard! The repository invitation is on its way.",
        ),
        (
            &cast.expert,
            "Thanks, I will share the schema design by Friday.",
        ),
    ] {
        let text = ChatText::parse(text).map_err(anyhow::Error::from)?;
        chat::post(state, &caller(author), in_progress.id, text).await?;
    }
    keep(&reload(state, in_progress.id).await?);

    let (completed, mut payment) =
        engaged(state, sandbox, &cast, "Analytics pipeline (completed)").await?;
    for _ in 0..3 {
        let next = deliver_and_approve(state, &cast, &payment).await?;
        match next {
            Some(next) => payment = fund(state, sandbox, next).await?,
            None => break,
        }
    }
    for (author, reviewee, rating) in [
        (&cast.company, cast.expert.id, 5),
        (&cast.expert, cast.company.id, 4),
    ] {
        reviews::create(
            state,
            &caller(author),
            reviews::Draft {
                project_id: completed.id,
                reviewee_id: reviewee,
                rating,
                comment: ReviewText::parse(
                    "Clear goals, quick answers and work delivered on time.",
                )
                .map_err(anyhow::Error::from)?,
            },
        )
        .await?;
    }
    keep(&reload(state, completed.id).await?);

    let (disputed, _) = engaged(state, sandbox, &cast, "ERP integration (disputed)").await?;
    disputes::raise(
        state,
        &caller(&cast.company),
        disputed.id,
        Complaint {
            title: Some("Delivery late".into()),
            reason: Some("The first milestone is two weeks late".into()),
            description: Some("The expert has not delivered the agreed schema design yet.".into()),
            ..Complaint::default()
        },
    )
    .await?;
    keep(&reload(state, disputed.id).await?);

    let (refunded, held) = engaged(state, sandbox, &cast, "CRM migration (refunded)").await?;
    escrow::refund_with_reason(
        state,
        held.id,
        RefundCause::Admin,
        Some(
            RefundReason::parse("The company withdrew before work started")
                .map_err(anyhow::Error::from)?,
        ),
    )
    .await?;
    crate::workflows::project_admin::set_status(
        state,
        cast.admin.id,
        refunded.id,
        ProjectStatus::Cancelled,
        StatusReason::parse("Refunded at the company's request").map_err(anyhow::Error::from)?,
    )
    .await?;
    keep(&reload(state, refunded.id).await?);

    // Released, then refunded: its two invoices and their two credit notes.
    let (corrected, held) = engaged(
        state,
        sandbox,
        &cast,
        "Data migration (refunded after release)",
    )
    .await?;
    deliver_and_approve(state, &cast, &held).await?;
    escrow::refund_with_reason(
        state,
        held.id,
        RefundCause::Admin,
        Some(
            RefundReason::parse("The migration was rolled back; the company is repaid")
                .map_err(anyhow::Error::from)?,
        ),
    )
    .await?;
    crate::workflows::project_admin::set_status(
        state,
        cast.admin.id,
        corrected.id,
        ProjectStatus::Cancelled,
        StatusReason::parse("Rolled back and refunded").map_err(anyhow::Error::from)?,
    )
    .await?;
    keep(&reload(state, corrected.id).await?);
    Ok(story)
}

async fn reload(state: &AppState, id: i64) -> FlowResult<Project> {
    let mut conn = state.db.conn().await?;
    crate::store::projects::find(conn.exec(), id)
        .await?
        .ok_or_else(|| FlowError::not_found("Project not found"))
}

/// A payout account for the expert, onboarded at the sandbox; waits for its webhook.
async fn onboard(state: &AppState, sandbox: &SandboxHandle, expert: &User) -> FlowResult<()> {
    connect::account_link(state, expert).await?;
    let account = connect::status(state, expert.id)
        .await?
        .and_then(|l| l.connect_account_id)
        .ok_or_else(|| FlowError::Internal(anyhow::anyhow!("no payout account was created")))?;
    sandbox
        .complete_onboarding(&account)
        .await
        .map_err(sandbox_failed)?;
    for _ in 0..200 {
        let link = connect::status(state, expert.id).await?;
        if link.is_some_and(|l| l.connect_status == Some(ConnectStatus::Active)) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    Err(FlowError::Internal(anyhow::anyhow!(
        "the demo payout account did not become active"
    )))
}

async fn draft(state: &AppState, cast: &Cast, title: &str, submit: bool) -> FlowResult<Project> {
    projects::create(
        state,
        &caller(&cast.company),
        ProjectDraft {
            title: Title::parse(title).map_err(anyhow::Error::from)?,
            description: format!("{title}: scope, milestones and acceptance criteria."),
            budget_minor: 300_000,
            deadline: Some(state.clock.now() + chrono::Duration::days(90)),
            skills_required: vec!["Rust".into(), "SQL".into()],
            project_type: ProjectType::Curated,
            target_expert_id: None,
            submit,
        },
    )
    .await
}

/// Validated by the administrator, both demo experts invited.
async fn published(state: &AppState, cast: &Cast, title: &str) -> FlowResult<Project> {
    let p = draft(state, cast, title, true).await?;
    projects::validate(state, cast.admin.id, p.id, true, None).await?;
    projects::invite_experts(
        state,
        cast.admin.id,
        p.id,
        &[cast.expert.id, cast.other_expert.id],
        "admin",
        None,
    )
    .await?;
    reload(state, p.id).await
}

async fn propose(state: &AppState, expert: &User, project_id: i64) -> FlowResult<()> {
    let milestone = |title: &str| ProposedMilestone {
        title: title.into(),
        description: None,
        amount_minor: 100_000,
        due_date: None,
    };
    applications::apply(
        state,
        &caller(expert),
        project_id,
        Proposal {
            cover_letter: "I have built three systems like this one; here is my plan.".into(),
            proposed_budget_minor: 300_000,
            milestones: vec![
                milestone("Schema design"),
                milestone("Implementation"),
                milestone("Hand-over"),
            ],
        },
    )
    .await?;
    Ok(())
}

/// Published, proposed by the expert, selected, and its first payment held.
async fn engaged(
    state: &AppState,
    sandbox: &SandboxHandle,
    cast: &Cast,
    title: &str,
) -> FlowResult<(Project, Payment)> {
    let p = published(state, cast, title).await?;
    propose(state, &cast.expert, p.id).await?;
    let chosen = selection::select(state, caller(&cast.company), p.id, cast.expert.id).await?;
    let held = fund(state, sandbox, chosen.payment).await?;
    Ok((reload(state, p.id).await?, held))
}

/// The company's card authorises the payment at the sandbox; waits until it is `held`.
async fn fund(state: &AppState, sandbox: &SandboxHandle, payment: Payment) -> FlowResult<Payment> {
    let payment = crate::workflows::payments::ensure_intent(state, payment).await?;
    let intent = payment
        .processor_payment_intent_id
        .clone()
        .ok_or_else(|| FlowError::Internal(anyhow::anyhow!("payment without an intent")))?;
    sandbox
        .confirm_payment_intent(&intent, "pm_card_visa")
        .await
        .map_err(sandbox_failed)?;
    for _ in 0..200 {
        let y = escrow::sync_status(state, payment.id).await?;
        if y.status == PaymentStatus::Held {
            return Ok(y);
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    Err(FlowError::Internal(anyhow::anyhow!(
        "demo payment {} was not held",
        payment.id
    )))
}

/// The expert delivers the payment's milestone and the company approves it: the money is
/// released. Answers the next milestone's payment, if any.
async fn deliver_and_approve(
    state: &AppState,
    cast: &Cast,
    payment: &Payment,
) -> FlowResult<Option<Payment>> {
    let milestone_id = payment
        .milestone_id
        .ok_or_else(|| FlowError::Internal(anyhow::anyhow!("payment without a milestone")))?;
    let delivery = deliveries::submit(
        state,
        caller(&cast.expert),
        milestone_id,
        "Delivered as agreed: code, documentation and a short demo.".into(),
        Vec::new(),
    )
    .await?;
    let reviewed = deliveries::review(
        state,
        caller(&cast.company),
        delivery.id,
        Decision::Approve,
        Some(Feedback::parse("Looks great, thank you.").map_err(anyhow::Error::from)?),
    )
    .await?;
    let next = reviewed.release.and_then(|r| r.next_payment);
    if let Some(next) = &next {
        let mut conn = state.db.conn().await?;
        return Ok(payments::find(conn.exec(), next.id).await?);
    }
    Ok(None)
}
