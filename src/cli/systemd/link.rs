//! The way to systemd: the fields of a notification ([`State`]) and [`Link`], through which
//! every notification goes, in order, to one task that sends it with the `sd-notify` crate.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use sd_notify::NotifyState;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::warn;

use super::status_line::one_line;

/// One field of a notification.
#[derive(Debug, Clone)]
pub(crate) enum State {
    Ready,
    Stopping,
    Watchdog,
    Status(String),
    ExtendTimeout(Duration),
}

impl State {
    fn as_notify(&self) -> NotifyState<'_> {
        match self {
            Self::Ready => NotifyState::Ready,
            Self::Stopping => NotifyState::Stopping,
            Self::Watchdog => NotifyState::Watchdog,
            Self::Status(line) => NotifyState::Status(line),
            Self::ExtendTimeout(d) => {
                NotifyState::ExtendTimeoutUsec(u32::try_from(d.as_micros()).unwrap_or(u32::MAX))
            }
        }
    }
}

/// The way to the sending task: every notification goes through it, in order.
#[derive(Clone)]
pub(crate) struct Link {
    tx: mpsc::UnboundedSender<Vec<State>>,
    /// The last `STATUS=` sent (a line is sent only when it differs).
    last_status: Arc<Mutex<String>>,
}

impl Link {
    /// A link and its sending task (which ends once every clone of the link is dropped and the
    /// queue is sent).
    pub(crate) fn open() -> (Self, JoinHandle<()>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let link = Self {
            tx,
            last_status: Arc::new(Mutex::new(String::new())),
        };
        (link, tokio::spawn(transmit(rx)))
    }

    /// Sends one notification (its fields in one datagram).
    pub(crate) fn send(&self, states: Vec<State>) {
        let _ = self.tx.send(states);
    }

    /// Sends `STATUS=line` (made one bounded line), unless it is the one sent last and `with`
    /// is empty; `with` goes in the same datagram, before it, and is sent in any case.
    pub(crate) fn status_with(&self, mut with: Vec<State>, line: &str) {
        let line = one_line(line);
        let mut last = self
            .last_status
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // A state change (`READY=1`, `STOPPING=1`) always carries the line, also when it did
        // not change since the last datagram: the datagram says why.
        if *last != line || !with.is_empty() {
            last.clone_from(&line);
            with.push(State::Status(line));
        }
        drop(last);
        if !with.is_empty() {
            self.send(with);
        }
    }

    pub(crate) fn status(&self, line: &str) {
        self.status_with(Vec::new(), line);
    }
}

/// Sends every queued notification, in order, until the channel closes. A send blocks on the
/// socket, so it runs on the blocking pool; a failure is logged once (`run` goes on).
async fn transmit(mut rx: mpsc::UnboundedReceiver<Vec<State>>) {
    let mut warned = false;
    while let Some(states) = rx.recv().await {
        let sent = tokio::task::spawn_blocking(move || {
            let fields: Vec<NotifyState<'_>> = states.iter().map(State::as_notify).collect();
            sd_notify::notify(&fields)
        })
        .await;
        let error = match sent {
            Ok(Ok(())) => continue,
            Ok(Err(e)) => e.to_string(),
            Err(e) => e.to_string(),
        };
        if !std::mem::replace(&mut warned, true) {
            warn!(
                %error,
                "cannot send to systemd's notification socket (NOTIFY_SOCKET); going on without"
            );
        }
    }
}
