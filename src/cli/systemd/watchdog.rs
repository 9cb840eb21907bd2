//! systemd's watchdog for `run`: `WATCHDOG=1` every half of `WATCHDOG_USEC`, each one only after
//! every task of the manager answered a liveness probe ([`RoleManager::probe`]) — a wedged
//! manager stops the pings and systemd restarts it, whatever the rest of the process does.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::{error, warn};

use super::link::{Link, State};
use crate::RoleManager;
use crate::error::Error;

/// The longest a task of the manager may legitimately take to answer a probe (a role runner
/// waits up to 5 s for a start of its `exec` child when it is demoted), plus a margin: a
/// `WatchdogSec` below twice this may restart a manager that is only busy.
pub(crate) const SLOWEST_ANSWER: Duration = Duration::from_secs(10);

/// Every `period` (half of `WATCHDOG_USEC`): probes the manager and sends `WATCHDOG=1` once
/// every task answered. A probe not answered within `period` sends nothing and is asked again,
/// so the next ping goes out as soon as the manager answers; one that stays unanswered for a
/// whole `WatchdogSec` since the last ping gets the service restarted by systemd.
pub(super) async fn run(manager: Arc<RoleManager>, period: Duration, link: Link) {
    let mut silent_since: Option<Instant> = None;
    loop {
        let asked = Instant::now();
        match manager.probe(period).await {
            Ok(()) => {
                if let Some(since) = silent_since.take() {
                    warn!(
                        after_ms = since.elapsed().as_millis(),
                        "the manager answers its liveness probe again: WATCHDOG=1 resumed"
                    );
                }
                link.send(vec![State::Watchdog]);
                tokio::time::sleep_until(asked + period).await;
            }
            Err(Error::Stopped) => return,
            Err(e) => {
                let since = *silent_since.get_or_insert(asked);
                error!(
                    error = %e,
                    silent_ms = since.elapsed().as_millis(),
                    "the manager is wedged: WATCHDOG=1 withheld (systemd restarts the service \
                     once WatchdogSec passes without one)"
                );
                // A task that ended answers at once: do not ask more often than every period.
                tokio::time::sleep_until(asked + period).await;
            }
        }
    }
}
