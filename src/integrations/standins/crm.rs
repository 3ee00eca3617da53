//! The CRM sandbox (`CRM_API_BASE=sandbox`): a stateful fake of LeadConnector v2 served from
//! this process on a loopback port, so [`CrmClient`](crate::integrations::crm::CrmClient) is the client in every
//! mode and `cargo run` shows the whole synchronisation. Contacts, tags, custom fields and
//! opportunities live in memory, in the wire format of `fixtures/crm/README.md`.

use std::collections::{BTreeMap, HashMap};
use std::net::TcpListener;
use std::sync::{Arc, Mutex, MutexGuard};

use actix_web::dev::ServerHandle;
use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use anyhow::Context as _;
use serde_json::{Map, Value, json};

use crate::config::Secret;

/// Custom-field keys the sandbox location defines (`contact.<key>`).
pub const FIELD_KEYS: [&str; 17] = [
    "id_platform",
    "tipo_de_usuario",
    "internal_rating",
    "location",
    "contact_person",
    "company_type",
    "industry",
    "company_size",
    "preferred_language",
    "company_email",
    "main_area",
    "work_language",
    "experience_years",
    "portfolio_url",
    "linkedin_url",
    "hourly_rate",
    "username",
];

/// The contacts and opportunities of the sandbox location.
#[derive(Debug, Default)]
pub struct SandboxState {
    pub contacts: BTreeMap<String, Value>,
    pub opportunities: BTreeMap<String, Value>,
    /// Field id by key.
    pub fields: HashMap<String, String>,
    pub requests: u64,
    /// When each authenticated request arrived: what the CRM's own rate limit counts.
    pub arrivals: Vec<std::time::Instant>,
    next_id: u64,
}

impl SandboxState {
    fn id(&mut self, prefix: &str) -> String {
        self.next_id += 1;
        format!(
            "{prefix}{:06}{}",
            self.next_id,
            crate::domain::token::random_token(6)
        )
    }
}

struct Shared {
    state: Mutex<SandboxState>,
    api_key: Secret,
    location_id: String,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, SandboxState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A running sandbox. Clones share everything.
#[derive(Clone)]
pub struct CrmSandbox {
    shared: Arc<Shared>,
    base_url: String,
    server: ServerHandle,
}

impl std::fmt::Debug for CrmSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrmSandbox")
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

impl CrmSandbox {
    /// Binds `127.0.0.1:0` and serves the protocol with one worker.
    pub async fn start(api_key: Secret, location_id: String) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").context("cannot bind the CRM sandbox")?;
        let base_url = format!("http://127.0.0.1:{}", listener.local_addr()?.port());
        let mut state = SandboxState::default();
        for key in FIELD_KEYS {
            let id = state.id("fld");
            state.fields.insert(key.to_owned(), id);
        }
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            api_key,
            location_id,
        });
        let data = web::Data::from(shared.clone());
        let server = HttpServer::new(move || {
            App::new()
                .app_data(data.clone())
                .app_data(web::JsonConfig::default().limit(256 * 1024))
                .route("/contacts/upsert", web::post().to(upsert))
                .route("/contacts/search/duplicate", web::get().to(duplicate))
                .route("/contacts/{id}", web::get().to(get_contact))
                .route("/contacts/{id}", web::put().to(put_contact))
                .route("/contacts/{id}", web::delete().to(delete_contact))
                .route("/contacts/{id}/tags", web::post().to(add_tags))
                .route("/contacts/{id}/tags", web::delete().to(remove_tags))
                .route("/locations/{id}/customFields", web::get().to(custom_fields))
                .route("/opportunities/pipelines", web::get().to(pipelines))
                .route("/opportunities/", web::post().to(create_opportunity))
                .route("/opportunities", web::post().to(create_opportunity))
                .route("/opportunities/{id}", web::put().to(update_opportunity))
                .default_service(web::to(|| async { error(404, "Not Found") }))
        })
        .workers(1)
        .disable_signals()
        .shutdown_timeout(2)
        .listen(listener)
        .context("cannot serve the CRM sandbox")?
        .run();
        let handle = server.handle();
        tokio::spawn(server);
        tracing::info!(%base_url, "CRM sandbox started");
        Ok(Self {
            shared,
            base_url,
            server: handle,
        })
    }

    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// Reads or changes the state (tests, demos).
    pub fn with_state<T>(&self, f: impl FnOnce(&mut SandboxState) -> T) -> T {
        f(&mut self.shared.lock())
    }

    pub async fn stop(&self) {
        self.server.stop(true).await;
    }
}

