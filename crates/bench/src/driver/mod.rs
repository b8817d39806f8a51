//! Client drivers: how a worker talks to the system under test.
//!
//! Each worker owns one driver: RESP ([`RespDriver`]), the Consul KV HTTP API ([`HttpDriver`],
//! `consul`), the same API sent straight to each shard's leader ([`TriremeDriver`], `trireme`:
//! one connection per node), etcd's v3 JSON gateway ([`EtcdDriver`]), or Trireme's documents
//! API with list and search ([`OrchestrateDriver`], `orchestrate`). The HTTP drivers share one
//! hand-written keep-alive HTTP/1.1 client (`http1`) rather than each framing requests of its own.
//! Which operations a driver can do is known up front ([`supports`]), so a scenario asking
//! for one it cannot do is refused before anything is sent. Failed requests come back as a
//! [`DriverError`] whose [`DriverError::kind`] is the label errors are counted under in a
//! run's statistics; none of them stops a run.

pub mod etcd;
pub mod http;
pub(crate) mod http1;
pub mod orchestrate;
pub mod resp;
pub mod trireme;

use std::time::Duration;

pub use crate::reply::Reply;
pub use etcd::EtcdDriver;
pub use http::HttpDriver;
pub use orchestrate::OrchestrateDriver;
pub use resp::RespDriver;
pub use trireme::TriremeDriver;

use crate::BenchRng;
use crate::scenario::{Consistency, Driver, Operation};

/// How long one request may take before it counts as a `timeout` error.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// A failed request, or a target a driver cannot use.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// The connection failed (refused, reset, closed); kind `io`.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    /// The server answered with an error reply (`-ERR ...`); kind `server`.
    #[error("server error: {0}")]
    Server(String),
    /// No answer within the per-request timeout; kind `timeout`.
    #[error("request timed out after {0:?}")]
    Timeout(Duration),
    /// The server's answer could not be parsed or had an unexpected type; kind `protocol`.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// A compare-and-set lost: the key changed between the read and the conditional write;
    /// kind `conflict`. Kept apart from failures because it is the outcome a CAS exists to
    /// detect, and its rate measures contention rather than a broken target.
    #[error("compare-and-set lost: {0}")]
    Conflict(String),
    /// The driver cannot perform this operation; kind `unsupported`.
    #[error("the {op} operation is not supported by the {driver} driver")]
    Unsupported {
        /// The operation asked for.
        op: Operation,
        /// The driver's name as written in scenario files.
        driver: &'static str,
    },
    /// The target URL is not one this driver understands; kind `target`.
    #[error("invalid target {target:?}: {message}")]
    Target {
        /// The target as given.
        target: String,
        /// What is wrong with it.
        message: String,
    },
}

impl DriverError {
    /// The label this error is counted under: `io`, `server`, `timeout`, `protocol`,
    /// `conflict`, `unsupported` or `target`.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            DriverError::Io(_) => "io",
            DriverError::Server(_) => "server",
            DriverError::Timeout(_) => "timeout",
            DriverError::Protocol(_) => "protocol",
            DriverError::Conflict(_) => "conflict",
            DriverError::Unsupported { .. } => "unsupported",
            DriverError::Target { .. } => "target",
        }
    }

    /// Whether the connection is unusable after this error (the worker backs off a little
    /// before trying again, instead of spinning on a dead target).
    #[must_use]
    pub fn is_connection_error(&self) -> bool {
        matches!(
            self,
            DriverError::Io(_) | DriverError::Timeout(_) | DriverError::Protocol(_)
        )
    }
}

