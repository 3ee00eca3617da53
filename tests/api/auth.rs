//! Tests of the auth area.
