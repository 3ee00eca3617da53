//! Lists at scale (issue #32): walking the project list by cursor while projects are added,
//! pages by number from either end, word search (case and accents folded, title matches
//! first, no word no match), totals kept by the writes (projects, chat rooms, notifications),
//! and on PostgreSQL the plan of every project list query over a hundred thousand projects
//! free of sequential scans.

use std::collections::BTreeSet;

use chrono::Duration;
use marketplace::domain::project::ProjectStatus;
use marketplace::store::projects::{self, NewProject};
use serde_json::Value;

use crate::helpers::{TestApp, json, register, spawn_app};

/// Stores a curated project of `company` as of now on the service's clock, then moves the
/// clock a second on, so that every project has its own creation time.
async fn project(
    app: &TestApp,
    company: i64,
    title: &str,
    description: &str,
    status: ProjectStatus,
) -> i64 {
    project_of_type(app, company, title, description, "curated", status).await
}

/// [`project`] of type `project_type`.
async fn project_of_type(
    app: &TestApp,
    company: i64,
    title: &str,
    description: &str,
    project_type: &str,
    status: ProjectStatus,
) -> i64 {
    let mut conn = app.db.conn().await.unwrap();
    let id = projects::insert(
        conn.exec(),
        &NewProject {
            company_id: company,
            target_expert_id: None,
            title,
            description,
            budget_minor: 100_000,
            currency: "eur",
            deadline: None,
            skills_required: &["Rust".to_owned(), "Kubernetes".to_owned()],
            project_type,
            status,
            validation_status: None,
            submitted_at: None,
        },
        app.clock.now(),
    )
    .await
    .unwrap();
    app.clock.advance(Duration::seconds(1));
    id
}

/// Three projects of `company` that `kubernetes` finds, oldest first: listed with the word in
/// its title, listed with it in its description, and a draft with it in its title.
async fn kubernetes_projects(app: &TestApp, company: i64) -> [i64; 3] {
    let listed = ProjectStatus::PublishedCurated;
    [
        project(app, company, "Kubernetes migration", "", listed).await,
        project(
            app,
            company,
            "Data platform",
            "Runs on kubernetes clusters",
            listed,
        )
        .await,
        project(app, company, "Kubernetes draft", "", ProjectStatus::Draft).await,
    ]
}

/// Folds the tallies' deltas into their totals now, as the job does.
async fn fold(app: &TestApp) {
    app.state
        .jobs
        .trigger(marketplace::workflows::tallies::FOLD_JOB)
        .await
        .unwrap();
}

/// The count `sql` answers on the test's database.
async fn count_of(app: &TestApp, sql: String) -> i64 {
    let mut conn = app.db.conn().await.unwrap();
    marketplace::on_exec!(conn.exec(), c =>
        sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).fetch_one(c).await)
    .unwrap()
}

/// Runs `sql` on the test's database with `id` bound as `$1`.
async fn run(app: &TestApp, sql: &'static str, id: i64) {
    let mut conn = app.db.conn().await.unwrap();
    marketplace::on_exec!(conn.exec(), c => sqlx::query(sql).bind(id).execute(c).await.map(drop))
        .unwrap();
}

async fn listed(app: &TestApp, company: i64, n: usize) -> Vec<i64> {
    let mut ids = Vec::new();
    for i in 0..n {
        let title = format!("Listed project {i}");
        ids.push(project(app, company, &title, "", ProjectStatus::PublishedCurated).await);
    }
    ids
}

async fn page(app: &TestApp, query: &str) -> Value {
    let r = app.get(&format!("/api/projects/public?{query}")).await;
    assert_eq!(r.status(), 200, "{query}");
    json(r).await
}

fn ids(page: &Value) -> Vec<i64> {
    page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_i64().unwrap())
        .collect()
}

/// Stores `size` messages of `sender` in `room` in one group commit, as a room actor does;
/// answers their ids.
async fn chat_group(app: &TestApp, room: i64, sender: i64, size: usize) -> Vec<i64> {
    use marketplace::store::chat::{self, NewMessage};
    let group: Vec<NewMessage> = (0..size)
        .map(|n| NewMessage {
            sender_id: sender,
            content: format!("message {n}"),
            file: None,
        })
        .collect();
    let refs: Vec<(i64, &NewMessage)> = group.iter().map(|m| (room, m)).collect();
    let mut conn = app.db.conn().await.unwrap();
    let stored = chat::insert_all(conn.exec(), &refs, app.clock.now()).await;
    stored.unwrap().iter().map(|m| m.id).collect()
}

/// A notification of `user_id` for event `event_id`.
fn notification(
    user_id: i64,
    event_id: i64,
    data: &Value,
) -> marketplace::store::notifications::NewNotification<'_> {
    marketplace::store::notifications::NewNotification {
        user_id,
        kind: "test",
        title: "Title",
        message: "Message",
        data,
        event_id: Some(event_id),
    }
}

#[actix_web::test]
async fn walking_by_cursor_while_projects_are_added_gives_each_once() {
    let app = spawn_app().await;
    let company = register(&app, "walker", &["empresa"]).await;
    let mut expected = listed(&app, company.id, 25).await;
    expected.reverse();

    let mut seen = Vec::new();
    let mut body = page(&app, "size=7").await;
    assert_eq!(body["total"], 25);
    loop {
        seen.extend(ids(&body));
        // New projects arrive between the pages; they sort before the cursor.
        listed(&app, company.id, 2).await;
        let Some(cursor) = body["next_cursor"].as_str() else {
            break;
        };
        body = page(&app, &format!("size=7&cursor={cursor}")).await;
    }
    assert_eq!(seen, expected, "each project once, newest first");
    assert_eq!(page(&app, "size=7").await["total"], 25 + 2 * 4);

    let r = app.get("/api/projects/public?cursor=not-a-cursor").await;
    assert_eq!(r.status(), 422);
    assert_eq!(json(r).await["errors"][0]["field"], "cursor");
    app.stop().await;
}

#[actix_web::test]
async fn pages_by_number_agree_from_both_ends() {
    let app = spawn_app().await;
    let company = register(&app, "pager", &["empresa"]).await;
    let mut all = listed(&app, company.id, 23).await;
    all.reverse();
    let mut walked = Vec::new();
    for number in 1..=4 {
        let body = page(&app, &format!("size=7&page={number}")).await;
        assert_eq!(
            (body["total"].as_i64(), body["pages"].as_i64()),
            (Some(23), Some(4))
        );
        // Pages 3 and 4 lie past the middle: read from the list's other end.
        walked.extend(ids(&body));
        assert_eq!(body["next_cursor"].is_string(), number < 4, "page {number}");
    }
    assert_eq!(walked, all);
    assert!(ids(&page(&app, "size=7&page=5").await).is_empty());
    // A cursor handed out by a page read from the end goes on where it stopped.
    let third = page(&app, "size=7&page=3").await;
    let cursor = third["next_cursor"].as_str().unwrap();
    assert_eq!(
        ids(&page(&app, &format!("size=7&cursor={cursor}")).await),
        all[21..]
    );
    app.stop().await;
}

#[actix_web::test]
async fn search_is_by_word_folded_and_ranks_title_matches_first() {
    let app = spawn_app().await;
    let company = register(&app, "searcher", &["empresa"]).await;
    let listed = ProjectStatus::PublishedCurated;
    let in_title = project(
        &app,
        company.id,
        "Migración de Kubernetes",
        "Un clúster",
        listed,
    )
    .await;
    let in_text = project(
        &app,
        company.id,
        "Plataforma de datos",
        "Operadores KUBERNETES y más",
        listed,
    )
    .await;
    let other = project(
        &app,
        company.id,
        "Diseño web",
        "Páginas 100% accesibles",
        listed,
    )
    .await;
    let _draft = project(
        &app,
        company.id,
        "Kubernetes draft",
        "",
        ProjectStatus::Draft,
    )
    .await;

    let search = |q: &'static str| {
        let app = &app;
        async move { page(app, &format!("search={}", urlencode(q))).await }
    };
    // The description match is newer, yet the title match comes first.
    let body = search("kubernetes").await;
    assert_eq!(ids(&body), [in_title, in_text]);
    assert_eq!(body["total"], 2);
    // Case and accents folded, both ways.
    assert_eq!(ids(&search("MIGRACION").await), [in_title]);
    assert_eq!(ids(&search("migración").await), [in_title]);
    assert_eq!(ids(&search("disEno").await), [other]);
    // Every word must match; a word is not a substring.
    assert_eq!(ids(&search("kubernetes clúster").await), [in_title]);
    assert!(ids(&search("kuber").await).is_empty());
    // No searchable word matches nothing, and `%` / `_` are no wildcards.
    for nothing in ["%", "_", "%%__", "¡¿!"] {
        let body = search(nothing).await;
        assert_eq!(
            (ids(&body).len(), body["total"].as_i64()),
            (0, Some(0)),
            "{nothing}"
        );
    }
    // A blank search is no filter: every listed project.
    for blank in ["", "%20%20"] {
        let body = page(&app, &format!("search={blank}")).await;
        assert_eq!((ids(&body).len(), body["total"].as_i64()), (3, Some(3)));
    }
    // A search walks by cursor across its ranks too.
    let first = page(&app, "search=kubernetes&size=1").await;
    assert_eq!(ids(&first), [in_title]);
    let cursor = first["next_cursor"].as_str().unwrap();
    let second = page(&app, &format!("search=kubernetes&size=1&cursor={cursor}")).await;
    assert_eq!(ids(&second), [in_text]);
    assert!(second["next_cursor"].is_null());
    app.stop().await;
}

/// A search's pages cross from its title matches to its other matches at any page size,
/// by number from either end and by cursor while matches of both kinds are added.
#[actix_web::test]
async fn search_pages_cross_from_title_matches_to_the_rest() {
    let app = spawn_app().await;
    let company = register(&app, "tiers", &["empresa"]).await;
    let listed = ProjectStatus::PublishedCurated;
    let mut titled = Vec::new();
    let mut described = Vec::new();
    for i in 0..5 {
        let title = format!("Lakehouse {i}");
        titled.push(project(&app, company.id, &title, "", listed).await);
        let title = format!("Warehouse {i}");
        let text = "a lakehouse underneath";
        described.push(project(&app, company.id, &title, text, listed).await);
    }
    described.push(project(&app, company.id, "Pipeline", "lakehouse", listed).await);
    titled.reverse();
    described.reverse();
    let all: Vec<i64> = titled.iter().chain(&described).copied().collect();

    for size in [1, 2, 3, 4, 5, 7, 11, 12] {
        let mut walked = Vec::new();
        let pages = all.len().div_ceil(size);
        for number in 1..=pages + 1 {
            let body = page(&app, &format!("search=lakehouse&size={size}&page={number}")).await;
            assert_eq!(body["total"], 11, "size {size}");
            assert_eq!(
                body["next_cursor"].is_string(),
                number < pages,
                "{size} {number}"
            );
            walked.extend(ids(&body));
        }
        assert_eq!(walked, all, "size {size}");
    }

    let mut seen = Vec::new();
    let mut body = page(&app, "search=lakehouse&size=3").await;
    let (mut late_titles, mut late_texts) = (Vec::new(), Vec::new());
    loop {
        seen.extend(ids(&body));
        // A newer title match sorts before the cursor; so does a newer description match
        // once the cursor is among the description matches (before that, it is ahead).
        late_titles.push(project(&app, company.id, "Lakehouse late", "", listed).await);
        late_texts.push(project(&app, company.id, "Late", "lakehouse", listed).await);
        let Some(cursor) = body["next_cursor"].as_str() else {
            break;
        };
        body = page(&app, &format!("search=lakehouse&size=3&cursor={cursor}")).await;
    }
    let unique: BTreeSet<i64> = seen.iter().copied().collect();
    assert_eq!(unique.len(), seen.len(), "nothing twice: {seen:?}");
    let before: Vec<i64> = seen.iter().copied().filter(|id| all.contains(id)).collect();
    assert_eq!(before, all, "each match once, title matches first");
    let late: Vec<i64> = seen
        .iter()
        .copied()
        .filter(|id| !all.contains(id))
        .collect();
    assert!(late.iter().all(|id| late_texts.contains(id)), "{late:?}");
    assert!(
        !late.is_empty(),
        "description matches added ahead of the cursor are reached"
    );
    assert_eq!(
        page(&app, "search=lakehouse").await["total"],
        11 + late_titles.len() + late_texts.len()
    );
    app.stop().await;
}

/// Every viewer's search, alone on the list, walked by number and by cursor at every page
/// size (SQLite reads each tier from its matches or probes the list's order, as the page's
/// depth makes cheaper): the viewer's title matches first, then their other matches, each
/// once, with the total the viewer may see.
#[actix_web::test]
async fn every_viewer_walks_a_search_alike_by_number_and_by_cursor() {
    let app = spawn_app().await;
    let company = register(&app, "walker", &["empresa"]).await;
    let rival = register(&app, "rivalwalker", &["empresa"]).await;
    let outsider = register(&app, "walkexpert", &["experto"]).await;
    let (_, admin) = crate::helpers::admin(&app, "walk_admin").await;
    let (listed, draft) = (ProjectStatus::PublishedCurated, ProjectStatus::Draft);
    // (id, title match, visible to the company, listed), created oldest first.
    let mut made = Vec::new();
    for i in 0..4 {
        let owner = if i % 2 == 0 { company.id } else { rival.id };
        for (title, text, status) in [
            (format!("Lakehouse {i}"), "", listed),
            (format!("Warehouse {i}"), "over a lakehouse", listed),
            (format!("Lakehouse draft {i}"), "", draft),
            (format!("Pipeline draft {i}"), "lakehouse", draft),
            (format!("Unrelated {i}"), "nothing", listed),
        ] {
            let id = project(&app, owner, &title, text, status).await;
            let matches = title.contains("Lakehouse") || text.contains("lakehouse");
            if matches {
                let own = owner == company.id;
                made.push((id, title.contains("Lakehouse"), own, status == listed));
            }
        }
    }
    made.reverse();
    let expected = |sees: &dyn Fn(bool, bool) -> bool| -> Vec<i64> {
        let mut order: Vec<i64> = Vec::new();
        for titled in [true, false] {
            let tier = made.iter().filter(|m| m.1 == titled && sees(m.2, m.3));
            order.extend(tier.map(|m| m.0));
        }
        order
    };
    let viewers: [(&str, Option<&str>, Vec<i64>); 5] = [
        ("/api/projects/public", None, expected(&|_, listed| listed)),
        (
            "/api/projects",
            Some(&company.access_token),
            expected(&|own, listed| own || listed),
        ),
        (
            "/api/projects",
            Some(&outsider.access_token),
            expected(&|_, listed| listed),
        ),
        ("/api/projects", Some(&admin), expected(&|_, _| true)),
        ("/api/admin/projects", Some(&admin), expected(&|_, _| true)),
    ];
    let get = |path: String, token: Option<&str>| {
        let app = &app;
        let token = token.map(str::to_owned);
        async move {
            let mut request = app.client.get(app.url(&path));
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), 200, "{path}");
            json(response).await
        }
    };
    let seen: Vec<usize> = viewers.iter().map(|v| v.2.len()).collect();
    assert_eq!(seen, [8, 12, 8, 16, 16]);
    // A blank search is no filter: every one of the 20 projects.
    let blank = get("/api/admin/projects?search=%20".to_owned(), Some(&admin)).await;
    assert_eq!(blank["total"], 20);
    for (path, token, all) in &viewers {
        for size in [1, 2, 3, 5, 7, 20] {
            let query = format!("{path}?search=lakehouse&size={size}");
            let mut by_number = Vec::new();
            for number in 1..=all.len().div_ceil(size) + 1 {
                let body = get(format!("{query}&page={number}"), *token).await;
                assert_eq!(body["total"], all.len(), "{query}");
                by_number.extend(ids(&body));
            }
            assert_eq!(&by_number, all, "{query} by number");
            let mut by_cursor = Vec::new();
            let mut body = get(query.clone(), *token).await;
            loop {
                by_cursor.extend(ids(&body));
                let Some(cursor) = body["next_cursor"].as_str() else {
                    break;
                };
                body = get(format!("{query}&cursor={cursor}"), *token).await;
            }
            assert_eq!(&by_cursor, all, "{query} by cursor");
        }
    }
    app.stop().await;
}

fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[actix_web::test]
async fn totals_follow_inserts_moves_and_deletes() {
    let app = spawn_app().await;
    let company = register(&app, "counter", &["empresa"]).await;
    let (_, admin_token) = crate::helpers::admin(&app, "counting_admin").await;
    let public = listed(&app, company.id, 3).await;
    let draft = project(&app, company.id, "Mine only", "", ProjectStatus::Draft).await;

    let total = |path: &'static str, token: Option<String>| {
        let app = &app;
        async move {
            let mut request = app.client.get(app.url(path));
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            let body = json(request.send().await.unwrap()).await;
            let items = body["items"].as_array().unwrap().len() as i64;
            let total = body["total"].as_i64().unwrap();
            assert_eq!(items, total.min(20), "{path}: {body}");
            total
        }
    };
    let outsider = register(&app, "outsider", &["experto"]).await;
    let counts = || async {
        (
            total("/api/projects/public", None).await,
            total("/api/projects", Some(company.access_token.clone())).await,
            total("/api/projects", Some(outsider.access_token.clone())).await,
            total("/api/projects", Some(admin_token.clone())).await,
            total("/api/projects/public?status=bidding", None).await,
        )
    };
    assert_eq!(counts().await, (3, 4, 3, 4, 0));

    let exec = |sql: &'static str, id: i64| run(&app, sql, id);
    exec(
        "UPDATE projects SET status = 'bidding' WHERE id = $1",
        public[0],
    )
    .await;
    assert_eq!(counts().await, (3, 4, 3, 4, 1));
    exec(
        "UPDATE projects SET status = 'published_curated' WHERE id = $1",
        draft,
    )
    .await;
    assert_eq!(counts().await, (4, 4, 4, 4, 1));
    exec(
        "UPDATE projects SET project_type = 'private' WHERE id = $1",
        public[1],
    )
    .await;
    assert_eq!(counts().await, (3, 4, 3, 4, 1));
    exec("DELETE FROM projects WHERE id = $1", public[0]).await;
    exec("DELETE FROM projects WHERE id = $1", public[1]).await;
    assert_eq!(counts().await, (2, 2, 2, 2, 0));
    listed(&app, company.id, 2).await;
    assert_eq!(counts().await, (4, 4, 4, 4, 0));
    app.stop().await;
}

/// The public list's pages answered from this instance's cache and from the database
/// (`/metrics`).
async fn public_pages(app: &TestApp) -> (i64, i64) {
    kept_pages(app, "public_project_pages_total").await
}

/// A kept list's pages answered from this instance's cache and from the database, as `/metrics`
/// counts them in `metric`.
async fn kept_pages(app: &TestApp, metric: &str) -> (i64, i64) {
    let text = app.get("/metrics").await.text().await.unwrap();
    let count = |source: &str| {
        let series = format!("{metric}{{source=\"{source}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(series.as_str()))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{series} in /metrics"))
    };
    (count("kept"), count("read"))
}

#[actix_web::test]
async fn public_pages_are_kept_until_a_project_is_written() {
    let app = spawn_app().await;
    let company = register(&app, "keeper", &["empresa"]).await;
    let ids_listed = listed(&app, company.id, 3).await;
    let newest = ids_listed[2];
    let writes = || async {
        let mut conn = app.db.conn().await.unwrap();
        marketplace::store::project_lists::writes(conn.exec())
            .await
            .unwrap()
    };
    let before = public_pages(&app).await;
    let first = page(&app, "size=2").await;
    assert_eq!(page(&app, "size=2").await, first);
    assert_eq!(page(&app, "size=2").await, first);
    let after = public_pages(&app).await;
    assert_eq!(
        (after.0 - before.0, after.1 - before.1),
        (2, 1),
        "read once, kept twice"
    );

    // Folding the deltas keeps the count, and the page stays kept.
    let counted = writes().await;
    fold(&app).await;
    assert_eq!(writes().await, counted);
    assert_eq!(page(&app, "size=2").await, first);
    assert_eq!(public_pages(&app).await.0, after.0 + 1);

    // Every write to projects is seen at once, whichever way it is made.
    run(
        &app,
        "UPDATE projects SET title = 'Renamed in SQL' WHERE id = $1",
        newest,
    )
    .await;
    assert!(writes().await > counted);
    assert_eq!(
        page(&app, "size=2").await["items"][0]["title"],
        "Renamed in SQL"
    );
    run(
        &app,
        r#"UPDATE projects SET skills_required = '["Haskell"]' WHERE id = $1"#,
        newest,
    )
    .await;
    assert_eq!(ids(&page(&app, "skill=haskell").await), vec![newest]);
    assert_eq!(page(&app, "skill=rust").await["total"], 2);
    let added = listed(&app, company.id, 1).await[0];
    assert_eq!(ids(&page(&app, "size=2").await), vec![added, newest]);
    run(&app, "DELETE FROM projects WHERE id = $1", added).await;
    assert_eq!(
        ids(&page(&app, "size=2").await),
        vec![newest, ids_listed[1]]
    );
    assert_eq!(page(&app, "size=2").await["total"], 3);

    // A reset empties the projects, and the count goes on growing from where it was.
    let counted = writes().await;
    marketplace::store::reset::empty_all(&app.db).await.unwrap();
    assert!(writes().await > counted);
    assert_eq!(page(&app, "size=2").await["total"], 0);
    app.stop().await;
}

