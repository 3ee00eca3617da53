//! The processor's test payment methods. Each `pm_card_…` token stands for a card whose
//! behaviour is fixed: it authorises, is declined, or asks for authentication.

/// What confirming an intent with the card does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CardBehaviour {
    Authorise,
    Decline {
        decline_code: &'static str,
        message: &'static str,
    },
    /// The bank asks the customer to authenticate (3-D Secure): `requires_action`.
    RequireAction,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TestCard {
    pub token: &'static str,
    pub brand: &'static str,
    pub last4: &'static str,
    pub funding: &'static str,
    pub country: &'static str,
    pub exp_month: u32,
    pub exp_year: i32,
    pub behaviour: CardBehaviour,
}

const fn card(
    token: &'static str,
    brand: &'static str,
    last4: &'static str,
    funding: &'static str,
    behaviour: CardBehaviour,
) -> TestCard {
    TestCard {
        token,
        brand,
        last4,
        funding,
        country: "US",
        exp_month: 12,
        exp_year: 2034,
        behaviour,
    }
}

const GENERIC_DECLINE: CardBehaviour = CardBehaviour::Decline {
    decline_code: "generic_decline",
    message: "Your card was declined.",
};

pub(crate) const TEST_CARDS: [TestCard; 7] = [
    card(
        "pm_card_visa",
        "visa",
        "4242",
        "credit",
        CardBehaviour::Authorise,
    ),
    card(
        "pm_card_visa_debit",
        "visa",
        "5556",
        "debit",
        CardBehaviour::Authorise,
    ),
    card(
        "pm_card_mastercard",
        "mastercard",
        "4444",
        "credit",
        CardBehaviour::Authorise,
    ),
    card(
        "pm_card_amex",
        "amex",
        "8431",
        "credit",
        CardBehaviour::Authorise,
    ),
    card(
        "pm_card_chargeDeclined",
        "visa",
        "0002",
        "credit",
        GENERIC_DECLINE,
    ),
    card(
        "pm_card_chargeDeclinedInsufficientFunds",
        "visa",
        "9995",
        "credit",
        CardBehaviour::Decline {
            decline_code: "insufficient_funds",
            message: "Your card has insufficient funds.",
        },
    ),
    card(
        "pm_card_authenticationRequired",
        "visa",
        "3184",
        "credit",
        CardBehaviour::RequireAction,
    ),
];

/// The test card a `pm_card_…` token names.
pub(crate) fn test_card(token: &str) -> Option<TestCard> {
    TEST_CARDS.iter().copied().find(|c| c.token == token)
}
