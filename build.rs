//! Rebuilds the service when a migration is added: `sqlx::migrate!` embeds the migrations at
//! compile time, and cargo would otherwise not notice a new file in their folders.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
