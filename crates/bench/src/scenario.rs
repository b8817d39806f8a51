//! Scenario files: what a benchmark run does, in basho_bench's vocabulary.
//!
//! A [`Scenario`] is read from TOML (see docs/benchmarks.md for the example every preset follows)
//! with [`Scenario::from_toml_str`]. Parsing is strict: unknown fields are rejected by
//! serde with a message naming them, and [`Scenario::validate`] rejects values that parse
//! but make no sense, with a [`BenchError::Invalid`] naming the field.

use std::time::Duration;

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::BenchError;
use crate::keygen::KeyGeneratorConfig;
use crate::valuegen::ValueGeneratorConfig;

/// How fast workers issue operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Closed loop: each worker sends its next request as soon as the last one answered
    /// (`mode = "max"`).
    Max,
    /// Open loop at this many operations per second in total, all workers together
    /// (`rate = N`); latency is timed from each operation's intended send time.
    Rate(u64),
}

/// Which client protocol the run speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Driver {
    /// Trireme's HTTP API (slot-aware).
    Trireme,
    /// RESP: Trireme, Redis, Dynomite, anything Redis-speaking.
    Resp,
    /// Consul KV over HTTP.
    Consul,
    /// etcd v3 JSON gateway.
    Etcd,
    /// Trireme's documents API (`/v0`, Orchestrate-style): the one driver with search.
    Orchestrate,
}

/// Read consistency requested from the target.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Consistency {
    /// The target's default reads.
    #[default]
    Default,
    /// Linearizable reads.
    Consistent,
    /// Reads any replica may answer, possibly stale.
    Stale,
}

/// An operation a worker can issue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Operation {
    /// Read one key (YCSB read).
    Get,
    /// Write one key (YCSB insert).
    Put,
    /// Delete one key.
    Delete,
    /// Overwrite an existing key (YCSB update).
    Update,
    /// List a range of keys (YCSB scan).
    List,
    /// Search by value.
    Search,
    /// Compare-and-set: read, then conditionally write (YCSB read-modify-write).
    Cas,
    /// A Consul transaction (`PUT /v1/txn`) of four `set`s, on keys that share the drawn
    /// key's hash tag (`{key}/0` to `{key}/3`), so one shard applies them together.
    Txn,
    /// A Consul transaction of four `set`s on keys whose slots are in four different
    /// quarters of the slot space (`{key/qN}/0`, N picked per quarter), so a cluster of
    /// four equal shards commits it across four shards.
    TxnShards,
}

impl Operation {
    /// Every operation, in the order of the `[operations]` table.
    pub const ALL: [Operation; 9] = [
        Operation::Get,
        Operation::Put,
        Operation::Delete,
        Operation::Update,
        Operation::List,
        Operation::Search,
        Operation::Cas,
        Operation::Txn,
        Operation::TxnShards,
    ];

    /// The lowercase name used in scenario files and reports.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Operation::Get => "get",
            Operation::Put => "put",
            Operation::Delete => "delete",
            Operation::Update => "update",
            Operation::List => "list",
            Operation::Search => "search",
            Operation::Cas => "cas",
            Operation::Txn => "txn",
            Operation::TxnShards => "txn_shards",
        }
    }
}

impl std::fmt::Display for Operation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The `[operations]` table: relative weights, absent meaning 0.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperationWeights {
    /// Weight of `get`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub get: Option<u32>,
    /// Weight of `put`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub put: Option<u32>,
    /// Weight of `delete`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete: Option<u32>,
    /// Weight of `update`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update: Option<u32>,
    /// Weight of `list`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub list: Option<u32>,
    /// Weight of `search`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search: Option<u32>,
    /// Weight of `cas`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cas: Option<u32>,
    /// Weight of `txn`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub txn: Option<u32>,
    /// Weight of `txn_shards`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub txn_shards: Option<u32>,
}

impl OperationWeights {
    /// The weight of `op` (0 when absent).
    #[must_use]
    pub fn weight(&self, op: Operation) -> u32 {
        let w = match op {
            Operation::Get => self.get,
            Operation::Put => self.put,
            Operation::Delete => self.delete,
            Operation::Update => self.update,
            Operation::List => self.list,
            Operation::Search => self.search,
            Operation::Cas => self.cas,
            Operation::Txn => self.txn,
            Operation::TxnShards => self.txn_shards,
        };
        w.unwrap_or(0)
    }
}

