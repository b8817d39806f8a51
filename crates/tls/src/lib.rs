//! TLS for Trireme's client ports (HTTP, RESP) and its peer links, with rustls.
//!
//! - [`ServerTls`]: a listener's certificate and key (and, to require client certificates,
//!   a CA), re-read by [`ServerTls::reload`] on SIGHUP. A connection takes the configuration
//!   current when it arrives, so a reload never drops the connections already open.
//! - [`PeerTls`]: the peer link, always mutual: each node presents its certificate and
//!   accepts only certificates signed by the cluster's CA, in both directions.
//! - [`LocalCa`]: a CA and node certificates made on the spot, for `trireme cluster up
//!   --secure` and for tests.
//!
//! The crypto provider is *ring*, named explicitly rather than installed process-wide, so
//! nothing depends on which other crate initialized rustls first.
#![deny(missing_docs)]
#![deny(clippy::unwrap_used)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod local_ca;
mod stream;

pub use local_ca::{IssueParams, LocalCa, date_time_ymd, write_private};
pub use stream::{MaybeTls, PeerIdentity};

use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::net::TcpStream;

/// How long a client or peer may take to complete a handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A server-side TLS stream over TCP.
pub type ServerStream = tokio_rustls::server::TlsStream<TcpStream>;
/// A client-side TLS stream over TCP.
pub type ClientStream = tokio_rustls::client::TlsStream<TcpStream>;

/// Why TLS could not be set up or a handshake failed.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or parsed.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// What was wrong with it.
        message: String,
    },
    /// rustls refused the certificates or keys given.
    #[error("{0}")]
    Config(String),
    /// A certificate could not be made.
    #[error("cannot make a certificate: {0}")]
    Generate(String),
    /// A handshake failed or timed out.
    #[error("TLS handshake: {0}")]
    Handshake(String),
}

/// The files of one TLS endpoint, as the `[tls]` and `[peer_tls]` tables name them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM certificate chain, the node's own certificate first.
    pub cert_file: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
    /// PEM CA certificates: client certificates are checked against them (and, for the
    /// peer link, the other nodes' server certificates too).
    pub ca_file: Option<PathBuf>,
    /// Require clients to present a certificate signed by `ca_file`.
    pub verify_incoming: bool,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn file_error(path: &Path, message: impl std::fmt::Display) -> TlsError {
    TlsError::File {
        path: path.to_path_buf(),
        message: message.to_string(),
    }
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(path, e))?;
    if certs.is_empty() {
        return Err(file_error(path, "no PEM certificate in the file"));
    }
    Ok(certs)
}

/// The DNS name a node's peer certificate must carry besides its addresses:
/// `node-<name>.trireme`, `<name>` being its `--node-id`. It binds the certificate to the node
/// id a peer claims when it links.
pub fn node_dns_name(name: &str) -> String {
    format!("node-{name}.trireme")
}

/// Whether node `name` can be named in a certificate: [`node_dns_name`] must be a DNS name,
/// and in lower case, because certificates compare names ignoring case while node ids do
/// not (`N1` and `n1` are two nodes; one certificate would name both).
pub fn check_node_name(name: &str) -> Result<rustls_pki_types::ServerName<'static>, String> {
    if name.chars().any(|c| c.is_ascii_uppercase()) {
        return Err(format!(
            "node name {name:?} has capitals: with [peer_tls], node names are lower case (certificates do not tell n1 from N1)"
        ));
    }
    rustls_pki_types::ServerName::try_from(node_dns_name(name)).map_err(|e| {
        format!(
            "node name {name:?} cannot be named in a certificate ({}): {e}",
            node_dns_name(name)
        )
    })
}

/// Whether `certificate` names node `name` (see [`node_dns_name`]); `Err` says why not.
fn check_names_node(certificate: &CertificateDer<'_>, name: &str) -> Result<(), String> {
    let certificate = webpki::EndEntityCert::try_from(certificate)
        .map_err(|e| format!("the certificate does not parse: {e}"))?;
    let expected = node_dns_name(name);
    let subject = check_node_name(name)?;
    certificate
        .verify_is_valid_for_subject_name(&subject)
        .map_err(|_| format!("its certificate does not name node {name} ({expected})"))
}

