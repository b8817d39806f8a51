//! The web console (`/ui`), driven in a real headless chromium over WebDriver against real
//! `trireme server` processes: a 3-node cluster whose overview lists its nodes, whose keys are
//! created, edited (check-and-set; a binary value's bytes kept when only its flags change)
//! and deleted from the page and read back over `/v1/kv`, whose live figures go on across a
//! node's restart, a split and a drain started from the page (and the page shows the moves),
//! a refused drain shown in the server's words, a forced removal with the shards it leaves
//! without a quorum; a cluster with ACLs where an anonymous visitor sees the login and
//! nothing else, and a page whose token is deleted goes back to it; keyboard use and labels;
//! and the console's endpoints: paged key listings, figures across a restart, long polls
//! left out of them, CORS and bad input. Screenshots land in `target/console-screenshots/`.

use crate::common::browser::{Browser, UNLABELLED_CONTROLS};
use crate::common::cluster::{ClusterOptions, TestCluster, bounded, poll_until};
use crate::common::{RawResp, StartOptions, TestNode, http_client, wait_until};
use base64::Engine;
use serde_json::{Value, json};
use std::time::Duration;
use trireme_types::cluster_status::ClusterStatus;

/// How long the cluster may take for a drain or a split to finish (as `t61_elastic` allows
/// for a drain on a slow machine); the page is checked once the HTTP API says it is done.
const SETTLE: Duration = Duration::from_secs(120);

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

/// Polls the cluster's status through node `i` until `done` holds, within [`SETTLE`].
async fn settled(
    c: &TestCluster,
    i: usize,
    what: &str,
    done: impl Fn(&ClusterStatus) -> bool,
) -> ClusterStatus {
    let found = poll_until(SETTLE, Duration::from_millis(500), || async {
        let now = status(c, i).await;
        if done(&now) { Ok(now) } else { Err(now) }
    })
    .await;
    found.unwrap_or_else(|last| panic!("{what} not within {SETTLE:?}: {last:?}\n{}", c.logs()))
}

