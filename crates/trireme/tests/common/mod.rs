//! Test harness: real `trireme server` processes on loopback ports.
//!
//! A [`TestNode`] owns one server process (a `trireme_local::ServerProcess`, the supervisor
//! `trireme cluster up` and the chaos runner use too), its data directory and the files its
//! stdout and stderr go to, so a failing test can print what the server said. Everything
//! waits by polling a condition under a deadline; nothing sleeps in place of synchronization.

#![allow(dead_code)]

pub mod browser;
pub mod clients;
pub mod cluster;
pub mod redis;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
pub use trireme_bench::reply::Reply;
use trireme_bench::reply::parse_reply;

/// Percent-encodes `text` for a URL's query (everything but unreserved characters).
pub fn url_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `GET /metrics` of the node at `base`, as text.
pub async fn metrics_text(http: &reqwest::Client, base: &str) -> String {
    let resp = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .expect("GET /metrics");
    assert_eq!(resp.status(), reqwest::StatusCode::OK, "GET /metrics");
    resp.text().await.expect("metrics text")
}

/// The value of the sample `series` (name and labels, as printed) in a metrics text.
pub fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// Like [`metric`], panicking with the text when the series is missing.
pub fn metric_of(text: &str, series: &str) -> f64 {
    metric(text, series).unwrap_or_else(|| panic!("no sample {series} in /metrics:\n{text}"))
}

/// Runs a program to completion with a deadline; returns (success, stdout, stderr).
pub fn run_program(program: &str, args: &[String], limit: Duration) -> (bool, String, String) {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("{program} cannot start ({e}): run scripts/install-test-deps.sh")
        });
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("{program} {args:?} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Asserts a JSON error answer with `status` and `code` (the HTTP APIs' error shape);
/// returns its message, which must not be empty.
pub async fn expect_error(
    resp: reqwest::Response,
    status: reqwest::StatusCode,
    code: &str,
) -> String {
    assert_eq!(resp.status(), status, "status of an error answer");
    let body: serde_json::Value = resp.json().await.expect("error body is JSON");
    assert_eq!(body["code"], code, "error code in {body}");
    let message = body["error"].as_str().expect("error message").to_string();
    assert!(!message.is_empty(), "empty error message");
    message
}

/// Runs `program ARGS` within `limit` without holding up the async runtime (for tests that
/// also drive a server): success, stdout, stderr. Output is read while the program runs, so
/// a long one never fills its pipe; the program is killed if the test gives up on it.
pub async fn run_program_async(
    program: &str,
    args: &[&str],
    limit: Duration,
) -> (bool, String, String) {
    let output = tokio::time::timeout(
        limit,
        tokio::process::Command::new(program)
            .args(args)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("{program} {args:?} did not finish within {limit:?}"))
    .unwrap_or_else(|e| panic!("{program} cannot start ({e}): run scripts/install-test-deps.sh"));
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Runs `trireme bench ARGS` (within 2 minutes) and returns its stdout, failing the test on
/// a non-zero exit with everything it printed.
pub async fn run_bench(args: &[&str]) -> String {
    let mut all = vec!["bench"];
    all.extend_from_slice(args);
    let (ok, stdout, stderr) = run_program_async(binary(), &all, Duration::from_secs(120)).await;
    assert!(
        ok,
        "trireme bench {args:?} failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    stdout
}

/// How long a node may take to start, stop, or answer before a test gives up.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// The path of the binary under test.
pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_trireme")
}

/// Polls `cond` every `every` until it holds or `timeout` passes; returns whether it held.
pub async fn wait_until<F, Fut>(timeout: Duration, every: Duration, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if cond().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(every).await;
    }
}

/// An HTTP client that never goes through a proxy (all targets are on loopback).
pub fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(20))
        .build()
        .expect("build reqwest client")
}

