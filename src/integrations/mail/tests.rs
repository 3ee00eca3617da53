//! Templates, the mailer and the file outbox round trip.

use std::path::Path;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use super::outbox_reader::{self, ReceivedMail};
use super::{Email, FileOutbox, MailError, MailTransport, Mailer, Template};

const FRONTEND: &str = "https://app.example.com";
const FROM: &str = "Marketplace <no-reply@example.com>";
const SCRIPT: &str = "<script>alert('x')</script>";

/// A realistic context for each template; `person` fills every user-supplied name.
fn sample_context(template: Template, person: &str) -> Value {
    let project = json!({
        "name": person,
        "project_title": "Data platform migration",
        "project_id": 42,
    });
    let extra = match template {
        Template::VerifyEmail | Template::PasswordReset => {
            return json!({ "name": person, "token": "Zk3-_q9XmP0vYtR2" });
        }
        Template::WelcomeGeneric
        | Template::WelcomeCompany
        | Template::WelcomeExpert
        | Template::RecontactCompany
        | Template::PasswordChangedByAdmin => {
            return json!({ "name": person });
        }
        Template::AccountLocked => return json!({ "name": person, "wait": "1 minute" }),
        Template::EmailChanged => {
            return json!({
                "name": person,
                "new_email": "new-address@example.com",
                "token": "Zk3-_q9XmP0vYtR2",
            });
        }
        Template::AdminInvitation => {
            return json!({
                "invited_by": person,
                "message": "Welcome aboard, we need help with moderation.",
                "expires_at": "2025-07-01 12:00 UTC",
                "token": "inv-_token-0123456789",
            });
        }
        Template::MatchConfirmed | Template::ReviewRequest => {
            json!({ "counterpart_name": person })
        }
        Template::ExpertSelected | Template::ExpertInvited => json!({ "company_name": person }),
        Template::NewProposal => json!({
            "expert_name": person,
            "proposed_budget": "4,500.00",
            "currency": "eur",
        }),
        Template::InvoiceIssued => {
            return json!({
                "name": person,
                "project_title": "Data platform migration",
                "title": "Invoice",
                "number": "EXP7-F-2026-000001",
                "total": "1,210.00",
                "currency": "eur",
                "invoice_id": 9,
            });
        }
        Template::ProjectApproved => json!({}),
        Template::ProjectRejected => json!({ "reason": "The budget is missing." }),
        Template::MilestoneCompleted => json!({
            "milestone_title": "Schema design",
            "expert_name": person,
        }),
        Template::MilestoneApproved | Template::MilestoneRejected => json!({
            "milestone_title": "Schema design",
            "feedback": null,
        }),
        Template::PaymentReleased
        | Template::PaymentReceived
        | Template::PaymentHeld
        | Template::PaymentRefundedCompany
        | Template::PaymentRefundedExpert
        | Template::PaymentFailed
        | Template::MilestoneAwaitingPayment => json!({
            "milestone_title": "Schema design",
            "amount": "1,250.00",
            "currency": "eur",
        }),
        Template::PayoutPaid => {
            return json!({ "name": person, "amount": "1,187.50", "currency": "eur" });
        }
        Template::PayoutFailed => {
            return json!({
                "name": person,
                "amount": "1,187.50",
                "currency": "eur",
                "reason": "account_closed",
            });
        }
        Template::ReviewReceived => json!({ "reviewer_name": person, "rating": 5 }),
        Template::DisputeCreated => json!({
            "opened_by": person,
            "reason": "The delivery does not match the agreed scope.",
        }),
        Template::DisputeResolved => json!({ "resolution": "Refunded half of the milestone." }),
        Template::NewChatMessage => json!({ "sender_name": person }),
        Template::Dac7ReviewRequest => {
            return json!({ "name": person, "year": 2024, "review_deadline": "2025-01-31" });
        }
        Template::DeliveryReviewReminder => json!({
            "milestone_title": "Schema design",
            "expert_name": person,
            "auto_approve_at": "2025-03-14 09:30 UTC",
        }),
        Template::FundingReminder => json!({
            "milestone_title": "Schema design",
            "amount": "1,250.00",
            "currency": "eur",
            "awaiting_since": "2025-03-01 09:30 UTC",
            "release_after_days": 14,
        }),
        Template::AdminAlert => {
            return json!({
                "name": person,
                "title": "Transfer failed",
                "message": "The transfer of payment 17 failed; milestone 5 has no held payment.",
            });
        }
    };
    merge(project, extra)
}

