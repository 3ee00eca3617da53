//! The transactional e-mails and the engine that renders them.
//!
//! # Convention
//!
//! Each e-mail has two files under `templates/`, embedded at build time:
//!
//! - `<name>.txt`: first line `Subject: …`, then a blank line, then the plain-text body.
//!   Rendered without escaping.
//! - `<name>.html`: the HTML body fragment, auto-escaped.
//!
//! Both bodies are then wrapped in a shared layout (`layout.txt`, `layout.html`) that
//! receives the rendered fragment as `content`, plus `subject` and `frontend_url`.
//! Every template sees the caller's context plus `frontend_url` (no trailing slash).
//! A variable missing from the context is an error (strict undefined), so a link can
//! never go out with a blank token; optional values are passed as `null`.
//! Links that carry a token are `{{ frontend_url }}/<path>?token={{ token|urlencode }}`.

use minijinja::{AutoEscape, Environment, Output, State, UndefinedBehavior, Value};

use super::MailError;

const LAYOUT_TEXT: &str = "layout.txt";
const LAYOUT_HTML: &str = "layout.html";

/// Declares the [`Template`] enum and embeds its files, named once here.
macro_rules! templates {
    ($($(#[$doc:meta])* $variant:ident => $name:literal,)*) => {
        /// A transactional e-mail of the specification.
        ///
        /// Each variant lists the context variables its template requires (besides
        /// `frontend_url`, which the [`Mailer`](super::Mailer) adds).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Template {
            $($(#[$doc])* $variant,)*
        }

        impl Template {
            /// Every template, for tests and checks.
            pub const ALL: &'static [Template] = &[$(Template::$variant,)*];

            /// The template whose file stem is `name`.
            pub fn from_name(name: &str) -> Option<Template> {
                Self::ALL.iter().copied().find(|t| t.name() == name)
            }

            /// File stem under `templates/`, also used in logs.
            pub fn name(self) -> &'static str {
                match self {
                    $(Template::$variant => $name,)*
                }
            }

            fn text_file(self) -> (&'static str, &'static str) {
                match self {
                    $(Template::$variant => (
                        concat!($name, ".txt"),
                        include_str!(concat!("templates/", $name, ".txt")),
                    ),)*
                }
            }

            fn html_file(self) -> (&'static str, &'static str) {
                match self {
                    $(Template::$variant => (
                        concat!($name, ".html"),
                        include_str!(concat!("templates/", $name, ".html")),
                    ),)*
                }
            }
        }
    };
}

templates! {
    /// Link to confirm an address. `name`, `token`.
    VerifyEmail => "verify_email",
    /// Link to choose a new password. `name`, `token`.
    PasswordReset => "password_reset",
    /// After verification, for a user without a role-specific welcome. `name`.
    WelcomeGeneric => "welcome_generic",
    /// After verification, for a company. `name`.
    WelcomeCompany => "welcome_company",
    /// After verification, for an expert. `name`.
    WelcomeExpert => "welcome_expert",
    /// Invitation to become an administrator. `invited_by`, `message` (nullable),
    /// `expires_at`, `token`.
    AdminInvitation => "admin_invitation",
    /// Company and expert are matched on a project. `name`, `project_title`,
    /// `project_id`, `counterpart_name`.
    MatchConfirmed => "match_confirmed",
    /// To the expert a company selected. `name`, `project_title`, `project_id`,
    /// `company_name`.
    ExpertSelected => "expert_selected",
    /// To an expert invited to apply. `name`, `project_title`, `project_id`,
    /// `company_name`.
    ExpertInvited => "expert_invited",
    /// To the company when an expert applies. `name`, `project_title`, `project_id`,
    /// `expert_name`, `proposed_budget`, `currency`.
    NewProposal => "new_proposal",
    /// Project validated by an administrator. `name`, `project_title`, `project_id`.
    ProjectApproved => "project_approved",
    /// Project refused by an administrator. `name`, `project_title`, `project_id`,
    /// `reason` (nullable).
    ProjectRejected => "project_rejected",
    /// To the company when a delivery is submitted. `name`, `project_title`,
    /// `project_id`, `milestone_title`, `expert_name`.
    MilestoneCompleted => "milestone_completed",
    /// To the expert when a delivery is approved. `name`, `project_title`,
    /// `project_id`, `milestone_title`, `feedback` (nullable).
    MilestoneApproved => "milestone_approved",
    /// To the expert when a delivery is rejected. `name`, `project_title`,
    /// `project_id`, `milestone_title`, `feedback` (nullable).
    MilestoneRejected => "milestone_rejected",
    /// To the company when it releases a payment. `name`, `project_title`,
    /// `project_id`, `milestone_title`, `amount`, `currency`.
    PaymentReleased => "payment_released",
    /// To the recipient of an invoice or credit note, with its PDF attached. `name`,
    /// `title` ("Invoice" or "Credit note"), `number`, `project_title`, `total`,
    /// `currency`, `invoice_id`.
    InvoiceIssued => "invoice_issued",
    /// To the expert when a payment is released to them. `name`, `project_title`,
    /// `project_id`, `milestone_title`, `amount`, `currency`.
    PaymentReceived => "payment_received",
    /// To the expert when the company's money is held in escrow. `name`, `project_title`,
    /// `project_id`, `milestone_title`, `amount`, `currency`.
    PaymentHeld => "payment_held",
    /// To the company when a payment is refunded. `name`, `project_title`,
    /// `project_id`, `milestone_title`, `amount`, `currency`.
    PaymentRefundedCompany => "payment_refunded_company",
    /// To the expert when a payment is refunded. `name`, `project_title`,
    /// `project_id`, `milestone_title`, `amount`, `currency`.
    PaymentRefundedExpert => "payment_refunded_expert",
    /// To the company when a payment fails. `name`, `project_title`, `project_id`,
    /// `milestone_title`, `amount`, `currency`.
    PaymentFailed => "payment_failed",
    /// To the expert when a payout reaches their bank. `name`, `amount`, `currency`.
    PayoutPaid => "payout_paid",
    /// To the expert when a payout fails. `name`, `amount`, `currency`,
    /// `reason` (nullable).
    PayoutFailed => "payout_failed",
    /// The next milestone's payment was created. `name`, `project_title`,
    /// `project_id`, `milestone_title`, `amount`, `currency`.
    MilestoneAwaitingPayment => "milestone_awaiting_payment",
    /// After completion, asks to review the counterpart. `name`, `project_title`,
    /// `project_id`, `counterpart_name`.
    ReviewRequest => "review_request",
    /// A review about the recipient was published. `name`, `project_title`,
    /// `project_id`, `reviewer_name`, `rating`.
    ReviewReceived => "review_received",
    /// To the administrators and the counterpart. `name`, `project_title`,
    /// `project_id`, `opened_by`, `reason`.
    DisputeCreated => "dispute_created",
    /// To the parties. `name`, `project_title`, `project_id`, `resolution`.
    DisputeResolved => "dispute_resolved",
    /// A chat message is waiting (its content is not sent). `name`, `project_title`,
    /// `project_id`, `sender_name`.
    NewChatMessage => "new_chat_message",
    /// Asks an expert to review their DAC7 data. `name`, `year`, `review_deadline`.
    Dac7ReviewRequest => "dac7_review_request",
    /// Operational alert to an administrator. `name`, `title`, `message`.
    AdminAlert => "admin_alert",
    /// To the company before a delivery is approved automatically. `name`, `project_title`,
    /// `project_id`, `milestone_title`, `expert_name`, `auto_approve_at`.
    DeliveryReviewReminder => "delivery_review_reminder",
    /// To the company while a milestone waits for its payment. `name`, `project_title`,
    /// `project_id`, `milestone_title`, `amount`, `currency`, `awaiting_since`,
    /// `release_after_days`.
    FundingReminder => "funding_reminder",
    /// An administrator reaches out to an inactive company. `name`.
    RecontactCompany => "recontact_company",
    /// An administrator set a new password; sessions were ended. `name`.
    PasswordChangedByAdmin => "password_changed_by_admin",
    /// To the previous address of an e-mail change, with the link that undoes it. `name`,
    /// `new_email`, `token`.
    EmailChanged => "email_changed",
    /// Wrong passwords spent the account's login budget; links to the reset request (no
    /// token). `name`, `wait` (how long sign-in is paused, in words).
    AccountLocked => "account_locked",
}

/// Subject line, plain text and HTML of one rendered e-mail.
#[derive(Clone, PartialEq, Eq)]
pub struct RenderedMail {
    /// Subject line, from the first line of the text template.
    pub subject: String,
    /// Plain-text body, layout included.
    pub text: String,
    /// HTML body, layout included.
    pub html: String,
}

/// Leaves the bodies out: they may contain tokens.
impl std::fmt::Debug for RenderedMail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RenderedMail")
            .field("subject", &self.subject)
            .finish_non_exhaustive()
    }
}

