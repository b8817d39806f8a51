//! Every integration test area of the `trireme` binary but the chaos runs, one module each
//! (`tNN_area.rs`, numbered as docs/testing.md lists them), built into one test binary: the
//! shared harness in `common` is compiled and the binary linked once, not once per area. Run
//! one area with `cargo test -p trireme --test integration tNN_area::`. The chaos runs
//! (`t90_chaos.rs`) are the `chaos` binary: see `chaos.rs`.

mod common;

mod t10_http_kv;
mod t12_consul_txn;
mod t13_consul_blocking;
mod t14_consul_sessions;
mod t15_documents;
mod t16_acl;
mod t17_acl_clients;
mod t18_tls;
mod t19_search_index;
mod t20_resp;
mod t22_resp_vs_redis;
mod t23_pubsub;
mod t24_blocking_pops;
mod t25_big_collections;
mod t26_multi_key_reads;
mod t27_collection_reads;
mod t28_streamed_reads;
mod t30_durability;
mod t31_crash_points;
mod t32_disk_full;
mod t33_txn_across_shards;
mod t40_startup;
mod t42_addresses;
mod t50_real_clients;
mod t60_replication;
mod t61_elastic;
mod t62_failover;
mod t63_snapshots;
mod t64_peer_port;
mod t65_restart_read;
mod t66_mixed_versions;
mod t67_regions;
mod t70_cluster_up;
mod t75_kv_cli;
mod t76_backup;
mod t80_bench_results;
mod t81_bench_qualify_probe;
mod t82_bench_drivers;
mod t85_console;

/// Every `tNN_*.rs` file here is a module of this binary or of `chaos`: a file left out of
/// both would never run.
#[test]
fn every_test_area_is_built() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let declared = [include_str!("integration.rs"), include_str!("chaos.rs")].concat();
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("the tests directory") {
        let name = entry
            .expect("an entry")
            .file_name()
            .to_string_lossy()
            .into_owned();
        let Some(area) = name.strip_suffix(".rs") else {
            continue;
        };
        if area.starts_with('t') && !declared.contains(&format!("\nmod {area};\n")) {
            missing.push(name);
        }
    }
    assert!(
        missing.is_empty(),
        "test areas in no test binary: {missing:?}"
    );
}
