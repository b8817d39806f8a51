//! Built-in scenarios: one per report in `seeds/` and YCSB workloads A to F.
//!
//! Every preset is a scenario file in `crates/bench/presets/` (one TOML file per preset,
//! compiled in) parsed with [`Scenario::from_toml_str`], so presets and user files go
//! through the same checks and a preset's file is a starting point for a custom one (copy
//! it, or print it with [`preset_toml`]). Figures the reports
//! give are used as given; where a report is silent (durations, worker counts) the choice is
//! stated in the preset's comment.

use crate::scenario::Scenario;

/// Name and TOML text of every built-in preset.
const PRESETS: &[(&str, &str)] = &[
    (
        "orchestrate-get-put-delete",
        include_str!("../presets/orchestrate-get-put-delete.toml"),
    ),
    (
        "orchestrate-production-mix",
        include_str!("../presets/orchestrate-production-mix.toml"),
    ),
    (
        "orchestrate-low-latency",
        include_str!("../presets/orchestrate-low-latency.toml"),
    ),
    ("riak-10-1", include_str!("../presets/riak-10-1.toml")),
    (
        "dynomite-80-20",
        include_str!("../presets/dynomite-80-20.toml"),
    ),
    (
        "aerospike-qualify",
        include_str!("../presets/aerospike-qualify.toml"),
    ),
    ("consul-put", include_str!("../presets/consul-put.toml")),
    (
        "consul-get-default",
        include_str!("../presets/consul-get-default.toml"),
    ),
    (
        "consul-get-stale",
        include_str!("../presets/consul-get-stale.toml"),
    ),
    (
        "consul-get-consistent",
        include_str!("../presets/consul-get-consistent.toml"),
    ),
    ("ycsb-a", include_str!("../presets/ycsb-a.toml")),
    ("ycsb-b", include_str!("../presets/ycsb-b.toml")),
    ("ycsb-c", include_str!("../presets/ycsb-c.toml")),
    ("ycsb-d", include_str!("../presets/ycsb-d.toml")),
    ("ycsb-e", include_str!("../presets/ycsb-e.toml")),
    ("ycsb-f", include_str!("../presets/ycsb-f.toml")),
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
