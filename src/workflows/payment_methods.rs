//! A company's saved cards: they live at the processor, on the company's processor customer,
//! created on the first card saved.

use crate::domain::user::Role;
use crate::integrations::processor::CreateCustomer;
use crate::integrations::processor::types::PaymentMethod;
use crate::state::AppState;
use crate::store::profiles::{self, ProcessorLink};
use crate::store::users::User;
use crate::workflows::connect::{is_refusal, processor_failure};
use crate::workflows::error::{FlowError, FlowResult};

const COMPANY: Role = Role::Empresa;

async fn load(state: &AppState, user_id: i64) -> FlowResult<Option<ProcessorLink>> {
    let mut conn = state.db.conn().await?;
    Ok(profiles::processor_link(conn.exec(), user_id, COMPANY).await?)
}

/// The company's processor customer, when it has one.
pub async fn customer_of(state: &AppState, user_id: i64) -> FlowResult<Option<String>> {
    Ok(load(state, user_id).await?.and_then(|l| l.customer_id))
}

/// The company's processor customer, created on first use with a key derived from the user,
/// so a retry or a concurrent request makes one customer, not two.
pub async fn ensure_customer(state: &AppState, user: &User) -> FlowResult<String> {
    let link = load(state, user.id).await?.ok_or_else(|| {
        FlowError::rule(
            "COMPANY_PROFILE_REQUIRED",
            "Create your company profile before saving a payment method",
        )
    })?;
    if let Some(id) = link.customer_id {
        return Ok(id);
    }
    let params = CreateCustomer {
        email: user.email.clone(),
        name: Some(user.username.clone()),
        metadata: [
            ("user_id".to_owned(), user.id.to_string()),
            ("profile_id".to_owned(), link.profile_id.to_string()),
        ]
        .into(),
    };
    let customer = state
        .processor
        .client
        .create_customer(&params, &format!("customer_{}", user.id))
        .await
        .map_err(|e| processor_failure(e, "create customer"))?;
    let mut conn = state.db.conn().await?;
    if profiles::set_customer(
        conn.exec(),
        link.profile_id,
        &customer.id,
        state.clock.now(),
    )
    .await?
    {
        return Ok(customer.id);
    }
    // A concurrent request stored its customer first: keep that one.
    let stored = profiles::processor_link(conn.exec(), user.id, COMPANY)
        .await?
        .and_then(|l| l.customer_id);
    Ok(stored.unwrap_or(customer.id))
}

/// The company's saved cards; none without a customer.
pub async fn saved_cards(state: &AppState, user_id: i64) -> FlowResult<Vec<PaymentMethod>> {
    let Some(customer) = customer_of(state, user_id).await? else {
        return Ok(Vec::new());
    };
    state
        .processor
        .client
        .list_payment_methods(&customer)
        .await
        .map_err(|e| processor_failure(e, "list payment methods"))
}

/// Saves `payment_method_id` on the company's customer (creating the customer if needed).
pub async fn attach(
    state: &AppState,
    user: &User,
    payment_method_id: &str,
) -> FlowResult<PaymentMethod> {
    let customer = ensure_customer(state, user).await?;
    // The same method on the same customer is the same request: a retry repeats nothing.
    let key = format!("attach_{customer}_{payment_method_id}");
    state
        .processor
        .client
        .attach_payment_method(payment_method_id, &customer, &key)
        .await
        .map_err(|e| {
            if e.is_not_found() || is_refusal(&e) {
                FlowError::rule(
                    "PAYMENT_METHOD_INVALID",
                    "The payment processor does not accept this payment method",
                )
            } else {
                processor_failure(e, "attach payment method")
            }
        })
}

/// Removes a saved card. Only one of the caller's own cards: anything else is unknown to them.
pub async fn detach(state: &AppState, user_id: i64, payment_method_id: &str) -> FlowResult<()> {
    let not_found = || FlowError::not_found("Payment method not found");
    let cards = saved_cards(state, user_id).await?;
    if !cards.iter().any(|m| m.id == payment_method_id) {
        return Err(not_found());
    }
    let key = format!("detach_{payment_method_id}");
    match state
        .processor
        .client
        .detach_payment_method(payment_method_id, &key)
        .await
    {
        Ok(_) => Ok(()),
        // Detached meanwhile (another request): what the caller wanted.
        Err(e) if is_refusal(&e) => Ok(()),
        Err(e) if e.is_not_found() => Err(not_found()),
        Err(e) => Err(processor_failure(e, "detach payment method")),
    }
}
