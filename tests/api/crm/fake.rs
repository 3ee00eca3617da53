//! A fake LeadConnector v2 server started by the test (not the service's sandbox): it speaks
//! the wire format of `tests/fixtures/crm/README.md`, keeps contacts in memory, records every
//! request with its headers, and can be told to fail (500, 429 with `Retry-After`, 401).

use std::collections::{BTreeMap, VecDeque};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use serde_json::{Value, json};

pub const KEY: &str = "pit-test-key";
pub const LOCATION: &str = "loc-test";

/// One request as the fake received it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub authorization: Option<String>,
    pub version: Option<String>,
    pub body: Value,
    pub at: std::time::Instant,
}

#[derive(Default)]
pub struct FakeState {
    pub contacts: BTreeMap<String, Value>,
    pub requests: Vec<Seen>,
    /// Answers given to the next requests instead of the normal ones: (status, Retry-After).
    pub scripted: VecDeque<(u16, Option<u64>)>,
    /// While set, every request is answered 500.
    pub down: bool,
    /// The key accepted; another gets 401.
    pub key: String,
    /// Time taken to answer each request (a slow CRM).
    pub delay: std::time::Duration,
    next: u64,
}

#[derive(Clone)]
pub struct FakeCrm {
    pub url: String,
    pub state: Arc<Mutex<FakeState>>,
    server: actix_web::dev::ServerHandle,
}

/// Custom fields of the location: `contact.<key>` → id.
pub fn field_id(key: &str) -> String {
    format!("fid-{key}")
}

const FIELDS: [&str; 6] = [
    "id_platform",
    "tipo_de_usuario",
    "hourly_rate",
    "main_area",
    "internal_rating",
    "location",
];

impl FakeCrm {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
        let state = Arc::new(Mutex::new(FakeState {
            key: KEY.into(),
            ..Default::default()
        }));
        let data = web::Data::new(state.clone());
        let server = HttpServer::new(move || {
            App::new()
                .app_data(data.clone())
                .default_service(web::to(handle))
        })
        .workers(1)
        .disable_signals()
        .listen(listener)
        .unwrap()
        .run();
        let handle = server.handle();
        actix_web::rt::spawn(server);
        Self {
            url,
            state,
            server: handle,
        }
    }

    pub fn with<T>(&self, f: impl FnOnce(&mut FakeState) -> T) -> T {
        f(&mut self.state.lock().unwrap())
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.with(|s| s.requests.clone())
    }

    pub fn contact(&self, id: &str) -> Value {
        self.with(|s| s.contacts.get(id).cloned())
            .unwrap_or(Value::Null)
    }

    pub fn tags(&self, id: &str) -> Vec<String> {
        let mut tags: Vec<String> = self.contact(id)["tags"]
            .as_array()
            .map(|a| a.iter().map(|t| t.as_str().unwrap().to_owned()).collect())
            .unwrap_or_default();
        tags.sort();
        tags
    }

    pub async fn stop(&self) {
        self.server.stop(false).await;
    }
}

fn error(status: u16, message: Value) -> HttpResponse {
    let code = actix_web::http::StatusCode::from_u16(status).unwrap();
    HttpResponse::build(code)
        .json(json!({"statusCode": status, "message": message, "error": code.canonical_reason()}))
}

fn tags_of(v: &Value) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for t in v.as_array().into_iter().flatten() {
        if !out.contains(t) {
            out.push(t.clone());
        }
    }
    out
}

