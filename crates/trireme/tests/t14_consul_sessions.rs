//! Area 14: Consul sessions and locks. Consul's Go client elects a leader with `api.Lock`
//! from two processes on two nodes (their holds never overlap) and shares a resource with
//! `api.Semaphore`; a lock whose holder was killed, or whose holder's node was killed, goes
//! to the next contender once the session's TTL runs out. Raw requests check Consul's shapes,
//! the lock-delay, `Behavior: delete`, session reads as blocking queries, and the errors for
//! what is refused.

use crate::common::cluster::{ClusterOptions, TestCluster, bounded, poll_until};
use crate::common::{
    StartOptions, TestNode, blocking_queries_waiting, clients, until_blocking_queries,
};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

/// A cluster whose sessions may have TTLs of a second, so that expiry is quick to see.
fn short_ttls() -> ClusterOptions {
    ClusterOptions {
        limits: "session_ttl_min_ms = 1000".into(),
        ..ClusterOptions::default()
    }
}

/// One event a lock client printed.
#[derive(Debug, Clone)]
struct Event {
    name: String,
    event: String,
    at_ns: u64,
}

fn events(output: &[u8]) -> Vec<Event> {
    String::from_utf8_lossy(output)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| Event {
            name: v["name"].as_str().unwrap_or_default().to_string(),
            event: v["event"].as_str().unwrap_or_default().to_string(),
            at_ns: v["unix_ns"].as_u64().unwrap_or(0),
        })
        .collect()
}

/// Each holder's `[acquired, releasing]` intervals, by start.
fn holds(events: &[Event]) -> Vec<(u64, u64, String)> {
    let mut out = Vec::new();
    for (i, e) in events.iter().enumerate() {
        if e.event == "acquired"
            && let Some(end) = events[i + 1..]
                .iter()
                .find(|x| x.name == e.name && x.event == "releasing")
        {
            out.push((e.at_ns, end.at_ns, e.name.clone()));
        }
    }
    out.sort();
    out
}

/// The most holders at once over `holds`.
fn most_at_once(holds: &[(u64, u64, String)]) -> usize {
    let mut edges: Vec<(u64, i32)> = Vec::new();
    for (start, end, _) in holds {
        edges.push((*start, 1));
        edges.push((*end, -1));
    }
    // At equal times a release counts before an acquisition.
    edges.sort();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, d) in edges {
        now += d;
        most = most.max(now);
    }
    most as usize
}

fn lock_client(binary: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(binary);
    command
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

fn addr(node: &TestNode) -> String {
    node.http_url().trim_start_matches("http://").to_string()
}

/// Starts a client and returns it with its stdout lines.
fn spawn(mut command: Command) -> (Child, Lines<BufReader<ChildStdout>>) {
    let mut child = command
        .kill_on_drop(true)
        .spawn()
        .expect("start the lock client");
    let lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    (child, lines)
}

/// Waits for the client's next event.
async fn next_event(lines: &mut Lines<BufReader<ChildStdout>>, what: &str) -> Event {
    let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .unwrap_or_else(|_| panic!("no {what} within 60 s"))
        .expect("read the client's output")
        .unwrap_or_else(|| panic!("the client ended before {what}"));
    events(line.as_bytes())
        .pop()
        .unwrap_or_else(|| panic!("not an event: {line}"))
}

/// Runs one lock client per argument list, all at once, to their ends; their events.
async fn run_all(binary: &Path, runs: Vec<Vec<String>>, c: &TestCluster) -> Vec<Event> {
    let handles: Vec<_> = runs
        .iter()
        .map(|args| {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let command = lock_client(binary, &args);
            tokio::spawn(clients::run_bounded(
                command,
                Duration::from_secs(120),
                "the lock client",
            ))
        })
        .collect();
    let mut all = Vec::new();
    for (args, handle) in runs.iter().zip(handles) {
        let output = handle.await.expect("the client's task");
        assert!(
            output.status.success(),
            "{args:?}: {}\n{}",
            String::from_utf8_lossy(&output.stderr),
            c.logs()
        );
        all.extend(events(&output.stdout));
    }
    all
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// `api.Lock` from two processes, each through its own node, four rounds each: every round
/// is held, and no two holds overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consuls_lock_excludes_two_processes() {
    let out = tempfile::tempdir().expect("temp dir");
    let binary = clients::go_build("consul/lock", out.path()).await;
    let c = TestCluster::start(ClusterOptions::default()).await;
    let runs = [(0, "A"), (1, "B")]
        .iter()
        .map(|&(i, name)| {
            args(&[
                "contend",
                &addr(c.node(i)),
                "service/leader",
                name,
                "4",
                "150",
            ])
        })
        .collect();
    let all = run_all(&binary, runs, &c).await;
    let holds = holds(&all);
    assert_eq!(holds.len(), 8, "{all:?}");
    assert_eq!(most_at_once(&holds), 1, "two holders at once: {holds:?}");
}

/// `api.Semaphore` with a limit of 2 and three contenders: never more than two at once,
/// every round served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consuls_semaphore_admits_at_most_its_limit() {
    let out = tempfile::tempdir().expect("temp dir");
    let binary = clients::go_build("consul/lock", out.path()).await;
    let c = TestCluster::start(ClusterOptions::default()).await;
    let runs = [(0, "A"), (1, "B"), (2, "C")]
        .iter()
        .map(|&(i, name)| {
            args(&[
                "semaphore",
                &addr(c.node(i)),
                "service/pool",
                name,
                "2",
                "3",
                "150",
            ])
        })
        .collect();
    let all = run_all(&binary, runs, &c).await;
    let holds = holds(&all);
    assert_eq!(holds.len(), 9, "{all:?}");
    assert!(most_at_once(&holds) <= 2, "more than the limit: {holds:?}");
}

