//! Qualification, the Aerospike report's method: the highest offered rate a system sustains
//! while its read latency stays under a bound.
//!
//! A search offers increasing rates (geometric steps from a start rate) until a step fails,
//! then bisects between the last passing and the first failing rate. A step passes when its
//! read latency statistic (average by default, or p95/p99) is at most the bound, the achieved
//! throughput is at least [`PASS_THROUGHPUT`] of the offered rate and at most
//! [`MAX_ERROR_SHARE`] of the requests failed. The search itself is pure: [`Search`] says
//! which rate to measure next and takes each [`StepResult`] back, so it runs against a
//! synthetic system in tests and against a real one from the CLI alike.

use std::fmt::Write as _;

use serde::Serialize;

/// Share of the offered rate a step must achieve to pass.
pub const PASS_THROUGHPUT: f64 = 0.95;
/// Largest share of failed requests a passing step may have.
pub const MAX_ERROR_SHARE: f64 = 0.01;

/// Which read latency figure is held to the bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LatencyStat {
    /// The average (the Aerospike report's criterion).
    Avg,
    /// The 95th percentile.
    P95,
    /// The 99th percentile.
    P99,
}

impl LatencyStat {
    /// Parses `avg`, `p95` or `p99`.
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "avg" | "mean" => Some(LatencyStat::Avg),
            "p95" => Some(LatencyStat::P95),
            "p99" => Some(LatencyStat::P99),
            _ => None,
        }
    }

    /// The name used on the command line and in reports.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            LatencyStat::Avg => "avg",
            LatencyStat::P95 => "p95",
            LatencyStat::P99 => "p99",
        }
    }
}

/// What one step at a fixed offered rate measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepResult {
    /// Offered rate, operations per second (all workers together).
    pub offered: u64,
    /// Successful operations per second actually completed.
    pub achieved: f64,
    /// Average read latency in microseconds.
    pub read_avg_us: f64,
    /// 95th percentile read latency in microseconds.
    pub read_p95_us: u64,
    /// 99th percentile read latency in microseconds.
    pub read_p99_us: u64,
    /// Successful operations.
    pub ops: u64,
    /// Failed operations.
    pub errors: u64,
}

impl StepResult {
    /// The figure `stat` picks, in microseconds.
    #[must_use]
    pub fn latency_us(&self, stat: LatencyStat) -> f64 {
        match stat {
            LatencyStat::Avg => self.read_avg_us,
            LatencyStat::P95 => self.read_p95_us as f64,
            LatencyStat::P99 => self.read_p99_us as f64,
        }
    }
}

/// Why a step did not pass (the first reason that applies).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Failure {
    /// The latency statistic was above the bound.
    Latency,
    /// Achieved throughput below [`PASS_THROUGHPUT`] of the offered rate.
    Throughput,
    /// More than [`MAX_ERROR_SHARE`] of the requests failed.
    Errors,
}

/// Which part of the search a step belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Geometric stepping up from the start rate.
    Ramp,
    /// Bisection between the last pass and the first failure.
    Bisect,
}

/// A measured step and its verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Step {
    /// Ramp or bisection.
    pub phase: Phase,
    /// What was measured.
    pub result: StepResult,
    /// `None` when the step passed.
    pub failure: Option<Failure>,
}

impl Step {
    /// Whether the step passed.
    #[must_use]
    pub fn passed(&self) -> bool {
        self.failure.is_none()
    }
}

/// How a search runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchConfig {
    /// Bound on the read latency statistic, in microseconds.
    pub bound_us: f64,
    /// Which statistic is held to the bound.
    pub stat: LatencyStat,
    /// First offered rate.
    pub start_rate: u64,
    /// Highest rate ever offered.
    pub max_rate: u64,
    /// Factor between successive ramp steps (above 1).
    pub factor: f64,
    /// Most bisection steps after the ramp.
    pub bisect_steps: u32,
    /// Bisection stops once the failing rate is within this share above the passing one.
    pub tolerance: f64,
}

impl SearchConfig {
    /// A search for the Aerospike criterion (average read latency under `bound_us`), from
    /// `start_rate` up to `max_rate`, ×1.5 per ramp step, then at most 4 bisection steps.
    #[must_use]
    pub fn new(bound_us: f64, start_rate: u64, max_rate: u64) -> Self {
        SearchConfig {
            bound_us,
            stat: LatencyStat::Avg,
            start_rate: start_rate.max(1),
            max_rate: max_rate.max(start_rate.max(1)),
            factor: 1.5,
            bisect_steps: 4,
            tolerance: 0.02,
        }
    }

