//! One chaos run from start to verdict: lab up, servers up, clients and faults for the
//! duration, everything healed, replicas converged, final reads, checker, summary.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use trireme_types::cluster_status::ClusterStatus;

use crate::ChaosError;
use crate::delay::DelayLine;
use crate::elastic::{Elastic, MembershipRecord, Shaper, live};
use crate::history::{self, Event, OpKind, Status};
use crate::lab::Lab;
use crate::nodes::{self, NodeProcess, NodeState, Role, ServerSettings};
use crate::schedule::{self, Extent, Fault, FaultKind, Step, TAIL, Target};
use crate::verify::{self, Divergence, Verdict};
use crate::workload::{self, Endpoint, Endpoints, Workload};
use crate::{locks, txns};

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
    /// Clients of Consul transactions (besides `clients`), over `txn_groups` groups of keys.
    pub txn_clients: u32,
    /// Groups of keys the transaction clients share.
    pub txn_groups: u32,
    /// The transaction clients' groups are spread over shards (no hash tag), so their
    /// transactions commit across shards.
    pub txn_across: bool,
    /// Clients taking Consul locks with sessions (besides `clients`), over `locks` keys.
    pub lock_clients: u32,
    /// Lock keys the lock clients contend for.
    pub locks: u32,
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
    /// Changes the membership while the faults run: a spare node joins, a node is drained,
    /// and a node is killed for good, removed by force and replaced (one more lab slot).
    pub membership: bool,
    /// Records `?stale` reads as default ones (a planted bug: the check must then fail).
    pub stale_as_default: bool,
    /// Added to the leases the lock clients record (a planted bug: the check must then fail).
    pub overstate_lease: Duration,
    /// Where the history, logs, summary and checker output go.
    pub out: PathBuf,
    /// The Go checker's source directory (`chaos/checker`).
    pub checker: PathBuf,
    /// ACLs (default deny) and TLS on every port, with a CA and a token made for the run.
    pub secure: bool,
    /// Regions the nodes are spread over, round-robin (0 or 1: no region labels).
    pub regions: u32,
    /// One-way delay of every peer link between two regions.
    pub region_delay: Duration,
    /// With regions: sets survival `region` before the clients start (each shard's voters
    /// in three regions), so a region cut off should not stop the writes.
    pub survival_region: bool,
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
    /// Whether a replica move was in progress when it started.
    pub during_move: bool,
    /// A region cut off: from the cut until every shard took a write through a node
    /// outside it; None if some shard did not while it lasted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub writable_outside_ms: Option<u64>,
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
    /// Acknowledged writes (PUT, SET, applied CAS and transactions, DELETE, DEL).
    pub acknowledged_writes: u64,
    /// The faults injected.
    pub faults: Vec<FaultRecord>,
    /// The longest recovery after a partition healed (ms); None when no partition ran.
    pub max_recovery_after_partition_ms: Option<u64>,
    /// The longest recovery after any fault (ms).
    pub max_recovery_ms: Option<u64>,
    /// Regions cut off, and in how many of them every shard kept taking writes through the
    /// nodes outside (with survival `region`, all).
    pub region_cuts: usize,
    /// ... of which the other regions took writes on every shard before it healed.
    pub region_cuts_writable: usize,
    /// The longest time, over the region cuts, until every shard took a write outside (ms).
    pub max_write_pause_in_region_cut_ms: Option<u64>,
    /// Keys whose replicas disagree after healing (must be empty).
    pub divergent_keys: Vec<Divergence>,
    /// Shard splits made during the run (asked for in `splits`).
    pub splits_done: u32,
    /// The membership changes made (with `membership`), and when each finished.
    pub membership_changes: Vec<MembershipRecord>,
    /// Faults that started while a replica move was in progress.
    pub faults_during_moves: usize,
    /// Replica moves completed and splits completed, summed over the nodes' `/metrics`
    /// (each counted by the metadata leader that made it).
    pub moves_completed: u64,
    /// Whether, after healing, the cluster map had no move or split in progress and every
    /// shard its replication factor in voters on active nodes (the membership check).
    pub membership_settled: bool,
    /// The checker's verdict.
    pub checker: Verdict,
    /// True when the history is linearizable (single keys and transactions), no stale read
    /// went backwards, no lock was held by two sessions at once, every shard recovered, the
    /// replicas agree, and with survival `region` every shard took writes outside each
    /// region cut off.
    pub passed: bool,
    /// Where everything was written.
    pub out: PathBuf,
}

