//! Reviews between a project's company and its expert, double-blind: a review is stored
//! `published` but its rating and words reach the reviewee and the public only once the
//! counterpart has reviewed too, or `REVIEW_BLIND_DAYS` after the project ended, whichever
//! comes first. Until then the author and administrators read it; others see that it exists
//! and when it will be revealed. The reveal is told to the reviewee once (notification,
//! e-mail, `review.received`): in the counterpart's transaction, or by the periodic job for
//! reviews whose window lapsed.
//!
//! A review is written under the project's lock, so two parties reviewing at once see each
//! other and reveal both; a second review by one author is refused by a unique index too.

use chrono::{DateTime, Utc};
use serde_json::json;

use crate::domain::project::ProjectStatus;
use crate::domain::reputation;
use crate::domain::reputation::ReviewVisibility;
use crate::domain::text::ReviewText;
use crate::domain::user::Role;
use crate::integrations::mail::Template;
use crate::state::AppState;
use crate::store::events::{self, NewEvent};
use crate::store::projects::{self, Project};
use crate::store::reviews::{self, NewReview, Review};
use crate::store::{LockScope, Tx, users};
use crate::workflows::emails::email;
use crate::workflows::error::{FlowError, FlowResult};
use crate::workflows::notify::for_user;
use crate::workflows::projects::{Caller, load_visible};

/// The name of the job that tells reveals whose window lapsed.
pub const REVEAL_JOB: &str = "review_reveal";

/// What a caller may read of a review.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    /// Rating, words and response.
    Full,
    /// That it exists and when it will be revealed.
    Sealed,
}

/// How `viewer` reads `review` at `now`; `None` when it is hidden from them.
pub fn reading(review: &Review, viewer: Option<&Caller>, now: DateTime<Utc>) -> Option<Reading> {
    let admin = viewer.is_some_and(|v| v.admin);
    let author = viewer.is_some_and(|v| review.reviewer_id == Some(v.id));
    if review.visibility != ReviewVisibility::Published && !admin && !author {
        return None;
    }
    Some(if admin || author || review.is_revealed(now) {
        Reading::Full
    } else {
        Reading::Sealed
    })
}

/// A review to write.
pub struct Draft {
    pub project_id: i64,
    pub reviewee_id: i64,
    pub rating: i64,
    pub comment: ReviewText,
}

/// Writes the caller's review of the project's counterpart. Refused: project unknown or not
/// visible (404), caller not its company or expert (403 `NOT_A_PARTY`), reviewee not the
/// counterpart (400 `WRONG_REVIEWEE`), project neither completed nor cancelled after a
/// release (400 `PROJECT_NOT_FINISHED`), a second review (409 `REVIEW_EXISTS`).
pub async fn create(state: &AppState, caller: &Caller, draft: Draft) -> FlowResult<Review> {
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    tx.lock(LockScope::Project, draft.project_id).await?;
    let (p, _) = load_visible(tx.exec(), caller, draft.project_id).await?;
    let (role, counterpart) = if p.company_id == Some(caller.id) {
        ("empresa", p.expert_id)
    } else if p.expert_id == Some(caller.id) {
        ("experto", p.company_id)
    } else {
        return Err(FlowError::forbidden_code(
            "NOT_A_PARTY",
            "Only the project's company and its expert review each other",
        ));
    };
    if counterpart != Some(draft.reviewee_id) {
        return Err(FlowError::rule(
            "WRONG_REVIEWEE",
            "The company reviews the project's expert, and the expert the company",
        ));
    }
    let ended_at = finished_at(&mut tx, &p).await?.ok_or_else(|| {
        FlowError::rule(
            "PROJECT_NOT_FINISHED",
            "A review can be written once the project is completed (or cancelled after a payment was released)",
        )
    })?;
    let id = reviews::insert(
        tx.exec(),
        &NewReview {
            project_id: p.id,
            reviewer_id: caller.id,
            reviewee_id: draft.reviewee_id,
            reviewer_role: role,
            rating: draft.rating,
            comment: draft.comment.as_str(),
            blind_until: ended_at + state.settings.review_blind_window,
        },
        now,
    )
    .await
    .map_err(|e| e.duplicate_as(already_reviewed))?;
    let both = reviews::of_project(tx.exec(), p.id).await?;
    if both.len() > 1 {
        // The counterpart reviewed first: both are revealed now, and told.
        reviews::reveal_project(tx.exec(), p.id, now).await?;
        for review in reviews::of_project(tx.exec(), p.id).await? {
            announce(&mut tx, &p, &review, now).await?;
        }
    }
    let review = reviews::find(tx.exec(), id)
        .await?
        .ok_or_else(|| FlowError::not_found("Review not found"))?;
    state.commit(tx).await?;
    Ok(review)
}

fn already_reviewed() -> FlowError {
    FlowError::conflict("REVIEW_EXISTS", "You have reviewed this project already")
}