    /// The verdict on one step.
    #[must_use]
    pub fn judge(&self, result: &StepResult) -> Option<Failure> {
        let attempted = result.ops + result.errors;
        if attempted == 0 || result.latency_us(self.stat) > self.bound_us {
            Some(Failure::Latency)
        } else if result.achieved < PASS_THROUGHPUT * result.offered as f64 {
            Some(Failure::Throughput)
        } else if result.errors as f64 > MAX_ERROR_SHARE * attempted as f64 {
            Some(Failure::Errors)
        } else {
            None
        }
    }
}

/// The outcome of one search.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchOutcome {
    /// Every step, in the order measured.
    pub steps: Vec<Step>,
    /// The highest passing rate; `None` if even the start rate failed.
    pub passing_rate: Option<u64>,
    /// Whether the ramp reached `max_rate` and passed there (the real limit may be higher).
    pub capped: bool,
}

/// The search as a state machine: ask [`Search::next_rate`], measure it, hand the result to
/// [`Search::record`], until `next_rate` says `None`; then [`Search::finish`].
#[derive(Debug, Clone)]
pub struct Search {
    config: SearchConfig,
    steps: Vec<Step>,
    /// Highest passing rate so far.
    pass: Option<u64>,
    /// Lowest failing rate so far (ends the ramp).
    fail: Option<u64>,
    bisected: u32,
}

impl Search {
    /// A search with `config`.
    #[must_use]
    pub fn new(config: SearchConfig) -> Self {
        Search {
            config,
            steps: Vec::new(),
            pass: None,
            fail: None,
            bisected: 0,
        }
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &SearchConfig {
        &self.config
    }

    /// The rate to measure next, or `None` when the search is over.
    #[must_use]
    pub fn next_rate(&self) -> Option<u64> {
        let c = &self.config;
        match (self.pass, self.fail) {
            (None, None) => Some(c.start_rate),
            // The start rate failed: nothing lower is tried.
            (None, Some(_)) => None,
            (Some(pass), None) => {
                if pass >= c.max_rate {
                    return None;
                }
                let next = ((pass as f64 * c.factor).ceil() as u64).max(pass + 1);
                Some(next.min(c.max_rate))
            }
            (Some(pass), Some(fail)) => {
                let gap = fail.saturating_sub(pass);
                let close = gap as f64 <= c.tolerance * pass as f64 || gap <= 1;
                if self.bisected >= c.bisect_steps || close {
                    None
                } else {
                    Some(pass + gap / 2)
                }
            }
        }
    }

    /// Takes the result of measuring the rate [`Search::next_rate`] returned.
    pub fn record(&mut self, result: StepResult) -> &Step {
        let phase = if self.fail.is_some() {
            self.bisected += 1;
            Phase::Bisect
        } else {
            Phase::Ramp
        };
        let failure = self.config.judge(&result);
        let rate = result.offered;
        if failure.is_none() {
            self.pass = Some(self.pass.map_or(rate, |p| p.max(rate)));
        } else {
            self.fail = Some(self.fail.map_or(rate, |f| f.min(rate)));
        }
        self.steps.push(Step {
            phase,
            result,
            failure,
        });
        let last = self.steps.len() - 1;
        &self.steps[last]
    }

    /// The steps measured so far.
    #[must_use]
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// The outcome.
    #[must_use]
    pub fn finish(self) -> SearchOutcome {
        SearchOutcome {
            capped: self.fail.is_none() && self.pass == Some(self.config.max_rate),
            passing_rate: self.pass,
            steps: self.steps,
        }
    }
}

/// Runs a whole search with a synchronous `measure` (a synthetic system, or a caller that
/// blocks on a real one).
pub fn search<E>(
    config: SearchConfig,
    mut measure: impl FnMut(u64) -> Result<StepResult, E>,
) -> Result<SearchOutcome, E> {
    let mut search = Search::new(config);
    while let Some(rate) = search.next_rate() {
        let result = measure(rate)?;
        search.record(result);
    }
    Ok(search.finish())
}

/// The median of the repeated searches' passing rates, a search with none counting as the
/// lowest; with an even count, the lower of the two middle values (the conservative one).
#[must_use]
pub fn median_rate(rates: &[Option<u64>]) -> Option<u64> {
    if rates.is_empty() {
        return None;
    }
    let mut sorted = rates.to_vec();
    sorted.sort_unstable();
    sorted[(sorted.len() - 1) / 2]
}

/// Cost per million operations of a machine costing `cost_per_hour` that sustains `rate`
/// operations per second.
#[must_use]
pub fn cost_per_million(cost_per_hour: f64, rate: u64) -> Option<f64> {
    if rate == 0 {
        return None;
    }
    Some(cost_per_hour / (rate as f64 * 3600.0 / 1e6))
}

/// Every repeat of a qualification and what they add up to (`qualify.json`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QualifyReport {
    /// The scenario's name.
    pub scenario: String,
    /// How each search ran.
    pub config: SearchConfig,
    /// Measured length of each step, in seconds (warm-up excluded).
    pub step_seconds: f64,
    /// Each repeat's search.
    pub repeats: Vec<SearchOutcome>,
    /// Each repeat's passing rate.
    pub passing_rates: Vec<Option<u64>>,
    /// Their median ([`median_rate`]).
    pub median_rate: Option<u64>,
    /// Cost per hour of the system under test, if given.
    pub cost_per_hour: Option<f64>,
    /// Cost per million operations at the median rate.
    pub cost_per_million: Option<f64>,
}

