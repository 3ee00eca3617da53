//! The architecture, checked: the rules `ARCHITECTURE.md` states about the source tree, each a
//! test over the files under `src/` (read as text, no build tool needed), so a change that
//! breaks one fails here with the file and line to fix.

mod layers;
mod routes;
mod states;

use std::path::{Path, PathBuf};

/// A source file of the service: its path from the crate root (`src/…`) and its text.
pub struct Source {
    pub path: String,
    pub text: String,
}

/// Every `.rs` file under `src/<dir>` (`""` for all of `src/`), sorted by path.
pub fn sources(dir: &str) -> Vec<Source> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    collect(&root.join("src").join(dir), &mut files);
    files.sort();
    files
        .into_iter()
        .map(|file| Source {
            path: file
                .strip_prefix(root)
                .expect("under the crate root")
                .to_string_lossy()
                .replace('\\', "/"),
            text: std::fs::read_to_string(&file).expect("a readable source file"),
        })
        .collect()
}

fn collect(dir: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}