/// Client id of the final reads after healing.
const FINAL_CLIENT: u32 = 10_000;
/// Longest wait for a shard to take writes after a fault is healed.
const RECOVERY_LIMIT: Duration = Duration::from_secs(60);
/// Longest wait, with survival `region`, for every shard's voters to spread over regions.
const SPREAD_LIMIT: Duration = Duration::from_secs(90);

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
    // Servers started on an earlier run's data would answer with its values.
    if config.out.join("history.jsonl").exists() || config.out.join("node.toml").exists() {
        return Err(ChaosError::Config(format!(
            "{} already holds a run: give another --out, or remove it",
            config.out.display()
        )));
    }
    std::fs::create_dir_all(&config.out).map_err(|e| ChaosError::io(config.out.display(), e))?;
    let tag = format!("{}", std::process::id() % 100_000);
    let spares = usize::from(config.membership);
    let lab = Lab::create(&tag, config.nodes + spares as u32)?;
    crate::secure::prepare(&config.out, config.secure.then(|| lab.nodes()))?;
    let regions = config.regions;
    let settings = ServerSettings {
        exe: config.exe.clone(),
        shards: config.shards,
        dir: config.out.clone(),
        regions,
        chaos_timing: true,
    };
    let mut servers = nodes::prepare(lab.nodes(), &settings, spares)?;
    // Before any server starts, so every peer connection goes through the proxies.
    let region_of: Vec<Option<String>> = (0..lab.nodes().len())
        .map(|slot| nodes::region_of_slot(slot, regions))
        .collect();
    let delay = DelayLine::start(&lab, &region_of, config.region_delay)?;
    let extent = match config.fault_count {
        Some(count) => Extent::Count(count),
        None => Extent::Within(config.duration),
    };
    let plan = schedule::plan(
        config.seed,
        lab.nodes().len(),
        regions,
        extent,
        &config.faults,
    );
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
            OpKind::Cas | OpKind::Txn => e.result == Some(true),
            OpKind::Read
            | OpKind::Acquire
            | OpKind::Release
            | OpKind::Renew
            | OpKind::SessionCreate
            | OpKind::SessionDestroy => false,
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
    let cut_waits: Vec<Option<u64>> = faults
        .iter()
        .filter(|f| f.kind == FaultKind::CutRegion.name())
        .map(|f| f.writable_outside_ms)
        .collect();
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
        region_cuts: cut_waits.len(),
        region_cuts_writable: cut_waits.iter().flatten().count(),
        max_write_pause_in_region_cut_ms: cut_waits.iter().flatten().max().copied(),
        faults_during_moves: faults.iter().filter(|f| f.during_move).count(),
        faults,
        splits_done: elastic.splits_done,
        membership_changes: elastic.changes.clone(),
        moves_completed: elastic.moves_completed,
        membership_settled: elastic.settled,
        passed: checker.exit_code == 0
            && divergent_keys.is_empty()
            && all_recovered
            && elastic.settled
            && elastic.all_done()
            // Survival `region` promises writes with any one region gone.
            && (!config.survival_region || cut_waits.iter().all(Option::is_some)),
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

