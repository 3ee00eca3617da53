//! A small marketplace for workflow tests: an administrator, verified companies and experts
//! with complete fiscal data, published projects and proposals, each set up over HTTP the
//! way users do it (only the e-mail confirmation is taken as read, from the database).

use crate::helpers::{Account, TestApp, admin, json, register, request_as};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json as j};

pub struct Market {
    pub app: TestApp,
    pub admin_id: i64,
    pub admin_token: String,
}

/// A request from a registered account's cookie session (bearer plus CSRF cookie and header).
pub async fn send(
    app: &TestApp,
    method: Method,
    path: &str,
    account: &Account,
    body: Option<&Value>,
) -> reqwest::Response {
    let mut request = app
        .client
        .request(method, app.url(path))
        .bearer_auth(&account.access_token)
        .header("Cookie", format!("csrf_token={}", account.csrf_token))
        .header("X-CSRF-Token", &account.csrf_token);
    if let Some(body) = body {
        request = request.json(body);
    }
    request.send().await.expect("request")
}

/// How many notifications of `kind` user `user_id` has.
pub async fn notifications_of(app: &TestApp, user_id: i64, kind: &str) -> i64 {
    let mut conn = app.db.conn().await.unwrap();
    marketplace::on_exec!(conn.exec(), c => sqlx::query_scalar::<_, i64>(
        "SELECT COUNT(*) FROM notifications WHERE user_id = $1 AND type = $2")
        .bind(user_id).bind(kind).fetch_one(c).await)
    .unwrap()
}

/// Runs the outbox until user `user_id` has a notification of `kind` (five seconds at most).
pub async fn wait_notification(app: &TestApp, user_id: i64, kind: &str) {
    for _ in 0..250 {
        let _ = app.state.outbox.trigger().await;
        if notifications_of(app, user_id, kind).await > 0 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("no {kind} notification for user {user_id}");
}

pub fn code(body: &Value) -> &str {
    body["code"].as_str().unwrap_or_default()
}

pub const FISCAL: &str = r#"{"tax_id": "B12345678", "fiscal_name": "Fiscal Name",
    "fiscal_address": "Calle Mayor 1", "fiscal_postal_code": "28001", "fiscal_city": "Madrid",
    "fiscal_country": "ES", "fiscal_type": "autonomo"}"#;

impl Market {
    pub async fn open() -> Self {
        Self::open_with(&[]).await
    }

    pub async fn open_with(vars: &[(&str, &str)]) -> Self {
        let app = crate::helpers::spawn_app_with(vars).await;
        let (admin_id, admin_token) = admin(&app, "root").await;
        Self {
            app,
            admin_id,
            admin_token,
        }
    }

