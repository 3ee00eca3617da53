//! A caller's job, type-erased so that one actor type can run jobs of any
//! result type, and able to travel back to its caller if it was never run.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use actix::Message;
use futures_util::FutureExt;
use futures_util::future::LocalBoxFuture;
use tokio::sync::oneshot;

use super::ActorError;
use crate::metrics::RegistryCounters;

/// How a job ended, as far as the actor that ran it is concerned.
pub(super) enum Outcome {
    Completed,
    Panicked(String),
}

/// A job that has run, with its answer not yet handed to the caller: the
/// actor first does its bookkeeping, so that a caller who has its answer
/// also sees the job counted.
pub(super) struct Finished {
    outcome: Outcome,
    answer: Box<dyn FnOnce()>,
}

impl Finished {
    pub(super) fn panicked(&self) -> bool {
        matches!(self.outcome, Outcome::Panicked(_))
    }

    /// Hands the job's value (or the news of its panic) to the caller.
    pub(super) fn answer_caller(self) -> Outcome {
        (self.answer)();
        self.outcome
    }
}

/// What the caller of `Registry::call` hears back.
pub(super) enum Reply<F, T> {
    /// The job ran: its value, or the news that it panicked.
    Done(Result<T, ActorError>),
    /// The job was never started (its actor stopped first): deliver it again.
    Bounced(F),
}

/// A job whose result type has been erased.
pub(super) trait Job: Send {
    /// Runs the job on the actor's thread; panics are caught and reported
    /// rather than unwound into the actor.
    fn run(self: Box<Self>) -> LocalBoxFuture<'static, Finished>;

    /// Hands the job, unrun, back to its caller.
    fn bounce(self: Box<Self>);
}

pub(super) struct TypedJob<F, T> {
    job: F,
    reply: oneshot::Sender<Reply<F, T>>,
}

impl<F, T> TypedJob<F, T> {
    pub(super) fn new(job: F, reply: oneshot::Sender<Reply<F, T>>) -> Self {
        Self { job, reply }
    }
}

impl<F, Fut, T> Job for TypedJob<F, T>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = T> + 'static,
    T: Send + 'static,
{
    fn run(self: Box<Self>) -> LocalBoxFuture<'static, Finished> {
        let TypedJob { job, reply } = *self;
        Box::pin(async move {
            // `job()` is called inside the guarded future, so a panic while
            // building the future is caught as well as one while polling it.
            let result = AssertUnwindSafe(async move { job().await })
                .catch_unwind()
                .await;
            let (outcome, answer) = match result {
                Ok(value) => (Outcome::Completed, Ok(value)),
                Err(payload) => (
                    Outcome::Panicked(crate::panic_message(payload.as_ref())),
                    Err(ActorError::Panicked),
                ),
            };
            Finished {
                outcome,
                answer: Box::new(move || {
                    // The caller may have given up waiting; that is fine.
                    let _ = reply.send(Reply::Done(answer));
                }),
            }
        })
    }

    fn bounce(self: Box<Self>) {
        let TypedJob { job, reply } = *self;
        let _ = reply.send(Reply::Bounced(job));
    }
}

/// The message an actor receives. Dropping it without taking the job (the
/// actor stopped with it still in its mailbox) bounces the job to its caller,
/// which is what makes delivery lossless.
/// While it holds its job the envelope counts in its kind's mailbox depth.
pub(crate) struct Envelope {
    job: Option<Box<dyn Job>>,
    enqueued_at: Instant,
    counters: Arc<RegistryCounters>,
}

impl Envelope {
    pub(super) fn new(
        job: Box<dyn Job>,
        enqueued_at: Instant,
        counters: Arc<RegistryCounters>,
    ) -> Self {
        counters.queued.add(1);
        Self {
            job: Some(job),
            enqueued_at,
            counters,
        }
    }

    /// Takes the job out to run it; after this, dropping the envelope is silent.
    pub(super) fn take_job(&mut self) -> Option<Box<dyn Job>> {
        let job = self.job.take();
        if job.is_some() {
            self.counters.queued.sub(1);
        }
        job
    }

    /// When the caller called `Registry::call` (kept across redeliveries).
    pub(super) fn enqueued_at(&self) -> Instant {
        self.enqueued_at
    }
}

impl Message for Envelope {
    type Result = ();
}

impl Drop for Envelope {
    fn drop(&mut self) {
        if let Some(job) = self.take_job() {
            job.bounce();
        }
    }
}