/// `SCHEME://host:port` (an optional trailing `/`) → `host:port`, the one target syntax every
/// driver accepts; anything else (user, path, database, a bad port) is refused.
pub(crate) fn host_port(target: &str, scheme: &str) -> Result<String, DriverError> {
    let bad = |message: String| DriverError::Target {
        target: redact_target(target),
        message,
    };
    let expected = || format!("expected {scheme}://host:port (or {scheme}s:// for TLS)");
    let rest = target
        .strip_prefix(scheme)
        .and_then(|r| r.strip_prefix("s://").or_else(|| r.strip_prefix("://")))
        .ok_or_else(|| bad(expected()))?;
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    // A password in the URL is the target's ACL token (see `target_token`), not an address.
    let rest = rest.rsplit_once('@').map_or(rest, |(_, address)| address);
    let (host, port) = rest
        .rsplit_once(':')
        .ok_or_else(|| bad(format!("missing port: {}", expected())))?;
    if host.is_empty() || host.contains('/') || host.contains('@') {
        return Err(bad(format!("{} (no path or database)", expected())));
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(rest.to_owned()),
        _ => Err(bad("port must be a number from 1 to 65535".into())),
    }
}

/// Whether `target` asks for TLS (`https://`, `rediss://`).
#[must_use]
pub fn is_tls(target: &str) -> bool {
    target.starts_with("https://") || target.starts_with("rediss://")
}

/// The CA that `https://` and `rediss://` targets' certificates must chain to.
static CLIENT_TLS: std::sync::RwLock<Option<trireme_tls::ClientTls>> = std::sync::RwLock::new(None);

/// Trusts the CA certificate in `ca_file` for TLS targets (`--ca-file`, `TRIREME_CA_FILE`),
/// in place of any given before.
pub fn use_ca_file(ca_file: &std::path::Path) -> Result<(), String> {
    let tls = trireme_tls::ClientTls::load(ca_file).map_err(|e| e.to_string())?;
    *CLIENT_TLS
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(tls);
    Ok(())
}

/// Opens a connection to `addr`, with TLS when `tls`.
pub(crate) async fn open_stream(
    addr: &str,
    tls: bool,
) -> Result<trireme_tls::MaybeTls, DriverError> {
    if !tls {
        let stream = tokio::net::TcpStream::connect(addr).await?;
        // A request is one write and its answer is awaited: Nagle would only add delay.
        stream.set_nodelay(true)?;
        return Ok(trireme_tls::MaybeTls::Plain(stream));
    }
    let client = CLIENT_TLS
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
        .ok_or_else(|| DriverError::Target {
            target: redact_target(addr),
            message: "a TLS target needs the CA certificate: give --ca-file (or TRIREME_CA_FILE)"
                .into(),
        })?;
    let stream = client
        .connect(addr)
        .await
        .map_err(|e| DriverError::Protocol(e.to_string()))?;
    Ok(trireme_tls::MaybeTls::Dialed(Box::new(stream)))
}

/// The ACL token a target carries as the password of its URL (`http://:TOKEN@host:port`,
/// `redis://default:TOKEN@host:port`), so that every target of a comparison has its own.
#[must_use]
pub fn target_token(target: &str) -> Option<String> {
    let rest = target.split_once("://")?.1;
    let (userinfo, _) = rest.rsplit_once('@')?;
    let password = userinfo.split_once(':').map_or(userinfo, |(_, p)| p);
    (!password.is_empty()).then(|| {
        percent_encoding::percent_decode_str(password)
            .decode_utf8_lossy()
            .into_owned()
    })
}

/// `target` with its token (the URL's password) replaced by `***`: what is printed and
/// recorded, so that no secret lands in a terminal or a results directory.
#[must_use]
pub fn redact_target(target: &str) -> String {
    let Some((scheme, rest)) = target.split_once("://") else {
        return target.to_owned();
    };
    let Some((userinfo, address)) = rest.rsplit_once('@') else {
        return target.to_owned();
    };
    let user = userinfo.split_once(':').map_or("", |(user, _)| user);
    format!("{scheme}://{user}:***@{address}")
}