/// When the project ended, if it did in a way that can be reviewed: completed, or cancelled
/// after at least one payment was released.
async fn finished_at(tx: &mut Tx, p: &Project) -> FlowResult<Option<DateTime<Utc>>> {
    Ok(match p.status {
        ProjectStatus::Completed => Some(p.completed_at.unwrap_or(p.updated_at)),
        ProjectStatus::Cancelled if projects::has_released_payment(tx.exec(), p.id).await? => {
            Some(p.cancelled_at.unwrap_or(p.updated_at))
        }
        _ => None,
    })
}

/// Tells the reviewee a review was revealed (once, and only while it is published).
async fn announce(tx: &mut Tx, p: &Project, review: &Review, now: DateTime<Utc>) -> FlowResult<()> {
    if !reviews::mark_announced(tx.exec(), review.id, now).await?
        || review.visibility != ReviewVisibility::Published
    {
        return Ok(());
    }
    let (Some(reviewee_id), Some(reviewer_id)) = (review.reviewee_id, review.reviewer_id) else {
        return Ok(());
    };
    let reviewer_kind = review
        .reviewer_role
        .as_deref()
        .and_then(Role::parse)
        .unwrap_or(Role::Empresa);
    let reviewee_kind = if reviewer_kind == Role::Empresa {
        Role::Experto
    } else {
        Role::Empresa
    };
    let reviewer_name = users::contact(tx.exec(), reviewer_id, reviewer_kind)
        .await?
        .map(|c| c.name)
        .unwrap_or_default();
    let mut mails = Vec::new();
    if let Some(reviewee) = users::contact(tx.exec(), reviewee_id, reviewee_kind).await? {
        mails.push(email(
            &reviewee.email,
            Template::ReviewReceived,
            json!({"name": reviewee.name, "reviewer_name": reviewer_name,
                   "rating": review.rating, "project_title": p.title, "project_id": p.id}),
        ));
    }
    let data = json!({"review_id": review.id, "project_id": p.id, "rating": review.rating});
    let payload = json!({
        "review_id": review.id, "project_id": p.id, "reviewer_id": reviewer_id,
        "reviewee_id": reviewee_id, "rating": review.rating,
        "notify": [for_user(reviewee_id, "review_received", "New review",
            &format!("{reviewer_name} reviewed you for \"{}\".", p.title), data)],
        "email": mails,
    });
    events::record(
        tx.exec(),
        NewEvent {
            kind: "review.received",
            aggregate: "review",
            aggregate_id: Some(review.id),
            payload,
        },
        now,
    )
    .await?;
    Ok(())
}

/// Tells the reveals whose blind window lapsed (the periodic job). Answers how many.
pub async fn announce_lapsed(state: &AppState) -> FlowResult<usize> {
    let now = state.clock.now();
    let due = {
        let mut conn = state.db.conn().await?;
        reviews::unannounced(conn.exec(), now, 200).await?
    };
    let mut told = 0;
    for review in due {
        let mut tx = state.db.begin().await?;
        let Some(p) = projects::find(tx.exec(), review.project_id).await? else {
            continue;
        };
        announce(&mut tx, &p, &review, now).await?;
        tx.commit().await?;
        told += 1;
    }
    if told > 0 {
        state.outbox.wake();
    }
    Ok(told)
}

/// Asks both parties of a project that just completed for a review (notification and
/// e-mail), each once. Called in the completing transaction.
pub async fn ask_for_reviews(tx: &mut Tx, project_id: i64, now: DateTime<Utc>) -> FlowResult<()> {
    let Some(p) = projects::find(tx.exec(), project_id).await? else {
        return Ok(());
    };
    let sides = [
        (p.company_id, Role::Empresa, p.expert_id, Role::Experto),
        (p.expert_id, Role::Experto, p.company_id, Role::Empresa),
    ];
    let mut notify = Vec::new();
    let mut mails = Vec::new();
    for (who, kind, other, other_kind) in sides {
        let (Some(who), Some(other)) = (who, other) else {
            continue;
        };
        if !reviews::request_once(tx.exec(), p.id, who, now).await? {
            continue;
        }
        let Some(person) = users::contact(tx.exec(), who, kind).await? else {
            continue;
        };
        let counterpart = users::contact(tx.exec(), other, other_kind)
            .await?
            .map(|c| c.name)
            .unwrap_or_default();
        notify.push(for_user(
            who,
            "review_request",
            "How did it go?",
            &format!("\"{}\" is completed: review {counterpart}.", p.title),
            json!({"project_id": p.id, "reviewee_id": other}),
        ));
        mails.push(email(
            &person.email,
            Template::ReviewRequest,
            json!({"name": person.name, "counterpart_name": counterpart,
                   "project_title": p.title, "project_id": p.id}),
        ));
    }
    if notify.is_empty() {
        return Ok(());
    }
    events::record(
        tx.exec(),
        NewEvent {
            kind: "project.review_requested",
            aggregate: "project",
            aggregate_id: Some(p.id),
            payload: json!({"project_id": p.id, "notify": notify, "email": mails}),
        },
        now,
    )
    .await?;
    Ok(())
}

