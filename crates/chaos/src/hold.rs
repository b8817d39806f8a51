//! A lab cluster held up for one command: the nodes in their namespaces, spread over regions
//! with the lab's delay between them, and the command (a benchmark, a script) run in the hub
//! namespace with every node's addresses in its environment. No faults and no checker: what
//! `trireme lab` and `bench/regions.sh` measure on. The servers run with their default
//! timing, not the chaos runs' short election timeouts.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use crate::ChaosError;
use crate::delay::DelayLine;
use crate::elastic::live;
use crate::lab::Lab;
use crate::nodes::{self, ServerSettings};
use crate::verify;
use crate::workload;

/// What to hold up, and what to run against it.
#[derive(Debug, Clone)]
pub struct HoldConfig {
    /// The `trireme` executable the servers run.
    pub exe: PathBuf,
    /// Nodes.
    pub nodes: u32,
    /// Shards of the cluster.
    pub shards: u32,
    /// Regions the nodes are spread over, round-robin (0 or 1: no region labels).
    pub regions: u32,
    /// One-way delay of every peer link between two regions.
    pub region_delay: Duration,
    /// Set survival `region` before the command runs (three regions or more).
    pub survival_region: bool,
    /// Where the nodes' data directories, config and logs go.
    pub out: PathBuf,
    /// The program and its arguments.
    pub command: Vec<String>,
}

/// Longest wait for the cluster to be up, and for its replicas to be where the placement
/// wants them, before the command runs.
const READY_LIMIT: Duration = Duration::from_secs(120);

/// Starts the cluster, waits until it is healthy and every region holds a replica of every
/// shard, runs the command, and tears everything down. Returns the command's exit code.
///
/// The command sees `TRIREME_LAB_NODES` (the node names, space-separated) and, for each node
/// `nK`, `TRIREME_LAB_NK_HTTP` (`http://ip:port`), `TRIREME_LAB_NK_RESP` (`redis://ip:port`)
/// and `TRIREME_LAB_NK_REGION`.
pub fn hold(config: &HoldConfig) -> Result<i32, ChaosError> {
    let Some((program, args)) = config.command.split_first() else {
        return Err(ChaosError::Config(
            "no command to run against the lab".into(),
        ));
    };
    if config.nodes < 1 {
        return Err(ChaosError::Config("a lab needs a node".into()));
    }
    if config.out.join("node.toml").exists() {
        return Err(ChaosError::Config(format!(
            "{} already holds a lab: give another --out, or remove it",
            config.out.display()
        )));
    }
    std::fs::create_dir_all(&config.out).map_err(|e| ChaosError::io(config.out.display(), e))?;
    let tag = format!("{}", std::process::id() % 100_000);
    let lab = Lab::create(&tag, config.nodes)?;
    crate::secure::prepare(&config.out, None)?;
    let regions = config.regions;
    let settings = ServerSettings {
        exe: config.exe.clone(),
        shards: config.shards,
        dir: config.out.clone(),
        regions,
        chaos_timing: false,
    };
    let mut servers = nodes::prepare(lab.nodes(), &settings, 0)?;
    let region_of: Vec<Option<String>> = (0..lab.nodes().len())
        .map(|slot| nodes::region_of_slot(slot, regions))
        .collect();
    let delay = DelayLine::start(&lab, &region_of, config.region_delay)?;
    let code = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                lab.enter_hub()?;
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .map_err(|e| ChaosError::io("tokio runtime", e))?;
                runtime.block_on(async {
                    for s in servers.iter_mut() {
                        s.start()?;
                    }
                    let client = workload::http_client();
                    let nodes = live(&servers);
                    verify::wait_healthy(&client, &nodes, READY_LIMIT).await?;
                    if config.survival_region {
                        verify::survive_regions(&client, &nodes, READY_LIMIT).await?;
                    }
                    let want: BTreeSet<Option<String>> = region_of.iter().cloned().collect();
                    verify::wait_replicas_in(&client, &nodes, &want, READY_LIMIT).await?;
                    eprintln!(
                        "lab up: {} nodes in {} region(s), {:?} between regions; running {program}",
                        nodes.len(),
                        want.len(),
                        config.region_delay
                    );
                    let mut command = std::process::Command::new(program);
                    command.args(args);
                    let names: Vec<String> = nodes.iter().map(|n| n.name.clone()).collect();
                    command.env("TRIREME_LAB_NODES", names.join(" "));
                    for (node, region) in nodes.iter().zip(&region_of) {
                        let var = format!("TRIREME_LAB_{}", node.name.to_uppercase());
                        command.env(format!("{var}_HTTP"), &node.http_base);
                        command.env(format!("{var}_RESP"), format!("redis://{}", node.resp_addr));
                        command.env(format!("{var}_REGION"), region.as_deref().unwrap_or(""));
                    }
                    let status = command.status().map_err(|e| ChaosError::Command {
                        command: program.clone(),
                        message: e.to_string(),
                    })?;
                    Ok::<i32, ChaosError>(status.code().unwrap_or(1))
                })
            })
            .join()
            .unwrap_or_else(|_| Err(ChaosError::Cluster("the lab driver panicked".into())))
    });
    // Servers go before their namespaces do.
    drop(servers);
    drop(delay);
    drop(lab);
    code
}
