//! `trireme chaos --secure`: the same run with ACLs (default deny) and TLS on every port, so
//! that faults are shown not to break a secure cluster. A CA, one certificate for every node
//! (naming all the lab's addresses and nodes) and a management token are made in the run's
//! directory; the clients send the token and trust the CA.

use crate::ChaosError;
use crate::lab::LabNode;
use std::path::PathBuf;
use std::sync::RwLock;

/// What a secure run's nodes and clients share.
#[derive(Debug, Clone)]
pub struct Security {
    /// The management token the clients send.
    pub token: String,
    /// The CA certificate the clients trust.
    pub ca_file: PathBuf,
    /// The `[acl]`, `[tls]` and `[peer_tls]` tables of the nodes' config.
    pub config: String,
}

/// The security of the run in progress, for the clients made deep in the workload (one run
/// at a time per process).
static CURRENT: RwLock<Option<Security>> = RwLock::new(None);

/// The security of the run in progress, if it is secure.
pub fn current() -> Option<Security> {
    CURRENT
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

/// Makes the CA, the node certificate and the token in `dir/tls` for `nodes`, and makes them
/// the current run's (`None` clears it, for a plain run).
pub fn prepare(dir: &std::path::Path, nodes: Option<&[LabNode]>) -> Result<(), ChaosError> {
    let security = match nodes {
        None => None,
        Some(nodes) => Some(make(dir, nodes)?),
    };
    if let Some(security) = &security {
        trireme_bench::driver::use_ca_file(&security.ca_file).map_err(ChaosError::Config)?;
    }
    *CURRENT
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = security;
    Ok(())
}

fn make(dir: &std::path::Path, nodes: &[LabNode]) -> Result<Security, ChaosError> {
    let tls = dir.join("tls");
    std::fs::create_dir_all(&tls).map_err(|e| ChaosError::io(tls.display(), e))?;
    let tls_error = |e: trireme_tls::TlsError| ChaosError::Config(e.to_string());
    let ca = trireme_tls::LocalCa::generate().map_err(tls_error)?;
    let ca_file = ca.write(&tls).map_err(tls_error)?;
    // The lab's addresses, and the name of every node that may run, which peers check: the
    // lab's, and those that replace a node removed by force (named after the lab's, see
    // `elastic.rs`). The lab shares one certificate among its nodes: what it tests is
    // faults, not impostors.
    let mut names: Vec<String> = nodes.iter().map(|n| n.ip.to_string()).collect();
    names.extend((1..=2 * nodes.len()).map(|i| trireme_tls::node_dns_name(&format!("n{i}"))));
    names.push("localhost".into());
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let (cert, key) = ca.issue("chaos-node", &names).map_err(tls_error)?;
    let (cert_file, key_file) = (tls.join("node.pem"), tls.join("node-key.pem"));
    std::fs::write(&cert_file, &cert).map_err(|e| ChaosError::io(cert_file.display(), e))?;
    trireme_tls::write_private(&key_file, &key).map_err(tls_error)?;
    let token = format!("chaos-{:016x}", rand::random::<u64>());
    let files = format!(
        "cert_file = \"{}\"\nkey_file = \"{}\"\nca_file = \"{}\"\n",
        cert_file.display(),
        key_file.display(),
        ca_file.display()
    );
    let config = format!(
        "[acl]\nenabled = true\ndefault_policy = \"deny\"\ninitial_management_token = \"{token}\"\n[tls]\n{files}[peer_tls]\n{files}"
    );
    Ok(Security {
        token,
        ca_file,
        config,
    })
}
