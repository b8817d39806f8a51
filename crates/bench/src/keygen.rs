//! Key choice: which of the `keys` keys the next operation touches.
//!
//! A [`KeyGeneratorConfig`] is the `[key_generator]` table of a scenario; a [`KeyGenerator`]
//! built from it draws key indices from a caller-supplied seeded rng, so a run replays
//! exactly given its seed. Indices are turned into key strings with [`KeyGenerator::key`].
//!
//! The distributions follow basho_bench and YCSB:
//!
//! - `uniform`: every index in `0..keys` equally likely.
//! - `pareto`: basho_bench's `pareto_int`. A Lomax (Pareto type II) draw
//!   `x = floor(s * (u^(-1/a) - 1))` with shape `a = 1.5`, scale `s = m * (a - 1)` and mean
//!   `m = 0.2 * keys`, `u` uniform in `(0, 1]`. Its CDF is `1 - (1 + x/s)^-a`, so indices
//!   below `0.2 * keys` take `1 - 3^-1.5 = 80.8%` of draws. basho_bench lets draws run past
//!   `keys`; here a draw `>= keys` (2.7% of them) is redrawn, which lifts the share of the
//!   hottest 20% to about 83%. Hot keys are the low indices.
//! - `zipfian`: YCSB's `ZipfianGenerator` (Gray et al., "Quickly generating billion-record
//!   synthetic databases"), rank 0 the most popular, exponent `theta` (default 0.99).
//!   With `scrambled = true` it follows YCSB's `ScrambledZipfianGenerator`: the rank is
//!   hashed with 64-bit FNV-1a (over its 8 little-endian bytes) and reduced modulo `keys`,
//!   so popular keys are spread over the key space instead of sitting at indices 0, 1, 2…
//!   Unlike YCSB, which draws from a fixed space of 10^10 items before hashing, the Zipfian
//!   here is over `keys` items, so the skew is exactly that of a Zipfian over the key space
//!   (hash collisions may merge a few ranks, as in YCSB).
//! - `sequential`: 0, 1, 2, …, `keys - 1`, then wraps to 0.
//! - `latest`: YCSB's `SkewedLatestGenerator`: a Zipfian over the number of keys inserted so
//!   far, counted back from the newest, so the most recently inserted key is the hottest.
//!   The [`InsertCounter`] starts at `keys` (the pre-loaded keys) and grows with each
//!   [`KeyGenerator::next_insert_index`], so for this generator indices lie in
//!   `0..inserted` rather than `0..keys`.
//! - `hotspot`: YCSB's `HotspotIntegerGenerator`: the first `hot_fraction * keys` indices
//!   form the hot set and receive `hot_access_fraction` of draws, uniformly within the set;
//!   the rest go uniformly to the cold keys.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::BenchError;

/// The `[key_generator]` table of a scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum KeyGeneratorConfig {
    /// Every key equally likely.
    Uniform {
        /// Size of the key space.
        keys: u64,
    },
    /// basho_bench `pareto_int`: 20% of the keys take about 80% of the accesses.
    Pareto {
        /// Size of the key space.
        keys: u64,
    },
    /// YCSB Zipfian, optionally scrambled.
    Zipfian {
        /// Size of the key space.
        keys: u64,
        /// Zipfian exponent, strictly between 0 and 1 (YCSB's default is 0.99).
        #[serde(default = "default_theta")]
        theta: f64,
        /// Spread popular keys over the key space (YCSB `ScrambledZipfianGenerator`).
        #[serde(default)]
        scrambled: bool,
    },
    /// 0, 1, 2, … wrapping at `keys`.
    Sequential {
        /// Size of the key space.
        keys: u64,
    },
    /// YCSB `latest`: skewed toward the most recently inserted key.
    Latest {
        /// Number of keys present at the start (the insert counter's initial value).
        keys: u64,
    },
    /// YCSB hot-spot: a hot set of keys takes a fixed fraction of accesses.
    Hotspot {
        /// Size of the key space.
        keys: u64,
        /// Fraction of the key space (lowest indices) that forms the hot set, in `0..=1`.
        hot_fraction: f64,
        /// Fraction of draws that go to the hot set, in `0..=1`.
        hot_access_fraction: f64,
    },
}

