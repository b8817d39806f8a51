//! Area 16: ACL tokens and policies, Consul's way, on every front end of real nodes: the KV
//! API, transactions, documents, the admin endpoints and `/metrics` refuse a request without
//! the right and serve one with it; RESP answers `NOAUTH` before `AUTH` and `NOPERM` for a key
//! outside the token's rules; a token deleted through one node stops working on every node
//! within a second.

use crate::common;

use crate::common::cluster::{ClusterOptions, TestCluster, bounded, poll_until};
use crate::common::{RawResp, StartOptions, TestNode};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const ROOT: &str = "root-secret-for-tests";

fn acl_config() -> String {
    format!(
        "[acl]\nenabled = true\ndefault_policy = \"deny\"\ninitial_management_token = \"{ROOT}\"\n"
    )
}

/// Sends a request with `token` (if any) in `X-Consul-Token`; status and body.
async fn call(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    token: Option<&str>,
    body: Option<String>,
) -> (u16, String) {
    let mut request = http.request(method, url);
    if let Some(token) = token {
        request = request.header("X-Consul-Token", token);
    }
    if let Some(body) = body {
        request = request.body(body);
    }
    let response = request.send().await.expect("request");
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

/// Waits until the configured management token works on the node at `base`.
async fn await_root(http: &reqwest::Client, base: &str) {
    let url = format!("{base}/v1/acl/token/self");
    poll_until(Duration::from_secs(60), Duration::from_millis(100), || {
        let url = url.clone();
        async move {
            let (status, body) = call(http, reqwest::Method::GET, &url, Some(ROOT), None).await;
            (status == 200)
                .then_some(())
                .ok_or(format!("{status} {body}"))
        }
    })
    .await
    .unwrap_or_else(|last| panic!("the management token never worked on {base}: {last}"));
}

/// Creates the policy `name` with `rules` and a token linking it by name; the token's
/// secret and accessor.
async fn token_with(
    http: &reqwest::Client,
    base: &str,
    name: &str,
    rules: &str,
) -> (String, String) {
    let (status, body) = call(
        http,
        reqwest::Method::PUT,
        &format!("{base}/v1/acl/policy"),
        Some(ROOT),
        Some(json!({ "Name": name, "Rules": rules }).to_string()),
    )
    .await;
    assert_eq!(status, 200, "create policy {name}: {body}");
    let (status, body) = call(
        http,
        reqwest::Method::PUT,
        &format!("{base}/v1/acl/token"),
        Some(ROOT),
        Some(json!({ "Description": name, "Policies": [{ "Name": name }] }).to_string()),
    )
    .await;
    assert_eq!(status, 200, "create token: {body}");
    let token: Value = serde_json::from_str(&body).expect("token JSON");
    (
        token["SecretID"].as_str().expect("SecretID").to_string(),
        token["AccessorID"]
            .as_str()
            .expect("AccessorID")
            .to_string(),
    )
}

const APP_RULES: &str = r#"
key_prefix "app/" { policy = "write" }
key "app/secret" { policy = "deny" }
key_prefix "pub/" { policy = "read" }
key_prefix "docs/" { policy = "write" }
"#;

#[tokio::test]
async fn http_requests_need_a_token_with_the_right() {
    let node = TestNode::start(StartOptions::default().config(&acl_config())).await;
    let http = common::http_client();
    let base = node.http_url();
    await_root(&http, &base).await;
    use reqwest::Method as M;
    let kv = |key: &str| format!("{base}/v1/kv/{key}");

    // No token, a bogus one, several: refused, nothing read.
    let (status, body) = call(&http, M::GET, &kv("app/a"), None, None).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("Permission denied"), "{body}");
    let (status, body) = call(&http, M::GET, &kv("app/a"), Some("bogus"), None).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("ACL not found"), "{body}");
    let response = http
        .get(kv("app/a"))
        .header("X-Consul-Token", ROOT)
        .header("Authorization", "Bearer other")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 400);

    // The management token does anything; Bearer and ?token= work too.
    for key in ["app/a", "app/secret", "other/x", "pub/p"] {
        let (status, body) = call(&http, M::PUT, &kv(key), Some(ROOT), Some("v".into())).await;
        assert_eq!((status, body.as_str()), (200, "true"), "{key}");
    }
    let response = http
        .get(kv("other/x"))
        .bearer_auth(ROOT)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let (status, _) = call(
        &http,
        M::GET,
        &format!("{}?token={ROOT}", kv("other/x")),
        None,
        None,
    )
    .await;
    assert_eq!(status, 200);

    let (secret, accessor) = token_with(&http, &base, "app-writer", APP_RULES).await;
    let t = Some(secret.as_str());
    // Writes and reads inside the rules; the deny and everything else refused.
    let (status, _) = call(&http, M::PUT, &kv("app/b"), t, Some("b".into())).await;
    assert_eq!(status, 200);
    let (status, _) = call(&http, M::GET, &kv("app/a"), t, None).await;
    assert_eq!(status, 200);
    let (status, _) = call(&http, M::GET, &kv("pub/p"), t, None).await;
    assert_eq!(status, 200);
    for (method, key) in [
        (M::PUT, "pub/p"),
        (M::GET, "app/secret"),
        (M::PUT, "app/secret"),
        (M::DELETE, "app/secret"),
        (M::GET, "other/x"),
        (M::PUT, "other/x"),
    ] {
        let body = (method == M::PUT).then(|| "no".to_string());
        let (status, text) = call(&http, method.clone(), &kv(key), t, body).await;
        assert_eq!(status, 403, "{method} {key}: {text}");
        assert!(text.contains("Permission denied"), "{text}");
    }
    let (status, body) = call(&http, M::GET, &kv("app/secret?raw"), Some(ROOT), None).await;
    assert_eq!(
        (status, body.as_str()),
        (200, "v"),
        "a refused write changed nothing"
    );

    // Listings need list on the prefix and leave out what the token may not read.
    let (status, body) = call(&http, M::GET, &format!("{}?keys", kv("app/")), t, None).await;
    assert_eq!(status, 200, "{body}");
    let keys: Vec<String> = serde_json::from_str(&body).unwrap();
    assert_eq!(keys, ["app/a", "app/b"]);
    let (status, _) = call(&http, M::GET, &format!("{}?recurse", kv("")), t, None).await;
    assert_eq!(status, 403, "no list on every key");
    let (status, _) = call(&http, M::GET, &format!("{}?recurse", kv("pub/")), t, None).await;
    assert_eq!(status, 403, "read does not grant list");
    // A recursive delete may not reach the denied key.
    let (status, _) = call(
        &http,
        M::DELETE,
        &format!("{}?recurse", kv("app/")),
        t,
        None,
    )
    .await;
    assert_eq!(status, 403);

    // Transactions: one operation outside the rules fails the whole, naming it.
    let txn = |ops: Value| {
        let http = http.clone();
        let url = format!("{base}/v1/txn");
        let secret = secret.clone();
        async move { call(&http, M::PUT, &url, Some(&secret), Some(ops.to_string())).await }
    };
    let set = |key: &str| json!({ "KV": { "Verb": "set", "Key": key, "Value": "eA==" } });
    let (status, body) = txn(json!([set("app/{t}1"), set("app/secret")])).await;
    assert_eq!(status, 409, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["Errors"][0]["OpIndex"], 1, "{body}");
    let (status, _) = call(&http, M::GET, &kv("app/{t}1"), Some(ROOT), None).await;
    assert_eq!(status, 404, "nothing of a refused transaction was applied");
    let (status, body) = txn(json!([set("app/{t}1"), set("app/{t}2")])).await;
    assert_eq!(status, 200, "{body}");

    // Documents: a collection is a key prefix.
    let (status, body) = call(
        &http,
        M::PUT,
        &format!("{base}/v0/app/d1"),
        t,
        Some(r#"{"n":1}"#.into()),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let (status, _) = call(
        &http,
        M::PUT,
        &format!("{base}/v0/other/d1"),
        t,
        Some(r#"{"n":1}"#.into()),
    )
    .await;
    assert_eq!(status, 403);
    // Listing and search need list on the whole collection: app/ has a denied key below it,
    // whose name a page's cursor or a search's count would give away.
    let (status, body) = call(&http, M::GET, &format!("{base}/v0/app"), t, None).await;
    assert_eq!(status, 403, "{body}");
    let (status, _) = call(&http, M::GET, &format!("{base}/v0/app?query=n:1"), t, None).await;
    assert_eq!(status, 403);
    let (status, _) = call(
        &http,
        M::PUT,
        &format!("{base}/v0/docs/d1"),
        t,
        Some(r#"{"n":1}"#.into()),
    )
    .await;
    assert_eq!(status, 201);
    let (status, body) = call(&http, M::GET, &format!("{base}/v0/docs"), t, None).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"d1\""), "{body}");
    let (status, _) = call(&http, M::GET, &format!("{base}/v0/other"), t, None).await;
    assert_eq!(status, 403);
    // A backup needs every key; the metadata group (the ACL store) is never exported.
    let (status, _) = call(&http, M::GET, &format!("{base}/v1/backup/shard/0"), t, None).await;
    assert_eq!(status, 403);
    let (status, _) = call(
        &http,
        M::GET,
        &format!("{base}/v1/backup/shard/4294967295"),
        Some(ROOT),
        None,
    )
    .await;
    assert_eq!(status, 404, "the metadata group is no shard to back up");

    // Operator endpoints and /metrics need operator rights; ACL endpoints acl rights.
    for path in [
        "/v1/cluster/status",
        "/metrics",
        "/v1/acl/policies",
        "/v1/acl/tokens",
    ] {
        let (status, _) = call(&http, M::GET, &format!("{base}{path}"), t, None).await;
        assert_eq!(status, 403, "{path}");
        let (status, _) = call(&http, M::GET, &format!("{base}{path}"), Some(ROOT), None).await;
        assert_eq!(status, 200, "{path}");
    }
    let (status, _) = call(
        &http,
        M::POST,
        &format!("{base}/v1/cluster/shards/0/split"),
        t,
        None,
    )
    .await;
    assert_eq!(status, 403);
    // A token reads itself without acl rights.
    let (status, body) = call(&http, M::GET, &format!("{base}/v1/acl/token/self"), t, None).await;
    assert_eq!(status, 200, "{body}");
    let me: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(me["AccessorID"], accessor.as_str());
    assert_eq!(me["Policies"][0]["Name"], "app-writer");

    // What the store refuses: bad rules, the built-in policy, the last manager, a second
    // bootstrap.
    let (status, body) = call(
        &http,
        M::PUT,
        &format!("{base}/v1/acl/policy"),
        Some(ROOT),
        Some(
            json!({ "Name": "bad", "Rules": "kye_prefix \"\" { policy = \"read\" }" }).to_string(),
        ),
    )
    .await;
    assert_eq!(status, 400);
    assert!(body.contains("kye_prefix"), "{body}");
    let management = "00000000-0000-0000-0000-000000000001";
    let (status, _) = call(
        &http,
        M::DELETE,
        &format!("{base}/v1/acl/policy/{management}"),
        Some(ROOT),
        None,
    )
    .await;
    assert_eq!(status, 400);
    let (status, body) = call(
        &http,
        M::GET,
        &format!("{base}/v1/acl/token/self"),
        Some(ROOT),
        None,
    )
    .await;
    assert_eq!(status, 200);
    let root: Value = serde_json::from_str(&body).unwrap();
    let root_accessor = root["AccessorID"].as_str().unwrap().to_string();
    let (status, body) = call(
        &http,
        M::DELETE,
        &format!("{base}/v1/acl/token/{root_accessor}"),
        Some(ROOT),
        None,
    )
    .await;
    assert_eq!(status, 400, "a token may not delete itself: {body}");
    let (status, body) = call(
        &http,
        M::PUT,
        &format!("{base}/v1/acl/bootstrap"),
        None,
        None,
    )
    .await;
    assert_eq!(
        status, 403,
        "the initial management token was the bootstrap: {body}"
    );

    // The command line carries a token from --token or TRIREME_TOKEN.
    let cli = |args: &[&str], env: Option<&str>| {
        let mut command = std::process::Command::new(common::binary());
        command.args(args).args(["--target", &base]);
        command.env_remove("TRIREME_TOKEN");
        if let Some(token) = env {
            command.env("TRIREME_TOKEN", token);
        }
        command.output().expect("run trireme kv")
    };
    let out = cli(&["kv", "put", "app/cli", "v1", "--token", &secret], None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = cli(&["kv", "get", "app/cli"], Some(&secret));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "v1");
    let out = cli(&["kv", "get", "app/cli"], None);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("403"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A deleted token is unknown at once on the node that deleted it.
    let (status, _) = call(
        &http,
        M::DELETE,
        &format!("{base}/v1/acl/token/{accessor}"),
        Some(ROOT),
        None,
    )
    .await;
    assert_eq!(status, 200);
    let (status, body) = call(&http, M::GET, &kv("app/a"), t, None).await;
    assert_eq!(status, 403);
    assert!(body.contains("ACL not found"), "{body}");
}

/// The first line of a RESP reply, as text.
fn line(reply: &[u8]) -> String {
    let text = String::from_utf8_lossy(reply);
    text.lines().next().unwrap_or_default().to_string()
}

#[tokio::test]
async fn resp_commands_need_auth_and_keys_in_the_rules() {
    let node = TestNode::start(StartOptions::default().config(&acl_config())).await;
    let http = common::http_client();
    let base = node.http_url();
    await_root(&http, &base).await;
    let (secret, _) = token_with(&http, &base, "app-writer", APP_RULES).await;
    let mut c = RawResp::connect(node.resp_addr()).await;

    // Before AUTH only AUTH, HELLO and QUIT run.
    assert_eq!(
        line(&c.cmd(&[b"GET", b"app/a"]).await),
        "-NOAUTH Authentication required."
    );
    assert_eq!(
        line(&c.cmd(&[b"PING"]).await),
        "-NOAUTH Authentication required."
    );
    assert_eq!(
        line(&c.cmd(&[b"AUTH", b"wrong"]).await),
        "-WRONGPASS invalid username-password pair or user is disabled."
    );
    assert_eq!(line(&c.cmd(&[b"AUTH", secret.as_bytes()]).await), "+OK");
    assert_eq!(line(&c.cmd(&[b"PING"]).await), "+PONG");
    assert_eq!(line(&c.cmd(&[b"SET", b"app/a", b"1"]).await), "+OK");
    assert_eq!(c.cmd(&[b"GET", b"app/a"]).await, b"$1\r\n1\r\n");
    let noperm_keys =
        "-NOPERM this user has no permissions to access one of the keys used as arguments";
    assert_eq!(line(&c.cmd(&[b"SET", b"other/a", b"1"]).await), noperm_keys);
    assert_eq!(line(&c.cmd(&[b"GET", b"app/secret"]).await), noperm_keys);
    assert_eq!(line(&c.cmd(&[b"SET", b"pub/p", b"1"]).await), noperm_keys);
    // Every key of a multi-key command must be in the rules.
    assert_eq!(
        line(
            &c.cmd(&[b"MSET", b"app/{m}1", b"1", b"other/{m}2", b"2"])
                .await
        ),
        noperm_keys
    );
    assert_eq!(
        c.cmd(&[b"EXISTS", b"app/{m}1"]).await,
        b":0\r\n",
        "nothing of a refused MSET was written"
    );
    // Keyspace-wide commands need list or write on every key.
    assert!(line(&c.cmd(&[b"KEYS", b"*"]).await).starts_with("-NOPERM"));
    assert!(line(&c.cmd(&[b"FLUSHALL"]).await).starts_with("-NOPERM"));
    assert!(line(&c.cmd(&[b"PUBLISH", b"news", b"hi"]).await).starts_with("-NOPERM"));

    // A refused command inside MULTI fails the transaction.
    assert_eq!(line(&c.cmd(&[b"MULTI"]).await), "+OK");
    assert_eq!(line(&c.cmd(&[b"SET", b"app/t", b"1"]).await), "+QUEUED");
    assert_eq!(line(&c.cmd(&[b"SET", b"other/t", b"1"]).await), noperm_keys);
    assert!(line(&c.cmd(&[b"EXEC"]).await).starts_with("-EXECABORT"));
    assert_eq!(c.cmd(&[b"EXISTS", b"app/t"]).await, b":0\r\n");

    // A pipeline on one key and on several: each command answered for itself.
    let mut pipeline = Vec::new();
    for args in [
        &[&b"SET"[..], b"app/p", b"1"][..],
        &[b"INCR", b"app/p"],
        &[b"SET", b"other/p", b"1"],
        &[b"INCR", b"app/p"],
        &[b"GET", b"app/p"],
    ] {
        pipeline.extend(common::encode_cmd(args));
    }
    c.send(&pipeline).await;
    let replies: Vec<String> = [(); 5].iter().map(|_| String::new()).collect();
    let mut got = Vec::new();
    for _ in replies {
        got.push(line(&c.read_reply().await));
    }
    assert_eq!(got, ["+OK", ":2", noperm_keys, ":3", "$1"]);

    // HELLO without AUTH on a connection that has not logged in is refused, as Redis does.
    let mut c3 = RawResp::connect(node.resp_addr()).await;
    assert!(line(&c3.cmd(&[b"HELLO", b"3"]).await).starts_with("-NOAUTH HELLO must be called"));
    // HELLO 3 AUTH logs in too; a bad secret there fails the HELLO.
    c3.send_cmd(&[b"HELLO", b"3", b"AUTH", b"default", b"nope"])
        .await;
    assert!(line(&c3.read_reply().await).starts_with("-WRONGPASS"));
    c3.send_cmd(&[b"HELLO", b"3", b"AUTH", b"default", secret.as_bytes()])
        .await;
    let hello = c3.read_bytes(1).await;
    assert_eq!(hello, b"%", "a RESP3 map");

    // Repeated failures end the connection.
    let mut bad = RawResp::connect(node.resp_addr()).await;
    let mut closed = false;
    for _ in 0..12 {
        bad.send_cmd(&[b"AUTH", b"guess"]).await;
        match bad.try_read_reply().await {
            Some(reply) => assert!(line(&reply).starts_with("-"), "{}", line(&reply)),
            None => {
                closed = true;
                break;
            }
        }
    }
    assert!(
        closed || bad.try_read_reply().await.is_none(),
        "the connection was not closed"
    );
}

#[tokio::test]
async fn a_deleted_token_stops_working_on_every_node_within_a_second() {
    let c = TestCluster::start(ClusterOptions {
        acl: acl_config().trim_start_matches("[acl]\n").to_string(),
        ..ClusterOptions::default()
    })
    .await;
    let http = common::http_client();
    let bases: Vec<String> = (0..3).map(|i| c.node(i).http_url()).collect();
    for base in &bases {
        await_root(&http, base).await;
    }
    bounded(Duration::from_secs(60), async {
        let (secret, accessor) = token_with(&http, &bases[0], "app-writer", APP_RULES).await;
        // Every node learns of the new token.
        for base in &bases {
            let url = format!("{base}/v1/kv/app/x");
            poll_until(Duration::from_secs(5), Duration::from_millis(20), || {
                let (http, url, secret) = (http.clone(), url.clone(), secret.clone());
                async move {
                    let (status, body) = call(
                        &http,
                        reqwest::Method::PUT,
                        &url,
                        Some(&secret),
                        Some("1".into()),
                    )
                    .await;
                    (status == 200)
                        .then_some(())
                        .ok_or(format!("{status} {body}"))
                }
            })
            .await
            .unwrap_or_else(|last| panic!("{base} never took the new token: {last}"));
        }
        let mut resp = RawResp::connect(c.node(2).resp_addr()).await;
        assert_eq!(line(&resp.cmd(&[b"AUTH", secret.as_bytes()]).await), "+OK");
        assert_eq!(line(&resp.cmd(&[b"SET", b"app/y", b"1"]).await), "+OK");

        let (status, _) = call(
            &http,
            reqwest::Method::DELETE,
            &format!("{}/v1/acl/token/{accessor}", bases[0]),
            Some(ROOT),
            None,
        )
        .await;
        assert_eq!(status, 200);
        let deleted = Instant::now();
        for base in &bases[1..] {
            let url = format!("{base}/v1/kv/app/x");
            loop {
                let (status, body) =
                    call(&http, reqwest::Method::GET, &url, Some(&secret), None).await;
                if status == 403 && body.contains("ACL not found") {
                    break;
                }
                assert!(
                    deleted.elapsed() < Duration::from_secs(1),
                    "{base} still takes the deleted token: {status} {body}"
                );
            }
        }
        // The RESP connection that authenticated with it is refused at its next command.
        let reply = resp.cmd(&[b"GET", b"app/y"]).await;
        assert_eq!(line(&reply), "-NOAUTH Authentication required.");
    })
    .await;
}
