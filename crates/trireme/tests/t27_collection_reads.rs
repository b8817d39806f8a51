//! Area 27: reads of whole collections past `[limits] max_collection_read` (5 here): refused
//! with an error that names the paging command, while the same collection reads in pages and
//! smaller ones read whole; the node keeps serving.

use crate::common::{RawResp, StartOptions, TestNode};

fn text(reply: &[u8]) -> String {
    String::from_utf8_lossy(reply).into_owned()
}

/// Whether `reply` is the refusal of a whole read that names `paging`.
fn refused(reply: &[u8], paging: &str) -> bool {
    let reply = text(reply);
    reply.starts_with("-ERR ")
        && reply.contains("more than 5 members")
        && reply.contains("max_collection_read")
        && reply.contains(paging)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_reads_past_the_limit_are_refused_and_pages_are_not() {
    let node =
        TestNode::start(StartOptions::default().config("[limits]\nmax_collection_read = 5\n"))
            .await;
    let mut c = RawResp::connect(node.resp_addr()).await;
    let six: Vec<Vec<u8>> = (0..6).map(|i| format!("m{i}").into_bytes()).collect();
    let five = &six[..5];

    // Hashes.
    let mut hset: Vec<&[u8]> = vec![b"HSET", b"big"];
    for field in &six {
        hset.extend([field.as_slice(), b"v".as_slice()]);
    }
    assert_eq!(c.cmd(&hset).await, b":6\r\n");
    for read in [&b"HGETALL"[..], b"HKEYS", b"HVALS"] {
        let reply = c.cmd(&[read, b"big"]).await;
        assert!(refused(&reply, "HSCAN"), "{}: {}", text(read), text(&reply));
    }
    let page = c.cmd(&[b"HSCAN", b"big", b"0", b"COUNT", b"3"]).await;
    assert!(
        text(&page).contains("m0") && !text(&page).contains("m5"),
        "{}",
        text(&page)
    );
    // A page asked for past the limit is shortened to it, not refused: a cursor follows.
    let page = c.cmd(&[b"HSCAN", b"big", b"0", b"COUNT", b"100"]).await;
    assert!(
        text(&page).contains("m4") && !text(&page).contains("m5"),
        "{}",
        text(&page)
    );
    assert!(
        !text(&page).starts_with("*2\r\n$1\r\n0\r\n"),
        "{}",
        text(&page)
    );
    let mut hset: Vec<&[u8]> = vec![b"HSET", b"small"];
    for field in five {
        hset.extend([field.as_slice(), b"v".as_slice()]);
    }
    assert_eq!(c.cmd(&hset).await, b":5\r\n");
    let whole = c.cmd(&[b"HKEYS", b"small"]).await;
    assert_eq!(
        text(&whole),
        "*5\r\n$2\r\nm0\r\n$2\r\nm1\r\n$2\r\nm2\r\n$2\r\nm3\r\n$2\r\nm4\r\n"
    );

    // Sets.
    let mut sadd: Vec<&[u8]> = vec![b"SADD", b"set"];
    sadd.extend(six.iter().map(Vec::as_slice));
    assert_eq!(c.cmd(&sadd).await, b":6\r\n");
    let reply = c.cmd(&[b"SMEMBERS", b"set"]).await;
    assert!(refused(&reply, "SSCAN"), "{}", text(&reply));
    assert_eq!(c.cmd(&[b"SREM", b"set", b"m5"]).await, b":1\r\n");
    assert!(text(&c.cmd(&[b"SMEMBERS", b"set"]).await).starts_with("*5\r\n"));

    // Lists: the whole list, or any range longer than the limit.
    let mut rpush: Vec<&[u8]> = vec![b"RPUSH", b"list"];
    rpush.extend(six.iter().map(Vec::as_slice));
    assert_eq!(c.cmd(&rpush).await, b":6\r\n");
    for (start, stop) in [
        (&b"0"[..], &b"-1"[..]),
        (b"-6", b"-1"),
        (b"0", b"100"),
        (b"0", b"5"),
    ] {
        let reply = c.cmd(&[b"LRANGE", b"list", start, stop]).await;
        assert!(refused(&reply, "LRANGE"), "{}", text(&reply));
    }
    assert!(text(&c.cmd(&[b"LRANGE", b"list", b"1", b"-1"]).await).starts_with("*5\r\n"));
    assert!(text(&c.cmd(&[b"LRANGE", b"list", b"0", b"4"]).await).starts_with("*5\r\n"));

    // Sorted sets.
    let mut zadd: Vec<&[u8]> = vec![b"ZADD", b"zset"];
    let scores: Vec<Vec<u8>> = (0..6).map(|i| i.to_string().into_bytes()).collect();
    for (score, member) in scores.iter().zip(&six) {
        zadd.extend([score.as_slice(), member.as_slice()]);
    }
    assert_eq!(c.cmd(&zadd).await, b":6\r\n");
    let reply = c.cmd(&[b"ZRANGE", b"zset", b"0", b"-1"]).await;
    assert!(refused(&reply, "ZSCAN"), "{}", text(&reply));
    let limited = c
        .cmd(&[
            b"ZRANGE", b"zset", b"-inf", b"+inf", b"BYSCORE", b"LIMIT", b"0", b"5",
        ])
        .await;
    assert!(text(&limited).starts_with("*5\r\n"), "{}", text(&limited));
    assert!(text(&c.cmd(&[b"ZRANGE", b"zset", b"0", b"2"]).await).starts_with("*3\r\n"));

    // The node goes on serving.
    assert_eq!(c.cmd(&[b"PING"]).await, b"+PONG\r\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_combinations_and_reads_inside_multi_are_bounded_too() {
    let node =
        TestNode::start(StartOptions::default().config("[limits]\nmax_collection_read = 5\n"))
            .await;
    let mut c = RawResp::connect(node.resp_addr()).await;

    // SUNION, SINTER and SDIFF are measured before they are read: a union of two sets of
    // four may reach eight members, past the limit, while the intersection and difference
    // cannot.
    assert_eq!(
        c.cmd(&[b"SADD", b"{s}a", b"m0", b"m1", b"m2", b"m3"]).await,
        b":4\r\n"
    );
    assert_eq!(
        c.cmd(&[b"SADD", b"{s}b", b"m2", b"m3", b"m4", b"m5"]).await,
        b":4\r\n"
    );
    let reply = c.cmd(&[b"SUNION", b"{s}a", b"{s}b"]).await;
    assert!(refused(&reply, "SSCAN"), "{}", text(&reply));
    let inter = c.cmd(&[b"SINTER", b"{s}a", b"{s}b"]).await;
    assert!(text(&inter).starts_with("*2\r\n"), "{}", text(&inter));
    let diff = c.cmd(&[b"SDIFF", b"{s}a", b"{s}b"]).await;
    assert!(text(&diff).starts_with("*2\r\n"), "{}", text(&diff));
    // A union is measured by the sizes of its sets together (members they share are found
    // only by reading them): six is refused even though four are distinct, five is read.
    assert_eq!(c.cmd(&[b"SREM", b"{s}b", b"m4", b"m5"]).await, b":2\r\n");
    let reply = c.cmd(&[b"SUNION", b"{s}a", b"{s}b"]).await;
    assert!(refused(&reply, "SSCAN"), "{}", text(&reply));
    assert_eq!(c.cmd(&[b"SREM", b"{s}b", b"m3"]).await, b":1\r\n");
    let union = c.cmd(&[b"SUNION", b"{s}a", b"{s}b"]).await;
    assert!(text(&union).starts_with("*4\r\n"), "{}", text(&union));

    // Inside MULTI each whole read is refused in its place in EXEC's answer, and the
    // transaction's other commands still run.
    let six: Vec<Vec<u8>> = (0..6).map(|i| format!("m{i}").into_bytes()).collect();
    let mut hset: Vec<&[u8]> = vec![b"HSET", b"{t}hash"];
    let mut sadd: Vec<&[u8]> = vec![b"SADD", b"{t}set"];
    let mut rpush: Vec<&[u8]> = vec![b"RPUSH", b"{t}list"];
    let mut zadd: Vec<&[u8]> = vec![b"ZADD", b"{t}zset"];
    for member in &six {
        hset.extend([member.as_slice(), b"v".as_slice()]);
        sadd.push(member);
        rpush.push(member);
        zadd.extend([b"1".as_slice(), member.as_slice()]);
    }
    for write in [&hset, &sadd, &rpush, &zadd] {
        assert_eq!(c.cmd(write).await, b":6\r\n");
    }
    assert_eq!(c.cmd(&[b"MULTI"]).await, b"+OK\r\n");
    for queued in [
        &[&b"HGETALL"[..], b"{t}hash"][..],
        &[b"SMEMBERS", b"{t}set"],
        &[b"LRANGE", b"{t}list", b"0", b"-1"],
        &[b"ZRANGE", b"{t}zset", b"0", b"-1"],
        &[b"SUNION", b"{t}set"],
        &[b"HLEN", b"{t}hash"],
        &[b"LRANGE", b"{t}list", b"0", b"1"],
    ] {
        assert_eq!(c.cmd(queued).await, b"+QUEUED\r\n");
    }
    let exec = text(&c.cmd(&[b"EXEC"]).await);
    let lines: Vec<&str> = exec.split("\r\n").collect();
    assert_eq!(lines[0], "*7", "{exec}");
    for (i, paging) in ["HSCAN", "SSCAN", "LRANGE", "ZSCAN", "SSCAN"]
        .iter()
        .enumerate()
    {
        let reply = format!("{}\r\n", lines[i + 1]);
        assert!(refused(reply.as_bytes(), paging), "{i}: {exec}");
    }
    assert_eq!(lines[6], ":6", "{exec}");
    assert_eq!(&lines[7..], ["*2", "$2", "m0", "$2", "m1", ""], "{exec}");
    assert_eq!(c.cmd(&[b"PING"]).await, b"+PONG\r\n");
}
