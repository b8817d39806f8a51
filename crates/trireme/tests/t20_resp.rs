//! Area 20: the RESP front end, spoken byte for byte over raw sockets, plus `redis-cli`.

use crate::common;

use crate::common::{RawResp, Reply, ReplyExt, StartOptions, TestNode, encode_cmd, wait_until};
use std::collections::BTreeSet;
use std::time::Duration;

/// Sends one command and asserts the exact reply bytes.
async fn exact(conn: &mut RawResp, args: &[&[u8]], want: &[u8]) {
    conn.send_cmd(args).await;
    // One complete reply, however long: a short or long answer fails here, not by timeout.
    let got = conn.read_reply().await;
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(want),
        "reply to {:?}",
        args.iter()
            .map(|a| String::from_utf8_lossy(a))
            .collect::<Vec<_>>()
    );
}

/// Runs `redis-cli -h 127.0.0.1 -p PORT args...` with a deadline; returns stdout.
fn redis_cli(port: u16, args: &[&str]) -> String {
    let mut all: Vec<String> = vec![
        "-h".into(),
        "127.0.0.1".into(),
        "-p".into(),
        port.to_string(),
    ];
    all.extend(args.iter().map(|a| a.to_string()));
    let (ok, stdout, stderr) = common::run_program("redis-cli", &all, Duration::from_secs(20));
    assert!(ok, "redis-cli {args:?}: {stdout}{stderr}");
    stdout
}

#[tokio::test]
async fn replies_are_byte_exact() {
    let node = TestNode::start(StartOptions::default()).await;
    let mut c = RawResp::connect(node.resp_addr()).await;

    exact(&mut c, &[b"PING"], b"+PONG\r\n").await;
    exact(&mut c, &[b"ping", b"hello"], b"$5\r\nhello\r\n").await;
    exact(&mut c, &[b"ECHO", b"hello"], b"$5\r\nhello\r\n").await;
    exact(&mut c, &[b"ECHO", b""], b"$0\r\n\r\n").await;
    exact(&mut c, &[b"GET", b"greeting"], b"$-1\r\n").await;
    exact(&mut c, &[b"SET", b"greeting", b"hello"], b"+OK\r\n").await;
    exact(&mut c, &[b"GET", b"greeting"], b"$5\r\nhello\r\n").await;
    exact(&mut c, &[b"TYPE", b"greeting"], b"+string\r\n").await;
    exact(&mut c, &[b"TYPE", b"nothing"], b"+none\r\n").await;
    exact(
        &mut c,
        &[b"EXISTS", b"greeting", b"greeting", b"nothing"],
        b":2\r\n",
    )
    .await;
    exact(&mut c, &[b"DEL", b"greeting", b"nothing"], b":1\r\n").await;
    exact(&mut c, &[b"DEL", b"greeting"], b":0\r\n").await;
    exact(&mut c, &[b"UNLINK", b"greeting"], b":0\r\n").await;

    // Binary-safe values, CRLF inside included.
    exact(&mut c, &[b"SET", b"bin", b"a\r\n\x00\xff"], b"+OK\r\n").await;
    exact(&mut c, &[b"GET", b"bin"], b"$5\r\na\r\n\x00\xff\r\n").await;

    // Counters.
    exact(&mut c, &[b"INCR", b"n"], b":1\r\n").await;
    exact(&mut c, &[b"INCRBY", b"n", b"41"], b":42\r\n").await;
    exact(&mut c, &[b"DECR", b"n"], b":41\r\n").await;
    exact(&mut c, &[b"DECRBY", b"n", b"50"], b":-9\r\n").await;
    exact(&mut c, &[b"GET", b"n"], b"$2\r\n-9\r\n").await;

    // Multi-key.
    exact(&mut c, &[b"MSET", b"a", b"1", b"b", b"22"], b"+OK\r\n").await;
    exact(
        &mut c,
        &[b"MGET", b"a", b"missing", b"b"],
        b"*3\r\n$1\r\n1\r\n$-1\r\n$2\r\n22\r\n",
    )
    .await;

    // SET options.
    exact(&mut c, &[b"SET", b"a", b"x", b"NX"], b"$-1\r\n").await;
    exact(&mut c, &[b"SET", b"new", b"x", b"XX"], b"$-1\r\n").await;
    exact(&mut c, &[b"GET", b"new"], b"$-1\r\n").await;
    exact(&mut c, &[b"SET", b"new", b"x", b"NX"], b"+OK\r\n").await;
    exact(
        &mut c,
        &[b"SET", b"new", b"y", b"XX", b"GET"],
        b"$1\r\nx\r\n",
    )
    .await;
    exact(&mut c, &[b"GET", b"new"], b"$1\r\ny\r\n").await;

    // Connection commands.
    exact(&mut c, &[b"SELECT", b"0"], b"+OK\r\n").await;
    exact(&mut c, &[b"CLIENT", b"SETNAME", b"tester"], b"+OK\r\n").await;
    exact(&mut c, &[b"CLIENT", b"GETNAME"], b"$6\r\ntester\r\n").await;
    let id = Reply::parse(&c.cmd(&[b"CLIENT", b"ID"]).await).int();
    assert!(id > 0);
    let hello = Reply::parse(&c.cmd(&[b"HELLO", b"2"]).await);
    let fields = hello.array();
    let proto = fields
        .chunks(2)
        .find(|kv| kv[0] == Reply::Bulk(Some(bytes::Bytes::from_static(b"proto"))))
        .map(|kv| kv[1].clone());
    assert_eq!(proto, Some(Reply::Integer(2)), "HELLO 2: {hello:?}");
    // HELLO 3 answers a RESP3 map and switches the connection: a missing key is `_`; HELLO 2
    // switches back; other versions are refused and change nothing.
    let hello3 = format!(
        "%8\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$5\r\n7.2.0\r\n$5\r\nproto\r\n:3\r\n$2\r\nid\r\n:{id}\r\n$4\r\nmode\r\n$7\r\ncluster\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n$12\r\ntrireme-node\r\n$2\r\nn1\r\n"
    );
    c.send_cmd(&[b"HELLO", b"3"]).await;
    assert_eq!(
        String::from_utf8_lossy(&c.read_bytes(hello3.len()).await),
        hello3
    );
    c.send_cmd(&[b"GET", b"no-such-key"]).await;
    assert_eq!(c.read_bytes(3).await, b"_\r\n");
    exact(
        &mut c,
        &[b"HELLO", b"4"],
        b"-NOPROTO sorry, this protocol version is not supported\r\n",
    )
    .await;
    c.send_cmd(&[b"GET", b"no-such-key"]).await;
    assert_eq!(c.read_bytes(3).await, b"_\r\n");
    let back = c.cmd(&[b"HELLO", b"2"]).await;
    assert!(back.starts_with(b"*16\r\n"), "{back:?}");
    exact(&mut c, &[b"GET", b"no-such-key"], b"$-1\r\n").await;
    let info = Reply::parse(&c.cmd(&[b"INFO"]).await);
    assert!(
        String::from_utf8_lossy(info.bulk()).contains("redis_version:"),
        "{info:?}"
    );
    let count = Reply::parse(&c.cmd(&[b"COMMAND", b"COUNT"]).await).int();
    assert!(count >= 20, "COMMAND COUNT {count}");

    // QUIT answers +OK, then the server closes the connection.
    c.send_cmd(&[b"QUIT"]).await;
    assert_eq!(c.read_to_close().await, b"+OK\r\n");
}

