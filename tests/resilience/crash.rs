//! Crash safety: escrow flows in flight while the server is stopped at random moments, by
//! turns with SIGKILL and with SIGTERM (its graceful stop: drain, finish what is under way,
//! exit 0), and started again; afterwards every payment agrees with the processor's ledger, no
//! processor event or domain event is lost or applied twice, no notification or e-mail goes
//! out twice, and transfers left half-way are finished by the retry job.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::Rng as _;
use reqwest::{Method, StatusCode};
use serde_json::json as j;

use crate::harness::*;

/// Deals driven at once, of `MILESTONES` milestones each.
const DEALS: usize = 18;
const MILESTONES: usize = 6;
/// Kills while they run.
const KILLS: usize = 24;

/// Deals whose last payment an administrator refunds once released.
fn refunded(deal: usize) -> bool {
    deal.is_multiple_of(3)
}

/// id, amount, status, payout status, intent, commission, transfer, project.
type PaymentRow = (
    i64,
    i64,
    String,
    String,
    Option<String>,
    Option<i64>,
    Option<String>,
    i64,
);

/// Where one flow is, as its driver last set it.
type Stage = Arc<Mutex<&'static str>>;

struct Flow {
    deal: Deal,
    stage: Stage,
}

/// What the drivers talk to.
#[derive(Clone)]
struct Targets {
    http: reqwest::Client,
    /// The server (the same address after every restart).
    base: String,
    sandbox: String,
    pool: sqlx::PgPool,
    stop: Arc<AtomicBool>,
}

