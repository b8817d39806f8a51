//! The web console (`/ui`), driven in a real headless chromium over WebDriver against real
//! `trireme server` processes: a 3-node cluster whose overview lists its nodes, whose keys are
//! created, edited (check-and-set) and deleted from the page and read back over `/v1/kv`, a
//! drain started from the page that moves replicas (and the page shows the moves), a refused
//! drain shown in the server's words; a cluster with ACLs where an anonymous visitor sees the
//! login and nothing else; keyboard use and labels; and the console's endpoints refusing bad
//! input. Screenshots land in `target/console-screenshots/`.

use crate::common::browser::{Browser, UNLABELLED_CONTROLS};
use crate::common::cluster::{ClusterOptions, TestCluster, bounded};
use crate::common::{RawResp, StartOptions, TestNode, http_client};
use serde_json::{Value, json};
use std::time::Duration;
use trireme_types::cluster_status::ClusterStatus;

const TAB: &str = "\u{E004}";
const ENTER: &str = "\u{E007}";

async fn status(c: &TestCluster, i: usize) -> ClusterStatus {
    c.http
        .get(format!("{}/v1/cluster/status", c.node(i).http_url()))
        .send()
        .await
        .expect("status")
        .json()
        .await
        .expect("status JSON")
}

async fn raw(c: &TestCluster, i: usize, key: &str) -> (u16, String) {
    let resp = c
        .http
        .get(format!("{}?raw", c.node(i).kv_url(key)))
        .send()
        .await
        .expect("GET");
    (
        resp.status().as_u16(),
        resp.text().await.unwrap_or_default(),
    )
}