/// A holder killed with its lock (its session never renewed again): the lock goes to the
/// next contender once the session's TTL has run out twice over, not before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holders_lock_goes_to_the_next_contender_after_its_ttl() {
    let out = tempfile::tempdir().expect("temp dir");
    let binary = clients::go_build("consul/lock", out.path()).await;
    let c = TestCluster::start(short_ttls()).await;
    bounded(Duration::from_secs(120), async {
        let (mut holder, mut lines) = spawn(lock_client(
            &binary,
            &["hold", &addr(c.node(0)), "service/leader", "H", "1s"],
        ));
        let held = next_event(&mut lines, "the holder's lock").await;
        assert_eq!(held.event, "acquired");
        holder.start_kill().expect("kill the holder");
        let _ = holder.wait().await;
        let (_contender, mut lines) = spawn(lock_client(
            &binary,
            &[
                "contend",
                &addr(c.node(1)),
                "service/leader",
                "N",
                "1",
                "100000",
            ],
        ));
        let next = next_event(&mut lines, "the contender's lock").await;
        assert_eq!(next.event, "acquired");
        let waited = Duration::from_nanos(next.at_ns.saturating_sub(held.at_ns));
        // The session was created just before the lock: it ends 2 s after that at the
        // earliest.
        assert!(
            waited >= Duration::from_millis(1900),
            "taken after {waited:?}"
        );
        let entry = kv_entry(c.node(2), "service/leader").await;
        assert_eq!(entry["Value"], "Tg==", "{entry}");
        assert_eq!(entry["LockIndex"], 2, "{entry}");
    })
    .await;
}

/// Sends `signal` to a client this test started, by its PID.
fn signal(child: &Child, signal: rustix::process::Signal) {
    let pid = child
        .id()
        .and_then(|id| rustix::process::Pid::from_raw(id as i32))
        .expect("the client's PID");
    rustix::process::kill_process(pid, signal).expect("signal the client");
}

fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// A holder paused (SIGSTOP) while it holds the lock stops renewing its session (TTL 1 s,
/// renewed every 0.5 s, lock-delay 1 s). The lock must not go to anyone while the paused
/// holder's session could still be valid and its lock-delay run: not before 2×TTL after its
/// last renewal (at most 0.5 s before the pause) plus the delay, 2.5 s after the pause.
/// Resumed, the holder learns that it lost the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holders_lock_waits_for_its_session_and_lock_delay() {
    let out = tempfile::tempdir().expect("temp dir");
    let binary = clients::go_build("consul/lock", out.path()).await;
    let c = TestCluster::start(short_ttls()).await;
    bounded(Duration::from_secs(120), async {
        let (holder, mut holder_lines) = spawn(lock_client(
            &binary,
            &[
                "hold-renewing",
                &addr(c.node(0)),
                "service/leader",
                "H",
                "1s",
            ],
        ));
        assert_eq!(
            next_event(&mut holder_lines, "the holder's lock")
                .await
                .event,
            "acquired"
        );
        signal(&holder, rustix::process::Signal::STOP);
        let paused_at = unix_ns();
        let (_contender, mut lines) = spawn(lock_client(
            &binary,
            &[
                "contend",
                &addr(c.node(1)),
                "service/leader",
                "N",
                "1",
                "100000",
            ],
        ));
        let next = next_event(&mut lines, "the contender's lock").await;
        assert_eq!(next.event, "acquired");
        let after = Duration::from_nanos(next.at_ns.saturating_sub(paused_at));
        assert!(
            after >= Duration::from_millis(2500),
            "granted {after:?} after the pause"
        );
        signal(&holder, rustix::process::Signal::CONT);
        let lost = next_event(&mut holder_lines, "the holder learning of its loss").await;
        assert_eq!(lost.event, "lost");
    })
    .await;
}

