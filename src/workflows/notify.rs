//! The notification service: storing notifications for people, directly or from events.
//!
//! Two ways in:
//! - [`notify`]: a workflow stores a notification inside its own transaction (it commits with
//!   the state change).
//! - [`NotificationConsumer`]: the outbox consumer. Any event whose payload carries a `notify`
//!   array stores those notifications, each with the event's id, so a replayed event stores
//!   nothing twice (`UNIQUE (user_id, type, event_id)`). An entry is either
//!   `{"user_id", "type", "title", "message", "data"}` for one person or
//!   `{"to_admins": true, "type", "title", "message", "data"}` for every active administrator.
//!   [`for_user`] and [`for_admins`] build the entries. One event stores at most one
//!   notification per `(user, type)`: an administrator named both directly and through
//!   `to_admins` with the same type gets it once.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Value, json};

use std::sync::Arc;

use crate::clock::Clock;
use crate::integrations::realtime::{Realtime, user_room};
use crate::store::events::Event;
use crate::store::notifications::{self, NewNotification};
use crate::store::{Db, Exec, StoreResult};
use crate::workflows::error::{FlowError, FlowResult};
use crate::workflows::outbox::{self, Consumer};

/// The payload key whose array the consumer turns into notifications.
pub const NOTIFY_KEY: &str = "notify";

/// Stores one notification for `user_id` on the caller's connection or transaction. With an
/// `event_id` it is idempotent: the same `(user, kind, event)` is stored once. `None` when it
/// already existed or the user does not exist.
#[allow(clippy::too_many_arguments)] // the notification's fields, named at every call site
pub async fn notify(
    ex: Exec<'_>,
    user_id: i64,
    kind: &str,
    title: &str,
    message: &str,
    data: &Value,
    event_id: Option<i64>,
    now: DateTime<Utc>,
) -> StoreResult<Option<i64>> {
    notifications::insert(
        ex,
        &NewNotification {
            user_id,
            kind,
            title,
            message,
            data,
            event_id,
        },
        now,
    )
    .await
}

/// Marks one of `user_id`'s notifications read: 404 for anyone else's.
pub async fn mark_read(
    state: &crate::state::AppState,
    user_id: i64,
    id: i64,
) -> FlowResult<notifications::Notification> {
    let mut tx = state.db.begin().await?;
    if !notifications::mark_read(tx.exec(), user_id, id, state.clock.now()).await? {
        return Err(FlowError::not_found("Notification not found"));
    }
    let notification = notifications::find_for_user(tx.exec(), user_id, id)
        .await?
        .ok_or_else(|| FlowError::not_found("Notification not found"))?;
    tx.commit().await?;
    Ok(notification)
}

/// Marks every unread notification of `user_id` read; answers how many.
pub async fn mark_all_read(state: &crate::state::AppState, user_id: i64) -> FlowResult<i64> {
    let mut conn = state.db.conn().await?;
    Ok(notifications::mark_all_read(conn.exec(), user_id, state.clock.now()).await?)
}

/// Stores a test notification (type `test`) for `user_id`.
pub async fn store_test(
    state: &crate::state::AppState,
    user_id: i64,
) -> FlowResult<notifications::Notification> {
    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    let id = notify(
        tx.exec(),
        user_id,
        "test",
        "Test notification",
        "This is a test notification.",
        &json!({"test": true}),
        None,
        now,
    )
    .await?
    .ok_or_else(|| FlowError::not_found("User not found"))?;
    let notification = notifications::find_for_user(tx.exec(), user_id, id)
        .await?
        .ok_or_else(|| FlowError::not_found("Notification not found"))?;
    tx.commit().await?;
    let pushed = frame(
        notification.id,
        &notification.kind,
        &notification.title,
        &notification.message,
        &notification.data.0,
        notification.created_at,
    );
    if let Err(e) = state.realtime.publish(&user_room(user_id), &pushed).await {
        tracing::warn!(error = %e, "test notification not pushed");
    }
    Ok(notification)
}

/// A notification as its socket frame (DESIGN §6): `{type, id, title, message, data,
/// created_at}`.
pub fn frame(
    id: i64,
    kind: &str,
    title: &str,
    message: &str,
    data: &Value,
    created_at: DateTime<Utc>,
) -> String {
    json!({"type": kind, "id": id, "title": title, "message": message, "data": data,
           "created_at": created_at})
    .to_string()
}

/// A `notify` entry for one person.
pub fn for_user(user_id: i64, kind: &str, title: &str, message: &str, data: Value) -> Value {
    json!({"user_id": user_id, "type": kind, "title": title, "message": message, "data": data})
}

/// A `notify` entry for every active administrator.
pub fn for_admins(kind: &str, title: &str, message: &str, data: Value) -> Value {
    json!({"to_admins": true, "type": kind, "title": title, "message": message, "data": data})
}

/// One entry of an event's `notify` array.
#[derive(Debug, Deserialize)]
struct Entry {
    user_id: Option<i64>,
    #[serde(default)]
    to_admins: bool,
    #[serde(rename = "type")]
    kind: String,
    title: String,
    #[serde(default)]
    message: String,
    #[serde(default)]
    data: Option<Value>,
}

