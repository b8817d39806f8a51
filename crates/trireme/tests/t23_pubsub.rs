//! Area 23: pub/sub. The same subscribe, publish and unsubscribe steps sent to `redis-server`
//! and to Trireme with the replies compared byte for byte (RESP2 arrays, RESP3 push frames);
//! a message published on one node of a cluster reaching subscribers on the others; and a
//! subscriber that never reads cut off without holding up the node.

use crate::common::cluster::{ClusterOptions, TestCluster};
use crate::common::redis::{READ, compare_with_redis};
use crate::common::{RawResp, StartOptions, TestNode, wait_until};
use std::time::Duration;

/// Client 0 subscribes, client 1 publishes; client 0 reads the messages as they arrive.
const PUBSUB: &[(usize, &[&str])] = &[
    (0, &["SUBSCRIBE", "news"]),
    (0, &["SUBSCRIBE", "sport"]),
    (0, &["PSUBSCRIBE", "n*"]),
    (0, &["SUBSCRIBE", "news"]),
    (1, &["PUBLISH", "news", "hello"]),
    (0, READ),
    (0, READ),
    (1, &["PUBLISH", "sport", "goal"]),
    (0, READ),
    (1, &["PUBLISH", "weather", "rain"]),
    (1, &["PUBLISH", "nothing-here"]),
    // One channel per answer: Redis lists channels in its hash table's order.
    (1, &["PUBSUB", "CHANNELS", "n*"]),
    (1, &["PUBSUB", "CHANNELS", "s*"]),
    (1, &["PUBSUB", "CHANNELS", "x*"]),
    (1, &["PUBSUB", "NUMSUB", "news", "weather"]),
    (1, &["PUBSUB", "NUMPAT"]),
    (1, &["PUBSUB", "NOSUCH"]),
    (0, &["GET", "k"]),
    (0, &["PING"]),
    (0, &["PING", "there"]),
    (0, &["UNSUBSCRIBE", "news"]),
    (0, &["UNSUBSCRIBE", "news"]),
    (1, &["PUBLISH", "news", "again"]),
    (0, READ),
    (0, &["PUNSUBSCRIBE"]),
    (0, &["UNSUBSCRIBE"]),
    (0, &["UNSUBSCRIBE"]),
    (0, &["SUBSCRIBE"]),
    (0, &["PING"]),
    (1, &["PUBLISH", "news", "nobody"]),
];

#[tokio::test]
async fn pubsub_answers_as_redis_does_in_resp2() {
    compare_with_redis(PUBSUB, false).await;
}

#[tokio::test]
async fn pubsub_answers_as_redis_does_in_resp3() {
    compare_with_redis(PUBSUB, true).await;
}

/// A message published on any node reaches the subscribers of every node, and `PUBLISH`
/// counts them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_published_on_one_node_reaches_subscribers_on_every_node() {
    let c = TestCluster::start(ClusterOptions::default()).await;
    let mut subscribers = Vec::new();
    for i in 0..3 {
        let mut s = RawResp::connect(c.node(i).resp_addr()).await;
        assert_eq!(
            s.cmd(&[b"SUBSCRIBE", b"events"]).await,
            b"*3\r\n$9\r\nsubscribe\r\n$6\r\nevents\r\n:1\r\n"
        );
        subscribers.push(s);
    }
    let mut psub = RawResp::connect(c.node(1).resp_addr()).await;
    psub.cmd(&[b"PSUBSCRIBE", b"ev*"]).await;
    let mut publisher = RawResp::connect(c.node(2).resp_addr()).await;
    assert_eq!(
        publisher.cmd(&[b"PUBLISH", b"events", b"deployed"]).await,
        b":4\r\n"
    );
    for s in &mut subscribers {
        assert_eq!(
            s.read_reply().await,
            b"*3\r\n$7\r\nmessage\r\n$6\r\nevents\r\n$8\r\ndeployed\r\n"
        );
    }
    assert_eq!(
        psub.read_reply().await,
        b"*4\r\n$8\r\npmessage\r\n$3\r\nev*\r\n$6\r\nevents\r\n$8\r\ndeployed\r\n"
    );
    // A subscriber that leaves is no longer counted, on its node or from the others.
    drop(subscribers.pop());
    let counted = wait_until(
        Duration::from_secs(10),
        Duration::from_millis(20),
        || async {
            let mut p = RawResp::connect(c.node(0).resp_addr()).await;
            p.cmd(&[b"PUBLISH", b"events", b"again"]).await == b":3\r\n"
        },
    )
    .await;
    assert!(counted, "a closed subscriber was still counted");
}

/// A subscriber that never reads is cut off once its queue passes the configured limit
/// (`[limits] pubsub_buffer_bytes`, 4 MiB here); publishing goes on, and the node keeps
/// serving everyone else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_never_reads_is_cut_off_and_the_node_keeps_serving() {
    let node = TestNode::start(
        StartOptions::default().config("[limits]\npubsub_buffer_bytes = 4194304\n"),
    )
    .await;
    let mut sleeper = RawResp::connect(node.resp_addr()).await;
    sleeper.cmd(&[b"SUBSCRIBE", b"firehose"]).await;
    let mut publisher = RawResp::connect(node.resp_addr()).await;
    let message = vec![b'x'; 256 * 1024];
    let mut receivers = Vec::new();
    // At most 64 MiB: the limit, plus whatever the socket buffers hold.
    for _ in 0..256 {
        let reply = publisher
            .cmd(&[b"PUBLISH", b"firehose", message.as_slice()])
            .await;
        receivers.push(reply);
        if receivers.last().is_some_and(|r| r == b":0\r\n") {
            break;
        }
    }
    assert_eq!(
        receivers.last().map(Vec::as_slice),
        Some(&b":0\r\n"[..]),
        "the subscriber was never cut off"
    );
    assert_eq!(
        publisher.cmd(&[b"PUBSUB", b"NUMSUB", b"firehose"]).await,
        b"*2\r\n$8\r\nfirehose\r\n:0\r\n"
    );
    // Its connection is closed: what it can still read ends.
    let rest = sleeper.read_to_close().await;
    assert!(rest.len() < 48 << 20, "{} bytes were queued", rest.len());
    let mut other = RawResp::connect(node.resp_addr()).await;
    assert_eq!(other.cmd(&[b"PING"]).await, b"+PONG\r\n");
}
