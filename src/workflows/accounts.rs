//! Account use cases shared by the HTTP layer and the command line.

use anyhow::{Context as _, bail};

use crate::clock::Clock;
use crate::domain::user::{EmailAddress, Role, Username, check_password_policy};
use crate::store::{Db, users};
use crate::workflows::passwords;

/// Creates an active, verified administrator. Fails when the e-mail or username is taken.
pub async fn create_admin(
    db: &Db,
    clock: &Clock,
    bcrypt_cost: u32,
    email: &str,
    username: &str,
    password: &str,
) -> anyhow::Result<i64> {
    create_user(
        db,
        clock,
        bcrypt_cost,
        email,
        username,
        password,
        &[Role::Admin],
    )
    .await
}

/// Creates an active user with verified e-mail and the given roles (the first is active).
pub async fn create_user(
    db: &Db,
    clock: &Clock,
    bcrypt_cost: u32,
    email: &str,
    username: &str,
    password: &str,
    roles: &[Role],
) -> anyhow::Result<i64> {
    let email = EmailAddress::parse(email).map_err(|e| anyhow::anyhow!("email {e}"))?;
    let username = Username::parse(username).map_err(|e| anyhow::anyhow!("username {e}"))?;
    check_password_policy(password).map_err(|e| anyhow::anyhow!("password {e}"))?;
    let hash = passwords::hash(password.to_owned(), bcrypt_cost).await?;

    let mut tx = db.begin().await?;
    if users::exists(tx.exec(), email.as_str(), username.as_str()).await? {
        bail!("a user with this e-mail or username already exists");
    }
    let new = users::NewUser {
        email: email.as_str(),
        username: username.as_str(),
        password_hash: &hash,
        roles,
        email_verified: true,
        accept_marketing: false,
        source: None,
    };
    let id = users::insert(tx.exec(), &new, clock.now())
        .await
        .context("cannot store the user")?;
    tx.commit().await?;
    Ok(id)
}

use chrono::Duration;

use crate::domain::token::{hash_token, random_token};
use crate::integrations::mail::Template;
use crate::state::AppState;
use crate::store::tokens::{self, Purpose};
use crate::store::users::User;
use crate::store::{StoreError, sessions};
use crate::workflows::auth::sessions_ended;
use crate::workflows::emails::{Mint, email, email_with_token};
use crate::workflows::error::{FlowError, FlowResult};

pub const VERIFICATION_TTL: Duration = Duration::hours(48);
pub const RESET_TTL: Duration = Duration::hours(1);
/// How long the previous address of an e-mail change can undo it.
pub const UNDO_EMAIL_CHANGE_TTL: Duration = Duration::days(7);
/// At most one lock-out notice per account in this long (service clock).
pub const LOCKOUT_NOTICE_EVERY: Duration = Duration::hours(1);

/// One attempt counted in an account's login budget (`http::rate_limit::login_account`): a
/// login, or the current-password check of a password or e-mail change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoginAttempt {
    /// This attempt spent the last of the window's budget: if its password is wrong, wrong
    /// passwords have locked the account until the window ends.
    pub last: bool,
    /// How long until the window ends.
    pub resets_in: std::time::Duration,
}

/// Why an account operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum AccountError {
    #[error("e-mail already registered")]
    EmailTaken,
    #[error("username already taken")]
    UsernameTaken,
    #[error("the token is invalid")]
    InvalidToken,
    #[error("the token has expired")]
    ExpiredToken,
    #[error("the token was already used")]
    UsedToken,
    #[error("wrong password")]
    WrongPassword,
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

impl From<crate::integrations::cache::CacheError> for AccountError {
    fn from(err: crate::integrations::cache::CacheError) -> Self {
        Self::Other(err.into())
    }
}

