//! `cluster up --secure`: a CA and a certificate per node in `<dir>/tls/`, a management
//! token, and a config per node (`<dir>/n<k>.toml`) that turns on ACLs (default deny), TLS on
//! the client ports and mutual TLS between nodes. Made once and reused by later starts and
//! by `cluster add`, so a restarted cluster keeps its CA and token.

use crate::{Error, Result};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The folder of the CA, the node certificates and the token.
pub fn tls_dir(dir: &Path) -> PathBuf {
    dir.join("tls")
}

/// The CA certificate clients must trust.
pub fn ca_file(dir: &Path) -> PathBuf {
    tls_dir(dir).join("ca.pem")
}

/// Where the management token is kept.
pub fn token_file(dir: &Path) -> PathBuf {
    tls_dir(dir).join("management-token")
}

/// Node `name`'s config file.
pub fn config_file(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.toml"))
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> Error {
    move |e| Error::io(what, e)
}

fn tls_error(e: trireme_tls::TlsError) -> Error {
    Error::Refused(format!("cannot set up TLS: {e}"))
}

/// A new secret: 16 bytes from the kernel's CSPRNG, in hex.
fn new_secret() -> Result<String> {
    let mut bytes = [0u8; 16];
    let mut random =
        std::fs::File::open("/dev/urandom").map_err(io("cannot open /dev/urandom".into()))?;
    std::io::Read::read_exact(&mut random, &mut bytes)
        .map_err(io("cannot read /dev/urandom".into()))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The management token, made on the first secure start.
pub fn management_token(dir: &Path) -> Result<String> {
    let path = token_file(dir);
    match std::fs::read_to_string(&path) {
        Ok(token) => Ok(token.trim().to_string()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let token = new_secret()?;
            trireme_tls::write_private(&path, &format!("{token}\n")).map_err(tls_error)?;
            Ok(token)
        }
        Err(e) => Err(Error::io(format!("cannot read {}", path.display()), e)),
    }
}

/// Makes (or keeps) the CA, node `name`'s certificate and config; the config's path.
pub fn prepare_node(dir: &Path, name: &str) -> Result<PathBuf> {
    let tls = tls_dir(dir);
    {
        use std::os::unix::fs::DirBuilderExt as _;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&tls)
            .map_err(io(format!("cannot create {}", tls.display())))?;
    }
    let ca_key = tls.join("ca-key.pem");
    let ca = if ca_key.exists() {
        trireme_tls::LocalCa::from_key_file(&ca_key).map_err(tls_error)?
    } else {
        let ca = trireme_tls::LocalCa::generate().map_err(tls_error)?;
        ca.write(&tls).map_err(tls_error)?;
        ca
    };
    let cert = tls.join(format!("{name}.pem"));
    let key = tls.join(format!("{name}-key.pem"));
    // A certificate from before peers checked node names does not name its node: issued again.
    let names_node = cert.exists()
        && trireme_tls::certificate_file_names_node(&cert, name).map_err(tls_error)?;
    if !names_node || !key.exists() {
        ca.write_node(&tls, name).map_err(tls_error)?;
    }
    let token = management_token(dir)?;
    let ca_pem = ca_file(dir);
    let config = format!(
        "# Written by `trireme cluster up --secure`.\n\
         [acl]\nenabled = true\ndefault_policy = \"deny\"\ninitial_management_token = \"{token}\"\n\n\
         [tls]\ncert_file = \"{cert}\"\nkey_file = \"{key}\"\nca_file = \"{ca}\"\n\n\
         [peer_tls]\ncert_file = \"{cert}\"\nkey_file = \"{key}\"\nca_file = \"{ca}\"\n",
        cert = cert.display(),
        key = key.display(),
        ca = ca_pem.display(),
    );
    // It holds the management token.
    let path = config_file(dir, name);
    trireme_tls::write_private(&path, &config).map_err(tls_error)?;
    Ok(path)
}

/// A client for the nodes of a secure cluster in `dir`: trusts its CA, sends its management
/// token.
pub fn client(dir: &Path, timeout: Duration) -> Result<reqwest::Client> {
    let pem = std::fs::read(ca_file(dir))
        .map_err(io(format!("cannot read {}", ca_file(dir).display())))?;
    let ca = reqwest::Certificate::from_pem(&pem)?;
    let mut headers = reqwest::header::HeaderMap::new();
    let mut token = reqwest::header::HeaderValue::from_str(&management_token(dir)?)
        .map_err(|e| Error::Refused(format!("unusable management token: {e}")))?;
    token.set_sensitive(true);
    headers.insert("X-Consul-Token", token);
    Ok(reqwest::Client::builder()
        .no_proxy()
        .connect_timeout(timeout)
        .timeout(timeout)
        .tls_built_in_root_certs(false)
        .add_root_certificate(ca)
        .default_headers(headers)
        .build()?)
}
