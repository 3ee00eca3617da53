//! Invoices (issue #65): what a release and a refund issue, their figures and numbers, the
//! documents' PDF and e-mail, the pending ones, the chain `verify` walks, and the sums held
//! against the money the processor moved.

use std::process::Command;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json as j};

use crate::escrow::{Deal, authorise, connect, deal, payment, released, sandbox_ledger};
use crate::helpers::{Account, json};
use crate::market::{Market, wait_notification};

/// Replaces `account`'s fiscal data (profile of `role`) with `body` over the API.
async fn fiscal(m: &Market, account: &Account, role: &str, body: Value) -> Value {
    let profile = m
        .count(
            match role {
                "empresa" => {
                    "SELECT id FROM profiles WHERE user_id = $1 AND profile_type = 'empresa'"
                }
                _ => "SELECT id FROM profiles WHERE user_id = $1 AND profile_type = 'experto'",
            },
            account.id,
        )
        .await;
    let r = m
        .send(
            account,
            Method::PUT,
            &format!("/api/profiles/{profile}/fiscal-data"),
            Some(body),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    json(r).await
}

fn spanish(name: &str, tax_id: &str, kind: &str, irpf: i64) -> Value {
    j!({"tax_id": tax_id, "fiscal_name": name, "fiscal_address": "Calle de la Peña 3",
        "fiscal_postal_code": "28004", "fiscal_city": "Madrid", "fiscal_country": "España",
        "fiscal_type": kind, "irpf_rate": irpf})
}

/// The documents `who` reads in `GET /api/invoices` (newest first).
async fn invoices_of(m: &Market, who: &Account, query: &str) -> Vec<Value> {
    let r = m
        .send(who, Method::GET, &format!("/api/invoices{query}"), None)
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    json(r).await["items"].as_array().unwrap().clone()
}

/// Releases payment `id` as its company.
async fn release(m: &Market, company: &Account, id: i64) {
    let r = m
        .send(
            company,
            Method::POST,
            "/api/payments/release",
            Some(j!({"payment_id": id})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK, "{}", json(r).await);
}

/// A deal whose parties are a Spanish autónomo with 15 % IRPF and a Spanish company, its
/// first milestone (1,060.00) released.
async fn released_in_spain(m: &Market, name: &str) -> Deal {
    let d = deal(m, name, [1060.0, 100.0, 100.0]).await;
    fiscal(
        m,
        &d.expert,
        "experto",
        spanish("José Núñez García", "12345678Z", "autonomo", 15),
    )
    .await;
    fiscal(
        m,
        &d.company,
        "empresa",
        spanish("Acme Ibérica, S.L.", "B87654321", "empresa", 0),
    )
    .await;
    connect(m, &d.expert).await;
    authorise(m, d.first_payment).await;
    release(m, &d.company, d.first_payment).await;
    d
}

#[actix_web::test]
async fn a_release_issues_the_experts_invoice_and_the_platforms_fee_invoice() {
    let m = Market::open().await;
    let d = released_in_spain(&m, "inv").await;
    let year = m.app.clock.now().format("%Y").to_string();

    // The company received the expert's invoice: 1,060.00 paid = 1,000.00 + 21 % VAT − 15 %
    // IRPF, self-billed in the expert's series.
    let received = invoices_of(&m, &d.company, "").await;
    assert_eq!(received.len(), 1, "{received:?}");
    let invoice = &received[0];
    assert_eq!(invoice["type"], "invoice");
    assert_eq!(invoice["role"], "expert_service");
    assert_eq!(invoice["status"], "issued");
    assert_eq!(
        invoice["number"],
        format!("EXP{}-F-{year}-000001", d.expert.id)
    );
    assert_eq!(
        (
            &invoice["base"],
            &invoice["vat_rate"],
            &invoice["vat"],
            &invoice["irpf_rate"],
            &invoice["irpf"],
            &invoice["total"],
            &invoice["payable"]
        ),
        (
            &j!(1000.0),
            &j!(21.0),
            &j!(210.0),
            &j!(15.0),
            &j!(150.0),
            &j!(1210.0),
            &j!(1060.0)
        )
    );
    assert_eq!(invoice["tax_case"], "domestic");
    assert_eq!(invoice["issuer"]["name"], "José Núñez García");
    assert_eq!(invoice["recipient"]["tax_id"], "B87654321");
    assert_eq!(invoice["issuer_user_id"], d.expert.id);
    assert_eq!(invoice["recipient_user_id"], d.company.id);
    assert_eq!(invoice["payment_id"], d.first_payment);
    assert_eq!(invoice["record_hash"].as_str().unwrap().len(), 64);

    // The expert sees it too (issued in their name), and the platform's invoice for the
    // commission: 5 % of 1,060.00 = 53.00, VAT included.
    let experts = invoices_of(&m, &d.expert, "").await;
    assert_eq!(experts.len(), 2);
    let fee = experts
        .iter()
        .find(|i| i["role"] == "platform_fee")
        .unwrap();
    assert_eq!(fee["number"], format!("MKT-F-{year}-000001"));
    assert_eq!(fee["issuer_user_id"], Value::Null);
    assert_eq!(fee["recipient_user_id"], d.expert.id);
    assert_eq!(
        (&fee["base"], &fee["vat"], &fee["total"], &fee["irpf"]),
        (&j!(43.8), &j!(9.2), &j!(53.0), &j!(0.0))
    );
    let y = payment(&m, d.first_payment).await;
    assert_eq!(y["commission_amount"], fee["total"]);
    assert_eq!(y["amount"], invoice["payable"]);

    // Filters: by type and year; an outsider reads nothing of it.
    assert!(
        invoices_of(&m, &d.company, "?type=credit_note")
            .await
            .is_empty()
    );
    assert_eq!(
        invoices_of(
            &m,
            &d.company,
            &format!("?year={year}&project_id={}", d.project_id)
        )
        .await
        .len(),
        1
    );
    let outsider = m.company("invoutsider").await;
    assert!(invoices_of(&m, &outsider, "").await.is_empty());
    let id = invoice["id"].as_i64().unwrap();
    for path in [
        format!("/api/invoices/{id}"),
        format!("/api/invoices/{id}/pdf"),
    ] {
        let r = m.send(&outsider, Method::GET, &path, None).await;
        assert_eq!(r.status(), StatusCode::NOT_FOUND, "{path}");
    }

    // Each party is told; the company's e-mail carries the PDF.
    wait_notification(&m.app, d.company.id, "invoice_issued").await;
    wait_notification(&m.app, d.expert.id, "invoice_issued").await;
    let number = invoice["number"].as_str().unwrap();
    let mails = m.app.mails_about(&d.company.email, number).await;
    let (name, media, bytes) = &mails[0].attachments[0];
    assert_eq!(
        (name.as_str(), media.as_str()),
        (format!("{number}.pdf").as_str(), "application/pdf")
    );
    assert!(bytes.starts_with(b"%PDF-"));

    // The public check of its QR code: number and hash, nothing of the parties.
    let hash = invoice["record_hash"].as_str().unwrap();
    let r = m
        .app
        .get(&format!("/api/invoices/verify?number={number}&hash={hash}"))
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let check = json(r).await;
    assert_eq!(
        (&check["valid"], &check["number"], &check["total"]),
        (&j!(true), &j!(number), &j!(1210.0))
    );
    assert!(check.get("issuer").is_none());
    // The hash with its last digit changed (to another digit, whatever it was).
    let last = if hash.ends_with('0') { '1' } else { '0' };
    let wrong = format!("{}{last}", &hash[..63]);
    let r = m
        .app
        .get(&format!(
            "/api/invoices/verify?number={number}&hash={wrong}"
        ))
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let check = json(r).await;
    assert_eq!(
        (&check["valid"], &check["total"]),
        (&j!(false), &Value::Null)
    );
}

#[actix_web::test]
async fn the_pdf_holds_every_field_of_the_invoice() {
    let m = Market::open().await;
    let d = released_in_spain(&m, "pdf").await;
    let invoice = invoices_of(&m, &d.company, "").await.remove(0);
    let id = invoice["id"].as_i64().unwrap();
    let r = m
        .send(
            &d.company,
            Method::GET,
            &format!("/api/invoices/{id}/pdf"),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["content-type"], "application/pdf");
    let bytes = r.bytes().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("invoice.pdf");
    std::fs::write(&file, &bytes).unwrap();
    // Read as a reader would, with poppler; skipped where it is not installed, unless
    // `PDF_TOOLS_REQUIRED` says it must be (`.ci/run`, which installs it).
    let text = match Command::new("pdftotext")
        .arg("-layout")
        .arg(&file)
        .arg("-")
        .output()
    {
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                && std::env::var_os("PDF_TOOLS_REQUIRED").is_none() =>
        {
            eprintln!("pdftotext not installed (Debian: poppler-utils): the PDF's text not read");
            return;
        }
        text => text.expect("pdftotext (Debian's poppler-utils) must be installed"),
    };
    assert!(text.status.success());
    let text = String::from_utf8(text.stdout).unwrap();
    for field in [
        invoice["number"].as_str().unwrap(),
        "José Núñez García",
        "12345678Z",
        "Acme Ibérica, S.L.",
        "B87654321",
        "Calle de la Peña 3",
        "28004",
        "1,000.00",
        "210.00",
        "150.00",
        "1,210.00",
        "1,060.00",
        "21 %",
        "15 %",
        "Expert Marketplace",
        invoice["record_hash"].as_str().unwrap(),
        "http://frontend.test/invoices/verify?number=",
    ] {
        assert!(text.contains(field), "{field:?} not in the PDF:\n{text}");
    }
    // A page image for CI's artifacts (ARTIFACTS_DIR), made by poppler as a reader would.
    if let Ok(artifacts) = std::env::var("ARTIFACTS_DIR") {
        std::fs::create_dir_all(&artifacts).unwrap();
        let image = Command::new("pdftoppm")
            .args(["-png", "-r", "80", "-singlefile"])
            .arg(&file)
            .arg(std::path::Path::new(&artifacts).join("invoice"))
            .status()
            .unwrap();
        assert!(image.success());
    }
}

#[actix_web::test]
async fn a_refund_after_the_release_issues_credit_notes_and_everything_reconciles() {
    let m = Market::open().await;
    let d = released(&m, "cn", 242.0).await;
    let r = m
        .as_admin(
            Method::POST,
            &format!("/api/admin/payments/{}/refund", d.first_payment),
            Some(&j!({"reason": "The work was not delivered"})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK, "{}", json(r).await);
    let year = m.app.clock.now().format("%Y").to_string();

    let notes = invoices_of(&m, &d.expert, "?type=credit_note").await;
    assert_eq!(notes.len(), 2, "{notes:?}");
    let invoices = invoices_of(&m, &d.expert, "?type=invoice").await;
    for note in &notes {
        let corrected = invoices
            .iter()
            .find(|i| i["id"] == note["corrects_id"])
            .expect("a note names the invoice it corrects");
        assert_eq!(note["role"], corrected["role"]);
        for figure in ["base", "vat", "irpf", "total", "payable"] {
            assert_eq!(
                note[figure].as_f64().unwrap(),
                -corrected[figure].as_f64().unwrap(),
                "{figure}"
            );
        }
    }
    let expert_note = notes
        .iter()
        .find(|n| n["role"] == "expert_service")
        .unwrap();
    assert_eq!(
        expert_note["number"],
        format!("EXP{}-R-{year}-000001", d.expert.id)
    );
    wait_notification(&m.app, d.company.id, "invoice_issued").await;

    // The sums against the processor's ledger: what was captured is what the expert's
    // invoices made payable, the commission is the platform's invoices, and what went back
    // is the credit notes.
    let ledger = sandbox_ledger(&m).await;
    let y = payment(&m, d.first_payment).await;
    let intent =
        crate::escrow::intent_in(&ledger, y["processor_payment_intent_id"].as_str().unwrap());
    let captured = intent["captured"].as_i64().unwrap();
    let refunded = intent["refunded"].as_i64().unwrap();
    assert_eq!((captured, refunded), (24_200, 24_200));
    let all = admin_invoices(&m, &format!("?project_id={}", d.project_id)).await;
    let sum = |kind: &str, role: &str, figure: &str| -> i64 {
        all.iter()
            .filter(|i| i["type"] == kind && i["role"] == role)
            .map(|i| (i[figure].as_f64().unwrap() * 100.0).round() as i64)
            .sum()
    };
    assert_eq!(sum("invoice", "expert_service", "payable"), captured);
    assert_eq!(
        sum("invoice", "platform_fee", "total"),
        (y["commission_amount"].as_f64().unwrap() * 100.0).round() as i64
    );
    assert_eq!(-sum("credit_note", "expert_service", "payable"), refunded);
    assert_eq!(
        -sum("credit_note", "platform_fee", "total"),
        sum("invoice", "platform_fee", "total")
    );
}

async fn admin_invoices(m: &Market, query: &str) -> Vec<Value> {
    let r = m
        .as_admin(Method::GET, &format!("/api/admin/invoices{query}"), None)
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    json(r).await["items"].as_array().unwrap().clone()
}

#[actix_web::test]
async fn a_release_with_incomplete_fiscal_data_moves_the_money_and_issues_later() {
    let m = Market::open().await;
    let d = deal(&m, "pend", [300.0, 100.0, 100.0]).await;
    connect(&m, &d.expert).await;
    authorise(&m, d.first_payment).await;
    // The expert's tax id is gone by the release.
    let body = fiscal(&m, &d.expert, "experto", j!({"tax_id": ""})).await;
    assert_eq!(body["fiscal_data_complete"], false);
    release(&m, &d.company, d.first_payment).await;
    assert_eq!(payment(&m, d.first_payment).await["status"], "released");

    let pending = admin_invoices(&m, "?status=pending_fiscal_data").await;
    assert_eq!(pending.len(), 2, "both documents wait: {pending:?}");
    assert!(
        pending
            .iter()
            .all(|i| i["number"].is_null() && i["base"].is_null())
    );
    wait_notification(&m.app, d.expert.id, "invoice_waiting").await;
    let id = pending[0]["id"].as_i64().unwrap();
    let r = m
        .send(
            &d.expert,
            Method::GET,
            &format!("/api/invoices/{id}/pdf"),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::CONFLICT);

    // Completed: both are issued, numbered from 1.
    fiscal(&m, &d.expert, "experto", j!({"tax_id": "X1234567L"})).await;
    assert!(
        admin_invoices(&m, "?status=pending_fiscal_data")
            .await
            .is_empty()
    );
    let issued = invoices_of(&m, &d.expert, "").await;
    assert_eq!(issued.len(), 2);
    assert!(
        issued
            .iter()
            .all(|i| i["status"] == "issued" && i["number"].as_str().unwrap().ends_with("-000001"))
    );
    let service = issued
        .iter()
        .find(|i| i["role"] == "expert_service")
        .unwrap();
    assert_eq!(service["issuer"]["tax_id"], "X1234567L");
    assert_eq!(service["payable"], j!(300.0));
}

#[actix_web::test]
async fn the_experts_invoice_waits_for_their_acceptance_of_self_billing() {
    let m = Market::open().await;
    let d = deal(&m, "agree", [400.0, 100.0, 100.0]).await;
    // The proposal accepted self-billing, with its date; this expert's acceptance is taken
    // back, as for one whose proposal came before the agreement existed.
    let accepted = m
        .text(
            "SELECT CAST(self_billing_accepted_at AS TEXT) FROM profiles
             WHERE user_id = $1 AND profile_type = 'experto'",
            d.expert.id,
        )
        .await;
    assert!(!accepted.is_empty());
    {
        let mut conn = m.app.db.conn().await.unwrap();
        marketplace::on_exec!(conn.exec(), c => sqlx::query(
            "UPDATE profiles SET self_billing_accepted_at = NULL WHERE user_id = $1")
            .bind(d.expert.id).execute(c).await.map(drop))
        .unwrap();
    }
    connect(&m, &d.expert).await;
    authorise(&m, d.first_payment).await;
    release(&m, &d.company, d.first_payment).await;
    let documents = invoices_of(&m, &d.expert, "").await;
    let status_of = |docs: &[Value], role: &str| {
        docs.iter()
            .find(|i| i["role"] == role)
            .map(|i| i["status"].as_str().unwrap().to_owned())
            .unwrap()
    };
    assert_eq!(status_of(&documents, "expert_service"), "pending_agreement");
    assert_eq!(status_of(&documents, "platform_fee"), "issued");
    wait_notification(&m.app, d.expert.id, "invoice_waiting").await;
    // Only the expert accepts.
    let r = m
        .send(
            &d.company,
            Method::POST,
            "/api/invoices/self-billing-agreement",
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let r = m
        .send(
            &d.expert,
            Method::POST,
            "/api/invoices/self-billing-agreement",
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let accepted_at = json(r).await["accepted_at"].clone();
    let documents = invoices_of(&m, &d.expert, "").await;
    assert_eq!(status_of(&documents, "expert_service"), "issued");
    let invoice = documents
        .iter()
        .find(|i| i["role"] == "expert_service")
        .unwrap();
    assert_eq!(invoice["self_billing_agreed_at"], accepted_at);
    // Once: a second acceptance keeps the first date.
    let r = m
        .send(
            &d.expert,
            Method::POST,
            "/api/invoices/self-billing-agreement",
            None,
        )
        .await;
    assert_eq!(json(r).await["accepted_at"], accepted_at);
}

#[actix_web::test]
async fn a_business_in_another_eu_country_is_invoiced_with_the_reverse_charge() {
    let m = Market::open().await;
    let d = deal(&m, "eu", [500.0, 100.0, 100.0]).await;
    fiscal(
        &m,
        &d.company,
        "empresa",
        j!({"tax_id": "DE123456789", "vat_number": "DE123456789", "fiscal_name": "Beispiel GmbH",
            "fiscal_address": "Hauptstraße 1", "fiscal_postal_code": "10115",
            "fiscal_city": "Berlin", "fiscal_country": "Deutschland", "fiscal_type": "empresa"}),
    )
    .await;
    connect(&m, &d.expert).await;
    authorise(&m, d.first_payment).await;
    release(&m, &d.company, d.first_payment).await;
    let invoice = invoices_of(&m, &d.company, "").await.remove(0);
    assert_eq!(invoice["tax_case"], "reverse_charge");
    assert_eq!(
        (
            &invoice["base"],
            &invoice["vat"],
            &invoice["irpf"],
            &invoice["payable"]
        ),
        (&j!(500.0), &j!(0.0), &j!(0.0), &j!(500.0))
    );
    assert!(
        invoice["legend"]
            .as_str()
            .unwrap()
            .starts_with("Inversión del sujeto pasivo")
    );
}

#[actix_web::test]
async fn concurrent_releases_number_each_series_one_to_n() {
    let m = Market::open().await;
    let n = 12;
    let mut deals = Vec::new();
    for i in 0..n {
        let d = deal(&m, &format!("race{i}"), [120.0 + i as f64, 100.0, 100.0]).await;
        connect(&m, &d.expert).await;
        authorise(&m, d.first_payment).await;
        deals.push(d);
    }
    let releases = deals
        .iter()
        .map(|d| release(&m, &d.company, d.first_payment));
    futures_util::future::join_all(releases).await;
    let year = m.app.clock.now().format("%Y").to_string();
    let fees = admin_invoices(&m, "?type=invoice&limit=100").await;
    let mut numbers: Vec<String> = fees
        .iter()
        .filter(|i| i["role"] == "platform_fee")
        .map(|i| i["number"].as_str().unwrap().to_owned())
        .collect();
    numbers.sort();
    let expected: Vec<String> = (1..=n).map(|k| format!("MKT-F-{year}-{k:06}")).collect();
    assert_eq!(numbers, expected, "the platform's series is 1..N");
    let verify = marketplace::workflows::invoices::verify(&m.app.db)
        .await
        .unwrap();
    assert_eq!(verify.broken, None);
    assert_eq!(verify.documents, 2 * n);
}

/// The `marketplace` command on the test's database.
fn marketplace_cli(m: &Market) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_marketplace"));
    command
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("DATABASE_URL", m.app.database_url())
        .env("DATA_DIR", m.app.state.settings.data_dir.clone());
    command
}

#[actix_web::test]
async fn an_issued_invoice_cannot_change_and_verify_finds_one_changed_behind_its_back() {
    let m = Market::open().await;
    let d = released(&m, "chain", 150.0).await;
    let invoice = invoices_of(&m, &d.company, "").await.remove(0);
    let id = invoice["id"].as_i64().unwrap();

    let ok = marketplace_cli(&m)
        .args(["invoices", "verify"])
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(String::from_utf8_lossy(&ok.stdout).contains("intact"));

    // The service's own rules refuse a change and a deletion.
    let mut conn = m.app.db.conn().await.unwrap();
    let update = marketplace::on_exec!(conn.exec(), c => sqlx::query(
        "UPDATE invoices SET base_minor = base_minor + 100 WHERE id = $1")
        .bind(id).execute(c).await.map(drop));
    assert!(update.is_err(), "an issued invoice was updated");
    let delete = marketplace::on_exec!(conn.exec(), c => sqlx::query(
        "DELETE FROM invoices WHERE id = $1").bind(id).execute(c).await.map(drop));
    assert!(delete.is_err(), "an issued invoice was deleted");

    // Someone with the database's keys lifts the guard and changes the amount.
    let guard_off = match m.app.db.engine() {
        "postgres" => "ALTER TABLE invoices DISABLE TRIGGER invoices_immutable",
        _ => "DROP TRIGGER invoices_issued_immutable",
    };
    marketplace::on_exec!(conn.exec(), c => sqlx::query(sqlx::AssertSqlSafe(guard_off))
        .execute(c).await.map(drop))
    .unwrap();
    marketplace::on_exec!(conn.exec(), c => sqlx::query(
        "UPDATE invoices SET content = replace(content, '\"payable_minor\":15000', '\"payable_minor\":1500') WHERE id = $1")
        .bind(id).execute(c).await.map(drop))
    .unwrap();
    drop(conn);

    let broken = marketplace_cli(&m)
        .args(["invoices", "verify"])
        .output()
        .unwrap();
    assert_eq!(broken.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&broken.stderr);
    assert!(
        stderr.contains(invoice["number"].as_str().unwrap())
            && stderr.contains("its content does not match its record's hash"),
        "{stderr}"
    );
    // The periodic walk says so on /metrics.
    marketplace::workflows::invoices::verify_chains(&m.app.state)
        .await
        .unwrap();
    let metrics = m.app.get("/metrics").await.text().await.unwrap();
    assert!(metrics.contains("\ninvoice_chain_broken 1\n"), "{metrics}");
}

/// `(kind, role, Σ payable, Σ total)` of the issued documents, by kind and role.
async fn sums(m: &crate::helpers::TestApp) -> Vec<(String, String, i64, i64)> {
    let mut conn = m.db.conn().await.unwrap();
    marketplace::on_exec!(conn.exec(), c => sqlx::query_as(
        "SELECT doc_kind, role, CAST(SUM(payable_minor) AS BIGINT), CAST(SUM(total_minor) AS BIGINT)
         FROM invoices WHERE status = 'issued' GROUP BY doc_kind, role ORDER BY doc_kind, role")
        .fetch_all(c).await)
    .unwrap()
}

#[actix_web::test]
async fn the_demo_storys_invoices_add_up_to_the_money_the_processor_moved() {
    let app = crate::helpers::spawn_app_with(&[
        ("ENABLE_TEST_RESET_ENDPOINT", "true"),
        ("TEST_RESET_TOKEN", "reset-token-0123456789"),
    ])
    .await;
    let r = app
        .client
        .post(app.url("/api/v1/testing/reset-e2e"))
        .header("X-Test-Reset-Token", "reset-token-0123456789")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let ledger = json(app.get("/api/sandbox/ledger").await).await;
    let intents = ledger["intents"].as_array().unwrap();
    let total = |key: &str| -> i64 { intents.iter().map(|i| i[key].as_i64().unwrap()).sum() };
    let (captured, refunded) = (total("captured"), total("refunded"));
    assert!(captured > 0 && refunded > 0, "{ledger}");
    let commission: i64 = {
        let mut conn = app.db.conn().await.unwrap();
        marketplace::on_exec!(conn.exec(), c => sqlx::query_scalar(
            "SELECT CAST(COALESCE(SUM(commission_minor), 0) AS BIGINT) FROM payments
             WHERE released_at IS NOT NULL").fetch_one(c).await)
        .unwrap()
    };
    let sums = sums(&app).await;
    let of = |kind: &str, role: &str| {
        sums.iter()
            .find(|(k, r, _, _)| k == kind && r == role)
            .map(|(_, _, payable, total)| (*payable, *total))
            .unwrap_or_else(|| panic!("no {kind} {role}: {sums:?}"))
    };
    // Captured = the expert's invoices; commission = the platform's; refunds = credit notes.
    assert_eq!(of("invoice", "expert_service").0, captured);
    assert_eq!(of("invoice", "platform_fee").1, commission);
    assert_eq!(-of("credit_note", "expert_service").0, refunded);
    let verify = marketplace::workflows::invoices::verify(&app.db)
        .await
        .unwrap();
    assert_eq!(verify.broken, None);
}

/// The figures of `GET /api/invoices`' document as the preview's shape.
fn figures(doc: &Value) -> Value {
    j!({"tax_case": doc["tax_case"], "base": doc["base"], "vat_rate": doc["vat_rate"],
        "vat": doc["vat"], "irpf_rate": doc["irpf_rate"], "irpf": doc["irpf"],
        "total": doc["total"], "payable": doc["payable"]})
}

#[actix_web::test]
async fn the_proposal_and_the_payment_show_the_invoices_before_anyone_agrees() {
    let m = Market::open().await;
    let company = m.company("prevco").await;
    let expert = m.expert("prevex").await;
    fiscal(
        &m,
        &expert,
        "experto",
        spanish("Lucía Pérez Ortega", "12345678Z", "autonomo", 15),
    )
    .await;
    fiscal(
        &m,
        &company,
        "empresa",
        spanish("Prevista, S.L.", "B11111111", "empresa", 0),
    )
    .await;
    let project_id = m.published_project(&company, 1260.0, &[&expert]).await;
    assert_eq!(
        m.apply(&expert, project_id, [1060.0, 100.0, 100.0])
            .await
            .status(),
        StatusCode::CREATED
    );

    // The company reads each proposed milestone's two invoices before selecting: 1,060.00
    // paid = 1,000.00 + 21 % VAT − 15 % IRPF; the platform's 5 % is 53.00, VAT included.
    let r = m
        .send(
            &company,
            Method::GET,
            &format!("/api/projects/{project_id}/applications"),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let listed = json(r).await["items"][0]["proposed_milestones"][0]["invoices"].clone();
    let expected_expert = j!({"tax_case": "domestic", "legend": "", "base": 1000.0,
        "vat_rate": 21.0, "vat": 210.0, "irpf_rate": 15.0, "irpf": 150.0, "total": 1210.0,
        "payable": 1060.0});
    assert_eq!(listed["expert_invoice"], expected_expert, "{listed}");
    assert_eq!(
        (
            &listed["platform_invoice"]["base"],
            &listed["platform_invoice"]["vat"],
            &listed["platform_invoice"]["total"],
            &listed["platform_invoice"]["irpf"],
        ),
        (&j!(43.8), &j!(9.2), &j!(53.0), &j!(0.0))
    );
    assert_eq!(listed["commission"], j!(53.0));
    assert_eq!(listed["waiting_for_fiscal_data"], j!([]));
    // The expert reads the same in their proposal.
    let r = m
        .send(
            &expert,
            Method::GET,
            &format!("/api/projects/{project_id}/my-application"),
            None,
        )
        .await;
    assert_eq!(
        json(r).await["proposed_milestones"][0]["invoices"],
        listed,
        "the two parties read the same figures"
    );

    // Selecting answers the first payment with the same figures, as reading it does.
    let r = m
        .send(
            &company,
            Method::POST,
            &format!("/api/projects/{project_id}/select/{}", expert.id),
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let selected = json(r).await;
    assert_eq!(selected["payment"]["invoices"], listed);
    let payment_id = selected["payment"]["id"].as_i64().unwrap();
    for who in [&company, &expert] {
        let r = m
            .send(
                who,
                Method::GET,
                &format!("/api/payments/{payment_id}"),
                None,
            )
            .await;
        assert_eq!(json(r).await["invoices"], listed);
    }

    // What was shown is what the release issues.
    connect(&m, &expert).await;
    authorise(&m, payment_id).await;
    release(&m, &company, payment_id).await;
    let issued = invoices_of(&m, &expert, "").await;
    let of_role = |role: &str| {
        figures(
            issued
                .iter()
                .find(|d| d["role"] == role)
                .unwrap_or_else(|| panic!("no {role} in {issued:?}")),
        )
    };
    let mut shown = listed["expert_invoice"].clone();
    shown.as_object_mut().unwrap().remove("legend");
    assert_eq!(of_role("expert_service"), shown);
    let mut shown = listed["platform_invoice"].clone();
    shown.as_object_mut().unwrap().remove("legend");
    assert_eq!(of_role("platform_fee"), shown);

    // An expert whose fiscal data is incomplete (a company's is complete before its first
    // project) sees that both invoices wait for it; the commission is known already.
    let bare = m.member("prevbare", "experto", false, true).await;
    let project_id = m.published_project(&company, 1260.0, &[&bare]).await;
    let r = m.apply(&bare, project_id, [1060.0, 100.0, 100.0]).await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let shown = json(r).await["proposed_milestones"][0]["invoices"].clone();
    assert_eq!(
        (
            &shown["expert_invoice"],
            &shown["platform_invoice"],
            &shown["commission"],
            &shown["waiting_for_fiscal_data"]
        ),
        (&Value::Null, &Value::Null, &j!(53.0), &j!(["expert"])),
        "{shown}"
    );
    // The company's list says the same.
    let r = m
        .send(
            &company,
            Method::GET,
            &format!("/api/projects/{project_id}/applications"),
            None,
        )
        .await;
    assert_eq!(
        json(r).await["items"][0]["proposed_milestones"][0]["invoices"],
        shown
    );
}
