//! `GET /metrics` in the Prometheus text format.

use crate::access::Access;
use crate::{ApiError, AppState};
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use trireme_cluster::ReplicaStats;

/// Needs `operator:read` when ACLs are on (Prometheus sends it as a Bearer token).
pub(crate) async fn metrics(
    State(state): State<AppState>,
    access: Access,
) -> Result<impl IntoResponse, ApiError> {
    access.operator_read()?;
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
            "Raft log appends written to the log store.",
            "trireme_storage_log_append_seconds_total",
            "Time spent writing those appends.",
        ),
        (
            &storage.sync_waits,
            "trireme_storage_sync_requests_total",
            "Durability requests covered by the log's group commit (log appends, votes, snapshots).",
            "trireme_storage_sync_wait_seconds_total",
            "Time those requests waited for the fdatasync that covered them to start.",
        ),
        (
            &storage.syncs,
            "trireme_storage_syncs_total",
            "fdatasync calls made by the log's group commit.",
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
    let name = "trireme_storage_apply_batch_seconds";
    header(
        &mut out,
        name,
        "histogram",
        "Time each batch of committed entries took to apply; the shard's other writes wait behind it.",
    );
    storage.apply_batches.write_prometheus(&mut out, name, "");
    let waiting = state.node.blocking_queries_waiting();
    let _ = writeln!(
        out,
        "# HELP trireme_blocking_queries_waiting Blocking queries (Consul ?index=, Redis BLPOP and the like) waiting on this node's replicas, its own clients' and other nodes'.\n# TYPE trireme_blocking_queries_waiting gauge\ntrireme_blocking_queries_waiting {waiting}"
    );
    let open = state.node.whole_reads_open();
    let _ = writeln!(
        out,
        "# HELP trireme_whole_reads_open Whole-collection reads (HGETALL, SMEMBERS, long LRANGE and ZRANGE) this node serves page by page and holds open between pages.\n# TYPE trireme_whole_reads_open gauge\ntrireme_whole_reads_open {open}"
    );
    let storage_now = state.node.storage();
    let (pending, purged) = (storage_now.purges_pending(), storage_now.purged_rows());
    let _ = writeln!(
        out,
        "# HELP trireme_collection_purges_pending Deleted or replaced collections whose member rows wait for their background purge on this node.\n# TYPE trireme_collection_purges_pending gauge\ntrireme_collection_purges_pending {pending}\n# HELP trireme_collection_purged_rows_total Member rows of deleted or replaced collections purged on this node.\n# TYPE trireme_collection_purged_rows_total counter\ntrireme_collection_purged_rows_total {purged}"
    );
    let log_bytes = state.node.storage().log_disk_bytes();
    let _ = writeln!(
        out,
        "# HELP trireme_storage_log_bytes Bytes of the Raft log store's segment files on disk.\n# TYPE trireme_storage_log_bytes gauge\ntrireme_storage_log_bytes {log_bytes}"
    );
    let table_bytes = state.node.storage().table_disk_bytes();
    let _ = writeln!(
        out,
        "# HELP trireme_storage_table_bytes Bytes of the tables holding the rows of every shard on disk.\n# TYPE trireme_storage_table_bytes gauge\ntrireme_storage_table_bytes {table_bytes}"
    );
    let free = state.node.storage().free_disk_bytes();
    if free != u64::MAX {
        let _ = writeln!(
            out,
            "# HELP trireme_storage_free_bytes Bytes free on the data directory's file system; writes are refused below [storage] min_free_bytes.\n# TYPE trireme_storage_free_bytes gauge\ntrireme_storage_free_bytes {free}"
        );
    }
    let member_index = state.node.storage().member_index_bytes();
    let _ = writeln!(
        out,
        "# HELP trireme_member_index_bytes Memory the in-memory index of hash, set and sorted set members takes; bounded by [storage] member_index_bytes.\n# TYPE trireme_member_index_bytes gauge\ntrireme_member_index_bytes {member_index}"
    );
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
    replicas(&mut out, &state).await;
    search_indexes(&mut out, &state);
    elastic(&mut out, &state);
    requests(&mut out, m);
    out.push_str(&(state.extra_metrics)());
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out))
}

