//! Outgoing user webhooks (issue 15): the outbox consumer that turns each of the 18 event
//! types (DESIGN §6's 16, and the invoices' two) into one delivery per concerned user with a webhook address (sent when
//! it is enabled, kept for the catch-up of [`catch_up`] either way), and the
//! supervised dispatcher job that sends them, signs them, retries them on the schedule of
//! [`crate::domain::webhook_rules::retry_delay`] and disables an endpoint failing for three days.
//!
//! Nothing here runs on a request thread except the explicit test delivery: the consumer only
//! writes rows, the dispatcher job ([`JOB`]) sends them in tasks of its own, at most
//! [`crate::integrations::webhook_http::PER_HOST`] at once per destination host.

pub mod catch_up;
mod consumer;
mod dispatch;
mod metrics;

pub use consumer::{EventViews, Recipient, WebhookConsumer, message_id};
pub use dispatch::{JOB, TestOutcome, deliver_due, redeliver, send_test, signed_headers};
pub use metrics::{WebhookMetrics, metrics};

/// The 18 event types a user's webhook receives: DESIGN §6's 16, and `invoice.issued` and
/// `credit_note.issued` (issue #65), sent to the document's recipient and to the expert it
/// was issued in the name of.
pub const EVENT_TYPES: [&str; 18] = [
    "project.created",
    "project.published",
    "application.received",
    "application.accepted",
    "application.rejected",
    "application.revision_requested",
    "milestone.payment_required",
    "payment.held",
    "payment.released",
    "payment.refunded",
    "payment.failed",
    "delivery.submitted",
    "delivery.reviewed",
    "dispute.created",
    "dispute.resolved",
    "review.received",
    "invoice.issued",
    "credit_note.issued",
];

/// The type of the delivery `POST /api/notifications/webhook/test` sends.
pub const TEST_EVENT: &str = "webhook.test";
