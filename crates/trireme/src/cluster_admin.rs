//! `trireme cluster remove`, `trireme cluster split` and the membership part of `trireme
//! cluster status`: what an operator asks of a running cluster through any node's HTTP API.

use crate::cluster::{http_client, normalize_target, root_cause};
use anyhow::{anyhow, bail};
use clap::Args;
use std::fmt::Write as _;
use std::time::Duration;
use trireme_types::cluster_status::{
    ClusterStatus, FinalizeResult, Placement, PlacementChange, RemoveResult, SplitResult,
};

/// Flags of `trireme cluster remove`.
#[derive(Args, Debug)]
pub struct RemoveArgs {
    /// The node to remove (its --node-id).
    node: String,
    /// The node is gone for good: remove it at once and rebuild its replicas from the
    /// survivors (without it, the node is drained first and stops by itself).
    #[arg(long)]
    force: bool,
    /// Any node's HTTP URL.
    #[arg(long, default_value = "http://127.0.0.1:7700")]
    target: String,
}

/// Sends `POST url` and reads the JSON answer; a refusal becomes an error with the server's
/// message.
async fn post<T: serde::de::DeserializeOwned>(url: &str) -> anyhow::Result<T> {
    let client = http_client(Duration::from_secs(30))?;
    answer(client.post(url), &format!("POST {url}")).await
}

/// Sends `request` and reads the JSON answer; a refusal becomes an error with the server's
/// message. `what` names the request in other errors.
async fn answer<T: serde::de::DeserializeOwned>(
    request: reqwest::RequestBuilder,
    what: &str,
) -> anyhow::Result<T> {
    let response = request
        .send()
        .await
        .map_err(|e| anyhow!("{what}: {}", root_cause(&e)))?;
    let status = response.status();
    let body = response.text().await.unwrap_or_default();
    if !status.is_success() {
        bail!("{} ({status})", error_message(&body));
    }
    serde_json::from_str(&body).map_err(|e| anyhow!("{what}: unexpected answer {body:?}: {e}"))
}

/// Flags of `trireme cluster cancel-drain`.
#[derive(Args, Debug)]
pub struct CancelDrainArgs {
    /// The draining node (its --node-id).
    node: String,
    /// Any node's HTTP URL.
    #[arg(long, default_value = "http://127.0.0.1:7700")]
    target: String,
}

/// Asks the cluster to stop draining a node and prints what happened.
pub async fn cancel_drain(args: CancelDrainArgs) -> anyhow::Result<()> {
    let target = normalize_target(&args.target)?;
    let url = format!("{target}/v1/cluster/nodes/{}/cancel-drain", args.node);
    let result: RemoveResult = post(&url).await?;
    println!("{}", result.message);
    Ok(())
}

/// Flags of `trireme cluster finalize-upgrade`.
#[derive(Args, Debug)]
pub struct FinalizeArgs {
    /// Any node's HTTP URL (one running the new build).
    #[arg(long, default_value = "http://127.0.0.1:7700")]
    target: String,
}

/// Asks the cluster to raise its version to the target node's protocol and prints what
/// happened.
pub async fn finalize_upgrade(args: FinalizeArgs) -> anyhow::Result<()> {
    let target = normalize_target(&args.target)?;
    let result: FinalizeResult = post(&format!("{target}/v1/cluster/finalize-upgrade")).await?;
    println!("{}", result.message);
    Ok(())
}

/// Flags of `trireme cluster placement`.
#[derive(Args, Debug)]
pub struct PlacementArgs {
    /// Make this region the home region: it holds every shard's leader (and with survival
    /// zone, every voter).
    #[arg(long)]
    home_region: Option<String>,
    /// The survival goal: `zone` (voters in the home region) or `region` (voters in three
    /// regions).
    #[arg(long)]
    survival: Option<String>,
    /// Any node's HTTP URL.
    #[arg(long, default_value = "http://127.0.0.1:7700")]
    target: String,
}

/// Shows the placement, after changing it when asked to.
pub async fn placement(args: PlacementArgs) -> anyhow::Result<()> {
    let target = normalize_target(&args.target)?;
    let url = format!("{target}/v1/cluster/placement");
    let client = http_client(Duration::from_secs(30))?;
    let request = if args.home_region.is_some() || args.survival.is_some() {
        client.put(&url).json(&PlacementChange {
            home_region: args.home_region,
            survival: args.survival,
        })
    } else {
        client.get(&url)
    };
    let placement: Placement = answer(request, &url).await?;
    print!("{}", render_placement(&placement));
    Ok(())
}