/// The review `id` as `caller` may read it: 404 when unknown or hidden from them.
pub async fn get(
    state: &AppState,
    caller: Option<&Caller>,
    id: i64,
) -> FlowResult<(Review, Reading)> {
    let mut conn = state.db.conn().await?;
    let review = reviews::find(conn.exec(), id)
        .await?
        .ok_or_else(not_found)?;
    let reading = reading(&review, caller, state.clock.now()).ok_or_else(not_found)?;
    Ok((review, reading))
}

fn not_found() -> FlowError {
    FlowError::not_found("Review not found")
}

/// The author changes rating and/or words: only while unrevealed and unanswered (409
/// `REVIEW_LOCKED` otherwise).
pub async fn edit(
    state: &AppState,
    caller: &Caller,
    id: i64,
    rating: Option<i64>,
    comment: Option<ReviewText>,
) -> FlowResult<Review> {
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    let review = reviews::find(tx.exec(), id).await?.ok_or_else(not_found)?;
    if review.reviewer_id != Some(caller.id) {
        return Err(if reading(&review, Some(caller), now).is_some() {
            FlowError::forbidden("Only the author edits a review")
        } else {
            not_found()
        });
    }
    let rating = rating.unwrap_or(review.rating);
    let comment = comment
        .map(String::from)
        .unwrap_or_else(|| review.comment.clone().unwrap_or_default());
    if !reviews::edit(tx.exec(), id, rating, comment.trim(), now).await? {
        return Err(FlowError::conflict(
            "REVIEW_LOCKED",
            "A review can be edited only before it is revealed and answered",
        ));
    }
    let review = reviews::find(tx.exec(), id).await?.ok_or_else(not_found)?;
    tx.commit().await?;
    Ok(review)
}

/// The reviewee answers a revealed review: once (`POST`, 409 `RESPONSE_EXISTS` on a second),
/// or edits the answer (`PUT`, which also writes a first one).
pub async fn respond(
    state: &AppState,
    caller: &Caller,
    id: i64,
    response: &ReviewText,
    edit_allowed: bool,
) -> FlowResult<Review> {
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    let review = reviews::find(tx.exec(), id).await?.ok_or_else(not_found)?;
    let Some(_) = reading(&review, Some(caller), now) else {
        return Err(not_found());
    };
    if review.reviewee_id != Some(caller.id) {
        return Err(FlowError::forbidden(
            "Only the reviewee responds to a review",
        ));
    }
    if !review.is_revealed(now) {
        return Err(FlowError::conflict(
            "REVIEW_NOT_REVEALED",
            "A review can be answered once it is revealed",
        ));
    }
    let replace = edit_allowed && review.response.is_some();
    if !reviews::respond(tx.exec(), id, response, replace, now).await? {
        return Err(FlowError::conflict(
            "RESPONSE_EXISTS",
            "This review has a response already; edit it with PUT",
        ));
    }
    let review = reviews::find(tx.exec(), id).await?.ok_or_else(not_found)?;
    tx.commit().await?;
    Ok(review)
}

/// An administrator's `publish`, `hide` or `delete`, recorded with who and when. Answers the
/// review as it stands (`None` once deleted).
pub async fn moderate(
    state: &AppState,
    admin_id: i64,
    id: i64,
    action: Moderation,
) -> FlowResult<Option<Review>> {
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    let done = match action {
        Moderation::Publish => {
            reviews::set_visibility(tx.exec(), id, ReviewVisibility::Published, now).await?
        }
        Moderation::Hide => {
            reviews::set_visibility(tx.exec(), id, ReviewVisibility::Hidden, now).await?
        }
        Moderation::Delete => reviews::delete(tx.exec(), id).await?,
    };
    if !done {
        return Err(not_found());
    }
    reviews::log_moderation(tx.exec(), id, action.as_str(), admin_id, now).await?;
    let review = reviews::find(tx.exec(), id).await?;
    tx.commit().await?;
    Ok(review)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moderation {
    Publish,
    Hide,
    Delete,
}

impl Moderation {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Publish => "publish",
            Self::Hide => "hide",
            Self::Delete => "delete",
        }
    }
}

/// A user's review statistics: shown reviews received only.
pub struct Stats {
    pub summary: reputation::RatingSummary,
    pub recent: Vec<Review>,
}

pub async fn stats(state: &AppState, user_id: i64) -> FlowResult<Stats> {
    let now = state.clock.now();
    let mut conn = state.db.conn().await?;
    let counts = reviews::distribution(conn.exec(), user_id, now).await?;
    let recent = reviews::recent_shown(conn.exec(), user_id, now, 5).await?;
    Ok(Stats {
        summary: reputation::summarise(&counts),
        recent,
    })
}
