//! One small world where every kind of object exists once, owned by one company: a project
//! with a selected expert (and another invited expert whose proposal lost), a funded milestone with a delivery, chat messages (text and file),
//! a dispute, a second finished project with a review, a document, a profile picture, an
//! admin team profile, an admin invitation, a webhook delivery and a notification. Built over
//! HTTP the way users build it (the e-mail confirmation and the finished project are set in
//! the database, as `market.rs` and `reviews.rs` do).

use reqwest::{Method, StatusCode};
use serde_json::{Value, json as j};

use crate::escrow::{connect, fund, payment, poll};
use crate::helpers::{Account, TestApp, json};
use crate::market::Market;

pub struct World {
    /// The company owning `project` and `finished_project`.
    pub owner: Account,
    /// The expert selected on both projects.
    pub participant: Account,
    /// An expert invited to `project` whose proposal was not selected.
    pub applicant: Account,
    /// A verified company and a verified expert with nothing to do with the owner's work.
    pub other_company: Account,
    pub other_expert: Account,
    /// A registered user with no profile, the subject of administrators' calls on accounts.
    pub bystander: Account,
    pub project: i64,
    pub application: i64,
    pub milestone: i64,
    pub payment: i64,
    pub payment_intent: String,
    pub delivery: i64,
    pub dispute: i64,
    /// A text message of the owner and a file the participant sent, in `project`'s chat.
    pub message: i64,
    pub file_message: i64,
    pub finished_project: i64,
    /// The owner's review of the participant on `finished_project`.
    pub review: i64,
    /// The participant's invoice to the owner (pending) for `finished_project`.
    pub invoice: i64,
    pub owner_profile: i64,
    pub owner_document: i64,
    pub owner_notification: i64,
    pub owner_webhook_delivery: i64,
    pub participant_slug: String,
    /// The file name of the participant's profile picture.
    pub participant_picture: String,
    pub team_slug: String,
    pub invitation: i64,
    /// A card the owner saved.
    pub owner_payment_method: String,
}

/// Texts of the owner's work no outsider may read anywhere: (what, text).
pub const DISPUTE_REASON: &str = "The first milestone is late and incomplete.";
pub const DELIVERY_NOTE: &str = "First part of the data platform, see the appendix";
pub const CHAT_TEXT: &str = "Welcome aboard, the staging keys are in the vault";
pub const VERIFICATION_NOTES: &str = "Deed checked against the registry, owner-only note";

/// The owner's fiscal data (its own tax id, unlike `market::FISCAL` every member shares).
pub fn owner_fiscal() -> Value {
    j!({"tax_id": "B87654321", "fiscal_name": "Owner Private Fiscal SL",
        "fiscal_address": "Calle Reservada 7", "fiscal_postal_code": "28002",
        "fiscal_city": "Madrid", "fiscal_country": "ES", "fiscal_type": "empresa"})
}

impl World {
    pub fn private_markers(&self) -> Vec<(&'static str, String)> {
        vec![
            ("payment intent", self.payment_intent.clone()),
            ("dispute reason", DISPUTE_REASON.into()),
            ("delivery", DELIVERY_NOTE.into()),
            ("chat message", CHAT_TEXT.into()),
            ("e-mail", self.owner.email.clone()),
            ("selected expert's e-mail", self.participant.email.clone()),
            ("tax id", "B87654321".into()),
            ("fiscal name", "Owner Private Fiscal SL".into()),
            ("verification notes", VERIFICATION_NOTES.into()),
        ]
    }
}

/// A multipart body with one `file` part (and optional text fields before it).
pub fn multipart(fields: &[(&str, &str)], filename: &str, bytes: &[u8]) -> (String, Vec<u8>) {
    let boundary = "----authzworldboundary0123456789";
    let mut body = Vec::new();
    for (name, value) in fields {
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
            )
            .as_bytes(),
        );
    }
    body.extend_from_slice(
        format!("--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{filename}\"\r\nContent-Type: application/octet-stream\r\n\r\n")
            .as_bytes(),
    );
    body.extend_from_slice(bytes);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

pub const PDF: &[u8] = b"%PDF-1.7\n1 0 obj << >> endobj\n%%EOF\n";

/// A small PNG.
pub fn png() -> Vec<u8> {
    let img = image::RgbImage::from_pixel(8, 8, image::Rgb([200, 30, 30]));
    let mut out = std::io::Cursor::new(Vec::new());
    img.write_to(&mut out, image::ImageFormat::Png).unwrap();
    out.into_inner()
}