fn merge(mut base: Value, extra: Value) -> Value {
    if let (Some(base), Value::Object(extra)) = (base.as_object_mut(), extra) {
        base.extend(extra);
    }
    base
}

/// Keeps every message handed to it.
#[derive(Default)]
struct RecordingTransport {
    sent: Mutex<Vec<(String, Email)>>,
}

#[async_trait::async_trait]
impl MailTransport for RecordingTransport {
    async fn send(&self, from: &str, email: &Email) -> Result<(), MailError> {
        self.sent
            .lock()
            .expect("lock")
            .push((from.to_owned(), email.clone()));
        Ok(())
    }
}

fn mailer_with(transport: Arc<dyn MailTransport>) -> Mailer {
    Mailer::new(transport, FROM.to_owned(), format!("{FRONTEND}/")).expect("mailer")
}

fn mailer() -> Mailer {
    mailer_with(Arc::new(RecordingTransport::default()))
}

fn outbox_email(to: &str, subject: &str, text: &str, html: Option<&str>) -> Email {
    Email {
        to: to.to_owned(),
        subject: subject.to_owned(),
        text: text.to_owned(),
        html: html.map(str::to_owned),
        idempotency_key: None,
        attachments: Vec::new(),
    }
}

async fn write_to_outbox(dir: &Path, emails: &[Email]) {
    let outbox = FileOutbox::new(dir);
    for email in emails {
        outbox.send(FROM, email).await.expect("written");
    }
}

#[test]
fn every_template_renders_with_a_realistic_context() {
    let mailer = mailer();
    assert_eq!(Template::ALL.len(), 38);
    for &template in Template::ALL {
        let rendered = mailer
            .render(template, &sample_context(template, "Ana García"))
            .unwrap_or_else(|error| panic!("{}: {error}", template.name()));
        assert!(!rendered.subject.trim().is_empty(), "{}", template.name());
        assert!(!rendered.text.trim().is_empty(), "{}", template.name());
        assert!(rendered.html.contains("</html>"), "{}", template.name());
        for output in [&rendered.subject, &rendered.text, &rendered.html] {
            assert!(
                !output.contains("{{") && !output.contains("{%"),
                "{}",
                template.name()
            );
        }
        // The shared layouts wrap every body.
        assert!(
            rendered
                .text
                .ends_with(&format!("The Marketplace team\n{FRONTEND}"))
        );
        let title = format!("<title>{}</title>", rendered.subject);
        assert!(rendered.html.contains(&title), "{}", template.name());
    }
}

#[test]
fn html_escapes_user_supplied_text_and_plain_text_does_not() {
    let mailer = mailer();
    for &template in Template::ALL {
        let rendered = mailer
            .render(template, &sample_context(template, SCRIPT))
            .expect("rendered");
        assert!(!rendered.html.contains("<script>"), "{}", template.name());
        assert!(
            rendered.html.contains("&lt;script&gt;"),
            "{}",
            template.name()
        );
        assert!(rendered.text.contains(SCRIPT), "{}", template.name());
    }
}

#[test]
fn every_context_variable_is_required() {
    let mailer = mailer();
    for &template in Template::ALL {
        let context = sample_context(template, "Ana");
        let Value::Object(variables) = &context else {
            panic!("sample contexts are objects");
        };
        for missing in variables.keys() {
            let mut partial = variables.clone();
            partial.remove(missing);
            let result = mailer.render(template, &Value::Object(partial));
            assert!(
                matches!(result, Err(MailError::Template { .. })),
                "{} rendered without `{missing}`",
                template.name()
            );
        }
    }
}

#[test]
fn a_missing_token_is_an_error_that_reveals_no_context_value() {
    let context = json!({ "token": "very-secret-token" });
    let error = mailer()
        .render(Template::VerifyEmail, &context)
        .expect_err("`name` is missing");
    let text = error.to_string();
    assert!(matches!(error, MailError::Template { .. }), "{text}");
    assert!(text.contains("verify_email"), "{text}");
    assert!(!text.contains("very-secret-token"), "{text}");
}

#[test]
fn the_context_must_be_an_object() {
    let result = mailer().render(Template::WelcomeGeneric, &json!(["Ana"]));
    assert!(matches!(result, Err(MailError::Template { .. })));
}

