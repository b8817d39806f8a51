//! `CLUSTER SLOTS | SHARDS | NODES | KEYSLOT | INFO | MYID`: the truthful shard map, so
//! cluster-aware Redis clients can route to each shard's leader by themselves.

use super::{CmdError, CmdResult, Ctx};
use crate::{Args, Reply};
use trireme_cluster::{PeerNode, ShardInfo};
use trireme_types::NodeId;

/// A Redis Cluster node id: 40 hex characters, derived from the node name.
fn redis_node_id(name: &str) -> String {
    format!("{:040x}", NodeId::from_name(name))
}

fn split_addr(addr: &str) -> (String, i64) {
    match addr.rsplit_once(':') {
        Some((host, port)) => (
            host.trim_matches(['[', ']']).to_string(),
            port.parse().unwrap_or(0),
        ),
        None => (addr.to_string(), 0),
    }
}

/// Leader first, then the other voters, then the learners (replicas in other regions), as
/// Redis lists master then replicas: a client reading from replicas after `READONLY` may
/// then pick the one in its own region.
fn ordered_replicas(shard: &ShardInfo) -> Vec<(&PeerNode, bool)> {
    let leader = shard.leader.as_ref().map(|l| l.name.as_str());
    let mut out: Vec<_> = shard
        .replicas
        .iter()
        .map(|r| (r, Some(r.name.as_str()) == leader))
        .collect();
    out.sort_by_key(|(_, is_leader)| !is_leader);
    out.extend(shard.learners.iter().map(|l| (l, false)));
    out
}

/// `READONLY` / `READWRITE`: after `READONLY` the connection's reads are served by whichever
/// replica gets them, from what it has applied (stale, as Redis Cluster's replica reads);
/// `READWRITE` goes back to leader reads.
pub(crate) fn read_mode(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    super::no_more(args)?;
    ctx.client.read_mode = if args.name() == "readonly" {
        trireme_cluster::ReadMode::Stale
    } else {
        trireme_cluster::ReadMode::Default
    };
    Ok(Reply::ok())
}

/// `ASKING`: accepted; Trireme never answers `ASK` (any node serves any key).
pub(crate) fn asking(args: &mut Args) -> CmdResult {
    super::no_more(args)?;
    Ok(Reply::ok())
}

pub(crate) fn cluster(ctx: &mut Ctx<'_>, args: &mut Args) -> CmdResult {
    let sub = args.next_str()?.to_ascii_lowercase();
    let node = &ctx.shared.node;
    match sub.as_str() {
        "keyslot" => {
            let key = args.next_bytes()?;
            args.finish()?;
            Ok(Reply::integer(i64::from(trireme_types::key_slot(&key))))
        }
        "myid" => {
            args.finish()?;
            Ok(Reply::bulk(redis_node_id(&node.me().name)))
        }
        "info" => {
            args.finish()?;
            let shards = node.shards();
            let led = shards.iter().filter(|s| s.leader.is_some()).count();
            let nodes: std::collections::BTreeSet<&str> = shards
                .iter()
                .flat_map(|s| s.replicas.iter().map(|r| r.name.as_str()))
                .collect();
            let state = if led == shards.len() { "ok" } else { "fail" };
            // The cluster map's version: it changes whenever shards move between nodes.
            let epoch = node.cluster_epoch();
            Ok(Reply::bulk(format!(
                "cluster_enabled:1\r\ncluster_state:{state}\r\ncluster_slots_assigned:16384\r\ncluster_slots_ok:{}\r\ncluster_slots_pfail:0\r\ncluster_slots_fail:0\r\ncluster_known_nodes:{}\r\ncluster_size:{}\r\ncluster_current_epoch:{epoch}\r\ncluster_my_epoch:{epoch}\r\n",
                shards
                    .iter()
                    .filter(|s| s.leader.is_some())
                    .map(|s| u32::from(s.slots.1 - s.slots.0) + 1)
                    .sum::<u32>(),
                nodes.len(),
                shards.len(),
            )))
        }
        "slots" => {
            args.finish()?;
            let mut out = Vec::new();
            for shard in node.shards() {
                let mut entry = vec![
                    Reply::integer(i64::from(shard.slots.0)),
                    Reply::integer(i64::from(shard.slots.1)),
                ];
                for (replica, _) in ordered_replicas(&shard) {
                    let (host, port) = split_addr(&replica.resp_addr);
                    entry.push(Reply::array(vec![
                        Reply::bulk(host),
                        Reply::integer(port),
                        Reply::bulk(redis_node_id(&replica.name)),
                    ]));
                }
                out.push(Reply::array(entry));
            }
            Ok(Reply::array(out))
        }
        "shards" => {
            args.finish()?;
            let mut out = Vec::new();
            for shard in node.shards() {
                let nodes = ordered_replicas(&shard)
                    .into_iter()
                    .map(|(replica, is_leader)| {
                        let (host, port) = split_addr(&replica.resp_addr);
                        // A map in RESP3 (as Redis answers), a flat list of pairs in RESP2.
                        Reply::Map(vec![
                            (Reply::bulk("id"), Reply::bulk(redis_node_id(&replica.name))),
                            (Reply::bulk("port"), Reply::integer(port)),
                            (Reply::bulk("ip"), Reply::bulk(host.clone())),
                            (Reply::bulk("endpoint"), Reply::bulk(host)),
                            (
                                Reply::bulk("role"),
                                Reply::bulk(if is_leader { "master" } else { "replica" }),
                            ),
                            (
                                Reply::bulk("replication-offset"),
                                Reply::integer(shard.applied_index as i64),
                            ),
                            (
                                Reply::bulk("health"),
                                Reply::bulk(if shard.leader.is_some() {
                                    "online"
                                } else {
                                    "loading"
                                }),
                            ),
                        ])
                    })
                    .collect();
                out.push(Reply::Map(vec![
                    (
                        Reply::bulk("slots"),
                        Reply::array(vec![
                            Reply::integer(i64::from(shard.slots.0)),
                            Reply::integer(i64::from(shard.slots.1)),
                        ]),
                    ),
                    (Reply::bulk("nodes"), Reply::array(nodes)),
                ]));
            }
            Ok(Reply::array(out))
        }
        "nodes" => {
            args.finish()?;
            // One line per node: the slot ranges it leads (as master) are listed on its line.
            let mut lines: std::collections::BTreeMap<String, (String, Vec<String>)> =
                Default::default();
            for shard in node.shards() {
                for (replica, is_leader) in ordered_replicas(&shard) {
                    let line = lines
                        .entry(replica.name.clone())
                        .or_insert_with(|| (replica.resp_addr.clone(), Vec::new()));
                    if is_leader {
                        line.1.push(format!("{}-{}", shard.slots.0, shard.slots.1));
                    }
                }
            }
            let me = &node.me().name;
            let epoch = node.cluster_epoch();
            let mut text = String::new();
            for (name, (addr, slots)) in lines {
                let (host, port) = split_addr(&addr);
                let flags = if &name == me {
                    "myself,master"
                } else {
                    "master"
                };
                text.push_str(&format!(
                    "{} {host}:{port}@{port} {flags} - 0 0 {epoch} connected {}\n",
                    redis_node_id(&name),
                    slots.join(" ")
                ));
            }
            Ok(Reply::bulk(text))
        }
        _ => Err(CmdError::Reply(format!(
            "ERR unknown subcommand '{}'. Try CLUSTER HELP.",
            sub.chars().take(64).collect::<String>()
        ))),
    }
}
