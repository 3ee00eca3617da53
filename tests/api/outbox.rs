//! The events outbox and its dispatcher (DESIGN §4).

use async_trait::async_trait;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::helpers::fresh_db;
use marketplace::clock::Clock;
use marketplace::store::Db;
use marketplace::store::events::{self, Event, NewEvent};
use marketplace::store::mail_queue::{self, NewMail};
use marketplace::workflows::outbox::{Consumer, Dispatcher, Pass};

/// Records what it saw; fails its first `fail_first` calls.
struct Recorder {
    name: &'static str,
    seen: std::sync::Mutex<Vec<i64>>,
    calls: AtomicUsize,
    fail_first: usize,
}

impl Recorder {
    fn new(name: &'static str, fail_first: usize) -> Arc<Self> {
        Arc::new(Self {
            name,
            seen: Default::default(),
            calls: AtomicUsize::new(0),
            fail_first,
        })
    }
    fn seen(&self) -> Vec<i64> {
        self.seen.lock().unwrap().clone()
    }
}

#[async_trait]
impl Consumer for Recorder {
    fn name(&self) -> &'static str {
        self.name
    }
    fn wants(&self, kind: &str) -> bool {
        kind.starts_with("test.")
    }
    async fn handle(&self, event: &Event) -> anyhow::Result<()> {
        if self.calls.fetch_add(1, Ordering::SeqCst) < self.fail_first {
            anyhow::bail!("consumer {} is down", self.name);
        }
        self.seen.lock().unwrap().push(event.id);
        Ok(())
    }
}

async fn record(db: &Db, clock: &Clock, commit: bool) -> i64 {
    let mut tx = db.begin().await.unwrap();
    let id = events::record(
        tx.exec(),
        NewEvent {
            kind: "test.happened",
            aggregate: "test",
            aggregate_id: Some(7),
            payload: serde_json::json!({"n": 1}),
        },
        clock.now(),
    )
    .await
    .unwrap();
    if commit {
        tx.commit().await.unwrap()
    } else {
        tx.rollback().await.unwrap()
    }
    id
}

#[actix_web::test]
async fn an_event_of_a_rolled_back_transaction_is_never_delivered() {
    let (db, _dir) = fresh_db().await;
    let clock = Clock::system();
    let consumer = Recorder::new("recorder", 0);
    let dispatcher = Dispatcher::new(db.clone(), clock.clone(), vec![consumer.clone()]);
    record(&db, &clock, false).await;
    let kept = record(&db, &clock, true).await;
    assert_eq!(
        dispatcher.run_once().await.unwrap(),
        Pass {
            dispatched: 1,
            failed: 0,
            more: false,
        }
    );
    assert_eq!(consumer.seen(), vec![kept]);
}

#[actix_web::test]
async fn a_failing_consumer_is_retried_and_each_consumer_sees_the_event_once() {
    let (db, _dir) = fresh_db().await;
    let clock = Clock::system();
    let flaky = Recorder::new("flaky", 1);
    let steady = Recorder::new("steady", 0);
    let dispatcher = Dispatcher::new(
        db.clone(),
        clock.clone(),
        vec![flaky.clone(), steady.clone()],
    );
    let id = record(&db, &clock, true).await;

    assert_eq!(
        dispatcher.run_once().await.unwrap(),
        Pass {
            dispatched: 0,
            failed: 1,
            more: false,
        }
    );
    assert_eq!(steady.seen(), vec![id]);
    assert!(flaky.seen().is_empty());
    // Not due yet: the back-off holds it.
    assert_eq!(dispatcher.run_once().await.unwrap(), Pass::default());

    clock.advance(chrono::Duration::seconds(5));
    assert_eq!(
        dispatcher.run_once().await.unwrap(),
        Pass {
            dispatched: 1,
            failed: 0,
            more: false,
        }
    );
    assert_eq!(flaky.seen(), vec![id]);
    assert_eq!(
        steady.seen(),
        vec![id],
        "the consumer that had succeeded is not run again"
    );

    clock.advance(chrono::Duration::hours(2));
    assert_eq!(dispatcher.run_once().await.unwrap(), Pass::default());
    assert_eq!((flaky.seen().len(), steady.seen().len()), (1, 1));
}

#[actix_web::test]
async fn events_survive_a_restart() {
    let (db, _dir) = fresh_db().await;
    let clock = Clock::system();
    // Written while no dispatcher runs (the server "crashed" after commit).
    let id = record(&db, &clock, true).await;
    let first = Recorder::new("recorder", 0);
    drop(Dispatcher::new(
        db.clone(),
        clock.clone(),
        vec![first.clone()],
    ));

    // A new process: a new pool on the same database, a new dispatcher.
    let consumer = Recorder::new("recorder", 0);
    let outbox = actors::Jobs::default().draining(
        marketplace::workflows::outbox::JOB,
        Dispatcher::new(db.clone(), clock.clone(), vec![consumer.clone()]),
        std::time::Duration::from_millis(50),
        |dispatcher| async move { dispatcher.run_once().await.map(|pass| pass.more) },
    );
    let delivered = crate::helpers::wait_for(std::time::Duration::from_secs(5), || {
        (!consumer.seen().is_empty()).then(|| consumer.seen())
    })
    .await;
    outbox.stop();
    assert_eq!(delivered, Some(vec![id]));
    assert!(first.seen().is_empty());
}

