//! `trireme bench`: run a scenario (a preset or a TOML file) against running targets or an
//! embedded local cluster, print the seeds' table and hey's histograms, and keep everything
//! in a results directory; `trireme bench compare` lays finished runs side by side.

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};
use trireme_bench::repeat::{self, RepeatSummary};
use trireme_bench::results::{self, HostInfo, ResultFile};
use trireme_bench::{Consistency, Driver, RunResult, Scenario};

/// Where results directories go unless `--out` says otherwise.
const RESULTS_DIR: &str = "results";

/// Flags of `trireme bench`; each overrides the scenario's own setting.
#[derive(Args, Debug, Default)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct BenchArgs {
    /// Something other than running a scenario.
    #[command(subcommand)]
    pub command: Option<BenchCommand>,
    /// Scenario file (TOML, the basho_bench vocabulary of docs/benchmarks.md).
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
    /// Driver: resp, trireme, consul, etcd or orchestrate (default: the scenario's; redis://
    /// targets imply resp).
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
    /// Results directory (default: results/<UTC YYYYMMDD-HHMMSS>-<scenario>/); with
    /// --repeat, the parent of one directory per run.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Write no results directory (print only).
    #[arg(long, conflicts_with = "out")]
    pub no_results: bool,
    /// Run the scenario N times (same seed) and report the spread of ops/s and p99.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: u32,
    /// No progress bar on stderr.
    #[arg(long)]
    pub quiet: bool,
}

/// Subcommands of `trireme bench`.
#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Lay finished runs side by side: ops/s and latencies per operation, each run's ratio to
    /// the first; writes compare.html and overlaid plots.
    Compare(CompareArgs),
    /// Find the highest rate whose read latency stays under a bound (Aerospike's method).
    Qualify(crate::bench_qualify::QualifyArgs),
    /// Measure replication delay: write on one node, poll another until visible (Dynomite's).
    Probe(crate::bench_probe::ProbeArgs),
    /// Consul blocking queries at scale: N watchers on one key, one writer, the time from
    /// each write to every watcher's wake-up (or, with --hold, idle watchers held).
    Watch(crate::bench_watch::WatchArgs),
}

