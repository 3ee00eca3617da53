//! Actor machinery, independent of any business domain:
//!
//! * [`registry`]: a keyed registry of actors that run the jobs sent for one
//!   key strictly one at a time, in order, while different keys run
//!   concurrently; idle actors stop, panicking jobs restart their actor.
//! * [`hub`]: rooms of members for real-time fan-out over bounded channels.
//! * [`periodic`]: a supervised periodic job with exponential back-off.
//! * [`jobs`]: the named set of periodic jobs a service runs.
//! * [`loops`]: the shapes of loop a service runs as jobs (every interval, paced by
//!   deadlines, draining a queue, listening on a connection), over a context of its own.
//! * [`metrics`]: process-wide numbers about all of the above.

#![warn(missing_docs)]

pub mod hub;
pub mod jobs;
pub mod loops;
pub mod metrics;
pub mod periodic;
pub mod registry;
#[cfg(test)]
mod test_support;

pub use hub::{Hub, MemberId};
pub use jobs::Jobs;
pub use metrics::{KindMetrics, KindValues, snapshot};
pub use periodic::{PeriodicConfig, PeriodicHandle, PeriodicJob, RunError};
pub use registry::{ActorError, ActorKey, Registry, RegistryConfig};

/// The text of a caught panic, for logs.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "non-text panic payload".to_owned()
    }
}
