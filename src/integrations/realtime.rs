//! Real-time fan-out to WebSocket sessions: one room per user (`user:{id}`, notification
//! sockets) and one per project chat (`chat:{id}`).
//!
//! Every frame goes through the cache's pub/sub channel (Redis with `REDIS_URL`, in process
//! otherwise), and each instance's subscriber hands what it hears to its own rooms. So a
//! member connected to any instance receives a frame once, and there is one path for local
//! and remote members alike. The rooms live in an `actors::Hub`: bounded queues, slow
//! consumers dropped (their socket closes and the client reconnects), metrics on `/metrics`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use actors::{Hub, MemberId};
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use tokio::sync::mpsc;

use super::cache::{Cache, CacheError};

/// The pub/sub channel (under `CACHE_PREFIX`, as every cache key).
const CHANNEL: &str = "realtime";
/// Frames a session may fall behind before it is dropped as a slow consumer.
pub const SESSION_QUEUE: usize = 256;

/// A frame as sent: JSON text shared by every member that receives it.
pub type Frame = Arc<str>;

/// The hub's metrics kind (rooms, members, slow members dropped).
pub const HUB_KIND: &str = "realtime_rooms";

/// The name of the subscriber's job ([`Realtime::hand_out_frames`], started by `background`).
pub const SUBSCRIBER: &str = "realtime_subscriber";

/// What a WebSocket serves, as `/metrics` labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketKind {
    Notifications,
    Chat,
}

impl SocketKind {
    pub const ALL: [SocketKind; 2] = [SocketKind::Notifications, SocketKind::Chat];

    pub fn label(self) -> &'static str {
        match self {
            SocketKind::Notifications => "notifications",
            SocketKind::Chat => "chat",
        }
    }
}

/// Counts one live socket until dropped, so a session that ends any way (panic included)
/// is counted out.
pub struct SocketGuard {
    realtime: Arc<Realtime>,
    kind: SocketKind,
}

impl Drop for SocketGuard {
    fn drop(&mut self) {
        self.realtime.sockets[self.kind as usize].fetch_sub(1, Ordering::Relaxed);
    }
}

pub fn user_room(user_id: i64) -> String {
    format!("user:{user_id}")
}

pub fn chat_room(project_id: i64) -> String {
    format!("chat:{project_id}")
}

pub struct Realtime {
    cache: Arc<dyn Cache>,
    hub: Hub<Frame>,
    fanned_out: AtomicU64,
    sockets: [AtomicU64; 2],
    /// This instance's sockets per (room, user): the shared presence key is removed only
    /// when the last of them leaves.
    local_presence: Mutex<HashMap<(String, i64), usize>>,
    /// The subscription [`Realtime::start`] made, until the subscriber takes it.
    subscribed: Mutex<Option<BoxStream<'static, String>>>,
}

fn presence_key(room: &str, user_id: i64) -> String {
    format!("presence:{room}:{user_id}")
}

impl Realtime {
    /// Subscribes to the channel before answering, so nothing published after this returns is
    /// missed: the subscriber ([`Realtime::hand_out_frames`]) starts from that subscription.
    pub async fn start(cache: Arc<dyn Cache>) -> Result<Arc<Self>, CacheError> {
        let subscribed = cache.subscribe(CHANNEL).await?;
        Ok(Arc::new(Self {
            cache,
            hub: Hub::new(HUB_KIND),
            fanned_out: AtomicU64::new(0),
            sockets: [AtomicU64::new(0), AtomicU64::new(0)],
            local_presence: Mutex::new(HashMap::new()),
            subscribed: Mutex::new(Some(subscribed)),
        }))
    }

    /// The subscriber: hands every frame heard on the channel to this instance's sessions
    /// until the connection is lost, then answers (run again, it subscribes anew; frames sent
    /// meanwhile are lost, and clients resynchronise over REST on reconnect).
    pub async fn hand_out_frames(&self) -> Result<(), CacheError> {
        let first = self
            .subscribed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let mut stream = match first {
            Some(stream) => stream,
            None => self.cache.subscribe(CHANNEL).await?,
        };
        while let Some(message) = stream.next().await {
            self.hand_out(&message);
        }
        Ok(())
    }

    /// Sends `frame` to every member of `room`, on every instance.
    pub async fn publish(&self, room: &str, frame: &str) -> Result<(), CacheError> {
        self.publish_all(room, &[frame]).await
    }