/// `INFO keyspace` counts the keys, those with an expiry, and their average time to live,
/// as Redis does; in RESP3 the text is a verbatim string.
#[tokio::test]
async fn info_keyspace_counts_keys_with_an_expiry() {
    let node = TestNode::start(StartOptions::default()).await;
    let mut c = RawResp::connect(node.resp_addr()).await;
    for key in ["a", "b", "c"] {
        c.cmd(&[b"SET", key.as_bytes(), b"v"]).await;
    }
    c.cmd(&[b"EXPIRE", b"a", b"100"]).await;
    c.cmd(&[b"PEXPIRE", b"b", b"300000"]).await;
    let info = Reply::parse(&c.cmd(&[b"INFO", b"keyspace"]).await);
    let text = String::from_utf8_lossy(info.bulk()).into_owned();
    let line = text
        .lines()
        .find(|l| l.starts_with("db0:"))
        .unwrap_or_else(|| panic!("no db0 line in {text:?}"));
    let fields: std::collections::HashMap<&str, u64> = line["db0:".len()..]
        .split(',')
        .filter_map(|f| f.split_once('='))
        .map(|(k, v)| (k, v.parse().expect("a number")))
        .collect();
    assert_eq!((fields["keys"], fields["expires"]), (3, 2), "{line}");
    // 100 s and 300 s average to 200 s, less the time the test took.
    assert!((190_000..=200_000).contains(&fields["avg_ttl"]), "{line}");
    c.cmd(&[b"HELLO", b"3"]).await;
    let raw = c.cmd(&[b"INFO", b"keyspace"]).await;
    assert!(
        raw.starts_with(b"=")
            && raw[raw.iter().position(|&b| b == b'\n').unwrap() + 1..].starts_with(b"txt:"),
        "{:?}",
        String::from_utf8_lossy(&raw)
    );
}

