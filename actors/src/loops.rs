//! The shapes of loop a service runs as named [`Jobs`], each handing every run a clone of the
//! context it was started with (a service's state, or the one part a loop needs):
//!
//! * [`Jobs::every`]: a run every interval;
//! * [`Jobs::paced`]: each run answers how long until it is needed again (deadlines);
//! * [`Jobs::draining`]: runs again at once while a run answers that more may be due, for
//!   the queues their writers wake right after a commit;
//! * [`Jobs::listening`]: a run that lasts as long as its connection, started again after a
//!   pause when the connection is lost or cannot be made.
//!
//! All of them are supervised [`PeriodicJob`](crate::PeriodicJob)s: a failed or panicking run
//! backs off, and each reports under its name in [`metrics`](crate::metrics). A run's error is
//! anything `Display`, recorded as its text.

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use crate::jobs::Jobs;
use crate::periodic::{PeriodicConfig, PeriodicHandle};

impl Jobs {
    /// Runs `job` every `interval`, the first time `first_after` from now.
    pub fn every<C, F, Fut, T, E>(
        &self,
        name: &'static str,
        context: C,
        interval: Duration,
        first_after: Duration,
        job: F,
    ) -> PeriodicHandle
    where
        C: Clone + Send + Sync + 'static,
        F: Fn(C) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
        E: Display,
    {
        let config = PeriodicConfig {
            interval,
            initial_delay: first_after,
            ..PeriodicConfig::default()
        };
        self.spawn(name, config, move || {
            let run = job(context.clone());
            async move { run.await.map(drop).map_err(|e| e.to_string()) }
        })
    }

    /// Runs `job` when it asks: each successful run answers the wait until it is needed again
    /// (`None`, or anything longer than `max_wait`, means `max_wait`); a wake runs it at once.
    pub fn paced<C, F, Fut, E>(
        &self,
        name: &'static str,
        context: C,
        max_wait: Duration,
        first_after: Duration,
        job: F,
    ) -> PeriodicHandle
    where
        C: Clone + Send + Sync + 'static,
        F: Fn(C) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Option<Duration>, E>> + Send + 'static,
        E: Display,
    {
        let config = PeriodicConfig {
            interval: max_wait,
            initial_delay: first_after,
            ..PeriodicConfig::default()
        };
        self.spawn_paced(name, config, move || {
            let run = job(context.clone());
            async move { run.await.map_err(|e| e.to_string()) }
        })
    }

    /// Runs `run_once` at once, then every `interval` and whenever the handle is woken, again
    /// and again while it answers that more may be due. Its failures back off briefly (from
    /// 200 ms, at most 30 s): the writers of a queue wait on it.
    pub fn draining<C, F, Fut, E>(
        &self,
        name: &'static str,
        context: C,
        interval: Duration,
        run_once: F,
    ) -> PeriodicHandle
    where
        C: Clone + Send + Sync + 'static,
        F: Fn(C) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<bool, E>> + Send + 'static,
        E: Display,
    {
        let config = PeriodicConfig {
            interval,
            initial_delay: Duration::ZERO,
            backoff_base: Duration::from_millis(200),
            backoff_max: Duration::from_secs(30),
        };
        let run_once = std::sync::Arc::new(run_once);
        self.spawn(name, config, move || {
            let (run_once, context) = (run_once.clone(), context.clone());
            async move {
                while run_once(context.clone()).await.map_err(|e| e.to_string())? {}
                Ok(())
            }
        })
    }

