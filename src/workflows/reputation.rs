//! What administrators know of a user's standing: the internal rating they keep (with its
//! history), the lead score and the expert level it suggests.

use rust_decimal::Decimal;
use rust_decimal::prelude::ToPrimitive as _;
use serde_json::json;

use crate::domain::reputation::{self, LeadInputs, LeadScore};
use crate::domain::text::RatingReason;
use crate::state::AppState;
use crate::store::events::{self, NewEvent};
use crate::store::reputation::{self as store, NewChange, RatingChange};
use crate::store::{LockScope, projects, reviews, users};
use crate::workflows::error::{FlowError, FlowResult};

/// Sets a user's internal rating (as `reputation::check_internal_rating` answers it: 1.0–5.0,
/// one decimal) with its reason, written with the history entry and
/// `user.internal_rating_changed` in one transaction.
/// 404 for an unknown user, 409 `NO_PROFILE` for a user without a profile to rate.
pub async fn set_internal_rating(
    state: &AppState,
    admin: &users::User,
    user_id: i64,
    rating: Decimal,
    reason: RatingReason,
) -> FlowResult<RatingChange> {
    let new_rating = rating.to_f64().unwrap_or_default();
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    // Two changes of one user queue here, so each history entry names the rating it replaced.
    tx.lock(LockScope::User, user_id).await?;
    if users::find(tx.exec(), user_id).await?.is_none() {
        return Err(FlowError::not_found("User not found"));
    }
    let old_rating = store::current(tx.exec(), user_id)
        .await?
        .ok_or_else(|| FlowError::conflict("NO_PROFILE", "The user has no profile to rate yet"))?;
    store::set(tx.exec(), user_id, new_rating, now).await?;
    let id = store::record(
        tx.exec(),
        &NewChange {
            user_id,
            old_rating,
            new_rating,
            reason: &reason,
            changed_by: &admin.username,
            changed_by_id: admin.id,
        },
        now,
    )
    .await?;
    events::record(
        tx.exec(),
        NewEvent::of_user(
            "user.internal_rating_changed",
            user_id,
            json!({"user_id": user_id, "rating": new_rating, "old_rating": old_rating}),
        ),
        now,
    )
    .await?;
    let (history, _) = store::history(tx.exec(), user_id, 1).await?;
    state.commit(tx).await?;
    history
        .into_iter()
        .find(|h| h.id == id)
        .ok_or_else(|| FlowError::not_found("History entry not found"))
}

/// The newest `limit` (1–50) rating changes and how many there are.
pub async fn rating_history(
    state: &AppState,
    user_id: i64,
    limit: i64,
) -> FlowResult<(Vec<RatingChange>, i64)> {
    let mut conn = state.db.conn().await?;
    require_user(&mut conn, user_id).await?;
    Ok(store::history(conn.exec(), user_id, limit).await?)
}

async fn require_user(conn: &mut crate::store::Conn, user_id: i64) -> FlowResult<users::User> {
    users::find(conn.exec(), user_id)
        .await?
        .ok_or_else(|| FlowError::not_found("User not found"))
}

/// A user's standing: the lead score with what it was computed from.
pub struct Standing {
    pub inputs: LeadInputs,
    pub score: LeadScore,
    pub internal_rating: Option<f64>,
    /// The level of the user's expert profile, if they have one.
    pub expert_level: Option<String>,
}

pub async fn standing(state: &AppState, user_id: i64) -> FlowResult<Standing> {
    let now = state.clock.now();
    let mut conn = state.db.conn().await?;
    let user = require_user(&mut conn, user_id).await?;
    let completed_projects = projects::completed_count(conn.exec(), user_id).await?;
    let ratings = reputation::summarise(&reviews::distribution(conn.exec(), user_id, now).await?);
    let (profile_verified, expert_level) = store::verification(conn.exec(), user_id).await?;
    let internal_rating = store::current(conn.exec(), user_id).await?.flatten();
    let inputs = LeadInputs {
        completed_projects,
        review_average: ratings.average,
        review_count: ratings.total,
        email_verified: user.email_verified,
        profile_verified,
        last_active_at: user.last_login_at,
        registered_at: user.created_at,
        now,
    };
    let score = reputation::lead_score(&inputs);
    Ok(Standing {
        inputs,
        score,
        internal_rating,
        expert_level,
    })
}
