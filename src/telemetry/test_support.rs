//! What the telemetry tests share: a runtime, a port nobody listens on, and the log lines
//! written while a closure runs.

use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};

/// A `tracing` writer collecting everything into a buffer.
#[derive(Clone, Default)]
pub(super) struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// Runs `f` with a subscriber (no colours) writing into this buffer.
    pub(super) fn during<R>(&self, f: impl FnOnce() -> R) -> R {
        let subscriber = tracing_subscriber::fmt()
            .with_writer({
                let logs = self.clone();
                move || logs.clone()
            })
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, f)
    }

    /// What was written so far.
    pub(super) fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(PoisonError::into_inner)).into_owned()
    }
}

/// A multi-thread runtime with one worker (the SDK exports from threads outside it).
pub(super) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime")
}

/// A local port that was free a moment ago (nothing listens on it).
pub(super) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}