/// Posts a multipart body as `who` (bearer, CSRF cookie and header).
pub async fn upload(
    app: &TestApp,
    who: &Account,
    path: &str,
    (content_type, body): (String, Vec<u8>),
) -> reqwest::Response {
    app.client
        .post(app.url(path))
        .bearer_auth(&who.access_token)
        .header("Cookie", format!("csrf_token={}", who.csrf_token))
        .header("X-CSRF-Token", &who.csrf_token)
        .header("Content-Type", content_type)
        .body(body)
        .send()
        .await
        .expect("request")
}

async fn created(response: reqwest::Response, what: &str) -> Value {
    let status = response.status();
    let body = json(response).await;
    assert!(status.is_success(), "{what}: {status} {body}");
    body
}

fn id(value: &Value, what: &str) -> i64 {
    value["id"]
        .as_i64()
        .unwrap_or_else(|| panic!("{what} has no id: {value}"))
}

/// Builds the world in `m` (opened with `WEBHOOK_ALLOW_PRIVATE_TARGETS=true`).
pub async fn build(m: &Market) -> World {
    let owner = m.company("ownco").await;
    let participant = m.expert("ownex").await;
    let applicant = m.expert("appex").await;
    let project = m
        .published_project(&owner, 300.0, &[&participant, &applicant])
        .await;
    for expert in [&participant, &applicant] {
        let r = m.apply(expert, project, [100.0, 100.0, 100.0]).await;
        created(r, "proposal").await;
    }
    let r = m
        .send(
            &owner,
            Method::POST,
            &format!("/api/projects/{project}/select/{}", participant.id),
            None,
        )
        .await;
    let first_payment = created(r, "selection").await["payment"]["id"]
        .as_i64()
        .unwrap();
    let other_company = m.company("otherco").await;
    let other_expert = m.expert("otherex").await;
    let bystander = m.member("bystander", "empresa", false, false).await;

    // The owner's webhook points at a closed port: every later event of theirs leaves a
    // delivery in their log.
    let r = m
        .send(
            &owner,
            Method::PUT,
            "/api/users/me/webhook",
            Some(j!({"url": "https://127.0.0.1:9/hook", "enabled": true, "auth_method": "none"})),
        )
        .await;
    created(r, "owner's webhook").await;

    connect(m, &participant).await;
    let held = fund(m, &owner, first_payment).await;
    let milestone = held["milestone_id"].as_i64().unwrap();
    let payment_intent = payment(m, first_payment).await["processor_payment_intent_id"]
        .as_str()
        .unwrap()
        .to_owned();

    let r = m
        .send(
            &participant,
            Method::POST,
            "/api/milestones/deliveries/",
            Some(j!({"milestone_id": milestone, "description": DELIVERY_NOTE})),
        )
        .await;
    let delivery = id(&created(r, "delivery").await, "delivery");

    let r = m
        .send(
            &participant,
            Method::GET,
            &format!("/api/projects/{project}/my-application"),
            None,
        )
        .await;
    let application = id(&created(r, "application").await, "application");

    let r = m
        .send(
            &owner,
            Method::POST,
            &format!("/api/chat/{project}"),
            Some(j!({"content": CHAT_TEXT})),
        )
        .await;
    let message = id(&created(r, "chat message").await, "chat message");
    let r = upload(
        &m.app,
        &participant,
        &format!("/api/chat/{project}/files"),
        multipart(&[], "plan.pdf", PDF),
    )
    .await;
    let file_message = id(&created(r, "chat file").await, "chat file");

    let r = m
        .send(
            &owner,
            Method::POST,
            &format!("/api/projects/{project}/dispute"),
            Some(j!({"reason": DISPUTE_REASON})),
        )
        .await;
    let dispute = created(r, "dispute").await["dispute_id"].as_i64().unwrap();

    // A second project of the same pair, finished, with the owner's review of the expert.
    let finished_project = m.published_project(&owner, 300.0, &[&participant]).await;
    assert_eq!(
        m.apply(&participant, finished_project, [100.0, 100.0, 100.0])
            .await
            .status(),
        StatusCode::CREATED
    );
    let r = m
        .send(
            &owner,
            Method::POST,
            &format!("/api/projects/{finished_project}/select/{}", participant.id),
            None,
        )
        .await;
    let finished_payment = created(r, "second selection").await["payment"]["id"]
        .as_i64()
        .expect("the finished project's first payment");
    {
        let mut conn = m.app.db.conn().await.unwrap();
        let now = m.app.state.clock.now();
        marketplace::on_exec!(conn.exec(), c => sqlx::query(
            "UPDATE projects SET status = 'completed', completed_at = $1 WHERE id = $2")
            .bind(now).bind(finished_project).execute(c).await.map(drop))
        .unwrap();
    }
    let r = m
        .send(
            &owner,
            Method::POST,
            "/api/reviews",
            Some(
                j!({"project_id": finished_project, "reviewee_id": participant.id,
                     "rating": 5, "comment": "Clear work, delivered on time."}),
            ),
        )
        .await;
    let review = id(&created(r, "review").await, "review");
    // The participant's invoice to the owner for that project's first milestone, as a
    // release leaves it while a party's fiscal data is incomplete.
    let invoice = {
        let mut conn = m.app.db.conn().await.unwrap();
        marketplace::store::invoices::insert_pending(
            conn.exec(),
            &marketplace::store::invoices::NewDocument {
                doc_kind: marketplace::domain::invoice::DocumentKind::Invoice,
                role: marketplace::domain::invoice::InvoiceRole::ExpertService,
                payment_id: finished_payment,
                project_id: finished_project,
                milestone_id: None,
                corrects_id: None,
                issuer_user_id: Some(participant.id),
                recipient_user_id: owner.id,
                issuer_key: &format!("expert:{}", participant.id),
                currency: "eur",
                payable_minor: 10_000,
            },
            m.app.state.clock.now(),
        )
        .await
        .unwrap()
    };

    let r = m.send(&owner, Method::GET, "/api/profiles/me", None).await;
    let owner_profile = id(&created(r, "owner's profile").await, "owner's profile");
    let r = m
        .send(
            &owner,
            Method::PUT,
            &format!("/api/profiles/{owner_profile}/fiscal-data"),
            Some(owner_fiscal()),
        )
        .await;
    created(r, "owner's fiscal data").await;
    let r = m
        .as_admin(
            Method::PUT,
            &format!("/api/admin/users/{}/verify", owner.id),
            Some(&j!({ "notes": VERIFICATION_NOTES })),
        )
        .await;
    created(r, "owner's verification notes").await;
    let r = upload(
        &m.app,
        &owner,
        "/api/profiles/upload",
        multipart(&[("kind", "verification")], "deed.pdf", PDF),
    )
    .await;
    let owner_document = id(&created(r, "document").await, "document");

    let r = m
        .send(&participant, Method::GET, "/api/profiles/me", None)
        .await;
    let participant_slug = created(r, "participant's profile").await["slug"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = upload(
        &m.app,
        &participant,
        "/api/profiles/me/picture",
        multipart(&[], "me.png", &png()),
    )
    .await;
    let picture = created(r, "picture").await["profile_picture"]
        .as_str()
        .unwrap()
        .to_owned();
    let participant_picture = picture.rsplit('/').next().unwrap().to_owned();

    let r = m
        .as_admin(
            Method::POST,
            "/api/profiles/admin/me",
            Some(&j!({"full_name": "Root", "is_visible_in_team": true})),
        )
        .await;
    let team_slug = created(r, "team profile").await["slug"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = m
        .as_admin(
            Method::POST,
            "/api/admin/invitations",
            Some(&j!({"email": "newadmin@example.com"})),
        )
        .await;
    let invitation = id(&created(r, "invitation").await, "invitation");

    let r = m
        .send(
            &owner,
            Method::POST,
            "/api/payments/attach-method",
            Some(j!({"payment_method_id": "pm_card_visa"})),
        )
        .await;
    created(r, "saved card").await;
    let r = m
        .send(&owner, Method::GET, "/api/payments/saved-methods", None)
        .await;
    let saved = created(r, "saved cards").await;
    let owner_payment_method = saved
        .as_array()
        .or_else(|| saved["items"].as_array())
        .or_else(|| saved["payment_methods"].as_array())
        .and_then(|list| list.first())
        .and_then(|card| card["id"].as_str())
        .unwrap_or_else(|| panic!("a saved card: {saved}"))
        .to_owned();

    let owner_notification = poll(m, "a notification of the owner", || async {
        let r = m
            .send(&owner, Method::GET, "/api/notifications", None)
            .await;
        json(r).await["items"][0]["id"].as_i64()
    })
    .await;
    let owner_webhook_delivery = poll(m, "a webhook delivery of the owner", || async {
        let r = m
            .send(
                &owner,
                Method::GET,
                "/api/users/me/webhook/deliveries",
                None,
            )
            .await;
        json(r).await["items"][0]["id"].as_i64()
    })
    .await;

    World {
        owner,
        participant,
        applicant,
        other_company,
        other_expert,
        bystander,
        project,
        application,
        milestone,
        payment: first_payment,
        payment_intent,
        delivery,
        dispute,
        message,
        file_message,
        finished_project,
        review,
        invoice,
        owner_profile,
        owner_document,
        owner_notification,
        owner_webhook_delivery,
        participant_slug,
        participant_picture,
        team_slug,
        invitation,
        owner_payment_method,
    }
}
