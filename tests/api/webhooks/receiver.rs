//! A small HTTPS receiver for webhook tests and the bench: a certificate signed by a CA made
//! once per process with `openssl` (its PEM is what `WEBHOOK_CA_FILE` names), HTTP/1.1 over
//! rustls, every request recorded, answers scripted per receiver.

#![allow(dead_code)]

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio_rustls::TlsAcceptor;

/// What the receiver answers.
#[derive(Debug, Clone)]
pub enum Reply {
    Status(u16),
    /// Records the request, then answers nothing for this long.
    Hang(Duration),
    /// `302` to this location.
    Redirect(String),
}

/// One recorded request.
#[derive(Debug, Clone)]
pub struct Hit {
    pub path: String,
    /// Header names lower-cased.
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
    pub at: Instant,
}

impl Hit {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("JSON body")
    }
}

struct Pki {
    ca_file: PathBuf,
    acceptor: TlsAcceptor,
    _dir: tempfile::TempDir,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn pki() -> &'static Pki {
    static PKI: OnceLock<Pki> = OnceLock::new();
    PKI.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temporary directory");
        let p = dir.path();
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        let mut ca = vec!["req", "-x509"];
        ca.extend(ec);
        ca.extend([
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=Webhook test CA",
        ]);
        openssl(p, &ca);
        let mut csr = vec!["req"];
        csr.extend(ec);
        csr.extend([
            "-keyout",
            "leaf.key",
            "-out",
            "leaf.csr",
            "-subj",
            "/CN=localhost",
        ]);
        openssl(p, &csr);
        std::fs::write(
            p.join("leaf.ext"),
            "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1\nbasicConstraints=CA:FALSE\n\
             keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        openssl(
            p,
            &[
                "x509",
                "-req",
                "-in",
                "leaf.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "leaf.pem",
                "-days",
                "2",
                "-extfile",
                "leaf.ext",
            ],
        );
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(p.join("leaf.pem"))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_file(p.join("leaf.key")).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
        Pki {
            ca_file: p.join("ca.pem"),
            acceptor: TlsAcceptor::from(Arc::new(config)),
            _dir: dir,
        }
    })
}

/// The PEM file of the CA every receiver's certificate chains to.
pub fn ca_file() -> String {
    pki().ca_file.display().to_string()
}

/// The PEM files of the certificate (for `localhost` and `127.0.0.1`) and key the receivers
/// serve, for other TLS servers the tests run.
pub fn server_cert_files() -> (PathBuf, PathBuf) {
    let dir = pki()
        .ca_file
        .parent()
        .expect("the PKI directory")
        .to_owned();
    (dir.join("leaf.pem"), dir.join("leaf.key"))
}

/// A running receiver on `127.0.0.1`.
#[derive(Clone)]
pub struct Receiver {
    pub port: u16,
    hits: Arc<Mutex<Vec<Hit>>>,
    script: Arc<Mutex<VecDeque<Reply>>>,
    default: Arc<Mutex<Reply>>,
}

impl Receiver {
    /// Starts a receiver answering `200` unless told otherwise.
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let receiver = Self {
            port,
            hits: Arc::default(),
            script: Arc::default(),
            default: Arc::new(Mutex::new(Reply::Status(200))),
        };
        let acceptor = pki().acceptor.clone();
        let r = receiver.clone();
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let acceptor = acceptor.clone();
                let r = r.clone();
                tokio::spawn(async move {
                    if let Ok(tls) = acceptor.accept(tcp).await {
                        let _ = r.serve(tls).await;
                    }
                });
            }
        });
        receiver
    }

    /// `https://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.port)
    }

    /// Answers `replies` to the next requests, in order, then the default again.
    pub fn script(&self, replies: impl IntoIterator<Item = Reply>) {
        self.script.lock().unwrap().extend(replies);
    }

    pub fn always(&self, reply: Reply) {
        *self.default.lock().unwrap() = reply;
    }

    pub fn hits(&self) -> Vec<Hit> {
        self.hits.lock().unwrap().clone()
    }

    async fn serve<S>(&self, mut stream: S) -> std::io::Result<()>
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 8192];
        let head_end = loop {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
        let mut lines = head.split("\r\n");
        let path = lines
            .next()
            .and_then(|l| l.split(' ').nth(1))
            .unwrap_or("/")
            .to_owned();
        let headers: HashMap<String, String> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        let length: usize = headers
            .get("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        while buf.len() < head_end + length {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        let body = buf[head_end..(head_end + length).min(buf.len())].to_vec();
        self.hits.lock().unwrap().push(Hit {
            path,
            headers,
            body,
            at: Instant::now(),
        });
        let reply = self
            .script
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or_else(|| self.default.lock().unwrap().clone());
        let response = match reply {
            Reply::Status(code) => {
                format!("HTTP/1.1 {code} X\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
            }
            Reply::Hang(d) => {
                tokio::time::sleep(d).await;
                return Ok(());
            }
            Reply::Redirect(to) => format!(
                "HTTP/1.1 302 Found\r\nlocation: {to}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            ),
        };
        stream.write_all(response.as_bytes()).await?;
        stream.shutdown().await?;
        Ok(())
    }
}
