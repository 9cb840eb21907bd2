//! An in-test TCP proxy between NATS clients and a server, for network faults.
//!
//! [`Proxy::start`] listens on a free loopback port and forwards every accepted connection to
//! an upstream address. Its [`Mode`] can be switched at any time and applies to every live and
//! future connection:
//!
//! * [`Mode::Pass`] — forward bytes as they come.
//! * [`Mode::Stall`] — a partition: bytes in both directions are read and **held**; they are
//!   delivered, in order, when the mode changes back ("healing"). That is how a write sent
//!   during a partition commits late.
//! * [`Mode::OneWay`] — only one direction is held (e.g. requests reach the server, replies
//!   do not).
//! * [`Mode::Delay`] — every chunk is delivered `d` after it was read (order kept).
//!
//! [`Proxy::hold_up_from`] arms a trigger: the first client→server chunk that contains a byte
//! pattern (e.g. the `PUB` line of one key's write) switches the proxy to
//! `OneWay(Dir::Up)` **at that point** — the bytes before the pattern are delivered, the
//! pattern and everything after it held — so one chosen request is stalled with all that
//! follows it until the test heals the link ([`Proxy::set_mode`]). [`Proxy::tripped`] waits
//! for it. The pattern is searched per chunk read (a pattern split across two reads is
//! missed: the test must check that the trigger tripped).
//!
//! [`Proxy::reset`] closes every live connection with a TCP RST (both sides see a reset);
//! clients reconnect through the proxy. Dropping the proxy stops it and closes everything.
//!
//! Data are read eagerly into per-direction queues whatever the mode, so a held direction
//! never back-pressures the sender: the client's writes "succeed" and wait in the proxy, like
//! packets queued in a congested network.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Which way bytes flow through the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// From the client (NATS library) to the server: publishes, requests.
    Up,
    /// From the server to the client: acknowledgements, watcher messages.
    Down,
}

/// How the proxy treats bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Forward at once.
    Pass,
    /// Hold both directions until the mode changes.
    Stall,
    /// Hold the given direction; the other passes.
    OneWay(Dir),
    /// Deliver each chunk this long after it was read.
    Delay(Duration),
}

impl Mode {
    /// Whether bytes flowing in `dir` are held.
    fn holds(self, dir: Dir) -> bool {
        match self {
            Mode::Stall => true,
            Mode::OneWay(held) => held == dir,
            Mode::Pass | Mode::Delay(_) => false,
        }
    }

    fn delay(self) -> Duration {
        match self {
            Mode::Delay(d) => d,
            _ => Duration::ZERO,
        }
    }
}

/// A TCP proxy on 127.0.0.1 with switchable faults (see the module docs).
pub struct Proxy {
    addr: SocketAddr,
    mode: Arc<watch::Sender<Mode>>,
    trigger: Arc<Trigger>,
    /// Cancelled to close every live connection (replaced by a fresh one on reset).
    generation: Arc<std::sync::Mutex<CancellationToken>>,
    stop: CancellationToken,
    accept_task: JoinHandle<()>,
}

