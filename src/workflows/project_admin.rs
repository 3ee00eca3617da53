//! Administrators forcing a project's state (`PUT /api/admin/projects/{id}/status`): any
//! state, except where money would be stranded (`domain::project::admin_move`). The move runs
//! in the project's actor, under the project lock, and is written to `admin_notes`.

use serde_json::json;

use crate::domain::payment::PaymentStatus;
use crate::domain::project::{AdminMoveRefusal, MoneyOnProject, ProjectStatus, admin_move};
use crate::domain::text::StatusReason;
use crate::state::AppState;
use crate::store::projects::{self, Project};
use crate::store::{LockScope, milestones, payments, user_admin};
use crate::workflows::error::{FlowError, FlowResult};
use crate::workflows::projects::record;
use crate::workflows::selection::release_unfunded_intents;

pub async fn set_status(
    state: &AppState,
    admin_id: i64,
    id: i64,
    to: ProjectStatus,
    reason: StatusReason,
) -> FlowResult<Project> {
    let st = state.clone();
    state
        .project_actors
        .call(id, move || async move {
            set_status_now(&st, admin_id, id, to, &reason).await
        })
        .await?
}

async fn set_status_now(
    state: &AppState,
    admin_id: i64,
    id: i64,
    to: ProjectStatus,
    reason: &str,
) -> FlowResult<Project> {
    if to == ProjectStatus::Cancelled || to.is_before_selection() {
        // A card authorised for a plan that no longer exists is cancelled at the processor
        // first; an authorisation that already went through stops the move (409).
        release_unfunded_intents(state, id).await?;
    }
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    tx.lock(LockScope::Project, id).await?;
    let p = projects::find(tx.exec(), id)
        .await?
        .ok_or_else(|| FlowError::not_found("Project not found"))?;
    let from = p.status;
    let all = payments::list_for_project(tx.exec(), id).await?;
    let money = MoneyOnProject {
        in_escrow: all.iter().filter(|y| y.status.may_hold_money()).count(),
        pending: all
            .iter()
            .filter(|y| y.status == PaymentStatus::Pending)
            .count(),
    };
    match admin_move(from, to, p.expert_id.is_some(), money) {
        Ok(()) => {}
        Err(AdminMoveRefusal::MoneyStranded) => {
            return Err(FlowError::conflict(
                "MONEY_STRANDED",
                format!(
                    "Moving the project to {} would strand money: {} payment(s) in escrow or dispute, {} awaiting authorisation; release or refund them first",
                    to.as_str(),
                    money.in_escrow,
                    money.pending
                ),
            ));
        }
        Err(AdminMoveRefusal::InvalidTransition) => {
            return Err(FlowError::conflict(
                "INVALID_TRANSITION",
                format!(
                    "A project cannot move from {} to {}",
                    from.as_str(),
                    to.as_str()
                ),
            ));
        }
    }
    if to == ProjectStatus::Cancelled || to.is_before_selection() {
        for y in all.iter().filter(|y| y.status == PaymentStatus::Pending) {
            if !payments::fail_pending(tx.exec(), y.id, "project_cancelled", now).await? {
                return Err(FlowError::conflict(
                    "MONEY_STRANDED",
                    "A payment was authorised a moment ago; release or refund it first",
                ));
            }
        }
        milestones::cancel_open_of_project(tx.exec(), id, now).await?;
    }
    if !projects::force(tx.exec(), id, from, to, now).await? {
        return Err(FlowError::conflict(
            "INVALID_STATE",
            "The project changed; try again",
        ));
    }
    let line = format!(
        "[ADMIN_STATUS] {} {} -> {} by administrator {admin_id}: {reason}",
        now.to_rfc3339(),
        from.as_str(),
        to.as_str()
    );
    projects::append_admin_note(tx.exec(), id, &line, now).await?;
    let details = json!({"from": from.as_str(), "to": to.as_str(), "reason": reason}).to_string();
    user_admin::record_action(
        tx.exec(),
        admin_id,
        None,
        Some(id),
        "project_status",
        &details,
        now,
    )
    .await?;
    let payload =
        json!({"project_id": id, "from": from.as_str(), "to": to.as_str(), "by_admin": admin_id});
    record(&mut tx, "project.status_changed", id, payload, now).await?;
    let project = projects::find(tx.exec(), id).await?.unwrap_or(p);
    state.commit(tx).await?;
    Ok(project)
}
