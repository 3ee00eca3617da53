//! The set of periodic jobs a service runs: one place that starts them, finds one by name
//! (operators and tests run a job at once) and stops them all on shutdown.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use crate::periodic::{PeriodicConfig, PeriodicHandle, PeriodicJob, RunError};

/// Named supervised periodic jobs. Cheap to clone: clones share the set.
#[derive(Clone, Default)]
pub struct Jobs {
    running: Arc<Mutex<BTreeMap<&'static str, PeriodicHandle>>>,
}

impl Jobs {
    /// Spawns `job` as a supervised [`PeriodicJob`] under `name` and keeps its handle. A job
    /// already running under that name is stopped first, so a name always means one job.
    pub fn spawn<F, Fut>(
        &self,
        name: &'static str,
        config: PeriodicConfig,
        job: F,
    ) -> PeriodicHandle
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), String>> + Send + 'static,
    {
        let handle = PeriodicJob::spawn(name, config, job);
        if let Some(previous) = self.lock().insert(name, handle.clone()) {
            previous.stop();
        }
        handle
    }

    /// Like [`spawn`](Self::spawn) for a job whose successful run returns its next wait
    /// ([`PeriodicJob::spawn_paced`]).
    pub fn spawn_paced<F, Fut>(
        &self,
        name: &'static str,
        config: PeriodicConfig,
        job: F,
    ) -> PeriodicHandle
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Option<std::time::Duration>, String>> + Send + 'static,
    {
        let handle = PeriodicJob::spawn_paced(name, config, job);
        if let Some(previous) = self.lock().insert(name, handle.clone()) {
            previous.stop();
        }
        handle
    }

    /// Asks the job named `name` for a run without waiting (nothing when no such job runs).
    pub fn wake(&self, name: &str) {
        if let Some(handle) = self.get(name) {
            handle.wake();
        }
    }

    /// The handle of the job spawned under `name`.
    pub fn get(&self, name: &str) -> Option<PeriodicHandle> {
        self.lock().get(name).cloned()
    }

    /// Runs the job named `name` now and waits for that run; [`RunError::Stopped`] when no
    /// such job runs.
    pub async fn trigger(&self, name: &str) -> Result<(), RunError> {
        match self.get(name) {
            Some(handle) => handle.trigger().await,
            None => Err(RunError::Stopped),
        }
    }

    /// The names of the jobs, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.lock().keys().copied().collect()
    }

    /// Stops every job (runs in progress finish first).
    pub fn stop_all(&self) {
        for handle in self.lock().values() {
            handle.stop();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<&'static str, PeriodicHandle>> {
        // The map holds handles only; a panic elsewhere cannot leave it half-written.
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl std::fmt::Debug for Jobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.names()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    fn hourly() -> PeriodicConfig {
        PeriodicConfig {
            interval: Duration::from_secs(3600),
            initial_delay: Duration::from_secs(3600),
            ..PeriodicConfig::default()
        }
    }

    #[tokio::test]
    async fn jobs_are_found_by_name_triggered_and_stopped() {
        let jobs = Jobs::default();
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = runs.clone();
        jobs.spawn("jobs_test_count", hourly(), move || {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
        });
        assert_eq!(jobs.names(), vec!["jobs_test_count"]);
        jobs.trigger("jobs_test_count").await.unwrap();
        jobs.clone().trigger("jobs_test_count").await.unwrap();
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        assert_eq!(jobs.trigger("missing").await, Err(RunError::Stopped));

        jobs.stop_all();
        let handle = jobs.get("jobs_test_count").unwrap();
        for _ in 0..100 {
            if handle.is_stopped() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(handle.is_stopped());
    }

    #[tokio::test]
    async fn a_second_job_under_one_name_replaces_the_first() {
        let jobs = Jobs::default();
        let first = jobs.spawn("jobs_test_replace", hourly(), || async { Ok(()) });
        jobs.spawn("jobs_test_replace", hourly(), || async {
            Err("second".to_owned())
        });
        assert_eq!(
            jobs.trigger("jobs_test_replace").await,
            Err(RunError::Failed("second".to_owned()))
        );
        for _ in 0..100 {
            if first.is_stopped() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(first.is_stopped());
    }
}
