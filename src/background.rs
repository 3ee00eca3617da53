//! Every long-running loop of the service starts here, and nowhere else: this file is the list
//! of what runs in the background. Each loop is a named job in `state.jobs`, in one of the
//! shapes of `actors::loops` (every interval, paced by its deadlines, draining a queue,
//! listening on a connection): supervised (back-off, panics caught), reported on `/metrics`
//! and `GET /api/admin/system/actors`, and run at once by `state.jobs.trigger(name)`.
//!
//! Two steps, because the state holds the handles of the queues' drains: [`start_drains`]
//! before the state is built, [`start_all`] right after.

use std::convert::Infallible;
use std::time::Duration;

use actors::{Jobs, PeriodicHandle};

use crate::availability;
use crate::integrations::realtime;
use crate::state::AppState;
use crate::store::{Pool, session_cache};
use crate::workflows::crm::{self, CrmService};
use crate::workflows::emails::{self, MailSender};
use crate::workflows::outbox::{self, Dispatcher};
use crate::workflows::{
    backfills, deadlines, escrow_jobs, idempotency, invoices, money_audit, processor_events,
    retention, reviews, tallies, timers, webhooks,
};

const SECOND: Duration = Duration::from_secs(1);
const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(24 * 3600);

/// The handles of the queues' drains, for the state: their writers wake them right after a
/// commit.
pub struct Drains {
    /// The outbox dispatcher (`state.outbox`).
    pub outbox: PeriodicHandle,
    /// The mail sender (`state.mail_sender`).
    pub mail_sender: PeriodicHandle,
    /// The CRM's workflows, with the CRM worker's handle while the CRM is on
    /// (`state.crm_worker`).
    pub crm: CrmService,
}

/// Starts the queues' drains, before the state that holds their handles: the CRM worker and
/// the mail sender first, then the outbox dispatcher, whose consumers (built by `outbox` from
/// the first two) wake them.
pub fn start_drains(
    jobs: &Jobs,
    crm: CrmService,
    mail: MailSender,
    outbox: impl FnOnce(&CrmService, &PeriodicHandle) -> Dispatcher,
) -> Drains {
    let crm = if crm.client().is_some() {
        // Every 2 s as well as when woken: syncs queued by other instances or left by a stop.
        let worker = jobs.draining(
            crm::worker::JOB_NAME,
            crm.clone(),
            2 * SECOND,
            |crm| async move { crm::worker::drain(&crm).await.map(|_performed| false) },
        );
        crm.with_worker(worker)
    } else {
        crm
    };
    let mail_sender = jobs.draining(emails::JOB, mail, SECOND, |sender| async move {
        sender.run_once().await
    });
    let dispatcher = outbox(&crm, &mail_sender);
    let outbox = jobs.draining(outbox::JOB, dispatcher, SECOND, |dispatcher| async move {
        dispatcher.run_once().await.map(|pass| pass.more)
    });
    Drains {
        outbox,
        mail_sender,
        crm,
    }
}

