//! `trireme chaos`: runs seeds of the chaos runner (crate `trireme-chaos`) and prints what each
//! found. Exits non-zero when any seed fails its checks.

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Args;
use trireme_chaos::{ChaosConfig, FaultKind};

/// Flags of `trireme chaos`.
#[derive(Args, Debug)]
pub struct ChaosArgs {
    /// First seed (default: drawn from the clock, and printed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// How many seeds to run, one after another (seed, seed+1, ...).
    #[arg(long, default_value_t = 1)]
    pub seeds: u32,
    /// Nodes, each in its own network namespace.
    #[arg(long, default_value_t = 3)]
    pub nodes: u32,
    /// Shards.
    #[arg(long, default_value_t = 4)]
    pub shards: u32,
    /// Workload duration of each seed, e.g. 30s.
    #[arg(long, default_value = "30s")]
    pub duration: String,
    /// Concurrent clients.
    #[arg(long, default_value_t = 8)]
    pub clients: u32,
    /// Keys the clients share.
    #[arg(long, default_value_t = 8)]
    pub keys: u32,
    /// Operations per second of all clients together.
    #[arg(long, default_value_t = 200.0)]
    pub rate: f64,
    /// Clients of Consul transactions (`/v1/txn`) on groups of keys, besides --clients; at
    /// the same pace each as the other clients.
    #[arg(long, default_value_t = 2)]
    pub txn_clients: u32,
    /// Groups of three keys the transaction clients share.
    #[arg(long, default_value_t = 2)]
    pub txn_groups: u32,
    /// Spread each group's keys over shards (no hash tag), so that the transactions commit
    /// across shards; the group reads are then transactions of `get`s only (an `MGET` or a
    /// listing reads each shard at its own moment).
    #[arg(long)]
    pub txn: bool,
    /// Clients taking Consul locks with sessions, besides --clients: each renews its
    /// session, takes a lock, holds it, releases it, and now and then stalls while holding
    /// one past its session's TTL.
    #[arg(long, default_value_t = 3)]
    pub lock_clients: u32,
    /// Lock keys the lock clients contend for.
    #[arg(long, default_value_t = 1)]
    pub locks: u32,
    /// Fault kinds, comma-separated: partition, one-way, loss, delay, kill, kill-all, pause,
    /// the ones aimed at replica moves, kill-mover (the source or target of a move) and
    /// isolate-meta (the metadata leader), and cut-region (every node of one region cut from
    /// the others). Default: all of them, the two aimed at moves only with --splits or
    /// --membership, cut-region only with --regions.
    #[arg(long, value_delimiter = ',')]
    pub faults: Vec<String>,
    /// Inject exactly this many faults per seed (the run lasts until they are done, at least
    /// --duration); default: as many as fit in --duration.
    #[arg(long)]
    pub fault_count: Option<usize>,
    /// Shard splits to make during each seed, one at the start of each fault until done (on
    /// five nodes each split also sets replicas moving); the run then checks that every
    /// shard ends at its replication factor on live nodes.
    #[arg(long, default_value_t = 0)]
    pub splits: u32,
    /// Change the membership during each seed, between the faults: a spare node (one more
    /// namespace) joins, a node is drained and removed, and a node is killed for good,
    /// removed by force and replaced by a new one. The run then checks that every change
    /// finished and every shard ends at its replication factor on live nodes.
    #[arg(long)]
    pub membership: bool,
    /// Output directory; each seed writes to OUT/seed-<seed>/ (default: chaos-results/<time>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Self-test: record `?stale` reads as default ones, a planted bug the check must catch
    /// (the run is then expected to fail).
    #[arg(long, hide = true)]
    pub self_test_stale_as_default: bool,
    /// Self-test: the lock clients record leases 30 s longer than the server promises, a
    /// planted bug the lock check must catch once a stalled holder's lock is taken over
    /// (every hold then stalls, so a takeover happens in any run of a few seconds).
    #[arg(long, hide = true)]
    pub self_test_overstate_lease: bool,
    /// ACLs (default deny) and TLS on every port and between nodes: the clients use a
    /// management token and trust a CA made for the run.
    #[arg(long)]
    pub secure: bool,
    /// Regions: with them every stale read is also checked against the age it reports, and a
    /// region cut off is one of the faults.
    #[command(flatten)]
    pub region: RegionArgs,
    /// The Go checker's source directory.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../../chaos/checker"))]
    pub checker: PathBuf,
}