#[tokio::test]
async fn error_replies_are_byte_exact_and_keep_the_connection() {
    let node = TestNode::start(StartOptions::default()).await;
    let mut c = RawResp::connect(node.resp_addr()).await;

    exact(
        &mut c,
        &[b"GET"],
        b"-ERR wrong number of arguments for 'get' command\r\n",
    )
    .await;
    exact(
        &mut c,
        &[b"get", b"a", b"b"],
        b"-ERR wrong number of arguments for 'get' command\r\n",
    )
    .await;
    exact(&mut c, &[b"SET", b"s", b"abc"], b"+OK\r\n").await;
    exact(
        &mut c,
        &[b"INCR", b"s"],
        b"-ERR value is not an integer or out of range\r\n",
    )
    .await;
    exact(
        &mut c,
        &[b"INCRBY", b"n", b"1.5"],
        b"-ERR value is not an integer or out of range\r\n",
    )
    .await;
    exact(
        &mut c,
        &[b"SET", b"s", b"v", b"BOGUS"],
        b"-ERR syntax error\r\n",
    )
    .await;
    exact(
        &mut c,
        &[b"SET", b"s", b"v", b"NX", b"XX"],
        b"-ERR syntax error\r\n",
    )
    .await;
    exact(
        &mut c,
        &[b"foo"],
        b"-ERR unknown command 'foo', with args beginning with: \r\n",
    )
    .await;
    // The failed commands changed nothing.
    exact(&mut c, &[b"GET", b"s"], b"$3\r\nabc\r\n").await;

    // Limits: a clear -ERR, and the connection goes on.
    let long_key = vec![b'k'; 8193];
    exact(
        &mut c,
        &[b"SET", &long_key, b"v"],
        b"-ERR key is 8193 bytes, the limit is 8192\r\n",
    )
    .await;
    let at_limit = vec![b'k'; 8192];
    exact(&mut c, &[b"SET", &at_limit, b"v"], b"+OK\r\n").await;
    let big = vec![b'v'; 512 * 1024 + 1];
    let reply = Reply::parse(&c.cmd(&[b"SET", b"big", &big]).await);
    match &reply {
        Reply::Error(e) => assert!(e.starts_with("ERR "), "{e}"),
        other => panic!("oversized value accepted: {other:?}"),
    }
    exact(&mut c, &[b"GET", b"big"], b"$-1\r\n").await;
    let max = vec![b'v'; 512 * 1024];
    exact(&mut c, &[b"SET", b"big", &max], b"+OK\r\n").await;
    let got = Reply::parse(&c.cmd(&[b"GET", b"big"]).await);
    assert_eq!(got.bulk().len(), 512 * 1024);
    exact(&mut c, &[b"PING"], b"+PONG\r\n").await;
}

#[tokio::test]

async fn unknown_command_error_matches_redis_with_args() {
    let node = TestNode::start(StartOptions::default()).await;
    let mut c = RawResp::connect(node.resp_addr()).await;
    exact(
        &mut c,
        &[b"foo", b"a"],
        b"-ERR unknown command 'foo', with args beginning with: 'a' \r\n",
    )
    .await;
    exact(
        &mut c,
        &[b"foo", b"a", b"bc"],
        b"-ERR unknown command 'foo', with args beginning with: 'a' 'bc' \r\n",
    )
    .await;
}

#[tokio::test]

async fn set_with_a_missing_expiry_argument_is_a_syntax_error() {
    let node = TestNode::start(StartOptions::default()).await;
    let mut c = RawResp::connect(node.resp_addr()).await;
    exact(
        &mut c,
        &[b"SET", b"k", b"v", b"EX"],
        b"-ERR syntax error\r\n",
    )
    .await;
    exact(
        &mut c,
        &[b"SET", b"k", b"v", b"PX"],
        b"-ERR syntax error\r\n",
    )
    .await;
}

#[tokio::test]

async fn incr_overflow_error_matches_redis() {
    let node = TestNode::start(StartOptions::default()).await;
    let mut c = RawResp::connect(node.resp_addr()).await;
    exact(&mut c, &[b"SET", b"m", b"9223372036854775807"], b"+OK\r\n").await;
    exact(
        &mut c,
        &[b"INCR", b"m"],
        b"-ERR increment or decrement would overflow\r\n",
    )
    .await;
    exact(&mut c, &[b"GET", b"m"], b"$19\r\n9223372036854775807\r\n").await;
}

#[tokio::test]
async fn a_pipeline_in_one_write_is_answered_in_order() {
    let node = TestNode::start(StartOptions::default()).await;
    let mut c = RawResp::connect(node.resp_addr()).await;
    let mut batch = Vec::new();
    let mut want = Vec::new();
    for i in 0..100 {
        let key = format!("pipe:{i}");
        let value = format!("value-{i}-{}", "x".repeat(i));
        batch.extend(encode_cmd(&[b"SET", key.as_bytes(), value.as_bytes()]));
        want.extend_from_slice(b"+OK\r\n");
    }
    for i in (0..100).rev() {
        let key = format!("pipe:{i}");
        let value = format!("value-{i}-{}", "x".repeat(i));
        batch.extend(encode_cmd(&[b"GET", key.as_bytes()]));
        want.extend(format!("${}\r\n{value}\r\n", value.len()).into_bytes());
    }
    batch.extend(encode_cmd(&[b"DBSIZE"]));
    want.extend_from_slice(b":100\r\n");
    c.send(&batch).await;
    let got = c.read_exact_reply(want.len()).await;
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(&want)
    );
    exact(&mut c, &[b"PING"], b"+PONG\r\n").await;
}

