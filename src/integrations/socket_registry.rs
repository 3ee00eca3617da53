//! Who holds which WebSockets, so that no account, address or flood takes the service down
//! (issue #31): a cap per account (both socket kinds together), a cap per client address, and
//! a cap per process well below its file-descriptor limit.
//!
//! The account and address caps hold across instances: each is a lease set in the cache (with
//! Redis, a sorted set of live socket ids scored by their lease's expiry; without it, in this
//! process's memory), and a socket takes its place in both at once or in neither. A live
//! socket renews its lease at every ping and leaves on close; a socket whose instance died
//! without closing it lapses with its lease (three ping intervals). Times are the service's
//! clock, so tests move it instead of waiting. The process cap is a count of this process's
//! sockets: descriptors are the process's own.
//!
//! Past a cap the new upgrade is refused before it happens; no live socket is closed for it.
//! Closing the oldest instead would need a channel to kill a socket held by another instance,
//! and which socket goes would depend on timing; a refusal is decided in one atomic step and
//! the client that asked is the one that hears it.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use super::cache::{Cache, CacheError, LeaseAnswer};
use crate::clock::Clock;
use crate::domain::client_address::ClientKey;
use crate::domain::token::random_token;

/// The caps, from the settings (`WS_MAX_SOCKETS_PER_USER`, `WS_MAX_SOCKETS_PER_ADDRESS`,
/// `WS_MAX_SOCKETS` or its default derived from the open-files limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketCaps {
    pub per_account: u32,
    pub per_address: u32,
    pub process: u32,
}

/// Which cap refused an upgrade.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    Account,
    Address,
    Process,
}

impl Refusal {
    pub const ALL: [Refusal; 3] = [Refusal::Account, Refusal::Address, Refusal::Process];

    /// Its label on `/metrics`.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::Account => "account",
            Refusal::Address => "address",
            Refusal::Process => "process",
        }
    }
}

/// A client frame refused or dropped by its budget, as `/metrics` counts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameRefusal {
    /// A chat message past the account's budget (answered with an `error` frame).
    ChatBudget,
    /// A typing frame past the socket's rate (dropped).
    Typing,
}

impl FrameRefusal {
    pub const ALL: [FrameRefusal; 2] = [FrameRefusal::ChatBudget, FrameRefusal::Typing];

    pub fn label(self) -> &'static str {
        match self {
            FrameRefusal::ChatBudget => "chat_budget",
            FrameRefusal::Typing => "typing",
        }
    }
}

pub struct SocketRegistry {
    cache: Arc<dyn Cache>,
    clock: Clock,
    caps: SocketCaps,
    lease: Duration,
    live: AtomicU32,
    refused: [AtomicU64; 3],
    frames_refused: [AtomicU64; 2],
    closed_for_refusals: AtomicU64,
}

fn account_set(user_id: i64) -> String {
    format!("ws:account:{user_id}")
}

/// One set per client (an IPv4 address or an IPv6 /64), as every per-address limit counts.
fn address_set(address: IpAddr) -> String {
    format!("ws:address:{}", ClientKey::of(address))
}

impl SocketRegistry {
    /// `lease`: how long a registration lasts unrenewed (`domain::realtime_limits::socket_lease`).
    pub fn new(
        cache: Arc<dyn Cache>,
        clock: Clock,
        caps: SocketCaps,
        lease: Duration,
    ) -> Arc<Self> {
        Arc::new(Self {
            cache,
            clock,
            caps,
            lease,
            live: AtomicU32::new(0),
            refused: Default::default(),
            frames_refused: Default::default(),
            closed_for_refusals: AtomicU64::new(0),
        })
    }

