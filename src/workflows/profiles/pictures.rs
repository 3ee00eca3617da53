//! Profile pictures: where one goes, and storing it (the file replaced is removed).

use crate::domain::user::Role;
use crate::state::AppState;
use crate::store::profiles::{self};
use crate::store::users::User;
use crate::workflows::error::{FlowError, FlowResult};

/// Where a picture goes: an expert's profile, or an administrator's team profile (else
/// their `admin` profile).
pub enum PictureTarget {
    Profile(i64),
    Team,
}

/// Where the user's picture goes: the expert profile, or an administrator's team profile
/// (else their admin profile); companies have none (403).
pub async fn picture_target(state: &AppState, user: &User) -> FlowResult<PictureTarget> {
    let mut conn = state.db.conn().await?;
    Ok(match user.active_role {
        Role::Experto => PictureTarget::Profile(
            profiles::find_by_user(conn.exec(), user.id, Role::Experto)
                .await?
                .ok_or_else(|| FlowError::not_found("Create your expert profile first"))?
                .id,
        ),
        Role::Admin => {
            if profiles::find_team_by_user(conn.exec(), user.id)
                .await?
                .is_some()
            {
                PictureTarget::Team
            } else {
                PictureTarget::Profile(
                    profiles::find_by_user(conn.exec(), user.id, Role::Admin)
                        .await?
                        .ok_or_else(|| FlowError::not_found("Create your team profile first"))?
                        .id,
                )
            }
        }
        Role::Empresa => {
            return Err(FlowError::forbidden(
                "Profile pictures are for experts and administrators",
            ));
        }
    })
}

/// Stores a normalised JPEG as `user_id`'s picture on `target`, removing the file it
/// replaces. Answers the picture's path.
pub async fn store_picture(
    state: &AppState,
    user_id: i64,
    target: PictureTarget,
    jpeg: Vec<u8>,
) -> FlowResult<String> {
    let file = format!("{}.jpg", crate::domain::token::random_token(16));
    let dir = state
        .settings
        .uploads_dir
        .join("profiles")
        .join(user_id.to_string());
    tokio::fs::create_dir_all(&dir)
        .await
        .map_err(anyhow::Error::from)?;
    tokio::fs::write(dir.join(&file), &jpeg)
        .await
        .map_err(anyhow::Error::from)?;
    let path = format!("/api/uploads/profiles/{user_id}/{file}");
    let now = state.clock.now();
    let previous = {
        let mut conn = state.db.conn().await?;
        match target {
            PictureTarget::Profile(id) => {
                profiles::set_picture(conn.exec(), id, &path, now).await?
            }
            PictureTarget::Team => {
                profiles::set_team_picture(conn.exec(), user_id, &path, now).await?
            }
        }
    };
    // The replaced file, when it was one of ours.
    let prefix = format!("/api/uploads/profiles/{user_id}/");
    if let Some(old) = previous
        .as_deref()
        .and_then(|p| p.strip_prefix(&prefix))
        .filter(|name| valid_upload_name(name) && *name != file)
    {
        let _ = tokio::fs::remove_file(dir.join(old)).await;
    }
    Ok(path)
}

/// Names the service gives stored pictures: URL-safe characters and `.jpg`, nothing that
/// could leave the directory.
pub fn valid_upload_name(name: &str) -> bool {
    name.len() <= 100
        && name.strip_suffix(".jpg").is_some_and(|stem| {
            !stem.is_empty()
                && stem
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        })
}
