//! What every handler shares: handles of the layers below the workflows (store, cache, mail,
//! processor, clock, token keys) and the actor machinery. Nothing here knows a use case, so
//! `state` sits below `workflows` and every workflow can take it.

use std::sync::Arc;

use crate::clock::Clock;
use crate::config::Settings;
use crate::domain::access_token::AccessTokens;
use crate::integrations::cache::Cache;
use crate::integrations::crm::CrmSetup;
use crate::integrations::mail::Mailer;
use crate::integrations::processor::ProcessorSetup;
use crate::store::Db;

#[derive(Clone)]
pub struct AppState {
    pub settings: Arc<Settings>,
    pub db: Db,
    pub cache: Arc<dyn Cache>,
    pub mailer: Mailer,
    pub clock: Clock,
    /// Signing key and lifetimes of access and refresh tokens.
    pub tokens: Arc<AccessTokens>,
    /// The outbox dispatcher (DESIGN §4), woken by [`AppState::commit`] after a commit that
    /// wrote events; `trigger()` runs a pass and waits for it.
    pub outbox: actors::PeriodicHandle,
    /// The mail sender (`workflows::emails`): the outbox's e-mail consumer wakes it after
    /// queuing messages.
    pub mail_sender: actors::PeriodicHandle,
    /// The processor client, webhook secret and publishable key; the sandbox when it is the
    /// processor.
    pub processor: Arc<ProcessorSetup>,
    /// One actor per project: every transition of a project runs inside it (DESIGN §3).
    pub project_actors: KeyedActors,
    /// One actor per payment: every processor-driven change of a payment runs inside it.
    pub payment_actors: KeyedActors,
    /// One actor per project chat room: every post, edit, deletion and read mark of a room
    /// is stored then fanned out inside it, so frames go out in the order of the store (posts
    /// in groups, from `chat_posts`).
    pub chat_rooms: actors::Registry<i64>,
    /// The posts waiting for their room's actor, per project: its next group takes those
    /// waiting and stores them in one statement and one commit (`workflows::chat`). Each is
    /// answered its message after that commit, or the error, type-erased here
    /// (`workflows::chat` knows it).
    pub chat_posts: Arc<Lines<Asked<ChatPost, anyhow::Result<crate::store::chat::Message>>>>,
    /// The rooms' groups of posts waiting for a commit shared across rooms
    /// (`workflows::chat`): each is answered its posts' outcomes, type-erased here.
    pub chat_commits: Arc<Combining<RoomGroup, Vec<anyhow::Result<crate::store::chat::Message>>>>,
    /// The chat's commits and the messages they stored (`/metrics`).
    pub chat_groups: Arc<GroupCounts>,
    /// Every long-running loop of the service, by name (`background` starts them).
    pub jobs: actors::Jobs,
    /// The CRM client (or off), its sandbox and metrics.
    pub crm: Arc<CrmSetup>,
    /// The worker draining the CRM queue, while the CRM is on: `wake()` after queueing.
    pub crm_worker: Option<actors::PeriodicHandle>,
    /// The guarded HTTP client of outgoing user webhooks.
    pub webhook_http: Arc<crate::integrations::webhook_http::WebhookHttp>,
    /// Frames to WebSocket sessions, fanned out through the cache's pub/sub.
    pub realtime: Arc<crate::integrations::realtime::Realtime>,
    /// The WebSockets' caps (per account and per address on every instance, per process
    /// here) and the registrations that count against them.
    pub sockets: Arc<crate::integrations::socket_registry::SocketRegistry>,
    /// Sessions with their users between requests (PostgreSQL; forgotten on every change the
    /// database announces, and at once here by the workflow that ends a session).
    pub sessions: Arc<crate::store::session_cache::SessionCache>,
    /// The public project list's answers (JSON), kept under the count of writes to projects
    /// read before each (`store::page_cache`).
    pub public_projects: Arc<
        crate::store::page_cache::PageCache<crate::store::project_lists::PublicPage, bytes::Bytes>,
    >,
    /// Project rows read by `GET /api/projects/{id}`, kept under tokens in the shared cache
    /// that every commit writing them replaces (`store::kept_projects`); `None` where the
    /// tokens would not be shared by every instance (PostgreSQL without Redis).
    pub kept_projects: Option<Arc<crate::store::kept_projects::KeptProjects>>,
    /// The expert directory's answers (JSON), kept under the count of writes to what it
    /// shows read before each (`store::page_cache`).
    pub expert_directory: Arc<
        crate::store::page_cache::PageCache<
            crate::store::expert_lists::DirectoryPage,
            bytes::Bytes,
        >,
    >,
    /// Curation's candidates by required skills and excluded user, kept under the count of
    /// writes to what they are chosen from read before each (`store::profiles::KeptCandidates`).
    pub curation_candidates: Arc<crate::store::profiles::KeptCandidates>,
    /// The administrators' searches' totals and pages, kept under the count of writes to the
    /// accounts' search texts read before each (`store::user_admin::SearchesKept`).
    pub account_searches: Arc<crate::store::user_admin::SearchesKept>,
    /// The counts of SQLite's project search index, kept under the count of writes to
    /// projects read before each (`store::project_lists::SearchCounts`).
    pub project_search_counts: Arc<crate::store::project_lists::SearchCounts>,
    /// The backfills this instance has seen finished, whose columns may be read
    /// (`store::backfills`, refreshed by the backfills job).
    pub backfills: crate::store::backfills::Finished,
    /// Processor events stored by their receipt and waiting for the applier
    /// (`workflows::processor_events`), oldest first, in lanes applied side by side (a
    /// payment's events always in the same lane).
    pub processor_events: Arc<Vec<Queue<crate::store::processor_events::StoredEvent>>>,
    /// Processor events received and waiting for the receipts' writer
    /// (`workflows::processor_events`), which stores those waiting together in one statement
    /// and answers each after that commit: `Some(new)`, or `None` when it was not stored.
    pub processor_receipts:
        Arc<Queue<Asked<crate::store::processor_events::NewEvent, Option<bool>>>>,
    /// Whether the instance takes new work: draining from the first SIGTERM (`/ready` then
    /// answers 503 and every WebSocket is closed with 1001, so clients go elsewhere).
    pub readiness: Arc<Readiness>,
}