    pub fn caps(&self) -> SocketCaps {
        self.caps
    }

    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// A place among this process's sockets, or [`Refusal::Process`] when all are taken.
    /// Taken first, before any other work on an upgrade.
    pub fn process_slot(self: &Arc<Self>) -> Result<ProcessSlot, Refusal> {
        let taken = self
            .live
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |live| {
                (live < self.caps.process).then_some(live + 1)
            });
        match taken {
            Ok(_) => Ok(ProcessSlot {
                registry: Arc::clone(self),
            }),
            Err(_) => Err(self.count_refusal(Refusal::Process)),
        }
    }

    /// Registers a socket of `user_id` from `address` in the account's and the address's
    /// sets, if both have room (all on every instance); the admission holds the process slot
    /// too, and gives all back when released or dropped.
    pub async fn admit(
        self: &Arc<Self>,
        slot: ProcessSlot,
        user_id: i64,
        address: Option<IpAddr>,
    ) -> Result<Result<Admission, Refusal>, CacheError> {
        let mut sets = vec![(account_set(user_id), u64::from(self.caps.per_account))];
        if let Some(address) = address {
            sets.push((address_set(address), u64::from(self.caps.per_address)));
        }
        let member = random_token(16);
        let now = self.now_ms();
        let until = now.saturating_add(self.lease_ms());
        let keys: Vec<(&str, u64)> = sets.iter().map(|(s, cap)| (s.as_str(), *cap)).collect();
        let answer = self
            .cache
            .lease_acquire(&keys, &member, now, until, self.lease)
            .await?;
        Ok(match answer {
            LeaseAnswer::Taken => Ok(Admission {
                registry: Arc::clone(self),
                sets: sets.into_iter().map(|(s, _)| s).collect(),
                member,
                released: false,
                _slot: slot,
            }),
            LeaseAnswer::Full(0) => Err(self.count_refusal(Refusal::Account)),
            LeaseAnswer::Full(_) => Err(self.count_refusal(Refusal::Address)),
        })
    }

    /// Live sockets of `user_id`, on every instance.
    pub async fn live_for_account(&self, user_id: i64) -> Result<u64, CacheError> {
        self.cache
            .lease_count(&account_set(user_id), self.now_ms())
            .await
    }

    /// Sockets open in this process.
    pub fn process_live(&self) -> u32 {
        self.live.load(Ordering::Acquire)
    }

    /// Upgrades refused by `reason` on this instance since it started.
    pub fn refused(&self, reason: Refusal) -> u64 {
        self.refused[reason as usize].load(Ordering::Relaxed)
    }

    /// Counts a frame refused or dropped by its budget.
    pub fn frame_refused(&self, reason: FrameRefusal) {
        self.frames_refused[reason as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Frames refused by `reason` on this instance since it started.
    pub fn frames_refused(&self, reason: FrameRefusal) -> u64 {
        self.frames_refused[reason as usize].load(Ordering::Relaxed)
    }

    /// Counts a socket closed (1008) for sending refused messages on and on.
    pub fn closed_for_refusals(&self) {
        self.closed_for_refusals.fetch_add(1, Ordering::Relaxed);
    }

    /// Sockets closed for refused messages on this instance since it started.
    pub fn sockets_closed_for_refusals(&self) -> u64 {
        self.closed_for_refusals.load(Ordering::Relaxed)
    }

    fn count_refusal(&self, reason: Refusal) -> Refusal {
        self.refused[reason as usize].fetch_add(1, Ordering::Relaxed);
        reason
    }

    fn now_ms(&self) -> i64 {
        self.clock.now().timestamp_millis()
    }

    fn lease_ms(&self) -> i64 {
        i64::try_from(self.lease.as_millis()).unwrap_or(i64::MAX)
    }
}

/// A place among this process's sockets, given back when dropped.
pub struct ProcessSlot {
    registry: Arc<SocketRegistry>,
}

impl Drop for ProcessSlot {
    fn drop(&mut self) {
        self.registry.live.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A socket's registration: renewed at each ping, released on close. Dropped without
/// [`Admission::release`] (a panicking session), it releases itself in a task of its own.
pub struct Admission {
    registry: Arc<SocketRegistry>,
    sets: Vec<String>,
    member: String,
    released: bool,
    _slot: ProcessSlot,
}

impl Admission {
    /// Moves the lease on by its length from now; a failure is logged (the socket lives on,
    /// and the next ping tries again).
    pub async fn renew(&self) {
        let registry = &self.registry;
        let until = registry.now_ms().saturating_add(registry.lease_ms());
        let sets: Vec<&str> = self.sets.iter().map(String::as_str).collect();
        if let Err(e) = registry
            .cache
            .lease_renew(&sets, &self.member, until, registry.lease)
            .await
        {
            tracing::warn!(error = %e, "socket lease not renewed");
        }
    }

    /// Leaves the account's and the address's sets (and the process's count, as this drops).
    pub async fn release(mut self) {
        self.released = true;
        release(&self.registry.cache, &self.sets, &self.member).await;
    }
}

async fn release(cache: &Arc<dyn Cache>, sets: &[String], member: &str) {
    let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
    if let Err(e) = cache.lease_release(&sets, member).await {
        // It lapses with its lease.
        tracing::warn!(error = %e, "socket lease not released");
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let (cache, sets, member) = (
            Arc::clone(&self.registry.cache),
            std::mem::take(&mut self.sets),
            std::mem::take(&mut self.member),
        );
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { release(&cache, &sets, &member).await });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::integrations::cache::MemoryCache;

    fn registry(caps: SocketCaps) -> (Arc<SocketRegistry>, Clock) {
        let clock = Clock::system();
        let registry = SocketRegistry::new(
            Arc::new(MemoryCache::new()),
            clock.clone(),
            caps,
            Duration::from_secs(30),
        );
        (registry, clock)
    }

    /// A socket of `user` from `address`: a process slot, then the account's and address's.
    async fn admit(
        registry: &Arc<SocketRegistry>,
        user: i64,
        address: IpAddr,
    ) -> Result<Admission, Refusal> {
        let slot = registry.process_slot()?;
        registry
            .admit(slot, user, Some(address))
            .await
            .expect("cache")
    }

    #[tokio::test]
    async fn each_cap_refuses_past_it_and_a_release_makes_room() {
        let (registry, clock) = registry(SocketCaps {
            per_account: 2,
            per_address: 3,
            process: 4,
        });
        let here: IpAddr = "203.0.113.7".parse().unwrap();
        let admit = |user, address| admit(&registry, user, address);
        let first = admit(1, here).await.expect("first");
        let _second = admit(1, here).await.expect("second");
        assert_eq!(admit(1, here).await.err(), Some(Refusal::Account));
        let _third = admit(2, here).await.expect("another account");
        assert_eq!(admit(3, here).await.err(), Some(Refusal::Address));
        let elsewhere: IpAddr = "198.51.100.1".parse().unwrap();
        let _fourth = admit(3, elsewhere).await.expect("another address");
        assert_eq!(registry.process_live(), 4);
        assert_eq!(admit(4, elsewhere).await.err(), Some(Refusal::Process));
        assert_eq!(registry.process_live(), 4, "refusals give their slot back");
        assert_eq!(
            Refusal::ALL.map(|r| registry.refused(r)),
            [1, 1, 1],
            "account, address, process"
        );

        first.release().await;
        assert_eq!(registry.process_live(), 3);
        assert_eq!(registry.live_for_account(1).await.unwrap(), 1);
        admit(1, here).await.expect("room again").release().await;

        // Vanished without a release (a dead instance's socket): lapses with its lease.
        std::mem::forget(admit(5, elsewhere).await.expect("admitted"));
        assert_eq!(registry.live_for_account(5).await.unwrap(), 1);
        clock.advance(chrono::Duration::seconds(31));
        assert_eq!(registry.live_for_account(5).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn an_ipv6_network_is_one_address() {
        let (registry, _) = registry(SocketCaps {
            per_account: 10,
            per_address: 2,
            process: 10,
        });
        let admit = |user, address: &str| admit(&registry, user, address.parse().unwrap());
        let _first = admit(1, "2001:db8:1:2::1").await.expect("first");
        let _second = admit(2, "2001:db8:1:2:ffff::9").await.expect("second");
        assert_eq!(
            admit(3, "2001:db8:1:2:1234:5678:9abc:def0").await.err(),
            Some(Refusal::Address)
        );
        let _neighbour = admit(3, "2001:db8:1:3::1").await.expect("another /64");
    }

    #[tokio::test]
    async fn a_dropped_admission_releases_itself() {
        let (registry, _) = registry(SocketCaps {
            per_account: 1,
            per_address: 10,
            process: 10,
        });
        let slot = registry.process_slot().unwrap();
        let admission = registry.admit(slot, 7, None).await.unwrap().unwrap();
        drop(admission);
        for _ in 0..100 {
            if registry.live_for_account(7).await.unwrap() == 0 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(registry.live_for_account(7).await.unwrap(), 0);
        assert_eq!(registry.process_live(), 0);
    }
}