fn default_theta() -> f64 {
    0.99
}

impl KeyGeneratorConfig {
    /// Size of the key space (for `latest`, the keys present at the start).
    #[must_use]
    pub fn keys(&self) -> u64 {
        match self {
            KeyGeneratorConfig::Uniform { keys }
            | KeyGeneratorConfig::Pareto { keys }
            | KeyGeneratorConfig::Zipfian { keys, .. }
            | KeyGeneratorConfig::Sequential { keys }
            | KeyGeneratorConfig::Latest { keys }
            | KeyGeneratorConfig::Hotspot { keys, .. } => *keys,
        }
    }

    /// Changes the size of the key space (`trireme bench --keys`, for small machines).
    pub fn set_keys(&mut self, count: u64) {
        match self {
            KeyGeneratorConfig::Uniform { keys }
            | KeyGeneratorConfig::Pareto { keys }
            | KeyGeneratorConfig::Zipfian { keys, .. }
            | KeyGeneratorConfig::Sequential { keys }
            | KeyGeneratorConfig::Latest { keys }
            | KeyGeneratorConfig::Hotspot { keys, .. } => *keys = count,
        }
    }

    /// Checks the parameters; errors name the offending `key_generator.*` field.
    pub fn validate(&self) -> Result<(), BenchError> {
        if self.keys() == 0 {
            return Err(BenchError::invalid(
                "key_generator.keys",
                "key_generator.keys must be at least 1",
            ));
        }
        match *self {
            KeyGeneratorConfig::Zipfian { theta, .. } if !(theta > 0.0 && theta < 1.0) => {
                Err(BenchError::invalid(
                    "key_generator.theta",
                    format!("key_generator.theta must be strictly between 0 and 1, got {theta}"),
                ))
            }
            KeyGeneratorConfig::Hotspot { hot_fraction, .. }
                if !(0.0..=1.0).contains(&hot_fraction) =>
            {
                Err(BenchError::invalid(
                    "key_generator.hot_fraction",
                    format!("key_generator.hot_fraction must be in 0..=1, got {hot_fraction}"),
                ))
            }
            KeyGeneratorConfig::Hotspot {
                hot_access_fraction,
                ..
            } if !(0.0..=1.0).contains(&hot_access_fraction) => Err(BenchError::invalid(
                "key_generator.hot_access_fraction",
                format!(
                    "key_generator.hot_access_fraction must be in 0..=1, got {hot_access_fraction}"
                ),
            )),
            _ => Ok(()),
        }
    }
}

/// Counts the keys inserted so far; shared by the workers of a run so `latest` follows
/// everyone's inserts. Cloning shares the same counter.
#[derive(Debug, Clone)]
pub struct InsertCounter(Arc<AtomicU64>);

impl InsertCounter {
    /// A counter that starts with `initial` keys already present.
    #[must_use]
    pub fn new(initial: u64) -> Self {
        InsertCounter(Arc::new(AtomicU64::new(initial)))
    }

    /// Number of keys inserted so far (including the initial ones).
    #[must_use]
    pub fn inserted(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    /// Claims the index of the next new key and counts it as inserted.
    pub fn next_insert(&self) -> u64 {
        self.0.fetch_add(1, Ordering::Relaxed)
    }
}

/// Draws key indices according to a [`KeyGeneratorConfig`].
#[derive(Debug, Clone)]
pub struct KeyGenerator {
    keys: u64,
    kind: Kind,
    inserts: InsertCounter,
}

#[derive(Debug, Clone)]
enum Kind {
    Uniform,
    Pareto { scale: f64 },
    Zipfian { zipf: Zipf, scrambled: bool },
    Sequential { next: u64 },
    Latest { zipf: Zipf },
    Hotspot { hot: u64, hot_access_fraction: f64 },
}

/// Pareto shape used by basho_bench's `pareto_int`.
const PARETO_SHAPE: f64 = 1.5;

impl KeyGenerator {
    /// Builds a generator with its own insert counter, starting at `keys`.
    pub fn new(config: &KeyGeneratorConfig) -> Result<Self, BenchError> {
        Self::with_insert_counter(config, InsertCounter::new(config.keys()))
    }