/// The expert directory's pages are kept by each instance until an expert changes (migration
/// 0047): a page is read once, then answered kept; a fold keeps the count of writes; a
/// profile's text changed in SQL, a skill renamed, a skill held, an account deactivated and a
/// profile deleted are each seen by the next request; a reset leaves the count higher.
#[actix_web::test]
async fn expert_directory_pages_are_kept_until_an_expert_changes() {
    let m = crate::market::Market::open().await;
    let mut experts = Vec::new();
    for (username, bio, skills) in [
        ("keptone", "Ledger audits", vec!["Python"]),
        ("kepttwo", "Ledger taxes", vec!["Go"]),
    ] {
        let body = serde_json::json!({"bio": bio, "skills": skills});
        add_expert(&m, &mut experts, username, body).await;
    }
    let app = &m.app;
    let directory = |query: &'static str| async move {
        let response = app.get(&format!("/api/profiles/experts?{query}")).await;
        assert_eq!(response.status(), 200, "{query}");
        json(response).await
    };
    let writes = || async {
        let mut conn = app.db.conn().await.unwrap();
        marketplace::store::expert_lists::writes(conn.exec())
            .await
            .unwrap()
    };
    let metric = "expert_directory_pages_total";
    let before = kept_pages(app, metric).await;
    let first = directory("q=ledger").await;
    assert_eq!(first["total"], 2, "{first}");
    assert_eq!(directory("q=ledger").await, first);
    assert_eq!(directory("q=ledger").await, first);
    let after = kept_pages(app, metric).await;
    assert_eq!(
        (after.0 - before.0, after.1 - before.1),
        (2, 1),
        "read once, kept twice"
    );
    let counted = writes().await;
    fold(app).await;
    assert_eq!(writes().await, counted);
    assert_eq!(directory("q=ledger").await, first);
    assert_eq!(kept_pages(app, metric).await.0, after.0 + 1);

    // Every change to what the directory shows is seen at once, whichever way it is made.
    let newest = experts[1].1;
    run(
        app,
        "UPDATE profiles SET bio = 'Ledger and VAT' WHERE id = $1",
        newest,
    )
    .await;
    assert!(writes().await > counted);
    assert_eq!(
        directory("q=ledger").await["items"][0]["bio"],
        "Ledger and VAT"
    );
    assert_eq!(
        directory("skill=go").await["items"][0]["skills"][0]["name"],
        "Go"
    );
    let go = count_of(app, "SELECT id FROM skills WHERE slug = 'go'".to_owned()).await;
    run(app, "UPDATE skills SET name = 'Golang' WHERE id = $1", go).await;
    assert_eq!(
        directory("skill=go").await["items"][0]["skills"][0]["name"],
        "Golang"
    );
    assert_eq!(directory("skill=python").await["total"], 1);
    run(
        app,
        "INSERT INTO profile_skills (profile_id, skill_id)
         SELECT $1, id FROM skills WHERE slug = 'python'",
        newest,
    )
    .await;
    assert_eq!(directory("skill=python").await["total"], 2);
    run(
        app,
        "UPDATE users SET is_active = FALSE WHERE id = $1",
        experts[0].0.id,
    )
    .await;
    assert_eq!(directory("q=ledger").await["total"], 1);
    run(app, "DELETE FROM profiles WHERE id = $1", newest).await;
    assert_eq!(directory("q=ledger").await["total"], 0);

    // A reset empties the profiles, and the count goes on growing from where it was.
    let counted = writes().await;
    marketplace::store::reset::empty_all(&app.db).await.unwrap();
    assert!(writes().await > counted);
    assert_eq!(directory("q=ledger").await["total"], 0);
}

/// The administrators' search totals are kept by each instance until an account's search text
/// changes (migration 0054): a search is counted once, then its total serves its other pages
/// and its repeats; a fold keeps the count of writes; a registration, an e-mail changed, a
/// profile added, renamed and deleted, and an account deleted are each seen by the next
/// request, whoever writes them; a search beside another filter is always counted; a reset
/// leaves the count higher.
#[actix_web::test]
async fn admin_search_totals_are_kept_until_an_account_text_changes() {
    let m = crate::market::Market::open().await;
    let app = &m.app;
    let total = |query: &'static str| {
        let m = &m;
        async move {
            let path = format!("/api/admin/users?{query}");
            let response = m.as_admin(reqwest::Method::GET, &path, None).await;
            assert_eq!(response.status(), 200, "{query}");
            json(response).await["total"].as_i64().unwrap()
        }
    };
    let writes = || async {
        let mut conn = app.db.conn().await.unwrap();
        marketplace::store::tallies::written(
            conn.exec(),
            marketplace::store::tallies::Tally::AccountSearchWrites,
        )
        .await
        .unwrap()
    };
    // `$2` is the service clock's now.
    let exec = |sql: &'static str, id: i64| async move {
        let now = app.clock.now();
        let mut conn = app.db.conn().await.unwrap();
        marketplace::on_exec!(conn.exec(), c =>
            sqlx::query(sql).bind(id).bind(now).execute(c).await.map(drop))
        .unwrap();
    };
    let metric = "admin_user_search_totals_total";
    let one = register(app, "garcia_one", &["experto"]).await;
    let two = register(app, "garcia_two", &["empresa"]).await;
    let three = register(app, "plain_three", &["experto"]).await;

    let before = kept_pages(app, metric).await;
    assert_eq!(total("search=garcia&size=1").await, 2);
    assert_eq!(total("search=garcia&size=1&page=2").await, 2);
    assert_eq!(total("search=garcia").await, 2);
    let after = kept_pages(app, metric).await;
    assert_eq!(
        (after.0 - before.0, after.1 - before.1),
        (2, 1),
        "counted once, kept twice"
    );
    // Beside another filter the total is the accounts', counted each time.
    assert_eq!(total("search=garcia&role=experto").await, 1);
    assert_eq!(kept_pages(app, metric).await, after);

    let written = writes().await;
    fold(app).await;
    assert_eq!(writes().await, written);
    assert_eq!(total("search=garcia").await, 2);
    assert_eq!(kept_pages(app, metric).await.0, after.0 + 1);

    // Every change to an account's search text is seen at once, whichever way it is made.
    exec(
        "UPDATE users SET email = 'garcia3@example.com' WHERE id = $1",
        three.id,
    )
    .await;
    assert!(writes().await > written);
    assert_eq!(total("search=garcia").await, 3);
    register(app, "garcia_four", &["experto"]).await;
    assert_eq!(total("search=garcia").await, 4);
    exec(
        "INSERT INTO profiles (user_id, profile_type, full_name, expert_level, created_at,
                               updated_at)
         VALUES ($1, 'experto', 'Ana Núñez', 'Global', $2, $2)",
        one.id,
    )
    .await;
    assert_eq!(total("search=nunez").await, 1);
    exec(
        "UPDATE profiles SET full_name = 'Ana Ruiz' WHERE user_id = $1",
        one.id,
    )
    .await;
    assert_eq!(total("search=nunez").await, 0);
    exec(
        "UPDATE profiles SET full_name = 'Ana Núñez' WHERE user_id = $1",
        one.id,
    )
    .await;
    assert_eq!(total("search=nunez").await, 1);
    exec("DELETE FROM profiles WHERE user_id = $1", one.id).await;
    assert_eq!(total("search=nunez").await, 0);
    // An account deleted once it has no profile: only the cascade to its text is written.
    exec("DELETE FROM profiles WHERE user_id = $1", two.id).await;
    assert_eq!(total("search=garcia").await, 4);
    exec("DELETE FROM users WHERE id = $1", two.id).await;
    assert_eq!(total("search=garcia").await, 3);

    // A reset empties the accounts, and the count goes on growing from where it was.
    let written = writes().await;
    marketplace::store::reset::empty_all(&app.db).await.unwrap();
    assert!(writes().await > written);
    let mut conn = app.db.conn().await.unwrap();
    let kept = marketplace::store::user_admin::SearchesKept::default();
    let (_, total) = marketplace::store::user_admin::list(
        conn.exec(),
        &marketplace::store::user_admin::UserFilter {
            search: Some("garcia".into()),
            ..Default::default()
        },
        1,
        20,
        &kept,
    )
    .await
    .unwrap();
    assert_eq!(total, 0);
}

/// Which accounts a page of an administrators' search holds is kept with its total: served
/// again while no account's search text changes, with what it shows of each account read at
/// every request; any change of a search text, on either engine, reads it again.
#[actix_web::test]
async fn admin_search_pages_are_kept_until_an_account_text_changes() {
    let m = crate::market::Market::open().await;
    let app = &m.app;
    let page = |query: &'static str| {
        let m = &m;
        async move {
            let path = format!("/api/admin/users?{query}");
            let response = m.as_admin(reqwest::Method::GET, &path, None).await;
            assert_eq!(response.status(), 200, "{query}");
            let body = json(response).await;
            let ids: Vec<i64> = body["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|u| u["id"].as_i64().unwrap())
                .collect();
            (ids, body["total"].as_i64().unwrap(), body)
        }
    };
    let exec = |sql: &'static str, id: i64| run(app, sql, id);
    let metric = "admin_user_search_pages_total";
    let older = register(app, "garcia_older", &["experto"]).await;
    let newer = register(app, "garcia_newer", &["empresa"]).await;
    let plain = register(app, "plain_newest", &["experto"]).await;

    let before = kept_pages(app, metric).await;
    // The first request counts the total and walks the page; both are kept for the next.
    for _ in 0..3 {
        let (ids, total, _) = page("search=garcia&size=1").await;
        assert_eq!((ids, total), (vec![newer.id], 2));
    }
    let after = kept_pages(app, metric).await;
    assert_eq!((after.0 - before.0, after.1 - before.1), (2, 0));

    // What the page shows of an account is read each time.
    exec("UPDATE users SET is_active = FALSE WHERE id = $1", newer.id).await;
    let (ids, _, body) = page("search=garcia&size=1").await;
    assert_eq!(ids, vec![newer.id]);
    assert_eq!(body["items"][0]["status"], "inactive", "{body}");
    assert_eq!(kept_pages(app, metric).await.0, after.0 + 1);

    // Page 2 kept too, then a search text changed: the newest account now matches, and
    // every page is walked again, page 2 included though its total is kept anew by page 1.
    let (ids, _, _) = page("search=garcia&size=1&page=2").await;
    assert_eq!(ids, vec![older.id]);
    exec(
        "UPDATE users SET email = 'garcia.plain@example.com' WHERE id = $1",
        plain.id,
    )
    .await;
    let (ids, total, _) = page("search=garcia&size=1").await;
    assert_eq!((ids, total), (vec![plain.id], 3));
    let (ids, _, _) = page("search=garcia&size=1&page=2").await;
    assert_eq!(ids, vec![newer.id]);
    exec(
        "UPDATE users SET email = 'renamed@example.com', username = 'renamed' WHERE id = $1",
        newer.id,
    )
    .await;
    let (ids, total, _) = page("search=garcia&size=1&page=2").await;
    assert_eq!((ids, total), (vec![older.id], 2));
    let end = kept_pages(app, metric).await;
    assert_eq!((end.0 - after.0, end.1 - after.1), (1, 2));
}

#[actix_web::test]
async fn project_search_counts_are_kept_until_a_project_is_written() {
    let app = spawn_app().await;
    let company = register(&app, "searchkeeper", &["empresa"]).await;
    let expert = register(&app, "searchreader", &["experto"]).await;
    let (_, admin_token) = crate::helpers::admin(&app, "search_keeper_admin").await;
    let [titled, _, draft] = kubernetes_projects(&app, company.id).await;
    let total = |path: &'static str, token: &str| {
        let app = &app;
        let token = token.to_owned();
        async move {
            let response = app
                .client
                .get(app.url(path))
                .bearer_auth(token)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 200, "{path}");
            json(response).await["total"].as_i64().unwrap()
        }
    };
    let as_expert = || total("/api/projects?search=kubernetes", &expert.access_token);
    let as_admin = || total("/api/admin/projects?search=kubernetes", &admin_token);
    // Only SQLite's search asks its index for counts: two a search, the title's and all.
    let per_search = if app.db.engine() == "sqlite" { 2 } else { 0 };
    let metric = "project_search_counts_total";

    let before = kept_pages(&app, metric).await;
    assert_eq!(as_expert().await, 2);
    assert_eq!(as_expert().await, 2);
    assert_eq!(as_admin().await, 3);
    assert_eq!(as_admin().await, 3);
    let after = kept_pages(&app, metric).await;
    assert_eq!(
        (after.0 - before.0, after.1 - before.1),
        (2 * per_search, 2 * per_search),
        "read once, kept the next time"
    );

    // A user's own projects outside the listings are counted at each request: an invitation
    // writes no project, and is seen at once.
    let now = app.clock.now();
    let mut conn = app.db.conn().await.unwrap();
    marketplace::on_exec!(conn.exec(), c => sqlx::query(
        "INSERT INTO project_invitations (project_id, expert_id, source, created_at)
         VALUES ($1, $2, 'admin', $3)",
    )
    .bind(draft)
    .bind(expert.id)
    .bind(now)
    .execute(c)
    .await
    .map(drop))
    .unwrap();
    drop(conn);
    assert_eq!(as_expert().await, 3);
    let invited = kept_pages(&app, metric).await;
    assert_eq!(invited, (after.0 + per_search, after.1));

    // Any write to a project is a new count of writes: the index is asked again, and a
    // changed text is seen.
    run(
        &app,
        "UPDATE projects SET status = 'bidding' WHERE id = $1",
        titled,
    )
    .await;
    assert_eq!(as_expert().await, 3);
    assert_eq!(kept_pages(&app, metric).await.1, invited.1 + per_search);
    run(
        &app,
        "UPDATE projects SET title = 'Platform migration' WHERE id = $1",
        titled,
    )
    .await;
    assert_eq!(as_expert().await, 2);
    assert_eq!(as_admin().await, 2);
}

/// The relations a plan reads with a sequential scan.
fn sequential_scans(plan: &Value, out: &mut BTreeSet<String>) {
    if plan["Node Type"] == "Seq Scan" {
        out.insert(plan["Relation Name"].as_str().unwrap_or("?").to_owned());
    }
    for child in plan["Plans"].as_array().into_iter().flatten() {
        sequential_scans(child, out);
    }
}

/// The sequential scans of large relations in the plans of every statement `lists` send for
/// each of `seeks`, described; large meaning what PostgreSQL estimates at ten thousand rows or
/// more (a small table is read whole, rightly), `expected` among them.
async fn large_scans(
    conn: &mut marketplace::store::Conn,
    expected: &str,
    lists: &[(&str, marketplace::store::listing::ListQuery)],
    seeks: &[(marketplace::store::listing::Seek, &str)],
) -> Vec<String> {
    let large: Vec<String> = marketplace::on_exec!(conn.exec(), c => sqlx::query_scalar(
        "SELECT relname::text FROM pg_class WHERE relkind = 'r' AND reltuples >= 10000")
        .fetch_all(c).await)
    .unwrap();
    assert!(large.contains(&expected.to_owned()), "{large:?}");
    let mut found = Vec::new();
    for (name, list) in lists {
        for (seek, what) in seeks {
            for statement in list.explain(conn.exec(), *seek, 20).await.unwrap() {
                let mut scans = BTreeSet::new();
                sequential_scans(&statement["plan"][0]["Plan"], &mut scans);
                scans.retain(|relation| large.contains(relation));
                if !scans.is_empty() {
                    found.push(format!(
                        "{name}, {what}: {scans:?} in {}",
                        statement["statement"]
                    ));
                }
            }
        }
    }
    found
}

/// On PostgreSQL at scale M (a hundred thousand projects), no list statement reads the
/// projects or their side tables from start to end.
#[actix_web::test]
async fn no_project_list_scans_a_large_table_on_postgres() {
    use marketplace::store::listing::Seek;
    use marketplace::store::project_lists::{self, AdminProjectFilter, ProjectFilter, Viewer};
    if std::env::var("TEST_DATABASE_URL").is_err() {
        return;
    }
    // The bulk insert below is one long statement.
    let app = crate::helpers::spawn_app_with(&[("DATABASE_STATEMENT_TIMEOUT_SECONDS", "0")]).await;
    let company = register(&app, "bulk", &["empresa"]).await;
    let expert = register(&app, "bulk_expert", &["experto"]).await;
    let mut conn = app.db.conn().await.unwrap();
    marketplace::on_exec!(conn.exec(), c => sqlx::query(
        "INSERT INTO projects (company_id, title, description, budget_minor, skills_required,
             project_type, status, created_at, updated_at)
         SELECT CASE WHEN g % 20 = 0 THEN $1 ELSE NULL END,
                (ARRAY['Kubernetes migration', 'Data pipeline', 'Diseño web', 'Mobile app'])[1 + g % 4]
                    || ' w' || (g % 97),
                (ARRAY['python and sql', 'react front end', 'análisis de datos', 'rust services'])[1 + g % 4],
                1000 * (g % 500), jsonb_build_array((ARRAY['python', 'react', 'rust', 'go'])[1 + g % 4]),
                CASE WHEN g % 3 = 0 THEN 'private' ELSE 'curated' END,
                (ARRAY['published_curated', 'bidding', 'draft', 'completed', 'in_progress'])[1 + g % 5],
                now() - g * interval '1 minute', now()
           FROM generate_series(1, 100000) AS g")
        .bind(company.id).execute(c).await.map(drop))
    .unwrap();
    marketplace::on_exec!(conn.exec(), c => sqlx::query("ANALYZE").execute(c).await.map(drop))
        .unwrap();

    let search = |text: &str| ProjectFilter {
        search: Some(text.to_owned()),
        ..ProjectFilter::default()
    };
    let skill = ProjectFilter {
        skill: Some("Rust".into()),
        ..ProjectFilter::default()
    };
    let skill_in_budget = ProjectFilter {
        min_budget_minor: Some(100_000),
        max_budget_minor: Some(150_000),
        ..skill.clone()
    };
    let engine = conn.exec();
    let lists = [
        (
            "public",
            project_lists::visible(&engine, Viewer::Anonymous, &ProjectFilter::default(), true),
        ),
        // A word in one project of a hundred, as a real search is.
        (
            "public search",
            project_lists::visible(&engine, Viewer::Anonymous, &search("w42"), true),
        ),
        (
            "public by skill",
            project_lists::visible(&engine, Viewer::Anonymous, &skill, true),
        ),
        // The budget beside each skill (migration 0057).
        (
            "public by skill and budget",
            project_lists::visible(&engine, Viewer::Anonymous, &skill_in_budget, true),
        ),
        (
            "expert's visible",
            project_lists::visible(
                &engine,
                Viewer::User(expert.id),
                &ProjectFilter::default(),
                true,
            ),
        ),
        (
            "expert's search",
            project_lists::visible(&engine, Viewer::User(expert.id), &search("w7"), true),
        ),
        (
            "admin",
            project_lists::visible(&engine, Viewer::Admin, &ProjectFilter::default(), true),
        ),
        (
            "admin search",
            project_lists::admin(
                &engine,
                &AdminProjectFilter {
                    search: Some("W13".into()),
                    ..AdminProjectFilter::default()
                },
            ),
        ),
        ("company's own", project_lists::mine(company.id, None)),
    ];
    let seeks = [
        (Seek::Page(1), "first page"),
        (Seek::Page(200), "page 200"),
        (Seek::Page(1_000_000), "past the end"),
    ];
    let found = large_scans(&mut conn, "projects", &lists, &seeks).await;
    assert!(found.is_empty(), "sequential scans:\n{}", found.join("\n"));
    drop(conn);
    app.stop().await;
}

/// The expert list's filter of the words `q` and the skill `skill` alone.
fn expert_filter(
    q: Option<&str>,
    skill: Option<&str>,
) -> marketplace::store::profiles::ExpertFilter {
    marketplace::store::profiles::ExpertFilter {
        q: q.map(str::to_owned),
        skill: skill.map(str::to_owned),
        ..Default::default()
    }
}

