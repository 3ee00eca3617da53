//! The expert's connected payout account at the processor: creation, hosted onboarding and
//! update links, the status refresh, the `account.updated` sync, and the administrators'
//! disconnect. Transfers to an expert need this account `active`.

use chrono::{DateTime, TimeZone as _, Utc};
use serde_json::json;

use crate::domain::profile::ConnectStatus;
use crate::domain::token::random_token;
use crate::domain::user::Role;
use crate::integrations::processor::types::Account;
use crate::integrations::processor::{
    AccountLinkType, CreateAccount, CreateAccountLink, ProcessorError,
};
use crate::state::AppState;
use crate::store::events::{self, NewEvent};
use crate::store::profiles::{self, ProcessorLink};
use crate::store::users::User;
use crate::store::{Exec, LockScope, StoreResult};
use crate::workflows::error::{FlowError, FlowResult};
use crate::workflows::notify::for_user;

mod account_events;

pub(crate) use account_events::on_account_event;

/// The event an administrator's disconnect records (it also numbers reconnections).
const DISCONNECTED_EVENT: &str = "processor_connect.disconnected";

const EXPERT: Role = Role::Experto;

/// The one rule from the processor's account to `processor_connect_status`.
pub fn status_of(account: &Account) -> ConnectStatus {
    if account.charges_enabled && account.payouts_enabled && account.details_submitted {
        return ConnectStatus::Active;
    }
    // Before the holder submits their details the processor lists every onboarding field as
    // past due and the account as disabled: that is onboarding still to do, not a restriction.
    let blocked = account
        .requirements
        .as_ref()
        .is_some_and(|r| r.disabled_reason.is_some() || !r.past_due.is_empty());
    if account.details_submitted && blocked {
        ConnectStatus::Restricted
    } else {
        ConnectStatus::Pending
    }
}

/// Stores what the processor says of a connected account (an `account.updated` event's
/// object, or a fresh retrieval) on the profile holding it: status by [`status_of`] and both
/// flags. The new status, or `None` when no profile holds the account (e.g. disconnected).
pub async fn apply_account_update(
    ex: Exec<'_>,
    account: &Account,
    now: DateTime<Utc>,
) -> StoreResult<Option<ConnectStatus>> {
    let status = status_of(account);
    let found = profiles::set_connect_state(
        ex,
        &account.id,
        status,
        account.charges_enabled,
        account.payouts_enabled,
        now,
    )
    .await?;
    Ok(found.then_some(status))
}

/// The expert's connection, refreshed from the processor when there is an account. `None`
/// when the user has no expert profile. A processor that cannot be reached leaves the stored
/// state as the answer; the next refresh or `account.updated` catches up.
pub async fn status(state: &AppState, user_id: i64) -> FlowResult<Option<ProcessorLink>> {
    let link = load(state, user_id).await?;
    let Some(account_id) = link.as_ref().and_then(|l| l.connect_account_id.as_deref()) else {
        return Ok(link);
    };
    match state.processor.client.retrieve_account(account_id).await {
        Ok(account) => {
            let mut conn = state.db.conn().await?;
            apply_account_update(conn.exec(), &account, state.clock.now()).await?;
            load(state, user_id).await
        }
        Err(error) => {
            tracing::warn!(user_id, %error, "connected account not refreshed");
            Ok(link)
        }
    }
}

/// A hosted page of the processor for the expert's account.
#[derive(Debug, Clone)]
pub struct Link {
    pub url: String,
    pub expires_at: DateTime<Utc>,
    pub kind: AccountLinkType,
}

/// The onboarding link, creating the expert's express account first when there is none.
pub async fn account_link(state: &AppState, user: &User) -> FlowResult<Link> {
    let link = load(state, user.id).await?.ok_or_else(|| {
        FlowError::rule(
            "EXPERT_PROFILE_REQUIRED",
            "Create your expert profile before connecting a payout account",
        )
    })?;
    let account = ensure_account(state, user, link).await?;
    create_link(state, user.id, &account, AccountLinkType::Onboarding)
        .await
        .map_err(|e| processor_failure(e, "account link"))
}