/// Picks operations at random in proportion to their weights.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperationMix {
    /// Operations with a non-zero weight and the running total of weights up to each.
    cumulative: Vec<(Operation, u64)>,
    total: u64,
}

impl OperationMix {
    /// Builds the mix; fails unless at least one weight is above zero.
    pub fn new(weights: &OperationWeights) -> Result<Self, BenchError> {
        let mut total = 0u64;
        let mut cumulative = Vec::new();
        for op in Operation::ALL {
            let w = u64::from(weights.weight(op));
            if w > 0 {
                total += w;
                cumulative.push((op, total));
            }
        }
        if total == 0 {
            return Err(BenchError::invalid(
                "operations",
                "operations must give at least one operation a weight above 0",
            ));
        }
        Ok(OperationMix { cumulative, total })
    }

    /// Operations with a non-zero weight, in table order.
    pub fn operations(&self) -> impl Iterator<Item = Operation> + '_ {
        self.cumulative.iter().map(|&(op, _)| op)
    }

    /// Draws an operation.
    pub fn pick<R: Rng + ?Sized>(&self, rng: &mut R) -> Operation {
        let x = rng.random_range(0..self.total);
        let i = self.cumulative.partition_point(|&(_, upto)| upto <= x);
        // x < total, so some entry's running total exceeds it; fall back to the last anyway.
        self.cumulative
            .get(i)
            .or(self.cumulative.last())
            .map_or(Operation::Get, |&(op, _)| op)
    }
}

/// The `[load]` table: what to pre-populate before the run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadConfig {
    /// Keys `0..keys` are written before the run; absent means no load phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys: Option<u64>,
}

/// The seed of a scenario file that gives none. Any fixed value keeps runs repeatable; the
/// run prints the seed it used, so a file without one can still be replayed exactly.
pub const DEFAULT_SEED: u64 = 42;

/// A validated benchmark scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "ScenarioFile", into = "ScenarioFile")]
pub struct Scenario {
    /// Name used in reports and output file names.
    pub name: String,
    /// Closed loop (`max`) or a total rate.
    pub mode: Mode,
    /// Measured run length, after warm-up.
    pub duration: Duration,
    /// Unmeasured run time before `duration` starts.
    pub warmup: Duration,
    /// Number of concurrent workers (connections).
    pub concurrent: u32,
    /// Protocol to speak.
    pub driver: Driver,
    /// Target URLs; empty means start a local cluster.
    pub targets: Vec<String>,
    /// Read consistency.
    pub consistency: Consistency,
    /// Seed for every random choice of the run.
    pub seed: u64,
    /// Key choice.
    pub key_generator: KeyGeneratorConfig,
    /// Value sizes.
    pub value_generator: ValueGeneratorConfig,
    /// Operation weights.
    pub operations: OperationWeights,
    /// Pre-load before the run.
    pub load: LoadConfig,
}

/// The on-disk shape of a scenario, before validation.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScenarioFile {
    name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rate: Option<u64>,
    duration: String,
    #[serde(default = "zero_duration")]
    warmup: String,
    concurrent: u32,
    driver: Driver,
    #[serde(default)]
    targets: Vec<String>,
    #[serde(default)]
    consistency: Consistency,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    seed: Option<u64>,
    key_generator: KeyGeneratorConfig,
    value_generator: ValueGeneratorConfig,
    operations: OperationWeights,
    #[serde(default)]
    load: LoadConfig,
}

fn zero_duration() -> String {
    "0s".to_owned()
}

fn parse_duration(field: &'static str, text: &str) -> Result<Duration, BenchError> {
    humantime::parse_duration(text).map_err(|e| {
        BenchError::invalid(
            field,
            format!("{field} {text:?} is not a duration like \"120s\": {e}"),
        )
    })
}

impl TryFrom<ScenarioFile> for Scenario {
    type Error = BenchError;