type Data = web::Data<Shared>;

fn error(status: u16, message: &str) -> HttpResponse {
    let code = actix_web::http::StatusCode::from_u16(status)
        .unwrap_or(actix_web::http::StatusCode::BAD_REQUEST);
    HttpResponse::build(code).json(json!({
        "statusCode": status,
        "message": message,
        "error": code.canonical_reason().unwrap_or("Error"),
    }))
}

/// The refusal of a request without the bearer key or the `Version` header, as the real API
/// answers it; counts the request.
fn refusal(req: &HttpRequest, data: &Shared) -> Option<HttpResponse> {
    let token = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let ok = token.is_some_and(|t| {
        crate::domain::token::constant_time_eq(t.as_bytes(), data.api_key.expose().as_bytes())
    });
    if !ok {
        return Some(error(401, "Invalid JWT"));
    }
    if req.headers().get("version").is_none() {
        return Some(error(400, "Version header was not found"));
    }
    let mut state = data.lock();
    state.requests += 1;
    state.arrivals.push(std::time::Instant::now());
    None
}

/// Applies an upsert or PUT body to a stored contact: standard fields, tags (replacing),
/// custom fields (by id or `key`).
fn apply(state: &SandboxState, contact: &mut Map<String, Value>, body: &Map<String, Value>) {
    for (k, v) in body {
        match k.as_str() {
            "tags" => {
                let tags: Vec<Value> = v.as_array().cloned().unwrap_or_default();
                contact.insert("tags".into(), Value::Array(dedup(tags)));
            }
            "customFields" => {
                let mut current: Vec<Value> = contact
                    .get("customFields")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                for field in v.as_array().into_iter().flatten() {
                    let id = field
                        .get("id")
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                        .or_else(|| {
                            let key = field.get("key")?.as_str()?;
                            state
                                .fields
                                .get(key.strip_prefix("contact.").unwrap_or(key))
                                .cloned()
                        });
                    let Some(id) = id else { continue };
                    let value = field
                        .get("field_value")
                        .or_else(|| field.get("value"))
                        .cloned()
                        .unwrap_or(Value::Null);
                    current.retain(|f| f.get("id").and_then(Value::as_str) != Some(id.as_str()));
                    current.push(json!({ "id": id, "value": value }));
                }
                contact.insert("customFields".into(), Value::Array(current));
            }
            "locationId" | "id" => {}
            _ => {
                contact.insert(k.clone(), v.clone());
            }
        }
    }
}

fn dedup(tags: Vec<Value>) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for t in tags {
        if let Some(s) = t.as_str() {
            let s = Value::from(s.trim().to_lowercase());
            if !out.contains(&s) {
                out.push(s);
            }
        }
    }
    out
}

