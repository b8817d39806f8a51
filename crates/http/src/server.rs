//! The HTTP listener: axum routes served by hyper with a header-read timeout and a cap on
//! open connections, so slow or idle clients cannot starve the others.

use crate::AppState;
use crate::routes::{acl, admin, backup, documents, kv, metrics, session, status, txn, ui};
use crate::state::{HttpMetrics, OpenConnection};
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::response::Response;
use axum::routing::{any, get, post, put};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::util::MapResponseLayer;

/// Listener settings.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Longest time a client may take to send the request headers.
    pub header_read_timeout: Duration,
    /// Most connections open at once; further ones wait to be accepted.
    pub max_connections: usize,
    /// Where to count open connections (`/metrics`), usually the router state's counters.
    pub metrics: Option<Arc<HttpMetrics>>,
    /// HTTPS: every connection completes a TLS handshake first (`[tls]`).
    pub tls: Option<Arc<trireme_tls::ServerTls>>,
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            // Each Consul blocking query holds a connection while it waits.
            max_connections: 32_768,
            metrics: None,
            tls: None,
        }
    }
}

/// The routes, for serving or for in-process tests.
pub fn router(state: AppState) -> Router {
    let body_limit = state.node.config().limits.max_body_bytes();
    let routes = Router::new()
        .route("/v1/kv", get(kv::get).put(kv::put).delete(kv::delete))
        .route("/v1/kv/", get(kv::get).put(kv::put).delete(kv::delete))
        .route(
            "/v1/kv/{*key}",
            get(kv::get).put(kv::put).delete(kv::delete),
        )
        .route(
            "/v0/{collection}",
            get(documents::get_collection)
                .post(documents::post)
                .delete(documents::delete_collection),
        )
        .route(
            "/v0/{collection}/{key}",
            get(documents::get)
                .put(documents::put)
                .patch(documents::patch)
                .delete(documents::delete),
        )
        .route(
            "/v0/{collection}/{key}/refs/{reference}",
            get(documents::get_ref),
        )
        // An empty key (`/v0/users/`) gets a message rather than a bare 404.
        .route(
            "/v0/{collection}/",
            get(documents::get)
                .put(documents::put)
                .delete(documents::delete),
        )
        .route(
            "/v0/{collection}/{key}/{*rest}",
            any(documents::unsupported),
        )
        .route("/v1/txn", put(txn::txn))
        .route("/v1/session/create", put(session::create))
        .route("/v1/session/destroy/{id}", put(session::destroy))
        .route("/v1/session/info/{id}", get(session::info))
        .route("/v1/session/list", get(session::list))
        .route("/v1/session/node/{node}", get(session::of_node))
        .route("/v1/session/renew/{id}", put(session::renew))
        .route("/v1/agent/self", get(status::agent_self))
        .route("/v1/status/leader", get(status::leader))
        .route("/v1/status/peers", get(status::peers))
        .route("/v1/catalog/datacenters", get(status::datacenters))
        .route("/v1/cluster/shards", get(status::shards))
        .route("/v1/cluster/status", get(admin::status))
        .route("/v1/cluster/nodes/{name}/remove", post(admin::remove_node))
        .route(
            "/v1/cluster/nodes/{name}/cancel-drain",
            post(admin::cancel_drain),
        )
        .route(
            "/v1/cluster/finalize-upgrade",
            post(admin::finalize_upgrade),
        )
        .route("/v1/cluster/shards/{shard}/split", post(admin::split_shard))
        .route(
            "/v1/cluster/placement",
            get(admin::placement).put(admin::set_placement),
        )
        .route("/v1/backup/shard/{shard}", get(backup::export))
        .route("/v1/backup/restore", post(backup::restore))
        .route("/v1/acl/bootstrap", put(acl::bootstrap))
        .route("/v1/acl/policy", put(acl::create_policy))
        .route(
            "/v1/acl/policy/{id}",
            get(acl::read_policy)
                .put(acl::update_policy)
                .delete(acl::delete_policy),
        )
        .route("/v1/acl/policy/name/{name}", get(acl::read_policy_by_name))
        .route("/v1/acl/policies", get(acl::list_policies))
        .route("/v1/acl/token", put(acl::create_token))
        .route("/v1/acl/token/self", get(acl::read_self))
        .route(
            "/v1/acl/token/{accessor}",
            get(acl::read_token)
                .put(acl::update_token)
                .delete(acl::delete_token),
        )
        .route("/v1/acl/token/{accessor}/clone", put(acl::clone_token))
        .route("/v1/acl/tokens", get(acl::list_tokens))
        .route("/v1/health", get(status::health))
        .route("/metrics", get(metrics::metrics));
    // The web console, unless `[ui] enabled = false`.
    let routes = if state.console {
        routes.merge(ui::routes(&state))
    } else {
        routes
    };
    routes
        .layer(DefaultBodyLimit::max(body_limit))
        // Counts error answers. A plain response map, not `middleware::from_fn`: that one
        // boxes a future per request, which showed in a GET's profile.
        .layer(MapResponseLayer::new({
            let metrics = state.metrics.clone();
            move |response: Response| {
                if response.status().is_client_error() || response.status().is_server_error() {
                    HttpMetrics::inc(&metrics.errors);
                }
                response
            }
        }))
        .layer(crate::timing::TimingLayer {
            metrics: state.metrics.clone(),
        })
        .with_state(state)
}

/// Serves `router` on `listener` until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    options: HttpOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let permits = Arc::new(Semaphore::new(options.max_connections));
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(options.header_read_timeout)
        .keep_alive(true);
    let builder = Arc::new(builder);
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            _ = &mut shutdown => return,
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return,
            },
        };
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "http accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        let builder = builder.clone();
        let open = OpenConnection::new(options.metrics.clone());
        let tls = options.tls.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let _open = open;
            let served = match tls {
                None => {
                    builder
                        .serve_connection(TokioIo::new(stream), service)
                        .await
                }
                Some(tls) => match tls.accept(stream).await {
                    Ok(stream) => {
                        builder
                            .serve_connection(TokioIo::new(stream), service)
                            .await
                    }
                    Err(e) => {
                        tracing::warn!(remote = %peer, reason = %e, "refused an HTTPS connection");
                        return;
                    }
                },
            };
            if let Err(e) = served {
                tracing::debug!(error = %e, "http connection ended with an error");
            }
        });
    }
}
