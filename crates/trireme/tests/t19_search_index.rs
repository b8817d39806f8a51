//! Area 19: the search index on real nodes. Every node keeps one tantivy index (`search/` in
//! its data directory) of the documents of every shard replica it holds, fed by the rows
//! each shard applies and committed at most a second after a change; a `consistent` search
//! waits until the index covers what the serving replica had applied.
//!
//! Checked here: read-your-writes of `consistent` searches (and the default freshness), the
//! index surviving `kill -9` with only recent changes indexed again, a node brought up to date
//! by a snapshot rebuilding its part of the index, the same answers through every node and
//! across a leader change, refused queries and pages, the index's metrics, and random queries
//! over HTTP against a plain scan with [`trireme_search::matches`].
//!
//! Cluster tests run one cluster at a time (the harness serializes them); every wait polls
//! under a deadline.

use crate::common::cluster::{
    CLUSTER_DEADLINE, ClusterOptions, RaftTiming, TestCluster, bounded, poll_until,
};
use crate::common::{
    StartOptions, TestNode, expect_error, metric, metric_of, metrics_text, url_encode,
};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------------------

/// PUTs a document through `base`; `Ok(ref)` on a 201.
async fn try_put_doc(
    http: &reqwest::Client,
    base: &str,
    collection: &str,
    key: &str,
    doc: &Value,
) -> Result<u64, String> {
    let url = format!("{base}/v0/{collection}/{key}");
    let resp = http
        .put(&url)
        .json(doc)
        .send()
        .await
        .map_err(|e| format!("PUT {url}: {e}"))?;
    let status = resp.status();
    let tag = resp
        .headers()
        .get("etag")
        .and_then(|t| t.to_str().ok())
        .map(str::to_string);
    if status != StatusCode::CREATED {
        let body = resp.text().await.unwrap_or_default();
        return Err(format!("PUT {url}: {status}: {body}"));
    }
    tag.as_deref()
        .and_then(|t| t.strip_prefix('"')?.strip_suffix('"')?.parse().ok())
        .ok_or_else(|| format!("PUT {url}: ETag {tag:?} is not a quoted ref"))
}