/// The value and flags of `key` as `/v1/kv` has them (the value decoded from base64).
async fn value_and_flags(c: &TestCluster, i: usize, key: &str) -> (Vec<u8>, u64) {
    let entries: Value = c
        .http
        .get(c.node(i).kv_url(key))
        .send()
        .await
        .expect("GET")
        .json()
        .await
        .expect("entries");
    let value = entries[0]["Value"].as_str().map_or_else(Vec::new, |v| {
        base64::engine::general_purpose::STANDARD
            .decode(v)
            .expect("base64")
    });
    (value, entries[0]["Flags"].as_u64().expect("flags"))
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
    bounded(Duration::from_secs(300), async {
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

        // The table is refreshed every 2 s in place: a button that has the focus keeps it.
        browser
            .eval(
                "document.querySelector(\"button[aria-label='Drain n2']\").focus()",
                json!([]),
            )
            .await;
        browser
            .eval(
                "window.refreshed = false;
                 new MutationObserver((_, o) => { window.refreshed = true; o.disconnect(); })
                   .observe(document.getElementById('node-table'), {childList: true, subtree: true, characterData: true});",
                json!([]),
            )
            .await;
        browser
            .wait_for(
                "a refresh of the node table",
                "return window.refreshed === true",
            )
            .await;
        assert_eq!(
            browser
                .eval(
                    "return document.activeElement.getAttribute('aria-label')",
                    json!([])
                )
                .await,
            "Drain n2",
            "the focus after a refresh of the table"
        );

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

        // A value that is not UTF-8 (gzip's header, then bytes no decoder takes, a CR LF) is
        // offered as base64, not as text; saving new flags only (a u64 past 2^53, which a JS
        // number cannot hold) writes the very same bytes back.
        let blob: &[u8] = &[0x1f, 0x8b, 0x08, 0x00, 0xc3, 0x28, 0xff, 0xfe, 0x00, 0x0d, 0x0a];
        let put = c
            .http
            .put(format!("{}?flags=7", c.node(1).kv_url("console/blob")))
            .body(blob.to_vec())
            .send()
            .await
            .expect("PUT blob");
        assert!(put.status().is_success());
        browser.goto(&format!("{ui}#/key/console/blob")).await;
        let shown = browser
            .wait_for(
                "the binary value as base64",
                "const e = document.getElementById('edit-value');
                 return e && document.getElementById('edit-as-base64') !== null && e.value",
            )
            .await;
        assert_eq!(
            shown.as_str().unwrap(),
            base64::engine::general_purpose::STANDARD.encode(blob)
        );
        assert!(
            browser
                .text("#value-shown")
                .await
                .starts_with("00000000  1f 8b 08 00"),
            "a binary value is shown as hex first"
        );
        assert_labelled(&browser, "binary key").await;
        // Flags that are no u64 are refused in the page, and nothing is written.
        browser.type_into("#edit-flags", "18446744073709551616").await;
        browser.click("#save-key").await;
        browser
            .wait_for(
                "the refused flags",
                "return document.getElementById('key-result').innerText.includes('flags must be a whole number')",
            )
            .await;
        assert_eq!(value_and_flags(&c, 0, "console/blob").await, (blob.to_vec(), 7));
        browser.type_into("#edit-flags", "18446744073709551615").await;
        browser.click("#save-key").await;
        browser
            .wait_for(
                "the save of new flags",
                "return document.getElementById('key-result').innerText === 'Saved.'
                   && document.getElementById('key-flags').innerText === '18446744073709551615'",
            )
            .await;
        assert_eq!(
            value_and_flags(&c, 2, "console/blob").await,
            (blob.to_vec(), u64::MAX),
            "the bytes kept, the flags exact"
        );

        // The keys view lists one level, each folder once.
        for key in ["console/list/a", "console/list/b", "console/list/dir/x", "console/list/dir/y"] {
            c.put(0, key, "v").await;
        }
        browser.goto(&format!("{ui}#/keys/console/list/")).await;
        let listed = browser
            .wait_for(
                "the keys under console/list/",
                "const items = [...document.querySelectorAll('#keys li')];
                 return items.length > 0 && items.map((li) => `${li.className}:${li.innerText.trim()}`);",
            )
            .await;
        assert_eq!(listed, json!(["key:a", "key:b", "folder:dir/"]));

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
        let boot = browser
            .wait_for(
                "figures of three nodes",
                "const rows = [...document.querySelectorAll('#figures-latest tbody tr')];
                 return rows.length === 3 && rows.every((r) => r.cells.length === 11 && Number(r.cells[10].innerText) >= 2)
                   && document.querySelector('#figures-latest tr[data-node=n2]').dataset.boot;",
            )
            .await;
        assert_labelled(&browser, "figures").await;
        browser.screenshot("figures").await;
        // The totals add up the nodes second by second, whatever each node's phase within
        // the second, and stop at the oldest of the nodes' newest samples; a node far behind
        // (not answering) holds them back no more.
        let totals = browser
            .eval_async(
                "const done = arguments[arguments.length - 1];
                 import('/ui/js/figures.js').then((m) => {
                   const s = (at, rps) => ({at_ms: at, seq: 0, http: {rps}, resp: {rps: 1},
                     applies: 0, fsyncs: 0, max_lag: 0});
                   const a = [], b = [], gone = [s(1e6 - 20000, 100)];
                   for (let i = 0; i < 10; i++) {
                     a.push(s(1e6 + i * 1000 + 100, 10));
                     b.push(s(1e6 + i * 1000 + 900, 5));
                   }
                   b.pop();
                   done(m.sumBySecond([a, b, gone]).filter((p) => p.at >= 1000)
                     .map((p) => [p.at, p.http, p.resp, p.nodes]));
                 }, (e) => done(String(e)));",
                json!([]),
            )
            .await;
        let expected: Vec<Value> = (1000..=1008).map(|at| json!([at, 15, 2, 2])).collect();
        assert_eq!(totals, json!(expected), "the cluster's totals by second");

        // A node restarts: it numbers its samples from 1 again, under a new boot id, and the
        // page takes its new series instead of waiting for numbers past the old ones.
        c.kill9(1).await;
        c.restart(1).await;
        browser
            .wait_for_within(
                "n2's new series",
                &format!(
                    "const r = document.querySelector('#figures-latest tr[data-node=n2]');
                     return r && r.dataset.boot && r.dataset.boot !== '{}' && r.cells.length === 11
                       && Number(r.cells[10].innerText) >= 2 && Number(r.dataset.seq) === Number(r.cells[10].innerText);",
                    boot.as_str().unwrap()
                ),
                Duration::from_secs(60),
            )
            .await;
        // Every node healthy again (each shard it votes in led) before the shards view.
        let healthy = wait_until(SETTLE, Duration::from_millis(200), || async {
            let mut all = true;
            for i in 0..3 {
                let url = format!("{}/v1/health", c.node(i).http_url());
                all &= c
                    .http
                    .get(url)
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success());
            }
            all
        })
        .await;
        assert!(healthy, "the cluster after n2's restart\n{}", c.logs());

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
                "return [...document.querySelectorAll('#shard-table tbody tr')].map((r) => Number(r.dataset.key))",
                json!([]),
            )
            .await;
        assert_eq!(shown, json!(on_n3), "the shards on n3");
        browser.screenshot("shards").await;

        // A split from the page names the slot it cuts at, from the cluster's current map,
        // and shows what the server decided.
        browser
            .eval(
                "const s = document.getElementById('shard-filter'); s.value = ''; s.dispatchEvent(new Event('change'))",
                json!([]),
            )
            .await;
        let [lo, hi] = before.shards[0].slots;
        let mid = (u32::from(lo) + u32::from(hi)).div_ceil(2);
        browser.click("button[aria-label='Shard 0 details']").await;
        browser.click("#split-shard").await;
        let said = browser
            .wait_for(
                "what a split does",
                "const d = document.getElementById('confirm'); return d.open && d.innerText",
            )
            .await;
        assert!(
            said.as_str().unwrap().contains(&format!("cut in two at slot {mid}")),
            "{said}"
        );
        browser.click("#confirm-ok").await;
        let decided = browser
            .wait_for(
                "the split decided",
                "const r = document.getElementById('split-result');
                 return r && [Number(r.dataset.at), Number(r.dataset.child), r.innerText];",
            )
            .await;
        assert_eq!(decided[0], json!(mid), "{decided}");
        assert_eq!(decided[1], json!(3), "{decided}");
        let split = settled(&c, 0, "the split and the moves after it", |s| {
            s.shards.len() == 4 && s.splits.is_empty() && s.moves.is_empty()
        })
        .await;
        assert_eq!(
            split.shards[3].slots,
            [u16::try_from(mid).unwrap(), hi],
            "the new shard takes the slots from the one the page named"
        );
        browser.screenshot("split").await;

        // A drain started from the page moves n3's replicas away.
        let on_n3: Vec<u32> = split
            .shards
            .iter()
            .filter(|s| s.replicas.iter().any(|r| r == "n3"))
            .map(|s| s.shard.0)
            .collect();
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
        // The drain takes what the machine gives it: waited for over HTTP, then the page.
        let after = settled(&c, 0, "n3 drained", |s| {
            s.nodes.iter().any(|n| n.name == "n3" && n.state == "removed")
        })
        .await;
        browser
            .wait_for(
                "n3 removed",
                "const rows = [...document.querySelectorAll('#node-table tbody tr')];
                 return rows.some((r) => r.cells[0].innerText === 'n3' && r.cells[1].innerText === 'removed');",
            )
            .await;
        browser.screenshot("drained").await;
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
        // The snapshots a leader is sending, for the moves' progress in bytes. Those of this
        // cluster's tiny shards take milliseconds, so only the field's shape is checked.
        let node: Value = c
            .http
            .get(format!("{}/v1/ui/node", c.node(0).http_url()))
            .send()
            .await
            .expect("GET /v1/ui/node")
            .json()
            .await
            .expect("node JSON");
        let snapshots = node["snapshots"].as_array().expect("a snapshots array");
        for s in snapshots {
            assert!(
                s["shard"].is_u64() && s["target"].is_string() && s["total"].is_u64(),
                "{s}"
            );
            assert!(s["sent"].as_u64() <= s["total"].as_u64(), "{s}");
        }

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

        // Last, as it leaves the cluster without a quorum: n2 removed by force. Every shard
        // is on n1 and n2 now, so every one loses its quorum, and the page lists them.
        browser.click("button[aria-label='Remove n2 by force']").await;
        let said = browser
            .wait_for(
                "what a forced removal does",
                "const d = document.getElementById('confirm'); return d.open && d.innerText",
            )
            .await;
        assert!(said.as_str().unwrap().contains("gone for good"), "{said}");
        browser.click("#confirm-ok").await;
        let lost = browser
            .wait_for(
                "the shards left without a quorum",
                "const e = document.getElementById('lost-quorum'); return e && e.dataset.shards",
            )
            .await;
        let every: Vec<String> = after.shards.iter().map(|s| s.shard.0.to_string()).collect();
        assert_eq!(lost.as_str().unwrap(), every.join(","));
        browser.screenshot("forced-removal").await;
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
    bounded(Duration::from_secs(180), async {
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
        let token = token_with_rules(
            &http,
            &base,
            "app-only",
            "key_prefix \"app/\" { policy = \"write\" }",
        )
        .await;
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

        // Another node refuses a page's request (a token it does not know, refused before
        // any handler runs; no token, refused by the handler), and says so with the CORS
        // headers on, so that the page can show the refusal rather than a blocked request.
        let own = format!("http://{}", c.node(0).endpoints().http);
        for (secret, code) in [("not-a-token", "acl_not_found"), ("", "permission_denied")] {
            let refused = http
                .get(format!("{}/v1/ui/figures", c.node(1).http_url()))
                .header("Origin", &own)
                .header("X-Consul-Token", secret)
                .send()
                .await
                .expect("GET");
            assert_eq!(refused.status().as_u16(), 403);
            assert_eq!(refused.headers()["access-control-allow-origin"], own.as_str());
            assert_eq!(refused.headers()["vary"], "Origin");
            let body: Value = refused.json().await.expect("error JSON");
            assert_eq!(body["code"], code, "{body}");
        }

        // A token deleted while its page is open: the page's next request is refused with
        // "ACL not found", and the page goes back to the login, the secret forgotten.
        let operator =
            token_with_rules(&http, &base, "operator-read", "operator = \"read\"").await;
        browser.click("#logout").await;
        browser
            .wait_for(
                "the login again",
                "return !document.getElementById('login').hidden",
            )
            .await;
        browser
            .type_into("#login-token", operator["SecretID"].as_str().unwrap())
            .await;
        browser.click("#login-submit").await;
        browser
            .wait_for(
                "the overview for an operator",
                "return document.querySelectorAll('#node-table tbody tr').length === 3",
            )
            .await;
        let deleted = http
            .delete(format!(
                "{base}/v1/acl/token/{}",
                operator["AccessorID"].as_str().unwrap()
            ))
            .header("X-Consul-Token", MANAGEMENT)
            .send()
            .await
            .expect("DELETE token");
        assert!(deleted.status().is_success());
        // The overview asks again every 2 s: no click, no reload.
        browser
            .wait_for(
                "the login after the token went",
                "return !document.getElementById('login').hidden
                   && document.getElementById('view').hidden
                   && document.getElementById('login-error').innerText.includes('ACL not found')
                   && sessionStorage.getItem('trireme.token') === null",
            )
            .await;
        browser.screenshot("token-deleted").await;
    })
    .await;
}