async fn drive(
    config: &ChaosConfig,
    lab: &Lab,
    delay: &DelayLine,
    servers: &mut [NodeProcess],
    plan: &[Step],
) -> Result<Driven, ChaosError> {
    let clock = Instant::now();
    let client = workload::http_client();
    for s in servers.iter_mut().filter(|s| s.in_cluster()) {
        s.start()?;
    }
    verify::wait_healthy(&client, &live(servers), Duration::from_secs(60)).await?;
    if config.survival_region {
        verify::survive_regions(&client, &live(servers), SPREAD_LIMIT).await?;
        log(
            clock,
            "survival region: every shard's voters are in three regions",
        );
    }
    let probe_keys = verify::probe_keys(&client, &live(servers)).await?;
    log(clock, "cluster up; clients start");

    let start = Instant::now();
    // Every slot, spare ones too: a slot without a running node refuses the connection.
    let slots = Endpoints::new(servers.iter().map(NodeProcess::endpoint).collect());
    let work = Workload {
        endpoints: slots.clone(),
        keys: config.keys,
        client_rate: config.rate / f64::from(config.clients.max(1)),
        clock,
        stop: Arc::new(AtomicBool::new(false)),
        seed: config.seed,
        stale_as_default: config.stale_as_default,
        overstate_lease: config.overstate_lease,
    };
    // Client ids: the register clients first, then the transaction and the lock clients.
    let txn_ids = config.clients..config.clients + config.txn_clients;
    let lock_ids = txn_ids.end..txn_ids.end + config.lock_clients;
    let mut clients: Vec<_> = (0..config.clients)
        .map(|id| tokio::spawn(workload::client(id, work.clone())))
        .collect();
    clients.extend(txn_ids.map(|id| {
        tokio::spawn(txns::client(
            id,
            work.clone(),
            config.txn_groups,
            config.txn_across,
        ))
    }));
    clients.extend(lock_ids.map(|id| tokio::spawn(locks::client(id, work.clone(), config.locks))));

    let mut records = Vec::new();
    let mut elastic = Elastic::new(config.splits, config.membership);
    let shaper = Shaper {
        client: &client,
        seed: config.seed,
        slots: &slots,
        dir: &config.out,
        start,
    };
    // A fault starts at its planned offset, but never less than a second after the cluster
    // recovered from the previous one, so the clients always see some calm between faults.
    let mut calm_from = start;
    for step in plan {
        let at = (start + step.at).max(calm_from + Duration::from_secs(1));
        tokio::time::sleep_until(at.into()).await;
        // The shape changes first, so that the fault meets the moves they set off.
        shaper.step(&mut elastic, servers).await?;
        let at_secs = start.elapsed().as_secs_f64();
        let moving = moving(&client, servers, &step.fault).await;
        let during_move = moving.as_ref().is_some_and(|s| !s.moves.is_empty());
        let fault = inject(lab, delay, servers, &client, &step.fault, moving).await?;
        log(
            clock,
            format!("fault: {fault} for {:.1}s", step.hold.as_secs_f64()),
        );
        let held_until = Instant::now() + step.hold;
        // With a region cut off: how soon the other regions take writes on every shard.
        let writable_outside = match &step.fault {
            Fault::CutRegion { nodes, .. } => {
                let outside: Vec<Endpoint> = servers
                    .iter()
                    .enumerate()
                    .filter(|(i, s)| !nodes.contains(i) && s.in_cluster())
                    .map(|(_, s)| s.endpoint())
                    .collect();
                verify::time_to_writable(&client, &outside, &probe_keys, step.hold)
                    .await
                    .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            }
            _ => None,
        };
        tokio::time::sleep_until(held_until.into()).await;
        heal(lab, delay, servers)?;
        let recovery =
            verify::time_to_writable(&client, &live(servers), &probe_keys, RECOVERY_LIMIT).await;
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
        // And again once healed: a change waiting on the cluster moves on sooner.
        shaper.step(&mut elastic, servers).await?;
        calm_from = Instant::now();
        records.push(FaultRecord {
            at_secs,
            fault,
            kind: step.fault.kind(servers.len()).name(),
            held_secs: step.hold.as_secs_f64(),
            recovery_ms: recovery.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            during_move,
            writable_outside_ms: writable_outside,
        });
    }

    // The clients stop once the duration is over and the last fault has had its quiet tail.
    let mut end = start + config.duration;
    if !plan.is_empty() {
        end = end.max(Instant::now() + TAIL);
    }
    // The shape changes the faults kept from happening or finishing, while the clients run.
    let calm_limit = Instant::now() + CALM_RESHAPE_LIMIT;
    while !elastic.all_done() && Instant::now() < calm_limit {
        shaper.step(&mut elastic, servers).await?;
        if !elastic.all_done() {
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
    let healed = std::time::Instant::now();
    // A drained node that stopped saying it was removed is done, not unhealthy.
    shaper.note_drained(&mut elastic, servers);
    let all = live(servers);
    verify::wait_healthy(&client, &all, Duration::from_secs(60)).await?;
    if elastic.reshapes() {
        elastic.settled = verify::wait_settled(&client, &all, SETTLE_LIMIT).await;
        elastic.moves_completed = verify::moves_completed(&client, &all).await;
        log(
            clock,
            format!(
                "{} split(s), {} of {} membership change(s) done, {} move(s) completed; every shard at its replication factor: {}",
                elastic.splits_done,
                elastic
                    .changes
                    .iter()
                    .filter(|c| c.done_secs.is_some())
                    .count(),
                if config.membership { 3 } else { 0 },
                elastic.moves_completed,
                elastic.settled
            ),
        );
        verify::wait_healthy(&client, &all, Duration::from_secs(60)).await?;
    } else {
        elastic.settled = true;
    }
    if let Err(e) = verify::wait_converged(&client, &all, Duration::from_secs(60)).await {
        return Err(verify::with_log_errors(e, &config.out));
    }
    let converged_after = healed.elapsed();
    let (mut finals, divergent) =
        verify::final_reads(&client, &all, config.keys, clock, FINAL_CLIENT).await;
    log(
        clock,
        format!(
            "healed and converged ({:.1} s after the heal); final reads of {} keys, {} divergent",
            converged_after.as_secs_f64(),
            config.keys,
            divergent.len()
        ),
    );
    events.append(&mut finals);
    Ok((events, records, divergent, elastic))
}

/// How long the cluster may take after healing to finish its splits and moves.
const SETTLE_LIMIT: Duration = Duration::from_secs(120);
/// How long, after the last fault, the run keeps making the splits and membership changes
/// the faults held up (a drain of a node holding many replicas takes a while).
const CALM_RESHAPE_LIMIT: Duration = Duration::from_secs(90);

/// The cluster status a fault aimed at moves needs (and that tells whether any fault met a
/// move in progress); for a fault aimed at moves, waits up to 5 s for a move to start.
async fn moving(
    client: &reqwest::Client,
    servers: &[NodeProcess],
    fault: &Fault,
) -> Option<ClusterStatus> {
    let aimed = matches!(fault, Fault::KillMover { .. } | Fault::IsolateMeta);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let status = verify::cluster_status(client, &live(servers)).await;
        let found = status.as_ref().is_some_and(|s| !s.moves.is_empty());
        if found || !aimed || Instant::now() > deadline {
            return status;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Applies `fault`; returns its description with the nodes resolved. `status` is the
/// cluster as it was just before (where the moves and the metadata leader are).
async fn inject(
    lab: &Lab,
    delay: &DelayLine,
    servers: &mut [NodeProcess],
    client: &reqwest::Client,
    fault: &Fault,
    status: Option<ClusterStatus>,
) -> Result<String, ChaosError> {
    let nodes = lab.nodes();
    let slot_of = |name: &str| servers.iter().position(|s| s.node_id == name);
    let busiest = async || -> usize {
        let name = verify::busiest_leader(client, &live(servers)).await;
        name.and_then(|n| slot_of(&n)).unwrap_or(0)
    };
    let isolate = |i: usize| -> Result<(), ChaosError> {
        let (alone, rest): (Vec<_>, Vec<_>) =
            nodes.iter().cloned().partition(|n| n.name == nodes[i].name);
        lab.partition(&alone, &rest)
    };
    let first_move = status.as_ref().and_then(|s| s.moves.first().cloned());
    let description = match fault {
        Fault::Isolate(target) => {
            let i = match target {
                Target::Node(i) => *i,
                Target::Leader => busiest().await,
            };
            isolate(i)?;
            format!("isolate {} ({target})", servers[i].node_id)
        }
        Fault::Split { minority: cut } | Fault::CutRegion { nodes: cut, .. } => {
            let (inside, outside): (Vec<_>, Vec<_>) =
                nodes.iter().enumerate().partition(|(i, _)| cut.contains(i));
            let inside: Vec<_> = inside.into_iter().map(|(_, n)| n.clone()).collect();
            let outside: Vec<_> = outside.into_iter().map(|(_, n)| n.clone()).collect();
            lab.partition(&inside, &outside)?;
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
            let i = match target {
                Target::Node(i) => *i,
                Target::Leader => busiest().await,
            };
            servers[i].pause()?;
            format!("SIGSTOP {} ({target})", servers[i].node_id)
        }
        Fault::KillMover { source } => {
            let aimed = first_move.as_ref().and_then(|m| {
                let (end, name) = match (&m.from, source) {
                    (Some(from), true) => ("source", from.as_str()),
                    _ => ("target", m.to.as_str()),
                };
                let i = slot_of(name)?;
                Some((i, format!("{end} of shard {}'s move", m.shard)))
            });
            let (i, why) = match aimed {
                Some(found) => found,
                None => (
                    busiest().await,
                    "the busiest leader: no move in progress".into(),
                ),
            };
            servers[i].kill()?;
            format!("kill -9 {} ({why})", servers[i].node_id)
        }
        Fault::IsolateMeta => {
            let leader = status.as_ref().and_then(|s| s.meta_leader.as_deref());
            let i = match leader.and_then(slot_of) {
                Some(i) => i,
                None => busiest().await,
            };
            isolate(i)?;
            let during = match &first_move {
                Some(m) => format!("during shard {}'s move to {}", m.shard, m.to),
                None => "no move in progress".into(),
            };
            format!(
                "isolate the metadata leader {} ({during})",
                servers[i].node_id
            )
        }
    };
    Ok(description)
}

/// Undoes every fault: rules flushed, delay off, paused nodes resumed, nodes of the cluster
/// that are down restarted (never a spare or a node that is gone).
fn heal(lab: &Lab, delay: &DelayLine, servers: &mut [NodeProcess]) -> Result<(), ChaosError> {
    lab.heal()?;
    delay.set(Duration::ZERO);
    for s in servers.iter_mut() {
        match s.state() {
            NodeState::Paused => s.resume()?,
            // A node that exited saying it was removed would only refuse to start.
            NodeState::Down if s.in_cluster() && !s.said_removed() => s.start()?,
            // A member that exited on its own is started again, unless it said it was
            // removed (its drain ended while it was down).
            NodeState::Up
                if s.in_cluster() && s.role == Role::Member && s.exited() && !s.said_removed() =>
            {
                s.start()?;
            }
            _ => {}
        }
    }
    Ok(())
}
