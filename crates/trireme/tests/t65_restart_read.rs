//! Area 65: a shard leader killed with -9 together with a second node (a majority of 3) right
//! after it acknowledged a write, then both restarted: no read that promises freshness, on
//! any node, may return what the key held before that write.
//!
//! Regression test for chaos seed 104. With openraft's leader restore the restarted leader
//! resumed its old term without an election. Its durable log could end before the write it
//! had acknowledged (an entry commits once two followers flushed it; the leader's own flush
//! may still be pending when it dies), and the committed index is not persisted, so it served
//! default and consistent reads from a state without that write. `enable_leader_restore` is
//! off in crates/raft/src/group.rs; this test checks the outcome end to end.
//!
//! The window is the leader's own flush lagging the followers' acknowledgements. Each round
//! opens it wide: the leader's group-commit thread is moved to `SCHED_IDLE` (it runs only on
//! an otherwise idle core) and writers keep both cores busy on the same shard while the
//! watched key is written. That is a slow disk or a starved flusher on one node, nothing the
//! Raft layer may rely on not happening. Reads start while the two nodes restart, so a node
//! that answers before the other is ready is checked as soon as it answers.
//!
//! With leader restore turned back on, 19 runs out of 20 failed, each within its first three
//! rounds: a read of the older value, of no value, or of a writer's older number, or the
//! restarted follower never becoming ready (its log is longer than the restored leader's, so
//! the commit it waits for at start-up never comes).

use crate::common;

use crate::common::cluster::{
    CLUSTER_DEADLINE, ClusterOptions, RaftTiming, TestCluster, poll_until, try_put_url, utc_now,
};
use crate::common::{KvEntry, RawResp, Reply, ReplyExt, TestNode, encode_cmd};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Kill-and-restart rounds; each one has its own keys.
const ROUNDS: usize = 5;
/// Concurrent writers on the watched key's shard while it is written: they keep the cores
/// busy, which is what starves the leader's flusher.
const WRITERS: usize = 8;
/// How long after a restart begins the reads may keep failing with 503/504, a refused
/// connection or no answer (the node is not ready yet).
const READ_DEADLINE: Duration = Duration::from_secs(15);
/// One HTTP read may wait for a node that accepted the connection but is still starting; a
/// longer wait than the Raft request timeout (3 s) means it should be asked again.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// What one read attempt gave: a value (`None` for a missing key), a reason to retry, or an
/// answer no read may give (which fails the test).
enum Read {
    Answer(Option<Vec<u8>>),
    Retry(String),
    Wrong(String),
}

/// GET `url` over HTTP. 503, 504 and transport errors are worth retrying.
async fn http_read(client: &reqwest::Client, url: &str) -> Read {
    let resp = match client.get(url).timeout(READ_TIMEOUT).send().await {
        Ok(resp) => resp,
        Err(e) => return Read::Retry(format!("GET {url}: {e}")),
    };
    let status = resp.status().as_u16();
    let body = match resp.text().await {
        Ok(body) => body,
        Err(e) => return Read::Retry(format!("GET {url}: body: {e}")),
    };
    match status {
        404 => Read::Answer(None),
        200 => {
            let entry = serde_json::from_str::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v.as_array().and_then(|a| a.first()).map(KvEntry::from_json));
            match entry {
                Some(entry) => Read::Answer(Some(entry.value)),
                None => Read::Wrong(format!("GET {url}: 200 with body {body}")),
            }
        }
        503 | 504 => Read::Retry(format!("GET {url}: {status} {body}")),
        other => Read::Wrong(format!("GET {url}: status {other}: {body}")),
    }
}

/// GET over RESP. `-TRYAGAIN` (no leader), `-TIMEOUT` and a refused or dropped connection
/// are worth retrying.
async fn resp_read(addr: SocketAddr, key: &str) -> Read {
    let mut conn = match RawResp::try_connect(addr).await {
        Ok(conn) => conn,
        Err(e) => return Read::Retry(format!("RESP {addr}: {e}")),
    };
    if let Err(e) = conn.try_send(&encode_cmd(&[b"GET", key.as_bytes()])).await {
        return Read::Retry(format!("RESP {addr}: {e}"));
    }
    let Some(bytes) = conn.try_read_reply().await else {
        return Read::Retry(format!("RESP {addr}: no reply"));
    };
    match Reply::parse(&bytes) {
        Reply::Bulk(value) => Read::Answer(value.map(|v| v.to_vec())),
        Reply::Error(e) if e.starts_with("TRYAGAIN") || e.starts_with("TIMEOUT") => {
            Read::Retry(format!("RESP {addr}: {e}"))
        }
        other => Read::Wrong(format!("RESP {addr}: GET {key}: {other:?}")),
    }
}