/// On PostgreSQL with twelve thousand listed experts, no statement of the expert directory or
/// its searches (a word alone, beside a skill or another word, of one verification, with a
/// level) reads the profiles, their users, their skills or the search documents from start to
/// end.
#[actix_web::test]
async fn no_expert_list_scans_a_large_table_on_postgres() {
    use marketplace::store::expert_lists;
    use marketplace::store::listing::Seek;
    use marketplace::store::profiles::ExpertFilter;
    if std::env::var("TEST_DATABASE_URL").is_err() {
        return;
    }
    let app = crate::helpers::spawn_app_with(&[("DATABASE_STATEMENT_TIMEOUT_SECONDS", "0")]).await;
    let mut conn = app.db.conn().await.unwrap();
    // Every expert holds two of ten skills; a quarter of them `ledger`, one in a hundred each
    // `w<n>` word; four in five verified.
    for statement in [
        "INSERT INTO skills (name, slug, created_at)
         SELECT name, lower(name), now()
           FROM unnest(ARRAY['Python', 'Go', 'Rust', 'SQL', 'React', 'Java', 'Swift', 'Kotlin',
                             'Ruby', 'Elixir']) AS name
         ON CONFLICT (slug) DO NOTHING",
        "INSERT INTO users (email, username, password_hash, active_role, created_at, updated_at)
         SELECT 'bulk' || g || '@experts.test', 'bulkexpert' || g, 'x', 'experto', now(), now()
           FROM generate_series(1, 12000) AS g",
        // Stored as company profiles, given their skills, then made experts: each expert's
        // document is written once, not once a skill.
        "INSERT INTO profiles (user_id, profile_type, full_name, bio, is_verified, expert_level,
                               created_at, updated_at)
         SELECT u.id, 'empresa', 'Bulk ' || u.id,
                (ARRAY['ledger audits', 'data pipelines', 'web design', 'mobile apps'])[1 + u.id % 4]
                    || ' w' || (u.id % 100),
                u.id % 5 <> 0, (ARRAY['Global', 'Pro', 'Enterprise'])[1 + u.id % 3],
                now() - u.id * interval '1 minute', now()
           FROM users u WHERE u.username LIKE 'bulkexpert%'",
        "INSERT INTO profile_skills (profile_id, skill_id)
         SELECT p.id, s.id FROM profiles p JOIN users u ON u.id = p.user_id
           JOIN skills s ON s.slug IN ((ARRAY['python', 'go', 'rust', 'sql', 'react'])[1 + p.id % 5],
                                       (ARRAY['java', 'swift', 'kotlin', 'ruby', 'elixir'])[1 + p.id / 5 % 5])
          WHERE u.username LIKE 'bulkexpert%'",
        "UPDATE profiles p SET profile_type = 'experto' FROM users u
          WHERE u.id = p.user_id AND u.username LIKE 'bulkexpert%'",
        // As autovacuum leaves a table in service: its full-text index's pending entries
        // merged, its visibility map set.
        "VACUUM ANALYZE",
    ] {
        marketplace::on_exec!(conn.exec(), c =>
            sqlx::query(sqlx::AssertSqlSafe(statement)).execute(c).await.map(drop))
        .unwrap();
    }
    let engine = conn.exec();
    let lists = [
        ("directory", expert_filter(None, None)),
        ("a skill's experts", expert_filter(None, Some("python"))),
        ("a common word", expert_filter(Some("ledger"), None)),
        ("a rare word", expert_filter(Some("w42"), None)),
        (
            "a word beside a skill",
            expert_filter(Some("ledger"), Some("python")),
        ),
        ("two words", expert_filter(Some("w40 ledger"), None)),
        (
            "a word, verified",
            ExpertFilter {
                verified: Some(true),
                ..expert_filter(Some("ledger"), None)
            },
        ),
        (
            "a word and a level",
            ExpertFilter {
                level: Some("Pro".into()),
                ..expert_filter(Some("w42"), None)
            },
        ),
    ]
    .map(|(name, f)| (name, expert_lists::experts(&engine, &f)));
    let seeks = [
        (Seek::Page(1), "first page"),
        // Past the first thousand rows, where a tier is counted, yet a tenth of the list, as
        // page 200 is of a large one (a third of this one is read whole, rightly).
        (Seek::Page(60), "page 60"),
        (Seek::Page(1_000_000), "past the end"),
    ];
    let found = large_scans(&mut conn, "expert_search", &lists, &seeks).await;
    assert!(found.is_empty(), "sequential scans:\n{}", found.join("\n"));
    drop(conn);
    app.stop().await;
}

/// SQLite's statistics for `tables` multiplied by `factor`, as if each held that many times
/// its rows (their spread kept), and loaded on this connection: how its planner would choose
/// at a size no test seeds.
async fn sqlite_statistics_times(
    conn: &mut marketplace::store::Conn,
    tables: &[&str],
    factor: i64,
) {
    // Every count but those of one row (a key's share of a unique index) and, for a sample's
    // distinct keys before it, the first column's (its own few values).
    let scaled = |figures: &str, keep_first: bool| -> String {
        let scaled: Vec<String> = figures
            .split(' ')
            .enumerate()
            .map(|(i, v)| {
                let n: i64 = v.parse().unwrap();
                if n <= 1 || (keep_first && i == 0) {
                    n.to_string()
                } else {
                    (n * factor).to_string()
                }
            })
            .collect();
        scaled.join(" ")
    };
    let marketplace::store::Exec::Sqlite(c) = conn.exec() else {
        panic!("SQLite's statistics")
    };
    sqlx::query("ANALYZE").execute(&mut *c).await.unwrap();
    for table in tables {
        let stat1: Vec<(String, Option<String>, String)> =
            sqlx::query_as("SELECT tbl, idx, stat FROM sqlite_stat1 WHERE tbl = ?")
                .bind(table)
                .fetch_all(&mut *c)
                .await
                .unwrap();
        for (tbl, idx, stat) in stat1 {
            sqlx::query("UPDATE sqlite_stat1 SET stat = ? WHERE tbl = ? AND idx IS ?")
                .bind(scaled(&stat, false))
                .bind(tbl)
                .bind(idx)
                .execute(&mut *c)
                .await
                .unwrap();
        }
        let stat4: Vec<(i64, String, String, String)> =
            sqlx::query_as("SELECT rowid, neq, nlt, ndlt FROM sqlite_stat4 WHERE tbl = ?")
                .bind(table)
                .fetch_all(&mut *c)
                .await
                .unwrap();
        for (rowid, neq, nlt, ndlt) in stat4 {
            sqlx::query("UPDATE sqlite_stat4 SET neq = ?, nlt = ?, ndlt = ? WHERE rowid = ?")
                .bind(scaled(&neq, false))
                .bind(scaled(&nlt, false))
                .bind(scaled(&ndlt, true))
                .bind(rowid)
                .execute(&mut *c)
                .await
                .unwrap();
        }
    }
    sqlx::query("ANALYZE sqlite_schema")
        .execute(&mut *c)
        .await
        .unwrap();
}

/// The plan of a statement [`ListQuery::explain`](marketplace::store::listing::ListQuery::explain)
/// gave on SQLite: its lines' details.
fn sqlite_plan(statement: &Value) -> Vec<&str> {
    statement["plan"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect()
}

/// On SQLite, under the statistics of a million profiles (twelve thousand experts' scaled a
/// hundred times), the expert directory and its searches start from the profiles, walking
/// the directory's index, and never read every user: left to choose, SQLite's planner read
/// each user, then sorted their expert profiles (1.5 s for the first page at L). The
/// administrators' profile list walks its index too.
#[actix_web::test]
async fn profile_lists_walk_their_indexes_on_sqlite_at_a_million_profiles() {
    use marketplace::store::expert_lists;
    use marketplace::store::listing::Seek;
    use marketplace::store::profiles::{AdminFilter, ExpertFilter};
    if std::env::var("TEST_DATABASE_URL").is_ok() {
        return;
    }
    let app = spawn_app().await;
    let mut conn = app.db.conn().await.unwrap();
    // As the PostgreSQL test above: two of ten skills each, a quarter `ledger`, four in five
    // verified.
    for statement in [
        "INSERT OR IGNORE INTO skills (name, slug, created_at)
         SELECT value, lower(value), '2026-01-01T00:00:00+00:00'
           FROM json_each('[\"Python\", \"Go\", \"Rust\", \"SQL\", \"React\", \"Java\"]')",
        "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 12000)
         INSERT INTO users (email, username, password_hash, active_role, created_at, updated_at)
         SELECT 'bulk' || n || '@experts.test', 'bulkexpert' || n, 'x', 'experto',
                '2026-01-01T00:00:00+00:00', '2026-01-01T00:00:00+00:00' FROM g",
        "INSERT INTO profiles (user_id, profile_type, full_name, bio, is_verified, expert_level,
                               created_at, updated_at)
         SELECT u.id, 'experto', 'Bulk ' || u.id,
                CASE u.id % 4 WHEN 0 THEN 'ledger audits' WHEN 1 THEN 'data pipelines'
                              WHEN 2 THEN 'web design' ELSE 'mobile apps' END,
                u.id % 5 <> 0, 'Pro',
                strftime('%Y-%m-%dT%H:%M:%S+00:00', '2026-01-01', '-' || u.id || ' minutes'),
                '2026-01-01T00:00:00+00:00'
           FROM users u WHERE u.username LIKE 'bulkexpert%'",
        "INSERT INTO profile_skills (profile_id, skill_id)
         SELECT p.id, s.id FROM profiles p JOIN skills s
             ON s.slug = CASE p.id % 3 WHEN 0 THEN 'python' WHEN 1 THEN 'go' ELSE 'rust' END
          WHERE p.full_name LIKE 'Bulk %'",
    ] {
        marketplace::on_exec!(conn.exec(), c =>
            sqlx::query(sqlx::AssertSqlSafe(statement)).execute(c).await.map(drop))
        .unwrap();
    }
    sqlite_statistics_times(&mut conn, &["profiles", "users"], 100).await;
    for (name, f) in [
        ("directory", expert_filter(None, None)),
        ("a skill's experts", expert_filter(None, Some("python"))),
        ("a common word", expert_filter(Some("ledger"), None)),
        (
            "a word, verified",
            ExpertFilter {
                verified: Some(true),
                ..expert_filter(Some("ledger"), None)
            },
        ),
    ] {
        let list = expert_lists::experts_for_page(conn.exec(), &f, 20)
            .await
            .unwrap();
        for statement in list.explain(conn.exec(), Seek::Page(1), 20).await.unwrap() {
            let lines = sqlite_plan(&statement);
            // `SCAN p` or `SCAN u`, not a virtual table's `SCAN profile_search`.
            let whole = |line: &&str| {
                let words: Vec<&str> = line.split(' ').collect();
                matches!(words[..], ["SCAN", "p" | "u", ..])
            };
            assert!(
                !lines.iter().any(whole),
                "{name}: {lines:?} for {}",
                statement["statement"]
            );
        }
    }
    // The administrators' profile list walks the profiles newest first, each user looked up.
    for (name, f) in [
        ("every profile", AdminFilter::default()),
        (
            "verified experts",
            AdminFilter {
                profile_type: Some("experto".into()),
                is_verified: Some(true),
                ..AdminFilter::default()
            },
        ),
    ] {
        let list = marketplace::store::profiles::admin_list(&f);
        for statement in list.explain(conn.exec(), Seek::Page(1), 20).await.unwrap() {
            let lines = sqlite_plan(&statement);
            // `SCAN p USING INDEX idx_profiles_created_at` is the walk; `SCAN p` alone reads
            // every profile, and the users are only looked up.
            assert!(
                !lines
                    .iter()
                    .any(|line| *line == "SCAN p" || line.starts_with("SCAN u")),
                "{name}: {lines:?} for {}",
                statement["statement"]
            );
        }
    }
    drop(conn);
    app.stop().await;
}

/// A chat's totals come from its room's kept count and each message's place in the room
/// (migration 0018), written by group commits into two rooms in turn: they match a count.
#[actix_web::test]
async fn chat_totals_follow_group_commits_in_several_rooms() {
    use marketplace::store::chat;
    let app = spawn_app().await;
    let company = register(&app, "chatty", &["empresa"]).await;
    let rooms = [
        project(&app, company.id, "Room one", "", ProjectStatus::Draft).await,
        project(&app, company.id, "Room two", "", ProjectStatus::Draft).await,
    ];
    let mut ids = Vec::new();
    for (round, size) in [3usize, 1, 5, 2].into_iter().enumerate() {
        let room = rooms[round % 2];
        let stored = chat_group(&app, room, company.id, size).await;
        ids.extend(stored.into_iter().map(|id| (room, id)));
    }
    let mut conn = app.db.conn().await.unwrap();
    let counted = |room: i64, before: Option<i64>| {
        ids.iter()
            .filter(|(r, id)| *r == room && before.is_none_or(|b| *id < b))
            .count() as i64
    };
    for room in rooms {
        let (_, total) = chat::list(conn.exec(), room, None, 20, 0).await.unwrap();
        assert_eq!(total, counted(room, None), "room {room}");
        // Before each message of either room, and past the newest.
        for (_, before) in &ids {
            let (items, total) = chat::list(conn.exec(), room, Some(*before), 20, 0)
                .await
                .unwrap();
            assert_eq!(
                total,
                counted(room, Some(*before)),
                "room {room} before {before}"
            );
            assert_eq!(items.len() as i64, total);
        }
        let (_, total) = chat::list(conn.exec(), room, Some(i64::MAX), 20, 0)
            .await
            .unwrap();
        assert_eq!(total, counted(room, None));
    }
    drop(conn);
    app.stop().await;
}

/// A user's notification totals and unread badge come from counts the triggers keep: they
/// follow new notifications (a repeated one ignored), reads, marking all read and deletion.
#[actix_web::test]
async fn notification_totals_follow_inserts_reads_and_deletes() {
    use marketplace::store::notifications::{self, NewNotification};
    let app = spawn_app().await;
    let user = register(&app, "notified", &["empresa"]).await;
    let other = register(&app, "bystander", &["empresa"]).await;
    let data = serde_json::json!({});
    let new = |user_id: i64, event_id: i64| notification(user_id, event_id, &data);
    let mut conn = app.db.conn().await.unwrap();
    let all: Vec<NewNotification> = (1..=5)
        .map(|e| new(user.id, e))
        .chain([new(other.id, 1)])
        .collect();
    notifications::insert_all(conn.exec(), &all, app.clock.now())
        .await
        .unwrap();
    // The same (user, type, event) again is no new notification.
    notifications::insert_all(conn.exec(), &all[..2], app.clock.now())
        .await
        .unwrap();
    drop(conn);

    let totals = || async {
        let get = |path: &'static str| {
            crate::helpers::request_as(&app, reqwest::Method::GET, path, &user.access_token, None)
        };
        let all = json(get("/api/notifications").await).await;
        let unread = get("/api/notifications?unread_only=true").await;
        let unread = json(unread).await;
        assert_eq!(
            all["items"].as_array().unwrap().len() as i64,
            all["total"].as_i64().unwrap()
        );
        (
            all["total"].as_i64().unwrap(),
            unread["total"].as_i64().unwrap(),
        )
    };
    assert_eq!(totals().await, (5, 5));
    let mut conn = app.db.conn().await.unwrap();
    let first = marketplace::on_exec!(conn.exec(), c => sqlx::query_scalar::<_, i64>(
        "SELECT MIN(id) FROM notifications WHERE user_id = $1").bind(user.id).fetch_one(c).await)
    .unwrap();
    assert!(
        notifications::mark_read(conn.exec(), user.id, first, app.clock.now())
            .await
            .unwrap()
    );
    assert!(
        notifications::mark_read(conn.exec(), user.id, first, app.clock.now())
            .await
            .unwrap()
    );
    drop(conn);
    assert_eq!(totals().await, (5, 4));
    let mut conn = app.db.conn().await.unwrap();
    marketplace::on_exec!(conn.exec(), c => sqlx::query("DELETE FROM notifications WHERE id = $1")
        .bind(first).execute(c).await.map(drop))
    .unwrap();
    notifications::mark_all_read(conn.exec(), user.id, app.clock.now())
        .await
        .unwrap();
    drop(conn);
    assert_eq!(totals().await, (4, 0));
    app.stop().await;
}

/// A reader's unread count comes from the kept counts and places (migrations 0018, 0021): at
/// every read mark, with the reader's own messages and others' deleted ones left out, it
/// matches a count of the room.
#[actix_web::test]
async fn chat_unread_counts_match_a_count_at_every_read_mark() {
    use marketplace::store::chat;
    let app = spawn_app().await;
    let company = register(&app, "unread_co", &["empresa"]).await;
    let reader = register(&app, "unread_reader", &["experto"]).await;
    let room = project(&app, company.id, "Unread room", "", ProjectStatus::Draft).await;
    let mut ids = Vec::new();
    for (round, size) in [2usize, 3, 1, 4, 2].into_iter().enumerate() {
        let sender = if round % 2 == 0 {
            company.id
        } else {
            reader.id
        };
        ids.extend(chat_group(&app, room, sender, size).await);
    }
    let mut conn = app.db.conn().await.unwrap();
    // Two of the company's messages and one of the reader's deleted.
    for id in [ids[0], ids[6], ids[2]] {
        marketplace::on_exec!(conn.exec(), c => sqlx::query(
            "UPDATE chat_messages SET deleted_at = created_at WHERE id = $1")
            .bind(id).execute(c).await.map(drop))
        .unwrap();
    }
    async fn counted(conn: &mut marketplace::store::Conn, room: i64, reader: i64) -> i64 {
        marketplace::on_exec!(conn.exec(), c => sqlx::query_scalar::<_, i64>(
                "SELECT COUNT(*) FROM chat_messages WHERE project_id = $1 AND deleted_at IS NULL
                   AND (sender_id IS NULL OR sender_id <> $2)
                   AND id > COALESCE((SELECT last_read_message_id FROM chat_reads
                                      WHERE project_id = $1 AND user_id = $2), 0)")
                .bind(room).bind(reader).fetch_one(c).await)
        .unwrap()
    }
    assert_eq!(
        chat::unread(conn.exec(), room, reader.id).await.unwrap(),
        counted(&mut conn, room, reader.id).await
    );
    for mark in &ids {
        chat::mark_read(conn.exec(), room, reader.id, *mark, app.clock.now())
            .await
            .unwrap();
        let kept = chat::unread(conn.exec(), room, reader.id).await.unwrap();
        assert_eq!(
            kept,
            counted(&mut conn, room, reader.id).await,
            "read up to {mark}"
        );
    }
    drop(conn);
    app.stop().await;
}

/// Read notifications are pruned once `NOTIFICATION_RETENTION_DAYS` have passed since they
/// were read (the service's clock moved, the daily job run); unread ones and recently read
/// ones stay, and the kept counts follow.
#[actix_web::test]
async fn read_notifications_are_pruned_after_the_retention_and_unread_ones_kept() {
    use marketplace::store::notifications;
    use marketplace::workflows::retention::NOTIFICATION_PRUNE_JOB;
    let app = crate::helpers::spawn_app_with(&[("NOTIFICATION_RETENTION_DAYS", "90")]).await;
    let user = register(&app, "pruned", &["empresa"]).await;
    let data = serde_json::json!({});
    let new = |event_id: i64| notification(user.id, event_id, &data);
    let mut conn = app.db.conn().await.unwrap();
    let stored = notifications::insert_all(conn.exec(), &[new(1), new(2), new(3)], app.clock.now())
        .await
        .unwrap();
    // The first read long ago, the second read just before the job, the third never.
    notifications::mark_read(conn.exec(), user.id, stored[0].id, app.clock.now())
        .await
        .unwrap();
    app.clock.advance(Duration::days(91));
    notifications::mark_read(conn.exec(), user.id, stored[1].id, app.clock.now())
        .await
        .unwrap();
    drop(conn);
    app.state
        .jobs
        .trigger(NOTIFICATION_PRUNE_JOB)
        .await
        .unwrap();

    // (Read through the store: the account's token has expired on the moved clock.)
    let mut conn = app.db.conn().await.unwrap();
    let (items, total) = notifications::list_for_user(conn.exec(), user.id, false, 20, 0)
        .await
        .unwrap();
    let left: BTreeSet<i64> = items.iter().map(|n| n.id).collect();
    assert_eq!(left, BTreeSet::from([stored[1].id, stored[2].id]));
    assert_eq!(total, 2);
    assert_eq!(
        notifications::unread_count(conn.exec(), user.id)
            .await
            .unwrap(),
        1
    );
    drop(conn);
    app.stop().await;
}

/// Outbox events are pruned once every consumer had them and their e-mails are sent, past
/// `EVENT_RETENTION_DAYS`; CRM sync log entries past `CRM_SYNC_LOG_RETENTION_DAYS`, except
/// those still to be retried and each user's newest entry naming their contact.
#[actix_web::test]
async fn old_events_and_crm_log_entries_are_pruned_and_what_is_still_owed_kept() {
    use marketplace::workflows::retention::{CRM_LOG_PRUNE_JOB, EVENT_PRUNE_JOB};
    let app = crate::helpers::spawn_app_with(&[
        ("EVENT_RETENTION_DAYS", "30"),
        ("CRM_SYNC_LOG_RETENTION_DAYS", "90"),
    ])
    .await;
    let user = register(&app, "retained", &["experto"]).await;
    let far = app.clock.now() + Duration::days(3650);
    let event = |dispatched: bool| {
        let app = &app;
        async move {
            let now = app.clock.now();
            let mut conn = app.db.conn().await.unwrap();
            marketplace::on_exec!(conn.exec(), c => sqlx::query_scalar::<_, i64>(
                "INSERT INTO events (kind, aggregate, aggregate_id, created_at, available_at, dispatched_at)
                 VALUES ('retention.test', 'user', 0, $1, $2, $3) RETURNING id")
                .bind(now).bind(far).bind(dispatched.then_some(now))
                .fetch_one(c).await)
            .unwrap()
        }
    };
    let log = |status: &'static str, contact: Option<&'static str>, exhausted: bool| {
        let app = &app;
        let user = user.id;
        async move {
            let now = app.clock.now();
            let mut conn = app.db.conn().await.unwrap();
            marketplace::on_exec!(conn.exec(), c => sqlx::query_scalar::<_, i64>(
                "INSERT INTO crm_sync_log (user_id, crm_contact_id, event_type, status,
                                           exhausted_at, created_at, updated_at)
                 VALUES ($1, $2, 'contact_update', $3, $4, $5, $5) RETURNING id")
                .bind(user).bind(contact).bind(status).bind(exhausted.then_some(now)).bind(now)
                .fetch_one(c).await)
            .unwrap()
        }
    };
    let had = event(true).await;
    let mailing = event(true).await;
    let pending = event(false).await;
    {
        let mut conn = app.db.conn().await.unwrap();
        marketplace::on_exec!(conn.exec(), c => sqlx::query(
            "INSERT INTO mail_queue (event_id, position, recipient, template, idempotency_key, available_at)
             VALUES ($1, 0, 'retained@example.com', 'welcome', 'retention-test', $2)")
            .bind(mailing).bind(far).execute(c).await.map(drop))
        .unwrap();
    }
    let older_contact = log("success", Some("contact-1"), false).await;
    let newest_contact = log("success", Some("contact-1"), false).await;
    let owed = log("failed", None, false).await;
    let given_up = log("failed", None, true).await;
    let plain = log("skipped", None, false).await;

    app.clock.advance(Duration::days(31));
    let young = event(true).await;
    app.state.jobs.trigger(EVENT_PRUNE_JOB).await.unwrap();
    app.state.jobs.trigger(CRM_LOG_PRUNE_JOB).await.unwrap();
    let left = |table: &'static str, ids: Vec<i64>| {
        let app = &app;
        async move {
            let mut conn = app.db.conn().await.unwrap();
            let all: Vec<i64> = marketplace::on_exec!(conn.exec(), c =>
                sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT id FROM {table}")))
                    .fetch_all(c).await)
            .unwrap();
            ids.into_iter()
                .filter(|id| all.contains(id))
                .collect::<BTreeSet<i64>>()
        }
    };
    assert_eq!(
        left("events", vec![had, mailing, pending, young]).await,
        BTreeSet::from([mailing, pending, young]),
        "the old event every consumer had goes; one with an unsent e-mail or undispatched stays"
    );
    let crm = vec![older_contact, newest_contact, owed, given_up, plain];
    assert_eq!(
        left("crm_sync_log", crm.clone()).await.len(),
        5,
        "90 days not passed"
    );

    app.clock.advance(Duration::days(60));
    let recent = log("success", None, false).await;
    app.state.jobs.trigger(CRM_LOG_PRUNE_JOB).await.unwrap();
    let mut crm = crm;
    crm.push(recent);
    assert_eq!(
        left("crm_sync_log", crm).await,
        BTreeSet::from([newest_contact, owed, recent]),
    );
    app.stop().await;
}

/// The administrators' user list takes its total from kept counts for no filter, one role or
/// one status: they follow registrations, role changes, deactivation, suspension, deletion and
/// restoration, and agree with a count of the rows under every such filter.
#[actix_web::test]
async fn admin_user_totals_follow_every_change_of_role_and_status() {
    use marketplace::store::user_admin::{SearchesKept, UserFilter, list};
    let app = spawn_app().await;
    let kept = SearchesKept::default();
    crate::helpers::admin(&app, "counting_root").await;
    let a = register(&app, "countedco", &["empresa"]).await;
    let b = register(&app, "countedex", &["experto"]).await;
    let c = register(&app, "countedboth", &["experto", "empresa"]).await;
    let check = |step: &'static str| {
        let (app, kept) = (&app, &kept);
        async move {
            let mut conn = app.db.conn().await.unwrap();
            let filters: Vec<UserFilter> = [None, Some("empresa"), Some("experto"), Some("admin")]
                .into_iter()
                .map(|role| UserFilter {
                    role: role.map(str::to_owned),
                    ..UserFilter::default()
                })
                .chain(
                    ["active", "inactive", "suspended", "deleted"]
                        .into_iter()
                        .map(|s| UserFilter {
                            status: Some(s.to_owned()),
                            ..UserFilter::default()
                        }),
                )
                .collect();
            let mut totals = Vec::new();
            for f in &filters {
                let (_, total) = list(conn.exec(), f, 1, 1, kept).await.unwrap();
                // The same filter with a search matching everyone is counted row by row.
                let counted = list(
                    conn.exec(),
                    &UserFilter {
                        search: Some("@example.com".into()),
                        ..f.clone()
                    },
                    1,
                    1,
                    kept,
                )
                .await
                .unwrap()
                .1;
                assert_eq!(total, counted, "{step}: {f:?}");
                totals.push(total);
            }
            totals
        }
    };
    assert_eq!(check("registered").await, [4, 2, 2, 1, 4, 0, 0, 0]);
    // `$2` is the service clock's now.
    let exec = |sql: &'static str, id: i64| {
        let app = &app;
        async move {
            let now = app.clock.now();
            let mut conn = app.db.conn().await.unwrap();
            marketplace::on_exec!(conn.exec(), c =>
                sqlx::query(sql).bind(id).bind(now).execute(c).await.map(drop))
            .unwrap();
        }
    };
    exec(
        "UPDATE users SET is_active = FALSE, updated_at = $2 WHERE id = $1",
        a.id,
    )
    .await;
    exec(
        "UPDATE users SET suspended_at = $2, is_active = FALSE WHERE id = $1",
        b.id,
    )
    .await;
    exec(
        "DELETE FROM user_roles WHERE user_id = $1 AND role = 'empresa' AND $2 IS NOT NULL",
        c.id,
    )
    .await;
    assert_eq!(check("changed").await, [4, 1, 2, 1, 2, 1, 1, 0]);
    exec("UPDATE users SET deleted_at = $2 WHERE id = $1", b.id).await;
    exec(
        "UPDATE users SET is_active = TRUE, updated_at = $2 WHERE id = $1",
        a.id,
    )
    .await;
    assert_eq!(check("deleted").await, [4, 1, 2, 1, 3, 0, 0, 1]);
    exec("UPDATE users SET deleted_at = NULL, suspended_at = NULL, is_active = TRUE, updated_at = $2 WHERE id = $1", b.id).await;
    assert_eq!(check("restored").await, [4, 1, 2, 1, 4, 0, 0, 0]);
    fold(&app).await;
    assert_eq!(check("folded").await, [4, 1, 2, 1, 4, 0, 0, 0]);
    app.stop().await;
}

