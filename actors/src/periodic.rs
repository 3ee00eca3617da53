//! A supervised periodic job: runs every `interval`, backs off exponentially
//! while it fails, survives panics, and can be run on demand or stopped.

use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::FutureExt;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::metrics::{self, PeriodicCounters};

/// Schedule of a [`PeriodicJob`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeriodicConfig {
    /// Time from the end of a successful run to the start of the next.
    pub interval: Duration,
    /// Time from spawning to the first run.
    pub initial_delay: Duration,
    /// After `n` consecutive failures the next run waits
    /// `backoff_base × 2^(n−1)` (base, 2·base, 4·base, …) instead of `interval`.
    pub backoff_base: Duration,
    /// Upper bound of that wait.
    pub backoff_max: Duration,
}

impl Default for PeriodicConfig {
    /// Every minute, first run at once, back-off from 1 s up to 5 min.
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(60),
            initial_delay: Duration::ZERO,
            backoff_base: Duration::from_secs(1),
            backoff_max: Duration::from_secs(300),
        }
    }
}

impl PeriodicConfig {
    /// The wait after `failures` (≥ 1) consecutive failed runs.
    fn backoff(&self, failures: u32) -> Duration {
        let factor = 2u32.saturating_pow(failures.saturating_sub(1));
        self.backoff_base
            .saturating_mul(factor)
            .min(self.backoff_max)
    }
}

/// Why one run of a periodic job did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunError {
    /// The job returned this error.
    Failed(String),
    /// The job panicked with this message.
    Panicked(String),
    /// The job was stopped before the run could happen.
    Stopped,
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Failed(message) => write!(f, "run failed: {message}"),
            RunError::Panicked(message) => write!(f, "run panicked: {message}"),
            RunError::Stopped => f.write_str("job is stopped"),
        }
    }
}

impl std::error::Error for RunError {}

/// Starts supervised periodic jobs; see [`PeriodicJob::spawn`].
#[derive(Debug)]
pub enum PeriodicJob {}

impl PeriodicJob {
    /// Spawns `job` on the current tokio runtime (panics outside one, like
    /// `tokio::spawn`) and returns its handle. Metrics are reported under
    /// `name`.
    ///
    /// Runs never overlap. A run that returns `Err` or panics is a failure:
    /// the next run comes after the back-off of [`PeriodicConfig`]; a success
    /// resets it. A panic is caught, logged and counted as a restart.
    ///
    /// Dropping every [`PeriodicHandle`] does **not** stop the job: it runs
    /// until [`PeriodicHandle::stop`] or until the runtime shuts down.
    pub fn spawn<F, Fut>(name: &'static str, config: PeriodicConfig, job: F) -> PeriodicHandle
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), String>> + Send + 'static,
    {
        Self::spawn_paced(name, config, move || {
            let run = job();
            async move { run.await.map(|()| None) }
        })
    }

    /// Like [`spawn`](Self::spawn), for a job that knows when it is next needed: a
    /// successful run returns `Some(wait)` to run again after `wait` (at most the
    /// `interval`, which stays the longest sleep), or `None` for the `interval`.
    /// Failures back off as with `spawn`; wakes and triggers work the same.
    pub fn spawn_paced<F, Fut>(name: &'static str, config: PeriodicConfig, job: F) -> PeriodicHandle
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Option<Duration>, String>> + Send + 'static,
    {
        let (commands, inbox) = mpsc::unbounded_channel();
        let woken = Arc::new(AtomicBool::new(false));
        let schedule = Schedule {
            name,
            config,
            counters: metrics::periodic_counters(name),
            woken: woken.clone(),
        };
        let task = tokio::spawn(schedule.run(job, inbox));
        PeriodicHandle {
            name,
            commands,
            woken,
            task: Arc::new(task),
        }
    }
}

/// Controls a spawned [`PeriodicJob`]. Cheap to clone; dropping it leaves the
/// job running.
#[derive(Clone)]
pub struct PeriodicHandle {
    name: &'static str,
    commands: mpsc::UnboundedSender<Command>,
    /// A wake is queued and its run has not started.
    woken: Arc<AtomicBool>,
    task: Arc<JoinHandle<()>>,
}

impl fmt::Debug for PeriodicHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeriodicHandle")
            .field("name", &self.name)
            .field("stopped", &self.is_stopped())
            .finish()
    }
}

enum Command {
    Trigger(oneshot::Sender<Result<(), RunError>>),
    Wake,
    Stop,
}

impl PeriodicHandle {
    /// The name the job was spawned with.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Asks the job to stop and returns at once. A run in progress finishes
    /// first; runs asked for with [`trigger`](Self::trigger) after it get
    /// [`RunError::Stopped`]. See [`is_stopped`](Self::is_stopped).
    pub fn stop(&self) {
        // Already stopped if the task is gone: nothing to do.
        let _ = self.commands.send(Command::Stop);
    }

