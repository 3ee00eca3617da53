//! A keyed registry of serialising actors: every job sent for one key runs
//! alone and in order inside that key's actor, while keys run concurrently.
//!
//! # Runtime requirements
//!
//! The registry runs its actors on `config.arbiters` actix arbiters (threads
//! with their own single-threaded runtime) that it creates on the first
//! [`Registry::call`]. If the thread making that first call belongs to an
//! actix `System` (an actix-web handler, `#[actix_web::main]`,
//! `#[actix_rt::test]`), the arbiters join that system and stop with it;
//! afterwards calls answer [`ActorError::Unavailable`]. Otherwise (e.g. a plain
//! tokio runtime) the registry gives its arbiters a private system. Either way
//! the arbiters stop when the last clone of the registry is dropped. A
//! registry therefore belongs to the system of its first caller: do not share
//! one (e.g. in a `static`) across tests that each run their own system.
//!
//! `call` itself only needs to be awaited by some executor; it may be called
//! from any thread.
//!
//! # Caveats
//!
//! * A job that calls the registry for its own key waits for itself forever.
//! * Jobs of all keys on one arbiter share its thread: a job that blocks the
//!   thread (rather than awaiting) holds up the other keys there; move heavy
//!   synchronous work to `tokio::task::spawn_blocking`.
//! * I/O resources a job creates (sockets, pooled connections opened there)
//!   are driven by that arbiter's runtime.

mod actor;
mod job;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::fmt::{self, Display};
use std::future::Future;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use actix::dev::SendError;
use actix::dev::channel;
use actix::{Addr, Arbiter, ArbiterHandle, System};
use tokio::sync::oneshot;

use crate::metrics::{self, RegistryCounters};
use actor::{KeyActor, spawn_supervised};
use job::{Envelope, Reply, TypedJob};

/// How many times one job is delivered before giving up. A job is delivered
/// again only when its actor stopped before starting it, which takes an
/// arbiter going away; the bound only guards against pathological loops.
const MAX_DELIVERIES: u32 = 8;

/// What can name an actor: any cheap-to-clone identifier.
pub trait ActorKey: Clone + Eq + Hash + Display + Send + Sync + 'static {}

impl<K: Clone + Eq + Hash + Display + Send + Sync + 'static> ActorKey for K {}

/// Tuning of a [`Registry`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryConfig {
    /// An actor that received no job for this long stops; the next job for
    /// its key starts a fresh one. Default 60 s.
    pub idle_timeout: Duration,
    /// Number of arbiter threads the actors are spread over (by key hash).
    /// Default 2; 0 is treated as 1.
    pub arbiters: usize,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        Self {
            idle_timeout: Duration::from_secs(60),
            arbiters: 2,
        }
    }
}

/// Why [`Registry::call`] could not give the job's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActorError {
    /// The job panicked; its actor was restarted and serves the next job.
    Panicked,
    /// The actor could not be reached, e.g. the actix system is shutting down.
    Unavailable,
}

impl Display for ActorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ActorError::Panicked => "the job panicked",
            ActorError::Unavailable => "the actor is unavailable",
        })
    }
}

impl std::error::Error for ActorError {}

/// A keyed registry of serialising actors. Cheap to clone; clones share the
/// actors. See the [module documentation](self) for what it needs to run.
pub struct Registry<K: ActorKey> {
    inner: Arc<Inner<K>>,
}

impl<K: ActorKey> Clone for Registry<K> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<K: ActorKey> fmt::Debug for Registry<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("kind", &self.inner.shared.kind)
            .field("live", &self.live())
            .finish()
    }
}

/// Owned by the registry handles only. Actors hold [`Shared`] instead, so
/// that dropping the last handle stops the arbiters and with them the actors.
struct Inner<K: ActorKey> {
    shared: Arc<Shared<K>>,
    arbiter_count: usize,
    /// Created on first use; see the module documentation.
    arbiters: Mutex<Vec<Arbiter>>,
    next_actor_id: AtomicU64,
    /// Held while a group of [`Registry::call_together`] is queued; see there.
    group_queueing: Mutex<()>,
}

