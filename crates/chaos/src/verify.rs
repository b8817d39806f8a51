//! What the run asks of the cluster besides the workload: is it up, who leads, can every shard
//! take a write again, have the replicas converged, and — once healed — does every replica hold
//! the same final value of every key. Then the Go checker's verdict on the history.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use trireme_types::admin::ShardsDoc;
use trireme_types::cluster_status::ClusterStatus;

use crate::ChaosError;
use crate::history::{Event, OpKind, Status};
use crate::workload::{Endpoint, Outcome, http_read, http_write, since};

async fn shards_of(client: &reqwest::Client, node: &Endpoint) -> Option<ShardsDoc> {
    let url = format!("{}/v1/cluster/shards", node.http_base);
    client.get(url).send().await.ok()?.json().await.ok()
}

/// Sets survival `region` through the first of `nodes`, then waits until every shard's
/// voters are in three distinct regions and its leader in the home region.
pub async fn survive_regions(
    client: &reqwest::Client,
    nodes: &[Endpoint],
    limit: Duration,
) -> Result<(), ChaosError> {
    let node = nodes
        .first()
        .ok_or_else(|| ChaosError::Cluster("no node to set the placement through".into()))?;
    let url = format!("{}/v1/cluster/placement", node.http_base);
    let answer = client
        .put(&url)
        .json(&serde_json::json!({"survival": "region"}))
        .send()
        .await
        .map_err(|e| ChaosError::Cluster(format!("PUT {url}: {e}")))?;
    if !answer.status().is_success() {
        let status = answer.status();
        let body = answer.text().await.unwrap_or_default();
        return Err(ChaosError::Cluster(format!("PUT {url}: {status} {body}")));
    }
    let placement: trireme_types::cluster_status::Placement = answer
        .json()
        .await
        .map_err(|e| ChaosError::Cluster(format!("PUT {url}: {e}")))?;
    let home = placement.home_region;
    let deadline = Instant::now() + limit;
    let mut last = String::new();
    while Instant::now() < deadline {
        // Every node answers for the shards it holds: a leader is known only there.
        let mut docs = Vec::new();
        for node in nodes {
            if let Ok(Some(doc)) =
                tokio::time::timeout(Duration::from_secs(2), shards_of(client, node)).await
            {
                docs.push(doc);
            }
        }
        let Some(first) = docs.first() else {
            tokio::time::sleep(Duration::from_millis(250)).await;
            continue;
        };
        let spread = first.shards.iter().all(|shard| {
            let regions: std::collections::BTreeSet<_> = shard
                .replicas
                .iter()
                .filter(|r| r.role.as_deref() == Some("voter"))
                .map(|r| r.region.clone())
                .collect();
            regions.len() >= 3
        });
        // And each shard led from the home region, where its preferred leader is.
        let led_home = first.shards.iter().all(|shard| {
            docs.iter().any(|doc| {
                doc.shards
                    .iter()
                    .filter(|s| s.shard == shard.shard)
                    .filter_map(|s| s.leader.as_ref())
                    .any(|leader| {
                        shard
                            .replicas
                            .iter()
                            .any(|r| r.name == leader.name && r.region == home)
                    })
            })
        });
        if spread && led_home {
            return Ok(());
        }
        last = format!(
            "spread {spread}, led from {home:?} {led_home}: {:?}",
            first.shards.iter().map(|s| &s.replicas).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err(ChaosError::Cluster(format!(
        "the voters did not spread over three regions, led from the home region, within {limit:?}: {last}"
    )))
}

/// Waits until every shard has a replica, voter or learner, in each of `regions` (a `None`
/// region, nodes without labels, is not waited for), as the first node that answers says.
pub async fn wait_replicas_in(
    client: &reqwest::Client,
    nodes: &[Endpoint],
    regions: &std::collections::BTreeSet<Option<String>>,
    limit: Duration,
) -> Result<(), ChaosError> {
    let deadline = Instant::now() + limit;
    let wanted: Vec<&String> = regions.iter().flatten().collect();
    let mut last = String::from("no node answered");
    while Instant::now() < deadline {
        for node in nodes {
            let Ok(Some(doc)) =
                tokio::time::timeout(Duration::from_secs(2), shards_of(client, node)).await
            else {
                continue;
            };
            let missing: Vec<String> = doc
                .shards
                .iter()
                .flat_map(|shard| {
                    wanted
                        .iter()
                        .filter(|region| {
                            !shard
                                .replicas
                                .iter()
                                .any(|r| r.region.as_ref() == Some(**region))
                        })
                        .map(move |region| format!("shard {} in {region}", shard.shard))
                })
                .collect();
            if missing.is_empty() {
                return Ok(());
            }
            last = missing.join(", ");
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err(ChaosError::Cluster(format!(
        "no replica within {limit:?}: {last}"
    )))
}

/// How many shards the cluster has, as the first node that answers says.
pub async fn shard_count(client: &reqwest::Client, nodes: &[Endpoint]) -> Option<u32> {
    for node in nodes {
        let answer = tokio::time::timeout(Duration::from_secs(2), shards_of(client, node)).await;
        if let Ok(Some(view)) = answer {
            return Some(view.shards.len() as u32);
        }
    }
    None
}

/// `/v1/cluster/status` from the first of `nodes` that answers within 2 s.
pub async fn cluster_status(client: &reqwest::Client, nodes: &[Endpoint]) -> Option<ClusterStatus> {
    for node in nodes {
        let url = format!("{}/v1/cluster/status", node.http_base);
        let answer = tokio::time::timeout(Duration::from_secs(2), async {
            client.get(&url).send().await?.json::<ClusterStatus>().await
        })
        .await;
        if let Ok(Ok(status)) = answer {
            return Some(status);
        }
    }
    None
}

/// Waits until a node's `/v1/cluster/status` shows no move or split in progress and every
/// shard with its replication factor (3, or every node when fewer) in voters, all on active
/// nodes; whether that happened within `limit`.
pub async fn wait_settled(client: &reqwest::Client, nodes: &[Endpoint], limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if cluster_status(client, nodes)
            .await
            .is_some_and(|s| s.is_settled())
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    false
}

/// Replica moves and splits completed, summed over every node's `/metrics` (each is counted
/// by the metadata leader that made it).
pub async fn moves_completed(client: &reqwest::Client, nodes: &[Endpoint]) -> u64 {
    let mut total = 0;
    for node in nodes {
        let url = format!("{}/metrics", node.http_base);
        let Ok(Ok(response)) =
            tokio::time::timeout(Duration::from_secs(2), client.get(&url).send()).await
        else {
            continue;
        };
        let text = response.text().await.unwrap_or_default();
        total += text
            .lines()
            .filter_map(|l| l.strip_prefix("trireme_moves_completed_total "))
            .filter_map(|v| v.trim().parse::<f64>().ok())
            .map(|v| v as u64)
            .sum::<u64>();
    }
    total
}

/// Waits until every node in `nodes` answers `/v1/health` with 200 (all shards led).
pub async fn wait_healthy(
    client: &reqwest::Client,
    nodes: &[Endpoint],
    timeout: Duration,
) -> Result<(), ChaosError> {
    let deadline = Instant::now() + timeout;
    for node in nodes {
        let url = format!("{}/v1/health", node.http_base);
        loop {
            let ok = matches!(client.get(&url).send().await, Ok(r) if r.status().is_success());
            if ok {
                break;
            }
            if Instant::now() > deadline {
                return Err(ChaosError::Cluster(format!(
                    "{} not healthy after {timeout:?}",
                    node.name
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

/// The node that leads the most shards, as the given nodes see it (None when no node answers).
pub async fn busiest_leader(client: &reqwest::Client, nodes: &[Endpoint]) -> Option<String> {
    let mut leaders: BTreeMap<u32, String> = BTreeMap::new();
    for node in nodes {
        if let Some(view) = shards_of(client, node).await {
            for s in view.shards {
                if let (Some(l), true) = (&s.leader, s.is_local()) {
                    leaders.entry(s.shard.0).or_insert(l.name.clone());
                }
            }
        }
    }
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    for name in leaders.into_values() {
        *count.entry(name).or_default() += 1;
    }
    count.into_iter().max_by_key(|(_, c)| *c).map(|(n, _)| n)
}

/// One key per shard (`probe/<shard>/<n>`), for measuring when each shard takes writes again.
pub async fn probe_keys(
    client: &reqwest::Client,
    nodes: &[Endpoint],
) -> Result<Vec<String>, ChaosError> {
    for node in nodes {
        let Some(view) = shards_of(client, node).await else {
            continue;
        };
        return Ok(view
            .shards
            .iter()
            .map(|s| {
                (0u32..)
                    .map(|n| format!("probe/{}/{n}", s.shard))
                    .find(|k| s.holds(trireme_types::key_slot(k.as_bytes())))
                    .unwrap_or_default()
            })
            .collect());
    }
    Err(ChaosError::Cluster(
        "no node answered /v1/cluster/shards".into(),
    ))
}

/// How long until every shard accepted a write through one of `nodes` (each probe key written
/// in parallel, retried every 50 ms); None when some shard did not within `limit`.
pub async fn time_to_writable(
    client: &reqwest::Client,
    nodes: &[Endpoint],
    keys: &[String],
    limit: Duration,
) -> Option<Duration> {
    let start = Instant::now();
    let probes = keys.iter().enumerate().map(|(i, key)| async move {
        let mut attempt = i;
        while start.elapsed() < limit {
            let node = &nodes[attempt % nodes.len()];
            attempt += 1;
            let write = http_write(client, &node.http_base, key, Some("probe"), None);
            if let Ok(Outcome::Ok(true)) = tokio::time::timeout(Duration::from_secs(1), write).await
            {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    });
    let all = futures::future::join_all(probes).await;
    all.into_iter().all(|ok| ok).then(|| start.elapsed())
}

/// Waits until, for every shard, every replica reports the same applied index twice in a row.
pub async fn wait_converged(
    client: &reqwest::Client,
    nodes: &[Endpoint],
    timeout: Duration,
) -> Result<(), ChaosError> {
    let deadline = Instant::now() + timeout;
    let mut previous: Option<BTreeMap<u32, u64>> = None;
    loop {
        let mut replicas: BTreeMap<u32, Vec<ReplicaView>> = BTreeMap::new();
        let mut all_answered = true;
        for node in nodes {
            match shards_of(client, node).await {
                Some(view) => {
                    for s in view.shards.into_iter().filter(|s| s.is_local()) {
                        replicas.entry(s.shard.0).or_default().push(ReplicaView {
                            node: node.name.clone(),
                            role: s.local_role.unwrap_or_default(),
                            leader: s.leader.map(|l| l.name),
                            term: s.term,
                            committed: s.committed_index,
                            applied: s.applied_index,
                        });
                    }
                }
                None => all_answered = false,
            }
        }
        let agreed: Option<BTreeMap<u32, u64>> = all_answered
            .then(|| {
                replicas
                    .iter()
                    .map(|(shard, views)| {
                        let first = views.first()?.applied;
                        views
                            .iter()
                            .all(|v| v.applied == first)
                            .then_some((*shard, first))
                    })
                    .collect()
            })
            .flatten();
        if agreed.is_some() && agreed == previous {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(ChaosError::Cluster(format!(
                "replicas did not converge within {timeout:?}{}: {}",
                if all_answered {
                    ""
                } else {
                    " (a node did not answer)"
                },
                describe_lagging(&replicas)
            )));
        }
        previous = agreed;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `error`, followed by the first error lines of every node's log in `dir` (`n1.log`, ...):
/// what stopped a replica is there, and the run's directory may be gone when this is read.
pub fn with_log_errors(error: ChaosError, dir: &std::path::Path) -> ChaosError {
    let mut text = error.to_string();
    for path in node_logs(dir) {
        let Ok(log) = std::fs::read_to_string(&path) else {
            continue;
        };
        for line in first_log_errors(&log, 8) {
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            text.push_str(&format!("\n  {name}: {line}"));
        }
    }
    ChaosError::Cluster(text)
}

/// The nodes' logs of a run's seed directory (`n1.log`, ...), in name order.
pub fn node_logs(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut logs: Vec<_> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    logs
}

/// The first `most` error and panic lines of a node's log, each panic with its message (the
/// line after it): a group that stopped says why once, then only what follows from it.
pub fn first_log_errors(log: &str, most: usize) -> Vec<&str> {
    let lines: Vec<&str> = log.lines().collect();
    lines
        .iter()
        .enumerate()
        .filter(|(_, line)| line.contains(" ERROR ") || line.contains("panicked"))
        .take(most)
        .flat_map(|(i, line)| {
            let message = lines.get(i + 1).filter(|_| line.contains("panicked"));
            std::iter::once(*line).chain(message.copied())
        })
        .collect()
}

/// One replica of a shard as its node reports it, for telling why replicas did not converge.
#[derive(Debug)]
struct ReplicaView {
    node: String,
    role: String,
    leader: Option<String>,
    term: u64,
    committed: u64,
    applied: u64,
}

/// The shards whose replicas disagree, each replica with its role, leader, term, committed and
/// applied index: enough to tell a stalled follower from a deposed leader from a stuck apply.
fn describe_lagging(replicas: &BTreeMap<u32, Vec<ReplicaView>>) -> String {
    let lagging: Vec<String> = replicas
        .iter()
        .filter(|(_, views)| views.windows(2).any(|w| w[0].applied != w[1].applied))
        .map(|(shard, views)| {
            let each: Vec<String> = views
                .iter()
                .map(|v| {
                    format!(
                        "{} {} (leader {}) term {} committed {} applied {}",
                        v.node,
                        v.role,
                        v.leader.as_deref().unwrap_or("unknown"),
                        v.term,
                        v.committed,
                        v.applied
                    )
                })
                .collect();
            format!("shard {shard}: {}", each.join("; "))
        })
        .collect();
    if lagging.is_empty() {
        "every replica that answered agrees".into()
    } else {
        lagging.join(" | ")
    }
}

/// A key whose replicas disagree after healing, or whose final value could not be read.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Divergence {
    /// The key.
    pub key: String,
    /// What each node's replica answered to a `?stale` read.
    pub by_node: BTreeMap<String, Option<String>>,
    /// The `?consistent` read.
    pub consistent: Option<String>,
}

/// Reads every key once with `?consistent` (recorded as client `final_client`, so the
/// checker verifies the final state too) and once with `?stale` on every node; returns the
/// reads and the keys whose replicas disagree.
pub async fn final_reads(
    client: &reqwest::Client,
    nodes: &[Endpoint],
    keys: u32,
    clock: Instant,
    final_client: u32,
) -> (Vec<Event>, Vec<Divergence>) {
    let mut events = Vec::new();
    let mut divergent = Vec::new();
    for k in 0..keys {
        let key = format!("k{k}");
        let mut consistent = None;
        let mut consistent_ok = false;
        for attempt in 0..20 {
            let node = &nodes[attempt % nodes.len()];
            let call = since(clock);
            if let Outcome::Ok(found) = http_read(client, &node.http_base, &key, "consistent").await
            {
                consistent = found.as_ref().map(|(v, _)| v.clone());
                consistent_ok = true;
                events.push(Event {
                    client: final_client,
                    node: node.name.clone(),
                    proto: "http".into(),
                    op: OpKind::Read,
                    key: key.clone(),
                    mode: Some("consistent".into()),
                    value: consistent.clone(),
                    expect: None,
                    result: None,
                    index: found.map(|(_, i)| i),
                    bound: None,
                    status: Status::Ok,
                    call,
                    ret: since(clock),
                    txn: None,
                    session: None,
                    lease: None,
                });
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let mut by_node = BTreeMap::new();
        for node in nodes {
            let stale = match http_read(client, &node.http_base, &key, "stale").await {
                Outcome::Ok(found) => found.map(|(v, _)| v),
                _ => Some("<no answer>".into()),
            };
            by_node.insert(node.name.clone(), stale);
        }
        if !consistent_ok || by_node.values().any(|v| *v != consistent) {
            divergent.push(Divergence {
                key,
                by_node,
                consistent,
            });
        }
    }
    (events, divergent)
}

/// The Go checker's verdict (its one-line JSON summary) and exit code.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Verdict {
    /// 0: linearizable and no stale-read violation; 1: a violation; 2: unknown / bad input.
    pub exit_code: i32,
    /// The summary it printed.
    pub summary: serde_json::Value,
}

/// Builds the checker from `source` (a Go module directory) into `out/checker` and runs it on
/// `history`, with its HTML visualization going to `out`.
pub fn check(source: &Path, history: &Path, out: &Path) -> Result<Verdict, ChaosError> {
    // `go build` runs in `source`: a relative output path would land there instead.
    let bin = std::path::absolute(out.join("checker")).map_err(|e| ChaosError::Command {
        command: format!("locating {}", out.display()),
        message: e.to_string(),
    })?;
    let built = Command::new("go")
        .arg("build")
        .arg("-o")
        .arg(&bin)
        .arg(".")
        .current_dir(source)
        .output()
        .map_err(|e| ChaosError::Command {
            command: format!("go build (in {})", source.display()),
            message: e.to_string(),
        })?;
    if !built.status.success() {
        return Err(ChaosError::Command {
            command: format!("go build (in {})", source.display()),
            message: String::from_utf8_lossy(&built.stderr).into_owned(),
        });
    }
    let run = Command::new(&bin)
        .arg("--out")
        .arg(out)
        .arg(history)
        .output()
        .map_err(|e| ChaosError::Command {
            command: bin.display().to_string(),
            message: e.to_string(),
        })?;
    let stdout = String::from_utf8_lossy(&run.stdout);
    let summary = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .unwrap_or_else(
            || serde_json::json!({ "error": String::from_utf8_lossy(&run.stderr).into_owned() }),
        );
    Ok(Verdict {
        exit_code: run.status.code().unwrap_or(2),
        summary,
    })
}
