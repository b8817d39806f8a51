//! Area 15: the documents API (`/v0/{collection}/{key}`, Orchestrate-style) on real nodes:
//! documents as keys of the one keyspace, refs and conditional writes, listing a collection
//! page by page across shards, search, and the same answers through every node of a cluster.

use crate::common::cluster::{CLUSTER_DEADLINE, ClusterOptions, TestCluster, bounded, poll_until};
use crate::common::{StartOptions, TestNode, expect_error, metric, metrics_text, url_encode};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::time::Duration;

/// Runs a test body under a time bound; dropping it on timeout kills the nodes.
/// The document keys of one list or search page, in the order given.
fn page_keys(page: &Value) -> Vec<&str> {
    page["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| r["path"]["key"].as_str().expect("a key"))
        .collect()
}

fn header(resp: &reqwest::Response, name: &str) -> String {
    resp.headers()
        .get(name)
        .unwrap_or_else(|| panic!("missing header {name}: {:?}", resp.headers()))
        .to_str()
        .expect("header is text")
        .to_string()
}

/// The ref in an `ETag: "<ref>"` header.
fn etag_ref(resp: &reqwest::Response) -> u64 {
    let tag = header(resp, "etag");
    tag.strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("ETag {tag:?} is not a quoted ref"))
}

/// PUTs a document and returns its new ref, asserting a 201.
async fn put_doc(http: &reqwest::Client, base: &str, path: &str, doc: &Value) -> u64 {
    let resp = http
        .put(format!("{base}/v0/{path}"))
        .json(doc)
        .send()
        .await
        .expect("PUT document");
    assert_eq!(resp.status(), StatusCode::CREATED, "PUT /v0/{path}");
    etag_ref(&resp)
}

async fn get_json(http: &reqwest::Client, url: &str) -> Value {
    let resp = http.get(url).send().await.expect("GET");
    assert_eq!(resp.status(), StatusCode::OK, "GET {url}");
    resp.json().await.expect("JSON answer")
}

/// One result of a listing or a search: (key, ref, value).
type Found = (String, u64, Value);

/// Follows `next` links from `first` (a path) until there are none; returns every result in
/// order, the page sizes and the `total_count` of the first page (searches only).
async fn all_pages(
    http: &reqwest::Client,
    base: &str,
    first: &str,
) -> (Vec<Found>, Vec<usize>, Option<u64>) {
    let mut found = Vec::new();
    let mut sizes = Vec::new();
    let mut total = None;
    let mut next = Some(first.to_string());
    while let Some(path) = next.take() {
        assert!(sizes.len() < 100, "more than 100 pages from {first}");
        let page = get_json(http, &format!("{base}{path}")).await;
        let results = page["results"].as_array().expect("results array");
        assert_eq!(page["count"], results.len(), "count of {page}");
        if sizes.is_empty() {
            total = page["total_count"].as_u64();
        }
        sizes.push(results.len());
        for r in results {
            let key = r["path"]["key"].as_str().expect("path.key").to_string();
            let reference = r["path"]["ref"]
                .as_str()
                .and_then(|s| s.parse().ok())
                .expect("path.ref is a quoted number");
            found.push((key, reference, r["value"].clone()));
        }
        next = page["next"].as_str().map(str::to_string);
    }
    (found, sizes, total)
}

fn keys(found: &[Found]) -> Vec<String> {
    found.iter().map(|(k, _, _)| k.clone()).collect()
}

