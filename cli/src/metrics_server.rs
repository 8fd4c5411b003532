//! `/metrics` over HTTP for `kvtier bench --metrics-addr` (and any long-running command).
//!
//! The listener is bound before [`serve`] returns, so a bad or busy address is an error at
//! once, and the address printed is the one bound (port 0 picks a free port). The server runs
//! on a thread of its own with a one-thread tokio runtime: scrapes never run on an actor's
//! arbiter, and only read the registry (its metrics are atomics).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::routing::get;
use prometheus_client::registry::Registry;

/// A running `/metrics` server; dropping it stops the server.
pub struct MetricsServer {
    /// The address bound.
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Serves `registry` at `http://addr/metrics` until the returned server is dropped.
pub fn serve(addr: SocketAddr, registry: Arc<Registry>) -> Result<MetricsServer, String> {
    let listener = std::net::TcpListener::bind(addr)
        .map_err(|e| format!("--metrics-addr {addr}: cannot listen: {e}"))?;
    let bound = listener
        .local_addr()
        .map_err(|e| format!("--metrics-addr {addr}: {e}"))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("--metrics-addr {addr}: {e}"))?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("kvtier-metrics".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("metrics server: no runtime: {e}");
                    return;
                }
            };
            rt.block_on(async move {
                let listener = match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => l,
                    Err(e) => {
                        eprintln!("metrics server: {e}");
                        return;
                    }
                };
                let app = axum::Router::new().route(
                    "/metrics",
                    get(move || {
                        let registry = registry.clone();
                        async move {
                            (
                                [(
                                    axum::http::header::CONTENT_TYPE,
                                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                                )],
                                kvtier::actors::metrics::encode(&registry),
                            )
                        }
                    }),
                );
                let _ = axum::serve(listener, app)
                    .with_graceful_shutdown(async move {
                        let _ = stopped.await;
                    })
                    .await;
            });
        })
        .map_err(|e| format!("metrics server thread: {e}"))?;
    Ok(MetricsServer {
        addr: bound,
        stop: Some(stop),
        thread: Some(thread),
    })
}

/// Every sample of an exposition as `series → value` (`name{labels}` as written), for JSON.
pub fn samples(text: &str) -> std::collections::BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_owned(), value.parse().ok()?))
        })
        .collect()
}