/// The expert directory's total with no filter or only `verified` comes from kept counts: they
/// follow registrations, verification, a user's deactivation and return, and a profile's
/// change of type, and agree with a count of the rows.
#[actix_web::test]
async fn expert_directory_totals_follow_verification_and_activity() {
    let m = crate::market::Market::open().await;
    let first = m.member("listedone", "experto", false, false).await;
    let second = m.member("listedtwo", "experto", false, false).await;
    m.member("listedthree", "experto", false, false).await;
    m.member("notlisted", "empresa", false, false).await;
    let app = &m.app;
    let check = |step: &'static str| async move {
        let mut totals = Vec::new();
        for (query, condition) in [
            ("", ""),
            ("?verified=true", " AND p.is_verified = TRUE"),
            ("?verified=false", " AND p.is_verified = FALSE"),
        ] {
            let body = json(app.get(&format!("/api/profiles/experts{query}")).await).await;
            let sql = format!(
                "SELECT COUNT(*) FROM profiles p JOIN users u ON u.id = p.user_id
                      WHERE p.profile_type = 'experto' AND u.is_active = TRUE{condition}"
            );
            let counted = count_of(app, sql).await;
            assert_eq!(body["total"], counted, "{step} {query}: {body}");
            totals.push(counted);
        }
        totals
    };
    assert_eq!(check("registered").await, [3, 0, 3]);
    let exec = |sql: &'static str, id: i64| run(app, sql, id);
    exec(
        "UPDATE profiles SET is_verified = TRUE WHERE user_id = $1",
        first.id,
    )
    .await;
    assert_eq!(check("verified").await, [3, 1, 2]);
    exec("UPDATE users SET is_active = FALSE WHERE id = $1", first.id).await;
    exec(
        "UPDATE profiles SET profile_type = 'empresa' WHERE user_id = $1",
        second.id,
    )
    .await;
    assert_eq!(check("deactivated").await, [1, 0, 1]);
    exec("UPDATE users SET is_active = TRUE WHERE id = $1", first.id).await;
    fold(app).await;
    assert_eq!(check("back and folded").await, [2, 1, 1]);
}

/// The outbox dispatcher's claim chooses the events not yet dispatched by an index of theirs,
/// however many dispatched ones are kept (30 days of them by default), then finds the chosen
/// ones by id, on both engines. PostgreSQL used to walk the primary key from the oldest event
/// past every dispatched one (34 ms a claim at 300,000 events), and to update through a
/// nested loop matching every due event against the chosen ones (the outbox fell behind under
/// 10,000 chat messages a second and every claim read the whole backlog).
#[actix_web::test]
async fn the_outbox_claim_reads_only_the_events_it_claims() {
    use marketplace::store::events;
    let app = spawn_app().await;
    let now = app.clock.now();
    let mut conn = app.db.conn().await.unwrap();
    // 20,000 dispatched events, then 2,000 due in a year (left alone by the running
    // dispatcher, which reads the service's clock), planned as if that year had passed.
    marketplace::on_exec!(conn.exec(), c => sqlx::query(
        "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 22000)
         INSERT INTO events (kind, aggregate, aggregate_id, created_at, available_at, dispatched_at)
         SELECT 'outbox.test', 'user', 0, $1, $2, CASE WHEN n <= 20000 THEN $1 END FROM g")
        .bind(now)
        .bind(now + Duration::days(365))
        .execute(c)
        .await
        .map(drop))
    .unwrap();
    marketplace::on_exec!(conn.exec(), c => sqlx::query("ANALYZE").execute(c).await.map(drop))
        .unwrap();
    let later = now + Duration::days(400);
    let plan = events::OUTBOX.claim_plan(conn.exec(), later).await.unwrap();
    for whole_table in ["Seq Scan", "SCAN events", "Nested Loop"] {
        assert!(!plan.contains(whole_table), "{plan}");
    }
    // Chosen through an index of the events not yet dispatched…
    assert!(
        plan.contains("idx_events_undispatched") || plan.contains("idx_events_pending"),
        "{plan}"
    );
    // …then found by id (the primary key read only that way).
    let lines: Vec<&str> = plan.lines().collect();
    for (n, line) in lines.iter().enumerate() {
        if line.contains("events_pkey") {
            let next = lines.get(n + 1).copied().unwrap_or_default();
            assert!(next.contains("Index Cond: (id = ANY"), "{plan}");
        }
    }
    assert!(
        plan.contains("Index Cond: (id = ANY") || plan.contains("INTEGER PRIMARY KEY (rowid=?)"),
        "{plan}"
    );
    drop(conn);
    app.stop().await;
}

/// A one-word search's total (PostgreSQL: from the projects by word the writes keep; SQLite:
/// counted) is the number of its matches for every viewer and filter, through changes of
/// text, status, type, deletions and folds: each total equals the items listed.
#[actix_web::test]
async fn search_totals_follow_text_status_type_and_deletes() {
    let app = spawn_app().await;
    let company = register(&app, "wordcounter", &["empresa"]).await;
    let outsider = register(&app, "wordoutsider", &["experto"]).await;
    let (_, admin_token) = crate::helpers::admin(&app, "word_admin").await;
    let [titled, described, draft] = kubernetes_projects(&app, company.id).await;
    project(
        &app,
        company.id,
        "Website",
        "Plain pages",
        ProjectStatus::PublishedCurated,
    )
    .await;

    let total = |path: String, token: Option<String>| {
        let app = &app;
        async move {
            let mut request = app.client.get(app.url(&path));
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), 200, "{path}");
            let body = json(response).await;
            let items = body["items"].as_array().unwrap().len() as i64;
            let total = body["total"].as_i64().unwrap();
            assert_eq!(items, total, "{path}: {body}");
            total
        }
    };
    let counts = |word: &'static str| {
        let (company, outsider, admin) = (
            company.access_token.clone(),
            outsider.access_token.clone(),
            admin_token.clone(),
        );
        let total = &total;
        async move {
            let word = urlencode(word);
            (
                total(format!("/api/projects/public?search={word}"), None).await,
                total(format!("/api/projects?search={word}"), Some(company)).await,
                total(format!("/api/projects?search={word}"), Some(outsider)).await,
                total(
                    format!("/api/admin/projects?search={word}"),
                    Some(admin.clone()),
                )
                .await,
                total(
                    format!("/api/admin/projects?search={word}&status=draft"),
                    Some(admin),
                )
                .await,
            )
        }
    };
    assert_eq!(counts("kubernetes").await, (2, 3, 2, 3, 1));
    assert_eq!(counts("KUBÉRNETES").await, (2, 3, 2, 3, 1));
    assert_eq!(counts("kubernetes migration").await, (1, 1, 1, 1, 0));
    assert_eq!(counts("cluster").await, (0, 0, 0, 0, 0));

    let exec = |sql: &'static str, id: i64| run(&app, sql, id);
    exec(
        "UPDATE projects SET status = 'bidding' WHERE id = $1",
        titled,
    )
    .await;
    assert_eq!(counts("kubernetes").await, (2, 3, 2, 3, 1));
    exec(
        "UPDATE projects SET description = 'Runs on bare metal' WHERE id = $1",
        described,
    )
    .await;
    assert_eq!(counts("kubernetes").await, (1, 2, 1, 2, 1));
    exec(
        "UPDATE projects SET status = 'published_curated' WHERE id = $1",
        draft,
    )
    .await;
    assert_eq!(counts("kubernetes").await, (2, 2, 2, 2, 0));
    fold(&app).await;
    // Private: no longer listed, still the company's own.
    exec(
        "UPDATE projects SET project_type = 'private' WHERE id = $1",
        titled,
    )
    .await;
    assert_eq!(counts("kubernetes").await, (1, 2, 1, 2, 0));
    exec("DELETE FROM projects WHERE id = $1", draft).await;
    assert_eq!(counts("kubernetes").await, (0, 1, 0, 1, 0));
    project(
        &app,
        company.id,
        "Cluster upgrade",
        "Kubernetes, again",
        ProjectStatus::Bidding,
    )
    .await;
    assert_eq!(counts("kubernetes").await, (1, 2, 1, 2, 0));
    app.stop().await;
}

/// A skill's experts (`/api/skills/{slug}/experts`, the directory filtered by skill and by
/// verification): each total, kept by the writes, equals a count of the rows and the items
/// listed, through changes of skills, verification, activity and a fold.
#[actix_web::test]
async fn skill_directory_totals_follow_skills_verification_and_activity() {
    let m = crate::market::Market::open().await;
    let first = m.member("skilledone", "experto", false, false).await;
    let second = m.member("skilledtwo", "experto", false, false).await;
    m.member("skilledthree", "experto", false, false).await;
    m.member("skillcompany", "empresa", false, false).await;
    let app = &m.app;
    let check = |step: &'static str| async move {
        let mut totals = Vec::new();
        for slug in ["rust", "go"] {
            for (query, condition) in [
                ("", ""),
                ("&verified=true", " AND p.is_verified = TRUE"),
                ("&verified=false", " AND p.is_verified = FALSE"),
            ] {
                let sql = format!(
                    "SELECT COUNT(*) FROM profiles p JOIN users u ON u.id = p.user_id
                       JOIN profile_skills ps ON ps.profile_id = p.id
                       JOIN skills s ON s.id = ps.skill_id
                      WHERE p.profile_type = 'experto' AND u.is_active = TRUE
                        AND s.slug = '{slug}'{condition}"
                );
                let counted = count_of(app, sql).await;
                let mut paths = vec![format!("/api/profiles/experts?skill={slug}{query}")];
                if query.is_empty() {
                    paths.push(format!("/api/skills/{slug}/experts"));
                }
                for path in paths {
                    let response = app.get(&path).await;
                    if response.status() == 404 && counted == 0 && path.starts_with("/api/skills/")
                    {
                        continue;
                    }
                    let body = json(response).await;
                    assert_eq!(body["total"], counted, "{step} {path}: {body}");
                    assert_eq!(
                        body["items"].as_array().unwrap().len() as i64,
                        counted,
                        "{step} {path}"
                    );
                }
                totals.push(counted);
            }
        }
        totals
    };
    assert_eq!(check("registered").await, [3, 0, 3, 0, 0, 0]);
    let exec = |sql: &'static str, id: i64| run(app, sql, id);
    exec(
        "UPDATE profiles SET is_verified = TRUE WHERE user_id = $1",
        first.id,
    )
    .await;
    assert_eq!(check("verified").await, [3, 1, 2, 0, 0, 0]);
    let profile: i64 = {
        let mut conn = app.db.conn().await.unwrap();
        marketplace::on_exec!(conn.exec(), c =>
            sqlx::query_scalar("SELECT id FROM profiles WHERE user_id = $1")
                .bind(second.id)
                .fetch_one(c)
                .await)
        .unwrap()
    };
    let response = m
        .send(
            &second,
            reqwest::Method::PUT,
            &format!("/api/profiles/{profile}"),
            Some(serde_json::json!({"skills": ["Go", "SQL"]})),
        )
        .await;
    assert_eq!(response.status(), 200);
    assert_eq!(check("skills changed").await, [2, 1, 1, 1, 0, 1]);
    exec("UPDATE users SET is_active = FALSE WHERE id = $1", first.id).await;
    assert_eq!(check("deactivated").await, [1, 0, 1, 1, 0, 1]);
    fold(app).await;
    exec("UPDATE users SET is_active = TRUE WHERE id = $1", first.id).await;
    exec(
        "UPDATE profiles SET is_verified = TRUE WHERE user_id = $1",
        second.id,
    )
    .await;
    assert_eq!(check("back, folded, verified").await, [2, 1, 1, 1, 1, 0]);
}

/// The administrators' profile list without a search: each total, kept by the writes, equals
/// a count of the rows and the items listed, for every filter, through changes of
/// verification and type and a fold.
#[actix_web::test]
async fn admin_profile_totals_follow_verification_and_type() {
    let m = crate::market::Market::open().await;
    let first = m.member("kindone", "experto", false, false).await;
    m.member("kindtwo", "experto", false, false).await;
    let company = m.member("kindcompany", "empresa", false, false).await;
    let app = &m.app;
    let token = m.admin_token.clone();
    let check = |step: &'static str| {
        let token = token.clone();
        async move {
            let mut totals = Vec::new();
            for (query, condition) in [
                ("", "TRUE"),
                ("profile_type=experto", "p.profile_type = 'experto'"),
                ("is_verified=true", "p.is_verified = TRUE"),
                (
                    "profile_type=empresa&is_verified=false&verification_status=pending",
                    "p.profile_type = 'empresa' AND NOT p.is_verified \
                     AND p.verification_status = 'pending'",
                ),
                (
                    "verification_status=verified",
                    "p.verification_status = 'verified'",
                ),
            ] {
                let sql = format!("SELECT COUNT(*) FROM profiles p WHERE {condition}");
                let counted = count_of(app, sql).await;
                let response = app
                    .client
                    .get(app.url(&format!("/api/admin/profiles?{query}")))
                    .bearer_auth(&token)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(response.status(), 200, "{step} {query}");
                let body = json(response).await;
                assert_eq!(body["total"], counted, "{step} {query}: {body}");
                assert_eq!(
                    body["items"].as_array().unwrap().len() as i64,
                    counted,
                    "{step} {query}"
                );
                totals.push(counted);
            }
            totals
        }
    };
    assert_eq!(check("registered").await, [3, 2, 0, 1, 0]);
    let exec = |sql: &'static str, id: i64| run(app, sql, id);
    exec(
        "UPDATE profiles SET is_verified = TRUE, verification_status = 'verified' WHERE user_id = $1",
        first.id,
    )
    .await;
    assert_eq!(check("verified").await, [3, 2, 1, 1, 1]);
    fold(app).await;
    exec(
        "UPDATE profiles SET verification_status = 'pre_evaluated' WHERE user_id = $1",
        company.id,
    )
    .await;
    assert_eq!(
        check("folded, company pre-evaluated").await,
        [3, 2, 1, 0, 1]
    );
}