/// Up, or draining toward a stop. Watched by the WebSocket sessions, read by `/ready`.
pub struct Readiness {
    draining: tokio::sync::watch::Sender<bool>,
}

impl Default for Readiness {
    fn default() -> Self {
        Self {
            draining: tokio::sync::watch::Sender::new(false),
        }
    }
}

impl Readiness {
    /// Starts draining (once; later calls change nothing).
    pub fn drain(&self) {
        self.draining.send_replace(true);
    }

    pub fn is_draining(&self) -> bool {
        *self.draining.borrow()
    }

    /// A watch of the draining flag: `wait_for(|draining| *draining)` ends when the instance
    /// starts draining (at once if it has). Taken once per long-lived task, not per wait.
    pub fn watch(&self) -> tokio::sync::watch::Receiver<bool> {
        self.draining.subscribe()
    }
}

impl AppState {
    /// Commits a transaction that recorded events and wakes the outbox dispatcher, so they
    /// go out now rather than at its next tick: the one way a workflow ends a change.
    pub async fn commit(&self, tx: crate::store::Tx) -> crate::store::StoreResult<()> {
        tx.commit().await?;
        self.outbox.wake();
        Ok(())
    }
}

/// A registry of keyed actors whose jobs keep the calling request's idempotency key: a job
/// runs on its actor's task, and the transactions it begins there mark the key as the
/// caller's own would (`store::idempotency`). Everything else is the registry's.
#[derive(Clone)]
pub struct KeyedActors(pub actors::Registry<i64>);

impl KeyedActors {
    /// `actors::Registry::call`, the caller's idempotency key carried into the job.
    pub fn call<F, Fut, T>(
        &self,
        key: i64,
        job: F,
    ) -> impl Future<Output = Result<T, actors::ActorError>> + Send + 'static + use<F, Fut, T>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = T> + 'static,
        T: Send + 'static,
    {
        let claim = crate::store::idempotency::current();
        self.0
            .call(key, move || crate::store::idempotency::carry(claim, job()))
    }
}

impl std::ops::Deref for KeyedActors {
    type Target = actors::Registry<i64>;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

/// An item handed to a job, with where the job answers it.
pub struct Asked<T, A> {
    pub item: T,
    pub answer: tokio::sync::oneshot::Sender<A>,
}

/// A bounded first-in first-out queue shared between threads.
pub struct Queue<T> {
    items: std::sync::Mutex<std::collections::VecDeque<T>>,
    capacity: usize,
}

impl<T> Queue<T> {
    pub fn new(capacity: usize) -> Self {
        Self {
            items: std::sync::Mutex::default(),
            capacity,
        }
    }

    /// Appends `item`; `false` (and the item dropped) when the queue is full.
    pub fn push(&self, item: T) -> bool {
        let mut items = self.lock();
        if items.len() >= self.capacity {
            return false;
        }
        items.push_back(item);
        true
    }

    /// Takes up to `n` items from the front.
    pub fn take(&self, n: usize) -> Vec<T> {
        let mut items = self.lock();
        let n = n.min(items.len());
        items.drain(..n).collect()
    }