/// Arguments of `trireme bench compare`.
#[derive(Args, Debug)]
pub struct CompareArgs {
    /// Results directories of the runs (each with a result.json); the first is the baseline.
    #[arg(required = true, num_args = 1.., value_name = "RUN_DIR")]
    pub runs: Vec<PathBuf>,
    /// Where compare.html and the plots go (default: results/compare-<UTC time>/).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
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
                "orchestrate" => Driver::Orchestrate,
                other => {
                    bail!("--driver {other:?}: expected resp, trireme, consul, etcd or orchestrate")
                }
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

pub fn run(mut args: BenchArgs) -> anyhow::Result<()> {
    match args.command.take() {
        Some(BenchCommand::Compare(compare)) => return run_compare(&compare),
        Some(BenchCommand::Qualify(qualify)) => return crate::bench_qualify::run(qualify),
        Some(BenchCommand::Probe(probe)) => return crate::bench_probe::run(probe),
        Some(BenchCommand::Watch(watch)) => return crate::bench_watch::run(watch),
        None => {}
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
        "running {} ({:?}, {} workers, {:?} + {:?} warm-up, seed {}) against {}",
        scenario.name,
        scenario.driver,
        scenario.concurrent,
        scenario.duration,
        scenario.warmup,
        scenario.seed,
        if scenario.targets.is_empty() {
            format!("a local {LOCAL_NODES}-node Trireme cluster")
        } else {
            redacted(&scenario.targets).join(", ")
        }
    );
    let command = command_line();
    let started = SystemTime::now();
    let base = (!args.no_results).then(|| {
        args.out.clone().unwrap_or_else(|| {
            PathBuf::from(RESULTS_DIR).join(results::run_dir_name(started, &scenario.name))
        })
    });
    let repeat = args.repeat;
    let mut runs = Vec::new();
    let mut dirs = Vec::new();
    for i in 1..=repeat {
        if repeat > 1 {
            eprintln!("run {i} of {repeat}");
        }
        let started = SystemTime::now();
        let result = runtime.block_on(run_once(&scenario, args.quiet))?;
        let text = trireme_bench::report::summary_text(&result);
        // With --json, stdout carries only JSON (for scripts); the text goes to stderr.
        if args.json {
            eprint!("{text}");
            if repeat == 1 {
                println!("{}", serde_json::to_string_pretty(&result)?);
            }
        } else {
            print!("{text}");
        }
        if let Some(base) = &base {
            let dir = if repeat > 1 {
                base.join(format!("run-{i}"))
            } else {
                base.clone()
            };
            let file = ResultFile {
                trireme_version: env!("CARGO_PKG_VERSION").to_owned(),
                started_at: results::rfc3339(started),
                command: command.clone(),
                host: HostInfo::current(),
                scenario: Scenario {
                    targets: redacted(&scenario.targets),
                    ..scenario.clone()
                },
                result,
            };
            trireme_bench::output::write_run_dir(&dir, &file)?;
            eprintln!("results in {}", dir.display());
            dirs.push(dir.display().to_string());
            runs.push(file.result);
        } else {
            runs.push(result);
        }
    }
    if repeat > 1 {
        let refs: Vec<&RunResult> = runs.iter().collect();
        let summary = RepeatSummary {
            scenario: scenario.name.clone(),
            repeat: runs.len(),
            runs: dirs,
            per_op: repeat::summarise(&refs),
        };
        let text = repeat::text(&summary);
        if args.json {
            eprint!("\n{text}");
            println!("{}", serde_json::to_string_pretty(&summary)?);
        } else {
            print!("\n{text}");
        }
        if let Some(base) = &base {
            let path = results::write_json(base, "repeat.json", &summary)?;
            eprintln!("repeat summary in {}", path.display());
        }
    }
    Ok(())
}

/// Prints a report: with `json`, the JSON alone on stdout (for scripts) and the text on
/// stderr; otherwise the text on stdout.
pub(crate) fn print_report(
    json: bool,
    text: &str,
    value: &impl serde::Serialize,
) -> anyhow::Result<()> {
    if json {
        eprint!("{text}");
        println!("{}", serde_json::to_string_pretty(value)?);
    } else {
        print!("{text}");
    }
    Ok(())
}

/// `trireme bench compare`: the side-by-side table on stdout, the HTML and plots in a dir.
fn run_compare(args: &CompareArgs) -> anyhow::Result<()> {
    let runs = trireme_bench::compare::load(&args.runs)?;
    print!("{}", trireme_bench::compare::text(&runs));
    let dir = args.out.clone().unwrap_or_else(|| {
        Path::new(RESULTS_DIR).join(format!("compare-{}", results::stamp(SystemTime::now())))
    });
    trireme_bench::output::write_compare_dir(&dir, &runs)?;
    eprintln!("compare.html and plots in {}", dir.display());
    Ok(())
}

/// The command line as typed, arguments with spaces or quotes single-quoted.
/// Targets as they may be shown: tokens replaced (see `redact_target`).
pub(crate) fn redacted(targets: &[String]) -> Vec<String> {
    targets
        .iter()
        .map(|t| trireme_bench::driver::redact_target(t))
        .collect()
}

/// The command line, for the results; tokens in targets and after `--token` replaced.
fn command_line() -> String {
    let mut args = std::env::args();
    // The program as `trireme`, whatever path it was started by.
    let mut words = vec![args.next().map_or_else(
        || "trireme".to_owned(),
        |p| {
            Path::new(&p)
                .file_name()
                .map_or(p.clone(), |n| n.to_string_lossy().into_owned())
        },
    )];
    let mut after_token = false;
    words.extend(args.map(|a| {
        let a = if std::mem::take(&mut after_token) {
            "***".to_owned()
        } else if a == "--token" {
            after_token = true;
            a
        } else if a.starts_with("--token=") {
            "--token=***".to_owned()
        } else {
            trireme_bench::driver::redact_target(&a)
        };
        if a.is_empty() || a.contains(|c: char| c.is_whitespace() || "'\"$\\`".contains(c)) {
            format!("'{}'", a.replace('\'', "'\\''"))
        } else {
            a
        }
    }));
    words.join(" ")
}

/// One run of `scenario`: against its targets, or against a local cluster started for it.
async fn run_once(scenario: &Scenario, quiet: bool) -> anyhow::Result<RunResult> {
    if !scenario.targets.is_empty() {
        return Ok(run_with_progress(scenario, &scenario.targets, quiet, "").await?);
    }
    // No target: a local 3-node cluster of real processes, run against, then stopped.
    let cluster = start_local_cluster(scenario.driver).await?;
    let targets = local_targets(scenario, cluster.nodes())?;
    eprintln!("local cluster up; running against {}", targets.join(", "));
    let result = run_with_progress(scenario, &targets, quiet, "").await;
    stop_local_cluster(cluster, result).await
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

/// Stops the embedded cluster after a run on it and removes its directory. The run's own
/// error comes first; a failure to stop is reported only after a successful run.
pub(crate) async fn stop_local_cluster<T, E: Into<anyhow::Error>>(
    mut cluster: trireme_local::LocalCluster,
    result: Result<T, E>,
) -> anyhow::Result<T> {
    let stopped = cluster.stop().await;
    let _ = std::fs::remove_dir_all(cluster.dir());
    let result = result.map_err(Into::into)?;
    stopped.context("stopping the local cluster")?;
    Ok(result)
}

/// Nodes of the cluster `trireme bench` starts when it is given no target.
pub(crate) const LOCAL_NODES: u32 = 3;

/// Starts the embedded cluster in a fresh directory under the system's temp dir, on the first
/// free block of loopback ports, and waits until its shard leaders have spread over the nodes
/// (the leader balancer needs a few seconds after start-up), so the run measures the steady state.
pub(crate) async fn start_local_cluster(
    driver: Driver,
) -> anyhow::Result<trireme_local::LocalCluster> {
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
            let mut opts = trireme_local::ClusterOptions::new(LOCAL_NODES, &dir);
            opts.base_port = base_port;
            opts
        })
        .find(|opts| opts.check_ports().is_ok())
        .context("no free block of loopback ports for a local cluster")?;
    match trireme_local::LocalCluster::start(opts).await {
        Ok(cluster) => {
            wait_for_balanced_leaders(cluster.nodes()).await;
            Ok(cluster)
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            Err(anyhow::Error::from(e).context("cannot start the local cluster"))
        }
    }
}