impl QualifyReport {
    /// Gathers the repeats' outcomes.
    #[must_use]
    pub fn new(
        scenario: &str,
        config: SearchConfig,
        step_seconds: f64,
        repeats: Vec<SearchOutcome>,
        cost_per_hour: Option<f64>,
    ) -> Self {
        let passing_rates: Vec<Option<u64>> = repeats.iter().map(|r| r.passing_rate).collect();
        let median = median_rate(&passing_rates);
        QualifyReport {
            scenario: scenario.to_owned(),
            config,
            step_seconds,
            repeats,
            cost_per_million: cost_per_hour
                .zip(median)
                .and_then(|(c, r)| cost_per_million(c, r)),
            passing_rates,
            median_rate: median,
            cost_per_hour,
        }
    }

    /// One row of the step table.
    #[must_use]
    pub fn step_row(repeat: usize, index: usize, step: &Step) -> String {
        let r = &step.result;
        let verdict = match step.failure {
            None => "pass",
            Some(Failure::Latency) => "FAIL latency",
            Some(Failure::Throughput) => "FAIL throughput",
            Some(Failure::Errors) => "FAIL errors",
        };
        let phase = match step.phase {
            Phase::Ramp => "ramp",
            Phase::Bisect => "bisect",
        };
        format!(
            "{repeat:>6} {index:>4} {phase:<6} {:>10} {:>10.1} {:>9.3} {:>9.3} {:>9.3} {:>7}  {verdict}",
            r.offered,
            r.achieved,
            r.read_avg_us / 1000.0,
            r.read_p95_us as f64 / 1000.0,
            r.read_p99_us as f64 / 1000.0,
            r.errors,
        )
    }

    /// The header of the step table.
    #[must_use]
    pub fn step_header() -> String {
        format!(
            "{:>6} {:>4} {:<6} {:>10} {:>10} {:>9} {:>9} {:>9} {:>7}  {}",
            "repeat",
            "step",
            "phase",
            "offered",
            "achieved",
            "avg ms",
            "p95 ms",
            "p99 ms",
            "errors",
            "result"
        )
    }

