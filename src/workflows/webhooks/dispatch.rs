//! The dispatcher job: claims due deliveries and sends each in a task of its own, signed with
//! the owner's current secret (and the previous one while its rotation window lasts); records
//! every attempt; schedules retries; disables an endpoint that has failed for three days and
//! tells its owner.

use serde_json::json;
use std::time::Duration;

use crate::domain::webhook_rules::{self, WebhookDeliveryState};
use crate::integrations::mail::Template;
use crate::integrations::webhook_http::{HostSlot, Outcome};
use crate::state::AppState;
use crate::store::events::{self, NewEvent};
use crate::store::webhook_deliveries::{self as store, Attempt, Due, NewDelivery};
use crate::store::{users, webhooks};
use crate::workflows::emails::email;
use crate::workflows::error::{FlowError, FlowResult};
use crate::workflows::notify::for_user;
use crate::workflows::webhook_config;

use super::metrics::{WebhookMetrics, metrics};

/// The name of the dispatcher's job (`state.jobs.trigger(JOB)` runs a pass at once).
pub const JOB: &str = "webhook_deliveries";

/// How long a claimed delivery is held by the dispatcher sending it (well past the 10 s
/// call limit): a crash mid-call leaves it due again after this.
const LEASE: chrono::Duration = chrono::Duration::minutes(2);
const BATCH: i64 = 200;
/// Due deliveries one pass looks at most while hosts without room hold some back.
const MAX_SCAN: i64 = 5_000;
/// The longest the job sleeps while nothing is due.
const MAX_WAIT: Duration = Duration::from_secs(60);

/// The headers of one delivery: Standard Webhooks' three, plus the bearer JWT for method
/// `JWT`. `secrets` are the owner's signing secrets, the current one first
/// ([`crate::workflows::webhook_config::signing_secrets`]): `webhook-signature` carries one
/// `v1,` entry per secret, space-separated, and the JWT is signed with the current one only,
/// naming it in its header's `kid`. The signing time is `now` (seconds), so a regenerated
/// secret signs the next attempt.
pub fn signed_headers(
    message_id: &str,
    user_id: i64,
    auth_method: &str,
    secrets: &[&str],
    now: chrono::DateTime<chrono::Utc>,
    body: &[u8],
) -> anyhow::Result<Vec<(&'static str, String)>> {
    let Some(current) = secrets.first() else {
        anyhow::bail!("no signing secret");
    };
    let timestamp = now.timestamp();
    let mut headers = vec![
        ("webhook-id", message_id.to_owned()),
        ("webhook-timestamp", timestamp.to_string()),
        (
            "webhook-signature",
            webhook_rules::standard_signatures(secrets, message_id, timestamp, body),
        ),
    ];
    if auth_method == "JWT" {
        let token = webhook_rules::delivery_jwt(current, user_id, message_id, timestamp, body)?;
        headers.push(("authorization", format!("Bearer {token}")));
    }
    Ok(headers)
}

/// One pass: starts every due delivery whose host has room, and answers how long to sleep
/// until the next one is due. Sending happens in spawned tasks; each wakes the job when done.
pub async fn deliver_due(state: &AppState) -> FlowResult<Option<Duration>> {
    let now = state.clock.now();
    let mut conn = state.db.conn().await?;
    let mut waiting_for_room = false;
    // Deliveries left due (their host is busy) stay first in the order: page past them, so
    // one slow host never holds back the others.
    let mut skipped = 0;
    loop {
        let page = store::due(conn.exec(), now, BATCH, skipped).await?;
        let full = page.len() as i64 == BATCH;
        for d in page {
            let host = match state.webhook_http.check(&d.url) {
                Ok(dest) => dest.host,
                // Refused before any connection: recorded as a failed attempt.
                Err(_) => String::new(),
            };
            let Some(slot) = state.webhook_http.reserve(&host) else {
                waiting_for_room = true;
                skipped += 1;
                continue;
            };
            if !store::QUEUE
                .claim_row(conn.exec(), d.id, d.next_attempt_at, now + LEASE)
                .await?
            {
                skipped += 1; // another dispatcher has it
                continue;
            }
            let st = state.clone();
            tokio::spawn(async move {
                let id = d.id;
                if let Err(error) = attempt(&st, d, slot).await {
                    tracing::warn!(delivery_id = id, %error, "webhook delivery not recorded; retried after its lease");
                }
                st.jobs.wake(JOB);
            });
        }
        if !full || skipped >= MAX_SCAN {
            break;
        }
    }
    if waiting_for_room {
        return Ok(Some(MAX_WAIT));
    }
    let next = store::next_due_at(conn.exec()).await?;
    Ok(next.map(|at| {
        (at - state.clock.now())
            .to_std()
            .unwrap_or(Duration::from_millis(50))
            .max(Duration::from_millis(50))
            .min(MAX_WAIT)
    }))
}