/// The node the holder talks to is killed: the holder can no longer renew its session,
/// which ends after its TTL, and the lock goes to a contender on another node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_is_released_when_its_holders_node_is_killed() {
    let out = tempfile::tempdir().expect("temp dir");
    let binary = clients::go_build("consul/lock", out.path()).await;
    let mut c = TestCluster::start(short_ttls()).await;
    bounded(Duration::from_secs(120), async {
        let (_holder, mut lines) = spawn(lock_client(
            &binary,
            &[
                "contend",
                &addr(c.node(2)),
                "service/leader",
                "H",
                "1",
                "100000",
                "1s",
            ],
        ));
        assert_eq!(
            next_event(&mut lines, "the holder's lock").await.event,
            "acquired"
        );
        let (_contender, mut contender_lines) = spawn(lock_client(
            &binary,
            &[
                "contend",
                &addr(c.node(0)),
                "service/leader",
                "N",
                "1",
                "100000",
                "1s",
            ],
        ));
        c.kill9(2).await;
        let next = next_event(&mut contender_lines, "the contender's lock").await;
        assert_eq!((next.name.as_str(), next.event.as_str()), ("N", "acquired"));
        let entry = kv_entry(c.node(1), "service/leader").await;
        assert_eq!(entry["Value"], "Tg==", "{entry}");
    })
    .await;
}

async fn kv_entry(node: &TestNode, key: &str) -> Value {
    let body: Value = reqwest::get(node.kv_url(key))
        .await
        .expect("GET")
        .json()
        .await
        .expect("JSON entries");
    body[0].clone()
}