    /// The text report: every step, each repeat's passing rate, the median and its cost.
    #[must_use]
    pub fn text(&self) -> String {
        let mut out = String::new();
        let c = &self.config;
        let _ = writeln!(
            out,
            "qualification of {}: read {} latency <= {:.3} ms, achieved >= {:.0}% of offered, \
             errors <= {:.0}%; {:.0} s steps",
            self.scenario,
            c.stat.name(),
            c.bound_us / 1000.0,
            PASS_THROUGHPUT * 100.0,
            MAX_ERROR_SHARE * 100.0,
            self.step_seconds,
        );
        let _ = writeln!(out, "{}", Self::step_header());
        for (i, outcome) in self.repeats.iter().enumerate() {
            for (j, step) in outcome.steps.iter().enumerate() {
                let _ = writeln!(out, "{}", Self::step_row(i + 1, j + 1, step));
            }
        }
        out.push('\n');
        for (i, outcome) in self.repeats.iter().enumerate() {
            let _ = match outcome.passing_rate {
                Some(rate) => writeln!(
                    out,
                    "repeat {}: passes at {rate} ops/s{}",
                    i + 1,
                    if outcome.capped {
                        " (the --max-rate; the limit may be higher)"
                    } else {
                        ""
                    }
                ),
                None => writeln!(
                    out,
                    "repeat {}: no passing rate (even {} ops/s failed; lower --start-rate)",
                    i + 1,
                    c.start_rate
                ),
            };
        }
        match self.median_rate {
            Some(rate) => {
                let _ = write!(
                    out,
                    "qualified: {rate} ops/s (median of {})",
                    self.repeats.len()
                );
                if let (Some(cost), Some(per_million)) = (self.cost_per_hour, self.cost_per_million)
                {
                    let _ = write!(
                        out,
                        "; ${per_million:.4} per million operations at ${cost}/hour"
                    );
                }
                out.push('\n');
            }
            None => out.push_str("qualified: no passing rate\n"),
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A system that serves up to `capacity` ops/s; read latency is 200 µs plus a queueing
    /// term that grows as the rate nears the capacity (M/M/1-like), and past the capacity it
    /// only achieves `capacity` and latency explodes.
    fn synthetic(capacity: f64) -> impl FnMut(u64) -> Result<StepResult, ()> {
        move |rate| {
            let load = rate as f64 / capacity;
            let (achieved, avg) = if load < 1.0 {
                (rate as f64, 200.0 / (1.0 - load))
            } else {
                (capacity, 1e6)
            };
            Ok(StepResult {
                offered: rate,
                achieved,
                read_avg_us: avg,
                read_p95_us: (avg * 3.0) as u64,
                read_p99_us: (avg * 5.0) as u64,
                ops: (achieved * 10.0) as u64,
                errors: 0,
            })
        }
    }

    #[test]
    fn finds_the_knee_within_tolerance() {
        // Average under 1 ms ⇔ 200/(1-load) ≤ 1000 ⇔ load ≤ 0.8: the knee is 8,000 ops/s.
        let config = SearchConfig::new(1000.0, 500, 1_000_000);
        let outcome = search(config, synthetic(10_000.0)).unwrap();
        let rate = outcome.passing_rate.expect("a passing rate");
        assert!(rate <= 8_000, "{rate} passes beyond the knee");
        assert!(rate >= 7_600, "{rate} is more than 5% below the knee");
        assert!(!outcome.capped);
        // Geometric ramp first, then bisection, and every step judged by the rule.
        assert_eq!(outcome.steps[0].result.offered, 500);
        assert_eq!(outcome.steps[1].result.offered, 750);
        assert!(outcome.steps.iter().any(|s| s.phase == Phase::Bisect));
        assert!(outcome.steps.len() < 20, "{} steps", outcome.steps.len());
        let best = outcome
            .steps
            .iter()
            .filter(|s| s.passed())
            .map(|s| s.result.offered);
        assert_eq!(best.max(), Some(rate));
    }

    #[test]
    fn p99_criterion_gives_a_lower_rate() {
        let mut config = SearchConfig::new(1000.0, 500, 1_000_000);
        config.stat = LatencyStat::P99;
        // p99 = 5 × avg ≤ 1000 ⇔ 200/(1-load) ≤ 200 ⇔ load = 0: nothing passes.
        let outcome = search(config.clone(), synthetic(10_000.0)).unwrap();
        assert_eq!(outcome.passing_rate, None);
        config.bound_us = 5000.0; // the same knee as the average under 1 ms
        let rate = search(config, synthetic(10_000.0))
            .unwrap()
            .passing_rate
            .unwrap();
        assert!((7_600..=8_000).contains(&rate), "{rate}");
    }

    #[test]
    fn a_system_that_never_passes_has_no_passing_rate() {
        let config = SearchConfig::new(100.0, 500, 100_000);
        let outcome = search(config, synthetic(10_000.0)).unwrap();
        assert_eq!(outcome.passing_rate, None);
        assert_eq!(
            outcome.steps.len(),
            1,
            "nothing below the start rate is tried"
        );
        assert_eq!(outcome.steps[0].failure, Some(Failure::Latency));
    }

    #[test]
    fn throughput_shortfall_and_errors_fail_a_step() {
        let config = SearchConfig::new(1000.0, 100, 1000);
        let ok = StepResult {
            offered: 1000,
            achieved: 960.0,
            read_avg_us: 500.0,
            read_p95_us: 900,
            read_p99_us: 2000,
            ops: 9600,
            errors: 0,
        };
        assert_eq!(config.judge(&ok), None);
        let slow = StepResult {
            achieved: 940.0,
            ..ok.clone()
        };
        assert_eq!(config.judge(&slow), Some(Failure::Throughput));
        let failing = StepResult {
            errors: 200,
            ..ok.clone()
        };
        assert_eq!(config.judge(&failing), Some(Failure::Errors));
        let empty = StepResult {
            ops: 0,
            read_avg_us: 0.0,
            ..ok
        };
        assert_eq!(config.judge(&empty), Some(Failure::Latency));
    }

    #[test]
    fn a_system_faster_than_max_rate_is_capped() {
        let config = SearchConfig::new(1000.0, 100, 1_000);
        let outcome = search(config, synthetic(1e9)).unwrap();
        assert_eq!(outcome.passing_rate, Some(1_000));
        assert!(outcome.capped);
        let offered: Vec<u64> = outcome.steps.iter().map(|s| s.result.offered).collect();
        assert_eq!(offered, vec![100, 150, 225, 338, 507, 761, 1000]);
    }

    #[test]
    fn a_measurement_error_stops_the_search() {
        let config = SearchConfig::new(1000.0, 100, 1_000);
        let mut calls = 0;
        let result = search(config, |_| {
            calls += 1;
            if calls == 3 {
                Err("down")
            } else {
                Ok(synthetic(1e9)(100).unwrap())
            }
        });
        assert_eq!(result.unwrap_err(), "down");
    }

    #[test]
    fn report_gathers_repeats_and_cost() {
        let run = |capacity: f64| {
            search(
                SearchConfig::new(1000.0, 500, 1_000_000),
                synthetic(capacity),
            )
            .unwrap()
        };
        let repeats = vec![run(10_000.0), run(9_000.0), run(11_000.0)];
        let middle = repeats[0].passing_rate;
        let report = QualifyReport::new(
            "t",
            SearchConfig::new(1000.0, 500, 1_000_000),
            10.0,
            repeats,
            Some(0.36),
        );
        assert_eq!(report.median_rate, middle);
        let rate = middle.unwrap();
        let cost = report.cost_per_million.unwrap();
        assert!((cost - 0.36 / (rate as f64 * 3600.0 / 1e6)).abs() < 1e-12);
        let text = report.text();
        assert!(
            text.contains(&format!("qualified: {rate} ops/s (median of 3)")),
            "{text}"
        );
        assert!(
            text.contains("per million operations at $0.36/hour"),
            "{text}"
        );
        assert!(text.contains("FAIL latency"), "{text}");
        let none = QualifyReport::new(
            "t",
            SearchConfig::new(1.0, 500, 1000),
            1.0,
            vec![run(10.0)],
            None,
        );
        assert_eq!(none.cost_per_million, None);
        assert!(none.text().contains("qualified: no passing rate"));
    }

    #[test]
    fn median_of_repeats() {
        assert_eq!(median_rate(&[Some(7), Some(9), Some(8)]), Some(8));
        assert_eq!(median_rate(&[Some(7), None, Some(8)]), Some(7));
        assert_eq!(median_rate(&[None, None, Some(8)]), None);
        assert_eq!(median_rate(&[Some(10), Some(4), Some(8), Some(6)]), Some(6));
        assert_eq!(median_rate(&[]), None);
    }

    #[test]
    fn cost_per_million_operations() {
        // The report's i3.xlarge: $0.312/hr at 68,000 ops/s.
        let cost = cost_per_million(0.312, 68_000).unwrap();
        assert!((cost - 0.312 / 244.8).abs() < 1e-12, "{cost}");
        assert!((cost_per_million(3.6, 1_000).unwrap() - 1.0).abs() < 1e-12);
        assert_eq!(cost_per_million(1.0, 0), None);
    }
}
