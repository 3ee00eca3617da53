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

/// Stores a project of `company` as of now on the service's clock, then moves the clock a
/// second on, so that every project has its own creation time.
async fn project(
    app: &TestApp,
    company: i64,
    title: &str,
    description: &str,
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
            project_type: "curated",
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

/// The relations a plan reads with a sequential scan.
fn sequential_scans(plan: &Value, out: &mut BTreeSet<String>) {
    if plan["Node Type"] == "Seq Scan" {
        out.insert(plan["Relation Name"].as_str().unwrap_or("?").to_owned());
    }
    for child in plan["Plans"].as_array().into_iter().flatten() {
        sequential_scans(child, out);
    }
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
    let engine = conn.exec();
    let lists = [
        (
            "public",
            project_lists::visible(&engine, Viewer::Anonymous, &ProjectFilter::default()),
        ),
        // A word in one project of a hundred, as a real search is.
        (
            "public search",
            project_lists::visible(&engine, Viewer::Anonymous, &search("w42")),
        ),
        (
            "public by skill",
            project_lists::visible(&engine, Viewer::Anonymous, &skill),
        ),
        (
            "expert's visible",
            project_lists::visible(&engine, Viewer::User(expert.id), &ProjectFilter::default()),
        ),
        (
            "expert's search",
            project_lists::visible(&engine, Viewer::User(expert.id), &search("w7")),
        ),
        (
            "admin",
            project_lists::visible(&engine, Viewer::Admin, &ProjectFilter::default()),
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
    // Large: what PostgreSQL estimates at ten thousand rows or more (a small table is read
    // whole, rightly).
    let large: Vec<String> = marketplace::on_exec!(conn.exec(), c => sqlx::query_scalar(
        "SELECT relname::text FROM pg_class WHERE relkind = 'r' AND reltuples >= 10000")
        .fetch_all(c).await)
    .unwrap();
    assert!(large.contains(&"projects".to_owned()), "{large:?}");
    let mut found = Vec::new();
    for (name, list) in lists {
        for (seek, what) in [
            (Seek::Page(1), "first page"),
            (Seek::Page(200), "page 200"),
            (Seek::Page(1_000_000), "past the end"),
        ] {
            for statement in list.explain(conn.exec(), seek, 20).await.unwrap() {
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
    assert!(found.is_empty(), "sequential scans:\n{}", found.join("\n"));
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
    use marketplace::store::user_admin::{UserFilter, list};
    let app = spawn_app().await;
    crate::helpers::admin(&app, "counting_root").await;
    let a = register(&app, "countedco", &["empresa"]).await;
    let b = register(&app, "countedex", &["experto"]).await;
    let c = register(&app, "countedboth", &["experto", "empresa"]).await;
    let check = |step: &'static str| {
        let app = &app;
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
                let (_, total) = list(conn.exec(), f, 1, 1).await.unwrap();
                // The same filter with a search matching everyone is counted row by row.
                let counted = list(
                    conn.exec(),
                    &UserFilter {
                        search: Some("@example.com".into()),
                        ..f.clone()
                    },
                    1,
                    1,
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
    let titled = project(
        &app,
        company.id,
        "Kubernetes migration",
        "",
        ProjectStatus::PublishedCurated,
    )
    .await;
    let described = project(
        &app,
        company.id,
        "Data platform",
        "Runs on kubernetes clusters",
        ProjectStatus::PublishedCurated,
    )
    .await;
    project(
        &app,
        company.id,
        "Website",
        "Plain pages",
        ProjectStatus::PublishedCurated,
    )
    .await;
    let draft = project(
        &app,
        company.id,
        "Kubernetes draft",
        "",
        ProjectStatus::Draft,
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
/// own list (`/api/projects/my`, with and without a status) and an expert's statistics
/// equal a count of the rows through creation, assignment, moves, a fold and deletes.
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
                    .bearer_auth(expert)
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
            assert_eq!(
                stats["applications"]["pending"],
                pending.await,
                "{step}: {stats}"
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