/// Queues a verification link for the user's current address (its token is made when the
/// e-mail is sent: `emails::Mint`).
pub async fn send_verification(state: &AppState, user: &User) -> Result<(), AccountError> {
    let mut tx = state.db.begin().await?;
    record_verification_mail(&mut tx, user, state.clock.now()).await?;
    state.commit(tx).await?;
    Ok(())
}

/// Records, in `tx`, the event that mails `user` a verification link for their address.
async fn record_verification_mail(
    tx: &mut crate::store::Tx,
    user: &User,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<(), AccountError> {
    record_token_mail(
        tx,
        user,
        "user.verification_mailed",
        Template::VerifyEmail,
        Purpose::VerifyEmail,
        VERIFICATION_TTL,
        now,
    )
    .await
}

/// Records, in `tx`, an event `kind` whose e-mail (`template`) carries a single-use token of
/// `purpose`, made when it is sent and valid `ttl` from then. The mail server is never waited
/// on here: the message leaves through the outbox and the mail queue, retried while the
/// server is away.
async fn record_token_mail(
    tx: &mut crate::store::Tx,
    user: &User,
    kind: &'static str,
    template: Template,
    purpose: Purpose,
    ttl: Duration,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<(), AccountError> {
    let mint = Mint {
        purpose,
        user_id: user.id,
        ttl_seconds: ttl.num_seconds(),
    };
    let mail = email_with_token(
        &user.email,
        template,
        serde_json::json!({ "name": user.username }),
        mint,
    );
    record_mail_event(tx, kind, user.id, mail, now).await
}

/// Records, in `tx`, an event `kind` of user `user_id` whose one effect is the e-mail `mail`
/// (an `emails::email` entry).
async fn record_mail_event(
    tx: &mut crate::store::Tx,
    kind: &'static str,
    user_id: i64,
    mail: serde_json::Value,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<(), AccountError> {
    crate::store::events::record(
        tx.exec(),
        crate::store::events::NewEvent::of_user(
            kind,
            user_id,
            serde_json::json!({ "user_id": user_id, "email": [mail] }),
        ),
        now,
    )
    .await?;
    Ok(())
}

/// Spends a mailed single-use token of `purpose` in `tx`: unknown → invalid, used (also by a
/// concurrent request, caught by the conditional consume) → used, lapsed → expired.
async fn spend_token(
    tx: &mut crate::store::Tx,
    purpose: Purpose,
    token: &str,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<tokens::OneTimeToken, AccountError> {
    let found = tokens::find(tx.exec(), purpose, &hash_token(token))
        .await?
        .ok_or(AccountError::InvalidToken)?;
    if found.used_at.is_some() {
        return Err(AccountError::UsedToken);
    }
    if found.expires_at <= now {
        return Err(AccountError::ExpiredToken);
    }
    if !tokens::consume(tx.exec(), found.id, now).await? {
        return Err(AccountError::UsedToken);
    }
    Ok(found)
}

/// Spends a verification token: marks the address verified and sends the welcome e-mail.
pub async fn verify_email(state: &AppState, token: &str) -> Result<User, AccountError> {
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    let found = spend_token(&mut tx, Purpose::VerifyEmail, token, now).await?;
    // The address may have changed since the token was sent: then it verifies nothing.
    if !users::verify_email(tx.exec(), found.user_id, &found.email, now).await? {
        return Err(AccountError::InvalidToken);
    }
    let user = users::find(tx.exec(), found.user_id)
        .await?
        .ok_or(AccountError::InvalidToken)?;
    let template = match (
        user.roles.contains(&Role::Empresa),
        user.roles.contains(&Role::Experto),
    ) {
        (true, false) => Template::WelcomeCompany,
        (false, true) => Template::WelcomeExpert,
        _ => Template::WelcomeGeneric,
    };
    let welcome = email(
        &user.email,
        template,
        serde_json::json!({ "name": user.username }),
    );
    record_mail_event(&mut tx, "user.email_verified", user.id, welcome, now).await?;
    state.commit(tx).await?;
    super::auth::user_changed(state, user.id);
    Ok(user)
}

/// Sends a reset link when the address belongs to an active account; silent otherwise, and
/// at most one e-mail per account every two minutes.
pub async fn request_password_reset(state: &AppState, email: &str) -> Result<(), AccountError> {
    let Ok(email) = EmailAddress::parse(email) else {
        return Ok(());
    };
    let mut conn = state.db.conn().await?;
    let Some(user) = users::find_by_email(conn.exec(), email.as_str()).await? else {
        return Ok(());
    };
    drop(conn);
    if !user.is_active {
        return Ok(());
    }
    // A limit like the others: while the shared cache is away it counts in this instance.
    let window = state
        .cache
        .hit(
            &format!("reset-mail:{}", user.id),
            std::time::Duration::from_secs(120),
        )
        .await
        .map_err(|e| AccountError::Other(e.into()))?;
    if window.count > 1 {
        return Ok(());
    }
    let mut tx = state.db.begin().await?;
    record_token_mail(
        &mut tx,
        &user,
        "user.password_reset_mailed",
        Template::PasswordReset,
        Purpose::ResetPassword,
        RESET_TTL,
        state.clock.now(),
    )
    .await?;
    state.commit(tx).await?;
    Ok(())
}

/// Sets a new password with a reset token; every session of the account ends, and every other
/// mailed verification or reset link stops working.
pub async fn reset_password(
    state: &AppState,
    token: &str,
    new_password: &str,
) -> Result<(), AccountError> {
    let hash = passwords::hash(new_password.to_owned(), state.settings.bcrypt_cost).await?;
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    let found = spend_token(&mut tx, Purpose::ResetPassword, token, now).await?;
    users::set_password(tx.exec(), found.user_id, &hash, now).await?;
    tokens::retire_credential_links(tx.exec(), found.user_id, now).await?;
    sessions::revoke_all_of_user(
        tx.exec(),
        found.user_id,
        None,
        crate::domain::access_token::revoke_reason::PASSWORD_CHANGED,
        now,
    )
    .await?;
    tx.commit().await?;
    sessions_ended(state, found.user_id).await?;
    Ok(())
}

/// After a wrong password on an account (a login, or a current-password check): when it spent
/// the last attempt of the account's login budget, the owner is told by e-mail that sign-in is
/// paused, with a link to ask for a reset, at most once per [`LOCKOUT_NOTICE_EVERY`]. The
/// answer to the request does not change, and a failure here is only logged.
pub async fn password_refused(state: &AppState, user: &User, attempt: LoginAttempt) {
    if !attempt.last || user.deleted_at.is_some() {
        return;
    }
    if let Err(err) = notify_lockout(state, user, attempt.resets_in).await {
        tracing::warn!(user_id = user.id, error = %err, "lock-out notice not recorded");
    }
}

async fn notify_lockout(
    state: &AppState,
    user: &User,
    paused_for: std::time::Duration,
) -> Result<(), AccountError> {
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    if !users::claim_lockout_notice(tx.exec(), user.id, now, now - LOCKOUT_NOTICE_EVERY).await? {
        return Ok(());
    }
    let mail = email(
        &user.email,
        Template::AccountLocked,
        serde_json::json!({ "name": user.username, "wait": pause_in_words(paused_for) }),
    );
    record_mail_event(&mut tx, "user.login_locked", user.id, mail, now).await?;
    state.commit(tx).await?;
    Ok(())
}

/// "45 seconds", "1 minute", "3 minutes" (rounded up to whole minutes past two minutes).
fn pause_in_words(pause: std::time::Duration) -> String {
    let seconds = pause.as_secs().max(1);
    match seconds {
        1 => "1 second".to_owned(),
        2..=119 if seconds != 60 => format!("{seconds} seconds"),
        _ => match seconds.div_ceil(60) {
            1 => "1 minute".to_owned(),
            minutes => format!("{minutes} minutes"),
        },
    }
}

/// Checks the current password a signed-in user gives to change their credentials (the caller
/// counted the attempt in the account's login budget first; bcrypt runs on the blocking pool).
/// A wrong one counts against the session that sent it: at as many failures in a login window
/// as the account's login budget (`LOGIN_RATE_LIMIT_MAX_ATTEMPTS_PER_USER`), the session ends,
/// so whoever stole it cannot go on guessing with it. A wrong password that spends the budget
/// tells the owner as a login's would ([`password_refused`]).
async fn check_current_password(
    state: &AppState,
    user: &User,
    session_id: i64,
    attempt: LoginAttempt,
    password: &str,
) -> Result<(), AccountError> {
    if passwords::verify(password.to_owned(), user.password_hash.clone()).await? {
        return Ok(());
    }
    password_refused(state, user, attempt).await;
    let window = std::time::Duration::from_secs(u64::from(state.settings.login_window_seconds));
    let failures = state
        .cache
        .hit(&format!("password-check-failures:{session_id}"), window)
        .await?;
    if failures.count >= u64::from(state.settings.login_max_attempts_per_user) {
        let mut conn = state.db.conn().await?;
        sessions::revoke(
            conn.exec(),
            session_id,
            crate::domain::access_token::revoke_reason::PASSWORD_CHECKS_FAILED,
            state.clock.now(),
        )
        .await?;
        drop(conn);
        super::auth::session_ended(state, session_id).await?;
        tracing::info!(
            user_id = user.id,
            session_id,
            "session ended after repeated wrong current passwords"
        );
    }
    Err(AccountError::WrongPassword)
}

/// Changes the password after checking the current one ([`check_current_password`]); other
/// sessions end, and mailed verification and reset links stop working.
pub async fn change_password(
    state: &AppState,
    user: &User,
    session_id: i64,
    attempt: LoginAttempt,
    current: &str,
    new_password: &str,
) -> Result<(), AccountError> {
    check_current_password(state, user, session_id, attempt, current).await?;
    let hash = passwords::hash(new_password.to_owned(), state.settings.bcrypt_cost).await?;
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    users::set_password(tx.exec(), user.id, &hash, now).await?;
    tokens::retire_credential_links(tx.exec(), user.id, now).await?;
    sessions::revoke_all_of_user(
        tx.exec(),
        user.id,
        Some(session_id),
        crate::domain::access_token::revoke_reason::PASSWORD_CHANGED,
        now,
    )
    .await?;
    tx.commit().await?;
    sessions_ended(state, user.id).await?;
    Ok(())
}

/// Moves the account to a new address (unverified) and sends it a verification link, after
/// checking the current password ([`check_current_password`]). The
/// verification and reset links mailed before stop working, and the previous address is told,
/// with a link that undoes the change ([`undo_email_change`], valid
/// [`UNDO_EMAIL_CHANGE_TTL`]): the new address is not proven yet, so the old mailbox keeps
/// the last word for a while.
pub async fn change_email(
    state: &AppState,
    user: &User,
    session_id: i64,
    attempt: LoginAttempt,
    new_email: &EmailAddress,
    current_password: &str,
) -> Result<User, AccountError> {
    check_current_password(state, user, session_id, attempt, current_password).await?;
    let now = state.clock.now();
    let undo = random_token(32);
    let mut tx = state.db.begin().await?;
    if let Some(other) = users::find_by_email(tx.exec(), new_email.as_str()).await?
        && other.id != user.id
    {
        return Err(AccountError::EmailTaken);
    }
    if tokens::undo_holder(tx.exec(), new_email.as_str(), now)
        .await?
        .is_some_and(|holder| holder != user.id)
    {
        return Err(AccountError::EmailTaken);
    }
    // The address as stored now (a concurrent change of the caller's may have moved it).
    let previous = users::find(tx.exec(), user.id)
        .await?
        .ok_or(AccountError::InvalidToken)?;
    users::set_email(tx.exec(), user.id, new_email.as_str(), now)
        .await
        .map_err(|e| e.duplicate_as(|| AccountError::EmailTaken))?;
    tokens::retire_credential_links(tx.exec(), user.id, now).await?;
    let changed = previous.email != new_email.as_str();
    if changed {
        tokens::insert(
            tx.exec(),
            user.id,
            Purpose::UndoEmailChange,
            &hash_token(&undo),
            &previous.email,
            now + UNDO_EMAIL_CHANGE_TTL,
            now,
        )
        .await?;
    }
    crate::store::events::record(
        tx.exec(),
        crate::store::events::NewEvent::of_user(
            "user.email_changed",
            user.id,
            serde_json::json!({ "user_id": user.id }),
        ),
        now,
    )
    .await?;
    let updated = users::find(tx.exec(), user.id)
        .await?
        .ok_or(AccountError::InvalidToken)?;
    record_verification_mail(&mut tx, &updated, now).await?;
    state.commit(tx).await?;
    super::auth::user_changed(state, user.id);
    if changed {
        // Sent here rather than through the mail queue: its token is made in the change's
        // transaction (undoing a change retires the undo links of later changes by when they
        // were made), it must exist only as a hash at rest, and the queue keeps its messages'
        // contexts. Sent beside the answer, so the request never waits on the mail server; a
        // mail server away loses this notice (the new address's verification link is queued).
        let ctx = serde_json::json!({
            "name": updated.username,
            "new_email": updated.email,
            "token": undo,
        });
        let (mailer, to, user_id) = (state.mailer.clone(), previous.email.clone(), user.id);
        tokio::spawn(async move {
            if let Err(err) = mailer.send(&to, Template::EmailChanged, ctx).await {
                tracing::warn!(user_id, error = %err, "e-mail change notice not sent");
            }
        });
    }
    Ok(updated)
}

/// Undoes an e-mail change with the link sent to the previous address: the account gets that
/// address back (verified: the link was read in its mailbox), every session ends, and the
/// mailed verification and reset links, and the undo links of later changes, stop working.
/// Undo links of earlier changes stay valid. 409 `EMAIL_EXISTS` (the token kept) when another
/// account holds the address now.
pub async fn undo_email_change(state: &AppState, token: &str) -> Result<User, AccountError> {
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    let found = spend_token(&mut tx, Purpose::UndoEmailChange, token, now).await?;
    if let Some(other) = users::find_by_email(tx.exec(), &found.email).await?
        && other.id != found.user_id
    {
        return Err(AccountError::EmailTaken);
    }
    if !users::restore_email(tx.exec(), found.user_id, &found.email, now)
        .await
        .map_err(|e| e.duplicate_as(|| AccountError::EmailTaken))?
    {
        return Err(AccountError::InvalidToken);
    }
    tokens::retire_credential_links(tx.exec(), found.user_id, now).await?;
    tokens::retire_later_undos(tx.exec(), found.user_id, found.id, now).await?;
    sessions::revoke_all_of_user(
        tx.exec(),
        found.user_id,
        None,
        crate::domain::access_token::revoke_reason::EMAIL_CHANGE_UNDONE,
        now,
    )
    .await?;
    crate::store::events::record(
        tx.exec(),
        crate::store::events::NewEvent::of_user(
            "user.email_changed",
            found.user_id,
            serde_json::json!({ "user_id": found.user_id, "undone": true }),
        ),
        now,
    )
    .await?;
    let user = users::find(tx.exec(), found.user_id)
        .await?
        .ok_or(AccountError::InvalidToken)?;
    state.commit(tx).await?;
    sessions_ended(state, user.id).await?;
    Ok(user)
}

/// Makes sure a fresh registration cannot collide on e-mail or username.
pub async fn ensure_available(
    state: &AppState,
    email: &str,
    username: &str,
) -> Result<(), AccountError> {
    let mut conn = state.db.conn().await?;
    if users::find_by_email(conn.exec(), email).await?.is_some() {
        return Err(AccountError::EmailTaken);
    }
    // An address an undo link may give back to its account is not free yet.
    if tokens::undo_holder(conn.exec(), email, state.clock.now())
        .await?
        .is_some()
    {
        return Err(AccountError::EmailTaken);
    }
    if users::username_owner(conn.exec(), username)
        .await?
        .is_some()
    {
        return Err(AccountError::UsernameTaken);
    }
    Ok(())
}

/// Registers a user (not an administrator) with one or both marketplace roles.
pub async fn register(
    state: &AppState,
    email: &EmailAddress,
    username: &Username,
    password: &str,
    roles: &[Role],
    accept_marketing: bool,
    source: Option<&str>,
) -> Result<User, AccountError> {
    ensure_available(state, email.as_str(), username.as_str()).await?;
    let hash = passwords::hash(password.to_owned(), state.settings.bcrypt_cost).await?;
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    let id = users::insert(
        tx.exec(),
        &users::NewUser {
            email: email.as_str(),
            username: username.as_str(),
            password_hash: &hash,
            roles,
            email_verified: false,
            accept_marketing,
            source,
        },
        now,
    )
    .await
    .map_err(|e| e.duplicate_as(|| AccountError::EmailTaken))?;
    crate::store::events::record(
        tx.exec(),
        crate::store::events::NewEvent::of_user(
            "user.registered",
            id,
            serde_json::json!({
                "user_id": id,
                "roles": roles,
                "accept_marketing": accept_marketing,
                "source": source,
            }),
        ),
        now,
    )
    .await?;
    let user = users::find(tx.exec(), id)
        .await?
        .ok_or(AccountError::InvalidToken)?;
    record_verification_mail(&mut tx, &user, now).await?;
    state.commit(tx).await?;
    // The registration e-mail counts as the first send of the resend window.
    let _ = state
        .cache
        .hit(&resend_key(user.id), std::time::Duration::from_secs(120))
        .await;
    Ok(user)
}

/// Cache key of the "one verification e-mail per two minutes" window.
pub fn resend_key(user_id: i64) -> String {
    format!("verify-resend:{user_id}")
}

/// Creates an administrator from an admin invitation: the token is spent in the same
/// transaction, so it works once.
pub async fn accept_admin_invitation(
    state: &AppState,
    token: &str,
    username: &Username,
    password: &str,
) -> Result<User, AccountError> {
    let hash = passwords::hash(password.to_owned(), state.settings.bcrypt_cost).await?;
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    let invitation = crate::store::invitations::find_by_token_hash(tx.exec(), &hash_token(token))
        .await?
        .ok_or(AccountError::InvalidToken)?;
    if invitation.used {
        return Err(AccountError::UsedToken);
    }
    if invitation.expires_at <= now {
        return Err(AccountError::ExpiredToken);
    }
    // Claim first: of concurrent accepts, the others stop here.
    if !crate::store::invitations::claim(tx.exec(), invitation.id, now).await? {
        return Err(AccountError::UsedToken);
    }
    if users::find_by_email(tx.exec(), &invitation.email)
        .await?
        .is_some()
    {
        return Err(AccountError::EmailTaken);
    }
    if users::username_owner(tx.exec(), username.as_str())
        .await?
        .is_some()
    {
        return Err(AccountError::UsernameTaken);
    }
    let id = users::insert(
        tx.exec(),
        &users::NewUser {
            email: &invitation.email,
            username: username.as_str(),
            password_hash: &hash,
            roles: &[Role::Admin],
            email_verified: true,
            accept_marketing: false,
            source: None,
        },
        now,
    )
    .await
    .map_err(|e| e.duplicate_as(|| AccountError::UsernameTaken))?;
    crate::store::invitations::set_used_by(tx.exec(), invitation.id, id).await?;
    let user = users::find(tx.exec(), id)
        .await?
        .ok_or(AccountError::InvalidToken)?;
    tx.commit().await?;
    Ok(user)
}

/// Adds `empresa` or `experto` to the user's roles (its profile is created afterwards):
/// 409 `ROLE_EXISTS` when held already. Recorded as `user.role_added`.
pub async fn add_role(state: &AppState, user_id: i64, role: Role) -> FlowResult<User> {
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    if !users::add_role(tx.exec(), user_id, role, now).await? {
        return Err(FlowError::conflict(
            "ROLE_EXISTS",
            "You already have this role",
        ));
    }
    crate::store::events::record(
        tx.exec(),
        crate::store::events::NewEvent::of_user(
            "user.role_added",
            user_id,
            serde_json::json!({ "user_id": user_id, "role": role }),
        ),
        now,
    )
    .await?;
    let user = users::find(tx.exec(), user_id)
        .await?
        .ok_or_else(|| FlowError::not_found("User not found"))?;
    state.commit(tx).await?;
    super::auth::user_changed(state, user_id);
    Ok(user)
}

/// Makes one of the user's roles the active one: 403 `ROLE_NOT_ASSIGNED` otherwise.
pub async fn switch_role(state: &AppState, user: &User, role: Role) -> FlowResult<User> {
    if !user.roles.contains(&role) {
        return Err(FlowError::forbidden_code(
            "ROLE_NOT_ASSIGNED",
            "You do not have this role",
        ));
    }
    let user = {
        let mut conn = state.db.conn().await?;
        users::set_active_role(conn.exec(), user.id, role, state.clock.now()).await?;
        users::find(conn.exec(), user.id)
            .await?
            .ok_or_else(|| FlowError::not_found("User not found"))?
    };
    sessions_ended(state, user.id).await?;
    Ok(user)
}

/// Changes the user's own username and/or `is_active` in one transaction: 409
/// `USERNAME_EXISTS` when another account has the name.
pub async fn update_own_account(
    state: &AppState,
    user: &User,
    username: Option<&Username>,
    is_active: Option<bool>,
) -> FlowResult<User> {
    let taken = || FlowError::conflict("USERNAME_EXISTS", "This username is taken");
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    if let Some(username) = username
        && username.as_str() != user.username
    {
        // Checked inside the transaction against another account: the caller's own row may
        // already carry the name (a concurrent request of theirs set it after `user` was read).
        if users::username_owner(tx.exec(), username.as_str())
            .await?
            .is_some_and(|owner| owner != user.id)
        {
            return Err(taken());
        }
        users::set_username(tx.exec(), user.id, username.as_str(), now)
            .await
            .map_err(|e| e.duplicate_as(taken))?;
        crate::store::events::record(
            tx.exec(),
            crate::store::events::NewEvent::of_user(
                "user.username_changed",
                user.id,
                serde_json::json!({ "user_id": user.id, "username": username.as_str() }),
            ),
            now,
        )
        .await?;
    }
    if let Some(active) = is_active {
        users::set_active(tx.exec(), user.id, active, now).await?;
    }
    let user = users::find(tx.exec(), user.id)
        .await?
        .ok_or_else(|| FlowError::not_found("User not found"))?;
    state.commit(tx).await?;
    sessions_ended(state, user.id).await?;
    Ok(user)
}

#[cfg(test)]
mod tests {
    use super::pause_in_words;
    use std::time::Duration;

    #[test]
    fn pauses_read_as_words() {
        let words = |s| pause_in_words(Duration::from_secs(s));
        assert_eq!(words(0), "1 second");
        assert_eq!(words(1), "1 second");
        assert_eq!(words(45), "45 seconds");
        assert_eq!(words(60), "1 minute");
        assert_eq!(words(61), "61 seconds");
        assert_eq!(words(120), "2 minutes");
        assert_eq!(words(121), "3 minutes");
        assert_eq!(words(3600), "60 minutes");
    }
}
