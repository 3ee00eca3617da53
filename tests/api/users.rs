//! Tests of the users area.
