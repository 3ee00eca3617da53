//! PostgreSQL's probe: one connection of its own, outside the pool, asked `SELECT 1` every
//! [`PROBE_INTERVAL`](crate::availability::PROBE_INTERVAL); its answer is the database's
//! [`Availability`]. Outside the pool because a pool's acquire retries a refused connection
//! until its own timeout, and because the probe must run while requests are refused.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use sqlx::Connection as _;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use tokio::sync::Mutex;

use crate::availability::{Availability, PROBE_TIMEOUT};

#[derive(Debug)]
pub struct PgProbe {
    options: PgConnectOptions,
    /// Kept between probes; dropped when a probe fails, made again by the next one.
    conn: Mutex<Option<PgConnection>>,
    /// The last probe ran out of time.
    slow: AtomicBool,
}

impl PgProbe {
    pub fn new(options: PgConnectOptions) -> Self {
        Self {
            options,
            conn: Mutex::new(None),
            slow: AtomicBool::new(false),
        }
    }

    /// Asks the database once and records the answer. A refusal or a broken connection
    /// counts at once; an answer that runs out of time counts the second time in a row: on a
    /// busy machine one slow `SELECT 1` is not an outage, and taking it for one would refuse
    /// every request of the instance until the next probe.
    pub async fn run(&self, availability: &Arc<Availability>) {
        match tokio::time::timeout(PROBE_TIMEOUT, self.ask()).await {
            Ok(asked) => {
                self.slow.store(false, Ordering::Relaxed);
                availability.probed(asked.is_ok());
            }
            Err(_) => {
                // A connection that timed out may be half-open: the next probe makes a new one.
                *self.conn.lock().await = None;
                if self.slow.swap(true, Ordering::Relaxed) {
                    availability.probed(false);
                }
            }
        }
    }

    async fn ask(&self) -> Result<(), sqlx::Error> {
        let mut held = self.conn.lock().await;
        if held.is_none() {
            *held = Some(PgConnection::connect_with(&self.options).await?);
        }
        let conn = held.as_mut().expect("made above");
        let asked = sqlx::query("SELECT 1").execute(&mut *conn).await;
        if asked.is_err() {
            *held = None;
        }
        asked.map(|_| ())
    }
}