#[tokio::test]
async fn the_console_can_be_turned_off_and_refuses_bad_input() {
    let off = TestNode::start(StartOptions::default().config("[ui]\nenabled = false\n")).await;
    let mut on = TestNode::start(StartOptions::default()).await;
    let http = http_client();
    for path in [
        "/ui",
        "/ui/js/app.js",
        "/v1/ui/access",
        "/v1/ui/figures",
        "/v1/ui/keys",
    ] {
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
    let own = format!("http://{}", on.endpoints().http);
    let page = http
        .get(format!("{base}/ui"))
        .send()
        .await
        .expect("GET /ui");
    assert_eq!(page.status().as_u16(), 200);
    let headers = page.headers().clone();
    let policy = headers["content-security-policy"].to_str().unwrap();
    assert!(policy.contains("script-src 'self'"), "{policy}");
    // The page may connect to the cluster's own nodes, and nowhere else.
    assert!(
        policy.contains(&format!("connect-src 'self' {own};")),
        "{policy}"
    );
    assert!(
        !policy.contains(" http: ") && !policy.contains(" https:"),
        "{policy}"
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
        ("/v1/ui/figures?since=1&boot=x", 400, "invalid_argument"),
        ("/v1/ui/shards/first/history", 400, "invalid_argument"),
        ("/v1/ui/shards/999/history", 404, "not_found"),
        ("/v1/ui/kv/no/such/key", 404, "not_found"),
        ("/v1/ui/keys?limit=0", 400, "invalid_argument"),
        ("/v1/ui/keys?limit=1001", 400, "invalid_argument"),
        ("/v1/ui/keys?limit=many", 400, "invalid_argument"),
    ] {
        let resp = http.get(format!("{base}{path}")).send().await.expect("GET");
        crate::common::expect_error(resp, reqwest::StatusCode::from_u16(status).unwrap(), code)
            .await;
    }

    // Cross-origin reads only for pages of the cluster's own nodes, at the listener's scheme;
    // every answer says it depends on the origin.
    for foreign in [
        "http://elsewhere.example",
        "null",
        &format!("https://{}", on.endpoints().http),
        &format!("http://{}:1", on.endpoints().http.ip()),
    ] {
        let preflight = http
            .request(reqwest::Method::OPTIONS, format!("{base}/v1/ui/node"))
            .header("Origin", foreign)
            .send()
            .await
            .expect("OPTIONS");
        assert_eq!(preflight.status().as_u16(), 403, "{foreign}");
        let read = http
            .get(format!("{base}/v1/ui/node"))
            .header("Origin", foreign)
            .send()
            .await
            .expect("GET");
        assert_eq!(read.status().as_u16(), 200);
        assert!(
            read.headers().get("access-control-allow-origin").is_none(),
            "{foreign}"
        );
        assert_eq!(read.headers()["vary"], "Origin", "{foreign}");
    }
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
    assert_eq!(
        preflight.headers()["access-control-allow-headers"],
        "X-Consul-Token"
    );

    // The keys view's listing: one level, each folder once, a page at a time.
    for key in [
        "k/a1",
        "k/a2",
        "k/a3",
        "k/f/x",
        "k/f/y",
        "k/g/deep/z",
        "k/z",
        "l/out",
    ] {
        assert!(on.put(key, "v").await);
    }
    let mut from: Option<String> = None;
    let mut pages = Vec::new();
    loop {
        let mut url = reqwest::Url::parse(&format!("{base}/v1/ui/keys")).unwrap();
        url.query_pairs_mut()
            .append_pair("prefix", "k/")
            .append_pair("limit", "2");
        if let Some(from) = &from {
            url.query_pairs_mut().append_pair("from", from);
        }
        let page: Value = http
            .get(url)
            .send()
            .await
            .expect("GET keys")
            .json()
            .await
            .expect("keys JSON");
        let entries: Vec<String> = page["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                let key = e["key"].as_str().unwrap();
                if e["folder"] == true {
                    format!("{key} (folder)")
                } else {
                    key.to_string()
                }
            })
            .collect();
        assert!(entries.len() <= 2, "{page}");
        pages.push(entries);
        match page["next"].as_str() {
            Some(next) => from = Some(next.to_string()),
            None => break,
        }
        assert!(pages.len() < 10, "the pages never end: {pages:?}");
    }
    assert_eq!(
        pages.concat(),
        [
            "k/a1",
            "k/a2",
            "k/a3",
            "k/f/ (folder)",
            "k/g/ (folder)",
            "k/z"
        ],
        "pages {pages:?}"
    );
    let flat: Value = http
        .get(format!("{base}/v1/ui/keys?prefix=k/&separator="))
        .send()
        .await
        .expect("GET keys")
        .json()
        .await
        .expect("keys JSON");
    assert_eq!(flat["entries"].as_array().unwrap().len(), 7, "{flat}");
    assert_eq!(flat["next"], Value::Null);

    // One sample a second, numbered in order, the node's own requests counted; a Consul
    // blocking query held for a second is left out of the latencies.
    let index = http
        .get(on.kv_url("k/z"))
        .send()
        .await
        .expect("GET")
        .headers()["x-consul-index"]
        .to_str()
        .unwrap()
        .to_string();
    let held = http
        .get(format!("{}?index={index}&wait=1500ms", on.kv_url("k/z")))
        .send()
        .await
        .expect("a blocking query");
    assert_eq!(held.status().as_u16(), 200);
    for _ in 0..5 {
        on.get("some/key").await;
    }
    let figures_of = |base: String, query: String| {
        let http = http.clone();
        async move {
            let figures: Value = http
                .get(format!("{base}/v1/ui/figures{query}"))
                .send()
                .await
                .expect("figures")
                .json()
                .await
                .expect("figures JSON");
            figures
        }
    };
    let found = wait_until(Duration::from_secs(10), Duration::from_millis(200), || {
        let figures = figures_of(base.clone(), String::new());
        async move {
            let figures = figures.await;
            assert_eq!(figures["every_ms"], 1000);
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
    let metrics = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(
            "trireme_http_request_duration_seconds_count{route=\"blocking\",method=\"GET\"} 1\n"
        ),
        "the blocking query has its own series"
    );
    let before = figures_of(base.clone(), String::new()).await;
    for sample in before["samples"].as_array().unwrap() {
        let p99 = sample["http"]["p99_ms"].as_f64().unwrap_or(0.0);
        assert!(p99 < 1000.0, "a long poll in the figures: {sample}");
    }

    // The node restarts: its samples are numbered from 1 again, under another boot id. A
    // reader that names its old series gets the new one whole, and so does one that names
    // none but asks for numbers past the newest (they can only be of another run).
    let boot = before["boot_ms"].as_u64().expect("boot_ms");
    let last = before["samples"].as_array().unwrap().last().unwrap()["seq"]
        .as_u64()
        .unwrap();
    on.terminate().await;
    on.restart().await;
    let base = on.http_url();
    for query in [
        format!("?since={last}&boot={boot}"),
        "?since=1000000".to_string(),
    ] {
        let renewed = poll_until(Duration::from_secs(10), Duration::from_millis(200), || {
            let figures = figures_of(base.clone(), query.clone());
            async move {
                let figures = figures.await;
                let samples = figures["samples"].as_array().cloned().unwrap_or_default();
                if samples.is_empty() {
                    Err(figures)
                } else {
                    Ok(figures)
                }
            }
        })
        .await
        .unwrap_or_else(|f| panic!("no samples after the restart: {f}"));
        assert_ne!(renewed["boot_ms"].as_u64(), Some(boot), "{renewed}");
        assert_eq!(renewed["samples"][0]["seq"], 1, "{query}: {renewed}");
    }
    let health = http
        .get(format!("{base}/v1/health"))
        .send()
        .await
        .expect("health");
    assert_eq!(health.status().as_u16(), 200, "the node keeps serving");
}

/// A new token with one new policy named `name` holding `rules`, made with the management
/// token through `base`: the token's JSON as the ACL API answers it.
async fn token_with_rules(http: &reqwest::Client, base: &str, name: &str, rules: &str) -> Value {
    let policy = http
        .put(format!("{base}/v1/acl/policy"))
        .header("X-Consul-Token", MANAGEMENT)
        .json(&json!({"Name": name, "Rules": rules}))
        .send()
        .await
        .expect("policy");
    assert!(policy.status().is_success(), "{:?}", policy.text().await);
    http.put(format!("{base}/v1/acl/token"))
        .header("X-Consul-Token", MANAGEMENT)
        .json(
            &json!({"Description": format!("console test: {name}"), "Policies": [{"Name": name}]}),
        )
        .send()
        .await
        .expect("token")
        .json()
        .await
        .expect("token JSON")
}
