//! Rooms of members for real-time fan-out (e.g. one room per conversation,
//! one per person for notification sockets).
//!
//! A member is one receiving session, identified by a [`MemberId`] and
//! reached through a bounded `tokio::sync::mpsc` channel. Broadcasting never
//! waits: a member whose channel is full is a slow consumer and is dropped
//! from every room (once the hub's senders are gone its receiver sees the
//! channel close after draining it, so the session can end and its client
//! reconnect and resynchronise); a member whose receiver is gone is pruned
//! likewise. Empty rooms are removed.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::mpsc::Sender;
use tokio::sync::mpsc::error::TrySendError;

use crate::metrics::{self, Gauge, HubCounters};

/// Process-unique identity of a member (one receiving session).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MemberId(u64);

impl MemberId {
    /// A fresh id, never returned before in this process.
    pub fn next() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Self(NEXT.fetch_add(1, Ordering::Relaxed))
    }

    /// The number behind the id, e.g. for logs.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for MemberId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Rooms and their members. Cheap to clone; clones share the rooms.
pub struct Hub<M> {
    inner: Arc<HubInner<M>>,
}

impl<M> Clone for Hub<M> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<M> fmt::Debug for Hub<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hub")
            .field("kind", &self.inner.kind)
            .finish()
    }
}

struct HubInner<M> {
    kind: &'static str,
    rooms: Mutex<Rooms<M>>,
    counters: Arc<HubCounters>,
}

impl<M: Clone + Send + 'static> Hub<M> {
    /// Creates an empty hub whose metrics are reported under `kind`.
    pub fn new(kind: &'static str) -> Self {
        Self {
            inner: Arc::new(HubInner {
                kind,
                rooms: Mutex::new(Rooms::default()),
                counters: metrics::hub_counters(kind),
            }),
        }
    }

    /// Adds `member` to `room` (creating it), reached through `sender`.
    /// Joining again replaces the member's sender.
    pub fn join(&self, room: impl Into<String>, member: MemberId, sender: Sender<M>) {
        self.with_rooms(|rooms| rooms.join(room.into(), member, sender));
    }

    /// Removes `member` from `room`; removes the room if it becomes empty.
    pub fn leave(&self, room: &str, member: MemberId) {
        self.with_rooms(|rooms| rooms.leave(room, member));
    }

    /// Removes `member` from every room (e.g. when its session ends).
    pub fn leave_all(&self, member: MemberId) {
        self.with_rooms(|rooms| rooms.leave_all(member));
    }

    /// Sends a clone of `msg` to every member of `room` without waiting and
    /// returns how many got it. Members whose channel is closed or full are
    /// removed from all rooms (full ones are counted as dropped slow members).
    pub fn broadcast(&self, room: &str, msg: M) -> usize {
        let (delivered, slow) = self.with_rooms(|rooms| rooms.broadcast(room, &msg));
        let counters = &self.inner.counters;
        counters.broadcasts.fetch_add(1, Ordering::Relaxed);
        if slow > 0 {
            counters
                .dropped_slow_members
                .fetch_add(slow as u64, Ordering::Relaxed);
            tracing::warn!(kind = self.inner.kind, room, slow, "dropped slow members");
        }
        delivered
    }

    /// Number of members of `room` (0 if there is no such room).
    pub fn members(&self, room: &str) -> usize {
        self.lock().rooms.get(room).map_or(0, HashMap::len)
    }

    /// Number of rooms with at least one member.
    pub fn rooms(&self) -> usize {
        self.lock().rooms.len()
    }

    /// Applies `change` under the lock and moves the shared gauges by what
    /// it changed (other hubs of the same kind own the rest of the gauge).
    fn with_rooms<R>(&self, change: impl FnOnce(&mut Rooms<M>) -> R) -> R {
        let mut rooms = self.lock();
        let before = rooms.sizes();
        let result = change(&mut rooms);
        let after = rooms.sizes();
        drop(rooms);
        let counters = &self.inner.counters;
        move_gauge(&counters.rooms, before.0, after.0);
        move_gauge(&counters.members, before.1, after.1);
        result
    }
}

impl<M> Hub<M> {
    fn lock(&self) -> MutexGuard<'_, Rooms<M>> {
        self.inner.lock()
    }
}

impl<M> HubInner<M> {
    fn lock(&self) -> MutexGuard<'_, Rooms<M>> {
        // Only map operations happen under this lock; the maps stay usable.
        self.rooms.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<M> Drop for HubInner<M> {
    fn drop(&mut self) {
        let (rooms, members) = self.lock().sizes();
        self.counters.rooms.sub(rooms as u64);
        self.counters.members.sub(members as u64);
    }
}

fn move_gauge(gauge: &Gauge, before: usize, after: usize) {
    if after > before {
        gauge.add((after - before) as u64);
    } else {
        gauge.sub((before - after) as u64);
    }
}

/// The rooms of a hub, kept consistent with a reverse index from member to
/// rooms so that `leave_all` does not scan every room.
struct Rooms<M> {
    rooms: HashMap<String, HashMap<MemberId, Sender<M>>>,
    memberships: HashMap<MemberId, HashSet<String>>,
    membership_count: usize,
}

impl<M> Default for Rooms<M> {
    fn default() -> Self {
        Self {
            rooms: HashMap::new(),
            memberships: HashMap::new(),
            membership_count: 0,
        }
    }
}

impl<M> Rooms<M> {
    /// (rooms, memberships)
    fn sizes(&self) -> (usize, usize) {
        (self.rooms.len(), self.membership_count)
    }
}

impl<M: Clone> Rooms<M> {
    fn join(&mut self, room: String, member: MemberId, sender: Sender<M>) {
        let members = self.rooms.entry(room.clone()).or_default();
        if members.insert(member, sender).is_none() {
            self.membership_count += 1;
        }
        self.memberships.entry(member).or_default().insert(room);
    }

