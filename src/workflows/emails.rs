//! Transactional e-mail through the outbox: a transition lists the e-mails it causes in its
//! event's `email` array, so an e-mail goes out only for a change that happened.
//!
//! An entry is `{"to": "<address>", "template": "<template name>", "context": {…}}`; build it
//! with [`email`], or with [`email_with_token`] for a link holding a single-use token, which
//! the sender makes as it sends (the queue never holds a usable token). [`EmailConsumer`] queues an event's entries (`store::mail_queue`), and the
//! [`MailSender`] sends them at the mail server's pace: a message waits on the server for
//! several round trips, and notifications and webhooks should not wait with it. Delivery is
//! at least once: a message is marked sent after the server took it, and one claimed by a
//! sender that stopped midway is sent again, under the same idempotency key, once its lease
//! runs out.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::clock::Clock;
use crate::domain::token::{hash_token, random_token};
use crate::integrations::mail::{Attachment, Mailer, SENDS_AT_ONCE, Template};
use crate::store::events::Event;
use crate::store::mail_queue::{self, NewMail, QueuedMail};
use crate::store::tokens::{self, Purpose};
use crate::store::{Db, StoreResult, users};
use crate::workflows::outbox::{self, Consumer};

/// The payload key whose array the consumer queues.
pub const EMAIL_KEY: &str = "email";

/// An `email` entry.
pub fn email(to: &str, template: Template, context: Value) -> Value {
    json!({"to": to, "template": template.name(), "context": context})
}

/// The context key of what [`Mint`] makes.
const MINT_KEY: &str = "mint";

/// A single-use token made when its e-mail is sent, not when it is asked for: a queued
/// message holds what to make, never a usable token (tokens exist only as hashes at rest),
/// and a request asking for one waits on no mail server. Made as the user's only live token
/// of its purpose (earlier ones are spent), bound to the address the message goes to, and
/// only while that is still the account's address (an e-mail change since retires the links
/// to the old one, and must not be undone by a message that waited in the queue).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Mint {
    pub purpose: Purpose,
    pub user_id: i64,
    /// How long the token lives from when it is made.
    pub ttl_seconds: i64,
}

/// The context key of the invoice whose PDF is attached when the e-mail is sent.
const ATTACH_INVOICE_KEY: &str = "attach_invoice";

/// An `email` entry sent with the PDF of invoice `invoice_id`, rendered when it is sent
/// (the queue holds the id, not the file).
pub fn email_with_invoice(
    to: &str,
    template: Template,
    mut context: Value,
    invoice_id: i64,
) -> Value {
    context[ATTACH_INVOICE_KEY] = json!(invoice_id);
    email(to, template, context)
}

/// An `email` entry whose context gets `token` when it is sent ([`Mint`]).
pub fn email_with_token(to: &str, template: Template, mut context: Value, mint: Mint) -> Value {
    context[MINT_KEY] = json!(mint);
    email(to, template, context)
}

#[derive(Debug, Deserialize)]
struct Entry {
    to: String,
    template: String,
    #[serde(default)]
    context: Value,
}

/// Queues the e-mails of the outbox's events and wakes the [`MailSender`].
pub struct EmailConsumer {
    db: Db,
    clock: Clock,
    sender: actors::PeriodicHandle,
}

impl EmailConsumer {
    pub fn new(db: Db, clock: Clock, sender: actors::PeriodicHandle) -> Self {
        Self { db, clock, sender }
    }
}

/// The well-formed entries of `event`'s `email` list, with their positions; a malformed
/// entry or an unknown template is logged and left out (a retry cannot fix it).
fn entries(event: &Event) -> Vec<(i64, Entry)> {
    let Some(list) = event.payload.0.get(EMAIL_KEY).and_then(Value::as_array) else {
        return Vec::new();
    };
    let mut entries = Vec::with_capacity(list.len());
    for (index, raw) in list.iter().enumerate() {
        let entry = match Entry::deserialize(raw) {
            Ok(entry) => entry,
            Err(error) => {
                tracing::warn!(event_id = event.id, index, %error, "malformed email entry; skipped");
                continue;
            }
        };
        if Template::from_name(&entry.template).is_none() {
            tracing::warn!(event_id = event.id, index, template = %entry.template, "unknown e-mail template; skipped");
            continue;
        }
        entries.push((index as i64, entry));
    }
    entries
}