/// Drives one deal to completion: fund each payment at the sandbox (the card holder), release
/// it once held (the company), fetch the next intent when a crash kept it from being made.
/// Requests that die with the server are simply tried again, as a client would.
async fn drive(
    to: Targets,
    deal: Deal,
    stage: Stage,
    refund_by: Option<Account>,
) -> Result<(), String> {
    let Targets {
        http,
        base,
        sandbox,
        pool,
        stop,
    } = to;
    let set = |s: &'static str| *stage.lock().unwrap() = s;
    while !stop.load(Ordering::Relaxed) {
        if let Some(admin) = &refund_by {
            // Refund flows end with the last (released, maybe transferred) payment refunded
            // by an administrator: the transfer reversed first.
            let last: Option<(i64, String)> = sqlx::query_as(
                "SELECT y.id, y.status FROM payments y JOIN projects p ON p.id = y.project_id
                 WHERE y.project_id = $1 AND p.status = 'completed' ORDER BY y.id DESC LIMIT 1",
            )
            .bind(deal.project_id)
            .fetch_optional(&pool)
            .await
            .map_err(|e| e.to_string())?;
            match last {
                Some((_, status)) if status == "refunded" => {
                    set("done");
                    return Ok(());
                }
                Some((id, _)) => {
                    set("refund");
                    let _ = send(
                        &http,
                        &base,
                        admin,
                        Method::POST,
                        "/api/payments/refund",
                        Some(&j!({"payment_id": id, "reason": "Crash test refund"})),
                    )
                    .await;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                None => {}
            }
        }
        let project: Result<String, _> =
            sqlx::query_scalar("SELECT status FROM projects WHERE id = $1")
                .bind(deal.project_id)
                .fetch_one(&pool)
                .await;
        if project.is_ok_and(|p| p == "completed") {
            if refund_by.is_some() {
                continue;
            }
            set("done");
            return Ok(());
        }
        let row: Option<(i64, String, Option<String>, Option<i64>)> = sqlx::query_as(
            "SELECT id, status, processor_payment_intent_id, milestone_id FROM payments
             WHERE project_id = $1 ORDER BY id DESC LIMIT 1",
        )
        .bind(deal.project_id)
        .fetch_optional(&pool)
        .await
        .map_err(|e| e.to_string())?;
        let Some((id, status, intent, milestone)) = row else {
            return Err(format!("project {} has no payment", deal.project_id));
        };
        match (status.as_str(), intent) {
            ("pending", None) => {
                set("initiate");
                let _ = send(
                    &http,
                    &base,
                    &deal.company,
                    Method::POST,
                    "/api/payments/initiate",
                    Some(&j!({"project_id": deal.project_id, "milestone_id": milestone})),
                )
                .await;
            }
            ("pending", Some(intent)) => {
                set("fund");
                let _ = http
                    .post(format!(
                        "{sandbox}/api/sandbox/payment_intents/{intent}/confirm"
                    ))
                    .json(&j!({"payment_method": "pm_card_visa"}))
                    .send()
                    .await;
                // The webhook makes it held (delivered again by the sandbox if the server died
                // before answering); when it is slow (stored, then the server died before
                // applying it) the company's page asks the service to check.
                let until = Instant::now() + Duration::from_secs(1);
                while Instant::now() < until && status_of_pool(&pool, id).await == "pending" {
                    tokio::time::sleep(Duration::from_millis(30)).await;
                }
                if status_of_pool(&pool, id).await == "pending" {
                    set("sync-status");
                    let _ = send(
                        &http,
                        &base,
                        &deal.company,
                        Method::POST,
                        "/api/payments/sync-status",
                        Some(&j!({"payment_id": id})),
                    )
                    .await;
                }
            }
            ("held", _) => {
                set("release");
                let _ = send(
                    &http,
                    &base,
                    &deal.company,
                    Method::POST,
                    "/api/payments/release",
                    Some(&j!({"payment_id": id})),
                )
                .await;
            }
            ("released", _) => set("between milestones"),
            (other, _) => return Err(format!("payment {id} is {other}")),
        }
        // A person's pace between steps, so the flows stay in flight across the kills.
        let think = rand::rng().random_range(200..1200);
        tokio::time::sleep(Duration::from_millis(think)).await;
    }
    Err(format!("project {} not completed in time", deal.project_id))
}

async fn status_of_pool(pool: &sqlx::PgPool, id: i64) -> String {
    sqlx::query_scalar("SELECT status FROM payments WHERE id = $1")
        .bind(id)
        .fetch_one(pool)
        .await
        .unwrap_or_default()
}

/// What the dead server left for the next start, as seen right after each kill: the ids
/// caught in each half-done state, over all kills (a state that lasts across kills counts
/// once).
#[derive(Default, Debug)]
struct LeftHalfDone {
    /// Payments captured at the processor while still `held` here (killed between the
    /// capture and the release's commit).
    captured_not_released: BTreeSet<i64>,
    /// Payments authorised at the processor while still `pending` here (webhook not yet
    /// received or applied).
    authorised_not_held: BTreeSet<i64>,
    /// Payments released whose transfer was not made or not recorded.
    transfer_half_way: BTreeSet<i64>,
    /// … of which an attempt had reached the processor (its outcome unknown to the service).
    transfer_attempted: BTreeSet<i64>,
    /// Processor events stored but not applied.
    webhooks_unapplied: BTreeSet<String>,
    /// Domain events not yet delivered to every consumer.
    outbox_undelivered: BTreeSet<i64>,
}

impl LeftHalfDone {
    async fn note(&mut self, db: &TestDb, sandbox: &SandboxProc, http: &reqwest::Client) {
        let ledger = sandbox.ledger(http).await;
        let rows: Vec<(i64, String, Option<String>)> = sqlx::query_as(
            "SELECT id, status, processor_payment_intent_id FROM payments
             WHERE status IN ('pending', 'held')",
        )
        .fetch_all(&db.pool)
        .await
        .unwrap();
        for (id, status, intent) in rows {
            let at = intent.as_deref().and_then(|i| intent_in(&ledger, i));
            let processor = at.and_then(|i| i["status"].as_str()).unwrap_or("");
            match (status.as_str(), processor) {
                ("held", "succeeded") => self.captured_not_released.insert(id),
                ("pending", "requires_capture") => self.authorised_not_held.insert(id),
                _ => false,
            };
        }
        let half: Vec<(i64, bool)> = sqlx::query_as(
            "SELECT id, transfer_attempt_at IS NOT NULL FROM payments
             WHERE status = 'released' AND payout_status = 'pending'",
        )
        .fetch_all(&db.pool)
        .await
        .unwrap();
        for (id, attempted) in half {
            self.transfer_half_way.insert(id);
            if attempted {
                self.transfer_attempted.insert(id);
            }
        }
        let unapplied: Vec<String> =
            sqlx::query_scalar("SELECT id FROM processor_events WHERE processed_at IS NULL")
                .fetch_all(&db.pool)
                .await
                .unwrap();
        self.webhooks_unapplied.extend(unapplied);
        let undelivered: Vec<i64> =
            sqlx::query_scalar("SELECT id FROM events WHERE dispatched_at IS NULL")
                .fetch_all(&db.pool)
                .await
                .unwrap();
        self.outbox_undelivered.extend(undelivered);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn escrow_survives_kill_9_at_random_points() {
    let Some(infra) = infra("escrow_survives_kill_9_at_random_points") else {
        return;
    };
    let started = Instant::now();
    let http = client();
    let dir = tempfile::tempdir().expect("temporary directory");
    let db = TestDb::create(&infra.pg_url, "crash").await;
    let keys = Keys::fresh();
    let port = free_port();
    let webhook = format!("http://127.0.0.1:{port}/api/payments/webhooks/processor");
    let sandbox = SandboxProc::start(dir.path(), &keys, &webhook, &http).await;
    let mut env = server_env(
        &db.url,
        &infra.redis_url,
        &format!("res:crash:{}:", random(6)),
        &keys,
        &sandbox.base,
        dir.path(),
        port,
    );
    // No drain period (no load balancer to tell; the drain has its own test): a SIGTERM
    // stops about as soon as a SIGKILL, so the kills keep hitting flows in flight.
    env.insert("SHUTDOWN_DRAIN_SECONDS".into(), "0".into());
    env.insert("SHUTDOWN_TIMEOUT_SECONDS".into(), "5".into());
    let mut server = ServerProc::start(env, dir.path(), "server.log", &http).await;
    let market = Market::open(http.clone(), &server.base, &sandbox.base, &db).await;

    // Deals selected, each with a pending first payment, before anything is killed.
    let mut flows = Vec::new();
    for i in 0..DEALS {
        let i = i as i64;
        let amounts = [
            10_000 + 137 * i,
            20_050 + 11 * i,
            9_999,
            5_000 + i,
            7_777,
            3_003,
        ];
        let deal = market
            .deal(&db, &format!("k{i}{}", random(2)), &amounts)
            .await;
        flows.push(Flow {
            deal,
            stage: Arc::new(Mutex::new("selected")),
        });
    }
    // The setup's side effects settle (events delivered, their e-mails sent); what the kills
    // may disturb starts after this event.
    poll("the setup's outbox", Duration::from_secs(60), || async {
        (db.count("SELECT COUNT(*) FROM events WHERE dispatched_at IS NULL")
            .await
            + db.count("SELECT COUNT(*) FROM mail_queue WHERE sent_at IS NULL")
                .await
            == 0)
            .then_some(())
    })
    .await;
    let setup_last_event = db.count("SELECT COALESCE(MAX(id), 0) FROM events").await;
    let outbox_dir = dir.path().join("outbox");
    let setup_mails: std::collections::HashSet<String> =
        marketplace::integrations::mail::outbox_reader::read_all(&outbox_dir)
            .into_iter()
            .map(|m| m.file_name)
            .collect();
    eprintln!("crash: setup of {DEALS} deals in {:?}", started.elapsed());

    let stop = Arc::new(AtomicBool::new(false));
    let mut drivers = Vec::new();
    for (i, flow) in flows.iter().enumerate() {
        let to = Targets {
            http: http.clone(),
            base: server.base.clone(),
            sandbox: sandbox.base.clone(),
            pool: db.pool.clone(),
            stop: stop.clone(),
        };
        drivers.push(tokio::spawn(drive(
            to,
            flow.deal.clone(),
            flow.stage.clone(),
            refunded(i).then(|| market.admin.clone()),
        )));
    }

    // The kills: at a random moment, SIGKILL or (every other time) SIGTERM; note what each
    // flow was doing and what the stopped server left; start it again.
    let mut stages_at_kill: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut kills_with_flows_in_flight = 0;
    let mut left = LeftHalfDone::default();
    let mut kills = 0;
    let mut terms = 0;
    for _ in 0..KILLS {
        let wait = rand::rng().random_range(50..700);
        tokio::time::sleep(Duration::from_millis(wait)).await;
        let in_flight: Vec<&'static str> = flows
            .iter()
            .map(|f| *f.stage.lock().unwrap())
            .filter(|s| *s != "done")
            .collect();
        if kills % 2 == 1 {
            server.process().terminate();
            let exit = server
                .process()
                .exited_within(Duration::from_secs(15))
                .await
                .expect("a SIGTERM stops the server within its drain and timeout");
            assert!(exit.success(), "a graceful stop exits 0: {exit:?}");
            terms += 1;
        } else {
            server.kill9();
        }
        kills += 1;
        if !in_flight.is_empty() {
            kills_with_flows_in_flight += 1;
        }
        for s in in_flight {
            *stages_at_kill.entry(s).or_default() += 1;
        }
        left.note(&db, &sandbox, &http).await;
        server.restart(&http).await;
    }
    eprintln!(
        "crash: {kills} kills ({terms} of them SIGTERM; {kills_with_flows_in_flight} with flows in \
         flight) in {:?}; \
         flow stages at the kills: {stages_at_kill:?}; left half-done for a restart: \
         {} payments captured but not released, {} authorised but not held, {} transfers \
         half-way ({} with an attempt at the processor), {} processor events stored but not \
         applied, {} domain events not delivered to every consumer",
        started.elapsed(),
        left.captured_not_released.len(),
        left.authorised_not_held.len(),
        left.transfer_half_way.len(),
        left.transfer_attempted.len(),
        left.webhooks_unapplied.len(),
        left.outbox_undelivered.len(),
    );

    // Every flow finishes on the last start.
    let deadline = Instant::now() + Duration::from_secs(120);
    for driver in drivers {
        let remaining = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(remaining, driver).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => panic!("a flow failed: {e}"),
            Ok(Err(e)) => panic!("a driver panicked: {e}"),
            Err(_) => {
                stop.store(true, Ordering::Relaxed);
                panic!("flows not completed in time");
            }
        }
    }
    eprintln!("crash: every flow completed at {:?}", started.elapsed());

    // The retry job finishes transfers left half-way; the sweep applies stored events; the
    // outbox drains; the sandbox's redeliveries are all accepted.
    // Generous: under load the sweep and retry jobs' first runs (a minute after the start) and
    // the outbox's back-off after failed attempts come later.
    let until = Instant::now() + Duration::from_secs(180);
    loop {
        let half_way = db
            .count(
                "SELECT COUNT(*) FROM payments WHERE status <> 'refunded'
                   AND NOT (status = 'released' AND payout_status = 'transferred')",
            )
            .await;
        let unapplied = db
            .count("SELECT COUNT(*) FROM processor_events WHERE processed_at IS NULL")
            .await;
        let undispatched = db
            .count("SELECT COUNT(*) FROM events WHERE dispatched_at IS NULL")
            .await;
        let unsent = db
            .count("SELECT COUNT(*) FROM mail_queue WHERE sent_at IS NULL")
            .await;
        let undelivered = sandbox
            .events(&http)
            .await
            .iter()
            .filter(|e| {
                e["deliveries"]
                    .as_array()
                    .and_then(|d| d.last())
                    .is_none_or(|d| !(200..300).contains(&d["status"].as_u64().unwrap_or(0)))
            })
            .count();
        let waiting = format!(
            "{half_way} payments not settled, {unapplied} processor events unapplied, \
             {undispatched} domain events undelivered, {unsent} e-mails unsent, \
             {undelivered} webhooks not accepted"
        );
        if half_way == 0 && unapplied == 0 && undispatched == 0 && unsent == 0 && undelivered == 0 {
            break;
        }
        assert!(
            Instant::now() < until,
            "the service did not settle: {waiting}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    eprintln!("crash: settled at {:?}", started.elapsed());

    // 1. Every payment equals the ledger: captured once, the whole amount; one transfer of
    //    amount − commission to the expert's account; nothing refunded or reversed.
    let ledger = sandbox.ledger(&http).await;
    let payments: Vec<PaymentRow> = sqlx::query_as(
        "SELECT id, amount_minor, status, payout_status, processor_payment_intent_id,
                    commission_minor, processor_transfer_id, project_id
             FROM payments ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        payments.len(),
        DEALS * MILESTONES,
        "one payment per milestone, no more"
    );
    let account_of: BTreeMap<i64, &str> = flows
        .iter()
        .map(|f| (f.deal.project_id, f.deal.account.as_str()))
        .collect();
    let refunds: Vec<i64> = flows
        .iter()
        .enumerate()
        .filter(|(i, _)| refunded(*i))
        .filter_map(|(_, f)| {
            payments
                .iter()
                .filter(|y| y.7 == f.deal.project_id)
                .map(|y| y.0)
                .max()
        })
        .collect();
    assert!(!refunds.is_empty());
    for (id, amount, status, payout, intent, commission, transfer, project) in &payments {
        let intent = intent.as_deref().expect("an intent");
        let at =
            intent_in(&ledger, intent).unwrap_or_else(|| panic!("intent of {id} at the processor"));
        assert_eq!(at["captured"], *amount, "payment {id} captured in full");
        assert_eq!(at["captures"], 1, "payment {id} captured once");
        let transfers = transfers_of(&ledger, *id);
        if refunds.contains(id) {
            // Refunded: the whole amount back to the card; a transfer made before it is
            // reversed in full, so the expert keeps nothing of it.
            assert_eq!(status, "refunded", "payment {id}");
            assert_eq!(at["refunded"], *amount, "payment {id} refunded in full");
            assert!(
                transfers.len() <= 1,
                "payment {id}: at most one transfer: {transfers:?}"
            );
            for t in &transfers {
                assert_eq!(
                    t["reversed"], t["amount"],
                    "payment {id}: transfer reversed"
                );
            }
            continue;
        }
        assert_eq!(
            (status.as_str(), payout.as_str()),
            ("released", "transferred"),
            "payment {id}"
        );
        assert_eq!(at["status"], "succeeded", "payment {id}");
        assert_eq!(at["refunded"], 0, "payment {id}");
        assert_eq!(
            transfers.len(),
            1,
            "payment {id}: one transfer, got {transfers:?}"
        );
        let t = transfers[0];
        let commission = commission.expect("a commission");
        assert_eq!(
            t["amount"].as_i64().unwrap() + commission,
            *amount,
            "captured = transferred + commission"
        );
        assert_eq!(t["reversed"], 0);
        assert_eq!(t["failed"], false);
        assert_eq!(
            t["id"].as_str(),
            transfer.as_deref(),
            "payment {id} records its transfer"
        );
        assert_eq!(t["destination"].as_str(), account_of.get(project).copied());
    }
    let known = items(&ledger, "transfers")
        .iter()
        .filter(|t| {
            t["metadata"]["payment_id"]
                .as_str()
                .and_then(|p| p.parse::<i64>().ok())
                .is_some_and(|p| payments.iter().any(|y| y.0 == p))
        })
        .count();
    assert_eq!(
        known,
        items(&ledger, "transfers").len(),
        "no transfer the service does not know"
    );
    let audit = market
        .as_admin(Method::GET, "/api/admin/payments/audit", None)
        .await;
    let audit = expect(audit, StatusCode::OK, "money audit").await;
    assert_eq!(audit["payments_checked"], payments.len());
    assert_eq!(audit["mismatches"], j!([]), "the money audit agrees");

    // 2. Processor events: every one the sandbox sent was stored once and applied.
    let sent = sandbox.events(&http).await;
    let stored: Vec<(String, bool)> =
        sqlx::query_as("SELECT id, processed_at IS NOT NULL FROM processor_events")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let stored: BTreeMap<String, bool> = stored.into_iter().collect();
    for e in &sent {
        let id = e["id"].as_str().unwrap();
        assert_eq!(
            stored.get(id),
            Some(&true),
            "processor event {id} ({}) stored and applied",
            e["type"]
        );
    }
    assert_eq!(stored.len(), sent.len());
    let redelivered = sent
        .iter()
        .filter(|e| e["deliveries"].as_array().is_some_and(|d| d.len() > 1))
        .count();

    // 3. Domain events: each payment held once, released once, transferred or not, in the
    //    outbox exactly once; every event delivered.
    for (id, ..) in &payments {
        let refund_events = sqlx::query_scalar::<_, i64>(
            "SELECT COUNT(*) FROM events WHERE aggregate = 'payment' AND aggregate_id = $1
               AND kind = 'payment.refunded'",
        )
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
        assert_eq!(
            refund_events,
            i64::from(refunds.contains(id)),
            "payment {id} refunded once or never"
        );
        for kind in ["payment.held", "payment.released"] {
            let n = sqlx::query_scalar::<_, i64>(
                "SELECT COUNT(*) FROM events WHERE aggregate = 'payment' AND aggregate_id = $1 AND kind = $2",
            )
            .bind(id)
            .bind(kind)
            .fetch_one(&db.pool)
            .await
            .unwrap();
            assert_eq!(n, 1, "{kind} of payment {id} recorded once");
        }
    }

    // 4. Notifications: each personal entry of each event stored exactly once.
    let expected = db
        .count1(
            "SELECT COUNT(*) FROM events e, jsonb_array_elements(COALESCE(e.payload->'notify', '[]'::jsonb)) n
             WHERE e.id > $1 AND n->>'user_id' IS NOT NULL",
            setup_last_event,
        )
        .await;
    let stored_once = db
        .count1(
            "SELECT COUNT(*) FROM events e, jsonb_array_elements(COALESCE(e.payload->'notify', '[]'::jsonb)) n
             WHERE e.id > $1 AND n->>'user_id' IS NOT NULL
               AND (SELECT COUNT(*) FROM notifications x WHERE x.event_id = e.id
                      AND x.user_id = (n->>'user_id')::bigint AND x.type = n->>'type') = 1",
            setup_last_event,
        )
        .await;
    assert!(
        expected >= (DEALS * MILESTONES * 2) as i64,
        "notifications were due: {expected}"
    );
    assert_eq!(
        stored_once, expected,
        "every notification stored exactly once"
    );

    // 5. E-mails: since the setup, exactly one per e-mail entry of each event, per recipient.
    let entries: Vec<String> = sqlx::query_scalar(
        "SELECT n->>'to' FROM events e, jsonb_array_elements(COALESCE(e.payload->'email', '[]'::jsonb)) n
         WHERE e.id > $1",
    )
    .bind(setup_last_event)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let mut want: BTreeMap<String, usize> = BTreeMap::new();
    for to in entries {
        *want.entry(to).or_default() += 1;
    }
    let mut got: BTreeMap<String, usize> = BTreeMap::new();
    for mail in marketplace::integrations::mail::outbox_reader::read_all(&outbox_dir) {
        if !setup_mails.contains(&mail.file_name) {
            *got.entry(mail.to).or_default() += 1;
        }
    }
    let mails: usize = got.values().sum();
    assert!(mails >= DEALS * MILESTONES * 2, "e-mails were due: {mails}");
    assert_eq!(got, want, "one e-mail per entry, none twice, none lost");

    let elapsed = started.elapsed();
    eprintln!(
        "crash: RESULT kills survived {kills} ({kills_with_flows_in_flight} with flows in flight), \
         {} payments agree with the ledger ({} refunded; {} transfers left half-way finished \
         once), {} processor events stored and applied once ({redelivered} delivered more than \
         once), {expected} notifications and {mails} e-mails exactly once, in {elapsed:?}",
        payments.len(),
        refunds.len(),
        left.transfer_half_way.len(),
        sent.len(),
    );
    assert!(
        kills_with_flows_in_flight >= KILLS / 2,
        "the kills hit flows in flight"
    );
    drop(server);
    drop(sandbox);
    db.drop_now().await;
    eprintln!("crash: cleaned up at {:?}", started.elapsed());
}