    fn leave(&mut self, room: &str, member: MemberId) {
        let Some(members) = self.rooms.get_mut(room) else {
            return;
        };
        if members.remove(&member).is_some() {
            self.membership_count -= 1;
        }
        if members.is_empty() {
            self.rooms.remove(room);
        }
        if let Some(joined) = self.memberships.get_mut(&member) {
            joined.remove(room);
            if joined.is_empty() {
                self.memberships.remove(&member);
            }
        }
    }

    fn leave_all(&mut self, member: MemberId) {
        let Some(joined) = self.memberships.remove(&member) else {
            return;
        };
        for room in joined {
            if let Some(members) = self.rooms.get_mut(&room) {
                if members.remove(&member).is_some() {
                    self.membership_count -= 1;
                }
                if members.is_empty() {
                    self.rooms.remove(&room);
                }
            }
        }
    }

    /// Returns (delivered, dropped because full).
    fn broadcast(&mut self, room: &str, msg: &M) -> (usize, usize) {
        let Some(members) = self.rooms.get(room) else {
            return (0, 0);
        };
        let mut delivered = 0;
        let mut slow = 0;
        let mut gone = Vec::new();
        for (&member, sender) in members {
            match sender.try_send(msg.clone()) {
                Ok(()) => delivered += 1,
                Err(TrySendError::Full(_)) => {
                    slow += 1;
                    gone.push(member);
                }
                Err(TrySendError::Closed(_)) => gone.push(member),
            }
        }
        for member in gone {
            self.leave_all(member);
        }
        (delivered, slow)
    }
}

#[cfg(test)]
mod tests {
    use tokio::sync::mpsc;

    use super::*;
    use crate::metrics::tests::find;
    use crate::metrics::{CATEGORY_HUB, HubValues, KindValues};

    fn hub_metrics(kind: &str) -> HubValues {
        match find(CATEGORY_HUB, kind).map(|m| m.values) {
            Some(KindValues::Hub(values)) => values,
            other => panic!("no hub metrics for {kind}: {other:?}"),
        }
    }

    #[tokio::test]
    async fn join_broadcast_and_leave() {
        let hub = Hub::new("hub-test-basic");
        let (alice_tx, mut alice_rx) = mpsc::channel(8);
        let (bob_tx, mut bob_rx) = mpsc::channel(8);
        let (alice, bob) = (MemberId::next(), MemberId::next());
        assert_ne!(alice, bob);

        hub.join("lobby", alice, alice_tx.clone());
        hub.join("lobby", bob, bob_tx);
        hub.join("side", alice, alice_tx);
        assert_eq!(
            (hub.rooms(), hub.members("lobby"), hub.members("side")),
            (2, 2, 1)
        );

        assert_eq!(hub.broadcast("lobby", "hello"), 2);
        assert_eq!(alice_rx.recv().await, Some("hello"));
        assert_eq!(bob_rx.recv().await, Some("hello"));
        assert_eq!(hub.broadcast("nowhere", "lost"), 0);

        hub.leave("lobby", bob);
        assert_eq!(hub.broadcast("lobby", "again"), 1);
        assert_eq!(alice_rx.recv().await, Some("again"));
        assert!(bob_rx.try_recv().is_err(), "bob left and must get nothing");

        hub.leave_all(alice);
        assert_eq!(hub.rooms(), 0, "empty rooms are removed");
        assert_eq!(hub.members("lobby"), 0);

        let metrics = hub_metrics("hub-test-basic");
        assert_eq!(
            (metrics.rooms, metrics.members, metrics.broadcasts),
            (0, 0, 3)
        );
    }

    #[tokio::test]
    async fn members_with_closed_channels_are_pruned() {
        let hub = Hub::new("hub-test-closed");
        let (gone_tx, gone_rx) = mpsc::channel(8);
        let (stays_tx, mut stays_rx) = mpsc::channel(8);
        let (gone, stays) = (MemberId::next(), MemberId::next());
        hub.join("room", gone, gone_tx.clone());
        hub.join("other", gone, gone_tx);
        hub.join("room", stays, stays_tx);
        drop(gone_rx);

        assert_eq!(hub.broadcast("room", 1), 1);
        assert_eq!(stays_rx.recv().await, Some(1));
        assert_eq!(hub.members("room"), 1);
        assert_eq!(hub.rooms(), 1, "the closed member's other room is gone too");
        assert_eq!(hub_metrics("hub-test-closed").dropped_slow_members, 0);
    }

    #[tokio::test]
    async fn a_full_member_is_dropped_without_blocking_the_broadcast() {
        let hub = Hub::new("hub-test-full");
        let (slow_tx, mut slow_rx) = mpsc::channel(1);
        let (fast_tx, mut fast_rx) = mpsc::channel(8);
        let (slow, fast) = (MemberId::next(), MemberId::next());
        hub.join("room", slow, slow_tx);
        hub.join("room", fast, fast_tx);

        assert_eq!(hub.broadcast("room", 1), 2);
        // The slow member has not read; its channel (capacity 1) is full.
        assert_eq!(hub.broadcast("room", 2), 1);
        assert_eq!(hub.members("room"), 1);
        assert_eq!(hub_metrics("hub-test-full").dropped_slow_members, 1);

        assert_eq!(fast_rx.recv().await, Some(1));
        assert_eq!(fast_rx.recv().await, Some(2));
        // The slow member keeps what it got, then sees its channel closed.
        assert_eq!(slow_rx.recv().await, Some(1));
        assert_eq!(slow_rx.recv().await, None);
    }
}
