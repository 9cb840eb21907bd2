//! Free loopback ports.

use std::net::TcpListener;

/// A currently free TCP port on 127.0.0.1 (bind port 0, read it, drop the listener).
///
/// Another process may take it before it is used; that race is accepted (cluster start-up
/// retries with new ports if a node fails to bind).
pub fn free_port() -> u16 {
    free_ports(1)[0]
}

/// `n` distinct free ports: all listeners are held until every port is picked.
pub fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| {
            TcpListener::bind("127.0.0.1:0")
                .unwrap_or_else(|e| panic!("cannot bind 127.0.0.1:0 to pick a free port: {e}"))
        })
        .collect();
    listeners
        .iter()
        .map(|l| {
            l.local_addr()
                .unwrap_or_else(|e| panic!("local_addr of a bound listener: {e}"))
                .port()
        })
        .collect()
}
