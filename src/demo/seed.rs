//! Demo data for `marketplace seed-demo` and the end-to-end reset: the demo accounts, each
//! company and expert with a verified profile and complete fiscal data. Running it twice
//! changes nothing the second time.

use crate::clock::Clock;
use crate::domain::profile::VerificationStatus;
use crate::domain::user::Role;
use crate::store::{Db, profiles, users};
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
    let admin_id = {
        let mut conn = db.conn().await?;
        users::find_by_login(conn.exec(), DEMO_USERS[0].0)
            .await?
            .map(|u| u.id)
    };
    for (username, _, roles) in DEMO_USERS {
        for role in roles.iter().filter(|r| **r != Role::Admin) {
            profile(db, clock, username, *role, admin_id).await?;
        }
    }
    Ok(format!(
        "demo data ready: {created} user(s) created, {} in total, password {DEMO_PASSWORD}",
        DEMO_USERS.len()
    ))
}

/// A verified profile of `role` with complete fiscal data, unless the user already has one.
async fn profile(
    db: &Db,
    clock: &Clock,
    username: &str,
    role: Role,
    admin_id: Option<i64>,
) -> anyhow::Result<()> {
    let now = clock.now();
    let mut tx = db.begin().await?;
    let Some(user) = users::find_by_login(tx.exec(), username).await? else {
        return Ok(());
    };
    if profiles::find_by_user(tx.exec(), user.id, role)
        .await?
        .is_some()
    {
        return Ok(());
    }
    let slug = (role == Role::Experto).then(|| username.replace('_', "-"));
    let id = profiles::insert(tx.exec(), user.id, role.as_str(), slug.as_deref(), now).await?;
    let mut p = profiles::find(tx.exec(), id)
        .await?
        .ok_or_else(|| anyhow::anyhow!("profile {id} vanished"))?;
    let display = username.trim_start_matches("demo_").replace('_', " ");
    if role == Role::Empresa {
        p.company_name = Some(format!("Demo {display} SL"));
        p.full_name = Some(format!("Demo {display}"));
        p.industry = Some("Software".into());
    } else {
        p.full_name = Some(format!("Demo {display}"));
        p.bio = Some("Data engineer with ten years of experience in Rust and SQL.".into());
        p.main_area = Some("Data engineering".into());
        p.availability = Some("available".into());
    }
    profiles::update_details(tx.exec(), &p, now).await?;
    p.tax_id = Some("B12345678".into());
    p.fiscal_name = p.company_name.clone().or_else(|| p.full_name.clone());
    p.fiscal_address = Some("Calle Mayor 1".into());
    p.fiscal_postal_code = Some("28001".into());
    p.fiscal_city = Some("Madrid".into());
    p.fiscal_country = Some("ES".into());
    p.fiscal_type = Some(
        if role == Role::Empresa {
            "empresa"
        } else {
            "autonomo"
        }
        .into(),
    );
    p.fiscal_data_complete = true;
    profiles::update_fiscal(tx.exec(), &p, now).await?;
    if let Some(admin_id) = admin_id {
        let verified = VerificationStatus::Verified;
        profiles::set_verification(tx.exec(), id, true, verified, None, admin_id, now).await?;
    }
    users::verify_email(tx.exec(), user.id, &user.email, now).await?;
    tx.commit().await?;
    Ok(())
}