/// Retries `attempt` until it answers or `deadline` passes; `Err` says what went wrong.
async fn first_answer<F, Fut>(
    what: &str,
    deadline: Instant,
    mut attempt: F,
) -> Result<Option<Vec<u8>>, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Read>,
{
    let left = deadline.saturating_duration_since(Instant::now());
    let result = poll_until(left, Duration::from_millis(20), || {
        let read = attempt();
        async move {
            match read.await {
                Read::Answer(value) => Ok(Ok(value)),
                Read::Wrong(why) => Ok(Err(why)),
                Read::Retry(why) => Err(why),
            }
        }
    })
    .await;
    match result {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(why)) => Err(format!("{what}: {why}")),
        Err(last) => Err(format!(
            "{what}: no answer by the deadline ({READ_DEADLINE:?} after the restart began); \
             last: {last}"
        )),
    }
}

/// A value for a failure message.
fn text(value: Option<&[u8]>) -> String {
    match value {
        Some(v) => format!("{:?}", String::from_utf8_lossy(v)),
        None => "missing".into(),
    }
}

/// Where a node listens: fixed across restarts, so it can be asked before it is ready.
#[derive(Clone, Debug)]
struct Addrs {
    name: String,
    http: String,
    resp: SocketAddr,
}

impl Addrs {
    fn of(node: &TestNode) -> Addrs {
        let o = node.options();
        Addrs {
            name: o.node_id.clone(),
            http: o
                .http_addr
                .clone()
                .expect("a cluster node has a fixed HTTP address"),
            resp: o
                .resp_addr
                .as_deref()
                .expect("a cluster node has a fixed RESP address")
                .parse()
                .expect("RESP address"),
        }
    }
}

/// What the reads after a restart must see.
#[derive(Debug)]
struct Expected {
    round: usize,
    key: String,
    v1: String,
    v2: String,
    /// Each writer's key, last acknowledged number and last number sent.
    writers: Vec<(String, u64, u64)>,
}

/// Reads the watched key through `node` (default and `?consistent` over HTTP, GET over RESP)
/// and every writer's key; the first read that answers wrong, or that gets no answer by
/// `deadline`, is the error.
async fn check_node(
    client: reqwest::Client,
    node: Addrs,
    expected: Arc<Expected>,
    deadline: Instant,
) -> Result<(), String> {
    let e = &expected;
    let v2 = Some(e.v2.as_bytes());
    for mode in ["", "?consistent"] {
        let url = format!("http://{}/v1/kv/{}{mode}", node.http, e.key);
        let what = format!("round {}: GET {}{mode} on {}", e.round, e.key, node.name);
        let got = first_answer(&what, deadline, || http_read(&client, &url)).await?;
        if got.as_deref() != v2 {
            return Err(format!(
                "{what} at {} UTC answered {}, but {} was acknowledged before the kill (after {})",
                utc_now(),
                text(got.as_deref()),
                text(v2),
                text(Some(e.v1.as_bytes()))
            ));
        }
    }
    let what = format!("round {}: RESP GET {} on {}", e.round, e.key, node.name);
    let got = first_answer(&what, deadline, || resp_read(node.resp, &e.key)).await?;
    if got.as_deref() != v2 {
        return Err(format!(
            "{what} at {} UTC answered {}, but {} was acknowledged before the kill",
            utc_now(),
            text(got.as_deref()),
            text(v2)
        ));
    }
    // A number sent after the last acknowledged one may have landed; nothing older, nothing
    // never sent. (Consistent reads only: the watched key already covers the lease path.)
    for (key, acked, sent) in &e.writers {
        let url = format!("http://{}/v1/kv/{key}?consistent", node.http);
        let what = format!("round {}: GET {key}?consistent on {}", e.round, node.name);
        let got = first_answer(&what, deadline, || http_read(&client, &url)).await?;
        let n = got
            .as_deref()
            .and_then(|v| std::str::from_utf8(v).ok())
            .and_then(|v| v.parse::<u64>().ok());
        if !n.is_some_and(|n| (*acked..=*sent).contains(&n)) {
            return Err(format!(
                "{what} answered {}: acknowledged up to {acked}, sent up to {sent}",
                text(got.as_deref())
            ));
        }
    }
    Ok(())
}