    /// Whether the job's task has ended.
    pub fn is_stopped(&self) -> bool {
        self.task.is_finished()
    }

    /// Asks for a run now without waiting for it. Wakes coalesce: while one
    /// is waiting to start, more wakes ask for nothing more, so a burst of
    /// them costs one run.
    pub fn wake(&self) {
        if !self.woken.swap(true, Ordering::AcqRel) {
            let _ = self.commands.send(Command::Wake);
        }
    }

    /// Runs the job now (after a run in progress, if any) and returns that
    /// run's result. The schedule restarts from the end of this run.
    pub async fn trigger(&self) -> Result<(), RunError> {
        let (reply, result) = oneshot::channel();
        self.commands
            .send(Command::Trigger(reply))
            .map_err(|_| RunError::Stopped)?;
        result.await.unwrap_or(Err(RunError::Stopped))
    }
}

struct Schedule {
    name: &'static str,
    config: PeriodicConfig,
    counters: Arc<PeriodicCounters>,
    woken: Arc<AtomicBool>,
}

impl Schedule {
    async fn run<F, Fut>(self, job: F, mut inbox: mpsc::UnboundedReceiver<Command>)
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Option<Duration>, String>> + Send + 'static,
    {
        let mut next_run = Instant::now() + self.config.initial_delay;
        let mut failures = 0u32;
        let mut handles_alive = true;
        loop {
            let reply = tokio::select! {
                // Commands first, so that a stop is never outrun by the timer.
                biased;
                command = inbox.recv(), if handles_alive => match command {
                    Some(Command::Trigger(reply)) => Some(reply),
                    Some(Command::Wake) => None,
                    Some(Command::Stop) => break,
                    // Every handle dropped: keep to the schedule (no stop-on-drop).
                    None => {
                        handles_alive = false;
                        continue;
                    }
                },
                () = tokio::time::sleep_until(next_run) => None,
            };

            // Cleared before the run: a wake during the run asks for another.
            self.woken.store(false, Ordering::Release);
            let outcome = run_once(&job).await;
            failures = match &outcome {
                Ok(_) => 0,
                Err(_) => failures.saturating_add(1),
            };
            let wait = self.record(&outcome, failures);
            self.counters.record_run(wait);
            next_run = Instant::now() + wait;
            let result = outcome.map(drop);
            if let Some(reply) = reply {
                // The caller may have stopped waiting; that is fine.
                let _ = reply.send(result);
            }
        }
        tracing::info!(job = self.name, "periodic job stopped");
    }

    /// Updates metrics and logs for one run; returns the wait until the next.
    fn record(&self, result: &Result<Option<Duration>, RunError>, failures: u32) -> Duration {
        let counters = &self.counters;
        counters.runs.fetch_add(1, Ordering::Relaxed);
        let error = match result {
            Ok(next) => {
                counters.record_success_now();
                counters.set_backoff(Duration::ZERO);
                return next.map_or(self.config.interval, |wait| wait.min(self.config.interval));
            }
            Err(error) => error,
        };
        counters.failures.fetch_add(1, Ordering::Relaxed);
        counters.record_failure(&error.to_string());
        if matches!(error, RunError::Panicked(_)) {
            counters.restarts.fetch_add(1, Ordering::Relaxed);
        }
        let backoff = self.config.backoff(failures);
        counters.set_backoff(backoff);
        tracing::warn!(
            job = self.name,
            %error,
            failures,
            backoff_ms = u64::try_from(backoff.as_millis()).unwrap_or(u64::MAX),
            "periodic job run failed; backing off"
        );
        backoff
    }
}