#[actix_web::test]
async fn two_dispatchers_deliver_each_event_once() {
    let (db, _dir) = fresh_db().await;
    let clock = Clock::system();
    let consumer = Recorder::new("recorder", 0);
    let a = Dispatcher::new(db.clone(), clock.clone(), vec![consumer.clone()]);
    let b = Dispatcher::new(db.clone(), clock.clone(), vec![consumer.clone()]);
    let mut ids = Vec::new();
    for _ in 0..20 {
        ids.push(record(&db, &clock, true).await);
    }
    let (ra, rb) = tokio::join!(a.run_once(), b.run_once());
    assert_eq!(ra.unwrap().dispatched + rb.unwrap().dispatched, 20);
    let mut seen = consumer.seen();
    seen.sort();
    assert_eq!(seen, ids);
}

/// Takes a batch's events in one call; fails those of `failing`, once each.
struct BatchRecorder {
    batches: std::sync::Mutex<Vec<Vec<i64>>>,
    failing: std::sync::Mutex<Vec<i64>>,
}

#[async_trait]
impl Consumer for BatchRecorder {
    fn name(&self) -> &'static str {
        "batch"
    }
    fn wants(&self, kind: &str) -> bool {
        kind.starts_with("test.")
    }
    async fn handle(&self, _event: &Event) -> anyhow::Result<()> {
        anyhow::bail!("handed one by one")
    }
    async fn handle_all(&self, events: &[&Event]) -> Vec<anyhow::Result<()>> {
        let ids: Vec<i64> = events.iter().map(|e| e.id).collect();
        self.batches.lock().unwrap().push(ids.clone());
        let mut failing = self.failing.lock().unwrap();
        ids.iter()
            .map(|id| match failing.iter().position(|f| f == id) {
                Some(at) => {
                    failing.remove(at);
                    Err(anyhow::anyhow!("event {id} refused"))
                }
                None => Ok(()),
            })
            .collect()
    }
}

#[actix_web::test]
async fn a_batch_reaches_a_consumer_together_and_a_failure_holds_back_only_its_event() {
    let (db, _dir) = fresh_db().await;
    let clock = Clock::system();
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(record(&db, &clock, true).await);
    }
    let batch = Arc::new(BatchRecorder {
        batches: Default::default(),
        failing: std::sync::Mutex::new(vec![ids[1]]),
    });
    let steady = Recorder::new("steady", 0);
    let dispatcher = Dispatcher::new(
        db.clone(),
        clock.clone(),
        vec![batch.clone(), steady.clone()],
    );

    assert_eq!(
        dispatcher.run_once().await.unwrap(),
        Pass {
            dispatched: 2,
            failed: 1,
            more: false,
        }
    );
    assert_eq!(
        *batch.batches.lock().unwrap(),
        vec![ids.clone()],
        "one call, in order"
    );
    assert_eq!(steady.seen(), ids, "the other consumer had every event");

    clock.advance(chrono::Duration::seconds(5));
    assert_eq!(
        dispatcher.run_once().await.unwrap(),
        Pass {
            dispatched: 1,
            failed: 0,
            more: false,
        }
    );
    assert_eq!(
        *batch.batches.lock().unwrap(),
        vec![ids.clone(), vec![ids[1]]],
        "only the failed event again"
    );
    assert_eq!(steady.seen(), ids, "and not to the consumer that had it");
}

#[actix_web::test]
async fn an_event_run_again_queues_its_e_mails_once() {
    let (db, _dir) = fresh_db().await;
    let clock = Clock::system();
    let event_id = record(&db, &clock, true).await;
    let context = serde_json::json!({"name": "Ana"});
    let mails: Vec<NewMail> = (0..2)
        .map(|position| NewMail {
            event_id,
            position,
            recipient: "ana@example.com",
            template: "welcome_generic",
            context: &context,
            idempotency_key: format!("key-{position}"),
        })
        .collect();
    let mut conn = db.conn().await.unwrap();
    let now = clock.now();
    assert_eq!(
        mail_queue::enqueue_all(conn.exec(), &mails, now)
            .await
            .unwrap(),
        2
    );
    // The outbox ran the event again (a crash before its mark): nothing new is queued.
    assert_eq!(
        mail_queue::enqueue_all(conn.exec(), &mails, now)
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        mail_queue::QUEUE.pending_count(conn.exec()).await.unwrap(),
        2
    );
}
