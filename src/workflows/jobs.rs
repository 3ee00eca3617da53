//! Starts the service's periodic jobs. Each part names its jobs and schedules here in one
//! list, and every job goes through [`every`]: supervised, backing off while it fails,
//! reported on `/metrics`, found by name in `AppState::jobs` (operators and tests run one at
//! once with `state.jobs.trigger(name)`).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::state::AppState;
use crate::store::StoreResult;
use crate::workflows::crm::{self, CrmService};
use crate::workflows::error::FlowResult;
use crate::workflows::{escrow_jobs, money_audit, processor_events, reviews, timers, webhooks};

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(24 * 3600);

/// Starts every periodic job of the service (the outbox dispatcher and the CRM queue worker
/// start with the state: their consumers hold their handles).
pub fn start_all(state: &AppState) {
    // First a minute after start: a transfer a crash left half-way is finished soon after
    // the restart, not an hour later (never, were the service restarted more often).
    every(
        state,
        escrow_jobs::TRANSFER_RETRY,
        DAY,
        MINUTE,
        |st| async move { escrow_jobs::retry_deferred_transfers(&st).await },
    );
    // Both woken by each receipt; the minute is only a floor.
    every(
        state,
        processor_events::RECEIPTS,
        MINUTE,
        MINUTE,
        |st| async move { processor_events::store_receipts(&st).await },
    );
    every(
        state,
        processor_events::APPLY,
        MINUTE,
        MINUTE,
        |st| async move { processor_events::apply_queued(&st).await },
    );
    every(
        state,
        processor_events::SWEEP,
        MINUTE,
        MINUTE,
        |st| async move { processor_events::sweep(&st, chrono::Duration::seconds(30)).await },
    );
    every(
        state,
        escrow_jobs::AUTHORISATION_WATCH,
        HOUR,
        5 * MINUTE,
        |st| async move { escrow_jobs::watch_authorisations(&st).await },
    );
    paced(
        state,
        timers::TIMERS,
        timers::MAX_WAIT,
        Duration::from_secs(5),
        |st| async move { timers::fire_due(&st).await },
    );
    every(state, reviews::REVEAL_JOB, HOUR, MINUTE, |st| async move {
        reviews::announce_lapsed(&st).await
    });
    every(
        state,
        money_audit::MONEY_AUDIT,
        DAY,
        HOUR,
        |st| async move { money_audit::daily(&st).await },
    );
    paced(
        state,
        webhooks::JOB,
        MINUTE,
        Duration::from_secs(1),
        |st| async move { webhooks::deliver_due(&st).await },
    );
    if state.settings.crm_retry_enabled {
        let interval = MINUTE * state.settings.crm_retry_interval_minutes;
        every(
            state,
            crm::retry::JOB_NAME,
            interval,
            interval,
            |st| async move { crm::retry_failed(&CrmService::of(&st)).await },
        );
    }
}

/// Runs `job` every `interval`, the first time `first_after` from now.
pub fn every<F, Fut, T>(
    state: &AppState,
    name: &'static str,
    interval: Duration,
    first_after: Duration,
    job: F,
) where
    F: Fn(AppState) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = FlowResult<T>> + Send + 'static,
{
    let config = actors::PeriodicConfig {
        interval,
        initial_delay: first_after,
        ..actors::PeriodicConfig::default()
    };
    let st = state.clone();
    state.jobs.spawn(name, config, move || {
        let run = job(st.clone());
        async move { run.await.map(drop).map_err(|e| e.to_string()) }
    });
}

/// Runs `job` when it asks: each successful run answers the wait until it is needed again
/// (`None`, or anything longer than `max_wait`, means `max_wait`); a wake runs it at once.
pub fn paced<F, Fut>(
    state: &AppState,
    name: &'static str,
    max_wait: Duration,
    first_after: Duration,
    job: F,
) where
    F: Fn(AppState) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = FlowResult<Option<Duration>>> + Send + 'static,
{
    let config = actors::PeriodicConfig {
        interval: max_wait,
        initial_delay: first_after,
        ..actors::PeriodicConfig::default()
    };
    let st = state.clone();
    state.jobs.spawn_paced(name, config, move || {
        let run = job(st.clone());
        async move { run.await.map_err(|e| e.to_string()) }
    });
}

/// Runs `run_once` as the supervised job `name` in `jobs`, every `interval` and whenever its
/// handle is woken, again and again while it answers that more may be due; answers the
/// handle. For the queues their writers wake right after a commit (the outbox, the mail
/// queue), started with the state, before [`start_all`].
pub fn draining<F, Fut>(
    jobs: &actors::Jobs,
    name: &'static str,
    interval: Duration,
    run_once: F,
) -> actors::PeriodicHandle
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = StoreResult<bool>> + Send + 'static,
{
    let config = actors::PeriodicConfig {
        interval,
        initial_delay: Duration::ZERO,
        backoff_base: Duration::from_millis(200),
        backoff_max: Duration::from_secs(30),
    };
    let run_once = Arc::new(run_once);
    jobs.spawn(name, config, move || {
        let run_once = run_once.clone();
        async move {
            while run_once().await.map_err(|e| e.to_string())? {}
            Ok(())
        }
    })
}