/// Sends one claimed delivery and records what came of it. It is signed with the owner's
/// secrets as stored when it is sent (a regeneration since the claim counts), or the claimed
/// row's secret should the configuration be gone.
async fn attempt(state: &AppState, d: Due, slot: HostSlot) -> anyhow::Result<()> {
    let config = {
        let mut conn = state.db.conn().await?;
        webhooks::find(conn.exec(), d.user_id).await?
    };
    let signed_at = state.clock.now();
    let secrets = match &config {
        Some(config) => webhook_config::signing_secrets(config, signed_at),
        None => vec![d.secret.as_str()],
    };
    let outcome = match signed_headers(
        &d.message_id,
        d.user_id,
        &d.auth_method,
        &secrets,
        signed_at,
        d.body.as_bytes(),
    ) {
        Ok(headers) => {
            let headers: Vec<(&str, String)> = headers.into_iter().collect();
            state
                .webhook_http
                .post(&d.url, &headers, d.body.clone().into_bytes())
                .await
        }
        Err(error) => Outcome {
            status: None,
            error: Some(format!("cannot sign: {error}")),
            duration: Duration::ZERO,
        },
    };
    drop(slot);
    record(state, &d, &outcome).await
}

async fn record(state: &AppState, d: &Due, outcome: &Outcome) -> anyhow::Result<()> {
    let now = state.clock.now();
    let status_code = outcome.status.map(i64::from);
    let mut tx = state.db.begin().await?;
    if outcome.success() {
        WebhookMetrics::add(&metrics().sent);
        store::record_attempt(
            tx.exec(),
            d.id,
            &Attempt {
                status_code,
                error: None,
                state: WebhookDeliveryState::Delivered,
                next_attempt_at: None,
            },
            now,
        )
        .await?;
        store::endpoint_succeeded(tx.exec(), d.user_id).await?;
        tx.commit().await?;
        return Ok(());
    }
    WebhookMetrics::add(&metrics().failed);
    let error = outcome.error.as_deref().unwrap_or("no answer");
    let failing_since = store::endpoint_failed(tx.exec(), d.user_id, now)
        .await?
        .unwrap_or(now);
    if now - failing_since >= webhook_rules::disable_after() {
        store::record_attempt(
            tx.exec(),
            d.id,
            &Attempt {
                status_code,
                error: Some(error),
                state: WebhookDeliveryState::Failed,
                next_attempt_at: None,
            },
            now,
        )
        .await?;
        if store::disable_endpoint(tx.exec(), d.user_id, now).await? {
            store::disable_pending(tx.exec(), d.user_id, now).await?;
            record_disabled(&mut tx, d.user_id, now).await?;
            WebhookMetrics::add(&metrics().disabled);
        }
        state.commit(tx).await?;
        return Ok(());
    }
    WebhookMetrics::add(&metrics().retried);
    let next = now + webhook_rules::retry_delay(d.failures + 1, rand::random::<f64>());
    store::record_attempt(
        tx.exec(),
        d.id,
        &Attempt {
            status_code,
            error: Some(error),
            state: WebhookDeliveryState::Pending,
            next_attempt_at: Some(next),
        },
        now,
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// The owner's notification and e-mail that their endpoint was disabled, through the outbox.
async fn record_disabled(
    tx: &mut crate::store::Tx,
    user_id: i64,
    now: chrono::DateTime<chrono::Utc>,
) -> anyhow::Result<()> {
    let title = "Webhook disabled";
    let message = "Deliveries to your webhook URL have failed for three days, so it was \
                   disabled. Fix the receiver, then enable it again in your settings.";
    let mut mails = Vec::new();
    if let Some(user) = users::find(tx.exec(), user_id).await? {
        mails.push(email(
            &user.email,
            Template::AdminAlert,
            json!({"name": user.username, "title": title, "message": message}),
        ));
    }
    events::record(
        tx.exec(),
        NewEvent::of_user(
            "webhook.disabled",
            user_id,
            json!({
                "user_id": user_id,
                "notify": [for_user(user_id, "webhook_disabled", title, message, json!({}))],
                "email": mails,
            }),
        ),
        now,
    )
    .await?;
    Ok(())
}

/// What `POST /api/notifications/webhook/test` answers.
#[derive(Debug, Clone)]
pub struct TestOutcome {
    pub delivered: bool,
    pub status_code: Option<u16>,
    pub duration_ms: u64,
    pub error: Option<String>,
}

/// Sends a `webhook.test` delivery to the caller's URL at once (enabled or not) and logs it.
pub async fn send_test(state: &AppState, user_id: i64) -> FlowResult<TestOutcome> {
    let mut conn = state.db.conn().await?;
    let config = webhooks::find(conn.exec(), user_id).await?;
    let Some((url, config)) = config.and_then(|c| c.url.clone().map(|u| (u, c))) else {
        return Err(FlowError::invalid("url", "no webhook URL is configured"));
    };
    let now = state.clock.now();
    let message_id = format!(
        "msg_test_{user_id}_{}",
        crate::domain::token::random_token(9)
    );
    let body = json!({
        "id": message_id,
        "type": super::TEST_EVENT,
        "created_at": now,
        "data": {"user_id": user_id, "message": "This is a test delivery."},
    })
    .to_string();
    let host = state
        .webhook_http
        .check(&url)
        .map(|d| d.host)
        .unwrap_or_default();
    let outcome = match state.webhook_http.reserve(&host) {
        Some(slot) => {
            let headers = signed_headers(
                &message_id,
                user_id,
                &config.auth_method,
                &webhook_config::signing_secrets(&config, now),
                now,
                body.as_bytes(),
            )?;
            let outcome = state
                .webhook_http
                .post(&url, &headers, body.clone().into_bytes())
                .await;
            drop(slot);
            outcome
        }
        None => Outcome {
            status: None,
            error: Some("too many deliveries in flight to this host; try again shortly".into()),
            duration: Duration::ZERO,
        },
    };
    let delivered = outcome.success();
    WebhookMetrics::add(if delivered {
        &metrics().sent
    } else {
        &metrics().failed
    });
    let done = state.clock.now();
    let mut tx = state.db.begin().await?;
    if let Some(id) = store::insert(
        tx.exec(),
        &NewDelivery {
            message_id: &message_id,
            user_id,
            event_id: None,
            event_type: super::TEST_EVENT,
            body: &body,
            state: WebhookDeliveryState::Failed,
        },
        now,
    )
    .await?
    {
        store::record_attempt(
            tx.exec(),
            id,
            &Attempt {
                status_code: outcome.status.map(i64::from),
                error: outcome.error.as_deref(),
                state: if delivered {
                    WebhookDeliveryState::Delivered
                } else {
                    WebhookDeliveryState::Failed
                },
                next_attempt_at: None,
            },
            done,
        )
        .await?;
    }
    tx.commit().await?;
    Ok(TestOutcome {
        delivered,
        status_code: outcome.status,
        duration_ms: outcome.duration.as_millis() as u64,
        error: outcome.error,
    })
}

/// Sends one of the caller's deliveries again (same id and body, signed anew).
pub async fn redeliver(state: &AppState, user_id: i64, delivery_id: i64) -> FlowResult<()> {
    let mut conn = state.db.conn().await?;
    if !store::requeue(conn.exec(), delivery_id, user_id, state.clock.now()).await? {
        return Err(FlowError::not_found("Webhook delivery not found"));
    }
    state.jobs.wake(JOB);
    Ok(())
}