/// Counters without labels, each with its help line.
fn counters(out: &mut String, list: &[(&str, &str, &AtomicU64)]) {
    for (name, help, value) in list {
        header(out, name, "counter", help);
        let _ = writeln!(out, "{name} {}", value.load(Ordering::Relaxed));
    }
}

/// `# HELP` and `# TYPE` lines of a metric.
fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// The search index of each shard replica here: lag, documents, bytes; and the time each
/// shard's part of a search took here.
fn search_indexes(out: &mut String, state: &AppState) {
    let search = state.node.search_indexes();
    let name = "trireme_search_index_lag_entries";
    header(
        out,
        name,
        "gauge",
        "Log entries applied to the shard here whose changes the search index does not cover yet.",
    );
    for s in search.stats() {
        let _ = writeln!(out, "{name}{{shard=\"{}\"}} {}", s.shard.0, s.lag_entries);
    }
    let (bytes, docs) = search.usage();
    for (name, help, value) in [
        (
            "trireme_search_index_documents",
            "Documents in this node's search index (every shard replica here), as of its last commit.",
            docs,
        ),
        (
            "trireme_search_index_bytes",
            "Size of this node's search index files.",
            bytes,
        ),
    ] {
        header(out, name, "gauge", help);
        let _ = writeln!(out, "{name} {value}");
    }
    counters(
        out,
        &[
            (
                "trireme_search_documents_indexed_total",
                "Documents put into the search index here (new, changed, or indexed again after a check).",
                &search.indexed,
            ),
            (
                "trireme_search_index_catch_up_checks_total",
                "Times the indexer fell so far behind that a shard's changes were left out and its rows checked instead.",
                &search.left_out_checks,
            ),
        ],
    );
    let name = "trireme_search_shard_seconds";
    header(
        out,
        name,
        "histogram",
        "Time the index took to answer one shard's part of a search here.",
    );
    search.latency.write_prometheus(out, name, "");
}

/// Request latency histograms and open connections of the HTTP front end.
fn requests(out: &mut String, m: &crate::HttpMetrics) {
    use crate::timing::{METHODS, ROUTES};
    header(
        out,
        "trireme_http_connections_open",
        "gauge",
        "HTTP client connections open now.",
    );
    let _ = writeln!(
        out,
        "trireme_http_connections_open {}",
        m.open_connections.load(Ordering::Relaxed)
    );
    let name = "trireme_http_request_duration_seconds";
    header(
        out,
        name,
        "histogram",
        "Time from a request reaching the router to its response being ready, by route family (kv, document, collection, search, status, metrics, txn, session, backup, acl, console: the web console, blocking: Consul blocking queries with ?index=, other) and method; a series appears with its first request.",
    );
    for (slot, histogram) in m.latency.iter().enumerate() {
        if histogram.count() == 0 {
            continue;
        }
        let labels = format!(
            "route=\"{}\",method=\"{}\"",
            ROUTES[slot / METHODS.len()],
            METHODS[slot % METHODS.len()]
        );
        histogram.write_prometheus(out, name, &labels);
    }
}

/// A series with one sample per shard replica held here: name, type, help, value.
type ShardSeries = (
    &'static str,
    &'static str,
    &'static str,
    fn(&ReplicaStats) -> u64,
);

