//! Area 90: chaos, the CI slice. Real clusters in network namespaces under partitions,
//! one-way drops, packet loss, kill -9 (one, a majority, all) and SIGSTOP pauses, with shards
//! split and nodes joining, drained and replaced (and so replicas moved) while the faults run,
//! some of them aimed at the moves; histories checked for linearizability
//! by the Go checker; every replica compared after healing, and every shard back at its
//! replication factor.
//! Beside the single-key clients run Consul transaction clients (checked against a multi-key
//! model) and lock clients whose holders sometimes stall past their session's TTL (no lock may
//! be granted to another session before the stalled holder's lease and lock-delay ran out).
//! Planted bugs (stale reads recorded as default reads; leases recorded longer than the server
//! promises) must make the check fail, which shows the pipeline can see a violation at all. Needs root, iproute2, iptables and Go (the test
//! script installs the Debian packages).
//!
//! The soak is the same command with more seeds: `trireme chaos --seeds 200` (README).

use crate::common::binary;
// One chaos run or test cluster at a time: each wants the machine's two cores to itself.
use crate::common::cluster::cluster_turn_blocking;
use std::path::Path;
use std::process::{Command, Output};

fn chaos(out: &Path, args: &[&str]) -> Output {
    assert!(
        rustix::process::geteuid().is_root(),
        "the chaos tests need root (network namespaces, iptables)"
    );
    let output = Command::new(binary())
        .arg("chaos")
        .arg("--out")
        .arg(out)
        .args(args)
        .output()
        .expect("run trireme chaos");
    eprintln!(
        "trireme chaos {args:?}:\n{}{}",
        String::from_utf8_lossy(&output.stderr),
        String::from_utf8_lossy(&output.stdout)
    );
    output
}

fn summary(out: &Path, seed: u64) -> serde_json::Value {
    let path = out.join(format!("seed-{seed}/summary.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        // The run stopped before its verdict: the nodes' logs are the only evidence left,
        // and the temporary directory goes with the test.
        print_node_logs(&out.join(format!("seed-{seed}")));
        panic!("{}: {e}", path.display())
    });
    serde_json::from_str(&text).expect("summary.json is JSON")
}

/// The first errors and panics, then the last lines, of every node's log in `seed_dir`, on
/// stderr: a replica's group that stopped logs why once, and then only its consequences.
fn print_node_logs(seed_dir: &Path) {
    for log in trireme_chaos::verify::node_logs(seed_dir) {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let first_errors = trireme_chaos::verify::first_log_errors(&text, 20);
        eprintln!(
            "--- first {} errors of {} ---",
            first_errors.len(),
            log.display()
        );
        for line in first_errors {
            eprintln!("{line}");
        }
        let tail = &lines[lines.len().saturating_sub(40)..];
        eprintln!("--- last {} lines of {} ---", tail.len(), log.display());
        for line in tail {
            eprintln!("{line}");
        }
    }
}

/// What every passing seed must show: a real workload, faults injected, nothing lost.
fn assert_clean(s: &serde_json::Value) {
    assert_eq!(s["passed"], true, "{s:#}");
    let checked = &s["checker"]["summary"];
    assert_eq!(checked["linearizable"], "ok", "{s:#}");
    assert_eq!(checked["stale_violations"], 0, "{s:#}");
    assert_eq!(checked["txn_linearizable"], "ok", "{s:#}");
    assert_eq!(checked["lock_violations"], 0, "{s:#}");
    assert_eq!(checked["bound_violations"], 0, "{s:#}");
    assert!(
        checked["bounded_stale_reads"].as_u64() > Some(0),
        "stale reads carried their bound: {s:#}"
    );
    assert!(
        checked["txns"].as_u64() > Some(50),
        "transactions ran: {s:#}"
    );
    assert_eq!(
        s["divergent_keys"].as_array().map(Vec::len),
        Some(0),
        "{s:#}"
    );
    assert!(
        s["ops_ok"].as_u64() > Some(300),
        "a real workload ran: {s:#}"
    );
    assert!(
        s["acknowledged_writes"].as_u64() > Some(100),
        "writes were acknowledged: {s:#}"
    );
    let faults = s["faults"].as_array().expect("faults");
    assert!(!faults.is_empty(), "faults were injected: {s:#}");
    for f in faults {
        assert!(
            f["recovery_ms"].is_u64(),
            "every shard took writes after {f}"
        );
    }
}