/// `fixed` header lines followed by the target's token header (Consul's `X-Consul-Token`), if
/// it has one: made once per distinct text for the life of the process, since connections
/// keep their header lines as `&'static str`.
pub(crate) fn headers_for(fixed: &'static str, target: &str) -> &'static str {
    static MADE: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    let Some(token) = target_token(target) else {
        return fixed;
    };
    let text = format!("{fixed}X-Consul-Token: {token}\r\n");
    let mut made = MADE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(found) = made.iter().find(|m| **m == text) {
        return found;
    }
    let leaked: &'static str = Box::leak(text.into_boxed_str());
    made.push(leaked);
    leaked
}

/// The name of `driver` as written in scenario files.
#[must_use]
pub fn driver_name(driver: Driver) -> &'static str {
    match driver {
        Driver::Trireme => "trireme",
        Driver::Resp => "resp",
        Driver::Consul => "consul",
        Driver::Etcd => "etcd",
        Driver::Orchestrate => "orchestrate",
    }
}

/// Whether `driver` can perform `op`.
#[must_use]
pub fn supports(driver: Driver, op: Operation) -> bool {
    match driver {
        Driver::Resp => RespDriver::supports(op),
        Driver::Trireme => TriremeDriver::supports(op),
        Driver::Consul => HttpDriver::supports(op),
        Driver::Etcd => EtcdDriver::supports(op),
        Driver::Orchestrate => OrchestrateDriver::supports(op),
    }
}

/// One worker's driver, whichever protocol it speaks.
pub enum AnyDriver {
    /// RESP.
    Resp(RespDriver),
    /// Consul KV over HTTP.
    Http(HttpDriver),
    /// Consul KV over HTTP, straight to each shard's leader.
    Trireme(TriremeDriver),
    /// etcd's v3 JSON gateway.
    Etcd(EtcdDriver),
    /// Trireme's documents API.
    Orchestrate(OrchestrateDriver),
}

impl AnyDriver {
    /// Connects a `driver` to `target` now, so a bad target fails before the run.
    pub async fn connect(
        driver: Driver,
        target: &str,
        consistency: Consistency,
    ) -> Result<Self, DriverError> {
        match driver {
            Driver::Resp => Ok(AnyDriver::Resp(RespDriver::connect(target).await?)),
            Driver::Trireme => Ok(AnyDriver::Trireme(
                TriremeDriver::connect(target, consistency).await?,
            )),
            Driver::Consul => Ok(AnyDriver::Http(
                HttpDriver::connect(target, consistency).await?,
            )),
            Driver::Etcd => Ok(AnyDriver::Etcd(
                EtcdDriver::connect(target, consistency).await?,
            )),
            Driver::Orchestrate => Ok(AnyDriver::Orchestrate(
                OrchestrateDriver::connect(target, consistency).await?,
            )),
        }
    }

    /// Writes a key (the load phase).
    pub async fn put(&mut self, key: &str, value: &[u8]) -> Result<(), DriverError> {
        match self {
            AnyDriver::Resp(d) => d.put(key, value).await,
            AnyDriver::Http(d) => d.put(key, value).await,
            AnyDriver::Trireme(d) => d.put(key, value).await,
            AnyDriver::Etcd(d) => d.put(key, value).await,
            AnyDriver::Orchestrate(d) => d.put(key, value).await,
        }
    }

    /// Performs `op` on `key` (`value` for writes). A driver that draws more than the key
    /// (the documents driver's search term) draws from `rng`, the worker's seeded generator.
    pub async fn execute(
        &mut self,
        op: Operation,
        key: &str,
        value: Option<&[u8]>,
        rng: &mut BenchRng,
    ) -> Result<(), DriverError> {
        match self {
            AnyDriver::Resp(d) => d.execute(op, key, value).await,
            AnyDriver::Http(d) => d.execute(op, key, value).await,
            AnyDriver::Trireme(d) => d.execute(op, key, value).await,
            AnyDriver::Etcd(d) => d.execute(op, key, value).await,
            AnyDriver::Orchestrate(d) => d.execute(op, key, value, rng).await,
        }
    }
}
