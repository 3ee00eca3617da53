//! Demo data for `marketplace seed-demo`: users at first; grows as parts land. Running it
//! twice changes nothing the second time.

use crate::clock::Clock;
use crate::domain::user::Role;
use crate::store::{Db, users};
use crate::workflows::accounts;

/// The password of every demo account.
pub const DEMO_PASSWORD: &str = "Demo1234!";

/// (username, e-mail, roles) of the demo accounts.
pub const DEMO_USERS: &[(&str, &str, &[Role])] = &[
    ("demo_admin", "admin@demo.marketplace.local", &[Role::Admin]),
    (
        "demo_empresa",
        "empresa@demo.marketplace.local",
        &[Role::Empresa],
    ),
    (
        "demo_experto",
        "experto@demo.marketplace.local",
        &[Role::Experto],
    ),
    (
        "demo_experta",
        "experta@demo.marketplace.local",
        &[Role::Experto],
    ),
    (
        "demo_dual",
        "dual@demo.marketplace.local",
        &[Role::Empresa, Role::Experto],
    ),
];

pub async fn seed_demo(db: &Db, clock: &Clock, bcrypt_cost: u32) -> anyhow::Result<String> {
    let mut created = 0;
    for (username, email, roles) in DEMO_USERS {
        let mut conn = db.conn().await?;
        if users::exists(conn.exec(), email, username).await? {
            continue;
        }
        drop(conn);
        accounts::create_user(
            db,
            clock,
            bcrypt_cost,
            email,
            username,
            DEMO_PASSWORD,
            roles,
        )
        .await?;
        created += 1;
    }
    Ok(format!(
        "demo data ready: {created} user(s) created, {} in total, password {DEMO_PASSWORD}",
        DEMO_USERS.len()
    ))
}
