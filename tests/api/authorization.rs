//! The authorization matrix: every operation `/openapi.json` lists is called as each caller —
//! anonymous, a company and an expert outside the owner's work, an administrator, the owning
//! company, the selected expert and an invited expert whose proposal lost — and the class of each answer is compared with the row of
//! `src/http/routes/access.txt`. An operation without a row, or a row without an operation,
//! fails the test, so a new route cannot be mounted without saying who may call it. Every
//! successful answer to an outsider is also searched for the owner's private data (the payment
//! intent, the dispute, the delivery, the chat, the e-mails, the fiscal data, the verification
//! notes), which is how an object hidden behind a 404 would still leak through a list.
//!
//! `AUTHZ_PRINT=1` prints the observed classes in the matrix's format (to draft a new row; the
//! row must still be checked against the specification by a person).

use std::collections::BTreeSet;

use reqwest::Method;
use serde_json::{Value, json as j};

use crate::access_table::{CALLERS, coverage_problems, operations, rows};
use crate::helpers::{PASSWORD, json, login};
use crate::market::Market;
use crate::world::{PDF, World, build, multipart, owner_fiscal, png};

/// The class of an answer. `ok`: the caller got past authorization — a success, or a refusal
/// of the request itself made after it (400 business rule, 409 state, 413/415 file, 422
/// invalid body or query). 401, 403 and 404 are their own classes; anything else (5xx, 429,
/// 405) is never expected.
fn class(status: u16) -> String {
    match status {
        200..=399 | 400 | 409 | 413 | 415 | 422 => "ok".into(),
        401 | 403 | 404 => status.to_string(),
        other => format!("unexpected {other}"),
    }
}

