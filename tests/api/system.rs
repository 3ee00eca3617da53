//! Health, metrics, OpenAPI and the HTTP conventions every route shares.

use crate::helpers::{json, spawn_app, spawn_app_with};
use std::collections::BTreeSet;

#[actix_web::test]
async fn health_reports_database_and_cache() {
    let app = spawn_app().await;
    let response = app.get("/health").await;
    assert_eq!(response.status(), 200);
    let body = json(response).await;
    assert_eq!(body["status"], "ok");
    assert_eq!(body["database"]["status"], "ok");
    assert_eq!(body["cache"]["status"], "ok");
    let engine = if std::env::var("TEST_DATABASE_URL").is_ok() {
        "postgres"
    } else {
        "sqlite"
    };
    assert_eq!(body["database"]["backend"], engine);
    let cache = if std::env::var("REDIS_URL").is_ok() {
        "redis"
    } else {
        "memory"
    };
    assert_eq!(body["cache"]["backend"], cache);
    app.stop().await;
}

#[actix_web::test]
async fn health_is_503_when_the_database_is_gone() {
    let app = spawn_app().await;
    app.db.close().await;
    let response = app.get("/health").await;
    assert_eq!(response.status(), 503);
    assert_eq!(json(response).await["database"]["status"], "error");
    app.stop().await;
}

#[actix_web::test]
async fn trailing_slash_is_optional_and_unknown_routes_answer_json() {
    let app = spawn_app().await;
    assert_eq!(app.get("/health/").await.status(), 200);
    let response = app.get("/no/such/route").await;
    assert_eq!(response.status(), 404);
    let body = json(response).await;
    assert_eq!(body["code"], "ROUTE_NOT_FOUND");
    assert!(body["detail"].as_str().unwrap().len() > 5);
    app.stop().await;
}

#[actix_web::test]
async fn every_response_carries_a_request_id() {
    let app = spawn_app().await;
    let generated = app.get("/health").await;
    let id = generated.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(id.len() >= 12);
    let given = app
        .client
        .get(app.url("/health"))
        .header("X-Request-ID", "trace-abc_123")
        .send()
        .await
        .unwrap();
    assert_eq!(given.headers()["x-request-id"], "trace-abc_123");
    // An id that could break a log line is replaced, not echoed.
    let hostile = app
        .client
        .get(app.url("/health"))
        .header("X-Request-ID", "a\"b c")
        .send()
        .await
        .unwrap();
    assert_ne!(hostile.headers()["x-request-id"], "a\"b c");
    app.stop().await;
}

