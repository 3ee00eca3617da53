//! E-mail over SMTP (`SMTP_URL`): the service talks to a server speaking the protocol on a
//! local port ([`SmtpServer`]), which records every message and every connection.

use std::time::Duration;

use marketplace::integrations::mail::outbox_reader;

use crate::helpers::{admin, register, request_as, spawn_app_with, wait_for};
use crate::smtp_server::SmtpServer;

/// Waits up to five seconds for `count` messages at `server`.
async fn wait_for_messages(server: &SmtpServer, count: usize) {
    wait_for(Duration::from_secs(5), || {
        let n = server.delivered().try_lock().map(|d| d.len()).unwrap_or(0);
        (n >= count).then_some(())
    })
    .await
    .unwrap_or_else(|| panic!("expected {count} message(s) over SMTP"));
}

#[actix_web::test]
async fn e_mail_leaves_over_smtp_and_later_messages_reuse_the_connection() {
    let (server, port) = SmtpServer::start().await;
    let app = spawn_app_with(&[("SMTP_URL", &format!("smtp://127.0.0.1:{port}"))]).await;

    // Each registration's confirmation e-mail leaves through the mail queue, its token made as
    // it is sent.
    for (n, username) in ["smtp_ana", "smtp_ben", "smtp_cleo"].iter().enumerate() {
        register(&app, username, &["experto"]).await;
        wait_for_messages(&server, n + 1).await;
    }

    let delivered = server.delivered().lock().await;
    let recipients: Vec<&[String]> = delivered.iter().map(|d| d.recipients.as_slice()).collect();
    assert_eq!(
        recipients,
        [
            ["smtp_ana@example.com"],
            ["smtp_ben@example.com"],
            ["smtp_cleo@example.com"]
        ]
    );
    for d in delivered.iter() {
        let mail = outbox_reader::parse(&d.raw);
        assert!(mail.to.contains(&d.recipients[0]), "{}", mail.to);
        assert_eq!(mail.subject, "Confirm your e-mail address");
        assert!(mail.token().is_some(), "{}", mail.text);
    }
    // Messages sent one after the other share one connection: no new connection, greeting
    // and EHLO for each.
    assert_eq!(server.connections(), 1);
    assert!(
        app.mails().is_empty(),
        "with SMTP configured nothing is written to the file outbox"
    );
    drop(delivered);
    app.stop().await;
}