/// The link to change the account's details; while onboarding is incomplete the processor
/// refuses it, and the onboarding link is what the expert needs instead.
pub async fn account_update_link(state: &AppState, user_id: i64) -> FlowResult<Link> {
    let account = load(state, user_id)
        .await?
        .and_then(|l| l.connect_account_id)
        .ok_or_else(|| {
            FlowError::rule(
                "PROCESSOR_CONNECT_NOT_STARTED",
                "There is no payout account yet; start onboarding first",
            )
        })?;
    match create_link(state, user_id, &account, AccountLinkType::Update).await {
        Ok(link) => Ok(link),
        Err(e) if is_refusal(&e) => {
            tracing::debug!(user_id, error = %e, "update link refused; onboarding link instead");
            create_link(state, user_id, &account, AccountLinkType::Onboarding)
                .await
                .map_err(|e| processor_failure(e, "account link"))
        }
        Err(e) => Err(processor_failure(e, "account update link")),
    }
}

/// Detaches the expert's account (administrators): no account id, status `disconnected`,
/// flags off; the expert is told. The account itself stays at the processor. Disconnecting
/// a user without an account changes nothing but the status.
pub async fn disconnect(
    state: &AppState,
    admin_id: i64,
    user_id: i64,
) -> FlowResult<ProcessorLink> {
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    tx.lock(LockScope::User, user_id).await?;
    let link = profiles::processor_link(tx.exec(), user_id, EXPERT)
        .await?
        .ok_or_else(|| FlowError::not_found("This user has no expert profile"))?;
    profiles::clear_connect_account(tx.exec(), link.profile_id, ConnectStatus::Disconnected, now)
        .await?;
    if let Some(account) = &link.connect_account_id {
        events::record(
            tx.exec(),
            NewEvent {
                kind: DISCONNECTED_EVENT,
                aggregate: "profile",
                aggregate_id: Some(link.profile_id),
                payload: json!({
                    "user_id": user_id, "account_id": account, "by": admin_id,
                    "notify": [for_user(
                        user_id,
                        "processor_connect_disconnected",
                        "Payout account disconnected",
                        "An administrator disconnected your payout account. Connect one again to receive payments.",
                        json!({"account_id": account}),
                    )],
                }),
            },
            now,
        )
        .await?;
    }
    let link = profiles::processor_link(tx.exec(), user_id, EXPERT)
        .await?
        .ok_or_else(|| FlowError::not_found("This user has no expert profile"))?;
    state.commit(tx).await?;
    Ok(link)
}

async fn load(state: &AppState, user_id: i64) -> FlowResult<Option<ProcessorLink>> {
    let mut conn = state.db.conn().await?;
    Ok(profiles::processor_link(conn.exec(), user_id, EXPERT).await?)
}

/// The profile's account id, creating the express account when there is none. The key is
/// derived from the user (and how many times an administrator disconnected them), so a retry
/// or a concurrent request gets the same account, and a reconnection a fresh one.
async fn ensure_account(state: &AppState, user: &User, link: ProcessorLink) -> FlowResult<String> {
    if let Some(id) = link.connect_account_id {
        return Ok(id);
    }
    let reconnections = {
        let mut conn = state.db.conn().await?;
        events::count_of(conn.exec(), DISCONNECTED_EVENT, "profile", link.profile_id).await?
    };
    let key = match reconnections {
        0 => format!("connect_account_{}", user.id),
        n => format!("connect_account_{}_{n}", user.id),
    };
    let params = CreateAccount {
        email: user.email.clone(),
        country: None,
        metadata: [
            ("user_id".to_owned(), user.id.to_string()),
            ("profile_id".to_owned(), link.profile_id.to_string()),
        ]
        .into(),
    };
    let account = state
        .processor
        .client
        .create_account(&params, &key)
        .await
        .map_err(|e| processor_failure(e, "create account"))?;
    let mut conn = state.db.conn().await?;
    let now = state.clock.now();
    if profiles::set_connect_account(
        conn.exec(),
        link.profile_id,
        &account.id,
        ConnectStatus::Pending,
        now,
    )
    .await?
    {
        return Ok(account.id);
    }
    // A concurrent request stored its account first: keep that one.
    let stored = profiles::processor_link(conn.exec(), user.id, EXPERT)
        .await?
        .and_then(|l| l.connect_account_id);
    Ok(stored.unwrap_or(account.id))
}