    /// Builds a generator that shares `inserts` with other workers (used by `latest`).
    pub fn with_insert_counter(
        config: &KeyGeneratorConfig,
        inserts: InsertCounter,
    ) -> Result<Self, BenchError> {
        config.validate()?;
        let keys = config.keys();
        let kind = match *config {
            KeyGeneratorConfig::Uniform { .. } => Kind::Uniform,
            KeyGeneratorConfig::Pareto { .. } => {
                let mean = 0.2 * keys as f64;
                Kind::Pareto {
                    scale: mean * (PARETO_SHAPE - 1.0),
                }
            }
            KeyGeneratorConfig::Zipfian {
                theta, scrambled, ..
            } => Kind::Zipfian {
                zipf: Zipf::new(keys, theta),
                scrambled,
            },
            KeyGeneratorConfig::Sequential { .. } => Kind::Sequential { next: 0 },
            KeyGeneratorConfig::Latest { .. } => Kind::Latest {
                zipf: Zipf::new(inserts.inserted().max(1), default_theta()),
            },
            KeyGeneratorConfig::Hotspot {
                hot_fraction,
                hot_access_fraction,
                ..
            } => {
                let hot = ((keys as f64 * hot_fraction).round() as u64).min(keys);
                Kind::Hotspot {
                    hot,
                    hot_access_fraction,
                }
            }
        };
        Ok(KeyGenerator {
            keys,
            kind,
            inserts,
        })
    }

    /// Size of the key space this generator was configured with.
    #[must_use]
    pub fn keys(&self) -> u64 {
        self.keys
    }

    /// The insert counter (shared with clones and with generators given the same counter).
    #[must_use]
    pub fn insert_counter(&self) -> &InsertCounter {
        &self.inserts
    }

    /// The index for an insert: a fresh key past every key inserted so far.
    pub fn next_insert_index(&self) -> u64 {
        self.inserts.next_insert()
    }

    /// Draws the next key index, in `0..keys` (for `latest`, in `0..inserted`).
    pub fn next_index<R: Rng + ?Sized>(&mut self, rng: &mut R) -> u64 {
        let keys = self.keys;
        match &mut self.kind {
            Kind::Uniform => rng.random_range(0..keys),
            Kind::Pareto { scale } => loop {
                // 1 - [0, 1) is (0, 1], so the power never sees zero.
                let u = 1.0 - rng.random::<f64>();
                let x = (*scale * (u.powf(-1.0 / PARETO_SHAPE) - 1.0)).floor();
                if x < keys as f64 {
                    break x as u64;
                }
            },
            Kind::Zipfian { zipf, scrambled } => {
                let rank = zipf.sample(rng);
                if *scrambled {
                    fnv1a64(rank) % keys
                } else {
                    rank
                }
            }
            Kind::Sequential { next } => {
                let index = *next;
                *next = (index + 1) % keys;
                index
            }
            Kind::Latest { zipf } => {
                let n = self.inserts.inserted().max(1);
                zipf.grow_to(n);
                let back = zipf.sample(rng).min(n - 1);
                n - 1 - back
            }
            Kind::Hotspot {
                hot,
                hot_access_fraction,
            } => {
                let hot = *hot;
                if hot == 0 || hot == keys {
                    rng.random_range(0..keys)
                } else if rng.random::<f64>() < *hot_access_fraction {
                    rng.random_range(0..hot)
                } else {
                    rng.random_range(hot..keys)
                }
            }
        }
    }

