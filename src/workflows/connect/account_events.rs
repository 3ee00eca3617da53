//! The effects of the processor's account-level events: a connected account's status kept
//! in step, and the expert told of the payouts to their bank account. `processor_events`
//! applies them, with the event's processed mark, in a transaction of their own.

use chrono::{DateTime, Utc};
use serde_json::json;

use crate::domain::money::minor_to_number;
use crate::domain::project::{format_minor, money_text};
use crate::domain::user::Role;
use crate::integrations::mail::Template;
use crate::integrations::processor::Event;
use crate::store::{Tx, profiles, users};
use crate::workflows::emails::email;
use crate::workflows::error::FlowResult;
use crate::workflows::notify::{for_admins, for_user};
use crate::workflows::processor_effect::bad_object;

/// `payout.paid` / `payout.failed` (the expert told, administrators too on failure) and
/// `account.updated` (the connected account's status kept in step).
pub(crate) async fn on_account_event(
    tx: &mut Tx,
    event: &Event,
    now: DateTime<Utc>,
) -> FlowResult<()> {
    if event.kind == "account.updated" {
        let account = event.account_object().map_err(bad_object)?;
        super::apply_account_update(tx.exec(), &account, now).await?;
    } else {
        let payout = event.payout().map_err(bad_object)?;
        let account = event.account.clone().or(payout.destination.clone());
        let expert = match &account {
            Some(a) => profiles::user_by_connect_account(tx.exec(), a).await?,
            None => None,
        };
        let contact = match expert {
            Some(id) => users::contact(tx.exec(), id, Role::Experto).await?,
            None => None,
        };
        let paid = event.kind == "payout.paid";
        let amount = money_text(payout.amount, &payout.currency);
        let data = json!({"payout_id": payout.id, "amount": minor_to_number(payout.amount),
                          "currency": payout.currency, "account": account});
        let (kind, title, message) = if paid {
            (
                "EXPERT_PAYOUT_PAID",
                "Payout paid",
                format!("A payout of {amount} reached your bank account."),
            )
        } else {
            (
                "EXPERT_PAYOUT_FAILED",
                "Payout failed",
                format!(
                    "A payout of {amount} to your bank account failed: {}.",
                    payout
                        .failure_message
                        .as_deref()
                        .or(payout.failure_code.as_deref())
                        .unwrap_or("no reason given")
                ),
            )
        };
        let mut notify = Vec::new();
        let mut mails = Vec::new();
        if let Some(c) = &contact {
            notify.push(for_user(c.id, kind, title, &message, data.clone()));
            let context = json!({"name": c.name, "amount": format_minor(payout.amount),
                                 "currency": payout.currency.to_uppercase(),
                                 "reason": payout.failure_message});
            let template = if paid {
                Template::PayoutPaid
            } else {
                Template::PayoutFailed
            };
            mails.push(email(&c.email, template, context));
        }
        if !paid {
            notify.push(for_admins(
                kind,
                "Expert payout failed",
                &format!(
                    "A payout of {amount} to connected account {} failed.",
                    account.as_deref().unwrap_or("unknown")
                ),
                data,
            ));
        }
        crate::store::events::record(
            tx.exec(),
            crate::store::events::NewEvent {
                kind: if paid { "payout.paid" } else { "payout.failed" },
                aggregate: "user",
                aggregate_id: expert,
                payload: json!({"payout_id": payout.id, "notify": notify, "email": mails}),
            },
            now,
        )
        .await?;
    }
    Ok(())
}
