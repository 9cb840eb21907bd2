//! The HTTP listener of `nats-roles run`: address from `--http`, else `http.listen`, else the
//! default with a fallback to any free loopback port.

use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use crate::config::{DEFAULT_HTTP_LISTEN, HttpConfig};
use tokio::net::TcpListener;

use super::outcome::Failure;

/// A bound listener and how to reach it.
pub(crate) struct Bound {
    pub(crate) listener: TcpListener,
    /// URL to open on this host.
    pub(crate) local_url: String,
    /// URL other hosts can use, when the address says it (not for 0.0.0.0 / [::]).
    pub(crate) advertise: Option<String>,
}

/// Binds the dashboard's listener; `None` when HTTP is off.
pub(crate) async fn bind(
    config: &HttpConfig,
    flag: Option<SocketAddr>,
    disabled: bool,
) -> Result<Option<Bound>, Failure> {
    if disabled || (flag.is_none() && !config.enabled) {
        return Ok(None);
    }
    let listener = match flag.or_else(|| config.listen_addr()) {
        Some(addr) => TcpListener::bind(addr).await.map_err(|e| {
            Failure::Runtime(format!(
                "cannot listen for HTTP on {addr}: {e} (choose another address with --http \
                 ADDR or http.listen, or turn HTTP off with --no-http)"
            ))
        })?,
        None => match TcpListener::bind(DEFAULT_HTTP_LISTEN).await {
            Ok(l) => l,
            Err(e) if e.kind() == ErrorKind::AddrInUse => {
                let fallback = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
                let l = TcpListener::bind(fallback).await.map_err(|e| {
                    Failure::Runtime(format!("cannot listen for HTTP on {fallback}: {e}"))
                })?;
                tracing::warn!(
                    default = DEFAULT_HTTP_LISTEN,
                    "the default HTTP address is in use (another instance on this host?); \
                     listening on a free loopback port instead (set http.listen or --http)"
                );
                l
            }
            Err(e) => {
                return Err(Failure::Runtime(format!(
                    "cannot listen for HTTP on {DEFAULT_HTTP_LISTEN}: {e} (set http.listen or \
                     --http ADDR, or --no-http)"
                )));
            }
        },
    };
    let addr = listener
        .local_addr()
        .map_err(|e| Failure::Runtime(format!("HTTP listener has no address: {e}")))?;
    let local = if addr.ip().is_unspecified() {
        let ip = match addr.ip() {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
        };
        SocketAddr::new(ip, addr.port())
    } else {
        addr
    };
    Ok(Some(Bound {
        listener,
        local_url: format!("http://{local}/"),
        advertise: (!addr.ip().is_unspecified()).then(|| format!("http://{addr}/")),
    }))
}