    pub async fn as_admin(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> reqwest::Response {
        request_as(&self.app, method, path, &self.admin_token, body).await
    }

    pub async fn send(
        &self,
        account: &Account,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> reqwest::Response {
        send(&self.app, method, path, account, body.as_ref()).await
    }

    /// Marks the account's e-mail confirmed.
    pub async fn confirm_email(&self, account: &Account) {
        let mut conn = self.app.db.conn().await.unwrap();
        marketplace::store::users::verify_email(
            conn.exec(),
            account.id,
            &account.email,
            self.app.clock.now(),
        )
        .await
        .unwrap();
    }

    /// A user of `role` with a confirmed e-mail and a profile; `fiscal` adds complete fiscal
    /// data, `verified` has an administrator verify the profile.
    pub async fn member(
        &self,
        username: &str,
        role: &str,
        fiscal: bool,
        verified: bool,
    ) -> Account {
        let account = register(&self.app, username, &[role]).await;
        self.confirm_email(&account).await;
        let body = if role == "empresa" {
            j!({"profile_type": "empresa", "company_name": format!("{username} SL"), "full_name": username})
        } else {
            j!({"profile_type": "experto", "full_name": format!("Expert {username}"), "skills": ["Rust", "SQL"]})
        };
        let response = self
            .send(&account, Method::POST, "/api/profiles/", Some(body))
            .await;
        assert_eq!(
            response.status(),
            StatusCode::CREATED,
            "profile of {username}"
        );
        let profile = json(response).await;
        if fiscal {
            let id = profile["id"].as_i64().unwrap();
            let response = self
                .send(
                    &account,
                    Method::PUT,
                    &format!("/api/profiles/{id}/fiscal-data"),
                    Some(serde_json::from_str(FISCAL).unwrap()),
                )
                .await;
            assert_eq!(response.status(), StatusCode::OK);
            assert_eq!(json(response).await["fiscal_data_complete"], true);
        }
        if verified {
            let response = self
                .as_admin(
                    Method::PUT,
                    &format!("/api/admin/users/{}/verify", account.id),
                    Some(&j!({})),
                )
                .await;
            assert_eq!(response.status(), StatusCode::OK, "verify {username}");
        }
        account
    }

    pub async fn company(&self, username: &str) -> Account {
        self.member(username, "empresa", true, true).await
    }

    pub async fn expert(&self, username: &str) -> Account {
        self.member(username, "experto", true, true).await
    }

    /// Creates a project and returns its JSON (asserting 201).
    pub async fn create_project(&self, company: &Account, body: Value) -> Value {
        let response = self
            .send(company, Method::POST, "/api/projects/", Some(body))
            .await;
        let status = response.status();
        let body = json(response).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        body
    }

    /// A curated project, validated by the administrator and with `invited` invited.
    pub async fn published_project(
        &self,
        company: &Account,
        budget: f64,
        invited: &[&Account],
    ) -> i64 {
        let project = self
            .create_project(
                company,
                j!({"title": "Data platform", "description": "Build it", "budget": budget,
                    "deadline": "2099-01-01T00:00:00", "skills_required": ["Rust"],
                    "project_type": "curated", "status": "pending_publication"}),
            )
            .await;
        let id = project["id"].as_i64().unwrap();
        let response = self
            .as_admin(
                Method::POST,
                &format!("/api/projects/{id}/validate"),
                Some(&j!({"approved": true})),
            )
            .await;
        assert_eq!(response.status(), StatusCode::OK);
        if !invited.is_empty() {
            let ids: Vec<i64> = invited.iter().map(|a| a.id).collect();
            let response = self
                .as_admin(
                    Method::POST,
                    &format!("/api/admin/projects/{id}/invite-experts"),
                    Some(&j!({"expert_ids": ids})),
                )
                .await;
            assert_eq!(response.status(), StatusCode::OK);
        }
        id
    }

    /// A proposal of three milestones adding up to `amounts`' sum.
    pub async fn apply(
        &self,
        expert: &Account,
        project_id: i64,
        amounts: [f64; 3],
    ) -> reqwest::Response {
        let total: f64 = amounts.iter().sum();
        let total = (total * 100.0).round() / 100.0;
        let milestones: Vec<Value> = amounts
            .iter()
            .enumerate()
            .map(|(i, a)| j!({"title": format!("Milestone {}", i + 1), "amount": a}))
            .collect();
        self.send(
            expert,
            Method::POST,
            &format!("/api/projects/{project_id}/apply"),
            Some(j!({"cover_letter": "I can do it", "proposed_budget": total,
                     "proposed_milestones": milestones})),
        )
        .await
    }

    /// One text column of one row.
    pub async fn text(&self, sql: &'static str, id: i64) -> String {
        let mut conn = self.app.db.conn().await.unwrap();
        marketplace::on_exec!(conn.exec(), c => sqlx::query_scalar::<_, String>(sql).bind(id).fetch_one(c).await)
            .unwrap()
    }

    pub async fn count(&self, sql: &'static str, id: i64) -> i64 {
        let mut conn = self.app.db.conn().await.unwrap();
        marketplace::on_exec!(conn.exec(), c => sqlx::query_scalar::<_, i64>(sql).bind(id).fetch_one(c).await)
            .unwrap()
    }
}
