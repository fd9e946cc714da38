//! `/metrics` over TCP (`--metrics HOST:PORT`), where Prometheus scrapes
//! it: only `GET /metrics` is answered; the rest of the control API stays
//! on the owner-only socket.

use crate::metrics::Metrics;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use tiny_http::Method;

/// Why `/metrics` cannot be served where asked.
#[derive(Debug, thiserror::Error)]
#[error("Cannot serve /metrics at {addr}: {why}")]
pub struct MetricsError {
    addr: String,
    why: String,
}

/// A `/metrics` listener; dropping it stops it.
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Serves `metrics` at `addr` (`host:port`, port 0 picks one).
    pub fn start(addr: &str, metrics: Metrics) -> Result<MetricsServer, MetricsError> {
        let err = |why: String| MetricsError { addr: addr.to_string(), why };
        let server = tiny_http::Server::http(addr).map_err(|e| err(e.to_string()))?;
        let bound = server.server_addr().to_ip().ok_or_else(|| err("not an IP address".into()))?;
        let stop = Arc::new(AtomicBool::new(false));
        let mine = stop.clone();
        let thread = std::thread::Builder::new()
            .name("pvgpu-metrics".into())
            .spawn(move || serve(&server, &metrics, &mine))
            .map_err(|e| err(e.to_string()))?;
        tracing::info!(address = %bound, "serving /metrics");
        Ok(MetricsServer { addr: bound, stop, thread: Some(thread) })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(server: &tiny_http::Server, metrics: &Metrics, stop: &AtomicBool) {
    // One scrape at a time: a slow scraper delays only the next scrape.
    super::each_request(server, stop, "/metrics", |request| {
        let path = request.url().split('?').next().unwrap_or("");
        let (status, body, kind) = match (request.method(), path) {
            (Method::Get, "/metrics") => super::routes::render_metrics(metrics),
            _ => (404, b"only GET /metrics is served here\n".to_vec(), "text/plain"),
        };
        super::routes::respond(request, status, body, kind);
    });
}
