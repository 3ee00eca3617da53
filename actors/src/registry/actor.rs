//! The actor that serialises the jobs of one key.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use actix::dev::channel::AddressReceiver;
use actix::fut::{ActorFutureExt, wrap_future};
use actix::{Actor, ActorContext, AsyncContext, Context, Handler, SpawnHandle, Supervised};

use super::job::{Envelope, Finished, Outcome};
use super::{ActorKey, Shared};

/// One key's actor. It has no state of its own beyond bookkeeping: the
/// serialisation is the service it offers.
pub(super) struct KeyActor<K: ActorKey> {
    shared: Arc<Shared<K>>,
    /// Boxed behind an Arc because actors must be `Unpin` and keys need not be.
    key: Arc<K>,
    /// Tells this actor's registry entry apart from a later one for the same key.
    id: u64,
    /// Jobs sent to this actor and not finished yet; raised by the registry
    /// under its lock, so that an idle check under the same lock is exact.
    in_flight: Arc<AtomicUsize>,
    idle_timer: Option<SpawnHandle>,
}

impl<K: ActorKey> KeyActor<K> {
    pub(super) fn new(
        shared: Arc<Shared<K>>,
        key: K,
        id: u64,
        in_flight: Arc<AtomicUsize>,
    ) -> Self {
        Self {
            shared,
            key: Arc::new(key),
            id,
            in_flight,
            idle_timer: None,
        }
    }

    fn arm_idle_timer(&mut self, ctx: &mut Context<Self>) {
        self.disarm_idle_timer(ctx);
        let timeout = self.shared.idle_timeout;
        self.idle_timer = Some(ctx.run_later(timeout, |actor, ctx| actor.on_idle(ctx)));
    }

    fn disarm_idle_timer(&mut self, ctx: &mut Context<Self>) {
        if let Some(timer) = self.idle_timer.take() {
            ctx.cancel_future(timer);
        }
    }

    fn on_idle(&mut self, ctx: &mut Context<Self>) {
        self.idle_timer = None;
        // Leaving the registry and dropping its address happen under the
        // registry lock, so no job can be sent to us after we decide to go.
        if self
            .shared
            .retire_if_idle(&self.key, self.id, &self.in_flight)
        {
            tracing::debug!(kind = self.shared.kind, key = %self.key, "actor stopped after idle timeout");
            ctx.stop();
        } else {
            self.arm_idle_timer(ctx);
        }
    }

    fn finish(&mut self, finished: Finished, started: Instant, ctx: &mut Context<Self>) {
        // Bookkeeping before answering, so that the caller sees it done.
        let counters = &self.shared.counters;
        counters.record_handled(started.elapsed());
        if finished.panicked() {
            counters.restarts.fetch_add(1, Ordering::Relaxed);
        }
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        match finished.answer_caller() {
            Outcome::Completed => self.arm_idle_timer(ctx),
            Outcome::Panicked(message) => {
                tracing::error!(
                    kind = self.shared.kind,
                    key = %self.key,
                    panic = %message,
                    "job panicked; restarting its actor"
                );
                // The supervisor loop restarts us with the same mailbox, so
                // jobs queued behind the panicking one are still served.
                ctx.stop();
            }
        }
    }
}

impl<K: ActorKey> Actor for KeyActor<K> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.arm_idle_timer(ctx);
    }
}

impl<K: ActorKey> Supervised for KeyActor<K> {
    fn restarting(&mut self, _ctx: &mut Context<Self>) {
        // The context has dropped its timers; start from a clean slate. (The
        // restart was counted when the panic was caught.)
        self.idle_timer = None;
    }
}

impl<K: ActorKey> Handler<Envelope> for KeyActor<K> {
    type Result = ();

    fn handle(&mut self, mut envelope: Envelope, ctx: &mut Context<Self>) {
        self.disarm_idle_timer(ctx);
        let Some(job) = envelope.take_job() else {
            // Cannot happen (a job is taken once), but keep the count exact.
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            self.arm_idle_timer(ctx);
            return;
        };
        self.shared
            .counters
            .record_mailbox_wait(envelope.enqueued_at().elapsed());
        let started = Instant::now();
        // `wait` (what actix's AtomicResponse uses) keeps the mailbox shut
        // until the job's future completes, across all of its awaits.
        ctx.wait(
            wrap_future::<_, Self>(job.run())
                .map(move |finished, actor, ctx| actor.finish(finished, started, ctx)),
        );
    }
}

/// Runs `actor` on the current arbiter under a supervisor loop: after a stop
/// caused by a panic the actor is restarted with its mailbox intact; it ends
/// for good once nobody holds its address (the registry let go of it).
pub(super) fn spawn_supervised<K: ActorKey>(
    actor: KeyActor<K>,
    mailbox: AddressReceiver<KeyActor<K>>,
) {
    let guard = EntryGuard {
        shared: Arc::clone(&actor.shared),
        key: Arc::clone(&actor.key),
        id: actor.id,
    };
    let mut running = Context::with_receiver(mailbox).into_future(actor);
    actix::spawn(async move {
        let _guard = guard;
        loop {
            (&mut running).await;
            if !running.restart() {
                break;
            }
        }
    });
}

/// Removes the actor's registry entry when its supervisor ends, whether it
/// stopped normally or its arbiter shut down under it.
struct EntryGuard<K: ActorKey> {
    shared: Arc<Shared<K>>,
    key: Arc<K>,
    id: u64,
}

impl<K: ActorKey> Drop for EntryGuard<K> {
    fn drop(&mut self) {
        self.shared.forget(&self.key, self.id);
    }
}
