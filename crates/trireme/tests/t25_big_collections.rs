//! Area 25: big Redis collections that are deleted and made again, on a 3-node cluster of
//! real servers. A collection's member rows live under its version (its record's create
//! index); `DEL` changes only the record and a background thread per node purges the old
//! version's rows later. While that purge may still be running, the collection's shard is
//! split (the key moves to the new shard; its dead rows must not) and a node is stopped and
//! catches up (from a snapshot, which carries live rows only, or from its log, replaying the
//! `DEL` and the split). Through every node, in leader reads and in `READONLY` reads of the
//! node's own replica, the collection then holds exactly the one member written after the
//! `DEL`: no member of the old version ever shows again.
//!
//! Every wait polls an observable condition under a deadline; each test is bounded in time.

use crate::common;

use crate::common::cluster::{
    ClusterOptions, RaftTiming, TestCluster, bounded, key_slot, poll_until,
};
use crate::common::{RawResp, Reply, ReplyExt, metric_of, metrics_text};
use std::time::{Duration, Instant};
use trireme_types::cluster_status::ClusterStatus;

/// Members of the big collection before its `DEL`.
const MEMBERS: usize = 30_000;
/// Members per `HSET` / `ZADD` command.
const CHUNK: usize = 1_000;
/// How long a split, a catch-up or a purge may take on a busy 2-core machine.
const SETTLE: Duration = Duration::from_secs(60);

/// `GET /v1/cluster/status` of node `via`.
async fn status(c: &TestCluster, via: usize) -> Option<ClusterStatus> {
    let url = format!("{}/v1/cluster/status", c.node(via).http_url());
    c.http.get(&url).send().await.ok()?.json().await.ok()
}

/// Splits the shard that owns `key` through node `via` so that the new shard starts at the
/// key's slot (the key and its member rows move), and waits until the map shows the split;
/// returns the new shard's number.
async fn split_at_key(c: &TestCluster, via: usize, key: &str) -> u32 {
    let slot = key_slot(key.as_bytes());
    let before = status(c, via).await.expect("status");
    let parent = before
        .shards
        .iter()
        .find(|s| (s.slots[0]..=s.slots[1]).contains(&slot))
        .expect("a shard owns the key");
    assert!(parent.slots[0] < slot, "the key's slot opens its shard");
    let url = format!(
        "{}/v1/cluster/shards/{}/split?at={slot}",
        c.node(via).http_url(),
        parent.shard.0
    );
    let resp = c.http.post(&url).send().await.expect("POST split");
    let code = resp.status().as_u16();
    let body = resp.text().await.unwrap_or_default();
    assert_eq!(code, 200, "split: {body}\n{}", c.logs_tail(30));
    let shards = before.shards.len() + 1;
    let settled = poll_until(SETTLE, Duration::from_millis(100), || async {
        match status(c, via).await {
            Some(s) if s.splits.is_empty() && s.shards.len() == shards => Ok(s),
            other => Err(other),
        }
    })
    .await
    .unwrap_or_else(|last| panic!("the split never showed: {last:#?}\n{}", c.logs_tail(30)));
    let child = settled
        .shards
        .iter()
        .find(|s| s.slots[0] == slot)
        .unwrap_or_else(|| panic!("no shard starts at slot {slot}: {settled:#?}"));
    child.shard.0
}

/// The highest log index a node's log says it purged up to (openraft's `purge log ...
/// purge_upto: T<term>-N<node>.<index>` lines in `log`), 0 if none.
fn purged_upto(log: &str) -> u64 {
    log.lines()
        .filter_map(|l| {
            l.split("purge_upto: ")
                .nth(1)?
                .rsplit('.')
                .next()?
                .trim()
                .parse()
                .ok()
        })
        .max()
        .unwrap_or(0)
}

/// Sum over the running nodes of a `/metrics` series.
async fn metric_sum(c: &TestCluster, series: &str) -> f64 {
    let mut total = 0.0;
    for i in c.running() {
        total += metric_of(&metrics_text(&c.http, &c.node(i).http_url()).await, series);
    }
    total
}

