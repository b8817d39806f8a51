//! Workloads, generators, scenarios and latency statistics for `trireme bench`.
//!
//! Which key to touch next ([`keygen`]), what value to write ([`valuegen`]), what a run
//! looks like ([`scenario`], [`presets`]), how latencies are recorded and summarised
//! ([`stats`]), how to talk to a target ([`driver`]), how a run is driven ([`runner`]) and
//! how its result is shown ([`report`]) and kept ([`results`], [`plot`], [`html`]), and how
//! runs are set side by side ([`compare`], [`repeat`]). [`qualify`] searches the highest rate
//! a target sustains under a latency bound, [`probe`] measures replication delay, and
//! [`progress`] draws the progress bar. Everything random is drawn from a seeded
//! [`rand_chacha::ChaCha8Rng`], so a
//! scenario with the same seed replays the same sequence of operations and keys.

#![deny(missing_docs)]
#![deny(clippy::unwrap_used)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod compare;
pub mod driver;
pub mod html;
pub mod keygen;
pub mod output;
pub mod plot;
pub mod presets;
pub mod probe;
pub mod progress;
pub mod qualify;
pub mod repeat;
pub mod reply;
pub mod report;
pub mod results;
pub mod runner;
pub mod scenario;
pub mod stats;
pub mod valuegen;
pub mod watch;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

pub use driver::{DriverError, RespDriver};
pub use keygen::{InsertCounter, KeyGenerator, KeyGeneratorConfig};
pub use presets::{preset, preset_names};
pub use results::{ResultFile, ResultsError};
pub use runner::{IntervalFigures, IntervalOp, LoadSummary, Progress, RunResult, run};
pub use scenario::{
    Consistency, Driver, LoadConfig, Mode, Operation, OperationMix, OperationWeights, Scenario,
};
pub use stats::{
    IntervalRecorder, IntervalSnapshot, OpStats, OpSummary, Recorder, merge_intervals,
};
pub use valuegen::{ValueGenerator, ValueGeneratorConfig};

/// Errors raised while reading or validating benchmark configuration and merging statistics.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The scenario text is not valid TOML or does not match the scenario schema
    /// (unknown field, wrong type, missing field). serde's message names the field.
    ///
    /// The message is part of this error's text and deliberately not its `source`: shown with
    /// its chain (`{:#}`), it would otherwise be printed twice.
    #[error("invalid scenario file: {0}")]
    Toml(toml::de::Error),
    /// A field parsed but its value is not acceptable; `field` is its dotted path
    /// (for example `key_generator.keys`) and `message` says why.
    #[error("{message}")]
    Invalid {
        /// Dotted path of the offending field, stable for programs to match on.
        field: &'static str,
        /// Human-readable explanation; always mentions the field.
        message: String,
    },
    /// Two histograms could not be merged (their bounds differ).
    #[error("cannot merge latency histograms: {0}")]
    Merge(String),
}

impl From<toml::de::Error> for BenchError {
    fn from(e: toml::de::Error) -> Self {
        BenchError::Toml(e)
    }
}

impl BenchError {
    /// Builds an [`BenchError::Invalid`] for `field`.
    pub(crate) fn invalid(field: &'static str, message: impl Into<String>) -> Self {
        BenchError::Invalid {
            field,
            message: message.into(),
        }
    }
}

/// The random number generator every generator in this crate is driven by.
pub type BenchRng = ChaCha8Rng;

/// A reproducible generator for worker `worker` of a run seeded with `seed`.
///
/// All workers share the seed but draw from distinct ChaCha streams, so their sequences
/// differ from one another yet replay identically on the next run with the same seed.
#[must_use]
pub fn worker_rng(seed: u64, worker: u64) -> BenchRng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(worker);
    rng
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    #[test]
    fn worker_streams_are_reproducible_and_distinct() {
        let a: Vec<u64> = (0..8).map(|_| worker_rng(7, 0).random()).collect();
        let mut r0 = worker_rng(7, 0);
        let mut r0b = worker_rng(7, 0);
        let mut r1 = worker_rng(7, 1);
        let s0: Vec<u64> = (0..8).map(|_| r0.random()).collect();
        let s0b: Vec<u64> = (0..8).map(|_| r0b.random()).collect();
        let s1: Vec<u64> = (0..8).map(|_| r1.random()).collect();
        assert_eq!(s0, s0b);
        assert_ne!(s0, s1);
        assert_eq!(a[0], s0[0]);
    }
}