    /// The key string for `index`: `key:` followed by the index zero-padded to 12 digits
    /// (`key:000000000042`), so lexical order matches numeric order below 10^12 keys and
    /// list/scan operations see keys in index order.
    #[must_use]
    pub fn key(index: u64) -> String {
        format!("key:{index:012}")
    }
}

/// 64-bit FNV-1a over the little-endian bytes of `value` (YCSB's `fnvhash64`, without its
/// final sign fix-up, which does not apply to unsigned values).
fn fnv1a64(value: u64) -> u64 {
    const OFFSET: u64 = 0xCBF2_9CE4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01B3;
    value.to_le_bytes().iter().fold(OFFSET, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(PRIME)
    })
}

/// Ranks summed exactly when computing zeta; past this an integral approximation is used.
const ZETA_EXACT_LIMIT: u64 = 10_000_000;

/// YCSB's Zipfian sampler over ranks `0..n`.
#[derive(Debug, Clone)]
struct Zipf {
    n: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
    half_pow_theta: f64,
}

impl Zipf {
    fn new(n: u64, theta: f64) -> Self {
        let zetan = zeta(0, n, theta, 0.0);
        let mut zipf = Zipf {
            n,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            eta: 0.0,
            half_pow_theta: 0.5f64.powf(theta),
        };
        zipf.eta = zipf.eta_for();
        zipf
    }

    fn eta_for(&self) -> f64 {
        let zeta2 = 1.0 + self.half_pow_theta;
        (1.0 - (2.0 / self.n as f64).powf(1.0 - self.theta)) / (1.0 - zeta2 / self.zetan)
    }

    /// Extends the item count to `n` (never shrinks), updating zeta incrementally.
    fn grow_to(&mut self, n: u64) {
        if n > self.n {
            self.zetan = zeta(self.n, n, self.theta, self.zetan);
            self.n = n;
            self.eta = self.eta_for();
        }
    }

    fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        let u: f64 = rng.random();
        let uz = u * self.zetan;
        if uz < 1.0 || self.n == 1 {
            return 0;
        }
        if uz < 1.0 + self.half_pow_theta {
            return 1;
        }
        let rank = (self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        rank.min(self.n - 1)
    }
}