async fn create_link(
    state: &AppState,
    user_id: i64,
    account: &str,
    kind: AccountLinkType,
) -> Result<Link, ProcessorError> {
    let base = state.settings.frontend_url.trim_end_matches('/');
    let params = CreateAccountLink {
        account: account.to_owned(),
        kind,
        refresh_url: format!("{base}/expert/payouts?refresh=true"),
        return_url: format!("{base}/expert/payouts?onboarding=return"),
    };
    // Each request wants a new single-use link: a fresh key, so nothing replays a used one.
    let key = format!("account_link_{user_id}_{}", random_token(12));
    let link = state
        .processor
        .client
        .create_account_link(&params, &key)
        .await?;
    Ok(Link {
        url: link.url,
        expires_at: Utc
            .timestamp_opt(link.expires_at, 0)
            .single()
            .unwrap_or_else(|| state.clock.now()),
        kind,
    })
}

/// The processor understood the request and said no (not an outage, not an unknown object).
pub(crate) fn is_refusal(error: &ProcessorError) -> bool {
    matches!(
        error,
        ProcessorError::Api {
            status: 400..=499,
            ..
        }
    ) && !error.is_retryable()
        && !error.is_not_found()
}

/// A processor failure as the workflows report it: an outage may be retried (503), anything
/// else is ours to look into.
pub(crate) fn processor_failure(error: ProcessorError, doing: &'static str) -> FlowError {
    if error.is_retryable() {
        tracing::warn!(%error, doing, "processor unavailable");
        FlowError::unavailable("The payment processor is unavailable; try again")
    } else {
        FlowError::Internal(anyhow::anyhow!("processor: {doing}: {error}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::integrations::processor::types::AccountRequirements;

    fn account(charges: bool, payouts: bool, submitted: bool, req: AccountRequirements) -> Account {
        Account {
            id: "acct_1".into(),
            charges_enabled: charges,
            payouts_enabled: payouts,
            details_submitted: submitted,
            email: None,
            country: None,
            requirements: Some(req),
            metadata: Default::default(),
        }
    }

    #[test]
    fn status_follows_the_processor_flags() {
        let none = AccountRequirements::default();
        let past_due = AccountRequirements {
            past_due: vec!["external_account".into()],
            ..Default::default()
        };
        let disabled = AccountRequirements {
            disabled_reason: Some("requirements.past_due".into()),
            ..Default::default()
        };
        assert_eq!(
            status_of(&account(true, true, true, none.clone())),
            ConnectStatus::Active
        );
        // A new account: onboarding to do, even though the processor calls it disabled.
        assert_eq!(
            status_of(&account(false, false, false, disabled.clone())),
            ConnectStatus::Pending
        );
        assert_eq!(
            status_of(&account(false, false, false, past_due.clone())),
            ConnectStatus::Pending
        );
        // Onboarded, then disabled or missing information: restricted.
        assert_eq!(
            status_of(&account(false, true, true, disabled)),
            ConnectStatus::Restricted
        );
        assert_eq!(
            status_of(&account(true, false, true, past_due)),
            ConnectStatus::Restricted
        );
        // Onboarded, nothing missing, not yet enabled: under review.
        assert_eq!(
            status_of(&account(false, false, true, none)),
            ConnectStatus::Pending
        );
        let mut bare = account(true, true, false, AccountRequirements::default());
        bare.requirements = None;
        assert_eq!(status_of(&bare), ConnectStatus::Pending);
    }
}
