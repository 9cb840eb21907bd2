//! A unix datagram socket bound by a test as systemd's `NOTIFY_SOCKET` (docs/deploy.md):
//! what `nats-roles run` notifies — `READY=1`, `STATUS=`, `WATCHDOG=1`, `STOPPING=1` — each
//! datagram recorded with the instant it arrived.

use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use testkit::instances::Deployment;

/// One datagram received on the test's notification socket: when, and its fields.
#[derive(Debug, Clone)]
pub(crate) struct Datagram {
    pub(crate) at: Instant,
    pub(crate) fields: Vec<String>,
}

impl Datagram {
    pub(crate) fn has(&self, field: &str) -> bool {
        self.fields.iter().any(|f| f == field)
    }

    /// The value of `KEY=` in it.
    pub(crate) fn value(&self, key: &str) -> Option<&str> {
        self.fields
            .iter()
            .find_map(|f| f.strip_prefix(key)?.strip_prefix('='))
    }
}

/// A unix datagram socket bound in a temporary directory, as systemd's `NOTIFY_SOCKET`: a
/// thread records every datagram until the socket is dropped.
pub(crate) struct NotifySocket {
    path: PathBuf,
    received: Arc<Mutex<Vec<Datagram>>>,
    stop: Arc<AtomicBool>,
    reader: Option<std::thread::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl NotifySocket {
    pub(crate) fn bind() -> NotifySocket {
        let dir = tempfile::Builder::new()
            .prefix("nats-roles-notify-")
            .tempdir()
            .expect("temporary directory");
        let path = dir.path().join("notify.sock");
        let socket = UnixDatagram::bind(&path).expect("bind the notification socket");
        socket
            .set_read_timeout(Some(Duration::from_millis(50)))
            .expect("read timeout");
        let received = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let reader = std::thread::spawn({
            let received = received.clone();
            let stop = stop.clone();
            move || {
                let mut buf = vec![0u8; 8192];
                while !stop.load(Ordering::Relaxed) {
                    let Ok(n) = socket.recv(&mut buf) else {
                        continue;
                    };
                    let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                    let fields = text.lines().map(str::to_owned).collect();
                    received
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(Datagram {
                            at: Instant::now(),
                            fields,
                        });
                }
            }
        });
        NotifySocket {
            path,
            received,
            stop,
            reader: Some(reader),
            _dir: dir,
        }
    }

    pub(crate) fn path(&self) -> &str {
        self.path.to_str().expect("UTF-8 path")
    }

    pub(crate) fn all(&self) -> Vec<Datagram> {
        self.received
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Every datagram so far, one per line, for failure messages.
    pub(crate) fn text(&self) -> String {
        let all = self.all();
        let Some(first) = all.first().map(|d| d.at) else {
            return "(nothing received)".to_owned();
        };
        all.iter()
            .map(|d| {
                format!(
                    "{:8.3} s  {}",
                    d.at.duration_since(first).as_secs_f64(),
                    d.fields.join(" | ")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The `STATUS=` values so far.
    pub(crate) fn statuses(&self) -> Vec<String> {
        self.all()
            .iter()
            .filter_map(|d| d.value("STATUS").map(str::to_owned))
            .collect()
    }

    /// Datagrams with `field` (e.g. `WATCHDOG=1`).
    pub(crate) fn with(&self, field: &str) -> Vec<Datagram> {
        self.all().into_iter().filter(|d| d.has(field)).collect()
    }

    /// Waits for the first datagram that satisfies `cond`; panics with everything received and
    /// the deployment's output after `limit`.
    pub(crate) async fn wait(
        &self,
        d: &Deployment,
        limit: Duration,
        what: &str,
        cond: impl Fn(&Datagram) -> bool,
    ) -> Datagram {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(found) = self.all().into_iter().find(|x| cond(x)) {
                return found;
            }
            assert!(
                Instant::now() < deadline,
                "no datagram {what} within {limit:?}; received:\n{}\n{}",
                self.text(),
                d.report()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for NotifySocket {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

impl NotifySocket {
    /// Datagrams with a field that starts with `prefix`.
    pub(crate) fn with_prefix(&self, prefix: &str) -> Vec<Datagram> {
        self.all()
            .into_iter()
            .filter(|d| d.fields.iter().any(|f| f.starts_with(prefix)))
            .collect()
    }
}