/// `sum_{i = from+1}^{to} i^-theta` added to `partial` (the sum up to `from`).
///
/// Terms up to [`ZETA_EXACT_LIMIT`] are summed; the remainder uses the Euler–Maclaurin
/// approximation `∫ x^-θ dx + (f(a) + f(b)) / 2`, accurate far beyond what sampling needs.
fn zeta(from: u64, to: u64, theta: f64, partial: f64) -> f64 {
    let mut sum = partial;
    let exact_end = to.min(ZETA_EXACT_LIMIT.max(from));
    for i in (from + 1)..=exact_end {
        sum += 1.0 / (i as f64).powf(theta);
    }
    if to > exact_end {
        let a = exact_end as f64;
        let b = to as f64;
        let f = |x: f64| x.powf(-theta);
        let integral = (b.powf(1.0 - theta) - a.powf(1.0 - theta)) / (1.0 - theta);
        sum += integral + (f(b) - f(a)) / 2.0;
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker_rng;

    const DRAWS: usize = 200_000;

    fn counts(config: &KeyGeneratorConfig, seed: u64) -> Vec<u64> {
        let mut generator = KeyGenerator::new(config).unwrap();
        let mut rng = worker_rng(seed, 0);
        let mut counts = vec![0u64; config.keys() as usize];
        for _ in 0..DRAWS {
            let index = generator.next_index(&mut rng);
            assert!(index < config.keys(), "index {index} out of range");
            counts[index as usize] += 1;
        }
        counts
    }

    fn sequence(config: &KeyGeneratorConfig, seed: u64, n: usize) -> Vec<u64> {
        let mut generator = KeyGenerator::new(config).unwrap();
        let mut rng = worker_rng(seed, 0);
        (0..n).map(|_| generator.next_index(&mut rng)).collect()
    }

    #[test]
    fn uniform_passes_chi_square() {
        let config = KeyGeneratorConfig::Uniform { keys: 100 };
        let counts = counts(&config, 1);
        let expected = DRAWS as f64 / 100.0;
        let chi2: f64 = counts
            .iter()
            .map(|&c| (c as f64 - expected).powi(2) / expected)
            .sum();
        // 99 degrees of freedom: mean 99, sd ~14; 160 is beyond the 99.99th percentile.
        assert!(chi2 < 160.0, "chi-square {chi2}");
        assert!(counts.iter().all(|&c| c > 0));
    }

    #[test]
    fn pareto_top_fifth_gets_about_eighty_percent() {
        let keys = 1_000_000;
        let config = KeyGeneratorConfig::Pareto { keys };
        let mut generator = KeyGenerator::new(&config).unwrap();
        let mut rng = worker_rng(3, 0);
        let mut hot = 0u64;
        for _ in 0..DRAWS {
            let index = generator.next_index(&mut rng);
            assert!(index < keys);
            if index < keys / 5 {
                hot += 1;
            }
        }
        let share = hot as f64 / DRAWS as f64;
        assert!((0.75..=0.85).contains(&share), "hot share {share}");
    }

    #[test]
    fn zipfian_is_skewed_and_rank_ordered() {
        let config = KeyGeneratorConfig::Zipfian {
            keys: 1000,
            theta: 0.99,
            scrambled: false,
        };
        let counts = counts(&config, 5);
        let uniform_share = DRAWS as u64 / 1000;
        assert!(counts[0] > 50 * uniform_share, "top count {}", counts[0]);
        for rank in 0..5 {
            assert!(counts[rank] > counts[rank + 1], "rank {rank}: {counts:?}");
        }
        // Ratio of rank 1 to rank 2 is 2^theta for a Zipfian.
        let ratio = counts[0] as f64 / counts[1] as f64;
        assert!((1.8..2.2).contains(&ratio), "ratio {ratio}");
        // Deciles of the rank space carry decreasing mass.
        let deciles: Vec<u64> = counts.chunks(100).map(|c| c.iter().sum()).collect();
        assert!(deciles.windows(2).all(|w| w[0] > w[1]), "{deciles:?}");
    }

    #[test]
    fn scrambled_zipfian_spreads_hot_keys() {
        let config = KeyGeneratorConfig::Zipfian {
            keys: 1000,
            theta: 0.99,
            scrambled: true,
        };
        let counts = counts(&config, 5);
        let mut by_count: Vec<(u64, usize)> =
            counts.iter().enumerate().map(|(i, &c)| (c, i)).collect();
        by_count.sort_unstable_by(|a, b| b.cmp(a));
        let uniform_share = DRAWS as u64 / 1000;
        assert!(by_count[0].0 > 50 * uniform_share);
        let mut top: Vec<usize> = by_count[..10].iter().map(|&(_, i)| i).collect();
        top.sort_unstable();
        let adjacent = top.windows(2).filter(|w| w[1] == w[0] + 1).count();
        assert!(adjacent < 3, "hot keys clustered: {top:?}");
        assert!(top[9] - top[0] > 100, "hot keys clustered: {top:?}");
        assert_eq!(by_count[0].1 as u64, fnv1a64(0) % 1000);
    }

    #[test]
    fn zeta_approximation_matches_exact_sum() {
        let exact = zeta(0, 2_000_000, 0.99, 0.0);
        let split = zeta(1_000_000, 2_000_000, 0.99, zeta(0, 1_000_000, 0.99, 0.0));
        assert!((exact - split).abs() < 1e-9);
        // Approximate tail against an exact sum over a short range past the limit.
        let a = ZETA_EXACT_LIMIT;
        let approx = zeta(a, a + 1000, 0.99, 0.0);
        let exact_tail: f64 = ((a + 1)..=(a + 1000)).map(|i| (i as f64).powf(-0.99)).sum();
        assert!((approx - exact_tail).abs() / exact_tail < 1e-6);
    }

    #[test]
    fn same_seed_same_sequence_different_seed_differs() {
        let configs = [
            KeyGeneratorConfig::Uniform { keys: 1_000_000 },
            KeyGeneratorConfig::Pareto { keys: 1_000_000 },
            KeyGeneratorConfig::Zipfian {
                keys: 10_000,
                theta: 0.99,
                scrambled: true,
            },
            KeyGeneratorConfig::Latest { keys: 10_000 },
            KeyGeneratorConfig::Hotspot {
                keys: 1_000_000,
                hot_fraction: 0.2,
                hot_access_fraction: 0.8,
            },
        ];
        for config in &configs {
            let a = sequence(config, 11, 200);
            assert_eq!(a, sequence(config, 11, 200), "{config:?}");
            assert_ne!(a, sequence(config, 12, 200), "{config:?}");
        }
    }

    #[test]
    fn sequential_wraps() {
        let config = KeyGeneratorConfig::Sequential { keys: 3 };
        assert_eq!(sequence(&config, 1, 7), vec![0, 1, 2, 0, 1, 2, 0]);
    }

    #[test]
    fn latest_favours_newest_insert() {
        let config = KeyGeneratorConfig::Latest { keys: 1000 };
        let mut generator = KeyGenerator::new(&config).unwrap();
        let mut rng = worker_rng(9, 0);
        let draw_mode = |generator: &mut KeyGenerator, rng: &mut crate::BenchRng| {
            let mut counts = std::collections::HashMap::new();
            for _ in 0..20_000 {
                let index = generator.next_index(rng);
                assert!(index < generator.insert_counter().inserted());
                *counts.entry(index).or_insert(0u64) += 1;
            }
            counts.into_iter().max_by_key(|&(_, c)| c).unwrap().0
        };
        assert_eq!(draw_mode(&mut generator, &mut rng), 999);
        // Another worker's inserts, through a shared counter, move the hot spot.
        let other =
            KeyGenerator::with_insert_counter(&config, generator.insert_counter().clone()).unwrap();
        assert_eq!(other.next_insert_index(), 1000);
        assert_eq!(other.next_insert_index(), 1001);
        assert_eq!(draw_mode(&mut generator, &mut rng), 1001);
    }

    #[test]
    fn hotspot_hits_hot_set_with_configured_fraction() {
        let keys = 10_000;
        let config = KeyGeneratorConfig::Hotspot {
            keys,
            hot_fraction: 0.1,
            hot_access_fraction: 0.9,
        };
        let counts = counts(&config, 4);
        let hot: u64 = counts[..1000].iter().sum();
        let share = hot as f64 / DRAWS as f64;
        assert!((share - 0.9).abs() < 0.02, "hot share {share}");
    }

    #[test]
    fn invalid_parameters_are_rejected_by_field() {
        let bad = [
            (
                KeyGeneratorConfig::Uniform { keys: 0 },
                "key_generator.keys",
            ),
            (
                KeyGeneratorConfig::Zipfian {
                    keys: 10,
                    theta: 1.0,
                    scrambled: false,
                },
                "key_generator.theta",
            ),
            (
                KeyGeneratorConfig::Hotspot {
                    keys: 10,
                    hot_fraction: 1.5,
                    hot_access_fraction: 0.5,
                },
                "key_generator.hot_fraction",
            ),
        ];
        for (config, field) in bad {
            let err = KeyGenerator::new(&config).unwrap_err();
            assert!(
                matches!(err, BenchError::Invalid { field: f, .. } if f == field),
                "{err}"
            );
            assert!(err.to_string().contains(field), "{err}");
        }
    }

    #[test]
    fn key_count_can_be_scaled() {
        let mut config = KeyGeneratorConfig::Zipfian {
            keys: 1_000_000,
            theta: 0.99,
            scrambled: false,
        };
        config.set_keys(1000);
        assert_eq!(config.keys(), 1000);
    }

    #[test]
    fn key_format_is_zero_padded() {
        assert_eq!(KeyGenerator::key(42), "key:000000000042");
        assert!(KeyGenerator::key(9) < KeyGenerator::key(10));
    }
}
