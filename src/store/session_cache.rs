//! Sessions and their users kept in memory between requests, on PostgreSQL with Redis, so an
//! authenticated request reads nothing from the database to authenticate.
//!
//! Two mechanisms keep an entry from being used after it changed:
//! - **Ends are exact.** Every entry is tagged with the sessions' *epoch*, a value in the
//!   shared cache (Redis when configured) that the workflow ending a session (logout, session
//!   cap, refresh reuse, password change, suspension, deactivation, role change, deletion)
//!   replaces after its commit and before it answers. A request reads the epoch first and uses
//!   an entry only if its tag is the current epoch, so no instance serves a session after the
//!   answer that ended it. An epoch missing there (expired, or the cache restarted empty) is
//!   set afresh before it is used, so no entry tagged before matches it.
//! - **Other changes are announced.** A trigger (migration 0010) announces every change to a
//!   user, its roles or its sessions at commit on the channel `auth_changed`, and each
//!   instance's listener forgets that user's entries (an e-mail or a name changed elsewhere).
//!   A read that raced an announcement is not kept (a generation counter), and while the
//!   listener is not listening nothing is kept or served: reconnections start empty.
//!
//! Expiry and suspension ends are times: checked against the clock on every use, cached or
//! not. SQLite (one process, reads in microseconds) and PostgreSQL without Redis (no shared
//! epoch) read the session every time.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sqlx::postgres::{PgListener, PgPool};

use super::sessions::Session;
use super::users::User;

/// The channel migration 0010's trigger notifies, with the user's id as payload.
pub const CHANNEL: &str = "auth_changed";

/// Entries kept at most; past it the cache starts over (a bound, not an eviction policy: a
/// service with more live sessions than this reads the rest from the database).
const CAPACITY: usize = 50_000;

/// How long an entry is used at most, well within [`EPOCH_TTL`]: a bound beside the epoch and
/// the announcements.
const MAX_AGE: Duration = Duration::from_secs(600);

/// The shared cache's key of the sessions' epoch, and how long a value lives there.
pub const EPOCH_KEY: &str = "sessions:epoch";
pub const EPOCH_TTL: Duration = Duration::from_secs(86_400);

#[derive(Default)]
pub struct SessionCache {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Whether the listener is listening: only then are entries served or stored.
    listening: bool,
    /// Bumped by every announcement (and reconnection).
    generation: u64,
    entries: HashMap<i64, Entry>,
}

struct Entry {
    session: Session,
    user: User,
    epoch: String,
    stored_at: Instant,
}

/// Where a read started, for [`SessionCache::store`].
#[derive(Debug, Clone, Copy)]
pub struct ReadStart(u64);

impl SessionCache {
    /// Whether the listener is listening, so sessions are served from memory.
    pub fn is_listening(&self) -> bool {
        self.lock().listening
    }

    /// The session `session_id` with its user, if held under the current `epoch`.
    pub fn get(&self, session_id: i64, epoch: &str) -> Option<(Session, User)> {
        let inner = self.lock();
        let entry = inner.entries.get(&session_id).filter(|_| inner.listening)?;
        (entry.epoch == epoch && entry.stored_at.elapsed() < MAX_AGE)
            .then(|| (entry.session.clone(), entry.user.clone()))
    }

    /// Call before reading a session from the database; `None` when nothing may be stored.
    pub fn read_start(&self) -> Option<ReadStart> {
        let inner = self.lock();
        inner.listening.then_some(ReadStart(inner.generation))
    }

    /// Keeps a session read since `start` under `epoch` (read before it), unless a change was
    /// announced meanwhile.
    pub fn store(&self, start: ReadStart, epoch: String, session: Session, user: User) {
        let mut inner = self.lock();
        if !inner.listening || inner.generation != start.0 {
            return;
        }
        if inner.entries.len() >= CAPACITY {
            inner.entries.clear();
        }
        let entry = Entry {
            session,
            user,
            epoch,
            stored_at: Instant::now(),
        };
        inner.entries.insert(entry.session.id, entry);
    }

    /// Forgets every session of `user_id` (an announcement, or this instance's own change).
    pub fn forget_user(&self, user_id: i64) {
        let mut inner = self.lock();
        inner.generation += 1;
        inner.entries.retain(|_, e| e.session.user_id != user_id);
    }

    /// Forgets session `session_id` (this instance ended it).
    pub fn forget_session(&self, session_id: i64) {
        let mut inner = self.lock();
        inner.generation += 1;
        inner.entries.remove(&session_id);
    }