/// The bulk strings of an array reply, as text.
fn texts(reply: &[u8]) -> Vec<String> {
    Reply::parse(reply)
        .array()
        .iter()
        .map(|r| String::from_utf8_lossy(r.bulk()).into_owned())
        .collect()
}

/// Sends `commands` in one pipeline and checks each reply against `expect`.
async fn pipeline(conn: &mut RawResp, commands: &[Vec<Vec<u8>>], expect: &[&[u8]]) {
    let mut bytes = Vec::new();
    for cmd in commands {
        let args: Vec<&[u8]> = cmd.iter().map(Vec::as_slice).collect();
        bytes.extend(common::encode_cmd(&args));
    }
    conn.send(&bytes).await;
    for (n, want) in expect.iter().enumerate() {
        let got = conn.read_reply().await;
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(want),
            "reply {n} of the pipeline"
        );
    }
}

/// A RESP connection to node `i`; with `own_replica`, after `READONLY` (the node's own
/// replica answers, not the shard leader).
async fn connect(c: &TestCluster, i: usize, own_replica: bool) -> RawResp {
    let mut conn = RawResp::connect(c.node(i).resp_addr()).await;
    if own_replica {
        assert_eq!(conn.cmd(&[b"READONLY"]).await, b"+OK\r\n");
    }
    conn
}

/// Every field of hash `key` that `HSCAN` walks, through `conn`.
async fn hscan_fields(conn: &mut RawResp, key: &str) -> Vec<String> {
    let mut cursor = b"0".to_vec();
    let mut fields = Vec::new();
    for _ in 0..(MEMBERS / 100 + 10) {
        let reply = Reply::parse(
            &conn
                .cmd(&[b"HSCAN", key.as_bytes(), &cursor, b"COUNT", b"100"])
                .await,
        );
        let page = reply.array();
        cursor = page[0].bulk().to_vec();
        let pairs = page[1].array();
        fields.extend(
            pairs
                .iter()
                .step_by(2)
                .map(|f| String::from_utf8_lossy(f.bulk()).into_owned()),
        );
        if cursor == b"0" {
            return fields;
        }
    }
    panic!(
        "HSCAN of {key} did not end; fields so far {:?}",
        &fields[..10]
    );
}

/// Checks through `conn` that hash `key` holds exactly `new` = `fresh`; `Err` says what it
/// held instead. An old field (`f…`) seen in any answer panics at once: no read may show one.
async fn hash_is_new_only(conn: &mut RawResp, key: &str, who: &str) -> Result<(), String> {
    let k = key.as_bytes();
    let all = texts(&conn.cmd(&[b"HGETALL", k]).await);
    let keys = texts(&conn.cmd(&[b"HKEYS", k]).await);
    let scanned = hscan_fields(conn, key).await;
    let len = Reply::parse(&conn.cmd(&[b"HLEN", k]).await).int();
    let old = conn.cmd(&[b"HGET", k, b"f00000"]).await;
    let exists = Reply::parse(&conn.cmd(&[b"HEXISTS", k, b"f29999"]).await).int();
    let shown_old = all
        .iter()
        .step_by(2)
        .chain(&keys)
        .chain(&scanned)
        .any(|f| f != "new");
    assert!(
        !shown_old && old == b"$-1\r\n" && exists == 0 && len <= 1,
        "{who}: an old field of {key} shows: HLEN {len}, HGET f00000 {:?}, HEXISTS f29999 \
         {exists}, HGETALL {:.8?} ({} items), HKEYS {:.8?} ({}), HSCAN {:.8?} ({})",
        String::from_utf8_lossy(&old),
        all,
        all.len(),
        keys,
        keys.len(),
        scanned,
        scanned.len()
    );
    if all == ["new", "fresh"] && keys == ["new"] && scanned == ["new"] && len == 1 {
        Ok(())
    } else {
        Err(format!(
            "{who}: HGETALL {all:?}, HKEYS {keys:?}, HSCAN {scanned:?}, HLEN {len}"
        ))
    }
}

