//! Area 28: whole-collection reads longer than a page (`HGETALL`, `HKEYS`, `HVALS`,
//! `SMEMBERS`, `LRANGE`, `ZRANGE`), streamed page by page from the replica that serves them:
//! through every node of a 3-node cluster (the shard's leader, and followers that pass the
//! pages on), they answer byte for byte what `redis-server` answers, in RESP2 and RESP3; a
//! read sees the collection at one moment while writes change all of it; and no read is
//! left open on any node once its client has its answer or has gone.

use crate::common::cluster::{ClusterOptions, TestCluster, bounded, poll_until};
use crate::common::redis::RedisServer;
use crate::common::{RawResp, encode_cmd, metric_of, metrics_text};
use std::time::Duration;

/// Members of each collection: more than two pages' worth (a page is 1,024 items at most,
/// and ends past 1 MiB).
const MEMBERS: usize = 3000;
/// Bytes of each hash value: the hash is over 1 MiB, so its pages end by size too.
const VALUE_BYTES: usize = 400;

fn field(i: usize) -> String {
    format!("f{i:05}")
}

/// The commands that fill the four collections, 100 members a command.
fn fill_commands() -> Vec<Vec<String>> {
    let mut commands = Vec::new();
    for chunk in (0..MEMBERS).collect::<Vec<_>>().chunks(100) {
        let mut hset = vec!["HSET".to_string(), "h".into()];
        let mut sadd = vec!["SADD".to_string(), "s".into()];
        let mut rpush = vec!["RPUSH".to_string(), "l".into()];
        let mut zadd = vec!["ZADD".to_string(), "z".into()];
        for &i in chunk {
            hset.push(field(i));
            hset.push(format!("{i:0width$}", width = VALUE_BYTES));
            // Four-digit integers: Redis keeps them in an intset, in numeric order, which is
            // their byte order too, the order Trireme keeps every set in.
            sadd.push((1000 + i).to_string());
            rpush.push(format!("e{i}"));
            zadd.push(format!("{}.5", (i * 7919) % 10007));
            zadd.push(format!("m{i}"));
        }
        commands.extend([hset, sadd, rpush, zadd]);
    }
    commands
}

/// Sends `commands` in one pipeline and reads every reply.
async fn pipeline(client: &mut RawResp, commands: &[Vec<String>]) {
    let mut bytes = Vec::new();
    for command in commands {
        let args: Vec<&[u8]> = command.iter().map(String::as_bytes).collect();
        bytes.extend(encode_cmd(&args));
    }
    client.send(&bytes).await;
    for command in commands {
        let reply = client.read_reply().await;
        assert!(
            !reply.starts_with(b"-"),
            "{:?}: {}",
            &command[..2],
            String::from_utf8_lossy(&reply)
        );
    }
}

/// The reads compared with Redis.
const READS: &[&[&str]] = &[
    &["HGETALL", "h"],
    &["HKEYS", "h"],
    &["HVALS", "h"],
    &["SMEMBERS", "s"],
    &["LRANGE", "l", "0", "-1"],
    &["LRANGE", "l", "100", "2500"],
    &["LRANGE", "l", "-2000", "-1"],
    &["ZRANGE", "z", "0", "-1"],
    &["ZRANGE", "z", "0", "-1", "WITHSCORES"],
    &["ZREVRANGE", "z", "0", "-1", "WITHSCORES"],
    &["ZRANGE", "z", "10", "2999", "REV"],
    &["ZRANGE", "z", "-1500", "-1", "WITHSCORES"],
];

