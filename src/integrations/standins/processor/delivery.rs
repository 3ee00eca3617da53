//! Webhook deliveries: each recorded event is signed and POSTed to the target, oldest first,
//! one at a time; the outcome of every attempt is kept on the event. No automatic retries:
//! the `resend` control delivers a stored event again.

use super::Shared;
use super::state::Delivery;
use crate::integrations::processor::webhook::{SIGNATURE_HEADER, sign};

impl Shared {
    /// Delivers every queued event, including ones queued by other requests meanwhile, so
    /// deliveries keep the order in which events were recorded.
    pub(crate) async fn deliver_pending(&self) {
        let _one_at_a_time = self.delivery_lock.lock().await;
        loop {
            let next = self.lock().next_undelivered();
            let Some((event_id, payload, target)) = next else {
                break;
            };
            let delivery = self.deliver(&payload, target.as_deref()).await;
            if !delivery.succeeded() {
                tracing::debug!(
                    event_id,
                    status = delivery.status,
                    error = delivery.error.as_deref().unwrap_or(""),
                    "sandbox webhook not accepted"
                );
            }
            self.lock().record_delivery(&event_id, delivery);
        }
    }

    async fn deliver(&self, payload: &str, target: Option<&str>) -> Delivery {
        let at = self.clock.now().timestamp();
        let signature = sign(payload.as_bytes(), self.webhook_secret.expose(), at);
        let Some(target) = target else {
            return Delivery {
                at,
                signature,
                status: None,
                error: Some("no webhook target set".to_owned()),
            };
        };
        let sent = self
            .webhook_http
            .post(target)
            .header(SIGNATURE_HEADER, &signature)
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/json; charset=utf-8",
            )
            .body(payload.to_owned())
            .send()
            .await;
        match sent {
            Ok(response) => Delivery {
                at,
                signature,
                status: Some(response.status().as_u16()),
                error: None,
            },
            Err(err) => Delivery {
                at,
                signature,
                status: None,
                error: Some(if err.is_timeout() {
                    "timed out".to_owned()
                } else {
                    "connection failed".to_owned()
                }),
            },
        }
    }
}
