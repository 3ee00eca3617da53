//! Routes and the access table (filled in by its check).
