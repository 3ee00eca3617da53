//! SQLite's statement timeout (`DATABASE_STATEMENT_TIMEOUT_SECONDS`): PostgreSQL cancels a
//! statement past its `statement_timeout`, SQLite has no such setting, so each pooled
//! connection is given one here.
//!
//! SQLite announces each statement as it starts running and as it ends (`sqlite3_trace_v2`,
//! `SQLITE_TRACE_STMT` and `SQLITE_TRACE_PROFILE`), and calls a progress handler every few
//! thousand instructions of its virtual machine while one runs: the first two note the start
//! and forget it, the third interrupts a statement running past the limit (`SQLITE_INTERRUPT`,
//! [`super::StoreError::is_timeout`]). All run inside SQLite's calls on the thread stepping the
//! connection (each connection has a worker thread of its own), so the start is kept in that
//! thread's local; a statement whose start was not seen is never cut. As on PostgreSQL, the
//! time of a statement whose rows are streamed runs until its last row is read.

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::time::{Duration, Instant};

use libsqlite3_sys::{SQLITE_TRACE_PROFILE, SQLITE_TRACE_STMT, sqlite3_trace_v2};
use sqlx::SqliteConnection;

/// Instructions between two calls of the progress handler: a tenth of a millisecond or so, at
/// a cost too small to measure.
const INSTRUCTIONS_BETWEEN_CHECKS: i32 = 10_000;

thread_local! {
    /// When the statement this thread is stepping started running.
    static STARTED: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Cuts any statement of `conn` running longer than `limit`.
pub async fn limit(conn: &mut SqliteConnection, limit: Duration) -> Result<(), sqlx::Error> {
    let mut handle = conn.lock_handle().await?;
    // SAFETY: the handle is locked, so no other call is made on the connection meanwhile; the
    // callback reads only the arguments SQLite passes for the two events asked for and needs
    // no context, so nothing is left to free when the connection closes.
    unsafe {
        sqlite3_trace_v2(
            handle.as_raw_handle().as_ptr(),
            SQLITE_TRACE_STMT | SQLITE_TRACE_PROFILE,
            Some(traced),
            std::ptr::null_mut(),
        );
    }
    handle.set_progress_handler(INSTRUCTIONS_BETWEEN_CHECKS, move || {
        STARTED
            .get()
            .is_none_or(|started| started.elapsed() < limit)
    });
    Ok(())
}

/// Lifts `conn`'s limit, for work that may rightly run long (migrations).
pub async fn lift(conn: &mut SqliteConnection) -> Result<(), sqlx::Error> {
    conn.lock_handle().await?.remove_progress_handler();
    Ok(())
}

/// A statement starts running (`SQLITE_TRACE_STMT`) or has ended (`SQLITE_TRACE_PROFILE`). A
/// trigger's program announces its start too, its text a comment (`-- TRIGGER name`): it
/// belongs to the statement already timed.
unsafe extern "C" fn traced(
    kind: c_uint,
    _context: *mut c_void,
    _statement: *mut c_void,
    detail: *mut c_void,
) -> c_int {
    if kind == SQLITE_TRACE_PROFILE {
        STARTED.set(None);
    } else if kind == SQLITE_TRACE_STMT {
        let text = detail.cast::<c_char>().cast_const();
        // SAFETY: for `SQLITE_TRACE_STMT` the detail is the statement's text, a NUL-terminated
        // string; comparing stops at its first byte that differs, the terminator at the latest.
        let trigger = !text.is_null()
            && TRIGGER_PROGRAM
                .iter()
                .enumerate()
                .all(|(i, &byte)| unsafe { *text.add(i) } as u8 == byte);
        if !trigger {
            STARTED.set(Some(Instant::now()));
        }
    }
    0
}

/// How SQLite names a trigger's program in its trace.
const TRIGGER_PROGRAM: &[u8] = b"-- TRIGGER ";