/// What the registry and its actors share.
struct Shared<K: ActorKey> {
    kind: &'static str,
    idle_timeout: Duration,
    actors: Mutex<HashMap<K, Entry<K>>>,
    counters: Arc<RegistryCounters>,
}

/// One key's part in a [`Registry::call_together`] group.
struct Part<K> {
    key: K,
    joined: oneshot::Receiver<()>,
    release: oneshot::Sender<()>,
    holder: tokio::task::JoinHandle<Result<(), ActorError>>,
}

/// The registry's record of one live actor.
struct Entry<K: ActorKey> {
    id: u64,
    addr: Addr<KeyActor<K>>,
    in_flight: Arc<AtomicUsize>,
}

impl<K: ActorKey> Registry<K> {
    /// Creates an empty registry whose metrics are reported under `kind`.
    /// No thread is started until the first [`call`](Self::call).
    pub fn new(kind: &'static str, config: RegistryConfig) -> Self {
        Self {
            inner: Arc::new(Inner {
                shared: Arc::new(Shared {
                    kind,
                    idle_timeout: config.idle_timeout,
                    actors: Mutex::new(HashMap::new()),
                    counters: metrics::registry_counters(kind),
                }),
                arbiter_count: config.arbiters.max(1),
                arbiters: Mutex::new(Vec::new()),
                next_actor_id: AtomicU64::new(1),
                group_queueing: Mutex::new(()),
            }),
        }
    }

    /// Runs `job` inside the actor of `key` and returns its value.
    ///
    /// The job is queued as soon as `call` is invoked (not when the returned
    /// future is first polled), so jobs for one key run in the order of the
    /// `call`s, one at a time: a job keeps the actor busy until its future
    /// completes, across all its awaits. Jobs for different keys run
    /// concurrently. Once queued, the job runs even if the returned future is
    /// dropped (unless its actor's arbiter shuts down before it starts: the
    /// returned future is what delivers it again).
    ///
    /// The future built by `job` runs on the actor's arbiter thread and so
    /// need not be `Send`. A panic in the job answers
    /// [`ActorError::Panicked`] and restarts the actor; the jobs queued behind
    /// it are served normally.
    pub fn call<F, Fut, T>(
        &self,
        key: K,
        job: F,
    ) -> impl Future<Output = Result<T, ActorError>> + Send + 'static + use<K, F, Fut, T>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = T> + 'static,
        T: Send + 'static,
    {
        let enqueued_at = Instant::now();
        let first = self.deliver(&key, job, enqueued_at);
        let registry = self.clone();
        async move {
            let mut replies = first?;
            let mut deliveries = 1;
            loop {
                match replies.await {
                    Ok(Reply::Done(result)) => return result,
                    Ok(Reply::Bounced(job)) if deliveries < MAX_DELIVERIES => {
                        deliveries += 1;
                        replies = registry.deliver(&key, job, enqueued_at)?;
                    }
                    Ok(Reply::Bounced(_)) => {
                        tracing::warn!(
                            kind = registry.inner.shared.kind,
                            %key,
                            "job bounced too many times; giving up"
                        );
                        return Err(ActorError::Unavailable);
                    }
                    // The job started but its actor vanished before
                    // answering: its arbiter was shut down.
                    Err(_) => return Err(ActorError::Unavailable),
                }
            }
        }
    }

