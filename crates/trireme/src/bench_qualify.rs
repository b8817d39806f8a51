//! `trireme bench qualify`: the Aerospike report's qualification. It runs a scenario in rate
//! mode at rising offered rates, then bisects, to find the highest rate whose read latency
//! stays under a bound (the search itself is `trireme_bench::qualify`), repeats the search and
//! reports the median, and optionally the cost per million operations.

use anyhow::{Context, bail};
use clap::Args;
use std::path::PathBuf;
use trireme_bench::qualify::{LatencyStat, QualifyReport, Search, SearchConfig, StepResult};
use trireme_bench::{Mode, Operation, RunResult, Scenario};

use crate::bench::{BenchArgs, run_with_progress};

/// Runs `trireme bench qualify`.
pub fn run(args: QualifyArgs) -> anyhow::Result<()> {
    qualify(args)
}

/// Flags of `trireme bench qualify`.
#[derive(Args, Debug)]
pub struct QualifyArgs {
    /// Scenario file (its mode is replaced by each step's rate).
    pub scenario: Option<PathBuf>,
    /// A built-in scenario instead of a file (default: aerospike-qualify, 50/50 read/update).
    #[arg(long, conflicts_with = "scenario")]
    pub preset: Option<String>,
    /// Target URL; repeat for several. None: a local 3-node Trireme cluster.
    #[arg(long = "target")]
    pub targets: Vec<String>,
    /// Driver: resp, trireme, consul or etcd.
    #[arg(long)]
    pub driver: Option<String>,
    /// Concurrent workers (connections); the highest rate they can offer is about
    /// workers / latency.
    #[arg(long)]
    pub concurrent: Option<u32>,
    /// Scale the key space (and the load phase, done once before the first step) down.
    #[arg(long)]
    pub keys: Option<u64>,
    /// Read consistency: default, consistent or stale.
    #[arg(long)]
    pub consistency: Option<String>,
    /// Bound on the read latency statistic, in milliseconds.
    #[arg(long, default_value_t = 1.0)]
    pub bound_ms: f64,
    /// Statistic held to the bound: avg (the report's), p95 or p99.
    #[arg(long, default_value = "avg")]
    pub percentile: String,
    /// First offered rate (operations per second, all workers together).
    #[arg(long, default_value_t = 1000)]
    pub start_rate: u64,
    /// Highest rate offered.
    #[arg(long, default_value_t = 1_000_000)]
    pub max_rate: u64,
    /// Factor between ramp steps.
    #[arg(long, default_value_t = 1.5)]
    pub factor: f64,
    /// Most bisection steps after the ramp.
    #[arg(long, default_value_t = 4)]
    pub bisect_steps: u32,
    /// Measured length of each step.
    #[arg(long, default_value = "10s")]
    pub step_duration: String,
    /// Unmeasured warm-up at the start of each step.
    #[arg(long, default_value = "1s")]
    pub warmup: String,
    /// How many times the whole search is run (the report repeats at least 3 times).
    #[arg(long, default_value_t = 3)]
    pub repeat: u32,
    /// Cost of the system under test per hour (any currency): adds cost per million operations.
    #[arg(long)]
    pub cost_per_hour: Option<f64>,
    /// Write qualify.json into this directory.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Print the result as JSON on stdout (the table goes to stderr).
    #[arg(long)]
    pub json: bool,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

impl QualifyArgs {
    fn scenario(&self) -> anyhow::Result<Scenario> {
        let bench = BenchArgs {
            scenario: self.scenario.clone(),
            preset: match (&self.preset, &self.scenario) {
                (None, None) => Some("aerospike-qualify".to_owned()),
                (preset, _) => preset.clone(),
            },
            targets: self.targets.clone(),
            driver: self.driver.clone(),
            duration: Some(self.step_duration.clone()),
            warmup: Some(self.warmup.clone()),
            concurrent: self.concurrent,
            keys: self.keys,
            consistency: self.consistency.clone(),
            ..BenchArgs::default()
        };
        bench.scenario()
    }