/// Per shard replica held here: role, indexes, leader changes, follower lag, keys and bytes.
async fn replicas(out: &mut String, state: &AppState) {
    let replicas = state.node.replica_stats();
    header(
        out,
        "trireme_replica_role",
        "gauge",
        "1 for this node's role in each shard it holds a replica of (Leader, Follower, Candidate, Learner).",
    );
    for r in &replicas {
        let _ = writeln!(
            out,
            "trireme_replica_role{{shard=\"{}\",role=\"{}\"}} 1",
            r.shard.0, r.role
        );
    }
    let per_shard: [ShardSeries; 4] = [
        (
            "trireme_shard_committed_index",
            "gauge",
            "Last log index known committed, per shard held here.",
            |r| r.committed_index,
        ),
        (
            "trireme_shard_log_purged_index",
            "gauge",
            "Last log index purged from this node's log (kept in snapshots instead), per shard held here.",
            |r| r.purged_index,
        ),
        (
            "trireme_shard_leader_changes_total",
            "counter",
            "Times this node saw the shard's leader change, since it opened its replica.",
            |r| r.leader_changes,
        ),
        (
            "trireme_shard_elections_total",
            "counter",
            "Elections of the shard seen by this node since it opened its replica, counted as the terms the shard advanced by (won or not).",
            |r| r.elections,
        ),
    ];
    for (name, kind, help, value) in per_shard {
        header(out, name, kind, help);
        for r in &replicas {
            let _ = writeln!(out, "{name}{{shard=\"{}\"}} {}", r.shard.0, value(r));
        }
    }
    header(
        out,
        "trireme_shard_follower_lag_entries",
        "gauge",
        "On a shard's leader: log entries each follower is behind (leader's last log index minus the follower's matched index).",
    );
    for r in &replicas {
        for (follower, lag) in &r.follower_lag {
            let _ = writeln!(
                out,
                "trireme_shard_follower_lag_entries{{shard=\"{}\",follower=\"{follower}\"}} {lag}",
                r.shard.0
            );
        }
    }

    if let Some(mut usage) = state.usage.get(&state.node).await {
        // A replica moved away since the count was made is no longer this node's to show.
        usage
            .shards
            .retain(|(shard, _, _)| replicas.iter().any(|r| r.shard.0 == *shard));
        header(
            out,
            "trireme_shard_keys",
            "gauge",
            "Rows stored for each shard held here (expired keys not yet removed included). A cached count: a scrape that finds it older than 30 s starts a new one in the background; trireme_shard_usage_age_seconds says how old it is.",
        );
        for (shard, rows, _) in &usage.shards {
            let _ = writeln!(out, "trireme_shard_keys{{shard=\"{shard}\"}} {rows}");
        }
        header(
            out,
            "trireme_shard_bytes",
            "gauge",
            "Bytes of keys and encoded records stored for each shard held here, before compression; counted with trireme_shard_keys.",
        );
        for (shard, _, bytes) in &usage.shards {
            let _ = writeln!(out, "trireme_shard_bytes{{shard=\"{shard}\"}} {bytes}");
        }
        header(
            out,
            "trireme_shard_usage_age_seconds",
            "gauge",
            "Age of the count behind trireme_shard_keys and trireme_shard_bytes.",
        );
        let _ = writeln!(
            out,
            "trireme_shard_usage_age_seconds {:.3}",
            usage.at.elapsed().as_secs_f64()
        );
    }
}

/// Replica moves, shard splits and snapshot transfer.
fn elastic(out: &mut String, state: &AppState) {
    let e = state.node.elastic_metrics();
    counters(
        out,
        &[
            (
                "trireme_moves_started_total",
                "Replica moves this node planned as metadata leader.",
                &e.moves_started,
            ),
            (
                "trireme_moves_completed_total",
                "Replica moves this node completed as metadata leader.",
                &e.moves_completed,
            ),
            (
                "trireme_moves_cancelled_total",
                "Replica moves this node gave up as metadata leader.",
                &e.moves_cancelled,
            ),
            (
                "trireme_splits_completed_total",
                "Shard splits this node completed as metadata leader (by hand or automatic).",
                &e.splits_completed,
            ),
            (
                "trireme_splits_automatic_total",
                "Shard splits this node decided by itself as metadata leader (size or load).",
                &e.splits_automatic,
            ),
            (
                "trireme_splits_declined_total",
                "Automatic splits by size this node declined as metadata leader: one slot (one big key or hash tag) held most of the shard's bytes.",
                &e.splits_declined,
            ),
        ],
    );
    let (sent, received) = state.node.snapshot_bytes();
    header(
        out,
        "trireme_snapshot_sent_bytes_total",
        "counter",
        "Snapshot bytes this node sent to peers (replica moves, lagging followers).",
    );
    let _ = writeln!(out, "trireme_snapshot_sent_bytes_total {sent}");
    header(
        out,
        "trireme_snapshot_received_bytes_total",
        "counter",
        "Snapshot bytes this node received from peers.",
    );
    let _ = writeln!(out, "trireme_snapshot_received_bytes_total {received}");
}

/// A time kept in microseconds, as a Prometheus sample in seconds (exact to the microsecond).
fn seconds(micros: u64) -> String {
    format!("{}.{:06}", micros / 1_000_000, micros % 1_000_000)
}
