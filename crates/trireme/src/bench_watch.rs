//! `trireme bench watch`: Consul blocking queries at scale. N watchers hold blocking queries on
//! one key across the nodes, one writer changes it, and each write is timed to every
//! watcher's wake-up (the fan-out itself is `trireme_bench::watch`). With `--hold` the
//! watchers wait idle instead, to measure what they cost another benchmark run beside them.
//! With no targets it starts the local 3-node cluster and spreads the watchers over it.

use anyhow::{Context, bail};
use clap::Args;
use trireme_bench::Driver;
use trireme_bench::watch::{WatchConfig, run_watch};

/// Flags of `trireme bench watch`.
#[derive(Args, Debug)]
pub struct WatchArgs {
    /// A node's HTTP address (http://host:port); repeat for more. Watchers go to them in
    /// turn; writes go to the first.
    #[arg(long = "target", value_name = "URL")]
    pub targets: Vec<String>,
    /// Watchers in all (each holds one connection).
    #[arg(long, default_value_t = 1000)]
    pub watchers: usize,
    /// Writes, each made once every watcher saw the one before.
    #[arg(long, default_value_t = 20)]
    pub writes: u64,
    /// The key watched.
    #[arg(long, default_value = "bench/watch")]
    pub key: String,
    /// Hold the watchers idle for this long (e.g. 60s) instead of writing.
    #[arg(long, value_name = "DURATION")]
    pub hold: Option<String>,
    /// Print the result as JSON on stdout (the report goes to stderr).
    #[arg(long)]
    pub json: bool,
}

impl WatchArgs {
    fn config(&self, targets: Vec<String>) -> anyhow::Result<WatchConfig> {
        if self.watchers == 0 {
            bail!("--watchers must be at least 1");
        }
        let hold = self
            .hold
            .as_deref()
            .map(|h| {
                humantime::parse_duration(h)
                    .with_context(|| format!("--hold {h:?} is not a duration like 60s"))
            })
            .transpose()?;
        let targets = targets
            .into_iter()
            .map(|t| {
                let bare = t.strip_prefix("http://").unwrap_or(&t);
                if bare.contains("://") {
                    bail!("--target {t}: bench watch speaks HTTP (http://host:port)");
                }
                Ok(bare.trim_end_matches('/').to_owned())
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(WatchConfig {
            targets,
            watchers: self.watchers,
            writes: self.writes,
            key: self.key.clone(),
            hold,
        })
    }
}

/// Runs `trireme bench watch`.
pub fn run(args: WatchArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let result = runtime.block_on(async {
        if !args.targets.is_empty() {
            let config = args.config(args.targets.clone())?;
            return Ok::<_, anyhow::Error>(run_watch(&config).await?);
        }
        let cluster = crate::bench::start_local_cluster(Driver::Trireme).await?;
        let targets: Vec<String> = cluster
            .nodes()
            .iter()
            .map(|n| format!("http://{}", n.http))
            .collect();
        eprintln!("local cluster up; watchers on {}", targets.join(", "));
        let result = match args.config(targets) {
            Ok(config) => run_watch(&config).await.map_err(anyhow::Error::from),
            Err(e) => Err(e),
        };
        crate::bench::stop_local_cluster(cluster, result).await
    })?;
    crate::bench::print_report(args.json, &result.report(), &result)
}
