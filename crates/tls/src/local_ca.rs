//! A certificate authority made on the spot, for secure local clusters and tests: one CA,
//! and a certificate per node for `localhost` and `127.0.0.1`, good for both ends of a link.

use crate::TlsError;
use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use std::path::{Path, PathBuf};

/// The CA's common name, followed by a fingerprint of its public key: issued certificates
/// name it as their issuer, so a CA read back from its key gets the same one, and two CAs
/// never share a name (a certificate of another CA is then refused as unknown, not as
/// badly signed).
fn ca_name(key: &KeyPair) -> String {
    // FNV-1a: a label, not a security measure.
    let fingerprint = key
        .public_key_raw()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
    format!("Trireme local CA {fingerprint:016x}")
}

/// A CA that issues node and client certificates.
pub struct LocalCa {
    cert: Certificate,
    key: KeyPair,
}

fn generate_error(e: impl std::fmt::Display) -> TlsError {
    TlsError::Generate(e.to_string())
}

fn ca_params(key: &KeyPair) -> Result<CertificateParams, TlsError> {
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(generate_error)?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, ca_name(key));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    Ok(params)
}

fn write(path: &Path, text: &str) -> Result<(), TlsError> {
    std::fs::write(path, text).map_err(|e| TlsError::File {
        path: path.to_path_buf(),
        message: format!("cannot write: {e}"),
    })
}

/// Writes a secret (a private key) readable by its owner only.
pub fn write_private(path: &Path, text: &str) -> Result<(), TlsError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut file| file.write_all(text.as_bytes()))
        .map_err(|e| TlsError::File {
            path: path.to_path_buf(),
            message: format!("cannot write: {e}"),
        })
}

impl LocalCa {
    /// A new CA with a fresh key.
    pub fn generate() -> Result<Self, TlsError> {
        let key = KeyPair::generate().map_err(generate_error)?;
        let cert = ca_params(&key)?.self_signed(&key).map_err(generate_error)?;
        Ok(LocalCa { cert, key })
    }

    /// The CA whose key is in `key_file` (as [`LocalCa::write`] left it), to issue more
    /// certificates (a node added to a secure local cluster).
    pub fn from_key_file(key_file: &Path) -> Result<Self, TlsError> {
        let pem = std::fs::read_to_string(key_file).map_err(|e| TlsError::File {
            path: key_file.to_path_buf(),
            message: e.to_string(),
        })?;
        let key = KeyPair::from_pem(&pem).map_err(generate_error)?;
        let cert = ca_params(&key)?.self_signed(&key).map_err(generate_error)?;
        Ok(LocalCa { cert, key })
    }

    /// The CA certificate, PEM.
    pub fn cert_pem(&self) -> String {
        self.cert.pem()
    }

    /// Writes `ca.pem` and `ca-key.pem` into `dir`; the certificate's path.
    pub fn write(&self, dir: &Path) -> Result<PathBuf, TlsError> {
        let cert = dir.join("ca.pem");
        write(&cert, &self.cert.pem())?;
        write_private(&dir.join("ca-key.pem"), &self.key.serialize_pem())?;
        Ok(cert)
    }

    /// A certificate for `names` (DNS names or IP addresses), usable as a server and as a
    /// client: PEM certificate and PEM key.
    pub fn issue(&self, common_name: &str, names: &[&str]) -> Result<(String, String), TlsError> {
        self.issue_with(common_name, names, |_| {})
    }