#[test]
fn links_carry_the_token_under_the_frontend_url() {
    let mailer = mailer();
    let cases = [
        (Template::VerifyEmail, "/verify-email"),
        (Template::PasswordReset, "/reset-password"),
        (Template::AdminInvitation, "/accept-invitation"),
        (Template::EmailChanged, "/undo-email-change"),
    ];
    for (template, path) in cases {
        let mut context = sample_context(template, "Ana");
        context["token"] = json!("tok-_EN.~123");
        let rendered = mailer.render(template, &context).expect("rendered");
        let link = format!("{FRONTEND}{path}?token=tok-_EN.~123");
        assert!(
            rendered.text.contains(&format!("\n{link}\n")),
            "{}",
            rendered.text
        );
        assert!(
            rendered.html.contains(&format!("href=\"{link}\"")),
            "{}",
            rendered.html
        );
    }
}

#[test]
fn tokens_are_percent_encoded_in_links() {
    let mut context = sample_context(Template::PasswordReset, "Ana");
    context["token"] = json!("a+b/c=d&e");
    let rendered = mailer()
        .render(Template::PasswordReset, &context)
        .expect("rendered");
    assert!(
        rendered.text.contains("?token=a%2Bb%2Fc%3Dd%26e\n"),
        "{}",
        rendered.text
    );
}

#[test]
fn optional_values_appear_only_when_given() {
    let mailer = mailer();
    let mut context = sample_context(Template::AdminInvitation, "Ana");
    let with_message = mailer
        .render(Template::AdminInvitation, &context)
        .expect("rendered");
    assert!(with_message.text.contains("Their message:\nWelcome aboard"));
    context["message"] = Value::Null;
    let without = mailer
        .render(Template::AdminInvitation, &context)
        .expect("rendered");
    assert!(!without.text.contains("Their message"));
    assert!(!without.text.contains("\n\n\n"), "{}", without.text);
}

#[test]
fn mailer_checks_its_configuration() {
    let transport: Arc<dyn MailTransport> = Arc::new(RecordingTransport::default());
    let bad_from = Mailer::new(transport.clone(), "not an address".into(), FRONTEND.into());
    assert!(matches!(
        bad_from,
        Err(MailError::InvalidAddress { field: "from", .. })
    ));
    for url in ["app.example.com", "ftp://app.example.com"] {
        let bad_url = Mailer::new(transport.clone(), FROM.into(), url.into());
        assert!(matches!(bad_url, Err(MailError::Config(_))), "{url}");
    }
    let mailer = Mailer::new(transport, FROM.into(), format!("{FRONTEND}//")).expect("mailer");
    assert_eq!(mailer.frontend_url(), FRONTEND);
}

#[tokio::test]
async fn mailer_sends_the_rendered_mail_through_its_transport() {
    let transport = Arc::new(RecordingTransport::default());
    let mailer = mailer_with(transport.clone());
    let context = sample_context(Template::PasswordReset, "Ana");
    mailer
        .send("ana@example.com", Template::PasswordReset, context.clone())
        .await
        .expect("sent");

    let rendered = mailer
        .render(Template::PasswordReset, &context)
        .expect("rendered");
    let sent = transport.sent.lock().expect("lock");
    let [(from, email)] = sent.as_slice() else {
        panic!("expected one message, got {}", sent.len());
    };
    assert_eq!(from, FROM);
    assert_eq!(email.to, "ana@example.com");
    assert_eq!(email.subject, rendered.subject);
    assert_eq!(email.text, rendered.text);
    assert_eq!(email.html.as_deref(), Some(rendered.html.as_str()));
}

#[test]
fn debug_output_leaves_bodies_out() {
    let email = outbox_email(
        "ana@example.com",
        "Reset",
        "token=secret",
        Some("token=secret"),
    );
    assert!(!format!("{email:?}").contains("secret"));
    let rendered = mailer()
        .render(
            Template::VerifyEmail,
            &sample_context(Template::VerifyEmail, "Ana"),
        )
        .expect("rendered");
    assert!(!format!("{rendered:?}").contains("Zk3-_q9XmP0vYtR2"));
}

