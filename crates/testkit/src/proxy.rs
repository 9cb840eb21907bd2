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
    mode: watch::Sender<Mode>,
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
        let generation = Arc::new(std::sync::Mutex::new(CancellationToken::new()));
        let stop = CancellationToken::new();
        let accept_task = tokio::spawn(accept_loop(
            listener,
            upstream,
            mode_rx,
            generation.clone(),
            stop.clone(),
        ));
        Proxy {
            addr,
            mode,
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

async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    mode: watch::Receiver<Mode>,
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
        tokio::spawn(connection(client, upstream, mode.clone(), cancel));
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
    let up = pipe(client_r, server_w, Dir::Up, mode.clone());
    let down = pipe(server_r, client_w, Dir::Down, mode);
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
        while let Some((read_at, chunk)) = rx.recv().await {
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