    fn try_from(file: ScenarioFile) -> Result<Self, BenchError> {
        let mode = match (file.mode.as_deref(), file.rate) {
            (Some("max"), None) => Mode::Max,
            (None, Some(0)) => return Err(BenchError::invalid("rate", "rate must be at least 1")),
            (None, Some(rate)) => Mode::Rate(rate),
            (Some(_), Some(_)) => {
                return Err(BenchError::invalid(
                    "rate",
                    "mode and rate are exclusive: set either mode = \"max\" or rate = N",
                ));
            }
            (Some(other), None) => {
                return Err(BenchError::invalid(
                    "mode",
                    format!("mode must be \"max\" (or set rate = N instead), got {other:?}"),
                ));
            }
            (None, None) => {
                return Err(BenchError::invalid(
                    "mode",
                    "mode is missing: set mode = \"max\" or rate = N",
                ));
            }
        };
        let scenario = Scenario {
            name: file.name,
            mode,
            duration: parse_duration("duration", &file.duration)?,
            warmup: parse_duration("warmup", &file.warmup)?,
            concurrent: file.concurrent,
            driver: file.driver,
            targets: file.targets,
            consistency: file.consistency,
            seed: file.seed.unwrap_or(DEFAULT_SEED),
            key_generator: file.key_generator,
            value_generator: file.value_generator,
            operations: file.operations,
            load: file.load,
        };
        scenario.validate()?;
        Ok(scenario)
    }
}

impl From<Scenario> for ScenarioFile {
    fn from(s: Scenario) -> Self {
        let (mode, rate) = match s.mode {
            Mode::Max => (Some("max".to_owned()), None),
            Mode::Rate(rate) => (None, Some(rate)),
        };
        ScenarioFile {
            name: s.name,
            mode,
            rate,
            duration: humantime::format_duration(s.duration).to_string(),
            warmup: humantime::format_duration(s.warmup).to_string(),
            concurrent: s.concurrent,
            driver: s.driver,
            targets: s.targets,
            consistency: s.consistency,
            seed: Some(s.seed),
            key_generator: s.key_generator,
            value_generator: s.value_generator,
            operations: s.operations,
            load: s.load,
        }
    }
}

impl Scenario {
    /// Parses and validates a scenario file.
    pub fn from_toml_str(text: &str) -> Result<Self, BenchError> {
        let file: ScenarioFile = toml::from_str(text)?;
        Scenario::try_from(file)
    }

    /// Writes the scenario back as TOML (durations in humantime form).
    pub fn to_toml_string(&self) -> Result<String, BenchError> {
        toml::to_string(&ScenarioFile::from(self.clone())).map_err(|e| {
            BenchError::invalid("scenario", format!("scenario cannot be written: {e}"))
        })
    }

    /// Checks values that parse but are not usable; errors name the field.
    pub fn validate(&self) -> Result<(), BenchError> {
        if self.name.trim().is_empty() {
            return Err(BenchError::invalid("name", "name must not be empty"));
        }
        if self.duration.is_zero() {
            return Err(BenchError::invalid(
                "duration",
                "duration must be greater than zero",
            ));
        }
        if self.concurrent == 0 {
            return Err(BenchError::invalid(
                "concurrent",
                "concurrent must be at least 1",
            ));
        }
        for target in &self.targets {
            let ok = match self.driver {
                Driver::Resp => target.starts_with("redis://") || target.starts_with("rediss://"),
                Driver::Trireme | Driver::Consul | Driver::Etcd | Driver::Orchestrate => {
                    target.starts_with("http://") || target.starts_with("https://")
                }
            };
            if !ok {
                let scheme = if self.driver == Driver::Resp {
                    "redis://host:port"
                } else {
                    "http://host:port"
                };
                return Err(BenchError::invalid(
                    "targets",
                    format!("targets entry {target:?} must look like {scheme} for this driver"),
                ));
            }
        }
        self.key_generator.validate()?;
        self.value_generator.validate()?;
        OperationMix::new(&self.operations)?;
        Ok(())
    }

