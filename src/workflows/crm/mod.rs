//! CRM synchronisation (specification part 9, DESIGN §3–4): every sync runs in the background
//! (the outbox's [`CrmConsumer`] queues it, the CRM worker performs it), is written to the sync log, and a failed one is replayed
//! by the supervised retry scheduler ([`retry_failed`], started by `background`) with the user's state at that time.
//!
//! - [`ops`]: the operations a sync-log entry names, and how each is performed;
//! - [`consumer`]: domain events to operations, recorded in the CRM queue;
//! - [`worker`]: the supervised worker that performs queued operations;
//! - [`retry`]: the retry scheduler;
//! - [`inbound`]: inbound CRM webhooks;
//! - [`health`]: the health check;
//! - [`admin`]: expected against actual tags, diagnosis, forced tag sync.

pub mod admin;
mod consumer;
pub mod health;
pub mod inbound;
pub mod ops;
pub mod retry;
pub mod worker;

use std::sync::Arc;

use crate::clock::Clock;
use crate::config::Settings;
use crate::integrations::crm::{CrmClient, CrmSetup};
use crate::state::AppState;
use crate::store::Db;

pub use self::consumer::CrmConsumer;
pub use self::ops::Op;
pub use self::retry::retry_failed;

/// What every CRM workflow needs; cheap to clone. Built from the service state
/// ([`CrmService::of`]), or before it for the outbox's consumer ([`CrmService::new`], given
/// the worker's handle by `background::start_drains`).
#[derive(Clone)]
pub struct CrmService {
    pub(crate) db: Db,
    pub(crate) clock: Clock,
    pub(crate) settings: Arc<Settings>,
    setup: Arc<CrmSetup>,
    /// The worker that drains the CRM queue, while the CRM is on.
    worker: Option<actors::PeriodicHandle>,
}

impl CrmService {
    /// The CRM's workflows over the service state.
    pub fn of(state: &AppState) -> Self {
        Self {
            db: state.db.clone(),
            clock: state.clock.clone(),
            settings: state.settings.clone(),
            setup: state.crm.clone(),
            worker: state.crm_worker.clone(),
        }
    }

    /// Before the state exists, without the queue worker: `background::start_drains` starts
    /// it when the CRM is on.
    pub fn new(db: Db, clock: Clock, settings: Arc<Settings>, setup: Arc<CrmSetup>) -> Self {
        Self {
            db,
            clock,
            settings,
            setup,
            worker: None,
        }
    }

    /// The same, waking `worker` when a sync is queued.
    pub fn with_worker(self, worker: actors::PeriodicHandle) -> Self {
        Self {
            worker: Some(worker),
            ..self
        }
    }

    /// The queue worker's handle, for the state.
    pub fn worker(&self) -> Option<actors::PeriodicHandle> {
        self.worker.clone()
    }

    /// Asks the CRM worker for a pass now, without waiting for it.
    pub fn wake(&self) {
        if let Some(worker) = &self.worker {
            worker.wake();
        }
    }

    /// Runs a pass of the CRM worker now and waits for it (tests, shutdown).
    pub async fn flush(&self) {
        if let Some(worker) = &self.worker {
            let _ = worker.trigger().await;
        }
    }

    pub fn setup(&self) -> &CrmSetup {
        &self.setup
    }

    /// The client, or `None` when the CRM is off.
    pub fn client(&self) -> Option<&Arc<CrmClient>> {
        self.setup.client.as_ref()
    }

    /// The sandbox, while it is the CRM.
    pub fn sandbox(&self) -> Option<&crate::integrations::crm::CrmSandbox> {
        self.setup.sandbox.as_ref()
    }

    /// Appends the CRM series to the `/metrics` text.
    pub fn render_metrics(&self, out: &mut String) {
        self.setup.metrics.render(out);
    }
}