#[actix_web::test]
async fn metrics_show_http_and_actor_series() {
    let app = spawn_app().await;
    app.get("/health").await;
    let _ = app.state.outbox.trigger().await;
    let response = app.get("/metrics").await;
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    let text = response.text().await.unwrap();
    assert!(
        text.contains(r#"http_requests_total{method="GET",route="/health",status="200"}"#),
        "{text}"
    );
    assert!(text.contains("http_request_duration_seconds_bucket"));
    assert!(text.contains(r#"kind="outbox_dispatcher""#), "{text}");
    assert!(text.contains(r#"kind="mail_sender""#), "{text}");
    assert!(text.contains("db_pool_connections"));
    for queue in ["outbox", "mail", "crm", "webhook_deliveries"] {
        assert!(
            text.contains(&format!("queue_pending_rows{{queue=\"{queue}\"}} 0")),
            "{text}"
        );
    }
    assert!(text.contains("instance_ready 1"), "{text}");
    assert!(text.contains("money_audit_mismatches_total "), "{text}");
    assert!(
        text.contains("# HELP actor_mailbox_depth ") && text.contains("# HELP actor_live "),
        "{text}"
    );
    app.stop().await;
}

/// Reads one unlabelled sample of a scrape.
fn sample(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

#[actix_web::test]
async fn metrics_show_processor_events_waiting_and_how_long_on_the_service_clock() {
    let app = spawn_app().await;
    let received = app.clock.now();
    let mut conn = app.db.conn().await.unwrap();
    let events: Vec<_> = ["evt_waiting_1", "evt_waiting_2"]
        .into_iter()
        .map(|id| marketplace::store::processor_events::NewEvent {
            id: id.into(),
            kind: "payment_intent.succeeded".into(),
            payload: serde_json::json!({"id": id}),
            created: None,
        })
        .collect();
    marketplace::store::processor_events::insert_all_new(conn.exec(), &events, received)
        .await
        .unwrap();
    drop(conn);
    app.clock.advance(chrono::Duration::minutes(20));
    let text = app.get("/metrics").await.text().await.unwrap();
    assert_eq!(sample(&text, "processor_events_unapplied"), 2.0);
    // The clock moved 20 minutes (and the test's own run time on top).
    let age = sample(&text, "processor_events_oldest_unapplied_age_seconds");
    assert!((1200.0..1260.0).contains(&age), "{age}");
    app.stop().await;
}

#[actix_web::test]
async fn openapi_is_a_valid_v3_document() {
    let app = spawn_app().await;
    let response = app.get("/openapi.json").await;
    assert_eq!(response.status(), 200);
    let doc = json(response).await;
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    assert!(doc["info"]["title"].is_string());
    assert!(doc["paths"]["/health"]["get"].is_object());
    assert!(doc["components"]["schemas"]["ErrorBody"].is_object());
    app.stop().await;
}

#[actix_web::test]
async fn openapi_lists_the_shared_error_answers_of_every_operation() {
    let app = spawn_app().await;
    let doc = json(app.get("/openapi.json").await).await;
    let statuses = |path: &str, method: &str| -> BTreeSet<String> {
        doc["paths"][path][method]["responses"]
            .as_object()
            .unwrap_or_else(|| panic!("{method} {path} undocumented"))
            .keys()
            .cloned()
            .collect()
    };
    // Bearer-secured with a JSON body: 401, 413, 415 and 422 besides its own answers.
    let release = statuses("/api/payments/release", "post");
    for status in [
        "200", "401", "403", "404", "409", "413", "415", "422", "503",
    ] {
        assert!(
            release.contains(status),
            "release lacks {status}: {release:?}"
        );
    }
    // The two release routes share their answers; the second adds its own refusal.
    let next = statuses("/api/payments/release-and-charge-next", "post");
    assert!(
        next.is_superset(&release) && next.contains("400"),
        "{next:?}"
    );
    // A path parameter: 404; no body, no 415.
    let payment = statuses("/api/payments/{payment_id}", "get");
    assert!(payment.contains("404") && payment.contains("401") && !payment.contains("415"));
    // Open routes do not claim 401.
    assert!(!statuses("/health", "get").contains("401"));
    // Every added answer carries the error shape.
    let body = &doc["paths"]["/api/payments/release"]["post"]["responses"]["415"]["content"]["application/json"]
        ["schema"]["$ref"];
    assert_eq!(body, "#/components/schemas/ErrorBody");
    app.stop().await;
}

/// (method, path) pairs the OpenAPI document describes.
fn documented_routes(doc: &serde_json::Value) -> BTreeSet<(String, String)> {
    let mut routes = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            routes.insert((method.to_uppercase(), path.clone()));
        }
    }
    routes
}

/// (method, path) of every actix route macro in `src/http`: what the server can mount.
fn routes_in_source() -> BTreeSet<(String, String)> {
    let mut routes = BTreeSet::new();
    let mut dirs = vec![std::path::PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src/http"
    ))];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for line in text.lines() {
                let line = line.trim();
                for method in ["get", "post", "put", "patch", "delete"] {
                    if let Some(rest) = line.strip_prefix(&format!("#[{method}(\"")) {
                        let route = rest.split('"').next().unwrap();
                        routes.insert((method.to_uppercase(), route.to_owned()));
                    }
                }
            }
        }
    }
    routes
}