    /// Sends `frames` to every member of `room`, on every instance, in their order, as one
    /// message on the channel: the room's name, then each frame on a line of its own (a
    /// frame is compact JSON, which never holds a raw line break).
    pub async fn publish_all(
        &self,
        room: &str,
        frames: &[impl AsRef<str>],
    ) -> Result<(), CacheError> {
        if frames.is_empty() {
            return Ok(());
        }
        let mut message = String::from(room);
        for frame in frames {
            let frame = frame.as_ref();
            debug_assert!(!frame.contains('\n'), "a frame is one line");
            message.push('\n');
            message.push_str(frame);
        }
        self.cache.publish(CHANNEL, &message).await
    }

    fn hand_out(&self, message: &str) {
        let mut lines = message.split('\n');
        let Some(room) = lines.next() else {
            return;
        };
        for frame in lines {
            let delivered = self.hub.broadcast(room, Arc::from(frame));
            self.fanned_out
                .fetch_add(delivered as u64, Ordering::Relaxed);
        }
    }

    /// A new session in `room`: its id and the queue its frames arrive on.
    pub fn join(&self, room: &str) -> (MemberId, mpsc::Receiver<Frame>) {
        let (tx, rx) = mpsc::channel(SESSION_QUEUE);
        let member = MemberId::next();
        self.hub.join(room.to_owned(), member, tx);
        (member, rx)
    }

    pub fn leave(&self, member: MemberId) {
        self.hub.leave_all(member);
    }

    /// Sessions in `room` on this instance.
    pub fn members(&self, room: &str) -> usize {
        self.hub.members(room)
    }

    /// Frames handed to sessions on this instance since it started.
    pub fn frames_fanned_out(&self) -> u64 {
        self.fanned_out.load(Ordering::Relaxed)
    }

    /// Counts a socket of `kind` as live while the guard lives.
    pub fn socket_opened(self: &Arc<Self>, kind: SocketKind) -> SocketGuard {
        self.sockets[kind as usize].fetch_add(1, Ordering::Relaxed);
        SocketGuard {
            realtime: Arc::clone(self),
            kind,
        }
    }

    /// Live sockets of `kind` on this instance.
    pub fn sockets_live(&self, kind: SocketKind) -> u64 {
        self.sockets[kind as usize].load(Ordering::Relaxed)
    }

    /// Rooms with at least one session on this instance.
    pub fn rooms_live(&self) -> usize {
        self.hub.rooms()
    }

    /// Presence, seen by every instance: `user_id` has a socket in `room` somewhere. The key
    /// lives `ttl`; the socket refreshes it at every ping ([`Realtime::still_here`]), so an
    /// instance that dies takes its presences with it after `ttl`.
    pub async fn arrive(&self, room: &str, user_id: i64, ttl: Duration) -> Result<(), CacheError> {
        *self
            .lock_presence()
            .entry((room.to_owned(), user_id))
            .or_default() += 1;
        self.still_here(room, user_id, ttl).await
    }

    pub async fn still_here(
        &self,
        room: &str,
        user_id: i64,
        ttl: Duration,
    ) -> Result<(), CacheError> {
        self.cache.set(&presence_key(room, user_id), "1", ttl).await
    }

    /// A socket of `user_id` left `room`. The key goes with this instance's last one (a tab
    /// on another instance sets it again at its next ping).
    pub async fn depart(&self, room: &str, user_id: i64) -> Result<(), CacheError> {
        let last = {
            let mut presence = self.lock_presence();
            let key = (room.to_owned(), user_id);
            match presence.get_mut(&key) {
                Some(n) if *n > 1 => {
                    *n -= 1;
                    false
                }
                _ => {
                    presence.remove(&key);
                    true
                }
            }
        };
        if last {
            self.cache.delete(&presence_key(room, user_id)).await?;
        }
        Ok(())
    }

    /// Whether each `user_id` has a socket in its `room` on any instance, in their order, in
    /// one round trip.
    pub async fn are_present(&self, who: &[(String, i64)]) -> Result<Vec<bool>, CacheError> {
        let keys: Vec<String> = who
            .iter()
            .map(|(room, user_id)| presence_key(room, *user_id))
            .collect();
        Ok(self
            .cache
            .get_all(&keys)
            .await?
            .iter()
            .map(Option::is_some)
            .collect())
    }

    fn lock_presence(&self) -> std::sync::MutexGuard<'_, HashMap<(String, i64), usize>> {
        // Only map operations happen under this lock.
        self.local_presence
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}