/// Each of [`READS`] through every node, in RESP2 and RESP3; then the same reads pipelined
/// (see [`pipelined_long_reads_hold_one_open_at_a_time`]).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_whole_reads_answer_as_redis_does_through_every_node() {
    let mut c = TestCluster::start(ClusterOptions::default()).await;
    let c = &mut c;
    bounded(Duration::from_secs(240), async {
        // Redis keeps such hashes in insertion order only while they are listpacks, and
        // sets of integers sorted only while they are intsets.
        let redis = RedisServer::start_with(&[
            "--hash-max-listpack-entries",
            "100000",
            "--hash-max-listpack-value",
            "1024",
            "--set-max-intset-entries",
            "100000",
        ])
        .await;
        let fill = fill_commands();
        pipeline(&mut RawResp::connect(redis.addr).await, &fill).await;
        pipeline(&mut RawResp::connect(c.node(0).resp_addr()).await, &fill).await;

        let mut differences = Vec::new();
        for resp3 in [false, true] {
            let mut peer = RawResp::connect(redis.addr).await;
            if resp3 {
                peer.cmd(&[b"HELLO", b"3"]).await;
            }
            let mut expected = Vec::new();
            for read in READS {
                let args: Vec<&[u8]> = read.iter().map(|a| a.as_bytes()).collect();
                expected.push(peer.cmd(&args).await);
            }
            for node in c.running() {
                let mut mine = RawResp::connect(c.node(node).resp_addr()).await;
                if resp3 {
                    mine.cmd(&[b"HELLO", b"3"]).await;
                }
                for (read, want) in READS.iter().zip(&expected) {
                    let args: Vec<&[u8]> = read.iter().map(|a| a.as_bytes()).collect();
                    let got = mine.cmd(&args).await;
                    if &got != want {
                        differences.push(format!(
                            "{read:?} through {} in RESP{}: {} bytes, redis-server {} (first difference at byte {})",
                            c.name(node),
                            if resp3 { 3 } else { 2 },
                            got.len(),
                            want.len(),
                            got.iter().zip(want.iter()).take_while(|(a, b)| a == b).count()
                        ));
                    }
                }
            }
        }
        assert!(differences.is_empty(), "{}", differences.join("\n"));
        every_node_closes_its_reads(c).await;
        pipelined_long_reads_hold_one_open_at_a_time(c, &redis).await;
    })
    .await;
}

/// Waits until no node holds a whole read open.
async fn every_node_closes_its_reads(c: &TestCluster) {
    let closed = poll_until(
        Duration::from_secs(15),
        Duration::from_millis(100),
        || async {
            let mut open = Vec::new();
            for node in c.running() {
                let text = metrics_text(&c.http, &c.node(node).http_url()).await;
                let n = metric_of(&text, "trireme_whole_reads_open");
                if n > 0.0 {
                    open.push((c.name(node), n));
                }
            }
            if open.is_empty() { Ok(()) } else { Err(open) }
        },
    )
    .await;
    if let Err(open) = closed {
        panic!("whole reads still open: {open:?}");
    }
}