/// `/api/users/{id}` → `/api/users/1`.
fn fill_path_parameters(path: &str) -> String {
    let mut out = String::new();
    let mut in_param = false;
    for c in path.chars() {
        match c {
            '{' => in_param = true,
            '}' => {
                in_param = false;
                out.push('1');
            }
            _ if !in_param => out.push(c),
            _ => {}
        }
    }
    out
}

#[actix_web::test]
async fn every_mounted_route_is_documented_and_every_documented_route_is_mounted() {
    let app = spawn_app().await;
    let doc = json(app.get("/openapi.json").await).await;
    let documented = documented_routes(&doc);

    let in_source = routes_in_source();
    assert!(in_source.len() >= 3);
    let undocumented: Vec<_> = in_source.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "routes without OpenAPI description: {undocumented:?}"
    );

    // Each documented route reaches a handler: the router's own 404 (ROUTE_NOT_FOUND) or 405
    // would mean it is described but not mounted.
    for (method, path) in &documented {
        let url = app.url(&fill_path_parameters(path));
        let response = app
            .client
            .request(method.parse().unwrap(), &url)
            .header("content-type", "application/json")
            .body("{}")
            .send()
            .await
            .unwrap();
        let status = response.status();
        assert_ne!(status, 405, "{method} {path} not mounted");
        if status == 404 {
            let body = response.text().await.unwrap();
            assert!(
                !body.contains("ROUTE_NOT_FOUND"),
                "{method} {path} not mounted"
            );
        }
    }
    app.stop().await;
}

#[actix_web::test]
async fn admins_see_the_actors() {
    let app = spawn_app().await;
    let _ = app.state.outbox.trigger().await;
    let (_, token) = crate::helpers::admin(&app, "root").await;
    let response = app
        .client
        .get(app.url("/api/admin/system/actors"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let kinds = json(response).await;
    let dispatcher = kinds
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["kind"] == "outbox_dispatcher")
        .expect("the dispatcher is listed");
    assert_eq!(dispatcher["category"], "periodic");
    assert!(dispatcher["metrics"]["runs_total"].as_f64().unwrap() >= 1.0);
    let last_run = dispatcher["metrics"]["last_run_unix_seconds"]
        .as_f64()
        .unwrap();
    let next_run = dispatcher["metrics"]["next_run_unix_seconds"]
        .as_f64()
        .unwrap();
    assert!(last_run > 1.7e9 && next_run >= last_run, "{dispatcher}");
    assert!(dispatcher.get("last_failure").is_some());

    let user = crate::helpers::register(&app, "ana", &["empresa"]).await;
    let denied = app
        .client
        .get(app.url("/api/admin/system/actors"))
        .bearer_auth(&user.access_token)
        .send()
        .await
        .unwrap();
    assert_eq!(denied.status(), 403);
    assert_eq!(app.get("/api/admin/system/actors").await.status(), 401);
    app.stop().await;
}

/// ARCHITECTURE.md: a route reads through store queries made for its view, but every write
/// goes through a workflow. A transaction opened in `src/http` would be a write there.
#[test]
fn no_route_opens_a_transaction() {
    let mut found = Vec::new();
    let mut dirs = vec![std::path::PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src/http"
    ))];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if std::fs::read_to_string(&path)
                .unwrap()
                .contains("db.begin()")
            {
                found.push(path.display().to_string());
            }
        }
    }
    assert!(
        found.is_empty(),
        "routes writing in a transaction: {found:?}"
    );
}

