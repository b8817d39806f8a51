//! Area 17: ACLs as Consul's and Redis's clients use them, on 3-node clusters with
//! `[acl] enabled = true` and `default_policy = "deny"`. Consul's Go client bootstraps,
//! writes policies in HCL, makes tokens and is held to them (`tests/clients/consul/acl`);
//! redis-py 8 and redis-cli log in with a token's secret as the password and get Redis's
//! NOAUTH, WRONGPASS and NOPERM; plain HTTP carries the token in each place Consul's and
//! Trireme's clients put it.

use crate::common::cluster::{ClusterOptions, TestCluster, poll_until};
use crate::common::{DEADLINE, TestNode, clients, run_program_async};
use reqwest::Method;
use serde_json::{Value, json};
use std::time::Duration;

const MANAGEMENT: &str = "t17-initial-management-secret";

/// A cluster with ACLs on, default deny, and the initial management token if given.
fn acl_cluster(initial: Option<&str>) -> ClusterOptions {
    let mut acl = "enabled = true\ndefault_policy = \"deny\"".to_string();
    if let Some(secret) = initial {
        acl.push_str(&format!("\ninitial_management_token = \"{secret}\""));
    }
    ClusterOptions {
        acl,
        ..ClusterOptions::default()
    }
}

/// One HTTP request with `token` in `X-Consul-Token` (none when `None`): status and body.
async fn call(
    node: &TestNode,
    method: Method,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> (u16, String) {
    let mut request = node
        .http
        .request(method.clone(), format!("{}{path}", node.http_url()));
    if let Some(token) = token {
        request = request.header("X-Consul-Token", token);
    }
    if let Some(body) = body {
        request = request.json(body);
    }
    let response = request
        .send()
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

/// Like [`call`], for an answer that must be 200 with a JSON body.
async fn call_ok(
    node: &TestNode,
    method: Method,
    path: &str,
    token: &str,
    body: Option<&Value>,
) -> Value {
    let (status, text) = call(node, method.clone(), path, Some(token), body).await;
    assert_eq!(status, 200, "{method} {path}: {text}");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{method} {path}: {e}: {text}"))
}

/// Waits until every node accepts `secret` (nodes learn of new tokens from their own copy
/// of the metadata group).
async fn until_known_everywhere(c: &TestCluster, secret: &str) {
    for i in 0..c.nodes.len() {
        let known = poll_until(DEADLINE, Duration::from_millis(20), || async {
            match call(
                c.node(i),
                Method::GET,
                "/v1/acl/token/self",
                Some(secret),
                None,
            )
            .await
            {
                (200, _) => Ok(()),
                other => Err(other),
            }
        })
        .await;
        assert!(known.is_ok(), "node {i} never knew the token: {known:?}");
    }
}

/// Creates a policy of `rules` and a token linking it by name; the token's secret.
async fn token_with(c: &TestCluster, name: &str, rules: &str) -> String {
    let node = c.node(0);
    let policy = json!({ "Name": name, "Rules": rules });
    call_ok(
        node,
        Method::PUT,
        "/v1/acl/policy",
        MANAGEMENT,
        Some(&policy),
    )
    .await;
    let token = json!({ "Description": name, "Policies": [{ "Name": name }] });
    let created = call_ok(node, Method::PUT, "/v1/acl/token", MANAGEMENT, Some(&token)).await;
    let secret = created["SecretID"].as_str().expect("SecretID").to_string();
    until_known_everywhere(c, &secret).await;
    secret
}

/// Starts a cluster with the initial management token and waits until it works everywhere.
async fn managed_cluster() -> TestCluster {
    let c = TestCluster::start(acl_cluster(Some(MANAGEMENT))).await;
    until_known_everywhere(&c, MANAGEMENT).await;
    c
}

const APP_RULES: &str = r#"
key_prefix "app/" { policy = "write" }
key "app/secret" { policy = "deny" }
event_prefix "app-" { policy = "write" }
"#;

/// `github.com/hashicorp/consul/api`'s `ACL()` through one node, as a Consul operator uses
/// it (see `tests/clients/consul/acl`): bootstrap once, policies in HCL (create, read by id
/// and name, list, update), a token linking a policy by name (read, list, read-self), an
/// application held to the policy (KV put/get/list/keys, `api.Lock`), unknown tokens
/// refused, a deleted token refused at its next request, and the last right to manage ACLs
/// kept. Then the other nodes agree: no second bootstrap, the deleted token refused, the
/// bootstrap token gone, anonymous requests denied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consuls_go_client_bootstraps_and_manages_acls() {
    let out = tempfile::tempdir().expect("temp dir");
    let binary = clients::go_build("consul/acl", out.path()).await;
    let c = TestCluster::start(acl_cluster(None)).await;
    let mut client = tokio::process::Command::new(&binary);
    client.arg(c.node(1).http_url().trim_start_matches("http://"));
    let output = clients::run_bounded(client, Duration::from_secs(120), "the Consul client").await;
    let seen = clients::json_line(&output, &c.logs());
    assert_eq!(seen["failures"], Value::Null, "{seen}");
    let manager = seen["management"].as_str().expect("the manager's secret");
    let deleted = seen["deleted_secret"].as_str().expect("the deleted secret");

    for i in [0, 2] {
        let node = c.node(i);
        let (status, body) = call(node, Method::PUT, "/v1/acl/bootstrap", None, None).await;
        assert_eq!(status, 403, "second bootstrap on node {i}: {body}");
        let (status, body) = call(node, Method::GET, "/v1/kv/app/config", None, None).await;
        assert_eq!(status, 403, "anonymous read on node {i}: {body}");
        assert!(body.contains("Permission denied"), "{body}");
        // The deletion happened long before; the bound only covers a slow metadata apply.
        let refused = poll_until(
            Duration::from_secs(1),
            Duration::from_millis(20),
            || async {
                match call(node, Method::GET, "/v1/kv/app/config", Some(deleted), None).await {
                    (403, body) if body.contains("ACL not found") => Ok(()),
                    other => Err(other),
                }
            },
        )
        .await;
        assert!(refused.is_ok(), "deleted token on node {i}: {refused:?}");
    }

    // The manager reads what the Go client left: no token links global-management any more.
    let tokens = call_ok(c.node(2), Method::GET, "/v1/acl/tokens", manager, None).await;
    let tokens = tokens.as_array().expect("a token list");
    let descriptions: Vec<&str> = tokens
        .iter()
        .map(|t| t["Description"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        tokens.len(),
        3,
        "anonymous, manager, still managing: {tokens:?}"
    );
    assert!(
        descriptions.contains(&"manager") && descriptions.contains(&"still managing"),
        "{descriptions:?}"
    );
    for token in tokens {
        assert!(
            token["Policies"]
                .as_array()
                .is_none_or(|p| p.iter().all(|l| l["Name"] != "global-management")),
            "{token}"
        );
    }
    // A manager without key rules may not read keys under default deny.
    let (status, body) = call(
        c.node(0),
        Method::GET,
        "/v1/kv/app/config",
        Some(manager),
        None,
    )
    .await;
    assert_eq!(status, 403, "{body}");
}

/// redis-py 8 with its defaults (see `tests/clients/redis_acl.py`) through node 2 of a
/// cluster whose tokens were made through node 1: NOAUTH without a password, WRONGPASS with
/// a wrong one, the token's keys and channels allowed and others NOPERM (also inside a
/// pipeline, command by command), whole-keyspace commands only for a token that may list
/// every key. What was refused left nothing behind, as the management token sees over HTTP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_py_logs_in_with_a_tokens_secret() {
    let c = managed_cluster().await;
    let app = token_with(&c, "app", APP_RULES).await;
    let lister = token_with(&c, "lister", r#"key_prefix "" { policy = "list" }"#).await;
    let python = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../target/test-venv/bin/python"
    );
    let mut client = tokio::process::Command::new(python);
    client
        .arg(clients::source("redis_acl.py"))
        .args(["127.0.0.1", &c.node(1).resp_addr().port().to_string()])
        .args([&app, &lister]);
    let output = clients::run_bounded(client, Duration::from_secs(120), "redis-py").await;
    let seen = clients::json_line(&output, &c.logs());
    assert_eq!(seen["failures"], json!([]), "{seen}");
    assert_eq!(seen["seen"]["protocol"], 3, "{seen}");

    let node = c.node(2);
    for (key, want) in [
        ("app/a", Some("1")),
        ("app/p", Some("x")),
        ("other/x", None),
        ("other/p", None),
        ("other/b", None),
        ("app/b", None),
        ("app/secret", None),
    ] {
        let (status, body) = call(
            node,
            Method::GET,
            &format!("/v1/kv/{key}?raw"),
            Some(MANAGEMENT),
            None,
        )
        .await;
        match want {
            Some(value) => assert_eq!((status, body.as_str()), (200, value), "{key}"),
            None => assert_eq!(status, 404, "{key} was written: {body}"),
        }
    }
}

/// Runs `redis-cli -h 127.0.0.1 -p PORT LOGIN ARGS` (20 s at most); stdout and stderr
/// together (its exit status after an error reply differs between versions).
async fn redis_cli(node: &TestNode, login: &[&str], args: &[&str]) -> String {
    let port = node.resp_addr().port().to_string();
    let mut all = vec!["-h", "127.0.0.1", "-p", &port];
    all.extend_from_slice(login);
    all.extend_from_slice(args);
    let (_, stdout, stderr) = run_program_async("redis-cli", &all, Duration::from_secs(20)).await;
    format!("{stdout}{stderr}")
}

/// `redis-cli -a <secret> --no-auth-warning` (it sends `AUTH <secret>`) and `--user default
/// --pass <secret>` (`AUTH default <secret>`) set and get keys of the token; without `-a`
/// every command is NOAUTH; a wrong secret fails AUTH with WRONGPASS; a key outside the
/// token's rules is NOPERM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cli_logs_in_with_a_tokens_secret() {
    let c = managed_cluster().await;
    let app = token_with(&c, "app", APP_RULES).await;
    let node = c.node(2);
    let with_secret = ["-a", app.as_str(), "--no-auth-warning"];

    let said = redis_cli(node, &with_secret, &["SET", "app/cli", "hello"]).await;
    assert_eq!(said.trim(), "OK");
    let said = redis_cli(node, &with_secret, &["GET", "app/cli"]).await;
    assert_eq!(said.trim(), "hello");
    let named = [
        "--user",
        "default",
        "--pass",
        app.as_str(),
        "--no-auth-warning",
    ];
    let said = redis_cli(node, &named, &["GET", "app/cli"]).await;
    assert_eq!(said.trim(), "hello");
    let said = redis_cli(node, &with_secret, &["SET", "other/cli", "x"]).await;
    assert!(said.contains("NOPERM"), "{said}");
    let said = redis_cli(node, &with_secret, &["GET", "app/secret"]).await;
    assert!(said.contains("NOPERM"), "{said}");

    let said = redis_cli(node, &[], &["GET", "app/cli"]).await;
    assert!(said.contains("NOAUTH Authentication required"), "{said}");
    assert!(!said.contains("hello"), "{said}");
    let said = redis_cli(
        node,
        &["-a", "wrong", "--no-auth-warning"],
        &["GET", "app/cli"],
    )
    .await;
    assert!(said.contains("WRONGPASS"), "{said}");
    assert!(said.contains("NOAUTH"), "{said}");

    let (status, body) = call(
        node,
        Method::GET,
        "/v1/kv/other/cli",
        Some(MANAGEMENT),
        None,
    )
    .await;
    assert_eq!(status, 404, "a refused SET wrote: {body}");
}