async fn upsert(req: HttpRequest, data: Data, body: web::Json<Value>) -> HttpResponse {
    if let Some(r) = refusal(&req, &data) {
        return r;
    }
    let Some(body) = body.as_object() else {
        return error(422, "body must be an object");
    };
    if body.get("locationId").and_then(Value::as_str) != Some(data.location_id.as_str()) {
        return HttpResponse::UnprocessableEntity().json(json!({"statusCode": 422, "message": ["locationId must be the token's location"], "error": "Unprocessable Entity"}));
    }
    let Some(email) = body
        .get("email")
        .and_then(Value::as_str)
        .map(str::to_lowercase)
    else {
        return HttpResponse::UnprocessableEntity().json(json!({"statusCode": 422, "message": ["email or phone is required"], "error": "Unprocessable Entity"}));
    };
    let mut state = data.lock();
    let existing = state
        .contacts
        .iter()
        .find(|(_, c)| c.get("email").and_then(Value::as_str) == Some(email.as_str()))
        .map(|(id, _)| id.clone());
    let new = existing.is_none();
    let id = match existing {
        Some(id) => id,
        None => {
            let id = state.id("ct");
            let contact = json!({"id": id, "locationId": data.location_id, "email": email, "tags": [], "customFields": [], "dnd": false});
            state.contacts.insert(id.clone(), contact);
            id
        }
    };
    let mut contact = state.contacts[&id].as_object().cloned().unwrap_or_default();
    apply(&state, &mut contact, body);
    contact.insert("email".into(), Value::from(email));
    state
        .contacts
        .insert(id.clone(), Value::Object(contact.clone()));
    HttpResponse::Ok().json(
        json!({"new": new, "contact": contact, "traceId": crate::domain::token::random_token(12)}),
    )
}

async fn duplicate(
    req: HttpRequest,
    data: Data,
    query: web::Query<HashMap<String, String>>,
) -> HttpResponse {
    if let Some(r) = refusal(&req, &data) {
        return r;
    }
    if query.get("locationId") != Some(&data.location_id) {
        return error(422, "locationId is required");
    }
    let email = query
        .get("email")
        .map(|e| e.to_lowercase())
        .unwrap_or_default();
    let state = data.lock();
    let contact = state
        .contacts
        .values()
        .find(|c| c.get("email").and_then(Value::as_str) == Some(email.as_str()))
        .cloned();
    HttpResponse::Ok().json(json!({ "contact": contact }))
}

async fn get_contact(req: HttpRequest, data: Data, id: web::Path<String>) -> HttpResponse {
    if let Some(r) = refusal(&req, &data) {
        return r;
    }
    match data.lock().contacts.get(id.as_str()) {
        Some(c) => HttpResponse::Ok().json(json!({ "contact": c })),
        None => error(404, "Contact not found"),
    }
}

async fn put_contact(
    req: HttpRequest,
    data: Data,
    id: web::Path<String>,
    body: web::Json<Value>,
) -> HttpResponse {
    if let Some(r) = refusal(&req, &data) {
        return r;
    }
    let Some(body) = body.as_object() else {
        return error(422, "body must be an object");
    };
    if body.contains_key("locationId") {
        return HttpResponse::UnprocessableEntity().json(json!({"statusCode": 422, "message": ["property locationId should not exist"], "error": "Unprocessable Entity"}));
    }
    let mut state = data.lock();
    let Some(mut contact) = state
        .contacts
        .get(id.as_str())
        .and_then(|c| c.as_object().cloned())
    else {
        return error(404, "Contact not found");
    };
    apply(&state, &mut contact, body);
    state
        .contacts
        .insert(id.clone(), Value::Object(contact.clone()));
    HttpResponse::Ok().json(json!({"succeded": true, "contact": contact}))
}

async fn delete_contact(req: HttpRequest, data: Data, id: web::Path<String>) -> HttpResponse {
    if let Some(r) = refusal(&req, &data) {
        return r;
    }
    match data.lock().contacts.remove(id.as_str()) {
        Some(_) => HttpResponse::Ok().json(json!({"succeded": true})),
        None => error(404, "Contact not found"),
    }
}

