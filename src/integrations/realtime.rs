//! Real-time fan-out to WebSocket sessions: one room per user (`user:{id}`, notification
//! sockets) and one per project chat (`chat:{id}`).
//!
//! Every frame goes through the cache's pub/sub channel (Redis with `REDIS_URL`, in process
//! otherwise), and each instance's subscriber hands what it hears to its own rooms. So a
//! member connected to any instance receives a frame once, and there is one path for local
//! and remote members alike. The rooms live in an `actors::Hub`: bounded queues, slow
//! consumers dropped (their socket closes and the client reconnects), metrics on `/metrics`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use actors::{Hub, MemberId};
use futures_util::StreamExt;
use tokio::sync::mpsc;

use super::cache::{Cache, CacheError};

/// The pub/sub channel (under `CACHE_PREFIX`, as every cache key).
const CHANNEL: &str = "realtime";
/// Frames a session may fall behind before it is dropped as a slow consumer.
pub const SESSION_QUEUE: usize = 256;

/// A frame as sent: JSON text shared by every member that receives it.
pub type Frame = Arc<str>;

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
}

impl Realtime {
    /// Subscribes to the channel before answering, so nothing published after this returns is
    /// missed; the subscriber task resubscribes if the connection drops.
    pub async fn start(cache: Arc<dyn Cache>) -> Result<Arc<Self>, CacheError> {
        let realtime = Arc::new(Self {
            cache: cache.clone(),
            hub: Hub::new("realtime_rooms"),
            fanned_out: AtomicU64::new(0),
        });
        let mut stream = cache.subscribe(CHANNEL).await?;
        let weak = Arc::downgrade(&realtime);
        tokio::spawn(async move {
            loop {
                while let Some(message) = stream.next().await {
                    let Some(me) = weak.upgrade() else { return };
                    me.hand_out(&message);
                }
                // The connection was lost: subscribe again (frames sent meanwhile are lost;
                // clients resynchronise over REST on reconnect).
                loop {
                    if weak.strong_count() == 0 {
                        return;
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    match cache.subscribe(CHANNEL).await {
                        Ok(s) => {
                            stream = s;
                            break;
                        }
                        Err(e) => tracing::warn!(error = %e, "realtime channel: resubscribing"),
                    }
                }
            }
        });
        Ok(realtime)
    }

    /// Sends `frame` to every member of `room`, on every instance.
    pub async fn publish(&self, room: &str, frame: &str) -> Result<(), CacheError> {
        self.cache
            .publish(CHANNEL, &format!("{room}\n{frame}"))
            .await
    }

    fn hand_out(&self, message: &str) {
        let Some((room, frame)) = message.split_once('\n') else {
            return;
        };
        let delivered = self.hub.broadcast(room, Arc::from(frame));
        self.fanned_out
            .fetch_add(delivered as u64, Ordering::Relaxed);
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
}
