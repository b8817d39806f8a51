//! Value sizes and contents for writes.
//!
//! A [`ValueGeneratorConfig`] is the `[value_generator]` table of a scenario. The
//! [`ValueGenerator`] draws a size from it with the caller's seeded rng and fills the value
//! by copying from a block of pseudo-random bytes made once from a seed, at a random offset
//! (the way basho_bench slices its random source block): cheap per value, reproducible, and
//! not trivially compressible.

use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::BenchError;

/// Largest value the generator produces; exponential draws are clamped to it.
pub const MAX_VALUE_SIZE: u64 = 64 * 1024 * 1024;

/// Size of the random source block values are sliced from.
const SOURCE_BLOCK: usize = 1024 * 1024;

/// The `[value_generator]` table of a scenario. Sizes are in bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ValueGeneratorConfig {
    /// Every value is `size` bytes.
    Fixed {
        /// Value size in bytes.
        size: u64,
    },
    /// basho_bench `exponential_bin`: `min + floor(Exp(mean))` bytes.
    ///
    /// `mean` is the mean of the exponential part only and does **not** include `min`, as in
    /// basho_bench (`MinSize + trunc(exponential(1 / Mean))`): with the Riak report's
    /// `4098 / 50000` the average value is about 54 KB. Sizes are clamped to
    /// [`MAX_VALUE_SIZE`].
    Exponential {
        /// Smallest value size in bytes.
        min: u64,
        /// Mean of the exponential part added to `min`, in bytes.
        mean: u64,
    },
    /// Sizes uniform in `min..=max`.
    Uniform {
        /// Smallest size in bytes.
        min: u64,
        /// Largest size in bytes (inclusive).
        max: u64,
    },
}

impl ValueGeneratorConfig {
    /// Checks the parameters; errors name the offending `value_generator.*` field.
    pub fn validate(&self) -> Result<(), BenchError> {
        let too_big = |field: &'static str, value: u64| {
            BenchError::invalid(
                field,
                format!("{field} must be at most {MAX_VALUE_SIZE} bytes, got {value}"),
            )
        };
        match *self {
            ValueGeneratorConfig::Fixed { size } if size > MAX_VALUE_SIZE => {
                Err(too_big("value_generator.size", size))
            }
            ValueGeneratorConfig::Exponential { min, .. } if min > MAX_VALUE_SIZE => {
                Err(too_big("value_generator.min", min))
            }
            ValueGeneratorConfig::Uniform { max, .. } if max > MAX_VALUE_SIZE => {
                Err(too_big("value_generator.max", max))
            }
            ValueGeneratorConfig::Uniform { min, max } if min > max => Err(BenchError::invalid(
                "value_generator.min",
                format!("value_generator.min ({min}) must not exceed value_generator.max ({max})"),
            )),
            _ => Ok(()),
        }
    }
}

/// Produces values according to a [`ValueGeneratorConfig`].
#[derive(Debug, Clone)]
pub struct ValueGenerator {
    config: ValueGeneratorConfig,
    source: Vec<u8>,
}

impl ValueGenerator {
    /// Builds a generator whose source block is derived from `seed`.
    pub fn new(config: &ValueGeneratorConfig, seed: u64) -> Result<Self, BenchError> {
        config.validate()?;
        let mut source = vec![0u8; SOURCE_BLOCK];
        ChaCha8Rng::seed_from_u64(seed).fill_bytes(&mut source);
        Ok(ValueGenerator {
            config: config.clone(),
            source,
        })
    }

