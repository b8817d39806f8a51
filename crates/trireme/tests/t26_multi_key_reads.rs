//! Area 26: reads of several rows see each applied log entry whole. A bank whose total never
//! changes is moved by transactions while other clients read all of its accounts at once, on
//! a 3-node cluster of real servers: over RESP with redis-py (MULTI/EXEC against MGET) and
//! over Consul's API (`/v1/txn` with two `cas` against `?recurse&consistent` listings). A
//! read that shows half of a transfer breaks the total.

use crate::common::cluster::{ClusterOptions, TestCluster};
use crate::common::{KvEntry, clients, http_client};
use base64::Engine as _;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// redis-py 8 with its defaults (RESP3): three clients move amounts between `{b}x` and `{b}y`
/// with MULTI/EXEC for 10 s (longer on a slow machine, until there were enough to tell) while
/// three others MGET both; no MGET shows a partial transfer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mget_never_sees_half_of_a_redis_transaction() {
    let c = TestCluster::start(ClusterOptions::default()).await;
    let python = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../target/test-venv/bin/python"
    );
    let mut client = tokio::process::Command::new(python);
    client.arg(clients::source("redis_bank.py")).args([
        "127.0.0.1",
        &c.node(0).resp_addr().port().to_string(),
        // 10 s, and on a slow machine on until there were enough to tell (never past 45 s).
        "10",
        "500",
        "2000",
        "45",
    ]);
    let output = clients::run_bounded(client, Duration::from_secs(90), "redis-py").await;
    let seen = clients::json_line(&output, &c.logs());
    assert_eq!(seen["protocol"], 3, "{seen}");
    // Enough reads that a torn one would show: the bug this guards against tore about one
    // MGET in two thousand.
    assert!(seen["mgets"].as_u64().unwrap_or(0) >= 2_000, "{seen}");
    assert!(seen["transfers"].as_u64().unwrap_or(0) >= 500, "{seen}");
    assert_eq!(seen["torn"], 0, "MGETs that did not add up: {seen}");
    let final_total: i64 = seen["final"]
        .as_array()
        .map(|v| v.iter().filter_map(Value::as_i64).sum())
        .unwrap_or(0);
    assert_eq!(final_total, 2000, "{seen}");
}

/// The accounts of the Consul bank: four keys under one prefix, in one slot (and so one shard).
const ACCOUNTS: [&str; 4] = ["bank/{b}0", "bank/{b}1", "bank/{b}2", "bank/{b}3"];
const START: i64 = 100;

fn encode(n: i64) -> String {
    base64::engine::general_purpose::STANDARD.encode(n.to_string())
}

fn amount_of(entry: &KvEntry) -> i64 {
    std::str::from_utf8(&entry.value)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("an account holds a number: {entry:?}"))
}

/// Four clients move amounts between two of four accounts with `PUT /v1/txn` (two `cas`
/// operations, one log entry) for 15 s (longer on a slow machine, until there were enough to
/// tell), through all three nodes, while two others list the
/// accounts with `?recurse&consistent` and add them up: every listing sums to the starting
/// total, as Consul's (one snapshot of its state store) does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_never_see_half_of_a_consul_transaction() {
    let c = TestCluster::start(ClusterOptions::default()).await;
    let http = http_client();
    for key in ACCOUNTS {
        c.put(0, key, &START.to_string()).await;
    }
    let urls: Vec<String> = (0..3).map(|i| c.node(i).http_url()).collect();
    let (transfers, listings, torn) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    // 15 s of it, and longer on a slow machine until there were enough transfers and
    // listings to tell (never past 60 s).
    let started = Instant::now();
    let running = {
        let (transfers, listings) = (transfers.clone(), listings.clone());
        move || {
            let enough =
                transfers.load(Ordering::Relaxed) >= 200 && listings.load(Ordering::Relaxed) >= 400;
            let elapsed = started.elapsed();
            elapsed < Duration::from_secs(60) && (elapsed < Duration::from_secs(15) || !enough)
        }
    };
    let examples = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let mut tasks = Vec::new();
    for w in 0..4u64 {
        let (http, base, transfers, running) = (
            http.clone(),
            urls[w as usize % 3].clone(),
            transfers.clone(),
            running.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut draw = w.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            let mut next = move |n: u64| {
                draw ^= draw << 13;
                draw ^= draw >> 7;
                draw ^= draw << 17;
                draw % n
            };
            while running() {
                let from = next(4) as usize;
                let to = (from + 1 + next(3) as usize) % 4;
                let amount = 1 + next(20) as i64;
                let mut read = Vec::new();
                for key in [ACCOUNTS[from], ACCOUNTS[to]] {
                    let body: Value = http
                        .get(format!("{base}/v1/kv/{key}?consistent"))
                        .send()
                        .await
                        .expect("GET an account")
                        .json()
                        .await
                        .expect("an account as JSON");
                    read.push(KvEntry::from_json(&body[0]));
                }
                let ops = json!([
                    {"KV": {"Verb": "cas", "Key": ACCOUNTS[from],
                            "Value": encode(amount_of(&read[0]) - amount),
                            "Index": read[0].modify_index}},
                    {"KV": {"Verb": "cas", "Key": ACCOUNTS[to],
                            "Value": encode(amount_of(&read[1]) + amount),
                            "Index": read[1].modify_index}},
                ]);
                let status = http
                    .put(format!("{base}/v1/txn"))
                    .json(&ops)
                    .send()
                    .await
                    .expect("PUT /v1/txn")
                    .status();
                // 409: another transfer changed an account since it was read.
                assert!(status == 200 || status == 409, "txn answered {status}");
                if status == 200 {
                    transfers.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for base in urls.into_iter().take(2) {
        let http = http.clone();
        let (listings, torn, examples) = (listings.clone(), torn.clone(), examples.clone());
        let running = running.clone();
        tasks.push(tokio::spawn(async move {
            while running() {
                let body: Value = http
                    .get(format!("{base}/v1/kv/bank/?recurse&consistent"))
                    .send()
                    .await
                    .expect("list the accounts")
                    .json()
                    .await
                    .expect("a listing as JSON");
                let entries: Vec<KvEntry> = body
                    .as_array()
                    .expect("a listing is an array")
                    .iter()
                    .map(KvEntry::from_json)
                    .collect();
                assert_eq!(entries.len(), ACCOUNTS.len(), "{body}");
                listings.fetch_add(1, Ordering::Relaxed);
                let total: i64 = entries.iter().map(amount_of).sum();
                if total != START * 4 {
                    torn.fetch_add(1, Ordering::Relaxed);
                    let mut examples = examples.lock().expect("examples");
                    if examples.len() < 3 {
                        examples.push(body.to_string());
                    }
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("a client task");
    }
    let (transfers, listings) = (
        transfers.load(Ordering::Relaxed),
        listings.load(Ordering::Relaxed),
    );
    let examples = examples.lock().expect("examples").clone();
    eprintln!(
        "{transfers} transfers, {listings} listings in {:?}",
        started.elapsed()
    );
    assert!(transfers >= 200, "only {transfers} transfers");
    assert!(listings >= 400, "only {listings} listings");
    assert_eq!(
        torn.load(Ordering::Relaxed),
        0,
        "listings that did not add up, of {listings} (transfers {transfers}): {examples:?}"
    );
}