/// Polls node 1's shard map until every shard is led by its preferred (first) replica, for at
/// most 15 s; a run that starts before that still works, through forwarding.
async fn wait_for_balanced_leaders(nodes: &[trireme_local::LocalNode]) {
    let Some(first) = nodes.first() else { return };
    let url = format!("http://{}/v1/cluster/shards", first.http);
    let client = reqwest::Client::builder().no_proxy().build();
    let Ok(client) = client else { return };
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while std::time::Instant::now() < deadline {
        let balanced = async {
            let map: trireme_types::admin::ShardsDoc =
                client.get(&url).send().await.ok()?.json().await.ok()?;
            Some(map.shards.iter().all(|s| {
                s.leader
                    .as_ref()
                    .is_some_and(|l| s.replicas.first().is_some_and(|r| r.name == l.name))
            }))
        };
        if balanced.await == Some(true) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The embedded cluster's addresses for the scenario's driver: node 1 (the trireme driver then
/// routes each key to its leader itself), or for the orchestrate driver every node, its
/// workers spread over them as clients behind a load balancer would be (each node forwards
/// what it does not lead, and every list and search touches every shard).
pub(crate) fn local_targets(
    scenario: &Scenario,
    nodes: &[trireme_local::LocalNode],
) -> anyhow::Result<Vec<String>> {
    let first = nodes.first().context("the local cluster has no nodes")?;
    Ok(match scenario.driver {
        Driver::Resp => vec![format!("redis://{}", first.resp)],
        Driver::Orchestrate => nodes.iter().map(|n| format!("http://{}", n.http)).collect(),
        _ => vec![format!("http://{}", first.http)],
    })
}