/// Whether the first certificate in the PEM file at `path` names node `name`: a certificate
/// made before nodes were named in them must be issued again.
pub fn certificate_file_names_node(path: &Path, name: &str) -> Result<bool, TlsError> {
    let certificates = certificates(path)?;
    Ok(check_names_node(&certificates[0], name).is_ok())
}

fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path)
        .map_err(|e| file_error(path, format!("no usable private key: {e}")))
}

fn roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in certificates(path)? {
        roots
            .add(cert)
            .map_err(|e| file_error(path, format!("not a usable CA certificate: {e}")))?;
    }
    Ok(roots)
}

fn server_config(files: &TlsFiles, alpn: &[&[u8]]) -> Result<ServerConfig, TlsError> {
    let certs = certificates(&files.cert_file)?;
    let key = private_key(&files.key_file)?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = if files.verify_incoming {
        let ca = files.ca_file.as_deref().ok_or_else(|| {
            TlsError::Config("verify_incoming needs a ca_file to check client certificates".into())
        })?;
        let verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots(ca)?), provider())
                .build()
                .map_err(|e| TlsError::Config(format!("client certificate check: {e}")))?;
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| TlsError::Config(format!("certificate and key: {e}")))?;
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

/// A listener's TLS configuration, re-readable from its files.
pub struct ServerTls {
    files: TlsFiles,
    alpn: Vec<Vec<u8>>,
    config: RwLock<Arc<ServerConfig>>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("files", &self.files)
            .finish()
    }
}

impl ServerTls {
    /// Reads `files`; `alpn` lists the application protocols offered (`http/1.1`), if any.
    pub fn load(files: TlsFiles, alpn: &[&[u8]]) -> Result<Arc<Self>, TlsError> {
        let config = server_config(&files, alpn)?;
        Ok(Arc::new(ServerTls {
            files,
            alpn: alpn.iter().map(|p| p.to_vec()).collect(),
            config: RwLock::new(Arc::new(config)),
        }))
    }

    /// Re-reads the files; on an error the configuration in use stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let alpn: Vec<&[u8]> = self.alpn.iter().map(Vec::as_slice).collect();
        let config = server_config(&self.files, &alpn)?;
        *self
            .config
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(config);
        Ok(())
    }

    /// The files this configuration comes from.
    pub fn files(&self) -> &TlsFiles {
        &self.files
    }

    /// Completes the server side of a handshake on `stream`, within [`HANDSHAKE_TIMEOUT`].
    pub async fn accept(&self, stream: TcpStream) -> Result<ServerStream, TlsError> {
        let config = self
            .config
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
            Ok(Ok(stream)) => Ok(stream),
            Ok(Err(e)) => Err(TlsError::Handshake(handshake_reason(&e))),
            Err(_) => Err(TlsError::Handshake(format!(
                "not completed within {HANDSHAKE_TIMEOUT:?}"
            ))),
        }
    }
}

/// A handshake error in words: a plain-text client sends bytes that are no TLS record.
fn handshake_reason(e: &std::io::Error) -> String {
    let text = e.to_string();
    if text.contains("InvalidContentType") || text.contains("invalid content type") {
        "the client does not speak TLS (plain text sent to a TLS port)".into()
    } else {
        text
    }
}

/// The peer link's TLS: both ends present certificates signed by the cluster CA.
pub struct PeerTls {
    server: Arc<ServerTls>,
    client: RwLock<Arc<ClientConfig>>,
}

impl std::fmt::Debug for PeerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerTls")
            .field("files", self.server.files())
            .finish()
    }
}

