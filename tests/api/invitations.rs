//! Tests of the invitations area.
