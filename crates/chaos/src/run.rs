//! One chaos run from start to verdict: lab up, servers up, clients and faults for the
//! duration, everything healed, replicas converged, final reads, checker, summary.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::ChaosError;
use crate::delay::DelayLine;
use crate::history::{self, Event, OpKind, Status};
use crate::lab::Lab;
use crate::nodes::{self, NodeProcess, NodeState, ServerSettings};
use crate::schedule::{self, Extent, Fault, FaultKind, Step, TAIL, Target};
use crate::verify::{self, Divergence, Verdict};
use crate::workload::{self, Endpoint, Workload};

/// Settings of one run.
#[derive(Debug, Clone)]
pub struct ChaosConfig {
    /// The `trireme` executable the servers run.
    pub exe: PathBuf,
    /// Nodes (3 or 5 make sense).
    pub nodes: u32,
    /// Shards of the cluster.
    pub shards: u32,
    /// Seed of the fault plan and the clients.
    pub seed: u64,
    /// How long the clients run.
    pub duration: Duration,
    /// Concurrent clients.
    pub clients: u32,
    /// Keys the clients share (fewer keys, more contention).
    pub keys: u32,
    /// Operations per second of all clients together (paced).
    pub rate: f64,
    /// Fault kinds the plan draws from.
    pub faults: Vec<FaultKind>,
    /// Exactly this many faults (the workload then lasts until they are done, and at least
    /// `duration`); None: as many as fit in `duration`.
    pub fault_count: Option<usize>,
    /// Shard splits to make while the faults run, one at the start of each fault until done
    /// (a split refused because of the fault is tried again at the next one, then in the
    /// calm after the last). On five nodes each split also sets replicas moving.
    pub splits: u32,
    /// Records `?stale` reads as default ones (a planted bug: the check must then fail).
    pub stale_as_default: bool,
    /// Where the history, logs, summary and checker output go.
    pub out: PathBuf,
    /// The Go checker's source directory (`chaos/checker`).
    pub checker: PathBuf,
}

/// A fault as it happened.
#[derive(Debug, Clone, Serialize)]
pub struct FaultRecord {
    /// Seconds from the start of the workload.
    pub at_secs: f64,
    /// What was done, with the nodes resolved.
    pub fault: String,
    /// Its kind (`partition`, `kill`, ...).
    pub kind: &'static str,
    /// Seconds it was held.
    pub held_secs: f64,
    /// From healing until every shard took a write again; None if it did not within 60 s.
    pub recovery_ms: Option<u64>,
}

/// What a run found.
#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    /// The seed (replays the run).
    pub seed: u64,
    /// Nodes.
    pub nodes: u32,
    /// Operations in the history, by status.
    pub ops: u64,
    /// ... of which completed.
    pub ops_ok: u64,
    /// ... of which certainly failed.
    pub ops_failed: u64,
    /// ... of which ended with an unknown outcome.
    pub ops_unknown: u64,
    /// Acknowledged writes (PUT, SET, applied CAS, DELETE, DEL).
    pub acknowledged_writes: u64,
    /// The faults injected.
    pub faults: Vec<FaultRecord>,
    /// The longest recovery after a partition healed (ms); None when no partition ran.
    pub max_recovery_after_partition_ms: Option<u64>,
    /// The longest recovery after any fault (ms).
    pub max_recovery_ms: Option<u64>,
    /// Keys whose replicas disagree after healing (must be empty).
    pub divergent_keys: Vec<Divergence>,
    /// Shard splits made during the run (asked for in `splits`).
    pub splits_done: u32,
    /// Replica moves completed and splits completed, summed over the nodes' `/metrics`
    /// (each counted by the metadata leader that made it).
    pub moves_completed: u64,
    /// Whether, after healing, the cluster map had no move or split in progress and every
    /// shard its replication factor in voters on active nodes (the membership check).
    pub membership_settled: bool,
    /// The checker's verdict.
    pub checker: Verdict,
    /// True when the history is linearizable, no stale read went backwards, every shard
    /// recovered, and the replicas agree.
    pub passed: bool,
    /// Where everything was written.
    pub out: PathBuf,
}

/// Client id of the final reads after healing.
const FINAL_CLIENT: u32 = 10_000;
/// Longest wait for a shard to take writes after a fault is healed.
const RECOVERY_LIMIT: Duration = Duration::from_secs(60);