    /// Runs `listen` at once, and again `retry_after` after each run ends: a run listens on a
    /// connection until it is lost (answering `Ok`) or fails to make one (`Err`). Its runs
    /// last long, so [`stop`](PeriodicHandle::stop) takes effect when the connection ends.
    pub fn listening<C, F, Fut, E>(
        &self,
        name: &'static str,
        context: C,
        retry_after: Duration,
        listen: F,
    ) -> PeriodicHandle
    where
        C: Clone + Send + Sync + 'static,
        F: Fn(C) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Display,
    {
        let config = PeriodicConfig {
            interval: retry_after,
            initial_delay: Duration::ZERO,
            backoff_base: retry_after,
            backoff_max: retry_after,
        };
        self.spawn(name, config, move || {
            let run = listen(context.clone());
            async move { run.await.map_err(|e| e.to_string()) }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;
    use crate::RunError;
    use crate::test_support::eventually;

    const HOUR: Duration = Duration::from_secs(3600);

    /// A context as a service passes its state: cloned into every run, sharing its counters.
    #[derive(Clone, Default)]
    struct Context {
        runs: Arc<AtomicU32>,
    }

    impl Context {
        fn count(&self) -> u32 {
            self.runs.fetch_add(1, Ordering::SeqCst) + 1
        }

        fn runs(&self) -> u32 {
            self.runs.load(Ordering::SeqCst)
        }
    }

    #[tokio::test]
    async fn every_hands_each_run_the_context_and_keeps_its_error_text() {
        let jobs = Jobs::default();
        let context = Context::default();
        jobs.every(
            "loops-test-every",
            context.clone(),
            HOUR,
            HOUR,
            |c| async move {
                match c.count() {
                    1 => Ok(7),
                    _ => Err(std::fmt::Error),
                }
            },
        );
        assert_eq!(jobs.trigger("loops-test-every").await, Ok(()));
        assert_eq!(
            jobs.trigger("loops-test-every").await,
            Err(RunError::Failed(std::fmt::Error.to_string()))
        );
        assert_eq!(context.runs(), 2);
        jobs.stop_all();
    }

    #[tokio::test]
    async fn every_waits_first_after_then_the_interval() {
        let jobs = Jobs::default();
        let context = Context::default();
        let first_after = Duration::from_millis(30);
        let started = tokio::time::Instant::now();
        jobs.every(
            "loops-test-every-first",
            context.clone(),
            HOUR,
            first_after,
            |c| async move { Ok::<_, String>(c.count()) },
        );
        eventually("the first run", || context.runs() == 1).await;
        assert!(started.elapsed() >= first_after);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(context.runs(), 1, "the next run waits the interval");
        jobs.stop_all();
    }

    #[tokio::test]
    async fn paced_runs_again_after_the_wait_a_run_answers() {
        let jobs = Jobs::default();
        let context = Context::default();
        jobs.paced(
            "loops-test-paced",
            context.clone(),
            HOUR,
            Duration::ZERO,
            |c| async move {
                let soon = c.count() < 3;
                Ok::<_, String>(soon.then_some(Duration::from_millis(5)))
            },
        );
        eventually("three runs", || context.runs() == 3).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(context.runs(), 3, "`None` waits `max_wait`");
        jobs.wake("loops-test-paced");
        eventually("a woken run", || context.runs() == 4).await;
        jobs.stop_all();
    }

    #[tokio::test]
    async fn draining_runs_at_once_and_again_while_more_may_be_due() {
        let jobs = Jobs::default();
        let context = Context::default();
        let handle = jobs.draining("loops-test-draining", context.clone(), HOUR, |c| {
            // Three passes find more; the fourth drains the queue.
            async move { Ok::<_, String>(c.count() % 4 != 0) }
        });
        eventually("the first drain", || context.runs() == 4).await;
        handle.wake();
        eventually("a woken drain", || context.runs() == 8).await;
        assert_eq!(handle.trigger().await, Ok(()));
        assert_eq!(context.runs(), 12);
        jobs.stop_all();
    }

    #[tokio::test]
    async fn a_failing_drain_stops_its_run_and_reports_the_error() {
        let jobs = Jobs::default();
        let context = Context::default();
        let handle = jobs.draining(
            "loops-test-draining-failure",
            context.clone(),
            HOUR,
            |c| async move {
                if c.count() == 2 {
                    Err("down")
                } else {
                    Ok(true)
                }
            },
        );
        eventually("the failing pass", || context.runs() == 2).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            context.runs(),
            2,
            "no pass after the failure until the back-off"
        );
        let last_error = crate::metrics::snapshot()
            .into_iter()
            .find(|m| m.kind == "loops-test-draining-failure")
            .and_then(|m| match m.values {
                crate::KindValues::Periodic(v) => v.last_error,
                _ => None,
            });
        assert!(last_error.is_some_and(|e| e.contains("down")));
        handle.stop();
    }

    #[tokio::test]
    async fn listening_starts_again_after_a_lost_or_failed_connection() {
        let jobs = Jobs::default();
        let context = Context::default();
        let retry_after = Duration::from_millis(20);
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let listening = gate.clone();
        jobs.listening(
            "loops-test-listening",
            (context.clone(), listening),
            retry_after,
            |(c, gate)| async move {
                match c.count() {
                    // The first connection fails, the second is held until the gate opens.
                    1 => Err("refused"),
                    2 => {
                        let _ = gate.acquire().await;
                        Ok(())
                    }
                    _ => Ok(()),
                }
            },
        );
        eventually("a second connection", || context.runs() == 2).await;
        tokio::time::sleep(retry_after * 3).await;
        assert_eq!(context.runs(), 2, "no other run while one listens");
        let lost = tokio::time::Instant::now();
        gate.add_permits(1);
        eventually("a third connection", || context.runs() == 3).await;
        assert!(lost.elapsed() >= retry_after, "after the pause");
        jobs.stop_all();
    }
}
