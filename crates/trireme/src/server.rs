//! `trireme server`: bind the listeners, start the node, serve HTTP and RESP until SIGINT or
//! SIGTERM, then stop cleanly.

use crate::config::{Endpoint, ServerArgs, ServerConfig};
use anyhow::Context;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::watch;
use trireme_cluster::Node;

pub fn run(args: ServerArgs) -> anyhow::Result<()> {
    let config = args.resolve()?;
    init_logging(&config.log)?;
    raise_open_file_limit();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("trireme")
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(serve(config))
}

/// Raises the soft limit on open files to the hard limit, as Go's runtime does for Consul and
/// etcd: every client connection is a file, and a Consul blocking query holds one for minutes.
fn raise_open_file_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        let raised = rustix::process::Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        if let Err(e) = setrlimit(Resource::Nofile, raised) {
            tracing::warn!(error = %e, "cannot raise the open-file limit");
        }
    }
}

fn init_logging(filter: &str) -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .with_context(|| format!("invalid --log filter {filter:?}"))?;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init()
        .map_err(|e| anyhow::anyhow!("cannot set up logging: {e}"))
}

/// Binds `endpoint` (resolving a host name) and returns the listener, the address it got,
/// and the address to advertise for it.
async fn bind(endpoint: &Endpoint) -> anyhow::Result<(TcpListener, SocketAddr, String)> {
    let flag = endpoint.flag;
    let listener = TcpListener::bind(endpoint.bind.as_str())
        .await
        .with_context(|| format!("cannot listen on {flag} {}", endpoint.bind))?;
    let local = listener.local_addr()?;
    let advertised = endpoint.advertised(local);
    Ok((listener, local, advertised))
}

async fn serve(mut config: ServerConfig) -> anyhow::Result<()> {
    // Bind first: a port in use is reported before anything touches the data directory, and
    // port 0 becomes the real port everyone is told about.
    let (http, http_bound, http_advertised) = bind(&config.listen.http).await?;
    let (resp, resp_bound, resp_advertised) = bind(&config.listen.resp).await?;
    let (peer, peer_bound, peer_advertised) = bind(&config.listen.peer).await?;
    config.node.http_addr = http_advertised;
    config.node.resp_addr = resp_advertised;
    config.node.peer_addr = peer_advertised;
    let bound = Bound {
        http: http_bound,
        resp: resp_bound,
        peer: peer_bound,
    };

    if config.node.acl.enabled && config.node.peer_tls.is_none() {
        tracing::warn!(
            "ACLs are on but the peer port is plain: whoever reaches it can send requests past the ACL checks; set [peer_tls] (see docs/security.md)"
        );
    }
    let data_dir = config.node.data_dir.clone();
    // Signals are caught from here on: a node waiting for its peers at start-up must stop
    // cleanly too, not die of the default SIGTERM action.
    let mut signal = Box::pin(wait_for_signal());
    // SIGHUP re-reads certificates (below); caught from here on, so that it never stops a
    // node, with TLS or without, starting or serving.
    let hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    // The peer listener serves from here on: the other nodes need it while this one waits
    // for them during start-up.
    let starting = Node::start_with_listener(config.node.clone(), peer);
    let node = tokio::select! {
        node = starting => node.with_context(|| {
            format!(
                "cannot start node {:?} in {}",
                config.node.name,
                data_dir.display()
            )
        })?,
        () = &mut signal => {
            tracing::info!("stopped during start-up");
            return Ok(());
        }
    };

    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };

    let http_tls = match &config.tls {
        Some(files) => Some(trireme_tls::ServerTls::load(files.clone(), &[b"http/1.1"])?),
        None => None,
    };
    let resp_tls = match &config.tls {
        Some(files) => Some(trireme_tls::ServerTls::load(files.clone(), &[])?),
        None => None,
    };
    spawn_tls_reloader(
        hangups,
        [http_tls.clone(), resp_tls.clone()]
            .into_iter()
            .flatten()
            .collect(),
        config.node.peer_tls.clone(),
    );

    let resp_server = trireme_resp::RespServer::new(node.clone());
    let mut http_state = trireme_http::AppState::new(node.clone());
    let resp_metrics = resp_server.metrics();
    http_state.extra_metrics = Arc::new({
        let resp_metrics = resp_metrics.clone();
        move || resp_metrics.prometheus()
    });
    http_state.resp_latency = Arc::new(move || resp_metrics.latency_buckets());
    http_state.console = config.ui;
    http_state.https = config.tls.is_some();
    if config.ui {
        trireme_http::spawn_figures(&http_state);
    }
    let http_metrics = http_state.metrics.clone();
    let http_task = tokio::spawn(trireme_http::serve(
        http,
        trireme_http::router(http_state),
        trireme_http::HttpOptions {
            header_read_timeout: std::time::Duration::from_millis(
                config.node.limits.header_read_timeout_ms,
            ),
            metrics: Some(http_metrics),
            tls: http_tls,
            ..Default::default()
        },
        stopped(stop_rx.clone()),
    ));
    let resp_task = tokio::spawn(resp_server.serve(resp, resp_tls, stopped(stop_rx.clone())));

    write_endpoints(&node, &bound, config.tls.is_some()).await?;
    println!(
        "trireme node {} ready: http={} resp={} peer={} shards={}",
        node.me().name,
        node.me().http_addr,
        node.me().resp_addr,
        node.me().peer_addr,
        node.shard_map().shard_count()
    );

    let removed = tokio::select! {
        () = signal => false,
        () = node.wait_removed() => true,
    };
    tracing::info!("stopping");
    if !removed {
        // Clients of this node are still served meanwhile, through the new leaders.
        node.hand_over_leaderships(HANDOVER_LIMIT).await;
    }
    let _ = stop_tx.send(true);
    let _ = tokio::join!(http_task, resp_task);
    node.shutdown().await;
    if removed {
        // Exits with EXIT_REMOVED (see main), as when it is found removed at start.
        return Err(trireme_cluster::ClusterError::Removed(format!(
            "node {} was removed from the cluster: it stopped serving, and its data directory cannot be used again",
            node.me().name
        ))
        .into());
    }
    Ok(())
}