    /// How many sessions are held.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Starts over, serving from memory again only if `listening`.
    fn reset(&self, listening: bool) {
        let mut inner = self.lock();
        inner.generation += 1;
        inner.entries.clear();
        inner.listening = listening;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding this lock cannot leave the map half-changed in a way that
        // matters more than starting over.
        self.inner.lock().unwrap_or_else(|poisoned| {
            let mut inner = poisoned.into_inner();
            inner.entries.clear();
            inner.generation += 1;
            inner
        })
    }
}

/// The name of the listener's job ([`follow_changes`], started by `background`).
pub const LISTENER: &str = "session_changes_listener";

/// Listens for announcements until the connection is lost (PostgreSQL only; run again, it
/// connects anew). Until it listens, and wherever it does not run, the cache stays empty and
/// every request reads the database.
pub async fn follow_changes(pool: &PgPool, cache: &SessionCache) -> Result<(), sqlx::Error> {
    let listened = listen(pool, cache).await;
    // Announcements may be missed from now on.
    cache.reset(false);
    listened
}

async fn listen(pool: &PgPool, cache: &SessionCache) -> Result<(), sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(CHANNEL).await?;
    cache.reset(true);
    follow(&mut listener, cache).await;
    Ok(())
}

/// Applies announcements until the connection is lost.
async fn follow(listener: &mut PgListener, cache: &SessionCache) {
    loop {
        match listener.try_recv().await {
            Ok(Some(notification)) => match notification.payload().parse::<i64>() {
                Ok(user_id) => cache.forget_user(user_id),
                Err(_) => cache.reset(true),
            },
            // The connection was lost: announcements may have been missed.
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %e, "lost the session-change listener");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::user::Role;
    use chrono::Utc;

    fn entry(session_id: i64, user_id: i64) -> (Session, User) {
        let now = Utc::now();
        let session = Session {
            id: session_id,
            user_id,
            client_session_id: None,
            created_at: now,
            last_used_at: now,
            expires_at: now,
            revoked_at: None,
            revoked_reason: None,
        };
        let user = User {
            id: user_id,
            email: format!("u{user_id}@example.com"),
            username: format!("u{user_id}"),
            password_hash: String::new(),
            active_role: Role::Empresa,
            roles: vec![Role::Empresa],
            is_active: true,
            email_verified: true,
            crm_id: None,
            created_at: now,
            updated_at: now,
            last_login_at: None,
            suspended_at: None,
            suspended_until: None,
            deleted_at: None,
        };
        (session, user)
    }

    fn listening() -> SessionCache {
        let cache = SessionCache::default();
        cache.reset(true);
        cache
    }

    #[test]
    fn nothing_is_kept_or_served_until_the_listener_listens() {
        let cache = SessionCache::default();
        assert!(cache.read_start().is_none());
        cache.reset(true);
        let start = cache.read_start().expect("listening");
        let (s, u) = entry(1, 7);
        cache.store(start, "e1".into(), s, u);
        assert!(cache.get(1, "e1").is_some());
        // A session ended somewhere: the epoch changed.
        assert!(cache.get(1, "e2").is_none());
        // The connection is lost: announcements may be missed from now on.
        cache.reset(false);
        assert!(cache.get(1, "e1").is_none());
        assert!(cache.read_start().is_none());
    }

    #[test]
    fn a_read_that_raced_an_announcement_is_not_kept() {
        let cache = listening();
        let start = cache.read_start().unwrap();
        // Another user's change committed while the read was under way: still not kept, since
        // announcements are not told apart by the reads they race.
        cache.forget_user(99);
        let (s, u) = entry(1, 7);
        cache.store(start, "e1".into(), s, u);
        assert!(cache.get(1, "e1").is_none());
    }

    #[test]
    fn forgetting_a_user_drops_all_its_sessions_and_only_them() {
        let cache = listening();
        for (session, user) in [(1, 7), (2, 7), (3, 8)] {
            let start = cache.read_start().unwrap();
            let (s, u) = entry(session, user);
            cache.store(start, "e1".into(), s, u);
        }
        cache.forget_user(7);
        assert!(cache.get(1, "e1").is_none() && cache.get(2, "e1").is_none());
        assert!(cache.get(3, "e1").is_some());
        cache.forget_session(3);
        assert!(cache.is_empty());
    }
}