/// How to start a node. `Default` is a one-node cluster named `n1` with default shards.
#[derive(Clone, Debug)]
pub struct StartOptions {
    pub node_id: String,
    pub shards: Option<u32>,
    pub cluster_name: Option<String>,
    /// Written to `config.toml` in the temp dir and passed as `--config`.
    pub config_toml: Option<String>,
    pub log: String,
    pub extra_args: Vec<String>,
    /// `--http`, `--resp`, `--peer`; `None` is `127.0.0.1:0`. A multi-node cluster needs
    /// its peer addresses known before any node starts, and a restart keeps them.
    pub http_addr: Option<String>,
    pub resp_addr: Option<String>,
    pub peer_addr: Option<String>,
    /// `--initial-cluster` (`n1=127.0.0.1:P1,...`).
    pub initial_cluster: Option<String>,
    /// `--join HOST:PEER_PORT`: enter a running cluster through that member (excludes
    /// `initial_cluster`).
    pub join: Option<String>,
    /// The CA certificate (PEM) the node's `[tls]` certificate chains to: the test's HTTP
    /// client trusts it.
    pub ca_pem: Option<String>,
    /// A client certificate and its key (PEM, concatenated) the test's HTTP client presents,
    /// for a node with `verify_incoming = true`.
    pub client_pem: Option<String>,
    /// Environment variables of the server process (run through `env`, which execs it, so
    /// the PID is the server's).
    pub env: Vec<(String, String)>,
    /// `--data-dir`; `None` is `data` in the node's temp dir.
    pub data_dir: Option<PathBuf>,
}

impl Default for StartOptions {
    fn default() -> Self {
        StartOptions {
            node_id: "n1".into(),
            shards: None,
            cluster_name: None,
            config_toml: None,
            log: "warn".into(),
            extra_args: Vec::new(),
            http_addr: None,
            resp_addr: None,
            peer_addr: None,
            initial_cluster: None,
            join: None,
            ca_pem: None,
            client_pem: None,
            env: Vec::new(),
            data_dir: None,
        }
    }
}

impl StartOptions {
    #[must_use]
    pub fn shards(mut self, n: u32) -> Self {
        self.shards = Some(n);
        self
    }

    #[must_use]
    pub fn config(mut self, toml: &str) -> Self {
        self.config_toml = Some(toml.to_string());
        self
    }
}

/// The addresses a ready node published in `endpoints.json`.
#[derive(Clone, Debug)]
pub struct Endpoints {
    pub node: String,
    pub http: SocketAddr,
    pub resp: SocketAddr,
    pub peer: SocketAddr,
    pub pid: u32,
    /// Whether the client ports speak TLS.
    pub tls: bool,
}

impl Endpoints {
    fn parse(e: &trireme_local::Endpoints) -> Option<Endpoints> {
        Some(Endpoints {
            node: e.node.clone(),
            http: e.http.parse().ok()?,
            resp: e.resp.parse().ok()?,
            peer: e.peer.parse().ok()?,
            pid: e.pid,
            tls: e.tls,
        })
    }
}

/// An HTTP client that trusts the CA certificate `ca_pem` (for nodes with `[tls]`) and, if
/// given, presents the client certificate and key in `client_pem`.
pub fn https_client(ca_pem: &str, client_pem: Option<&str>) -> reqwest::Client {
    let mut builder = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(20))
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca_pem.as_bytes()).expect("CA PEM"));
    if let Some(pem) = client_pem {
        builder =
            builder.identity(reqwest::Identity::from_pem(pem.as_bytes()).expect("client PEM"));
    }
    builder.build().expect("build reqwest client")
}

/// One running `trireme server` process. Dropping it SIGKILLs that process (and only it).
pub struct TestNode {
    opts: StartOptions,
    dir: tempfile::TempDir,
    /// The current (or last) run's process; rebuilt at each start from the options.
    process: Option<trireme_local::ServerProcess>,
    endpoints: Option<Endpoints>,
    /// Counts starts, so each run's stdout/stderr go to their own files.
    generation: u32,
    pub http: reqwest::Client,
}

impl TestNode {
    /// Starts a node in a fresh temp dir and waits until it is ready and healthy.
    pub async fn start(opts: StartOptions) -> TestNode {
        let dir = tempfile::Builder::new()
            .prefix("trireme-it-")
            .tempdir()
            .expect("create temp dir");
        let mut node = TestNode {
            dir,
            process: None,
            endpoints: None,
            generation: 0,
            http: match &opts.ca_pem {
                Some(ca) => https_client(ca, opts.client_pem.as_deref()),
                None => http_client(),
            },
            opts,
        };
        node.spawn_and_wait().await;
        node
    }