    /// Runs `job` while it holds the actors of `keys`: each runs a job of its own that waits
    /// until `job` has finished, so for each key held `job` runs after the jobs queued before
    /// it and alone, as if it were one job of that key. `job` itself runs on the caller's
    /// task and is given the keys it holds: those whose actor took up its part within
    /// `patience` (a busy actor is not waited for longer; its part, when its turn comes,
    /// ends at once). Repeated keys count once.
    ///
    /// Two groups sharing keys cannot wait for each other: a group's parts are queued in one
    /// critical section, so of any two groups one is ahead of the other in every actor they
    /// share. (A job that calls `call_together` with its own key waits for itself, as with
    /// [`call`](Self::call).)
    ///
    /// The parts are queued as soon as `call_together` is invoked, as with `call`; it must be
    /// invoked inside a tokio runtime.
    pub fn call_together<F, Fut, T>(
        &self,
        keys: &[K],
        patience: Duration,
        job: F,
    ) -> impl Future<Output = T> + use<K, F, Fut, T>
    where
        F: FnOnce(Vec<K>) -> Fut,
        Fut: Future<Output = T>,
    {
        let mut parts = Vec::with_capacity(keys.len());
        {
            let _queueing = self
                .inner
                .group_queueing
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            for key in keys {
                if parts.iter().any(|p: &Part<K>| &p.key == key) {
                    continue;
                }
                let (join, joined) = oneshot::channel::<()>();
                let (release, released) = oneshot::channel::<()>();
                let hold = self.call(key.clone(), move || async move {
                    if join.send(()).is_ok() {
                        // Sent or dropped: either way the group is done.
                        let _ = released.await;
                    }
                });
                parts.push(Part {
                    key: key.clone(),
                    joined,
                    release,
                    // Polled apart from the group, so that a part bounced by a stopped
                    // actor is delivered again while the group waits for it.
                    holder: tokio::spawn(hold),
                });
            }
        }
        let deadline = tokio::time::Instant::now() + patience;
        async move {
            let mut held = Vec::with_capacity(parts.len());
            let mut releases = Vec::with_capacity(parts.len());
            for part in parts {
                // Not joined in time, or never (its actor panicked or is gone): not held. Its
                // part finds the group gone when it starts.
                if let Ok(Ok(())) = tokio::time::timeout_at(deadline, part.joined).await {
                    held.push(part.key);
                    releases.push((part.release, part.holder));
                }
            }
            let value = job(held).await;
            for (release, holder) in releases {
                drop(release);
                let _ = holder.await;
            }
            value
        }
    }

    /// Number of live actors.
    pub fn live(&self) -> usize {
        self.inner.shared.lock_actors().len()
    }

    /// Queues `job` in the mailbox of `key`'s actor, starting the actor if
    /// there is none or if the one on record has stopped.
    fn deliver<F, Fut, T>(
        &self,
        key: &K,
        job: F,
        enqueued_at: Instant,
    ) -> Result<oneshot::Receiver<Reply<F, T>>, ActorError>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = T> + 'static,
        T: Send + 'static,
    {
        let (reply, replies) = oneshot::channel();
        let shared = &self.inner.shared;
        let mut envelope = Envelope::new(
            Box::new(TypedJob::new(job, reply)),
            enqueued_at,
            Arc::clone(&shared.counters),
        );
        // Sending under the lock orders the jobs of a key and lets an idle
        // actor retire atomically with respect to new jobs.
        let mut actors = shared.lock_actors();
        for _ in 0..MAX_DELIVERIES {
            let entry = match actors.entry(key.clone()) {
                std::collections::hash_map::Entry::Occupied(found) => found.into_mut(),
                std::collections::hash_map::Entry::Vacant(vacant) => {
                    let started = self.start_actor(key)?;
                    shared.counters.live.add(1);
                    vacant.insert(started)
                }
            };
            entry.in_flight.fetch_add(1, Ordering::SeqCst);
            match entry.addr.try_send(envelope) {
                Ok(()) => return Ok(replies),
                // Unbounded mailbox, so never full; `do_send` ignores capacity.
                Err(SendError::Full(back)) => {
                    entry.addr.do_send(back);
                    return Ok(replies);
                }
                // The actor stopped (its arbiter went away): replace it.
                Err(SendError::Closed(back)) => {
                    envelope = back;
                    if actors.remove(key).is_some() {
                        shared.counters.live.sub(1);
                    }
                }
            }
        }
        Err(ActorError::Unavailable)
    }