#[test]
fn the_go_checker_passes_its_own_tests() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../chaos/checker");
    let output = Command::new("go")
        .args(["test", "./..."])
        .current_dir(dir)
        .output()
        .expect("run go test (Go must be installed)");
    assert!(
        output.status.success(),
        "go test failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn mixed_faults_on_three_nodes_keep_every_promise() {
    let _turn = cluster_turn_blocking();
    let out = tempfile::tempdir().expect("tempdir");
    let run = chaos(
        out.path(),
        &["--seed", "1", "--seeds", "4", "--duration", "30s"],
    );
    assert!(run.status.success(), "some seed failed");
    for seed in 1..=4 {
        let s = summary(out.path(), seed);
        assert_clean(&s);
        assert!(
            s["checker"]["summary"]["lock_holds"].as_u64() > Some(0),
            "locks were taken: {s:#}"
        );
    }
}

#[test]
fn a_secure_cluster_keeps_every_promise_under_faults() {
    let _turn = cluster_turn_blocking();
    let out = tempfile::tempdir().expect("tempdir");
    let run = chaos(
        out.path(),
        &["--seed", "21", "--duration", "20s", "--secure"],
    );
    assert!(run.status.success(), "seed 21 failed");
    let config = std::fs::read_to_string(out.path().join("seed-21/node.toml")).expect("config");
    assert!(
        config.contains("[acl]") && config.contains("[tls]") && config.contains("[peer_tls]"),
        "the nodes ran with ACLs and TLS: {config}"
    );
    let s = summary(out.path(), 21);
    assert_clean(&s);
    assert!(
        s["ops"].as_u64() > Some(100),
        "the clients got through: {s:#}"
    );
}

/// Five nodes in two regions with 40 ms between them (`--regions 2`): n1, n3 and n5 hold the
/// voters, n2 and n4 a learner of every shard, which answers the stale reads sent there.
/// Every promise holds, and every stale read shows what its bound says it must.
#[test]
fn nodes_in_two_regions_keep_every_promise_and_every_stale_bound() {
    let _turn = cluster_turn_blocking();
    let out = tempfile::tempdir().expect("tempdir");
    let run = chaos(
        out.path(),
        &[
            "--seed",
            "41",
            "--nodes",
            "5",
            "--regions",
            "2",
            "--region-delay",
            "40ms",
            "--duration",
            "25s",
        ],
    );
    assert!(run.status.success(), "seed 41 failed");
    let s = summary(out.path(), 41);
    assert_clean(&s);
    // The metadata leader, whichever node it was, logged the learners it placed.
    let placed = (1..=5)
        .filter_map(|i| std::fs::read_to_string(out.path().join(format!("seed-41/n{i}.log"))).ok())
        .map(|log| log.matches("learner placed").count())
        .sum::<usize>();
    assert!(
        placed >= 4,
        "a learner of each of the 4 shards in the other region: {placed}"
    );
}