/// How the lab's nodes are spread over regions: flags of `trireme chaos` and `trireme lab`.
#[derive(Args, Debug)]
pub struct RegionArgs {
    /// Spread the nodes over this many regions, round-robin (`--region r1`, `r2`, ...):
    /// every shard's voters in the home region (r1) and a learner in each other region
    #[arg(long, default_value_t = 0)]
    pub regions: u32,
    /// With --regions: the one-way delay of every peer link between two regions, e.g. 40ms
    #[arg(long, default_value = "40ms")]
    pub region_delay: String,
    /// With --regions 3 or more: the survival goal, `zone` (voters in the home region) or
    /// `region` (set before the clients start: each shard's voters in three regions, so a
    /// region cut off should not stop the writes)
    #[arg(long, default_value = "zone")]
    pub survival: String,
}

impl RegionArgs {
    /// The delay between regions, and whether survival `region` is asked for (it needs
    /// three regions).
    fn parse(&self) -> anyhow::Result<(std::time::Duration, bool)> {
        let delay = humantime::parse_duration(&self.region_delay).with_context(|| {
            format!(
                "--region-delay {:?} is not a duration like 40ms",
                self.region_delay
            )
        })?;
        let survival_region = match self.survival.as_str() {
            "zone" => false,
            "region" if self.regions >= 3 => true,
            "region" => bail!("--survival region needs --regions 3 or more"),
            other => bail!("--survival {other:?}: expected zone or region"),
        };
        Ok((delay, survival_region))
    }
}