/// The server's `{"error": ...}` message, or the body as it is.
fn error_message(body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_owned))
        .unwrap_or_else(|| body.to_owned())
}

/// `cluster placement`'s table.
fn render_placement(p: &Placement) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "home region: {}   survival: {}   epoch: {}",
        p.home_region.as_deref().unwrap_or("(none)"),
        p.survival,
        p.epoch
    );
    let _ = writeln!(
        out,
        "{:<16} {:<8} {:>8}  NODES",
        "REGION", "HOLDS", "LEARNERS"
    );
    for r in &p.regions {
        let _ = writeln!(
            out,
            "{:<16} {:<8} {:>8}  {}",
            r.region.as_deref().unwrap_or("-"),
            if r.home { "voters" } else { "learners" },
            r.learners,
            r.nodes.join(",")
        );
    }
    out
}

/// Flags of `trireme cluster split`.
#[derive(Args, Debug)]
pub struct SplitArgs {
    /// The shard to split (its number, as `cluster status` lists them).
    shard: u32,
    /// The first slot the new shard takes (default: the middle of the shard's range).
    #[arg(long)]
    at: Option<u16>,
    /// Any node's HTTP URL.
    #[arg(long, default_value = "http://127.0.0.1:7700")]
    target: String,
}

/// How long `cluster split` waits for the new shard to show in the map.
const SPLIT_WAIT: Duration = Duration::from_secs(30);