/// Three regions of one node each, 40 ms apart, with survival `region` (every shard's voters
/// in all three): whole regions are cut off in turn, the home region among them (seed 502),
/// and the other two keep taking writes on every shard while each cut lasts, with every
/// promise kept.
#[test]
fn with_survival_region_a_region_cut_off_does_not_stop_the_writes() {
    let _turn = cluster_turn_blocking();
    let out = tempfile::tempdir().expect("tempdir");
    let run = chaos(
        out.path(),
        &[
            "--seed",
            "502",
            "--regions",
            "3",
            "--survival",
            "region",
            "--faults",
            "cut-region",
            "--fault-count",
            "2",
            "--duration",
            "15s",
        ],
    );
    assert!(run.status.success(), "seed 502 failed");
    let s = summary(out.path(), 502);
    assert_clean(&s);
    assert_eq!(
        (
            s["region_cuts"].as_u64(),
            s["region_cuts_writable"].as_u64()
        ),
        (Some(2), Some(2)),
        "{s:#}"
    );
    let cut: Vec<&str> = s["faults"]
        .as_array()
        .expect("the faults")
        .iter()
        .filter_map(|f| f["fault"].as_str())
        .collect();
    assert!(cut.iter().any(|f| f.contains("region r1")), "{cut:?}");
}

/// Transaction clients whose groups' keys are in several shards (`--txn`): every transaction
/// commits across shards while nodes are killed, paused and cut off, and the history of
/// transactions stays linearizable.
#[test]
fn transactions_across_shards_stay_whole_under_faults() {
    let _turn = cluster_turn_blocking();
    let out = tempfile::tempdir().expect("tempdir");
    let run = chaos(
        out.path(),
        &[
            "--seed",
            "31",
            "--shards",
            "6",
            "--txn",
            "--txn-clients",
            "4",
            "--txn-groups",
            "3",
            "--duration",
            "25s",
        ],
    );
    assert!(run.status.success(), "seed 31 failed");
    assert_clean(&summary(out.path(), 31));
}

#[test]
fn mixed_faults_on_five_nodes_keep_every_promise() {
    let _turn = cluster_turn_blocking();
    let out = tempfile::tempdir().expect("tempdir");
    let run = chaos(
        out.path(),
        &["--seed", "11", "--nodes", "5", "--duration", "30s"],
    );
    assert!(run.status.success(), "seed 11 failed");
    assert_clean(&summary(out.path(), 11));
}

#[test]
fn shards_split_under_faults_and_every_shard_ends_at_its_replication_factor() {
    let _turn = cluster_turn_blocking();
    let out = tempfile::tempdir().expect("tempdir");
    let run = chaos(
        out.path(),
        &[
            "--seed",
            "31",
            "--nodes",
            "5",
            "--splits",
            "2",
            "--duration",
            "30s",
        ],
    );
    assert!(run.status.success(), "seed 31 failed");
    let s = summary(out.path(), 31);
    assert_clean(&s);
    assert_eq!(s["splits_done"], 2, "{s:#}");
    assert_eq!(s["membership_settled"], true, "{s:#}");
    assert!(!s["faults"].as_array().expect("faults").is_empty());
}