/// The entries of an event; malformed ones are logged and skipped (a retry cannot fix them).
fn entries_of(event: &Event) -> Vec<Entry> {
    let Some(list) = event.payload.0.get(NOTIFY_KEY) else {
        return Vec::new();
    };
    let Some(list) = list.as_array() else {
        tracing::warn!(event_id = event.id, kind = %event.kind, "`notify` is not an array; ignored");
        return Vec::new();
    };
    list.iter()
        .enumerate()
        .filter_map(|(i, raw)| match Entry::deserialize(raw) {
            Ok(entry) if entry.to_admins || entry.user_id.is_some() => Some(entry),
            Ok(_) => {
                tracing::warn!(event_id = event.id, index = i, "notify entry names no recipient; skipped");
                None
            }
            Err(err) => {
                tracing::warn!(event_id = event.id, index = i, error = %err, "malformed notify entry; skipped");
                None
            }
        })
        .collect()
}

/// Most notifications stored in one statement (six values each, well within either engine's
/// limit of bound values); a batch fanned out to many administrators takes several.
const INSERTED_TOGETHER: usize = 1_000;

/// Turns the `notify` array of any event into stored notifications, each pushed to its
/// user's live sockets once stored.
pub struct NotificationConsumer {
    db: Db,
    clock: Clock,
    realtime: Option<Arc<Realtime>>,
}

impl NotificationConsumer {
    pub fn new(db: Db, clock: Clock) -> Self {
        Self {
            db,
            clock,
            realtime: None,
        }
    }

    /// Pushes every notification it stores to the user's sockets.
    pub fn pushing_to(mut self, realtime: Arc<Realtime>) -> Self {
        self.realtime = Some(realtime);
        self
    }

    /// Stores the event's notifications in one statement; how many were new.
    pub async fn store(&self, event: &Event) -> StoreResult<usize> {
        self.store_all(&[event]).await
    }

    /// Stores the notifications of `events` in one statement (one per
    /// [`INSERTED_TOGETHER`] rows); how many were new.
    pub async fn store_all(&self, events: &[&Event]) -> StoreResult<usize> {
        let entries: Vec<(i64, Entry)> = events
            .iter()
            .flat_map(|event| entries_of(event).into_iter().map(|e| (event.id, e)))
            .collect();
        if entries.is_empty() {
            return Ok(0);
        }
        let now = self.clock.now();
        let mut conn = self.db.conn().await?;
        let admins = if entries.iter().any(|(_, e)| e.to_admins) {
            notifications::administrator_ids(conn.exec()).await?
        } else {
            Vec::new()
        };
        let empty = json!({});
        let mut all = Vec::new();
        for (event_id, entry) in &entries {
            let admins: &[i64] = if entry.to_admins { &admins } else { &[] };
            for &user_id in entry.user_id.iter().chain(admins) {
                all.push(NewNotification {
                    user_id,
                    kind: &entry.kind,
                    title: &entry.title,
                    message: &entry.message,
                    data: entry.data.as_ref().unwrap_or(&empty),
                    event_id: Some(*event_id),
                });
            }
        }
        let mut stored = Vec::with_capacity(all.len());
        for rows in all.chunks(INSERTED_TOGETHER) {
            stored.extend(notifications::insert_all(conn.exec(), rows, now).await?);
        }
        drop(conn);
        // Pushed in the order stored; a user has one notification of a kind per event.
        stored.sort_by_key(|n| n.id);
        let frames: Vec<(i64, String)> = stored
            .iter()
            .filter_map(|s| {
                let n = all.iter().find(|n| {
                    n.user_id == s.user_id && n.kind == s.kind && n.event_id == s.event_id
                })?;
                Some((
                    s.user_id,
                    frame(s.id, n.kind, n.title, n.message, n.data, now),
                ))
            })
            .collect();
        if let Some(realtime) = &self.realtime {
            for (user_id, frame) in frames {
                // Stored is what counts: a frame lost here is found by the client's next
                // `GET /api/notifications`, so a failed push does not fail the event.
                if let Err(e) = realtime.publish(&user_room(user_id), &frame).await {
                    tracing::warn!(error = %e, "notification not pushed");
                }
            }
        }
        Ok(stored.len())
    }
}

#[async_trait]
impl Consumer for NotificationConsumer {
    fn name(&self) -> &'static str {
        "notifications"
    }

    /// Any kind may carry a `notify` array; events without one are a no-op.
    fn wants(&self, _kind: &str) -> bool {
        true
    }

    async fn handle(&self, event: &Event) -> anyhow::Result<()> {
        self.store(event).await?;
        Ok(())
    }

    /// A batch's notifications stored together; a failure fails (and retries) them all.
    async fn handle_all(&self, events: &[&Event]) -> Vec<anyhow::Result<()>> {
        let stored = self.store_all(events).await;
        outbox::alike(
            events,
            stored
                .map(drop)
                .map_err(|e| format!("notifications not stored: {e}")),
        )
    }
}