/// The template engine with every template loaded and checked.
pub(super) struct Renderer {
    env: Environment<'static>,
}

impl Renderer {
    /// Loads and compiles every template; a syntax error fails here, at start-up.
    pub(super) fn new() -> Result<Self, MailError> {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        env.set_auto_escape_callback(|name| {
            if name.ends_with(".html") {
                AutoEscape::Html
            } else {
                AutoEscape::None
            }
        });
        env.set_formatter(escape_html_text);
        // Block tags on their own line leave no blank line behind in the text bodies.
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.add_filter("urlencode", urlencode);

        let layouts = [
            (LAYOUT_TEXT, include_str!("templates/layout.txt")),
            (LAYOUT_HTML, include_str!("templates/layout.html")),
        ];
        let files = Template::ALL
            .iter()
            .flat_map(|template| [template.text_file(), template.html_file()]);
        for (name, source) in layouts.into_iter().chain(files) {
            env.add_template(name, source)
                .map_err(|error| template_error(name, &error))?;
        }
        Ok(Self { env })
    }

    /// Renders `template` with `context` (a JSON object, or null for none) plus
    /// `frontend_url`.
    pub(super) fn render(
        &self,
        template: Template,
        context: &serde_json::Value,
        frontend_url: &str,
    ) -> Result<RenderedMail, MailError> {
        let mut variables = match context {
            serde_json::Value::Object(variables) => variables.clone(),
            serde_json::Value::Null => serde_json::Map::new(),
            _ => {
                return Err(MailError::Template {
                    template: template.name().to_owned(),
                    reason: "the context must be a JSON object".to_owned(),
                });
            }
        };
        variables.insert("frontend_url".to_owned(), frontend_url.into());

        let (text_name, _) = template.text_file();
        let text = self.render_file(text_name, &variables)?;
        let (subject, text_body) = split_subject(&text).ok_or_else(|| MailError::Template {
            template: text_name.to_owned(),
            reason: "the first line must be a non-empty `Subject: …` followed by a blank line"
                .to_owned(),
        })?;

        let (html_name, _) = template.html_file();
        let html_body = self.render_file(html_name, &variables)?;

        let layout = minijinja::context! {
            subject => subject,
            frontend_url => frontend_url,
        };
        let text = self.render_file(
            LAYOUT_TEXT,
            minijinja::context! { content => text_body, ..layout.clone() },
        )?;
        // The fragment is already escaped: mark it safe so the layout does not escape it twice.
        let html = self.render_file(
            LAYOUT_HTML,
            minijinja::context! { content => Value::from_safe_string(html_body), ..layout },
        )?;
        Ok(RenderedMail {
            subject: subject.to_owned(),
            text,
            html,
        })
    }

