//! The deadlines of timed transitions (issue 20), kept beside what they concern: a delivery's
//! auto-approval and reminders, an expert's dispute waiting for the company, a milestone
//! waiting for its payment. Each kind is found by a partial index of what still waits; every
//! effect is a conditional update, so two instances firing one timer change it once.
//!
//! A timer of a project that is not under way (disputed: its clock stops; cancelled or
//! completed: nothing to do) is neither due nor counted for the next wake-up.

use chrono::{DateTime, Utc};

use super::{Exec, StoreResult};
use crate::on_exec;

/// Project statuses in which work goes on, so timers run.
macro_rules! under_way {
    () => {
        "p.status IN ('assigned', 'in_progress', 'in_review')"
    };
}

/// A delivery's milestone still waiting for its review (not cancelled or approved by
/// another path, e.g. a dispute's decision).
macro_rules! reviewable {
    () => {
        "m.status IN ('pending', 'in_progress', 'completed')"
    };
}

/// A delivery whose review clock has run out or whose company is to be reminded.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DueDelivery {
    pub id: i64,
    pub project_id: i64,
    pub milestone_id: i64,
    pub auto_approve_at: DateTime<Utc>,
    pub reminders_sent: i64,
}

/// The review clocks of a project's submitted deliveries, to move them on by the time a
/// dispute stopped them.
pub async fn review_clocks_of_project(
    ex: Exec<'_>,
    project_id: i64,
) -> StoreResult<Vec<(i64, DateTime<Utc>, Option<DateTime<Utc>>)>> {
    Ok(on_exec!(ex, c => sqlx::query_as(
        "SELECT id, auto_approve_at, remind_at FROM deliveries
         WHERE project_id = $1 AND status = 'submitted' AND auto_approve_at IS NOT NULL",
    )
    .bind(project_id)
    .fetch_all(c)
    .await)?)
}

/// Sets a submitted delivery's review clock (after a dispute stopped it).
pub async fn set_review_clock(
    ex: Exec<'_>,
    id: i64,
    auto_approve_at: DateTime<Utc>,
    remind_at: Option<DateTime<Utc>>,
) -> StoreResult<()> {
    on_exec!(ex, c => sqlx::query(
        "UPDATE deliveries SET auto_approve_at = $1, remind_at = $2
         WHERE id = $3 AND status = 'submitted'",
    )
    .bind(auto_approve_at)
    .bind(remind_at)
    .bind(id)
    .execute(c)
    .await
    .map(drop))?;
    Ok(())
}

/// Deliveries to approve now, oldest deadline first.
pub async fn deliveries_to_approve(
    ex: Exec<'_>,
    now: DateTime<Utc>,
    limit: i64,
) -> StoreResult<Vec<DueDelivery>> {
    Ok(on_exec!(ex, c => sqlx::query_as::<_, DueDelivery>(concat!(
        "SELECT d.id, d.project_id, d.milestone_id, d.auto_approve_at, d.reminders_sent
         FROM deliveries d JOIN projects p ON p.id = d.project_id
         JOIN milestones m ON m.id = d.milestone_id
         WHERE d.status = 'submitted' AND d.auto_approve_at <= $1 AND ", under_way!(), "
           AND ", reviewable!(), "
         ORDER BY d.auto_approve_at, d.id LIMIT $2"
    ))
    .bind(now)
    .bind(limit)
    .fetch_all(c)
    .await)?)
}

/// Deliveries whose company is to be reminded now.
pub async fn deliveries_to_remind(
    ex: Exec<'_>,
    now: DateTime<Utc>,
    limit: i64,
) -> StoreResult<Vec<DueDelivery>> {
    Ok(on_exec!(ex, c => sqlx::query_as::<_, DueDelivery>(concat!(
        "SELECT d.id, d.project_id, d.milestone_id, d.auto_approve_at, d.reminders_sent
         FROM deliveries d JOIN projects p ON p.id = d.project_id
         JOIN milestones m ON m.id = d.milestone_id
         WHERE d.status = 'submitted' AND d.remind_at <= $1 AND d.auto_approve_at IS NOT NULL
           AND ", under_way!(), " AND ", reviewable!(), "
         ORDER BY d.remind_at, d.id LIMIT $2"
    ))
    .bind(now)
    .bind(limit)
    .fetch_all(c)
    .await)?)
}

/// Records reminder number `sent` of a submitted delivery (and when the next is due), if
/// `before` were sent so far: the guard that sends each reminder once.
pub async fn mark_reminded(
    ex: Exec<'_>,
    id: i64,
    before: i64,
    sent: i64,
    next: Option<DateTime<Utc>>,
) -> StoreResult<bool> {
    let done = on_exec!(ex, c => sqlx::query(
        "UPDATE deliveries SET reminders_sent = $1, remind_at = $2
         WHERE id = $3 AND status = 'submitted' AND reminders_sent = $4",
    )
    .bind(sent)
    .bind(next)
    .bind(id)
    .bind(before)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}

/// An expert's dispute left unanswered.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DueDispute {
    pub id: i64,
    pub project_id: i64,
}

/// Starts the company's reply clock of a dispute raised by the expert.
pub async fn start_response_clock(ex: Exec<'_>, id: i64, due: DateTime<Utc>) -> StoreResult<()> {
    on_exec!(ex, c => sqlx::query("UPDATE disputes SET response_due_at = $1 WHERE id = $2")
        .bind(due)
        .bind(id)
        .execute(c)
        .await
        .map(drop))?;
    Ok(())
}