/// A plain HTTP client may send the token as `X-Consul-Token`, `Authorization: Bearer`,
/// `X-Trireme-Token` or `?token=`, to any node; without one it is denied, an unknown one
/// is "ACL not found", two different ones are refused. Listings need list on the prefix and
/// show only readable keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_place_a_token_can_be_is_honoured() {
    let c = managed_cluster().await;
    let app = token_with(&c, "app", APP_RULES).await;
    for (key, value) in [("app/a", "1"), ("app/secret", "s"), ("other/x", "o")] {
        let url = c.node(0).kv_url(key);
        let response = c
            .http
            .put(url)
            .header("X-Consul-Token", MANAGEMENT)
            .body(value)
            .send()
            .await
            .expect("PUT");
        assert_eq!(response.status(), 200, "PUT {key}");
    }

    let node = c.node(2);
    let url = node.kv_url("app/a?raw");
    let with = |name: &str, value: String| node.http.get(&url).header(name, value);
    for (how, request) in [
        ("X-Consul-Token", with("X-Consul-Token", app.clone())),
        ("Bearer", with("Authorization", format!("Bearer {app}"))),
        ("X-Trireme-Token", with("X-Trireme-Token", app.clone())),
        ("?token=", node.http.get(format!("{url}&token={app}"))),
    ] {
        let response = request.send().await.expect("GET");
        let status = response.status();
        let body = response.text().await.unwrap_or_default();
        assert_eq!(
            (status.as_u16(), body.as_str()),
            (200, "1"),
            "token in {how}"
        );
    }

    let (status, body) = call(node, Method::GET, "/v1/kv/app/a", None, None).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("Permission denied"), "{body}");
    let (status, body) = call(
        node,
        Method::GET,
        "/v1/kv/app/a",
        Some("no-such-secret"),
        None,
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("ACL not found"), "{body}");
    let two = node
        .http
        .get(&url)
        .header("X-Consul-Token", &app)
        .header("Authorization", format!("Bearer {MANAGEMENT}"))
        .send()
        .await
        .expect("GET");
    assert_eq!(two.status(), 400, "two tokens");

    let keys = call_ok(node, Method::GET, "/v1/kv/app/?keys", &app, None).await;
    assert_eq!(keys, json!(["app/a"]), "app/secret is not readable");
    let (status, body) = call(node, Method::GET, "/v1/kv/?recurse", Some(&app), None).await;
    assert_eq!(status, 403, "listing everything needs list on \"\": {body}");
    let all = call_ok(node, Method::GET, "/v1/kv/?keys", MANAGEMENT, None).await;
    assert_eq!(all, json!(["app/a", "app/secret", "other/x"]));
}