fn log(clock: Instant, message: impl std::fmt::Display) {
    eprintln!("[{:>8.3}s] {message}", clock.elapsed().as_secs_f64());
}

/// Runs one seed. Needs root (namespaces, iptables), `ip`, `iptables` and `go`.
pub fn run(config: &ChaosConfig) -> Result<RunSummary, ChaosError> {
    if config.nodes < 3 {
        return Err(ChaosError::Config(
            "a chaos run needs at least 3 nodes".into(),
        ));
    }
    std::fs::create_dir_all(&config.out).map_err(|e| ChaosError::io(config.out.display(), e))?;
    let tag = format!("{}", std::process::id() % 100_000);
    let lab = Lab::create(&tag, config.nodes)?;
    let settings = ServerSettings {
        exe: config.exe.clone(),
        shards: config.shards,
        dir: config.out.clone(),
    };
    let mut servers = nodes::prepare(lab.nodes(), &settings)?;
    // Before any server starts, so every peer connection goes through the proxies.
    let delay = DelayLine::start(&lab)?;
    let extent = match config.fault_count {
        Some(count) => Extent::Count(count),
        None => Extent::Within(config.duration),
    };
    let plan = schedule::plan(config.seed, lab.nodes().len(), extent, &config.faults);
    eprintln!(
        "chaos seed {} : {} nodes, {} shards, {:?}, {} clients over {} keys at {} ops/s, {} faults planned; output in {}",
        config.seed,
        config.nodes,
        config.shards,
        config.duration,
        config.clients,
        config.keys,
        config.rate,
        plan.len(),
        config.out.display()
    );
    // The clients live in the hub namespace: a thread of their own moves there and runs the
    // whole async part; the servers are processes started through `ip netns exec`.
    let driven = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                lab.enter_hub()?;
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .map_err(|e| ChaosError::io("tokio runtime", e))?;
                runtime.block_on(drive(config, &lab, &delay, &mut servers, &plan))
            })
            .join()
            .unwrap_or_else(|_| Err(ChaosError::Cluster("the chaos driver panicked".into())))
    });
    // Servers go before their namespaces do.
    drop(servers);
    drop(delay);
    drop(lab);
    let (mut events, faults, divergent_keys, elastic) = driven?;
    let history_path = config.out.join("history.jsonl");
    history::write(&history_path, &mut events)?;
    let checker = verify::check(&config.checker, &history_path, &config.out)?;
    let count = |status: Status| events.iter().filter(|e| e.status == status).count() as u64;
    let acknowledged_writes = events
        .iter()
        .filter(|e| e.status == Status::Ok)
        .filter(|e| match e.op {
            OpKind::Write | OpKind::Delete => true,
            OpKind::Cas => e.result == Some(true),
            OpKind::Read => false,
        })
        .count() as u64;
    let max_recovery = |kinds: &[&str]| {
        faults
            .iter()
            .filter(|f| kinds.contains(&f.kind))
            .filter_map(|f| f.recovery_ms)
            .max()
    };
    let all_recovered = faults.iter().all(|f| f.recovery_ms.is_some());
    let summary = RunSummary {
        seed: config.seed,
        nodes: config.nodes,
        ops: events.len() as u64,
        ops_ok: count(Status::Ok),
        ops_failed: count(Status::Fail),
        ops_unknown: count(Status::Unknown),
        acknowledged_writes,
        max_recovery_after_partition_ms: max_recovery(&["partition", "one-way"]),
        max_recovery_ms: max_recovery(&FaultKind::ALL.map(FaultKind::name)),
        faults,
        splits_done: elastic.splits_done,
        moves_completed: elastic.moves_completed,
        membership_settled: elastic.settled,
        passed: checker.exit_code == 0
            && divergent_keys.is_empty()
            && all_recovered
            && elastic.settled
            && elastic.splits_done == config.splits,
        divergent_keys,
        checker,
        out: config.out.clone(),
    };
    let path = config.out.join("summary.json");
    let text = serde_json::to_string_pretty(&summary)
        .map_err(|e| ChaosError::io(path.display(), std::io::Error::other(e.to_string())))?;
    std::fs::write(&path, text).map_err(|e| ChaosError::io(path.display(), e))?;
    Ok(summary)
}

type Driven = (Vec<Event>, Vec<FaultRecord>, Vec<Divergence>, Elastic);