    fn render_file<S: serde::Serialize>(
        &self,
        name: &str,
        context: S,
    ) -> Result<String, MailError> {
        self.env
            .get_template(name)
            .and_then(|template| template.render(context))
            .map_err(|error| template_error(name, &error))
    }
}

/// Escapes `& < > " '` in HTML templates; unlike minijinja's default it leaves `/`
/// alone, so links read `https://…` in the HTML source too.
fn escape_html_text(
    out: &mut Output,
    state: &State,
    value: &Value,
) -> Result<(), minijinja::Error> {
    if value.is_safe() || state.auto_escape() != AutoEscape::Html {
        return minijinja::escape_formatter(out, state, value);
    }
    let text = value.to_string();
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&#39;"),
            other => escaped.push(other),
        }
    }
    out.write_str(&escaped).map_err(minijinja::Error::from)
}

/// Splits `Subject: …\n\nbody` into subject and body.
fn split_subject(text: &str) -> Option<(&str, &str)> {
    let (first_line, rest) = text.split_once('\n')?;
    let subject = first_line.strip_prefix("Subject:")?.trim();
    let body = rest.strip_prefix('\n')?;
    (!subject.is_empty()).then_some((subject, body))
}

/// Names the failure and where it happened. minijinja's own text is left out: with
/// debug info it can quote context values, which may be tokens.
fn template_error(name: &str, error: &minijinja::Error) -> MailError {
    let location = match (error.name(), error.line()) {
        (Some(file), Some(line)) => format!(" at {file}:{line}"),
        _ => String::new(),
    };
    MailError::Template {
        template: name.to_owned(),
        reason: format!("{}{location}", error.kind()),
    }
}

/// Percent-encodes everything but RFC 3986 unreserved characters, for query values.
fn urlencode(value: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut encoded = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            encoded.push(char::from(byte));
        } else {
            encoded.push('%');
            encoded.push(char::from(HEX[usize::from(byte >> 4)]));
            encoded.push(char::from(HEX[usize::from(byte & 0x0F)]));
        }
    }
    encoded
}