#[test]
fn nodes_join_drain_and_are_replaced_under_faults_aimed_at_moves() {
    let _turn = cluster_turn_blocking();
    let out = tempfile::tempdir().expect("tempdir");
    let run = chaos(
        out.path(),
        &[
            "--seed",
            "52",
            "--nodes",
            "5",
            "--shards",
            "8",
            "--membership",
            "--splits",
            "1",
            "--faults",
            "kill-mover,isolate-meta,kill,partition",
            "--fault-count",
            "6",
            "--duration",
            "30s",
        ],
    );
    assert!(run.status.success(), "seed 52 failed");
    let s = summary(out.path(), 52);
    assert_clean(&s);
    assert_eq!(s["splits_done"], 1, "{s:#}");
    assert_eq!(s["membership_settled"], true, "{s:#}");
    let changes = s["membership_changes"].as_array().expect("changes");
    let described: Vec<&str> = changes
        .iter()
        .map(|c| c["change"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(changes.len(), 3, "{s:#}");
    assert!(changes.iter().all(|c| c["done_secs"].is_f64()), "{s:#}");
    assert!(described[0].ends_with("joins"), "{described:?}");
    assert!(described[1].ends_with("drained"), "{described:?}");
    assert!(
        described[2].contains("removed by force, replaced by n7"),
        "{described:?}"
    );
    // The faults aimed at moves met some: the membership changes keep replicas moving.
    assert!(s["faults_during_moves"].as_u64() >= Some(1), "{s:#}");
}

#[test]
fn ten_kill_all_and_restart_cycles_lose_nothing() {
    let _turn = cluster_turn_blocking();
    let out = tempfile::tempdir().expect("tempdir");
    let run = chaos(
        out.path(),
        &[
            "--seed",
            "21",
            "--faults",
            "kill-all",
            "--fault-count",
            "10",
            "--duration",
            "10s",
        ],
    );
    assert!(run.status.success(), "seed 21 failed");
    let s = summary(out.path(), 21);
    assert_clean(&s);
    let faults = s["faults"].as_array().expect("faults");
    assert_eq!(faults.len(), 10);
    assert!(faults.iter().all(|f| f["kind"] == "kill-all"), "{s:#}");
}

/// Runs seed 2 with a planted bug (`flag`), which must make it fail; its summary.
fn planted(out: &Path, faults: &str, duration: &str, flag: &str) -> serde_json::Value {
    let run = chaos(
        out,
        &[
            "--seed",
            "2",
            "--faults",
            faults,
            "--duration",
            duration,
            flag,
        ],
    );
    assert!(
        !run.status.success(),
        "the planted bug {flag} went unnoticed"
    );
    let s = summary(out, 2);
    assert_eq!(s["passed"], false);
    s
}

#[test]
fn a_planted_stale_read_bug_is_caught() {
    let _turn = cluster_turn_blocking();
    let out = tempfile::tempdir().expect("tempdir");
    let s = planted(
        out.path(),
        "partition",
        "20s",
        "--self-test-stale-as-default",
    );
    assert_eq!(s["checker"]["summary"]["linearizable"], "illegal", "{s:#}");
    assert!(
        out.path().join("seed-2/linearizability.html").is_file(),
        "porcupine's picture of the violation is written"
    );
    // The replicas themselves are fine: the bug is only in how reads were labelled.
    assert_eq!(s["divergent_keys"].as_array().map(Vec::len), Some(0));
}

#[test]
fn a_planted_lock_lease_bug_is_caught() {
    let _turn = cluster_turn_blocking();
    let out = tempfile::tempdir().expect("tempdir");
    let s = planted(
        out.path(),
        "pause,partition",
        "30s",
        "--self-test-overstate-lease",
    );
    let checked = &s["checker"]["summary"];
    assert!(checked["lock_violations"].as_u64() > Some(0), "{s:#}");
    assert!(
        out.path().join("seed-2/lock_violations.jsonl").is_file(),
        "the overlapping holds are listed"
    );
    // Everything else held: the bug is only in what the clients believed.
    assert_eq!(checked["linearizable"], "ok", "{s:#}");
    assert_eq!(checked["txn_linearizable"], "ok", "{s:#}");
}

/// Seed 9101, the run that once left a drain unfinished: while n1 is drained a fault kills
/// every node, and n1 comes back after its removal. It must stop at once saying it was
/// removed (exit status 3), which ends its drain, and every membership change must finish.
#[test]
fn a_drain_interrupted_by_killing_every_node_finishes() {
    let _turn = cluster_turn_blocking();
    let out = tempfile::tempdir().expect("tempdir");
    let run = chaos(
        out.path(),
        &[
            "--seed",
            "9101",
            "--nodes",
            "5",
            "--shards",
            "8",
            "--membership",
            "--splits",
            "1",
            "--duration",
            "30s",
        ],
    );
    assert!(run.status.success(), "seed 9101 failed");
    let s = summary(out.path(), 9101);
    assert_clean(&s);
    assert_eq!(s["membership_settled"], true, "{s:#}");
    let changes = s["membership_changes"].as_array().expect("changes");
    assert_eq!(changes.len(), 3, "{s:#}");
    assert!(changes.iter().all(|c| c["done_secs"].is_f64()), "{s:#}");
}