/// Each user's projects and applications, kept by the writes: a company's and an expert's
/// own list (`/api/projects/my`, with and without a status), an expert's statistics and their
/// lists of assigned projects and applications equal a count of the rows through creation,
/// assignment, moves, a fold and deletes.
#[actix_web::test]
async fn party_totals_follow_ownership_assignment_and_status() {
    use marketplace::store::applications::{self, Proposal};
    let app = spawn_app().await;
    let company = register(&app, "partycompany", &["empresa"]).await;
    let other = register(&app, "partyother", &["empresa"]).await;
    let expert = register(&app, "partyexpert", &["experto"]).await;
    let draft = project(&app, company.id, "Draft", "", ProjectStatus::Draft).await;
    let open = project(&app, company.id, "Open", "", ProjectStatus::Bidding).await;
    let elsewhere = project(&app, other.id, "Elsewhere", "", ProjectStatus::Bidding).await;

    let sql_count = |sql: &'static str, id: i64| {
        let app = &app;
        async move {
            let mut conn = app.db.conn().await.unwrap();
            marketplace::on_exec!(conn.exec(), c =>
                sqlx::query_scalar::<_, i64>(sql).bind(id).fetch_one(c).await)
            .unwrap()
        }
    };
    let my_total = |token: String, query: &'static str| {
        let app = &app;
        async move {
            let body = json(
                app.client
                    .get(app.url(&format!("/api/projects/my{query}")))
                    .bearer_auth(token)
                    .send()
                    .await
                    .unwrap(),
            )
            .await;
            let total = body["total"].as_i64().unwrap();
            assert_eq!(
                body["items"].as_array().unwrap().len() as i64,
                total,
                "{body}"
            );
            total
        }
    };
    let (company_id, expert_id) = (company.id, expert.id);
    let check = |step: &'static str| {
        let (company, expert) = (company.access_token.clone(), expert.access_token.clone());
        let (app, my_total, sql_count) = (&app, &my_total, &sql_count);
        async move {
            let mine = "SELECT COUNT(*) FROM projects WHERE company_id = $1 OR expert_id = $1";
            let bidding = "SELECT COUNT(*) FROM projects
                            WHERE (company_id = $1 OR expert_id = $1) AND status = 'bidding'";
            let totals = (
                my_total(company.clone(), "").await,
                my_total(company, "?status=bidding").await,
                my_total(expert.clone(), "").await,
            );
            assert_eq!(
                totals,
                (
                    sql_count(mine, company_id).await,
                    sql_count(bidding, company_id).await,
                    sql_count(mine, expert_id).await,
                ),
                "{step}"
            );
            let stats = json(
                app.client
                    .get(app.url("/api/expert/stats"))
                    .bearer_auth(&expert)
                    .send()
                    .await
                    .unwrap(),
            )
            .await;
            let assigned = sql_count(
                "SELECT COUNT(*) FROM projects WHERE expert_id = $1",
                expert_id,
            );
            assert_eq!(
                stats["projects"]["total"],
                assigned.await,
                "{step}: {stats}"
            );
            let applied = sql_count(
                "SELECT COUNT(*) FROM applications WHERE expert_id = $1",
                expert_id,
            );
            assert_eq!(
                stats["applications"]["total"],
                applied.await,
                "{step}: {stats}"
            );
            let pending = sql_count(
                "SELECT COUNT(*) FROM applications WHERE expert_id = $1 AND status = 'pending'",
                expert_id,
            );
            let pending = pending.await;
            assert_eq!(stats["applications"]["pending"], pending, "{step}: {stats}");
            // The expert's own lists read the same kept totals.
            let token = Some(expert.as_str());
            let lists = (
                listed_total(app, "/api/expert/assigned-projects", token).await,
                listed_total(app, "/api/expert/applications", token).await,
                listed_total(app, "/api/expert/applications?status=pending", token).await,
            );
            assert_eq!(
                lists,
                (
                    stats["projects"]["total"].as_i64().unwrap(),
                    stats["applications"]["total"].as_i64().unwrap(),
                    pending
                ),
                "{step}"
            );
            (totals, stats["projects"]["completed"].as_i64().unwrap())
        }
    };
    assert_eq!(check("created").await, ((2, 1, 0), 0));

    let proposal = Proposal {
        cover_letter: "I can do it".to_owned(),
        proposed_budget_minor: 100_000,
        milestones: Vec::new(),
    };
    for project in [open, elsewhere] {
        let mut conn = app.db.conn().await.unwrap();
        applications::insert(conn.exec(), project, expert.id, &proposal, app.clock.now())
            .await
            .unwrap();
    }
    let exec = |sql: &'static str, id: i64| run(&app, sql, id);
    assert_eq!(check("applied").await, ((2, 1, 0), 0));
    exec(
        "UPDATE applications SET status = 'accepted' WHERE project_id = $1",
        open,
    )
    .await;
    let assign = format!(
        "UPDATE projects SET expert_id = {}, status = 'in_progress' WHERE id = $1",
        expert.id
    );
    {
        let mut conn = app.db.conn().await.unwrap();
        marketplace::on_exec!(conn.exec(), c =>
            sqlx::query(sqlx::AssertSqlSafe(assign.clone())).bind(open).execute(c).await.map(drop))
        .unwrap();
    }
    assert_eq!(check("assigned").await, ((2, 0, 1), 0));
    fold(&app).await;
    exec(
        "UPDATE projects SET status = 'completed' WHERE id = $1",
        open,
    )
    .await;
    assert_eq!(check("completed, folded").await, ((2, 0, 1), 1));
    exec("DELETE FROM applications WHERE project_id = $1", elsewhere).await;
    exec("DELETE FROM projects WHERE id = $1", draft).await;
    assert_eq!(check("deleted").await, ((1, 0, 1), 1));
    app.stop().await;
}

/// A list's total as `token` reads it at `path`, checked against the items listed.
async fn listed_total(app: &TestApp, path: &str, token: Option<&str>) -> i64 {
    let mut request = app.client.get(app.url(path));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 200, "{path}");
    let body = json(response).await;
    let total = body["total"].as_i64().unwrap();
    assert_eq!(
        body["items"].as_array().unwrap().len() as i64,
        total,
        "{path}: {body}"
    );
    total
}

/// An expert's invitations, available projects and statistics (`Tally::InvitationsByExpert`,
/// kept by the writes): each total equals a count of the rows and the items listed, through
/// formal and legacy invitations of the same pair, applications, a change of status together
/// with the legacy list, a targeted private project, deletions and a fold.
#[actix_web::test]
async fn invitation_totals_follow_invitations_applications_status_and_deletes() {
    use marketplace::store::applications::{self, Proposal};
    let app = spawn_app().await;
    let company = register(&app, "invitingcompany", &["empresa"]).await;
    let expert = register(&app, "invitedexpert", &["experto"]).await;
    let mut made = Vec::new();
    for status in [
        ProjectStatus::PublishedCurated,
        ProjectStatus::Bidding,
        ProjectStatus::PendingPublication,
        ProjectStatus::Draft,
        ProjectStatus::PublishedPrivate,
        ProjectStatus::InProgress,
    ] {
        made.push(project(&app, company.id, status.as_str(), "", status).await);
    }
    let [listed, bidding, pending, draft, private, running] = made[..] else {
        unreachable!()
    };

    let exec = |sql: String, id: i64| {
        let app = &app;
        async move {
            let mut conn = app.db.conn().await.unwrap();
            marketplace::on_exec!(conn.exec(), c =>
                sqlx::query(sqlx::AssertSqlSafe(sql)).bind(id).execute(c).await.map(drop))
            .unwrap();
        }
    };
    let invite = |project: i64| {
        let app = &app;
        let expert = expert.id;
        async move {
            let mut conn = app.db.conn().await.unwrap();
            let now = app.clock.now();
            assert!(
                projects::invite(conn.exec(), project, expert, None, "admin", None, now)
                    .await
                    .unwrap()
            );
        }
    };
    let legacy = |project: i64, experts: Vec<i64>| {
        let app = &app;
        async move {
            let mut conn = app.db.conn().await.unwrap();
            let now = app.clock.now();
            projects::set_invited_experts(conn.exec(), project, &experts, now)
                .await
                .unwrap();
        }
    };
    let e = expert.id;
    let check = |step: &'static str| {
        let (app, token) = (&app, expert.access_token.clone());
        async move {
            let invited = listed_total(app, "/api/expert/invitations", Some(&token)).await;
            let available = listed_total(app, "/api/expert/available-projects", Some(&token)).await;
            // Pages of one: the first ones walk every project (many invited against few
            // projects), the later ones look the invitations up; together, the whole list.
            for path in ["/api/expert/invitations", "/api/expert/available-projects"] {
                let get = |path: String| {
                    let token = token.clone();
                    async move {
                        let response = app.client.get(app.url(&path)).bearer_auth(token);
                        ids(&json(response.send().await.unwrap()).await)
                    }
                };
                let whole = get(format!("{path}?size=100")).await;
                let mut paged = Vec::new();
                for page in 1..=whole.len() {
                    paged.extend(get(format!("{path}?size=1&page={page}")).await);
                }
                assert_eq!(paged, whole, "{step}: {path}");
            }
            let pairs = format!(
                "SELECT COUNT(*) FROM (SELECT project_id FROM project_invitations WHERE expert_id = {e}
                  UNION SELECT project_id FROM project_legacy_invitees WHERE expert_id = {e}) x"
            );
            assert_eq!(invited, count_of(app, pairs).await, "{step}");
            let open = format!(
                "SELECT COUNT(*) FROM projects p
                  WHERE ((p.status IN ('published_curated', 'bidding', 'published', 'pending_publication')
                          AND (p.id IN (SELECT project_id FROM project_invitations WHERE expert_id = {e})
                               OR p.id IN (SELECT project_id FROM project_legacy_invitees WHERE expert_id = {e})))
                         OR (p.status = 'published_private' AND p.target_expert_id = {e}))
                    AND NOT EXISTS (SELECT 1 FROM applications a
                                     WHERE a.project_id = p.id AND a.expert_id = {e})"
            );
            assert_eq!(available, count_of(app, open).await, "{step}");
            let stats = json(
                app.client
                    .get(app.url("/api/expert/stats"))
                    .bearer_auth(&token)
                    .send()
                    .await
                    .unwrap(),
            )
            .await;
            assert_eq!(stats["invitations"], invited, "{step}: {stats}");
            (invited, available)
        }
    };
    assert_eq!(check("none").await, (0, 0));

    for p in [listed, pending, draft, running] {
        invite(p).await;
    }
    // The legacy list names `listed` again (counted once) and `bidding`.
    legacy(listed, vec![e]).await;
    legacy(bidding, vec![e]).await;
    assert_eq!(check("invited").await, (5, 3));

    // Targeted and formally invited: one project, available once.
    exec(
        format!("UPDATE projects SET target_expert_id = {e} WHERE id = $1"),
        private,
    )
    .await;
    invite(private).await;
    assert_eq!(check("targeted").await, (6, 4));

    let proposal = Proposal {
        cover_letter: "I can do it".to_owned(),
        proposed_budget_minor: 100_000,
        milestones: Vec::new(),
    };
    for p in [listed, private] {
        let mut conn = app.db.conn().await.unwrap();
        applications::insert(conn.exec(), p, expert.id, &proposal, app.clock.now())
            .await
            .unwrap();
    }
    assert_eq!(check("applied").await, (6, 2));
    fold(&app).await;

    // A status and the legacy list changed in one statement: the draft is published and
    // named in its legacy list; the pending project leaves for the draft state.
    exec(
        format!(
            "UPDATE projects SET status = 'published_curated', invited_experts = '[{e}]' WHERE id = $1"
        ),
        draft,
    )
    .await;
    exec(
        "UPDATE projects SET status = 'draft' WHERE id = $1".to_owned(),
        pending,
    )
    .await;
    assert_eq!(check("moved").await, (6, 2));

    // Out of the legacy list, still formally invited; out of both.
    legacy(listed, Vec::new()).await;
    assert_eq!(check("legacy dropped").await, (6, 2));
    exec(
        format!("DELETE FROM project_invitations WHERE expert_id = {e} AND project_id = $1"),
        draft,
    )
    .await;
    assert_eq!(check("formal dropped, legacy kept").await, (6, 2));
    legacy(bidding, Vec::new()).await;
    assert_eq!(check("bidding dropped").await, (5, 1));

    exec(
        format!("DELETE FROM applications WHERE expert_id = {e} AND project_id = $1"),
        listed,
    )
    .await;
    assert_eq!(check("withdrawn").await, (5, 2));
    fold(&app).await;
    exec("DELETE FROM projects WHERE id = $1".to_owned(), listed).await;
    exec("DELETE FROM projects WHERE id = $1".to_owned(), draft).await;
    assert_eq!(check("deleted").await, (3, 0));
    // The last page a client may ask for: nothing on it, the total as ever.
    for path in ["/api/expert/invitations", "/api/expert/available-projects"] {
        let path = format!("{path}?size=100&page={}", i64::MAX);
        let response = app
            .client
            .get(app.url(&path))
            .bearer_auth(&expert.access_token);
        let body = json(response.send().await.unwrap()).await;
        assert_eq!(body["items"], serde_json::json!([]), "{path}: {body}");
        assert_eq!(
            body["total"],
            if path.contains("available") { 0 } else { 3 },
            "{path}"
        );
    }
    app.stop().await;
}

/// A skill filter's total (`Tally::ProjectsBySkill`, kept by the writes), for each kind of
/// viewer, equals the items listed and a count of the rows, through changes of skills, status
/// and type, deletions and a fold.
#[actix_web::test]
async fn skill_totals_follow_skills_status_type_and_deletes() {
    let app = spawn_app().await;
    let company = register(&app, "skillcompany", &["empresa"]).await;
    let outsider = register(&app, "skilloutsider", &["experto"]).await;
    let (_, admin_token) = crate::helpers::admin(&app, "skill_admin").await;
    // Each project requires Rust and Kubernetes.
    let first = project(
        &app,
        company.id,
        "First",
        "",
        ProjectStatus::PublishedCurated,
    )
    .await;
    let second = project(&app, company.id, "Second", "", ProjectStatus::Bidding).await;
    let draft = project(&app, company.id, "Draft", "", ProjectStatus::Draft).await;

    let counts = |skill: &'static str| {
        let (app, company, outsider, admin) = (
            &app,
            company.access_token.clone(),
            outsider.access_token.clone(),
            admin_token.clone(),
        );
        async move {
            let total = |path: String, token: Option<String>| async move {
                listed_total(app, &path, token.as_deref()).await
            };
            let totals = (
                total(format!("/api/projects/public?skill={skill}"), None).await,
                total(format!("/api/projects?skill={skill}"), Some(company)).await,
                total(format!("/api/projects?skill={skill}"), Some(outsider)).await,
                total(format!("/api/projects?skill={skill}"), Some(admin.clone())).await,
                total(
                    format!("/api/projects?skill={skill}&status=draft"),
                    Some(admin),
                )
                .await,
            );
            let listed = format!(
                "SELECT COUNT(*) FROM projects p JOIN project_skills s ON s.project_id = p.id
                  WHERE s.skill = '{}' AND p.project_type = 'curated'
                    AND p.status IN ('published_curated', 'bidding', 'published', 'open')",
                skill.to_lowercase()
            );
            assert_eq!(totals.0, count_of(app, listed).await, "{skill}");
            totals
        }
    };
    assert_eq!(counts("rust").await, (2, 3, 2, 3, 1));
    assert_eq!(counts("KUBERNETES").await, (2, 3, 2, 3, 1));
    assert_eq!(counts("python").await, (0, 0, 0, 0, 0));

    let exec = |sql: &'static str, id: i64| run(&app, sql, id);
    exec(
        r#"UPDATE projects SET skills_required = '["Python", "rust", "RUST"]' WHERE id = $1"#,
        second,
    )
    .await;
    assert_eq!(counts("rust").await, (2, 3, 2, 3, 1));
    assert_eq!(counts("kubernetes").await, (1, 2, 1, 2, 1));
    assert_eq!(counts("python").await, (1, 1, 1, 1, 0));
    fold(&app).await;
    // Skills and status in one statement.
    exec(
        r#"UPDATE projects SET skills_required = '["Python"]', status = 'bidding' WHERE id = $1"#,
        draft,
    )
    .await;
    assert_eq!(counts("python").await, (2, 2, 2, 2, 0));
    assert_eq!(counts("rust").await, (2, 2, 2, 2, 0));
    // Private: no longer listed, still the company's own.
    exec(
        "UPDATE projects SET project_type = 'private' WHERE id = $1",
        first,
    )
    .await;
    assert_eq!(counts("rust").await, (1, 2, 1, 2, 0));
    exec("DELETE FROM projects WHERE id = $1", second).await;
    assert_eq!(counts("rust").await, (0, 1, 0, 1, 0));
    assert_eq!(counts("python").await, (1, 1, 1, 1, 0));
    app.stop().await;
}

/// A user's reviews and their statistics (`Tally::ReviewsByUser`, kept by the writes): each
/// list's total, for the public, an administrator and the author of a hidden review, equals the
/// items listed and a count of the rows; the statistics count the shown reviews received,
/// through a reveal, an announcement, the blind window passing on the clock, hiding, an edit,
/// a deletion and a fold.
#[actix_web::test]
async fn review_totals_follow_visibility_reveal_clock_and_deletes() {
    use marketplace::store::reviews::{self, NewReview};
    let app = spawn_app().await;
    let company = register(&app, "reviewingcompany", &["empresa"]).await;
    let other = register(&app, "othercompany", &["empresa"]).await;
    let expert = register(&app, "reviewedexpert", &["experto"]).await;
    let (_, admin_token) = crate::helpers::admin(&app, "review_admin").await;
    let mut tokens = (company.access_token.clone(), admin_token);
    let mut projects = Vec::new();
    for (owner, title) in [
        (company.id, "One"),
        (company.id, "Two"),
        (company.id, "Three"),
    ] {
        projects.push(project(&app, owner, title, "", ProjectStatus::Completed).await);
    }
    let elsewhere = project(&app, other.id, "Four", "", ProjectStatus::Completed).await;
    let review = |project: i64, reviewer: i64, reviewee: i64, rating: i64, days: i64| {
        let app = &app;
        async move {
            let mut conn = app.db.conn().await.unwrap();
            let now = app.clock.now();
            let new = NewReview {
                project_id: project,
                reviewer_id: reviewer,
                reviewee_id: reviewee,
                reviewer_role: if reviewer == expert.id {
                    "experto"
                } else {
                    "empresa"
                },
                rating,
                comment: "A fair review of the work",
                blind_until: now + Duration::days(days),
            };
            reviews::insert(conn.exec(), &new, now).await.unwrap()
        }
    };
    let sealed = review(projects[0], company.id, expert.id, 5, 14).await;
    let past = review(projects[1], company.id, expert.id, 4, -1).await;
    let announced = review(elsewhere, other.id, expert.id, 2, -1).await;
    review(projects[0], expert.id, company.id, 3, 14).await;
    let hidden = review(projects[2], company.id, expert.id, 1, -1).await;
    let exec = |sql: &'static str, id: i64| run(&app, sql, id);
    exec(
        "UPDATE reviews SET announced_at = created_at WHERE id = $1",
        announced,
    )
    .await;
    exec(
        "UPDATE reviews SET visibility = 'hidden' WHERE id = $1",
        hidden,
    )
    .await;

    let e = expert.id;
    let check = |step: &'static str, (company, admin): (String, String)| {
        let app = &app;
        async move {
            let list = |query: &'static str, token: Option<String>| async move {
                let path = format!("/api/reviews/user/{e}{query}");
                listed_total(app, &path, token.as_deref()).await
            };
            let totals = (
                list("", None).await,
                list("?role=reviewee", None).await,
                list("?role=author", None).await,
                list("", Some(admin)).await,
                list("", Some(company)).await,
            );
            let either = format!("(r.reviewer_id = {e} OR r.reviewee_id = {e})");
            let published = format!(
                "SELECT COUNT(*) FROM reviews r WHERE {either} AND r.visibility = 'published'"
            );
            assert_eq!(totals.0, count_of(app, published).await, "{step}");
            let all = format!("SELECT COUNT(*) FROM reviews r WHERE {either}");
            assert_eq!(totals.3, count_of(app, all).await, "{step}");
            let stats = json(app.get(&format!("/api/reviews/stats/{e}")).await).await;
            let distribution: Vec<i64> = (1..=5)
                .map(|r| stats["distribution"][r.to_string()].as_i64().unwrap())
                .collect();
            assert_eq!(
                stats["total_reviews"].as_i64().unwrap(),
                distribution.iter().sum::<i64>(),
                "{step}: {stats}"
            );
            (totals, distribution)
        }
    };
    // Shown: the review past its window (unannounced) and the announced one.
    assert_eq!(
        check("written", tokens.clone()).await,
        ((4, 3, 1, 5, 5), vec![0, 1, 0, 1, 0])
    );
    {
        let mut conn = app.db.conn().await.unwrap();
        reviews::reveal_project(conn.exec(), projects[0], app.clock.now())
            .await
            .unwrap();
    }
    assert_eq!(
        check("revealed", tokens.clone()).await,
        ((4, 3, 1, 5, 5), vec![0, 1, 0, 1, 1])
    );
    exec(
        "UPDATE reviews SET announced_at = created_at WHERE id = $1",
        past,
    )
    .await;
    assert_eq!(
        check("announced", tokens.clone()).await,
        ((4, 3, 1, 5, 5), vec![0, 1, 0, 1, 1])
    );
    fold(&app).await;

    let late = review(projects[1], other.id, expert.id, 1, 14).await;
    assert_eq!(
        check("sealed", tokens.clone()).await,
        ((5, 4, 1, 6, 6), vec![0, 1, 0, 1, 1])
    );
    app.clock.advance(Duration::days(15));
    // Their sessions ended with the days passed.
    let login = |name: &'static str| crate::helpers::login(&app, name, crate::helpers::PASSWORD);
    tokens = (login("reviewingcompany").await, login("review_admin").await);
    assert_eq!(
        check("window passed", tokens.clone()).await,
        ((5, 4, 1, 6, 6), vec![1, 1, 0, 1, 1])
    );
    // Announced and folded: the lowest rating read from the tally, as the others are.
    exec(
        "UPDATE reviews SET announced_at = created_at WHERE id = $1",
        late,
    )
    .await;
    fold(&app).await;
    assert_eq!(
        check("late announced", tokens.clone()).await,
        ((5, 4, 1, 6, 6), vec![1, 1, 0, 1, 1])
    );
    exec(
        "UPDATE reviews SET visibility = 'hidden' WHERE id = $1",
        past,
    )
    .await;
    exec("UPDATE reviews SET rating = 3 WHERE id = $1", sealed).await;
    assert_eq!(
        check("hidden, edited", tokens.clone()).await,
        ((4, 3, 1, 6, 6), vec![1, 1, 1, 0, 0])
    );
    exec("DELETE FROM reviews WHERE id = $1", late).await;
    exec("DELETE FROM reviews WHERE id = $1", hidden).await;
    assert_eq!(
        check("deleted", tokens.clone()).await,
        ((3, 2, 1, 4, 4), vec![0, 1, 1, 0, 0])
    );
    // The last page a client may ask for: nothing on it, the total as ever.
    let path = format!("/api/reviews/user/{e}?size=100&page={}", i64::MAX);
    let body = json(app.get(&path).await).await;
    assert_eq!(body["items"], serde_json::json!([]), "{body}");
    assert_eq!(body["total"], 3, "{body}");
    app.stop().await;
}