#[tokio::test]
async fn documents_are_keys_with_refs_and_conditional_writes() {
    let node = TestNode::start(StartOptions::default()).await;
    let (c, base) = (&node.http, node.http_url());
    let url = |path: &str| format!("{base}/v0/{path}");

    // PUT answers 201 with the ref as ETag and a Location naming it.
    let alice = json!({"name": "Alice", "address": {"city": "Oxford"}});
    let resp = c.put(url("users/alice")).json(&alice).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    let first = etag_ref(&resp);
    assert_eq!(
        header(&resp, "location"),
        format!("/v0/users/alice/refs/{first}")
    );

    // GET gives the document back with the same ref.
    let resp = c.get(url("users/alice")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(header(&resp, "content-type"), "application/json");
    assert_eq!(etag_ref(&resp), first);
    assert_eq!(
        header(&resp, "content-location"),
        format!("/v0/users/alice/refs/{first}")
    );
    assert_eq!(resp.json::<Value>().await.unwrap(), alice);
    for mode in ["?consistent", "?stale"] {
        let resp = c.get(format!("{}{mode}", url("users/alice"))).send().await;
        assert_eq!(resp.unwrap().status(), StatusCode::OK, "{mode}");
    }

    // One keyspace: the document is the key users/alice of the Consul API, ref = ModifyIndex.
    let raw = c.get(format!("{}?raw", node.kv_url("users/alice"))).send();
    let raw = raw.await.unwrap().bytes().await.unwrap();
    assert_eq!(serde_json::from_slice::<Value>(&raw).unwrap(), alice);
    let entry = node.get("users/alice").await.expect("the key exists");
    assert_eq!(entry.modify_index, first);
    // ... and a JSON object written through /v1/kv is a document.
    assert!(node.put("users/bob", r#"{"name":"Bob"}"#).await);
    let bob = get_json(c, &url("users/bob")).await;
    assert_eq!(bob, json!({"name": "Bob"}));
    // A value that is not a JSON object is not a document.
    assert!(node.put("users/raw", "plain text").await);
    let resp = c.get(url("users/raw")).send().await.unwrap();
    let message = expect_error(resp, StatusCode::NOT_FOUND, "not_found").await;
    assert!(message.contains("not a JSON object"), "{message}");
    let resp = c.get(url("users/nobody")).send().await.unwrap();
    expect_error(resp, StatusCode::NOT_FOUND, "not_found").await;

    // If-Match: a check-and-set on the ref.
    let v2 = json!({"name": "Alice", "v": 2});
    let stale_ref = format!("\"{}\"", first + 1000);
    let resp = c.put(url("users/alice")).header("If-Match", &stale_ref);
    let resp = resp.json(&v2).send().await.unwrap();
    let message = expect_error(resp, StatusCode::PRECONDITION_FAILED, "precondition_failed").await;
    assert!(
        message.contains(&format!("\"{first}\"")),
        "names the current ref: {message}"
    );
    assert_eq!(get_json(c, &url("users/alice")).await, alice, "unchanged");
    let resp = c
        .put(url("users/alice"))
        .header("If-Match", format!("\"{first}\""));
    let resp = resp.json(&v2).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    let second = etag_ref(&resp);
    assert!(second > first, "a new ref: {second} after {first}");
    assert_eq!(get_json(c, &url("users/alice")).await, v2);
    // The ref it matched is gone: the same condition fails now.
    let resp = c
        .put(url("users/alice"))
        .header("If-Match", format!("\"{first}\""));
    let resp = resp.json(&alice).send().await.unwrap();
    expect_error(resp, StatusCode::PRECONDITION_FAILED, "precondition_failed").await;
    // If-Match on a missing document fails too.
    let resp = c.put(url("users/nobody")).header("If-Match", "\"1\"");
    let resp = resp.json(&alice).send().await.unwrap();
    expect_error(resp, StatusCode::PRECONDITION_FAILED, "precondition_failed").await;
    let resp = c.put(url("users/nobody")).header("If-Match", "*");
    let resp = resp.json(&alice).send().await.unwrap();
    expect_error(resp, StatusCode::PRECONDITION_FAILED, "precondition_failed").await;
    let resp = c.get(url("users/nobody")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::NOT_FOUND, "no write happened");

    // If-None-Match: * creates only.
    let resp = c.put(url("users/alice")).header("If-None-Match", "*");
    let resp = resp.json(&alice).send().await.unwrap();
    let message = expect_error(resp, StatusCode::PRECONDITION_FAILED, "precondition_failed").await;
    assert!(message.contains("already exists"), "{message}");
    let carol = json!({"name": "Carol"});
    let resp = c.put(url("users/carol")).header("If-None-Match", "*");
    let resp = resp.json(&carol).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    assert_eq!(get_json(c, &url("users/carol")).await, carol);

    // Bad input: 400 with a JSON message, and nothing written.
    for (body, what) in [
        ("not json", "not JSON"),
        ("[1, 2]", "JSON object"),
        ("\"text\"", "JSON object"),
        ("", "not JSON"),
    ] {
        let resp = c.put(url("users/dave")).body(body).send().await.unwrap();
        let message = expect_error(resp, StatusCode::BAD_REQUEST, "invalid_argument").await;
        assert!(message.contains(what), "{body:?}: {message}");
    }
    let resp = c.put(url("users/dave")).header("If-Match", "abc");
    let resp = resp.json(&alice).send().await.unwrap();
    let message = expect_error(resp, StatusCode::BAD_REQUEST, "invalid_argument").await;
    assert!(message.contains("If-Match"), "{message}");
    let resp = c.put(url("users/dave")).header("If-None-Match", "\"3\"");
    let resp = resp.json(&alice).send().await.unwrap();
    expect_error(resp, StatusCode::BAD_REQUEST, "invalid_argument").await;
    assert_eq!(node.get("users/dave").await, None, "nothing written");
    let resp = c.put(url("users/")).json(&alice).send().await.unwrap();
    let message = expect_error(resp, StatusCode::BAD_REQUEST, "invalid_argument").await;
    assert!(message.contains("missing document key"), "{message}");
    let resp = c.get(url("a%2Fb/key")).send().await.unwrap();
    let message = expect_error(resp, StatusCode::BAD_REQUEST, "invalid_argument").await;
    assert!(message.contains("'/'"), "{message}");
    let long = "k".repeat(9000);
    let resp = c
        .put(url(&format!("users/{long}")))
        .json(&alice)
        .send()
        .await;
    expect_error(resp.unwrap(), StatusCode::BAD_REQUEST, "key_too_large").await;
    let resp = c.get(url("users/alice/refs/1")).send().await.unwrap();
    let message = expect_error(resp, StatusCode::NOT_FOUND, "not_found").await;
    assert!(message.contains("refs"), "{message}");
    let resp = c
        .get(format!("{}?stale&consistent", url("users/alice")))
        .send();
    expect_error(
        resp.await.unwrap(),
        StatusCode::BAD_REQUEST,
        "invalid_argument",
    )
    .await;

    // Keys are percent-decoded: users/a b is the same key in both APIs.
    put_doc(c, &base, "users/a%20b", &json!({"spaced": true})).await;
    let entry = node.get("users/a%20b").await.expect("the decoded key");
    assert_eq!(entry.value, br#"{"spaced":true}"#);

    // DELETE: If-Match as a cas, then unconditionally; the key is gone in both APIs.
    let resp = c
        .delete(url("users/alice"))
        .header("If-Match", format!("\"{first}\""));
    let resp = resp.send().await.unwrap();
    expect_error(resp, StatusCode::PRECONDITION_FAILED, "precondition_failed").await;
    assert_eq!(get_json(c, &url("users/alice")).await, v2, "still there");
    let resp = c
        .delete(url("users/alice"))
        .header("If-Match", format!("\"{second}\""));
    assert_eq!(resp.send().await.unwrap().status(), StatusCode::NO_CONTENT);
    let resp = c.get(url("users/alice")).send().await.unwrap();
    expect_error(resp, StatusCode::NOT_FOUND, "not_found").await;
    assert_eq!(node.get("users/alice").await, None);
    let resp = c.delete(url("users/alice")).send().await.unwrap();
    assert_eq!(
        resp.status(),
        StatusCode::NO_CONTENT,
        "deleting nothing is fine"
    );
    let resp = c.delete(url("users/carol")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    assert_eq!(node.get("users/carol").await, None);

    // A whole collection goes only with ?force=true.
    let resp = c.delete(url("users")).send().await.unwrap();
    let message = expect_error(resp, StatusCode::BAD_REQUEST, "invalid_argument").await;
    assert!(message.contains("force=true"), "{message}");
    assert!(node.get("users/bob").await.is_some());
    let resp = c
        .delete(format!("{}?force=true", url("users")))
        .send()
        .await;
    assert_eq!(resp.unwrap().status(), StatusCode::NO_CONTENT);
    assert!(
        node.list("users/").await.is_empty(),
        "every key of users/ is gone"
    );

    // The node still serves after all of that.
    put_doc(c, &base, "users/erin", &json!({"ok": 1})).await;
    assert_eq!(get_json(c, &url("users/erin")).await, json!({"ok": 1}));
}

#[tokio::test]
async fn a_collection_lists_page_by_page_across_shards_in_key_order() {
    let node = TestNode::start(StartOptions::default().shards(8)).await;
    let (c, base) = (&node.http, node.http_url());
    let mut expected = Vec::new();
    for i in 0..35 {
        let key = format!("k{i:02}");
        let reference = put_doc(c, &base, &format!("items/{key}"), &json!({"n": i})).await;
        expected.push((key, reference, json!({"n": i})));
    }
    // Neighbours that must stay out: a collection whose name extends this one, another
    // collection, and a value under the prefix that is not a document.
    put_doc(c, &base, "itemsx/k00", &json!({"other": true})).await;
    put_doc(c, &base, "other/k01", &json!({"other": true})).await;
    assert!(node.put("items/zz-raw", "not a document").await);
    // The documents really are spread over several shards.
    let map = node.shards().await;
    let shards: std::collections::BTreeSet<u32> = expected
        .iter()
        .map(|(k, _, _)| {
            let slot = trireme_types::key_slot(format!("items/{k}").as_bytes());
            map.shard_of_slot(slot)
                .expect("every slot has a shard")
                .shard
                .0
        })
        .collect();
    assert!(shards.len() > 3, "keys in shards {shards:?}");

    // Pages of 10 following `next`: every document exactly once, in key order.
    let (found, sizes, _) = all_pages(c, &base, "/v0/items?limit=10").await;
    assert_eq!(found, expected);
    assert_eq!(sizes, vec![10, 10, 10, 5]);
    // The default page is 10.
    let page = get_json(c, &format!("{base}/v0/items")).await;
    assert_eq!(page["count"], 10);
    assert_eq!(
        page["next"], "/v0/items?limit=10&afterKey=k09",
        "next continues after the last key"
    );
    assert_eq!(page["results"][0]["path"]["collection"], "items");

    // afterKey excludes the key, startKey includes it.
    let page = get_json(c, &format!("{base}/v0/items?limit=3&afterKey=k05")).await;
    assert_eq!(page_keys(&page), ["k06", "k07", "k08"]);
    let page = get_json(c, &format!("{base}/v0/items?limit=3&startKey=k05")).await;
    assert_eq!(page_keys(&page), ["k05", "k06", "k07"]);
    let (from_missing, _, _) = all_pages(c, &base, "/v0/items?startKey=k305&limit=100").await;
    assert_eq!(
        keys(&from_missing),
        keys(&expected[31..]),
        "k305 sorts between k30 and k31"
    );

    // Read modes are accepted and carried into `next`.
    for mode in ["consistent", "stale"] {
        let page = get_json(c, &format!("{base}/v0/items?limit=30&{mode}")).await;
        assert_eq!(page["count"], 30, "{mode}");
        let next = page["next"].as_str().expect("a next link");
        assert!(next.ends_with(&format!("&{mode}")), "{next}");
        let (found, _, _) = all_pages(c, &base, &format!("/v0/items?limit=30&{mode}")).await;
        assert_eq!(found, expected, "{mode}");
    }

    // An empty collection is an empty page with no next.
    let page = get_json(c, &format!("{base}/v0/nothing")).await;
    assert_eq!(page, json!({"count": 0, "results": []}));

    // Bad paging parameters are refused with a message.
    for query in ["limit=0", "limit=101", "limit=ten", "afterKey=a&startKey=b"] {
        let resp = c
            .get(format!("{base}/v0/items?{query}"))
            .send()
            .await
            .unwrap();
        let message = expect_error(resp, StatusCode::BAD_REQUEST, "invalid_argument").await;
        assert!(!message.is_empty(), "{query}");
    }
    let (found, _, _) = all_pages(c, &base, "/v0/items?limit=100").await;
    assert_eq!(found.len(), 35, "still serving");
}

/// The test collection of the search tests: 30 people in three groups.
fn person(i: u32) -> Value {
    let names = [
        "Alice Liddell",
        "Bob Ross",
        "Alan Turing",
        "Grace Hopper",
        "Ada Lovelace",
    ];
    let cities = ["Oxford", "Daytona Beach", "London"];
    json!({
        "n": i,
        "group": format!("g{}", i % 3),
        "name": names[(i % 5) as usize],
        "address": {"city": cities[(i % 3) as usize]},
        "tags": if i.is_multiple_of(2) { json!(["even", "number"]) } else { json!(["odd"]) },
        "bio": if i % 10 == 7 { "Fell down the rabbit hole." } else { "Stayed home." },
    })
}

/// The keys `p00`..`p29` whose document satisfies `pred`, in key order.
fn people_where(pred: impl Fn(u32, &Value) -> bool) -> Vec<String> {
    (0..30)
        .filter(|&i| pred(i, &person(i)))
        .map(|i| format!("p{i:02}"))
        .collect()
}

/// Every match of `query`, `consistent` (so every write before it is seen), keys sorted.
async fn search(c: &reqwest::Client, base: &str, query: &str) -> (Vec<String>, u64) {
    let q: String = url_encode(query);
    let (found, _, total) = all_pages(
        c,
        base,
        &format!("/v0/people?query={q}&limit=100&consistent"),
    )
    .await;
    let mut found = keys(&found);
    found.sort();
    (found, total.expect("total_count"))
}

#[tokio::test]
async fn search_finds_matching_documents_on_every_shard() {
    let node = TestNode::start(StartOptions::default().shards(8)).await;
    let (c, base) = (&node.http, node.http_url());
    for i in 0..30 {
        put_doc(c, &base, &format!("people/p{i:02}"), &person(i)).await;
    }
    put_doc(c, &base, "peoplex/p01", &person(1)).await;
    put_doc(c, &base, "animals/p01", &person(1)).await;
    assert!(
        node.put("people/raw", "group:g1 Alice").await,
        "a non-document"
    );

    let group1 = people_where(|i, _| i % 3 == 1);
    let cases: Vec<(&str, Vec<String>)> = vec![
        ("group:g1", group1.clone()),
        ("group:G1", group1.clone()),
        ("n:7", vec!["p07".into()]),
        ("name:alice", people_where(|i, _| i % 5 == 0)),
        ("name:al*", people_where(|i, _| i % 5 == 0 || i % 5 == 2)),
        ("address.city:daytona", people_where(|i, _| i % 3 == 1)),
        (
            "address.city:\"daytona beach\"",
            people_where(|i, _| i % 3 == 1),
        ),
        ("address.city:\"beach daytona\"", vec![]),
        ("tags:even", people_where(|i, _| i % 2 == 0)),
        ("bio:\"rabbit hole\"", people_where(|i, _| i % 10 == 7)),
        ("rabbit", people_where(|i, _| i % 10 == 7)),
        ("lovelace", people_where(|i, _| i % 5 == 4)),
        (
            "group:g1 -name:bob",
            people_where(|i, _| i % 3 == 1 && i % 5 != 1),
        ),
        (
            "group:g1 AND tags:even",
            people_where(|i, _| i % 3 == 1 && i % 2 == 0),
        ),
        ("-group:g0 -group:g1", people_where(|i, _| i % 3 == 2)),
        ("*", people_where(|_, _| true)),
        ("group:g9", vec![]),
    ];
    for (query, expected) in cases {
        let (found, total) = search(c, &base, query).await;
        assert_eq!(found, expected, "query {query:?}");
        assert_eq!(total, expected.len() as u64, "total_count of {query:?}");
    }

    // The shape of a result, and paging with offset and limit.
    let page = get_json(c, &format!("{base}/v0/people?query=group:g1&limit=4")).await;
    assert_eq!(page["count"], 4);
    assert_eq!(page["total_count"], 10);
    assert_eq!(page["next"], "/v0/people?limit=4&query=group%3Ag1&offset=4");
    let first = &page["results"][0];
    assert_eq!(first["path"]["collection"], "people");
    let key = first["path"]["key"].as_str().expect("a key").to_owned();
    assert!(group1.contains(&key), "{key}");
    let n: u32 = key[1..].parse().unwrap();
    assert_eq!(first["value"], person(n));
    assert!(first["score"].as_f64().is_some_and(|s| s > 0.0), "{first}");
    let entry = node.get(&format!("people/{key}")).await.expect("p01");
    assert_eq!(first["path"]["ref"], entry.modify_index.to_string());
    let (paged, sizes, total) = all_pages(c, &base, "/v0/people?query=group:g1&limit=4").await;
    let mut paged = keys(&paged);
    paged.sort();
    assert_eq!(paged, group1, "pages neither repeat nor skip a match");
    assert_eq!((sizes, total), (vec![4, 4, 2], Some(10)));
    let page = get_json(
        c,
        &format!("{base}/v0/people?query=group:g1&limit=4&offset=8"),
    )
    .await;
    assert_eq!(
        (page["count"].as_u64(), page["total_count"].as_u64()),
        (Some(2), Some(10))
    );
    assert!(
        page.get("next").is_none(),
        "the last page has no next: {page}"
    );
    let page = get_json(c, &format!("{base}/v0/people?query=group:g1&offset=50")).await;
    assert_eq!(
        (page["count"].as_u64(), page["total_count"].as_u64()),
        (Some(0), Some(10))
    );
    for mode in ["consistent", "stale"] {
        let page = get_json(c, &format!("{base}/v0/people?query=group:g1&{mode}")).await;
        assert_eq!(page["total_count"], 10, "{mode}");
    }

    // Bad queries: 400 naming the problem, and the node keeps serving.
    for (query, problem) in [
        ("", "empty"),
        ("   ", "empty"),
        ("name:", "nothing after"),
        (":alice", "empty field"),
        ("name:\"rabbit", "unbalanced quote"),
        ("(a OR b", "parenthes"),
        ("a..b:c", "empty part"),
        ("name:alice~7", "~"),
        ("/ali.e/", "regular expression"),
        ("\"rabbit hole\"~2", "proximity"),
    ] {
        let url = format!("{base}/v0/people?query={}", url_encode(query));
        let resp = c.get(url).send().await.unwrap();
        let message = expect_error(resp, StatusCode::BAD_REQUEST, "invalid_argument").await;
        assert!(message.contains(problem), "{query:?}: {message}");
    }
    for bad in ["offset=10001", "offset=-1", "limit=500", "sort=n:sideways"] {
        let url = format!("{base}/v0/people?query=*&{bad}");
        let resp = c.get(url).send().await.unwrap();
        expect_error(resp, StatusCode::BAD_REQUEST, "invalid_argument").await;
    }
    let (found, total) = search(c, &base, "group:g2").await;
    assert_eq!((found.len(), total), (10, 10), "still serving");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_lists_and_searches_alike_through_the_peer_links() {
    let c = TestCluster::start(ClusterOptions::default().shards(3)).await;
    bounded(Duration::from_secs(90), async {
        // Whoever leads what, at least two of the three nodes lead only some shards (or none)
        // and forward the rest of every listing and search over the peer links.
        c.expect_all_led(CLUSTER_DEADLINE).await;
        let bases: Vec<String> = (0..3).map(|i| c.node(i).http_url()).collect();
        for i in 0..30 {
            // Written through every node in turn: writes are forwarded too.
            put_doc(
                &c.http,
                &bases[i % 3],
                &format!("people/p{i:02}"),
                &person(i as u32),
            )
            .await;
        }
        let everyone = people_where(|_, _| true);
        let group1 = people_where(|i, _| i % 3 == 1);
        // Scores use the statistics of the answering node's whole index (its followers'
        // documents too): the pages below compare equal only once every node has indexed
        // all 30 documents and has nothing left to index.
        for base in &bases {
            let settled = poll_until(CLUSTER_DEADLINE, Duration::from_millis(50), || async {
                let text = metrics_text(&c.http, base).await;
                let documents = metric(&text, "trireme_search_index_documents");
                let lagging = text
                    .lines()
                    .filter(|l| l.starts_with("trireme_search_index_lag_entries{"))
                    .filter(|l| !l.ends_with(" 0"))
                    .count();
                if documents == Some(30.0) && lagging == 0 {
                    Ok(())
                } else {
                    Err(format!("{documents:?} documents, {lagging} shards lagging"))
                }
            })
            .await;
            assert_eq!(settled, Ok(()), "the index of {base}");
        }

        let mut listings = Vec::new();
        let mut searches = Vec::new();
        for base in &bases {
            for mode in ["", "&consistent"] {
                let list = all_pages(&c.http, base, &format!("/v0/people?limit=7{mode}")).await;
                assert_eq!(keys(&list.0), everyone, "listing through {base}{mode}");
                assert_eq!(list.1, vec![7, 7, 7, 7, 2]);
                listings.push(list.0);
                // Consistent, so that the search sees every write above.
                let query = "/v0/people?query=group:g1%20-name:bob&limit=3&consistent";
                let found = all_pages(&c.http, base, query).await;
                let mut matched = keys(&found.0);
                matched.sort();
                assert_eq!(
                    matched,
                    people_where(|i, _| i % 3 == 1 && i % 5 != 1),
                    "search through {base}"
                );
                searches.push(found);
            }
        }
        // Same documents, same refs, same totals, whichever node was asked.
        assert!(listings.windows(2).all(|w| w[0] == w[1]), "listings differ");
        assert!(searches.windows(2).all(|w| w[0] == w[1]), "searches differ");

        // Stale reads are served by each node's own replicas: they converge to the same.
        for base in &bases {
            let seen = poll_until(CLUSTER_DEADLINE, Duration::from_millis(50), || async {
                let (found, _, total) =
                    all_pages(&c.http, base, "/v0/people?query=group:g1&limit=100&stale").await;
                let mut found = keys(&found);
                found.sort();
                if found == group1 && total == Some(10) {
                    Ok(())
                } else {
                    Err(format!("{found:?} of {total:?}"))
                }
            })
            .await;
            assert_eq!(seen, Ok(()), "stale search through {base}");
        }

        // A conditional write through one node, with the ref read through another.
        let resp = c
            .http
            .get(format!("{}/v0/people/p05", bases[1]))
            .send()
            .await
            .unwrap();
        let reference = etag_ref(&resp);
        let changed = json!({"n": 5, "group": "g1", "name": "Changed"});
        let put = |base: &str, tag: String| {
            c.http
                .put(format!("{base}/v0/people/p05"))
                .header("If-Match", tag)
                .json(&changed)
                .send()
        };
        let resp = put(&bases[2], format!("\"{}\"", reference + 1000))
            .await
            .unwrap();
        expect_error(resp, StatusCode::PRECONDITION_FAILED, "precondition_failed").await;
        let resp = put(&bases[2], format!("\"{reference}\"")).await.unwrap();
        assert_eq!(resp.status(), StatusCode::CREATED);
        for base in &bases {
            let (found, total) = {
                let q = "/v0/people?query=name:changed&consistent";
                let (found, _, total) = all_pages(&c.http, base, q).await;
                (keys(&found), total)
            };
            assert_eq!((found, total), (vec!["p05".to_string()], Some(1)), "{base}");
        }
    })
    .await;
}

#[tokio::test]
async fn post_makes_a_key_patch_changes_part_and_refs_name_the_current_version() {
    let node = TestNode::start(StartOptions::default().shards(4)).await;
    let (c, base) = (&node.http, node.http_url());

    // POST: a new key, named in Location, holding the body.
    let mut keys = Vec::new();
    for n in 0..3 {
        let resp = c
            .post(format!("{base}/v0/notes"))
            .json(&json!({"n": n, "text": "hello"}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::CREATED);
        let location = resp.headers()["location"].to_str().unwrap().to_owned();
        let reference = etag_ref(&resp);
        let key = location
            .strip_prefix("/v0/notes/")
            .and_then(|rest| rest.strip_suffix(&format!("/refs/{reference}")))
            .unwrap_or_else(|| panic!("{location}"))
            .to_owned();
        assert_eq!(key.len(), 16, "{key}");
        let doc = get_json(c, &format!("{base}/v0/notes/{key}")).await;
        assert_eq!(doc, json!({"n": n, "text": "hello"}));
        keys.push(key);
    }
    assert!(keys[0] != keys[1] && keys[1] != keys[2], "{keys:?}");
    let resp = c
        .post(format!("{base}/v0/notes"))
        .body("[1]")
        .send()
        .await
        .unwrap();
    expect_error(resp, StatusCode::BAD_REQUEST, "invalid_argument").await;

    // PATCH with JSON Patch, then a merge patch; each answers the new ref.
    let url = format!("{base}/v0/notes/{}", keys[0]);
    let first = etag_ref(&c.get(&url).send().await.unwrap());
    let resp = c
        .patch(&url)
        .header("content-type", "application/json-patch+json")
        .body(r#"[{"op":"test","path":"/n","value":0},{"op":"replace","path":"/text","value":"bye"},{"op":"add","path":"/tags","value":["a"]}]"#)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    let second = etag_ref(&resp);
    assert!(second > first);
    assert_eq!(
        get_json(c, &url).await,
        json!({"n": 0, "text": "bye", "tags": ["a"]})
    );
    let resp = c
        .patch(&url)
        .header("If-Match", format!("\"{second}\""))
        .json(&json!({"tags": null, "extra": {"x": 1}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    let third = etag_ref(&resp);
    assert_eq!(
        get_json(c, &url).await,
        json!({"n": 0, "text": "bye", "extra": {"x": 1}})
    );
    // A stale If-Match, a failing test and a missing document change nothing.
    let resp = c
        .patch(&url)
        .header("If-Match", format!("\"{second}\""))
        .json(&json!({"n": 9}))
        .send()
        .await
        .unwrap();
    expect_error(resp, StatusCode::PRECONDITION_FAILED, "precondition_failed").await;
    let resp = c
        .patch(&url)
        .json(&json!([{"op": "test", "path": "/n", "value": 5}]))
        .send()
        .await
        .unwrap();
    let message = expect_error(resp, StatusCode::BAD_REQUEST, "invalid_argument").await;
    assert!(message.contains("operation 0: test failed"), "{message}");
    let resp = c
        .patch(format!("{base}/v0/notes/missing"))
        .json(&json!({"n": 1}))
        .send()
        .await
        .unwrap();
    expect_error(resp, StatusCode::NOT_FOUND, "not_found").await;
    assert_eq!(etag_ref(&c.get(&url).send().await.unwrap()), third);

    // Refs: the current one is served; an older one says which is current.
    let doc = get_json(c, &format!("{url}/refs/{third}")).await;
    assert_eq!(doc["extra"], json!({"x": 1}));
    let resp = c.get(format!("{url}/refs/{first}")).send().await.unwrap();
    let message = expect_error(resp, StatusCode::NOT_FOUND, "not_found").await;
    assert!(message.contains(&format!("ref \"{third}\"")), "{message}");
    let resp = c.get(format!("{url}/refs/abc")).send().await.unwrap();
    expect_error(resp, StatusCode::BAD_REQUEST, "invalid_argument").await;
}