    /// Items waiting.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Takes items from the front while their weights add up to at most `max` (the first
    /// one whatever its weight).
    pub fn take_weighing(&self, max: usize, weight: impl Fn(&T) -> usize) -> Vec<T> {
        let mut items = self.lock();
        let mut total = 0;
        let n = items
            .iter()
            .take_while(|item| {
                total += weight(item);
                total <= max
            })
            .count()
            .max(1)
            .min(items.len());
        items.drain(..n).collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::VecDeque<T>> {
        self.items
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A chat post waiting for its room's actor: the message to store, and whether its author is
/// an administrator (admitted as a mediator rather than as a party).
pub struct ChatPost {
    pub message: crate::store::chat::NewMessage,
    pub admin: bool,
    /// The idempotency key the post's request holds: the group's transaction marks it.
    pub key: Option<crate::store::idempotency::Claim>,
}

/// One room's group of posts, handed by its actor to the commit shared across rooms.
pub struct RoomGroup {
    pub project_id: i64,
    pub posts: Vec<ChatPost>,
}

/// Work that many tasks hand in to be done together (flat combining): each pushes its item,
/// then either finds it answered or takes the turn and does everything waiting, answering
/// each. So work handed in while one batch runs forms the next batch, with no task of its
/// own to start, supervise or stop.
pub struct Combining<T, A> {
    pub waiting: Queue<Asked<T, A>>,
    /// Held by whoever is doing the waiting work.
    pub turn: tokio::sync::Mutex<()>,
}

impl<T, A> Combining<T, A> {
    /// `capacity`: items that may wait (a push past it is refused).
    pub fn new(capacity: usize) -> Self {
        Self {
            waiting: Queue::new(capacity),
            turn: tokio::sync::Mutex::new(()),
        }
    }
}

/// Items waiting per key for that key's actor, which takes them in groups, first in first
/// out. Each item has a ticket, increasing in the order of the pushes (over all keys).
pub struct Lines<T> {
    lines: std::sync::Mutex<std::collections::HashMap<i64, std::collections::VecDeque<(u64, T)>>>,
    next_ticket: std::sync::atomic::AtomicU64,
    /// Items one key may have waiting.
    capacity: usize,
}

impl<T> Lines<T> {
    pub fn new(capacity: usize) -> Self {
        Self {
            lines: std::sync::Mutex::default(),
            next_ticket: std::sync::atomic::AtomicU64::new(1),
            capacity,
        }
    }

    /// Appends `item` to the line of `key` and answers its ticket; `None` (and the item
    /// dropped) when that line is full.
    pub fn push(&self, key: i64, item: T) -> Option<u64> {
        let mut lines = self.lock();
        let line = lines.entry(key).or_default();
        if line.len() >= self.capacity {
            return None;
        }
        // Taken under the lock, so tickets increase along each line.
        let ticket = self
            .next_ticket
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        line.push_back((ticket, item));
        Some(ticket)
    }

    /// Takes up to `n` items from the front of the line of `key`, with their tickets.
    pub fn take(&self, key: i64, n: usize) -> Vec<(u64, T)> {
        let mut lines = self.lock();
        let Some(line) = lines.get_mut(&key) else {
            return Vec::new();
        };
        let n = n.min(line.len());
        let taken = line.drain(..n).collect();
        if line.is_empty() {
            lines.remove(&key);
        }
        taken
    }

    /// Takes the item of `ticket` back out of the line of `key`, if it is still waiting.
    pub fn withdraw(&self, key: i64, ticket: u64) -> Option<T> {
        let mut lines = self.lock();
        let line = lines.get_mut(&key)?;
        let at = line.iter().position(|(t, _)| *t == ticket)?;
        let (_, item) = line.remove(at)?;
        if line.is_empty() {
            lines.remove(&key);
        }
        Some(item)
    }

    /// Items waiting in the line of `key`.
    pub fn waiting(&self, key: i64) -> usize {
        self.lock()
            .get(&key)
            .map_or(0, std::collections::VecDeque::len)
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<
        '_,
        std::collections::HashMap<i64, std::collections::VecDeque<(u64, T)>>,
    > {
        self.lines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Groups written in one commit each, and the items they held.
#[derive(Debug, Default)]
pub struct GroupCounts {
    commits: std::sync::atomic::AtomicU64,
    items: std::sync::atomic::AtomicU64,
    largest: std::sync::atomic::AtomicU64,
}

impl GroupCounts {
    /// A group of `items` was committed.
    pub fn committed(&self, items: usize) {
        use std::sync::atomic::Ordering::Relaxed;
        let items = items as u64;
        self.commits.fetch_add(1, Relaxed);
        self.items.fetch_add(items, Relaxed);
        self.largest.fetch_max(items, Relaxed);
    }

    /// (commits, items, largest group) so far.
    pub fn get(&self) -> (u64, u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (
            self.commits.load(Relaxed),
            self.items.load(Relaxed),
            self.largest.load(Relaxed),
        )
    }
}
