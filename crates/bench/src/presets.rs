//! Built-in scenarios: one per report in `seeds/` and YCSB workloads A to F.
//!
//! Every preset is a scenario file kept here as TOML text and parsed with
//! [`Scenario::from_toml_str`], so presets and user files go through the same checks and a
//! preset's text is a starting point for a custom file ([`preset_toml`]). Figures the reports
//! give are used as given; where a report is silent (durations, worker counts) the choice is
//! stated in the preset's comment.

use crate::scenario::Scenario;

/// Name and TOML text of every built-in preset.
const PRESETS: &[(&str, &str)] = &[
    (
        "orchestrate-get-put-delete",
        r#"# Orchestrate report: 75 workers, get:put:delete 50:50:1, pareto over 1M pre-loaded keys
# of ~1 KB. The report gives no duration; 5 minutes after a 30 s pre-warm.
name = "orchestrate-get-put-delete"
mode = "max"
duration = "5m"
warmup = "30s"
concurrent = 75
driver = "orchestrate"
consistency = "default"
seed = 42

[key_generator]
kind = "pareto"
keys = 1_000_000

[value_generator]
kind = "fixed"
size = 1000

[operations]
get = 50
put = 50
delete = 1

[load]
keys = 1_000_000
"#,
    ),
    (
        "orchestrate-production-mix",
        r#"# Orchestrate report's production mix: 60 workers, get:put:delete:list:search
# 20:51:1:9:19, pareto over 1M keys of ~1 KB. The orchestrate driver lists ten documents
# from the key and searches one of 100 groups; the server reads the whole collection per
# search (no index), so scale with --keys on a small machine.
name = "orchestrate-production-mix"
mode = "max"
duration = "5m"
warmup = "30s"
concurrent = 60
driver = "orchestrate"
consistency = "default"
seed = 42

[key_generator]
kind = "pareto"
keys = 1_000_000

[value_generator]
kind = "fixed"
size = 1000

[operations]
get = 20
put = 51
delete = 1
list = 9
search = 19

[load]
keys = 1_000_000
"#,
    ),
    (
        "orchestrate-low-latency",
        r#"# Orchestrate report's low-load latency run: 10 workers, get:put 1:1. The report says
# values were "reduced" to "133KB" from ~1 KB; read as 133 bytes.
name = "orchestrate-low-latency"
mode = "max"
duration = "5m"
warmup = "30s"
concurrent = 10
driver = "orchestrate"
consistency = "default"
seed = 42

[key_generator]
kind = "pareto"
keys = 1_000_000

[value_generator]
kind = "fixed"
size = 133

[operations]
get = 1
put = 1

[load]
keys = 1_000_000
"#,
    ),
    (
        "riak-10-1",
        r#"# Riak report's basho_bench config: mode max, 120 s, 8 workers, uniform over 1M keys,
# exponential_bin 4098/50000 values, get:put 10:1 (docs/benchmarks.md's example).
name = "riak-10-1"
mode = "max"
duration = "120s"
warmup = "10s"
concurrent = 8
driver = "trireme"
consistency = "default"
seed = 42

[key_generator]
kind = "uniform"
keys = 1_000_000

[value_generator]
kind = "exponential"
min = 4098
mean = 50000

[operations]
get = 10
put = 1

[load]
keys = 1_000_000
"#,
    ),
    (
        "dynomite-80-20",
        r#"# Dynomite report: 80/20 read/write (Redis GET/SET, spoken over RESP), 1 KB values, 1M
# keys, uniform. "50/50 readers/writers" read as 100 connections; duration not given, 5
# minutes.
name = "dynomite-80-20"
mode = "max"
duration = "5m"
warmup = "30s"
concurrent = 100
driver = "resp"
consistency = "default"
seed = 42

[key_generator]
kind = "uniform"
keys = 1_000_000

[value_generator]
kind = "fixed"
size = 1024

[operations]
get = 80
put = 20

[load]
keys = 1_000_000
"#,
    ),
    (
        "aerospike-qualify",
        r#"# Aerospike cloud qualification: YCSB 50/50 read/update, uniform. Record count and
# duration depend on the instance; 1M keys of 1 KB for 10 minutes here; qualification
# searches the rate.
name = "aerospike-qualify"
mode = "max"
duration = "10m"
warmup = "30s"
concurrent = 32
driver = "trireme"
consistency = "default"
seed = 42

[key_generator]
kind = "uniform"
keys = 1_000_000

[value_generator]
kind = "fixed"
size = 1000

[operations]
get = 50
update = 50

[load]
keys = 1_000_000
"#,
    ),
    (
        "consul-put",
        r#"# Consul report's PUT test: 64 clients writing the 36-byte value to the single key
# `bench`. The report ran 262,144 requests (about 70 s); 60 s here.
name = "consul-put"
mode = "max"
duration = "60s"
warmup = "5s"
concurrent = 64
driver = "consul"
consistency = "default"
seed = 42

[key_generator]
kind = "uniform"
keys = 1

[value_generator]
kind = "fixed"
size = 36

[operations]
put = 1

[load]
keys = 1
"#,
    ),
    (
        "consul-get-default",
        r#"# Consul report's GET test, default consistency: 64 clients reading the single key
# `bench`. The report ran 262,144 requests (about 70 s); 60 s here.
name = "consul-get-default"
mode = "max"
duration = "60s"
warmup = "5s"
concurrent = 64
driver = "consul"
consistency = "default"
seed = 42

[key_generator]
kind = "uniform"
keys = 1

[value_generator]
kind = "fixed"
size = 36

[operations]
get = 1

[load]
keys = 1
"#,
    ),
    (
        "consul-get-stale",
        r#"# Consul report's GET ?stale test: 64 clients, stale reads of the single key `bench`. The
# report ran 262,144 requests (about 70 s); 60 s here.
name = "consul-get-stale"
mode = "max"
duration = "60s"
warmup = "5s"
concurrent = 64
driver = "consul"
consistency = "stale"
seed = 42

[key_generator]
kind = "uniform"
keys = 1

[value_generator]
kind = "fixed"
size = 36

[operations]
get = 1

[load]
keys = 1
"#,
    ),
    (
        "consul-get-consistent",
        r#"# Consul report's GET ?consistent test: 64 clients, linearizable reads of the single key
# `bench`. The report ran 262,144 requests (about 70 s); 60 s here.
name = "consul-get-consistent"
mode = "max"
duration = "60s"
warmup = "5s"
concurrent = 64
driver = "consul"
consistency = "consistent"
seed = 42

[key_generator]
kind = "uniform"
keys = 1

[value_generator]
kind = "fixed"
size = 36

[operations]
get = 1

[load]
keys = 1
"#,
    ),
    (
        "ycsb-a",
        r#"# YCSB workload A (update heavy): 50% read, 50% update, scrambled zipfian. 100k records of
# 1000 bytes (10 fields of 100 B), 16 workers, 2 minutes.
name = "ycsb-a"
mode = "max"
duration = "120s"
warmup = "10s"
concurrent = 16
driver = "trireme"
consistency = "default"
seed = 42

[key_generator]
kind = "zipfian"
keys = 100_000
theta = 0.99
scrambled = true

[value_generator]
kind = "fixed"
size = 1000

[operations]
get = 50
update = 50

[load]
keys = 100_000
"#,
    ),
    (
        "ycsb-b",
        r#"# YCSB workload B (read mostly): 95% read, 5% update, scrambled zipfian. 100k records of
# 1000 bytes (10 fields of 100 B), 16 workers, 2 minutes.
name = "ycsb-b"
mode = "max"
duration = "120s"
warmup = "10s"
concurrent = 16
driver = "trireme"
consistency = "default"
seed = 42

[key_generator]
kind = "zipfian"
keys = 100_000
theta = 0.99
scrambled = true

[value_generator]
kind = "fixed"
size = 1000

[operations]
get = 95
update = 5

[load]
keys = 100_000
"#,
    ),
    (
        "ycsb-c",
        r#"# YCSB workload C (read only): 100% read, scrambled zipfian. 100k records of 1000 bytes
# (10 fields of 100 B), 16 workers, 2 minutes.
name = "ycsb-c"
mode = "max"
duration = "120s"
warmup = "10s"
concurrent = 16
driver = "trireme"
consistency = "default"
seed = 42

[key_generator]
kind = "zipfian"
keys = 100_000
theta = 0.99
scrambled = true

[value_generator]
kind = "fixed"
size = 1000

[operations]
get = 100

[load]
keys = 100_000
"#,
    ),
    (
        "ycsb-d",
        r#"# YCSB workload D (read latest): 95% read, 5% insert (put of a new key), latest
# distribution. 100k records of 1000 bytes (10 fields of 100 B), 16 workers, 2 minutes.
name = "ycsb-d"
mode = "max"
duration = "120s"
warmup = "10s"
concurrent = 16
driver = "trireme"
consistency = "default"
seed = 42

[key_generator]
kind = "latest"
keys = 100_000

[value_generator]
kind = "fixed"
size = 1000

[operations]
get = 95
put = 5

[load]
keys = 100_000
"#,
    ),
    (
        "ycsb-e",
        r#"# YCSB workload E (short ranges): 95% scan (list), 5% insert (put), scrambled zipfian.
# 100k records of 1000 bytes (10 fields of 100 B), 16 workers, 2 minutes.
name = "ycsb-e"
mode = "max"
duration = "120s"
warmup = "10s"
concurrent = 16
driver = "trireme"
consistency = "default"
seed = 42

[key_generator]
kind = "zipfian"
keys = 100_000
theta = 0.99
scrambled = true

[value_generator]
kind = "fixed"
size = 1000

[operations]
list = 95
put = 5

[load]
keys = 100_000
"#,
    ),
    (
        "ycsb-f",
        r#"# YCSB workload F (read-modify-write): 50% read, 50% read-modify-write (cas), scrambled
# zipfian. 100k records of 1000 bytes (10 fields of 100 B), 16 workers, 2 minutes.
name = "ycsb-f"
mode = "max"
duration = "120s"
warmup = "10s"
concurrent = 16
driver = "trireme"
consistency = "default"
seed = 42

[key_generator]
kind = "zipfian"
keys = 100_000
theta = 0.99
scrambled = true

[value_generator]
kind = "fixed"
size = 1000

[operations]
get = 50
cas = 50

[load]
keys = 100_000
"#,
    ),
];

