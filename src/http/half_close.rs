//! Ending a WebSocket's TCP connection as soon as its close handshake is over.
//!
//! RFC 6455 (§7.1.1) has the server close the TCP connection first, and clients wait for it:
//! once the close frames have crossed, a client waits for the server's FIN (Python's
//! `websockets` up to 10 s) before it gives up and closes itself. actix never sends that FIN
//! while it lingers after a response (`startup::run` keeps the linger long, so a client that
//! answers late does not meet a reset), so once the server's close frame is out the socket
//! session half-closes the connection itself: FIN now, while actix keeps reading until the
//! client closes its side, which it then does at once.

use std::any::Any;

use actix_web::HttpRequest;
use actix_web::dev::Extensions;

#[cfg(unix)]
mod imp {
    use std::os::fd::{AsRawFd, RawFd};
    use std::rc::{Rc, Weak};

    /// Kept in a connection's data for as long as actix holds the connection.
    pub(super) struct Connection {
        fd: RawFd,
        open: Rc<()>,
    }

    pub(super) fn remember(conn: &dyn std::any::Any) -> Option<Connection> {
        let stream = conn.downcast_ref::<actix_web::rt::net::TcpStream>()?;
        Some(Connection {
            fd: stream.as_raw_fd(),
            open: Rc::new(()),
        })
    }

    /// A socket session's handle on its connection; it does not keep the connection open.
    pub struct HalfClose {
        fd: RawFd,
        open: Weak<()>,
    }

    impl HalfClose {
        pub(super) fn of(connection: &Connection) -> Self {
            Self {
                fd: connection.fd,
                open: Rc::downgrade(&connection.open),
            }
        }

        pub fn shutdown_write(&self) {
            // The connection's data is held by actix's connection and by the requests on it
            // (the upgrade request is gone once its answer's head is out), all on this
            // worker's thread: while the upgrade succeeds, `fd` is still this connection's
            // socket, never a later connection's that reused its number.
            if self.open.upgrade().is_none() {
                return;
            }
            // SAFETY: `shutdown` takes a descriptor open at this point (above) and changes
            // nothing in memory.
            if unsafe { libc::shutdown(self.fd, libc::SHUT_WR) } != 0 {
                tracing::debug!(error = %std::io::Error::last_os_error(), "WebSocket not half-closed");
            }
        }
    }
}

#[cfg(not(unix))]
mod imp {
    pub(super) struct Connection;

    pub(super) fn remember(_conn: &dyn std::any::Any) -> Option<Connection> {
        None
    }

    pub struct HalfClose;

    impl HalfClose {
        pub(super) fn of(_connection: &Connection) -> Self {
            Self
        }

        pub fn shutdown_write(&self) {}
    }
}

pub use imp::HalfClose;

/// The server's `on_connect` hook: notes each TCP connection's socket.
pub fn remember(conn: &dyn Any, data: &mut Extensions) {
    if let Some(connection) = imp::remember(conn) {
        data.insert(connection);
    }
}

/// The handle of the connection `req` came on (`None` off TCP, or on another platform).
pub fn of(req: &HttpRequest) -> Option<HalfClose> {
    req.conn_data::<imp::Connection>().map(HalfClose::of)
}