/// Re-reads the certificate files on SIGHUP: connections open keep the configuration they
/// started with, new ones get the new one. A file that does not load leaves the old one.
fn spawn_tls_reloader(
    hangups: Option<tokio::signal::unix::Signal>,
    clients: Vec<Arc<trireme_tls::ServerTls>>,
    peers: Option<Arc<trireme_tls::PeerTls>>,
) {
    let Some(mut hangups) = hangups else {
        tracing::warn!("cannot catch SIGHUP: certificates will not be re-read");
        return;
    };
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            if clients.is_empty() && peers.is_none() {
                tracing::info!("SIGHUP: no certificates to re-read");
                continue;
            }
            let mut failed = false;
            for tls in &clients {
                if let Err(e) = tls.reload() {
                    failed = true;
                    tracing::error!(error = %e, "[tls] not re-read; the old certificate stays");
                }
            }
            if let Some(tls) = &peers
                && let Err(e) = tls.reload()
            {
                failed = true;
                tracing::error!(error = %e, "[peer_tls] not re-read; the old certificate stays");
            }
            if !failed {
                tracing::info!("SIGHUP: certificates re-read");
            }
        }
    });
}

/// The socket addresses the listeners were bound to.
struct Bound {
    http: SocketAddr,
    resp: SocketAddr,
    peer: SocketAddr,
}

/// `<data dir>/endpoints.json`: where this node listens (`http`, `resp`, `peer`: the bound
/// socket addresses, for scripts and tests that started it with port 0) and what it tells
/// others (`advertised`).
async fn write_endpoints(node: &Node, bound: &Bound, node_tls: bool) -> anyhow::Result<()> {
    let me = node.me();
    let body = trireme_types::admin::EndpointsDoc {
        node: me.name.clone(),
        http: bound.http.to_string(),
        resp: bound.resp.to_string(),
        peer: bound.peer.to_string(),
        advertised: Some(trireme_types::admin::AdvertisedDoc {
            http: me.http_addr.clone(),
            resp: me.resp_addr.clone(),
            peer: me.peer_addr.clone(),
        }),
        pid: std::process::id(),
        tls: node_tls,
    };
    let path = node.config().data_dir.join("endpoints.json");
    let tmp = path.with_extension("json.tmp");
    tokio::fs::write(&tmp, serde_json::to_vec_pretty(&body)?).await?;
    tokio::fs::rename(&tmp, &path).await?;
    Ok(())
}

/// How long a node stopping cleanly spends handing its leaderships over before it stops
/// anyway: a few election round trips, well inside a supervisor's stop timeout.
const HANDOVER_LIMIT: std::time::Duration = std::time::Duration::from_secs(3);

/// Resolves on SIGINT or SIGTERM. The handlers are installed when this is called, before the
/// future is first polled, so a signal that arrives early is not lost.
fn wait_for_signal() -> impl std::future::Future<Output = ()> {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate_signal =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate());
    #[cfg(unix)]
    let terminate = async move {
        match terminate_signal {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    async move {
        tokio::select! {
            _ = ctrl_c => {},
            _ = terminate => {},
        }
    }
}