async fn assert_labelled(browser: &Browser, view: &str) {
    let unlabelled = browser.eval(UNLABELLED_CONTROLS, json!([])).await;
    assert_eq!(
        unlabelled,
        json!([]),
        "form controls without a label in the {view} view"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_and_operates_a_cluster() {
    // Two replicas a shard on three nodes: a drain has somewhere to move them, and a second
    // drain would leave too few nodes, which the server refuses.
    let mut c = TestCluster::start(ClusterOptions {
        replication_factor: Some(2),
        ..ClusterOptions::default()
    })
    .await;
    let browser = Browser::start("cluster").await;
    let ui = format!("{}/ui", c.node(0).http_url());
    bounded(Duration::from_secs(100), async {
        // The overview lists the three nodes, each answering the browser itself.
        browser.goto(&format!("{ui}#/overview")).await;
        browser
            .wait_for(
                "three healthy nodes",
                "const rows = [...document.querySelectorAll('#node-table tbody tr')];
                 return rows.length === 3
                   && rows.map((r) => r.cells[0].innerText).join() === 'n1,n2,n3'
                   && rows.every((r) => r.cells[6].innerText === 'ok');",
            )
            .await;
        assert!(browser.text("#warnings").await.contains("No warnings"));
        browser.screenshot("overview").await;
        assert_labelled(&browser, "overview").await;

        // Keyboard: from the first section link, Tab reaches "Keys" and Enter opens it.
        browser
            .eval("document.getElementById('nav-overview').focus()", json!([]))
            .await;
        browser.press(&[TAB, TAB]).await;
        let focused = browser
            .eval("return document.activeElement.id", json!([]))
            .await;
        assert_eq!(focused, "nav-keys", "Tab order of the sections");
        browser.press(&[ENTER]).await;
        browser
            .wait_for(
                "the keys view",
                "return location.hash === '#/keys/' && document.querySelector('#view h1').innerText === 'Keys'",
            )
            .await;

        // A key created in the page is a key of the cluster.
        browser.goto(&format!("{ui}#/new-key/console/")).await;
        assert_labelled(&browser, "new key").await;
        browser
            .type_into("#new-key-name", "console/greeting")
            .await;
        browser.type_into("#new-key-value", "hello").await;
        browser.click("#new-key-submit").await;
        browser
            .wait_for(
                "the new key",
                "const e = document.getElementById('key-name'); return e && e.innerText === 'console/greeting'",
            )
            .await;
        assert_eq!(raw(&c, 1, "console/greeting").await, (200, "hello".into()));
        browser
            .wait_for(
                "the value",
                "return document.getElementById('value-shown').innerText === 'hello'",
            )
            .await;
        assert_labelled(&browser, "key").await;

        // Edited with check-and-set.
        browser.type_into("#edit-value", "hello again").await;
        browser.click("#save-key").await;
        browser
            .wait_for(
                "the save",
                "return document.getElementById('key-result').innerText === 'Saved.'",
            )
            .await;
        assert_eq!(
            raw(&c, 2, "console/greeting").await,
            (200, "hello again".into())
        );
        browser.click("#value-as-hex").await;
        assert!(
            browser
                .text("#value-shown")
                .await
                .contains("68 65 6c 6c 6f 20 61 67"),
            "hex view: {}",
            browser.text("#value-shown").await
        );
        browser.click("#value-as-json").await;
        assert!(browser.text("#value-shown").await.starts_with("Not JSON"));

        // Someone else writes meanwhile: the page's save is refused and changes nothing.
        c.put(1, "console/greeting", "changed elsewhere").await;
        browser.type_into("#edit-value", "stale edit").await;
        browser.click("#save-key").await;
        let refused = browser
            .wait_for(
                "the refused save",
                "const t = document.getElementById('key-result').innerText; return t.startsWith('Not saved') && t",
            )
            .await;
        assert!(
            refused.as_str().unwrap().contains("ModifyIndex"),
            "{refused}"
        );
        assert_eq!(
            raw(&c, 0, "console/greeting").await,
            (200, "changed elsewhere".into())
        );
        browser.screenshot("key-cas-refused").await;

        // Deleted after a confirmation, operated by keyboard: Cancel has the focus, Tab
        // moves to Delete, Enter confirms.
        browser.goto(&format!("{ui}#/key/console/greeting")).await;
        browser.click("#delete-key").await;
        browser
            .wait_for(
                "the confirmation",
                "const d = document.getElementById('confirm'); return d.open && d.innerText.includes('cannot be undone')",
            )
            .await;
        browser.screenshot("delete-confirmation").await;
        browser.press(&[TAB, ENTER]).await;
        browser
            .wait_for(
                "the prefix after the delete",
                "return location.hash === '#/keys/console/'",
            )
            .await;
        assert_eq!(raw(&c, 1, "console/greeting").await.0, 404);

        // A Redis hash shows its type and first members.
        let mut resp = RawResp::connect(c.node(1).resp_addr()).await;
        resp.cmd(&[b"HSET", b"user:1", b"name", b"Ann", b"visits", b"1"])
            .await;
        browser.goto(&format!("{ui}#/key/user:1")).await;
        browser
            .wait_for(
                "the hash",
                "const t = document.getElementById('key-type'); return t && t.innerText === 'hash'
                   && document.getElementById('members').innerText.includes('Ann')",
            )
            .await;

        // Documents, searched with the Lucene syntax (the index commits within a second:
        // the search is asked again until the document shows).
        let put = c
            .http
            .put(format!("{}/v0/users/alice", c.node(2).http_url()))
            .body(r#"{"name": "Alice", "age": 31}"#)
            .send()
            .await
            .expect("PUT document");
        assert_eq!(put.status().as_u16(), 201);
        browser
            .goto(&format!("{ui}#/documents/users?q=name%3Aalice%20AND%20age%3A%3E30"))
            .await;
        assert_labelled(&browser, "documents").await;
        browser
            .wait_for(
                "the document found by search",
                "const t = document.getElementById('doc-table');
                 if (t && t.innerText.includes('Alice')) return true;
                 if (!window.lastAsk || Date.now() - window.lastAsk > 500) {
                   window.lastAsk = Date.now();
                   document.getElementById('doc-search').click();
                 }
                 return false;",
            )
            .await;
        browser.screenshot("documents").await;

        // Live figures from every node, one sample a second.
        browser.goto(&format!("{ui}#/figures")).await;
        browser
            .wait_for(
                "figures of three nodes",
                "const rows = [...document.querySelectorAll('#figures-latest tbody tr')];
                 return rows.length === 3 && rows.every((r) => Number(r.cells[10].innerText) >= 2);",
            )
            .await;
        assert_labelled(&browser, "figures").await;
        browser.screenshot("figures").await;

        // The shards: each with its leader, in the table and the picture; filtered by node.
        let before = status(&c, 0).await;
        browser.goto(&format!("{ui}#/shards")).await;
        browser
            .wait_for(
                "three shards with leaders",
                "const rows = [...document.querySelectorAll('#shard-table tbody tr')];
                 return rows.length === 3 && rows.every((r) => r.cells[2].innerText !== 'unknown')
                   && document.querySelectorAll('#shard-picture rect.leader').length === 3;",
            )
            .await;
        assert_labelled(&browser, "shards").await;
        let on_n3: Vec<u32> = before
            .shards
            .iter()
            .filter(|s| s.replicas.iter().any(|r| r == "n3"))
            .map(|s| s.shard.0)
            .collect();
        assert!(!on_n3.is_empty(), "n3 holds replicas: {before:?}");
        browser
            .eval(
                "const s = document.getElementById('shard-filter'); s.value = 'n3'; s.dispatchEvent(new Event('change'))",
                json!([]),
            )
            .await;
        let shown = browser
            .eval(
                "return [...document.querySelectorAll('#shard-table tbody tr')].map((r) => Number(r.dataset.shard))",
                json!([]),
            )
            .await;
        assert_eq!(shown, json!(on_n3), "the shards on n3");
        browser.screenshot("shards").await;

        // A drain started from the page moves n3's replicas away.
        browser.goto(&format!("{ui}#/overview")).await;
        browser.click("button[aria-label='Drain n3']").await;
        let said = browser
            .wait_for(
                "what a drain does",
                "const d = document.getElementById('confirm'); return d.open && d.innerText",
            )
            .await;
        assert!(
            said.as_str().unwrap().contains("move to the other 2 active node(s)"),
            "{said}"
        );
        browser.click("#confirm-ok").await;
        browser
            .wait_for(
                "the drain accepted",
                "return document.querySelector('#ops-result .message.ok') !== null",
            )
            .await;
        browser
            .wait_for(
                "n3 removed",
                "const rows = [...document.querySelectorAll('#node-table tbody tr')];
                 return rows.some((r) => r.cells[0].innerText === 'n3' && r.cells[1].innerText === 'removed');",
            )
            .await;
        browser.screenshot("drained").await;
        let after = status(&c, 0).await;
        for shard in &after.shards {
            assert!(
                !shard.replicas.iter().any(|r| r == "n3") && shard.replicas.len() == 2,
                "shard {} after the drain: {:?}",
                shard.shard,
                shard.replicas
            );
        }
        let exit = c.nodes[2].wait_exit().await;
        assert_eq!(exit.code(), Some(3), "a drained node exits with status 3");

        // The page shows each move in the shard's history.
        browser.goto(&format!("{ui}#/shards")).await;
        for shard in &on_n3 {
            browser
                .click(&format!("button[aria-label='Shard {shard} details']"))
                .await;
            browser
                .wait_for(
                    &format!("the move of shard {shard}"),
                    "return [...document.querySelectorAll('#history-events li[data-kind=move_done]')]
                       .some((li) => li.innerText.includes('n3 -> '));",
                )
                .await;
        }
        browser.screenshot("shard-history").await;

        // A drain that would leave too few nodes: the page shows the server's refusal.
        browser.goto(&format!("{ui}#/overview")).await;
        browser.click("button[aria-label='Drain n2']").await;
        browser
            .wait_for(
                "the confirmation",
                "return document.getElementById('confirm').open",
            )
            .await;
        browser.click("#confirm-ok").await;
        let shown = browser
            .wait_for(
                "the refusal",
                "const e = document.querySelector('#ops-result .message.error'); return e && e.innerText",
            )
            .await;
        browser.screenshot("drain-refused").await;
        let refused = c
            .http
            .post(format!("{}/v1/cluster/nodes/n2/remove", c.node(0).http_url()))
            .send()
            .await
            .expect("POST remove");
        assert_eq!(refused.status().as_u16(), 409);
        let body: Value = refused.json().await.expect("error JSON");
        assert_eq!(
            shown.as_str().unwrap(),
            format!("Refused (HTTP 409): {}", body["error"].as_str().unwrap())
        );
    })
    .await;
}

const MANAGEMENT: &str = "4b1e0a3c-console-management-token";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_acls_the_console_asks_for_a_token_and_shows_what_it_may_read() {
    let c = TestCluster::start(ClusterOptions {
        acl: format!(
            "enabled = true\ndefault_policy = \"deny\"\ninitial_management_token = \"{MANAGEMENT}\""
        ),
        ..ClusterOptions::default()
    })
    .await;
    let browser = Browser::start("acl").await;
    let base = c.node(0).http_url();
    let ui = format!("{base}/ui");
    bounded(Duration::from_secs(60), async {
        // Anonymous: the login, and nothing of the cluster.
        browser.goto(&format!("{ui}#/overview")).await;
        browser
            .wait_for(
                "the login",
                "return !document.getElementById('login').hidden",
            )
            .await;
        let shown = browser
            .eval(
                "return {nav: document.getElementById('nav').hidden, view: document.getElementById('view').hidden,
                         text: document.body.innerText, tables: document.querySelectorAll('table').length}",
                json!([]),
            )
            .await;
        assert_eq!(shown["nav"], true, "{shown}");
        assert_eq!(shown["view"], true, "{shown}");
        assert_eq!(shown["tables"], 0, "{shown}");
        let text = shown["text"].as_str().unwrap();
        assert!(!text.contains("n2") && !text.contains("Epoch"), "{text}");
        assert_labelled(&browser, "login").await;
        browser.screenshot("login").await;

        // A secret that is no token: the server's message.
        browser.type_into("#login-token", "not-a-token").await;
        browser.press(&[ENTER]).await;
        browser
            .wait_for(
                "the refusal of a wrong secret",
                "return document.getElementById('login-error').innerText.includes('ACL not found')",
            )
            .await;
        assert_eq!(
            browser
                .eval("return document.getElementById('nav').hidden", json!([]))
                .await,
            true
        );

        // A token that may only write under app/.
        let http = http_client();
        let policy = http
            .put(format!("{base}/v1/acl/policy"))
            .header("X-Consul-Token", MANAGEMENT)
            .json(&json!({"Name": "app-only", "Rules": "key_prefix \"app/\" { policy = \"write\" }"}))
            .send()
            .await
            .expect("policy");
        assert!(policy.status().is_success(), "{:?}", policy.text().await);
        let token: Value = http
            .put(format!("{base}/v1/acl/token"))
            .header("X-Consul-Token", MANAGEMENT)
            .json(&json!({"Description": "console test", "Policies": [{"Name": "app-only"}]}))
            .send()
            .await
            .expect("token")
            .json()
            .await
            .expect("token JSON");
        let secret = token["SecretID"].as_str().expect("a secret").to_string();
        let put = http
            .put(format!("{base}/v1/kv/app/config"))
            .header("X-Consul-Token", MANAGEMENT)
            .body("x=1")
            .send()
            .await
            .expect("PUT");
        assert!(put.status().is_success());
        // The token reaches every node's cache within a second; the login asks n1.
        browser.type_into("#login-token", &secret).await;
        browser.click("#login-submit").await;
        browser
            .wait_for(
                "the keys view for a token without operator rights",
                "return location.hash === '#/keys/' && !document.getElementById('nav').hidden",
            )
            .await;
        let hidden = browser
            .eval(
                "return ['nav-overview', 'nav-shards', 'nav-figures'].map((id) => document.getElementById(id).hidden)",
                json!([]),
            )
            .await;
        assert_eq!(hidden, json!([true, true, true]), "sections it may not read");
        // Listing the top needs key:list on everything: refused, in the server's words.
        browser
            .wait_for(
                "the refused listing",
                "return document.getElementById('key-list').innerText.includes(\"lacks permission 'key:list'\")",
            )
            .await;
        browser.goto(&format!("{ui}#/keys/app/")).await;
        browser
            .wait_for(
                "the keys it may read",
                "return document.getElementById('key-list').innerText.includes('config')",
            )
            .await;
        // The overview asked for by address: the server refuses it.
        browser.goto(&format!("{ui}#/overview")).await;
        browser
            .wait_for(
                "the refused overview",
                "return document.getElementById('cluster').innerText.includes(\"lacks permission 'operator:read'\")",
            )
            .await;
        assert_eq!(
            browser
                .eval("return document.querySelectorAll('#node-table').length", json!([]))
                .await,
            0
        );
        browser.screenshot("limited-token").await;
        // The secret is in this tab's storage and in no address the page used.
        let places = browser
            .eval(
                "return {stored: sessionStorage.getItem('trireme.token'), here: location.href,
                         fetched: performance.getEntriesByType('resource').map((e) => e.name)}",
                json!([]),
            )
            .await;
        assert_eq!(places["stored"], secret.as_str());
        assert!(!places["here"].as_str().unwrap().contains(&secret));
        assert!(
            places["fetched"]
                .as_array()
                .unwrap()
                .iter()
                .all(|u| !u.as_str().unwrap().contains(&secret)),
            "{places}"
        );

        // Log out, then in with the management token: every node answers the browser.
        browser.click("#logout").await;
        browser
            .wait_for(
                "the login again",
                "return !document.getElementById('login').hidden && !sessionStorage.getItem('trireme.token')",
            )
            .await;
        browser.type_into("#login-token", MANAGEMENT).await;
        browser.click("#login-submit").await;
        browser
            .wait_for(
                "three healthy nodes",
                "const rows = [...document.querySelectorAll('#node-table tbody tr')];
                 return rows.length === 3 && rows.every((r) => r.cells[6].innerText === 'ok');",
            )
            .await;
        browser.screenshot("management-token").await;
    })
    .await;
}

#[tokio::test]
async fn the_console_can_be_turned_off_and_refuses_bad_input() {
    let off = TestNode::start(StartOptions::default().config("[ui]\nenabled = false\n")).await;
    let on = TestNode::start(StartOptions::default()).await;
    let http = http_client();
    for path in ["/ui", "/ui/js/app.js", "/v1/ui/access", "/v1/ui/figures"] {
        let resp = http
            .get(format!("{}{path}", off.http_url()))
            .send()
            .await
            .expect("GET");
        assert_eq!(
            resp.status().as_u16(),
            404,
            "{path} with [ui] enabled = false"
        );
    }
    assert!(
        off.put("still/serving", "yes").await,
        "the node serves without its console"
    );

    let base = on.http_url();
    let page = http
        .get(format!("{base}/ui"))
        .send()
        .await
        .expect("GET /ui");
    assert_eq!(page.status().as_u16(), 200);
    let headers = page.headers().clone();
    assert!(
        headers["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("script-src 'self'")
    );
    assert_eq!(headers["x-frame-options"], "DENY");
    let etag = headers["etag"].to_str().unwrap().to_string();
    let html = page.text().await.unwrap();
    assert!(html.contains("/ui/js/app.js"));
    let again = http
        .get(format!("{base}/ui/"))
        .header("If-None-Match", &etag)
        .send()
        .await
        .expect("GET");
    assert_eq!(
        again.status().as_u16(),
        304,
        "an unchanged page is not sent again"
    );

    for (path, status, code) in [
        ("/ui/nope.js", 404, "not_found"),
        ("/v1/ui/figures?since=soon", 400, "invalid_argument"),
        ("/v1/ui/shards/first/history", 400, "invalid_argument"),
        ("/v1/ui/shards/999/history", 404, "not_found"),
        ("/v1/ui/kv/no/such/key", 404, "not_found"),
    ] {
        let resp = http.get(format!("{base}{path}")).send().await.expect("GET");
        crate::common::expect_error(resp, reqwest::StatusCode::from_u16(status).unwrap(), code)
            .await;
    }

    // Cross-origin reads only for pages of the cluster's own nodes.
    let own = format!("http://{}", on.endpoints().http);
    let foreign = http
        .request(reqwest::Method::OPTIONS, format!("{base}/v1/ui/node"))
        .header("Origin", "http://elsewhere.example")
        .send()
        .await
        .expect("OPTIONS");
    assert_eq!(foreign.status().as_u16(), 403);
    let read = http
        .get(format!("{base}/v1/ui/node"))
        .header("Origin", "http://elsewhere.example")
        .send()
        .await
        .expect("GET");
    assert!(read.headers().get("access-control-allow-origin").is_none());
    let preflight = http
        .request(reqwest::Method::OPTIONS, format!("{base}/v1/ui/figures"))
        .header("Origin", &own)
        .header("Access-Control-Request-Headers", "x-consul-token")
        .send()
        .await
        .expect("OPTIONS");
    assert_eq!(preflight.status().as_u16(), 204);
    assert_eq!(
        preflight.headers()["access-control-allow-origin"],
        own.as_str()
    );

    // One sample a second, numbered in order, the node's own requests counted.
    for _ in 0..5 {
        on.get("some/key").await;
    }
    let found =
        crate::common::wait_until(Duration::from_secs(10), Duration::from_millis(200), || {
            let http = http.clone();
            let base = base.clone();
            async move {
                let figures: Value = http
                    .get(format!("{base}/v1/ui/figures"))
                    .send()
                    .await
                    .expect("figures")
                    .json()
                    .await
                    .expect("figures JSON");
                let samples = figures["samples"].as_array().unwrap().clone();
                let ordered = samples
                    .windows(2)
                    .all(|w| w[1]["seq"].as_u64() == w[0]["seq"].as_u64().map(|s| s + 1));
                assert!(ordered, "{figures}");
                samples
                    .iter()
                    .any(|s| s["http"]["rps"].as_f64() > Some(0.0))
            }
        })
        .await;
    assert!(found, "no sample counted the KV reads");
    let health = http
        .get(format!("{base}/v1/health"))
        .send()
        .await
        .expect("health");
    assert_eq!(health.status().as_u16(), 200, "the node keeps serving");
}