async fn change_tags(
    req: HttpRequest,
    data: Data,
    id: web::Path<String>,
    body: web::Json<Value>,
    add: bool,
) -> HttpResponse {
    if let Some(r) = refusal(&req, &data) {
        return r;
    }
    let Some(given) = body.get("tags").and_then(Value::as_array).cloned() else {
        return HttpResponse::UnprocessableEntity().json(json!({"statusCode": 422, "message": ["tags must be an array"], "error": "Unprocessable Entity"}));
    };
    let given = dedup(given);
    let mut state = data.lock();
    let Some(contact) = state.contacts.get_mut(id.as_str()) else {
        return error(404, "Contact not found");
    };
    let mut tags = contact
        .get("tags")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if add {
        tags.extend(given);
        tags = dedup(tags);
    } else {
        tags.retain(|t| !given.contains(t));
    }
    contact["tags"] = Value::Array(tags.clone());
    let status = if add {
        actix_web::http::StatusCode::CREATED
    } else {
        actix_web::http::StatusCode::OK
    };
    HttpResponse::build(status).json(json!({ "tags": tags }))
}

async fn add_tags(
    req: HttpRequest,
    data: Data,
    id: web::Path<String>,
    body: web::Json<Value>,
) -> HttpResponse {
    change_tags(req, data, id, body, true).await
}

async fn remove_tags(
    req: HttpRequest,
    data: Data,
    id: web::Path<String>,
    body: web::Json<Value>,
) -> HttpResponse {
    change_tags(req, data, id, body, false).await
}

async fn custom_fields(req: HttpRequest, data: Data, location: web::Path<String>) -> HttpResponse {
    if let Some(r) = refusal(&req, &data) {
        return r;
    }
    if location.as_str() != data.location_id {
        return error(403, "The token does not have access to this location");
    }
    let state = data.lock();
    let mut fields: Vec<Value> = state
        .fields
        .iter()
        .map(|(key, id)| json!({"id": id, "name": key, "fieldKey": format!("contact.{key}"), "dataType": "TEXT", "model": "contact", "locationId": data.location_id}))
        .collect();
    fields.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    HttpResponse::Ok().json(json!({ "customFields": fields }))
}

async fn pipelines(req: HttpRequest, data: Data) -> HttpResponse {
    if let Some(r) = refusal(&req, &data) {
        return r;
    }
    HttpResponse::Ok().json(json!({"pipelines": [{"id": "sandbox-pipeline", "name": "Marketplace", "stages": [{"id": "sandbox-stage-new", "name": "New"}]}]}))
}

async fn create_opportunity(req: HttpRequest, data: Data, body: web::Json<Value>) -> HttpResponse {
    if let Some(r) = refusal(&req, &data) {
        return r;
    }
    let missing: Vec<Value> = ["pipelineId", "locationId", "name", "status", "contactId"]
        .into_iter()
        .filter(|k| body.get(*k).is_none_or(Value::is_null))
        .map(|k| Value::from(format!("{k} should not be empty")))
        .collect();
    if !missing.is_empty() {
        return HttpResponse::UnprocessableEntity()
            .json(json!({"statusCode": 422, "message": missing, "error": "Unprocessable Entity"}));
    }
    let mut state = data.lock();
    let contact = body["contactId"].as_str().unwrap_or_default();
    if !state.contacts.contains_key(contact) {
        return error(400, "Contact not found");
    }
    let id = state.id("op");
    let mut opportunity = body.as_object().cloned().unwrap_or_default();
    opportunity.insert("id".into(), Value::from(id.clone()));
    state
        .opportunities
        .insert(id, Value::Object(opportunity.clone()));
    HttpResponse::Created().json(json!({ "opportunity": opportunity }))
}

async fn update_opportunity(
    req: HttpRequest,
    data: Data,
    id: web::Path<String>,
    body: web::Json<Value>,
) -> HttpResponse {
    if let Some(r) = refusal(&req, &data) {
        return r;
    }
    let mut state = data.lock();
    let Some(opportunity) = state
        .opportunities
        .get_mut(id.as_str())
        .and_then(Value::as_object_mut)
    else {
        return error(404, "Opportunity not found");
    };
    for (k, v) in body.as_object().into_iter().flatten() {
        if k != "id" && k != "locationId" {
            opportunity.insert(k.clone(), v.clone());
        }
    }
    let answer = Value::Object(opportunity.clone());
    HttpResponse::Ok().json(json!({ "opportunity": answer }))
}