/// Polls every running node, through leader reads and through `READONLY` reads of its own
/// replica, until hash `key` holds exactly `new` = `fresh` there (a follower may trail by a
/// moment); never may an old field show.
async fn every_node_shows_new_hash(c: &TestCluster, key: &str) {
    for i in c.running() {
        for own_replica in [false, true] {
            let who = format!("{} (READONLY {own_replica})", c.name(i));
            let mut conn = connect(c, i, own_replica).await;
            let deadline = Instant::now() + SETTLE;
            while let Err(last) = hash_is_new_only(&mut conn, key, &who).await {
                assert!(Instant::now() < deadline, "{last}\n{}", c.logs_tail(30));
                // Pacing between looks, not synchronization: the condition is checked each time.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// `trireme_collection_purged_rows_total` of each running node, by index.
async fn purged_rows(c: &TestCluster) -> Vec<(usize, f64)> {
    let mut out = Vec::new();
    for i in c.running() {
        let text = metrics_text(&c.http, &c.node(i).http_url()).await;
        out.push((i, metric_of(&text, "trireme_collection_purged_rows_total")));
    }
    out
}

/// Waits until no node has a collection waiting for its purge.
async fn purges_finish(c: &TestCluster) {
    let done = poll_until(SETTLE, Duration::from_millis(100), || async {
        let pending = metric_sum(c, "trireme_collection_purges_pending").await;
        if pending == 0.0 { Ok(()) } else { Err(pending) }
    })
    .await;
    if let Err(pending) = done {
        panic!(
            "{pending} collections still wait for their purge after {SETTLE:?}\n{}",
            c.logs_tail(30)
        );
    }
}

/// A hash of 30,000 fields is deleted and made again with one field `new`; right away, while
/// its old rows may still wait for the purge, its shard is split so that the key goes to the
/// new shard (the old rows are not carried over). Then a node that does not lead that shard
/// is stopped, the shard takes writes until its leader has purged its log past that node,
/// and the node comes back from a snapshot (which carries live rows only; checked by its
/// snapshot bytes received). Every node, leader reads and its own replica's, shows the one
/// field and no old one, in `HGETALL`, `HKEYS`, `HSCAN`, `HLEN`, `HGET` and `HEXISTS`, before
/// and after every node's purge finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_big_hash_never_shows_a_member_again_through_a_split_or_a_catch_up() {
    let mut c = TestCluster::start(ClusterOptions {
        timing: RaftTiming {
            snapshot_every: Some(50),
            keep_after_snapshot: Some(10),
            ..RaftTiming::default()
        },
        // Log purges are reported at info level: the writes go on until the leader's passes
        // the stopped node.
        log:
            "info,openraft=error,openraft::engine::handler=info,openraft::raft::api::protocol=info"
                .into(),
        ..ClusterOptions::default()
    })
    .await;
    bounded(Duration::from_secs(180), async {
        let key = "{big}hash";
        let mut conn = connect(&c, 0, false).await;
        let chunks: Vec<Vec<Vec<u8>>> = (0..MEMBERS / CHUNK)
            .map(|chunk| {
                let mut cmd = vec![b"HSET".to_vec(), key.as_bytes().to_vec()];
                for f in chunk * CHUNK..(chunk + 1) * CHUNK {
                    cmd.push(format!("f{f:05}").into_bytes());
                    cmd.push(format!("value-{f}").into_bytes());
                }
                cmd
            })
            .collect();
        let added = format!(":{CHUNK}\r\n").into_bytes();
        pipeline(&mut conn, &chunks, &vec![added.as_slice(); chunks.len()]).await;
        let len = conn.cmd(&[b"HLEN", key.as_bytes()]).await;
        assert_eq!(len, format!(":{MEMBERS}\r\n").as_bytes());

        // The DEL and the new HSET in one pipeline: they may share a log command.
        let again = [
            vec![b"DEL".to_vec(), key.as_bytes().to_vec()],
            vec![
                b"HSET".to_vec(),
                key.as_bytes().to_vec(),
                b"new".to_vec(),
                b"fresh".to_vec(),
            ],
        ];
        pipeline(&mut conn, &again, &[b":1\r\n", b":1\r\n"]).await;
        let pending = metric_sum(&c, "trireme_collection_purges_pending").await;
        let child = split_at_key(&c, 1, key).await;
        eprintln!("split shard of {key} into {child}; purges pending at the split: {pending}");
        every_node_shows_new_hash(&c, key).await;

        // A node that does not lead the key's shard misses more than a snapshot interval.
        let leader = poll_until(SETTLE, Duration::from_millis(50), || async {
            c.leader_of(child).await.ok_or(())
        })
        .await
        .expect("the new shard has a leader");
        let victim = (1..3).find(|&i| i != leader).expect("a follower");
        let behind = c.view(victim).await.expect("the victim's view")[child as usize].applied;
        let seen = c.node(leader).stderr_log().len();
        c.kill9(victim).await;
        let mut conn = connect(&c, leader, false).await;
        // Writes into the key's shard until its leader has purged its log past where the
        // stopped node is (the leader keeps entries an unanswered append still uses a while).
        let deadline = Instant::now() + SETTLE;
        let mut n = 0;
        while purged_upto(&c.node(leader).stderr_log()[seen..]) <= behind {
            assert!(
                Instant::now() < deadline,
                "{} never purged its log past {behind} after {n} writes\n{}",
                c.name(leader),
                c.logs_tail(30)
            );
            for _ in 0..20 {
                let filler = format!("{{big}}fill{n}");
                let set = conn.cmd(&[b"SET", filler.as_bytes(), b"x"]).await;
                assert_eq!(set, b"+OK\r\n", "SET {filler}");
                n += 1;
            }
        }
        assert_eq!(conn.cmd(&[b"SET", b"{big}marker", b"m"]).await, b"+OK\r\n");
        c.restart(victim).await;

        let mut own = connect(&c, victim, true).await;
        let deadline = Instant::now() + SETTLE;
        loop {
            // No answer on the way may show an old field.
            let _ = hash_is_new_only(&mut own, key, "the restarted node").await;
            let marker = own.cmd(&[b"GET", b"{big}marker"]).await;
            if marker == b"$1\r\nm\r\n" {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{} never caught up (marker {:?})\n{}",
                c.name(victim),
                String::from_utf8_lossy(&marker),
                c.logs_tail(30)
            );
            // Pacing between looks, not synchronization.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let text = metrics_text(&c.http, &c.node(victim).http_url()).await;
        assert!(
            metric_of(&text, "trireme_snapshot_received_bytes_total") > 0.0,
            "{} caught up without a snapshot; the snapshot path is not exercised\n{}",
            c.name(victim),
            c.logs_tail(30)
        );
        every_node_shows_new_hash(&c, key).await;
        purges_finish(&c).await;
        eprintln!("purged rows by node: {:?}", purged_rows(&c).await);
        every_node_shows_new_hash(&c, key).await;
    })
    .await;
}

/// Checks through `conn` that sorted set `key` holds exactly `new` with score 7; `Err` says
/// what it held instead. An old member seen in any answer panics at once.
async fn zset_is_new_only(conn: &mut RawResp, key: &str, who: &str) -> Result<(), String> {
    let k = key.as_bytes();
    let range = texts(&conn.cmd(&[b"ZRANGE", k, b"0", b"-1", b"WITHSCORES"]).await);
    let by_score = texts(&conn.cmd(&[b"ZRANGEBYSCORE", k, b"-inf", b"+inf"]).await);
    let card = Reply::parse(&conn.cmd(&[b"ZCARD", k]).await).int();
    let old = conn.cmd(&[b"ZSCORE", k, b"m00000"]).await;
    let shown_old = range.iter().step_by(2).chain(&by_score).any(|m| m != "new");
    assert!(
        !shown_old && old == b"$-1\r\n" && card <= 1,
        "{who}: an old member of {key} shows: ZCARD {card}, ZSCORE m00000 {:?}, ZRANGE \
         {:.8?} ({} items), ZRANGEBYSCORE {:.8?} ({})",
        String::from_utf8_lossy(&old),
        range,
        range.len(),
        by_score,
        by_score.len()
    );
    if range == ["new", "7"] && by_score == ["new"] && card == 1 {
        Ok(())
    } else {
        Err(format!(
            "{who}: ZRANGE {range:?}, ZRANGEBYSCORE {by_score:?}, ZCARD {card}"
        ))
    }
}

/// A small sorted set in the big one's slot, made, deleted and made again in one pipeline.
const SMALL: &str = "{bigz}small";

/// Polls every running node, leader reads and `READONLY` reads, until sorted set `key` (and
/// [`SMALL`]) holds exactly `new` (score 7); never may an old member show.
async fn every_node_shows_new_zset(c: &TestCluster, key: &str) {
    for i in c.running() {
        for (key, own_replica) in [(key, false), (key, true), (SMALL, false), (SMALL, true)] {
            let who = format!("{} (READONLY {own_replica})", c.name(i));
            let mut conn = connect(c, i, own_replica).await;
            let deadline = Instant::now() + SETTLE;
            while let Err(last) = zset_is_new_only(&mut conn, key, &who).await {
                assert!(Instant::now() < deadline, "{last}\n{}", c.logs_tail(30));
                // Pacing between looks, not synchronization: the condition is checked each time.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// A sorted set of 30,000 members, its `DEL` and a `ZADD` of one member go out in one
/// pipeline (the last chunks, the `DEL` and the new `ZADD` may share log commands). Right
/// away a follower is killed, and the key's shard is split with two nodes up; the killed
/// node comes back and replays the `DEL` and the split from its log. Every node, leader reads
/// and its own replica's, shows the one member in `ZRANGE ... WITHSCORES`, `ZRANGEBYSCORE`,
/// `ZCARD` and `ZSCORE`; every node's purge finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_big_sorted_set_never_shows_a_member_again_through_a_split_or_a_restart() {
    let mut c = TestCluster::start(ClusterOptions::default()).await;
    bounded(Duration::from_secs(180), async {
        let key = "{bigz}zset";
        let mut commands: Vec<Vec<Vec<u8>>> = (0..MEMBERS / CHUNK)
            .map(|chunk| {
                let mut cmd = vec![b"ZADD".to_vec(), key.as_bytes().to_vec()];
                for m in chunk * CHUNK..(chunk + 1) * CHUNK {
                    cmd.push(m.to_string().into_bytes());
                    cmd.push(format!("m{m:05}").into_bytes());
                }
                cmd
            })
            .collect();
        let added = format!(":{CHUNK}\r\n").into_bytes();
        let mut expect = vec![added.as_slice(); commands.len()];
        commands.push(vec![b"DEL".to_vec(), key.as_bytes().to_vec()]);
        commands.push(vec![
            b"ZADD".to_vec(),
            key.as_bytes().to_vec(),
            b"7".to_vec(),
            b"new".to_vec(),
        ]);
        expect.extend([b":1\r\n".as_slice(), b":1\r\n".as_slice()]);

        let shard = c.shard_of(key);
        let leader = poll_until(SETTLE, Duration::from_millis(50), || async {
            c.leader_of(shard).await.ok_or(())
        })
        .await
        .expect("the key's shard has a leader");
        let victim = (1..3).find(|&i| i != leader).expect("a follower");
        let via = (0..3).find(|&i| i != victim).expect("another node");
        let mut conn = connect(&c, via, false).await;
        // A set made, deleted and made again within one log command: both versions are
        // that command's index, yet only the new member may show.
        let small = [
            ["ZADD", SMALL, "1", "a", "2", "b"].as_slice(),
            &["DEL", SMALL],
            &["ZADD", SMALL, "7", "new"],
        ]
        .map(|cmd| cmd.iter().map(|a| a.as_bytes().to_vec()).collect());
        pipeline(&mut conn, &small, &[b":2\r\n", b":1\r\n", b":1\r\n"]).await;
        pipeline(&mut conn, &commands, &expect).await;

        c.kill9(victim).await;
        let child = split_at_key(&c, via, key).await;
        eprintln!("split the shard of {key} into {child} with one node down");
        every_node_shows_new_zset(&c, key).await;
        c.restart(victim).await;
        every_node_shows_new_zset(&c, key).await;
        purges_finish(&c).await;
        eprintln!("purged rows by node: {:?}", purged_rows(&c).await);
        every_node_shows_new_zset(&c, key).await;
    })
    .await;
}