async fn run_once<F, Fut>(job: &F) -> Result<Option<Duration>, RunError>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<Option<Duration>, String>>,
{
    // `job()` is called inside the guarded future so that a panic while
    // building the future is caught too.
    match AssertUnwindSafe(async { job().await }).catch_unwind().await {
        Ok(Ok(next)) => Ok(next),
        Ok(Err(message)) => Err(RunError::Failed(message)),
        Err(payload) => Err(RunError::Panicked(crate::panic_message(payload.as_ref()))),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};

    use super::*;
    use crate::metrics::tests::find;
    use crate::metrics::{CATEGORY_PERIODIC, KindValues, PeriodicValues};
    use crate::test_support::eventually;

    fn periodic_metrics(name: &str) -> PeriodicValues {
        match find(CATEGORY_PERIODIC, name).map(|m| m.values) {
            Some(KindValues::Periodic(values)) => values,
            other => panic!("no periodic metrics for {name}: {other:?}"),
        }
    }

    /// A schedule that never fires by itself within a test.
    fn manual() -> PeriodicConfig {
        PeriodicConfig {
            interval: Duration::from_secs(3600),
            initial_delay: Duration::from_secs(3600),
            backoff_base: Duration::from_secs(10),
            backoff_max: Duration::from_secs(35),
        }
    }

    fn counting_job(
        runs: &Arc<AtomicU64>,
    ) -> impl Fn() -> futures_util::future::Ready<Result<(), String>> + Send + Sync + 'static {
        let runs = Arc::clone(runs);
        move || {
            runs.fetch_add(1, Ordering::SeqCst);
            futures_util::future::ready(Ok(()))
        }
    }

    #[test]
    fn backoff_doubles_from_base_and_is_capped() {
        let config = manual();
        let waits: Vec<u64> = (1..=5).map(|n| config.backoff(n).as_secs()).collect();
        assert_eq!(waits, [10, 20, 35, 35, 35]);
        assert_eq!(config.backoff(u32::MAX), Duration::from_secs(35));
    }

    #[tokio::test]
    async fn runs_repeatedly_on_its_interval() {
        let runs = Arc::new(AtomicU64::new(0));
        let config = PeriodicConfig {
            interval: Duration::from_millis(5),
            initial_delay: Duration::ZERO,
            ..manual()
        };
        let handle = PeriodicJob::spawn("periodic-test-repeats", config, counting_job(&runs));
        eventually("three runs", || runs.load(Ordering::SeqCst) >= 3).await;
        assert!(periodic_metrics("periodic-test-repeats").last_success_unix_seconds > 0.0);
        handle.stop();
    }

    #[tokio::test]
    async fn wakes_run_the_job_and_a_burst_of_them_coalesces() {
        let runs = Arc::new(AtomicU64::new(0));
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let job = {
            let (runs, gate) = (Arc::clone(&runs), Arc::clone(&gate));
            move || {
                let (runs, gate) = (Arc::clone(&runs), Arc::clone(&gate));
                async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    gate.acquire().await.map_err(|e| e.to_string())?.forget();
                    Ok(())
                }
            }
        };
        let handle = PeriodicJob::spawn("periodic-test-wake", manual(), job);
        handle.wake();
        eventually("the first run", || runs.load(Ordering::SeqCst) == 1).await;
        // The first run is in progress: a burst of wakes asks for one more run, not five.
        for _ in 0..5 {
            handle.wake();
        }
        gate.add_permits(10);
        eventually("the second run", || runs.load(Ordering::SeqCst) == 2).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        handle.stop();
    }

    #[tokio::test]
    async fn backoff_grows_while_failing_and_resets_on_success() {
        let failing = Arc::new(AtomicBool::new(true));
        let job = {
            let failing = Arc::clone(&failing);
            move || {
                let fail = failing.load(Ordering::SeqCst);
                async move { if fail { Err("down".to_owned()) } else { Ok(()) } }
            }
        };
        let name = "periodic-test-backoff";
        let handle = PeriodicJob::spawn(name, manual(), job);
        let mut backoffs = Vec::new();
        for _ in 0..4 {
            assert_eq!(handle.trigger().await, Err(RunError::Failed("down".into())));
            backoffs.push(periodic_metrics(name).backoff_seconds);
        }
        assert_eq!(backoffs, [10.0, 20.0, 35.0, 35.0]);

        failing.store(false, Ordering::SeqCst);
        assert_eq!(handle.trigger().await, Ok(()));
        let metrics = periodic_metrics(name);
        assert_eq!(metrics.backoff_seconds, 0.0);
        assert_eq!((metrics.runs, metrics.failures), (5, 4));
        assert!(metrics.last_success_unix_seconds > 0.0);
        // Operators see when it last ran, when it runs next and why it last failed.
        assert!(metrics.last_failure_unix_seconds > 0.0);
        assert!(
            metrics
                .last_error
                .as_deref()
                .is_some_and(|e| e.contains("down"))
        );
        assert!(metrics.next_run_unix_seconds >= metrics.last_run_unix_seconds);
        handle.stop();
    }

    #[tokio::test]
    async fn failures_reschedule_after_the_backoff_not_the_interval() {
        let runs = Arc::new(AtomicU32::new(0));
        let failing = Arc::new(AtomicBool::new(true));
        let job = {
            let (runs, failing) = (Arc::clone(&runs), Arc::clone(&failing));
            move || {
                runs.fetch_add(1, Ordering::SeqCst);
                let fail = failing.load(Ordering::SeqCst);
                async move { if fail { Err("down".to_owned()) } else { Ok(()) } }
            }
        };
        // The interval is an hour: only the back-off can bring runs this fast.
        let config = PeriodicConfig {
            interval: Duration::from_secs(3600),
            initial_delay: Duration::ZERO,
            backoff_base: Duration::from_millis(2),
            backoff_max: Duration::from_millis(8),
        };
        let handle = PeriodicJob::spawn("periodic-test-reschedule", config, job);
        eventually("runs retried on back-off", || {
            runs.load(Ordering::SeqCst) >= 4
        })
        .await;

        // After a success the hour-long interval applies again.
        failing.store(false, Ordering::SeqCst);
        eventually("a successful run", || {
            periodic_metrics("periodic-test-reschedule").last_success_unix_seconds > 0.0
        })
        .await;
        let settled = runs.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            runs.load(Ordering::SeqCst),
            settled,
            "no run before the interval"
        );
        handle.stop();
    }

    #[tokio::test]
    async fn a_paced_job_runs_again_after_the_wait_it_returns_capped_by_the_interval() {
        let runs = Arc::new(AtomicU64::new(0));
        let job = {
            let runs = Arc::clone(&runs);
            move || {
                let run = runs.fetch_add(1, Ordering::SeqCst);
                // The first three runs ask for 5 ms; then a day, which the hour caps.
                let next = if run < 3 {
                    Duration::from_millis(5)
                } else {
                    Duration::from_secs(86_400)
                };
                futures_util::future::ready(Ok(Some(next)))
            }
        };
        let config = PeriodicConfig {
            initial_delay: Duration::ZERO,
            ..manual()
        };
        let handle = PeriodicJob::spawn_paced("periodic-test-paced", config, job);
        eventually("four runs", || runs.load(Ordering::SeqCst) >= 4).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(runs.load(Ordering::SeqCst), 4, "then the interval applies");
        // A wake still runs it at once.
        handle.wake();
        eventually("a woken run", || runs.load(Ordering::SeqCst) == 5).await;
        handle.stop();
    }

    #[tokio::test]
    async fn a_paced_wait_is_capped_by_the_interval() {
        let runs = Arc::new(AtomicU64::new(0));
        let job = {
            let runs = Arc::clone(&runs);
            move || {
                runs.fetch_add(1, Ordering::SeqCst);
                futures_util::future::ready(Ok(Some(Duration::from_secs(86_400))))
            }
        };
        let config = PeriodicConfig {
            interval: Duration::from_millis(5),
            initial_delay: Duration::ZERO,
            ..manual()
        };
        let handle = PeriodicJob::spawn_paced("periodic-test-paced-cap", config, job);
        eventually("runs every interval", || runs.load(Ordering::SeqCst) >= 3).await;
        handle.stop();
    }

    #[tokio::test]
    async fn a_panicking_run_is_survived() {
        let calls = Arc::new(AtomicU32::new(0));
        let job = {
            let calls = Arc::clone(&calls);
            move || {
                let call = calls.fetch_add(1, Ordering::SeqCst);
                async move {
                    assert!(call != 0, "first run blows up");
                    Ok(())
                }
            }
        };
        let name = "periodic-test-panic";
        let handle = PeriodicJob::spawn(name, manual(), job);
        let Err(RunError::Panicked(message)) = handle.trigger().await else {
            panic!("the first run should report its panic");
        };
        assert!(message.contains("first run blows up"), "{message}");
        assert_eq!(handle.trigger().await, Ok(()));
        let metrics = periodic_metrics(name);
        assert_eq!(
            (metrics.runs, metrics.failures, metrics.restarts),
            (2, 1, 1)
        );
        assert!(!handle.is_stopped());
        handle.stop();
    }

    #[tokio::test]
    async fn trigger_runs_now_and_stop_stops() {
        let runs = Arc::new(AtomicU64::new(0));
        let handle = PeriodicJob::spawn("periodic-test-stop", manual(), counting_job(&runs));
        assert_eq!(handle.trigger().await, Ok(()));
        assert_eq!(runs.load(Ordering::SeqCst), 1);

        handle.stop();
        eventually("the task ends", || handle.is_stopped()).await;
        assert_eq!(handle.trigger().await, Err(RunError::Stopped));
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn dropping_the_handle_does_not_stop_the_job() {
        let runs = Arc::new(AtomicU64::new(0));
        let config = PeriodicConfig {
            interval: Duration::from_millis(5),
            initial_delay: Duration::from_millis(20),
            ..manual()
        };
        let handle = PeriodicJob::spawn("periodic-test-drop", config, counting_job(&runs));
        let observer = handle.clone();
        drop(handle);
        eventually("runs go on", || runs.load(Ordering::SeqCst) >= 2).await;
        drop(observer);
        let seen = runs.load(Ordering::SeqCst);
        eventually("runs go on without any handle", || {
            runs.load(Ordering::SeqCst) >= seen + 2
        })
        .await;
    }
}
