//! Downloads written whole before they are answered.
//!
//! An export read from the database at the client's pace keeps its statement running for as
//! long as the client takes, and the statement timeout cut a slow download after its `200`.
//! Written first to a temporary file, the statement ends at the database's pace: a failure
//! (a timeout among them) is answered as an error with its status, and the answer carries its
//! `Content-Length`, so a transfer cut on the way is visible to any client. The memory held is
//! one piece, whatever the size of the export. The file is unlinked as it is made, so nothing
//! is left behind however the request ends.

use actix_web::{HttpResponse, HttpResponseBuilder, web::Bytes};
use tokio::io::{AsyncReadExt as _, AsyncSeekExt as _, AsyncWriteExt as _};

/// How much of the file is read for each piece of the answer.
const PIECE_BYTES: usize = 64 * 1024;

/// A download being written.
pub struct Spool {
    file: tokio::fs::File,
}

impl Spool {
    /// An empty download, in a file of the system's temporary directory (`TMPDIR`).
    pub async fn new() -> std::io::Result<Self> {
        let file = actix_web::rt::task::spawn_blocking(tempfile::tempfile)
            .await
            .map_err(std::io::Error::other)??;
        Ok(Self {
            file: tokio::fs::File::from_std(file),
        })
    }

    /// Where the download is written.
    pub fn writer(&mut self) -> &mut tokio::fs::File {
        &mut self.file
    }

    /// `response` with the download as its body and its length.
    pub async fn answer(
        mut self,
        mut response: HttpResponseBuilder,
    ) -> std::io::Result<HttpResponse> {
        self.file.flush().await?;
        let length = self.file.seek(std::io::SeekFrom::End(0)).await?;
        self.file.rewind().await?;
        let pieces = futures_util::stream::try_unfold(self.file, |mut file| async move {
            let mut piece = Vec::with_capacity(PIECE_BYTES);
            match (&mut file)
                .take(PIECE_BYTES as u64)
                .read_to_end(&mut piece)
                .await?
            {
                0 => Ok(None),
                _ => Ok(Some((Bytes::from(piece), file))),
            }
        });
        Ok(response
            .no_chunking(length)
            .streaming::<_, std::io::Error>(pieces))
    }
}