fn peer_client_config(files: &TlsFiles) -> Result<ClientConfig, TlsError> {
    let ca = files
        .ca_file
        .as_deref()
        .ok_or_else(|| TlsError::Config("[peer_tls] needs a ca_file".into()))?;
    ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_root_certificates(roots(ca)?)
        .with_client_auth_cert(
            certificates(&files.cert_file)?,
            private_key(&files.key_file)?,
        )
        .map_err(|e| TlsError::Config(format!("certificate and key: {e}")))
}

impl PeerTls {
    /// Whether this node's own certificate names node `name`, as its peers will require: a
    /// node whose certificate does not is refused by every peer, so it should not start.
    pub fn check_names_node(&self, name: &str) -> Result<(), TlsError> {
        let path = &self.server.files().cert_file;
        let certificates = certificates(path)?;
        check_names_node(&certificates[0], name).map_err(|reason| {
            TlsError::Config(format!(
                "{}: {reason}; peers refuse a certificate that does not name the node (issue it again with {})",
                path.display(),
                node_dns_name(name)
            ))
        })
    }

    /// Reads `files` (all three needed; client certificates are always required).
    pub fn load(files: TlsFiles) -> Result<Arc<Self>, TlsError> {
        let files = TlsFiles {
            verify_incoming: true,
            ..files
        };
        let client = peer_client_config(&files)?;
        Ok(Arc::new(PeerTls {
            server: ServerTls::load(files, &[])?,
            client: RwLock::new(Arc::new(client)),
        }))
    }

    /// Re-reads the files; on an error the configuration in use stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let client = peer_client_config(self.server.files())?;
        self.server.reload()?;
        *self
            .client
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(client);
        Ok(())
    }

    /// The accepting side of a peer link.
    pub async fn accept(&self, stream: TcpStream) -> Result<ServerStream, TlsError> {
        self.server.accept(stream).await
    }

    /// The dialing side of a peer link to `addr` (`host:port`): the peer's certificate must
    /// be signed by the cluster CA and name `host`.
    pub async fn connect(&self, addr: &str, stream: TcpStream) -> Result<ClientStream, TlsError> {
        let config = self
            .client
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        connect_with(config, addr, stream).await
    }
}

/// The client side of a handshake with the server at `addr` (`host:port`), whose certificate
/// must name `host`.
async fn connect_with(
    config: Arc<ClientConfig>,
    addr: &str,
    stream: TcpStream,
) -> Result<ClientStream, TlsError> {
    let host = addr
        .rsplit_once(':')
        .map_or(addr, |(host, _)| host)
        .trim_start_matches('[')
        .trim_end_matches(']');
    let name = ServerName::try_from(host.to_string())
        .map_err(|e| TlsError::Config(format!("{host:?} cannot name a TLS server: {e}")))?;
    let connector = tokio_rustls::TlsConnector::from(config);
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, connector.connect(name, stream)).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(e)) => Err(TlsError::Handshake(handshake_reason(&e))),
        Err(_) => Err(TlsError::Handshake(format!(
            "not completed within {HANDSHAKE_TIMEOUT:?}"
        ))),
    }
}

/// A client of TLS servers whose certificates the CA in a file signed (the benchmark's
/// drivers against `https://` and `rediss://` targets).
#[derive(Clone)]
pub struct ClientTls {
    config: Arc<ClientConfig>,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls").finish_non_exhaustive()
    }
}

impl ClientTls {
    /// A client that trusts the CA certificates in `ca_file`.
    pub fn load(ca_file: &Path) -> Result<Self, TlsError> {
        let config = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_root_certificates(roots(ca_file)?)
            .with_no_client_auth();
        Ok(ClientTls {
            config: Arc::new(config),
        })
    }

    /// Opens a connection to `addr` (`host:port`) and completes the handshake.
    pub async fn connect(&self, addr: &str) -> Result<ClientStream, TlsError> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| TlsError::Handshake(format!("cannot reach {addr}: {e}")))?;
        let _ = stream.set_nodelay(true);
        connect_with(self.config.clone(), addr, stream).await
    }
}