    /// The directory given as `--data-dir`.
    pub fn data_dir(&self) -> PathBuf {
        self.opts
            .data_dir
            .clone()
            .unwrap_or_else(|| self.dir.path().join("data"))
    }

    /// The temp dir that holds the data dir, the config and the logs.
    pub fn temp_dir(&self) -> &Path {
        self.dir.path()
    }

    fn stdout_path(&self) -> PathBuf {
        self.dir
            .path()
            .join(format!("stdout.{}.log", self.generation))
    }

    fn stderr_path(&self) -> PathBuf {
        self.dir
            .path()
            .join(format!("stderr.{}.log", self.generation))
    }

    /// What the current (or last) process wrote to stderr.
    pub fn stderr_log(&self) -> String {
        std::fs::read_to_string(self.stderr_path()).unwrap_or_default()
    }

    /// What every process started so far wrote to stderr, oldest first, each run headed by
    /// its number.
    pub fn stderr_all(&self) -> String {
        let mut out = String::new();
        for generation in 1..=self.generation {
            let path = self.dir.path().join(format!("stderr.{generation}.log"));
            let text = std::fs::read_to_string(path).unwrap_or_default();
            out.push_str(&format!(
                "--- {} run {generation} ---\n{text}",
                self.opts.node_id
            ));
        }
        out
    }

    /// Whether a process started by this node is (as far as the harness knows) running.
    pub fn is_running(&self) -> bool {
        self.process
            .as_ref()
            .is_some_and(trireme_local::ServerProcess::is_running)
    }

    /// The options the node was started with.
    pub fn options(&self) -> &StartOptions {
        &self.opts
    }

    /// What the current (or last) process wrote to stdout.
    pub fn stdout_log(&self) -> String {
        std::fs::read_to_string(self.stdout_path()).unwrap_or_default()
    }

    /// Waits (bounded) for the "ready" line on stdout and returns stdout.
    pub async fn ready_stdout(&self) -> String {
        let found = wait_until(DEADLINE, Duration::from_millis(10), || async {
            self.stdout_log().contains(" ready: ")
        })
        .await;
        assert!(found, "no ready line on stdout: {:?}", self.stdout_log());
        self.stdout_log()
    }

    /// The `trireme server` command for this node (port 0 unless the options name one).
    pub fn server_command(&self) -> trireme_local::ServerCommand {
        use trireme_local::Membership;
        let mut cmd =
            trireme_local::ServerCommand::new(binary(), &self.opts.node_id, self.data_dir());
        let addr = |a: &Option<String>| a.clone().unwrap_or_else(|| "127.0.0.1:0".into());
        cmd.http = addr(&self.opts.http_addr);
        cmd.resp = addr(&self.opts.resp_addr);
        cmd.peer = addr(&self.opts.peer_addr);
        cmd.membership = match (&self.opts.initial_cluster, &self.opts.join) {
            (Some(initial), _) => Membership::Bootstrap(initial.clone()),
            (None, Some(peer)) => Membership::Join(peer.clone()),
            (None, None) => Membership::Alone,
        };
        cmd.shards = self.opts.shards;
        cmd.cluster_name.clone_from(&self.opts.cluster_name);
        cmd.log = Some(self.opts.log.clone());
        if let Some(toml) = &self.opts.config_toml {
            let path = self.dir.path().join("config.toml");
            std::fs::write(&path, toml).expect("write config.toml");
            cmd.config = Some(path);
        }
        cmd.extra.clone_from(&self.opts.extra_args);
        if !self.opts.env.is_empty() {
            cmd.wrapper = std::iter::once("env".to_string())
                .chain(self.opts.env.iter().map(|(k, v)| format!("{k}={v}")))
                .collect();
        }
        cmd
    }