/// Commands on different keys in one pipeline run together; a command on a key an earlier
/// one in the same pipeline touched must still see that command's effect.
#[tokio::test]
async fn a_pipeline_that_returns_to_a_key_sees_its_own_earlier_writes() {
    let node = TestNode::start(StartOptions::default()).await;
    let mut c = RawResp::connect(node.resp_addr()).await;
    let mut batch = Vec::new();
    let mut want = Vec::new();
    for i in 1..=150 {
        let other = format!("other:{i}");
        batch.extend(encode_cmd(&[b"INCR", b"counter"]));
        want.extend(format!(":{i}\r\n").into_bytes());
        batch.extend(encode_cmd(&[
            b"SET",
            other.as_bytes(),
            i.to_string().as_bytes(),
        ]));
        want.extend_from_slice(b"+OK\r\n");
        batch.extend(encode_cmd(&[b"GET", b"counter"]));
        want.extend(format!("${}\r\n{i}\r\n", i.to_string().len()).into_bytes());
        batch.extend(encode_cmd(&[b"DEL", other.as_bytes()]));
        want.extend_from_slice(b":1\r\n");
        batch.extend(encode_cmd(&[b"EXISTS", other.as_bytes()]));
        want.extend_from_slice(b":0\r\n");
    }
    // A command that is not single-key (MGET) between them, and a QUIT that drops the rest.
    batch.extend(encode_cmd(&[b"MGET", b"counter", b"other:1"]));
    want.extend_from_slice(b"*2\r\n$3\r\n150\r\n$-1\r\n");
    batch.extend(encode_cmd(&[b"QUIT"]));
    want.extend_from_slice(b"+OK\r\n");
    batch.extend(encode_cmd(&[b"SET", b"after-quit", b"x"]));
    c.send(&batch).await;
    let got = c.read_exact_reply(want.len()).await;
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(&want)
    );
    let mut again = RawResp::connect(node.resp_addr()).await;
    exact(&mut again, &[b"EXISTS", b"after-quit"], b":0\r\n").await;
}

#[tokio::test]
async fn malformed_input_gets_a_protocol_error_and_only_that_connection_closes() {
    let node = TestNode::start(StartOptions::default()).await;
    let mut bystander = RawResp::connect(node.resp_addr()).await;
    exact(&mut bystander, &[b"SET", b"still", b"here"], b"+OK\r\n").await;

    let limit_error =
        b"-ERR Protocol error: bulk string of 532481 bytes exceeds the limit of 532480\r\n";
    let cases: Vec<(&str, Vec<u8>, Vec<u8>)> = vec![
        (
            "negative bulk length",
            b"*1\r\n$-5\r\n".to_vec(),
            b"-ERR Protocol error: invalid bulk length\r\n".to_vec(),
        ),
        (
            "non-numeric bulk length",
            b"*2\r\n$3\r\nGET\r\n$abc\r\n".to_vec(),
            b"-ERR Protocol error: invalid bulk length\r\n".to_vec(),
        ),
        (
            "non-numeric array length",
            b"*x\r\n".to_vec(),
            b"-ERR Protocol error: invalid multibulk length\r\n".to_vec(),
        ),
        (
            "bulk over the limit",
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$532481\r\n".to_vec(),
            limit_error.to_vec(),
        ),
        (
            "binary garbage inside an array",
            b"*1\r\n!\x00\xff\xfe\x01garbage\r\n".to_vec(),
            b"-ERR Protocol error: expected '$', got '!'\r\n".to_vec(),
        ),
        (
            "unbalanced quotes inline",
            b"SET \"abc\r\n".to_vec(),
            b"-ERR Protocol error: unbalanced quotes in request\r\n".to_vec(),
        ),
        (
            "good command then garbage in the same write",
            b"*1\r\n$4\r\nPING\r\n*x\r\n".to_vec(),
            b"+PONG\r\n-ERR Protocol error: invalid multibulk length\r\n".to_vec(),
        ),
    ];
    for (what, input, want) in cases {
        let mut bad = RawResp::connect(node.resp_addr()).await;
        bad.send(&input).await;
        let got = bad.read_to_close().await;
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&want),
            "{what}"
        );
        // The other, already open connection is unaffected.
        exact(&mut bystander, &[b"GET", b"still"], b"$4\r\nhere\r\n").await;
    }
    // The bulk over the limit was not stored.
    exact(&mut bystander, &[b"EXISTS", b"k"], b":0\r\n").await;
    // New connections are still accepted.
    let mut fresh = RawResp::connect(node.resp_addr()).await;
    exact(&mut fresh, &[b"PING"], b"+PONG\r\n").await;
}