/// Flags of `trireme lab`.
#[derive(Args, Debug)]
pub struct LabArgs {
    /// Nodes, each in its own network namespace.
    #[arg(long, default_value_t = 3)]
    pub nodes: u32,
    /// Shards.
    #[arg(long, default_value_t = 4)]
    pub shards: u32,
    /// Regions.
    #[command(flatten)]
    pub region: RegionArgs,
    /// Where the nodes' data, config and logs go (default: a new directory under /tmp).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The command, run in the lab's hub namespace once every region holds a replica of
    /// every shard. It finds the nodes in TRIREME_LAB_NODES (names) and
    /// TRIREME_LAB_<NAME>_HTTP, _RESP and _REGION (e.g. TRIREME_LAB_N1_HTTP).
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// `trireme lab`: exits with the command's status, or 2 when the lab could not be held up.
pub fn run_lab(args: LabArgs) -> std::process::ExitCode {
    match hold_lab(args) {
        Ok(code) => std::process::ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}

fn hold_lab(args: LabArgs) -> anyhow::Result<i32> {
    let (region_delay, survival_region) = args.region.parse()?;
    if !(1..=9).contains(&args.nodes) {
        bail!("--nodes must be between 1 and 9");
    }
    if rustix::process::geteuid().as_raw() != 0 {
        bail!("trireme lab needs root: it creates network namespaces");
    }
    let out = match args.out {
        Some(out) => out,
        None => std::env::temp_dir().join(format!("trireme-lab-{}", std::process::id())),
    };
    let config = trireme_chaos::HoldConfig {
        exe: std::env::current_exe().context("cannot find the trireme executable")?,
        nodes: args.nodes,
        shards: args.shards,
        regions: args.region.regions,
        region_delay,
        survival_region,
        out,
        command: args.command,
    };
    Ok(trireme_chaos::hold(&config)?)
}

pub fn run(args: ChaosArgs) -> anyhow::Result<()> {
    let duration = humantime::parse_duration(&args.duration)
        .with_context(|| format!("--duration {:?} is not a duration like 30s", args.duration))?;
    let (region_delay, survival_region) = args.region.parse()?;
    let reshapes = args.splits > 0 || args.membership;
    let faults = if args.faults.is_empty() {
        let mut kinds = FaultKind::ALL.to_vec();
        if reshapes {
            kinds.extend(FaultKind::MID_MOVE);
        }
        if args.region.regions > 1 {
            kinds.extend(FaultKind::REGIONAL);
        }
        kinds
    } else {
        args.faults
            .iter()
            .map(|name| {
                FaultKind::parse(name).with_context(|| {
                    format!("--faults: unknown kind {name:?}; expected partition, one-way, loss, delay, kill, kill-all, pause, kill-mover, isolate-meta or cut-region")
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?
    };
    if !(3..=9).contains(&args.nodes) {
        bail!("--nodes must be between 3 and 9");
    }
    if args.membership && args.nodes > 8 {
        bail!("--membership needs a spare namespace: at most 8 --nodes");
    }
    if rustix::process::geteuid().as_raw() != 0 {
        bail!("trireme chaos needs root: it creates network namespaces and iptables rules");
    }
    let first_seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() % 1_000_000)
            .unwrap_or(1)
    });
    let out = args.out.clone().unwrap_or_else(|| {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        PathBuf::from(format!("chaos-results/{secs}"))
    });
    let exe = std::env::current_exe().context("cannot find the trireme executable")?;
    let checker = args
        .checker
        .canonicalize()
        .with_context(|| format!("--checker {}: no such directory", args.checker.display()))?;
    let mut failed = Vec::new();
    let (mut ops, mut acknowledged, mut faults_injected, mut divergent) =
        (0u64, 0u64, 0usize, 0usize);
    let mut longest_partition_recovery: Option<u64> = None;
    for seed in first_seed..first_seed + u64::from(args.seeds) {
        let config = ChaosConfig {
            exe: exe.clone(),
            nodes: args.nodes,
            shards: args.shards,
            seed,
            duration,
            clients: args.clients,
            keys: args.keys,
            txn_clients: args.txn_clients,
            txn_groups: args.txn_groups,
            txn_across: args.txn,
            lock_clients: args.lock_clients,
            locks: args.locks,
            rate: args.rate,
            faults: faults.clone(),
            fault_count: args.fault_count,
            splits: args.splits,
            membership: args.membership,
            stale_as_default: args.self_test_stale_as_default,
            overstate_lease: if args.self_test_overstate_lease {
                std::time::Duration::from_secs(30)
            } else {
                std::time::Duration::ZERO
            },
            out: out.join(format!("seed-{seed}")),
            checker: checker.clone(),
            secure: args.secure,
            regions: args.region.regions,
            region_delay,
            survival_region,
        };
        let summary = trireme_chaos::run(&config).with_context(|| format!("seed {seed}"))?;
        println!(
            "seed {seed}: {} — {} ops ({} ok, {} unknown, {} failed), {} acknowledged writes, {} faults, linearizable: {}, transactions: {}, stale violations: {}, stale reads bounded: {} with {} older than their bound, lock holds: {} with {} overlaps, divergent keys: {}, longest recovery after a partition: {}",
            if summary.passed { "PASS" } else { "FAIL" },
            summary.ops,
            summary.ops_ok,
            summary.ops_unknown,
            summary.ops_failed,
            summary.acknowledged_writes,
            summary.faults.len(),
            summary.checker.summary["linearizable"],
            summary.checker.summary["txn_linearizable"],
            summary.checker.summary["stale_violations"],
            summary.checker.summary["bounded_stale_reads"],
            summary.checker.summary["bound_violations"],
            summary.checker.summary["lock_holds"],
            summary.checker.summary["lock_violations"],
            summary.divergent_keys.len(),
            summary
                .max_recovery_after_partition_ms
                .map_or("-".into(), |ms| format!("{ms} ms")),
        );
        if summary.region_cuts > 0 {
            println!(
                "seed {seed}: {} regions cut off, {} with every shard taking writes outside while cut (longest wait {})",
                summary.region_cuts,
                summary.region_cuts_writable,
                summary
                    .max_write_pause_in_region_cut_ms
                    .map_or("-".into(), |ms| format!("{ms} ms")),
            );
        }
        if reshapes {
            let changes_done = summary
                .membership_changes
                .iter()
                .filter(|c| c.done_secs.is_some())
                .count();
            println!(
                "seed {seed}: {} of {} splits made under faults, {changes_done} of {} membership changes finished, {} replica moves completed, {} faults hit a move in progress, every shard at its replication factor after healing: {}",
                summary.splits_done,
                args.splits,
                if args.membership { 3 } else { 0 },
                summary.moves_completed,
                summary.faults_during_moves,
                summary.membership_settled
            );
            for change in &summary.membership_changes {
                println!(
                    "seed {seed}:   at {:.1}s {}; finished: {}",
                    change.at_secs,
                    change.change,
                    change
                        .done_secs
                        .map_or("no".into(), |s| format!("at {s:.1}s"))
                );
            }
        }
        ops += summary.ops;
        acknowledged += summary.acknowledged_writes;
        faults_injected += summary.faults.len();
        divergent += summary.divergent_keys.len();
        longest_partition_recovery =
            longest_partition_recovery.max(summary.max_recovery_after_partition_ms);
        if !summary.passed {
            failed.push((seed, summary.out.clone()));
        }
    }
    println!(
        "chaos: {} seeds from {first_seed}, {} operations checked, {} acknowledged writes, {} faults injected, {} failed seeds, {} divergent keys, longest recovery after a partition: {}",
        args.seeds,
        ops,
        acknowledged,
        faults_injected,
        failed.len(),
        divergent,
        longest_partition_recovery.map_or("-".into(), |ms| format!("{ms} ms"))
    );
    if !failed.is_empty() {
        for (seed, dir) in &failed {
            eprintln!(
                "seed {seed} failed: see {}/summary.json (and linearizability.html if written)",
                dir.display()
            );
        }
        bail!("{} of {} seeds failed", failed.len(), args.seeds);
    }
    Ok(())
}