    /// The arguments of `trireme server` for this node.
    pub fn server_args(&self) -> Vec<String> {
        self.server_command()
            .server_args()
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    async fn spawn_and_wait(&mut self) {
        self.spawn_process();
        self.wait_ready().await;
    }

    /// Starts a new process on the same data dir without waiting for it: it may need nodes
    /// that are down to become ready. [`TestNode::wait_ready`] waits for it later.
    pub fn restart_in_background(&mut self) {
        self.spawn_process();
    }

    fn spawn_process(&mut self) {
        assert!(!self.is_running(), "a process is already running");
        self.generation += 1;
        let output = trireme_local::Output::Split {
            stdout: self.stdout_path(),
            stderr: self.stderr_path(),
        };
        let process = self.process.insert(trireme_local::ServerProcess::new(
            self.server_command(),
            output,
        ));
        process.spawn().expect("spawn trireme server");
        self.endpoints = None;
    }

    /// Waits until the process started last serves and is healthy.
    pub async fn wait_ready(&mut self) {
        let http = self.http.clone();
        let process = self.running_process();
        let endpoints = match process.wait_serving(&http, DEADLINE).await {
            Ok(e) => Endpoints::parse(&e).expect("endpoints.json holds socket addresses"),
            Err(e) => panic!("{e}\n--- stderr ---\n{}", self.stderr_log()),
        };
        assert_eq!(
            endpoints.node, self.opts.node_id,
            "endpoints.json names another node"
        );
        self.endpoints = Some(endpoints);
    }

    fn running_process(&mut self) -> &mut trireme_local::ServerProcess {
        self.process
            .as_mut()
            .filter(|p| p.is_running())
            .expect("node is not running")
    }

    /// The endpoints of the running process.
    pub fn endpoints(&self) -> &Endpoints {
        self.endpoints.as_ref().expect("node is not running")
    }

    /// `http://127.0.0.1:PORT` (`https://` for a node with TLS).
    pub fn http_url(&self) -> String {
        let endpoints = self.endpoints();
        let scheme = if endpoints.tls { "https" } else { "http" };
        format!("{scheme}://{}", endpoints.http)
    }

    /// `http://127.0.0.1:PORT/v1/kv/<key>`.
    pub fn kv_url(&self, key: &str) -> String {
        format!("{}/v1/kv/{}", self.http_url(), key)
    }

    /// The RESP listen address.
    pub fn resp_addr(&self) -> SocketAddr {
        self.endpoints().resp
    }

    /// The process id of the running server.
    pub fn pid(&self) -> u32 {
        self.process
            .as_ref()
            .and_then(trireme_local::ServerProcess::pid)
            .expect("node is not running")
    }

    /// SIGKILLs the server and reaps it.
    pub async fn kill9(&mut self) {
        let status = self.running_process().kill().expect("a running server");
        assert!(
            !status.success(),
            "a SIGKILLed server cannot exit cleanly: {status}"
        );
        self.endpoints = None;
    }

    /// Waits for the server to exit by itself (a crash the test set up) and reaps it.
    pub async fn wait_exit(&mut self) -> ExitStatus {
        let process = self.running_process();
        let status = process
            .wait_exit(DEADLINE)
            .await
            .expect("the server exits by itself");
        self.endpoints = None;
        status
    }

    /// Sends SIGTERM and waits for the process to exit; returns the exit status.
    pub async fn terminate(&mut self) -> ExitStatus {
        self.stop_with("TERM").await
    }

    /// Sends `kill -<signal>` (`TERM`, `INT`, `HUP`, `QUIT`, `KILL`) to the server's PID and
    /// waits for it to exit.
    pub async fn stop_with(&mut self, signal: &str) -> ExitStatus {
        use trireme_local::Signal;
        let sig = match signal {
            "TERM" => Signal::TERM,
            "INT" => Signal::INT,
            "HUP" => Signal::HUP,
            "QUIT" => Signal::QUIT,
            "KILL" => Signal::KILL,
            other => panic!("no signal {other} in the harness"),
        };
        let process = self.running_process();
        let pid = process.pid().unwrap_or_default();
        process.signal(sig).expect("signal the server");
        let status = match process.wait_exit(DEADLINE).await {
            Some(status) => status,
            None => {
                let _ = process.kill();
                panic!("process {pid} did not exit within {DEADLINE:?} of SIG{signal}");
            }
        };
        self.endpoints = None;
        status
    }

    /// Starts a new process on the same data dir (after `kill9` or `terminate`).
    pub async fn restart(&mut self) {
        self.spawn_and_wait().await;
    }

    /// Changes the options used by the next `restart`.
    pub fn options_mut(&mut self) -> &mut StartOptions {
        &mut self.opts
    }

    /// GET a key; `None` on 404, otherwise (flags, value, create_index, modify_index).
    pub async fn get(&self, key: &str) -> Option<KvEntry> {
        let resp = self
            .http
            .get(self.kv_url(key))
            .send()
            .await
            .expect("GET request");
        if resp.status() == 404 {
            return None;
        }
        assert_eq!(resp.status(), 200, "GET {key}");
        let v: serde_json::Value = resp.json().await.expect("GET body is JSON");
        let arr = v.as_array().expect("GET body is an array");
        assert_eq!(
            arr.len(),
            1,
            "GET {key} without ?recurse returns one entry: {v}"
        );
        Some(KvEntry::from_json(&arr[0]))
    }

    /// PUT a key; returns the `true`/`false` body.
    pub async fn put(&self, key: &str, value: impl Into<reqwest::Body>) -> bool {
        let resp = self
            .http
            .put(self.kv_url(key))
            .body(value)
            .send()
            .await
            .expect("PUT request");
        assert_eq!(resp.status(), 200, "PUT {key}");
        let text = resp.text().await.expect("PUT body");
        match text.trim() {
            "true" => true,
            "false" => false,
            other => panic!("PUT {key} answered {other:?}"),
        }
    }

    /// All entries under a prefix (`?recurse`); empty on 404.
    pub async fn list(&self, prefix: &str) -> Vec<KvEntry> {
        let resp = self
            .http
            .get(format!("{}?recurse", self.kv_url(prefix)))
            .send()
            .await
            .expect("GET ?recurse");
        if resp.status() == 404 {
            return Vec::new();
        }
        assert_eq!(resp.status(), 200, "GET {prefix}?recurse");
        let v: serde_json::Value = resp.json().await.expect("recurse body is JSON");
        v.as_array()
            .expect("recurse body is an array")
            .iter()
            .map(KvEntry::from_json)
            .collect()
    }

    /// `/v1/cluster/shards`, in the server's own type.
    pub async fn shards(&self) -> trireme_types::admin::ShardsDoc {
        let resp = self
            .http
            .get(format!("{}/v1/cluster/shards", self.http_url()))
            .send()
            .await
            .expect("GET /v1/cluster/shards");
        assert_eq!(resp.status(), 200);
        resp.json().await.expect("shards JSON")
    }
}

impl Drop for TestNode {
    fn drop(&mut self) {
        // Before the temp dir goes: SIGKILL by PID (the process drops so), and reap.
        self.process = None;
    }
}

/// One entry of a KV answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvEntry {
    pub key: String,
    pub flags: u64,
    pub value: Vec<u8>,
    pub create_index: u64,
    pub modify_index: u64,
}

