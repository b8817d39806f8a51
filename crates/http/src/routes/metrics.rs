//! `GET /metrics` in the Prometheus text format.

use crate::AppState;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use std::fmt::Write;
use std::sync::atomic::Ordering;

pub(crate) async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let mut out = String::with_capacity(4096);
    let m = &state.metrics;
    let counter = |out: &mut String, name: &str, help: &str, value: String| {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
        );
    };
    let _ = writeln!(
        out,
        "# HELP trireme_http_requests_total KV and document requests served over HTTP.\n# TYPE trireme_http_requests_total counter"
    );
    for (op, value) in [
        ("get", &m.kv_get),
        ("put", &m.kv_put),
        ("delete", &m.kv_delete),
        ("doc_get", &m.doc_get),
        ("doc_put", &m.doc_put),
        ("doc_delete", &m.doc_delete),
        ("doc_list", &m.doc_list),
        ("doc_search", &m.doc_search),
    ] {
        let _ = writeln!(
            out,
            "trireme_http_requests_total{{op=\"{op}\"}} {}",
            value.load(Ordering::Relaxed)
        );
    }
    counter(
        &mut out,
        "trireme_http_errors_total",
        "HTTP requests answered with an error status.",
        m.errors.load(Ordering::Relaxed).to_string(),
    );

    // The write path, step by step: each step is a count and a time, the time kept in
    // microseconds and shown in Prometheus's base unit, seconds; divide it by its count for the
    // mean (bench/set-cost.sh prints them per entry).
    let proposals = state.node.proposal_metrics();
    let storage = state.node.storage().metrics();
    counter(
        &mut out,
        "trireme_raft_writers_proposed_total",
        "Write commands carried by the entries the batchers proposed.",
        proposals.writers.load(Ordering::Relaxed).to_string(),
    );
    for (timed, count, count_help, time, time_help) in [
        (
            &proposals.gathers,
            "trireme_raft_entries_proposed_total",
            "Log entries proposed by this node's write batchers.",
            "trireme_raft_gather_seconds_total",
            "Time entries spent gathering writers before being proposed.",
        ),
        (
            &proposals.commits,
            "trireme_raft_entries_completed_total",
            "Proposed entries whose result (or error) came back.",
            "trireme_raft_commit_seconds_total",
            "Time from proposing those entries to handing their writers the results (append, sync, commit, apply).",
        ),
        (
            &storage.appends,
            "trireme_storage_log_appends_total",
            "Raft log appends written to the journal.",
            "trireme_storage_log_append_seconds_total",
            "Time spent writing those appends.",
        ),
        (
            &storage.sync_waits,
            "trireme_storage_sync_requests_total",
            "Durability requests covered by group commit (log appends, votes, snapshots).",
            "trireme_storage_sync_wait_seconds_total",
            "Time those requests waited for the fdatasync that covered them to start.",
        ),
        (
            &storage.syncs,
            "trireme_storage_syncs_total",
            "fdatasync calls made by group commit.",
            "trireme_storage_sync_seconds_total",
            "Time spent in fdatasync.",
        ),
        (
            &storage.applies,
            "trireme_storage_applies_total",
            "Batches of committed entries applied to the data.",
            "trireme_storage_apply_seconds_total",
            "Time spent applying them.",
        ),
    ] {
        counter(&mut out, count, count_help, timed.count().to_string());
        counter(&mut out, time, time_help, seconds(timed.micros()));
    }
    let poisoned = u64::from(state.node.storage().is_poisoned());
    let _ = writeln!(
        out,
        "# HELP trireme_storage_poisoned 1 after a failed sync.\n# TYPE trireme_storage_poisoned gauge\ntrireme_storage_poisoned {poisoned}"
    );

    let _ = writeln!(
        out,
        "# HELP trireme_shard_is_leader 1 if this node leads the shard.\n# TYPE trireme_shard_is_leader gauge"
    );
    let shards = state.node.shards();
    for s in &shards {
        let leads = s
            .leader
            .as_ref()
            .is_some_and(|l| l.name == state.node.me().name);
        let _ = writeln!(
            out,
            "trireme_shard_is_leader{{shard=\"{}\"}} {}",
            s.shard.0,
            u8::from(leads)
        );
    }
    let _ = writeln!(
        out,
        "# HELP trireme_shard_applied_index Last log index applied here.\n# TYPE trireme_shard_applied_index gauge"
    );
    for s in &shards {
        let _ = writeln!(
            out,
            "trireme_shard_applied_index{{shard=\"{}\"}} {}",
            s.shard.0, s.applied_index
        );
    }
    let _ = writeln!(
        out,
        "# HELP trireme_shard_term Current Raft term.\n# TYPE trireme_shard_term gauge"
    );
    for s in &shards {
        let _ = writeln!(
            out,
            "trireme_shard_term{{shard=\"{}\"}} {}",
            s.shard.0, s.term
        );
    }
    out.push_str(&(state.extra_metrics)());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out)
}

/// A time kept in microseconds, as a Prometheus sample in seconds (exact to the microsecond).
fn seconds(micros: u64) -> String {
    format!("{}.{:06}", micros / 1_000_000, micros % 1_000_000)
}
