//! The processor's webhook events (DESIGN §4): the signature is checked first, the event is
//! stored by its id and answered, and only then applied, once, in its payment's actor.
//!
//! Receipts hand their events to the receipts' writer (a job they wake), which stores those
//! waiting in one statement and one commit, answers each receipt after that commit, and
//! queues the new events for the applier (another job it wakes), which takes what waits in
//! groups: the events of distinct payments are applied in all their actors at once and in
//! one transaction, so a burst costs one commit and a few statements per event rather than a
//! transaction each. A payment's events keep their order: a second event of a
//! payment starts the next group. The sweep applies what a crash or a failure left behind.
//!
//! Applying writes the effects and marks the event processed in one transaction, so an event
//! takes effect exactly once however often it is delivered or swept. Every effect is a
//! conditional update from the states it may leave: an event older than the payment's state
//! (out of order) changes nothing.
//!
//! One stage a file: [`receive`] checks, stores and queues; [`apply`] applies, in groups or
//! by the sweep, and sends each event to its kind's effects, which live beside the workflow
//! they change: `escrow::processor_effects` (payment intents, charges, transfers),
//! `chargebacks` (the processor's disputes) and `connect::account_events` (connected
//! accounts, payouts).

mod apply;
mod receive;

pub use apply::{APPLY, LANES, SWEEP, apply_queued, sweep};
pub use receive::{RECEIPTS, ReceiveError, Refused, receive, store_receipts};