impl KvEntry {
    pub fn from_json(v: &serde_json::Value) -> KvEntry {
        use base64::Engine as _;
        let value = match &v["Value"] {
            serde_json::Value::Null => Vec::new(),
            serde_json::Value::String(s) => base64::engine::general_purpose::STANDARD
                .decode(s)
                .expect("Value is base64"),
            other => panic!("Value is neither null nor a string: {other}"),
        };
        KvEntry {
            key: v["Key"].as_str().expect("Key").to_string(),
            flags: v["Flags"].as_u64().expect("Flags"),
            value,
            create_index: v["CreateIndex"].as_u64().expect("CreateIndex"),
            modify_index: v["ModifyIndex"].as_u64().expect("ModifyIndex"),
        }
    }
}

/// Runs the binary with `args` and expects it to fail within `timeout`.
/// Returns the exit code and everything written to stderr.
pub fn run_expect_failure(args: &[&str], timeout: Duration) -> (i32, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let err_path = dir.path().join("stderr");
    let out_path = dir.path().join("stdout");
    let mut child = Command::new(binary())
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).expect("stdout file"))
        .stderr(std::fs::File::create(&err_path).expect("stderr file"))
        .spawn()
        .expect("spawn trireme");
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "`trireme {}` was expected to fail but still ran after {timeout:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
                args.join(" "),
                std::fs::read_to_string(&out_path).unwrap_or_default(),
                std::fs::read_to_string(&err_path).unwrap_or_default(),
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    let code = status
        .code()
        .unwrap_or_else(|| panic!("killed by a signal: {status}\n{stderr}"));
    (code, stderr)
}