/// Open disputes whose company reply is overdue (not escalated yet).
pub async fn disputes_to_escalate(
    ex: Exec<'_>,
    now: DateTime<Utc>,
    limit: i64,
) -> StoreResult<Vec<DueDispute>> {
    Ok(on_exec!(ex, c => sqlx::query_as::<_, DueDispute>(
        "SELECT id, project_id FROM disputes
         WHERE status = 'open' AND escalated_at IS NULL AND response_due_at <= $1
         ORDER BY response_due_at, id LIMIT $2",
    )
    .bind(now)
    .bind(limit)
    .fetch_all(c)
    .await)?)
}

/// The company of the dispute's project wrote in the project's chat since it was raised.
macro_rules! company_replied {
    () => {
        "EXISTS (SELECT 1 FROM chat_messages cm JOIN projects cp ON cp.id = cm.project_id
                 WHERE cm.project_id = disputes.project_id AND cm.sender_id = cp.company_id
                   AND cm.created_at >= disputes.created_at)"
    };
}

/// What the dispute's clock ended in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseOutcome {
    /// No reply: escalated now, marked for priority mediation.
    Escalated,
    /// The company replied: the clock is stopped (`response_due_at` cleared).
    Answered,
    /// Another instance (or a mediator) got there first.
    Nothing,
}

/// Escalates an overdue open dispute the company has not answered, or stops its clock when
/// it has; both conditional, so the escalation happens once.
pub async fn close_response_clock(
    mut ex: Exec<'_>,
    id: i64,
    now: DateTime<Utc>,
) -> StoreResult<ResponseOutcome> {
    let escalated = on_exec!(ex.re(), c => sqlx::query(concat!(
        "UPDATE disputes SET escalated_at = $1, priority = 'urgent', updated_at = $1
         WHERE id = $2 AND status = 'open' AND escalated_at IS NULL AND response_due_at <= $1
           AND NOT ", company_replied!()
    ))
    .bind(now)
    .bind(id)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    if escalated == 1 {
        return Ok(ResponseOutcome::Escalated);
    }
    let answered = on_exec!(ex, c => sqlx::query(concat!(
        "UPDATE disputes SET response_due_at = NULL
         WHERE id = $1 AND status = 'open' AND escalated_at IS NULL AND response_due_at IS NOT NULL
           AND ", company_replied!()
    ))
    .bind(id)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(if answered == 1 {
        ResponseOutcome::Answered
    } else {
        ResponseOutcome::Nothing
    })
}

/// A milestone whose company is to be reminded to fund it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DueFunding {
    pub id: i64,
    pub project_id: i64,
}

/// Milestones `awaiting_payment` past their funding reminder, not reminded yet.
pub async fn milestones_to_remind(
    ex: Exec<'_>,
    now: DateTime<Utc>,
    limit: i64,
) -> StoreResult<Vec<DueFunding>> {
    Ok(on_exec!(ex, c => sqlx::query_as::<_, DueFunding>(concat!(
        "SELECT m.id, m.project_id FROM milestones m JOIN projects p ON p.id = m.project_id
         WHERE m.status = 'awaiting_payment' AND m.funding_reminded_at IS NULL
           AND m.funding_due_at <= $1 AND ", under_way!(), "
         ORDER BY m.funding_due_at, m.id LIMIT $2"
    ))
    .bind(now)
    .bind(limit)
    .fetch_all(c)
    .await)?)
}

/// Records the funding reminder of a milestone still awaiting payment, once.
pub async fn mark_funding_reminded(ex: Exec<'_>, id: i64, now: DateTime<Utc>) -> StoreResult<bool> {
    let done = on_exec!(ex, c => sqlx::query(
        "UPDATE milestones SET funding_reminded_at = $1
         WHERE id = $2 AND status = 'awaiting_payment' AND funding_reminded_at IS NULL",
    )
    .bind(now)
    .bind(id)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    Ok(done == 1)
}

/// The earliest deadline still waiting, of any kind (what the timer job sleeps until).
pub async fn next_deadline(mut ex: Exec<'_>) -> StoreResult<Option<DateTime<Utc>>> {
    // One statement per index, so each MIN reads the first entry of its partial index.
    let queries: [&'static str; 4] = [
        concat!(
            "SELECT MIN(d.auto_approve_at) FROM deliveries d JOIN projects p ON p.id = d.project_id
         JOIN milestones m ON m.id = d.milestone_id
             WHERE d.status = 'submitted' AND ",
            under_way!(),
            " AND ",
            reviewable!()
        ),
        concat!(
            "SELECT MIN(d.remind_at) FROM deliveries d JOIN projects p ON p.id = d.project_id
         JOIN milestones m ON m.id = d.milestone_id
             WHERE d.status = 'submitted' AND ",
            under_way!(),
            " AND ",
            reviewable!()
        ),
        "SELECT MIN(response_due_at) FROM disputes WHERE status = 'open' AND escalated_at IS NULL",
        concat!(
            "SELECT MIN(m.funding_due_at) FROM milestones m JOIN projects p ON p.id = m.project_id
             WHERE m.status = 'awaiting_payment' AND m.funding_reminded_at IS NULL AND ",
            under_way!()
        ),
    ];
    let mut next: Option<DateTime<Utc>> = None;
    for query in queries {
        let at: Option<DateTime<Utc>> =
            on_exec!(ex.re(), c => sqlx::query_scalar(query).fetch_one(c).await)?;
        next = match (next, at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    Ok(next)
}
