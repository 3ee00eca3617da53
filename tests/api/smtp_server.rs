//! A plain SMTP server on `127.0.0.1` that accepts every message and keeps it, with every
//! connection counted: what the tests of `SMTP_URL` and the escrow bench send e-mail to.

#![allow(dead_code)] // the bench only starts it

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;

/// A message as the server received it: its recipients and its text (dots unstuffed).
pub struct Delivered {
    pub recipients: Vec<String>,
    pub raw: String,
}

#[derive(Clone, Default)]
pub struct SmtpServer {
    delivered: Arc<Mutex<Vec<Delivered>>>,
    connections: Arc<AtomicUsize>,
    /// A recipient whose messages are refused with a temporary error (`451`), kept none.
    refused: Arc<std::sync::Mutex<Option<String>>>,
}

impl SmtpServer {
    /// Starts listening on the current Tokio runtime; answers the server and its port.
    pub async fn start() -> (Self, u16) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("address").port();
        let server = Self::default();
        let accepting = server.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                accepting.connections.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(accepting.clone().converse(stream));
            }
        });
        (server, port)
    }

    /// The messages received so far.
    pub fn delivered(&self) -> &Mutex<Vec<Delivered>> {
        &self.delivered
    }

    /// Refuses every message to `recipient` with `451` (try again later) until called again
    /// with `None`.
    pub fn refuse_mail_to(&self, recipient: Option<&str>) {
        *self.refused.lock().expect("refused") = recipient.map(str::to_owned);
    }

    /// How many connections were opened to it.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// One connection: greeting, then command after command until `QUIT` (RFC 5321).
    async fn converse(self, stream: TcpStream) {
        let (reader, mut writer) = stream.into_split();
        let mut lines = BufReader::new(reader).lines();
        let mut recipients = Vec::new();
        if writer.write_all(b"220 sink ESMTP\r\n").await.is_err() {
            return;
        }
        while let Ok(Some(line)) = lines.next_line().await {
            let command = line.get(..4).unwrap_or_default().to_ascii_uppercase();
            let reply: &[u8] = match command.as_str() {
                "EHLO" | "HELO" => b"250-sink\r\n250 8BITMIME\r\n",
                "MAIL" => {
                    recipients.clear();
                    b"250 OK\r\n"
                }
                "RCPT" => {
                    let address = line.split_once(':').map(|(_, a)| a).unwrap_or_default();
                    recipients.push(address.trim().trim_matches(['<', '>']).to_owned());
                    b"250 OK\r\n"
                }
                "DATA" => {
                    if writer.write_all(b"354 go on\r\n").await.is_err() {
                        return;
                    }
                    let mut raw = String::new();
                    while let Ok(Some(line)) = lines.next_line().await {
                        if line == "." {
                            break;
                        }
                        // A leading dot was doubled by the sender (dot-stuffing).
                        raw.push_str(line.strip_prefix('.').unwrap_or(&line));
                        raw.push_str("\r\n");
                    }
                    let refused = self
                        .refused
                        .lock()
                        .expect("refused")
                        .as_ref()
                        .is_some_and(|r| recipients.contains(r));
                    if refused {
                        recipients.clear();
                        b"451 try again later\r\n"
                    } else {
                        self.delivered.lock().await.push(Delivered {
                            recipients: std::mem::take(&mut recipients),
                            raw,
                        });
                        b"250 queued\r\n"
                    }
                }
                "RSET" | "NOOP" => b"250 OK\r\n",
                "QUIT" => {
                    let _ = writer.write_all(b"221 bye\r\n").await;
                    return;
                }
                _ => b"502 not implemented\r\n",
            };
            if writer.write_all(reply).await.is_err() {
                return;
            }
        }
    }
}
