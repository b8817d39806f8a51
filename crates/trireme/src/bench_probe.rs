//! `trireme bench probe`: the Dynomite report's replication-delay measurement. Each sample
//! writes a fresh key on one node and polls another (stale reads by default) until the value
//! shows (the probe itself is `trireme_bench::probe`). With no targets it starts the local
//! 3-node cluster and writes to node 1, reads from node 2.

use anyhow::{Context, bail};
use clap::Args;
use std::time::Duration;
use trireme_bench::probe::{ProbeConfig, ProbeResult, run_probe};
use trireme_bench::{Consistency, Driver};

/// Flags of `trireme bench probe`.
#[derive(Args, Debug)]
pub struct ProbeArgs {
    /// Where values are written (http://host:port, or redis://host:port for resp).
    #[arg(long, requires = "read_target")]
    pub write_target: Option<String>,
    /// Where they are polled.
    #[arg(long, requires = "write_target")]
    pub read_target: Option<String>,
    /// Driver: trireme or consul (Consul KV HTTP API) or resp (default: trireme; redis://
    /// targets imply resp).
    #[arg(long)]
    pub driver: Option<String>,
    /// Number of samples (keys written and polled).
    #[arg(long, default_value_t = 1000)]
    pub samples: u64,
    /// Samples in flight at once.
    #[arg(long, default_value_t = 4)]
    pub concurrent: u32,
    /// Consistency of the polling reads: stale (a replica answers from its own copy: what
    /// shows replication delay), default or consistent.
    #[arg(long, default_value = "stale")]
    pub consistency: String,
    /// A value not visible after this long counts as a timeout.
    #[arg(long, default_value = "5s")]
    pub timeout: String,
    /// Print the result as JSON on stdout (the report goes to stderr).
    #[arg(long)]
    pub json: bool,
}

impl ProbeArgs {
    fn driver(&self) -> anyhow::Result<Driver> {
        let redis = self
            .write_target
            .as_deref()
            .is_some_and(|t| t.starts_with("redis://"));
        Ok(match self.driver.as_deref() {
            None if redis => Driver::Resp,
            None | Some("trireme") => Driver::Trireme,
            Some("consul") => Driver::Consul,
            Some("resp") => Driver::Resp,
            Some(other) => bail!("--driver {other:?}: expected trireme, consul or resp"),
        })
    }

    fn config(&self, write_target: String, read_target: String) -> anyhow::Result<ProbeConfig> {
        let consistency = match self.consistency.as_str() {
            "default" => Consistency::Default,
            "consistent" => Consistency::Consistent,
            "stale" => Consistency::Stale,
            other => bail!("--consistency {other:?}: expected stale, default or consistent"),
        };
        if self.samples == 0 || self.concurrent == 0 {
            bail!("--samples and --concurrent must be at least 1");
        }
        let timeout = humantime::parse_duration(&self.timeout)
            .with_context(|| format!("--timeout {:?} is not a duration like 5s", self.timeout))?;
        Ok(ProbeConfig {
            driver: self.driver()?,
            write_target,
            read_target,
            consistency,
            samples: self.samples,
            concurrent: self.concurrent,
            timeout: timeout.max(Duration::from_millis(1)),
        })
    }
}

/// Runs `trireme bench probe`.
pub fn run(args: ProbeArgs) -> anyhow::Result<()> {
    let driver = args.driver()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let result: ProbeResult = runtime.block_on(async {
        if let (Some(write), Some(read)) = (&args.write_target, &args.read_target) {
            let config = args.config(write.clone(), read.clone())?;
            return Ok::<_, anyhow::Error>(run_probe(&config, None).await?);
        }
        let cluster = crate::bench::start_local_cluster(driver).await?;
        let url = |i: usize| {
            let node = cluster
                .nodes()
                .get(i)
                .context("the local cluster is too small")?;
            Ok::<_, anyhow::Error>(match driver {
                Driver::Resp => format!("redis://{}", node.resp),
                _ => format!("http://{}", node.http),
            })
        };
        let (write, read) = (url(0)?, url(1)?);
        eprintln!("local cluster up; writing to {write}, reading from {read}");
        let result = match args.config(write, read) {
            Ok(config) => run_probe(&config, None).await.map_err(anyhow::Error::from),
            Err(e) => Err(e),
        };
        crate::bench::stop_local_cluster(cluster, result).await
    })?;
    crate::bench::print_report(args.json, &result.report(), &result)
}
