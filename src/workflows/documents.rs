//! Profile documents: stored under `UPLOADS_DIR/documents/{user_id}/` with a name the
//! service chooses, recorded against the user's active-role profile.

use crate::domain::token::random_token;
use crate::domain::upload::{DocumentType, display_name};
use crate::domain::user::Role;
use crate::state::AppState;
use crate::store::documents::{self, Document, NewDocument};
use crate::store::profiles;
use crate::store::users::User;
use crate::workflows::error::{FlowError, FlowResult};

/// Stores an uploaded document (its type already sniffed from its bytes) and records it.
pub async fn store(
    state: &AppState,
    user: &User,
    kind: &str,
    doc_type: DocumentType,
    client_name: Option<&str>,
    bytes: &[u8],
) -> FlowResult<Document> {
    let user_id = user.id;
    let stored = format!("{}.{}", random_token(16), doc_type.extension());
    let dir = state
        .settings
        .uploads_dir
        .join("documents")
        .join(user_id.to_string());
    tokio::fs::create_dir_all(&dir)
        .await
        .map_err(anyhow::Error::from)?;
    tokio::fs::write(dir.join(&stored), &bytes)
        .await
        .map_err(anyhow::Error::from)?;

    let now = state.clock.now();
    let mut tx = state.db.begin().await?;
    let role: Role = user.active_role;
    let profile_id = profiles::find_by_user(tx.exec(), user_id, role)
        .await?
        .map(|p| p.id);
    let id = documents::insert(
        tx.exec(),
        &NewDocument {
            profile_id,
            user_id,
            kind,
            file_path: &format!("documents/{user_id}/{stored}"),
            file_name: &display_name(client_name, doc_type),
            file_mime: doc_type.mime(),
            file_size: bytes.len() as i64,
        },
        now,
    )
    .await?;
    let document = documents::find(tx.exec(), id)
        .await?
        .ok_or_else(|| FlowError::not_found("Document not found"))?;
    tx.commit().await?;
    Ok(document)
}
