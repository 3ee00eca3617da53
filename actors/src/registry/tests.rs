use std::rc::Rc;
use std::sync::atomic::AtomicBool;

use futures_util::future::join_all;
use tokio::time::{sleep, timeout};

use super::*;
use crate::metrics::tests::find;
use crate::metrics::{CATEGORY_REGISTRY, KindValues, RegistryValues};
use crate::test_support::{DEADLINE, eventually};

fn registry_metrics(kind: &str) -> RegistryValues {
    match find(CATEGORY_REGISTRY, kind).map(|m| m.values) {
        Some(KindValues::Registry(values)) => values,
        other => panic!("no registry metrics for {kind}: {other:?}"),
    }
}

fn config(idle_timeout: Duration, arbiters: usize) -> RegistryConfig {
    RegistryConfig {
        idle_timeout,
        arbiters,
    }
}

#[actix_rt::test]
async fn jobs_for_one_key_run_one_at_a_time_in_call_order() {
    let registry = Registry::new("registry-test-order", RegistryConfig::default());
    let log = Arc::new(Mutex::new(Vec::new()));
    let calls: Vec<_> = (0..50)
        .map(|i| {
            let log = Arc::clone(&log);
            registry.call("key-1".to_owned(), move || async move {
                log.lock().expect("log lock").push((i, "start"));
                // Not `Send`: the job's future stays on the actor's thread.
                let local = Rc::new(i);
                sleep(Duration::from_millis(1)).await;
                log.lock().expect("log lock").push((i, "end"));
                *local
            })
        })
        .collect();

    let results = join_all(calls).await;

    let expected_results: Vec<Result<i32, ActorError>> = (0..50).map(Ok).collect();
    assert_eq!(results, expected_results);
    let expected_log: Vec<(i32, &str)> = (0..50).flat_map(|i| [(i, "start"), (i, "end")]).collect();
    assert_eq!(
        *log.lock().expect("log lock"),
        expected_log,
        "jobs interleaved or reordered"
    );
    assert_eq!(registry.live(), 1);
}

#[actix_rt::test]
async fn different_keys_run_at_the_same_time() {
    // Each job waits for the other key's job to have started: serialising
    // the two keys would deadlock. One arbiter shows that the concurrency
    // does not depend on the keys landing on different threads.
    for arbiters in [1, 2] {
        let registry = Registry::new(
            "registry-test-concurrent",
            config(Duration::from_secs(60), arbiters),
        );
        let (a_started, a_seen) = oneshot::channel::<()>();
        let (b_started, b_seen) = oneshot::channel::<()>();
        let a = registry.call("a", move || async move {
            let _ = a_started.send(());
            b_seen.await.is_ok()
        });
        let b = registry.call("b", move || async move {
            let _ = b_started.send(());
            a_seen.await.is_ok()
        });
        let outcome = timeout(DEADLINE, futures_util::future::join(a, b))
            .await
            .expect("jobs of different keys were serialised");
        assert_eq!(outcome, (Ok(true), Ok(true)), "with {arbiters} arbiter(s)");
        assert_eq!(registry.live(), 2);
    }
}

#[actix_rt::test]
async fn an_idle_actor_stops_and_a_later_job_starts_a_fresh_one() {
    let kind = "registry-test-idle";
    let registry = Registry::new(kind, config(Duration::from_millis(50), 2));
    assert_eq!(registry.call(7u64, || async { "first" }).await, Ok("first"));
    assert_eq!(registry.live(), 1);
    assert_eq!(registry_metrics(kind).started, 1);

    eventually("the idle actor stops", || registry.live() == 0).await;
    assert_eq!(registry_metrics(kind).live, 0);

    assert_eq!(
        registry.call(7u64, || async { "second" }).await,
        Ok("second")
    );
    assert_eq!(registry.live(), 1);
    assert_eq!(
        registry_metrics(kind).started,
        2,
        "a fresh actor was started"
    );
}