    /// [`LocalCa::issue`], with a last change to the certificate's parameters (tests make
    /// expired certificates this way).
    pub fn issue_with(
        &self,
        common_name: &str,
        names: &[&str],
        adjust: impl FnOnce(&mut CertificateParams),
    ) -> Result<(String, String), TlsError> {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).map_err(generate_error)?;
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        adjust(&mut params);
        let key = KeyPair::generate().map_err(generate_error)?;
        let cert = params
            .signed_by(&key, &self.cert, &self.key)
            .map_err(generate_error)?;
        Ok((cert.pem(), key.serialize_pem()))
    }

    /// Issues node `name`'s certificate, for `localhost`, `127.0.0.1` and the node's own name
    /// ([`crate::node_dns_name`], which peers check), and writes it to `<dir>/<name>.pem` and
    /// `<dir>/<name>-key.pem`; their paths.
    pub fn write_node(&self, dir: &Path, name: &str) -> Result<(PathBuf, PathBuf), TlsError> {
        let node = crate::node_dns_name(name);
        let (cert, key) = self.issue(name, &["localhost", "127.0.0.1", &node])?;
        let cert_file = dir.join(format!("{name}.pem"));
        let key_file = dir.join(format!("{name}-key.pem"));
        write(&cert_file, &cert)?;
        write_private(&key_file, &key)?;
        Ok((cert_file, key_file))
    }
}

/// Re-exported so callers can adjust issued certificates without naming rcgen.
pub use rcgen::{CertificateParams as IssueParams, date_time_ymd};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ServerTls, TlsFiles};

    #[test]
    fn issued_certificates_load_as_a_server_and_a_ca_read_back_issues_compatible_ones() {
        let dir = tempfile::tempdir().unwrap();
        let ca = LocalCa::generate().unwrap();
        let ca_file = ca.write(dir.path()).unwrap();
        let (cert_file, key_file) = ca.write_node(dir.path(), "n1").unwrap();
        let files = TlsFiles {
            cert_file,
            key_file,
            ca_file: Some(ca_file),
            verify_incoming: true,
        };
        let tls = ServerTls::load(files.clone(), &[b"http/1.1"]).unwrap();
        tls.reload().unwrap();
        let again = LocalCa::from_key_file(&dir.path().join("ca-key.pem")).unwrap();
        let (cert_file, key_file) = again.write_node(dir.path(), "n2").unwrap();
        ServerTls::load(
            TlsFiles {
                cert_file,
                key_file,
                ..files
            },
            &[],
        )
        .unwrap();
    }

    #[test]
    fn a_node_certificate_names_its_node_and_no_other() {
        let dir = tempfile::tempdir().unwrap();
        let ca = LocalCa::generate().unwrap();
        let (n1, _) = ca.write_node(dir.path(), "n1").unwrap();
        let (odd, _) = ca.write_node(dir.path(), "node_7.east").unwrap();
        assert!(crate::certificate_file_names_node(&n1, "n1").unwrap());
        assert!(!crate::certificate_file_names_node(&n1, "n2").unwrap());
        assert!(!crate::certificate_file_names_node(&n1, "n").unwrap());
        assert!(crate::certificate_file_names_node(&odd, "node_7.east").unwrap());
        // Certificates compare names ignoring case; node ids do not: capitals are refused.
        assert!(!crate::certificate_file_names_node(&n1, "N1").unwrap());
        assert!(
            crate::check_node_name("N1")
                .unwrap_err()
                .contains("lower case")
        );
        for unusable in ["n1-", "a..b", ".x", &"x".repeat(60)] {
            assert!(crate::check_node_name(unusable).is_err(), "{unusable}");
        }
        // A certificate for addresses only, as they were issued before nodes were named.
        let (cert, _) = ca.issue("n1", &["localhost", "127.0.0.1"]).unwrap();
        let old = dir.path().join("old.pem");
        std::fs::write(&old, cert).unwrap();
        assert!(!crate::certificate_file_names_node(&old, "n1").unwrap());
    }

    #[test]
    fn missing_or_empty_files_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        let files = TlsFiles {
            cert_file: empty.clone(),
            key_file: dir.path().join("missing.pem"),
            ca_file: None,
            verify_incoming: false,
        };
        let error = ServerTls::load(files.clone(), &[]).unwrap_err().to_string();
        assert!(error.contains("empty.pem"), "{error}");
        let files = TlsFiles {
            verify_incoming: true,
            ..files
        };
        assert!(ServerTls::load(files, &[]).is_err());
    }
}
