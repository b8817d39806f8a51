//! Area 18: TLS on the client ports (HTTPS, RESP over TLS) and on the peer links.
//!
//! Certificates come from `trireme_tls::LocalCa`, made fresh by each test in a temp dir. The
//! clients are the real ones where they exist (curl, redis-cli) and a hand-made tokio-rustls
//! client where the test must see the server's certificate. Every wait polls under a
//! deadline; the only processes signalled or killed are the ones a test started.

use crate::common;

use crate::common::cluster::{ClusterOptions, TestCluster, bounded, peer_addr};
use crate::common::{StartOptions, TestNode, run_program_async, varint, wait_until};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use trireme_tls::LocalCa;

/// How long a client program (curl, redis-cli) may run.
const TOOL_LIMIT: Duration = Duration::from_secs(20);
/// How long a log line or a reloaded certificate may take to show.
const SHOW_LIMIT: Duration = Duration::from_secs(10);

/// A CA and one node certificate (SANs localhost, 127.0.0.1, and the names of nodes n1–n4,
/// which peers check), as files in a temp dir.
struct Pki {
    dir: tempfile::TempDir,
    ca: LocalCa,
    ca_file: PathBuf,
    cert_file: PathBuf,
    key_file: PathBuf,
}

impl Pki {
    fn new() -> Pki {
        let dir = tempfile::Builder::new()
            .prefix("trireme-tls-")
            .tempdir()
            .expect("temp dir");
        let ca = LocalCa::generate().expect("generate a CA");
        let ca_file = ca.write(dir.path()).expect("write the CA");
        let names = ["localhost", "127.0.0.1"]
            .map(String::from)
            .into_iter()
            .chain((1..=4).map(|i| trireme_tls::node_dns_name(&format!("n{i}"))))
            .collect::<Vec<_>>();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let pair = ca.issue("node", &names).expect("node cert");
        let mut pki = Pki {
            dir,
            ca,
            ca_file,
            cert_file: PathBuf::new(),
            key_file: PathBuf::new(),
        };
        (pki.cert_file, pki.key_file) = pki.write_pair("node", &pair);
        pki
    }

    fn ca_pem(&self) -> String {
        self.ca.cert_pem()
    }

    /// Writes a certificate and key issued elsewhere under `name`; their paths.
    fn write_pair(&self, name: &str, (cert, key): &(String, String)) -> (PathBuf, PathBuf) {
        let cert_file = self.dir.path().join(format!("{name}.pem"));
        let key_file = self.dir.path().join(format!("{name}-key.pem"));
        std::fs::write(&cert_file, cert).expect("write cert");
        std::fs::write(&key_file, key).expect("write key");
        (cert_file, key_file)
    }

    /// The `[tls]` table for the client ports.
    fn tls_toml(&self, verify_incoming: bool) -> String {
        format!(
            "[tls]\ncert_file = {}\nkey_file = {}\nca_file = {}\nverify_incoming = {verify_incoming}\n",
            toml_path(&self.cert_file),
            toml_path(&self.key_file),
            toml_path(&self.ca_file),
        )
    }
}

/// The `[peer_tls]` table naming these files.
fn peer_tls_toml(cert: &Path, key: &Path, ca: &Path) -> String {
    format!(
        "[peer_tls]\ncert_file = {}\nkey_file = {}\nca_file = {}\n",
        toml_path(cert),
        toml_path(key),
        toml_path(ca),
    )
}

/// A path as a TOML string (temp paths are ASCII, so Rust's escaping is TOML's).
fn toml_path(path: &Path) -> String {
    format!("{:?}", path.display().to_string())
}

fn s(path: &Path) -> String {
    path.display().to_string()
}

/// Waits for a line of `node`'s stderr, written after byte `from`, that holds every one of
/// `needles`; returns it.
async fn log_line_after(node: &TestNode, from: usize, needles: &[&str]) -> Option<String> {
    let find = || {
        let log = node.stderr_log();
        log.get(from..)?
            .lines()
            .find(|l| needles.iter().all(|n| l.contains(n)))
            .map(str::to_string)
    };
    let found = wait_until(SHOW_LIMIT, Duration::from_millis(20), || async {
        find().is_some()
    })
    .await;
    found.then(find).flatten()
}