/// A raw RESP connection: bytes in, bytes out, nothing interpreted on the way.
pub struct RawResp {
    stream: TcpStream,
    buf: Vec<u8>,
}

/// How long a raw RESP read may wait.
pub const RESP_TIMEOUT: Duration = Duration::from_secs(10);

impl RawResp {
    pub async fn connect(addr: SocketAddr) -> RawResp {
        RawResp::try_connect(addr)
            .await
            .expect("connect to RESP port")
    }

    /// Like `connect`, but hands back the error (for a node that may not listen yet).
    pub async fn try_connect(addr: SocketAddr) -> std::io::Result<RawResp> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(RawResp {
            stream,
            buf: Vec::new(),
        })
    }

    /// Like `connect`, with a receive buffer of about `bytes`: a client that stops reading
    /// makes the server wait on its writes after that much.
    pub async fn connect_with_small_window(addr: SocketAddr, bytes: u32) -> RawResp {
        let socket = if addr.is_ipv4() {
            tokio::net::TcpSocket::new_v4()
        } else {
            tokio::net::TcpSocket::new_v6()
        }
        .expect("a socket");
        socket.set_recv_buffer_size(bytes).expect("SO_RCVBUF");
        let stream = socket.connect(addr).await.expect("connect to RESP port");
        stream.set_nodelay(true).expect("TCP_NODELAY");
        RawResp {
            stream,
            buf: Vec::new(),
        }
    }

    /// Writes all of `bytes` in one write call.
    pub async fn send(&mut self, bytes: &[u8]) {
        self.stream
            .write_all(bytes)
            .await
            .expect("write to RESP port");
    }

    /// Like `send`, but hands back the error (for connections a test expects to lose).
    pub async fn try_send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes).await
    }

    /// Like `read_reply`, but `None` when the connection ends or fails first.
    pub async fn try_read_reply(&mut self) -> Option<Vec<u8>> {
        loop {
            if let Some(len) = reply_len(&self.buf) {
                return Some(self.buf.drain(..len).collect());
            }
            let mut chunk = [0u8; 16 * 1024];
            let read = tokio::time::timeout(RESP_TIMEOUT, self.stream.read(&mut chunk)).await;
            match read {
                Ok(Ok(n)) if n > 0 => self.buf.extend_from_slice(&chunk[..n]),
                _ => return None,
            }
        }
    }

    /// Sends one command encoded as an array of bulk strings.
    pub async fn send_cmd(&mut self, args: &[&[u8]]) {
        let bytes = encode_cmd(args);
        self.send(&bytes).await;
    }

    /// Sends a command and returns its one complete reply.
    pub async fn cmd(&mut self, args: &[&[u8]]) -> Vec<u8> {
        self.send_cmd(args).await;
        self.read_reply().await
    }

    async fn fill(&mut self) -> usize {
        let mut chunk = [0u8; 16 * 1024];
        let n = tokio::time::timeout(RESP_TIMEOUT, self.stream.read(&mut chunk))
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "no RESP reply within {RESP_TIMEOUT:?}; buffered so far: {:?}",
                    String::from_utf8_lossy(&self.buf)
                )
            })
            .expect("read from RESP port");
        self.buf.extend_from_slice(&chunk[..n]);
        n
    }

    /// Reads exactly `len` bytes (the length of the expected reply).
    pub async fn read_exact_reply(&mut self, len: usize) -> Vec<u8> {
        while self.buf.len() < len {
            if self.fill().await == 0 {
                panic!(
                    "connection closed after {:?}, wanted {len} bytes",
                    String::from_utf8_lossy(&self.buf)
                );
            }
        }
        self.buf.drain(..len).collect()
    }

    /// Reads one complete reply (any RESP2 type, arrays nested) and returns its raw bytes.
    pub async fn read_reply(&mut self) -> Vec<u8> {
        loop {
            if let Some(len) = reply_len(&self.buf) {
                return self.buf.drain(..len).collect();
            }
            if self.fill().await == 0 {
                panic!(
                    "connection closed mid-reply: {:?}",
                    String::from_utf8_lossy(&self.buf)
                );
            }
        }
    }

    /// Waits until `n` bytes have come, and leaves them for the next read.
    pub async fn wait_for_bytes(&mut self, n: usize) {
        while self.buf.len() < n {
            if self.fill().await == 0 {
                panic!(
                    "connection closed after {:?}",
                    String::from_utf8_lossy(&self.buf)
                );
            }
        }
    }

    /// Reads exactly `n` bytes (for replies of RESP3 types the RESP2 parser does not know).
    pub async fn read_bytes(&mut self, n: usize) -> Vec<u8> {
        while self.buf.len() < n {
            if self.fill().await == 0 {
                panic!(
                    "connection closed after {:?}",
                    String::from_utf8_lossy(&self.buf)
                );
            }
        }
        self.buf.drain(..n).collect()
    }

    /// Reads until the server closes the connection; returns everything left.
    /// Panics if the server keeps it open past the timeout.
    pub async fn read_to_close(&mut self) -> Vec<u8> {
        let mut rest = std::mem::take(&mut self.buf);
        let read = tokio::time::timeout(RESP_TIMEOUT, self.stream.read_to_end(&mut rest)).await;
        match read {
            Ok(Ok(_)) => rest,
            // A reset after the error line still counts as closed.
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => rest,
            Ok(Err(e)) => panic!("read error: {e}"),
            Err(_) => panic!(
                "server kept the connection open for {RESP_TIMEOUT:?}; got {:?}",
                String::from_utf8_lossy(&rest)
            ),
        }
    }
}