/// The path with its parameters filled from the world; a parameter without a fixture fails
/// the test (give the new route an object in `world.rs` and a case here).
fn fill(template: &str, w: &World) -> String {
    let mut out = String::new();
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        let end = rest[start..].find('}').expect("closed parameter") + start;
        out.push_str(&rest[..start]);
        let name = &rest[start + 1..end];
        out.push_str(&value_of(name, template, w));
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

fn value_of(name: &str, template: &str, w: &World) -> String {
    let under = |prefix: &str| template.starts_with(prefix);
    match name {
        "project_id" if under("/api/reviews/") => w.finished_project.to_string(),
        "project_id" => w.project.to_string(),
        "application_id" => w.application.to_string(),
        "expert_id" => w.participant.id.to_string(),
        "milestone_id" => w.milestone.to_string(),
        "delivery_id" => w.delivery.to_string(),
        "payment_id" => w.payment.to_string(),
        "payment_intent_id" => w.payment_intent.clone(),
        "payment_method_id" => w.owner_payment_method.clone(),
        "dispute_id" => w.dispute.to_string(),
        "message_id" if template.contains("/files/") => w.file_message.to_string(),
        "message_id" => w.message.to_string(),
        "review_id" => w.review.to_string(),
        "invoice_id" => w.invoice.to_string(),
        "reviewer_id" => w.owner.id.to_string(),
        "document_id" => w.owner_document.to_string(),
        "invitation_id" => w.invitation.to_string(),
        "level" => "Global".into(),
        "contact_id" => "contact-1".into(),
        "file" if under("/docs/") => "docs.js".into(),
        "file" => w.participant_picture.clone(),
        "slug" if under("/api/profiles/admin/") => w.team_slug.clone(),
        "slug" if under("/api/profiles/experts/") => w.participant_slug.clone(),
        "slug" if under("/api/skills/") => "rust".into(),
        // The reviewed expert, the owner of the picture, the connected account.
        "user_id"
            if under("/api/reviews/")
                || under("/api/uploads/")
                || under("/api/processor-connect/") =>
        {
            w.participant.id.to_string()
        }
        // Administrators act on a bystander: their calls create profiles, change roles and
        // delete accounts, which would change the owner's answers on later rows.
        "user_id" => w.bystander.id.to_string(),
        "id" if under("/api/admin/projects/") => w.project.to_string(),
        "id" if under("/api/profiles/") => w.owner_profile.to_string(),
        "id" if under("/api/users/me/webhook/deliveries/") => w.owner_webhook_delivery.to_string(),
        "id" if under("/api/users/") => w.owner.id.to_string(),
        _ => panic!("no fixture for {{{name}}} in {template}: add one in world.rs and here"),
    }
}

enum Body {
    None,
    Json(Value),
    Multipart(String, Vec<u8>),
}

/// A body good enough to reach the route's own checks: where the object a caller acts on is
/// named in the body, it names the owner's object; elsewhere the smallest body the OpenAPI
/// schema describes (required fields only). A body that does not even deserialize would race
/// the authentication: actix extracts a handler's arguments concurrently, and a JSON error is
/// ready before the session lookup, so an outsider could get 422 instead of 401/403.
fn body_of(method: &str, template: &str, w: &World, doc: &Value) -> Body {
    let p = w.project;
    let application = j!({"cover_letter": "I can do it", "proposed_budget": 300.0,
        "proposed_milestones": [{"title": "A", "amount": 100.0}, {"title": "B", "amount": 100.0},
                                {"title": "C", "amount": 100.0}]});
    let body = match (method, template) {
        ("GET", _) => return Body::None,
        (_, "/api/profiles/upload") => {
            let (t, b) = multipart(&[("kind", "portfolio")], "cv.pdf", PDF);
            return Body::Multipart(t, b);
        }
        (_, "/api/profiles/me/picture") => {
            let (t, b) = multipart(&[], "me.png", &png());
            return Body::Multipart(t, b);
        }
        (_, "/api/chat/{project_id}/files") => {
            let (t, b) = multipart(&[], "notes.pdf", PDF);
            return Body::Multipart(t, b);
        }
        ("DELETE", _) => return Body::None,
        (_, "/api/milestones") => j!({"project_id": p, "title": "Extra", "amount": 10.0}),
        (_, "/api/milestones/deliveries") => {
            j!({"milestone_id": w.milestone, "description": "Another part"})
        }
        (_, "/api/milestones/deliveries/{delivery_id}") => j!({"description": "Reworked"}),
        (_, "/api/milestones/deliveries/{delivery_id}/review") => {
            j!({"decision": "request_revision", "feedback": "Add the appendix"})
        }
        (_, "/api/milestones/{milestone_id}") => j!({"title": "Renamed"}),
        (_, "/api/payments/initiate") => j!({"project_id": p, "milestone_id": w.milestone}),
        (
            _,
            "/api/payments/release"
            | "/api/payments/release-and-charge-next"
            | "/api/payments/sync-status"
            | "/api/payments/refund",
        ) => j!({"payment_id": w.payment}),
        (_, "/api/payments/attach-method") => j!({"payment_method_id": "pm_card_visa"}),
        (_, "/api/reviews") => {
            j!({"project_id": w.finished_project, "reviewee_id": w.participant.id,
                "rating": 4, "comment": "Second opinion on the same work."})
        }
        (_, "/api/reviews/{review_id}") => j!({"rating": 4, "comment": "Edited: still good work."}),
        (_, "/api/reviews/{review_id}/respond") => j!({"response": "Thank you for the review."}),
        (_, "/api/notifications/mark-read") => j!({"notification_id": w.owner_notification}),
        (_, "/api/chat/{project_id}") => j!({"content": "Hello"}),
        (_, "/api/chat/{project_id}/messages/{message_id}") => j!({"content": "Edited"}),
        (_, "/api/chat/{project_id}/mark-read") => j!({}),
        (_, "/api/profiles/{id}") => j!({"bio": "Changed by the caller"}),
        (_, "/api/profiles/{id}/fiscal-data") => owner_fiscal(),
        (_, "/api/projects/{project_id}") => j!({"title": "Renamed project"}),
        (_, "/api/projects/{project_id}/apply") => application,
        (_, "/api/projects/{project_id}/applications/{application_id}") => application,
        (_, "/api/projects/{project_id}/applications/{application_id}/request-revision") => {
            j!({"feedback": "Please detail the second milestone."})
        }
        (_, "/api/projects/{project_id}/request-budget") => {
            j!({"expert_id": w.other_expert.id})
        }
        (_, "/api/projects/{project_id}/dispute") => j!({"reason": "Another disagreement."}),
        // A real status (the route parses it before it looks at the project) that the owner's
        // disputed project cannot move to.
        (_, "/api/projects/{project_id}/status") => j!({"status": "draft"}),
        _ => {
            let operation = &doc["paths"][template][method.to_lowercase()];
            match operation["requestBody"]["content"]["application/json"]["schema"] {
                Value::Null => return Body::None,
                ref schema => example(schema, doc, 0),
            }
        }
    };
    Body::Json(body)
}

/// The required query parameters of an operation, each with the smallest value its schema
/// allows (a missing one is a 422 that could race the authentication, as a body could).
fn query_of(method: &str, template: &str, doc: &Value) -> String {
    let operation = &doc["paths"][template][method.to_lowercase()];
    let pairs: Vec<String> = operation["parameters"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["in"] == "query" && p["required"] == true)
        .map(|p| {
            let value = match example(&p["schema"], doc, 0) {
                Value::String(s) => s,
                other => other.to_string(),
            };
            format!("{}={value}", p["name"].as_str().unwrap_or_default())
        })
        .collect();
    if pairs.is_empty() {
        String::new()
    } else {
        format!("?{}", pairs.join("&"))
    }
}

/// The smallest value of `schema`: required properties, the first enum value, minimum lengths.
fn example(schema: &Value, doc: &Value, depth: usize) -> Value {
    if depth > 8 {
        return Value::Null;
    }
    if let Some(reference) = schema["$ref"].as_str() {
        let name = reference.rsplit('/').next().unwrap_or_default();
        return example(&doc["components"]["schemas"][name], doc, depth + 1);
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(choice) = schema[key]
            .as_array()
            .and_then(|list| list.iter().find(|s| s["type"] != "null"))
        {
            return example(choice, doc, depth + 1);
        }
    }
    if let Some(parts) = schema["allOf"].as_array() {
        let mut merged = serde_json::Map::new();
        for part in parts {
            if let Value::Object(fields) = example(part, doc, depth + 1) {
                merged.extend(fields);
            }
        }
        return Value::Object(merged);
    }
    if let Some(first) = schema["enum"].as_array().and_then(|e| e.first()) {
        return first.clone();
    }
    let ty = match &schema["type"] {
        Value::String(t) => t.as_str(),
        Value::Array(types) => types
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .unwrap_or("null"),
        _ if schema.get("properties").is_some() => "object",
        _ => "null",
    };
    let min = |key: &str| schema[key].as_u64().unwrap_or(0);
    match ty {
        "object" => {
            let mut fields = serde_json::Map::new();
            for name in schema["required"].as_array().into_iter().flatten() {
                let name = name.as_str().unwrap_or_default();
                fields.insert(
                    name.to_owned(),
                    example(&schema["properties"][name], doc, depth + 1),
                );
            }
            Value::Object(fields)
        }
        "array" => Value::Array(
            (0..min("minItems"))
                .map(|_| example(&schema["items"], doc, depth + 1))
                .collect(),
        ),
        "string" => match schema["format"].as_str() {
            Some("date-time") => j!("2099-01-01T00:00:00Z"),
            Some("date") => j!("2099-01-01"),
            Some("email") => j!("someone@example.com"),
            _ => j!("x".repeat(min("minLength").max(1) as usize)),
        },
        "integer" => j!(schema["minimum"].as_i64().unwrap_or(1)),
        "number" => j!(schema["minimum"].as_f64().unwrap_or(1.0)),
        "boolean" => j!(false),
        _ => Value::Null,
    }
}

struct Caller {
    name: &'static str,
    username: Option<String>,
    token: Option<String>,
    csrf: Option<String>,
}

fn callers(m: &Market, w: &World) -> Vec<Caller> {
    let account = |name, a: &crate::helpers::Account| Caller {
        name,
        username: Some(a.username.clone()),
        token: Some(a.access_token.clone()),
        csrf: Some(a.csrf_token.clone()),
    };
    vec![
        Caller {
            name: "anonymous",
            username: None,
            token: None,
            csrf: None,
        },
        account("company", &w.other_company),
        account("expert", &w.other_expert),
        Caller {
            name: "admin",
            username: Some("root".into()),
            token: Some(m.admin_token.clone()),
            csrf: None,
        },
        account("owner", &w.owner),
        account("participant", &w.participant),
        account("applicant", &w.applicant),
    ]
}

/// Calls that end the caller's session get a session of their own.
fn ends_session(template: &str) -> bool {
    template.starts_with("/api/auth/logout")
}

/// When a row runs: calls that take objects away from the world (a new picture replaces the
/// old file) run after every other row, the project's and an account's deletion last of all.
fn rank(method: &str, template: &str) -> u8 {
    match (method, template) {
        ("DELETE", "/api/projects/{project_id}") => 3,
        ("DELETE", "/api/admin/users/{user_id}")
        | ("POST", "/api/admin/users/{user_id}/deletion-confirm") => 4,
        ("DELETE", _)
        | ("POST", "/api/profiles/me/picture")
        | ("POST", "/api/projects/{project_id}/selection/cancel")
        | ("POST", "/api/processor-connect/admin/disconnect/{user_id}") => 2,
        _ => 1,
    }
}

/// The order callers run in within a row: outsiders first, the owner and administrators
/// (whose calls are the likeliest to change something) last.
const ORDER: [usize; 7] = [0, 1, 2, 6, 5, 4, 3];

async fn call(
    m: &Market,
    caller: &Caller,
    method: &str,
    path: &str,
    body: &Body,
    fresh: bool,
) -> (u16, String) {
    let method = Method::from_bytes(method.as_bytes()).unwrap();
    let mut request = m.app.client.request(method, m.app.url(path));
    if let Some(token) = &caller.token {
        let token = match (&caller.username, fresh) {
            (Some(username), true) => login(&m.app, username, PASSWORD).await,
            _ => token.clone(),
        };
        request = request.bearer_auth(token);
        if let (Some(csrf), false) = (&caller.csrf, fresh) {
            request = request
                .header("Cookie", format!("csrf_token={csrf}"))
                .header("X-CSRF-Token", csrf);
        }
    }
    request = match body {
        Body::None => request,
        Body::Json(v) => request.json(v),
        Body::Multipart(content_type, bytes) => request
            .header("Content-Type", content_type)
            .body(bytes.clone()),
    };
    let response = request.send().await.expect("request");
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

/// The callers with no part in the owner's work once the expert is selected.
const OUTSIDERS: [&str; 4] = ["anonymous", "company", "expert", "applicant"];

#[actix_web::test]
async fn every_route_answers_each_caller_as_the_matrix_says() {
    let m = Market::open_with(&[
        ("WEBHOOK_ALLOW_PRIVATE_TARGETS", "true"),
        ("CRM_API_BASE", "sandbox"),
        ("CRM_WEBHOOK_SECRET", "authz-crm-secret"),
    ])
    .await;
    let w = build(&m).await;
    let callers = callers(&m, &w);

    // The matrix covers exactly the mounted operations.
    let doc = json(m.app.get("/openapi.json").await).await;
    let mounted = operations(&doc);
    let mut rows = rows();
    let mut problems = coverage_problems(&rows, &mounted);
    assert!(
        mounted.len() > 150,
        "the OpenAPI document lists {} operations",
        mounted.len()
    );

    rows.sort_by_key(|r| rank(&r.method, &r.path));
    let print = std::env::var("AUTHZ_PRINT").is_ok();
    let (mut checked, mut skipped) = (0, 0);
    // The private data the parties themselves were shown: a marker never shown to anyone would
    // make its leak check vacuous.
    let mut seen = BTreeSet::new();
    for row in rows
        .iter()
        .filter(|r| mounted.contains(&(r.method.clone(), r.path.clone())))
    {
        if row.cells.iter().all(|c| c == "skip") {
            skipped += row.cells.len();
            continue;
        }
        let path = fill(&row.path, &w) + &query_of(&row.method, &row.path, &doc);
        let body = body_of(&row.method, &row.path, &w, &doc);
        let mut got = vec![String::from("skip"); CALLERS.len()];
        for i in ORDER {
            let expected = &row.cells[i];
            if expected == "skip" {
                skipped += 1;
                continue;
            }
            let (status, text) = call(
                &m,
                &callers[i],
                &row.method,
                &path,
                &body,
                ends_session(&row.path),
            )
            .await;
            let class = class(status);
            checked += 1;
            if !expected.split('|').any(|c| c == class) {
                problems.push(format!(
                    "{} {} as {}: expected {expected}, got {class} ({status}) at {path}",
                    row.method, row.path, callers[i].name
                ));
            }
            // An answer an outsider may read must not carry the owner's private data: lists and
            // searches are where an object hidden behind a 404 would leak.
            // (The sandbox's ledger and events are the fake processor's own dashboard, not the
            // service's answers: they show every intent by design and exist only in tests.)
            if !OUTSIDERS.contains(&callers[i].name) && (200..300).contains(&status) {
                for (what, marker) in w.private_markers() {
                    if text.contains(&marker) {
                        seen.insert(what);
                    }
                }
            }
            if OUTSIDERS.contains(&callers[i].name)
                && (200..300).contains(&status)
                && !row.path.starts_with("/api/sandbox/")
            {
                for (what, marker) in w.private_markers() {
                    if text.contains(&marker) {
                        problems.push(format!(
                            "{} {} as {}: the answer carries the owner's {what}",
                            row.method, row.path, callers[i].name
                        ));
                    }
                }
            }
            got[i] = if class == "ok" {
                format!("ok:{status}")
            } else {
                class
            };
        }
        if print {
            println!("{:<7}{:<72} {}", row.method, row.path, got.join("  "));
        }
    }
    for (what, _) in w.private_markers() {
        if !seen.contains(what) {
            problems.push(format!(
                "the owner's {what} appeared in no answer to a party: its leak check proves nothing"
            ));
        }
    }
    println!(
        "authorization matrix: {} operations, {checked} calls checked, {skipped} skipped",
        mounted.len()
    );
    assert!(
        problems.is_empty(),
        "{} authorization mismatch(es):\n{}",
        problems.len(),
        problems.join("\n")
    );
    m.app.stop().await;
}
