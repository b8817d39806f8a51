//! Text reports of a [`RunResult`].

use std::fmt::Write as _;

use crate::runner::RunResult;
use crate::stats::OpSummary;

/// Microseconds as milliseconds with three decimals, without going through floats.
fn ms(us: u64) -> String {
    format!("{}.{:03}", us / 1000, us % 1000)
}

fn row(out: &mut String, name: &str, s: &OpSummary) {
    // Writing to a String cannot fail.
    let _ = writeln!(
        out,
        "{name:<8} {:>10} {:>11.1} {:>10.3} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8}",
        s.count,
        s.ops_per_sec,
        s.mean_us / 1000.0,
        ms(s.p50_us),
        ms(s.p95_us),
        ms(s.p99_us),
        ms(s.p999_us),
        ms(s.max_us),
        s.errors,
    );
}

/// The seeds' latency table: one row per operation and a total row; latencies in
/// milliseconds with three decimals, throughput in operations per second.
#[must_use]
pub fn table(result: &RunResult) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<8} {:>10} {:>11} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8}",
        "op",
        "count",
        "ops/s",
        "mean ms",
        "median ms",
        "p95 ms",
        "p99 ms",
        "p99.9 ms",
        "max ms",
        "errors"
    );
    for (op, summary) in &result.per_op {
        row(&mut out, op.name(), summary);
    }
    row(&mut out, "total", &result.total);
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use super::*;
    use crate::scenario::Operation;

    fn summary(count: u64, base_us: u64, errors: u64) -> OpSummary {
        OpSummary {
            count,
            ops_per_sec: count as f64 / 2.0,
            mean_us: base_us as f64 * 1.25,
            p50_us: base_us,
            p95_us: base_us * 3,
            p99_us: base_us * 5,
            p999_us: base_us * 9,
            max_us: 1_234_567,
            errors,
        }
    }

    #[test]
    fn table_is_formatted_exactly() {
        let per_op: BTreeMap<Operation, OpSummary> = [
            (Operation::Put, summary(100, 2_001, 3)),
            (Operation::Get, summary(1000, 248, 0)),
        ]
        .into();
        let result = RunResult {
            scenario_name: "t".to_owned(),
            elapsed: Duration::from_secs(2),
            per_op,
            total: summary(1100, 400, 3),
            uncorrected: None,
            errors: [("io".to_owned(), 3)].into(),
            load: None,
        };
        let expected = "\
op            count       ops/s    mean ms  median ms     p95 ms     p99 ms   p99.9 ms     max ms   errors
get            1000       500.0      0.310      0.248      0.744      1.240      2.232   1234.567        0
put             100        50.0      2.501      2.001      6.003     10.005     18.009   1234.567        3
total          1100       550.0      0.500      0.400      1.200      2.000      3.600   1234.567        3
";
        assert_eq!(table(&result), expected);
    }
}