/// Encodes a command as a RESP array of bulk strings.
pub fn encode_cmd(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// The length of the complete reply at the start of `buf`, or `None` if more bytes are needed.
fn reply_len(buf: &[u8]) -> Option<usize> {
    match parse_reply(buf) {
        Ok(found) => found.map(|(_, used)| used),
        Err(e) => panic!("not RESP: {e}: {:?}", String::from_utf8_lossy(buf)),
    }
}

/// What the tests ask of a reply, failing the test when it is of another kind.
pub trait ReplyExt {
    /// Parses exactly one complete reply.
    fn parse(bytes: &[u8]) -> Reply;
    fn int(&self) -> i64;
    fn array(&self) -> &[Reply];
    fn bulk(&self) -> &[u8];
}

impl ReplyExt for Reply {
    fn parse(bytes: &[u8]) -> Reply {
        Reply::parse_one(bytes)
            .unwrap_or_else(|e| panic!("{e}: {:?}", String::from_utf8_lossy(bytes)))
    }

    fn int(&self) -> i64 {
        self.as_integer()
            .unwrap_or_else(|| panic!("expected an integer reply, got {self:?}"))
    }

    fn array(&self) -> &[Reply] {
        self.as_array()
            .unwrap_or_else(|| panic!("expected an array reply, got {self:?}"))
    }

    fn bulk(&self) -> &[u8] {
        self.as_bulk()
            .unwrap_or_else(|| panic!("expected a bulk reply, got {self:?}"))
    }
}

/// How many Consul blocking queries wait on `node`, from its `/metrics`.
pub async fn blocking_queries_waiting(node: &TestNode) -> u64 {
    let text = reqwest::get(format!("{}/metrics", node.http_url()))
        .await
        .expect("GET /metrics")
        .text()
        .await
        .unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("trireme_blocking_queries_waiting "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Waits (10 s at most) until `n` blocking queries wait on `node`.
pub async fn until_blocking_queries(node: &TestNode, n: u64) {
    let reached = wait_until(
        Duration::from_secs(10),
        Duration::from_millis(20),
        || async { blocking_queries_waiting(node).await == n },
    )
    .await;
    assert!(reached, "never {n} blocking queries waiting");
}

/// Appends `v` as a postcard varint (LEB128): how tests hand-make peer frames.
pub fn varint(mut v: u64, out: &mut Vec<u8>) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}
