//! E-mail over SMTP (`SMTP_URL`): the service talks to a server speaking the protocol on a
//! local port ([`SmtpServer`]), which records every message and every connection.

use std::time::Duration;

use marketplace::integrations::mail::outbox_reader;

use crate::helpers::{register, spawn_app_with, wait_for};
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

    // Each registration sends its confirmation e-mail through the outbox.
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