async fn put(client: &reqwest::Client, url: &str, body: &str) -> (u16, Value) {
    let resp = client
        .put(url)
        .body(body.to_string())
        .send()
        .await
        .expect("PUT");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn get(client: &reqwest::Client, url: &str) -> (u16, Value) {
    let resp = client.get(url).send().await.expect("GET");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// Sessions in Consul's shapes; a destroyed session's lock released with its lock-delay, or
/// its key deleted (`Behavior: delete`); and every refusal with its status and message.
#[tokio::test]
async fn sessions_and_locks_follow_consuls_rules() {
    let node =
        TestNode::start(StartOptions::default().config("[limits]\nsession_ttl_min_ms = 1000\n"))
            .await;
    let http = reqwest::Client::new();
    let base = node.http_url();
    let create = |body: Value| {
        let http = http.clone();
        let url = format!("{base}/v1/session/create");
        async move {
            let (status, answer) = put(&http, &url, &body.to_string()).await;
            assert_eq!(status, 200, "{answer}");
            answer["ID"].as_str().expect("an ID").to_string()
        }
    };
    let a = create(json!({"Name": "a", "TTL": "10s", "LockDelay": "1s"})).await;
    let b = create(json!({"Name": "b"})).await;

    let (status, info) = get(&http, &format!("{base}/v1/session/info/{a}")).await;
    assert_eq!(status, 200);
    assert_eq!(info[0]["ID"], a.as_str(), "{info}");
    assert_eq!(info[0]["Name"], "a");
    assert_eq!(info[0]["Node"], "n1");
    assert_eq!(info[0]["TTL"], "10s");
    assert_eq!(info[0]["LockDelay"], 1_000_000_000u64);
    assert_eq!(info[0]["Behavior"], "release");
    let (_, list) = get(&http, &format!("{base}/v1/session/list")).await;
    assert_eq!(list.as_array().map(Vec::len), Some(2), "{list}");
    let (_, of_node) = get(&http, &format!("{base}/v1/session/node/n1")).await;
    assert_eq!(of_node.as_array().map(Vec::len), Some(2), "{of_node}");
    let (status, renewed) = put(&http, &format!("{base}/v1/session/renew/{a}"), "").await;
    assert_eq!(status, 200);
    assert_eq!(renewed[0]["ID"], a.as_str());

    // Acquire: the first session takes it, the second is refused; a release by the second
    // does nothing; the holder's plain PUT keeps the lock.
    let key = format!("{base}/v1/kv/svc/leader");
    assert_eq!(
        put(&http, &format!("{key}?acquire={a}"), "a").await,
        (200, json!(true))
    );
    assert_eq!(
        put(&http, &format!("{key}?acquire={b}"), "b").await,
        (200, json!(false))
    );
    assert_eq!(
        put(&http, &format!("{key}?release={b}"), "b").await,
        (200, json!(false))
    );
    let entry = kv_entry(&node, "svc/leader").await;
    assert_eq!(
        (entry["Session"].as_str(), &entry["LockIndex"]),
        (Some(a.as_str()), &json!(1))
    );
    assert_eq!(put(&http, &key, "plain").await, (200, json!(true)));
    assert_eq!(kv_entry(&node, "svc/leader").await["Session"], a.as_str());

    // Destroyed: released, and the lock-delay keeps the other session out for a second.
    assert_eq!(
        put(&http, &format!("{base}/v1/session/destroy/{a}"), "").await,
        (200, json!(true))
    );
    let destroyed = Instant::now();
    let entry = kv_entry(&node, "svc/leader").await;
    assert_eq!(entry["Session"], Value::Null, "{entry}");
    assert_eq!(
        put(&http, &format!("{key}?acquire={b}"), "b").await,
        (200, json!(false))
    );
    poll_until(
        Duration::from_secs(10),
        Duration::from_millis(50),
        || async {
            match put(&http, &format!("{key}?acquire={b}"), "b").await {
                (200, Value::Bool(true)) => Ok(()),
                _ => Err(()),
            }
        },
    )
    .await
    .expect("the lock never became free after the delay");
    assert!(
        destroyed.elapsed() >= Duration::from_millis(900),
        "{:?}",
        destroyed.elapsed()
    );
    assert_eq!(kv_entry(&node, "svc/leader").await["LockIndex"], 2);
    let (status, gone) = get(&http, &format!("{base}/v1/session/info/{a}")).await;
    assert_eq!((status, gone), (200, json!([])));

    // A destroyed session cannot acquire anything: 500, as in Consul, with a message.
    let (status, answer) = put(&http, &format!("{base}/v1/kv/other?acquire={a}"), "x").await;
    assert_eq!(status, 500, "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .is_some_and(|e| e.contains("invalid session")),
        "{answer}"
    );

    // Behavior delete: the key goes with the session.
    let d = create(json!({"Behavior": "delete", "LockDelay": "0s"})).await;
    assert_eq!(
        put(&http, &format!("{base}/v1/kv/ephemeral?acquire={d}"), "x").await,
        (200, json!(true))
    );
    put(&http, &format!("{base}/v1/session/destroy/{d}"), "").await;
    let gone = http
        .get(format!("{base}/v1/kv/ephemeral"))
        .send()
        .await
        .expect("GET");
    assert_eq!(gone.status().as_u16(), 404);

    // Sessions are not keys: listings do not show them.
    let (_, keys) = get(&http, &format!("{base}/v1/kv/?keys")).await;
    assert_eq!(keys, json!(["svc/leader"]));

    for (method_url, body, status, says) in [
        (
            format!("{base}/v1/session/create"),
            r#"{"TTL": "5ms"}"#,
            400,
            "Invalid Session TTL",
        ),
        (
            format!("{base}/v1/session/create"),
            r#"{"TTL": "48h"}"#,
            400,
            "Invalid Session TTL",
        ),
        (
            format!("{base}/v1/session/create"),
            r#"{"Behavior": "explode"}"#,
            400,
            "Invalid Behavior",
        ),
        (
            format!("{base}/v1/session/create"),
            r#"{"LockDelay": "2m"}"#,
            400,
            "LockDelay",
        ),
        (format!("{base}/v1/session/create"), "[1,2]", 400, "decode"),
        (
            format!("{base}/v1/session/renew/not-a-uuid"),
            "",
            400,
            "not a UUID",
        ),
        (
            format!("{base}/v1/session/destroy/not-a-uuid"),
            "",
            400,
            "not a UUID",
        ),
        (format!("{base}/v1/session/renew/{a}"), "", 404, "not found"),
        (
            format!("{key}?acquire=not-a-uuid"),
            "x",
            500,
            "invalid session",
        ),
        (
            format!("{key}?acquire={b}&release={b}"),
            "x",
            400,
            "Conflicting",
        ),
        (
            format!("{base}/v1/kv/%FFtrireme%00session/x"),
            "x",
            400,
            "reserved",
        ),
    ] {
        let (got, answer) = put(&http, &method_url, body).await;
        assert_eq!(got, status, "{method_url} {body}: {answer}");
        assert!(
            answer.to_string().contains(says),
            "{method_url} {body}: {answer}"
        );
    }
    // The node keeps serving.
    assert_eq!(kv_entry(&node, "svc/leader").await["Session"], b.as_str());
}

/// A session that is not renewed ends between its TTL and twice its TTL, and the lock it
/// held is released.
#[tokio::test]
async fn an_unrenewed_session_ends_after_its_ttl() {
    let node =
        TestNode::start(StartOptions::default().config("[limits]\nsession_ttl_min_ms = 1000\n"))
            .await;
    let http = reqwest::Client::new();
    let base = node.http_url();
    let (_, created) = put(
        &http,
        &format!("{base}/v1/session/create"),
        r#"{"TTL": "1s", "LockDelay": "0s"}"#,
    )
    .await;
    let id = created["ID"].as_str().expect("an ID").to_string();
    let started = Instant::now();
    assert_eq!(
        put(&http, &format!("{base}/v1/kv/job?acquire={id}"), "x").await,
        (200, json!(true))
    );
    poll_until(
        Duration::from_secs(15),
        Duration::from_millis(50),
        || async {
            match get(&http, &format!("{base}/v1/session/info/{id}")).await {
                (200, v) if v == json!([]) => Ok(()),
                _ => Err(()),
            }
        },
    )
    .await
    .expect("the session never ended");
    let lasted = started.elapsed();
    assert!(
        lasted >= Duration::from_millis(900),
        "ended after {lasted:?}"
    );
    let entry = kv_entry(&node, "job").await;
    assert_eq!(entry["Session"], Value::Null, "{entry}");
}

/// `GET url`: status, `X-Consul-Index`, body as JSON.
async fn get_indexed(client: &reqwest::Client, url: &str) -> (u16, u64, Value) {
    let resp = client.get(url).send().await.expect("GET");
    let status = resp.status().as_u16();
    let index = resp
        .headers()
        .get("X-Consul-Index")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    (status, index, resp.json().await.unwrap_or(Value::Null))
}

/// Session reads are blocking queries too: `info` waits until its session changes or ends,
/// `list` until a session is created (or renewed, or ends), each answering with a higher
/// index; with nothing changing they hold for their wait.
#[tokio::test]
async fn session_reads_block_until_sessions_change() {
    let node = TestNode::start(StartOptions::default()).await;
    let http = reqwest::Client::new();
    let base = node.http_url();
    let create = async || {
        let (_, created) = put(&http, &format!("{base}/v1/session/create"), "{}").await;
        created["ID"].as_str().expect("an ID").to_string()
    };
    let first = create().await;
    let (status, index, found) =
        get_indexed(&http, &format!("{base}/v1/session/info/{first}")).await;
    assert_eq!(status, 200);
    assert_eq!(found[0]["ID"], first.as_str());
    assert!(index > 0);

    // info, woken by the session's end. The end is several writes (the session marked
    // ended, its locks released, its row removed) and the row shows until the last, so a
    // waiter may be woken by the first and block again, as Consul's clients do: each answer
    // carries a higher index.
    let waiter = {
        let (http, base, first) = (http.clone(), base.clone(), first.clone());
        tokio::spawn(async move {
            let started = Instant::now();
            let mut at = index;
            loop {
                let url = format!("{base}/v1/session/info/{first}?index={at}&wait=20s");
                let (status, after, found) = get_indexed(&http, &url).await;
                assert!(after > at, "index {after} after {at}: {found}");
                if status != 200 || found == json!([]) || after - index > 10 {
                    return ((status, after, found), started.elapsed());
                }
                at = after;
            }
        })
    };
    until_blocking_queries(&node, 1).await;
    assert_eq!(
        put(&http, &format!("{base}/v1/session/destroy/{first}"), "").await,
        (200, json!(true))
    );
    let ((status, after, found), took) = waiter.await.expect("waiter");
    assert_eq!((status, found), (200, json!([])));
    assert!(after > index, "index {after} after {index}");
    assert!(took < Duration::from_secs(10), "woken after {took:?}");

    // list, woken by a new session.
    let (_, listed, sessions) = get_indexed(&http, &format!("{base}/v1/session/list")).await;
    assert_eq!(sessions, json!([]));
    let waiter = {
        let (http, url) = (
            http.clone(),
            format!("{base}/v1/session/list?index={listed}&wait=20s"),
        );
        tokio::spawn(async move { get_indexed(&http, &url).await })
    };
    until_blocking_queries(&node, 1).await;
    let second = create().await;
    let (status, after, sessions) = waiter.await.expect("waiter");
    assert_eq!(status, 200);
    assert_eq!(sessions[0]["ID"], second.as_str(), "{sessions}");
    assert!(after > listed, "index {after} after {listed}");

    // Nothing changes: held for the wait, the same index back.
    let started = Instant::now();
    let (status, same, _) = get_indexed(
        &http,
        &format!("{base}/v1/session/node/n1?index={after}&wait=1s"),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(same, after);
    assert!(started.elapsed() >= Duration::from_secs(1));

    let (status, error) = get(&http, &format!("{base}/v1/session/list?index=soon")).await;
    assert_eq!(status, 400, "{error}");
    assert_eq!(blocking_queries_waiting(&node).await, 0);
}

/// `/v1/txn`'s `lock`, `unlock` and `check-session`: conditions like the others, so a lock
/// that cannot be taken undoes the whole transaction.
#[tokio::test]
async fn transactions_take_check_and_give_back_locks() {
    let node = TestNode::start(StartOptions::default()).await;
    let http = reqwest::Client::new();
    let base = node.http_url();
    let txn = |body: String| {
        let http = http.clone();
        let url = format!("{base}/v1/txn");
        async move { put(&http, &url, &body).await }
    };
    let session = |name: &'static str| {
        let http = http.clone();
        let url = format!("{base}/v1/session/create");
        async move {
            let (_, v) = put(&http, &url, &json!({ "Name": name }).to_string()).await;
            v["ID"].as_str().expect("an ID").to_string()
        }
    };
    let (a, b) = (session("a").await, session("b").await);
    let (status, body) = txn(format!(
        r#"[{{"KV":{{"Verb":"lock","Key":"{{svc}}/leader","Value":"YQ==","Session":"{a}"}}}},
            {{"KV":{{"Verb":"set","Key":"{{svc}}/term","Value":"MQ=="}}}}]"#
    ))
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["Results"][0]["KV"]["Session"], a.as_str(), "{body}");
    assert_eq!(body["Results"][0]["KV"]["LockIndex"], 1, "{body}");

    // b cannot take it: the whole transaction, its set included, is undone.
    let (status, body) = txn(format!(
        r#"[{{"KV":{{"Verb":"set","Key":"{{svc}}/term","Value":"Mg=="}}}},
            {{"KV":{{"Verb":"lock","Key":"{{svc}}/leader","Session":"{b}"}}}}]"#
    ))
    .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["Errors"][0]["OpIndex"], 1, "{body}");
    assert!(
        body["Errors"][0]["What"]
            .as_str()
            .is_some_and(|w| w.contains("failed to lock")),
        "{body}"
    );
    assert_eq!(kv_entry(&node, "{svc}/term").await["Value"], "MQ==");

    let (status, body) = txn(format!(
        r#"[{{"KV":{{"Verb":"check-session","Key":"{{svc}}/leader","Session":"{b}"}}}}]"#
    ))
    .await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body["Errors"][0]["What"]
            .as_str()
            .is_some_and(|w| w.contains(a.as_str())),
        "{body}"
    );
    let (status, body) = txn(format!(
        r#"[{{"KV":{{"Verb":"check-session","Key":"{{svc}}/leader","Session":"{a}"}}}},
            {{"KV":{{"Verb":"unlock","Key":"{{svc}}/leader","Session":"{a}"}}}}]"#
    ))
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        kv_entry(&node, "{svc}/leader").await["Session"],
        Value::Null
    );

    // A session that does not exist: 409 naming the operation.
    let (status, body) = txn(
        r#"[{"KV":{"Verb":"lock","Key":"{svc}/leader","Session":"adf4238a-882b-9ddc-4a9d-5b6758e4159e"}}]"#.into(),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body["Errors"][0]["What"]
            .as_str()
            .is_some_and(|w| w.contains("invalid session")),
        "{body}"
    );
}