    /// The operation mix of this scenario.
    pub fn operation_mix(&self) -> Result<OperationMix, BenchError> {
        OperationMix::new(&self.operations)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker_rng;

    /// A complete scenario file, of the kind docs/benchmarks.md shows.
    const DESIGN_EXAMPLE: &str = r#"
name = "riak-10-1"
mode = "max"                 # or: rate = 20000  (total operations per second, all workers together)
duration = "120s"
warmup = "10s"
concurrent = 8
driver = "trireme"           # trireme | resp | consul | etcd
targets = []                 # empty: start a local 3-node cluster, run, stop it
consistency = "default"      # default | consistent | stale
seed = 42

[key_generator]
kind = "uniform"             # uniform | pareto | zipfian | sequential | latest | hotspot
keys = 1_000_000

[value_generator]
kind = "exponential"         # fixed (size) | exponential (min, mean) | uniform (min, max)
min = 4098
mean = 50000

[operations]                 # relative weights
get = 10
put = 1

[load]                       # pre-populate before the run
keys = 1_000_000
"#;

    fn invalid_field(text: &str) -> (&'static str, String) {
        match Scenario::from_toml_str(text).unwrap_err() {
            BenchError::Invalid { field, message } => (field, message),
            other => panic!("expected a validation error, got {other}"),
        }
    }

    #[test]
    fn parses_the_design_example() {
        let s = Scenario::from_toml_str(DESIGN_EXAMPLE).unwrap();
        assert_eq!(s.name, "riak-10-1");
        assert_eq!(s.mode, Mode::Max);
        assert_eq!(s.duration, Duration::from_secs(120));
        assert_eq!(s.warmup, Duration::from_secs(10));
        assert_eq!(s.concurrent, 8);
        assert_eq!(s.driver, Driver::Trireme);
        assert!(s.targets.is_empty());
        assert_eq!(s.consistency, Consistency::Default);
        assert_eq!(s.seed, 42);
        assert_eq!(
            s.key_generator,
            KeyGeneratorConfig::Uniform { keys: 1_000_000 }
        );
        assert_eq!(
            s.value_generator,
            ValueGeneratorConfig::Exponential {
                min: 4098,
                mean: 50_000
            }
        );
        assert_eq!(s.operations.weight(Operation::Get), 10);
        assert_eq!(s.operations.weight(Operation::Put), 1);
        assert_eq!(s.operations.weight(Operation::Cas), 0);
        assert_eq!(s.load.keys, Some(1_000_000));
    }

    #[test]
    fn a_file_without_a_seed_gets_the_default_one() {
        let text = DESIGN_EXAMPLE.replace("seed = 42\n", "");
        assert!(!text.contains("seed"), "the example still has a seed");
        let s = Scenario::from_toml_str(&text).expect("a scenario without a seed is accepted");
        assert_eq!(s.seed, DEFAULT_SEED);
        // Written back, the seed is explicit, so the result file replays the same run.
        let again = Scenario::from_toml_str(&s.to_toml_string().unwrap()).unwrap();
        assert_eq!(again.seed, DEFAULT_SEED);
        let other = DESIGN_EXAMPLE.replace("seed = 42", "seed = 7");
        assert_eq!(Scenario::from_toml_str(&other).unwrap().seed, 7);
    }

    #[test]
    fn a_parse_error_is_told_once() {
        let text = DESIGN_EXAMPLE.replace("concurrent = 8\n", "");
        let err = Scenario::from_toml_str(&text).unwrap_err();
        // What `trireme bench` prints: the error and every source below it.
        let mut shown = err.to_string();
        let mut source = std::error::Error::source(&err);
        while let Some(cause) = source {
            shown.push_str(&format!(": {cause}"));
            source = cause.source();
        }
        assert_eq!(
            shown.matches("missing field `concurrent`").count(),
            1,
            "{shown}"
        );
    }

    #[test]
    fn round_trips_through_toml() {
        let s = Scenario::from_toml_str(DESIGN_EXAMPLE).unwrap();
        let text = s.to_toml_string().unwrap();
        assert_eq!(Scenario::from_toml_str(&text).unwrap(), s);
        let rated = DESIGN_EXAMPLE.replace("mode = \"max\"", "rate = 20000");
        let s = Scenario::from_toml_str(&rated).unwrap();
        assert_eq!(s.mode, Mode::Rate(20_000));
        assert_eq!(
            Scenario::from_toml_str(&s.to_toml_string().unwrap()).unwrap(),
            s
        );
    }

    #[test]
    fn rejects_unknown_fields_by_name() {
        let text = DESIGN_EXAMPLE.replace("seed = 42", "seed = 42\nworkers = 3");
        let err = Scenario::from_toml_str(&text).unwrap_err();
        assert!(matches!(err, BenchError::Toml(_)));
        assert!(err.to_string().contains("workers"), "{err}");

        let text = DESIGN_EXAMPLE.replace("min = 4098", "min = 4098\nmedian = 3");
        let err = Scenario::from_toml_str(&text).unwrap_err();
        assert!(err.to_string().contains("median"), "{err}");

        let text = DESIGN_EXAMPLE.replace("put = 1", "put = 1\nscan = 2");
        let err = Scenario::from_toml_str(&text).unwrap_err();
        assert!(err.to_string().contains("scan"), "{err}");
    }

    #[test]
    fn rejects_zero_concurrent() {
        let (field, message) =
            invalid_field(&DESIGN_EXAMPLE.replace("concurrent = 8", "concurrent = 0"));
        assert_eq!(field, "concurrent");
        assert_eq!(message, "concurrent must be at least 1");
    }

    #[test]
    fn mode_and_rate_are_exclusive() {
        let (field, message) = invalid_field(
            &DESIGN_EXAMPLE.replace("mode = \"max\"", "mode = \"max\"\nrate = 20000"),
        );
        assert_eq!(field, "rate");
        assert!(message.contains("mode") && message.contains("rate"));

        let (field, _) = invalid_field(&DESIGN_EXAMPLE.replace("mode = \"max\"", ""));
        assert_eq!(field, "mode");
        let (field, _) =
            invalid_field(&DESIGN_EXAMPLE.replace("mode = \"max\"", "mode = \"fast\""));
        assert_eq!(field, "mode");
        let (field, _) = invalid_field(&DESIGN_EXAMPLE.replace("mode = \"max\"", "rate = 0"));
        assert_eq!(field, "rate");
    }

    #[test]
    fn rejects_empty_operation_weights() {
        let (field, message) =
            invalid_field(&DESIGN_EXAMPLE.replace("get = 10\nput = 1", "get = 0"));
        assert_eq!(field, "operations");
        assert!(message.contains("operations"));
        let (field, _) = invalid_field(&DESIGN_EXAMPLE.replace("get = 10\nput = 1", ""));
        assert_eq!(field, "operations");
    }

    #[test]
    fn rejects_bad_values_by_field() {
        let cases = [
            (("duration = \"120s\"", "duration = \"soon\""), "duration"),
            (("duration = \"120s\"", "duration = \"0s\""), "duration"),
            (("warmup = \"10s\"", "warmup = \"ten\""), "warmup"),
            (
                ("keys = 1_000_000\n\n[value", "keys = 0\n\n[value"),
                "key_generator.keys",
            ),
            (("targets = []", "targets = [\"redis://x:1\"]"), "targets"),
        ];
        for ((from, to), field) in cases {
            let text = DESIGN_EXAMPLE.replace(from, to);
            assert_ne!(text, DESIGN_EXAMPLE, "replacement {from:?} did not apply");
            let (got, message) = invalid_field(&text);
            assert_eq!(got, field, "{message}");
            assert!(message.contains(field), "{message}");
        }
    }

    #[test]
    fn operation_mix_follows_weights() {
        let weights = OperationWeights {
            get: Some(50),
            put: Some(50),
            delete: Some(1),
            ..OperationWeights::default()
        };
        let mix = OperationMix::new(&weights).unwrap();
        assert_eq!(
            mix.operations().collect::<Vec<_>>(),
            vec![Operation::Get, Operation::Put, Operation::Delete]
        );
        let mut rng = worker_rng(8, 0);
        let mut counts = std::collections::BTreeMap::new();
        let draws = 101_000;
        for _ in 0..draws {
            *counts.entry(mix.pick(&mut rng)).or_insert(0u64) += 1;
        }
        assert_eq!(counts.len(), 3);
        let share = |op| counts[&op] as f64 / draws as f64;
        assert!((share(Operation::Get) - 50.0 / 101.0).abs() < 0.01);
        assert!((share(Operation::Put) - 50.0 / 101.0).abs() < 0.01);
        assert!((share(Operation::Delete) - 1.0 / 101.0).abs() < 0.002);
    }

    #[test]
    fn operation_mix_is_reproducible() {
        let weights = OperationWeights {
            get: Some(1),
            cas: Some(1),
            ..OperationWeights::default()
        };
        let mix = OperationMix::new(&weights).unwrap();
        let run = |seed| {
            let mut rng = worker_rng(seed, 0);
            (0..64).map(|_| mix.pick(&mut rng)).collect::<Vec<_>>()
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
        assert!(
            run(1)
                .iter()
                .all(|op| matches!(op, Operation::Get | Operation::Cas))
        );
    }
}
