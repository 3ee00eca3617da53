//! A project's chat over REST: participants only (404 for anyone else), newest first with
//! scroll-back, the author's edits and deletions (administrators delete any), files typed by
//! their content and downloaded as attachments, read marks and unread counts.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json as j};

use crate::escrow::deal;
use crate::helpers::{Account, json};
use crate::market::{Market, code};

async fn post(m: &Market, who: &Account, project: i64, content: &str) -> reqwest::Response {
    m.send(
        who,
        Method::POST,
        &format!("/api/chat/{project}"),
        Some(j!({ "content": content })),
    )
    .await
}

async fn list(m: &Market, who: &Account, path: &str) -> Value {
    let r = m.send(who, Method::GET, path, None).await;
    assert_eq!(r.status(), StatusCode::OK, "{path}");
    json(r).await
}

async fn upload(
    m: &Market,
    who: &Account,
    project: i64,
    name: &str,
    bytes: &[u8],
) -> reqwest::Response {
    let boundary = "----chattestboundary0123456789";
    let mut body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(bytes);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    m.app
        .client
        .post(m.app.url(&format!("/api/chat/{project}/files")))
        .bearer_auth(&who.access_token)
        .header("Cookie", format!("csrf_token={}", who.csrf_token))
        .header("X-CSRF-Token", &who.csrf_token)
        .header(
            "Content-Type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(body)
        .send()
        .await
        .unwrap()
}

#[actix_web::test]
async fn only_the_parties_and_administrators_read_and_write() {
    let m = Market::open().await;
    let d = deal(&m, "talk", [100.0, 100.0, 100.0]).await;
    let outsider = m.expert("nosy").await;
    let path = format!("/api/chat/{}", d.project_id);

    let r = post(&m, &d.company, d.project_id, "Welcome aboard!").await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let first = json(r).await;
    assert_eq!(first["sender_id"], d.company.id);
    assert_eq!(first["content"], "Welcome aboard!");
    assert!(first["edited_at"].is_null() && first["deleted_at"].is_null());
    for text in ["Thanks", "Starting today", "Schema attached soon"] {
        assert_eq!(
            post(&m, &d.expert, d.project_id, text).await.status(),
            StatusCode::CREATED
        );
    }
    // Administrators mediate: they read and write too.
    let r = m
        .as_admin(Method::POST, &path, Some(&j!({"content": "Mediator here"})))
        .await;
    assert_eq!(r.status(), StatusCode::CREATED);

    // Anyone else: the chat does not exist.
    for r in [
        m.send(&outsider, Method::GET, &path, None).await,
        post(&m, &outsider, d.project_id, "Let me in").await,
        m.send(
            &outsider,
            Method::GET,
            &format!("{path}/messages/{}", first["id"]),
            None,
        )
        .await,
    ] {
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
    }
    assert_eq!(
        m.send(&d.company, Method::GET, "/api/chat/999999", None)
            .await
            .status(),
        StatusCode::NOT_FOUND
    );

    // Bounds of a message.
    for bad in [String::new(), "   ".into(), "x".repeat(5001)] {
        let r = post(&m, &d.company, d.project_id, &bad).await;
        assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    }
    assert_eq!(
        post(&m, &d.company, d.project_id, &"é".repeat(5000))
            .await
            .status(),
        StatusCode::CREATED
    );

    // Newest first, paginated, and `before_id` scrolls back.
    let page = list(&m, &d.company, &format!("{path}?size=2")).await;
    assert_eq!(page["total"], 6);
    assert_eq!(page["items"].as_array().unwrap().len(), 2);
    let newest = page["items"][0]["id"].as_i64().unwrap();
    let second = page["items"][1]["id"].as_i64().unwrap();
    assert!(newest > second);
    let older = list(&m, &d.company, &format!("{path}?before_id={second}")).await;
    assert_eq!(older["total"], 4);
    assert!(
        older["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["id"].as_i64().unwrap() < second)
    );
    assert_eq!(
        older["items"][3]["id"], first["id"],
        "the oldest comes last"
    );
}

#[actix_web::test]
async fn authors_edit_and_delete_and_administrators_delete_any() {
    let m = Market::open().await;
    let d = deal(&m, "edits", [100.0, 100.0, 100.0]).await;
    let id = json(post(&m, &d.expert, d.project_id, "Draft text").await).await["id"]
        .as_i64()
        .unwrap();
    let message = format!("/api/chat/{}/messages/{id}", d.project_id);

    let r = m
        .send(
            &d.company,
            Method::PUT,
            &message,
            Some(j!({"content": "Not mine"})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert_eq!(code(&json(r).await), "NOT_THE_AUTHOR");
    let r = m
        .send(
            &d.expert,
            Method::PUT,
            &message,
            Some(j!({"content": "Final text"})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let edited = json(r).await;
    assert_eq!(edited["content"], "Final text");
    assert!(edited["edited_at"].is_string());

    // The counterpart cannot delete it; the author can, and a tombstone keeps its place.
    let r = m.send(&d.company, Method::DELETE, &message, None).await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let r = m.send(&d.expert, Method::DELETE, &message, None).await;
    assert_eq!(r.status(), StatusCode::OK);
    let gone = json(m.send(&d.company, Method::GET, &message, None).await).await;
    assert_eq!(gone["content"], "");
    assert!(gone["deleted_at"].is_string());
    let r = m
        .send(
            &d.expert,
            Method::PUT,
            &message,
            Some(j!({"content": "Back"})),
        )
        .await;
    assert_eq!(code(&json(r).await), "MESSAGE_DELETED");

    // Administrators delete anyone's message.
    let other = json(post(&m, &d.company, d.project_id, "Rude words").await).await["id"]
        .as_i64()
        .unwrap();
    let r = m
        .as_admin(
            Method::DELETE,
            &format!("/api/chat/{}/messages/{other}", d.project_id),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        m.count(
            "SELECT COUNT(*) FROM chat_messages WHERE project_id = $1 AND deleted_at IS NOT NULL AND content = ''",
            d.project_id
        )
        .await,
        2
    );
}

#[actix_web::test]
async fn files_are_typed_by_content_and_downloaded_as_attachments_by_participants() {
    let m = Market::open().await;
    let d = deal(&m, "files", [100.0, 100.0, 100.0]).await;
    let outsider = m.company("peeker").await;
    let pdf = b"%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n".to_vec();
    let r = upload(&m, &d.expert, d.project_id, "schema <v1>.pdf", &pdf).await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let message = json(r).await;
    assert_eq!(message["file_type"], "application/pdf");
    let url = message["file_url"].as_str().unwrap().to_owned();

    let r = m.send(&d.company, Method::GET, &url, None).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["x-content-type-options"], "nosniff");
    assert!(
        r.headers()["content-disposition"]
            .to_str()
            .unwrap()
            .starts_with("attachment;")
    );
    assert_eq!(r.bytes().await.unwrap().as_ref(), pdf.as_slice());
    assert_eq!(
        m.send(&outsider, Method::GET, &url, None).await.status(),
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        upload(&m, &outsider, d.project_id, "x.pdf", &pdf)
            .await
            .status(),
        StatusCode::NOT_FOUND
    );
    // An executable named like a document is refused by its content.
    let exe = b"MZ\x90\x00\x03\x00\x00\x00\x04\x00\x00\x00\xff\xff".to_vec();
    assert_eq!(
        upload(&m, &d.expert, d.project_id, "invoice.pdf", &exe)
            .await
            .status(),
        StatusCode::UNSUPPORTED_MEDIA_TYPE
    );

    // A GIF named `invoice.html` is offered as a GIF, never as a page (probe D24).
    let r = upload(&m, &d.expert, d.project_id, "invoice.html", b"GIF89a<html>").await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let gif = json(r).await;
    assert_eq!(gif["file_name"], "invoice.html.gif");
    let r = m
        .send(
            &d.company,
            Method::GET,
            gif["file_url"].as_str().unwrap(),
            None,
        )
        .await;
    assert_eq!(r.headers()["content-type"], "image/gif");
    assert!(
        r.headers()["content-disposition"]
            .to_str()
            .unwrap()
            .ends_with("filename=\"invoice.html.gif\"")
    );

    // Deleting the message removes the file.
    let path = m
        .text(
            "SELECT file_path FROM chat_messages WHERE id = $1",
            message["id"].as_i64().unwrap(),
        )
        .await;
    let on_disk = m.app.state.settings.uploads_dir.join(&path);
    assert!(on_disk.exists());
    let r = m
        .send(
            &d.expert,
            Method::DELETE,
            &format!("/api/chat/{}/messages/{}", d.project_id, message["id"]),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert!(!on_disk.exists());
    assert_eq!(
        m.send(&d.company, Method::GET, &url, None).await.status(),
        StatusCode::NOT_FOUND
    );
}

#[actix_web::test]
async fn read_marks_count_what_others_wrote_and_never_move_back() {
    let m = Market::open().await;
    let d = deal(&m, "reads", [100.0, 100.0, 100.0]).await;
    let path = format!("/api/chat/{}", d.project_id);
    let mut ids = Vec::new();
    for text in ["one", "two", "three"] {
        ids.push(
            json(post(&m, &d.company, d.project_id, text).await).await["id"]
                .as_i64()
                .unwrap(),
        );
    }
    post(&m, &d.expert, d.project_id, "my own").await;
    assert_eq!(list(&m, &d.expert, &path).await["unread"], 3);
    assert_eq!(list(&m, &d.company, &path).await["unread"], 1);

    let mark_path = format!("{path}/mark-read");
    let mark = |up_to: Option<i64>| {
        let body = match up_to {
            Some(id) => j!({"up_to_message_id": id}),
            None => j!({}),
        };
        m.send(&d.expert, Method::POST, &mark_path, Some(body))
    };
    assert_eq!(json(mark(Some(ids[0])).await).await["unread"], 2);
    assert_eq!(json(mark(None).await).await["unread"], 0);
    assert_eq!(
        json(mark(Some(ids[0])).await).await["unread"],
        0,
        "never back"
    );
    let r = mark(Some(999_999)).await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
}

/// New-chat-message e-mails to `who` so far, after the outbox has delivered what is pending
/// and the mail sender has sent what that queued.
async fn chat_mails(m: &Market, who: &Account) -> Vec<String> {
    let _ = m.app.state.outbox.trigger().await;
    let _ = m.app.state.mail_sender.trigger().await;
    m.app
        .mails()
        .into_iter()
        .filter(|mail| mail.to.contains(&who.email) && mail.subject.starts_with("New message"))
        .map(|mail| mail.text)
        .collect()
}

#[actix_web::test]
async fn a_participant_away_from_the_room_gets_one_email_per_digest_window() {
    // Access tokens outlive the clock's jump past the window.
    let m = Market::open_with(&[
        ("CHAT_EMAIL_DIGEST_MINUTES", "15"),
        ("JWT_ACCESS_EXPIRE_MINUTES", "120"),
    ])
    .await;
    let d = deal(&m, "digest", [100.0, 100.0, 100.0]).await;
    let room = m
        .app
        .url(&format!(
            "/api/ws/chat/{}?token={}",
            d.project_id, d.company.access_token
        ))
        .replacen("http://", "ws://", 1);
    // The company is in the room; the expert is not.
    let (company_socket, _) = tokio_tungstenite::connect_async(room).await.unwrap();

    assert_eq!(
        post(&m, &d.company, d.project_id, "first").await.status(),
        201
    );
    let mails = chat_mails(&m, &d.expert).await;
    assert_eq!(mails.len(), 1, "the absent expert is told");
    assert!(mails[0].contains(&format!("/projects/{}/chat", d.project_id)));
    assert!(!mails[0].contains("first"), "the content stays in the chat");

    assert_eq!(
        post(&m, &d.company, d.project_id, "second").await.status(),
        201
    );
    assert_eq!(chat_mails(&m, &d.expert).await.len(), 1, "once per window");
    assert_eq!(
        post(&m, &d.expert, d.project_id, "answer").await.status(),
        201
    );
    assert_eq!(
        chat_mails(&m, &d.company).await.len(),
        0,
        "connected: no e-mail"
    );

    m.app.clock.advance(chrono::Duration::minutes(16));
    assert_eq!(
        post(&m, &d.company, d.project_id, "third").await.status(),
        201
    );
    assert_eq!(chat_mails(&m, &d.expert).await.len(), 2, "a new window");
    assert_eq!(
        m.count(
            "SELECT COUNT(*) FROM chat_email_digests WHERE project_id = $1",
            d.project_id
        )
        .await,
        1
    );

    // Once the company leaves the room, it is e-mailed too.
    drop(company_socket);
    let left = crate::helpers::wait_for(std::time::Duration::from_secs(5), || {
        (m.app
            .state
            .realtime
            .members(&marketplace::integrations::realtime::chat_room(
                d.project_id,
            ))
            == 0)
            .then_some(())
    })
    .await;
    assert!(left.is_some());
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(
        post(&m, &d.expert, d.project_id, "still there?")
            .await
            .status(),
        201
    );
    assert_eq!(chat_mails(&m, &d.company).await.len(), 1);
}