/// Whether a statement on the test's database comes to wait on a lock within ten seconds.
pub(crate) async fn a_statement_waits(pool: &sqlx::PgPool) -> bool {
    for _ in 0..2_000 {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM pg_stat_activity
              WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(pool)
        .await
        .unwrap();
        if waiting > 0 {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    false
}

/// An invitation and an application of the same expert and project racing (PostgreSQL; SQLite
/// has one writer): whichever comes second waits on the project's row that the first one's
/// trigger locked, then sees the first; the expert's kept count holds the pair once, applied,
/// in either order.
#[actix_web::test]
async fn an_invitation_and_an_application_racing_are_counted_once() {
    let app = spawn_app().await;
    let marketplace::store::Pool::Postgres(pool) = app.db.pool().clone() else {
        app.stop().await;
        return;
    };
    let company = register(&app, "racingcompany", &["empresa"]).await;
    let expert = register(&app, "racingexpert", &["experto"]).await;
    let invitation = "INSERT INTO project_invitations (project_id, expert_id, source, created_at)
                      VALUES ($1, $2, 'admin', now())";
    let application = "INSERT INTO applications
                           (project_id, expert_id, proposed_budget_minor, created_at, updated_at)
                       VALUES ($1, $2, 100000, now(), now())";
    for (step, (first, second)) in [(invitation, application), (application, invitation)]
        .into_iter()
        .enumerate()
    {
        let project = project(&app, company.id, "Raced", "", ProjectStatus::Bidding).await;
        let mut tx = pool.begin().await.unwrap();
        sqlx::query(first)
            .bind(project)
            .bind(expert.id)
            .execute(&mut *tx)
            .await
            .unwrap();
        let racing = {
            let pool = pool.clone();
            let expert = expert.id;
            tokio::spawn(async move {
                sqlx::query(second)
                    .bind(project)
                    .bind(expert)
                    .execute(&pool)
                    .await
            })
        };
        // The second statement is waiting on a lock before the first commits.
        assert!(
            a_statement_waits(&pool).await,
            "order {step}: the second write never waited"
        );
        tx.commit().await.unwrap();
        racing.await.unwrap().unwrap();
        let counted: Vec<(String, i64)> = sqlx::query_as(
            "SELECT key, CAST(SUM(n) AS BIGINT) FROM (
                 SELECT key, n FROM tallies WHERE name = 'invitations_by_expert' AND user_id = $1
                 UNION ALL
                 SELECT key, n FROM tally_deltas WHERE name = 'invitations_by_expert' AND user_id = $1) x
              GROUP BY key HAVING SUM(n) <> 0 ORDER BY key",
        )
        .bind(expert.id)
        .fetch_all(&pool)
        .await
        .unwrap();
        assert_eq!(
            counted,
            vec![("bidding:true".to_owned(), step as i64 + 1)],
            "order {step}"
        );
    }
    let token = expert.access_token.as_str();
    assert_eq!(
        listed_total(&app, "/api/expert/invitations", Some(token)).await,
        2
    );
    assert_eq!(
        listed_total(&app, "/api/expert/available-projects", Some(token)).await,
        0
    );
    app.stop().await;
}

/// The administrators' dispute list (`Tally::Disputes`, kept by the writes): its total and, by
/// status, each page's items, in every order and status filter, agree with a count of the
/// rows through status changes, a fold and a deletion; a search is counted.
#[actix_web::test]
async fn dispute_totals_follow_status_changes_in_every_order() {
    use marketplace::store::disputes::{self, NewDispute};
    let app = spawn_app().await;
    let company = register(&app, "disputingcompany", &["empresa"]).await;
    let (_, admin_token) = crate::helpers::admin(&app, "dispute_admin").await;
    let mut ids = Vec::new();
    for reason in [
        "Late delivery",
        "Wrong scope",
        "Missing files",
        "Late again",
    ] {
        let p = project(&app, company.id, reason, "", ProjectStatus::InProgress).await;
        let mut conn = app.db.conn().await.unwrap();
        let new = NewDispute {
            project_id: p,
            payment_id: None,
            raised_by: company.id,
            title: None,
            reason,
            description: None,
            dispute_type: None,
            priority: None,
            evidence: None,
            requested_resolution: None,
            contact_preference: None,
        };
        ids.push(
            disputes::insert(conn.exec(), &new, app.clock.now())
                .await
                .unwrap(),
        );
    }
    let check = |step: &'static str| {
        let (app, admin) = (&app, admin_token.clone());
        async move {
            let mut totals = Vec::new();
            for status in ["", "&status=open", "&status=in_review", "&status=closed"] {
                let value = status.rsplit('=').next().filter(|_| !status.is_empty());
                let sql = match value {
                    Some(v) => format!("SELECT COUNT(*) FROM disputes WHERE status = '{v}'"),
                    None => "SELECT COUNT(*) FROM disputes".to_owned(),
                };
                let expected = count_of(app, sql).await;
                for order in [
                    "created_at&sort_order=desc",
                    "created_at&sort_order=asc",
                    "status&sort_order=desc",
                    "status&sort_order=asc",
                ] {
                    // Pages of one: the tiers of the order by status are each had from the
                    // tally, and every dispute comes once.
                    let mut seen = BTreeSet::new();
                    for page in 1..=expected.max(1) {
                        let path = format!(
                            "/api/admin/disputes?size=1&page={page}&sort_by={order}{status}"
                        );
                        let body = json(
                            app.client
                                .get(app.url(&path))
                                .bearer_auth(&admin)
                                .send()
                                .await
                                .unwrap(),
                        )
                        .await;
                        assert_eq!(body["total"].as_i64().unwrap(), expected, "{step}: {path}");
                        for item in body["items"].as_array().unwrap() {
                            assert!(seen.insert(item["id"].as_i64().unwrap()), "{step}: {path}");
                        }
                    }
                    assert_eq!(seen.len() as i64, expected, "{step}: {order}{status}");
                }
                totals.push(expected);
            }
            let searched = listed_total(app, "/api/admin/disputes?search=late", Some(&admin)).await;
            (totals, searched)
        }
    };
    assert_eq!(check("raised").await, (vec![4, 4, 0, 0], 2));
    let exec = |sql: &'static str, id: i64| run(&app, sql, id);
    exec(
        "UPDATE disputes SET status = 'in_review' WHERE id = $1",
        ids[0],
    )
    .await;
    exec(
        "UPDATE disputes SET status = 'closed' WHERE id = $1",
        ids[1],
    )
    .await;
    assert_eq!(check("moved").await, (vec![4, 2, 1, 1], 2));
    fold(&app).await;
    exec(
        "UPDATE disputes SET status = 'closed' WHERE id = $1",
        ids[0],
    )
    .await;
    exec("DELETE FROM disputes WHERE id = $1", ids[2]).await;
    assert_eq!(check("closed, deleted").await, (vec![3, 1, 0, 2], 2));
    app.stop().await;
}

/// Pending payments of `company` on `project`, one an `(expert, amount)`: their ids in order.
async fn pending_payments(
    app: &TestApp,
    company: i64,
    project: i64,
    to: &[(i64, i64)],
) -> Vec<i64> {
    use marketplace::store::payments::{self, NewPayment};
    let mut conn = app.db.conn().await.unwrap();
    let mut ids = Vec::new();
    for &(expert, amount) in to {
        let new = NewPayment {
            project_id: project,
            milestone_id: None,
            company_id: Some(company),
            expert_id: Some(expert),
            amount_minor: amount,
            currency: "eur",
        };
        ids.push(
            payments::insert_pending(conn.exec(), &new, app.clock.now())
                .await
                .unwrap(),
        );
    }
    ids
}

/// An expert's money in their statistics (`Tally::ExpertMoney`, kept by the writes): what they
/// received from released payments and what is held for them in escrow equal sums of the
/// rows, through holds, releases, a change of amount, a refund, a fold and a deletion. So do
/// the totals of each party's payment history, whole and by status (`Tally::PaymentsByParty`).
#[actix_web::test]
async fn expert_money_follows_holds_releases_and_refunds() {
    let app = spawn_app().await;
    let company = register(&app, "payingcompany", &["empresa"]).await;
    let expert = register(&app, "paidexpert", &["experto"]).await;
    let other = register(&app, "otherpaidexpert", &["experto"]).await;
    let p = project(&app, company.id, "Paid", "", ProjectStatus::InProgress).await;
    let ids = pending_payments(
        &app,
        company.id,
        p,
        &[
            (expert.id, 10_000),
            (expert.id, 25_050),
            (expert.id, 7_000),
            (other.id, 99_900),
        ],
    )
    .await;
    let e = expert.id;
    let check = |step: &'static str| {
        let (app, token) = (&app, expert.access_token.clone());
        let parties = [
            (expert.access_token.clone(), "expert_id", expert.id),
            (company.access_token.clone(), "company_id", company.id),
        ];
        async move {
            for (token, column, id) in &parties {
                for status in ["", "pending", "held", "released", "refunded"] {
                    let history = json(
                        app.client
                            .get(app.url(&if status.is_empty() {
                                "/api/payments/history".to_owned()
                            } else {
                                format!("/api/payments/history?status={status}")
                            }))
                            .bearer_auth(token)
                            .send()
                            .await
                            .unwrap(),
                    )
                    .await;
                    let of_status = if status.is_empty() {
                        String::new()
                    } else {
                        format!(" AND status = '{status}'")
                    };
                    let counted = count_of(
                        app,
                        format!("SELECT COUNT(*) FROM payments WHERE {column} = {id}{of_status}"),
                    )
                    .await;
                    assert_eq!(history["total"], counted, "{step}: {column} {status}");
                    let listed = history["items"].as_array().unwrap().len() as i64;
                    assert_eq!(listed, counted.min(20), "{step}: {column} {status}");
                }
            }
            let stats = json(
                app.client
                    .get(app.url("/api/expert/stats"))
                    .bearer_auth(&token)
                    .send()
                    .await
                    .unwrap(),
            )
            .await;
            let sum = |status: &str, column: &str| {
                format!(
                    "SELECT CAST(COALESCE(SUM(COALESCE({column}, 0)), 0) AS BIGINT) FROM payments
                      WHERE expert_id = {e} AND status = '{status}'"
                )
            };
            let released = count_of(app, sum("released", "expert_amount_minor")).await;
            let held = count_of(app, sum("held", "amount_minor")).await;
            let euros = |minor: i64| minor as f64 / 100.0;
            assert_eq!(
                stats["earnings"]["released"],
                euros(released),
                "{step}: {stats}"
            );
            assert_eq!(
                stats["earnings"]["in_escrow"],
                euros(held),
                "{step}: {stats}"
            );
            (released, held)
        }
    };
    assert_eq!(check("pending").await, (0, 0));
    let exec = |sql: &'static str, id: i64| run(&app, sql, id);
    for id in &ids {
        exec("UPDATE payments SET status = 'held' WHERE id = $1", *id).await;
    }
    assert_eq!(check("held").await, (0, 42_050));
    exec(
        "UPDATE payments SET status = 'released', commission_minor = 1000, expert_amount_minor = 9000
          WHERE id = $1",
        ids[0],
    )
    .await;
    assert_eq!(check("released").await, (9_000, 32_050));
    fold(&app).await;
    exec(
        "UPDATE payments SET amount_minor = 30000 WHERE id = $1",
        ids[1],
    )
    .await;
    exec(
        "UPDATE payments SET status = 'refunded' WHERE id = $1",
        ids[2],
    )
    .await;
    assert_eq!(check("changed, refunded").await, (9_000, 30_000));
    exec("DELETE FROM payments WHERE id = $1", ids[1]).await;
    assert_eq!(check("deleted").await, (9_000, 0));
    app.stop().await;
}

/// Each expert's DAC7 year from the sums kept by quarter (migration 0044) equals the same
/// figures added up from the payments, through releases on either side of a quarter's and a
/// year's bounds, a fold, changes of amount, date and expert, a refund and a deletion.
#[actix_web::test]
async fn dac7_sums_kept_by_quarter_match_a_recount_of_the_payments() {
    use chrono::{DateTime, Datelike, Utc};
    use marketplace::store::dac7;
    let app = spawn_app().await;
    let company = register(&app, "taxedcompany", &["empresa"]).await;
    let first = register(&app, "taxedexpert", &["experto"]).await;
    let second = register(&app, "othertaxedexpert", &["experto"]).await;
    let p = project(&app, company.id, "Taxed", "", ProjectStatus::InProgress).await;
    let ids = pending_payments(
        &app,
        company.id,
        p,
        &[
            (first.id, 10_000),
            (first.id, 25_050),
            (first.id, 7_000),
            (first.id, 1_000),
            (second.id, 99_900),
            (second.id, 500),
        ],
    )
    .await;
    let exec = |sql: String| {
        let app = &app;
        async move {
            let mut conn = app.db.conn().await.unwrap();
            marketplace::on_exec!(conn.exec(), c =>
                sqlx::query(sqlx::AssertSqlSafe(sql)).execute(c).await.map(drop))
            .unwrap();
        }
    };
    // Times bound as the service writes them (SQLite's triggers read the stored text).
    let released_at = |id: i64, at: &'static str| {
        let app = &app;
        async move {
            let at: DateTime<Utc> = at.parse().unwrap();
            let mut conn = app.db.conn().await.unwrap();
            marketplace::on_exec!(conn.exec(), c => sqlx::query(
                "UPDATE payments SET status = 'released', released_at = $1 WHERE id = $2"
            )
            .bind(at)
            .bind(id)
            .execute(c)
            .await
            .map(drop))
            .unwrap();
        }
    };
    let release = |id: i64, at: &'static str, commission: Option<i64>| {
        let commission = commission.map_or("NULL".to_owned(), |c| c.to_string());
        let (exec, released_at) = (&exec, &released_at);
        async move {
            exec(format!(
                "UPDATE payments SET commission_minor = {commission} WHERE id = {id}"
            ))
            .await;
            released_at(id, at).await;
        }
    };
    type Row = (
        Option<i64>,
        String,
        i64,
        Option<i64>,
        Option<i64>,
        Option<DateTime<Utc>>,
    );
    /// Per expert: gross, commission, net, payments, and each quarter's amount, count and
    /// commission.
    type Sellers = std::collections::BTreeMap<i64, (i64, i64, i64, i64, [[i64; 3]; 4])>;
    let check = |step: &'static str| {
        let app = &app;
        async move {
            let mut conn = app.db.conn().await.unwrap();
            let rows: Vec<Row> = marketplace::on_exec!(conn.exec(), c => sqlx::query_as(
                "SELECT expert_id, status, amount_minor, commission_minor, expert_amount_minor,
                        released_at FROM payments"
            )
            .fetch_all(c)
            .await)
            .unwrap();
            for year in [2024, 2025, 2026] {
                let mut expected = Sellers::new();
                for (expert, status, amount, commission, expert_amount, at) in &rows {
                    let (Some(expert), Some(at)) = (expert, at) else {
                        continue;
                    };
                    if status != "released" || at.year() != year {
                        continue;
                    }
                    let commission = commission.unwrap_or(0);
                    let e = expected.entry(*expert).or_default();
                    e.0 += amount;
                    e.1 += commission;
                    e.2 += expert_amount.unwrap_or(amount - commission);
                    e.3 += 1;
                    let q = &mut e.4[at.month0() as usize / 3];
                    q[0] += amount;
                    q[1] += 1;
                    q[2] += commission;
                }
                let kept = dac7::year_income(conn.exec(), year, None).await.unwrap();
                let got: Sellers = kept
                    .iter()
                    .map(|s| {
                        (
                            s.user_id,
                            (
                                s.gross_minor,
                                s.commission_minor,
                                s.net_minor,
                                s.paid_activities,
                                [
                                    [s.q1_minor, s.q1_count, s.q1_commission_minor],
                                    [s.q2_minor, s.q2_count, s.q2_commission_minor],
                                    [s.q3_minor, s.q3_count, s.q3_commission_minor],
                                    [s.q4_minor, s.q4_count, s.q4_commission_minor],
                                ],
                            ),
                        )
                    })
                    .collect();
                assert_eq!(got, expected, "{step}: {year}");
                for expert in expected.keys() {
                    let one = dac7::year_income(conn.exec(), year, Some(*expert))
                        .await
                        .unwrap();
                    assert_eq!(one.len(), 1, "{step}: {year} {expert}");
                    assert_eq!(
                        one[0].gross_minor, expected[expert].0,
                        "{step}: {year} {expert}"
                    );
                    assert_eq!(
                        one[0].email,
                        kept.iter().find(|s| s.user_id == *expert).unwrap().email
                    );
                }
                let none = dac7::year_income(conn.exec(), year, Some(company.id))
                    .await
                    .unwrap();
                assert!(none.is_empty(), "{step}: a company sells nothing");
            }
        }
    };
    check("pending").await;
    release(ids[0], "2025-03-31T23:59:59Z", Some(1_000)).await;
    release(ids[1], "2025-04-01T00:00:00Z", None).await;
    release(ids[2], "2024-12-31T23:59:59Z", Some(700)).await;
    release(ids[3], "2026-01-01T00:00:00Z", Some(100)).await;
    release(ids[4], "2025-10-15T12:00:00Z", Some(9_990)).await;
    release(ids[5], "2025-07-01T00:00:00Z", Some(50)).await;
    exec(format!(
        "UPDATE payments SET expert_amount_minor = 9000 WHERE id = {}",
        ids[0]
    ))
    .await;
    check("released across the bounds").await;
    fold(&app).await;
    check("folded").await;
    exec(format!(
        "UPDATE payments SET amount_minor = 30000 WHERE id = {}",
        ids[1]
    ))
    .await;
    released_at(ids[3], "2025-09-30T23:59:59Z").await;
    exec(format!(
        "UPDATE payments SET expert_id = {} WHERE id = {}",
        second.id, ids[0]
    ))
    .await;
    check("amount, date and expert changed").await;
    exec(format!(
        "UPDATE payments SET status = 'refunded' WHERE id = {}",
        ids[4]
    ))
    .await;
    exec(format!("DELETE FROM payments WHERE id = {}", ids[5])).await;
    check("refunded and deleted").await;
    app.stop().await;
}

/// An expert search with a skill (one full-text match over each listed expert's search
/// document, migrations 0038 and 0046) follows a profile's text, its skills and a skill's
/// rename; its total is the items listed, and its words may fall in the text or the skills'
/// names.
#[actix_web::test]
async fn expert_search_follows_text_skills_and_renames() {
    let m = crate::market::Market::open().await;
    let mut experts = Vec::new();
    for (username, bio, skills) in [
        ("wordpipes", "Builds data pipelines", vec!["Python"]),
        ("wordsci", "Web work", vec!["Python", "Data Science"]),
        ("wordgo", "Data plumbing", vec!["Go"]),
        ("wordnone", "Nothing here", vec!["Rust"]),
    ] {
        let body = serde_json::json!({"bio": bio, "skills": skills});
        add_expert(&m, &mut experts, username, body).await;
    }
    let app = &m.app;
    let found = |query: &'static str| async move {
        let body = json(app.get(&format!("/api/profiles/experts?{query}")).await).await;
        let mut names: Vec<String> = body["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["full_name"].as_str().unwrap_or_default().to_owned())
            .collect();
        assert_eq!(body["total"], names.len() as i64, "{query}: {body}");
        names.sort();
        names
    };
    let named = |usernames: &[&str]| -> Vec<String> {
        let mut names: Vec<String> = usernames.iter().map(|u| full_name(u)).collect();
        names.sort();
        names
    };
    assert_eq!(
        found("skill=python&q=data").await,
        named(&["wordpipes", "wordsci"])
    );
    assert_eq!(
        found("q=data").await,
        named(&["wordpipes", "wordsci", "wordgo"])
    );
    // Words in the text and in a skill's name together; accents and case folded.
    assert_eq!(
        found("q=D%C3%81TA%20python").await,
        named(&["wordpipes", "wordsci"])
    );
    assert_eq!(found("skill=go&q=plumbing").await, named(&["wordgo"]));
    assert_eq!(found("skill=rust&q=data").await, named(&[]));
    assert_eq!(found("skill=cobol&q=data").await, named(&[]));

    edit(&m, 2, &experts, serde_json::json!({"skills": ["Python"]})).await;
    assert_eq!(
        found("skill=python&q=data").await,
        named(&["wordpipes", "wordsci", "wordgo"])
    );
    edit(&m, 0, &experts, serde_json::json!({"skills": ["Go"]})).await;
    assert_eq!(
        found("skill=python&q=data").await,
        named(&["wordsci", "wordgo"])
    );
    assert_eq!(found("skill=go&q=data").await, named(&["wordpipes"]));
    edit(&m, 0, &experts, serde_json::json!({"bio": "Web work"})).await;
    assert_eq!(found("q=data").await, named(&["wordsci", "wordgo"]));

    run(
        app,
        "UPDATE skills SET name = 'Analytics' WHERE id = (SELECT skill_id FROM profile_skills
           WHERE profile_id = $1 AND skill_id <> (SELECT id FROM skills WHERE slug = 'python'))",
        experts[1].1,
    )
    .await;
    assert_eq!(found("skill=python&q=data").await, named(&["wordgo"]));
    assert_eq!(found("skill=python&q=analytics").await, named(&["wordsci"]));

    // Verified experts come first in a search as in the directory: the older one here.
    run(
        app,
        "UPDATE profiles SET is_verified = TRUE WHERE id = $1",
        experts[0].1,
    )
    .await;
    let body = json(app.get("/api/profiles/experts?skill=python&q=web").await).await;
    assert_eq!(body["total"], 1, "{body}");
    assert_eq!(body["items"][0]["full_name"], full_name("wordsci"));
    for (query, total) in [("q=web&size=1", 2), ("q=web&size=1&verified=false", 1)] {
        let body = json(app.get(&format!("/api/profiles/experts?{query}")).await).await;
        assert_eq!(body["total"], total, "{query}: {body}");
    }
    let body = json(app.get("/api/profiles/experts?q=web&size=1").await).await;
    assert_eq!(body["items"][0]["full_name"], full_name("wordpipes"));
    let cursor = body["next_cursor"].as_str().unwrap().to_owned();
    let body = json(
        app.get(&format!(
            "/api/profiles/experts?q=web&size=1&cursor={cursor}"
        ))
        .await,
    )
    .await;
    assert_eq!(body["items"][0]["full_name"], full_name("wordsci"));
    assert!(body["next_cursor"].is_null(), "{body}");
}

