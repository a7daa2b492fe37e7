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
pub mod filter_file;
pub mod http;
pub mod inference_perf;
pub mod live_config;
pub mod paths;
pub mod pods;
pub mod proc_stats;
pub mod process;
pub mod render;
pub mod replicas;
pub mod run_setup;

/// Ports handed out lie between this and the start of the kernel's ephemeral range: no
/// outgoing connection ever takes one as its source port (Linux picks those from the
/// ephemeral range only), so a port chosen now is still free when its server binds it.
const LOW_PORTS_FLOOR: u16 = 10_000;

/// A free TCP port on 127.0.0.1 (free when this returns). Below the ephemeral range when
/// there is room for one (see [`LOW_PORTS_FLOOR`]), else the OS's choice.
pub fn free_port() -> std::io::Result<u16> {
    next_low_port(|port| std::net::TcpListener::bind(("127.0.0.1", port)).map(|_| port))
        .map_or_else(|| Ok(std::net::TcpListener::bind(("127.0.0.1", 0))?.local_addr()?.port()), Ok)
}

/// What `try_bind` makes of the next port below the ephemeral range it can take. Each call
/// goes on from the last, from a random start per process, so two threads of one process
/// never get the same port and two processes rarely try the same ones.
fn next_low_port<T>(mut try_bind: impl FnMut(u16) -> std::io::Result<T>) -> Option<T> {
    use std::hash::BuildHasher;
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    static START: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    let ceiling = ephemeral_range_start().unwrap_or(32_768);
    let span = u32::from(ceiling.checked_sub(LOW_PORTS_FLOOR).filter(|&n| n >= 1_000)?);
    // RandomState's keys are random per process: a start no other process shares.
    let start = *START.get_or_init(|| (std::collections::hash_map::RandomState::new().hash_one(0u8) as u32) % span);
    (0..256).find_map(|_| {
        let offset = start.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed)) % span;
        try_bind(LOW_PORTS_FLOOR + u16::try_from(offset).ok()?).ok()
    })
}

/// The first port of the kernel's ephemeral range (`net.ipv4.ip_local_port_range`).
fn ephemeral_range_start() -> Option<u16> {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    range.split_whitespace().next()?.parse().ok()
}

/// A port on 127.0.0.1 held until dropped, for a server that starts later (a replica
/// cluster chooses every replica's ports before starting the first, so each one's peer list
/// can name the others). Taken as [`free_port`] takes one, so no outgoing connection can
/// take it first; held besides against "any free port" binds of other programs.
///
/// The socket is bound with `SO_REUSEADDR` and never listens, so the server can bind the
/// port while it is held, and a connection to it is refused, as to a port nobody holds.
#[derive(Debug)]
pub struct PortReservation {
    /// Held for its drop, which frees the port.
    _socket: socket2::Socket,
    port: u16,
}

impl PortReservation {
    pub fn new() -> std::io::Result<Self> {
        use socket2::{Domain, Socket, Type};
        let bound = |port: u16| -> std::io::Result<Socket> {
            let socket = Socket::new(Domain::IPV4, Type::STREAM, None)?;
            socket.set_reuse_address(true)?;
            socket.bind(&std::net::SocketAddr::from(([127, 0, 0, 1], port)).into())?;
            Ok(socket)
        };
        let socket = match next_low_port(bound) {
            Some(socket) => socket,
            None => bound(0)?,
        };
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_lie_below_the_ephemeral_range_and_are_never_handed_out_twice() {
        let ceiling = ephemeral_range_start().unwrap_or(32_768);
        let ports: Vec<u16> = (0..64).map(|_| free_port().unwrap()).collect();
        let held: Vec<u16> = (0..16).map(|_| PortReservation::new().unwrap().port()).collect();
        if ceiling >= LOW_PORTS_FLOOR + 1_000 {
            assert!(ports.iter().chain(&held).all(|p| (LOW_PORTS_FLOOR..ceiling).contains(p)), "{ports:?} {held:?}");
        }
        let mut all: Vec<u16> = ports.iter().chain(&held).copied().collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 80, "no port twice");
    }

    #[test]
    fn a_port_that_cannot_be_bound_is_skipped() {
        let mut tried = Vec::new();
        let chosen = next_low_port(|port| {
            tried.push(port);
            if tried.len() < 3 {
                Err(std::io::Error::from(std::io::ErrorKind::AddrInUse))
            } else {
                Ok(port)
            }
        });
        if ephemeral_range_start().unwrap_or(32_768) >= LOW_PORTS_FLOOR + 1_000 {
            assert_eq!(chosen, tried.last().copied());
            assert_eq!(tried.len(), 3, "two busy ports skipped: {tried:?}");
        }
    }
}
