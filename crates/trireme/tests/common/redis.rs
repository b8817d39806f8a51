//! A real `redis-server` beside Trireme, for tests that compare the two byte for byte.

use super::RawResp;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` child process, killed by its PID when dropped.
pub struct RedisServer {
    child: Child,
    pub addr: SocketAddr,
}

impl RedisServer {
    pub async fn start() -> RedisServer {
        RedisServer::start_with(&[]).await
    }

    /// Like [`RedisServer::start`], with more `--name value` arguments.
    pub async fn start_with(config: &[&str]) -> RedisServer {
        let port = super::cluster::free_ports(1)[0];
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is installed (scripts/install-test-deps.sh)");
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("address");
        let server = RedisServer { child, addr };
        let deadline = Instant::now() + Duration::from_secs(10);
        while RawResp::try_connect(addr).await.is_err() {
            assert!(Instant::now() < deadline, "redis-server did not listen");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        server
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The step that reads one more reply (a pub/sub message) instead of sending a command.
pub const READ: &[&str] = &["<read one reply>"];

/// Sends each step's command to a Trireme node and to `redis-server`, over two connections
/// to each (a step names the one it uses; [`READ`] reads a reply without sending), and
/// asserts the replies are the same bytes.
pub async fn compare_with_redis(script: &[(usize, &[&str])], resp3: bool) {
    let node = super::TestNode::start(super::StartOptions::default()).await;
    let redis = RedisServer::start().await;
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    for _ in 0..2 {
        let mut mine = RawResp::connect(node.resp_addr()).await;
        let mut peer = RawResp::connect(redis.addr).await;
        if resp3 {
            // The HELLO replies describe two different servers; only the switch matters.
            mine.cmd(&[b"HELLO", b"3"]).await;
            peer.cmd(&[b"HELLO", b"3"]).await;
        }
        ours.push(mine);
        theirs.push(peer);
    }
    let mut differences = Vec::new();
    for (client, command) in script {
        let (want, got) = if *command == READ {
            (
                theirs[*client].read_reply().await,
                ours[*client].read_reply().await,
            )
        } else {
            let args: Vec<&[u8]> = command.iter().map(|a| a.as_bytes()).collect();
            (
                theirs[*client].cmd(&args).await,
                ours[*client].cmd(&args).await,
            )
        };
        note_difference(&mut differences, command, &want, &got);
    }
    assert_same(&differences, script.len(), "replies");
}

/// Sends the whole of `script` to a Trireme node and to `redis-server` in one write each (a
/// pipeline), then reads a reply per command from each, and asserts they are the same bytes
/// in the same order: commands that a pipeline runs together answer as if they ran alone.
pub async fn compare_pipelined_with_redis(script: &[&[&str]], resp3: bool) {
    let node = super::TestNode::start(super::StartOptions::default()).await;
    let redis = RedisServer::start().await;
    let mut mine = RawResp::connect(node.resp_addr()).await;
    let mut peer = RawResp::connect(redis.addr).await;
    if resp3 {
        mine.cmd(&[b"HELLO", b"3"]).await;
        peer.cmd(&[b"HELLO", b"3"]).await;
    }
    let mut pipeline = Vec::new();
    for command in script {
        let args: Vec<&[u8]> = command.iter().map(|a| a.as_bytes()).collect();
        pipeline.extend(super::encode_cmd(&args));
    }
    mine.send(&pipeline).await;
    peer.send(&pipeline).await;
    let mut differences = Vec::new();
    for command in script {
        let (want, got) = (peer.read_reply().await, mine.read_reply().await);
        note_difference(&mut differences, command, &want, &got);
    }
    assert_same(&differences, script.len(), "pipelined replies");
}

/// Notes `command`'s replies if they differ.
fn note_difference(differences: &mut Vec<String>, command: &[&str], want: &[u8], got: &[u8]) {
    if got != want {
        differences.push(format!(
            "{command:?}\n  redis:   {:?}\n  trireme: {:?}",
            String::from_utf8_lossy(want),
            String::from_utf8_lossy(got)
        ));
    }
}

/// Fails with every difference noted, if there is any.
fn assert_same(differences: &[String], total: usize, what: &str) {
    assert!(
        differences.is_empty(),
        "{} of {total} {what} differ from redis-server's:\n{}",
        differences.len(),
        differences.join("\n")
    );
}