/// A listed expert as a search should see them: what the search's totals are checked against.
struct Searched {
    username: &'static str,
    words: Vec<String>,
    skills: Vec<&'static str>,
    listed: bool,
    verified: bool,
}

impl Searched {
    fn matches(&self, words: &[&str], skill: Option<&str>, verified: Option<bool>) -> bool {
        let held = |w: &&str| {
            self.words.iter().any(|held| held == w)
                || self.skills.iter().any(|s| s.eq_ignore_ascii_case(w))
        };
        self.listed
            && words.iter().all(held)
            && skill.is_none_or(|s| self.skills.iter().any(|h| h.eq_ignore_ascii_case(s)))
            && verified.is_none_or(|v| v == self.verified)
    }
}

/// A search's totals (migration 0046: on PostgreSQL kept by word for one word, alone or beside
/// a skill, else counted in the listed experts' documents; on SQLite counted in the index)
/// follow an account's deactivation and return, a verification, a profile's text and skills
/// and a profile's deletion, folded or not: each is the listed experts the search should find,
/// verified first. On PostgreSQL the documents and the words' tallies also equal a recount.
#[actix_web::test]
async fn expert_search_totals_follow_activity_verification_and_deletions() {
    let m = crate::market::Market::open().await;
    let mut experts = Vec::new();
    let mut model = Vec::new();
    for (username, bio, skills) in [
        ("ledgerone", "Ledger audits", vec!["Python"]),
        ("ledgertwo", "Ledger and tax", vec!["Python", "Go"]),
        ("ledgerthree", "Ledger work", vec!["Go"]),
        ("ledgerfour", "Other words", vec!["Python"]),
    ] {
        let body = serde_json::json!({"bio": bio, "skills": skills});
        add_expert(&m, &mut experts, username, body).await;
        model.push(Searched {
            username,
            words: bio.split(' ').map(str::to_lowercase).collect(),
            skills,
            listed: true,
            verified: false,
        });
    }
    let app = &m.app;
    let searches: [(&[&str], Option<&str>, Option<bool>); 7] = [
        (&["ledger"], None, None),
        (&["ledger"], None, Some(true)),
        (&["ledger"], None, Some(false)),
        (&["ledger"], Some("python"), None),
        (&["ledger"], Some("python"), Some(true)),
        (&["ledger", "tax"], None, None),
        (&["python"], Some("go"), None),
    ];
    let check = |model: &Vec<Searched>, step: &'static str| {
        let expected: Vec<Vec<String>> = searches
            .iter()
            .map(|(words, skill, verified)| {
                let (mut first, mut rest): (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
                for e in model
                    .iter()
                    .rev()
                    .filter(|e| e.matches(words, *skill, *verified))
                {
                    let name = full_name(e.username);
                    if e.verified {
                        first.push(name)
                    } else {
                        rest.push(name)
                    }
                }
                first.extend(rest);
                first
            })
            .collect();
        async move {
            for ((words, skill, verified), expected) in searches.iter().zip(expected) {
                let mut query = format!("size=100&q={}", words.join("%20"));
                if let Some(skill) = skill {
                    query.push_str(&format!("&skill={skill}"));
                }
                if let Some(verified) = verified {
                    query.push_str(&format!("&verified={verified}"));
                }
                let body = json(app.get(&format!("/api/profiles/experts?{query}")).await).await;
                let names: Vec<&str> = body["items"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|p| p["full_name"].as_str().unwrap())
                    .collect();
                assert_eq!(names, expected, "{step}: {query}");
                assert_eq!(
                    body["total"],
                    expected.len() as i64,
                    "{step}: {query}: {body}"
                );
                // Pages of one, by number and by cursor: on SQLite the first ones probe the
                // matches as the order is walked, the later ones look them up.
                let one = query.replace("size=100", "size=1");
                let (mut paged, mut walked) = (Vec::new(), Vec::new());
                for number in 1..=expected.len() {
                    let path = format!("/api/profiles/experts?{one}&page={number}");
                    let body = json(app.get(&path).await).await;
                    paged.push(body["items"][0]["full_name"].as_str().unwrap().to_owned());
                }
                let mut path = format!("/api/profiles/experts?{one}");
                loop {
                    let body = json(app.get(&path).await).await;
                    if let Some(name) = body["items"][0]["full_name"].as_str() {
                        walked.push(name.to_owned());
                    }
                    match body["next_cursor"].as_str() {
                        Some(cursor) => {
                            path = format!("/api/profiles/experts?{one}&cursor={cursor}")
                        }
                        None => break,
                    }
                }
                assert_eq!(paged, expected, "{step}: {one}, pages of one");
                assert_eq!(walked, expected, "{step}: {one}, by cursor");
            }
            if matches!(app.db.pool(), marketplace::store::Pool::Postgres(_)) {
                let differences = count_of(app, EXPERT_SEARCH_RECOUNT.to_owned()).await;
                assert_eq!(
                    differences, 0,
                    "{step}: documents or tallies differ from a recount"
                );
            }
        }
    };
    check(&model, "added").await;
    fold(app).await;
    check(&model, "folded").await;

    let user = |i: usize| experts[i].0.id;
    run(
        app,
        "UPDATE users SET is_active = FALSE WHERE id = $1",
        user(1),
    )
    .await;
    model[1].listed = false;
    check(&model, "deactivated").await;
    run(
        app,
        "UPDATE profiles SET is_verified = TRUE WHERE id = $1",
        experts[0].1,
    )
    .await;
    model[0].verified = true;
    check(&model, "verified").await;
    run(
        app,
        "UPDATE users SET is_active = TRUE WHERE id = $1",
        user(1),
    )
    .await;
    model[1].listed = true;
    fold(app).await;
    check(&model, "back and folded").await;

    edit(
        &m,
        2,
        &experts,
        serde_json::json!({"skills": ["Go", "Python"]}),
    )
    .await;
    model[2].skills = vec!["Go", "Python"];
    edit(&m, 0, &experts, serde_json::json!({"bio": "Tax only"})).await;
    model[0].words = vec!["tax".to_owned(), "only".to_owned()];
    check(&model, "text and skills edited").await;
    run(
        app,
        "UPDATE profiles SET is_verified = TRUE WHERE id = $1",
        experts[2].1,
    )
    .await;
    model[2].verified = true;
    run(app, "DELETE FROM profiles WHERE id = $1", experts[1].1).await;
    model[1].listed = false;
    check(&model, "verified and deleted").await;
    fold(app).await;
    check(&model, "folded at the end").await;
}

/// An account's deactivation and an edit of its expert profile racing (PostgreSQL; SQLite has
/// one writer), in either order: the second waits for the first (a profile's change locks its
/// user's row, migration 0046), so the profile is not listed at the end and the documents and
/// word tallies equal a recount.
#[actix_web::test]
async fn a_deactivation_racing_a_profile_edit_leaves_the_expert_unlisted() {
    let m = crate::market::Market::open().await;
    let marketplace::store::Pool::Postgres(pool) = m.app.db.pool().clone() else {
        return;
    };
    let mut experts = Vec::new();
    for username in ["racedone", "racedtwo"] {
        let body = serde_json::json!({"bio": "Quarterly ledger", "skills": ["Python"]});
        add_expert(&m, &mut experts, username, body).await;
    }
    let deactivate = "UPDATE users SET is_active = FALSE WHERE id = $1";
    let edit = "UPDATE profiles SET bio = 'Raced ledger' WHERE user_id = $1";
    for (step, (first, second)) in [(deactivate, edit), (edit, deactivate)]
        .into_iter()
        .enumerate()
    {
        let user = experts[step].0.id;
        let mut tx = pool.begin().await.unwrap();
        sqlx::query(first)
            .bind(user)
            .execute(&mut *tx)
            .await
            .unwrap();
        let racing = {
            let pool = pool.clone();
            tokio::spawn(async move { sqlx::query(second).bind(user).execute(&pool).await })
        };
        assert!(
            a_statement_waits(&pool).await,
            "order {step}: the second write never waited"
        );
        tx.commit().await.unwrap();
        racing.await.unwrap().unwrap();
        let listed: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM expert_search e JOIN profiles p ON p.id = e.profile_id
              WHERE p.user_id = $1",
        )
        .bind(user)
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(
            listed, 0,
            "order {step}: an inactive account's profile is listed"
        );
        let differences = count_of(&m.app, EXPERT_SEARCH_RECOUNT.to_owned()).await;
        assert_eq!(differences, 0, "order {step}: documents or tallies differ");
    }
    let body = json(m.app.get("/api/profiles/experts?q=ledger").await).await;
    assert_eq!(body["total"], 0, "{body}");
}

/// PostgreSQL: rows of `expert_search` (migration 0046) that differ from the listed experts'
/// documents recomputed, and keys of `expert_words` whose kept count differs from a recount of
/// those rows (both ways); 0 when all agree.
const EXPERT_SEARCH_RECOUNT: &str = "
    WITH documents AS (
        SELECT p.id, p.is_verified, p.created_at,
               strip(profile_search_words(p.id, p.full_name, p.bio, p.main_area)) AS words
          FROM profiles p JOIN users u ON u.id = p.user_id
         WHERE p.profile_type = 'experto' AND u.is_active),
    kept AS (
        SELECT key, SUM(n) AS n FROM (
            SELECT key, n FROM tallies WHERE name = 'expert_words'
            UNION ALL
            SELECT key, n FROM tally_deltas WHERE name = 'expert_words') x
         GROUP BY key HAVING SUM(n) <> 0),
    recounted AS (
        SELECT k AS key, COUNT(*) AS n
          FROM expert_search e, expert_word_keys(e.words, e.is_verified) k GROUP BY k)
    SELECT (SELECT COUNT(*) FROM (
                (SELECT profile_id, is_verified, created_at, words FROM expert_search
                 EXCEPT SELECT * FROM documents)
                UNION ALL
                (SELECT * FROM documents
                 EXCEPT SELECT profile_id, is_verified, created_at, words FROM expert_search)) d)
         + (SELECT COUNT(*) FROM ((SELECT * FROM kept EXCEPT SELECT * FROM recounted)
                                  UNION ALL
                                  (SELECT * FROM recounted EXCEPT SELECT * FROM kept)) k)";

/// The full name `Market::member` gives an expert.
fn full_name(username: &str) -> String {
    format!("Expert {username}")
}

/// Updates the profile of `experts[i]` with `body` through the API.
async fn edit(
    m: &crate::market::Market,
    i: usize,
    experts: &[(crate::helpers::Account, i64)],
    body: Value,
) {
    let (expert, profile) = &experts[i];
    let response = m
        .send(
            expert,
            reqwest::Method::PUT,
            &format!("/api/profiles/{profile}"),
            Some(body),
        )
        .await;
    assert_eq!(response.status(), 200);
}

/// A new expert (not verified), their profile edited with `body`, added to `experts`.
async fn add_expert(
    m: &crate::market::Market,
    experts: &mut Vec<(crate::helpers::Account, i64)>,
    username: &str,
    body: Value,
) {
    let expert = m.member(username, "experto", false, false).await;
    let profile = count_of(
        &m.app,
        format!("SELECT id FROM profiles WHERE user_id = {}", expert.id),
    )
    .await;
    experts.push((expert, profile));
    edit(m, experts.len() - 1, experts, body).await;
}

/// A skill filter's pages are the same whichever way the list tests the skill: pages of one
/// of a common skill (on SQLite, probed as the order is walked: its count squared is over the
/// page's end times the list) and of a rare one (looked up and sorted) give, in turn, what one
/// page of all gives, and a deep page from the list's other end agrees.
#[actix_web::test]
async fn skill_pages_agree_whether_the_skill_is_probed_or_looked_up() {
    let app = spawn_app().await;
    let company = register(&app, "probecompany", &["empresa"]).await;
    let listed = listed(&app, company.id, 10).await;
    // Each project requires Rust and Kubernetes; six of ten also Python, one Go.
    for (i, id) in listed.iter().enumerate() {
        let skills = match i {
            0 => r#"["Go", "Rust"]"#,
            i if i % 5 == 0 => r#"["Rust"]"#,
            _ if i < 8 => r#"["Python", "Rust"]"#,
            _ => r#"["Kubernetes"]"#,
        };
        // A literal, which each engine reads as its JSON column's type.
        let sql = format!("UPDATE projects SET skills_required = '{skills}' WHERE id = {id}");
        let mut conn = app.db.conn().await.unwrap();
        marketplace::on_exec!(conn.exec(), c =>
            sqlx::query(sqlx::AssertSqlSafe(sql)).execute(c).await.map(drop))
        .unwrap();
    }
    for (skill, expected) in [("python", 6), ("go", 1), ("rust", 8)] {
        let all = page(&app, &format!("skill={skill}&size=20")).await;
        assert_eq!(all["total"], expected, "{skill}");
        let whole = ids(&all);
        assert_eq!(whole.len() as i64, expected, "{skill}");
        let mut paged = Vec::new();
        for number in 1..=expected {
            let one = page(&app, &format!("skill={skill}&size=1&page={number}")).await;
            assert_eq!(one["total"], expected, "{skill} page {number}");
            paged.extend(ids(&one));
        }
        assert_eq!(paged, whole, "{skill}: pages of one");
        let mut walked = Vec::new();
        let mut query = format!("skill={skill}&size=1");
        loop {
            let one = page(&app, &query).await;
            walked.extend(ids(&one));
            match one["next_cursor"].as_str() {
                Some(cursor) => query = format!("skill={skill}&size=1&cursor={cursor}"),
                None => break,
            }
        }
        assert_eq!(walked, whole, "{skill}: by cursor");
    }
    app.stop().await;
}