/// Checks every node concurrently (a node still starting does not hold up the others);
/// returns the first failure.
async fn check_all(
    client: &reqwest::Client,
    nodes: &[Addrs],
    expected: &Arc<Expected>,
    deadline: Instant,
) -> Result<(), String> {
    let mut checks = tokio::task::JoinSet::new();
    for node in nodes {
        checks.spawn(check_node(
            client.clone(),
            node.clone(),
            expected.clone(),
            deadline,
        ));
    }
    while let Some(done) = checks.join_next().await {
        done.map_err(|e| format!("read task: {e}"))??;
    }
    Ok(())
}

/// One writer: writes 1, 2, 3, ... to its key through `url` until `stop` or the first error
/// (the node died). Publishes the last acknowledged number; returns the last one sent.
fn spawn_writer(
    client: reqwest::Client,
    url: String,
    stop: Arc<AtomicBool>,
) -> (Arc<AtomicU64>, tokio::task::JoinHandle<u64>) {
    let acked = Arc::new(AtomicU64::new(0));
    let published = acked.clone();
    let task = tokio::spawn(async move {
        let mut n = 0u64;
        while !stop.load(Ordering::SeqCst) {
            n += 1;
            if try_put_url(&client, &url, &n.to_string()).await != Ok(true) {
                break;
            }
            published.store(n, Ordering::SeqCst);
        }
        n
    });
    (acked, task)
}

/// Moves the log's group-commit thread of process `pid` to `SCHED_IDLE`: it then runs only when a
/// core has nothing else to do, so under load the node's own flushes lag while two other nodes
/// flush and acknowledge. The restarted process runs normally again.
fn starve_flusher(pid: u32) {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("read /proc/PID/task");
    let mut found = Vec::new();
    for task in tasks {
        let path = task.expect("a /proc/PID/task entry").path();
        let name = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        // The kernel keeps 15 bytes of a thread's name ("trireme-log-commit").
        if name.trim_end() == "trireme-log-com" {
            found.extend(path.file_name().map(|t| t.to_string_lossy().into_owned()));
        }
    }
    assert_eq!(
        found.len(),
        1,
        "group-commit threads of process {pid}: {found:?}"
    );
    let args = ["--idle", "--pid", "0", &found[0]].map(String::from);
    let (ok, out, err) = common::run_program("chrt", &args, Duration::from_secs(5));
    assert!(ok, "chrt {args:?} failed: {out}{err}");
}

