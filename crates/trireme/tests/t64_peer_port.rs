//! Area 64: three real nodes on loopback: garbage, other clusters and impostors on the peer
//! port are refused, and the node keeps serving.
//!
//! Each test starts its own cluster (3 nodes, 2–4 shards, heartbeat 50 ms, elections
//! 300–600 ms); the harness runs one cluster at a time. Every wait polls under a deadline.

use crate::common::cluster::{
    CLUSTER_DEADLINE, ClusterOptions, TestCluster, bounded, peer_addr, write_every_shard,
};
use crate::common::{varint, wait_until};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

// ---------------------------------------------------------------------------------------
// 7. bad peers
// ---------------------------------------------------------------------------------------

/// A length-prefixed frame around `body`.
fn frame(body: &[u8]) -> Vec<u8> {
    let mut out = u32::try_from(body.len())
        .expect("frame length")
        .to_be_bytes()
        .to_vec();
    out.extend_from_slice(body);
    out
}

/// postcard of `Frame::Hello { cluster, from, to }` (variant 0), framed.
fn hello(cluster: &str, from: u64, to: u64) -> Vec<u8> {
    let mut body = vec![0];
    varint(cluster.len() as u64, &mut body);
    body.extend_from_slice(cluster.as_bytes());
    varint(from, &mut body);
    varint(to, &mut body);
    frame(&body)
}

/// Reads a varint at `at`; returns (value, next position).
fn read_varint(bytes: &[u8], mut at: usize) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(at)?;
        at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some((v, at));
        }
    }
    None
}

/// The reason of a framed `Frame::Refused { reason }` (variant 2), if `bytes` is one.
fn refused_reason(bytes: &[u8]) -> Option<String> {
    let len = u32::from_be_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
    let body = bytes.get(4..4 + len)?;
    if body.first() != Some(&2) {
        return None;
    }
    let (n, at) = read_varint(body, 1)?;
    let reason = body.get(at..at + usize::try_from(n).ok()?)?;
    String::from_utf8(reason.to_vec()).ok()
}

/// Sends `bytes` on a fresh connection to a peer port and reads until the node closes it.
/// Returns what came back and how long the node took to close; panics if it keeps the
/// connection open.
async fn send_to_peer_port(addr: SocketAddr, bytes: &[u8]) -> (Vec<u8>, Duration) {
    let mut stream = TcpStream::connect(addr)
        .await
        .expect("connect to the peer port");
    let started = Instant::now();
    // The node may close before reading everything; a failed write is fine.
    let _ = stream.write_all(bytes).await;
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match tokio::time::timeout(Duration::from_secs(10), stream.read(&mut chunk)).await {
            Err(_) => panic!(
                "the node kept a connection open 10 s after {:?}; it sent {got:?}",
                &bytes[..bytes.len().min(32)]
            ),
            Ok(Ok(0)) => return (got, started.elapsed()),
            Ok(Ok(n)) => got.extend_from_slice(&chunk[..n]),
            Ok(Err(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
                ) =>
            {
                return (got, started.elapsed());
            }
            Ok(Err(e)) => panic!("reading from the peer port: {e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_the_peer_port_is_refused_and_the_node_keeps_serving() {
    let c = TestCluster::start(ClusterOptions::default().shards(2)).await;
    bounded(Duration::from_secs(90), async {
        let target = 0;
        let addr = peer_addr(c.node(target));
        // Deterministic "random" bytes; the seed is printed so a failure replays.
        let seed: u64 = 0x5eed_7e57_0f0f;
        eprintln!("random frame seed: {seed:#x}");
        let mut x = seed;
        let mut random = |n: usize| -> Vec<u8> {
            (0..n)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x >> 24) as u8
                })
                .collect()
        };
        let cases: Vec<(&str, Vec<u8>)> = vec![
            (
                "plain garbage",
                b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
            ),
            (
                "a huge length prefix",
                vec![0xff, 0xff, 0xff, 0xff, 1, 2, 3],
            ),
            ("a frame of garbage", frame(&[0xff; 16])),
            ("a frame of random bytes", frame(&random(64))),
            ("an empty frame", frame(&[])),
        ];
        // Each is dropped (`send_to_peer_port` fails if the connection stays open), and
        // answered with nothing or a refusal.
        for (what, bytes) in &cases {
            let (answer, took) = send_to_peer_port(addr, bytes).await;
            eprintln!("{what}: closed after {took:?}");
            assert!(
                answer.is_empty() || refused_reason(&answer).is_some(),
                "{what}: the node answered {answer:?}, neither nothing nor a Refused frame"
            );
        }

        // A well-formed Hello from another cluster: refused with a reason, and logged.
        let (answer, _) = send_to_peer_port(addr, &hello("other-cluster", 7, 8)).await;
        let reason = refused_reason(&answer)
            .unwrap_or_else(|| panic!("no Refused frame for another cluster's Hello: {answer:?}"));
        assert!(
            reason.contains("other-cluster"),
            "refusal reason does not name the cluster: {reason:?}"
        );
        // The right cluster but the wrong node.
        let (answer, _) = send_to_peer_port(addr, &hello("trireme", 7, 8)).await;
        let reason = refused_reason(&answer).unwrap_or_else(|| {
            panic!("no Refused frame for a Hello to the wrong node: {answer:?}")
        });
        assert!(reason.contains("meant to reach"), "{reason:?}");

        // Many bad connections at once.
        let mut tasks = Vec::new();
        for i in 0..20u8 {
            tasks.push(tokio::spawn(async move {
                send_to_peer_port(addr, &frame(&[0x03, i, 0xff, 0xfe])).await
            }));
        }
        for t in tasks {
            let (_, took) = t.await.expect("bad connection task");
            assert!(
                took < Duration::from_secs(5),
                "a bad connection lingered {took:?}"
            );
        }

        // Every refusal is logged.
        let refusals = cases.len() + 2 + 20;
        let logged = wait_until(
            Duration::from_secs(5),
            Duration::from_millis(20),
            || async {
                c.node(target)
                    .stderr_log()
                    .matches("refused a peer link")
                    .count()
                    >= refusals
            },
        )
        .await;
        let log = c.node(target).stderr_log();
        assert!(
            logged,
            "{} of {refusals} refusals logged:\n{log}",
            log.matches("refused a peer link").count()
        );
        assert!(
            log.lines()
                .any(|l| l.contains("refused a peer link") && l.contains("other-cluster")),
            "the other cluster's Hello is not in the log:\n{log}"
        );
        // Garbage is refused for what it is, not left to the 2 s handshake timeout like a
        // silent dialer (this test never stays silent).
        assert!(
            !log.contains("no handshake in time"),
            "garbage was treated as silence:\n{log}"
        );

        // The node keeps serving, and its real peer links still carry Raft and forwarding.
        let resp = c
            .http
            .get(format!("{}/v1/health", c.node(target).http_url()))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "health after bad peers");
        c.expect_all_led(CLUSTER_DEADLINE).await;
        let keys = c.key_per_shard("bad-peers/");
        for i in 0..3 {
            write_every_shard(&c, i, &keys, &format!("through-{i}"))
                .await
                .unwrap_or_else(|e| panic!("writes through {}: {e}\n{}", c.name(i), c.logs()));
            for key in &keys {
                let got = c.get(target, key, "?consistent").await.map(|e| e.value);
                assert_eq!(got, Some(format!("through-{i}").into_bytes()));
            }
        }
    })
    .await;
}