/// Names entry `position` of `event` (time first, as the file outbox sorts): a message sent
/// again after a crash keeps its name instead of becoming a second one.
fn idempotency_key(event: &Event, position: i64) -> String {
    format!(
        "{}-event{}-{position}",
        event.created_at.format("%Y%m%dT%H%M%S%.6fZ"),
        event.id
    )
}

#[async_trait]
impl Consumer for EmailConsumer {
    fn name(&self) -> &'static str {
        "email"
    }

    fn wants(&self, _kind: &str) -> bool {
        true
    }

    async fn handle(&self, event: &Event) -> anyhow::Result<()> {
        self.handle_all(&[event])
            .await
            .pop()
            .unwrap_or_else(|| Ok(()))
    }

    /// Queues every message of the batch in one statement.
    async fn handle_all(&self, events: &[&Event]) -> Vec<anyhow::Result<()>> {
        let entries: Vec<(&Event, Vec<(i64, Entry)>)> = events
            .iter()
            .map(|event| (*event, entries(event)))
            .collect();
        let mails: Vec<NewMail> = entries
            .iter()
            .flat_map(|(event, list)| {
                list.iter().map(|(position, entry)| NewMail {
                    event_id: event.id,
                    position: *position,
                    recipient: &entry.to,
                    template: &entry.template,
                    context: &entry.context,
                    idempotency_key: idempotency_key(event, *position),
                })
            })
            .collect();
        // Most events ask for no e-mail: then there is nothing to write or wake.
        if mails.is_empty() {
            return outbox::alike(events, Ok(()));
        }
        let queued = async {
            let mut conn = self.db.conn().await?;
            mail_queue::enqueue_all(conn.exec(), &mails, self.clock.now()).await
        }
        .await;
        if queued.is_ok() {
            self.sender.wake();
        }
        outbox::alike(events, queued.map(drop).map_err(|e| e.to_string()))
    }
}

/// How long a claimed message stays with its sender before another may send it (after a
/// crash, it is sent again then), as the outbox's events. A send that outlasts it (each step
/// with the SMTP server may wait 30 s) may be sent twice, under the same idempotency key.
const LEASE: chrono::Duration = chrono::Duration::seconds(60);
/// Messages claimed at once: as many as are sent at once, so each claimed message starts at
/// once and its lease is not spent waiting for the others.
const BATCH: i64 = SENDS_AT_ONCE as i64;

/// Sends the queued e-mails, [`SENDS_AT_ONCE`] at a time; a failed message is tried again
/// later (1 s, doubling, at most an hour apart), alone.
#[derive(Clone)]
pub struct MailSender {
    db: Db,
    clock: Clock,
    mailer: Mailer,
    /// The invoices' verification page (`INVOICE_VERIFY_URL`), for their attached PDFs.
    invoice_verify_url: String,
}

impl MailSender {
    pub fn new(db: Db, clock: Clock, mailer: Mailer, invoice_verify_url: String) -> Self {
        Self {
            db,
            clock,
            mailer,
            invoice_verify_url,
        }
    }