/// `curl -sS --fail` with `args` before `url`: (success, stdout, stderr).
async fn curl(args: &[String], url: &str) -> (bool, String, String) {
    let mut all: Vec<&str> = vec!["-sS", "--fail", "--max-time", "10"];
    all.extend(args.iter().map(String::as_str));
    all.push(url);
    run_program_async("curl", &all, TOOL_LIMIT).await
}

/// A TLS client that trusts only `ca_pem` and presents no certificate.
fn connector(ca_pem: &str) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.expect("CA PEM")).expect("CA certificate");
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("protocol versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

type Tls = tokio_rustls::client::TlsStream<TcpStream>;

/// Connects over TLS (checking the server's certificate against the connector's CA and
/// its IP address); returns the stream and the server certificate it showed.
async fn tls_connect(
    connector: &tokio_rustls::TlsConnector,
    addr: SocketAddr,
) -> Result<(Tls, CertificateDer<'static>), String> {
    let attempt = async {
        let tcp = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect {addr}: {e}"))?;
        let name = ServerName::try_from(addr.ip().to_string()).expect("IP server name");
        let stream = connector
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS handshake with {addr}: {e}"))?;
        let cert = stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first())
            .cloned()
            .ok_or("the server showed no certificate")?;
        Ok((stream, cert))
    };
    tokio::time::timeout(SHOW_LIMIT, attempt)
        .await
        .map_err(|_| format!("no TLS handshake with {addr} within {SHOW_LIMIT:?}"))?
}

/// Sends PING on a TLS RESP connection; returns what came back (up to `+PONG\r\n`'s length).
async fn tls_ping(stream: &mut Tls) -> Result<Vec<u8>, String> {
    let attempt = async {
        stream
            .write_all(&common::encode_cmd(&[b"PING"]))
            .await
            .map_err(|e| format!("write: {e}"))?;
        stream.flush().await.map_err(|e| format!("flush: {e}"))?;
        let mut got = Vec::new();
        while got.len() < b"+PONG\r\n".len() {
            let mut chunk = [0u8; 64];
            match stream.read(&mut chunk).await {
                Ok(0) => return Err(format!("closed after {got:?}")),
                Ok(n) => got.extend_from_slice(&chunk[..n]),
                Err(e) => return Err(format!("read: {e}")),
            }
        }
        Ok(got)
    };
    tokio::time::timeout(SHOW_LIMIT, attempt)
        .await
        .map_err(|_| format!("no answer to PING within {SHOW_LIMIT:?}"))?
}

/// The first certificate in a PEM file.
fn cert_der(path: &Path) -> CertificateDer<'static> {
    CertificateDer::from_pem_file(path).expect("certificate PEM")
}

/// An error with its causes (reqwest hides the TLS reason in them).
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(&format!(": {s}"));
        source = s.source();
    }
    out
}