/// Names of the built-in presets, in a stable order.
const NAMES: &[&str] = &[
    "orchestrate-get-put-delete",
    "orchestrate-production-mix",
    "orchestrate-low-latency",
    "riak-10-1",
    "dynomite-80-20",
    "aerospike-qualify",
    "consul-put",
    "consul-get-default",
    "consul-get-stale",
    "consul-get-consistent",
    "ycsb-a",
    "ycsb-b",
    "ycsb-c",
    "ycsb-d",
    "ycsb-e",
    "ycsb-f",
];

/// Names of the built-in presets, in a stable order.
#[must_use]
pub fn preset_names() -> &'static [&'static str] {
    NAMES
}

/// The TOML text of preset `name`, for writing out as a starting scenario file.
#[must_use]
pub fn preset_toml(name: &str) -> Option<&'static str> {
    PRESETS
        .iter()
        .find(|(preset, _)| *preset == name)
        .map(|(_, text)| *text)
}

/// The parsed preset `name`, or `None` if there is no such preset.
#[must_use]
pub fn preset(name: &str) -> Option<Scenario> {
    // Every preset is checked to parse by the tests below.
    preset_toml(name).and_then(|text| Scenario::from_toml_str(text).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keygen::KeyGeneratorConfig;
    use crate::scenario::{Consistency, Driver, Mode, Operation};
    use crate::valuegen::ValueGeneratorConfig;
    use std::time::Duration;

    #[test]
    fn every_preset_parses_and_is_named_after_itself() {
        assert_eq!(preset_names().len(), PRESETS.len());
        for name in preset_names() {
            let text = preset_toml(name).unwrap();
            let scenario = Scenario::from_toml_str(text)
                .unwrap_or_else(|e| panic!("preset {name} does not parse: {e}"));
            assert_eq!(&scenario.name, name);
            assert_eq!(preset(name), Some(scenario));
        }
        assert!(preset("no-such-preset").is_none());
    }

    #[test]
    fn names_are_unique() {
        let mut names = preset_names().to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), PRESETS.len());
    }

    fn weights(name: &str) -> Vec<(Operation, u32)> {
        let s = preset(name).unwrap();
        Operation::ALL
            .into_iter()
            .map(|op| (op, s.operations.weight(op)))
            .filter(|&(_, w)| w > 0)
            .collect()
    }

    #[test]
    fn report_figures_are_kept() {
        use Operation::*;
        let s = preset("orchestrate-get-put-delete").unwrap();
        assert_eq!(s.concurrent, 75);
        assert_eq!(
            s.key_generator,
            KeyGeneratorConfig::Pareto { keys: 1_000_000 }
        );
        assert_eq!(
            s.value_generator,
            ValueGeneratorConfig::Fixed { size: 1000 }
        );
        assert_eq!(
            weights("orchestrate-get-put-delete"),
            vec![(Get, 50), (Put, 50), (Delete, 1)]
        );
        let s = preset("orchestrate-production-mix").unwrap();
        assert_eq!(s.concurrent, 60);
        assert_eq!(
            weights("orchestrate-production-mix"),
            vec![(Get, 20), (Put, 51), (Delete, 1), (List, 9), (Search, 19)]
        );
        assert_eq!(preset("orchestrate-low-latency").unwrap().concurrent, 10);
        for name in [
            "orchestrate-get-put-delete",
            "orchestrate-production-mix",
            "orchestrate-low-latency",
        ] {
            assert_eq!(preset(name).unwrap().driver, Driver::Orchestrate, "{name}");
        }

        let s = preset("riak-10-1").unwrap();
        assert_eq!((s.concurrent, s.mode), (8, Mode::Max));
        assert_eq!(s.duration, Duration::from_secs(120));
        assert_eq!(
            s.value_generator,
            ValueGeneratorConfig::Exponential {
                min: 4098,
                mean: 50_000
            }
        );
        assert_eq!(weights("riak-10-1"), vec![(Get, 10), (Put, 1)]);

        assert_eq!(weights("dynomite-80-20"), vec![(Get, 80), (Put, 20)]);
        assert_eq!(preset("dynomite-80-20").unwrap().driver, Driver::Resp);
        assert_eq!(weights("aerospike-qualify"), vec![(Get, 50), (Update, 50)]);

        for (name, consistency) in [
            ("consul-put", Consistency::Default),
            ("consul-get-default", Consistency::Default),
            ("consul-get-stale", Consistency::Stale),
            ("consul-get-consistent", Consistency::Consistent),
        ] {
            let s = preset(name).unwrap();
            assert_eq!(
                (s.concurrent, s.driver, s.consistency),
                (64, Driver::Consul, consistency)
            );
            assert_eq!(s.value_generator, ValueGeneratorConfig::Fixed { size: 36 });
        }
    }

    #[test]
    fn ycsb_workloads() {
        use Operation::*;
        assert_eq!(weights("ycsb-a"), vec![(Get, 50), (Update, 50)]);
        assert_eq!(weights("ycsb-b"), vec![(Get, 95), (Update, 5)]);
        assert_eq!(weights("ycsb-c"), vec![(Get, 100)]);
        assert_eq!(weights("ycsb-d"), vec![(Get, 95), (Put, 5)]);
        assert_eq!(weights("ycsb-e"), vec![(Put, 5), (List, 95)]);
        assert_eq!(weights("ycsb-f"), vec![(Get, 50), (Cas, 50)]);
        for name in ["ycsb-a", "ycsb-b", "ycsb-c", "ycsb-d", "ycsb-e", "ycsb-f"] {
            let s = preset(name).unwrap();
            assert_eq!(s.key_generator.keys(), 100_000, "{name}");
            assert_eq!(s.load.keys, Some(100_000), "{name}");
            let latest = matches!(s.key_generator, KeyGeneratorConfig::Latest { .. });
            assert_eq!(latest, name == "ycsb-d", "{name}");
        }
    }
}