    /// Sends the due messages (up to a batch) and records how each went; whether the claim
    /// was full, so more may be due.
    pub async fn run_once(&self) -> StoreResult<bool> {
        let now = self.clock.now();
        let claimed = {
            let mut conn = self.db.conn().await?;
            mail_queue::QUEUE
                .claim(conn.exec(), now, now + LEASE, BATCH)
                .await?
        };
        let outcomes =
            futures_util::future::join_all(claimed.iter().map(|mail| self.send(mail))).await;
        let (sent, failed): (Vec<_>, Vec<_>) = claimed
            .iter()
            .zip(outcomes)
            .partition(|(_, outcome)| outcome.is_ok());
        let sent: Vec<i64> = sent.iter().map(|(mail, _)| mail.id).collect();
        // What went is recorded first: a later failure to record must not send it again.
        let mut conn = self.db.conn().await?;
        mail_queue::QUEUE
            .mark_done(conn.exec(), &sent, self.clock.now())
            .await?;
        for (mail, outcome) in &failed {
            let error = outcome.as_ref().err().map_or("", String::as_str);
            mail_queue::QUEUE
                .mark_failed(conn.exec(), mail.id, mail.attempts, error, self.clock.now())
                .await?;
        }
        Ok(claimed.len() as i64 >= BATCH)
    }

    async fn send(&self, mail: &QueuedMail) -> Result<(), String> {
        // Queued only with a known template.
        let template = Template::from_name(&mail.template)
            .ok_or_else(|| format!("unknown template {}", mail.template))?;
        let mut context = mail.context.0.clone();
        if let Some(mint) = context.as_object_mut().and_then(|c| c.remove(MINT_KEY)) {
            let mint: Mint = serde_json::from_value(mint).map_err(|error| error.to_string())?;
            match self.mint(&mint, &mail.recipient).await {
                Ok(Some(token)) => context["token"] = json!(token),
                Ok(None) => {
                    tracing::info!(
                        mail_id = mail.id,
                        "a token e-mail to an address the account no longer has: not sent"
                    );
                    return Ok(());
                }
                Err(error) => return Err(error.to_string()),
            }
        }
        let mut attachments = Vec::new();
        if let Some(id) = context
            .as_object_mut()
            .and_then(|c| c.remove(ATTACH_INVOICE_KEY))
            .and_then(|id| id.as_i64())
        {
            attachments.push(self.invoice_pdf(id).await?);
        }
        self.mailer
            .send_with(
                &mail.recipient,
                template,
                context,
                Some(mail.idempotency_key.clone()),
                attachments,
            )
            .await
            .map_err(|error| error.to_string())
    }

    /// Invoice `id`'s PDF as an attachment.
    async fn invoice_pdf(&self, id: i64) -> Result<Attachment, String> {
        let invoice = {
            let mut conn = self.db.conn().await.map_err(|e| e.to_string())?;
            crate::store::invoices::find(conn.exec(), id)
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("invoice {id} not found"))?
        };
        let (number, bytes) =
            crate::workflows::invoice_documents::render_issued(&self.invoice_verify_url, invoice)
                .await
                .map_err(|e| e.to_string())?;
        Ok(Attachment {
            filename: format!("{number}.pdf"),
            content_type: "application/pdf".to_owned(),
            bytes,
        })
    }

    /// Makes `mint`'s token for `address`, unless that is no longer the account's address (or
    /// the account is gone or inactive): `None` then.
    async fn mint(&self, mint: &Mint, address: &str) -> StoreResult<Option<String>> {
        let now = self.clock.now();
        let mut tx = self.db.begin().await?;
        let current = users::find(tx.exec(), mint.user_id).await?;
        if !current.is_some_and(|user| user.is_active && user.email == address) {
            return Ok(None);
        }
        let token = random_token(32);
        tokens::consume_all(tx.exec(), mint.user_id, mint.purpose, now).await?;
        tokens::insert(
            tx.exec(),
            mint.user_id,
            mint.purpose,
            &hash_token(&token),
            address,
            now + chrono::Duration::seconds(mint.ttl_seconds),
            now,
        )
        .await?;
        tx.commit().await?;
        Ok(Some(token))
    }
}

/// The name of the sender's job, a drain `background::start_drains` starts: the
/// [`EmailConsumer`] wakes it after queuing, and a run sends every due message, claim after
/// claim.
pub const JOB: &str = "mail_sender";