/// What the run did to the cluster's shape.
#[derive(Debug, Default)]
struct Elastic {
    splits_done: u32,
    moves_completed: u64,
    settled: bool,
}

fn endpoints(servers: &[NodeProcess]) -> Vec<Endpoint> {
    servers
        .iter()
        .map(|s| Endpoint {
            name: s.lab.name.clone(),
            http_base: s.http_base(),
            resp_addr: s.resp_addr(),
        })
        .collect()
}

async fn drive(
    config: &ChaosConfig,
    lab: &Lab,
    delay: &DelayLine,
    servers: &mut [NodeProcess],
    plan: &[Step],
) -> Result<Driven, ChaosError> {
    let clock = Instant::now();
    let client = workload::http_client();
    let all = endpoints(servers);
    for s in servers.iter_mut() {
        s.start()?;
    }
    verify::wait_healthy(&client, &all, Duration::from_secs(60)).await?;
    let probe_keys = verify::probe_keys(&client, &all).await?;
    log(clock, "cluster up; clients start");

    let start = Instant::now();
    let work = Workload {
        endpoints: all.clone(),
        keys: config.keys,
        client_rate: config.rate / f64::from(config.clients.max(1)),
        clock,
        stop: Arc::new(AtomicBool::new(false)),
        seed: config.seed,
        stale_as_default: config.stale_as_default,
    };
    let clients: Vec<_> = (0..config.clients)
        .map(|id| tokio::spawn(workload::client(id, work.clone())))
        .collect();

    let mut records = Vec::new();
    let mut elastic = Elastic::default();
    // A fault starts at its planned offset, but never less than a second after the cluster
    // recovered from the previous one, so the clients always see some calm between faults.
    let mut calm_from = start;
    for step in plan {
        let at = (start + step.at).max(calm_from + Duration::from_secs(1));
        tokio::time::sleep_until(at.into()).await;
        let at_secs = start.elapsed().as_secs_f64();
        let fault = inject(lab, delay, servers, &client, &all, &step.fault).await?;
        log(
            clock,
            format!("fault: {fault} for {:.1}s", step.hold.as_secs_f64()),
        );
        if elastic.splits_done < config.splits {
            try_split(&client, &all, config.seed, &mut elastic, clock).await;
        }
        tokio::time::sleep(step.hold).await;
        heal(lab, delay, servers)?;
        let recovery = verify::time_to_writable(&client, &all, &probe_keys, RECOVERY_LIMIT).await;
        log(
            clock,
            match recovery {
                Some(d) => format!(
                    "healed; every shard took a write after {} ms",
                    d.as_millis()
                ),
                None => format!("healed; some shard took no write within {RECOVERY_LIMIT:?}"),
            },
        );
        calm_from = Instant::now();
        records.push(FaultRecord {
            at_secs,
            fault,
            kind: step.fault.kind(servers.len()).name(),
            held_secs: step.hold.as_secs_f64(),
            recovery_ms: recovery.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        });
    }

    // The clients stop once the duration is over and the last fault has had its quiet tail.
    let mut end = start + config.duration;
    if !plan.is_empty() {
        end = end.max(Instant::now() + TAIL);
    }
    // Splits the faults kept from happening, while the clients still run.
    let calm_splits = Instant::now() + Duration::from_secs(30);
    while elastic.splits_done < config.splits && Instant::now() < calm_splits {
        if !try_split(&client, &all, config.seed, &mut elastic, clock).await {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    tokio::time::sleep_until(end.into()).await;
    work.stop.store(true, Ordering::Relaxed);
    let mut events = Vec::new();
    for handle in clients {
        match handle.await {
            Ok(mut history) => events.append(&mut history),
            Err(e) => return Err(ChaosError::Cluster(format!("a client task failed: {e}"))),
        }
    }
    log(clock, format!("clients done: {} operations", events.len()));

    heal(lab, delay, servers)?;
    verify::wait_healthy(&client, &all, Duration::from_secs(60)).await?;
    if config.splits > 0 {
        elastic.settled = verify::wait_settled(&client, &all, SETTLE_LIMIT).await;
        elastic.moves_completed = verify::moves_completed(&client, &all).await;
        log(
            clock,
            format!(
                "{} split(s), {} move(s) completed; every shard at its replication factor: {}",
                elastic.splits_done, elastic.moves_completed, elastic.settled
            ),
        );
        verify::wait_healthy(&client, &all, Duration::from_secs(60)).await?;
    } else {
        elastic.settled = true;
    }
    verify::wait_converged(&client, &all, Duration::from_secs(60)).await?;
    let (mut finals, divergent) =
        verify::final_reads(&client, &all, config.keys, clock, FINAL_CLIENT).await;
    log(
        clock,
        format!(
            "healed and converged; final reads of {} keys, {} divergent",
            config.keys,
            divergent.len()
        ),
    );
    events.append(&mut finals);
    Ok((events, records, divergent, elastic))
}

/// How long the cluster may take after healing to finish its splits and moves.
const SETTLE_LIMIT: Duration = Duration::from_secs(120);

/// Asks one reachable node to split a shard (which one: from the seed and the splits done so
/// far); returns whether a split was started. Refusals (no leader during a fault, another
/// split or a move on that shard) are expected: the next try picks up.
async fn try_split(
    client: &reqwest::Client,
    all: &[Endpoint],
    seed: u64,
    elastic: &mut Elastic,
    clock: Instant,
) -> bool {
    let Some(shards) = verify::shard_count(client, all).await else {
        return false;
    };
    let shard = (seed + u64::from(elastic.splits_done) * 7) % u64::from(shards.max(1));
    for node in all {
        let url = format!("{}/v1/cluster/shards/{shard}/split", node.http_base);
        let answer = tokio::time::timeout(Duration::from_secs(5), client.post(&url).send()).await;
        match answer {
            Ok(Ok(r)) if r.status().is_success() => {
                elastic.splits_done += 1;
                log(clock, format!("split shard {shard} (asked {})", node.name));
                return true;
            }
            Ok(Ok(r)) if r.status().as_u16() == 409 => return false,
            _ => continue,
        }
    }
    false
}

/// Applies `fault`; returns its description with the nodes resolved.
async fn inject(
    lab: &Lab,
    delay: &DelayLine,
    servers: &mut [NodeProcess],
    client: &reqwest::Client,
    all: &[Endpoint],
    fault: &Fault,
) -> Result<String, ChaosError> {
    let nodes = lab.nodes();
    let resolve = async |target: Target| -> usize {
        match target {
            Target::Node(i) => i,
            Target::Leader => {
                let name = verify::busiest_leader(client, all).await;
                nodes
                    .iter()
                    .position(|n| Some(&n.name) == name.as_ref())
                    .unwrap_or(0)
            }
        }
    };
    let description = match fault {
        Fault::Isolate(target) => {
            let i = resolve(*target).await;
            let (alone, rest): (Vec<_>, Vec<_>) =
                nodes.iter().cloned().partition(|n| n.name == nodes[i].name);
            lab.partition(&alone, &rest)?;
            format!("isolate n{} ({target})", i + 1)
        }
        Fault::Split { minority } => {
            let (small, big): (Vec<_>, Vec<_>) = nodes
                .iter()
                .enumerate()
                .partition(|(i, _)| minority.contains(i));
            let small: Vec<_> = small.into_iter().map(|(_, n)| n.clone()).collect();
            let big: Vec<_> = big.into_iter().map(|(_, n)| n.clone()).collect();
            lab.partition(&small, &big)?;
            fault.to_string()
        }
        Fault::OneWay { at, from } => {
            lab.drop_from(&nodes[*at], &nodes[*from])?;
            fault.to_string()
        }
        Fault::Loss { percent } => {
            lab.lossy(*percent)?;
            fault.to_string()
        }
        Fault::Delay { ms } => {
            delay.set(Duration::from_millis(*ms));
            fault.to_string()
        }
        Fault::Kill(victims) => {
            for &i in victims {
                servers[i].kill()?;
            }
            fault.to_string()
        }
        Fault::Pause(target) => {
            let i = resolve(*target).await;
            servers[i].pause()?;
            format!("SIGSTOP n{} ({target})", i + 1)
        }
    };
    Ok(description)
}

/// Undoes every fault: rules flushed, delay off, paused nodes resumed, dead nodes restarted.
fn heal(lab: &Lab, delay: &DelayLine, servers: &mut [NodeProcess]) -> Result<(), ChaosError> {
    lab.heal()?;
    delay.set(Duration::ZERO);
    for s in servers.iter_mut() {
        match s.state() {
            NodeState::Paused => s.resume()?,
            NodeState::Down => s.start()?,
            NodeState::Up => {}
        }
    }
    Ok(())
}
