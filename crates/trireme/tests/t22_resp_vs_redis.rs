//! Area 22: the same commands sent to `redis-server` and to a Trireme node, replies compared
//! byte for byte, in RESP2 and in RESP3. Where Redis's behaviour is the specification, Redis
//! itself is the oracle. Expiries are absolute (`EXAT`, `EXPIREAT`), so the replies do not
//! depend on when the commands run.

mod common;

use common::{RawResp, StartOptions, TestNode};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` child process, killed by its PID when dropped.
struct RedisServer {
    child: Child,
    addr: SocketAddr,
}

impl RedisServer {
    async fn start() -> RedisServer {
        let port = common::cluster::free_ports(1)[0];
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
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

/// The string commands a Redis user reaches for first, with their edge cases and errors.
const STRINGS: &[&[&str]] = &[
    &["SET", "s", "hello"],
    &["APPEND", "s", " world"],
    &["APPEND", "fresh-append", "abc"],
    &["STRLEN", "s"],
    &["STRLEN", "missing"],
    &["GETRANGE", "s", "0", "4"],
    &["GETRANGE", "s", "-5", "-1"],
    &["GETRANGE", "s", "5", "2"],
    &["GETRANGE", "s", "-1", "-3"],
    &["GETRANGE", "s", "-100", "100"],
    &["GETRANGE", "missing", "0", "-1"],
    &["GETRANGE", "s", "x", "1"],
    &["SUBSTR", "s", "0", "2"],
    &["SETRANGE", "s", "6", "Redis"],
    &["GET", "s"],
    &["SETRANGE", "padded", "5", "x"],
    &["GET", "padded"],
    &["SETRANGE", "s", "-1", "x"],
    &["SETRANGE", "s", "0", ""],
    &["SETRANGE", "missing", "3", ""],
    &["EXISTS", "missing"],
    &["SETNX", "s", "other"],
    &["SETNX", "nx", "v"],
    &["GETSET", "nx", "v2"],
    &["GETSET", "getset-new", "v"],
    &["GETDEL", "nx"],
    &["GETDEL", "nx"],
    &["SET", "f", "10.50"],
    &["INCRBYFLOAT", "f", "0.1"],
    &["INCRBYFLOAT", "f", "-5"],
    // Redis adds in 80-bit long doubles and can print their residue (5.6 + 5.0e3 gives
    // 5005.60000000000000009 there, 5005.6 here); exponents are compared on exact sums.
    &["SET", "g", "3"],
    &["INCRBYFLOAT", "g", "5.0e3"],
    &["INCRBYFLOAT", "g", "-2.5E-1"],
    &["INCRBYFLOAT", "float-new", "3"],
    &["INCRBYFLOAT", "s", "1"],
    &["INCRBYFLOAT", "f", "abc"],
    &["INCRBYFLOAT", "f", "inf"],
    &["GET", "f"],
    &["SETEX", "e", "100", "v"],
    &["SETEX", "e", "0", "v"],
    &["SETEX", "e", "-1", "v"],
    &["PSETEX", "e", "0", "v"],
    &["SETEX", "e", "abc", "v"],
    &["SET", "a", "x", "EXAT", "4000000000"],
    &["EXPIRETIME", "a"],
    &["PEXPIRETIME", "a"],
    &["EXPIRETIME", "s"],
    &["EXPIRETIME", "missing"],
    &["PEXPIRETIME", "missing"],
    &["EXPIREAT", "s", "4100000000"],
    &["EXPIRETIME", "s"],
    &["PEXPIREAT", "s", "4100000000123"],
    &["PEXPIRETIME", "s"],
    &["EXPIREAT", "missing", "4100000000"],
    &["EXPIREAT", "s", "1"],
    &["EXISTS", "s"],
    &["GETEX", "a"],
    &["GETEX", "a", "PERSIST"],
    &["EXPIRETIME", "a"],
    &["GETEX", "a", "EXAT", "4200000000"],
    &["EXPIRETIME", "a"],
    &["GETEX", "a", "PXAT", "4200000000555"],
    &["PEXPIRETIME", "a"],
    &["GETEX", "a", "PX", "0"],
    &["GETEX", "a", "FOO"],
    &["GETEX", "a", "EX"],
    &["GETEX", "missing", "EX", "10"],
    &["APPEND", "s"],
    &["GETRANGE", "s", "0"],
    &["SETNX", "a"],
    &["GETDEL", "a", "b"],
    &["STRLEN"],
    &[
        "DEL",
        "a",
        "padded",
        "fresh-append",
        "getset-new",
        "float-new",
        "f",
        "g",
        "missing",
    ],
];

/// Sends every command of `script` to both servers over one connection each and asserts
/// the replies are the same bytes.
async fn compare(script: &[&[&str]], resp3: bool) {
    let node = TestNode::start(StartOptions::default()).await;
    let redis = RedisServer::start().await;
    let mut ours = RawResp::connect(node.resp_addr()).await;
    let mut theirs = RawResp::connect(redis.addr).await;
    if resp3 {
        // The HELLO replies describe two different servers; only the switch matters here.
        ours.cmd(&[b"HELLO", b"3"]).await;
        theirs.cmd(&[b"HELLO", b"3"]).await;
    }
    let mut differences = Vec::new();
    for command in script {
        let args: Vec<&[u8]> = command.iter().map(|a| a.as_bytes()).collect();
        let want = theirs.cmd(&args).await;
        let got = ours.cmd(&args).await;
        if got != want {
            differences.push(format!(
                "{command:?}\n  redis:   {:?}\n  trireme: {:?}",
                String::from_utf8_lossy(&want),
                String::from_utf8_lossy(&got)
            ));
        }
    }
    assert!(
        differences.is_empty(),
        "{} of {} replies differ from redis-server's:\n{}",
        differences.len(),
        script.len(),
        differences.join("\n")
    );
}

#[tokio::test]
async fn string_commands_answer_as_redis_does_in_resp2() {
    compare(STRINGS, false).await;
}

#[tokio::test]
async fn string_commands_answer_as_redis_does_in_resp3() {
    compare(STRINGS, true).await;
}

/// `TIME`, `WAIT` and `KEYS` cannot be compared byte for byte; their shapes can.
#[tokio::test]
async fn time_wait_keys_and_flushdb_have_redis_shapes() {
    let node = TestNode::start(StartOptions::default()).await;
    let mut c = RawResp::connect(node.resp_addr()).await;
    let time = String::from_utf8(c.cmd(&[b"TIME"]).await).expect("utf-8");
    let parts: Vec<&str> = time.split("\r\n").collect();
    assert_eq!(parts[0], "*2", "{time:?}");
    let seconds: u64 = parts[2].parse().expect("seconds");
    let micros: u64 = parts[4].parse().expect("microseconds");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    assert!(seconds.abs_diff(now) < 60 && micros < 1_000_000, "{time:?}");

    // One node: a quorum is the node itself, so no replica besides it.
    assert_eq!(c.cmd(&[b"WAIT", b"1", b"0"]).await, b":0\r\n");
    assert_eq!(
        c.cmd(&[b"WAIT", b"1", b"-1"]).await,
        b"-ERR timeout is negative\r\n"
    );

    for key in ["user:1", "user:2", "order:1"] {
        assert_eq!(c.cmd(&[b"SET", key.as_bytes(), b"v"]).await, b"+OK\r\n");
    }
    let keys = String::from_utf8(c.cmd(&[b"KEYS", b"user:*"]).await).expect("utf-8");
    assert!(keys.starts_with("*2\r\n"), "{keys:?}");
    assert!(
        keys.contains("user:1") && keys.contains("user:2"),
        "{keys:?}"
    );
    assert_eq!(
        c.cmd(&[b"FLUSHDB", b"BOGUS"]).await,
        b"-ERR syntax error\r\n"
    );
    assert_eq!(c.cmd(&[b"FLUSHALL", b"ASYNC"]).await, b"+OK\r\n");
    assert_eq!(c.cmd(&[b"DBSIZE"]).await, b":0\r\n");
    assert_eq!(c.cmd(&[b"KEYS", b"*"]).await, b"*0\r\n");
}

/// `APPEND` and `SETRANGE` past the node's value limit are refused and change nothing.
#[tokio::test]
async fn growing_a_value_past_the_limit_is_refused() {
    let node = TestNode::start(StartOptions::default()).await;
    let mut c = RawResp::connect(node.resp_addr()).await;
    let half = vec![b'x'; 300 * 1024];
    assert_eq!(c.cmd(&[b"SET", b"big", &half]).await, b"+OK\r\n");
    let too_long = b"-ERR string exceeds maximum allowed size (proto-max-bulk-len)\r\n";
    assert_eq!(c.cmd(&[b"APPEND", b"big", &half]).await, too_long);
    assert_eq!(
        c.cmd(&[b"SETRANGE", b"big", b"600000", b"y"]).await,
        too_long
    );
    assert_eq!(
        c.cmd(&[b"STRLEN", b"big"]).await,
        format!(":{}\r\n", half.len()).into_bytes()
    );
}

/// The command names in the first column of `docs/redis-compatibility.md`'s command table.
fn documented_commands() -> std::collections::BTreeSet<String> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/redis-compatibility.md"
    );
    let text = std::fs::read_to_string(path).expect("docs/redis-compatibility.md");
    let table = text
        .split("\n## Commands\n")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("a Commands section");
    let mut names = std::collections::BTreeSet::new();
    for row in table.lines().filter(|l| l.starts_with("| `")) {
        let first_cell = row.split(" | ").next().unwrap_or_default();
        for span in first_cell.split('`').skip(1).step_by(2) {
            let word = span.split_whitespace().next().unwrap_or_default();
            if !word.is_empty() && word.chars().all(|c| c.is_ascii_uppercase()) {
                names.insert(word.to_ascii_lowercase());
            }
        }
    }
    names
}