/// Every value of an `HGETALL` reply in RESP2 (a flat array of fields and values).
fn hash_values(reply: &[u8]) -> Vec<&[u8]> {
    let text = reply;
    let mut values = Vec::new();
    let mut lines = text
        .split(|b| *b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let header = lines.next().expect("a header");
    assert!(
        header.starts_with(b"*"),
        "{}",
        String::from_utf8_lossy(header)
    );
    let mut index = 0;
    while let Some(line) = lines.next() {
        if line.starts_with(b"$") {
            let item = lines.next().expect("a bulk string");
            if index % 2 == 1 {
                values.push(item);
            }
            index += 1;
        }
    }
    values
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_read_sees_one_moment_while_writes_change_every_field() {
    let mut c = TestCluster::start(ClusterOptions::default()).await;
    let c = &mut c;
    bounded(Duration::from_secs(240), async {
        // Each write sets every field to one new value, in one command; short values, so
        // that the writes do not crowd the reads out of a small machine.
        let rewrite = |round: usize| {
            let mut command = vec!["HSET".to_string(), "h".into()];
            for i in 0..MEMBERS {
                command.push(field(i));
                command.push(format!("{round:08}"));
            }
            command
        };
        let mut first = RawResp::connect(c.node(0).resp_addr()).await;
        pipeline(&mut first, &[rewrite(0)]).await;
        let writer_addr = c.node(1).resp_addr();
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let writer = tokio::spawn(async move {
            let mut client = RawResp::connect(writer_addr).await;
            let mut rounds = 0;
            while !*stopped.borrow_and_update() && rounds < 200 {
                rounds += 1;
                pipeline(&mut client, &[rewrite(rounds)]).await;
            }
            rounds
        });
        let mut seen = std::collections::BTreeSet::new();
        for node in c.running() {
            let mut reader = RawResp::connect(c.node(node).resp_addr()).await;
            for _ in 0..4 {
                let reply = reader.cmd(&[b"HGETALL", b"h"]).await;
                let values = hash_values(&reply);
                assert_eq!(values.len(), MEMBERS, "through {}", c.name(node));
                let first = values[0];
                seen.insert(first.to_vec());
                let mixed = values.iter().filter(|v| **v != first).count();
                assert_eq!(
                    mixed,
                    0,
                    "through {}: {mixed} fields differ from the first one's value {}",
                    c.name(node),
                    String::from_utf8_lossy(first).trim_start_matches('0')
                );
            }
        }
        stop.send(true).expect("the writer runs");
        let rounds = writer.await.expect("the writer");
        assert!(
            seen.len() > 1,
            "every read saw the same round of {rounds}: the writes did not run beside them"
        );
        every_node_closes_its_reads(c).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_mid_read_leaves_no_read_open() {
    let mut c = TestCluster::start(ClusterOptions::default()).await;
    let c = &mut c;
    bounded(Duration::from_secs(180), async {
        let fill = fill_commands();
        pipeline(&mut RawResp::connect(c.node(0).resp_addr()).await, &fill).await;
        for node in c.running() {
            for read in [
                &["HGETALL", "h"][..],
                &["ZRANGE", "z", "0", "-1", "WITHSCORES"],
            ] {
                let mut client = RawResp::connect(c.node(node).resp_addr()).await;
                let args: Vec<&[u8]> = read.iter().map(|a| a.as_bytes()).collect();
                client.send_cmd(&args).await;
                // The header and a little of the first page, then gone.
                let start = client.read_bytes(64).await;
                assert!(
                    start.starts_with(b"*6000\r\n"),
                    "{}",
                    String::from_utf8_lossy(&start)
                );
                drop(client);
            }
        }
        every_node_closes_its_reads(c).await;
        // The nodes keep serving whole reads.
        let mut client = RawResp::connect(c.node(2).resp_addr()).await;
        let reply = client.cmd(&[b"HLEN", b"h"]).await;
        assert_eq!(reply, format!(":{MEMBERS}\r\n").into_bytes());
        let reply = client.cmd(&[b"HKEYS", b"h"]).await;
        assert!(reply.starts_with(format!("*{MEMBERS}\r\n").as_bytes()));
    })
    .await;
}

/// Whole reads open on all nodes together.
async fn reads_open(c: &TestCluster) -> f64 {
    let mut open = 0.0;
    for node in c.running() {
        let text = metrics_text(&c.http, &c.node(node).http_url()).await;
        open += metric_of(&text, "trireme_whole_reads_open");
    }
    open
}

/// How many `HGETALL`s of the 1.2 MB hash make a pipeline longer than the sockets between a
/// node and a client that does not read hold.
const HGETALLS: usize = 20;

/// One pipeline of `reads`.
fn pipelined(reads: &[&[&str]]) -> Vec<u8> {
    let mut bytes = Vec::new();
    for read in reads {
        let args: Vec<&[u8]> = read.iter().map(|a| a.as_bytes()).collect();
        bytes.extend(encode_cmd(&args));
    }
    bytes
}

/// Whole reads pipelined through each node. [`HGETALLS`] reads of the hash, from a client
/// that stops reading after the first bytes: while that first reply waits on the client,
/// the reads behind it are not held open (they are opened in their turn); the client then
/// leaves. Every read of [`READS`] in one pipeline: each reply is what `redis` answers.
async fn pipelined_long_reads_hold_one_open_at_a_time(c: &TestCluster, redis: &RedisServer) {
    let hgetall: &[&str] = &["HGETALL", "h"];
    let long = pipelined(&vec![hgetall; HGETALLS]);
    let all = pipelined(READS);
    let mut peer = RawResp::connect(redis.addr).await;
    peer.send(&all).await;
    let mut expected = Vec::new();
    for _ in READS {
        expected.push(peer.read_reply().await);
    }
    for node in c.running() {
        let mut client = RawResp::connect_with_small_window(c.node(node).resp_addr(), 4096).await;
        client.send(&long).await;
        client.wait_for_bytes(64).await;
        // The first reply is on its way and waits on this client.
        let one = poll_until(
            Duration::from_secs(10),
            Duration::from_millis(50),
            || async {
                let open = reads_open(c).await;
                if open <= 1.0 { Ok(()) } else { Err(open) }
            },
        )
        .await;
        if let Err(open) = one {
            panic!(
                "{open} whole reads stay open while the first reply of a pipeline through {} waits on its client",
                c.name(node)
            );
        }
        drop(client);

        let mut client = RawResp::connect(c.node(node).resp_addr()).await;
        client.send(&all).await;
        for (read, want) in READS.iter().zip(&expected) {
            let got = client.read_reply().await;
            assert!(
                &got == want,
                "{read:?} pipelined through {}: {} bytes, redis-server {}",
                c.name(node),
                got.len(),
                want.len()
            );
        }
    }
    every_node_closes_its_reads(c).await;
}
