//! New-chat-message e-mails: a participant (the project's company or expert) who is not
//! connected to the room on any instance gets an e-mail, at most one per room per
//! `CHAT_EMAIL_DIGEST_MINUTES`. Presence is the cache's (`Realtime::are_present`, refreshed at
//! every ping); the once-per-window rule is the database's (`store::chat_digests::claim`), in
//! the transaction that stores the message, so the e-mail goes with a message that exists.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::domain::user::Role;
use crate::integrations::mail::Template;
use crate::integrations::realtime::chat_room;
use crate::state::AppState;
use crate::store::projects::Project;
use crate::store::{Tx, chat_digests, users};
use crate::workflows::emails::email;
use crate::workflows::error::FlowResult;

/// The profile a party of `p` writes under, for the name an e-mail shows.
fn profile_of(p: &Project, user_id: i64) -> Role {
    if p.company_id == Some(user_id) {
        Role::Empresa
    } else if p.expert_id == Some(user_id) {
        Role::Experto
    } else {
        // An administrator mediating: no profile, the username is used.
        Role::Admin
    }
}

/// What the posts of one group learned of their room so far: whether each party is
/// present (asked once a group), and whom the group already took an e-mail's right for.
#[derive(Default)]
pub struct Seen {
    present: HashMap<i64, bool>,
    claimed: HashSet<i64>,
}

impl Seen {
    /// What the posts of each room of `projects` start from: whether each of its parties is
    /// present, asked for every room in one round trip (without the cache, each counts as
    /// absent: no frame reaches anyone either, so the e-mail is the way).
    pub async fn in_rooms(state: &AppState, projects: &[&Project]) -> HashMap<i64, Seen> {
        let parties: Vec<(i64, i64)> = projects
            .iter()
            .flat_map(|p| {
                [p.company_id, p.expert_id]
                    .into_iter()
                    .flatten()
                    .map(move |user_id| (p.id, user_id))
            })
            .collect();
        let asked: Vec<(String, i64)> = parties
            .iter()
            .map(|(project_id, user_id)| (chat_room(*project_id), *user_id))
            .collect();
        let present = state
            .realtime
            .are_present(&asked)
            .await
            .unwrap_or_else(|e| {
                tracing::warn!(error = %e, rooms = projects.len(), "chat presence unknown");
                vec![false; asked.len()]
            });
        let mut seen: HashMap<i64, Seen> =
            projects.iter().map(|p| (p.id, Seen::default())).collect();
        for ((project_id, user_id), present) in parties.into_iter().zip(present) {
            if let Some(room) = seen.get_mut(&project_id) {
                room.present.insert(user_id, present);
            }
        }
        seen
    }
}

/// The `email` entries a new message by `sender_id` causes (for the event of the message).
/// The posts of one group ask in turn with the same `seen`, in the transaction that stores
/// them all: each gets the e-mails it would have had alone.
pub async fn emails_for(
    state: &AppState,
    tx: &mut Tx,
    p: &Project,
    sender_id: i64,
    now: DateTime<Utc>,
    seen: &mut Seen,
) -> FlowResult<Vec<Value>> {
    let window_start = now - state.settings.chat_email_digest;
    let mut emails = Vec::new();
    let mut sender_name = None;
    for (user_id, kind) in [(p.company_id, Role::Empresa), (p.expert_id, Role::Experto)] {
        let Some(user_id) = user_id.filter(|id| *id != sender_id) else {
            continue;
        };
        // Asked for every party of the room by `Seen::in_rooms`.
        if seen.present.get(&user_id).copied().unwrap_or(false) {
            continue;
        }
        // Claimed by an earlier post of this group at `now`: a second claim in the same
        // window fails, so it is not asked.
        if seen.claimed.contains(&user_id) && window_start < now {
            continue;
        }
        if !chat_digests::claim(tx.exec(), p.id, user_id, now, window_start).await? {
            continue;
        }
        seen.claimed.insert(user_id);
        let Some(to) = users::contact(tx.exec(), user_id, kind).await? else {
            continue;
        };
        if sender_name.is_none() {
            sender_name = users::contact(tx.exec(), sender_id, profile_of(p, sender_id))
                .await?
                .map(|c| c.name);
        }
        emails.push(email(
            &to.email,
            Template::NewChatMessage,
            json!({"name": to.name, "project_title": p.title, "project_id": p.id,
                   "sender_name": sender_name.as_deref().unwrap_or_default()}),
        ));
    }
    Ok(emails)
}