/// The queue's row for the message to `recipient`, and whether its event was dispatched:
/// `(attempts, last error, sent, event dispatched)`.
async fn queued_for(
    app: &crate::helpers::TestApp,
    recipient: &str,
) -> Option<(i64, Option<String>, bool, bool)> {
    let mut conn = app.db.conn().await.unwrap();
    marketplace::on_exec!(conn.exec(), c => sqlx::query_as(
        "SELECT q.attempts, q.last_error, q.sent_at IS NOT NULL, e.dispatched_at IS NOT NULL
         FROM mail_queue q JOIN events e ON e.id = q.event_id WHERE q.recipient = $1")
        .bind(recipient).fetch_optional(c).await)
    .unwrap()
}

/// Polls [`queued_for`] (10 ms apart, five seconds at most) until `done` holds.
async fn wait_queued(
    app: &crate::helpers::TestApp,
    recipient: &str,
    done: impl Fn(&(i64, Option<String>, bool, bool)) -> bool,
) -> (i64, Option<String>, bool, bool) {
    for _ in 0..500 {
        if let Some(row) = queued_for(app, recipient).await.filter(|row| done(row)) {
            return row;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "the message to {recipient} never got there: {:?}",
        queued_for(app, recipient).await
    );
}

/// An administrator sets `user_id`'s password: the user is told by e-mail, through the outbox.
async fn password_set_by_admin(app: &crate::helpers::TestApp, admin_token: &str, user_id: i64) {
    let path = format!("/api/admin/users/{user_id}/change-password");
    let body = serde_json::json!({"new_password": "N3w-Secret!"});
    let r = request_as(app, reqwest::Method::PUT, &path, admin_token, Some(&body)).await;
    assert_eq!(r.status(), 200);
}

#[actix_web::test]
async fn a_refused_message_is_sent_again_later_and_holds_back_nothing_else() {
    let (server, port) = SmtpServer::start().await;
    let app = spawn_app_with(&[("SMTP_URL", &format!("smtp://127.0.0.1:{port}"))]).await;
    let (_, admin_token) = admin(&app, "smtp_root").await;
    let dora = register(&app, "smtp_dora", &["experto"]).await;
    let eli = register(&app, "smtp_eli", &["experto"]).await;
    server.refuse_mail_to(Some("smtp_dora@example.com"));

    password_set_by_admin(&app, &admin_token, dora.id).await;
    // The server refused it: the message waits for its retry, and its event is dispatched
    // all the same (notifications and webhooks do not wait for e-mail).
    let (attempts, error, sent, _) =
        wait_queued(&app, "smtp_dora@example.com", |row| row.0 >= 1 && row.3).await;
    assert!(attempts >= 1 && !sent);
    assert!(
        error.as_deref().is_some_and(|e| e.contains("451")),
        "{error:?}"
    );

    // Later messages go out meanwhile.
    password_set_by_admin(&app, &admin_token, eli.id).await;
    wait_queued(&app, "smtp_eli@example.com", |row| row.2).await;
    assert!(!queued_for(&app, "smtp_dora@example.com").await.unwrap().2);

    // Accepted again, and once its retry is due, the refused message goes, once.
    server.refuse_mail_to(None);
    app.clock.advance(chrono::Duration::hours(1));
    wait_queued(&app, "smtp_dora@example.com", |row| row.2).await;
    let delivered = server.delivered().lock().await;
    let told = |address: &str| {
        delivered
            .iter()
            .filter(|d| d.recipients == [address])
            .filter(|d| {
                outbox_reader::parse(&d.raw)
                    .subject
                    .contains("changed by an administrator")
            })
            .count()
    };
    assert_eq!(told("smtp_dora@example.com"), 1);
    assert_eq!(told("smtp_eli@example.com"), 1);
    drop(delivered);
    app.stop().await;
}

/// A token e-mail asked for while the mail server refuses it is answered at once and waits in
/// the queue holding no usable token (only what to make: tokens exist as hashes at rest);
/// once the server takes it, it carries a token that works.
#[actix_web::test]
async fn a_token_e_mail_waits_out_the_mail_server_with_no_token_at_rest() {
    let (server, port) = SmtpServer::start().await;
    let app = spawn_app_with(&[("SMTP_URL", &format!("smtp://127.0.0.1:{port}"))]).await;
    server.refuse_mail_to(Some("smtp_faye@example.com"));
    register(&app, "smtp_faye", &["experto"]).await;
    let (attempts, _, sent, _) = wait_queued(&app, "smtp_faye@example.com", |row| row.0 >= 1).await;
    assert!(attempts >= 1 && !sent, "refused, kept for its retry");
    let context: String = {
        let mut conn = app.db.conn().await.unwrap();
        marketplace::on_exec!(conn.exec(), c => sqlx::query_scalar(
            "SELECT CAST(context AS TEXT) FROM mail_queue WHERE recipient = $1")
            .bind("smtp_faye@example.com").fetch_one(c).await)
        .unwrap()
    };
    assert!(
        context.contains("\"mint\"") && !context.contains("\"token\""),
        "the queue holds what to make, not a token: {context}"
    );

    server.refuse_mail_to(None);
    app.clock.advance(chrono::Duration::hours(1));
    wait_queued(&app, "smtp_faye@example.com", |row| row.2).await;
    let token = {
        let delivered = server.delivered().lock().await;
        let mail = delivered
            .iter()
            .find(|d| d.recipients == ["smtp_faye@example.com"])
            .map(|d| outbox_reader::parse(&d.raw))
            .expect("delivered");
        mail.token().expect("a token in the link")
    };
    let verified = app
        .post_json(
            "/api/auth/verify-email",
            &serde_json::json!({"token": token}),
        )
        .await;
    assert_eq!(verified.status(), 200, "the token made at sending works");
    app.stop().await;
}