#[tokio::test]
async fn file_outbox_round_trips_through_the_reader() {
    let dir = tempfile::tempdir().expect("tempdir");
    let outbox_dir = dir.path().join("outbox");
    let long_token: String = "AbC-_09xyz".repeat(25);
    let emails = [
        outbox_email(
            "ana@example.com",
            "Confirm your e-mail address",
            "Hello Ana,\n\nhttps://app.example.com/verify-email?token=abc-_DEF-_123\n\nBye",
            Some(
                "<p>Hello Ana,</p>\n<a href=\"https://app.example.com/verify-email?token=abc-_DEF-_123\">x</a>",
            ),
        ),
        outbox_email(
            "Bruno Díaz <bruno@example.com>",
            &format!(
                "Café, ñandú y 東京 — a subject long enough to be folded by the writer {}",
                "x".repeat(40)
            ),
            &format!(
                "Línea con acentos: àéîõü — and a very long line that must be soft-wrapped by quoted-printable encoding {}\n\
                 {FRONTEND}/reset-password?token={long_token}\n   trailing spaces   \n= equals = signs =\n",
                "y".repeat(120)
            ),
            None,
        ),
        outbox_email("carla@example.com", "Plain", "No link here.", None),
    ];
    write_to_outbox(&outbox_dir, &emails).await;

    let received = outbox_reader::read_all(&outbox_dir);
    assert_eq!(received.len(), 3);
    for (email, mail) in emails.iter().zip(&received) {
        assert!(mail.file_name.ends_with(".eml"));
        assert_eq!(mail.from, FROM);
        assert_eq!(mail.subject, email.subject);
        assert_eq!(mail.text, email.text);
        assert_eq!(mail.html, email.html);
    }
    assert_eq!(received[0].to, "ana@example.com");
    assert_eq!(received[1].to, "bruno@example.com");
    assert_eq!(received[0].token().as_deref(), Some("abc-_DEF-_123"));
    assert_eq!(received[1].token(), Some(long_token));
    assert_eq!(received[2].token(), None);

    // Nothing but the finished messages is left in the directory.
    let names: Vec<String> = std::fs::read_dir(&outbox_dir)
        .expect("dir")
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(names.len(), 3);
    assert!(names.iter().all(|name| name.ends_with(".eml")), "{names:?}");
}

#[tokio::test]
async fn file_outbox_names_sort_by_time_and_never_collide() {
    let dir = tempfile::tempdir().expect("tempdir");
    let outbox = Arc::new(FileOutbox::new(dir.path()));
    let sends = (0..20).map(|i| {
        let outbox = outbox.clone();
        tokio::spawn(async move {
            let email = outbox_email("ana@example.com", &format!("Message {i}"), "Body", None);
            outbox.send(FROM, &email).await
        })
    });
    for send in futures_util::future::join_all(sends).await {
        send.expect("task").expect("sent");
    }
    assert_eq!(outbox_reader::read_all(dir.path()).len(), 20);

    let later = outbox_email("ana@example.com", "Latest", "Body", None);
    outbox.send(FROM, &later).await.expect("sent");
    let received = outbox_reader::read_all(dir.path());
    assert_eq!(
        received.last().map(|mail| mail.subject.as_str()),
        Some("Latest")
    );
}

#[tokio::test]
async fn mailer_and_file_outbox_deliver_a_followable_link() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mailer = mailer_with(Arc::new(FileOutbox::new(dir.path())));
    let token = "Qm9vdHN0cmFw-_".repeat(6);
    let mut context = sample_context(Template::VerifyEmail, "Ana <Admin>");
    context["token"] = json!(token);
    mailer
        .send("ana@example.com", Template::VerifyEmail, context)
        .await
        .expect("sent");

    let [mail]: [ReceivedMail; 1] = outbox_reader::read_all(dir.path())
        .try_into()
        .expect("one message");
    assert_eq!(mail.to, "ana@example.com");
    assert_eq!(mail.subject, "Confirm your e-mail address");
    assert!(
        mail.text.starts_with("Hello Ana <Admin>,\n"),
        "{}",
        mail.text
    );
    assert_eq!(mail.token(), Some(token));
    assert!(
        mail.html
            .is_some_and(|html| html.contains("Hello Ana &lt;Admin&gt;,"))
    );
}

#[test]
fn reader_finds_nothing_in_a_missing_directory() {
    assert!(outbox_reader::read_all(Path::new("/nonexistent/outbox")).is_empty());
}

#[test]
fn reader_decodes_base64_parts_and_q_encoded_words() {
    let raw = "From: a@example.com\r\nTo: b@example.com\r\nSubject: =?utf-8?q?Caf=C3=A9_au?=\r\n =?utf-8?b?IGxhaXQ=?=\r\n\
               MIME-Version: 1.0\r\nContent-Type: multipart/alternative; boundary=\"XYZ\"\r\n\r\n\
               --XYZ\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: base64\r\n\r\n\
               aHR0cHM6Ly94L3Jlc2V0P3Rva2VuPWFi\r\nYy1fZA==\r\n--XYZ--\r\n";
    let mail = outbox_reader::parse(raw);
    assert_eq!(mail.subject, "Café au lait");
    assert_eq!(mail.text, "https://x/reset?token=abc-_d");
    assert_eq!(mail.token().as_deref(), Some("abc-_d"));
    assert_eq!(mail.html, None);
}
