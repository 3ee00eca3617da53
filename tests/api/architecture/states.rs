//! States as types (filled in by its check).