/// A skill's experts page the same whichever way the list tests the skill: pages of one of a
/// common skill (on SQLite probed while the directory's order is walked, then looked up as the
/// page's end grows), pages of one of a rare skill and a walk by cursor give what one page of
/// all gives, verified experts first.
#[actix_web::test]
async fn skill_directory_pages_agree_whether_probed_or_looked_up() {
    let m = crate::market::Market::open().await;
    let mut experts = Vec::new();
    for (i, skills) in [
        vec!["Python"],
        vec!["Python", "Go"],
        vec!["Rust"],
        vec!["Python"],
        vec!["Python", "Rust"],
        vec!["Go"],
    ]
    .into_iter()
    .enumerate()
    {
        let body = serde_json::json!({"skills": skills});
        add_expert(&m, &mut experts, &format!("probed{i}"), body).await;
    }
    // The oldest Python expert and the Go one verified: they come first.
    for i in [0, 5] {
        run(
            &m.app,
            "UPDATE profiles SET is_verified = TRUE WHERE id = $1",
            experts[i].1,
        )
        .await;
    }
    let app = &m.app;
    let names = |body: &Value| -> Vec<String> {
        body["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["full_name"].as_str().unwrap().to_owned())
            .collect()
    };
    for (slug, expected) in [
        ("python", vec!["probed0", "probed4", "probed3", "probed1"]),
        ("go", vec!["probed5", "probed1"]),
    ] {
        let expected: Vec<String> = expected.into_iter().map(full_name).collect();
        let all = json(
            app.get(&format!("/api/skills/{slug}/experts?size=20"))
                .await,
        )
        .await;
        assert_eq!(names(&all), expected, "{slug}");
        // Each expert with their own skills, read for the whole page at once.
        for item in all["items"].as_array().unwrap() {
            let held: Vec<&str> = item["skills"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["name"].as_str().unwrap())
                .collect();
            let want = match item["full_name"].as_str().unwrap() {
                "Expert probed1" => vec!["Go", "Python"],
                "Expert probed4" => vec!["Python", "Rust"],
                "Expert probed5" => vec!["Go"],
                _ => vec!["Python"],
            };
            assert_eq!(held, want, "{item}");
        }
        let mut paged = Vec::new();
        for number in 1..=expected.len() {
            let path = format!("/api/skills/{slug}/experts?size=1&page={number}");
            let one = json(app.get(&path).await).await;
            assert_eq!(one["total"], expected.len() as i64, "{path}");
            paged.extend(names(&one));
        }
        assert_eq!(paged, expected, "{slug}: pages of one");
        let mut walked = Vec::new();
        let mut path = format!("/api/profiles/experts?skill={slug}&size=1");
        loop {
            let one = json(app.get(&path).await).await;
            walked.extend(names(&one));
            match one["next_cursor"].as_str() {
                Some(cursor) => {
                    path = format!("/api/profiles/experts?skill={slug}&size=1&cursor={cursor}")
                }
                None => break,
            }
        }
        assert_eq!(walked, expected, "{slug}: by cursor");
    }
}

/// Curation's candidates (migration 0051's rank): verified, available experts of active
/// users other than the one excluded, holding a required skill, ranked by skills held, then
/// level, then internal rating. Required skills held by few are looked up, every holder
/// ranked; held by many (their count squared over the walk times the verified experts), the
/// walk keeps the `4 × bound` best holders by level and rating before ranking them. Both are
/// the rows' answer, recomputed here, in that order; each candidate comes with the required
/// skills it holds, also after experts changed their skills.
#[actix_web::test]
async fn curation_candidates_rank_skills_held_then_level_and_rating() {
    use marketplace::store::profiles::curation_candidates;
    let m = crate::market::Market::open().await;
    // Skills, level, internal rating, and whether curation may suggest the expert.
    let specs: [(&[&str], &str, Option<f64>, &str); 16] = [
        (&["Python", "Go"], "Enterprise", Some(4.0), "listed"),
        (&["Python"], "Pro", Some(5.0), "listed"),
        (&["Python", "Go", "Rust"], "Global", Some(1.2), "listed"),
        (&["Python"], "Enterprise", Some(2.0), "listed"),
        (&["Python", "Rust"], "Pro", None, "listed"),
        (&["Python"], "Global", Some(4.5), "listed"),
        (&["Python", "Go"], "Global", Some(1.0), "listed"),
        (&["Python"], "Pro", Some(3.0), "listed"),
        (&["Python"], "Global", None, "listed"),
        (&["Python", "Go", "Rust"], "Global", Some(1.5), "listed"),
        (&["Python"], "Enterprise", Some(5.0), "excluded"),
        (&["Go"], "Enterprise", Some(5.0), "listed"),
        (&["Python", "Go"], "Enterprise", Some(5.0), "unverified"),
        (&["Python", "Go"], "Enterprise", Some(5.0), "busy"),
        (&["SQL"], "Pro", Some(4.0), "listed"),
        (&["Python", "Go"], "Enterprise", Some(5.0), "inactive"),
    ];
    let mut experts = Vec::new();
    for (i, (skills, level, rating, kind)) in specs.iter().enumerate() {
        let body = serde_json::json!({"skills": skills});
        add_expert(&m, &mut experts, &format!("curated{i}"), body).await;
        let profile = experts[i].1;
        let mut conn = m.app.db.conn().await.unwrap();
        marketplace::on_exec!(conn.exec(), c => sqlx::query(
            "UPDATE profiles SET expert_level = $2, internal_rating = $3, is_verified = $4,
                    availability = $5 WHERE id = $1")
            .bind(profile).bind(*level).bind(*rating).bind(*kind != "unverified")
            .bind(if *kind == "busy" { "busy" } else { "available" })
            .execute(c).await.map(drop))
        .unwrap();
        if *kind == "inactive" {
            marketplace::on_exec!(conn.exec(), c => sqlx::query(
                "UPDATE users SET is_active = FALSE WHERE id = $1")
                .bind(experts[i].0.id)
                .execute(c).await.map(drop))
            .unwrap();
        }
    }
    // A review by a company shown to everyone, and one still blind: only the first counts.
    let company = m.company("curating").await;
    let now = m.app.clock.now();
    for (reviewee, rating, revealed) in [(0usize, 4, true), (1, 2, false)] {
        let project = project(&m.app, company.id, "Curated", "", ProjectStatus::Completed).await;
        let mut conn = m.app.db.conn().await.unwrap();
        marketplace::on_exec!(conn.exec(), c => sqlx::query(
            "INSERT INTO reviews (project_id, reviewer_id, reviewee_id, rating, visibility,
                                  created_at, updated_at, reviewer_role, revealed_at, blind_until)
             VALUES ($1, $2, $3, $4, 'published', $5, $5, 'empresa', $6, $7)")
            .bind(project).bind(company.id).bind(experts[reviewee].0.id).bind(rating)
            .bind(now).bind(revealed.then_some(now))
            .bind((!revealed).then(|| now + chrono::Duration::days(7)))
            .execute(c).await.map(drop))
        .unwrap();
    }
    let excluded = experts[10].0.id;
    let rank = |i: usize| {
        let (_, level, rating, _) = specs[i];
        let level = match level {
            "Enterprise" => 2,
            "Pro" => 1,
            _ => 0,
        };
        (
            -level,
            -(rating.unwrap_or(3.0) * 10.0) as i64,
            experts[i].0.id,
        )
    };
    let chosen = |candidates: &[marketplace::store::profiles::CurationCandidate]| {
        candidates.iter().map(|c| c.user_id).collect::<Vec<i64>>()
    };
    let mut holds: Vec<Vec<&str>> = specs.iter().map(|s| s.0.to_vec()).collect();
    let mut conn = m.app.db.conn().await.unwrap();
    // The second round after three experts changed their skills: one dropped them all, one
    // Python, one added Rust (the skills each profile's row holds, migration 0051, follow).
    for round in 0..2 {
        if round == 1 {
            drop(conn);
            let changes = [
                (0usize, vec![]),
                (2, vec!["Go", "Rust"]),
                (8, vec!["Python", "Rust"]),
            ];
            for (i, skills) in changes {
                edit(&m, i, &experts, serde_json::json!({"skills": skills})).await;
                let mut conn = m.app.db.conn().await.unwrap();
                marketplace::on_exec!(conn.exec(), c => sqlx::query(
                    "UPDATE profiles SET is_verified = TRUE, availability = 'available'
                      WHERE id = $1")
                    .bind(experts[i].1)
                    .execute(c).await.map(drop))
                .unwrap();
                holds[i] = skills;
            }
            conn = m.app.db.conn().await.unwrap();
        }
        // The answer from the rows: holders by rank, `walk` of them when walked, then by
        // skills held.
        let expected = |required: &[&str], bound: usize, walked: bool| {
            let held = |i: usize| {
                holds[i]
                    .iter()
                    .filter(|s| required.contains(&s.to_lowercase().as_str()))
                    .count()
            };
            let mut holders: Vec<usize> = (0..specs.len())
                .filter(|&i| specs[i].3 == "listed" && held(i) > 0)
                .collect();
            holders.sort_by_key(|&i| rank(i));
            if walked {
                holders.truncate(4 * bound);
            }
            holders.sort_by_key(|&i| (std::cmp::Reverse(held(i)), rank(i)));
            holders.truncate(bound);
            holders
                .into_iter()
                .map(|i| experts[i].0.id)
                .collect::<Vec<i64>>()
        };
        // 12 verified experts: Python's 11 holders (9 in the second round) are many for a
        // walk of 2 alone, 8 with Go (121 > 8 × 12), Rust's 3 (4) few (9 < 96).
        for (required, walked) in [
            (vec!["python"], true),
            (vec!["python", "go"], true),
            (vec!["rust"], false),
            (vec!["rust", "sql"], false),
        ] {
            let names: Vec<String> = required.iter().map(|s| s.to_string()).collect();
            let got = curation_candidates(conn.exec(), &names, Some(excluded), 2)
                .await
                .unwrap();
            assert_eq!(
                chosen(&got),
                expected(&required, 2, walked),
                "round {round}, {required:?}"
            );
            // Walked or not, everyone when the bound is past them: the lookup's full ranking.
            let all = curation_candidates(conn.exec(), &names, Some(excluded), 50)
                .await
                .unwrap();
            assert_eq!(
                chosen(&all),
                expected(&required, 50, false),
                "{required:?}, all"
            );
            for c in &all {
                let i = experts.iter().position(|e| e.0.id == c.user_id).unwrap();
                let mut held: Vec<String> = holds[i]
                    .iter()
                    .filter(|s| required.contains(&s.to_lowercase().as_str()))
                    .map(|s| s.to_string())
                    .collect();
                let mut skills = c.skills.clone();
                held.sort();
                skills.sort();
                assert_eq!(skills, held, "{required:?}, expert {i}");
            }
        }
    }
    // Without required skills: the best by level and rating, whatever they hold.
    let got = curation_candidates(conn.exec(), &[], Some(excluded), 3)
        .await
        .unwrap();
    let mut listed: Vec<usize> = (0..specs.len())
        .filter(|&i| specs[i].3 == "listed")
        .collect();
    listed.sort_by_key(|&i| rank(i));
    let best: Vec<i64> = listed[..3].iter().map(|&i| experts[i].0.id).collect();
    assert_eq!(chosen(&got), best);
    drop(conn);
    m.app.stop().await;
}

/// Curation reads the reviews of its candidates in order of the best score each could reach
/// and stops when the next could not reach the list: the list is still the one scoring every
/// candidate gives. Twenty Enterprise experts rated 5.0 without reviews fill the first batch
/// (60 of a possible 75 on a project requiring Rust and Kubernetes); a Pro expert rated 5.0
/// with five shown five-star reviews comes after them and ranks first (65), and the stars of
/// a review still blind count for nothing. The candidates are kept until an expert changes;
/// their reviews are read at every request.
#[actix_web::test]
async fn curation_reads_reviews_while_they_could_change_the_list() {
    use marketplace::workflows::projects::curation_suggestions;
    let m = crate::market::Market::open().await;
    let mut experts = Vec::new();
    // (level, reviews of five stars shown, of five stars still blind)
    let mut specs = vec![("Enterprise", 0, 0); 20];
    specs[3].2 = 5;
    specs.push(("Pro", 5, 0));
    specs.push(("Global", 5, 0));
    for (i, (level, _, _)) in specs.iter().enumerate() {
        let body = serde_json::json!({"skills": ["Rust"]});
        add_expert(&m, &mut experts, &format!("reviewed{i}"), body).await;
        let mut conn = m.app.db.conn().await.unwrap();
        marketplace::on_exec!(conn.exec(), c => sqlx::query(
            "UPDATE profiles SET expert_level = $2, internal_rating = 5.0, is_verified = TRUE,
                    availability = 'available' WHERE id = $1")
            .bind(experts[i].1).bind(*level)
            .execute(c).await.map(drop))
        .unwrap();
    }
    let company = m.company("reviewing").await;
    let now = m.app.clock.now();
    for (i, (_, shown, blind)) in specs.iter().enumerate() {
        for k in 0..shown + blind {
            let revealed = k < *shown;
            // A company reviews once a project.
            let on = project(&m.app, company.id, "Reviewed", "", ProjectStatus::Completed).await;
            let mut conn = m.app.db.conn().await.unwrap();
            marketplace::on_exec!(conn.exec(), c => sqlx::query(
                "INSERT INTO reviews (project_id, reviewer_id, reviewee_id, rating, visibility,
                                      created_at, updated_at, reviewer_role, revealed_at,
                                      blind_until)
                 VALUES ($1, $2, $3, 5, 'published', $4, $4, 'empresa', $5, $6)")
                .bind(on).bind(company.id).bind(experts[i].0.id).bind(now)
                .bind(revealed.then_some(now))
                .bind((!revealed).then(|| now + chrono::Duration::days(7)))
                .execute(c).await.map(drop))
            .unwrap();
        }
    }
    let curated = project(
        &m.app,
        company.id,
        "Curated",
        "",
        ProjectStatus::PublishedCurated,
    )
    .await;
    let owner = marketplace::workflows::projects::Caller {
        id: company.id,
        admin: false,
        company: true,
        expert: false,
    };
    let ranked = |list: Vec<marketplace::workflows::projects::Suggestion>| {
        list.into_iter()
            .map(|s| (s.expert_id, s.score.total))
            .collect::<Vec<_>>()
    };
    let none = curation_suggestions(&m.app.state, &owner, curated, 0)
        .await
        .unwrap();
    assert!(none.is_empty());
    let got = ranked(
        curation_suggestions(&m.app.state, &owner, curated, 1)
            .await
            .unwrap(),
    );
    assert_eq!(got, [(experts[20].0.id, 65.0)]);
    let got = ranked(
        curation_suggestions(&m.app.state, &owner, curated, 3)
            .await
            .unwrap(),
    );
    let mut enterprise: Vec<i64> = experts[..20].iter().map(|e| e.0.id).collect();
    enterprise.sort_unstable();
    assert_eq!(
        got,
        [
            (experts[20].0.id, 65.0),
            (enterprise[0], 60.0),
            (enterprise[1], 60.0)
        ]
    );
    // Every candidate, as scoring all of them gives: the Global expert's reviews read too.
    let all = ranked(
        curation_suggestions(&m.app.state, &owner, curated, 50)
            .await
            .unwrap(),
    );
    assert_eq!(all.len(), 22);
    assert_eq!(all[21], (experts[21].0.id, 55.0));

    // The candidates are kept while no expert changes, their reviews read at every request:
    // once the blind reviews of the fourth expert are shown, the kept candidates rank them
    // first.
    let kept = m.app.state.curation_candidates.counts();
    m.app.clock.advance(chrono::Duration::days(8));
    let got = ranked(
        curation_suggestions(&m.app.state, &owner, curated, 2)
            .await
            .unwrap(),
    );
    assert_eq!(got, [(experts[3].0.id, 75.0), (experts[20].0.id, 65.0)]);
    let now_kept = m.app.state.curation_candidates.counts();
    assert_eq!((now_kept.0 - kept.0, now_kept.1 - kept.1), (1, 0), "kept");
    // An expert's change is seen at once: the fourth expert, made unavailable, is left out.
    let mut conn = m.app.db.conn().await.unwrap();
    marketplace::on_exec!(conn.exec(), c => sqlx::query(
        "UPDATE profiles SET availability = 'busy' WHERE id = $1")
        .bind(experts[3].1)
        .execute(c).await.map(drop))
    .unwrap();
    drop(conn);
    let got = ranked(
        curation_suggestions(&m.app.state, &owner, curated, 1)
            .await
            .unwrap(),
    );
    assert_eq!(got, [(experts[20].0.id, 65.0)]);
    assert_eq!(
        m.app.state.curation_candidates.counts().1,
        now_kept.1 + 1,
        "read again"
    );
    m.app.stop().await;
}

/// On PostgreSQL, the shown ratings of a page of users (curation's reviews, a user's stats)
/// are read user by user even under the plan PostgreSQL keeps for the statement, which cannot
/// see how many entries a range of keys holds: that plan once took the primary key's range of
/// every user's shown ratings, 52 ms at S and 430 ms at M for a page of 120 users.
#[actix_web::test]
async fn shown_ratings_read_only_the_users_asked_under_the_kept_plan() {
    if std::env::var("TEST_DATABASE_URL").is_err() {
        return;
    }
    let app = crate::helpers::spawn_app_with(&[("DATABASE_STATEMENT_TIMEOUT_SECONDS", "0")]).await;
    let mut conn = app.db.conn().await.unwrap();
    // 30,000 users with five shown ratings each (one review at each), and their other keys.
    marketplace::on_exec!(conn.exec(), c => sqlx::query(
        "INSERT INTO tallies (name, key, user_id, n, total)
         SELECT 'reviews_by_user', k, u, 1, 0
           FROM generate_series(100001, 130000) AS u,
                unnest(ARRAY['received:published', 'shown:1', 'shown:2', 'shown:3', 'shown:4',
                             'shown:5', 'written:published']) AS k")
        .execute(c).await.map(drop))
    .unwrap();
    // Other figures beside them, as in service, where the ratings are a few of the tallies:
    // what the kept plan weighs a name's share by.
    marketplace::on_exec!(conn.exec(), c => sqlx::query(
        "INSERT INTO tallies (name, key, user_id, n, total)
         SELECT 'figure_' || (g % 20), 'key_' || g, g % 5000, 1, 0
           FROM generate_series(1, 400000) AS g")
        .execute(c).await.map(drop))
    .unwrap();
    marketplace::on_exec!(conn.exec(), c => sqlx::query("ANALYZE tallies")
        .execute(c).await.map(drop))
    .unwrap();
    drop(conn);

    let mut tx = app.db.begin().await.unwrap();
    marketplace::on_exec!(tx.exec(), c => sqlx::query("SET LOCAL plan_cache_mode = force_generic_plan")
        .execute(c).await.map(drop))
    .unwrap();
    let users: Vec<i64> = (100_001..=100_120).collect();
    let averages = marketplace::store::reviews::averages(tx.exec(), &users, app.clock.now())
        .await
        .unwrap();
    assert_eq!(averages.len(), 120);
    assert!(
        averages
            .iter()
            .all(|&(_, average, n)| average == 3.0 && n == 5)
    );
    let read = rows_read(tx.exec(), "tallies").await;
    // Each user's seven entries at most, not the 150,000 shown ratings.
    assert!(read <= 120 * 7, "{read} tally rows read for 120 users");
    drop(tx);
    app.stop().await;
}

/// How many rows of `table` this transaction has read on PostgreSQL: scanned, or fetched
/// through an index.
async fn rows_read(ex: marketplace::store::Exec<'_>, table: &str) -> i64 {
    marketplace::on_exec!(ex, c => sqlx::query_scalar(
        "SELECT COALESCE(seq_tup_read, 0) + COALESCE(idx_tup_fetch, 0)
           FROM pg_stat_xact_user_tables WHERE relname = $1")
        .bind(table)
        .fetch_one(c).await)
    .unwrap()
}

/// Every authenticated request that misses the session cache reads its session with its user
/// (`users::find_by_session`). Where the sessions' statistics were taken while they were few
/// and held only early users, the user must still be read by its key, not found by walking
/// the users' key from the first: the plan PostgreSQL chose for the join of the two.
#[actix_web::test]
async fn a_session_reads_its_user_by_key_whatever_the_statistics() {
    if std::env::var("TEST_DATABASE_URL").is_err() {
        return;
    }
    let app = crate::helpers::spawn_app_with(&[("DATABASE_STATEMENT_TIMEOUT_SECONDS", "0")]).await;
    let mut conn = app.db.conn().await.unwrap();
    marketplace::on_exec!(conn.exec(), c => sqlx::query(
        "INSERT INTO users (email, username, password_hash, active_role, created_at, updated_at)
         SELECT 'member' || g || '@accounts.test', 'member' || g, 'x', 'empresa', now(), now()
           FROM generate_series(1, 60000) AS g")
        .execute(c).await.map(drop))
    .unwrap();
    // The statistics are taken while the only sessions are the first two users'.
    marketplace::on_exec!(conn.exec(), c => sqlx::query(
        "INSERT INTO auth_sessions (user_id, refresh_token_hash, created_at, last_used_at,
                                    expires_at)
         SELECT id, 'early' || id, now(), now(), now() + interval '1 day'
           FROM users ORDER BY id LIMIT 2")
        .execute(c).await.map(drop))
    .unwrap();
    marketplace::on_exec!(conn.exec(), c => sqlx::query("ANALYZE users, auth_sessions")
        .execute(c).await.map(drop))
    .unwrap();
    let (session, user): (i64, i64) = marketplace::on_exec!(conn.exec(), c => sqlx::query_as(
        "INSERT INTO auth_sessions (user_id, refresh_token_hash, created_at, last_used_at,
                                    expires_at)
         SELECT MAX(id), 'newest', now(), now(), now() + interval '1 day' FROM users
         RETURNING id, user_id")
        .fetch_one(c).await)
    .unwrap();
    drop(conn);

    let mut tx = app.db.begin().await.unwrap();
    // Each user entry a plan reads is then a row fetched, counted below.
    marketplace::on_exec!(tx.exec(), c => sqlx::query("SET LOCAL enable_indexonlyscan = off")
        .execute(c).await.map(drop))
    .unwrap();
    let (found, of) = marketplace::store::users::find_by_session(tx.exec(), session)
        .await
        .unwrap()
        .expect("the session and its user");
    assert_eq!((found.id, of.id), (session, user));
    let read = rows_read(tx.exec(), "users").await;
    assert!(read <= 1, "{read} users read for one session");
    drop(tx);
    app.stop().await;
}

/// The listed rule as the lists read it (`visibility::listed_sql`) and as a project's check
/// reads it (`visibility::is_listed`, through `workflows::projects::is_public`) agree on a
/// project of every type in every state, on each engine.
#[actix_web::test]
async fn the_listing_in_sql_and_in_rust_agree_on_every_kind_of_project() {
    use marketplace::domain::project::ProjectType;
    use marketplace::domain::visibility;
    use marketplace::workflows::projects::is_public;

    let app = spawn_app().await;
    let company = register(&app, "visibility_co", &["empresa"]).await;
    let mut made = Vec::new();
    for kind in [ProjectType::Private, ProjectType::Curated] {
        for status in ProjectStatus::ALL {
            let id =
                project_of_type(&app, company.id, "Every kind", "", kind.as_str(), status).await;
            made.push((id, kind, status));
        }
    }
    let mut conn = app.db.conn().await.unwrap();
    let text = format!(
        "SELECT p.id FROM projects p WHERE p.company_id = $1 AND {} ORDER BY p.id",
        visibility::listed_sql("p.")
    );
    let listed_by_sql: Vec<i64> = marketplace::on_exec!(conn.exec(), c =>
        sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(text.as_str()))
            .bind(company.id)
            .fetch_all(c)
            .await)
    .unwrap();
    let mut listed_by_rust = Vec::new();
    for (id, kind, status) in &made {
        let p = projects::find(conn.exec(), *id).await.unwrap().unwrap();
        assert_eq!(
            is_public(&p),
            visibility::is_listed(*kind, *status),
            "{p:?}"
        );
        if is_public(&p) {
            listed_by_rust.push(*id);
        }
    }
    assert_eq!(listed_by_sql, listed_by_rust);
    assert_eq!(listed_by_sql.len(), visibility::LISTED_STATUSES.len());
}

/// Who takes part in a project as the lists read it (`visibility::involving_sql`) and as a
/// project's check reads it (`workflows::projects::load_visible`) agree: a user who owns, is
/// assigned to, is the target of, is invited to (formally or in the legacy list) or applied
/// to an unlisted project sees it both ways, and sees another company's unlisted project
/// neither way.
#[actix_web::test]
async fn who_takes_part_in_sql_and_in_rust_agree_on_every_tie() {
    use marketplace::domain::visibility;
    use marketplace::store::applications::{self, Proposal};
    use marketplace::workflows::projects::{Caller, load_visible};
    use sqlx::types::Json;

    let app = spawn_app().await;
    let user = register(&app, "ties_user", &["empresa", "experto"]).await;
    let other = register(&app, "ties_other", &["empresa"]).await;
    let draft = ProjectStatus::Draft;
    let mut ids = Vec::new();
    for (owner, title) in [
        (user.id, "owned"),
        (other.id, "assigned"),
        (other.id, "target"),
        (other.id, "invited"),
        (other.id, "legacy invited"),
        (other.id, "applied"),
        (other.id, "unrelated"),
    ] {
        ids.push(project(&app, owner, title, "", draft).await);
    }
    let now = app.clock.now();
    let mut conn = app.db.conn().await.unwrap();
    marketplace::on_exec!(conn.exec(), c => sqlx::query(
        "UPDATE projects SET expert_id = $1 WHERE id = $2")
        .bind(user.id).bind(ids[1]).execute(c).await.map(drop))
    .unwrap();
    marketplace::on_exec!(conn.exec(), c => sqlx::query(
        "UPDATE projects SET target_expert_id = $1 WHERE id = $2")
        .bind(user.id).bind(ids[2]).execute(c).await.map(drop))
    .unwrap();
    marketplace::on_exec!(conn.exec(), c => sqlx::query(
        "INSERT INTO project_invitations (project_id, expert_id, source, created_at)
         VALUES ($1, $2, 'admin', $3)")
        .bind(ids[3]).bind(user.id).bind(now).execute(c).await.map(drop))
    .unwrap();
    marketplace::on_exec!(conn.exec(), c => sqlx::query(
        "UPDATE projects SET invited_experts = $1 WHERE id = $2")
        .bind(Json(vec![user.id])).bind(ids[4]).execute(c).await.map(drop))
    .unwrap();
    let proposal = Proposal {
        cover_letter: String::new(),
        proposed_budget_minor: 100_000,
        milestones: Vec::new(),
    };
    applications::insert(conn.exec(), ids[5], user.id, &proposal, now)
        .await
        .unwrap();

    let text = format!(
        "SELECT p.id FROM projects p WHERE p.id IN ({}) ORDER BY p.id",
        visibility::involving_sql("$1")
    );
    let mut by_sql: Vec<i64> = marketplace::on_exec!(conn.exec(), c =>
        sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(text.as_str()))
            .bind(user.id)
            .fetch_all(c)
            .await)
    .unwrap();
    by_sql.dedup();
    let caller = Caller {
        id: user.id,
        admin: false,
        company: true,
        expert: true,
    };
    let mut by_rust = Vec::new();
    for id in &ids {
        if load_visible(conn.exec(), &caller, *id).await.is_ok() {
            by_rust.push(*id);
        }
    }
    assert_eq!(by_sql, by_rust);
    assert_eq!(by_rust, ids[..6], "every tie but the unrelated project");
}
