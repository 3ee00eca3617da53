//! Every per-address limit counts an IPv6 /64 as one client, as the socket cap does (issue 62,
//! finding D31): requests, failed logins, refused registrations and wrong `/metrics` tokens
//! sent from ever new addresses of one /64 spend one budget, while another /64 keeps its own.
//! The harness's peer is loopback, trusted here as a proxy, so `X-Forwarded-For` names the
//! client.

use marketplace::http::system::METRICS_FAILURES_PER_MINUTE;
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde_json::json as j;

use crate::helpers::{PASSWORD, TestApp, json, register, spawn_app_with};

const BEHIND_PROXY: (&str, &str) = ("TRUSTED_PROXIES", "127.0.0.0/8, ::1");

/// The /64 every probe rotates in, and another one next to it.
const NETWORK: &str = "2001:db8:1:2";
const NEIGHBOUR: &str = "2001:db8:1:3";

/// The `n`th address of `network` (a /64): only the low 64 bits change.
fn host(network: &str, n: u16) -> String {
    format!("{network}:{n:x}:beef:{:x}:1", n.wrapping_mul(7919))
}

fn from(app: &TestApp, client: &str, method: Method, path: &str) -> RequestBuilder {
    app.client
        .request(method, app.url(path))
        .header("x-forwarded-for", client)
}

async fn send(request: RequestBuilder) -> Response {
    request.send().await.expect("request")
}

async fn assert_code(response: Response, status: StatusCode, code: &str) {
    assert_eq!(response.status(), status);
    assert_eq!(json(response).await["code"], code);
}

#[actix_web::test]
async fn one_ipv6_network_shares_the_request_limit() {
    let app = spawn_app_with(&[BEHIND_PROXY, ("RATE_LIMIT_PER_MINUTE", "5")]).await;
    let list = |client: &str| send(from(&app, client, Method::GET, "/api/projects/public"));
    for n in 0..5 {
        assert_eq!(
            list(&host(NETWORK, n)).await.status(),
            StatusCode::OK,
            "{n}"
        );
    }
    let refused = list(&host(NETWORK, 5)).await;
    assert!(refused.headers().contains_key("retry-after"));
    assert_code(refused, StatusCode::TOO_MANY_REQUESTS, "RATE_LIMITED").await;
    assert_eq!(list(&host(NEIGHBOUR, 0)).await.status(), StatusCode::OK);
    // An IPv4 client is one address, whichever way the proxy wrote it.
    for _ in 0..5 {
        assert_eq!(list("203.0.113.7").await.status(), StatusCode::OK);
    }
    assert_eq!(
        list("::ffff:203.0.113.7").await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(list("203.0.113.8").await.status(), StatusCode::OK);
    app.stop().await;
}

async fn login(app: &TestApp, client: &str, username: &str, password: &str) -> Response {
    send(
        from(app, client, Method::POST, "/api/auth/login")
            .json(&j!({"username": username, "password": password})),
    )
    .await
}

#[actix_web::test]
async fn one_ipv6_network_shares_the_login_budget() {
    let app = spawn_app_with(&[BEHIND_PROXY, ("LOGIN_RATE_LIMIT_MAX_ATTEMPTS_PER_IP", "4")]).await;
    register(&app, "ana", &["experto"]).await;
    // Password spraying: one guess for each of several names, each from a new address.
    for n in 0..4 {
        let name = format!("victim{n}");
        let guess = login(&app, &host(NETWORK, n), &name, "Guess123!").await;
        assert_code(guess, StatusCode::UNAUTHORIZED, "INVALID_CREDENTIALS").await;
    }
    let spent = login(&app, &host(NETWORK, 4), "ana", PASSWORD).await;
    assert_code(spent, StatusCode::TOO_MANY_REQUESTS, "RATE_LIMITED").await;
    let neighbour = login(&app, &host(NEIGHBOUR, 0), "ana", PASSWORD).await;
    assert_eq!(
        neighbour.status(),
        StatusCode::OK,
        "another /64's own budget"
    );
    app.stop().await;
}

async fn register_from(app: &TestApp, client: &str, email: &str, username: &str) -> Response {
    send(from(app, client, Method::POST, "/api/auth/register").json(
        &j!({"email": email, "username": username, "password": PASSWORD, "roles": ["experto"]}),
    ))
    .await
}

#[actix_web::test]
async fn one_ipv6_network_cannot_enumerate_registered_emails() {
    let app = spawn_app_with(&[BEHIND_PROXY, ("LOGIN_RATE_LIMIT_MAX_ATTEMPTS_PER_IP", "3")]).await;
    let ana = register(&app, "ana", &["experto"]).await;
    for n in 0..3 {
        let probe = register_from(&app, &host(NETWORK, n), &ana.email, &format!("probe{n}")).await;
        assert_code(probe, StatusCode::CONFLICT, "EMAIL_EXISTS").await;
    }
    // Spent: the taken e-mail and a free one answer alike.
    let taken = register_from(&app, &host(NETWORK, 3), &ana.email, "probe3").await;
    assert_code(taken, StatusCode::TOO_MANY_REQUESTS, "RATE_LIMITED").await;
    let free = register_from(&app, &host(NETWORK, 4), "free@example.com", "free").await;
    assert_code(free, StatusCode::TOO_MANY_REQUESTS, "RATE_LIMITED").await;
    let neighbour = register_from(&app, &host(NEIGHBOUR, 0), &ana.email, "probe5").await;
    assert_code(neighbour, StatusCode::CONFLICT, "EMAIL_EXISTS").await;
    app.stop().await;
}

const SCRAPE_TOKEN: &str = "scrape-secret-0123456789";

#[actix_web::test]
async fn one_ipv6_network_shares_the_metrics_token_budget() {
    let app = spawn_app_with(&[BEHIND_PROXY, ("METRICS_TOKEN", SCRAPE_TOKEN)]).await;
    let scrape = |client: &str, token: &str| {
        send(from(&app, client, Method::GET, "/metrics").bearer_auth(token))
    };
    let budget = u16::try_from(METRICS_FAILURES_PER_MINUTE).unwrap();
    for n in 0..budget {
        let guess = scrape(&host(NETWORK, n), "scrape-secret-guess").await;
        assert_eq!(guess.status(), StatusCode::UNAUTHORIZED, "guess {n}");
    }
    let spent = scrape(&host(NETWORK, budget), SCRAPE_TOKEN).await;
    assert_code(spent, StatusCode::TOO_MANY_REQUESTS, "RATE_LIMITED").await;
    let neighbour = scrape(&host(NEIGHBOUR, 0), SCRAPE_TOKEN).await;
    assert_eq!(
        neighbour.status(),
        StatusCode::OK,
        "another /64's own budget"
    );
    app.stop().await;
}