// ---------------------------------------------------------------------------------------
// 1. client ports
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_ports_speak_tls_and_refuse_plain_text() {
    let pki = Pki::new();
    let node = TestNode::start(
        StartOptions {
            ca_pem: Some(pki.ca_pem()),
            ..StartOptions::default()
        }
        .config(&pki.tls_toml(false)),
    )
    .await;
    bounded(Duration::from_secs(120), async {
        let http = node.endpoints().http;
        assert!(node.endpoints().tls, "endpoints.json must say tls: true");
        assert!(
            node.http_url().starts_with("https://"),
            "{}",
            node.http_url()
        );

        // HTTPS through a client that trusts the CA.
        assert!(node.put("tls/k", "over-https").await, "PUT over HTTPS");
        let entry = node.get("tls/k").await.expect("tls/k after PUT");
        assert_eq!(entry.value, b"over-https");

        // curl with the CA reads the value; without it, the server cannot be authenticated.
        let url = format!("https://{http}/v1/kv/tls/k?raw");
        let (ok, out, err) = curl(&["--cacert".into(), s(&pki.ca_file)], &url).await;
        assert!(ok, "curl --cacert failed: {err}");
        assert_eq!(out, "over-https");
        let (ok, out, err) = curl(&[], &url).await;
        assert!(!ok, "curl without the CA must fail, got {out:?}");
        assert!(
            err.contains("certificate"),
            "curl should fail on the certificate: {err}"
        );

        // Plain HTTP to the HTTPS port: no answer, and the node says why.
        let from = node.stderr_log().len();
        let plain = common::http_client()
            .get(format!("http://{http}/v1/health"))
            .send()
            .await;
        assert!(
            plain.is_err(),
            "plain HTTP to the HTTPS port answered: {:?}",
            plain.map(|r| r.status())
        );
        let line = log_line_after(
            &node,
            from,
            &["refused an HTTPS connection", "does not speak TLS"],
        )
        .await;
        assert!(
            line.is_some(),
            "no 'refused an HTTPS connection ... does not speak TLS' line:\n{}",
            node.stderr_log()
        );

        // A client trusting another CA refuses the node's certificate.
        let other = LocalCa::generate().expect("another CA");
        let wrong = common::https_client(&other.cert_pem(), None)
            .get(format!("https://{http}/v1/health"))
            .send()
            .await;
        match wrong {
            Ok(r) => panic!("a client trusting another CA got an answer: {}", r.status()),
            Err(e) => {
                let why = chain(&e);
                assert!(
                    why.contains("certificate") || why.contains("Issuer"),
                    "expected a certificate error, got: {why}"
                );
            }
        }

        // RESP over TLS with redis-cli.
        let port = node.resp_addr().port().to_string();
        let ca = s(&pki.ca_file);
        let tls_cli = |cmd: &[&str]| {
            let mut args = vec!["--tls", "--cacert", &ca, "-h", "127.0.0.1", "-p", &port];
            args.extend_from_slice(cmd);
            args.iter().map(|a| a.to_string()).collect::<Vec<String>>()
        };
        let args = tls_cli(&["SET", "tls:r", "over-tls"]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (ok, out, err) = run_program_async("redis-cli", &args, TOOL_LIMIT).await;
        assert!(
            ok && out.trim() == "OK",
            "redis-cli --tls SET: {out:?} {err:?}"
        );
        let args = tls_cli(&["GET", "tls:r"]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (ok, out, err) = run_program_async("redis-cli", &args, TOOL_LIMIT).await;
        assert!(
            ok && out.trim() == "over-tls",
            "redis-cli --tls GET: {out:?} {err:?}"
        );

        // redis-py 8 at its defaults (RESP3) over TLS, trusting the CA; the value redis-cli
        // wrote is read back, and a write of its own reads back through redis-cli.
        let python = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../target/test-venv/bin/python"
        );
        let script = format!(
            "import redis\n\
             r = redis.Redis(host='127.0.0.1', port={port}, ssl=True, ssl_ca_certs={ca:?})\n\
             assert r.get('tls:r') == b'over-tls', r.get('tls:r')\n\
             r.set('tls:py', 'from-redis-py')\n\
             print('ok')\n"
        );
        let (ok, out, err) = run_program_async(python, &["-c", &script], TOOL_LIMIT).await;
        assert!(
            ok && out.trim() == "ok",
            "redis-py over TLS: {out:?} {err:?}"
        );
        let args = tls_cli(&["GET", "tls:py"]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (ok, out, err) = run_program_async("redis-cli", &args, TOOL_LIMIT).await;
        assert!(
            ok && out.trim() == "from-redis-py",
            "redis-cli --tls GET of redis-py's write: {out:?} {err:?}"
        );

        // Plain RESP to the TLS port: no PONG, and the node says why.
        let from = node.stderr_log().len();
        let (_, out, err) = run_program_async(
            "redis-cli",
            &["-h", "127.0.0.1", "-p", &port, "PING"],
            TOOL_LIMIT,
        )
        .await;
        assert!(
            !out.contains("PONG") && !err.contains("PONG"),
            "plain redis-cli got PONG from the TLS port: {out:?} {err:?}"
        );
        let line = log_line_after(
            &node,
            from,
            &["refused a RESP TLS connection", "does not speak TLS"],
        )
        .await;
        assert!(
            line.is_some(),
            "no 'refused a RESP TLS connection ... does not speak TLS' line:\n{}",
            node.stderr_log()
        );
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// 2. client certificates
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_incoming_requires_a_client_certificate_of_the_ca() {
    let pki = Pki::new();
    let client = pki.ca.issue("client", &["127.0.0.1"]).expect("client cert");
    let node = TestNode::start(
        StartOptions {
            ca_pem: Some(pki.ca_pem()),
            client_pem: Some(format!("{}{}", client.0, client.1)),
            ..StartOptions::default()
        }
        .config(&pki.tls_toml(true)),
    )
    .await;
    bounded(Duration::from_secs(120), async {
        assert!(node.put("mtls/k", "mutual").await, "PUT with a client cert");
        let url = format!("https://{}/v1/kv/mtls/k?raw", node.endpoints().http);
        let ca = s(&pki.ca_file);
        let with = |(cert, key): (PathBuf, PathBuf)| {
            vec![
                "--cacert".to_string(),
                ca.clone(),
                "--cert".into(),
                s(&cert),
                "--key".into(),
                s(&key),
            ]
        };

        // The CA's client certificate gets in.
        let (ok, out, err) = curl(&with(pki.write_pair("client", &client)), &url).await;
        assert!(ok, "curl with the CA's client cert failed: {err}");
        assert_eq!(out, "mutual");

        // Each of these must be refused by the server, for its own reason.
        let foreign = LocalCa::generate()
            .expect("foreign CA")
            .issue("intruder", &["127.0.0.1"])
            .expect("foreign cert");
        let expired = pki
            .ca
            .issue_with("old", &["127.0.0.1"], |p: &mut trireme_tls::IssueParams| {
                p.not_before = trireme_tls::date_time_ymd(2019, 1, 1);
                p.not_after = trireme_tls::date_time_ymd(2020, 1, 1);
            })
            .expect("expired cert");
        // Every LocalCa has the same subject name, so a foreign certificate names the node's CA
        // as its issuer and fails on its signature rather than as of an unknown issuer.
        let cases: Vec<(&str, Vec<String>, &[&str])> = vec![
            (
                "no client certificate",
                vec!["--cacert".into(), ca.clone()],
                &["no certificates"],
            ),
            (
                "a certificate of another CA",
                with(pki.write_pair("foreign", &foreign)),
                &["BadSignature", "UnknownIssuer"],
            ),
            (
                "an expired certificate of the CA",
                with(pki.write_pair("expired", &expired)),
                &["xpired"],
            ),
        ];
        for (what, args, reasons) in cases {
            let from = node.stderr_log().len();
            let (ok, out, err) = curl(&args, &url).await;
            assert!(!ok, "curl with {what} got in: {out:?}");
            let line = log_line_after(&node, from, &["refused an HTTPS connection"]).await;
            let line = line.unwrap_or_else(|| {
                panic!(
                    "no refusal logged for {what} (curl said {err:?}):\n{}",
                    node.stderr_log()
                )
            });
            assert!(
                reasons.iter().any(|r| line.contains(r)),
                "refusal of {what} should say one of {reasons:?}: {line}"
            );
        }
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// 3. SIGHUP
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_are_re_read_on_sighup_without_dropping_connections() {
    let pki = Pki::new();
    let node = TestNode::start(
        StartOptions {
            ca_pem: Some(pki.ca_pem()),
            ..StartOptions::default()
        }
        .config(&pki.tls_toml(false)),
    )
    .await;
    bounded(Duration::from_secs(120), async {
        let tls = connector(&pki.ca_pem());
        let resp = node.resp_addr();
        let http = node.endpoints().http;
        let first = cert_der(&pki.cert_file);

        let (mut old, seen) = tls_connect(&tls, resp).await.expect("TLS RESP connection");
        assert_eq!(seen, first, "the RESP port shows the configured certificate");
        assert_eq!(tls_ping(&mut old).await.as_deref(), Ok(&b"+PONG\r\n"[..]));

        // A new certificate with a new key over the same files.
        let renewed = pki
            .ca
            .issue("node-renewed", &["localhost", "127.0.0.1"])
            .expect("renewed cert");
        std::fs::write(&pki.key_file, &renewed.1).expect("overwrite key");
        std::fs::write(&pki.cert_file, &renewed.0).expect("overwrite cert");
        let second = cert_der(&pki.cert_file);
        assert_ne!(first, second);

        // Files alone change nothing: the node reads them at start and on SIGHUP only.
        let (_, seen) = tls_connect(&tls, resp).await.expect("TLS before SIGHUP");
        assert_eq!(seen, first, "the certificate changed before any SIGHUP");

        let pid = rustix::process::Pid::from_raw(
            i32::try_from(node.pid()).expect("pid fits an i32"),
        )
        .expect("a process id");
        rustix::process::kill_process(pid, rustix::process::Signal::HUP).expect("SIGHUP");

        // New connections, on both client ports, get the new certificate.
        for (port, addr) in [("RESP", resp), ("HTTPS", http)] {
            let deadline = Instant::now() + SHOW_LIMIT;
            let mut last = String::new();
            let renewed = loop {
                match tls_connect(&tls, addr).await {
                    Ok((_, seen)) if seen == second => break true,
                    Ok(_) => last = "the old certificate".into(),
                    Err(e) => last = e,
                }
                if Instant::now() >= deadline {
                    break false;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            };
            assert!(
                renewed,
                "the {port} port never showed the new certificate after SIGHUP (last seen: {last})\n{}",
                node.stderr_log()
            );
        }

        // The connection opened before the reload still works, and so does a new one.
        assert_eq!(
            tls_ping(&mut old).await.as_deref(),
            Ok(&b"+PONG\r\n"[..]),
            "the connection opened before SIGHUP broke\n{}",
            node.stderr_log()
        );
        let (mut new, _) = tls_connect(&tls, resp).await.expect("TLS after SIGHUP");
        assert_eq!(tls_ping(&mut new).await.as_deref(), Ok(&b"+PONG\r\n"[..]));
        assert!(
            trireme_local::process_alive(node.pid()),
            "the node died of SIGHUP"
        );
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// 4. peer links
// ---------------------------------------------------------------------------------------

/// Starts `trireme server --join via` named `name` with `config`, which must not get in:
/// returns its exit status (`None` if it still ran after `limit`, then it is killed) and
/// its stderr. Panics if it ever serves.
async fn join_expecting_failure(
    dir: &Path,
    name: &str,
    via: SocketAddr,
    config: &str,
    log: &str,
    limit: Duration,
) -> (Option<ExitStatus>, String) {
    let data_dir = dir.join(format!("{name}-data"));
    let config_file = dir.join(format!("{name}.toml"));
    std::fs::write(&config_file, config).expect("write config");
    let stderr = dir.join(format!("{name}.stderr"));
    let mut cmd = trireme_local::ServerCommand::new(common::binary(), name, &data_dir);
    cmd.membership = trireme_local::Membership::Join(via.to_string());
    cmd.config = Some(config_file);
    cmd.log = Some(log.to_string());
    let mut process = trireme_local::ServerProcess::new(
        cmd,
        trireme_local::Output::Split {
            stdout: dir.join(format!("{name}.stdout")),
            stderr: stderr.clone(),
        },
    );
    process.spawn().expect("spawn the joining node");
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = process.try_reap() {
            break Some(status);
        }
        // endpoints.json is written once the node has joined and serves.
        if let Some(e) = trireme_local::read_endpoints(&data_dir) {
            panic!(
                "{name} joined and serves: {e:?}\n{}",
                std::fs::read_to_string(&stderr).unwrap_or_default()
            );
        }
        if Instant::now() >= deadline {
            let _ = process.kill();
            break None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    (status, std::fs::read_to_string(&stderr).unwrap_or_default())
}

/// A 3-node cluster whose peer links are mutual TLS with the certificate of `Pki::new`.
async fn cluster_over_peer_tls() -> (Pki, TestCluster) {
    let pki = Pki::new();
    let c = TestCluster::start(ClusterOptions {
        extra_toml: peer_tls_toml(&pki.cert_file, &pki.key_file, &pki.ca_file),
        ..ClusterOptions::default()
    })
    .await;
    (pki, c)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn peer_links_need_a_certificate_of_the_cluster_ca() {
    let (pki, c) = cluster_over_peer_tls().await;
    bounded(Duration::from_secs(240), async {
        // The cluster works over its TLS links: a write through one node reads back,
        // linearizably, through another.
        c.put(0, "peer/k", "over-peer-tls").await;
        let entry = c.get(1, "peer/k", "?consistent").await;
        assert_eq!(
            entry.map(|e| e.value),
            Some(b"over-peer-tls".to_vec()),
            "\n{}",
            c.logs()
        );

        // A foreign CA, and its certificates for 127.0.0.1 and each intruder (which starts
        // only with a certificate naming it).
        let foreign = LocalCa::generate().expect("foreign CA");
        let foreign_dir = tempfile::tempdir().expect("temp dir");
        let foreign_ca = foreign.write(foreign_dir.path()).expect("foreign CA file");
        let foreign_cert = |name: &str| {
            foreign
                .write_node(foreign_dir.path(), name)
                .expect("foreign node cert")
        };
        let (cert_a, key_a) = foreign_cert("intruder-a");
        let (cert_b, key_b) = foreign_cert("intruder-b");
        let cases = [
            (
                "intruder-a",
                "a foreign certificate and the foreign CA",
                peer_tls_toml(&cert_a, &key_a, &foreign_ca),
            ),
            (
                "intruder-b",
                "a foreign certificate and the cluster's CA",
                peer_tls_toml(&cert_b, &key_b, &pki.ca_file),
            ),
        ];
        let via = peer_addr(c.node(0));
        for (name, what, table) in &cases {
            let config = ClusterOptions {
                extra_toml: table.clone(),
                ..c.opts.clone()
            }
            .config_toml();
            let from = c.node(0).stderr_log().len();
            let (status, stderr) = join_expecting_failure(
                foreign_dir.path(),
                name,
                via,
                &config,
                &c.opts.log,
                Duration::from_secs(90),
            )
            .await;
            let status = status.unwrap_or_else(|| {
                panic!("{name} ({what}) neither joined nor gave up in 90 s\n{stderr}")
            });
            assert!(
                !status.success(),
                "{name} ({what}) exited with success\n{stderr}"
            );
            assert!(
                stderr.contains("cannot join"),
                "{name} ({what}) should say it cannot join:\n{stderr}"
            );
            let line = log_line_after(
                c.node(0),
                from,
                &["refused a peer link at its TLS handshake"],
            )
            .await;
            assert!(
                line.is_some(),
                "n1 logged no TLS refusal of {name} ({what})\n{}",
                c.logs()
            );
        }

        // No member ever registered either intruder.
        for i in 0..c.nodes.len() {
            let url = format!("{}/v1/cluster/status", c.node(i).http_url());
            let resp = c
                .http
                .get(&url)
                .send()
                .await
                .expect("GET /v1/cluster/status");
            assert_eq!(resp.status(), 200, "GET {url}");
            let status: trireme_types::cluster_status::ClusterStatus =
                resp.json().await.expect("cluster status JSON");
            let names: Vec<&str> = status.nodes.iter().map(|n| n.name.as_str()).collect();
            assert_eq!(
                names.len(),
                3,
                "{} lists other nodes than the three members: {names:?}",
                c.name(i)
            );
            assert!(
                !names.iter().any(|n| n.starts_with("intruder")),
                "{} lists an intruder: {names:?}",
                c.name(i)
            );
        }
    })
    .await;
}

/// The body of a `Hello` as a node of this build sends it: the frame (postcard: variant 0,
/// cluster name, dialer id, target id), then the dialer's version and its node name.
fn hello_claiming(cluster: &str, name: &str, to: u64) -> Vec<u8> {
    fn text(t: &str, out: &mut Vec<u8>) {
        varint(t.len() as u64, out);
        out.extend_from_slice(t.as_bytes());
    }
    let mut body = vec![0];
    text(cluster, &mut body);
    varint(trireme_types::NodeId::from_name(name).0, &mut body);
    varint(to, &mut body);
    let version = trireme_types::version::Version::current();
    varint(u64::from(version.protocol), &mut body);
    text(&version.build, &mut body);
    text(name, &mut body);
    let mut framed = u32::try_from(body.len())
        .expect("small")
        .to_be_bytes()
        .to_vec();
    framed.extend(body);
    framed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_certificate_for_another_node_neither_links_nor_joins() {
    let (pki, c) = cluster_over_peer_tls().await;
    bounded(Duration::from_secs(240), async {
        // A certificate the cluster CA signed, for a node n9 that is no member.
        let (other_cert, other_key) = pki.ca.write_node(pki.dir.path(), "n9").expect("n9 cert");

        // It opens a link claiming to be the member with the lowest id, to the one with the
        // highest (the lower id dials), with a handshake as this build sends it.
        let mut members: Vec<(u64, usize)> = (0..3)
            .map(|i| (trireme_types::NodeId::from_name(&c.name(i)).0, i))
            .collect();
        members.sort();
        let (claimed, target) = (c.name(members[0].1), members[2].1);
        let tls = trireme_tls::PeerTls::load(trireme_tls::TlsFiles {
            cert_file: other_cert.clone(),
            key_file: other_key.clone(),
            ca_file: Some(pki.ca_file.clone()),
            verify_incoming: true,
        })
        .expect("n9's TLS");
        let addr = peer_addr(c.node(target));
        let from = c.node(target).stderr_log().len();
        let tcp = TcpStream::connect(addr).await.expect("reach the peer port");
        let mut link = tls
            .connect(&addr.to_string(), tcp)
            .await
            .expect("the certificate chains to the cluster CA: TLS itself succeeds");
        link.write_all(&hello_claiming("trireme", &claimed, members[2].0))
            .await
            .expect("send the hello");
        let mut answer = Vec::new();
        let read = tokio::time::timeout(SHOW_LIMIT, link.read_to_end(&mut answer)).await;
        assert!(read.is_ok(), "the node kept the forged link open");
        let answer = String::from_utf8_lossy(&answer);
        let expected = format!("does not name node {claimed}");
        assert!(
            answer.contains(&expected),
            "the refusal says why: {answer:?}"
        );
        let line = log_line_after(c.node(target), from, &["refused a peer link", &expected]).await;
        assert!(line.is_some(), "no refusal logged\n{}", c.logs());

        // A join request for n4 (a probe, as a starting node sends first: the golden
        // encoding of one) over that certificate is refused.
        let golden = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../cluster/golden/cluster.golden"
        ))
        .expect("the cluster's golden encodings");
        let probe_n4 = golden
            .lines()
            .find_map(|l| l.strip_prefix("join.request "))
            .map(|hex| {
                (0..hex.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
                    .collect::<Vec<u8>>()
            })
            .expect("a recorded join request");
        let mut body = vec![5]; // Frame::Join
        varint(7, &mut body);
        body.extend_from_slice(b"trireme");
        varint(probe_n4.len() as u64, &mut body);
        body.extend(probe_n4);
        // What a build of this protocol sends after the frame: its version and its name.
        let own = trireme_types::version::Version::current();
        varint(u64::from(own.protocol), &mut body);
        varint(own.build.len() as u64, &mut body);
        body.extend_from_slice(own.build.as_bytes());
        varint(2, &mut body);
        body.extend_from_slice(b"n4");
        let mut join = u32::try_from(body.len())
            .expect("small")
            .to_be_bytes()
            .to_vec();
        join.extend(body);
        let addr = peer_addr(c.node(0));
        let tcp = TcpStream::connect(addr).await.expect("reach the peer port");
        let mut link = tls.connect(&addr.to_string(), tcp).await.expect("TLS");
        link.write_all(&join).await.expect("send the join request");
        let mut answer = Vec::new();
        let read = tokio::time::timeout(SHOW_LIMIT, link.read_to_end(&mut answer)).await;
        assert!(read.is_ok(), "the node kept the forged join open");
        let answer = String::from_utf8_lossy(&answer);
        assert!(
            answer.contains("cannot join") && answer.contains("does not name node n4"),
            "the refusal says why: {answer:?}"
        );

        // A node started with a certificate that does not name it refuses to start at all:
        // every peer would refuse it.
        let config = ClusterOptions {
            extra_toml: peer_tls_toml(&other_cert, &other_key, &pki.ca_file),
            ..c.opts.clone()
        }
        .config_toml();
        let (status, stderr) = join_expecting_failure(
            pki.dir.path(),
            "n4",
            peer_addr(c.node(0)),
            &config,
            &c.opts.log,
            Duration::from_secs(90),
        )
        .await;
        let status = status.unwrap_or_else(|| panic!("n4 neither joined nor gave up\n{stderr}"));
        assert!(
            !status.success(),
            "n4 joined with n9's certificate\n{stderr}"
        );
        assert!(
            stderr.contains("does not name node n4 (node-n4.trireme)"),
            "n4 should say why it cannot start:\n{stderr}"
        );

        // The members still serve one another, and none registered n4.
        c.put(0, "identity/k", "after the impostors").await;
        let entry = c.get(2, "identity/k", "?consistent").await;
        assert_eq!(
            entry.map(|e| e.value),
            Some(b"after the impostors".to_vec())
        );
        let url = format!("{}/v1/cluster/status", c.node(0).http_url());
        let status: trireme_types::cluster_status::ClusterStatus = c
            .http
            .get(&url)
            .send()
            .await
            .expect("status")
            .json()
            .await
            .expect("status JSON");
        assert!(
            status
                .nodes
                .iter()
                .all(|n| n.name != "n4" && n.name != "n9"),
            "{:?}",
            status.nodes
        );
    })
    .await;
}