#[tokio::test]
async fn redis_cli_talks_to_the_node() {
    let node = TestNode::start(StartOptions::default()).await;
    let port = node.resp_addr().port();
    // redis-cli blocks this thread only; the server is another process.
    let run = |args: &[&str]| redis_cli(port, args);
    assert_eq!(run(&["PING"]), "PONG\n");
    assert_eq!(run(&["SET", "cli:one", "1"]), "OK\n");
    assert_eq!(run(&["GET", "cli:one"]), "1\n");
    assert_eq!(
        run(&["MSET", "cli:two", "2", "cli:three", "3", "other", "x"]),
        "OK\n"
    );
    assert_eq!(run(&["INCR", "cli:one"]), "2\n");
    assert_eq!(run(&["DBSIZE"]), "4\n");
    assert_eq!(run(&["CLUSTER", "KEYSLOT", "foo"]), "12182\n");
    let scanned: BTreeSet<String> = run(&["--scan", "--pattern", "cli:*"])
        .lines()
        .map(str::to_string)
        .collect();
    let want: BTreeSet<String> = ["cli:one", "cli:two", "cli:three"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(scanned, want);
    // The writes are visible over HTTP too.
    assert_eq!(node.get("cli:two").await.unwrap().value, b"2");
}

#[tokio::test]
async fn resp_and_http_share_one_keyspace() {
    let node = TestNode::start(StartOptions::default()).await;
    let mut c = RawResp::connect(node.resp_addr()).await;

    exact(&mut c, &[b"SET", b"users/alice", b"x"], b"+OK\r\n").await;
    let entry = node
        .get("users/alice")
        .await
        .expect("RESP write visible over HTTP");
    assert_eq!(entry.value, b"x");
    assert_eq!(entry.key, "users/alice");

    assert!(node.put("users/bob", "from-http").await);
    exact(&mut c, &[b"GET", b"users/bob"], b"$9\r\nfrom-http\r\n").await;
    exact(
        &mut c,
        &[b"EXISTS", b"users/alice", b"users/bob"],
        b":2\r\n",
    )
    .await;

    exact(&mut c, &[b"DEL", b"users/alice"], b":1\r\n").await;
    assert!(node.get("users/alice").await.is_none());
    let resp = node
        .http
        .delete(node.kv_url("users/bob"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.text().await.unwrap(), "true");
    exact(&mut c, &[b"GET", b"users/bob"], b"$-1\r\n").await;

    // An INCR over RESP moves the HTTP ModifyIndex, like any write.
    assert!(node.put("users/count", "10").await);
    let before = node.get("users/count").await.unwrap();
    exact(&mut c, &[b"INCR", b"users/count"], b":11\r\n").await;
    let after = node.get("users/count").await.unwrap();
    assert_eq!(after.value, b"11");
    assert!(after.modify_index > before.modify_index);
    assert_eq!(after.create_index, before.create_index);

    // An HTTP PUT replaces the whole record, expiry included (like a plain SET).
    exact(
        &mut c,
        &[b"SET", b"users/ttl", b"v", b"EX", b"100"],
        b"+OK\r\n",
    )
    .await;
    assert!(node.put("users/ttl", "from-http").await);
    exact(&mut c, &[b"TTL", b"users/ttl"], b":-1\r\n").await;

    // A prefix listing over HTTP sees RESP writes.
    exact(
        &mut c,
        &[b"MSET", b"dir/a", b"1", b"dir/b", b"2"],
        b"+OK\r\n",
    )
    .await;
    let keys: Vec<String> = node.list("dir/").await.into_iter().map(|e| e.key).collect();
    assert_eq!(keys, ["dir/a", "dir/b"]);
}

/// A hash written over RESP is one key to the HTTP APIs: listed, read as a key without a
/// value, deleted whole; a plain HTTP write does not replace it by mistake.
#[tokio::test]
async fn the_http_apis_see_a_hash_as_one_key_they_cannot_overwrite() {
    let node = TestNode::start(StartOptions::default()).await;
    let mut c = RawResp::connect(node.resp_addr()).await;
    exact(
        &mut c,
        &[b"HSET", b"dir/h", b"f", b"v", b"g", b"w"],
        b":2\r\n",
    )
    .await;
    exact(&mut c, &[b"SET", b"dir/s", b"x"], b"+OK\r\n").await;
    let keys: Vec<String> = node.list("dir/").await.into_iter().map(|e| e.key).collect();
    assert_eq!(keys, ["dir/h", "dir/s"], "the fields are not keys");
    let entry = node.get("dir/h").await.expect("the hash's key");
    assert!(entry.value.is_empty(), "{:?}", entry.value);

    for url in [
        node.kv_url("dir/h"),
        format!("{}/v0/dir/h", node.http_url()),
    ] {
        let resp = node.http.put(&url).body(r#"{"a":1}"#).send().await.unwrap();
        assert_eq!(resp.status(), 409, "{url}");
        let body: serde_json::Value = resp.json().await.unwrap();
        assert!(
            body["error"]
                .as_str()
                .is_some_and(|e| e.contains("Redis hash")),
            "{body}"
        );
    }
    // A document write on "whatever is there" (If-Match: *) does not take a hash either.
    let resp = node
        .http
        .put(format!("{}/v0/dir/h", node.http_url()))
        .header("If-Match", "*")
        .body(r#"{"a":1}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 409);
    exact(&mut c, &[b"HGET", b"dir/h", b"g"], b"$1\r\nw\r\n").await;

    let resp = node.http.delete(node.kv_url("dir/h")).send().await.unwrap();
    assert_eq!(resp.text().await.unwrap(), "true");
    exact(&mut c, &[b"HLEN", b"dir/h"], b":0\r\n").await;
    exact(&mut c, &[b"DBSIZE"], b":1\r\n").await;
}

#[tokio::test]
async fn ttl_expiry_and_reaping() {
    let node = TestNode::start(StartOptions::default()).await;
    let mut c = RawResp::connect(node.resp_addr()).await;

    exact(&mut c, &[b"SET", b"plain", b"v"], b"+OK\r\n").await;
    exact(&mut c, &[b"TTL", b"plain"], b":-1\r\n").await;
    exact(&mut c, &[b"PTTL", b"plain"], b":-1\r\n").await;
    exact(&mut c, &[b"TTL", b"absent"], b":-2\r\n").await;
    exact(&mut c, &[b"PTTL", b"absent"], b":-2\r\n").await;
    exact(&mut c, &[b"EXPIRE", b"absent", b"10"], b":0\r\n").await;
    exact(&mut c, &[b"PERSIST", b"plain"], b":0\r\n").await;

    // A long expiry is reported, can be removed, and survives KEEPTTL.
    exact(&mut c, &[b"SET", b"long", b"v", b"EX", b"100"], b"+OK\r\n").await;
    let ttl = Reply::parse(&c.cmd(&[b"TTL", b"long"]).await).int();
    assert!((98..=100).contains(&ttl), "TTL {ttl}");
    exact(&mut c, &[b"SET", b"long", b"w", b"KEEPTTL"], b"+OK\r\n").await;
    let pttl = Reply::parse(&c.cmd(&[b"PTTL", b"long"]).await).int();
    assert!(
        (90_000..=100_000).contains(&pttl),
        "PTTL {pttl} after KEEPTTL"
    );
    exact(&mut c, &[b"PERSIST", b"long"], b":1\r\n").await;
    exact(&mut c, &[b"TTL", b"long"], b":-1\r\n").await;
    exact(&mut c, &[b"PEXPIRE", b"long", b"100000"], b":1\r\n").await;
    // A plain SET drops the expiry.
    exact(&mut c, &[b"SET", b"long", b"x"], b"+OK\r\n").await;
    exact(&mut c, &[b"TTL", b"long"], b":-1\r\n").await;

    // An expiry in the past removes the key at once.
    exact(&mut c, &[b"SET", b"past", b"v", b"PXAT", b"1"], b"+OK\r\n").await;
    exact(&mut c, &[b"GET", b"past"], b"$-1\r\n").await;

    // PX 300: the key disappears for GET/TTL/EXISTS/HTTP, then from DBSIZE and SCAN.
    let base = Reply::parse(&c.cmd(&[b"DBSIZE"]).await).int();
    exact(&mut c, &[b"SET", b"short", b"v", b"PX", b"300"], b"+OK\r\n").await;
    let pttl = Reply::parse(&c.cmd(&[b"PTTL", b"short"]).await).int();
    assert!(pttl <= 300, "PTTL {pttl}");
    let addr = node.resp_addr();
    let gone = wait_until(
        Duration::from_secs(10),
        Duration::from_millis(25),
        || async {
            let mut c = RawResp::connect(addr).await;
            c.cmd(&[b"GET", b"short"]).await == b"$-1\r\n"
        },
    )
    .await;
    assert!(gone, "key with PX 300 still readable after 10 s");
    exact(&mut c, &[b"TTL", b"short"], b":-2\r\n").await;
    exact(&mut c, &[b"EXISTS", b"short"], b":0\r\n").await;
    assert!(
        node.get("short").await.is_none(),
        "expired key served over HTTP"
    );
    let reaped = wait_until(
        Duration::from_secs(10),
        Duration::from_millis(25),
        || async {
            let mut c = RawResp::connect(addr).await;
            Reply::parse(&c.cmd(&[b"DBSIZE"]).await).int() == base
        },
    )
    .await;
    assert!(reaped, "DBSIZE never dropped back to {base} after expiry");
    let keys = scan_all(&mut c, b"*").await;
    assert!(!keys.contains("short"), "SCAN returned an expired key");
    assert!(keys.contains("plain") && keys.contains("long"), "{keys:?}");
}

/// Runs a full SCAN (COUNT 7) with a pattern; returns every key seen.
async fn scan_all(c: &mut RawResp, pattern: &[u8]) -> BTreeSet<String> {
    let mut cursor = b"0".to_vec();
    let mut keys = BTreeSet::new();
    for _ in 0..10_000 {
        let reply = Reply::parse(
            &c.cmd(&[b"SCAN", &cursor, b"MATCH", pattern, b"COUNT", b"7"])
                .await,
        );
        let parts = reply.array();
        assert_eq!(parts.len(), 2, "SCAN reply {reply:?}");
        cursor = parts[0].bulk().to_vec();
        for k in parts[1].array() {
            keys.insert(String::from_utf8(k.bulk().to_vec()).expect("utf-8 key"));
        }
        if cursor == b"0" {
            return keys;
        }
    }
    panic!("SCAN did not finish in 10000 calls");
}

#[tokio::test]
async fn scan_with_match_and_count_visits_every_key() {
    let node = TestNode::start(StartOptions::default()).await;
    let mut c = RawResp::connect(node.resp_addr()).await;
    let mut batch = Vec::new();
    for i in 0..60 {
        batch.extend(encode_cmd(&[b"SET", format!("scan:{i}").as_bytes(), b"v"]));
    }
    for i in 0..15 {
        batch.extend(encode_cmd(&[b"SET", format!("other:{i}").as_bytes(), b"v"]));
    }
    c.send(&batch).await;
    let oks = c.read_exact_reply(75 * 5).await;
    assert_eq!(oks, b"+OK\r\n".repeat(75));

    exact(&mut c, &[b"DBSIZE"], b":75\r\n").await;
    let want: BTreeSet<String> = (0..60).map(|i| format!("scan:{i}")).collect();
    assert_eq!(scan_all(&mut c, b"scan:*").await, want);
    assert_eq!(scan_all(&mut c, b"*").await.len(), 75);
    assert!(scan_all(&mut c, b"nomatch*").await.is_empty());
    let one: BTreeSet<String> = [
        "scan:1", "scan:10", "scan:11", "scan:12", "scan:13", "scan:14", "scan:15", "scan:16",
        "scan:17", "scan:18", "scan:19",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(scan_all(&mut c, b"scan:1*").await, one);
}

#[tokio::test]
async fn cluster_commands_describe_slots_like_redis_cluster() {
    let node = TestNode::start(StartOptions::default()).await;
    let mut c = RawResp::connect(node.resp_addr()).await;
    // Values from the Redis Cluster specification's CRC16 (XMODEM) and hash-tag rules.
    let slots: [(&[u8], &[u8]); 11] = [
        (b"foo", b":12182\r\n"),
        (b"bar", b":5061\r\n"),
        (b"hello", b":866\r\n"),
        (b"somekey", b":11058\r\n"),
        (b"{user1000}.following", b":3443\r\n"),
        (b"{user1000}.followers", b":3443\r\n"),
        (b"foo{}{bar}", b":8363\r\n"),
        (b"foo{{bar}}zap", b":4015\r\n"),
        (b"foo{bar}{zap}", b":5061\r\n"),
        (b"", b":0\r\n"),
        (b"users/alice", b":660\r\n"),
    ];
    for (key, want) in slots {
        exact(&mut c, &[b"CLUSTER", b"KEYSLOT", key], want).await;
    }

    let port = i64::from(node.resp_addr().port());
    let reply = Reply::parse(&c.cmd(&[b"CLUSTER", b"SLOTS"]).await);
    let mut ranges: Vec<(i64, i64)> = reply
        .array()
        .iter()
        .map(|r| {
            let r = r.array();
            let master = r[2].array();
            assert_eq!(master[0].bulk(), b"127.0.0.1");
            assert_eq!(master[1].int(), port, "CLUSTER SLOTS names the RESP port");
            (r[0].int(), r[1].int())
        })
        .collect();
    ranges.sort_unstable();
    let mut next = 0;
    for (a, b) in &ranges {
        assert_eq!(
            *a, next,
            "CLUSTER SLOTS ranges must be contiguous: {ranges:?}"
        );
        assert!(b >= a);
        next = b + 1;
    }
    assert_eq!(next, 16384, "CLUSTER SLOTS must cover 0..=16383");

    let info = Reply::parse(&c.cmd(&[b"CLUSTER", b"INFO"]).await);
    let info = String::from_utf8_lossy(info.bulk()).to_string();
    assert!(info.contains("cluster_state:ok"), "{info}");
    assert!(info.contains("cluster_slots_assigned:16384"), "{info}");

    let myid = Reply::parse(&c.cmd(&[b"CLUSTER", b"MYID"]).await);
    let myid = String::from_utf8(myid.bulk().to_vec()).unwrap();
    assert_eq!(myid.len(), 40);
    assert!(myid.chars().all(|ch| ch.is_ascii_hexdigit()), "{myid}");

    let nodes = Reply::parse(&c.cmd(&[b"CLUSTER", b"NODES"]).await);
    let nodes = String::from_utf8_lossy(nodes.bulk()).to_string();
    assert!(nodes.starts_with(&myid), "{nodes}");
    assert!(nodes.contains("myself"), "{nodes}");

    let shards = Reply::parse(&c.cmd(&[b"CLUSTER", b"SHARDS"]).await);
    assert_eq!(shards.array().len(), 16);
}

#[tokio::test]
async fn expired_keys_are_absent_for_writes_too() {
    let node = TestNode::start(StartOptions::default()).await;
    let addr = node.resp_addr();
    let mut c = RawResp::connect(addr).await;
    for key in [&b"e:incr"[..], b"e:nx", b"e:xx", b"e:cas", b"e:del"] {
        exact(&mut c, &[b"SET", key, b"41", b"PX", b"40"], b"+OK\r\n").await;
    }
    let expired = wait_until(
        Duration::from_secs(10),
        Duration::from_millis(10),
        || async {
            let mut c = RawResp::connect(addr).await;
            c.cmd(&[b"EXISTS", b"e:incr", b"e:nx", b"e:xx", b"e:cas", b"e:del"])
                .await
                == b":0\r\n"
        },
    )
    .await;
    assert!(expired, "PX 40 keys still present after 10 s");
    // Whether or not the reaper got there yet, an expired key is simply absent.
    exact(&mut c, &[b"INCR", b"e:incr"], b":1\r\n").await;
    exact(&mut c, &[b"TTL", b"e:incr"], b":-1\r\n").await;
    exact(&mut c, &[b"SET", b"e:nx", b"new", b"NX"], b"+OK\r\n").await;
    exact(&mut c, &[b"SET", b"e:xx", b"new", b"XX"], b"$-1\r\n").await;
    exact(&mut c, &[b"DEL", b"e:del"], b":0\r\n").await;
    let resp = node
        .http
        .put(format!("{}?cas=0", node.kv_url("e:cas")))
        .body("created")
        .send()
        .await
        .unwrap();
    assert_eq!(
        resp.text().await.unwrap(),
        "true",
        "cas=0 over an expired key"
    );
    exact(&mut c, &[b"GET", b"e:cas"], b"$7\r\ncreated\r\n").await;
    exact(&mut c, &[b"GET", b"e:xx"], b"$-1\r\n").await;
    exact(&mut c, &[b"GET", b"e:nx"], b"$3\r\nnew\r\n").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_incr_from_many_connections_loses_nothing() {
    let node = TestNode::start(StartOptions::default()).await;
    let addr = node.resp_addr();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        tasks.push(tokio::spawn(async move {
            let mut c = RawResp::connect(addr).await;
            // Half one at a time, half pipelined in one write.
            for _ in 0..25 {
                let n = Reply::parse(&c.cmd(&[b"INCR", b"hits"]).await).int();
                assert!(n >= 1);
            }
            let batch: Vec<u8> = (0..25)
                .flat_map(|_| encode_cmd(&[b"INCR", b"hits"]))
                .collect();
            c.send(&batch).await;
            let mut last = 0;
            for _ in 0..25 {
                let n = Reply::parse(&c.read_reply().await).int();
                assert!(n > last, "INCR replies of one connection must increase");
                last = n;
            }
        }));
    }
    for t in tasks {
        t.await.expect("INCR task");
    }
    let mut c = RawResp::connect(addr).await;
    exact(&mut c, &[b"GET", b"hits"], b"$3\r\n400\r\n").await;
}

#[tokio::test]

async fn arity_errors_name_the_command_like_redis() {
    let node = TestNode::start(StartOptions::default()).await;
    let mut c = RawResp::connect(node.resp_addr()).await;
    let cases: [(&[&[u8]], &str); 7] = [
        (&[b"TTL", b"k", b"x"], "ttl"),
        (&[b"PTTL", b"k", b"x"], "pttl"),
        (&[b"PERSIST", b"k", b"x"], "persist"),
        (&[b"TYPE", b"k", b"x"], "type"),
        (&[b"DBSIZE", b"x"], "dbsize"),
        (&[b"SELECT", b"0", b"1"], "select"),
        (&[b"SCAN"], "scan"),
    ];
    for (args, name) in cases {
        let want = format!("-ERR wrong number of arguments for '{name}' command\r\n");
        exact(&mut c, args, want.as_bytes()).await;
    }
}

#[tokio::test]
async fn incr_refuses_non_canonical_stored_integers() {
    let node = TestNode::start(StartOptions::default()).await;
    let mut c = RawResp::connect(node.resp_addr()).await;
    for stored in [&b"05"[..], b"+5", b"-0", b" 5"] {
        exact(&mut c, &[b"SET", b"n", stored], b"+OK\r\n").await;
        exact(
            &mut c,
            &[b"INCR", b"n"],
            b"-ERR value is not an integer or out of range\r\n",
        )
        .await;
        let want = [format!("${}\r\n", stored.len()).as_bytes(), stored, b"\r\n"].concat();
        exact(&mut c, &[b"GET", b"n"], &want).await;
    }
}
