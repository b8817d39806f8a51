//! `trireme`: one binary for running a node, starting a local cluster and looking at it, and
//! benchmarking. Errors go to stderr with a non-zero exit.

mod backup;
mod bench;
mod bench_probe;
mod bench_qualify;
mod bench_watch;
mod chaos;
mod cluster;
mod cluster_admin;
mod config;
mod kv;
mod server;

use clap::{Parser, Subcommand};

/// mimalloc instead of the system allocator: the request path allocates small buffers at a
/// high rate, and glibc's malloc showed up prominently in write-heavy profiles.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use std::process::ExitCode;

/// Trireme: a sharded, Raft-replicated key-value database with Consul KV and Redis APIs.
#[derive(Parser, Debug)]
#[command(name = "trireme", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Commands,
    /// ACL token sent to nodes by the commands that talk to one (kv, cluster status, remove
    /// and split, backup, restore); also read from TRIREME_TOKEN.
    #[arg(long, global = true, env = "TRIREME_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// CA certificate (PEM) that https:// (and, for bench, rediss://) nodes' certificates
    /// must chain to; also read from TRIREME_CA_FILE.
    #[arg(long, global = true, env = "TRIREME_CA_FILE")]
    ca_file: Option<std::path::PathBuf>,
}

#[derive(Subcommand, Debug)]
enum Commands {
    /// Run a database node.
    Server(Box<config::ServerArgs>),
    /// Start a local multi-node cluster (up), add a node to it while it runs (add), or show a
    /// running one shard by shard (status).
    Cluster(cluster::ClusterArgs),
    /// Read and write keys through a node's Consul KV API: get, put, delete, list, watch.
    Kv(kv::KvArgs),
    /// Run a benchmark scenario against running targets (RESP, Consul KV HTTP or etcd), qualify
    /// a target (bench qualify) or probe replication delay (bench probe).
    Bench(Box<bench::BenchArgs>),
    /// Chaos: a cluster in network namespaces under faults, histories checked for
    /// linearizability (needs root, iproute2, iptables and Go).
    Chaos(chaos::ChaosArgs),
    /// A cluster in network namespaces, spread over regions with a delay between them, held
    /// up while one command runs against it (a benchmark); needs root and iproute2.
    Lab(chaos::LabArgs),
    /// Write every shard's keys (values, flags, expiry) to a file, while the cluster serves.
    Backup(backup::BackupArgs),
    /// Write a backup's keys into an empty cluster of any shape; a damaged file is refused
    /// before anything is written.
    Restore(backup::RestoreArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = cluster::use_credentials(cli.token, cli.ca_file.as_deref()) {
        eprintln!("error: {e:#}");
        return ExitCode::FAILURE;
    }
    if let Some(ca_file) = &cli.ca_file
        && let Err(e) = trireme_bench::driver::use_ca_file(ca_file)
    {
        eprintln!("error: --ca-file {}: {e}", ca_file.display());
        return ExitCode::FAILURE;
    }
    let result = match cli.command {
        Commands::Server(args) => server::run(*args),
        Commands::Cluster(args) => cluster::run(args),
        // Its own exit status: 1 means a missing key or a failed check-and-set, 2 an error.
        Commands::Kv(args) => return kv::run(args),
        Commands::Bench(args) => bench::run(*args),
        Commands::Chaos(args) => chaos::run(args),
        // The command's own exit status.
        Commands::Lab(args) => return chaos::run_lab(args),
        Commands::Backup(args) => backup::run_backup(args),
        Commands::Restore(args) => backup::run_restore(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            // A node removed from the cluster says so in its exit status too (documented in
            // docs/operations.md): supervisors must not restart it.
            let removed = e
                .downcast_ref::<trireme_cluster::ClusterError>()
                .is_some_and(|c| matches!(c, trireme_cluster::ClusterError::Removed(_)));
            if removed {
                ExitCode::from(trireme_types::admin::EXIT_REMOVED)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