/// Asks the cluster to split a shard, waits until the new shard is in the map, and says
/// which slots each shard owns now.
pub async fn split(args: SplitArgs) -> anyhow::Result<()> {
    let target = normalize_target(&args.target)?;
    let mut url = format!("{target}/v1/cluster/shards/{}/split", args.shard);
    if let Some(at) = args.at {
        url.push_str(&format!("?at={at}"));
    }
    let started: SplitResult = post(&url).await?;
    let deadline = std::time::Instant::now() + SPLIT_WAIT;
    loop {
        let status = fetch_status(&target).await?;
        if status.shards.iter().any(|s| s.shard == started.child) {
            println!(
                "shard {} split: it owns slots {}..={}, and the new shard {} owns {}..={} on the same replicas (the rebalancer moves them from here)",
                started.shard,
                started.slots[0],
                started.at_slot - 1,
                started.child,
                started.at_slot,
                started.slots[1]
            );
            return Ok(());
        }
        // The node asked may not have applied the map that records the split yet.
        if status.splits.is_empty() && status.epoch >= started.epoch {
            bail!(
                "the split of shard {} was given up (see the metadata leader's log)",
                started.shard
            );
        }
        if std::time::Instant::now() > deadline {
            bail!(
                "the split of shard {} was decided but is not done after {SPLIT_WAIT:?}; `trireme cluster status` shows it",
                started.shard
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Asks the cluster to remove a node and prints what happens next.
pub async fn remove(args: RemoveArgs) -> anyhow::Result<()> {
    let target = normalize_target(&args.target)?;
    let mut url = format!("{target}/v1/cluster/nodes/{}/remove", args.node);
    if args.force {
        url.push_str("?force=true");
    }
    let result: RemoveResult = post(&url).await?;
    println!("{}", result.message);
    if !result.lost_quorum.is_empty() {
        // Said, and the exit status says it too: the cluster is not whole.
        bail!(
            "shard(s) {:?} lost their quorum and cannot be repaired by moving replicas",
            result.lost_quorum
        );
    }
    Ok(())
}

/// The cluster's membership as `/v1/cluster/status` describes it.
pub async fn fetch_status(target: &str) -> anyhow::Result<ClusterStatus> {
    let target = normalize_target(target)?;
    let client = http_client(Duration::from_secs(10))?;
    let url = format!("{target}/v1/cluster/status");
    let response = client
        .get(&url)
        .send()
        .await
        .map_err(|e| anyhow!("GET {url}: {}", root_cause(&e)))?;
    if !response.status().is_success() {
        bail!("GET {url} answered {}", response.status());
    }
    response
        .json()
        .await
        .map_err(|e| anyhow!("GET {url}: unexpected answer: {}", root_cause(&e)))
}

/// Nodes with their lifecycle state, and the moves in progress, as text.
pub fn render_membership(status: &ClusterStatus) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "cluster map epoch {}, metadata leader {}, replication factor {}, cluster version {}",
        status.epoch,
        status.meta_leader.as_deref().unwrap_or("(none)"),
        status.replication_factor,
        status.cluster_version
    );
    let _ = writeln!(
        out,
        "{:<10} {:<9} {:>8} {:>10} {:<8} {:<6} {:<14} PEER",
        "NODE", "STATE", "REPLICAS", "PREFERRED", "META", "LINKED", "VERSION"
    );
    for node in &status.nodes {
        // The build and, after a slash, the protocol it speaks.
        let version = node.version.as_ref().map_or_else(
            || "-".to_string(),
            |v| format!("{}/{}", v.build, v.protocol),
        );
        let _ = writeln!(
            out,
            "{:<10} {:<9} {:>8} {:>10} {:<8} {:<6} {:<14} {}",
            node.name,
            node.state,
            node.replicas,
            node.preferred_leaders,
            node.meta,
            if node.linked { "yes" } else { "no" },
            version,
            node.peer
        );
    }
    for node in &status.nodes {
        if let Some(drain) = &node.drain {
            let _ = writeln!(
                out,
                "draining {}: {} replica(s) left to move ({} moving now); {}",
                node.name,
                drain.replicas_left,
                drain.moving,
                if drain.meta_voter {
                    "still a metadata voter"
                } else {
                    "metadata vote handed over"
                }
            );
        }
    }
    for split in &status.splits {
        let _ = writeln!(
            out,
            "splitting shard {} at slot {}: shard {} takes slots {}..={}",
            split.shard, split.at_slot, split.child, split.at_slot, split.slots[1]
        );
    }
    if status.moves.is_empty() {
        let _ = writeln!(out, "no replica moves in progress");
    } else {
        let _ = writeln!(
            out,
            "replica moves in progress (at most {} at once):",
            status.max_moves
        );
        for mv in &status.moves {
            let progress = match mv.progress {
                Some((last, Some(matched))) => format!("{matched}/{last} entries"),
                Some((last, None)) => format!("waiting for a snapshot (leader at {last})"),
                None => String::new(),
            };
            let _ = writeln!(
                out,
                "  shard {:<4} {} -> {}  {:<8} {}",
                mv.shard,
                mv.from.as_deref().unwrap_or("(new)"),
                mv.to,
                mv.phase,
                progress
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use trireme_types::ShardId;
    use trireme_types::cluster_status::{MoveStatus, NodeStatus};

    #[test]
    fn membership_lists_states_and_moves() {
        let node = |name: &str, state: &str| NodeStatus {
            name: name.into(),
            state: state.into(),
            peer: format!("{name}:7702"),
            http: String::new(),
            resp: String::new(),
            replicas: 3,
            preferred_leaders: 1,
            meta: "voter".into(),
            linked: true,
            version: Some(trireme_types::version::Version {
                protocol: 1,
                build: "0.1.0".into(),
            }),
            drain: None,
        };
        let mut draining = node("n4", "draining");
        draining.version = None;
        draining.drain = Some(trireme_types::cluster_status::DrainProgress {
            replicas_left: 3,
            moving: 1,
            meta_voter: false,
        });
        let status = ClusterStatus {
            epoch: 7,
            node: "n1".into(),
            meta_leader: Some("n1".into()),
            replication_factor: 3,
            max_moves: 2,
            nodes: vec![node("n1", "active"), draining],
            shards: Vec::new(),
            moves: vec![MoveStatus {
                shard: ShardId(3),
                from: Some("n4".into()),
                to: "n1".into(),
                phase: "learner".into(),
                started_ms: 0,
                progress: Some((120, Some(80))),
            }],
            splits: vec![SplitResult {
                shard: ShardId(2),
                child: ShardId(16),
                at_slot: 3072,
                slots: [2048, 4095],
                started_ms: 0,
                epoch: 0,
            }],
            cluster_version: 2,
        };
        let text = render_membership(&status);
        assert!(text.contains("epoch 7"), "{text}");
        assert!(text.contains("cluster version 2"), "{text}");
        assert!(
            text.contains("splitting shard 2 at slot 3072: shard 16 takes slots 3072..=4095"),
            "{text}"
        );
        assert!(text.contains("n4         draining"), "{text}");
        assert!(text.contains(" yes    0.1.0/1        n1:7702"), "{text}");
        assert!(text.contains(" yes    -              n4:7702"), "{text}");
        assert!(
            text.contains(
                "draining n4: 3 replica(s) left to move (1 moving now); metadata vote handed over"
            ),
            "{text}"
        );
        assert!(
            text.contains("shard 3    n4 -> n1  learner  80/120 entries"),
            "{text}"
        );
    }
}