#[actix_rt::test]
async fn no_job_is_lost_or_overlaps_while_actors_retire_as_jobs_arrive() {
    // A zero idle timeout makes the actor retire right after every job, so
    // new jobs keep racing with retirements.
    let kind = "registry-test-retire-race";
    let registry = Registry::new(kind, config(Duration::ZERO, 2));
    let busy = Arc::new(AtomicBool::new(false));
    let callers = (0..4).map(|caller| {
        let (registry, busy) = (registry.clone(), Arc::clone(&busy));
        async move {
            let mut seen = Vec::new();
            for i in 0..50 {
                let busy = Arc::clone(&busy);
                let job = move || async move {
                    assert!(!busy.swap(true, Ordering::SeqCst), "two jobs overlapped");
                    tokio::task::yield_now().await;
                    busy.store(false, Ordering::SeqCst);
                    i
                };
                seen.push(registry.call(99u32, job).await);
                if i % 3 == caller % 3 {
                    sleep(Duration::from_millis(1)).await;
                }
            }
            seen
        }
    });

    let all = timeout(DEADLINE, join_all(callers))
        .await
        .expect("a job was lost");
    for seen in all {
        assert_eq!(seen, (0..50).map(Ok).collect::<Vec<_>>());
    }
    assert!(
        registry_metrics(kind).started > 1,
        "actors should have retired in between"
    );
}

#[actix_rt::test]
async fn a_panicking_job_restarts_its_actor_and_the_key_keeps_serving() {
    let kind = "registry-test-panic";
    let registry = Registry::new(kind, RegistryConfig::default());
    // Queued behind the panicking job before it runs: must survive the restart.
    let panicking = registry.call(1u8, || async {
        sleep(Duration::from_millis(5)).await;
        panic!("job blew up")
    });
    let queued = registry.call(1u8, || async { "queued" });
    let other_key = registry.call(2u8, || async { "other" });

    assert_eq!(panicking.await, Err::<(), _>(ActorError::Panicked));
    assert_eq!(registry_metrics(kind).restarts, 1);
    assert_eq!(queued.await, Ok("queued"));
    assert_eq!(other_key.await, Ok("other"));

    // A panic while building the future is caught too.
    let panics_early = registry.call(1u8, || -> std::future::Ready<()> { panic!("no future") });
    assert_eq!(panics_early.await, Err(ActorError::Panicked));
    assert_eq!(
        registry.call(1u8, || async { "still serving" }).await,
        Ok("still serving")
    );

    let metrics = registry_metrics(kind);
    assert_eq!(metrics.restarts, 2);
    assert_eq!(metrics.started, 2, "a restart is not a fresh start");
    assert_eq!(registry.live(), 2);
}

#[actix_rt::test]
async fn metrics_count_jobs_and_their_times() {
    let kind = "registry-test-metrics";
    let registry = Registry::new(kind, RegistryConfig::default());
    let calls: Vec<_> = (0..3)
        .map(|_| registry.call("k", || sleep(Duration::from_millis(2))))
        .collect();
    for result in join_all(calls).await {
        assert_eq!(result, Ok(()));
    }
    let metrics = registry_metrics(kind);
    assert_eq!(
        (metrics.live, metrics.started, metrics.messages_handled),
        (1, 1, 3)
    );
    assert!(metrics.handling_seconds_total >= 0.006, "{metrics:?}");
    assert!(metrics.handling_seconds_max >= 0.002, "{metrics:?}");
    // The later jobs waited for the earlier ones.
    assert!(metrics.mailbox_wait_seconds_total >= 0.002, "{metrics:?}");
}

#[actix_rt::test]
async fn mailbox_depth_counts_the_jobs_waiting_behind_a_busy_actor() {
    let kind = "registry-test-mailbox-depth";
    let registry = Registry::new(kind, RegistryConfig::default());
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let busy = registry.call("k", move || async move {
        let _ = released.await;
    });
    let waiting: Vec<_> = (0..4).map(|_| registry.call("k", || async {})).collect();
    // The first job has started (it left the mailbox); four wait behind it.
    eventually("four jobs queued", || {
        registry_metrics(kind).mailbox_depth == 4
    })
    .await;
    let _ = release.send(());
    assert_eq!(busy.await, Ok(()));
    for result in join_all(waiting).await {
        assert_eq!(result, Ok(()));
    }
    assert_eq!(registry_metrics(kind).mailbox_depth, 0);
}
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn works_from_a_plain_tokio_runtime() {
    // No actix system here: the registry brings a private one.
    let registry = Registry::new("registry-test-tokio", RegistryConfig::default());
    let from_other_task = tokio::spawn({
        let registry = registry.clone();
        async move { registry.call(1u16, || async { 1 }).await }
    });
    assert_eq!(from_other_task.await.expect("task ran"), Ok(1));
    assert_eq!(registry.call(1u16, || async { 2 }).await, Ok(2));
}