/// The reference page and its files come from the binary, under a CSP that allows nothing
/// inline; `ENABLE_API_DOCS=false` (production's default) turns them off.
#[actix_web::test]
async fn the_reference_page_is_served_under_a_strict_policy_unless_turned_off() {
    let app = spawn_app().await;
    for (path, kind) in [
        ("/docs", "text/html"),
        ("/docs/", "text/html"),
        ("/docs/docs.js", "text/javascript"),
        ("/docs/swagger-ui-bundle.js", "text/javascript"),
        ("/docs/swagger-ui.css", "text/css"),
    ] {
        let r = app.get(path).await;
        assert_eq!(r.status(), 200, "{path}");
        assert!(
            r.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with(kind)
        );
        let policy = r.headers()["content-security-policy"].to_str().unwrap();
        assert!(policy.starts_with("default-src 'self'"), "{policy}");
        assert!(!policy.contains("unsafe"), "{policy}");
    }
    let page = app.get("/docs").await.text().await.unwrap();
    assert!(
        page.contains("/docs/docs.js") && !page.contains("http"),
        "no outside asset"
    );
    let script = app.get("/docs/docs.js").await.text().await.unwrap();
    assert!(script.contains("'/openapi.json'"));
    for missing in ["/docs/index.html", "/docs/secrets.txt", "/docs/..%2Fsrc"] {
        assert_eq!(app.get(missing).await.status(), 404, "{missing}");
    }
    app.stop().await;

    let off = spawn_app_with(&[("ENABLE_API_DOCS", "false")]).await;
    for path in ["/docs", "/docs/docs.js"] {
        assert_eq!(off.get(path).await.status(), 404, "{path}");
    }
    off.stop().await;
}

/// Client generators need every operation id unique and every answer described (OpenAPI 3.1
/// requires both).
#[actix_web::test]
async fn operation_ids_are_unique_and_every_answer_is_described() {
    let app = spawn_app().await;
    let doc = json(app.get("/openapi.json").await).await;
    let mut ids = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let id = op["operationId"].as_str().expect("an operation id");
            assert!(ids.insert(id.to_owned()), "{id} twice ({method} {path})");
            for (status, answer) in op["responses"].as_object().unwrap() {
                let described = answer["description"].as_str().unwrap_or_default();
                assert!(!described.trim().is_empty(), "{method} {path} {status}");
            }
        }
    }
    assert!(ids.contains("list_admin_invitations") && ids.contains("update_me"));
    app.stop().await;
}

/// Readiness apart from liveness: once the instance drains (the first SIGTERM), `/ready`
/// answers 503 and every WebSocket is closed with 1001 so clients reconnect elsewhere, while
/// requests are still served and `/health` stays 200.
#[actix_web::test]
async fn a_draining_instance_is_not_ready_and_sends_its_sockets_elsewhere() {
    use crate::realtime::{closed_with, connect, next_frame};
    use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
    let app = spawn_app().await;
    let r = app.get("/ready").await;
    assert_eq!(r.status(), 200);
    assert_eq!(json(r).await["status"], "ready");
    let user = crate::helpers::register(&app, "drained", &["empresa"]).await;
    let mut socket = connect(&app, "/api/ws/notifications", &user.access_token).await;
    assert_eq!(next_frame(&mut socket).await["type"], "unread_count");

    app.state.readiness.drain();
    assert_eq!(
        closed_with(&mut socket, std::time::Duration::from_secs(5)).await,
        CloseCode::Away
    );
    // The client's answering close frame ends the connection at once: the server closes the
    // TCP connection first (RFC 6455 §7.1.1) rather than wait for the client, which waits for
    // it (before, it came after actix's linger, 30 s here).
    let ended = tokio::time::timeout(std::time::Duration::from_secs(3), async {
        use futures_util::StreamExt;
        while let Some(Ok(_)) = socket.next().await {}
    });
    assert!(ended.await.is_ok(), "the server kept the connection open");
    let r = app.get("/ready").await;
    assert_eq!(r.status(), 503);
    assert_eq!(json(r).await["status"], "draining");
    // No new socket either: the client is sent elsewhere.
    let url = app
        .url(&format!(
            "/api/ws/notifications?token={}",
            user.access_token
        ))
        .replacen("http://", "ws://", 1);
    match tokio_tungstenite::connect_async(url).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(answer)) => {
            assert_eq!(answer.status(), 503);
            assert!(answer.headers().contains_key("retry-after"));
        }
        other => panic!("a socket opened while draining: {:?}", other.map(|_| ())),
    }
    assert_eq!(app.get("/health").await.status(), 200);
    assert_eq!(app.get("/api/projects/public").await.status(), 200);
    app.stop().await;
}
