//! Test kit of nats-roles: real `nats-server` processes, `nats-roles` processes, a fault-injecting
//! TCP proxy and an HTTP client, shared by the integration tests (`tests/`), the examples and the
//! benchmarks. Not published.
//!
//! * [`NatsServer`]: one JetStream server on loopback, with its store in a temporary
//!   directory; it can be killed (SIGKILL), restarted on the same port with the same store,
//!   paused (SIGSTOP) and resumed (SIGCONT).
//! * [`NatsCluster`]: a JetStream cluster (normally 3 nodes, `n1`..`n3`) on loopback, with the
//!   same per-node controls.
//! * [`connect`]: an `async_nats` client with a short initial retry and fast reconnects.
//! * [`instances`]: `nats-roles run` processes with their dashboards; [`placement`]: the
//!   placement scenarios; [`faults`]: the chaos suite's workload nodes and harness log.
//! * [`proxy`]: a TCP proxy that can delay, drop or cut traffic.
//! * [`http`]: an HTTP client; [`tcp`]: raw HTTP bytes (up to an SSE `hello`, or until the
//!   server closes) for tests of malformed or slow requests.
//!
//! The server binary comes from [`nats_server_bin`]: `NATS_SERVER_BIN`, else
//! `.tools/bin/nats-server` (installed by `scripts/install-tools.sh`), else a recent enough
//! `nats-server` on `PATH`. Without one the tests panic: they never skip silently.
//!
//! Every server's stdout/stderr goes to `nats-server.log` in its temporary directory. A start
//! that does not become ready panics with the tail of that log, and a server dropped while
//! the test is panicking prints its log tail to stderr (shown with the failed test).
//!
//! Processes are killed (SIGKILL) and reaped on `Drop`, also while unwinding from a panic. They
//! share the test process's process group, so nextest's timeout handling and Ctrl-C reach
//! them too; only a SIGKILL of the test process alone leaves them running.

pub mod bench;
pub mod bins;
pub mod cli;
pub mod client;
pub mod cluster;
pub mod faults;
pub mod http;
pub mod instances;
pub mod placement;
pub mod ports;
pub mod process;
pub mod proxy;
pub mod roles;
pub mod server;
pub mod sites;
pub mod tcp;
pub mod wait;

pub use bins::{example_bin, nats_roles_bin, nats_server_bin, repo_root};
pub use client::{
    connect, connect_with, connect_with_events, create_kv, server_and_client, wait_event,
};
pub use cluster::NatsCluster;
pub use ports::{free_port, free_ports};
pub use server::NatsServer;
pub use wait::eventually;
