//! The RESP listener: accepts clients up to a cap and runs each on its own task.

use crate::connection::Connection;
use crate::metrics::RespMetrics;
use crate::state::Shared;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use trireme_cluster::Node;

/// Most clients connected at once (Redis's default `maxclients`).
const MAX_CONNECTIONS: usize = 10_000;

/// The Redis-protocol server of a node.
pub struct RespServer {
    shared: Arc<Shared>,
}

impl RespServer {
    /// A server for `node`.
    pub fn new(node: Arc<Node>) -> Self {
        let subscribers = Arc::new(crate::pubsub::Subscribers::new(
            node.config().limits.pubsub_buffer_bytes,
        ));
        node.set_message_sink(subscribers.clone());
        Self {
            shared: Arc::new(Shared::new(node, subscribers)),
        }
    }

    /// The server's counters.
    pub fn metrics(&self) -> Arc<RespMetrics> {
        self.shared.metrics.clone()
    }

    /// Serves clients on `listener` until `shutdown` completes; with `tls`, every client
    /// completes a TLS handshake first.
    pub async fn serve(
        self,
        listener: TcpListener,
        tls: Option<Arc<trireme_tls::ServerTls>>,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) {
        let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        tokio::pin!(shutdown);
        loop {
            let permit = tokio::select! {
                _ = &mut shutdown => return,
                permit = permits.clone().acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_) => return,
                },
            };
            let (socket, remote) = tokio::select! {
                _ = &mut shutdown => return,
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        tracing::warn!(error = %e, "resp accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let _ = socket.set_nodelay(true);
            self.shared
                .metrics
                .connections
                .fetch_add(1, Ordering::Relaxed);
            let shared = self.shared.clone();
            let open = OpenConnection::new(shared.metrics.clone());
            let tls = tls.clone();
            tokio::spawn(async move {
                let _permit = permit;
                let _open = open;
                let ended = match tls {
                    None => Connection::new(socket, shared).run().await,
                    Some(tls) => match tls.accept(socket).await {
                        Ok(socket) => Connection::new(socket, shared).run().await,
                        Err(e) => {
                            tracing::warn!(%remote, reason = %e, "refused a RESP TLS connection");
                            return;
                        }
                    },
                };
                if let Err(e) = ended {
                    tracing::debug!(error = %e, "resp connection ended with an error");
                }
            });
        }
    }
}

/// Counts a connection as open for as long as it lives.
struct OpenConnection(Arc<RespMetrics>);

impl OpenConnection {
    fn new(metrics: Arc<RespMetrics>) -> Self {
        metrics.open_connections.fetch_add(1, Ordering::Relaxed);
        Self(metrics)
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.open_connections.fetch_sub(1, Ordering::Relaxed);
    }
}