    fn search_config(&self) -> anyhow::Result<SearchConfig> {
        let stat = LatencyStat::parse(&self.percentile).with_context(|| {
            format!(
                "--percentile {:?}: expected avg, p95 or p99",
                self.percentile
            )
        })?;
        if !(self.bound_ms > 0.0 && self.bound_ms.is_finite()) {
            bail!("--bound-ms must be a positive number of milliseconds");
        }
        if !(self.factor > 1.0 && self.factor.is_finite()) {
            bail!("--factor must be above 1");
        }
        if self.start_rate == 0 || self.max_rate < self.start_rate {
            bail!("--start-rate must be at least 1 and at most --max-rate");
        }
        let mut config = SearchConfig::new(self.bound_ms * 1000.0, self.start_rate, self.max_rate);
        config.stat = stat;
        config.factor = self.factor;
        config.bisect_steps = self.bisect_steps;
        Ok(config)
    }
}

/// A step's figures: read latency from the `get` row (the total row if the mix has no reads).
fn step_result(offered: u64, result: &RunResult) -> StepResult {
    let read = result.per_op.get(&Operation::Get).unwrap_or(&result.total);
    StepResult {
        offered,
        achieved: result.total.ops_per_sec,
        read_avg_us: read.mean_us,
        read_p95_us: read.p95_us,
        read_p99_us: read.p99_us,
        ops: result.total.count,
        errors: result.total.errors,
    }
}

fn qualify(args: QualifyArgs) -> anyhow::Result<()> {
    let mut scenario = args.scenario()?;
    let config = args.search_config()?;
    if args.repeat == 0 {
        bail!("--repeat must be at least 1");
    }
    if let Some(cost) = args.cost_per_hour
        && !(cost >= 0.0 && cost.is_finite())
    {
        bail!("--cost-per-hour must be a non-negative number");
    }
    if scenario.operations.weight(Operation::Get) == 0 {
        eprintln!("the scenario has no reads: the bound applies to all operations' latency");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    eprintln!(
        "qualifying {} ({:?}, {} workers, {:?} steps + {:?} warm-up, {} repeat(s)) against {}",
        scenario.name,
        scenario.driver,
        scenario.concurrent,
        scenario.duration,
        scenario.warmup,
        args.repeat,
        if scenario.targets.is_empty() {
            format!("a local {}-node Trireme cluster", crate::bench::LOCAL_NODES)
        } else {
            crate::bench::redacted(&scenario.targets).join(", ")
        }
    );
    let repeats = runtime.block_on(async {
        if !scenario.targets.is_empty() {
            let targets = scenario.targets.clone();
            return searches(&args, &mut scenario, &targets, &config).await;
        }
        let cluster = crate::bench::start_local_cluster(scenario.driver).await?;
        let targets = crate::bench::local_targets(&scenario, cluster.nodes())?;
        eprintln!(
            "local cluster up; qualifying against {}",
            targets.join(", ")
        );
        let result = searches(&args, &mut scenario, &targets, &config).await;
        crate::bench::stop_local_cluster(cluster, result).await
    })?;
    let report = QualifyReport::new(
        &scenario.name,
        config,
        scenario.duration.as_secs_f64(),
        repeats,
        args.cost_per_hour,
    );
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let path = dir.join("qualify.json");
        std::fs::write(&path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    crate::bench::print_report(args.json, &report.text(), &report)
}

/// Runs `--repeat` searches; the load phase (if any) runs once, before the first step.
async fn searches(
    args: &QualifyArgs,
    scenario: &mut Scenario,
    targets: &[String],
    config: &SearchConfig,
) -> anyhow::Result<Vec<trireme_bench::qualify::SearchOutcome>> {
    let mut outcomes = Vec::new();
    eprintln!("{}", QualifyReport::step_header());
    for repeat in 1..=args.repeat {
        let mut search = Search::new(config.clone());
        while let Some(rate) = search.next_rate() {
            scenario.mode = Mode::Rate(rate);
            let index = search.steps().len() + 1;
            let label = format!("repeat {repeat} step {index} @ {rate} ops/s");
            let result = run_with_progress(scenario, targets, args.quiet, &label)
                .await
                .with_context(|| format!("step at {rate} ops/s"))?;
            if let Some(load) = &result.load {
                eprintln!(
                    "loaded {} keys in {:.1} s ({} errors)",
                    load.count,
                    load.elapsed.as_secs_f64(),
                    load.errors
                );
            }
            // Keys loaded once stay loaded.
            scenario.load.keys = None;
            let step = search.record(step_result(rate, &result));
            eprintln!("{}", QualifyReport::step_row(repeat as usize, index, step));
        }
        outcomes.push(search.finish());
    }
    Ok(outcomes)
}