    /// Starts an actor for `key` on the arbiter its hash picks.
    fn start_actor(&self, key: &K) -> Result<Entry<K>, ActorError> {
        let arbiter = self.arbiter_for(key)?;
        let id = self.inner.next_actor_id.fetch_add(1, Ordering::Relaxed);
        let in_flight = Arc::new(AtomicUsize::new(0));
        // 0 = unbounded: callers never wait for mailbox room while holding
        // the registry lock.
        let (sender, mailbox) = channel::channel(0);
        let actor = KeyActor::new(
            Arc::clone(&self.inner.shared),
            key.clone(),
            id,
            Arc::clone(&in_flight),
        );
        if !arbiter.spawn_fn(move || spawn_supervised(actor, mailbox)) {
            tracing::warn!(kind = self.inner.shared.kind, %key, "arbiter is gone; cannot start actor");
            return Err(ActorError::Unavailable);
        }
        self.inner
            .shared
            .counters
            .started
            .fetch_add(1, Ordering::Relaxed);
        Ok(Entry {
            id,
            addr: Addr::new(sender),
            in_flight,
        })
    }

    fn arbiter_for(&self, key: &K) -> Result<ArbiterHandle, ActorError> {
        let mut arbiters = self
            .inner
            .arbiters
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if arbiters.is_empty() {
            *arbiters = spawn_arbiters(self.inner.arbiter_count).map_err(|error| {
                tracing::error!(kind = self.inner.shared.kind, %error, "cannot start arbiters");
                ActorError::Unavailable
            })?;
        }
        let mut hasher = DefaultHasher::new();
        key.hash(&mut hasher);
        // The remainder is below `arbiters.len()`, so it fits in usize.
        let index = (hasher.finish() % arbiters.len() as u64) as usize;
        Ok(arbiters[index].handle())
    }
}

impl<K: ActorKey> Drop for Inner<K> {
    fn drop(&mut self) {
        let arbiters = self
            .arbiters
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        for arbiter in arbiters.drain(..) {
            arbiter.stop();
        }
    }
}

impl<K: ActorKey> Shared<K> {
    fn lock_actors(&self) -> MutexGuard<'_, HashMap<K, Entry<K>>> {
        // Only map operations happen under this lock; after a panic there the
        // map is still usable.
        self.actors.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Removes actor `id`'s entry if it has no job queued or running.
    /// Returns whether the actor may stop (false: a job has arrived).
    fn retire_if_idle(&self, key: &K, id: u64, in_flight: &AtomicUsize) -> bool {
        let mut actors = self.lock_actors();
        match actors.get(key) {
            Some(entry) if entry.id == id => {
                if in_flight.load(Ordering::SeqCst) > 0 {
                    return false;
                }
                actors.remove(key);
                self.counters.live.sub(1);
                true
            }
            // Already replaced or forgotten: nobody can send to us any more.
            _ => true,
        }
    }

    /// Removes actor `id`'s entry, if still on record, once it has ended.
    fn forget(&self, key: &K, id: u64) {
        let mut actors = self.lock_actors();
        if actors.get(key).is_some_and(|entry| entry.id == id) {
            actors.remove(key);
            self.counters.live.sub(1);
        }
    }
}

/// Starts `count` arbiters in the calling thread's actix system, or in a
/// private one if the thread has none.
fn spawn_arbiters(count: usize) -> io::Result<Vec<Arbiter>> {
    if System::try_current().is_some() {
        return (0..count).map(|_| Arbiter::try_new()).collect();
    }
    // Arbiters need a system to belong to. A system made on a helper thread
    // serves, and the arbiters run on after that thread (and its system's
    // own event loop) has ended.
    std::thread::Builder::new()
        .name("actors-system".into())
        .spawn(move || {
            let _system = System::new();
            (0..count).map(|_| Arbiter::try_new()).collect()
        })?
        .join()
        .map_err(|_| io::Error::other("creating the actix system panicked"))?
}