impl Proxy {
    /// Starts a proxy in [`Mode::Pass`] forwarding to `upstream` (e.g. `127.0.0.1:4222`).
    /// Panics if it cannot bind a loopback port.
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("proxy: cannot bind 127.0.0.1:0: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("proxy: local_addr: {e}"));
        let (mode, mode_rx) = watch::channel(Mode::Pass);
        let mode = Arc::new(mode);
        let trigger = Arc::new(Trigger::default());
        let generation = Arc::new(std::sync::Mutex::new(CancellationToken::new()));
        let stop = CancellationToken::new();
        let accept_task = tokio::spawn(accept_loop(
            listener,
            upstream,
            mode_rx,
            Armed {
                mode: mode.clone(),
                trigger: trigger.clone(),
            },
            generation.clone(),
            stop.clone(),
        ));
        Proxy {
            addr,
            mode,
            trigger,
            generation,
            stop,
            accept_task,
        }
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `nats://<addr>` for a NATS client.
    pub fn url(&self) -> String {
        format!("nats://{}", self.addr)
    }

    /// The current mode.
    pub fn mode(&self) -> Mode {
        *self.mode.borrow()
    }

    /// Switches the mode for every live and future connection. Switching to
    /// [`Mode::Pass`] releases held bytes in order.
    pub fn set_mode(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }

    /// Arms the trigger (see the module docs): the first client→server chunk containing
    /// `pattern` switches the proxy to `OneWay(Dir::Up)` from the pattern on. Replaces an
    /// armed trigger that has not tripped.
    pub fn hold_up_from(&self, pattern: &[u8]) {
        *self
            .trigger
            .pattern
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(pattern.to_vec());
    }

    /// Waits until the trigger armed by [`Proxy::hold_up_from`] tripped (at once if it did).
    pub async fn tripped(&self) {
        let mut rx = self.trigger.tripped.subscribe();
        let _ = rx.wait_for(|t| *t).await;
    }

    /// Closes every live connection with a TCP reset (held bytes are discarded). New
    /// connections are accepted as before.
    pub fn reset(&self) {
        let mut generation = self
            .generation
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        generation.cancel();
        *generation = CancellationToken::new();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.cancel();
        self.reset();
        self.accept_task.abort();
    }
}

/// The pattern trigger of [`Proxy::hold_up_from`].
#[derive(Default)]
struct Trigger {
    pattern: std::sync::Mutex<Option<Vec<u8>>>,
    tripped: watch::Sender<bool>,
}

impl Trigger {
    /// Where the armed pattern starts in `chunk`; disarms the trigger when found.
    fn find(&self, chunk: &[u8]) -> Option<usize> {
        let mut armed = self
            .pattern
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let pattern = armed.as_deref()?;
        let at = chunk
            .windows(pattern.len().max(1))
            .position(|w| w == pattern)?;
        *armed = None;
        Some(at)
    }
}

/// What the client→server writer needs to trip the trigger.
#[derive(Clone)]
struct Armed {
    mode: Arc<watch::Sender<Mode>>,
    trigger: Arc<Trigger>,
}

async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    mode: watch::Receiver<Mode>,
    armed: Armed,
    generation: Arc<std::sync::Mutex<CancellationToken>>,
    stop: CancellationToken,
) {
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => return,
            a = listener.accept() => a,
        };
        let Ok((client, _)) = accepted else {
            // Transient accept errors (e.g. EMFILE): try again shortly.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let cancel = generation
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .child_token();
        tokio::spawn(connection(
            client,
            upstream,
            mode.clone(),
            armed.clone(),
            cancel,
        ));
    }
}

/// Forwards one connection until either side closes or `cancel` fires.
///
/// Both sockets get a zero linger, so closing them sends a TCP reset: a [`Proxy::reset`], and
/// one side going away, look to the other side like a broken connection.
async fn connection(
    client: TcpStream,
    upstream: SocketAddr,
    mode: watch::Receiver<Mode>,
    armed: Armed,
    cancel: CancellationToken,
) {
    let _ = client.set_zero_linger();
    let server = tokio::select! {
        () = cancel.cancelled() => None,
        s = TcpStream::connect(upstream) => s.ok(),
    };
    // Upstream down (e.g. the server is killed): the client sees a reset.
    let Some(server) = server else { return };
    let _ = server.set_zero_linger();
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_r, client_w) = client.into_split();
    let (server_r, server_w) = server.into_split();
    let up = pipe(client_r, server_w, Dir::Up, mode.clone(), Some(armed));
    let down = pipe(server_r, client_w, Dir::Down, mode, None);
    // When one direction ends (EOF after delivering what it read, or an error), the whole
    // connection is dropped, which resets both sockets.
    tokio::select! {
        () = cancel.cancelled() => {}
        () = up => {}
        () = down => {}
    }
}

/// One direction: a reader filling a queue, a writer draining it as the mode allows.
/// Returns when the source reached EOF and everything read was delivered, or on an error.
async fn pipe(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    dir: Dir,
    mut mode: watch::Receiver<Mode>,
    armed: Option<Armed>,
) {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let reader = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if tx.send((Instant::now(), buf[..n].to_vec())).is_err() {
                        return;
                    }
                }
            }
        }
    };
    let writer = async {
        while let Some((read_at, mut chunk)) = rx.recv().await {
            // The trigger: deliver what precedes the pattern, hold the rest.
            if let Some(armed) = &armed
                && !mode.borrow().holds(dir)
                && let Some(at) = armed.trigger.find(&chunk)
            {
                if to.write_all(&chunk[..at]).await.is_err() {
                    return;
                }
                chunk.drain(..at);
                armed.mode.send_replace(Mode::OneWay(Dir::Up));
                armed.trigger.tripped.send_replace(true);
            }
            // Hold while the mode holds this direction, then apply its delay.
            if mode.wait_for(|m| !m.holds(dir)).await.is_err() {
                return;
            }
            let delay = mode.borrow().delay();
            tokio::time::sleep_until(read_at + delay).await;
            // The mode may have switched to a holding one during the delay.
            if mode.wait_for(|m| !m.holds(dir)).await.is_err() {
                return;
            }
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
    };
    tokio::pin!(reader, writer);
    // The writer ends after the reader ended (queue closed) and the queue drained, or on a
    // write error; the reader ending alone lets the writer drain what was read.
    let mut reader_done = false;
    loop {
        tokio::select! {
            () = &mut reader, if !reader_done => reader_done = true,
            () = &mut writer => return,
        }
    }
}
