//! The leased-queue engine (`store::queue`) on both engines, once for every queue: the
//! outbox's events stand for the queues whose done rows stay (stamped), the CRM queue for
//! those whose done rows are deleted. Times come from a clock the tests move.

use chrono::Duration;

use crate::helpers::fresh_db;
use marketplace::clock::Clock;
use marketplace::store::events::{self, NewEvent, OUTBOX};
use marketplace::store::{Db, crm};

async fn record_events(db: &Db, clock: &Clock, n: usize) -> Vec<i64> {
    let mut tx = db.begin().await.unwrap();
    let mut ids = Vec::with_capacity(n);
    for _ in 0..n {
        let event = NewEvent {
            kind: "test.queued",
            aggregate: "test",
            aggregate_id: None,
            payload: serde_json::json!({}),
        };
        ids.push(events::record(tx.exec(), event, clock.now()).await.unwrap());
    }
    tx.commit().await.unwrap();
    ids
}

async fn claim(db: &Db, clock: &Clock, lease: Duration, limit: i64) -> Vec<i64> {
    let mut conn = db.conn().await.unwrap();
    let now = clock.now();
    OUTBOX
        .claim(conn.exec(), now, now + lease, limit)
        .await
        .unwrap()
        .iter()
        .map(|e| e.id)
        .collect()
}

#[actix_web::test]
async fn a_claimed_row_is_not_claimed_again_until_its_lease_lapses() {
    let (db, _dir) = fresh_db().await;
    let clock = Clock::system();
    let ids = record_events(&db, &clock, 3).await;
    let lease = Duration::minutes(1);

    assert_eq!(claim(&db, &clock, lease, 2).await, ids[..2], "oldest first");
    assert_eq!(claim(&db, &clock, lease, 2).await, ids[2..], "the rest");
    assert!(claim(&db, &clock, lease, 2).await.is_empty(), "all leased");

    clock.advance(lease - Duration::seconds(1));
    assert!(claim(&db, &clock, lease, 10).await.is_empty(), "not yet");
    clock.advance(Duration::seconds(1));
    assert_eq!(
        claim(&db, &clock, lease, 10).await,
        ids,
        "lapsed: due again"
    );

    // Done rows leave the queue for good.
    let mut conn = db.conn().await.unwrap();
    assert_eq!(OUTBOX.pending_count(conn.exec()).await.unwrap(), 3);
    OUTBOX
        .mark_done(conn.exec(), &ids[..2], clock.now())
        .await
        .unwrap();
    assert_eq!(OUTBOX.pending_count(conn.exec()).await.unwrap(), 1);
    drop(conn);
    clock.advance(lease);
    assert_eq!(claim(&db, &clock, lease, 10).await, ids[2..]);
}

#[actix_web::test]
async fn a_failed_row_is_due_again_after_the_backoff_with_its_attempts_counted() {
    let (db, _dir) = fresh_db().await;
    let clock = Clock::system();
    let ids = record_events(&db, &clock, 1).await;
    let lease = Duration::minutes(1);
    let backoff = OUTBOX.table().failures.unwrap().backoff;
    let mut conn = db.conn().await.unwrap();
    // Each claim at an instant read once, so the real time the statements take adds nothing.
    let mut now = clock.now();
    for attempts in 0..3 {
        let claimed = OUTBOX
            .claim(conn.exec(), now, now + lease, 10)
            .await
            .unwrap();
        assert_eq!(
            claimed
                .iter()
                .map(|e| (e.id, e.attempts))
                .collect::<Vec<_>>(),
            [(ids[0], attempts)],
            "due again, its attempts counted"
        );
        OUTBOX
            .mark_failed(conn.exec(), ids[0], attempts, "refused", now)
            .await
            .unwrap();
        let retry_at = now + backoff.delay(attempts);
        let just_before = retry_at - Duration::milliseconds(1);
        let early = OUTBOX
            .claim(conn.exec(), just_before, just_before + lease, 10)
            .await
            .unwrap();
        assert!(
            early.is_empty(),
            "waits the backoff after attempt {attempts}"
        );
        now = retry_at;
    }
    assert!(backoff.delay(0) < backoff.delay(2), "the waits grow");
    let claimed = OUTBOX
        .claim(conn.exec(), now, now + lease, 10)
        .await
        .unwrap();
    assert_eq!(claimed.iter().map(|e| e.attempts).collect::<Vec<_>>(), [3]);
}

#[actix_web::test]
async fn two_claimers_racing_get_disjoint_rows() {
    let (db, _dir) = fresh_db().await;
    let clock = Clock::system();
    let ids = record_events(&db, &clock, 12).await;
    let now = clock.now();
    let lease = now + Duration::minutes(1);
    let (mut a, mut b) = (db.conn().await.unwrap(), db.conn().await.unwrap());
    let (a, b) = tokio::join!(
        OUTBOX.claim(a.exec(), now, lease, 8),
        OUTBOX.claim(b.exec(), now, lease, 8),
    );
    let mut claimed: Vec<i64> = a.unwrap().iter().chain(&b.unwrap()).map(|e| e.id).collect();
    let count = claimed.len();
    claimed.sort_unstable();
    claimed.dedup();
    assert_eq!(claimed.len(), count, "no row claimed twice");
    assert!(count >= 8, "the first claim gets a full batch");
    assert!(claimed.iter().all(|id| ids.contains(id)));

    // One by one: of two claims of the same row read due at the same time, one wins.
    clock.advance(Duration::minutes(2));
    let later = clock.now();
    let (mut a, mut b) = (db.conn().await.unwrap(), db.conn().await.unwrap());
    let (a, b) = tokio::join!(
        OUTBOX.claim_row(a.exec(), ids[0], lease, later + Duration::minutes(1)),
        OUTBOX.claim_row(b.exec(), ids[0], lease, later + Duration::minutes(1)),
    );
    assert_eq!(
        [a.unwrap(), b.unwrap()].iter().filter(|won| **won).count(),
        1
    );
}

#[actix_web::test]
async fn a_queue_of_deleted_rows_removes_what_is_done_and_takes_back_what_is_released() {
    let (db, _dir) = fresh_db().await;
    let clock = Clock::system();
    let mut conn = db.conn().await.unwrap();
    for event_id in [1, 2] {
        let op = serde_json::json!({"op": event_id});
        crm::enqueue(conn.exec(), Some(event_id), None, &op, clock.now())
            .await
            .unwrap();
    }
    let now = clock.now();
    let lease = now + Duration::minutes(5);
    let claimed = crm::QUEUE.claim(conn.exec(), now, lease, 10).await.unwrap();
    assert_eq!(claimed.len(), 2);
    crm::QUEUE
        .mark_done(conn.exec(), &[claimed[0].id], now)
        .await
        .unwrap();
    assert_eq!(crm::QUEUE.pending_count(conn.exec()).await.unwrap(), 1);

    // Put back untried: due at the time given, not at the lease's end.
    let back = now + Duration::seconds(1);
    crm::QUEUE
        .release(conn.exec(), &[claimed[1].id], back)
        .await
        .unwrap();
    assert!(
        crm::QUEUE
            .claim(conn.exec(), now, lease, 10)
            .await
            .unwrap()
            .is_empty()
    );
    let again = crm::QUEUE
        .claim(conn.exec(), back, lease, 10)
        .await
        .unwrap();
    assert_eq!(
        again.iter().map(|i| i.id).collect::<Vec<_>>(),
        [claimed[1].id]
    );
}
