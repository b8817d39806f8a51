//! Delay on peer links, without `tc netem` (this kernel has none): a user-space proxy in every
//! node's namespace. An iptables REDIRECT there sends every incoming peer connection from the
//! start of the run through the proxy, which passes the bytes on to the node's own peer port,
//! holding each chunk for the current delay (0 until a delay fault sets it). Order is kept:
//! a chunk never overtakes the one before it.
//!
//! Each proxy runs on a thread of its own that moved into the node's namespace, so its
//! listener and its connections to the node belong there; partition rules (which match source
//! addresses at INPUT) still apply to the redirected traffic.
//!
//! With regions, a connection between nodes of two regions carries the run's fixed
//! inter-region delay in each direction on top of any fault's: the link between datacenters,
//! which `tc netem` would otherwise give.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

use crate::ChaosError;
use crate::lab::Lab;
use crate::nodes::PEER_PORT;

/// Where the proxies listen in each node's namespace.
pub const PROXY_PORT: u16 = 7712;

/// The proxies of a run. The delay applies to every peer link, in both directions; dropping
/// this stops them.
#[derive(Debug)]
pub struct DelayLine {
    delay_ms: Arc<AtomicU64>,
    stop: watch::Sender<bool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl DelayLine {
    /// Starts one proxy per node and redirects the node's incoming peer connections to it.
    /// `regions[i]` is the region of lab node `i` (empty: one region); a connection between
    /// two regions is held `between_regions` longer each way.
    pub fn start(
        lab: &Lab,
        regions: &[Option<String>],
        between_regions: Duration,
    ) -> Result<DelayLine, ChaosError> {
        let region_by_ip: Arc<std::collections::HashMap<std::net::IpAddr, Option<String>>> =
            Arc::new(
                lab.nodes()
                    .iter()
                    .enumerate()
                    .map(|(i, n)| (n.ip.into(), regions.get(i).cloned().flatten()))
                    .collect(),
            );
        let delay_ms = Arc::new(AtomicU64::new(0));
        let (stop, _) = watch::channel(false);
        let mut line = DelayLine {
            delay_ms,
            stop,
            threads: Vec::new(),
        };
        for node in lab.nodes() {
            let listen = SocketAddr::new(node.ip.into(), PROXY_PORT);
            let upstream = SocketAddr::new(node.ip.into(), PEER_PORT);
            let (ready_tx, ready_rx) = std::sync::mpsc::channel();
            let netns = node.netns.clone();
            let delay = line.delay_ms.clone();
            let stop = line.stop.subscribe();
            let link = Link {
                region: region_by_ip.get(&listen.ip()).cloned().flatten(),
                region_by_ip: region_by_ip.clone(),
                between_regions,
            };
            line.threads.push(std::thread::spawn(move || {
                let bound = Lab::enter(&netns).and_then(|()| {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map_err(|e| ChaosError::io("proxy runtime", e))?;
                    let listener = runtime
                        .block_on(TcpListener::bind(listen))
                        .map_err(|e| ChaosError::io(format!("proxy listen {listen}"), e))?;
                    Ok((runtime, listener))
                });
                match bound {
                    Ok((runtime, listener)) => {
                        let _ = ready_tx.send(Ok(()));
                        runtime.block_on(serve(listener, upstream, delay, link, stop));
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                }
            }));
            ready_rx
                .recv()
                .map_err(|_| ChaosError::Cluster("a delay proxy thread died".into()))??;
            lab.redirect_peer_port(node, PEER_PORT, PROXY_PORT)?;
        }
        Ok(line)
    }

    /// Sets the delay of every chunk on every peer link (0 turns it off).
    pub fn set(&self, delay: Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.delay_ms.store(ms, Ordering::Relaxed);
    }
}

impl Drop for DelayLine {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Where a proxy's node is, to tell how far each connecting peer is from it.
struct Link {
    /// The node's region.
    region: Option<String>,
    region_by_ip: Arc<std::collections::HashMap<std::net::IpAddr, Option<String>>>,
    between_regions: Duration,
}

impl Link {
    /// The fixed delay of a connection from `peer`: the inter-region one when it is in
    /// another region.
    fn fixed_delay(&self, peer: SocketAddr) -> Duration {
        let theirs = self.region_by_ip.get(&peer.ip()).cloned().flatten();
        if self.region.is_some() && theirs.is_some() && theirs != self.region {
            self.between_regions
        } else {
            Duration::ZERO
        }
    }
}

async fn serve(
    listener: TcpListener,
    upstream: SocketAddr,
    delay: Arc<AtomicU64>,
    link: Link,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((incoming, from)) = accepted else { continue };
                let delay = delay.clone();
                let fixed = link.fixed_delay(from);
                let stop = stop.clone();
                tokio::spawn(async move {
                    // The node may be down: then the connection just closes, as it would.
                    if let Ok(outgoing) = TcpStream::connect(upstream).await {
                        relay(incoming, outgoing, delay, fixed, stop).await;
                    }
                });
            }
            _ = stop.changed() => return,
        }
    }
}

/// Both directions of one connection; ends when either side closes or the run stops.
async fn relay(
    a: TcpStream,
    b: TcpStream,
    delay: Arc<AtomicU64>,
    fixed: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let _ = a.set_nodelay(true);
    let _ = b.set_nodelay(true);
    let (a_read, a_write) = a.into_split();
    let (b_read, b_write) = b.into_split();
    tokio::select! {
        () = pump(a_read, b_write, delay.clone(), fixed) => {}
        () = pump(b_read, a_write, delay, fixed) => {}
        _ = stop.changed() => {}
    }
}

/// Copies `from` to `to`, each chunk held until `fixed` plus `delay` after it was read.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    delay: Arc<AtomicU64>,
    fixed: Duration,
) {
    let (tx, mut rx) = mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    let writer = async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
    };
    let reader = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    let ms = delay.load(Ordering::Relaxed);
                    let due = tokio::time::Instant::now() + fixed + Duration::from_millis(ms);
                    if tx.send((due, buf[..n].to_vec())).is_err() {
                        return;
                    }
                }
            }
        }
    };
    // The reader ends at EOF; the writer then drains what is queued and ends too.
    tokio::join!(reader, writer);
}