    /// Draws the size in bytes of the next value.
    pub fn next_size<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        match self.config {
            ValueGeneratorConfig::Fixed { size } => size,
            ValueGeneratorConfig::Exponential { min, mean } => {
                // Inverse CDF; 1 - [0, 1) is (0, 1], so ln never sees zero.
                let u = 1.0 - rng.random::<f64>();
                let extra = (-(mean as f64) * u.ln()).floor();
                let extra = if extra < MAX_VALUE_SIZE as f64 {
                    extra as u64
                } else {
                    MAX_VALUE_SIZE
                };
                min.saturating_add(extra).min(MAX_VALUE_SIZE)
            }
            ValueGeneratorConfig::Uniform { min, max } => rng.random_range(min..=max),
        }
    }

    /// Draws the next value: a size from the distribution, bytes from the source block.
    pub fn next_value<R: Rng + ?Sized>(&self, rng: &mut R) -> Vec<u8> {
        // Sizes are bounded by MAX_VALUE_SIZE, which fits in usize on every supported target.
        let size = usize::try_from(self.next_size(rng)).unwrap_or(usize::MAX);
        let mut offset = rng.random_range(0..self.source.len());
        let mut value = Vec::with_capacity(size);
        while value.len() < size {
            let take = (size - value.len()).min(self.source.len() - offset);
            value.extend_from_slice(&self.source[offset..offset + take]);
            offset = 0;
        }
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker_rng;

    const DRAWS: usize = 200_000;

    #[test]
    fn fixed_size_is_exact() {
        let generator =
            ValueGenerator::new(&ValueGeneratorConfig::Fixed { size: 1000 }, 1).unwrap();
        let mut rng = worker_rng(1, 0);
        for _ in 0..100 {
            assert_eq!(generator.next_value(&mut rng).len(), 1000);
        }
        let empty = ValueGenerator::new(&ValueGeneratorConfig::Fixed { size: 0 }, 1).unwrap();
        assert!(empty.next_value(&mut rng).is_empty());
    }

    #[test]
    fn exponential_mean_excludes_min_and_never_goes_below_it() {
        let (min, mean) = (4098u64, 50_000u64);
        let generator =
            ValueGenerator::new(&ValueGeneratorConfig::Exponential { min, mean }, 1).unwrap();
        let mut rng = worker_rng(2, 0);
        let mut total_extra = 0u64;
        for _ in 0..DRAWS {
            let size = generator.next_size(&mut rng);
            assert!(size >= min);
            total_extra += size - min;
        }
        let sample_mean = total_extra as f64 / DRAWS as f64;
        let error = (sample_mean - mean as f64).abs() / mean as f64;
        assert!(error < 0.03, "sample mean {sample_mean}");
    }

    #[test]
    fn uniform_sizes_cover_the_range() {
        let (min, max) = (100u64, 300u64);
        let generator =
            ValueGenerator::new(&ValueGeneratorConfig::Uniform { min, max }, 1).unwrap();
        let mut rng = worker_rng(3, 0);
        let sizes: Vec<u64> = (0..DRAWS).map(|_| generator.next_size(&mut rng)).collect();
        assert_eq!(*sizes.iter().min().unwrap(), min);
        assert_eq!(*sizes.iter().max().unwrap(), max);
        let sample_mean = sizes.iter().sum::<u64>() as f64 / DRAWS as f64;
        assert!((sample_mean - 200.0).abs() < 1.0, "mean {sample_mean}");
        let value = generator.next_value(&mut rng);
        assert!((100..=300).contains(&value.len()));
    }

    #[test]
    fn contents_are_reproducible_and_varied() {
        let config = ValueGeneratorConfig::Fixed {
            size: (SOURCE_BLOCK + 10) as u64,
        };
        let a = ValueGenerator::new(&config, 5).unwrap();
        let b = ValueGenerator::new(&config, 5).unwrap();
        let va = a.next_value(&mut worker_rng(1, 0));
        let vb = b.next_value(&mut worker_rng(1, 0));
        assert_eq!(va, vb);
        assert_eq!(va.len(), SOURCE_BLOCK + 10);
        let distinct: std::collections::HashSet<u8> = va[..4096].iter().copied().collect();
        assert!(distinct.len() > 200);
        let c = ValueGenerator::new(&config, 6).unwrap();
        assert_ne!(va, c.next_value(&mut worker_rng(1, 0)));
    }

    #[test]
    fn invalid_ranges_are_rejected() {
        let err =
            ValueGenerator::new(&ValueGeneratorConfig::Uniform { min: 5, max: 4 }, 1).unwrap_err();
        assert!(err.to_string().contains("value_generator.min"), "{err}");
        let err = ValueGenerator::new(
            &ValueGeneratorConfig::Fixed {
                size: MAX_VALUE_SIZE + 1,
            },
            1,
        )
        .unwrap_err();
        assert!(err.to_string().contains("value_generator.size"), "{err}");
    }
}
