//! The `marketplace` command line: configuration errors, migrate, create-admin, seed-demo.

use std::process::Command;

fn marketplace(data_dir: &std::path::Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_marketplace"));
    command
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("DATA_DIR", data_dir)
        .env("BCRYPT_COST", "4");
    // The command-line tests keep to SQLite: they check the commands, not the engine.
    command
}

#[test]
fn a_bad_value_is_one_line_naming_the_variable() {
    let dir = tempfile::tempdir().unwrap();
    let output = marketplace(dir.path())
        .env("RATE_LIMIT_PER_MINUTE", "-1")
        .arg("migrate")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("RATE_LIMIT_PER_MINUTE"));
    assert!(!stderr.contains("panicked"));

    let production = marketplace(dir.path())
        .env("APP_ENV", "production")
        .arg("migrate")
        .output()
        .unwrap();
    assert!(!production.status.success());
    assert!(
        String::from_utf8(production.stderr)
            .unwrap()
            .contains("JWT_SECRET")
    );
}

#[test]
fn migrate_create_admin_and_seed_demo() {
    let dir = tempfile::tempdir().unwrap();
    let migrate = marketplace(dir.path()).arg("migrate").output().unwrap();
    assert!(
        migrate.status.success(),
        "{}",
        String::from_utf8_lossy(&migrate.stderr)
    );
    assert!(dir.path().join("marketplace.db").exists());

    let args = [
        "create-admin",
        "--email",
        "root@example.com",
        "--username",
        "root",
        "--password",
        "Secret123!",
    ];
    let created = marketplace(dir.path()).args(args).output().unwrap();
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    let again = marketplace(dir.path()).args(args).output().unwrap();
    assert!(
        !again.status.success(),
        "a second admin with the same e-mail is refused"
    );
    let weak = marketplace(dir.path())
        .args([
            "create-admin",
            "--email",
            "x@example.com",
            "--username",
            "xx_1",
            "--password",
            "weak",
        ])
        .output()
        .unwrap();
    assert!(!weak.status.success());

    let seed = marketplace(dir.path()).arg("seed-demo").output().unwrap();
    assert!(
        seed.status.success(),
        "{}",
        String::from_utf8_lossy(&seed.stderr)
    );
    assert!(String::from_utf8_lossy(&seed.stdout).contains("5 user(s) created"));
    let reseed = marketplace(dir.path()).arg("seed-demo").output().unwrap();
    assert!(String::from_utf8_lossy(&reseed.stdout).contains("0 user(s) created"));
}

/// `serve` without `MIGRATE_ON_START` (the default for PostgreSQL in production) migrates
/// nothing: it refuses a database missing one of its migrations, naming the upgrade step, and
/// serves one `marketplace migrate` brought up to date, also when a newer version applied a
/// migration this one does not know (the rolling upgrade's second half, or a rollback).
#[actix_web::test]
async fn serve_without_migrate_on_start_needs_its_migrations_applied_and_accepts_newer_ones() {
    use super::helpers::{ChildGuard, free_port, service_command};
    use sqlx::Connection as _;
    let dir = tempfile::tempdir().unwrap();
    let serve = |port: u16| {
        let mut command = service_command(dir.path(), port);
        command.env("MIGRATE_ON_START", "false").arg("serve");
        command
    };
    let refused = serve(free_port())
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    assert!(
        !refused.status.success(),
        "an unmigrated database is refused"
    );
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("marketplace migrate") && stderr.contains("MIGRATE_ON_START"),
        "{stderr}"
    );

    let migrated = marketplace(dir.path()).arg("migrate").output().unwrap();
    assert!(migrated.status.success());
    // A migration of a newer version, applied by its `migrate`.
    let db = dir.path().join("marketplace.db");
    let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite:{}", db.display()))
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (999999, 'a newer version''s', 1, x'00', 0)",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();

    let port = free_port();
    let _server = ChildGuard(serve(port).spawn().unwrap());
    let url = format!("http://127.0.0.1:{port}/ready");
    let mut ready = false;
    for _ in 0..300 {
        if reqwest::get(&url).await.is_ok_and(|r| r.status() == 200) {
            ready = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(
        ready,
        "served once migrated, beside a newer version's migration"
    );
}