/// Nodes `a` and `b` (different), both mutably.
fn two_mut(nodes: &mut [TestNode], a: usize, b: usize) -> (&mut TestNode, &mut TestNode) {
    assert_ne!(a, b);
    let (lo, hi) = (a.min(b), a.max(b));
    let (left, right) = nodes.split_at_mut(hi);
    let (first, second) = (&mut left[lo], &mut right[0]);
    if a < b {
        (first, second)
    } else {
        (second, first)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_killed_with_a_majority_right_after_an_ack_never_serves_the_older_value() {
    // Leader balancing off: a leader moving on its own between finding it and killing it
    // would make the round kill a follower instead. Elections a third faster than the
    // harness default: every round waits for one.
    let mut c = TestCluster::start(ClusterOptions {
        balance_leaders: false,
        timing: RaftTiming {
            election_min: Duration::from_millis(200),
            election_max: Duration::from_millis(400),
            ..RaftTiming::default()
        },
        ..ClusterOptions::default().shards(2)
    })
    .await;
    let c = &mut c;
    let addrs: Vec<Addrs> = c.nodes.iter().map(Addrs::of).collect();
    let started = Instant::now();
    let body = async {
        let mut timings = Vec::new();
        for round in 0..ROUNDS {
            // A hash tag puts the key and the writers' keys in one shard.
            let key = format!("{{restart{round}}}/key");
            let shard = c.shard_of(&key);
            let leaders = c.expect_all_led(CLUSTER_DEADLINE).await;
            let leader = leaders[shard as usize].node;
            // The node left running rotates with the round (skipping the leader).
            let survivor = [round % 3, (round + 1) % 3][usize::from(round % 3 == leader)];
            let other = 3 - leader - survivor;

            starve_flusher(c.node(leader).pid());
            let stop = Arc::new(AtomicBool::new(false));
            let writers: Vec<_> = (0..WRITERS)
                .map(|w| {
                    let url = c.node(leader).kv_url(&format!("{{restart{round}}}/w{w}"));
                    spawn_writer(c.http.clone(), url, stop.clone())
                })
                .collect();
            let busy = poll_until(CLUSTER_DEADLINE, Duration::from_millis(5), || async {
                let least = writers.iter().map(|(a, _)| a.load(Ordering::SeqCst)).min();
                if least >= Some(3) { Ok(()) } else { Err(least) }
            })
            .await;
            assert!(busy.is_ok(), "writers stuck at {busy:?}\n{}", c.logs());

            let v1 = format!("v1-round{round}");
            let v2 = format!("v2-round{round}");
            c.put(leader, &key, &v1).await;
            c.put(leader, &key, &v2).await;
            c.kill9(leader).await;
            c.kill9(other).await;
            stop.store(true, Ordering::SeqCst);
            let mut acked = Vec::new();
            for (w, (count, task)) in writers.into_iter().enumerate() {
                let sent = task.await.expect("writer task");
                let wkey = format!("{{restart{round}}}/w{w}");
                acked.push((wkey, count.load(Ordering::SeqCst), sent));
            }
            let expected = Arc::new(Expected {
                round,
                key,
                v1,
                v2,
                writers: acked,
            });

            // Restart both and read through every node at once; a wrong read fails the
            // round without waiting for the restarts.
            let began = Instant::now();
            let deadline = began + READ_DEADLINE;
            let http = c.http.clone();
            let (a, b) = two_mut(&mut c.nodes, leader, other);
            let reads = check_all(&http, &addrs, &expected, deadline);
            let restarts = async {
                tokio::join!(a.restart(), b.restart());
                began.elapsed()
            };
            let (mut read_ok, mut restarted) = (None, None);
            let failure = {
                tokio::pin!(reads, restarts);
                loop {
                    tokio::select! {
                        result = &mut reads, if read_ok.is_none() => match result {
                            Ok(()) => read_ok = Some(began.elapsed()),
                            Err(e) => break Some(e),
                        },
                        took = &mut restarts, if restarted.is_none() => restarted = Some(took),
                    }
                    if read_ok.is_some() && restarted.is_some() {
                        break None;
                    }
                }
            };
            if let Some(e) = failure {
                panic!(
                    "{e}\n(killed {}, leader of shard {shard}, and {})\n{}",
                    c.name(leader),
                    c.name(other),
                    c.logs()
                );
            }
            let (read_ok, restarted) = (read_ok.unwrap(), restarted.unwrap());
            eprintln!(
                "round {round}: killed {} (leader of shard {shard}) and {}; restarted in \
                 {restarted:?}, every read right {read_ok:?} after the restart began; writers \
                 acknowledged {:?}",
                c.name(leader),
                c.name(other),
                expected.writers.iter().map(|w| w.1).collect::<Vec<_>>()
            );
            timings.push(restarted);
        }
        eprintln!(
            "{ROUNDS} rounds in {:?}; restarts took {timings:?}",
            started.elapsed()
        );
    };
    if tokio::time::timeout(Duration::from_secs(60), body)
        .await
        .is_err()
    {
        panic!("the test did not finish within 60 s\n{}", c.logs());
    }
}

/// How long stale reads are sent through other nodes while a restarted replica cannot
/// replay its log (its group has no quorum), from when its peer port listens. It opens its
/// groups well within it; a read that finds no replica able to answer takes the request
/// timeout (3 s).
const NO_QUORUM_WINDOW: Duration = Duration::from_secs(12);

/// Polls a stale read of `key` through node `via` until it answers v2; the last answer
/// otherwise.
async fn stale_read_until_v2(c: &TestCluster, via: usize, key: &str) -> Result<(), String> {
    poll_until(CLUSTER_DEADLINE, Duration::from_millis(20), || async {
        match c.try_get(via, key, "?stale").await {
            Ok((Some(e), _)) if e.value == b"v2" => Ok(()),
            other => Err(format!("{:?}", other.map(|(e, _)| e))),
        }
    })
    .await
}

/// A replica that restarts after kill -9 holds the rows it last flushed, older than what it
/// served before; it replays its log only once its group has a quorum again. Until then a
/// `stale` read forwarded to it by a node that holds no replica of the shard must not be
/// answered from those rows: such a read would go back in time for a client that read the
/// newer value through the same node before the crash. Found by chaos seed 31 (a stale read
/// through one node answered an older index than the one before it).
///
/// Six nodes, so that the metadata group (voters n1 to n5) keeps its quorum while all three
/// replicas of a shard that n6 holds are down, and the restarted replica gets as far as
/// opening its groups.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_restarted_without_a_quorum_answers_no_stale_read() {
    let mut c = TestCluster::start(ClusterOptions {
        nodes: 6,
        balance_leaders: false,
        ..ClusterOptions::default().shards(4)
    })
    .await;
    let view = c.view(0).await.expect("n1's shard view");
    let shard = view
        .iter()
        .find(|s| s.replicas.iter().any(|r| r == "n6"))
        .expect("n6 holds a replica of some shard");
    let replicas: Vec<usize> = shard
        .replicas
        .iter()
        .map(|r| c.index_of(r).expect("a replica is a node of the cluster"))
        .collect();
    // Two nodes without a replica: `via` reads the key before the crash, `fresh` only after
    // it, so that what `fresh` answers does not depend on what it answered before.
    let outside: Vec<usize> = (0..6).filter(|i| !replicas.contains(i)).collect();
    let (via, fresh) = (outside[0], outside[1]);
    let key = c.key_in_shard(shard.shard, "stale-after-restart");
    c.put(via, &key, "v1").await;
    c.put(via, &key, "v2").await;
    // Through `via`, a stale read is forwarded to a replica; once every replica has applied
    // v2 it is what any of them answers.
    let seen = stale_read_until_v2(&c, via, &key).await;
    assert!(
        seen.is_ok(),
        "stale read of {key} through {}: {seen:?}",
        c.name(via)
    );

    for &r in &replicas {
        c.kill9(r).await;
    }
    let restarted = replicas[0];
    c.nodes[restarted].restart_in_background();
    // Its peer port answers once the process has opened its data; its groups open next.
    let peer = common::cluster::peer_addr(c.node(restarted));
    let listening = poll_until(CLUSTER_DEADLINE, Duration::from_millis(20), || async {
        tokio::net::TcpStream::connect(peer).await.map(drop)
    })
    .await;
    assert!(
        listening.is_ok(),
        "{} never listened on {peer}: {listening:?}",
        c.name(restarted)
    );
    let began = Instant::now();
    let mut answers = Vec::new();
    while began.elapsed() < NO_QUORUM_WINDOW {
        for through in [fresh, via] {
            match c.try_get(through, &key, "?stale").await {
                Ok((entry, _)) => {
                    let value = entry.map(|e| e.value);
                    assert_eq!(
                        value.as_deref(),
                        Some(&b"v2"[..]),
                        "a stale read through {} {:?} after {} restarted (its shard without a \
                         quorum) answered {}, but v2 was acknowledged and read before the \
                         crash\n{}",
                        c.name(through),
                        began.elapsed(),
                        c.name(restarted),
                        text(value.as_deref()),
                        c.logs()
                    );
                    answers.push("v2".to_string());
                }
                Err(e) => answers.push(e),
            }
        }
    }
    eprintln!(
        "{} stale reads through {} and {} while only {} of shard {} ran: {answers:?}",
        answers.len(),
        c.name(fresh),
        c.name(via),
        c.name(restarted),
        shard.shard
    );

    // With its quorum back the replica replays its log and answers v2 again.
    for &r in &replicas[1..] {
        c.nodes[r].restart_in_background();
    }
    for &r in &replicas {
        c.nodes[r].wait_ready().await;
    }
    let seen = stale_read_until_v2(&c, via, &key).await;
    assert!(
        seen.is_ok(),
        "stale read after the restarts: {seen:?}\n{}",
        c.logs()
    );
}
