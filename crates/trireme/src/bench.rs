//! `trireme bench`: run a scenario (a preset or a TOML file) against running targets and
//! print the seeds' table. This first slice needs `--target`; the embedded local cluster and
//! the report files come next (issue 4).

use anyhow::{Context, bail};
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;
use trireme_bench::{Consistency, Driver, Scenario};

/// Flags of `trireme bench`; each overrides the scenario's own setting.
#[derive(Args, Debug, Default)]
pub struct BenchArgs {
    /// Qualification or the replication-delay probe instead of a plain run.
    #[command(subcommand)]
    pub command: Option<crate::bench_qualify::BenchCommand>,
    /// Scenario file (TOML, the basho_bench vocabulary of DESIGN.md §4).
    pub scenario: Option<PathBuf>,
    /// A built-in scenario instead of a file (see --list-presets).
    #[arg(long, conflicts_with = "scenario")]
    pub preset: Option<String>,
    /// Print the built-in presets and exit.
    #[arg(long)]
    pub list_presets: bool,
    /// Target URL, e.g. redis://127.0.0.1:7701; repeat for several (workers spread over them).
    #[arg(long = "target")]
    pub targets: Vec<String>,
    /// Driver: resp, trireme, consul or etcd (default: the scenario's; redis:// targets imply
    /// resp).
    #[arg(long)]
    pub driver: Option<String>,
    /// Measured duration, e.g. 30s or 2m.
    #[arg(long)]
    pub duration: Option<String>,
    /// Unmeasured warm-up before the measured part.
    #[arg(long)]
    pub warmup: Option<String>,
    /// Concurrent workers (connections).
    #[arg(long)]
    pub concurrent: Option<u32>,
    /// Scale the key space (and the load phase) down to this many keys; the report says so.
    #[arg(long)]
    pub keys: Option<u64>,
    /// Print the result as JSON after the table.
    #[arg(long)]
    pub json: bool,
    /// Read consistency: default, consistent or stale (overrides the scenario's).
    #[arg(long)]
    pub consistency: Option<String>,
    /// No progress bar on stderr.
    #[arg(long)]
    pub quiet: bool,
}

fn duration(flag: &str, text: &str) -> anyhow::Result<Duration> {
    humantime::parse_duration(text)
        .with_context(|| format!("{flag} {text:?} is not a duration like 30s or 2m"))
}

impl BenchArgs {
    pub(crate) fn scenario(&self) -> anyhow::Result<Scenario> {
        let mut scenario = match (&self.preset, &self.scenario) {
            (Some(name), _) => trireme_bench::preset(name).with_context(|| {
                format!(
                    "no preset {name:?}; built in: {}",
                    trireme_bench::preset_names().join(", ")
                )
            })?,
            (None, Some(path)) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("cannot read scenario {}", path.display()))?;
                Scenario::from_toml_str(&text)
                    .with_context(|| format!("invalid scenario {}", path.display()))?
            }
            (None, None) => bail!("give a scenario file or --preset NAME (see --list-presets)"),
        };
        // A redis:// target implies the RESP driver unless --driver says otherwise.
        if self.driver.is_none()
            && !self.targets.is_empty()
            && self.targets.iter().all(|t| t.starts_with("redis://"))
        {
            scenario.driver = Driver::Resp;
        }
        if let Some(driver) = &self.driver {
            scenario.driver = match driver.as_str() {
                "resp" => Driver::Resp,
                "trireme" => Driver::Trireme,
                "consul" => Driver::Consul,
                "etcd" => Driver::Etcd,
                other => bail!("--driver {other:?}: expected resp, trireme, consul or etcd"),
            };
        }
        if let Some(mode) = &self.consistency {
            scenario.consistency = match mode.as_str() {
                "default" => Consistency::Default,
                "consistent" => Consistency::Consistent,
                "stale" => Consistency::Stale,
                other => bail!("--consistency {other:?}: expected default, consistent or stale"),
            };
        }
        if let Some(text) = &self.duration {
            scenario.duration = duration("--duration", text)?;
        }
        if let Some(text) = &self.warmup {
            scenario.warmup = duration("--warmup", text)?;
        }
        if let Some(n) = self.concurrent {
            scenario.concurrent = n;
        }
        if !self.targets.is_empty() {
            scenario.targets = self.targets.clone();
        }
        if let Some(keys) = self.keys {
            eprintln!(
                "key space scaled from {} to {keys} keys (--keys)",
                scenario.key_generator.keys()
            );
            scenario.key_generator.set_keys(keys);
            if scenario.load.keys.is_some() {
                scenario.load.keys = Some(keys);
            }
        }
        scenario
            .validate()
            .context("invalid scenario after applying the flags")?;
        Ok(scenario)
    }
}

pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    if let Some(command) = args.command {
        return crate::bench_qualify::run(command);
    }
    if args.list_presets {
        for name in trireme_bench::preset_names() {
            println!("{name}");
        }
        return Ok(());
    }
    let scenario = args.scenario()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    eprintln!(
        "running {} ({:?}, {} workers, {:?} + {:?} warm-up) against {}",
        scenario.name,
        scenario.driver,
        scenario.concurrent,
        scenario.duration,
        scenario.warmup,
        if scenario.targets.is_empty() {
            format!("a local {LOCAL_NODES}-node Trireme cluster")
        } else {
            scenario.targets.join(", ")
        }
    );
    let result = runtime.block_on(async {
        if !scenario.targets.is_empty() {
            return Ok(run_with_progress(&scenario, &scenario.targets, args.quiet, "").await?);
        }
        // No target: a local 3-node cluster of real processes, run against, then stopped.
        let mut cluster = start_local_cluster(scenario.driver).await?;
        let targets = local_targets(&scenario, cluster.nodes())?;
        eprintln!("local cluster up; running against {}", targets.join(", "));
        let result = run_with_progress(&scenario, &targets, args.quiet, "").await;
        let stopped = cluster.stop().await;
        let _ = std::fs::remove_dir_all(cluster.dir());
        let result = result?;
        stopped.context("stopping the local cluster")?;
        Ok::<_, anyhow::Error>(result)
    })?;
    // With --json, stdout carries only the JSON (for scripts); the table goes to stderr.
    if args.json {
        eprint!("{}", trireme_bench::report::table(&result));
        println!("{}", serde_json::to_string_pretty(&result)?);
    } else {
        print!("{}", trireme_bench::report::table(&result));
    }
    Ok(())
}

/// [`trireme_bench::run`] with a progress bar on stderr (none when `quiet`) labelled `label`.
pub(crate) async fn run_with_progress(
    scenario: &Scenario,
    targets: &[String],
    quiet: bool,
    label: &str,
) -> Result<trireme_bench::RunResult, trireme_bench::BenchError> {
    let progress = std::sync::Arc::new(trireme_bench::Progress::default());
    let bar = (!quiet).then(|| {
        trireme_bench::progress::ProgressBar::start(
            std::sync::Arc::clone(&progress),
            scenario.warmup + scenario.duration,
            scenario.load.keys.unwrap_or(0),
            label,
        )
    });
    let result = trireme_bench::run(scenario, targets, Some(progress)).await;
    if let Some(bar) = bar {
        bar.finish().await;
    }
    result
}

/// Nodes of the cluster `trireme bench` starts when it is given no target.
pub(crate) const LOCAL_NODES: u32 = 3;

/// Starts the embedded cluster in a fresh directory under the system's temp dir, on the first
/// free block of loopback ports, and waits until its shard leaders have spread over the nodes
/// (the leader balancer needs a few seconds after start-up), so the run measures the steady state.
pub(crate) async fn start_local_cluster(
    driver: Driver,
) -> anyhow::Result<crate::cluster::LocalCluster> {
    if matches!(driver, Driver::Etcd) {
        bail!(
            "the etcd driver needs --target: without one, trireme bench starts a Trireme cluster"
        );
    }
    let dir = std::env::temp_dir().join(format!("trireme-bench-{}", std::process::id()));
    // The first block of ports that is free now.
    let opts = (17_700..60_000)
        .step_by(1_000)
        .map(|base_port| {
            let mut opts = crate::cluster::ClusterOptions::new(LOCAL_NODES, &dir);
            opts.base_port = base_port;
            opts
        })
        .find(|opts| opts.check_ports().is_ok())
        .context("no free block of loopback ports for a local cluster")?;
    match crate::cluster::LocalCluster::start(opts).await {
        Ok(cluster) => {
            wait_for_balanced_leaders(cluster.nodes()).await;
            Ok(cluster)
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            Err(e.context("cannot start the local cluster"))
        }
    }
}

/// Polls node 1's shard map until every shard is led by its preferred (first) replica, for at
/// most 15 s; a run that starts before that still works, through forwarding.
async fn wait_for_balanced_leaders(nodes: &[crate::cluster::LocalNode]) {
    let Some(first) = nodes.first() else { return };
    let url = format!("http://{}/v1/cluster/shards", first.http);
    let client = reqwest::Client::builder().no_proxy().build();
    let Ok(client) = client else { return };
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while std::time::Instant::now() < deadline {
        let balanced = async {
            let map: serde_json::Value = client.get(&url).send().await.ok()?.json().await.ok()?;
            let shards = map["shards"].as_array()?;
            Some(shards.iter().all(|s| {
                s["leader"]["name"].is_string() && s["leader"]["name"] == s["replicas"][0]["name"]
            }))
        };
        if balanced.await == Some(true) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The embedded cluster's address for the scenario's driver: node 1 (the trireme driver then
/// routes each key to its leader itself).
pub(crate) fn local_targets(
    scenario: &Scenario,
    nodes: &[crate::cluster::LocalNode],
) -> anyhow::Result<Vec<String>> {
    let first = nodes.first().context("the local cluster has no nodes")?;
    Ok(vec![match scenario.driver {
        Driver::Resp => format!("redis://{}", first.resp),
        _ => format!("http://{}", first.http),
    }])
}
