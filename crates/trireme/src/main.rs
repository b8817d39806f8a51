//! `trireme`: one binary for running a node and, later, for starting local clusters, talking to
//! them and benchmarking them. Errors go to stderr with a non-zero exit.

mod config;
mod server;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Trireme: a sharded, Raft-replicated key-value database with Consul KV and Redis APIs.
#[derive(Parser, Debug)]
#[command(name = "trireme", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Commands,
}

#[derive(Subcommand, Debug)]
enum Commands {
    /// Run a database node.
    Server(config::ServerArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Commands::Server(args) => server::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
