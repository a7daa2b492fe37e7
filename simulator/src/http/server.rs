//! Binding a pod to its port and serving HTTP/1.1 connections until shutdown.
//!
//! Used by the binary (one pod per `--ports` entry), by the calibration and by tests (port 0,
//! an ephemeral port). Shutdown stops accepting at once and gives open connections
//! [`SHUTDOWN_GRACE`] to finish before they are dropped, so SIGTERM exits promptly even with
//! streams open.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::router;
use crate::config::PodConfig;
use crate::pod::{run_step_loop, Pod};

/// How long open connections may run after shutdown starts.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);
/// Pause after a failed `accept` (e.g. out of file descriptors) so the loop does not spin.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(50);

/// A pod serving on its port.
#[derive(Debug)]
pub struct RunningPod {
    /// The bound address.
    pub addr: SocketAddr,
    /// The pod (for in-process inspection by tests and the calibration).
    pub pod: Arc<Pod>,
    shutdown: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl RunningPod {
    /// `http://host:port`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting, lets connections finish (up to the grace period), and waits.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        let _ = self.task.await;
    }
}

/// Validates `config`, binds `host:port` (0 = ephemeral) and starts serving in the background.
pub async fn spawn_pod(mut config: PodConfig) -> Result<RunningPod, String> {
    config.validate()?;
    let listener = TcpListener::bind((config.host.as_str(), config.port))
        .await
        .map_err(|error| format!("cannot bind {}:{}: {error}", config.host, config.port))?;
    let addr = listener.local_addr().map_err(|error| format!("cannot read the bound address: {error}"))?;
    config.port = addr.port();
    let pod = Arc::new(Pod::new(config));
    let (shutdown, shutdown_signal) = watch::channel(false);
    let task = tokio::spawn(serve(Arc::clone(&pod), listener, shutdown_signal));
    Ok(RunningPod { addr, pod, shutdown, task })
}

async fn serve(pod: Arc<Pod>, listener: TcpListener, mut shutdown: watch::Receiver<bool>) {
    let graceful = GracefulShutdown::new();
    // The engine loop outlives the listener so open streams finish during the grace period.
    let (stop_steps, steps_stopped) = watch::channel(false);
    let step_loop = tokio::spawn(run_step_loop(Arc::clone(&pod), steps_stopped));
    // Runs until shutdown; each pass accepts one connection or sees the shutdown signal.
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    // Token-by-token streaming needs small writes to leave at once.
                    let _ = stream.set_nodelay(true);
                    let pod = Arc::clone(&pod);
                    let service = service_fn(move |request| {
                        let pod = Arc::clone(&pod);
                        async move { Ok::<_, Infallible>(router::handle(pod, request).await) }
                    });
                    let connection = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
                    let watched = graceful.watch(connection);
                    tokio::spawn(async move {
                        // Client resets and aborted streams end up here; nothing to do.
                        let _ = watched.await;
                    });
                }
                Err(error) => {
                    eprintln!("vllm-sim {}: accept failed: {error}", pod.served_by());
                    tokio::time::sleep(ACCEPT_ERROR_BACKOFF).await;
                }
            },
            _ = shutdown.changed() => break,
        }
    }
    drop(listener);
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown()).await;
    let _ = stop_steps.send(true);
    let _ = step_loop.await;
}