#[test]
fn calls_answer_unavailable_once_the_system_has_stopped() {
    let system = System::new();
    system.block_on(async {
        let registry = Registry::new("registry-test-shutdown", RegistryConfig::default());
        assert_eq!(registry.call(1u32, || async { 1 }).await, Ok(1));

        System::current().stop();
        let deadline = Instant::now() + DEADLINE;
        loop {
            let answer = timeout(DEADLINE, registry.call(1u32, || async { 2 }))
                .await
                .expect("a call hung while the system stopped");
            match answer {
                Err(ActorError::Unavailable) => break,
                // The arbiters are still on their way down.
                Ok(2) => assert!(Instant::now() < deadline, "arbiters never stopped"),
                other => panic!("unexpected answer {other:?}"),
            }
            sleep(Duration::from_millis(5)).await;
        }
    });
}

#[actix_rt::test]
async fn a_group_runs_as_one_job_of_each_of_its_keys() {
    let registry = Registry::new("registry-test-together", config(Duration::from_secs(60), 2));
    let log = Arc::new(Mutex::new(Vec::new()));
    let entry = |log: &Arc<Mutex<Vec<String>>>, text: String| {
        log.lock().expect("log lock").push(text);
    };
    // A slow job of key 1 queued before the group, one of key 2 queued after it.
    let before = {
        let log = Arc::clone(&log);
        registry.call(1u32, move || async move {
            sleep(Duration::from_millis(30)).await;
            log.lock().expect("log lock").push("before 1".to_owned());
        })
    };
    let group = registry.call_together(&[1, 2, 2], DEADLINE, {
        let log = Arc::clone(&log);
        move |held: Vec<u32>| async move {
            assert_eq!(held, [1, 2]);
            entry(&log, "group starts".to_owned());
            sleep(Duration::from_millis(30)).await;
            entry(&log, "group ends".to_owned());
            7
        }
    });
    let after = {
        let log = Arc::clone(&log);
        registry.call(2u32, move || async move {
            log.lock().expect("log lock").push("after 2".to_owned());
        })
    };
    let (before, group, after) = tokio::join!(before, group, after);
    assert_eq!((before, group, after), (Ok(()), 7, Ok(())));
    assert_eq!(
        *log.lock().expect("log lock"),
        ["before 1", "group starts", "group ends", "after 2"],
        "the group ran beside a job of one of its keys"
    );
}

#[actix_rt::test]
async fn groups_sharing_keys_in_any_order_never_wait_for_each_other() {
    let registry = Registry::new("registry-test-groups", config(Duration::from_secs(60), 2));
    let running = Arc::new(AtomicUsize::new(0));
    let groups: Vec<_> = (0..40u32)
        .map(|i| {
            let registry = registry.clone();
            let running = Arc::clone(&running);
            // Half take the keys forwards, half backwards.
            let keys: Vec<u32> = if i % 2 == 0 {
                vec![1, 2, 3]
            } else {
                vec![3, 2, 1]
            };
            tokio::spawn(async move {
                registry
                    .call_together(&keys, DEADLINE, move |held| async move {
                        assert_eq!(held.len(), 3);
                        // Groups sharing keys never overlap.
                        assert_eq!(running.fetch_add(1, Ordering::SeqCst), 0);
                        sleep(Duration::from_millis(1)).await;
                        running.fetch_sub(1, Ordering::SeqCst);
                        i
                    })
                    .await
            })
        })
        .collect();
    let done = timeout(DEADLINE, join_all(groups))
        .await
        .expect("groups waited for each other");
    let mut values: Vec<u32> = done.into_iter().map(|r| r.expect("group task")).collect();
    values.sort_unstable();
    assert_eq!(values, (0..40).collect::<Vec<_>>());
}

#[actix_rt::test]
async fn a_group_does_not_wait_past_its_patience_for_a_busy_actor() {
    let registry = Registry::new("registry-test-patience", config(Duration::from_secs(60), 2));
    let (end, ended) = oneshot::channel::<()>();
    let busy = tokio::spawn(registry.call(1u32, move || async move {
        let _ = ended.await;
    }));
    let held = registry
        .call_together(
            &[1, 2],
            Duration::from_millis(50),
            |held| async move { held },
        )
        .await;
    assert_eq!(held, [2], "the busy actor was waited for");
    // The busy actor's part, when its turn comes, ends at once: the next job runs.
    end.send(()).expect("busy job waiting");
    busy.await.expect("busy task").expect("busy job");
    let next = timeout(DEADLINE, registry.call(1, || async { 5 }))
        .await
        .expect("the left-out part held the actor");
    assert_eq!(next, Ok(5));
}
