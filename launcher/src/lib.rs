//! Starts and stops the pieces of a local wasm-epp setup as plain processes.
//!
//! No Docker engine exists on the machines this project is built on, so `make run`, the
//! end-to-end tests and the benchmarks all start the simulated pods ([`pods`]) and the
//! real Envoy binary ([`envoy`]) themselves on 127.0.0.1, and stop them by process id when
//! the handle is dropped ([`process`]). [`http`] is a small blocking client for checks.

#![forbid(unsafe_code)]

pub mod baseline;
pub mod compose;
pub mod config_watch;
pub mod envoy;
pub mod envoy_options;
pub mod fake_kube;
pub mod http;
pub mod live_config;
pub mod paths;
pub mod pods;
pub mod proc_stats;
pub mod process;
pub mod replicas;

/// A free TCP port on 127.0.0.1 (the OS picks it; it is free when this returns).
pub fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind(("127.0.0.1", 0))?.local_addr()?.port())
}

/// A port on 127.0.0.1 held until dropped, for a server that starts later: [`free_port`]'s
/// port is free only when it returns, and an outgoing connection may take it as its source
/// port before the server binds it (a replica cluster chooses every replica's ports before
/// starting the first: `make test` once failed with "Address already in use").
///
/// The socket is bound with `SO_REUSEADDR` and never listens. While it is bound, Linux
/// gives the port to no outgoing connection and to no other "any free port" bind, and a
/// connection to it is refused, as to a port nobody holds.
#[derive(Debug)]
pub struct PortReservation {
    /// Held for its drop, which frees the port.
    _socket: socket2::Socket,
    port: u16,
}

impl PortReservation {
    pub fn new() -> std::io::Result<Self> {
        use socket2::{Domain, Socket, Type};
        let socket = Socket::new(Domain::IPV4, Type::STREAM, None)?;
        socket.set_reuse_address(true)?;
        let any = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
        socket.bind(&any.into())?;
        let port =
            socket.local_addr()?.as_socket().map(|a| a.port()).ok_or_else(|| std::io::Error::other("no port"))?;
        Ok(Self { _socket: socket, port })
    }

    pub fn port(&self) -> u16 {
        self.port
    }
}

/// Polls `check` every 50 ms until it is true or `timeout` passes.
pub fn wait_until(timeout: std::time::Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if check() {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