/// PUTs a document, expecting a 201; returns its ref.
async fn put_doc(
    http: &reqwest::Client,
    base: &str,
    collection: &str,
    key: &str,
    doc: &Value,
) -> u64 {
    try_put_doc(http, base, collection, key, doc)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// DELETEs a document, expecting a 204.
async fn delete_doc(http: &reqwest::Client, base: &str, collection: &str, key: &str) {
    let url = format!("{base}/v0/{collection}/{key}");
    let resp = http.delete(&url).send().await.expect("DELETE document");
    assert_eq!(resp.status(), StatusCode::NO_CONTENT, "DELETE {url}");
}

/// Writes `docs` (key, document) into `collection`, `writers` requests at a time, through
/// `bases` in turn; panics on any write not answered 201.
async fn put_docs(
    http: &reqwest::Client,
    bases: &[String],
    collection: &str,
    docs: &[(String, Value)],
    writers: usize,
) {
    let mut tasks = Vec::new();
    for w in 0..writers {
        let mine: Vec<(String, Value)> = docs.iter().skip(w).step_by(writers).cloned().collect();
        let (http, bases, collection) = (http.clone(), bases.to_vec(), collection.to_string());
        tasks.push(tokio::spawn(async move {
            for (n, (key, doc)) in mine.iter().enumerate() {
                let base = &bases[(w + n) % bases.len()];
                try_put_doc(&http, base, &collection, key, doc)
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
            }
        }));
    }
    for t in tasks {
        t.await.expect("a writer failed");
    }
}

/// Deletes `keys` of `collection`, `writers` requests at a time.
async fn delete_docs(
    http: &reqwest::Client,
    base: &str,
    collection: &str,
    keys: &[String],
    writers: usize,
) {
    let mut tasks = Vec::new();
    for w in 0..writers {
        let mine: Vec<String> = keys.iter().skip(w).step_by(writers).cloned().collect();
        let (http, base, collection) = (http.clone(), base.to_string(), collection.to_string());
        tasks.push(tokio::spawn(async move {
            for key in mine {
                delete_doc(&http, &base, &collection, &key).await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("a deleter failed");
    }
}

/// One search result: the document's key, its ref and its score.
#[derive(Debug, Clone, PartialEq)]
struct Hit {
    key: String,
    reference: u64,
    score: f64,
}

/// Every result of a search (all pages, in order) and its `total_count`.
#[derive(Debug, Clone, PartialEq)]
struct Found {
    hits: Vec<Hit>,
    total: u64,
}

impl Found {
    /// The keys in the order given.
    fn keys(&self) -> Vec<String> {
        self.hits.iter().map(|h| h.key.clone()).collect()
    }

    /// The keys as a set.
    fn key_set(&self) -> BTreeSet<String> {
        self.hits.iter().map(|h| h.key.clone()).collect()
    }
}

/// Searches `collection` for `query` through `base` in `mode` (`""`, `"&consistent"`,
/// `"&stale"`), `limit` results a page, asking for the next page by `offset` until
/// `total_count` is reached. `Err` for any answer but a well-formed 200 page.
async fn try_search(
    http: &reqwest::Client,
    base: &str,
    collection: &str,
    query: &str,
    mode: &str,
    limit: u64,
) -> Result<Found, String> {
    let mut hits = Vec::new();
    let mut total: Option<u64> = None;
    let mut offset = 0;
    loop {
        let url = format!(
            "{base}/v0/{collection}?query={}&limit={limit}&offset={offset}{mode}",
            url_encode(query)
        );
        let resp = http
            .get(&url)
            .send()
            .await
            .map_err(|e| format!("GET {url}: {e}"))?;
        let status = resp.status();
        let text = resp.text().await.map_err(|e| format!("GET {url}: {e}"))?;
        if status != StatusCode::OK {
            return Err(format!("GET {url}: {status}: {text}"));
        }
        let page: Value =
            serde_json::from_str(&text).map_err(|e| format!("GET {url}: {e}: {text}"))?;
        let results = page["results"]
            .as_array()
            .ok_or_else(|| format!("GET {url}: no results in {page}"))?;
        if page["count"].as_u64() != Some(results.len() as u64) {
            return Err(format!(
                "GET {url}: count is not the results' length: {page}"
            ));
        }
        let this_total = page["total_count"]
            .as_u64()
            .ok_or_else(|| format!("GET {url}: no total_count in {page}"))?;
        if total.is_some_and(|t| t != this_total) {
            return Err(format!(
                "GET {url}: total_count {this_total} after {total:?} on the first page"
            ));
        }
        total = Some(this_total);
        for r in results {
            let hit = (|| {
                Some(Hit {
                    key: r["path"]["key"].as_str()?.to_string(),
                    reference: r["path"]["ref"].as_str()?.parse().ok()?,
                    score: r["score"].as_f64()?,
                })
            })()
            .ok_or_else(|| format!("GET {url}: malformed result {r}"))?;
            if r["path"]["collection"] != collection {
                return Err(format!("GET {url}: result of another collection: {r}"));
            }
            hits.push(hit);
        }
        let has_next = page.get("next").is_some_and(|n| !n.is_null());
        offset += limit;
        if has_next != (offset < this_total) {
            return Err(format!(
                "GET {url}: next link {has_next} with {offset} of {this_total}: {page}"
            ));
        }
        if offset >= this_total {
            break;
        }
        if offset > 20_000 {
            return Err(format!("GET {url}: too many pages"));
        }
    }
    Ok(Found {
        hits,
        total: total.unwrap_or_default(),
    })
}

/// Like [`try_search`], panicking on an error answer.
async fn search(
    http: &reqwest::Client,
    base: &str,
    collection: &str,
    query: &str,
    mode: &str,
    limit: u64,
) -> Found {
    try_search(http, base, collection, query, mode, limit)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The `total_count` of `query` (one page of one result), panicking on an error answer.
async fn count(
    http: &reqwest::Client,
    base: &str,
    collection: &str,
    query: &str,
    mode: &str,
) -> u64 {
    let url = format!(
        "{base}/v0/{collection}?query={}&limit=1{mode}",
        url_encode(query)
    );
    let resp = http.get(&url).send().await.expect("GET search");
    assert_eq!(resp.status(), StatusCode::OK, "GET {url}");
    let page: Value = resp.json().await.expect("JSON page");
    page["total_count"]
        .as_u64()
        .unwrap_or_else(|| panic!("GET {url}: no total_count in {page}"))
}

/// A search through `base` until it answers `expected` keys (as a set) with that total, or
/// `timeout` passes; `Err` with the last answer.
async fn search_until(
    http: &reqwest::Client,
    base: &str,
    collection: &str,
    query: &str,
    mode: &str,
    expected: &BTreeSet<String>,
    timeout: Duration,
) -> Result<Found, String> {
    poll_until(timeout, Duration::from_millis(50), || async {
        let found = try_search(http, base, collection, query, mode, 100).await?;
        if found.key_set() == *expected
            && found.total == expected.len() as u64
            && found.hits.len() == expected.len()
        {
            Ok(found)
        } else {
            Err(format!(
                "{query:?}{mode} through {base}: {} results, total {}, {} missing, {} unexpected",
                found.hits.len(),
                found.total,
                expected.difference(&found.key_set()).count(),
                found.key_set().difference(expected).count()
            ))
        }
    })
    .await
}

fn set_of<I: IntoIterator<Item = S>, S: Into<String>>(keys: I) -> BTreeSet<String> {
    keys.into_iter().map(Into::into).collect()
}

// ---------------------------------------------------------------------------------------
// 1. read-your-writes
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consistent_search_sees_every_write_before_it() {
    let c = TestCluster::start(ClusterOptions::default().shards(3)).await;
    bounded(Duration::from_secs(90), async {
        c.expect_all_led(CLUSTER_DEADLINE).await;
        let http = &c.http;
        let bases: Vec<String> = (0..3).map(|i| c.node(i).http_url()).collect();

        // Each write through one node, searched for at once through another: found every
        // time, with the ref the write answered (by field, and without a field).
        let mut live = BTreeSet::new();
        for i in 0..30usize {
            let (via, ask) = (i % 3, (i + 1) % 3);
            let key = format!("d{i:02}");
            let word = format!("fresh{i}x");
            let doc = json!({"word": word, "i": i, "note": "the same in every document"});
            let reference = put_doc(http, &bases[via], "rw", &key, &doc).await;
            live.insert(key.clone());
            let query = if i % 2 == 0 {
                format!("word:{word}")
            } else {
                word.clone()
            };
            let found = search(http, &bases[ask], "rw", &query, "&consistent", 10).await;
            assert_eq!(
                (found.keys(), found.total),
                (vec![key.clone()], 1),
                "write {i} through {}, consistent search {query:?} through {}",
                c.name(via),
                c.name(ask)
            );
            assert_eq!(found.hits[0].reference, reference, "{key}'s ref");
            if i % 10 == 9 {
                let all = search(http, &bases[via], "rw", "note:same", "&consistent", 100).await;
                assert_eq!(all.key_set(), live, "every document after write {i}");
                assert_eq!(all.total, live.len() as u64);
            }
        }

        // A changed document: found by its new word only.
        put_doc(
            http,
            &bases[0],
            "rw",
            "d05",
            &json!({"word": "changed5x", "i": 5, "note": "the same in every document"}),
        )
        .await;
        let found = search(http, &bases[1], "rw", "word:fresh5x", "&consistent", 10).await;
        assert_eq!((found.keys(), found.total), (vec![], 0), "the old word");
        let found = search(http, &bases[2], "rw", "word:changed5x", "&consistent", 10).await;
        assert_eq!(
            (found.keys(), found.total),
            (vec!["d05".to_string()], 1),
            "the new word"
        );

        // A delete through one node, and a consistent search through another misses it.
        for i in [0usize, 7, 14, 21, 28] {
            let key = format!("d{i:02}");
            delete_doc(http, &bases[i % 3], "rw", &key).await;
            live.remove(&key);
            let ask = (i + 2) % 3;
            let found = search(
                http,
                &bases[ask],
                "rw",
                &format!("word:fresh{i}x"),
                "&consistent",
                10,
            )
            .await;
            assert_eq!(
                (found.keys(), found.total),
                (vec![], 0),
                "{key} deleted through {}, searched through {}",
                c.name(i % 3),
                c.name(ask)
            );
        }
        let all = search(http, &bases[1], "rw", "*", "&consistent", 100).await;
        assert_eq!(
            (all.key_set(), all.total),
            (live.clone(), 25),
            "after deletes"
        );

        // The default freshness: a new document shows up in a plain search within the
        // commit interval (asserted generously).
        let mut slowest = Duration::ZERO;
        for n in 0..5usize {
            let key = format!("late{n}");
            let word = format!("lately{n}x");
            put_doc(http, &bases[n % 3], "rw", &key, &json!({"word": word})).await;
            let written = Instant::now();
            let ask = &bases[(n + 2) % 3];
            let seen = poll_until(
                Duration::from_secs(5),
                Duration::from_millis(10),
                || async {
                    match try_search(http, ask, "rw", &format!("word:{word}"), "", 10).await {
                        Ok(f) if f.keys() == [key.clone()] && f.total == 1 => Ok(()),
                        other => Err(other),
                    }
                },
            )
            .await;
            let took = written.elapsed();
            assert!(
                seen.is_ok(),
                "{key} not found by a default search within 5 s: {seen:?}"
            );
            assert!(took < Duration::from_secs(5), "{key} took {took:?}");
            slowest = slowest.max(took);
        }
        eprintln!("default search freshness: slowest of 5 new documents seen after {slowest:?}");
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// 2. kill -9 and restart
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_index_survives_kill_9_without_a_full_rebuild() {
    const DOCS: usize = 2_000;
    let mut node = TestNode::start(StartOptions::default().shards(4)).await;
    let node = &mut node;
    bounded(Duration::from_secs(90), async {
        let http = node.http.clone();
        let base = node.http_url();
        let docs: Vec<(String, Value)> = (0..DOCS)
            .map(|i| {
                let (word, group) = (format!("w{i}x"), format!("g{}", i % 10));
                let doc = json!({"word": word, "n": i, "group": group});
                (format!("k{i:04}"), doc)
            })
            .collect();
        put_docs(&http, std::slice::from_ref(&base), "many", &docs, 16).await;
        // Every acknowledged write is in a consistent search (which also commits the index).
        let total = count(&http, &base, "many", "*", "&consistent").await;
        assert_eq!(total, DOCS as u64, "documents before the kill");
        let text = metrics_text(&http, &base).await;
        let indexed_before = metric_of(&text, "trireme_search_documents_indexed_total");
        assert_eq!(
            indexed_before, DOCS as f64,
            "documents put into the index for {DOCS} written"
        );
        assert_eq!(
            metric_of(&text, "trireme_search_index_documents"),
            DOCS as f64,
            "live documents in the index"
        );

        // Changes the index may not have committed when the process dies: 50 documents
        // changed and 25 deleted, then kill -9 right after the last answer.
        let changed: Vec<(String, Value)> = (0..50)
            .map(|i| {
                let (word, group) = (format!("after{i}x"), format!("g{}", i % 10));
                let doc = json!({"word": word, "n": i, "group": group});
                (format!("k{i:04}"), doc)
            })
            .collect();
        let deleted: Vec<String> = (50..75).map(|i| format!("k{i:04}")).collect();
        let ((), ()) = tokio::join!(
            put_docs(&http, std::slice::from_ref(&base), "many", &changed, 4),
            delete_docs(&http, &base, "many", &deleted, 4)
        );
        node.kill9().await;
        let started = Instant::now();
        node.restart().await;
        let base = node.http_url();
        let ready = started.elapsed();

        // The consistent search waits for the start-up check of each shard's part.
        let total = count(&http, &base, "many", "*", "&consistent").await;
        assert_eq!(
            total,
            (DOCS - deleted.len()) as u64,
            "documents after the restart\n{}",
            node.stderr_all()
        );
        let text = metrics_text(&http, &base).await;
        let reindexed = metric_of(&text, "trireme_search_documents_indexed_total");
        eprintln!(
            "restart: ready after {ready:?}; {reindexed} documents indexed again (of {DOCS} before the kill, {indexed_before} indexed then)"
        );
        assert!(
            reindexed < 200.0,
            "the restarted node indexed {reindexed} documents again: a rebuild, not a check\n{}",
            node.stderr_all()
        );
        assert_eq!(
            metric_of(&text, "trireme_search_index_documents"),
            (DOCS - deleted.len()) as f64,
            "live documents in the index after the restart"
        );
        // The last changes are searchable, old words of changed documents and deleted
        // documents are not.
        let found = search(&http, &base, "many", "word:after*", "&consistent", 100).await;
        assert_eq!(found.key_set(), set_of(changed.iter().map(|(k, _)| k.clone())));
        let found = search(&http, &base, "many", "n:[0 TO 74] word:w*", "&consistent", 100).await;
        assert_eq!(
            (found.keys(), found.total),
            (vec![], 0),
            "old words of changed documents, or deleted documents"
        );
        let found = search(&http, &base, "many", "word:w1234x", "&consistent", 10).await;
        assert_eq!(found.keys(), ["k1234"]);
        let g3 = (0..DOCS).filter(|i| i % 10 == 3 && !(50..75).contains(i));
        let found = search(&http, &base, "many", "group:g3", "&consistent", 100).await;
        assert_eq!(found.key_set(), set_of(g3.map(|i| format!("k{i:04}"))));
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// 3. a snapshot installed
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_was_down_gets_a_snapshot_and_rebuilds_its_index() {
    let timing = RaftTiming {
        snapshot_every: Some(50),
        keep_after_snapshot: Some(10),
        ..RaftTiming::default()
    };
    let opts = ClusterOptions {
        shards: 2,
        timing,
        // Log purges and snapshot installs are reported at info level: proof that this test
        // exercises what it says.
        log:
            "info,openraft=error,openraft::engine::handler=info,openraft::raft::api::protocol=info"
                .into(),
        ..ClusterOptions::default()
    };
    let mut c = TestCluster::start(opts).await;
    let c = &mut c;
    bounded(Duration::from_secs(120), async {
        let http = c.http.clone();
        let leaders = c.expect_all_led(CLUSTER_DEADLINE).await;
        // Stop a node that leads as few shards as possible, so the others need no election.
        let counts = c.lead_counts(&leaders);
        let victim = (0..counts.len()).min_by_key(|&i| counts[i]).unwrap();
        let survivors: Vec<usize> = (0..3).filter(|&i| i != victim).collect();
        let survivor_bases: Vec<String> =
            survivors.iter().map(|&i| c.node(i).http_url()).collect();
        let victim_base = c.node(victim).http_url();

        // 40 documents the stopped node holds (and has indexed) when it stops.
        let old: Vec<(String, Value)> = (0..40)
            .map(|i| {
                let doc = json!({"state": "original", "n": i, "word": format!("old{i}x")});
                (format!("o{i:02}"), doc)
            })
            .collect();
        let all_bases: Vec<String> = (0..3).map(|i| c.node(i).http_url()).collect();
        put_docs(&http, &all_bases, "snapdocs", &old, 4).await;
        let old_keys = set_of(old.iter().map(|(k, _)| k.clone()));
        let held = search_until(
            &http,
            &victim_base,
            "snapdocs",
            "state:original",
            "&stale",
            &old_keys,
            Duration::from_secs(10),
        )
        .await;
        assert!(held.is_ok(), "the node to stop never had the old documents indexed: {held:?}");
        let behind = c.view(victim).await.expect("view");
        c.kill9(victim).await;

        // While it is down: 15 documents deleted, 15 changed, 10 left as they were, 300 new.
        let deleted: Vec<String> = (0..15).map(|i| format!("o{i:02}")).collect();
        delete_docs(&http, &survivor_bases[0], "snapdocs", &deleted, 4).await;
        let changed: Vec<(String, Value)> = (15..30)
            .map(|i| {
                let doc = json!({"state": "modified", "n": i, "word": format!("new{i}x")});
                (format!("o{i:02}"), doc)
            })
            .collect();
        put_docs(&http, &survivor_bases, "snapdocs", &changed, 4).await;
        let new: Vec<(String, Value)> = (0..300)
            .map(|i| {
                let doc = json!({"state": "added", "n": 100 + i, "word": format!("add{i}x")});
                (format!("s{i:03}"), doc)
            })
            .collect();
        put_docs(&http, &survivor_bases, "snapdocs", &new, 8).await;
        let led = c.expect_all_led(CLUSTER_DEADLINE).await;
        let mut target = Vec::new();
        for (s, l) in led.iter().enumerate() {
            let applied = c.view(l.node).await.expect("leader's view")[s].applied;
            assert!(
                applied > behind[s].applied + 50 + 10,
                "shard {s}: leader applied {applied}, the stopped node {}: not enough to need a snapshot",
                behind[s].applied
            );
            target.push(applied);
        }
        // Purging follows the snapshot that the writes trigger, in the background: wait
        // for it rather than race it.
        for &i in &survivors {
            let purged = poll_until(Duration::from_secs(30), Duration::from_millis(50), || {
                let seen = c.node(i).stderr_all().contains("purge log");
                async move { if seen { Ok(()) } else { Err(()) } }
            })
            .await;
            assert!(
                purged.is_ok(),
                "{} never purged its log; the snapshot path is not exercised",
                c.name(i)
            );
        }
        // What the survivors answer: the expected documents, refs included.
        let refs_down = snapdocs_refs(&http, &survivor_bases[0], "&consistent")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let expected_all: BTreeSet<String> = (15..40)
            .map(|i| format!("o{i:02}"))
            .chain(new.iter().map(|(k, _)| k.clone()))
            .collect();
        assert_eq!(
            refs_down.keys().cloned().collect::<BTreeSet<_>>(),
            expected_all,
            "the survivors' consistent search"
        );

        c.restart(victim).await;
        let converged = poll_until(Duration::from_secs(30), Duration::from_millis(50), || async {
            match c.view(victim).await {
                Some(v) if v.iter().zip(&target).all(|(s, &t)| s.applied >= t) => Ok(()),
                other => Err(other),
            }
        })
        .await;
        if let Err(last) = converged {
            panic!(
                "{} never reached the leaders' applied indexes {target:?}: {last:?}\n{}",
                c.name(victim),
                c.logs()
            );
        }
        let victim_base = c.node(victim).http_url();
        // Its own replicas answer: every document written while it was down, none of the
        // deleted ones, the changed ones by their new words only.
        let refs = poll_until(Duration::from_secs(30), Duration::from_millis(50), || async {
            match snapdocs_refs(&http, &victim_base, "&stale").await {
                Ok(refs) if refs == refs_down => Ok(refs),
                Ok(refs) => Err(format!(
                    "{} documents, {} missing, {} unexpected, {} with another ref",
                    refs.len(),
                    refs_down.keys().filter(|k| !refs.contains_key(*k)).count(),
                    refs.keys().filter(|k| !refs_down.contains_key(*k)).count(),
                    refs.iter()
                        .filter(|(k, r)| refs_down.get(*k).is_some_and(|d| d != *r))
                        .count()
                )),
                Err(e) => Err(e),
            }
        })
        .await;
        if let Err(e) = refs {
            panic!(
                "stale searches through the caught-up {} never answered what the survivors do: {e}\n{}",
                c.name(victim),
                c.logs()
            );
        }
        assert_eq!(
            count(&http, &victim_base, "snapdocs", "*", "&stale").await,
            expected_all.len() as u64,
            "total_count of * through the caught-up node"
        );
        let cases: Vec<(&str, BTreeSet<String>)> = vec![
            (
                "state:added AND n:[300 TO 399]",
                set_of((200..300).map(|i| format!("s{i:03}"))),
            ),
            (
                "state:modified",
                set_of(changed.iter().map(|(k, _)| k.clone())),
            ),
            ("state:original", set_of((30..40).map(|i| format!("o{i:02}")))),
            ("n:[0 TO 14]", BTreeSet::new()),
            ("word:old*", set_of((30..40).map(|i| format!("o{i:02}")))),
            ("word:new20x", set_of(["o20"])),
            ("word:old20x", BTreeSet::new()),
            ("word:old3x", BTreeSet::new()),
            ("add299x", set_of(["s299"])),
            ("n:[100 TO 109]", set_of((0..10).map(|i| format!("s{i:03}")))),
        ];
        for (query, expected) in cases {
            let found = search(&http, &victim_base, "snapdocs", query, "&stale", 100).await;
            assert_eq!(
                (found.key_set(), found.total),
                (expected.clone(), expected.len() as u64),
                "stale {query:?} through the caught-up {}",
                c.name(victim)
            );
        }
        let log = c.node(victim).stderr_log();
        assert!(
            log.contains("install_full_snapshot"),
            "{} caught up without installing a snapshot:\n{}",
            c.name(victim),
            c.logs()
        );
        // Everything it learned while down went into its index (by the snapshot's check, or
        // by the log entries after the snapshot).
        let text = metrics_text(&http, &victim_base).await;
        let indexed = metric_of(&text, "trireme_search_documents_indexed_total");
        assert!(
            indexed >= (changed.len() + new.len()) as f64,
            "{} indexed {indexed} documents since its restart, fewer than the {} written while it was down",
            c.name(victim),
            changed.len() + new.len()
        );
    })
    .await;
}

/// Every document of `snapdocs` with `n` in 0..400 through `base` in `mode`, by key with its
/// ref, read in four searches of at most 100 matches each: each a single page, so that what
/// this answers does not depend on how pages of equal scores are cut.
async fn snapdocs_refs(
    http: &reqwest::Client,
    base: &str,
    mode: &str,
) -> Result<BTreeMap<String, u64>, String> {
    let mut refs = BTreeMap::new();
    for low in [0, 100, 200, 300] {
        let query = format!("n:[{low} TO {}]", low + 99);
        let found = try_search(http, base, "snapdocs", &query, mode, 100).await?;
        if found.total > 100 || found.hits.len() as u64 != found.total {
            return Err(format!(
                "{query}{mode} through {base}: {} results of {}",
                found.hits.len(),
                found.total
            ));
        }
        for hit in found.hits {
            if refs.insert(hit.key.clone(), hit.reference).is_some() {
                return Err(format!("{query}{mode} through {base}: {} twice", hit.key));
            }
        }
    }
    Ok(refs)
}

// ---------------------------------------------------------------------------------------
// 4. every node, and a leader change
// ---------------------------------------------------------------------------------------

/// A document whose relevance for `text:alpha OR text:beta` depends on `i` (and repeats
/// every 60, so that some tie).
fn ranked(i: usize) -> Value {
    let mut words = vec!["alpha"; i % 4 + 1];
    words.extend(std::iter::repeat_n("beta", i % 3));
    words.extend(std::iter::repeat_n("filler", i % 5));
    json!({"text": words.join(" "), "i": i})
}

/// Waits until the running nodes are quiet: every replica of every shard has applied the
/// same log index, and every node's search index covers what it applied (lag 0).
async fn until_settled(c: &TestCluster) {
    let settled = poll_until(CLUSTER_DEADLINE, Duration::from_millis(50), || async {
        let views = c.views().await;
        let mut applied: BTreeMap<u32, BTreeSet<u64>> = BTreeMap::new();
        for (i, view) in &views {
            let view = view
                .as_ref()
                .ok_or_else(|| format!("no view from {}", c.name(*i)))?;
            for shard in view.iter().filter(|s| s.role.is_some()) {
                applied
                    .entry(shard.shard)
                    .or_default()
                    .insert(shard.applied);
            }
        }
        if applied.values().any(|a| a.len() > 1) {
            return Err(format!(
                "replicas at different applied indexes: {applied:?}"
            ));
        }
        for i in c.running() {
            let text = metrics_text(&c.http, &c.node(i).http_url()).await;
            let lagging: Vec<&str> = text
                .lines()
                .filter(|l| l.starts_with("trireme_search_index_lag_entries{"))
                .filter(|l| !l.ends_with(" 0"))
                .collect();
            if !lagging.is_empty() {
                return Err(format!("{} lags: {lagging:?}", c.name(i)));
            }
        }
        Ok(())
    })
    .await;
    if let Err(e) = settled {
        panic!("the cluster never settled: {e}\n{}", c.logs());
    }
}

/// Where two answers differ: their totals, and each position whose result differs.
fn differences(a: &Found, b: &Found) -> String {
    let mut out = format!(
        "totals {} and {}, {} and {} results",
        a.total,
        b.total,
        a.hits.len(),
        b.hits.len()
    );
    for (n, (x, y)) in a.hits.iter().zip(&b.hits).enumerate() {
        if x != y {
            out.push_str(&format!("\n  #{n}: {x:?} / {y:?}"));
        }
    }
    out
}

/// Where results are out of relevance order (scores never rise, equal scores go by key, no
/// score is negative), if anywhere.
fn misranked(found: &Found) -> Option<String> {
    found.hits.windows(2).find_map(|pair| {
        let (a, b) = (&pair[0], &pair[1]);
        let ordered = a.score > b.score || (a.score == b.score && a.key < b.key);
        // `*` and pure negations have no relevance: they score 0, ordered by key.
        (!ordered || a.score < 0.0).then(|| format!("{a:?} before {b:?}"))
    })
}

/// Results in relevance order: see [`misranked`].
fn assert_ranked(found: &Found, what: &str) {
    if let Some(problem) = misranked(found) {
        panic!("{what}: {problem}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn searches_agree_through_every_node_and_across_a_leader_change() {
    // Leaders stay where they are unless one dies: every consistent search below is served
    // by the same leaders, so even the scores must agree.
    let mut c = TestCluster::start(ClusterOptions {
        balance_leaders: false,
        ..ClusterOptions::default().shards(3)
    })
    .await;
    let c = &mut c;
    bounded(Duration::from_secs(120), async {
        let http = c.http.clone();
        let leaders = c.expect_all_led(CLUSTER_DEADLINE).await;
        let bases: Vec<String> = (0..3).map(|i| c.node(i).http_url()).collect();
        let docs: Vec<(String, Value)> = (0..90).map(|i| (format!("a{i:02}"), ranked(i))).collect();
        put_docs(&http, &bases, "agree", &docs, 6).await;
        let mut all = set_of(docs.iter().map(|(k, _)| k.clone()));
        let query = "text:alpha OR text:beta";
        // Scores come from the serving leader's index, whose statistics cover every replica
        // on that node: only once every replica has applied and indexed the writes do they
        // stay put, and may be compared exactly.
        until_settled(c).await;

        let mut answers = Vec::new();
        for base in &bases {
            let found = search(&http, base, "agree", query, "&consistent", 7).await;
            assert_eq!((found.key_set(), found.total), (all.clone(), 90), "{base}");
            assert_eq!(found.hits.len(), 90, "no result twice across pages");
            assert_ranked(&found, base);
            answers.push(found);
        }
        for (i, found) in answers.iter().enumerate().skip(1) {
            assert!(
                found == &answers[0],
                "{} and {} answer differently (leaders {:?}): {}",
                c.name(0),
                c.name(i),
                c.leaderships().await,
                differences(&answers[0], found)
            );
        }
        // Some scores differ (the ranking means something) and some tie (broken by key).
        let scores: BTreeSet<u64> = answers[0].hits.iter().map(|h| h.score.to_bits()).collect();
        assert!(scores.len() > 5, "only {} distinct scores", scores.len());
        assert!(scores.len() < 90, "no tie among 90 results");

        // The node leading the most shards dies.
        let counts = c.lead_counts(&leaders);
        let victim = (0..counts.len()).max_by_key(|&i| counts[i]).unwrap();
        let survivors: Vec<usize> = (0..3).filter(|&i| i != victim).collect();
        c.kill9(victim).await;
        c.expect_all_led(CLUSTER_DEADLINE).await;
        for &i in &survivors {
            search_until(
                &http,
                &bases[i],
                "agree",
                "*",
                "&consistent",
                &all,
                CLUSTER_DEADLINE,
            )
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "consistent search through {} after {} (leader of {} shards) died: {e}\n{}",
                    c.name(i),
                    c.name(victim),
                    counts[victim],
                    c.logs()
                )
            });
        }
        // Writes while it is down are found at once through the other survivor.
        for n in 0..10usize {
            let key = format!("b{n}");
            let doc = json!({"text": "alpha gamma", "i": 100 + n});
            put_doc(&http, &bases[survivors[n % 2]], "agree", &key, &doc).await;
            all.insert(key.clone());
            let found = search(
                &http,
                &bases[survivors[(n + 1) % 2]],
                "agree",
                "text:gamma",
                "&consistent",
                100,
            )
            .await;
            assert!(
                found.key_set().contains(&key) && found.total == n as u64 + 1,
                "{key} after the failover: {found:?}"
            );
        }
        until_settled(c).await;
        let before = c.leaderships().await;
        let a = search(
            &http,
            &bases[survivors[0]],
            "agree",
            query,
            "&consistent",
            7,
        )
        .await;
        let b = search(
            &http,
            &bases[survivors[1]],
            "agree",
            query,
            "&consistent",
            7,
        )
        .await;
        assert_eq!((a.key_set(), a.total), (all.clone(), 100));
        assert_ranked(&a, "after the failover");
        let again = search(
            &http,
            &bases[survivors[0]],
            "agree",
            query,
            "&consistent",
            7,
        )
        .await;
        let after = c.leaderships().await;
        assert!(
            a == b && a == again,
            "the survivors answer differently (leaders before {before:?}, after {after:?}):\n{} and {}: {}\n{} and {} again: {}",
            c.name(survivors[0]),
            c.name(survivors[1]),
            differences(&a, &b),
            c.name(survivors[0]),
            c.name(survivors[0]),
            differences(&a, &again)
        );

        // Back again: it answers like the others, and its own replicas catch up.
        c.restart(victim).await;
        c.expect_all_led(CLUSTER_DEADLINE).await;
        let victim_base = c.node(victim).http_url();
        search_until(
            &http,
            &victim_base,
            "agree",
            "*",
            "&stale",
            &all,
            CLUSTER_DEADLINE,
        )
        .await
        .unwrap_or_else(|e| panic!("stale search through the restarted node: {e}"));
        until_settled(c).await;
        let mut answers = Vec::new();
        for i in 0..3 {
            let base = c.node(i).http_url();
            let found = search(&http, &base, "agree", query, "&consistent", 7).await;
            assert_eq!((found.key_set(), found.total), (all.clone(), 100), "{base}");
            answers.push(found);
        }
        for (i, found) in answers.iter().enumerate().skip(1) {
            assert!(
                found == &answers[0],
                "after the restart, {} and {} answer differently (leaders {:?}): {}",
                c.name(0),
                c.name(i),
                c.leaderships().await,
                differences(&answers[0], found)
            );
        }
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// 5. refused queries and pages, large documents
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_queries_and_pages_are_refused_and_the_node_keeps_serving() {
    let node = TestNode::start(StartOptions::default().shards(4)).await;
    bounded(Duration::from_secs(90), async {
        let (http, base) = (&node.http, node.http_url());
        let first = [
            "alice", "bernice", "janice", "bob", "carol", "ice", "dave", "eunice",
        ];
        let last = ["smith", "jones", "doe", "brown", "rice"];
        let docs: Vec<(String, Value)> = (0..300)
            .map(|i| {
                let name = format!("{} {}", first[i % first.len()], last[i % last.len()]);
                (format!("p{i:03}"), json!({"name": name, "n": i}))
            })
            .collect();
        put_docs(http, std::slice::from_ref(&base), "people", &docs, 8).await;
        assert_eq!(count(http, &base, "people", "*", "&consistent").await, 300);

        let get = |query: String| {
            let url = format!("{base}/v0/people?{query}");
            async move { http.get(url).send().await.expect("GET search") }
        };
        let q = |text: &str| format!("query={}", url_encode(text));
        let long = "alpha ".repeat(1_400);
        assert!(long.len() > 8 * 1024);
        let deep = format!("{}alpha{}", "(".repeat(40), ")".repeat(40));
        let refused = [
            (q("(name:alice OR name:bob"), "unbalanced parentheses"),
            (q("name:alice)"), "unbalanced parentheses"),
            (q(&deep), "nested deeper than 32"),
            (q(&long), "bytes long"),
            (q("name:alice~5"), "0, 1 or 2"),
            (q("/ali.e/"), "regular expressions"),
            (q("name:/ali.e/"), "regular expressions"),
            (q("\"alice smith\"~2"), "proximity"),
            (q("n:[1 TO"), "range"),
            (q("[1 TO"), "range"),
            (q("n:[1 2]"), "TO is missing"),
            (format!("{}&offset=10001", q("*")), "offset"),
            (format!("{}&limit=101", q("*")), "limit"),
            (format!("{}&limit=0", q("*")), "limit"),
            (format!("{}&consistent&stale", q("*")), "stale"),
        ];
        for (query, construct) in refused {
            let resp = get(query.clone()).await;
            let message = expect_error(resp, StatusCode::BAD_REQUEST, "invalid_argument").await;
            let shown: String = query.chars().take(80).collect();
            assert!(message.contains(construct), "{shown}: {message:.300}");
        }
        // The deepest nesting allowed and the longest query allowed are read.
        let deepest = format!("{}name:alice{}", "(".repeat(32), ")".repeat(32));
        let found = search(http, &base, "people", &deepest, "", 100).await;
        assert_eq!(found.total, 300 / first.len() as u64 + 1, "{deepest}");
        let longest = format!("name:alice{}", " OR name:alice".repeat(580));
        assert!(longest.len() <= 8 * 1024, "{}", longest.len());
        let found = search(http, &base, "people", &longest, "", 100).await;
        assert_eq!(
            found.total,
            300 / first.len() as u64 + 1,
            "the longest query allowed"
        );

        // A leading wildcard is answered (over every word of the field).
        let found = search(http, &base, "people", "name:*ice", "&consistent", 100).await;
        let expected: BTreeSet<String> = (0..300)
            .filter(|&i| {
                first[i % first.len()].ends_with("ice") || last[i % last.len()].ends_with("ice")
            })
            .map(|i| format!("p{i:03}"))
            .collect();
        assert_eq!(
            (found.key_set(), found.total),
            (expected.clone(), expected.len() as u64)
        );
        assert!(expected.len() > 150 && expected.len() < 300);

        // A document with 2,000 fields, and one nested 100 objects deep: both accepted and
        // searchable, by field and without one.
        let mut wide = serde_json::Map::new();
        for f in 0..2_000 {
            wide.insert(format!("f{f}"), json!(format!("wide{f} common")));
        }
        let wide = Value::Object(wide);
        put_doc(http, &base, "big", "wide", &wide).await;
        let mut nested = json!({"leaf": "deepword", "n": 7});
        for _ in 1..100 {
            nested = json!({"l": nested});
        }
        put_doc(http, &base, "big", "deep", &nested).await;
        let got: Value = http
            .get(format!("{base}/v0/big/deep"))
            .send()
            .await
            .expect("GET deep")
            .json()
            .await
            .expect("JSON");
        assert_eq!(got, nested, "the deep document reads back");
        let got: Value = http
            .get(format!("{base}/v0/big/wide"))
            .send()
            .await
            .expect("GET wide")
            .json()
            .await
            .expect("JSON");
        assert_eq!(got, wide, "the wide document reads back");
        let path = format!("{}leaf", "l.".repeat(99));
        for (query, expected) in [
            ("f1999:wide1999".to_string(), vec!["wide"]),
            ("f0:wide0 f1000:common".to_string(), vec!["wide"]),
            ("wide1234".to_string(), vec!["wide"]),
            ("f1999:wide0".to_string(), vec![]),
            (format!("{path}:deepword"), vec!["deep"]),
            (format!("value.{path}:deepword"), vec!["deep"]),
            ("deepword".to_string(), vec!["deep"]),
            (format!("{}n:[5 TO 9]", "l.".repeat(99)), vec!["deep"]),
            (format!("{}leaf:deepword", "l.".repeat(98)), vec![]),
            ("*".to_string(), vec!["deep", "wide"]),
        ] {
            let found = search(http, &base, "big", &query, "&consistent", 10).await;
            let mut keys = found.keys();
            keys.sort();
            assert_eq!(keys, expected, "{query:.60}");
            assert_eq!(found.total, expected.len() as u64, "{query:.60}");
        }
        // Nested beyond what the JSON reader takes (128): refused, nothing written.
        let mut too_deep = json!({"leaf": "x"});
        for _ in 1..200 {
            too_deep = json!({"l": too_deep});
        }
        let resp = http
            .put(format!("{base}/v0/big/toodeep"))
            .json(&too_deep)
            .send()
            .await
            .expect("PUT too deep");
        let message = expect_error(resp, StatusCode::BAD_REQUEST, "invalid_argument").await;
        assert!(message.contains("JSON"), "{message}");
        let resp = http.get(format!("{base}/v0/big/toodeep")).send().await;
        assert_eq!(resp.expect("GET").status(), StatusCode::NOT_FOUND);

        // After all that, the node still searches.
        let found = search(http, &base, "people", "name:alice", "&consistent", 100).await;
        assert_eq!(found.total, 300 / first.len() as u64 + 1);
        let found = search(http, &base, "people", "name:bob -name:jones", "", 100).await;
        let expected: BTreeSet<String> = (0..300)
            .filter(|&i| i % first.len() == 3 && i % last.len() != 1)
            .map(|i| format!("p{i:03}"))
            .collect();
        assert_eq!(found.key_set(), expected);
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// 5b. sorting by field
// ---------------------------------------------------------------------------------------

/// The age a sorted test document holds, if any: whole for most, fractional for some,
/// absent for every seventh.
fn sorted_age(i: usize) -> Option<f64> {
    match i % 7 {
        0 => None,
        3 => Some((i % 11) as f64 + 0.5),
        _ => Some((i % 11) as f64),
    }
}

/// Sorted test documents `a` and `b` compared by age as `sort=age` orders them: documents
/// without an age last in either direction, no tie broken.
fn by_age(a: usize, b: usize, descending: bool) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    match (sorted_age(a), sorted_age(b)) {
        (Some(x), Some(y)) if descending => y.total_cmp(&x),
        (Some(x), Some(y)) => x.total_cmp(&y),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

/// The keys of sorted test documents, in the order given.
fn sorted_keys(docs: &[usize]) -> Vec<String> {
    docs.iter().map(|i| format!("s{i:02}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sorted_searches_page_in_field_order_across_shards() {
    let node = TestNode::start(StartOptions::default().shards(4)).await;
    bounded(Duration::from_secs(60), async {
        let (http, base) = (&node.http, node.http_url());
        let teams = ["red", "blue", "Green"];
        let docs: Vec<(String, Value)> = (0..80)
            .map(|i| {
                let mut doc = json!({"team": teams[i % 3], "n": i, "fifth": i % 5 == 0});
                if let Some(age) = sorted_age(i) {
                    doc["age"] = json!(age);
                }
                (format!("s{i:02}"), doc)
            })
            .collect();
        put_docs(http, std::slice::from_ref(&base), "sorted", &docs, 4).await;

        // Oldest first; documents without an age last; ties by key. Across four shards and
        // pages of 7, so that shards' answers are merged and cut at offsets.
        let mut expected: Vec<usize> = (0..80).collect();
        expected.sort_by(|&a, &b| by_age(a, b, true).then(a.cmp(&b)));
        let expected = sorted_keys(&expected);
        let found = search(
            http,
            &base,
            "sorted",
            "*",
            "&consistent&sort=value.age:desc",
            7,
        )
        .await;
        assert_eq!(found.keys(), expected, "sorted by age, descending");
        assert_eq!(found.total, 80);

        // Two fields: team in byte order ("Green" before "blue"), then age ascending.
        let mut expected: Vec<usize> = (0..80).filter(|i| i % 5 != 0).collect();
        expected.sort_by(|&a, &b| {
            teams[a % 3]
                .cmp(teams[b % 3])
                .then(by_age(a, b, false))
                .then(a.cmp(&b))
        });
        let expected = sorted_keys(&expected);
        let found = search(
            http,
            &base,
            "sorted",
            "fifth:false",
            "&sort=team,age:asc",
            9,
        )
        .await;
        assert_eq!(found.keys(), expected, "sorted by team, then age");

        // The next link carries the sort.
        let first: Value = http
            .get(format!("{base}/v0/sorted?query=*&sort=age:desc&limit=5"))
            .send()
            .await
            .expect("GET sorted")
            .json()
            .await
            .expect("page");
        let next = first["next"].as_str().expect("next link");
        assert!(next.contains("sort=age%3Adesc"), "{next}");
        let second: Value = http
            .get(format!("{base}{next}"))
            .send()
            .await
            .expect("GET next")
            .json()
            .await
            .expect("page");
        let second_keys: Vec<&str> = second["results"]
            .as_array()
            .expect("results")
            .iter()
            .filter_map(|r| r["path"]["key"].as_str())
            .collect();
        let all = search(http, &base, "sorted", "*", "&sort=age:desc", 100).await;
        assert_eq!(
            second_keys,
            all.keys()[5..10].to_vec(),
            "the page after {next}"
        );

        // A field of two types among the matches: refused, naming both; narrowed, it sorts.
        put_doc(http, &base, "mixed", "a", &json!({"x": 1, "k": "num"})).await;
        put_doc(http, &base, "mixed", "b", &json!({"x": "one", "k": "text"})).await;
        put_doc(http, &base, "mixed", "c", &json!({"x": 2, "k": "num"})).await;
        let resp = http
            .get(format!("{base}/v0/mixed?query=*&sort=x&consistent"))
            .send()
            .await
            .expect("GET mixed");
        let message = expect_error(resp, StatusCode::BAD_REQUEST, "invalid_argument").await;
        assert!(
            message.contains("numbers") && message.contains("strings") && message.contains("\"x\""),
            "{message}"
        );
        let found = search(http, &base, "mixed", "k:num", "&sort=x:desc", 10).await;
        assert_eq!(found.keys(), vec!["c", "a"]);

        // Sort parameters that do not read: a 400 naming the problem.
        for (sort, says) in [
            ("age:up", "neither asc nor desc"),
            ("", "empty field"),
            ("a,b,c,d,e", "more than 4"),
            ("na*me", "cannot have"),
        ] {
            let resp = http
                .get(format!(
                    "{base}/v0/sorted?query=*&sort={}",
                    url_encode(sort)
                ))
                .send()
                .await
                .expect("GET bad sort");
            let message = expect_error(resp, StatusCode::BAD_REQUEST, "invalid_argument").await;
            assert!(message.contains(says), "sort={sort:?}: {message}");
        }
        let found = search(http, &base, "sorted", "team:red", "", 100).await;
        assert_eq!(found.total, 27, "the node still searches");
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// 6. metrics
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_show_the_index() {
    let node = TestNode::start(StartOptions::default().shards(3)).await;
    bounded(Duration::from_secs(60), async {
        let (http, base) = (&node.http, node.http_url());
        let text = metrics_text(http, &base).await;
        for name in [
            "trireme_search_index_documents",
            "trireme_search_index_bytes",
            "trireme_search_documents_indexed_total",
            "trireme_search_index_catch_up_checks_total",
            "trireme_search_shard_seconds_count",
        ] {
            assert!(metric(&text, name).is_some(), "no {name} at start:\n{text}");
        }
        assert_eq!(metric_of(&text, "trireme_search_index_documents"), 0.0);
        assert_eq!(
            metric_of(&text, "trireme_search_documents_indexed_total"),
            0.0
        );
        let searches_before = metric_of(&text, "trireme_search_shard_seconds_count");

        let docs: Vec<(String, Value)> = (0..40)
            .map(|i| (format!("m{i:02}"), json!({"n": i, "kind": "metric"})))
            .collect();
        put_docs(http, std::slice::from_ref(&base), "metered", &docs, 4).await;
        let gone: Vec<String> = (0..10).map(|i| format!("m{i:02}")).collect();
        delete_docs(http, &base, "metered", &gone, 2).await;
        // Not a document, and a JSON object at a key with no collection: not indexed.
        assert!(node.put("metered/raw", "plain text").await);
        assert!(node.put("nocollection", r#"{"kind":"metric"}"#).await);
        let found = search(http, &base, "metered", "kind:metric", "&consistent", 100).await;
        assert_eq!(found.total, 30);

        let text = metrics_text(http, &base).await;
        assert_eq!(
            metric_of(&text, "trireme_search_index_documents"),
            30.0,
            "live documents once a consistent search ran"
        );
        assert_eq!(
            metric_of(&text, "trireme_search_documents_indexed_total"),
            40.0,
            "documents put into the index"
        );
        assert!(metric_of(&text, "trireme_search_index_bytes") > 0.0);
        let searches = metric_of(&text, "trireme_search_shard_seconds_count");
        assert!(
            searches >= searches_before + 3.0,
            "a search of 3 shards counted {} shard searches",
            searches - searches_before
        );
        assert!(metric_of(&text, "trireme_search_shard_seconds_sum") > 0.0);
        assert!(
            text.contains("# TYPE trireme_search_shard_seconds histogram"),
            "{text}"
        );
        // One lag series per shard; each falls to 0 once the index has committed.
        let lag_shards: BTreeSet<String> = text
            .lines()
            .filter_map(|l| l.strip_prefix("trireme_search_index_lag_entries{shard=\""))
            .filter_map(|l| Some(l.split('"').next()?.to_string()))
            .collect();
        assert_eq!(lag_shards, set_of(["0", "1", "2"]), "{text}");
        let settled = poll_until(
            Duration::from_secs(5),
            Duration::from_millis(20),
            || async {
                let text = metrics_text(http, &base).await;
                let lags: Vec<f64> = (0..3)
                    .map(|s| {
                        metric_of(
                            &text,
                            &format!("trireme_search_index_lag_entries{{shard=\"{s}\"}}"),
                        )
                    })
                    .collect();
                if lags.iter().all(|&l| l == 0.0) {
                    Ok(())
                } else {
                    Err(lags)
                }
            },
        )
        .await;
        assert_eq!(settled, Ok(()), "lag entries never fell to 0");
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// 7. random queries against a plain scan
// ---------------------------------------------------------------------------------------

/// SplitMix64: a small deterministic generator, so a failing seed replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `low..high`.
    fn range(&mut self, low: i64, high: i64) -> i64 {
        low + i64::try_from(self.next() % u64::try_from(high - low).expect("a range"))
            .expect("small")
    }

    fn index(&mut self, len: usize) -> usize {
        usize::try_from(self.next() % len as u64).expect("small")
    }

    fn chance(&mut self, p: f64) -> bool {
        ((self.next() >> 11) as f64 / (1u64 << 53) as f64) < p
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.index(items.len())]
    }
}

const WORDS: &[&str] = &[
    "alpha", "beta", "gamma", "delta", "alps", "alpine", "bet", "gammon", "omega", "zeta",
];
const CITIES: &[&str] = &["Oxford", "Paris", "New York", "São Paulo", "oslo"];

fn random_words(rng: &mut Rng, n: i64) -> String {
    let words: Vec<&str> = (0..n).map(|_| rng.pick(WORDS)).collect();
    words.join(if rng.chance(0.5) { " " } else { "-" })
}

/// A random document: name (words), age (integer or not), active, created (a date, with a
/// time or not), tags, address {city, zip}, a note of an odd shape, rank (one word).
fn random_document(rng: &mut Rng) -> Value {
    let mut doc = serde_json::Map::new();
    if rng.chance(0.8) {
        let n = rng.range(1, 4);
        doc.insert("name".into(), json!(random_words(rng, n)));
    }
    if rng.chance(0.7) {
        let age = if rng.chance(0.8) {
            json!(rng.range(0, 60))
        } else {
            json!(rng.range(0, 600) as f64 / 10.0)
        };
        doc.insert("age".into(), age);
    }
    if rng.chance(0.5) {
        doc.insert("active".into(), json!(rng.chance(0.5)));
    }
    if rng.chance(0.6) {
        let (day, month) = (rng.range(1, 28), rng.range(1, 13));
        let text = if rng.chance(0.5) {
            format!("2024-{month:02}-{day:02}")
        } else {
            format!(
                "2024-{month:02}-{day:02}T{:02}:30:00+02:00",
                rng.range(0, 24)
            )
        };
        doc.insert("created".into(), json!(text));
    }
    if rng.chance(0.6) {
        let n = rng.range(0, 4);
        let tags: Vec<Value> = (0..n).map(|_| json!(rng.pick(WORDS))).collect();
        doc.insert("tags".into(), Value::Array(tags));
    }
    if rng.chance(0.6) {
        let city = rng.pick(CITIES);
        doc.insert(
            "address".into(),
            json!({"city": city, "zip": rng.range(10, 20)}),
        );
    }
    if rng.chance(0.5) {
        let notes = [
            json!(null),
            json!(""),
            json!("!!"),
            json!("ok"),
            json!([null]),
            json!({}),
        ];
        doc.insert("note".into(), notes[rng.index(notes.len())].clone());
    }
    if rng.chance(0.3) {
        doc.insert("rank".into(), json!(random_words(rng, 1)));
    }
    Value::Object(doc)
}

fn random_leaf(rng: &mut Rng) -> String {
    let field = rng.pick(&["name", "tags", "rank", "address.city", "value.name"]);
    let w = |rng: &mut Rng| rng.pick(WORDS).to_string();
    match rng.range(0, 17) {
        0 => format!("{field}:{}", w(rng)),
        1 => w(rng),
        2 => format!("{field}:\"{} {}\"", w(rng), w(rng)),
        3 => format!("{field}:{}*", &w(rng)[..2]),
        4 => format!("{field}:{}?{}", &w(rng)[..1], &w(rng)[2..]),
        5 => format!("{field}:{}~{}", w(rng), rng.range(0, 3)),
        6 => format!(
            "{}:*",
            rng.pick(&["name", "age", "created", "address", "note", "tags"])
        ),
        7 => format!("age:[{} TO {}]", rng.range(0, 30), rng.range(20, 60)),
        8 => format!(
            "age:{}{}",
            rng.pick(&[">", ">=", "<", "<="]),
            rng.range(0, 600) as f64 / 10.0
        ),
        9 => format!(
            "created:{{2024-{:02}-01 TO 2024-{:02}-15T12:00:00Z]",
            rng.range(1, 7),
            rng.range(6, 13)
        ),
        10 => format!("rank:[{} TO {}]", w(rng), w(rng)),
        11 => format!("active:{}", rng.chance(0.5)),
        12 => format!("age:{}", rng.range(0, 60)),
        13 => format!("address.zip:[{} TO *]", rng.range(10, 20)),
        14 => format!("address.city:\"{}\"", rng.pick(CITIES)),
        15 => "*".into(),
        _ => format!("{}~", w(rng)),
    }
}

fn random_query(rng: &mut Rng, depth: u32) -> String {
    if depth == 0 || rng.chance(0.4) {
        return random_leaf(rng);
    }
    let a = random_query(rng, depth - 1);
    let b = random_query(rng, depth - 1);
    match rng.range(0, 6) {
        0 => format!("{a} {b}"),
        1 => format!("({a}) OR ({b})"),
        2 => format!("{a} AND NOT ({b})"),
        3 => format!("-({a})"),
        4 => format!("+({a}) -({b})"),
        _ => format!("({a})^2 || {b}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_queries_over_http_match_a_plain_scan() {
    const DOCS: usize = 300;
    const QUERIES: usize = 150;
    let c = TestCluster::start(ClusterOptions::default().shards(3)).await;
    bounded(Duration::from_secs(120), async {
        c.expect_all_led(CLUSTER_DEADLINE).await;
        let http = &c.http;
        let bases: Vec<String> = (0..3).map(|i| c.node(i).http_url()).collect();
        let mut rng = Rng(19);
        let docs: Vec<(String, Value)> = (0..DOCS)
            .map(|i| (format!("r{i:03}"), random_document(&mut rng)))
            .collect();
        // Written in a random order: the index's own order is not the keys' order.
        let mut order = docs.clone();
        for i in (1..order.len()).rev() {
            let j = rng.index(i + 1);
            order.swap(i, j);
        }
        put_docs(http, &bases, "random", &order, 8).await;
        // A neighbour collection that must never show up.
        put_doc(http, &bases[0], "randomx", "r000", &docs[0].1).await;
        // Quiet, so that scores hold still while a query's pages are read (see
        // `until_settled`).
        until_settled(&c).await;

        let mut queries: Vec<String> = ["*", "-name:alpha", "name:* OR age:*", "tags:*"]
            .iter()
            .map(|q| q.to_string())
            .collect();
        while queries.len() < QUERIES {
            queries.push(random_query(&mut rng, 3));
        }
        // Every disagreement is collected, so that a failure shows all the queries at fault
        // and what kind of fault: a wrong total_count (the index matches other documents than
        // the scan), or the right total but pages that repeat or skip results.
        let (mut selective, mut paged) = (0, 0);
        let mut wrong = Vec::new();
        for (n, text) in queries.iter().enumerate() {
            let parsed = trireme_search::parse(text)
                .unwrap_or_else(|e| panic!("the generator wrote a bad query {text:?}: {e}"));
            let expected: BTreeSet<String> = docs
                .iter()
                .filter(|(_, d)| trireme_search::matches(&parsed, d))
                .map(|(k, _)| k.clone())
                .collect();
            let via = rng.index(bases.len());
            let found = search(http, &bases[via], "random", text, "&consistent", 100).await;
            let got = found.key_set();
            if found.total != expected.len() as u64 {
                wrong.push(format!(
                    "query {n} {text:?} through {}: total_count {} where the scan finds {} (parsed {parsed:?})",
                    c.name(via),
                    found.total,
                    expected.len()
                ));
            }
            if got != expected || found.hits.len() != got.len() {
                wrong.push(format!(
                    "query {n} {text:?} through {}: {} results over {} pages, {} repeated, missing {:?}, unexpected {:?}",
                    c.name(via),
                    found.hits.len(),
                    found.total.div_ceil(100),
                    found.hits.len() - got.len(),
                    expected.difference(&got).collect::<Vec<_>>(),
                    got.difference(&expected).collect::<Vec<_>>()
                ));
            }
            if let Some(problem) = misranked(&found) {
                wrong.push(format!(
                    "query {n} {text:?} through {}: out of order: {problem}",
                    c.name(via)
                ));
            }
            selective += usize::from(!expected.is_empty() && expected.len() < DOCS);
            paged += usize::from(expected.len() > 100);
        }
        eprintln!("{QUERIES} random queries: {selective} selective, {paged} over several pages");
        assert!(
            wrong.is_empty(),
            "{} disagreements between the searches and the scan:\n{}",
            wrong.len(),
            wrong.join("\n")
        );
        assert!(selective > QUERIES / 3, "only {selective} selective queries");
        assert!(paged >= 4, "only {paged} queries with several pages");
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// 8. pages of equal scores
// ---------------------------------------------------------------------------------------

/// Results of equal score go by key, across pages too: asked for page after page (by
/// `offset`, as the `next` links do), they neither repeat nor skip a document, also when a
/// shard holds more matches than a page. One shard, and documents written in the reverse of
/// their keys' order, so that the index holds them in the opposite order to the keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_of_equal_scores_neither_repeat_nor_skip() {
    let node = TestNode::start(StartOptions::default().shards(1)).await;
    bounded(Duration::from_secs(60), async {
        let (http, base) = (&node.http, node.http_url());
        for i in (0..150).rev() {
            let doc = json!({"kind": "same", "n": i});
            put_doc(http, &base, "tied", &format!("k{i:03}"), &doc).await;
        }
        let every: Vec<String> = (0..150).map(|i| format!("k{i:03}")).collect();
        for (query, limit) in [("kind:same", 100), ("*", 100), ("kind:same", 40)] {
            let found = search(http, &base, "tied", query, "&consistent", limit).await;
            assert_eq!(found.total, 150, "{query}");
            let scores: BTreeSet<u64> = found.hits.iter().map(|h| h.score.to_bits()).collect();
            assert_eq!(scores.len(), 1, "{query}: every score the same: {scores:?}");
            let keys = found.keys();
            let repeated = keys.len() - found.key_set().len();
            let missing: Vec<&String> = every.iter().filter(|k| !keys.contains(k)).collect();
            assert!(
                keys == every,
                "{query} in pages of {limit}: {} results, {repeated} repeated, {} missing {missing:?}; first of each page: {:?}",
                keys.len(),
                missing.len(),
                keys.iter().step_by(limit as usize).collect::<Vec<_>>()
            );
        }
        // One page as large as every match is in key order.
        let found = search(http, &base, "tied", "n:[0 TO 99]", "&consistent", 100).await;
        assert_eq!(found.keys(), every[..100].to_vec());
    })
    .await;
}
