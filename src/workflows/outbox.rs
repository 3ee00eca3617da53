//! The outbox dispatcher (DESIGN §4): delivers every committed event, at least once, to each
//! consumer that wants it. A consumer that handled an event is recorded and never runs again
//! for it, so a retry after one consumer failed repeats nothing the others did.

use async_trait::async_trait;
use chrono::Duration;
use std::sync::Arc;

use crate::clock::Clock;
use crate::store::events::{self, Event};
use crate::store::{Db, StoreResult};

/// Something done once per event: store a notification, push it, send an e-mail, call a
/// webhook, sync the CRM. It must be idempotent by event id: after a crash between its effect
/// and the record of its delivery it runs again.
#[async_trait]
pub trait Consumer: Send + Sync + 'static {
    /// Stable name, stored with each delivery.
    fn name(&self) -> &'static str;
    /// Whether this consumer acts on events of `kind`.
    fn wants(&self, kind: &str) -> bool;
    async fn handle(&self, event: &Event) -> anyhow::Result<()>;

    /// Handles several events, in order, and answers one outcome each. One by one unless
    /// the consumer can do the work of several together (fewer round trips).
    async fn handle_all(&self, events: &[&Event]) -> Vec<anyhow::Result<()>> {
        one_by_one(self, events).await
    }
}

/// [`Consumer::handle`] of each of `events`, in order: what [`Consumer::handle_all`] does
/// unless a consumer does better.
pub async fn one_by_one<C: Consumer + ?Sized>(
    consumer: &C,
    events: &[&Event],
) -> Vec<anyhow::Result<()>> {
    let mut outcomes = Vec::with_capacity(events.len());
    for event in events {
        outcomes.push(consumer.handle(event).await);
    }
    outcomes
}

/// The same outcome for each of `events`: what a consumer that handled them together (or
/// could not start) answers from [`Consumer::handle_all`].
pub fn alike(events: &[&Event], outcome: Result<(), String>) -> Vec<anyhow::Result<()>> {
    events
        .iter()
        .map(|_| outcome.clone().map_err(anyhow::Error::msg))
        .collect()
}

/// How long a claimed batch is reserved for the dispatcher that claimed it: long enough for
/// its consumers to get through `BATCH` events (a lease that runs out only repeats idempotent
/// work), short enough that a crashed dispatcher's events wait little.
const LEASE: Duration = Duration::seconds(60);
const BATCH: i64 = 200;

#[derive(Clone)]
pub struct Dispatcher {
    db: Db,
    clock: Clock,
    consumers: Arc<Vec<Arc<dyn Consumer>>>,
}

/// The outcome of one dispatch pass.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Pass {
    pub dispatched: usize,
    pub failed: usize,
    /// The batch was full: more events may be due.
    pub more: bool,
}

impl Dispatcher {
    pub fn new(db: Db, clock: Clock, consumers: Vec<Arc<dyn Consumer>>) -> Self {
        Self {
            db,
            clock,
            consumers: Arc::new(consumers),
        }
    }

    /// Delivers every due event once (up to a batch). The batch is claimed, and its events
    /// marked dispatched, in one statement each; each consumer is handed the batch's events
    /// it wants together ([`Consumer::handle_all`]). A consumer's delivery is recorded only
    /// when another failed on the same event (so the retry skips it). After a crash before
    /// the mark, the lease runs out and the batch runs again: consumers are idempotent by
    /// event.
    pub async fn run_once(&self) -> StoreResult<Pass> {
        let mut conn = self.db.conn().await?;
        let now = self.clock.now();
        let claimed = events::OUTBOX
            .claim(conn.exec(), now, now + LEASE, BATCH)
            .await?;
        let mut pass = Pass {
            more: claimed.len() as i64 >= BATCH,
            ..Pass::default()
        };
        let (Some(first), Some(last)) = (claimed.first(), claimed.last()) else {
            return Ok(pass);
        };
        let delivered = events::delivered_between(conn.exec(), first.id, last.id).await?;
        let mut deliveries: Vec<Delivery> = claimed
            .iter()
            .map(|event| Delivery {
                event,
                done: delivered
                    .iter()
                    .filter(|(id, _)| *id == event.id)
                    .map(|(_, consumer)| consumer.as_str())
                    .collect(),
                succeeded: Vec::new(),
                first_error: None,
            })
            .collect();
        for consumer in self.consumers.iter() {
            self.deliver(consumer.as_ref(), &mut deliveries).await;
        }
        let mut dispatched = Vec::with_capacity(claimed.len());
        for delivery in deliveries {
            let event = delivery.event;
            let Some(error) = delivery.first_error else {
                dispatched.push(event.id);
                continue;
            };
            // Those that succeeded are recorded, so the retry does not run them again.
            for name in delivery.succeeded {
                events::mark_delivered(conn.exec(), event.id, name, self.clock.now()).await?;
            }
            events::OUTBOX
                .mark_failed(
                    conn.exec(),
                    event.id,
                    event.attempts,
                    &error,
                    self.clock.now(),
                )
                .await?;
            pass.failed += 1;
        }
        events::OUTBOX
            .mark_done(conn.exec(), &dispatched, self.clock.now())
            .await?;
        pass.dispatched = dispatched.len();
        Ok(pass)
    }

    /// Hands `consumer` the events of the batch it wants and has not handled yet, together,
    /// and notes on each delivery how it went.
    async fn deliver(&self, consumer: &dyn Consumer, deliveries: &mut [Delivery<'_>]) {
        let due: Vec<&mut Delivery> = deliveries
            .iter_mut()
            .filter(|d| consumer.wants(&d.event.kind) && !d.done.contains(&consumer.name()))
            .collect();
        if due.is_empty() {
            return;
        }
        let events: Vec<&Event> = due.iter().map(|d| d.event).collect();
        let mut outcomes = consumer.handle_all(&events).await.into_iter();
        for delivery in due {
            let outcome = outcomes
                .next()
                .unwrap_or_else(|| Err(anyhow::anyhow!("no outcome for the event")));
            match outcome {
                Ok(()) => delivery.succeeded.push(consumer.name()),
                Err(err) => {
                    tracing::warn!(
                        event_id = delivery.event.id,
                        kind = %delivery.event.kind,
                        consumer = consumer.name(),
                        error = %format!("{err:#}"),
                        "event consumer failed; will retry"
                    );
                    delivery
                        .first_error
                        .get_or_insert_with(|| format!("{}: {err:#}", consumer.name()));
                }
            }
        }
    }
}

/// One event of a batch on its way through the consumers.
struct Delivery<'a> {
    event: &'a Event,
    /// Consumers that handled it on an earlier attempt.
    done: Vec<&'a str>,
    succeeded: Vec<&'static str>,
    first_error: Option<String>,
}

/// The name of the dispatcher's job, a drain `background::start_drains` starts: writers
/// `wake()` it right after a commit, and a run drains every due event, batch after batch.
pub const JOB: &str = "outbox_dispatcher";