/// The compatibility table and the server's own command table (what `COMMAND` lists, which
/// is what the server dispatches) name the same commands, and every one of them is known
/// to the dispatcher.
#[tokio::test]
async fn the_compatibility_table_lists_exactly_the_commands_the_server_has() {
    use common::{Reply, ReplyExt};
    let node = TestNode::start(StartOptions::default()).await;
    let mut c = RawResp::connect(node.resp_addr()).await;
    let listed = Reply::parse(&c.cmd(&[b"COMMAND"]).await);
    let served: std::collections::BTreeSet<String> = listed
        .array()
        .iter()
        .map(|entry| String::from_utf8_lossy(entry.array()[0].bulk()).into_owned())
        .collect();
    let documented = documented_commands();
    let undocumented: Vec<&String> = served.difference(&documented).collect();
    let unserved: Vec<&String> = documented.difference(&served).collect();
    assert!(
        undocumented.is_empty() && unserved.is_empty(),
        "COMMAND lists {undocumented:?} that docs/redis-compatibility.md does not; the docs name {unserved:?} that COMMAND does not list"
    );
    for name in &served {
        if name == "quit" {
            continue;
        }
        let reply = c.cmd(&[name.as_bytes()]).await;
        assert!(
            !String::from_utf8_lossy(&reply).contains("unknown command"),
            "{name} is listed but not dispatched: {:?}",
            String::from_utf8_lossy(&reply)
        );
    }
}