/// Applies a contact body: fields, tags (replacing), custom fields by id or key.
fn apply(contact: &mut Value, body: &Value) {
    for (k, v) in body.as_object().into_iter().flatten() {
        match k.as_str() {
            "tags" => contact["tags"] = Value::Array(tags_of(v)),
            "customFields" => {
                let mut fields = contact["customFields"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                for f in v.as_array().into_iter().flatten() {
                    let id = f["id"].as_str().map(str::to_owned).or_else(|| {
                        f["key"]
                            .as_str()
                            .map(|k| field_id(k.trim_start_matches("contact.")))
                    });
                    let Some(id) = id else { continue };
                    fields.retain(|x| x["id"] != id.as_str());
                    fields.push(json!({"id": id, "value": f["field_value"].clone()}));
                }
                contact["customFields"] = Value::Array(fields);
            }
            "locationId" => {}
            _ => contact[k] = v.clone(),
        }
    }
}

async fn handle(
    req: HttpRequest,
    body: web::Bytes,
    data: web::Data<Arc<Mutex<FakeState>>>,
) -> HttpResponse {
    let delay = data.lock().unwrap().delay;
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let mut s = data.lock().unwrap();
    s.requests.push(Seen {
        method: req.method().to_string(),
        path: req.path().to_owned(),
        authorization: header("authorization"),
        version: header("version"),
        body: body.clone(),
        at: std::time::Instant::now(),
    });
    if let Some((status, retry_after)) = s.scripted.pop_front() {
        let code = actix_web::http::StatusCode::from_u16(status).unwrap();
        let mut response = HttpResponse::build(code);
        if let Some(secs) = retry_after {
            response.insert_header(("Retry-After", secs.to_string()));
            response.insert_header(("X-RateLimit-Max", "100"));
            response.insert_header(("X-RateLimit-Remaining", "0"));
            response.insert_header(("X-RateLimit-Interval-Milliseconds", "10000"));
        }
        return response
            .json(json!({"statusCode": status, "message": "scripted", "error": "scripted"}));
    }
    if s.down {
        return error(500, json!("Internal server error"));
    }
    if header("authorization") != Some(format!("Bearer {}", s.key)) {
        return error(401, json!("Invalid JWT"));
    }
    let method = req.method().as_str().to_owned();
    let parts: Vec<&str> = req.path().trim_matches('/').split('/').collect();
    match (method.as_str(), parts.as_slice()) {
        ("POST", ["contacts", "upsert"]) => {
            if body["locationId"] != LOCATION {
                return error(422, json!(["locationId is required"]));
            }
            let email = body["email"].as_str().unwrap_or_default().to_lowercase();
            let existing = s
                .contacts
                .iter()
                .find(|(_, c)| c["email"] == email.as_str())
                .map(|(id, _)| id.clone());
            let new = existing.is_none();
            let id = existing.unwrap_or_else(|| {
                s.next += 1;
                format!("contact-{}", s.next)
            });
            let contact = s.contacts.entry(id.clone()).or_insert_with(
                || json!({"id": id, "locationId": LOCATION, "tags": [], "customFields": []}),
            );
            apply(contact, &body);
            HttpResponse::Ok().json(json!({"new": new, "contact": contact.clone(), "traceId": "t"}))
        }
        ("GET", ["contacts", "search", "duplicate"]) => {
            let query = req.query_string().to_owned();
            let email = url::form_urlencoded::parse(query.as_bytes())
                .find(|(k, _)| k == "email")
                .map(|(_, v)| v.to_lowercase())
                .unwrap_or_default();
            let contact = s
                .contacts
                .values()
                .find(|c| c["email"] == email.as_str())
                .cloned();
            HttpResponse::Ok().json(json!({ "contact": contact }))
        }
        ("GET", ["contacts", id]) => match s.contacts.get(*id) {
            Some(c) => HttpResponse::Ok().json(json!({"contact": c})),
            None => error(404, json!("Contact not found")),
        },
        ("PUT", ["contacts", id]) => {
            if body.get("locationId").is_some() {
                return error(422, json!(["property locationId should not exist"]));
            }
            match s.contacts.get_mut(*id) {
                Some(c) => {
                    apply(c, &body);
                    HttpResponse::Ok().json(json!({"succeded": true, "contact": c.clone()}))
                }
                None => error(404, json!("Contact not found")),
            }
        }
        (m @ ("POST" | "DELETE"), ["contacts", id, "tags"]) => {
            let Some(c) = s.contacts.get_mut(*id) else {
                return error(404, json!("Contact not found"));
            };
            let given = tags_of(&body["tags"]);
            let mut tags = c["tags"].as_array().cloned().unwrap_or_default();
            if m == "POST" {
                tags.extend(given);
                tags = tags_of(&Value::Array(tags));
            } else {
                tags.retain(|t| !given.contains(t));
            }
            c["tags"] = Value::Array(tags.clone());
            let status = if m == "POST" { 201 } else { 200 };
            HttpResponse::build(actix_web::http::StatusCode::from_u16(status).unwrap())
                .json(json!({"tags": tags}))
        }
        ("GET", ["locations", loc, "customFields"]) if *loc == LOCATION => {
            let fields: Vec<Value> = FIELDS
                .iter()
                .map(|k| json!({"id": field_id(k), "name": k, "fieldKey": format!("contact.{k}"), "dataType": "TEXT"}))
                .collect();
            HttpResponse::Ok().json(json!({"customFields": fields}))
        }
        ("POST", ["opportunities"]) => {
            s.next += 1;
            let mut o = body.clone();
            o["id"] = Value::from(format!("opp-{}", s.next));
            HttpResponse::Created().json(json!({"opportunity": o}))
        }
        _ => error(404, json!("Not found")),
    }
}