/// Starts every other loop of the service, once the state is built.
pub fn start_all(state: &AppState) {
    let jobs = &state.jobs;
    // Whether PostgreSQL and Redis answer: while one is away, requests that need it are
    // refused at once, and the first probe that finds it answering lets them in again.
    if state.db.engine() == "postgres" {
        jobs.every(
            availability::POSTGRES_PROBE,
            state.db.clone(),
            availability::PROBE_INTERVAL,
            availability::PROBE_INTERVAL,
            |db| async move {
                db.probe().await;
                Ok::<_, Infallible>(())
            },
        );
    }
    if state.cache.availability().is_some() {
        jobs.every(
            availability::CACHE_PROBE,
            state.cache.clone(),
            availability::PROBE_INTERVAL,
            availability::PROBE_INTERVAL,
            // The answer is recorded by the probe itself; an outage is not the job's failure.
            |cache| async move {
                let _answered = cache.ping().await;
                Ok::<_, Infallible>(())
            },
        );
    }
    // Frames published by any instance, handed to this instance's sockets (subscribed by
    // `Realtime::start`, so nothing published since is missed).
    jobs.listening(
        realtime::SUBSCRIBER,
        state.realtime.clone(),
        SECOND,
        |realtime| async move { realtime.hand_out_frames().await },
    );
    // Sessions are kept in memory only where every instance shares their epoch (Redis) and
    // the database announces their changes (PostgreSQL).
    if let (Pool::Postgres(pool), "redis") = (state.db.pool(), state.cache.backend()) {
        jobs.listening(
            session_cache::LISTENER,
            (pool.clone(), state.sessions.clone()),
            SECOND,
            |(pool, sessions)| async move { session_cache::follow_changes(&pool, &sessions).await },
        );
    }
    // First a minute after start: a transfer a crash left half-way is finished soon after
    // the restart, not an hour later (never, were the service restarted more often).
    jobs.every(
        escrow_jobs::TRANSFER_RETRY,
        state.clone(),
        DAY,
        MINUTE,
        |st| async move { escrow_jobs::retry_deferred_transfers(&st).await },
    );
    // Both woken by each receipt; the minute is only a floor.
    jobs.every(
        processor_events::RECEIPTS,
        state.clone(),
        MINUTE,
        MINUTE,
        |st| async move { processor_events::store_receipts(&st).await },
    );
    jobs.every(
        processor_events::APPLY,
        state.clone(),
        MINUTE,
        MINUTE,
        |st| async move { processor_events::apply_queued(&st).await },
    );
    jobs.every(
        processor_events::SWEEP,
        state.clone(),
        MINUTE,
        MINUTE,
        |st| async move { processor_events::sweep(&st, chrono::Duration::seconds(30)).await },
    );
    jobs.every(
        escrow_jobs::AUTHORISATION_WATCH,
        state.clone(),
        HOUR,
        5 * MINUTE,
        |st| async move { escrow_jobs::watch_authorisations(&st).await },
    );
    jobs.paced(
        deadlines::TIMERS,
        state.clone(),
        timers::MAX_WAIT,
        5 * SECOND,
        |st| async move { timers::fire_due(&st).await },
    );
    jobs.every(
        reviews::REVEAL_JOB,
        state.clone(),
        HOUR,
        MINUTE,
        |st| async move { reviews::announce_lapsed(&st).await },
    );
    // Hourly, and soon after a start: a record changed behind the service's back is found
    // within the hour (`InvoiceChainBroken`).
    jobs.every(
        invoices::CHAIN_JOB,
        state.clone(),
        HOUR,
        MINUTE,
        |st| async move { invoices::verify_chains(&st).await },
    );
    jobs.every(
        money_audit::MONEY_AUDIT,
        state.clone(),
        DAY,
        HOUR,
        |st| async move { money_audit::daily(&st).await },
    );
    // A batch after another while a backfill has rows left; otherwise a minute, to learn of
    // one another instance finished.
    jobs.paced(
        backfills::JOB,
        state.clone(),
        MINUTE,
        SECOND,
        |st| async move { backfills::run(&st).await },
    );
    // Often, so that the figures' reads add few deltas; an idle run is one empty delete.
    jobs.every(
        tallies::FOLD_JOB,
        state.clone(),
        10 * SECOND,
        10 * SECOND,
        |st| async move { tallies::fold(&st).await },
    );
    jobs.every(
        idempotency::SWEEP_JOB,
        state.clone(),
        HOUR,
        5 * MINUTE,
        |st| async move { idempotency::sweep_expired(&st).await },
    );
    jobs.every(
        retention::NOTIFICATION_PRUNE_JOB,
        state.clone(),
        DAY,
        HOUR,
        |st| async move { retention::prune_read_notifications(&st).await },
    );
    jobs.every(
        retention::EVENT_PRUNE_JOB,
        state.clone(),
        DAY,
        HOUR,
        |st| async move { retention::prune_dispatched_events(&st).await },
    );
    jobs.every(
        retention::CRM_LOG_PRUNE_JOB,
        state.clone(),
        DAY,
        HOUR,
        |st| async move { retention::prune_crm_sync_log(&st).await },
    );
    jobs.every(
        webhooks::catch_up::PRUNE_JOB,
        state.clone(),
        DAY,
        HOUR,
        |st| async move { webhooks::catch_up::prune(&st).await },
    );
    jobs.paced(
        webhooks::JOB,
        state.clone(),
        MINUTE,
        SECOND,
        |st| async move { webhooks::deliver_due(&st).await },
    );
    if state.settings.crm_retry_enabled {
        let interval = MINUTE * state.settings.crm_retry_interval_minutes;
        jobs.every(
            crm::retry::JOB_NAME,
            state.clone(),
            interval,
            interval,
            |st| async move { crm::retry_failed(&CrmService::of(&st)).await },
        );
    }
}
